/* conv_cuda.c - conv (1-D to 3-D) and conv_transpose (1-D to 3-D, as the
 * input gradient of the convolution it transposes) on a CUDA device with
 * cuDNN: descriptors and each direction's algorithm kept per shape (plans),
 * the algorithms chosen by cuDNN's heuristics, by measurement
 * (algo_cache.c) or fixed; deterministic, FMA math unless --precision tf32
 * or bf16; the forward's bias and ReLU inside cuDNN's fused call where it
 * takes them (see "the forward's epilogue"), else through elementwise.cu;
 * their gradients through reductions.cu.
 * ops_cuda.c's table names the four ops.
 *
 * --precision bf16 (cuDNN's PSEUDO_BFLOAT16_CONFIG: x, w and y bf16, the
 * convolution descriptor's compute type FLOAT, alpha and beta floats): a
 * convolution's output is a stored bf16 activation (layout_cuda.h): cuDNN
 * writes it in place, the bias and fused ReLU added in FP32 and rounded
 * once more (elementwise.cu's bias_act on bf16); an input stored in bf16 is
 * cuDNN's operand as it is, an FP32 one (the images) is cast in the arena
 * and kept for the backward, as is the weight's copy (node->saved,
 * dp_cuda_bf16_operands). The backward's bf16 dy (the masked dy of a fused
 * ReLU written in bf16 directly) and cuDNN's bf16 results on their way to
 * the FP32 gradients live in the context's bf16 scratch (plan_scratch),
 * not in the arena; a gradient is written or added in FP32 (conv_run).
 * conv_transpose's output stays FP32 (its input converted to FP32 first).
 *
 * Channels-last (layout_cuda.h): a 2-D conv whose input is NHWC runs with
 * NHWC tensor descriptors and a KRSC filter (a copy made by each forward,
 * kept for the backward; cast to bf16 after the transpose with --precision
 * bf16; the filter itself where KRSC and KCRS are the same bytes: 1 x 1 or
 * one input channel per group); cuDNN's KRSC weight gradient is transposed
 * back and written or added into the NCHW gradient; bias and ReLU over an (N H W, K, 1) tensor.
 * The plan key and the stored choice key name the layout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../conv_shape.h"
#include "algo_cache.h"
#include "algo_choices.h"
#include "cuda_parts.h"
#include "kernels.h"
#include "layout_cuda.h"
#include "precision.h"
#include "ops_cuda_common.h"

static const float one = 1.0f;

#define CUDNN_TRY(c, call, what)                                                                                   \
    do {                                                                                                           \
        cudnnStatus_t s_ = (call);                                                                                 \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                                          \
            status = dp_cuda_cudnn_fail(c, s_, what);                                                              \
            goto done;                                                                                             \
        }                                                                                                          \
    } while (0)

/* --- conv and conv_transpose (1-D to 3-D) with cuDNN -------------------------------- *
 * A cuDNN convolution of x (N, C, in...) by w (K, C / groups, k...) into y
 * (N, K, out...). 2-D and 1-D run as 4-D NCHW tensors (1-D: H = 1 with a
 * kernel of 1, stride 1, pad 0, dilation 1 there), 3-D as 5-D NCDHW ones;
 * the Nd descriptors with packed strides for both.
 *
 * Plans. A convolution's descriptors and its algorithm for each direction
 * (forward, backward data, backward filter) are made once per shape and
 * kept in the GPU's context (c->conv_plans, under its lock): the key is the
 * op (conv or conv_transpose), --precision and the whole geometry. By
 * default (DPTRAIN_CUDNN_ALGO=measured) the algorithms are timed
 * (cudnnFind*Algorithm, once per shape and direction) and the fastest
 * result that qualifies is taken: it succeeded, is deterministic, has FMA
 * math (also default or tensor-op math with --precision tf32 or bf16:
 * tensor cores) and a workspace within workspace_limit. The choice
 * is kept in a cache file keyed by the GPU's name, cuDNN's version and the
 * shape (algo_cache.h), so that later runs take the same algorithm (the
 * same bits) without timing it again. DPTRAIN_CUDNN_ALGO=heuristic takes
 * cuDNN's heuristics instead (cudnnGet*Algorithm_v7: no timing, no file):
 * the first result in cuDNN's order that qualifies. The fixed algorithm
 * (CONV_*_ALGO) comes after them, or alone when none qualifies or
 * DPTRAIN_CUDNN_ALGO=fixed. Measured is the default because it was the
 * faster on a GPU: ResNet-18 at batch 256 on an H200 trained at 12,215
 * images/s measured, 8,732 heuristic, 6,465 fixed (2026-11-27,
 * bench/gpu_vs_pytorch.sh). Ahead of every mode: a choice installed from a checkpoint
 * (algo_choices.h), alone, so that a resumed run computes as the run it
 * continues; one cuDNN does not know or refuses is one warning line, then
 * the mode's choice. The algorithm each direction first succeeded with is
 * recorded there for the next checkpoint. Sizes are checked first: a tensor of 2^31 elements or more, which
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

/* The largest workspace a candidate may ask for (workspace_limit): never
 * the free memory of the moment (that would make the choice, hence the
 * bits, vary between runs), but a function of the convolution's shape and
 * the GPU: CONV_WORKSPACE_PER_BYTE times the bytes of its larger tensor (x
 * or y, 4 bytes an element), at least CONV_WORKSPACE_FLOOR, at most
 * 1/CONV_WORKSPACE_GPU_SHARE of the GPU's memory. One buffer per GPU is
 * grown to the largest need. Why it grows with the tensors: an FFT or
 * Winograd algorithm's workspace holds transforms of x and y, a few times
 * their size, so a fixed 256 MiB let ResNet-18's fastest algorithms in at
 * batch 256 and shut them out at 512 (an H200, 2026-11-28: 12,171
 * images/s at 256, 9,533 at 512, where PyTorch, whose cudnn.benchmark
 * takes any workspace it can allocate, went from 11,658 to 12,914; not yet
 * shown to be the whole cause on a GPU). 8x the larger tensor admits them at any
 * batch; the cap keeps one layer's workspace under 6.25% of the GPU. */
