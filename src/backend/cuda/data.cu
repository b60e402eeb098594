/* data.cu - the batch gather on the GPU: a batch's inputs from the
 * dataset's pixels in device memory as dp_dataset_fill makes them, and its
 * labels (dp_cuda_gather_batch). */
#include "kernels_common.cuh"

/* --- batch: x = pixels[indices] as dp_dataset_fill (/ 255, then normalised), y = labels[indices] --- */
__global__ void gather_kernel(const uint8_t *pixels, const uint8_t *labels, const int *indices, int n, size_t example,
                              const __grid_constant__ dp_cuda_pixel_map_t map, float *x, int32_t *y) {
    const float scale = 1.0f / 255.0f;
    GRID_LOOP(i, (size_t)n * example) {
        size_t e = i / example, j = i % example;
        int index = indices[e];
        float v = __fmul_rn((float)pixels[(size_t)index * example + j], scale);
        if (map.normalize) {
            int c = (int)(j / map.plane);
            v = __fdiv_rn(__fsub_rn(v, map.mean[c]), map.std[c]); /* dataset.c's table, one rounding each */
        }
        x[i] = v;
        if (j == 0) y[e] = labels[index];
    }
}

extern "C" cudaError_t dp_cuda_gather_batch(cudaStream_t stream, const uint8_t *pixels, const uint8_t *labels,
                                            const int *indices, int n, size_t example, const dp_cuda_pixel_map_t *map,
                                            float *x, int32_t *y) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    gather_kernel<<<blocks_for((size_t)n * example), THREADS, 0, stream>>>(pixels, labels, indices, n, example, *map,
                                                                           x, y);
    return cudaGetLastError();
}
