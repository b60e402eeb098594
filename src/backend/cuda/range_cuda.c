/* range_cuda.c - the step arena's range on a GPU (backend.h reserve,
 * commit, release): CUDA's virtual memory management, as PyTorch's
 * expandable segments use it. reserve takes address space of the GPU's
 * memory size (cuMemAddressReserve) and no memory; commit maps physical
 * memory at its end (cuMemCreate, cuMemMap, cuMemSetAccess for this GPU)
 * in chunks of the allocation granularity or more; release unmaps and
 * frees all of it. So a step arena is one block however far a step goes:
 * nothing of a chain's blocks unused, and every allocation adjacent to the
 * next, which the activation gradients' plan (grad_plan.h) needs to place a
 * gradient over two dead layer outputs.
 *
 * The driver functions come from the runtime's entry points
 * (cudaGetDriverEntryPointByVersion): the module links no libcuda. Where
 * one is missing, or DPTRAIN_CUDA_VMM=off (on is the default; another
 * value is refused in one line when a GPU is opened), the table has no range and the
 * arena chains cudaMalloc'd blocks as before; a reservation refused (no
 * VMM support on this GPU) does the same for that arena. The committed
 * bytes count in the context's memory figures (memory_peak) as cudaMalloc's
 * do; a release counts as a free for the step graphs (graph_stale).
 *
 * Chunk size: what the commit needs, at least a sixteenth of what the
 * range holds but at most CHUNK_MAX (16 MiB) beyond that need (so a 25 GB
 * step grows in about 1,600 chunks and ends within 16 MiB of what it used),
 * rounded up to the granularity (2 MiB on current GPUs). */
#include "cuda_parts.h"

#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*granularity_fn)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
typedef CUresult (*address_reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*address_free_fn)(CUdeviceptr, size_t);
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*set_access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);

static struct {
    granularity_fn granularity;
    address_reserve_fn address_reserve;
    address_free_fn address_free;
    create_fn create;
    release_fn release;
    map_fn map;
    unmap_fn unmap;
    set_access_fn set_access;
} drv;

#define CHUNK_MAX ((size_t)16 << 20)

/* One reserved range and the chunks mapped in it, in order from its start. */
typedef struct range {
    struct range *next;
    CUdeviceptr base;
    size_t bytes, committed;
    size_t granule; /* the GPU's allocation granularity, read at the reservation */
    CUmemGenericAllocationHandle *handles;
    size_t *sizes;
    int count, cap;
} range_t;

/* The ranges of all GPUs (few: one per step arena), under this lock. */
static range_t *ranges;
static pthread_mutex_t ranges_lock = PTHREAD_MUTEX_INITIALIZER;

static range_t *find(CUdeviceptr base) {
    for (range_t *r = ranges; r; r = r->next)
        if (r->base == base) return r;
    return NULL;
}

static CUmemAllocationProp prop_of(const dp_cuda_ctx_t *c) {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = c->gpu;
    return p;
}

static size_t granule_of(const dp_cuda_ctx_t *c) {
    CUmemAllocationProp p = prop_of(c);
    size_t g = 0;
    if (drv.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || g == 0) return 0;
    return g;
}

static void *range_reserve(void *ctx, size_t *bytes) {
    dp_cuda_ctx_t *c = ctx;
    dp_cuda_enter(c);
    size_t free_bytes = 0, total = 0, granule = granule_of(c);
    range_t *r = NULL;
    CUdeviceptr base = 0;
    if (granule && cudaMemGetInfo(&free_bytes, &total) == cudaSuccess && total > 0) {
        size_t size = (total + granule - 1) / granule * granule;
        if (drv.address_reserve(&base, size, granule, 0, 0) == CUDA_SUCCESS) {
            if ((r = calloc(1, sizeof *r))) {
                r->base = base;
                r->bytes = size;
                r->granule = granule;
            } else {
                drv.address_free(base, size);
            }
        }
    }
    cudaGetLastError(); /* a refusal here is not the context's failure: the arena chains instead */
    dp_cuda_leave(c);
    if (!r) return NULL;
    pthread_mutex_lock(&ranges_lock);
    r->next = ranges;
    ranges = r;
    pthread_mutex_unlock(&ranges_lock);
    *bytes = r->bytes;
    return (void *)(uintptr_t)base;
}