#define CONV_WORKSPACE_FLOOR ((size_t)256 << 20)
#define CONV_WORKSPACE_PER_BYTE 8
#define CONV_WORKSPACE_GPU_SHARE 16
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
static const int algo_count[CONV_DIRECTIONS] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};
static const char *const dir_names[CONV_DIRECTIONS] = {"forward", "backward data", "backward filter"};

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
    int precision; /* dp_precision_t: the data type (bf16: BFLOAT16 tensors) and math type (fp32: FMA) */
    int layout;    /* DP_CUDA_NCHW, or DP_CUDA_NHWC (2-D conv only): x, y NHWC, the filter KRSC */
    conv_geom_t g;
} plan_key_t;

/* A direction's candidates in order; algo[next] is the one that runs,
 * those before it were refused. */
typedef struct {
    int listed;    /* 0: not asked for yet */
    int installed; /* 1: algo[0], alone, is a checkpoint's choice (algo_choices.h) */
    int recorded;  /* 1: the one that ran is recorded (dp_algo_choice_ran) */
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
    cudnnTensorDescriptor_t bias;     /* the fused epilogue's bias (1, K, 1...), made at its first use */
    cudnnActivationDescriptor_t act;  /* its activation: set to IDENTITY or RELU before each call */
    int epilogue_refused[2];          /* cuDNN refused the fused call without (0) or with (1) a ReLU: not again */
} conv_plan_t;

typedef enum { ALGO_HEURISTIC, ALGO_FIXED, ALGO_MEASURED } algo_mode_t;

struct dp_cuda_conv_plans {
    int mode;      /* DPTRAIN_CUDNN_ALGO: algo_mode_t, measured by default */
    char gpu[192]; /* "GPU name|cuDNN version", the first part of a choice's key (cache file, checkpoint) */
    int log;       /* DPTRAIN_CUDNN_ALGO_LOG set (not 0): a stderr line per choice */
    int epilogue;  /* DPTRAIN_CONV_EPILOGUE: 1 cudnn (the default), 0 own */
    int direct;    /* DPTRAIN_CONV_DIRECT: 1 on, 0 off (the default) */
    size_t gpu_memory; /* the GPU's total memory (cudaDeviceProp), for workspace_limit's cap */
    uint64_t uses;
    conv_plan_t plan[CONV_PLAN_SLOTS];
};

static void plan_destroy(conv_plan_t *p) {
    if (p->x) cudnnDestroyTensorDescriptor(p->x);
    if (p->y) cudnnDestroyTensorDescriptor(p->y);
    if (p->w) cudnnDestroyFilterDescriptor(p->w);
    if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
    if (p->bias) cudnnDestroyTensorDescriptor(p->bias);
    if (p->act) cudnnDestroyActivationDescriptor(p->act);
    *p = (conv_plan_t){0};
}

/* The convolution descriptor's math type per --precision (plan_make). */
static cudnnMathType_t conv_math(int precision) {
    return precision == DP_PRECISION_FP32 ? CUDNN_FMA_MATH
           : precision == DP_PRECISION_BF16 ? CUDNN_TENSOR_OP_MATH
                                            : CUDNN_DEFAULT_MATH;
}

