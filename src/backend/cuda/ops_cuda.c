/* ops_cuda.c - the op table of a CUDA device (ops.h semantics, on device
 * pointers): conv (1-D to 3-D) and conv_transpose (1-D to 3-D, as the
 * input gradient of the convolution it transposes) with cuDNN
 * (deterministic algorithms chosen once per shape by cuDNN's heuristics,
 * or measured, descriptors kept per shape; FMA math: no TF32), linear with cuBLAS
 * (pedantic FP32), ReLU, max and average pooling (1-D to 3-D), softmax
 * cross-entropy, sigmoid, tanh, add (+ fused ReLU), dropout (the CPU's
 * counter-based mask: the same elements dropped), global average pooling
 * and MSE with own kernels (kernels.cu); flatten is the CPU's (a view: no
 * data touched); batch norm with own kernels (double sums per channel spread
 * over the grid; SyncBatchNorm's statistics go through the host hook: a
 * download, the sum, an upload). Every op of the table is done.
 *
 * An op's grad of an input is written when still unset (dp_grad_claim) and
 * added to otherwise, as the CPU ops do. Labels (softmax_xent) are device
 * memory, as load_batch leaves them; a label outside [0, K) gives a NaN loss
 * (the host cannot check device labels without a synchronisation).
 *
 * Ops have no context argument, so each GPU gets its own table of small
 * wrappers (OP_WRAPPERS) that select its context, take its lock and report
 * a failure of any asynchronous work queued so far. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../conv_shape.h"
#include "algo_cache.h"
#include "cuda_context.h"
#include "cuda_parts.h"
#include "kernels.h"
#include "dptrain/ops.h"

/* The CPU's flatten: a view over x, no arithmetic (ops_elementwise.c). */
dp_status_t dp_flatten_forward(dp_node_t *node, dp_arena_t *arena);
dp_status_t dp_flatten_backward(dp_node_t *node, dp_arena_t *arena);

static const float one = 1.0f;

static dp_status_t cudnn_fail(dp_cuda_ctx_t *c, cudnnStatus_t s, const char *what) {
    return dp_fail(DP_ERR_ARG, "%s: %s: cuDNN: %s", c->name, what, cudnnGetErrorString(s));
}
#define CUDNN_TRY(c, call, what)                                                                                   \
    do {                                                                                                           \
        cudnnStatus_t s_ = (call);                                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                                          \
            status = cudnn_fail(c, s_, what);                                                                      \
            goto done;                                                                                             \
        }                                                                                                          \
    } while (0)

static dp_status_t launch(dp_cuda_ctx_t *c, cudaError_t err, const char *what) {
    return dp_cuda_check(c, err, what) ? dp_cuda_status(c) : DP_OK;
}

/* db (+)= the per-channel sums of dy (N, C, L) (kernels.cu's two passes, their
 * partials from the arena); with y, of dy masked by y > 0, written to masked. */
static dp_status_t bias_grad(dp_cuda_ctx_t *c, dp_arena_t *arena, const float *dy, const float *y, float *masked,
                             dp_tensor_t *b, int N, int C, size_t L, const char *what) {
    size_t count = dp_cuda_channel_partials(N, C, L);
    float *partials = dp_arena_floats(arena, count);
    if (!partials) return dp_fail(DP_ERR_NOMEM, "%s: out of GPU memory for %zu partial sums", what, count);
    int add = !dp_grad_claim(b);
    return launch(c, dp_cuda_bias_grad(c->stream, dy, y, masked, b->grad, N, C, L, add, partials), what);
}

/* Output data (and an unset grad when `want_grad`) of `numel` floats. */
static dp_status_t output(dp_node_t *node, const char *op, int ndim, const int *shape, int want_grad,
                          dp_arena_t *arena) {
    dp_tensor_set_shape(&node->out, ndim, shape);
    size_t numel = dp_tensor_numel(&node->out);
    node->out.data = dp_arena_floats(arena, numel);
    node->out.grad = want_grad ? dp_grad_alloc(arena, &node->out, numel) : NULL;
    node->saved = NULL;
    if (!node->out.data || (want_grad && !node->out.grad)) {
        char dims[96];
        return dp_fail(DP_ERR_NOMEM,
                       "%s: out of GPU memory for its output %s (%zu floats, %.1f MiB%s): use a smaller --batch-size, "
                       "or more devices",
                       op, dp_tensor_shape_str(&node->out, dims, sizeof dims), numel, numel * 4.0 / 1048576.0,
                       want_grad ? ", and as much for its gradient" : "");
    }
    return DP_OK;
}

/* cuDNN's workspace of at least `bytes`. */
static dp_status_t workspace(dp_cuda_ctx_t *c, size_t bytes) {
    if (bytes <= c->workspace_bytes) return DP_OK;
    dp_cuda_free_idle(c, c->workspace, "a cuDNN workspace"); /* after the work that used it */
    c->workspace = NULL;
    c->workspace_bytes = 0;
    cudaError_t err = dp_cuda_malloc(c, &c->workspace, bytes);
    if (err != cudaSuccess && err != cudaErrorMemoryAllocation) /* a fault the GPU keeps: the context's failure */
        return launch(c, err, "allocating a cuDNN workspace");
    if (err != cudaSuccess) return dp_cuda_out_of_memory(c, "a cuDNN workspace", bytes);
    c->workspace_bytes = bytes;
    return DP_OK;
}

/* --- conv and conv_transpose (1-D to 3-D) with cuDNN -------------------------------- *
 * A cuDNN convolution of x (N, C, in...) by w (K, C / groups, k...) into y
 * (N, K, out...). 2-D and 1-D run as 4-D NCHW tensors (1-D: H = 1 with a
 * kernel of 1, stride 1, pad 0, dilation 1 there), 3-D as 5-D NCDHW ones;
 * the Nd descriptors with packed strides for both.
 *
 * Plans. A convolution's descriptors and its algorithm for each direction
 * (forward, backward data, backward filter) are made once per shape and
 * kept in the GPU's context (c->conv_plans, under its lock): the key is the
 * op (conv or conv_transpose), --tf32 and the whole geometry. The
 * algorithms come from cuDNN's heuristics (cudnnGet*Algorithm_v7: no
 * timing, so the same GPU and cuDNN choose the same ones on every run, and
 * the same seed gives the same bits; cudnnFind* times them and could choose
 * differently between runs): the first result in cuDNN's order that
 * succeeded, is deterministic, has FMA math (also default or tensor-op
 * math with --tf32: TF32) and a workspace of at most CONV_WORKSPACE_LIMIT;
 * the fixed algorithm (CONV_*_ALGO) after them, or alone when none
 * qualifies or DPTRAIN_CUDNN_ALGO=fixed. DPTRAIN_CUDNN_ALGO=measured times
 * them instead (cudnnFind*Algorithm, once per shape and direction) and
 * takes the fastest result that qualifies, kept in a cache file keyed by
 * the GPU's name, cuDNN's version and the shape (algo_cache.h), so that
 * later runs take the same algorithm (the same bits) without timing it
 * again. Sizes are checked first: a tensor of 2^31 elements or more, which
 * cuDNN refuses, is one line saying what batch fits. A candidate whose
 * workspace query fails or whose call says CUDNN_STATUS_NOT_SUPPORTED is
 * passed over for good (the plan remembers) and the next one runs; none
 * left: one line naming the GPU and the convolution. At most CONV_PLAN_SLOTS plans per
 * GPU, the least recently used one destroyed for a new shape; contexts
 * live as long as the process (no teardown), and so do their plans. */

/* The fixed algorithms (DPTRAIN_CUDNN_ALGO=fixed, and the last candidate of
 * every heuristic list): deterministic (cuDNN documents these as
 * reproducible, for 4-D and 5-D tensors alike). */
#define CONV_FWD_ALGO CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
#define CONV_BWD_DATA_ALGO CUDNN_CONVOLUTION_BWD_DATA_ALGO_1
#define CONV_BWD_FILTER_ALGO CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1

/* The largest workspace a heuristic candidate may ask for: fixed (the free
 * memory of the moment would make the choice, hence the bits, vary between
 * runs), and one buffer per GPU grown to the largest need, so at most this
 * much beside the model: 256 MiB is 1.6% of a 16 GiB GPU, and lets the
 * GEMM, FFT and Winograd variants of ResNet-18's layers at batch 256 in. */
#define CONV_WORKSPACE_LIMIT ((size_t)256 << 20)
/* Plans per GPU: a shape per layer and batch size (training, its last
 * short batch, evaluation, uneven shards of devices sharing the GPU):
 * ResNet-18 has 11 convolution shapes per batch size. */
#define CONV_PLAN_SLOTS 128
/* Heuristic results asked for: every algorithm of a direction, twice (cuDNN
 * may list an algorithm once per math type). */
