/* emu_runtime.c - the CUDA runtime functions the CUDA backend calls, on the
 * CPU (cuda_emulator.h): devices, streams, memory, copies, errors. Every
 * call runs to its end when made (an in-order stream whose work is always
 * done), so a synchronisation only reports the device's sticky fault.
 *
 * DESIGN. Allocations are kept in one list under a mutex (pointer, size,
 * device); each is its own mapping, the pointer placed so that the 256-byte
 * rounded size ends at an inaccessible page. The current device and the
 * last error are per thread, as in CUDA; a device's fault (after an
 * injected faulting launch) is global and sticky; it shows to every later
 * call, or with DPTRAIN_CUDA_EMU_FAULT_SEEN=sync only once the host has
 * waited for or asked after the device's work (reveal): until then, as on
 * a GPU whose faulting kernel is still queued, calls succeed. A device whose emulated
 * NCCL all-reduce cannot end (emu_nccl.c's probe) holds its synchronising
 * calls back (wait_unless_hung). */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cuda_emulator.h"

#define EMU_MAX_GPUS 8

typedef struct {
    char *base;   /* the mapping */
    size_t map_bytes;
    char *ptr;    /* what cudaMalloc returned */
    size_t bytes; /* asked for */
    size_t rounded; /* counted against the device's memory */
    int device;
    int mapped; /* memory mapped in a reserved range (emu_vmm.c), not cudaMalloc's: base and rounded unused */
} block_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block_t *blocks;
static int block_count, block_cap;
static size_t used[EMU_MAX_GPUS];
static int faults[EMU_MAX_GPUS]; /* cudaError_t of a faulted device, 0: none */
static int faults_pending[EMU_MAX_GPUS]; /* faulted, not yet seen by the host */
static __thread int current_device;
static __thread cudaError_t last_error;
/* DPTRAIN_CUDA_EMU_STATS: what the process asked of the GPUs, one line at exit */
static long stat_syncs, stat_downloads, stat_uploads, stat_copies, stat_sum_waits;
long emu_stat_launches(void); /* emu_launch.c */
long emu_stat_graph_launches(void), emu_stat_graph_kernels(void); /* emu_graph.c */

static void print_stats(void) {
    fprintf(stderr, "cuda emulator: %ld kernel launches, %ld stream synchronisations, %ld downloads, %ld uploads, "
            "%ld device copies, %ld stream waits for NCCL sums, %ld graph launches (%ld kernels in them)\n",
            emu_stat_launches(), stat_syncs, stat_downloads, stat_uploads, stat_copies, stat_sum_waits,
            emu_stat_graph_launches(), emu_stat_graph_kernels());
}

static void tally(long *counter) { __atomic_add_fetch(counter, 1, __ATOMIC_RELAXED); }

/* NCCL sums in stream order (emu_nccl.c tells of each sum it queues): a
 * stream X is ordered after the first n sums of stream S once X waited for
 * an event recorded on S after them, or the host saw S's work done (a
 * synchronisation or a done query of S or of such an event). */
#define MAX_SUM_STREAMS 16
typedef struct {
    const struct CUstream_st *stream;
    long sums;
} order_t;

struct CUstream_st {
    int device;
    long queued; /* copies and event records so far (emu_pinned.c's order) */
    long sums;      /* NCCL all-reduces queued on it */
    long host_seen; /* of those, the ones the host saw done */
    order_t after[MAX_SUM_STREAMS]; /* the sums of other streams it waited for */
    void *capture;  /* emu_graph.c's capture of its work, NULL: none */
};

void **emu_stream_capture_slot(const void *stream);
void **emu_stream_capture_slot(const void *stream) { return stream ? &((struct CUstream_st *)stream)->capture : NULL; }

static struct CUstream_st legacy_streams[EMU_MAX_GPUS]; /* the NULL stream's counts, per device */

static struct CUstream_st *counted(cudaStream_t stream) {
    if (stream) return stream;
    return &legacy_streams[current_device >= 0 && current_device < EMU_MAX_GPUS ? current_device : 0];
}

