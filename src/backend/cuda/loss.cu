/* loss.cu - the losses, forward and backward: softmax cross-entropy and
 * MSE (ops_loss.c's arithmetic). */
#include "kernels_common.cuh"

/* --- softmax cross-entropy (ops_loss.c's arithmetic) --------------------------- */
/* row_loss[i]: (1 - eps) (lse - x[label]) + eps (lse - mean_k x[k]); eps = 0: lse - x[label], as ever */
__global__ void xent_rows_kernel(const float *x, const int32_t *labels, int N, int K, double eps, float *probs,
                                 double *row_loss) {
    GRID_LOOP(i, (size_t)N) {
        const float *row = x + i * K;
        float *p = probs + i * K;
        float mx = row[0];
        for (int k = 1; k < K; k++)
            if (row[k] > mx) mx = row[k];
        double sum = 0.0;
        for (int k = 0; k < K; k++) {
            p[k] = expf(__fsub_rn(row[k], mx));
            sum += p[k];
        }
        float inv = (float)(1.0 / sum);
        for (int k = 0; k < K; k++) p[k] = __fmul_rn(p[k], inv);
        int label = labels[i];
        if (label < 0 || label >= K) {
            row_loss[i] = (double)NAN;
        } else if (eps > 0.0) {
            double lse = log(sum) + (double)mx, mean = 0.0;
            for (int k = 0; k < K; k++) mean += (double)row[k];
            mean /= K;
            row_loss[i] = (1.0 - eps) * (lse - (double)row[label]) + eps * (lse - mean);
        } else {
            row_loss[i] = log(sum) + (double)mx - (double)row[label];
        }
    }
}

/* One thread: the rows in order, as the CPU's loop. */
__global__ void xent_sum_kernel(const double *row_loss, int N, double denominator, float *loss) {
    double s = 0.0;
    for (int i = 0; i < N; i++) s += row_loss[i];
    loss[0] = (float)(s / denominator);
}

extern "C" cudaError_t dp_cuda_xent_forward(cudaStream_t stream, const float *x, const int32_t *labels, int N, int K,
                                            double denominator, double smoothing, float *probs, double *row_loss,
                                            float *loss) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    xent_rows_kernel<<<blocks_for((size_t)N), THREADS, 0, stream>>>(x, labels, N, K, smoothing, probs, row_loss);
    xent_sum_kernel<<<1, 1, 0, stream>>>(row_loss, N, denominator, loss);
    return cudaGetLastError();
}

/* on, off: the target's entries at the label and elsewhere (1 and 0 without smoothing) */
__global__ void xent_backward_kernel(const float *probs, const int32_t *labels, const float *dy, int N, int K,
                                     double denominator, float on, float off, float *dx, int add) {
    float scale = (float)(dy[0] / denominator);
    GRID_LOOP(i, (size_t)N * K) {
        int n = (int)(i / K), k = (int)(i % K);
        float g = __fmul_rn(scale, __fsub_rn(probs[i], k == labels[n] ? on : off));
        dx[i] = add ? __fadd_rn(dx[i], g) : g;
    }
}

extern "C" cudaError_t dp_cuda_xent_backward(cudaStream_t stream, const float *probs, const int32_t *labels,
                                             const float *dy, int N, int K, double denominator, double smoothing,
                                             float *dx, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    const float on = (float)(1.0 - smoothing + smoothing / K), off = (float)(smoothing / K); /* ops_loss.c's */
    xent_backward_kernel<<<blocks_for((size_t)N * K), THREADS, 0, stream>>>(probs, labels, dy, N, K, denominator, on,
                                                                         off, dx, add);
    return cudaGetLastError();
}

/* --- MSE (ops_loss.c) ------------------------------------------------------------------ */
/* One block: fixed strided partial sums in double, then a fixed tree: the
 * same bits every run (not the CPU's single chain: a tolerance applies). */
__global__ void mse_kernel(const float *x, const float *t, size_t n, double denominator, float *loss) {
    __shared__ double part[THREADS];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += THREADS) {
        double d = (double)x[i] - (double)t[i];
        s += d * d;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = (float)(part[0] / denominator);
}

extern "C" cudaError_t dp_cuda_mse_forward(cudaStream_t stream, const float *x, const float *t, size_t n,
                                           double denominator, float *loss) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    mse_kernel<<<1, THREADS, 0, stream>>>(x, t, n, denominator, loss);
    return cudaGetLastError();
}

__global__ void mse_backward_kernel(const float *x, const float *t, const float *dy, size_t n, double denominator,
                                    float *dx, int add) {
    float scale = (float)(2.0 * dy[0] / denominator);
    GRID_LOOP(i, n) {
        float g = __fmul_rn(scale, __fsub_rn(x[i], t[i]));
        dx[i] = add ? __fadd_rn(dx[i], g) : g;
    }
}

extern "C" cudaError_t dp_cuda_mse_backward(cudaStream_t stream, const float *x, const float *t, const float *dy,
                                            size_t n, double denominator, float *dx, int add) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    mse_backward_kernel<<<blocks_for(n), THREADS, 0, stream>>>(x, t, dy, n, denominator, dx, add);
    return cudaGetLastError();
}
