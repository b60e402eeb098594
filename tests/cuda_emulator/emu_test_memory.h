/* emu_test_memory.h - what the programs that call the emulator's
 * libraries directly (test_emu_bf16.c, test_emu_nhwc.c) share: copies
 * between host memory and the emulator's GPU memory, waited for. */
#ifndef DPTRAIN_EMU_TEST_MEMORY_H
#define DPTRAIN_EMU_TEST_MEMORY_H

#include <cuda_runtime_api.h>

#include "testing.h"

/* bytes of GPU memory, a copy of host's when host is not NULL */
static inline void *device_copy(const void *host, size_t bytes) {
    void *d = NULL;
    CHECK(cudaMalloc(&d, bytes) == cudaSuccess, "cudaMalloc of %zu bytes", bytes);
    if (d && host) cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, NULL), cudaStreamSynchronize(NULL);
    return d;
}

static inline void to_host(void *host, const void *d, size_t bytes) {
    cudaMemcpyAsync(host, d, bytes, cudaMemcpyDeviceToHost, NULL);
    cudaStreamSynchronize(NULL);
}

#endif