#define CONV_HEURISTIC_MAX (2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
_Static_assert((int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT >= (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT &&
                   (int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT >= (int)CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
               "ops_cuda.c: CONV_HEURISTIC_MAX covers every direction");

typedef enum { CONV_FORWARD, CONV_BACKWARD_DATA, CONV_BACKWARD_FILTER, CONV_DIRECTIONS } conv_dir_t;
typedef enum { PLAN_CONV, PLAN_CONV_TRANSPOSE } plan_op_t;

static const int fixed_algo[CONV_DIRECTIONS] = {CONV_FWD_ALGO, CONV_BWD_DATA_ALGO, CONV_BWD_FILTER_ALGO};

/* A convolution's geometry: all its descriptors hold. Only ints: a plan's
 * key is compared byte for byte. */
typedef struct {
    int nb;                  /* tensor dims: 4 (1-D, 2-D) or 5 (3-D) */
    int N, C, K, groups;     /* the convolution's input and output channels */
    int in[3], out[3], k[3]; /* (D, H, W) of x, y and the filter; D = 1 (and H = 1 for 1-D) when nb = 4 */
    int pad[3], stride[3], dilation[3];
} conv_geom_t;

typedef struct {
    int op;   /* plan_op_t */
    int tf32; /* the descriptor's math type: FMA, or default with --tf32 */
    conv_geom_t g;
} plan_key_t;

/* A direction's candidates in order; algo[next] is the one that runs,
 * those before it were refused. */
typedef struct {
    int listed; /* 0: not asked for yet */
    int count, next;
    int algo[CONV_HEURISTIC_MAX + 1];
} plan_algos_t;

typedef struct {
    int used;
    uint64_t last_use;
    plan_key_t key;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    plan_algos_t algos[CONV_DIRECTIONS];
} conv_plan_t;

typedef enum { ALGO_HEURISTIC, ALGO_FIXED, ALGO_MEASURED } algo_mode_t;

struct dp_cuda_conv_plans {
    int mode;      /* DPTRAIN_CUDNN_ALGO: algo_mode_t, heuristic by default */
    char gpu[192]; /* measured: "GPU name|cuDNN version", the first part of a cached choice's key */
    int log;       /* DPTRAIN_CUDNN_ALGO_LOG set (not 0): a stderr line per choice */
    uint64_t uses;
    conv_plan_t plan[CONV_PLAN_SLOTS];
};

static void plan_destroy(conv_plan_t *p) {
    if (p->x) cudnnDestroyTensorDescriptor(p->x);
    if (p->y) cudnnDestroyTensorDescriptor(p->y);
    if (p->w) cudnnDestroyFilterDescriptor(p->w);
    if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
    *p = (conv_plan_t){0};
}

/* An NC(D)HW float tensor descriptor of g->nb dims, packed. */
static cudnnStatus_t set_tensor(const conv_geom_t *g, cudnnTensorDescriptor_t t, int channels, const int size[3]) {
    int dims[5] = {g->N, channels}, strides[5];
    for (int i = 0; i < g->nb - 2; i++) dims[2 + i] = size[3 - (g->nb - 2) + i];
    strides[g->nb - 1] = 1;
    for (int i = g->nb - 2; i >= 0; i--) strides[i] = strides[i + 1] * dims[i + 1];
    return cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, g->nb, dims, strides);
}

/* The descriptors of p's key (p's descriptors unset). */
static dp_status_t plan_descriptors(dp_cuda_ctx_t *c, conv_plan_t *p, const char *op) {
    dp_status_t status = DP_OK;
    const conv_geom_t *g = &p->key.g;
    int fdims[5] = {g->K, g->C / g->groups}, pad[3], stride[3], dilation[3];
    const int first = 3 - (g->nb - 2); /* the first of (D, H, W) the descriptors hold */
    for (int i = 0; i < g->nb - 2; i++) {
        fdims[2 + i] = g->k[first + i];
        pad[i] = g->pad[first + i], stride[i] = g->stride[first + i], dilation[i] = g->dilation[first + i];
    }
    CUDNN_TRY(c, cudnnCreateTensorDescriptor(&p->x), op);
    CUDNN_TRY(c, cudnnCreateTensorDescriptor(&p->y), op);
    CUDNN_TRY(c, cudnnCreateFilterDescriptor(&p->w), op);
    CUDNN_TRY(c, cudnnCreateConvolutionDescriptor(&p->conv), op);
    CUDNN_TRY(c, set_tensor(g, p->x, g->C, g->in), op);
    CUDNN_TRY(c, set_tensor(g, p->y, g->K, g->out), op);
    CUDNN_TRY(c, cudnnSetFilterNdDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, g->nb, fdims), op);
    CUDNN_TRY(c, cudnnSetConvolutionNdDescriptor(p->conv, g->nb - 2, pad, stride, dilation, CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT),
              op);
    CUDNN_TRY(c, cudnnSetConvolutionGroupCount(p->conv, g->groups), op);
    /* FMA only: no TF32, unless --tf32 (the default math type allows it) */
    CUDNN_TRY(c, cudnnSetConvolutionMathType(p->conv, p->key.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH), op);
done:
    if (status != DP_OK) plan_destroy(p);
    return status;
}

static const char *geom_str(const conv_geom_t *g, char *buf, size_t size);

/* cuDNN refuses a tensor of 2^31 elements or more (CUDNN_STATUS_NOT_SUPPORTED
 * from the descriptor setters): g's input, output and filter are checked
 * first, and one too large is one line naming the GPU, the convolution and
 * the batch that would fit (per device: the GPU's shard of --batch-size). */
#define CUDNN_MAX_ELEMENTS ((int64_t)1 << 31)
static dp_status_t check_cudnn_limit(dp_cuda_ctx_t *c, plan_op_t op, const conv_geom_t *g) {
    const int64_t filter = (int64_t)g->K * (g->C / g->groups) * g->k[0] * g->k[1] * g->k[2];
    const int64_t per_x = (int64_t)g->C * g->in[0] * g->in[1] * g->in[2];
    const int64_t per_y = (int64_t)g->K * g->out[0] * g->out[1] * g->out[2];
    const int64_t per_image = per_x > per_y ? per_x : per_y;
    if (filter < CUDNN_MAX_ELEMENTS && g->N * per_image < CUDNN_MAX_ELEMENTS) return DP_OK;
    char gs[192], fix[128];
    const int64_t fits = (CUDNN_MAX_ELEMENTS - 1) / per_image;
    if (filter >= CUDNN_MAX_ELEMENTS || fits < 1)
        snprintf(fix, sizeof fix, "not even one image fits: a smaller layer");
    else
        snprintf(fix, sizeof fix, "use a smaller --batch-size (at most %lld images per device), or more devices",
                 (long long)fits);
    (void)c; /* the GPU and the layer: named by the caller (the model's layer line, the device) */
    return dp_fail(DP_ERR_ARG, "%s of %s: its %s holds %lld elements, past cuDNN's limit of 2^31 - 1 per tensor: %s",
                   op == PLAN_CONV ? "conv" : "conv_transpose", geom_str(g, gs, sizeof gs),
                   filter >= CUDNN_MAX_ELEMENTS ? "filter" : per_x >= per_y ? "input" : "output",
                   (long long)(filter >= CUDNN_MAX_ELEMENTS ? filter : g->N * per_image), fix);
}

/* The plan of (op, --tf32, g): found, or made in a free slot or in place of
 * the least recently used one. The first convolution of a GPU reads
 * DPTRAIN_CUDNN_ALGO. */
static dp_status_t conv_plan(dp_cuda_ctx_t *c, plan_op_t op, const conv_geom_t *g, conv_plan_t **out) {
    *out = NULL;
    if (!c->conv_plans) {
        const char *mode = getenv("DPTRAIN_CUDNN_ALGO");
        int m = !mode || !*mode || strcmp(mode, "heuristic") == 0 ? ALGO_HEURISTIC
                : strcmp(mode, "fixed") == 0                       ? ALGO_FIXED
                : strcmp(mode, "measured") == 0                    ? ALGO_MEASURED
                                                                   : -1;
        if (m < 0)
            return dp_fail(DP_ERR_ARG, "DPTRAIN_CUDNN_ALGO must be heuristic (the default), measured or fixed, found '%s'",
                           mode);
        if (!(c->conv_plans = dp_alloc_zeroed(1, sizeof *c->conv_plans, "cuDNN convolution plans"))) return DP_ERR_NOMEM;
        c->conv_plans->mode = m;
        struct cudaDeviceProp prop;
        if (m == ALGO_MEASURED && cudaGetDeviceProperties(&prop, c->gpu) != cudaSuccess) {
            cudaGetLastError();
            snprintf(prop.name, sizeof prop.name, "unnamed GPU");
        }
        if (m == ALGO_MEASURED)
            snprintf(c->conv_plans->gpu, sizeof c->conv_plans->gpu, "%.160s|cuDNN %zu", prop.name, cudnnGetVersion());
        const char *log = getenv("DPTRAIN_CUDNN_ALGO_LOG");
        c->conv_plans->log = log && *log && strcmp(log, "0") != 0;
    }
    struct dp_cuda_conv_plans *plans = c->conv_plans;
    plan_key_t key;
    memset(&key, 0, sizeof key);
    key.op = op, key.tf32 = c->tf32 != 0, key.g = *g;
    conv_plan_t *slot = &plans->plan[0];
    for (int i = 0; i < CONV_PLAN_SLOTS; i++) {
        conv_plan_t *p = &plans->plan[i];
        if (p->used && memcmp(&p->key, &key, sizeof key) == 0) {
            p->last_use = ++plans->uses;
            *out = p;
            return DP_OK;
        }
        if (slot->used && (!p->used || p->last_use < slot->last_use)) slot = p; /* a free slot, else the oldest */
    }
    DP_TRY(check_cudnn_limit(c, op, g));
    plan_destroy(slot);
    slot->key = key;
    DP_TRY(plan_descriptors(c, slot, op == PLAN_CONV ? "conv descriptors" : "conv_transpose descriptors"));
    slot->used = 1;
    slot->last_use = ++plans->uses;
    *out = slot;
    return DP_OK;
}

/* One heuristic result, whichever direction's struct it came in. */
typedef struct {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t math;
    float time; /* ms, measured; -1 from the heuristics */
} algo_perf_t;
#define ALGO_PERF(r) ((algo_perf_t){(int)(r).algo, (r).status, (r).memory, (r).determinism, (r).mathType, (r).time})

/* cuDNN's results for direction dir of p: its heuristics' (best first), or with `measured` its
 * cudnnFind*Algorithm's (each algorithm run once and timed, fastest first). */
static cudnnStatus_t algo_results(dp_cuda_ctx_t *c, const conv_plan_t *p, conv_dir_t dir, int measured,
                                  algo_perf_t perf[CONV_HEURISTIC_MAX], int *n) {
    cudnnStatus_t s = CUDNN_STATUS_BAD_PARAM;
    *n = 0;
    if (dir == CONV_FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t r[CONV_HEURISTIC_MAX];
        s = measured ? cudnnFindConvolutionForwardAlgorithm(c->cudnn, p->x, p->w, p->conv, p->y, CONV_HEURISTIC_MAX, n, r)
                     : cudnnGetConvolutionForwardAlgorithm_v7(c->cudnn, p->x, p->w, p->conv, p->y, CONV_HEURISTIC_MAX, n, r);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < *n && i < CONV_HEURISTIC_MAX; i++) perf[i] = ALGO_PERF(r[i]);
    } else if (dir == CONV_BACKWARD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CONV_HEURISTIC_MAX];
        s = measured
                ? cudnnFindConvolutionBackwardDataAlgorithm(c->cudnn, p->w, p->y, p->conv, p->x, CONV_HEURISTIC_MAX, n, r)
                : cudnnGetConvolutionBackwardDataAlgorithm_v7(c->cudnn, p->w, p->y, p->conv, p->x, CONV_HEURISTIC_MAX, n, r);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < *n && i < CONV_HEURISTIC_MAX; i++) perf[i] = ALGO_PERF(r[i]);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CONV_HEURISTIC_MAX];
        s = measured ? cudnnFindConvolutionBackwardFilterAlgorithm(c->cudnn, p->x, p->y, p->conv, p->w,
                                                                    CONV_HEURISTIC_MAX, n, r)
                     : cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->cudnn, p->x, p->y, p->conv, p->w,
                                                                     CONV_HEURISTIC_MAX, n, r);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < *n && i < CONV_HEURISTIC_MAX; i++) perf[i] = ALGO_PERF(r[i]);
    }
    if (s != CUDNN_STATUS_SUCCESS || *n < 0) *n = 0;
    if (*n > CONV_HEURISTIC_MAX) *n = CONV_HEURISTIC_MAX;
    return s;
}