static long env_long(const char *name, long fallback) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : fallback;
}

/* The machine's GPUs (DPTRAIN_CUDA_EMU_GPUS) and those this process sees:
 * CUDA_VISIBLE_DEVICES, as CUDA reads it, lists physical indices; the list
 * ends at the first entry that is not one (out of range, repeated, not a
 * number). visible[d] is the physical index of device d: its identity (the
 * UUID, what emulated NCCL compares). */
static int visible[EMU_MAX_GPUS], visible_count;

static void read_visible(void) {
    long n = env_long("DPTRAIN_CUDA_EMU_GPUS", 2);
    int physical = n < 0 ? 0 : n > EMU_MAX_GPUS ? EMU_MAX_GPUS : (int)n;
    const char *list = getenv("CUDA_VISIBLE_DEVICES");
    if (!list) {
        for (visible_count = 0; visible_count < physical; visible_count++) visible[visible_count] = visible_count;
        return;
    }
    for (const char *p = list; *p && visible_count < physical;) {
        char *end;
        long g = strtol(p, &end, 10);
        if (end == p || g < 0 || g >= physical || (*end && *end != ',')) break;
        int repeated = 0;
        for (int i = 0; i < visible_count; i++) repeated |= visible[i] == g;
        if (repeated) break;
        visible[visible_count++] = (int)g;
        p = *end ? end + 1 : end;
    }
}

static int gpu_count(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, read_visible);
    return visible_count;
}

int emu_physical_gpu(int device) { return device >= 0 && device < gpu_count() ? visible[device] : -1; }

static cudaError_t fail(cudaError_t err) {
    last_error = err;
    return err;
}

int emu_current_device(void) { return current_device; }

void emu_set_last_error(int error);
void emu_set_last_error(int error) { last_error = (cudaError_t)error; }

int emu_stream_device(const void *stream) {
    return stream ? ((const struct CUstream_st *)stream)->device : current_device;
}

/* --- NCCL all-reduces that cannot end (emu_nccl.c) ---------------------------- */
#define HANG_SEC 10

static int (*_Atomic nccl_hang_probe)(int device);

void emu_set_nccl_hang_probe(int (*probe)(int device)) { nccl_hang_probe = probe; }

static int nccl_hung(int device) {
    int (*probe)(int) = nccl_hang_probe;
    return probe && probe(device);
}

/* A synchronising call on `device`: on a GPU it would wait for the NCCL
 * kernel that waits for a faulted member, for ever unless another thread
 * aborts the communicator; here HANG_SEC, then one line. */
static void wait_unless_hung(const char *call, int device) {
    for (int waited_ms = 0; nccl_hung(device); waited_ms++) {
        if (waited_ms >= HANG_SEC * 1000) {
            fprintf(stderr, "cuda emulator: %s: GPU %d waits for an NCCL all-reduce that cannot end (a member's GPU "
                    "faulted) and nothing aborted its communicator: on a GPU this call never returns\n", call, device);
            fflush(stderr);
            abort();
        }
        usleep(1000);
    }
}

int emu_device_fault(int device) {
    pthread_mutex_lock(&lock);
    int f = device >= 0 && device < EMU_MAX_GPUS ? faults[device] : 0;
    pthread_mutex_unlock(&lock);
    return f;
}

int emu_device_faulting(int device) {
    pthread_mutex_lock(&lock);
    int f = device >= 0 && device < EMU_MAX_GPUS ? faults[device] | faults_pending[device] : 0;
    pthread_mutex_unlock(&lock);
    return f;
}

/* Called by emu_launch for the injected faulting launch. */
void emu_fault_device(int device);
void emu_fault_device(int device) {
    const char *seen = getenv("DPTRAIN_CUDA_EMU_FAULT_SEEN");
    int late = seen && strcmp(seen, "sync") == 0;
    pthread_mutex_lock(&lock);
    if (device >= 0 && device < EMU_MAX_GPUS) {
        faults_pending[device] = cudaErrorIllegalAddress;
        if (!late) faults[device] = cudaErrorIllegalAddress;
    }
    pthread_mutex_unlock(&lock);
}