/* Maps one chunk of `size` at the range's end; 0 on success. */
static int map_chunk(dp_cuda_ctx_t *c, range_t *r, size_t size) {
    if (r->count == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        CUmemGenericAllocationHandle *h = realloc(r->handles, sizeof *h * (size_t)cap);
        if (h) r->handles = h;
        size_t *s = realloc(r->sizes, sizeof *s * (size_t)cap);
        if (s) r->sizes = s;
        if (!h || !s) return 1;
        r->cap = cap;
    }
    CUmemAllocationProp p = prop_of(c);
    CUmemGenericAllocationHandle handle;
    if (drv.create(&handle, size, &p, 0) != CUDA_SUCCESS) return 1;
    const CUdeviceptr at = r->base + r->committed;
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = p.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (drv.map(at, size, 0, handle, 0) != CUDA_SUCCESS) {
        drv.release(handle);
        return 1;
    }
    if (drv.set_access(at, size, &access, 1) != CUDA_SUCCESS) {
        drv.unmap(at, size);
        drv.release(handle);
        return 1;
    }
    r->handles[r->count] = handle;
    r->sizes[r->count++] = size;
    r->committed += size;
    c->mem_in_use += size;
    if (c->mem_in_use > c->mem_peak) c->mem_peak = c->mem_in_use;
    return 0;
}

static size_t range_commit(void *ctx, void *base, size_t committed, size_t bytes, const char *what) {
    dp_cuda_ctx_t *c = ctx;
    pthread_mutex_lock(&ranges_lock);
    range_t *r = find((CUdeviceptr)(uintptr_t)base);
    pthread_mutex_unlock(&ranges_lock);
    DP_ASSERT(r && r->committed == committed);
    if (bytes <= r->committed) return r->committed;
    dp_cuda_enter(c);
    const size_t granule = r->granule, need = bytes - r->committed;
    size_t size = r->committed / 16;
    if (size > CHUNK_MAX) size = CHUNK_MAX;
    if (size < need) size = need;
    size = (size + granule - 1) / granule * granule;
    if (size > r->bytes - r->committed) size = r->bytes - r->committed;
    int failed = size < need || map_chunk(c, r, size);
    if (failed) {
        cudaGetLastError();
        dp_cuda_out_of_memory(c, what, need); /* sets the error (DP_ERR_NOMEM) */
    }
    const size_t now = r->committed;
    dp_cuda_leave(c);
    return failed ? 0 : now;
}

static void range_release(void *ctx, void *base, size_t bytes) {
    dp_cuda_ctx_t *c = ctx;
    (void)bytes;
    pthread_mutex_lock(&ranges_lock);
    range_t **at = &ranges;
    while (*at && (*at)->base != (CUdeviceptr)(uintptr_t)base) at = &(*at)->next;
    range_t *r = *at;
    if (r) *at = r->next;
    pthread_mutex_unlock(&ranges_lock);
    if (!r) return;
    dp_cuda_enter(c);
    dp_cuda_check(c, dp_cuda_wait(c, NULL), "releasing the step arena's range"); /* after the work that uses it */
    CUdeviceptr p = r->base;
    for (int i = 0; i < r->count; i++) {
        drv.unmap(p, r->sizes[i]);
        drv.release(r->handles[i]);
        p += r->sizes[i];
    }
    drv.address_free(r->base, r->bytes);
    c->mem_in_use -= r->committed;
    c->frees++;
    dp_cuda_leave(c);
    free(r->handles);
    free(r->sizes);
    free(r);
}

/* The driver's functions, once; 1 when all were found. */
static int drv_ok;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void *entry(const char *name) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
        fn = NULL;
    cudaGetLastError();
    return fn;
}

static void drv_load(void) {
    drv.granularity = (granularity_fn)entry("cuMemGetAllocationGranularity");
    drv.address_reserve = (address_reserve_fn)entry("cuMemAddressReserve");
    drv.address_free = (address_free_fn)entry("cuMemAddressFree");
    drv.create = (create_fn)entry("cuMemCreate");
    drv.release = (release_fn)entry("cuMemRelease");
    drv.map = (map_fn)entry("cuMemMap");
    drv.unmap = (unmap_fn)entry("cuMemUnmap");
    drv.set_access = (set_access_fn)entry("cuMemSetAccess");
    drv_ok = drv.granularity && drv.address_reserve && drv.address_free && drv.create && drv.release && drv.map &&
             drv.unmap && drv.set_access;
}

dp_status_t dp_cuda_range_setting(int *on) {
    const char *env = getenv("DPTRAIN_CUDA_VMM");
    *on = 1;
    if (!env || !*env || !strcmp(env, "on") || !strcmp(env, "1")) return DP_OK;
    if (!strcmp(env, "off") || !strcmp(env, "0")) {
        *on = 0;
        return DP_OK;
    }
    return dp_fail(DP_ERR_ARG, "DPTRAIN_CUDA_VMM=%s: expected on or off", env);
}

void dp_cuda_range_register(dp_backend_t *table, int on) {
    if (!on) return;
    pthread_once(&drv_once, drv_load);
    if (!drv_ok) return;
    table->reserve = range_reserve;
    table->commit = range_commit;
    table->release = range_release;
}