/* A result dptrain may run: it succeeded, is deterministic, keeps FP32
 * (FMA; TF32 only with --tf32) and fits the workspace limit. */
static int qualifies(const conv_plan_t *p, const algo_perf_t *r) {
    if (r->status != CUDNN_STATUS_SUCCESS || r->determinism != CUDNN_DETERMINISTIC || r->memory > CONV_WORKSPACE_LIMIT)
        return 0;
    return r->math == CUDNN_FMA_MATH ||
           (p->key.tf32 && (r->math == CUDNN_DEFAULT_MATH || r->math == CUDNN_TENSOR_OP_MATH));
}

static void add_candidate(plan_algos_t *a, int algo) {
    for (int i = 0; i < a->count; i++)
        if (a->algo[i] == algo) return;
    a->algo[a->count++] = algo;
}

/* "AxBxC" of n ints into buf. */
static const char *dims_str(const int *v, int n, char *buf, size_t size) {
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at < size; i++) at += (size_t)snprintf(buf + at, size - at, i ? "x%d" : "%d", v[i]);
    return buf;
}

/* "x NxCxHxW by w KxCgxkhxkw (pad, stride, dilation, groups)" of a geometry. */
static const char *geom_str(const conv_geom_t *g, char *buf, size_t size) {
    const int first = 3 - (g->nb - 2), spatial = g->nb - 2;
    int xd[5] = {g->N, g->C}, wd[5] = {g->K, g->C / g->groups};
    for (int i = 0; i < spatial; i++) xd[2 + i] = g->in[first + i], wd[2 + i] = g->k[first + i];
    char xs[64], ws[64], ps[32], ss[32], ds[32];
    snprintf(buf, size, "x %s by w %s (pad %s, stride %s, dilation %s, groups %d)", dims_str(xd, g->nb, xs, sizeof xs),
             dims_str(wd, g->nb, ws, sizeof ws), dims_str(g->pad + first, spatial, ps, sizeof ps),
             dims_str(g->stride + first, spatial, ss, sizeof ss), dims_str(g->dilation + first, spatial, ds, sizeof ds),
             g->groups);
    return buf;
}
static const char *conv_str(const conv_plan_t *p, char *buf, size_t size) { return geom_str(&p->key.g, buf, size); }

/* Measured (DPTRAIN_CUDNN_ALGO=measured): direction dir's algorithm from
 * the cache file (algo_cache.h), or the fastest qualifying result of
 * cuDNN's cudnnFind*Algorithm (ties: the first listed), stored there; the
 * fixed algorithm when none qualifies (not stored). `why` says which. */
static void measured_candidate(dp_cuda_ctx_t *c, conv_plan_t *p, conv_dir_t dir, const char *dir_name,
                               plan_algos_t *a, char *why, size_t why_size) {
    char key[512], gs[192];
    snprintf(key, sizeof key, "%s|%s %s tf32 %d|%s", c->conv_plans->gpu,
             p->key.op == PLAN_CONV ? "conv" : "conv_transpose", conv_str(p, gs, sizeof gs), p->key.tf32, dir_name);
    int algo = dp_algo_cache_get(key);
    if (algo >= 0) {
        add_candidate(a, algo);
        snprintf(why, why_size, "measured before (%s)", dp_algo_cache_path());
        return;
    }
    algo_perf_t perf[CONV_HEURISTIC_MAX];
    int n = 0, best = -1, qualified = 0;
    algo_results(c, p, dir, 1, perf, &n);
    cudaGetLastError(); /* what the timing runs left behind is not ours */
    for (int i = 0; i < n; i++)
        if (qualifies(p, &perf[i]) && perf[i].time >= 0) {
            qualified++;
            if (best < 0 || perf[i].time < perf[best].time) best = i;
        }
    if (best < 0) {
        snprintf(why, why_size, "the fixed one: none of %d measured results qualified", n);
        return;
    }
    add_candidate(a, perf[best].algo);
    dp_algo_cache_put(key, perf[best].algo);
    snprintf(why, why_size, "measured: the fastest of %d qualified of %d, %.3f ms", qualified, n, perf[best].time);
}

/* Direction dir's candidates: the qualifying heuristic results in cuDNN's
 * order (none with DPTRAIN_CUDNN_ALGO=fixed or when the query fails), or
 * the measured choice (measured_candidate), then the fixed algorithm. With
 * DPTRAIN_CUDNN_ALGO_LOG, one stderr line says which algorithm comes first
 * and why (on a GPU: whether the heuristics gave anything the filter
 * keeps). */
static void list_candidates(dp_cuda_ctx_t *c, conv_plan_t *p, conv_dir_t dir) {
    static const char *const dir_names[CONV_DIRECTIONS] = {"forward", "backward data", "backward filter"};
    plan_algos_t *a = &p->algos[dir];
    int n = 0, first = -1, qualified = 0;
    char why[160] = "";
    *a = (plan_algos_t){.listed = 1};
    if (c->conv_plans->mode == ALGO_HEURISTIC) {
        algo_perf_t perf[CONV_HEURISTIC_MAX];
        algo_results(c, p, dir, 0, perf, &n);
        for (int i = 0; i < n; i++)
            if (qualifies(p, &perf[i])) {
                if (first < 0) first = i;
                qualified++;
                add_candidate(a, perf[i].algo);
            }
        if (first >= 0) snprintf(why, sizeof why, "heuristic result %d of %d, %d qualified", first + 1, n, qualified);
        else snprintf(why, sizeof why, "the fixed one: none of %d heuristic results qualified", n);
    } else if (c->conv_plans->mode == ALGO_MEASURED) {
        measured_candidate(c, p, dir, dir_names[dir], a, why, sizeof why);
    } else {
        snprintf(why, sizeof why, "the fixed one: DPTRAIN_CUDNN_ALGO=fixed");
    }
    add_candidate(a, fixed_algo[dir]);
    if (!c->conv_plans->log) return;
    char cs[192];
    fprintf(stderr, "%s: cuDNN %s %s of %s: algorithm %d, %s\n", c->name,
            p->key.op == PLAN_CONV ? "conv" : "conv_transpose", dir_names[dir], conv_str(p, cs, sizeof cs), a->algo[0],
            why);
}