/* The host waits for, or asks after, the device's work: a fault shows. */
static void reveal(int device) {
    pthread_mutex_lock(&lock);
    if (device >= 0 && device < EMU_MAX_GPUS && faults_pending[device]) faults[device] = faults_pending[device];
    pthread_mutex_unlock(&lock);
}

int emu_device_of(const void *p, size_t bytes) {
    const char *c = p;
    int device = -1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < block_count && device < 0; i++)
        if (c >= blocks[i].ptr && c + bytes <= blocks[i].ptr + blocks[i].bytes + (bytes == 0))
            device = blocks[i].device;
    pthread_mutex_unlock(&lock);
    return device;
}

size_t emu_allocation_offset(const void *p) {
    const char *c = p;
    size_t offset = (size_t)-1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < block_count && offset == (size_t)-1; i++)
        if (c >= blocks[i].ptr && c <= blocks[i].ptr + blocks[i].bytes) offset = (size_t)(c - blocks[i].ptr);
    pthread_mutex_unlock(&lock);
    return offset;
}

void emu_check_device_memory(const char *call, const char *what, const void *p, size_t bytes, int device) {
    if (bytes == 0) return;
    int owner = emu_device_of(p, bytes);
    if (owner == device) return;
    fprintf(stderr, "cuda emulator: %s: %s [%p, +%zu bytes) is %s, not memory of GPU %d\n", call, what, p, bytes,
            owner < 0 ? "not device memory (host memory, or past an allocation's end)" : "memory of another GPU",
            device);
    fflush(stderr);
    abort();
}

/* Appends b to the allocations; under the lock. */
static void add_block(block_t b) {
    if (block_count == block_cap) {
        int cap = block_cap ? 2 * block_cap : 256;
        block_t *grown = realloc(blocks, sizeof *grown * (size_t)cap);
        if (!grown) abort();
        blocks = grown;
        block_cap = cap;
    }
    blocks[block_count++] = b;
}

/* --- memory of reserved ranges (emu_vmm.c) ----------------------------------- */

int emu_memory_charge(int device, size_t bytes) {
    long limit = env_long("DPTRAIN_CUDA_EMU_MEMORY", 4L << 30);
    pthread_mutex_lock(&lock);
    int refused = device < 0 || device >= EMU_MAX_GPUS || used[device] + bytes > (size_t)limit;
    if (!refused) used[device] += bytes;
    pthread_mutex_unlock(&lock);
    return refused ? -1 : 0;
}

void emu_memory_uncharge(int device, size_t bytes) {
    pthread_mutex_lock(&lock);
    used[device] -= bytes;
    pthread_mutex_unlock(&lock);
}

/* Mapped memory is device memory: one allocation with the mapped memory
 * it follows on the same device (a range's chunks, one after another), so
 * a tensor across two chunks is memory of one allocation, as on a GPU. */
void emu_mapping_add(char *ptr, size_t bytes, int device) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < block_count; i++)
        if (blocks[i].mapped && blocks[i].device == device && blocks[i].ptr + blocks[i].bytes == ptr) {
            blocks[i].bytes += bytes;
            pthread_mutex_unlock(&lock);
            return;
        }
    add_block((block_t){NULL, 0, ptr, bytes, 0, device, 1});
    pthread_mutex_unlock(&lock);
}

/* [ptr, ptr + bytes) is no longer mapped: a part of mapped memory (its
 * start, end, middle, or all of it). 0, or -1 when it is no such part. */
