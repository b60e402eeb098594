/* algo_cache.h - the file of cuDNN algorithm choices measured per
 * convolution shape (DPTRAIN_CUDNN_ALGO=measured, ops_cuda.c): one process-
 * wide table of KEY -> algorithm, read at its first use and written
 * atomically (a temporary file renamed over it) after each new choice, so
 * that later runs take the same algorithms, hence the same bits, without
 * timing them again. Internal to the CUDA module.
 *
 * Where: $DPTRAIN_CUDNN_ALGO_CACHE, else $XDG_CACHE_HOME/dptrain/cudnn-algos,
 * else $HOME/.cache/dptrain/cudnn-algos. Format: the line
 * "dptrain cuDNN algorithms 1", then one "KEY<tab>ALGO" line per choice
 * (KEY: the GPU's name, cuDNN's version, the convolution and the
 * direction; no tab or newline in it). A file that does not read so is
 * ignored with one warning line on stderr (and replaced at the next
 * choice); one that cannot be written leaves the choices in memory, also
 * with one warning line. Thread-safe. */
#ifndef DPTRAIN_CUDA_ALGO_CACHE_H
#define DPTRAIN_CUDA_ALGO_CACHE_H

/* The algorithm stored for key, -1 when none. */
int dp_algo_cache_get(const char *key);
/* Stores key -> algo and writes the file. */
void dp_algo_cache_put(const char *key, int algo);
/* The file's path ("" when there is none: no HOME). */
const char *dp_algo_cache_path(void);

#endif
