/* algo_choices.h - the cuDNN convolution algorithms of this process that a
 * checkpoint keeps (backend.h: conv_algorithms, conv_algorithms_install):
 * the algorithm each convolution and direction ran with (recorded by
 * conv_cuda.c the first time a plan's direction succeeds), and the choices
 * a resumed run installed from its checkpoint, which conv_cuda.c asks
 * first for every new plan, ahead of the DPTRAIN_CUDNN_ALGO modes and the
 * cache file (algo_cache.h). Keys are the cache file's. An installed
 * choice matches a key exactly, else a key of the same convolution and
 * direction on another GPU or cuDNN version (the part after
 * "GPU|cuDNN VERSION|"). Process-wide, thread-safe. Internal to the CUDA
 * module. */
#ifndef DPTRAIN_CUDA_ALGO_CHOICES_H
#define DPTRAIN_CUDA_ALGO_CHOICES_H

#include "dptrain/backend.h"

/* key's convolution ran with algo. */
void dp_algo_choice_ran(const char *key, int algo);
/* The installed algorithm for key (exact, else the same convolution and
 * direction); -1 when none, or when the one matching was refused. */
int dp_algo_choice_installed(const char *key);
/* The installed choice dp_algo_choice_installed(key) gave is refused on
 * device `device`: one warning line on stderr saying `why`; it is not
 * offered again. */
void dp_algo_choice_refused(const char *device, const char *key, int algo, const char *why);

#endif