int emu_mapping_remove(char *ptr, size_t bytes) {
    int done = -1;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < block_count && done < 0; i++) {
        block_t *b = &blocks[i];
        if (!b->mapped || ptr < b->ptr || ptr + bytes > b->ptr + b->bytes) continue;
        done = 0;
        char *end = b->ptr + b->bytes;
        if (ptr == b->ptr && ptr + bytes == end) {
            blocks[i] = blocks[--block_count];
        } else if (ptr == b->ptr) {
            b->ptr += bytes;
            b->bytes -= bytes;
        } else if (ptr + bytes == end) {
            b->bytes -= bytes;
        } else { /* the middle: what follows becomes its own */
            b->bytes = (size_t)(ptr - b->ptr);
            add_block((block_t){NULL, 0, ptr + bytes, (size_t)(end - (ptr + bytes)), 0, b->device, 1});
        }
    }
    pthread_mutex_unlock(&lock);
    return done;
}

/* --- devices ------------------------------------------------------------------ */

static void register_stats(void) {
    const char *v = getenv("DPTRAIN_CUDA_EMU_STATS");
    if (v && *v && strcmp(v, "0") != 0) atexit(print_stats);
}

cudaError_t cudaGetDeviceCount(int *count) {
    static pthread_once_t stats_once = PTHREAD_ONCE_INIT;
    pthread_once(&stats_once, register_stats);
    *count = gpu_count();
    return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= gpu_count()) return fail(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

/* The name, the memory and the UUID: "dptrain-emu-gpu" and the physical index. */
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device < 0 || device >= gpu_count()) return fail(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "dptrain CUDA emulator GPU %d", visible[device]);
    memcpy(prop->uuid.bytes, "dptrain-emu-gpu", 15);
    prop->uuid.bytes[15] = (char)visible[device];
    prop->totalGlobalMem = (size_t)env_long("DPTRAIN_CUDA_EMU_MEMORY", 4L << 30);
    return cudaSuccess;
}

/* The current device's memory: DPTRAIN_CUDA_EMU_MEMORY in all, less what cudaMalloc handed out (rounded). */
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    int device = current_device;
    if (emu_device_fault(device)) return fail((cudaError_t)emu_device_fault(device));
    size_t limit = (size_t)env_long("DPTRAIN_CUDA_EMU_MEMORY", 4L << 30);
    pthread_mutex_lock(&lock);
    size_t in_use = used[device];
    pthread_mutex_unlock(&lock);
    *total = limit;
    *free_bytes = in_use < limit ? limit - in_use : 0;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t err = last_error;
    int sticky = emu_device_fault(current_device);
    last_error = cudaSuccess;
    return sticky ? (cudaError_t)sticky : err;
}

const char *cudaGetErrorString(cudaError_t error) {
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
    }
}

/* An event's work is done when recorded (the stream's work is), so a query
 * says it is done, unless DPTRAIN_CUDA_EMU_EVENTS_PENDING=1: then a recorded
 * event is "not ready" until cudaEventSynchronize waits for it, which lets
 * a test take the backend's waiting path. cudaEventSynchronize counts as a
 * synchronisation (the STATS line's), a query does not. An event made
 * without cudaEventDisableTiming keeps the host clock's time of its last
 * record (the work before it is done then), which cudaEventElapsedTime
 * reads. */
struct CUevent_st {
    int device;
    int pending; /* recorded, not yet waited for (with EVENTS_PENDING) */
    struct CUstream_st *stream; /* where it was last recorded, after its seq-th call */
    long seq;
    long sums;   /* and after that stream's first `sums` NCCL sums */
    int timing;  /* made without cudaEventDisableTiming */
    double recorded_ms; /* CLOCK_MONOTONIC at the last record, in ms; < 0: never recorded */
    int captured; /* last recorded on a capturing stream (emu_graph.c) */
    long capture_id, capture_work; /* then: the capture and that stream's work so far (emu_capture_mark) */
    const void *capture_stream;
};

/* --- NCCL sums in stream order (see CUstream_st) ------------------------------- */

static struct CUstream_st *sum_streams[MAX_SUM_STREAMS]; /* the streams with sums; under lock */

