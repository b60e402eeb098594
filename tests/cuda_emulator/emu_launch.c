/* emu_launch.c - kernel launches of the CUDA emulator (cuda_emulator.h): a
 * kernel runs when launched, on the launching thread, once per CUDA thread
 * of its grid (1-D), blocks in order. A kernel that meets at
 * __syncthreads is launched cooperatively: each block's threads are then
 * coroutines (ucontext) run in turn up to the next barrier, so shared
 * memory and the barrier behave as on a GPU. A launch a GPU refuses (an
 * empty or too large grid or block, a stream of another device than the
 * current one) sets the error a GPU gives and runs nothing.
 *
 * DESIGN. threadIdx, blockIdx, blockDim and gridDim are per launching
 * thread (several dptrain devices launch at once), set before each CUDA
 * thread runs or resumes; kernels read them afresh after a barrier. The
 * coroutines and their stacks are per launching thread, made at its first
 * cooperative launch and freed when it ends: coroutine t runs the kernel as
 * thread t of one block after another (a loop: entered once with
 * swapcontext). Between a coroutine and the scheduler the switch is
 * _setjmp / _longjmp, which leave the signal mask alone: swapcontext saves
 * and restores it with a system call at every switch (microseconds per
 * thread and barrier on a busy machine). Under ThreadSanitizer every
 * switch is swapcontext with its fiber switch (it follows those, not
 * longjmp between stacks). */
#define _GNU_SOURCE
#undef _FORTIFY_SOURCE /* its longjmp check refuses a jump to another stack */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "cuda_emulator.h"

__thread emu_dim3_t emu_thread_idx, emu_block_idx, emu_block_dim, emu_grid_dim;

void emu_fault_device(int device);   /* emu_runtime.c */
void emu_set_last_error(int error); /* emu_runtime.c */
int emu_run_kernel(const char *kernel, unsigned grid, unsigned block, const void *stream, int cooperative,
                   void (*fn)(void *), void *arg);

#define MAX_BLOCK 1024
#define STACK_BYTES (64 * 1024)

/* ThreadSanitizer follows the coroutines as its fibers (a switch orders
 * what each side did before it). */
#if defined(__SANITIZE_THREAD__)
#define EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EMU_TSAN 1
#endif
#endif
#ifdef EMU_TSAN
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
#endif

typedef struct {
    ucontext_t main, threads[MAX_BLOCK]; /* a coroutine's first entry (every switch under TSan) */
    jmp_buf main_jump, thread_jump[MAX_BLOCK];
#ifdef EMU_TSAN
    void *main_fiber, *fibers[MAX_BLOCK];
#endif
    char *stacks;
    int started[MAX_BLOCK], done[MAX_BLOCK];
    int current, active;
    void (*fn)(void *);
    void *arg;
} coop_t;

static __thread coop_t *coop;
static __thread const char *running; /* the kernel running on this thread, for messages */
static long launches;                /* launches made (not those of graphs): the statistics */
static long kernels_run;             /* kernels run, by launches and graphs: DPTRAIN_CUDA_EMU_FAULT */
long emu_stat_launches(void);
long emu_stat_launches(void) { return __atomic_load_n(&launches, __ATOMIC_RELAXED); }
static long fault_at;                /* DPTRAIN_CUDA_EMU_FAULT, read once */
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;

static void read_fault_setting(void) {
    const char *v = getenv("DPTRAIN_CUDA_EMU_FAULT");
    fault_at = v && *v ? strtol(v, NULL, 10) : 0;
}

/* Back to the block's scheduler (the launching thread's own stack); returns
 * when the scheduler resumes this coroutine. */
static __attribute__((noinline)) void to_main(coop_t *c) {
    int t = c->current;
#ifdef EMU_TSAN
    __tsan_switch_to_fiber(c->main_fiber, 0);
    swapcontext(&c->threads[t], &c->main);
#else
    if (!_setjmp(c->thread_jump[t])) _longjmp(c->main_jump, 1);
#endif
}

/* Runs coroutine t (c->current) up to its next barrier or its end. */
static __attribute__((noinline)) void resume(coop_t *c, int t) {
#ifdef EMU_TSAN
    __tsan_switch_to_fiber(c->fibers[t], 0);
    c->started[t] = 1;
    swapcontext(&c->main, &c->threads[t]);
#else
    if (!_setjmp(c->main_jump)) {
        if (c->started[t]) _longjmp(c->thread_jump[t], 1);
        c->started[t] = 1;
        swapcontext(&c->main, &c->threads[t]); /* the first entry; it comes back by _longjmp */
    }
#endif
}

/* Coroutine t: the kernel as thread t of each block in turn. */
static void coroutine_main(void) {
    coop_t *c = coop;
    for (;;) {
        c->fn(c->arg);
        c->done[c->current] = 1;
        to_main(c);
    }
}

