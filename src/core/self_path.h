/* self_path.h - where the running copy of libdptrain is: the folder of
 * libdptrain.so, or of the program that linked libdptrain.a. The CUDA
 * module (backend_registry.c) and the installed model files (model_file.c)
 * are looked for next to it. Library internal.
 */
#ifndef DPTRAIN_SELF_PATH_H
#define DPTRAIN_SELF_PATH_H

#include <stddef.h>

/* The folder, symlinks resolved ("" if unknown; "/" for the root). */
void dp_self_dir(char *dir, size_t size);

#endif