static cudnnStatus_t workspace_query(dp_cuda_ctx_t *c, const conv_plan_t *p, conv_dir_t dir, int algo, size_t *bytes) {
    if (dir == CONV_FORWARD)
        return cudnnGetConvolutionForwardWorkspaceSize(c->cudnn, p->x, p->w, p->conv, p->y,
                                                       (cudnnConvolutionFwdAlgo_t)algo, bytes);
    if (dir == CONV_BACKWARD_DATA)
        return cudnnGetConvolutionBackwardDataWorkspaceSize(c->cudnn, p->w, p->y, p->conv, p->x,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(c->cudnn, p->x, p->y, p->conv, p->w,
                                                          (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

/* out = conv(a, b) + beta out in direction dir: forward y from (x, w),
 * backward data dx from (w, dy), backward filter dw from (x, dy). */
static cudnnStatus_t convolve(dp_cuda_ctx_t *c, const conv_plan_t *p, conv_dir_t dir, int algo, const void *a,
                              const void *b, const float *beta, void *out, size_t bytes) {
    if (dir == CONV_FORWARD)
        return cudnnConvolutionForward(c->cudnn, &one, p->x, a, p->w, b, p->conv, (cudnnConvolutionFwdAlgo_t)algo,
                                       c->workspace, bytes, beta, p->y, out);
    if (dir == CONV_BACKWARD_DATA)
        return cudnnConvolutionBackwardData(c->cudnn, &one, p->w, a, p->y, b, p->conv,
                                            (cudnnConvolutionBwdDataAlgo_t)algo, c->workspace, bytes, beta, p->x, out);
    return cudnnConvolutionBackwardFilter(c->cudnn, &one, p->x, a, p->y, b, p->conv,
                                          (cudnnConvolutionBwdFilterAlgo_t)algo, c->workspace, bytes, beta, p->w, out);
}

/* No candidate left for direction `what` of p: one line naming the GPU
 * and the convolution. */
static dp_status_t no_algorithm_left(dp_cuda_ctx_t *c, const conv_plan_t *p, const plan_algos_t *a,
                                     cudnnStatus_t last, const char *what) {
    char cs[192];
    return dp_fail(DP_ERR_ARG, "%s: %s: no cuDNN algorithm left for the convolution of %s: %d tried, the last said %s",
                   c->name, what, conv_str(p, cs, sizeof cs), a->count, cudnnGetErrorString(last));
}

/* Direction dir of plan p: out = conv(a, b) + beta out (convolve()), with
 * the direction's current candidate, passing over (for good) those cuDNN
 * refuses. */
static dp_status_t conv_run(dp_cuda_ctx_t *c, conv_plan_t *p, conv_dir_t dir, const void *a, const void *b, float beta,
                            void *out, const char *what) {
    plan_algos_t *al = &p->algos[dir];
    if (!al->listed) list_candidates(c, p, dir);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    for (; al->next < al->count; al->next++) {
        int algo = al->algo[al->next];
        size_t bytes = 0;
        if ((s = workspace_query(c, p, dir, algo, &bytes)) != CUDNN_STATUS_SUCCESS) continue;
        DP_TRY(workspace(c, bytes));
        s = convolve(c, p, dir, algo, a, b, &beta, out, bytes);
        if (s == CUDNN_STATUS_SUCCESS) return DP_OK;
        if (s != CUDNN_STATUS_NOT_SUPPORTED) return cudnn_fail(c, s, what);
    }
    return no_algorithm_left(c, p, al, s, what);
}

/* The convolution of a checked node (conv_shape.h). */
static void geom_from_shape(const dp_conv_shape_t *sh, conv_geom_t *g) {
    *g = (conv_geom_t){.nb = sh->ndim == 5 ? 5 : 4, .N = sh->batch, .C = sh->in_ch, .K = sh->out_ch,
                       .groups = sh->groups};
    for (int i = 0; i < 3; i++) {
        g->in[i] = sh->in_size[i], g->out[i] = sh->out_size[i], g->k[i] = sh->kernel[i];
        g->pad[i] = sh->pad[i], g->stride[i] = sh->stride[i], g->dilation[i] = sh->dilation[i];
    }
}

/* conv: x (N, C, [D,] [H,] W), w (OC, C / groups, k...), b (OC) or NULL; the CPU op's checks (conv_shape.c). */
static dp_status_t conv_plan_of(dp_cuda_ctx_t *c, const dp_node_t *node, conv_plan_t **p) {
    dp_conv_shape_t sh;
    conv_geom_t g;
    DP_TRY(dp_conv_shape(node, &sh));
    geom_from_shape(&sh, &g);
    return conv_plan(c, PLAN_CONV, &g, p);
}

static size_t plane_of(const int size[3]) { return (size_t)size[0] * size[1] * size[2]; }

/* The output shape (N, channels, size of the spatial dims the input has). */
static void spatial_shape(int ndim, int N, int channels, const int size[3], int shape[DP_MAX_DIMS]) {
    shape[0] = N, shape[1] = channels;
    for (int s = 0; s < ndim - 2; s++) shape[2 + s] = size[3 - (ndim - 2) + s];
}

static dp_status_t conv_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    conv_plan_t *p;
    DP_TRY(conv_plan_of(c, node, &p));
    const conv_geom_t *g = &p->key.g;
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    int shape[DP_MAX_DIMS];
    spatial_shape(x->ndim, g->N, g->K, g->out, shape);
    DP_TRY(output(node, "conv", x->ndim, shape, x->grad || w->grad || (b && b->grad), arena));
    DP_TRY(conv_run(c, p, CONV_FORWARD, x->data, w->data, 0.0f, node->out.data, "conv forward"));
    if (b || node->attr.fuse_relu)
        return launch(c, dp_cuda_bias_act(c->stream, node->out.data, b ? b->data : NULL, g->N, g->K, plane_of(g->out),
                                          node->attr.fuse_relu),
                      "conv bias");
    return DP_OK;
}

/* The gradients of a convolution's input (into `xt`'s grad) and filter
 * (into `wt`'s grad) from dy over plan p; x_data / w_data are the
 * forward's operands. Each grad is written when unset and added to
 * otherwise (dp_grad_claim). */
static dp_status_t conv_grads(dp_cuda_ctx_t *c, conv_plan_t *p, const float *x_data, const float *w_data,
                              const float *dy, dp_tensor_t *xt, dp_tensor_t *wt, const char *op) {
    char what[64];
    if (wt && wt->grad) {
        const float beta = dp_grad_claim(wt) ? 0.0f : 1.0f;
        snprintf(what, sizeof what, "%s weight gradient", op);
        DP_TRY(conv_run(c, p, CONV_BACKWARD_FILTER, x_data, dy, beta, wt->grad, what));
    }
    if (xt && xt->grad) {
        const float beta = dp_grad_claim(xt) ? 0.0f : 1.0f;
        snprintf(what, sizeof what, "%s input gradient", op);
        DP_TRY(conv_run(c, p, CONV_BACKWARD_DATA, w_data, dy, beta, xt->grad, what));
    }
    return DP_OK;
}

static dp_status_t conv_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    if (!node->out.grad) return DP_OK;
    conv_plan_t *p;
    DP_TRY(conv_plan_of(c, node, &p));
    const conv_geom_t *g = &p->key.g;
    dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    size_t n_out = dp_tensor_numel(&node->out);
    const float *dy = node->out.grad; /* (N, OC, out...) */
    float *masked = NULL;
    if (node->attr.fuse_relu) {       /* the gradient through relu: dy where y > 0 */
        masked = dp_arena_floats(arena, n_out);
        if (!masked) return dp_fail(DP_ERR_NOMEM, "conv: out of GPU memory for a gradient of %zu floats", n_out);
    }
    if (b && b->grad) /* the bias gradient, and the masked dy in the same pass */
        DP_TRY(bias_grad(c, arena, dy, masked ? node->out.data : NULL, masked, b, g->N, g->K, plane_of(g->out),
                         "conv bias gradient"));
    else if (masked)
        DP_TRY(launch(c, dp_cuda_relu_mask(c->stream, node->out.data, dy, masked, n_out), "conv relu mask"));
    if (masked) dy = masked;
    return conv_grads(c, p, x->data, w->data, dy, x, w, "conv");
}

/* --- conv_transpose: the input gradient of the convolution it transposes ---------------
 * x (N, C_in, I...), weight (C_in, C_out / groups, k...) = the filter (K =
 * C_in, C = C_out / groups) of a convolution from (N, C_out, O...) to x:
 *   forward       y  = cudnnConvolutionBackwardData(w, dy := x)
 *   dx            = cudnnConvolutionForward(dy_y, w)
 *   dweight       = cudnnConvolutionBackwardFilter(x := dy_y, dy := x)
 *   dbias[c]      = sum of dy_y over images and positions (as conv's).
 * O = (I - 1) stride - 2 pad + dilation (k - 1) + output_padding + 1. The
 * convolution maps O back to I when output_padding < stride along every
 * dim; otherwise (allowed up to the dilation) it runs on a buffer of
 * B = (I - 1) stride + dilation (k - 1) + 1 per dim without padding, and y
 * is the window [pad, pad + O) of it, 0 past B (dp_cuda_window_copy; the
 * backward pads dy_y into such a buffer the same way). fuse_relu is refused,
 * as by ops_conv_transpose.c. The plan is the convolution's (PLAN_CONV_TRANSPOSE). */

typedef struct {
    conv_plan_t *p;    /* the convolution: its input is y (or the buffer), its output x */
    int N, ndim, C_out;
    int O[3];          /* y's (D, H, W) */
    int buffered;      /* 1: the convolution's input is the buffer (p's in), y its window */
    int B[3];          /* the convolution's input: the buffer when buffered, else O */
    int window_off[3]; /* the window's offset into the buffer (= pad) */
} convt_t;

static dp_status_t convt_plan(dp_cuda_ctx_t *c, const dp_node_t *node, convt_t *t) {
    dp_conv_shape_t sh;
    conv_geom_t g;
    *t = (convt_t){0};
    DP_TRY(dp_conv_transpose_shape(node, &sh)); /* the CPU op's checks (conv_shape.c) */
    geom_from_shape(&sh, &g);
    t->N = g.N;
    t->ndim = sh.ndim;
    t->C_out = sh.in_ch;
    for (int i = 0; i < 3; i++) {
        t->O[i] = sh.in_size[i];
        t->window_off[i] = g.pad[i];
        t->buffered |= sh.output_padding[i] >= g.stride[i];
    }
    for (int i = 0; i < 3; i++) /* buffered: the unpadded span (I - 1) stride + dilation (k - 1) + 1 */
        if (t->buffered) {
            g.in[i] = (g.out[i] - 1) * g.stride[i] + g.dilation[i] * (g.k[i] - 1) + 1;
            g.pad[i] = 0;
        }
    for (int i = 0; i < 3; i++) t->B[i] = g.in[i];
    return conv_plan(c, PLAN_CONV_TRANSPOSE, &g, &t->p);
}

/* The window copy between y (O) and the buffer (B): to_y 1 crops the
 * buffer into y, 0 pads y (dy) into the buffer. */
static dp_status_t convt_window(dp_cuda_ctx_t *c, const convt_t *t, const float *src, float *dst, int to_y) {
    dp_cuda_window_t g = {.planes = t->N * t->C_out};
    for (int i = 0; i < 3; i++) {
        g.src[i] = to_y ? t->B[i] : t->O[i];
        g.dst[i] = to_y ? t->O[i] : t->B[i];
        g.offset[i] = to_y ? t->window_off[i] : -t->window_off[i];
    }
    return launch(c, dp_cuda_window_copy(c->stream, &g, src, dst), "conv_transpose window");
}

static dp_status_t conv_transpose_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    convt_t t;
    DP_TRY(convt_plan(c, node, &t));
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    int shape[DP_MAX_DIMS];
    spatial_shape(x->ndim, t.N, t.C_out, t.O, shape);
    size_t buf_n = (size_t)t.N * t.C_out * plane_of(t.B);
    float *buf = NULL;
    DP_TRY(output(node, "conv_transpose", x->ndim, shape, x->grad || w->grad || (b && b->grad), arena));
    if (t.buffered && !(buf = dp_arena_floats(arena, buf_n)))
        return dp_fail(DP_ERR_NOMEM, "conv_transpose: out of GPU memory for a buffer of %zu floats", buf_n);
    DP_TRY(conv_run(c, t.p, CONV_BACKWARD_DATA, w->data, x->data, 0.0f, buf ? buf : node->out.data,
                    "conv_transpose forward"));
    if (buf) DP_TRY(convt_window(c, &t, buf, node->out.data, 1));
    if (b)
        return launch(c, dp_cuda_bias_act(c->stream, node->out.data, b->data, t.N, t.C_out, plane_of(t.O), 0),
                      "conv_transpose bias");
    return DP_OK;
}

static dp_status_t conv_transpose_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    if (!node->out.grad) return DP_OK;
    convt_t t;
    DP_TRY(convt_plan(c, node, &t));
    dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const float *dy = node->out.grad; /* (N, C_out, O...) */
    if (b && b->grad)
        DP_TRY(bias_grad(c, arena, dy, NULL, NULL, b, t.N, t.C_out, plane_of(t.O), "conv_transpose bias gradient"));
    if (t.buffered && (x->grad || w->grad)) { /* dy padded into the convolution's input size */
        size_t buf_n = (size_t)t.N * t.C_out * plane_of(t.B);
        float *buf = dp_arena_floats(arena, buf_n);
        if (!buf) return dp_fail(DP_ERR_NOMEM, "conv_transpose: out of GPU memory for a buffer of %zu floats", buf_n);
        DP_TRY(convt_window(c, &t, dy, buf, 0));
        dy = buf;
    }
    /* the convolution's input is dy, its output gradient x: its "dx" is our
     * dy's side (not wanted), its "dy" our x; so dx is a forward and dweight
     * a backward filter with the roles of x and dy swapped */
    if (x->grad) {
        const float beta = dp_grad_claim(x) ? 0.0f : 1.0f;
        DP_TRY(conv_run(c, t.p, CONV_FORWARD, dy, w->data, beta, x->grad, "conv_transpose input gradient"));
    }
    if (w->grad) return conv_grads(c, t.p, dy, NULL, x->data, NULL, w, "conv_transpose");
    return DP_OK;
}

