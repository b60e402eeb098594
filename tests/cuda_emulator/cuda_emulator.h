/* cuda_emulator.h - what the files of the CUDA emulator share. The
 * emulator is a test double of a machine with GPUs: the few functions of
 * the CUDA runtime, cuBLAS and cuDNN that the CUDA backend calls
 * (src/backend/cuda/), implemented on the CPU, plus a launcher that runs
 * the backend's own kernels (src/backend/cuda's *.cu files, compiled for
 * the host by emu_device.h) thread by thread. Linked with the backend's
 * files into lib/libdptrain_cuda_emu.so, a CUDA module that dptrain loads
 * through DPTRAIN_CUDA_MODULE: the backend's host code and kernels then run here,
 * without a GPU, with checks a GPU would not give:
 *   - device memory is mapped apart for each allocation, its end against
 *     an inaccessible page (an overrun of more than 255 bytes faults), and
 *     each allocation belongs to the device that made it: a copy, cuBLAS or
 *     cuDNN call handed memory of another device, or host memory where
 *     device memory belongs, aborts with one line naming the call;
 *   - a kernel launched on a stream of another device than the current
 *     one, or with a launch configuration a GPU refuses, fails as on a GPU;
 *   - cuBLAS and cuDNN check their arguments (leading dimensions, extents
 *     of every operand, descriptor shapes against each other, workspace);
 *   - cuDNN's algorithm heuristics (cudnnGet*Algorithm_v7) list, per shape,
 *     a non-deterministic algorithm, one with tensor-op math, one with a
 *     1 TiB workspace and (some shapes) one NOT_SUPPORTED before the good
 *     ones; a convolution handed the first, the last, or the tensor-op one
 *     under CUDNN_FMA_MATH aborts with one line (emu_cudnn.c).
 *   - pinned host memory (cudaHostAlloc) written again while a copy from it
 *     is not known to be done aborts with one line (emu_pinned.c).
 *   - stream capture and CUDA graphs (emu_graph.c): a capturing stream's
 *     work is recorded and runs at cudaGraphLaunch; a host synchronisation,
 *     an allocation or a free while a capture runs on the GPU fails as on
 *     a GPU (cudaErrorStreamCaptureUnsupported) and invalidates the
 *     capture; a captured copy of host memory that is not pinned aborts
 *     with one line.
 *   - CUDA's virtual memory functions (emu_vmm.c), through the runtime's
 *     driver entry points: reserved address space, mapped memory that is
 *     inaccessible until cuMemSetAccess, chunks mapped one after another
 *     one allocation for the checks above (DPTRAIN_CUDA_EMU_VMM=0: a
 *     driver without them).
 * With nccl.h at build time it also has NCCL (emu_nccl.c): communicators of
 * one unique id meet in shared memory, in one process or several (MPI
 * ranks), and sum in member order; two members on one GPU are refused as
 * NCCL refuses them, and misuse NCCL would not survive aborts with one line.
 * An all-reduce with a member whose GPU faulted never ends on the others'
 * GPUs (NCCL's kernels wait for it): their synchronising calls (stream and
 * event synchronisations, downloads, cudaFree) then wait for an
 * ncclCommAbort and, after HANG_SEC without one, abort with one line (on a
 * GPU they would wait for ever); queries say "not ready" meanwhile.
 * Settings (environment):
 *   DPTRAIN_CUDA_EMU_GPUS    GPUs of the machine (default 2; 0: none)
 *   CUDA_VISIBLE_DEVICES     as CUDA: the physical GPUs this process sees,
 *                            in its order (device d is the d-th listed); a
 *                            GPU's UUID names its physical index
 *   DPTRAIN_CUDA_EMU_MEMORY  bytes of memory per GPU (default 4 GiB): a
 *                            cudaMalloc beyond fails as out of memory
 *   DPTRAIN_CUDA_EMU_FAULT   N: the N-th kernel launch (from 1) faults: the
 *                            launch returns success, the GPU runs nothing
 *                            more, and every later call fails with an
 *                            illegal address error, for good (a sticky
 *                            error)
 *   DPTRAIN_CUDA_EMU_FAULT_SEEN  sync: the fault shows only from the GPU's
 *                            next synchronising call or query on (before,
 *                            calls succeed, as on a GPU whose faulting
 *                            kernel is still queued: the slow fault)
 *   DPTRAIN_CUDA_EMU_STATS   1: at exit, one stderr line counting kernel
 *                            launches, stream synchronisations (with the
 *                            event synchronisations: every call that makes
 *                            the host wait for a GPU), downloads (each
 *                            waits for its stream), uploads,
 *                            device-to-device copies and the streams'
 *                            waits for NCCL sums (cudaStreamWaitEvent on
 *                            an event recorded after one), graph launches
 *                            and the kernels they ran; and one line of
 *                            cuDNN's: descriptors created, heuristic
 *                            queries, calls refused as not supported,
 *                            convolutions run in bf16, fused
 *                            convolution-bias-activation calls (and those
 *                            with a ReLU), find queries; and
 *                            one of cuBLAS's: products run in FP32 and in
 *                            bf16
 *   DPTRAIN_CUDA_EMU_CUDNN_UNSUPPORTED  DIR:ALGO[@run],... (DIR fwd,
 *                            bwd_data or bwd_filter; ALGO a number or *):
 *                            cuDNN refuses those algorithms with
 *                            CUDNN_STATUS_NOT_SUPPORTED at the workspace
 *                            query and the convolution (@run: only at the
 *                            convolution); the entry "fused": every
 *                            cudnnConvolutionBiasActivationForward
 *   DPTRAIN_CUDA_EMU_REFUSE_CAPTURE  WHAT[:N][@GPU] (WHAT end,
 *                            instantiate, call or nccl): that step of a
 *                            capture (the N-th of a GPU, from 1, else
 *                            every one; on GPU only, else every GPU) is
 *                            refused as CUDA or NCCL refuse captures
 *                            (emu_graph.c says how)
 *   DPTRAIN_CUDA_EMU_EVENTS_PENDING  1: a recorded event is "not ready"
 *                            to cudaEventQuery until cudaEventSynchronize
 *                            (else done at once, as all work here): the
 *                            backend's path that waits for a staging slot
 * It does not show what only a GPU shows: races between streams (every
 * call runs to its end when made), the memory model, cuDNN's and cuBLAS's
 * own algorithms and rounding (here plain loops), the speed. */