void emu_stream_summed(const void *stream) {
    struct CUstream_st *s = counted((cudaStream_t)stream);
    pthread_mutex_lock(&lock);
    int known = 0, free_slot = -1;
    for (int i = 0; i < MAX_SUM_STREAMS; i++) {
        known |= sum_streams[i] == s;
        if (!sum_streams[i] && free_slot < 0) free_slot = i;
    }
    if (!known && free_slot >= 0) sum_streams[free_slot] = s; /* else not watched (lenient) */
    s->sums++;
    pthread_mutex_unlock(&lock);
}

static void host_saw(struct CUstream_st *s, long sums) {
    pthread_mutex_lock(&lock);
    if (s->host_seen < sums) s->host_seen = sums;
    pthread_mutex_unlock(&lock);
}

static void stream_waits(struct CUstream_st *x, const struct CUevent_st *e) {
    if (!e->stream || e->stream == x || e->sums == 0) return;
    tally(&stat_sum_waits);
    pthread_mutex_lock(&lock);
    int slot = -1;
    for (int i = 0; i < MAX_SUM_STREAMS && slot < 0; i++)
        if (x->after[i].stream == e->stream || !x->after[i].stream) slot = i;
    if (slot >= 0 && x->after[slot].sums <= e->sums) x->after[slot] = (order_t){e->stream, e->sums};
    pthread_mutex_unlock(&lock);
}

/* Aborts with one line unless work queued on `stream` now runs after every
 * NCCL sum queued so far on its GPU (another stream's): the optimizer's
 * kernel (emu_launch.c) would read the gradients before they are summed. */
void emu_check_after_sums(const char *call, const void *stream) {
    const struct CUstream_st *x = counted((cudaStream_t)stream);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_SUM_STREAMS; i++) {
        const struct CUstream_st *s = sum_streams[i];
        if (!s || s == x || s->device != x->device || s->sums == 0 || s->host_seen >= s->sums) continue;
        long waited = 0;
        for (int j = 0; j < MAX_SUM_STREAMS; j++)
            if (x->after[j].stream == s) waited = x->after[j].sums;
        if (waited < s->sums) {
            fprintf(stderr, "cuda emulator: %s on GPU %d is not ordered after NCCL's sum %ld on another stream "
                    "(no cudaStreamWaitEvent on an event recorded after it): on a GPU it may run before the sum\n",
                    call, x->device, s->sums);
            abort();
        }
    }
    pthread_mutex_unlock(&lock);
}

/* --- streams ------------------------------------------------------------------ */

/* A host synchronisation with the stream's GPU while a capture runs there
 * (emu_graph.c refuses it and invalidates the capture), or with the
 * capturing stream itself (also in relaxed mode). */
static int refused_in_capture(cudaStream_t stream) {
    void **slot = emu_stream_capture_slot(stream);
    int device = emu_stream_device(stream);
    if (slot && *slot) {
        emu_capture_refuses("a synchronisation", device);
        return 1;
    }
    return emu_capture_refuses("a synchronisation", device) != cudaSuccess;
}

/* cudaDeviceSynchronize: every stream of the current GPU. */
cudaError_t cudaDeviceSynchronize(void) {
    if (emu_capture_refuses("cudaDeviceSynchronize", current_device)) return fail(cudaErrorStreamCaptureUnsupported);
    tally(&stat_syncs);
    wait_unless_hung("cudaDeviceSynchronize", current_device);
    reveal(current_device);
    int f = emu_device_fault(current_device);
    return f ? fail((cudaError_t)f) : cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    (void)flags;
    struct CUstream_st *s = malloc(sizeof *s);
    if (!s) return fail(cudaErrorMemoryAllocation);
    *s = (struct CUstream_st){.device = current_device};
    *stream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    emu_pinned_done(stream, LONG_MAX); /* nothing can tell of its copies any more (lenient) */
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_SUM_STREAMS; i++)
        if (sum_streams[i] == stream) sum_streams[i] = NULL;
    pthread_mutex_unlock(&lock);
    free(stream);
    return cudaSuccess;
}

