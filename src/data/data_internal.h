/* data_internal.h - what the data module's files share and nobody else
 * uses: the per-layout split loaders behind dp_dataset_load_with. */
#ifndef DPTRAIN_DATA_INTERNAL_H
#define DPTRAIN_DATA_INTERNAL_H

#include "dptrain/data.h"

/* CIFAR-10 binary: `test` 0 for data_batch_*.bin, 1 for test_batch.bin, in
 * `dir` (already resolved to the folder holding the files). */
dp_status_t dp_data_load_cifar(const char *dir, int test, dp_dataset_t *out);

/* ImageFolder: DIR/train or DIR/test, classes from DIR/train. */
dp_status_t dp_data_load_image_folder(const char *dir, int test,
                                      const dp_dataset_load_options_t *options, dp_dataset_t *out);

#endif