#ifndef DPTRAIN_CUDA_EMULATOR_H
#define DPTRAIN_CUDA_EMULATOR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The device of an allocation holding [p, p + bytes); -1: none (host memory). */
int emu_device_of(const void *p, size_t bytes);
/* p's offset in its allocation ((size_t)-1: not device memory). */
size_t emu_allocation_offset(const void *p);
/* Aborts with one line unless [p, p + bytes) is memory of `device`. */
void emu_check_device_memory(const char *call, const char *what, const void *p, size_t bytes, int device);
/* emu_vmm.c's memory (CUDA's virtual memory functions): bytes of a device's
 * memory taken (-1: past DPTRAIN_CUDA_EMU_MEMORY) and given back; memory
 * mapped in a range made device memory of `device` (joined with the mapping
 * it follows), and unmapped (any part of such memory; -1 when it is none). */
int emu_memory_charge(int device, size_t bytes);
void emu_memory_uncharge(int device, size_t bytes);
void emu_mapping_add(char *ptr, size_t bytes, int device);
int emu_mapping_remove(char *ptr, size_t bytes);
/* The physical index of device `device` (CUDA_VISIBLE_DEVICES), -1: none. */
int emu_physical_gpu(int device);
/* The calling thread's current device (cudaSetDevice). */
int emu_current_device(void);
/* The device of a stream (NULL: the current device's legacy stream). */
int emu_stream_device(const void *stream);
/* NCCL sums in stream order (emu_runtime.c): emu_nccl.c tells of each sum
 * it queues on `stream`; emu_check_after_sums aborts with one line naming
 * `call` unless work queued on `stream` now runs after every sum queued so
 * far on its GPU's other streams (a cudaStreamWaitEvent on an event
 * recorded after them, or the host saw them done). emu_launch.c checks the
 * optimizer's kernel: on a GPU it would read gradients not yet summed. */
