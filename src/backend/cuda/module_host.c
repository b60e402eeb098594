/* module_host.c - the CUDA module's one exported name, dp_cuda_module_entry
 * (cuda_module.h), and the libdptrain functions its files call, each
 * forwarded to the table the host lent it. Built only into
 * libdptrain_cuda.so (hidden visibility: these definitions never interpose
 * on the host's own), which therefore links no libdptrain and works under
 * the static or the shared library alike.
 *
 * DESIGN. `host` is written once, by the entry point, which the registry
 * calls once under its pthread_once before any other call into the module;
 * every later read happens after that (the once gives the ordering).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend_cuda.h"
#include "cuda_module.h"

static const dp_cuda_host_t *host;

dp_status_t dp_fail(dp_status_t status, const char *fmt, ...) {
    char message[1024]; /* status.c's buffer */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return host->fail(status, "%s", message);
}

void dp_assert_failed(const char *cond, const char *file, int line) {
    host->assert_failed(cond, file, line);
    __builtin_unreachable(); /* the host's never returns */
}

void *dp_alloc_zeroed(size_t count, size_t size, const char *what) { return host->alloc_zeroed(count, size, what); }
void *dp_arena_alloc(dp_arena_t *arena, size_t bytes) { return host->arena_alloc(arena, bytes); }
float *dp_arena_floats(dp_arena_t *arena, size_t count) { return host->arena_floats(arena, count); }
void *dp_arena_host_alloc(dp_arena_t *arena, size_t bytes) { return host->arena_host_alloc(arena, bytes); }
int dp_conv_out_size(int in, int kernel, int stride, int pad, int dilation) {
    return host->conv_out_size(in, kernel, stride, pad, dilation);
}
dp_status_t dp_conv_shape(const dp_node_t *node, dp_conv_shape_t *s) { return host->conv_shape(node, s); }
dp_status_t dp_conv_transpose_shape(const dp_node_t *node, dp_conv_shape_t *s) {
    return host->conv_transpose_shape(node, s);
}
dp_status_t dp_norm_check(const dp_node_t *node, const char *op, int *N, int *C, size_t *S) {
    return host->norm_check(node, op, N, C, S);
}
dp_status_t dp_batch_norm_check(const dp_node_t *node, int *N, int *C, size_t *S) {
    return host->batch_norm_check(node, N, C, S);
}
dp_status_t dp_masked_check(const dp_node_t *node, const char *op) { return host->masked_check(node, op); }
dp_status_t dp_xent_check(const dp_node_t *node, int *N, int *K, double *D) { return host->xent_check(node, N, K, D); }
dp_status_t dp_mse_check(const dp_node_t *node, double *D) { return host->mse_check(node, D); }
dp_status_t dp_flatten_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_flatten_forward(dp_node_t *node, dp_arena_t *arena) { return host->flatten_forward(node, arena); }
dp_status_t dp_flatten_backward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_flatten_backward(dp_node_t *node, dp_arena_t *arena) { return host->flatten_backward(node, arena); }
double dp_float_decimal(float f) { return host->float_decimal(f); }
float *dp_grad_alloc(dp_arena_t *arena, dp_tensor_t *t, size_t count) { return host->grad_alloc(arena, t, count); }
int dp_grad_claim(dp_tensor_t *t) { return host->grad_claim(t); }
const dp_optim_config_t *dp_optimizer_config(const dp_optimizer_t *opt) { return host->optimizer_config(opt); }
dp_optim_kind_t dp_optimizer_kind(const dp_optimizer_t *opt) { return host->optimizer_kind(opt); }
size_t dp_optimizer_num_params(const dp_optimizer_t *opt) { return host->optimizer_num_params(opt); }
int dp_optimizer_num_states(const dp_optimizer_t *opt) { return host->optimizer_num_states(opt); }
float *dp_optimizer_state(dp_optimizer_t *opt, int i, const char **name) { return host->optimizer_state(opt, i, name); }
uint64_t dp_optimizer_steps(const dp_optimizer_t *opt) { return host->optimizer_steps(opt); }
size_t dp_optimizer_decay_run(const dp_optimizer_t *opt, size_t start, size_t count, dp_decay_group_t *group) {
    return host->optimizer_decay_run(opt, start, count, group);
}
float dp_optim_group_weight_decay(const dp_optim_config_t *config, dp_decay_group_t group) {
    return host->optim_group_weight_decay(config, group);
}
size_t dp_tensor_numel(const dp_tensor_t *t) { return host->tensor_numel(t); }
dp_tensor_t *dp_tensor_set_shape(dp_tensor_t *t, int ndim, const int *shape) {
    return host->tensor_set_shape(t, ndim, shape);
}
const char *dp_tensor_shape_str(const dp_tensor_t *t, char *buf, size_t size) {
    return host->tensor_shape_str(t, buf, size);
}

static const dp_cuda_module_t module = {
    .abi = DP_CUDA_MODULE_ABI,
    .size = sizeof(dp_cuda_module_t),
    .gpu_count = dp_cuda_gpu_count,
    .backend_open = dp_cuda_backend_open,
};

__attribute__((visibility("default"))) const dp_cuda_module_t *dp_cuda_module_entry(const dp_cuda_host_t *h,
                                                                                     char *error,
                                                                                     size_t error_size);

const dp_cuda_module_t *dp_cuda_module_entry(const dp_cuda_host_t *h, char *error, size_t error_size) {
    static const size_t layout[DP_CUDA_MODULE_LAYOUT_N] = DP_CUDA_MODULE_LAYOUT;
    if (!h || h->abi != DP_CUDA_MODULE_ABI || h->size != sizeof(dp_cuda_host_t)) {
        snprintf(error, error_size, "its interface is version %d, this dptrain's is %u (a module of another dptrain "
                 "build)", DP_CUDA_MODULE_ABI, h ? (unsigned)h->abi : 0u);
        return NULL;
    }
    if (memcmp(h->layout, layout, sizeof layout) != 0) {
        snprintf(error, error_size, "it was built against other dptrain headers (struct sizes differ; a module of "
                 "another dptrain build)");
        return NULL;
    }
    host = h;
    return &module;
}