/* The tensors' and filter's data type for a precision: bf16 or float. */
static cudnnDataType_t data_type(int precision) {
    return precision == DP_PRECISION_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* An NC(D)HW tensor descriptor of g->nb dims, packed; nhwc (4-D only): the
 * same dims with (N, H, W, C) strides. */
static cudnnStatus_t set_tensor(const conv_geom_t *g, cudnnTensorDescriptor_t t, cudnnDataType_t type, int channels,
                                const int size[3], int nhwc) {
    int dims[5] = {g->N, channels}, strides[5];
    for (int i = 0; i < g->nb - 2; i++) dims[2 + i] = size[3 - (g->nb - 2) + i];
    strides[g->nb - 1] = 1;
    for (int i = g->nb - 2; i >= 0; i--) strides[i] = strides[i + 1] * dims[i + 1];
    if (nhwc) { /* dims (N, C, H, W) */
        strides[1] = 1;
        strides[3] = channels;
        strides[2] = dims[3] * channels;
        strides[0] = dims[2] * dims[3] * channels;
    }
    return cudnnSetTensorNdDescriptor(t, type, g->nb, dims, strides);
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
    const cudnnDataType_t type = data_type(p->key.precision);
    const int nhwc = p->key.layout == DP_CUDA_NHWC;
    CUDNN_TRY(c, set_tensor(g, p->x, type, g->C, g->in, nhwc), op);
    CUDNN_TRY(c, set_tensor(g, p->y, type, g->K, g->out, nhwc), op);
    CUDNN_TRY(c, cudnnSetFilterNdDescriptor(p->w, type, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, g->nb, fdims),
              op);
    CUDNN_TRY(c, cudnnSetConvolutionNdDescriptor(p->conv, g->nb - 2, pad, stride, dilation, CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT),
              op);
    CUDNN_TRY(c, cudnnSetConvolutionGroupCount(p->conv, g->groups), op);
    /* FP32: FMA only, no TF32; tf32: the default math type (TF32's tensor cores allowed); bf16: tensor-op
     * math, without which cuDNN's legacy convolution calls use no tensor cores (cuDNN's "Legacy API" guide:
     * tensor cores "only when cudnnSetConvolutionMathType() is called ... CUDNN_TENSOR_OP_MATH"); with the
     * default math an H200 ran bf16 backward passes 8-20x slower than FP32's (2026-11-27). The compute type
     * (set above) is FLOAT in every precision: bf16 sums in FP32. */
    CUDNN_TRY(c, cudnnSetConvolutionMathType(p->conv, conv_math(p->key.precision)), op);
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

dp_status_t dp_cuda_conv_settings(int *algo_mode, int *epilogue, int *direct) {
    const char *mode = getenv("DPTRAIN_CUDNN_ALGO");
    *algo_mode = !mode || !*mode || strcmp(mode, "measured") == 0 ? ALGO_MEASURED
                 : strcmp(mode, "heuristic") == 0                  ? ALGO_HEURISTIC
                 : strcmp(mode, "fixed") == 0                      ? ALGO_FIXED
                                                                   : -1;
    if (*algo_mode < 0)
        return dp_fail(DP_ERR_ARG, "DPTRAIN_CUDNN_ALGO must be measured (the default), heuristic or fixed, found '%s'",
                       mode);
    const char *ep = getenv("DPTRAIN_CONV_EPILOGUE");
    *epilogue = !ep || !*ep || strcmp(ep, "cudnn") == 0 ? 1 : strcmp(ep, "own") == 0 ? 0 : -1;
    if (*epilogue < 0)
        return dp_fail(DP_ERR_ARG, "DPTRAIN_CONV_EPILOGUE must be cudnn (the default) or own, found '%s'", ep);
    const char *d = getenv("DPTRAIN_CONV_DIRECT");
    *direct = !d || !*d || strcmp(d, "off") == 0 ? 0 : strcmp(d, "on") == 0 ? 1 : -1;
    if (*direct < 0) return dp_fail(DP_ERR_ARG, "DPTRAIN_CONV_DIRECT must be on or off (the default), found '%s'", d);
    return DP_OK;
}

/* The plan of (op, --precision, layout, g): found, or made in a free slot or in place of
 * the least recently used one. The first convolution of a GPU reads
 * DPTRAIN_CUDNN_ALGO, DPTRAIN_CONV_EPILOGUE and DPTRAIN_CONV_DIRECT. */
static dp_status_t conv_plan(dp_cuda_ctx_t *c, plan_op_t op, const conv_geom_t *g, int layout, conv_plan_t **out) {
    *out = NULL;
    if (!c->conv_plans) {
        int m, epilogue, direct;
        DP_TRY(dp_cuda_conv_settings(&m, &epilogue, &direct));
        if (!(c->conv_plans = dp_alloc_zeroed(1, sizeof *c->conv_plans, "cuDNN convolution plans"))) return DP_ERR_NOMEM;
        c->conv_plans->mode = m;
        struct cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, c->gpu) != cudaSuccess) {
            cudaGetLastError();
            snprintf(prop.name, sizeof prop.name, "unnamed GPU");
            prop.totalGlobalMem = 0;
        }
        snprintf(c->conv_plans->gpu, sizeof c->conv_plans->gpu, "%.160s|cuDNN %zu", prop.name, cudnnGetVersion());
        c->conv_plans->gpu_memory = prop.totalGlobalMem;
        const char *log = getenv("DPTRAIN_CUDNN_ALGO_LOG");
        c->conv_plans->log = log && *log && strcmp(log, "0") != 0;
        c->conv_plans->epilogue = epilogue;
        c->conv_plans->direct = direct;
    }
    struct dp_cuda_conv_plans *plans = c->conv_plans;
    plan_key_t key;
    memset(&key, 0, sizeof key);
    key.op = op, key.precision = (int)c->precision, key.layout = layout, key.g = *g;
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

/* The largest workspace p's algorithms may take (see CONV_WORKSPACE_FLOOR). */
static size_t workspace_limit(const dp_cuda_ctx_t *c, const conv_plan_t *p) {
    const conv_geom_t *g = &p->key.g;
    size_t x = (size_t)g->N * (size_t)g->C, y = (size_t)g->N * (size_t)g->K;
    for (int i = 0; i < 3; i++) x *= (size_t)g->in[i], y *= (size_t)g->out[i];
    size_t limit = CONV_WORKSPACE_PER_BYTE * sizeof(float) * (x > y ? x : y);
    size_t cap = c->conv_plans->gpu_memory / CONV_WORKSPACE_GPU_SHARE;
    if (cap && limit > cap) limit = cap;
    return limit > CONV_WORKSPACE_FLOOR ? limit : CONV_WORKSPACE_FLOOR;
}

/* A result dptrain may run: it succeeded, is deterministic, keeps FP32
 * (FMA; tensor-core math only with --precision tf32 or bf16) and fits the
 * workspace limit. */
static int qualifies(const dp_cuda_ctx_t *c, const conv_plan_t *p, const algo_perf_t *r) {
    if (r->status != CUDNN_STATUS_SUCCESS || r->determinism != CUDNN_DETERMINISTIC || r->memory > workspace_limit(c, p))
        return 0;
    return r->math == CUDNN_FMA_MATH ||
           (p->key.precision != DP_PRECISION_FP32 && (r->math == CUDNN_DEFAULT_MATH || r->math == CUDNN_TENSOR_OP_MATH));
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

/* The key of direction dir of p: "GPU|cuDNN VERSION|OP GEOMETRY PRECISION[ tensor-op][ nhwc]|DIRECTION"
 * (algo_cache.h, algo_choices.h): an NHWC convolution's choices are its own, never an NCHW one's; bf16's
 * carry its tensor-op math type, so that a choice made under the default math (before 2026-11-27: other
 * kernels, other bits) is not taken for one. */
static const char *choice_key(const dp_cuda_ctx_t *c, const conv_plan_t *p, conv_dir_t dir, char *key, size_t size) {
    char gs[192];
    snprintf(key, size, "%s|%s %s %s%s%s|%s", c->conv_plans->gpu, p->key.op == PLAN_CONV ? "conv" : "conv_transpose",
             conv_str(p, gs, sizeof gs), dp_precision_name((dp_precision_t)p->key.precision),
             conv_math(p->key.precision) == CUDNN_TENSOR_OP_MATH ? " tensor-op" : "",
             p->key.layout == DP_CUDA_NHWC ? " nhwc" : "", dir_names[dir]);
    return key;
}

/* A checkpoint's choice for direction dir of p (algo_choices.h), alone in a; 0 when none is installed or its
 * number is unknown to this cuDNN (one warning line). */
static int installed_candidate(dp_cuda_ctx_t *c, conv_plan_t *p, conv_dir_t dir, plan_algos_t *a, char *why,
                               size_t why_size) {
    char key[512], problem[96];
    int algo = dp_algo_choice_installed(choice_key(c, p, dir, key, sizeof key));
    if (algo < 0) return 0;
    if (algo >= algo_count[dir]) {
        snprintf(problem, sizeof problem, "unknown to cuDNN %zu (its algorithms are 0 to %d)", cudnnGetVersion(),
                 algo_count[dir] - 1);
        dp_algo_choice_refused(c->name, key, algo, problem);
        return 0;
    }
    add_candidate(a, algo);
    a->installed = 1;
    snprintf(why, why_size, "installed from the checkpoint");
    return 1;
}

/* Measured (DPTRAIN_CUDNN_ALGO=measured): direction dir's algorithm from
 * the cache file (algo_cache.h), or the fastest qualifying result of
 * cuDNN's cudnnFind*Algorithm (ties: the first listed), stored there; the
 * fixed algorithm when none qualifies (not stored). `why` says which. */
static void measured_candidate(dp_cuda_ctx_t *c, conv_plan_t *p, conv_dir_t dir, plan_algos_t *a, char *why,
                               size_t why_size) {
    char key[512];
    choice_key(c, p, dir, key, sizeof key);
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
        if (qualifies(c, p, &perf[i]) && perf[i].time >= 0) {
            qualified++;
            if (best < 0 || perf[i].time < perf[best].time) best = i;
        }
    if (best < 0) {
        snprintf(why, why_size, "the fixed one: none of %d measured results qualified", n);
        return;
    }
    add_candidate(a, perf[best].algo);
    dp_algo_cache_put(key, perf[best].algo);
    /* the fastest result shut out by the workspace limit alone, when faster (DPTRAIN_CUDNN_ALGO_LOG's line) */
    int over = -1;
    size_t limit = workspace_limit(c, p);
    for (int i = 0; i < n; i++) {
        algo_perf_t within = perf[i];
        within.memory = 0;
        if (perf[i].memory > limit && perf[i].time >= 0 && perf[i].time < perf[best].time && qualifies(c, p, &within) &&
            (over < 0 || perf[i].time < perf[over].time))
            over = i;
    }
    char shut[96] = "";
    if (over >= 0)
        snprintf(shut, sizeof shut, "; algorithm %d, %.3f ms, needs %.0f MiB, over the limit of %.0f MiB", perf[over].algo,
                 perf[over].time, perf[over].memory / 1048576.0, limit / 1048576.0);
    snprintf(why, why_size, "measured: the fastest of %d qualified of %d, %.3f ms, %.0f MiB of workspace%s", qualified, n,
             perf[best].time, perf[best].memory / 1048576.0, shut);
}

/* Direction dir's candidates: a checkpoint's choice alone
 * (installed_candidate); else the qualifying heuristic results in cuDNN's
 * order (none with DPTRAIN_CUDNN_ALGO=fixed or when the query fails), or
 * the measured choice (measured_candidate), then the fixed algorithm. With
 * DPTRAIN_CUDNN_ALGO_LOG, one stderr line says which algorithm comes first
 * and why (on a GPU: whether the heuristics gave anything the filter
 * keeps). */
static void list_candidates(dp_cuda_ctx_t *c, conv_plan_t *p, conv_dir_t dir) {
    plan_algos_t *a = &p->algos[dir];
    int n = 0, first = -1, qualified = 0;
    char why[256] = "";
    *a = (plan_algos_t){.listed = 1};
    if (installed_candidate(c, p, dir, a, why, sizeof why)) {
        /* the mode's candidates only once cuDNN refuses it (conv_run) */
    } else if (c->conv_plans->mode == ALGO_HEURISTIC) {
        algo_perf_t perf[CONV_HEURISTIC_MAX];
        algo_results(c, p, dir, 0, perf, &n);
        for (int i = 0; i < n; i++)
            if (qualifies(c, p, &perf[i])) {
                if (first < 0) first = i;
                qualified++;
                add_candidate(a, perf[i].algo);
            }
        if (first >= 0) snprintf(why, sizeof why, "heuristic result %d of %d, %d qualified", first + 1, n, qualified);
        else snprintf(why, sizeof why, "the fixed one: none of %d heuristic results qualified", n);
    } else if (c->conv_plans->mode == ALGO_MEASURED) {
        measured_candidate(c, p, dir, a, why, sizeof why);
    } else {
        snprintf(why, sizeof why, "the fixed one: DPTRAIN_CUDNN_ALGO=fixed");
    }
    if (!a->installed) add_candidate(a, fixed_algo[dir]);
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

static size_t plane_of(const int size[3]) { return (size_t)size[0] * size[1] * size[2]; }

/* The values direction dir of p writes: y, dx or dw. */
static size_t result_count(const conv_plan_t *p, conv_dir_t dir) {
    const conv_geom_t *g = &p->key.g;
    if (dir == CONV_FORWARD) return (size_t)g->N * g->K * plane_of(g->out);
    if (dir == CONV_BACKWARD_DATA) return (size_t)g->N * g->C * plane_of(g->in);
    return (size_t)g->K * (g->C / g->groups) * plane_of(g->k);
}

/* --- the forward's epilogue: bias and ReLU inside cuDNN's convolution -------------------
 * cudnnConvolutionBiasActivationForward computes y = act(conv(x) + bias)
 * in the convolution's own kernel (alpha2 = 0: z, given as y, not read),
 * saving the pass of bias_act over y: the bits of conv + bias + ReLU in
 * turn (one FP32 addition, then the ReLU). cuDNN takes IDENTITY with every
 * forward algorithm and RELU only with IMPLICIT_PRECOMP_GEMM, so a fused
 * ReLU asks for that algorithm being the plan's; otherwise, or where cuDNN
 * refuses the call (the plan remembers), the convolution runs alone and
 * the caller's bias_act does the rest. FP32 and TF32 plans of conv only;
 * DPTRAIN_CONV_EPILOGUE=own keeps the separate pass everywhere (for
 * comparing the two). */
typedef struct {
    const float *bias; /* (K) */
    int relu;
    int done; /* out: 1 when cuDNN applied the bias (and the ReLU) */
} conv_epilogue_t;

/* 1 when the fused call is worth a try for algorithm `algo` of p's forward. */
static int epilogue_takes(const dp_cuda_ctx_t *c, const conv_plan_t *p, const conv_epilogue_t *ep, int algo) {
    return ep && c->conv_plans->epilogue && p->key.op == PLAN_CONV && p->key.precision != DP_PRECISION_BF16 &&
           !p->epilogue_refused[ep->relu] && (!ep->relu || algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
}

/* The fused forward with algorithm `algo`: y = act(conv(a, b) + bias). */
static cudnnStatus_t convolve_epilogue(dp_cuda_ctx_t *c, conv_plan_t *p, int algo, const void *a, const void *b,
                                       const conv_epilogue_t *ep, void *y, size_t bytes) {
    const conv_geom_t *g = &p->key.g;
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    if (!p->bias) {
        int dims[5] = {1, g->K, 1, 1, 1}, strides[5] = {g->K, 1, 1, 1, 1};
        if ((s = cudnnCreateTensorDescriptor(&p->bias)) != CUDNN_STATUS_SUCCESS ||
            (s = cudnnSetTensorNdDescriptor(p->bias, CUDNN_DATA_FLOAT, g->nb, dims, strides)) != CUDNN_STATUS_SUCCESS)
            return s;
    }
    if (!p->act && (s = cudnnCreateActivationDescriptor(&p->act)) != CUDNN_STATUS_SUCCESS) return s;
    /* NaN kept through the ReLU, as bias_act's v < 0 ? 0 : v keeps it */
    if ((s = cudnnSetActivationDescriptor(p->act, ep->relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                                          CUDNN_PROPAGATE_NAN, 0.0)) != CUDNN_STATUS_SUCCESS)
        return s;
    static const float zero = 0.0f;
    return cudnnConvolutionBiasActivationForward(c->cudnn, &one, p->x, a, p->w, b, p->conv,
                                                 (cudnnConvolutionFwdAlgo_t)algo, c->workspace, bytes, &zero, p->y, y,
                                                 p->bias, ep->bias, p->act, p->y, y);
}

/* Direction dir of plan p: out = conv(a, b) + beta out (convolve()), with
 * the direction's current candidate, passing over (for good) those cuDNN
 * refuses; a checkpoint's choice refused: one warning line, and the
 * mode's candidates listed in its place. The first that succeeds is
 * recorded for the next checkpoint. A bf16 plan's operands a and b are
 * bf16, and so is its result: written into out directly when `half` is
 * NULL (out a stored bf16 activation), else into half (scratch of the
 * result's size, plan_scratch) and from there to out in FP32 (written when
 * beta is 0, else added); an FP32 plan's out is FP32 (half NULL). With
 * `ep` (an FP32 forward with a bias): the epilogue's fused call where it
 * is taken (ep->done set). */
static dp_status_t conv_run_epilogue(dp_cuda_ctx_t *c, conv_plan_t *p, conv_dir_t dir, const void *a, const void *b,
                                     float beta, void *out, uint16_t *half, conv_epilogue_t *ep, const char *what) {
    plan_algos_t *al = &p->algos[dir];
    if (!al->listed) list_candidates(c, p, dir);
    void *dst = half ? (void *)half : out;
    float dst_beta = half ? 0.0f : beta;
    const size_t n = result_count(p, dir);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    for (; al->next < al->count; al->next++) {
        int algo = al->algo[al->next];
        size_t bytes = 0;
        if ((s = workspace_query(c, p, dir, algo, &bytes)) != CUDNN_STATUS_SUCCESS) continue;
        DP_TRY(dp_cuda_workspace(c, bytes));
        if (epilogue_takes(c, p, ep, algo)) {
            s = convolve_epilogue(c, p, algo, a, b, ep, dst, bytes);
            ep->done = s == CUDNN_STATUS_SUCCESS;
            if (s == CUDNN_STATUS_NOT_SUPPORTED || s == CUDNN_STATUS_BAD_PARAM) { /* refused: the plain call */
                p->epilogue_refused[ep->relu] = 1;
                s = convolve(c, p, dir, algo, a, b, &dst_beta, dst, bytes);
            }
        } else {
            s = convolve(c, p, dir, algo, a, b, &dst_beta, dst, bytes);
        }
        if (s == CUDNN_STATUS_SUCCESS && !al->recorded) {
            char key[512];
            dp_algo_choice_ran(choice_key(c, p, dir, key, sizeof key), algo);
            al->recorded = 1;
        }
        if (s == CUDNN_STATUS_SUCCESS)
            return half ? dp_cuda_launch(c, dp_cuda_from_bf16(c->stream, half, out, n, beta != 0.0f), what) : DP_OK;
        if (s != CUDNN_STATUS_NOT_SUPPORTED) return dp_cuda_cudnn_fail(c, s, what);
    }
    if (al->installed) { /* refused: then as if none were installed (the choice is not offered again) */
        char key[512], problem[96];
        snprintf(problem, sizeof problem, "refused by cuDNN on this GPU (%s)", cudnnGetErrorString(s));
        dp_algo_choice_refused(c->name, choice_key(c, p, dir, key, sizeof key), al->algo[0], problem);
        *al = (plan_algos_t){0};
        return conv_run_epilogue(c, p, dir, a, b, beta, out, half, ep, what);
    }
    return no_algorithm_left(c, p, al, s, what);
}

static dp_status_t conv_run(dp_cuda_ctx_t *c, conv_plan_t *p, conv_dir_t dir, const void *a, const void *b, float beta,
                            void *out, uint16_t *half, const char *what) {
    return conv_run_epilogue(c, p, dir, a, b, beta, out, half, NULL, what);
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
    return conv_plan(c, PLAN_CONV, &g, g.nb == 4 && dp_cuda_is_nhwc(node->in[0]) ? DP_CUDA_NHWC : DP_CUDA_NCHW, p);
}

/* The output shape (N, channels, size of the spatial dims the input has). */
static void spatial_shape(int ndim, int N, int channels, const int size[3], int shape[DP_MAX_DIMS]) {
    shape[0] = N, shape[1] = channels;
    for (int s = 0; s < ndim - 2; s++) shape[2 + s] = size[3 - (ndim - 2) + s];
}

/* A bf16 plan's operands: the bf16 copies of the node's input and weight
 * (dp_cuda_bf16_operands: made by the forward, kept for the backward) in
 * place of *x and *w, an input stored in bf16 (layout_cuda.h) taken as it
 * is; an FP32 plan's stay. */
static dp_status_t bf16_operands(dp_cuda_ctx_t *c, const conv_plan_t *p, dp_arena_t *arena, dp_node_t *node,
                                 const void **x, const void **w) {
    if (p->key.precision != DP_PRECISION_BF16) return DP_OK;
    const uint16_t *xb, *wb;
    DP_TRY(dp_cuda_bf16_operands(c, arena, node, *x, dp_cuda_is_bf16(node->in[0]), dp_tensor_numel(node->in[0]), *w,
                                 dp_tensor_numel(node->in[1]), &xb, &wb,
                                 node->kind == DP_OP_CONV ? "conv" : "conv_transpose"));
    *x = xb, *w = wb;
    return DP_OK;
}

/* A bf16 plan's scratch for one op (dp_cuda_bf16_scratch): `front`
 * values for the op's bf16 gradient operand in *front_at, then room for the
 * largest of the results of the directions in `dirs` (a bit per conv_dir_t)
 * on their way to FP32 in *half; NULL both in the other precisions. */
static dp_status_t plan_scratch(dp_cuda_ctx_t *c, const conv_plan_t *p, size_t front, int dirs, uint16_t **front_at,
                                uint16_t **half) {
    *front_at = *half = NULL;
    if (p->key.precision != DP_PRECISION_BF16) return DP_OK;
    size_t results = 0;
    for (int d = 0; d < CONV_DIRECTIONS; d++)
        if ((dirs >> d & 1) && result_count(p, (conv_dir_t)d) > results) results = result_count(p, (conv_dir_t)d);
    front = (front + 63) / 64 * 64; /* the results 128-byte aligned */
    uint16_t *s;
    DP_TRY(dp_cuda_bf16_scratch(c, front + results, &s));
    *front_at = s, *half = s + front;
    return DP_OK;
}

/* A bf16 plan's gradient operand: a bf16 copy of dy (n floats) into `to`
 * (plan_scratch's front), in *out. */
static dp_status_t bf16_gradient(dp_cuda_ctx_t *c, const conv_plan_t *p, const float *dy, size_t n, uint16_t *to,
                                 const void **out) {
    if (p->key.precision != DP_PRECISION_BF16) return DP_OK;
    *out = to;
    return dp_cuda_launch(c, dp_cuda_to_bf16(c->stream, dy, to, n), "a convolution's gradient");
}

/* 1 when a filter's KRSC order is its KCRS order (one input channel per
 * group, or a 1 x 1 kernel): no copy or transpose is needed. */
static int krsc_is_kcrs(const conv_geom_t *g) { return g->C / g->groups == 1 || plane_of(g->k) == 1; }

/* NHWC plans: *out = a KRSC copy of the NCHW (KCRS) filter w, in the
 * arena, or w itself where the two orders are the same bytes. */
static dp_status_t krsc_filter(dp_cuda_ctx_t *c, const conv_plan_t *p, dp_arena_t *arena, const float *w, void **out) {
    const conv_geom_t *g = &p->key.g;
    if (krsc_is_kcrs(g)) {
        *out = (void *)w; /* read only: the forward's and backward's operand */
        return DP_OK;
    }
    const size_t n = result_count(p, CONV_BACKWARD_FILTER);
    float *krsc = dp_arena_floats(arena, n);
    *out = krsc;
    if (!krsc) return dp_fail(DP_ERR_NOMEM, "conv: out of GPU memory for a KRSC filter of %zu floats", n);
    return dp_cuda_launch(c, dp_cuda_layout_copy(c->stream, w, krsc, g->K, g->C / g->groups, plane_of(g->k), 1, 0),
                          "conv KRSC filter");
}

/* DPTRAIN_CONV_DIRECT=on: 1 when the forward of p runs as conv_direct.cu's
 * kernel (bias and ReLU inside) instead of cuDNN's, *dg its geometry: a
 * 2-D convolution of one group, FP32, NCHW, dp_cuda_conv_direct_fits. The
 * backward stays cuDNN's. Off by default until a GPU has timed it
 * (bench/gpu_vs_pytorch.sh's LeNet line). */
static int direct_takes(const dp_cuda_ctx_t *c, const conv_plan_t *p, dp_cuda_conv_direct_t *dg) {
    const conv_geom_t *g = &p->key.g;
    if (!c->conv_plans->direct || p->key.op != PLAN_CONV || p->key.precision != DP_PRECISION_FP32 ||
        p->key.layout != DP_CUDA_NCHW || g->nb != 4 || g->groups != 1)
        return 0;
    *dg = (dp_cuda_conv_direct_t){.N = g->N, .C = g->C, .H = g->in[1], .W = g->in[2], .K = g->K, .OH = g->out[1],
                                  .OW = g->out[2], .kh = g->k[1], .kw = g->k[2], .sh = g->stride[1],
                                  .sw = g->stride[2], .ph = g->pad[1], .pw = g->pad[2], .dh = g->dilation[1],
                                  .dw = g->dilation[2]};
    return dp_cuda_conv_direct_fits(dg);
}

dp_status_t dp_cuda_conv_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    conv_plan_t *p;
    DP_TRY(conv_plan_of(c, node, &p));
    const conv_geom_t *g = &p->key.g;
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    int shape[DP_MAX_DIMS];
    spatial_shape(x->ndim, g->N, g->K, g->out, shape);
    const int nhwc = p->key.layout == DP_CUDA_NHWC;
    /* y in the plan's layout; bf16 in a bf16 plan (cuDNN's result as it is) */
    DP_TRY(dp_cuda_act_output(c, node, "conv", x->ndim, shape, x->grad || w->grad || (b && b->grad), arena,
                              nhwc ? DP_CUDA_NHWC : DP_CUDA_NCHW));
    const void *xa = x->data, *wa = w->data;
    if (nhwc) { /* the filter in KRSC, a copy per forward (kept for the backward in FP32) */
        DP_TRY(krsc_filter(c, p, arena, w->data, &node->saved));
        wa = node->saved;
        if (p->key.precision == DP_PRECISION_BF16) node->saved = NULL; /* bf16_operands' block in its place */
    }
    DP_TRY(bf16_operands(c, p, arena, node, &xa, &wa));
    const int yb = dp_cuda_is_bf16(&node->out); /* in a bf16 plan: cuDNN's result is y */
    dp_cuda_conv_direct_t dg;
    if (direct_takes(c, p, &dg))
        return dp_cuda_launch(c, dp_cuda_conv_direct_forward(c->stream, &dg, xa, wa, b ? b->data : NULL,
                                                             node->out.data, node->attr.fuse_relu),
                              "conv forward (direct)");
    conv_epilogue_t ep = {b ? b->data : NULL, node->attr.fuse_relu, 0};
    DP_TRY(conv_run_epilogue(c, p, CONV_FORWARD, xa, wa, 0.0f, node->out.data, NULL, b ? &ep : NULL, "conv forward"));
    int rows = g->N;
    size_t L = plane_of(g->out);
    dp_cuda_channel_view(nhwc, &rows, &L);
    if (!ep.done && (b || node->attr.fuse_relu))
        return dp_cuda_launch(c, dp_cuda_bias_act(c->stream, node->out.data, b ? b->data : NULL, rows, g->K, L,
                                                  node->attr.fuse_relu, yb),
                      "conv bias");
    return DP_OK;
}

/* The gradients of a convolution's input (into `xt`'s grad) and filter
 * (into `wt`'s grad) from dy over plan p; x_data / w_data are the
 * forward's operands (all three bf16 in a bf16 plan, whose results pass
 * through `half`: plan_scratch's). Each grad is written when unset and
 * added to otherwise (dp_grad_claim). */
static dp_status_t conv_grads(dp_cuda_ctx_t *c, conv_plan_t *p, const void *x_data, const void *w_data,
                              const void *dy, dp_tensor_t *xt, dp_tensor_t *wt, dp_arena_t *arena, uint16_t *half,
                              const char *op) {
    char what[64];
    if (wt && wt->grad && p->key.layout == DP_CUDA_NHWC && !krsc_is_kcrs(&p->key.g)) { /* KRSC, then into KCRS */
        const conv_geom_t *g = &p->key.g;
        const size_t n = result_count(p, CONV_BACKWARD_FILTER);
        float *krsc = dp_arena_floats(arena, n);
        if (!krsc) return dp_fail(DP_ERR_NOMEM, "%s: out of GPU memory for a KRSC filter gradient of %zu floats", op, n);
        snprintf(what, sizeof what, "%s weight gradient", op);
        DP_TRY(conv_run(c, p, CONV_BACKWARD_FILTER, x_data, dy, 0.0f, krsc, half, what));
        const int add = !dp_grad_claim(wt);
        DP_TRY(dp_cuda_launch(c, dp_cuda_layout_copy(c->stream, krsc, wt->grad, g->K, g->C / g->groups, plane_of(g->k),
                                                     0, add),
                              what));
    } else if (wt && wt->grad) {
        const float beta = dp_grad_claim(wt) ? 0.0f : 1.0f;
        snprintf(what, sizeof what, "%s weight gradient", op);
        DP_TRY(conv_run(c, p, CONV_BACKWARD_FILTER, x_data, dy, beta, wt->grad, half, what));
    }
    if (xt && xt->grad) {
        const float beta = dp_grad_claim(xt) ? 0.0f : 1.0f;
        snprintf(what, sizeof what, "%s input gradient", op);
        DP_TRY(conv_run(c, p, CONV_BACKWARD_DATA, w_data, dy, beta, xt->grad, half, what));
    }
    return DP_OK;
}

dp_status_t dp_cuda_conv_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    if (!node->out.grad) return DP_OK;
    conv_plan_t *p;
    DP_TRY(conv_plan_of(c, node, &p));
    const conv_geom_t *g = &p->key.g;
    dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    size_t n_out = dp_tensor_numel(&node->out);
    const float *dy = node->out.grad; /* (N, OC, out...) */
    const int bf16_plan = p->key.precision == DP_PRECISION_BF16;
    uint16_t *dy_half, *half; /* a bf16 plan's: the bf16 dy operand, the results on their way to FP32 */
    DP_TRY(plan_scratch(c, p, n_out, (x->grad ? 1 << CONV_BACKWARD_DATA : 0) | (w->grad ? 1 << CONV_BACKWARD_FILTER : 0),
                        &dy_half, &half));
    void *masked = NULL; /* the gradient through relu (dy where y > 0): in a bf16 plan the bf16 operand itself */
    if (node->attr.fuse_relu && !(masked = bf16_plan ? (void *)dy_half : dp_arena_floats(arena, n_out)))
        return dp_fail(DP_ERR_NOMEM, "conv: out of GPU memory for a gradient of %zu floats", n_out);
    const int nhwc = p->key.layout == DP_CUDA_NHWC;
    int rows = g->N; /* dy in y's layout */
    size_t L = plane_of(g->out);
    dp_cuda_channel_view(nhwc, &rows, &L);
    const int bits = dp_cuda_is_bf16(&node->out) | (bf16_plan ? 2 : 0); /* y's and masked's formats */
    if (b && b->grad) /* the bias gradient (of the FP32 values), and the masked dy in the same pass */
        DP_TRY(dp_cuda_op_bias_grad(c, arena, dy, masked ? node->out.data : NULL, masked, bits, b, rows, g->K, L,
                                    "conv bias gradient"));
    else if (masked)
        DP_TRY(dp_cuda_launch(c, dp_cuda_relu_mask(c->stream, node->out.data, dy, masked, n_out, bits),
                              "conv relu mask"));
    if (!x->grad && !w->grad) return DP_OK;
    const void *xa = x->data, *wa = nhwc ? node->saved : w->data, *dya = dy; /* NHWC: the forward's KRSC filter */
    DP_TRY(bf16_operands(c, p, arena, node, &xa, &wa));
    if (masked) dya = masked;
    else DP_TRY(bf16_gradient(c, p, dy, n_out, dy_half, &dya));
    return conv_grads(c, p, xa, wa, dya, x, w, arena, half, "conv");
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
    return conv_plan(c, PLAN_CONV_TRANSPOSE, &g, DP_CUDA_NCHW, &t->p);
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
    return dp_cuda_launch(c, dp_cuda_window_copy(c->stream, &g, src, dst), "conv_transpose window");
}

dp_status_t dp_cuda_conv_transpose_forward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    convt_t t;
    DP_TRY(convt_plan(c, node, &t));
    const dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    int shape[DP_MAX_DIMS];
    spatial_shape(x->ndim, t.N, t.C_out, t.O, shape);
    size_t buf_n = (size_t)t.N * t.C_out * plane_of(t.B);
    float *buf = NULL;
    DP_TRY(dp_cuda_output(node, "conv_transpose", x->ndim, shape, x->grad || w->grad || (b && b->grad), arena));
    if (t.buffered && !(buf = dp_arena_floats(arena, buf_n)))
        return dp_fail(DP_ERR_NOMEM, "conv_transpose: out of GPU memory for a buffer of %zu floats", buf_n);
    const void *xa = x->data, *wa = w->data;
    uint16_t *unused, *half;
    DP_TRY(bf16_operands(c, t.p, arena, node, &xa, &wa));
    DP_TRY(plan_scratch(c, t.p, 0, 1 << CONV_BACKWARD_DATA, &unused, &half));
    DP_TRY(conv_run(c, t.p, CONV_BACKWARD_DATA, wa, xa, 0.0f, buf ? buf : node->out.data, half,
                    "conv_transpose forward"));
    if (buf) DP_TRY(convt_window(c, &t, buf, node->out.data, 1));
    if (b)
        return dp_cuda_launch(c, dp_cuda_bias_act(c->stream, node->out.data, b->data, t.N, t.C_out, plane_of(t.O), 0, 0),
                      "conv_transpose bias");
    return DP_OK;
}

dp_status_t dp_cuda_conv_transpose_backward(dp_cuda_ctx_t *c, dp_node_t *node, dp_arena_t *arena) {
    if (!node->out.grad) return DP_OK;
    convt_t t;
    DP_TRY(convt_plan(c, node, &t));
    dp_tensor_t *x = node->in[0], *w = node->in[1], *b = node->in[2];
    const float *dy = node->out.grad; /* (N, C_out, O...) */
    if (b && b->grad)
        DP_TRY(dp_cuda_op_bias_grad(c, arena, dy, NULL, NULL, 0, b, t.N, t.C_out, plane_of(t.O),
                                    "conv_transpose bias gradient"));
    if (!x->grad && !w->grad) return DP_OK;
    size_t dy_n = (size_t)t.N * t.C_out * plane_of(t.O);
    if (t.buffered) { /* dy padded into the convolution's input size */
        size_t buf_n = dy_n = (size_t)t.N * t.C_out * plane_of(t.B);
        float *buf = dp_arena_floats(arena, buf_n);
        if (!buf) return dp_fail(DP_ERR_NOMEM, "conv_transpose: out of GPU memory for a buffer of %zu floats", buf_n);
        DP_TRY(convt_window(c, &t, dy, buf, 0));
        dy = buf;
    }
    /* the convolution's input is dy, its output gradient x: its "dx" is our
     * dy's side (not wanted), its "dy" our x; so dx is a forward and dweight
     * a backward filter with the roles of x and dy swapped */
    const void *xa = x->data, *wa = w->data, *dya = dy;
    uint16_t *dy_half, *half;
    DP_TRY(bf16_operands(c, t.p, arena, node, &xa, &wa));
    DP_TRY(plan_scratch(c, t.p, dy_n, (x->grad ? 1 << CONV_FORWARD : 0) | (w->grad ? 1 << CONV_BACKWARD_FILTER : 0),
                        &dy_half, &half));
    DP_TRY(bf16_gradient(c, t.p, dy, dy_n, dy_half, &dya));
    if (x->grad) {
        const float beta = dp_grad_claim(x) ? 0.0f : 1.0f;
        DP_TRY(conv_run(c, t.p, CONV_FORWARD, dya, wa, beta, x->grad, half, "conv_transpose input gradient"));
    }
    if (w->grad) return conv_grads(c, t.p, dya, NULL, xa, NULL, w, arena, half, "conv_transpose");
    return DP_OK;
}