/* Work is done when queued: what is left to report is a fault. */
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (refused_in_capture(stream)) return fail(cudaErrorStreamCaptureUnsupported);
    tally(&stat_syncs);
    wait_unless_hung("cudaStreamSynchronize", emu_stream_device(stream));
    reveal(emu_stream_device(stream));
    emu_pinned_done(counted(stream), LONG_MAX);
    host_saw(counted(stream), counted(stream)->sums);
    int f = emu_device_fault(emu_stream_device(stream));
    return f ? fail((cudaError_t)f) : cudaSuccess;
}

/* Done unless the device's NCCL all-reduce cannot end. */
cudaError_t cudaStreamQuery(cudaStream_t stream) {
    if (refused_in_capture(stream)) return fail(cudaErrorStreamCaptureUnsupported);
    reveal(emu_stream_device(stream));
    int f = emu_device_fault(emu_stream_device(stream));
    if (f) return fail((cudaError_t)f);
    if (nccl_hung(emu_stream_device(stream))) return fail(cudaErrorNotReady);
    emu_pinned_done(counted(stream), LONG_MAX);
    host_saw(counted(stream), counted(stream)->sums);
    return cudaSuccess;
}

/* --- events ------------------------------------------------------------------- */

static int events_pending(void) {
    static int pending = -1;
    int p = __atomic_load_n(&pending, __ATOMIC_RELAXED);
    if (p < 0) {
        p = env_long("DPTRAIN_CUDA_EMU_EVENTS_PENDING", 0) != 0;
        __atomic_store_n(&pending, p, __ATOMIC_RELAXED);
    }
    return p;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return fail(cudaErrorMemoryAllocation);
    e->device = current_device;
    e->timing = !(flags & cudaEventDisableTiming);
    e->recorded_ms = -1.0;
    *event = e;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    free(event);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!event || event->device != emu_stream_device(stream)) return fail(cudaErrorInvalidResourceHandle);
    int f = emu_device_fault(event->device);
    if (f) return fail((cudaError_t)f);
    int capturing = emu_capture_status(stream);
    if (capturing == 2) return fail(cudaErrorStreamCaptureInvalidated);
    event->captured = capturing;
    if (capturing) { /* a point of the capture, nothing to run */
        emu_capture_mark(stream, &event->capture_id, &event->capture_work);
        event->capture_stream = stream;
        return cudaSuccess;
    }
    event->pending = events_pending();
    event->stream = counted(stream);
    event->seq = counted(stream)->queued++;
    event->sums = counted(stream)->sums;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    event->recorded_ms = 1e3 * (double)now.tv_sec + 1e-6 * (double)now.tv_nsec;
    return cudaSuccess;
}

/* As CUDA: both events made for timing (else invalid handle) and recorded
 * (else invalid handle too), on one device. Their work is done (a pending
 * event's too: the knob is for the waiting paths, and a GPU's elapsed time
 * is read after a wait for a later event of the stream). */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms || !start || !end || !start->timing || !end->timing || start->recorded_ms < 0.0 ||
        end->recorded_ms < 0.0 || start->device != end->device)
        return fail(cudaErrorInvalidResourceHandle);
    int f = emu_device_fault(start->device);
    if (f) return fail((cudaError_t)f);
    *ms = (float)(end->recorded_ms - start->recorded_ms);
    return cudaSuccess;
}