/* --- linear: cuBLAS is column-major, so row-major y (N, OUT) is y^T ---------------- */

static dp_status_t cublas_status(dp_cuda_ctx_t *c, cublasStatus_t s, const char *what) {
    return s == CUBLAS_STATUS_SUCCESS ? DP_OK : dp_fail(DP_ERR_ARG, "%s: %s: cuBLAS status %d", c->name, what, (int)s);
}

static dp_status_t linear_check(const dp_node_t *node, int *N, int *IN, int *OUT) {
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    char xs[64], ws[64];
    if (!x || !w || !x->data || !w->data) return dp_fail(DP_ERR_ARG, "linear: needs an input and a weight with data");
    if (x->ndim != 2 || w->ndim != 2 || w->shape[1] != x->shape[1] || x->shape[0] < 1 || x->shape[1] < 1 ||
        w->shape[0] < 1)
        return dp_fail(DP_ERR_SHAPE, "linear: weight %s does not fit input %s (expected (OUT, IN) and (N, IN))",
                       dp_tensor_shape_str(w, ws, sizeof ws), dp_tensor_shape_str(x, xs, sizeof xs));
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0] || !b->data))
        return dp_fail(DP_ERR_SHAPE, "linear: bias must be (%d)", w->shape[0]);
    *N = x->shape[0], *IN = x->shape[1], *OUT = w->shape[0];
    return DP_OK;
}

static dp_status_t linear_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    int N = 0, IN = 0, OUT = 0;
    DP_TRY(linear_check(node, &N, &IN, &OUT));
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    int shape[2] = {N, OUT};
    DP_TRY(output(node, "linear", 2, shape, x->grad || w->grad || (b && b->grad), arena));
    float beta = 0.0f;
    if (b) { /* start from the bias, then add x W^T (as the CPU op) */
        DP_TRY(launch(c, dp_cuda_fill_rows(c->stream, node->out.data, b->data, N, OUT), "linear bias"));
        beta = 1.0f;
    }
    /* y^T (OUT, N) = W (OUT, IN) x^T: W is column-major (IN, OUT), transposed */
    return cublas_status(c, cublasSgemm(c->cublas, CUBLAS_OP_T, CUBLAS_OP_N, OUT, N, IN, &one, w->data, IN, x->data, IN,
                                        &beta, node->out.data, OUT),
                         "linear forward");
}

static dp_status_t linear_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    const float *dy = node->out.grad; /* (N, OUT) */
    if (!dy) return DP_OK;
    int N = 0, IN = 0, OUT = 0;
    DP_TRY(linear_check(node, &N, &IN, &OUT));
    dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    if (x->grad) { /* dx^T (IN, N) = W^T dy^T: W column-major (IN, OUT), dy^T (OUT, N) */
        const float beta = dp_grad_claim(x) ? 0.0f : 1.0f;
        DP_TRY(cublas_status(c, cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_N, IN, N, OUT, &one, w->data, IN, dy,
                                            OUT, &beta, x->grad, IN),
                             "linear input gradient"));
    }
    if (w->grad) { /* dW^T (IN, OUT) = x^T (IN, N) dy (N, OUT) */
        const float beta = dp_grad_claim(w) ? 0.0f : 1.0f;
        DP_TRY(cublas_status(c, cublasSgemm(c->cublas, CUBLAS_OP_N, CUBLAS_OP_T, IN, OUT, N, &one, x->data, IN, dy,
                                            OUT, &beta, w->grad, IN),
                             "linear weight gradient"));
    }
    if (b && b->grad) /* column sums of dy: dy is (N, OUT, 1) */
        DP_TRY(bias_grad(c, arena, dy, NULL, NULL, b, N, OUT, 1, "linear bias gradient"));
    return DP_OK;
}

/* --- relu ------------------------------------------------------------------------ */

static dp_status_t relu_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "relu: needs an input (in[0]) with data");
    DP_TRY(output(node, "relu", x->ndim, x->shape, x->grad != NULL, arena));
    return launch(c, dp_cuda_relu_forward(c->stream, x->data, node->out.data, dp_tensor_numel(x)), "relu");
}

static dp_status_t relu_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    int add = !dp_grad_claim(x);
    return launch(c, dp_cuda_relu_backward(c->stream, node->out.data, node->out.grad, x->grad,
                                           dp_tensor_numel(&node->out), add),
                  "relu backward");
}

/* --- pooling (1-D to 3-D; ops_pool.c's geometry and messages) ----------------------- */

static const char *const dim_names[3] = {"D", "H", "W"};

