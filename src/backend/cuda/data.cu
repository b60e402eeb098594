/* data.cu - a batch's bytes (uploaded into device memory) as the model's
 * input on the GPU: dp_pixels_to_input's values (dp_cuda_input_from_bytes). */
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