/* Every call runs to its end when made: the event has nothing left to
 * order, only the devices to check (NCCL's stream waits on the compute
 * stream's event and the other way round: peer_nccl.c). */
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    (void)flags;
    if (!event) return fail(cudaErrorInvalidResourceHandle);
    if (emu_capture_status(stream) == 2) return fail(cudaErrorStreamCaptureInvalidated);
    if (event->captured) /* a fork into the event's capture, or a join back (emu_graph.c) */
        return (cudaError_t)emu_capture_wait(stream, event->capture_id, event->capture_work, event->capture_stream);
    if (emu_capture_status(stream)) { /* a dependency on work outside the capture: CUDA refuses it */
        emu_capture_isolate(stream);
        return fail(cudaErrorStreamCaptureIsolation);
    }
    stream_waits(counted(stream), event);
    int f = emu_device_fault(emu_stream_device(stream));
    return f ? fail((cudaError_t)f) : cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (emu_capture_refuses("cudaEventQuery", event->device)) return fail(cudaErrorStreamCaptureUnsupported);
    if (event->captured) return fail(cudaErrorCapturedEvent);
    reveal(event->device);
    int f = emu_device_fault(event->device);
    if (f) return fail((cudaError_t)f);
    if (event->pending || nccl_hung(event->device)) return fail(cudaErrorNotReady);
    if (event->stream) emu_pinned_done(event->stream, event->seq), host_saw(event->stream, event->sums);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (emu_capture_refuses("cudaEventSynchronize", event->device)) return fail(cudaErrorStreamCaptureUnsupported);
    if (event->captured) return fail(cudaErrorCapturedEvent);
    tally(&stat_syncs);
    wait_unless_hung("cudaEventSynchronize", event->device);
    reveal(event->device);
    event->pending = 0;
    if (event->stream) emu_pinned_done(event->stream, event->seq), host_saw(event->stream, event->sums);
    int f = emu_device_fault(event->device);
    return f ? fail((cudaError_t)f) : cudaSuccess;
}

/* --- memory ------------------------------------------------------------------- */

/* Pinned host memory is host memory here (a device's calls see it as such). */
cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags) {
    (void)flags;
    *ptr = NULL;
    if (emu_capture_refuses("cudaHostAlloc", current_device)) return fail(cudaErrorStreamCaptureUnsupported);
    void *p = malloc(size ? size : 1);
    *ptr = p;
    if (!p) return fail(cudaErrorMemoryAllocation);
    emu_pinned_alloc(p, size);
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr) {
    if (emu_capture_refuses("cudaFreeHost", current_device)) return fail(cudaErrorStreamCaptureUnsupported);
    emu_pinned_free(ptr);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t size) {
    *ptr = NULL;
    int device = current_device;
    if (emu_capture_refuses("cudaMalloc", device)) return fail(cudaErrorStreamCaptureUnsupported);
    if (emu_device_fault(device)) return fail((cudaError_t)emu_device_fault(device));
    long limit = env_long("DPTRAIN_CUDA_EMU_MEMORY", 4L << 30);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), rounded = (size + 255) & ~(size_t)255;
    if (rounded == 0) rounded = 256;
    pthread_mutex_lock(&lock);
    int refused = used[device] + rounded > (size_t)limit;
    if (!refused) used[device] += rounded;
    pthread_mutex_unlock(&lock);
    if (refused) return fail(cudaErrorMemoryAllocation);
    size_t data_pages = (rounded + page - 1) / page * page, map_bytes = data_pages + page;
    char *base = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        pthread_mutex_lock(&lock);
        used[device] -= rounded;
        pthread_mutex_unlock(&lock);
        return fail(cudaErrorMemoryAllocation);
    }
    mprotect(base + data_pages, page, PROT_NONE);
    char *p = base + data_pages - rounded;
    memset(p, 0xff, rounded); /* NaN bytes: memory a GPU hands out is not zeroed */
    pthread_mutex_lock(&lock);
    add_block((block_t){base, map_bytes, p, size, rounded, device, 0});
    pthread_mutex_unlock(&lock);
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) {
    if (!ptr) return cudaSuccess;
    if (emu_capture_refuses("cudaFree", current_device)) return fail(cudaErrorStreamCaptureUnsupported);
    block_t b = {0};
    int found = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < block_count; i++)
        if (blocks[i].ptr == ptr && !blocks[i].mapped) {
            b = blocks[i];
            blocks[i] = blocks[--block_count];
            used[b.device] -= b.rounded;
            found = 1;
            break;
        }
    pthread_mutex_unlock(&lock);
    if (!found) {
        fprintf(stderr, "cuda emulator: cudaFree: %p is not an allocation of cudaMalloc\n", ptr);
        fflush(stderr);
        abort();
    }
    wait_unless_hung("cudaFree", b.device); /* it may synchronise the device */
    reveal(b.device);
    munmap(b.base, b.map_bytes);
    int f = emu_device_fault(b.device);
    return f ? fail((cudaError_t)f) : cudaSuccess;
}

