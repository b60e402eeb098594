/* data.cu - a batch's bytes (uploaded into device memory) as the model's
 * input on the GPU: dp_pixels_to_input's values (dp_cuda_input_from_bytes);
 * boxes of it pasted or erased (dp_cuda_paste_boxes: CutMix, random
 * erasing). */
#include "kernels_common.cuh"

/* x[i] = pixels[i] * (1/255), then normalised by its channel: one rounding each, as the host's table */
__global__ void input_kernel(const uint8_t *pixels, size_t values, const __grid_constant__ dp_cuda_pixel_map_t map,
                             float *x) {
    const float scale = 1.0f / 255.0f;
    GRID_LOOP(i, values) {
        float v = __fmul_rn((float)pixels[i], scale);
        if (map.normalize) {
            int c = (int)((i / map.plane) % (size_t)map.channels);
            v = __fdiv_rn(__fsub_rn(v, map.mean[c]), map.std[c]);
        }
        x[i] = v;
    }
}

extern "C" cudaError_t dp_cuda_input_from_bytes(cudaStream_t stream, const uint8_t *pixels, size_t values,
                                                const dp_cuda_pixel_map_t *map, float *x) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    input_kernel<<<blocks_for(values), THREADS, 0, stream>>>(pixels, values, *map, x);
    return cudaGetLastError();
}

/* One thread per value of the batch: inside its example's box, the source's value or 0 (copies: exact) */
__global__ void paste_boxes_kernel(float *x, const float *src, size_t values, int channels, int height, int width,
                                   const int32_t *boxes) {
    const size_t plane = (size_t)height * (size_t)width;
    GRID_LOOP(i, values) {
        const size_t example = i / (plane * (size_t)channels), at = i % plane;
        const int y = (int)(at / (size_t)width), col = (int)(at % (size_t)width);
        const int32_t *b = boxes + 4 * example; /* y1, y2, x1, x2 */
        if (y >= b[0] && y < b[1] && col >= b[2] && col < b[3]) x[i] = src ? src[i] : 0.0f;
    }
}

extern "C" cudaError_t dp_cuda_paste_boxes(cudaStream_t stream, float *x, const float *src, int n, int channels,
                                           int height, int width, const int32_t *boxes) {
    (void)cudaGetLastError(); /* an error cuDNN/cuBLAS handled must not pass for this launch's */
    const size_t values = (size_t)n * (size_t)channels * (size_t)height * (size_t)width;
    if (values) paste_boxes_kernel<<<blocks_for(values), THREADS, 0, stream>>>(x, src, values, channels, height, width,
                                                                                boxes);
    return cudaGetLastError();
}