static dp_status_t pool_geometry(const dp_node_t *node, const char *op, int dilation, dp_cuda_pool_t *g) {
    const dp_tensor_t *x = node->in[0];
    const dp_op_attr_t *a = &node->attr;
    char xs[64];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "%s: needs an input (in[0]) with data", op);
    if (x->ndim < 3 || x->ndim > 5)
        return dp_fail(DP_ERR_SHAPE, "%s: input must be (N, C, [D,] [H,] W) with 3 to 5 dims, found %s", op,
                       dp_tensor_shape_str(x, xs, sizeof xs));
    if (x->shape[0] < 1 || x->shape[1] < 1 || (long)x->shape[0] * x->shape[1] > INT32_MAX)
        return dp_fail(DP_ERR_SHAPE, "%s: empty input %s", op, dp_tensor_shape_str(x, xs, sizeof xs));
    int in[3], out[3], k[3], s[3], p[3], d[3];
    int spatial = x->ndim - 2, first = 3 - spatial;
    for (int i = 0; i < 3; i++) {
        int j = i - first; /* index into the attribute arrays, < 0 for missing dims */
        in[i] = j < 0 ? 1 : x->shape[2 + j];
        k[i] = j < 0 ? 1 : a->kernel[j];
        s[i] = j < 0 ? 1 : a->stride[j];
        p[i] = j < 0 ? 0 : a->pad[j];
        d[i] = j < 0 ? 1 : a->dilation[j];
        if (k[i] < 1 || s[i] < 1 || d[i] < 1)
            return dp_fail(DP_ERR_ARG, "%s: along %s kernel %d, stride %d and dilation %d must be >= 1", op,
                           dim_names[i], k[i], s[i], d[i]);
        if (!dilation && d[i] != 1) /* as ops_pool.c: avg pool has none */
            return dp_fail(DP_ERR_ARG, "%s: dilation must be 1, found %d along %s", op, d[i], dim_names[i]);
        if (p[i] < 0 || 2 * p[i] > k[i])
            return dp_fail(DP_ERR_ARG, "%s: pad %d along %s must be between 0 and half the kernel %d", op, p[i],
                           dim_names[i], k[i]);
        if (in[i] < 1) return dp_fail(DP_ERR_SHAPE, "%s: empty input %s", op, dp_tensor_shape_str(x, xs, sizeof xs));
        out[i] = dp_conv_out_size(in[i], k[i], s[i], p[i], d[i]);
        if (out[i] < 1)
            return dp_fail(DP_ERR_SHAPE,
                           "%s: output size along %s is %d < 1 (input %s, kernel %d, stride %d, pad %d, dilation %d)",
                           op, dim_names[i], out[i], dp_tensor_shape_str(x, xs, sizeof xs), k[i], s[i], p[i], d[i]);
    }
    *g = (dp_cuda_pool_t){.planes = x->shape[0] * x->shape[1], .D = in[0], .H = in[1], .W = in[2],
                          .OD = out[0], .OH = out[1], .OW = out[2], .kd = k[0], .kh = k[1], .kw = k[2],
                          .sd = s[0], .sh = s[1], .sw = s[2], .pd = p[0], .ph = p[1], .pw = p[2],
                          .dd = d[0], .dh = d[1], .dw = d[2], .count_include_pad = a->count_include_pad};
    return DP_OK;
}

/* The output shape of a pool: (N, C) and the output sizes of the input's spatial dims. */
static void pool_shape(const dp_tensor_t *x, const dp_cuda_pool_t *g, int shape[DP_MAX_DIMS]) {
    const int out[3] = {g->OD, g->OH, g->OW};
    shape[0] = x->shape[0], shape[1] = x->shape[1];
    for (int s = 0; s < x->ndim - 2; s++) shape[2 + s] = out[3 - (x->ndim - 2) + s];
}

static dp_status_t max_pool_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    dp_cuda_pool_t g;
    DP_TRY(pool_geometry(node, "max_pool", 1, &g));
    const dp_tensor_t *x = node->in[0];
    int shape[DP_MAX_DIMS];
    pool_shape(x, &g, shape);
    DP_TRY(output(node, "max_pool", x->ndim, shape, x->grad != NULL, arena));
    int32_t *argmax = dp_arena_alloc(arena, sizeof(int32_t) * (size_t)g.planes * g.OD * g.OH * g.OW);
    if (!argmax) return dp_fail(DP_ERR_NOMEM, "max_pool: out of GPU memory for the argmax");
    node->saved = argmax;
    return launch(c, dp_cuda_max_pool_forward(c->stream, &g, x->data, node->out.data, argmax), "max_pool");
}

static dp_status_t max_pool_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    dp_cuda_pool_t g;
    DP_TRY(pool_geometry(node, "max_pool", 1, &g));
    int add = !dp_grad_claim(x);
    return launch(c, dp_cuda_max_pool_backward(c->stream, &g, node->out.grad, node->saved, x->grad, add),
                  "max_pool backward");
}

static dp_status_t avg_pool_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    dp_cuda_pool_t g;
    DP_TRY(pool_geometry(node, "avg_pool", 0, &g));
    const dp_tensor_t *x = node->in[0];
    int shape[DP_MAX_DIMS];
    pool_shape(x, &g, shape);
    DP_TRY(output(node, "avg_pool", x->ndim, shape, x->grad != NULL, arena));
    return launch(c, dp_cuda_avg_pool_forward(c->stream, &g, x->data, node->out.data), "avg_pool");
}

static dp_status_t avg_pool_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    dp_cuda_pool_t g;
    DP_TRY(pool_geometry(node, "avg_pool", 0, &g));
    int add = !dp_grad_claim(x);
    return launch(c, dp_cuda_avg_pool_backward(c->stream, &g, node->out.grad, x->grad, add), "avg_pool backward");
}

/* --- softmax cross-entropy ----------------------------------------------------------- */

static dp_status_t xent_check(const dp_node_t *node, int *N, int *K, double *D) {
    const dp_tensor_t *x = node->in[0];
    char xs[64];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "softmax_xent: needs logits (in[0]) with data");
    if (!node->labels) return dp_fail(DP_ERR_ARG, "softmax_xent: needs labels (node->labels is NULL)");
    if (x->ndim != 2 || x->shape[0] < 1 || x->shape[1] < 1)
        return dp_fail(DP_ERR_SHAPE, "softmax_xent: logits must be (N, K) with N, K >= 1, found %s",
                       dp_tensor_shape_str(x, xs, sizeof xs));
    float d = node->attr.loss_denominator;
    if (!(d >= 0.0f) || isinf(d))
        return dp_fail(DP_ERR_ARG, "softmax_xent: loss_denominator must be finite and >= 0, found %g", (double)d);
    *N = x->shape[0], *K = x->shape[1];
    *D = d > 0.0f ? (double)d : (double)*N;
    return DP_OK;
}

static dp_status_t xent_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    int N = 0, K = 0;
    double D = 1.0;
    DP_TRY(xent_check(node, &N, &K, &D));
    const dp_tensor_t *x = node->in[0];
    DP_TRY(output(node, "softmax_xent", 0, NULL, x->grad != NULL, arena));
    float *probs = dp_arena_floats(arena, (size_t)N * K);         /* (N, K) */
    double *row_loss = dp_arena_alloc(arena, sizeof(double) * N); /* (N) */
    if (!probs || !row_loss) return dp_fail(DP_ERR_NOMEM, "softmax_xent: out of GPU memory for %d x %d", N, K);
    node->saved = probs;
    return launch(c, dp_cuda_xent_forward(c->stream, x->data, node->labels, N, K, D, probs, row_loss, node->out.data),
                  "softmax_xent");
}

static dp_status_t xent_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    int N = 0, K = 0;
    double D = 1.0;
    DP_TRY(xent_check(node, &N, &K, &D));
    int add = !dp_grad_claim(x);
    return launch(c, dp_cuda_xent_backward(c->stream, node->saved, node->labels, node->out.grad, N, K, D, x->grad, add),
                  "softmax_xent backward");
}

/* --- sigmoid, tanh --------------------------------------------------------------------- */

static dp_status_t unary_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena, int kind, const char *op) {
    const dp_tensor_t *x = node->in[0];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "%s: needs an input (in[0]) with data", op);
    DP_TRY(output(node, op, x->ndim, x->shape, x->grad != NULL, arena));
    return launch(c, dp_cuda_unary_forward(c->stream, kind, x->data, node->out.data, dp_tensor_numel(x)), op);
}

static dp_status_t unary_backward(dp_cuda_ctx_t *c, dp_node_t *node, int kind, const char *op) {
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    int add = !dp_grad_claim(x);
    return launch(c, dp_cuda_unary_backward(c->stream, kind, node->out.data, node->out.grad, x->grad,
                                            dp_tensor_numel(&node->out), add),
                  op);
}

static dp_status_t sigmoid_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    return unary_forward(c, node, arena, 0, "sigmoid");
}
static dp_status_t sigmoid_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return unary_backward(c, node, 0, "sigmoid");
}
static dp_status_t tanh_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    return unary_forward(c, node, arena, 1, "tanh");
}
static dp_status_t tanh_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    return unary_backward(c, node, 1, "tanh");
}

/* --- add (skip connections), with fuse_relu ------------------------------------------------ */

static int same_shape(const dp_tensor_t *a, const dp_tensor_t *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static dp_status_t add_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0], *z = node->in[1];
    char xs[64], zs[64];
    if (!x || !z || !x->data || !z->data) return dp_fail(DP_ERR_ARG, "add: needs two inputs (in[0], in[1]) with data");
    if (!same_shape(x, z))
        return dp_fail(DP_ERR_SHAPE, "add: inputs must have the same shape, found %s and %s",
                       dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(z, zs, sizeof zs));
    DP_TRY(output(node, "add", x->ndim, x->shape, x->grad || z->grad, arena));
    return launch(c, dp_cuda_add(c->stream, x->data, z->data, node->out.data, dp_tensor_numel(x), node->attr.fuse_relu),
                  "add");
}

static dp_status_t add_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    float *dy = node->out.grad;
    if (!dy) return DP_OK;
    size_t n = dp_tensor_numel(&node->out);
    if (node->attr.fuse_relu) { /* dy through the ReLU into both grads in one pass, in order (x + x gets 2 dy) */
        dp_tensor_t *t0 = node->in[0], *t1 = node->in[1];
        int add0 = t0->grad ? !dp_grad_claim(t0) : 0, add1 = t1->grad ? !dp_grad_claim(t1) : 0;
        if (!t0->grad && !t1->grad) return DP_OK;
        return launch(c, dp_cuda_relu_backward_pair(c->stream, node->out.data, dy, t0->grad, add0, t1->grad, add1, n),
                      "add backward");
    }
    for (int k = 0; k < 2; k++) { /* in order: x + x gets 2 dy */
        dp_tensor_t *t = node->in[k];
        if (t->grad) DP_TRY(launch(c, dp_cuda_accumulate(c->stream, dy, t->grad, n, !dp_grad_claim(t)), "add backward"));
    }
    return DP_OK;
}