void emu_syncthreads(void) {
    if (!coop || !coop->active) {
        fprintf(stderr, "cuda emulator: %s: __syncthreads in a kernel launched as not cooperative\n",
                running ? running : "a kernel");
        fflush(stderr);
        abort();
    }
    to_main(coop);
}

/* A launching thread's coroutines go with it (device threads come and go). */
static pthread_key_t coop_key;
static pthread_once_t coop_once = PTHREAD_ONCE_INIT;
static void coop_free(void *p) {
    coop_t *c = p;
#ifdef EMU_TSAN
    for (int t = 0; t < MAX_BLOCK; t++)
        if (c->fibers[t]) __tsan_destroy_fiber(c->fibers[t]);
#endif
    free(c->stacks);
    free(c);
}
static void coop_key_make(void) { pthread_key_create(&coop_key, coop_free); }

static void run_cooperative(unsigned block, void (*fn)(void *), void *arg) {
    if (!coop) {
        pthread_once(&coop_once, coop_key_make);
        coop = calloc(1, sizeof *coop);
        if (coop) coop->stacks = malloc((size_t)MAX_BLOCK * STACK_BYTES);
        if (!coop || !coop->stacks) abort();
        pthread_setspecific(coop_key, coop);
    }
    coop_t *c = coop;
    c->fn = fn;
    c->arg = arg;
    c->active = 1;
    for (unsigned t = 0; t < block; t++) {
        if (!c->started[t]) { /* made once per launching thread */
            getcontext(&c->threads[t]);
            c->threads[t].uc_stack.ss_sp = c->stacks + (size_t)t * STACK_BYTES;
            c->threads[t].uc_stack.ss_size = STACK_BYTES;
            c->threads[t].uc_link = NULL; /* never returns */
            makecontext(&c->threads[t], coroutine_main, 0);
#ifdef EMU_TSAN
            c->fibers[t] = __tsan_create_fiber(0);
#endif
        }
        c->done[t] = 0;
    }
#ifdef EMU_TSAN
    c->main_fiber = __tsan_get_current_fiber();
#endif
    /* rounds: every thread runs to its next barrier (or its end) */
    for (int left = 1; left;) {
        left = 0;
        for (unsigned t = 0; t < block; t++) {
            if (c->done[t]) continue;
            c->current = (int)t;
            emu_thread_idx = (emu_dim3_t){t, 0, 0};
            resume(c, (int)t);
            left |= !c->done[t];
        }
    }
    c->active = 0;
}

int emu_launch(const char *kernel, unsigned grid, unsigned block, const void *stream, int cooperative,
               void (*fn)(void *), void *arg, size_t arg_bytes) {
    int device = emu_stream_device(stream);
    int refused = device != emu_current_device() ? cudaErrorInvalidResourceHandle /* as cudaLaunchKernel */
                  : grid == 0 || grid > 2147483647u || block == 0 || block > MAX_BLOCK ? cudaErrorInvalidConfiguration
                                                                                        : 0;
    if (refused) {
        emu_set_last_error(refused);
        return refused;
    }
    if (emu_capture_status(stream)) /* recorded, run by cudaGraphLaunch (emu_graph.c) */
        return emu_capture_kernel(stream, kernel, grid, block, cooperative, fn, arg, arg_bytes);
    if (strcmp(kernel, "optim_kernel") == 0) emu_check_after_sums("the optimizer's kernel", stream); /* reads the sums */
    if (!emu_device_faulting(device)) __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED);
    return emu_run_kernel(kernel, grid, block, stream, cooperative, fn, arg);
}

/* A launch that runs: now (emu_launch) or from a graph (emu_graph.c). The
 * DPTRAIN_CUDA_EMU_FAULT count takes both. */
int emu_run_kernel(const char *kernel, unsigned grid, unsigned block, const void *stream, int cooperative,
                   void (*fn)(void *), void *arg) {
    int device = emu_stream_device(stream);
    if (emu_device_faulting(device)) return cudaSuccess; /* a faulted GPU runs nothing more */
    pthread_once(&fault_once, read_fault_setting);
    if (__atomic_add_fetch(&kernels_run, 1, __ATOMIC_SEQ_CST) == fault_at) {
        emu_fault_device(device); /* seen at the next synchronising call, as a GPU's fault */
        return cudaSuccess;
    }
    const char *outer = running;
    running = kernel;
    emu_grid_dim = (emu_dim3_t){grid, 1, 1};
    emu_block_dim = (emu_dim3_t){block, 1, 1};
    for (unsigned b = 0; b < grid; b++) {
        emu_block_idx = (emu_dim3_t){b, 0, 0};
        if (cooperative) {
            run_cooperative(block, fn, arg);
            continue;
        }
        for (unsigned t = 0; t < block; t++) {
            emu_thread_idx = (emu_dim3_t){t, 0, 0};
            fn(arg);
        }
    }
    running = outer;
    return cudaSuccess;
}
