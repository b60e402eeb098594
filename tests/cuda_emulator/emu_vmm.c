/* emu_vmm.c - CUDA's virtual memory functions in the emulator, as the
 * backend's range_cuda.c reaches them: through the runtime's driver entry
 * points (cudaGetDriverEntryPointByVersion), which this file answers for
 * cuMemGetAllocationGranularity, cuMemAddressReserve / Free, cuMemCreate /
 * Release, cuMemMap / Unmap and cuMemSetAccess (any other symbol: not
 * found; DPTRAIN_CUDA_EMU_VMM=0: none found, a driver without them).
 *
 * A reservation is host address space (mmap PROT_NONE); cuMemCreate takes
 * the GPU's memory (DPTRAIN_CUDA_EMU_MEMORY, as cudaMalloc) and gives a
 * handle; cuMemMap places it in a reservation, still inaccessible as on a
 * GPU until cuMemSetAccess, which makes it readable and writable (NaN
 * bytes: mapped memory is not zeroed) and device memory of its GPU for the
 * emulator's checks, joined with the mapping it follows; cuMemUnmap makes
 * it inaccessible again. Misuse a GPU refuses is refused alike (sizes off
 * the granularity, a map outside a reservation or over a mapping, access
 * to memory not mapped, a free of a reservation with memory mapped in it);
 * misuse a GPU would not notice at once (a release of a mapped handle is
 * allowed: CUDA frees it at the unmap). Allocations while a capture runs
 * fail as cudaMalloc does. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_emulator.h"

#define GRANULE ((size_t)2 << 20)

typedef struct reservation {
    struct reservation *next;
    char *base;
    size_t bytes, mapped;
} reservation_t;

typedef struct handle {
    struct handle *next;
    size_t bytes;
    int device;
    char *at;       /* where it is mapped; NULL: not */
    int accessible; /* cuMemSetAccess made it device memory */
    int released;
} handle_t;

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static reservation_t *reservations;
static handle_t *handles;

static reservation_t *reservation_of(const char *p, size_t bytes) {
    for (reservation_t *r = reservations; r; r = r->next)
        if (p >= r->base && p + bytes <= r->base + r->bytes) return r;
    return NULL;
}

static handle_t *handle_at(const char *p) {
    for (handle_t *h = handles; h; h = h->next)
        if (h->at == p) return h;
    return NULL;
}

static void drop(handle_t *h) { /* under vmm_lock: a released, unmapped handle */
    handle_t **at = &handles;
    while (*at != h) at = &(*at)->next;
    *at = h->next;
    emu_memory_uncharge(h->device, h->bytes);
    free(h);
}