void emu_stream_summed(const void *stream);
void emu_check_after_sums(const char *call, const void *stream);
/* A fault of asynchronous work on `device` is sticky: its error (0 if none),
 * once calls see it (DPTRAIN_CUDA_EMU_FAULT_SEEN); emu_device_faulting:
 * also before (the GPU runs nothing more). */
int emu_device_fault(int device);
int emu_device_faulting(int device);
/* emu_pinned.c: pinned host memory made and freed; a copy from host memory
 * `src` queued on `stream` as its seq-th call (checked and kept when src is
 * pinned); the stream's calls up to seq known to be done (LONG_MAX: all). */
void emu_pinned_alloc(void *ptr, size_t bytes);
void emu_pinned_free(const void *ptr);
void emu_pinned_copy(const void *src, size_t bytes, const void *stream, long seq);
void emu_pinned_done(const void *stream, long seq);
/* 1 when [p, p + bytes) lies in one pinned allocation. */
int emu_pinned_contains(const void *p, size_t bytes);
/* emu_graph.c: a stream's capture (0: none, 1: active, 2: invalidated by a
 * refused call); a call a GPU refuses while a capture (not relaxed) runs on
 * `device`: cudaErrorStreamCaptureUnsupported, the capture invalidated (0:
 * allowed, no capture); a kernel launch or another call recorded into the
 * stream's capture (a copy of arg's bytes; fn(copy, stream) runs at each
 * launch of the graph), returning a cudaError_t; and the check that
 * captured host memory is pinned (else one line and abort). */
int emu_capture_status(const void *stream);
int emu_capture_refuses(const char *call, int device);
int emu_capture_kernel(const void *stream, const char *kernel, unsigned grid, unsigned block, int cooperative,
                       void (*fn)(void *), const void *arg, size_t arg_bytes);
int emu_capture_call(const void *stream, void (*fn)(void *, const void *), const void *arg, size_t arg_bytes);
void emu_capture_check_host(const char *call, const char *what, const void *p, size_t bytes);
/* Streams in a capture (emu_graph.c): an event recorded on a capturing
 * stream keeps the capture's id and the stream's work so far
 * (emu_capture_mark); a stream waiting on such an event joins that capture
 * (a fork), or, the capture's origin, joins the event's stream's work up
 * to the mark back into it (emu_capture_wait, returning a cudaError_t); an
 * NCCL sum captured on `stream` is noted (emu_capture_summed, after its
 * emu_capture_call) for the check that the optimizer's kernel is captured
 * after the origin joined it. */
void emu_capture_mark(const void *stream, long *id, long *work);
int emu_capture_wait(const void *stream, long id, long work, const void *event_stream);
void emu_capture_summed(const void *stream);
/* 1 when NCCL is to refuse this collective captured on `stream`
 * (DPTRAIN_CUDA_EMU_REFUSE_CAPTURE=nccl, emu_graph.c): the first of its
 * capture, once. */
int emu_capture_refuses_nccl(const void *stream);
/* A capturing stream made to wait on an event recorded outside any
 * capture: CUDA refuses the dependency (cudaErrorStreamCaptureIsolation)
 * and the capture is invalidated. */
void emu_capture_isolate(const void *stream);
/* emu_nccl.c registers the probe that says whether `device` has an NCCL
 * all-reduce that cannot end (a member's GPU faulted) and not aborted. */
void emu_set_nccl_hang_probe(int (*probe)(int device));

/* Runs fn(arg) as the kernel's every thread: grid x block threads, 1-D,
 * threadIdx/blockIdx set for each; `cooperative`: the block's threads run
 * as coroutines that meet at emu_syncthreads. On a capturing stream the
 * launch is recorded with a copy of the arg_bytes of arg (the closure),
 * which must be trivially copyable. Returns a cudaError_t. */
int emu_launch(const char *kernel, unsigned grid, unsigned block, const void *stream, int cooperative,
               void (*fn)(void *), void *arg, size_t arg_bytes);
void emu_syncthreads(void);

typedef struct {
    unsigned x, y, z;
} emu_dim3_t;
extern __thread emu_dim3_t emu_thread_idx, emu_block_idx, emu_block_dim, emu_grid_dim;

#ifdef __cplusplus
}
#endif

#endif