/* --- dropout (the CPU's counter-based mask: the same elements dropped) ------------------------ */

static int dropout_identity(const dp_op_attr_t *a) { return !a->training || a->dropout_p == 0.0f; }

static dp_status_t dropout_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0];
    const dp_op_attr_t *a = &node->attr;
    char xs[64];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "dropout: needs an input (in[0]) with data");
    if (x->ndim < 1 || x->shape[0] < 1)
        return dp_fail(DP_ERR_SHAPE, "dropout: input must be (N, ...) with N >= 1, found %s",
                       dp_tensor_shape_str(x, xs, sizeof xs));
    if (!(a->dropout_p >= 0.0f && a->dropout_p < 1.0f))
        return dp_fail(DP_ERR_ARG, "dropout: dropout_p must be in [0, 1), found %g", (double)a->dropout_p);
    if (a->example_offset < 0)
        return dp_fail(DP_ERR_ARG, "dropout: example_offset must be >= 0, found %lld", (long long)a->example_offset);
    if (dropout_identity(a)) { /* a view, as the CPU's */
        dp_tensor_set_shape(&node->out, x->ndim, x->shape);
        node->saved = NULL;
        node->out.data = x->data;
        node->out.grad = x->grad;
        node->out.grad_unset = x->grad_unset;
        return DP_OK;
    }
    DP_TRY(output(node, "dropout", x->ndim, x->shape, x->grad != NULL, arena));
    size_t numel = dp_tensor_numel(x);
    return launch(c, dp_cuda_dropout(c->stream, x->data, node->out.data, x->shape[0], numel / (size_t)x->shape[0],
                                     a->dropout_seed, a->example_offset, (uint64_t)ldexp((double)a->dropout_p, 53),
                                     (float)(1.0 / (1.0 - (double)a->dropout_p)), 0),
                  "dropout");
}

static dp_status_t dropout_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    const dp_op_attr_t *a = &node->attr;
    if (dropout_identity(a)) {
        if (x->grad) x->grad_unset = node->out.grad_unset;
        return DP_OK;
    }
    if (!node->out.grad || !x->grad) return DP_OK;
    size_t numel = dp_tensor_numel(x);
    int add = !dp_grad_claim(x);
    return launch(c, dp_cuda_dropout(c->stream, node->out.grad, x->grad, x->shape[0], numel / (size_t)x->shape[0],
                                     a->dropout_seed, a->example_offset, (uint64_t)ldexp((double)a->dropout_p, 53),
                                     (float)(1.0 / (1.0 - (double)a->dropout_p)), add),
                  "dropout backward");
}

/* --- global average pooling ------------------------------------------------------------------ */

static dp_status_t global_avg_pool_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    const dp_tensor_t *x = node->in[0];
    char xs[64];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "global_avg_pool: needs an input (in[0]) with data");
    if (x->ndim < 3 || x->ndim > 5 || dp_tensor_numel(x) == 0)
        return dp_fail(DP_ERR_SHAPE, "global_avg_pool: input must be (N, C, [D,] [H,] W) with 3 to 5 dims, none "
                       "empty, found %s", dp_tensor_shape_str(x, xs, sizeof xs));
    int shape[DP_MAX_DIMS] = {x->shape[0], x->shape[1], 1, 1, 1};
    DP_TRY(output(node, "global_avg_pool", x->ndim, shape, x->grad != NULL, arena));
    size_t planes = (size_t)x->shape[0] * (size_t)x->shape[1];
    return launch(c, dp_cuda_global_avg_forward(c->stream, x->data, node->out.data, planes, dp_tensor_numel(x) / planes),
                  "global_avg_pool");
}

static dp_status_t global_avg_pool_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    size_t planes = dp_tensor_numel(&node->out);
    int add = !dp_grad_claim(x);
    return launch(c, dp_cuda_global_avg_backward(c->stream, node->out.grad, x->grad, planes, dp_tensor_numel(x) / planes,
                                                 add),
                  "global_avg_pool backward");
}

/* --- MSE ----------------------------------------------------------------------------------------- */

static dp_status_t mse_check(const dp_node_t *node, double *D) {
    const dp_tensor_t *x = node->in[0], *t = node->in[1];
    char xs[64], ts[64];
    if (!x || !t || !x->data || !t->data)
        return dp_fail(DP_ERR_ARG, "mse: needs a prediction (in[0]) and a target (in[1]) with data");
    if (!same_shape(x, t) || dp_tensor_numel(x) == 0)
        return dp_fail(DP_ERR_SHAPE, "mse: prediction %s and target %s must have the same, non-empty shape",
                       dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(t, ts, sizeof ts));
    float d = node->attr.loss_denominator;
    if (!(d >= 0.0f) || isinf(d))
        return dp_fail(DP_ERR_ARG, "mse: loss_denominator must be finite and >= 0, found %g", (double)d);
    *D = d > 0.0f ? (double)d : (double)dp_tensor_numel(x);
    return DP_OK;
}

static dp_status_t mse_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    double D = 1.0;
    DP_TRY(mse_check(node, &D));
    const dp_tensor_t *x = node->in[0], *t = node->in[1];
    DP_TRY(output(node, "mse", 0, NULL, x->grad != NULL, arena));
    return launch(c, dp_cuda_mse_forward(c->stream, x->data, t->data, dp_tensor_numel(x), D, node->out.data), "mse");
}

static dp_status_t mse_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    (void)arena;
    dp_tensor_t *x = node->in[0];
    if (!node->out.grad || !x->grad) return DP_OK;
    double D = 1.0;
    DP_TRY(mse_check(node, &D));
    int add = !dp_grad_claim(x);
    return launch(c, dp_cuda_mse_backward(c->stream, x->data, node->in[1]->data, node->out.grad, dp_tensor_numel(x), D,
                                          x->grad, add),
                  "mse backward");
}

/* --- batch norm (ops_batch_norm.c's formulas; saved: device doubles [mean, invstd, m]) --------- */

typedef struct {
    int N, C;
    size_t plane;
} bn_geom_t;

static dp_status_t bn_geometry(const dp_node_t *node, bn_geom_t *g) {
    const dp_tensor_t *x = node->in[0];
    const dp_op_attr_t *a = &node->attr;
    char xs[64], ps[64];
    if (!x || !x->data) return dp_fail(DP_ERR_ARG, "batch_norm: needs an input (in[0]) with data");
    if (x->ndim < 2 || x->ndim > 5 || dp_tensor_numel(x) == 0)
        return dp_fail(DP_ERR_SHAPE, "batch_norm: input must be (N, C) or (N, C, [D,] [H,] W), none empty, found %s",
                       dp_tensor_shape_str(x, xs, sizeof xs));
    g->N = x->shape[0];
    g->C = x->shape[1];
    g->plane = dp_tensor_numel(x) / ((size_t)g->N * (size_t)g->C);
    for (int i = 1; i < 3; i++) {
        const dp_tensor_t *p = node->in[i];
        if (p && (!p->data || p->ndim != 1 || p->shape[0] != g->C))
            return dp_fail(DP_ERR_SHAPE, "batch_norm: %s must be (%d) for input %s, found %s", i == 1 ? "weight" : "bias",
                           g->C, dp_tensor_shape_str(x, xs, sizeof xs), dp_tensor_shape_str(p, ps, sizeof ps));
    }
    if (!(a->eps >= 0.0f) || isinf(a->eps))
        return dp_fail(DP_ERR_ARG, "batch_norm: eps must be finite and >= 0, found %g", (double)a->eps);
    if (a->training && !(a->momentum >= 0.0f && a->momentum <= 1.0f))
        return dp_fail(DP_ERR_ARG, "batch_norm: momentum must be in [0, 1], found %g", (double)a->momentum);
    if ((a->running_mean == NULL) != (a->running_var == NULL))
        return dp_fail(DP_ERR_ARG, "batch_norm: running_mean and running_var must both be given or both NULL");
    if (!a->training && !a->running_mean)
        return dp_fail(DP_ERR_ARG, "batch_norm: inference (training = 0) needs running_mean and running_var");
    return DP_OK;
}

/* stat_sync's host hook over `count` device doubles: download, sum across
 * participants, upload (the one host synchronisation SyncBatchNorm needs);
 * *first (when not NULL) = the summed first value (the count m).
 * The context lock is let go around sum(): it waits at a barrier for the
 * other devices, and devices sharing this GPU need the lock to get there
 * (run() holds it exactly once here). The upload is waited for before
 * returning: its source is this frame's array. */
static dp_status_t bn_sync(dp_cuda_ctx_t *c, const dp_stat_sync_t *sync, double *dev, int count, double *first) {
    double host[1 + 2 * 4096];
    if (count > (int)(sizeof host / sizeof host[0]))
        return dp_fail(DP_ERR_ARG, "batch_norm: %s: synchronised statistics of more than 4096 channels are not done",
                       c->name);
    /* the wait first (dp_cuda_wait: in an NCCL group it watches the other
     * members; a copy to pageable memory would block behind a sum that
     * never ends) */
    if (dp_cuda_check(c, dp_cuda_wait(c, NULL), "batch_norm statistics") ||
        dp_cuda_check(c, cudaMemcpyAsync(host, dev, sizeof(double) * (size_t)count, cudaMemcpyDeviceToHost, c->stream),
                      "batch_norm statistics") ||
        dp_cuda_check(c, cudaStreamSynchronize(c->stream), "batch_norm statistics"))
        return dp_cuda_status(c);
    dp_cuda_leave(c);
    sync->sum(sync->ctx, host, count);
    dp_cuda_enter(c);
    if (c->failed) return dp_cuda_status(c);
    if (first) *first = host[0];
    dp_cuda_check(c, cudaMemcpyAsync(dev, host, sizeof(double) * (size_t)count, cudaMemcpyHostToDevice, c->stream),
                  "batch_norm statistics");
    dp_cuda_check(c, dp_cuda_wait(c, NULL), "batch_norm statistics");
    return dp_cuda_status(c);
}

