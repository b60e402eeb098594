/* cuda_module.h - the seam between libdptrain and the CUDA backend module
 * (libdptrain_cuda.so, dlopen'd by backend_registry.c on first need). Plain
 * C: backend_registry.c includes it without any CUDA header.
 *
 * The module links cudart, cuBLAS and cuDNN and nothing of libdptrain: the
 * few libdptrain functions its code calls (dp_fail, the tensor, arena and
 * optimizer accessors) reach it through a table the host hands to the one
 * exported entry point, DP_CUDA_MODULE_ENTRY (module_host.c forwards each
 * name to it). So the module works the same under a dptrain linked with the
 * static or the shared libdptrain, and libdptrain.so's exported names stay
 * the public headers'. Both sides are built from one tree; the ABI number
 * and the layout sizes below refuse a module from another build whose
 * structs differ, with one line.
 */
#ifndef DPTRAIN_CUDA_MODULE_H
#define DPTRAIN_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "../conv_shape.h"
#include "../op_checks.h"
#include "dptrain/backend.h"
#include "dptrain/tensor.h"

/* Bump on any change to the two tables below. */
#define DP_CUDA_MODULE_ABI 10
#define DP_CUDA_MODULE_ENTRY "dp_cuda_module_entry"
#define DP_CUDA_MODULE_FILE "libdptrain_cuda.so"

/* sizeof the structs both sides share, DP_OP_COUNT last: a module compiled
 * against other headers sees other numbers. */
#define DP_CUDA_MODULE_LAYOUT                                                                          \
    {sizeof(dp_backend_t), sizeof(dp_op_def_t), sizeof(dp_tensor_t), sizeof(dp_node_t),              \
     sizeof(dp_normalize_t), sizeof(dp_optim_config_t), sizeof(dp_conv_shape_t), (size_t)DP_OP_COUNT}
#define DP_CUDA_MODULE_LAYOUT_N 8

/* What the host lends the module: libdptrain's functions, by the names
 * of the public headers. */
typedef struct {
    uint32_t abi;  /* DP_CUDA_MODULE_ABI */
    uint32_t size; /* sizeof(dp_cuda_host_t) */
    size_t layout[DP_CUDA_MODULE_LAYOUT_N];
    dp_status_t (*fail)(dp_status_t status, const char *fmt, ...);
    void (*assert_failed)(const char *cond, const char *file, int line);
    void *(*alloc_zeroed)(size_t count, size_t size, const char *what);
    void *(*arena_alloc)(dp_arena_t *arena, size_t bytes);
    float *(*arena_floats)(dp_arena_t *arena, size_t count);
    void *(*arena_host_alloc)(dp_arena_t *arena, size_t bytes);
    int (*conv_out_size)(int in, int kernel, int stride, int pad, int dilation);
    dp_status_t (*conv_shape)(const dp_node_t *node, dp_conv_shape_t *s);
    dp_status_t (*conv_transpose_shape)(const dp_node_t *node, dp_conv_shape_t *s);
    dp_status_t (*norm_check)(const dp_node_t *node, const char *op, int *N, int *C, size_t *S);
    dp_status_t (*batch_norm_check)(const dp_node_t *node, int *N, int *C, size_t *S);
    dp_status_t (*masked_check)(const dp_node_t *node, const char *op);
    dp_status_t (*xent_check)(const dp_node_t *node, int *N, int *K, double *D);
    dp_status_t (*mse_check)(const dp_node_t *node, double *D);
    dp_status_t (*flatten_forward)(dp_node_t *node, dp_arena_t *arena);
    dp_status_t (*flatten_backward)(dp_node_t *node, dp_arena_t *arena);
    double (*float_decimal)(float f);
    float *(*grad_alloc)(dp_arena_t *arena, dp_tensor_t *t, size_t count);
    int (*grad_claim)(dp_tensor_t *t);
    const dp_optim_config_t *(*optimizer_config)(const dp_optimizer_t *opt);
    dp_optim_kind_t (*optimizer_kind)(const dp_optimizer_t *opt);
    size_t (*optimizer_num_params)(const dp_optimizer_t *opt);
    int (*optimizer_num_states)(const dp_optimizer_t *opt);
    float *(*optimizer_state)(dp_optimizer_t *opt, int i, const char **name);
    uint64_t (*optimizer_steps)(const dp_optimizer_t *opt);
    size_t (*optimizer_decay_run)(const dp_optimizer_t *opt, size_t start, size_t count, dp_decay_group_t *group);
    float (*optim_group_weight_decay)(const dp_optim_config_t *config, dp_decay_group_t group);
    size_t (*tensor_numel)(const dp_tensor_t *t);
    dp_tensor_t *(*tensor_set_shape)(dp_tensor_t *t, int ndim, const int *shape);
    const char *(*tensor_shape_str)(const dp_tensor_t *t, char *buf, size_t size);
} dp_cuda_host_t;

/* What the module gives back (static, valid until exit). */
typedef struct {
    uint32_t abi;  /* DP_CUDA_MODULE_ABI */
    uint32_t size; /* sizeof(dp_cuda_module_t) */
    /* GPUs the CUDA runtime sees; 0 with *why (static text) when none. */
    int (*gpu_count)(const char **why);
    /* backend_cuda.h's dp_cuda_backend_open. */
    dp_status_t (*backend_open)(int gpu, const dp_backend_t **out);
} dp_cuda_module_t;

/* The entry point's type: NULL with `error` (one line) when the host's
 * table does not fit this module (another ABI or layout). Called once. */
typedef const dp_cuda_module_t *(*dp_cuda_module_entry_fn)(const dp_cuda_host_t *host, char *error,
                                                           size_t error_size);

#endif