static CUresult CUDAAPI granularity(size_t *g, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags f) {
    (void)f;
    if (!g || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    *g = GRANULE;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI address_reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                        unsigned long long flags) {
    (void)addr;
    (void)flags;
    if (!ptr || size == 0 || size % GRANULE || (alignment && GRANULE % alignment && alignment % GRANULE))
        return CUDA_ERROR_INVALID_VALUE;
    /* aligned to the granule: reserve one more and trim */
    char *raw = mmap(NULL, size + GRANULE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    char *base = (char *)(((uintptr_t)raw + GRANULE - 1) & ~(uintptr_t)(GRANULE - 1));
    if (base > raw) munmap(raw, (size_t)(base - raw));
    if (base + size < raw + size + GRANULE) munmap(base + size, (size_t)(raw + size + GRANULE - (base + size)));
    reservation_t *r = calloc(1, sizeof *r);
    if (!r) abort();
    r->base = base;
    r->bytes = size;
    pthread_mutex_lock(&vmm_lock);
    r->next = reservations;
    reservations = r;
    pthread_mutex_unlock(&vmm_lock);
    *ptr = (CUdeviceptr)(uintptr_t)base;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI address_free(CUdeviceptr ptr, size_t size) {
    char *p = (char *)(uintptr_t)ptr;
    pthread_mutex_lock(&vmm_lock);
    reservation_t **at = &reservations;
    while (*at && (*at)->base != p) at = &(*at)->next;
    reservation_t *r = *at;
    CUresult res = !r || r->bytes != size ? CUDA_ERROR_INVALID_VALUE : r->mapped ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (res == CUDA_SUCCESS) *at = r->next;
    pthread_mutex_unlock(&vmm_lock);
    if (res != CUDA_SUCCESS) {
        fprintf(stderr, "cuda emulator: cuMemAddressFree: %p (+%zu bytes) is %s\n", p, size,
                !r ? "no reservation" : r->bytes != size ? "another size than reserved" : "still mapped in part");
        fflush(stderr);
        abort();
    }
    munmap(r->base, r->bytes);
    free(r);
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI create(CUmemGenericAllocationHandle *out, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags) {
    (void)flags;
    if (!out || !prop || size == 0 || size % GRANULE || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    const int device = prop->location.id;
    if (emu_physical_gpu(device) < 0) return CUDA_ERROR_INVALID_DEVICE;
    if (emu_capture_refuses("cuMemCreate", device)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (emu_device_fault(device)) return CUDA_ERROR_ILLEGAL_ADDRESS;
    if (emu_memory_charge(device, size)) return CUDA_ERROR_OUT_OF_MEMORY;
    handle_t *h = calloc(1, sizeof *h);
    if (!h) abort();
    h->bytes = size;
    h->device = device;
    pthread_mutex_lock(&vmm_lock);
    h->next = handles;
    handles = h;
    pthread_mutex_unlock(&vmm_lock);
    *out = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI release(CUmemGenericAllocationHandle handle) {
    handle_t *h = (handle_t *)(uintptr_t)handle;
    pthread_mutex_lock(&vmm_lock);
    h->released = 1;
    if (!h->at) drop(h);
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}

static CUresult CUDAAPI map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags) {
    handle_t *h = (handle_t *)(uintptr_t)handle;
    char *p = (char *)(uintptr_t)ptr;
    (void)flags;
    pthread_mutex_lock(&vmm_lock);
    reservation_t *r = reservation_of(p, size);
    CUresult res = CUDA_SUCCESS;
    if (!r || offset != 0 || size != h->bytes || h->at || h->released || ((uintptr_t)p % GRANULE))
        res = CUDA_ERROR_INVALID_VALUE;
    for (handle_t *o = handles; o && res == CUDA_SUCCESS; o = o->next) /* not over another mapping */
        if (o->at && o->at < p + size && p < o->at + o->bytes) res = CUDA_ERROR_INVALID_VALUE;
    if (res == CUDA_SUCCESS) {
        h->at = p;
        r->mapped += size;
    }
    pthread_mutex_unlock(&vmm_lock);
    return res;
}

static CUresult CUDAAPI set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    char *p = (char *)(uintptr_t)ptr;
    if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    handle_t *h = handle_at(p);
    int own = 0; /* the GPU whose memory it is must be among those given read and write */
    for (size_t i = 0; h && i < count; i++)
        own |= desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE && desc[i].location.id == h->device &&
               desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUresult res = !h || h->bytes != size || !own ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    int first = res == CUDA_SUCCESS && !h->accessible;
    if (first) h->accessible = 1;
    pthread_mutex_unlock(&vmm_lock);
    if (first) {
        if (mprotect(p, size, PROT_READ | PROT_WRITE) != 0) abort();
        memset(p, 0xff, size);
        emu_mapping_add(p, size, h->device);
    }
    return res;
}

static CUresult CUDAAPI unmap(CUdeviceptr ptr, size_t size) {
    char *p = (char *)(uintptr_t)ptr;
    pthread_mutex_lock(&vmm_lock);
    handle_t *h = handle_at(p);
    reservation_t *r = h && h->bytes == size ? reservation_of(p, size) : NULL;
    if (r) {
        if (h->accessible && emu_mapping_remove(p, size) != 0) r = NULL;
    }
    if (r) {
        mprotect(p, size, PROT_NONE);
        madvise(p, size, MADV_DONTNEED);
        r->mapped -= size;
        h->at = NULL;
        h->accessible = 0;
        if (h->released) drop(h);
    }
    pthread_mutex_unlock(&vmm_lock);
    if (!r) {
        fprintf(stderr, "cuda emulator: cuMemUnmap: %p (+%zu bytes) is not one mapping\n", p, size);
        fflush(stderr);
        abort();
    }
    return CUDA_SUCCESS;
}

static const struct {
    const char *name;
    void *fn;
} entries[] = {
    {"cuMemGetAllocationGranularity", (void *)granularity},
    {"cuMemAddressReserve", (void *)address_reserve},
    {"cuMemAddressFree", (void *)address_free},
    {"cuMemCreate", (void *)create},
    {"cuMemRelease", (void *)release},
    {"cuMemMap", (void *)map},
    {"cuMemUnmap", (void *)unmap},
    {"cuMemSetAccess", (void *)set_access},
};

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags, enum cudaDriverEntryPointQueryResult *status) {
    (void)version;
    (void)flags;
    *fn = NULL;
    const char *off = getenv("DPTRAIN_CUDA_EMU_VMM");
    if (!(off && !strcmp(off, "0")))
        for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
            if (!strcmp(entries[i].name, symbol)) *fn = entries[i].fn;
    if (status) *status = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}