/* A captured copy or memset, run when its graph is launched. */
typedef struct {
    void *dst;
    int value;
    size_t count;
} memset_call_t;
typedef struct {
    void *dst;
    const void *src;
    size_t count;
    enum cudaMemcpyKind kind;
} memcpy_call_t;

static void replay_memset(void *arg, const void *stream) {
    memset_call_t *m = arg;
    cudaMemsetAsync(m->dst, m->value, m->count, (cudaStream_t)stream);
}

static void replay_memcpy(void *arg, const void *stream) {
    memcpy_call_t *m = arg;
    cudaMemcpyAsync(m->dst, m->src, m->count, m->kind, (cudaStream_t)stream);
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t count, cudaStream_t stream) {
    int device = emu_stream_device(stream);
    emu_check_device_memory("cudaMemsetAsync", "the destination", dst, count, device);
    if (emu_device_fault(device)) return fail((cudaError_t)emu_device_fault(device));
    if (emu_capture_status(stream)) {
        memset_call_t call = {dst, value, count};
        return emu_capture_call(stream, replay_memset, &call, sizeof call);
    }
    memset(dst, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) {
    int device = emu_stream_device(stream);
    if (count == 0) return cudaSuccess;
    if (emu_capture_status(stream) == 2) return fail(cudaErrorStreamCaptureInvalidated);
    if (emu_capture_status(stream)) { /* recorded: host memory must be pinned (a copy to pageable memory waits) */
        if (kind == cudaMemcpyDeviceToHost && !emu_pinned_contains(dst, count)) {
            emu_capture_refuses("cudaMemcpyAsync (device to host)", device);
            return fail(cudaErrorStreamCaptureUnsupported);
        }
        if (kind == cudaMemcpyHostToDevice) emu_capture_check_host("cudaMemcpyAsync", "the source", src, count);
        if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice) {
            fprintf(stderr, "cuda emulator: cudaMemcpyAsync: kind %d is not emulated\n", (int)kind);
            fflush(stderr);
            abort();
        }
        memcpy_call_t call = {dst, src, count, kind};
        return emu_capture_call(stream, replay_memcpy, &call, sizeof call);
    }
    switch (kind) {
    case cudaMemcpyHostToDevice:
        tally(&stat_uploads);
        emu_check_device_memory("cudaMemcpyAsync (host to device)", "the destination", dst, count, device);
        emu_check_device_memory("cudaMemcpyAsync (host to device)", "the source", src, count, -1);
        emu_pinned_copy(src, count, counted(stream), counted(stream)->queued++);
        break;
    case cudaMemcpyDeviceToHost:
        tally(&stat_downloads); /* waits for the stream: a synchronisation of the host */
        wait_unless_hung("cudaMemcpyAsync (device to host)", device);
        reveal(device);
        emu_pinned_done(counted(stream), LONG_MAX); /* to pageable memory: returns when done, so is the stream */
        emu_check_device_memory("cudaMemcpyAsync (device to host)", "the source", src, count, device);
        emu_check_device_memory("cudaMemcpyAsync (device to host)", "the destination", dst, count, -1);
        break;
    case cudaMemcpyDeviceToDevice:
        tally(&stat_copies);
        emu_check_device_memory("cudaMemcpyAsync (device to device)", "the source", src, count, device);
        emu_check_device_memory("cudaMemcpyAsync (device to device)", "the destination", dst, count, device);
        break;
    default:
        fprintf(stderr, "cuda emulator: cudaMemcpyAsync: kind %d is not emulated\n", (int)kind);
        fflush(stderr);
        abort();
    }
    int f = emu_device_fault(device);
    if (f) {
        if (kind == cudaMemcpyDeviceToHost) memset(dst, 0xff, count); /* what a faulted copy leaves */
        return fail((cudaError_t)f);
    }
    memmove(dst, src, count);
    return cudaSuccess;
}