static dp_status_t batch_norm_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    bn_geom_t g;
    DP_TRY(bn_geometry(node, &g));
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const dp_op_attr_t *a = &node->attr;
    DP_TRY(output(node, "batch_norm", x->ndim, x->shape, x->grad || (w && w->grad) || (b && b->grad), arena));
    double *saved = dp_arena_alloc(arena, sizeof(double) * (2 * (size_t)g.C + 1)); /* [mean, invstd, m] */
    double *sums = dp_arena_alloc(arena, sizeof(double) * (2 * (size_t)g.C + 1));  /* [m, S1, S2] */
    float *coef = dp_arena_floats(arena, 3 * (size_t)g.C);                          /* bn_apply's, per channel */
    size_t partials = a->training ? 2 * dp_cuda_channel_partials(g.N, g.C, g.plane) : 0;
    double *scratch = a->training ? dp_arena_alloc(arena, sizeof(double) * partials) : NULL;
    if (!saved || !sums || !coef || (a->training && !scratch))
        return dp_fail(DP_ERR_NOMEM, "batch_norm: out of GPU memory for %d channels", g.C);
    node->saved = saved;
    int shift = !a->stat_sync; /* with stat_sync every participant sums around 0, as the CPU op */
    double m = (double)g.N * (double)g.plane;
    if (a->training) {
        DP_TRY(launch(c, dp_cuda_bn_stats(c->stream, x->data, g.N, g.C, g.plane, shift, scratch,
                                          a->stat_sync ? sums : NULL),
                      "batch_norm statistics"));
        if (a->stat_sync) DP_TRY(bn_sync(c, a->stat_sync, sums, 2 * g.C + 1, &m));
        if (!(m > 1.0))
            return dp_fail(DP_ERR_SHAPE,
                           "batch_norm: training needs more than 1 value per channel (N x spatial%s), found %g",
                           a->stat_sync ? " over all participants" : "", m);
    }
    DP_TRY(launch(c, dp_cuda_bn_finalize(c->stream, x->data, g.N, g.C, g.plane, shift, a->stat_sync ? NULL : scratch,
                                         sums, a->training, (double)a->eps,
                                         (double)a->momentum, a->running_mean, a->running_var, saved, m,
                                         w ? w->data : NULL, b ? b->data : NULL, coef),
                  "batch_norm statistics"));
    return launch(c, dp_cuda_bn_apply(c->stream, x->data, node->out.data, g.N, g.C, g.plane, coef), "batch_norm");
}

static dp_status_t batch_norm_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    if (!node->out.grad) return DP_OK;
    bn_geom_t g;
    DP_TRY(bn_geometry(node, &g));
    dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const dp_op_attr_t *a = &node->attr;
    double *gsums = dp_arena_alloc(arena, sizeof(double) * 2 * (size_t)g.C);
    size_t partials = 2 * dp_cuda_channel_partials(g.N, g.C, g.plane);
    double *scratch = dp_arena_alloc(arena, sizeof(double) * partials);
    float *coef = dp_arena_floats(arena, 4 * (size_t)g.C); /* bn_dx's, per channel */
    if (!gsums || !scratch || !coef)
        return dp_fail(DP_ERR_NOMEM, "batch_norm backward: out of GPU memory for %d channels", g.C);
    float *dw = w && w->grad ? w->grad : NULL, *db = b && b->grad ? b->grad : NULL;
    int add_w = dw ? !dp_grad_claim(w) : 0, add_b = db ? !dp_grad_claim(b) : 0;
    DP_TRY(launch(c, dp_cuda_bn_grad_sums(c->stream, x->data, node->out.grad, g.N, g.C, g.plane, node->saved, scratch,
                                          gsums, dw, add_w, db, add_b),
                  "batch_norm gradient sums"));
    if (!x->grad) return DP_OK;
    if (a->training && a->stat_sync) DP_TRY(bn_sync(c, a->stat_sync, gsums, 2 * g.C, NULL));
    int add = !dp_grad_claim(x);
    return launch(c, dp_cuda_bn_dx(c->stream, x->data, node->out.grad, x->grad, g.N, g.C, g.plane, node->saved, gsums,
                                   w ? w->data : NULL, a->training, add, coef),
                  "batch_norm backward");
}

/* --- the per-GPU tables ------------------------------------------------------------------ */

typedef dp_status_t (*cuda_op_fn)(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena);

static dp_status_t run(int gpu, cuda_op_fn fn, dp_node_t *node, dp_arena_t *arena) {
    dp_cuda_ctx_t *c = dp_cuda_ctx(gpu);
    if (!c) return dp_fail(DP_ERR_ARG, "cuda:%d: the GPU was not opened", gpu);
    dp_cuda_enter(c);
    dp_status_t status = c->failed ? dp_cuda_status(c) : fn(c, node, arena);
    if (status == DP_OK) status = dp_cuda_status(c);
    dp_cuda_leave(c);
    return status;
}

#define WRAP(g, fn) \
    static dp_status_t fn##_##g(dp_node_t *node, dp_arena_t *arena) { return run(g, fn, node, arena); }
#define GPU_FUNCS(g)                                                                                       \
    WRAP(g, conv_forward) WRAP(g, conv_backward) WRAP(g, max_pool_forward) WRAP(g, max_pool_backward)     \
    WRAP(g, avg_pool_forward) WRAP(g, avg_pool_backward) WRAP(g, linear_forward) WRAP(g, linear_backward) \
    WRAP(g, relu_forward) WRAP(g, relu_backward) WRAP(g, xent_forward) WRAP(g, xent_backward)   \
    WRAP(g, sigmoid_forward) WRAP(g, sigmoid_backward) WRAP(g, tanh_forward) WRAP(g, tanh_backward)         \
    WRAP(g, add_forward) WRAP(g, add_backward) WRAP(g, dropout_forward) WRAP(g, dropout_backward)           \
    WRAP(g, global_avg_pool_forward) WRAP(g, global_avg_pool_backward) WRAP(g, mse_forward) WRAP(g, mse_backward) \
    WRAP(g, batch_norm_forward) WRAP(g, batch_norm_backward) \
    WRAP(g, conv_transpose_forward) WRAP(g, conv_transpose_backward)
#define GPU_TABLE(g)                                                                                  \
    {                                                                                                 \
        [DP_OP_CONV] = {"conv", 3, conv_forward_##g, conv_backward_##g},                              \
        [DP_OP_MAX_POOL] = {"max_pool", 1, max_pool_forward_##g, max_pool_backward_##g},              \
        [DP_OP_AVG_POOL] = {"avg_pool", 1, avg_pool_forward_##g, avg_pool_backward_##g},              \
        [DP_OP_LINEAR] = {"linear", 3, linear_forward_##g, linear_backward_##g},                      \
        [DP_OP_RELU] = {"relu", 1, relu_forward_##g, relu_backward_##g},                              \
        [DP_OP_FLATTEN] = {"flatten", 1, dp_flatten_forward, dp_flatten_backward},                    \
        [DP_OP_SOFTMAX_XENT] = {"softmax_xent", 1, xent_forward_##g, xent_backward_##g},              \
        [DP_OP_CONV_TRANSPOSE] = {"conv_transpose", 3, conv_transpose_forward_##g, conv_transpose_backward_##g},                       \
        [DP_OP_GLOBAL_AVG_POOL] = {"global_avg_pool", 1, global_avg_pool_forward_##g, global_avg_pool_backward_##g},                     \
        [DP_OP_BATCH_NORM] = {"batch_norm", 3, batch_norm_forward_##g, batch_norm_backward_##g},                               \
        [DP_OP_DROPOUT] = {"dropout", 1, dropout_forward_##g, dropout_backward_##g},                                     \
        [DP_OP_SIGMOID] = {"sigmoid", 1, sigmoid_forward_##g, sigmoid_backward_##g},                                     \
        [DP_OP_TANH] = {"tanh", 1, tanh_forward_##g, tanh_backward_##g},                                           \
        [DP_OP_ADD] = {"add", 2, add_forward_##g, add_backward_##g},                                             \
        [DP_OP_MSE] = {"mse", 2, mse_forward_##g, mse_backward_##g},                                             \
    }

_Static_assert(DP_OP_COUNT == 15, "ops_cuda.c: a new op needs an entry in GPU_TABLE");
_Static_assert(DP_CUDA_MAX_GPUS == 8, "ops_cuda.c: one GPU_FUNCS / GPU_TABLE per GPU");

GPU_FUNCS(0)
GPU_FUNCS(1)
GPU_FUNCS(2)
GPU_FUNCS(3)
GPU_FUNCS(4)
GPU_FUNCS(5)
GPU_FUNCS(6)
GPU_FUNCS(7)

static const dp_op_def_t tables[DP_CUDA_MAX_GPUS][DP_OP_COUNT] = {
    GPU_TABLE(0), GPU_TABLE(1), GPU_TABLE(2), GPU_TABLE(3), GPU_TABLE(4), GPU_TABLE(5), GPU_TABLE(6), GPU_TABLE(7),
};

const dp_op_def_t *dp_cuda_op_table(int gpu) { return tables[gpu]; }
