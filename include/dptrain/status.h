/* status.h - status codes, the thread-local error message, checked allocation.
 *
 * Library functions return a dp_status_t and never exit. On failure they
 * leave a one-line message (naming the file, field, expected and found
 * values) that the caller reads with dp_error_message(); only main() prints
 * it and exits. The message is per thread, so device workers do not clobber
 * each other's errors.
 */
#ifndef DPTRAIN_STATUS_H
#define DPTRAIN_STATUS_H

#include <stddef.h>

typedef enum {
    DP_OK = 0,
    DP_ERR_ARG,     /* a bad argument or option value */
    DP_ERR_IO,      /* a file could not be opened, read or written */
    DP_ERR_FORMAT,  /* a file's content is not what it must be */
    DP_ERR_NOMEM,   /* an allocation failed */
    DP_ERR_SHAPE,   /* tensor shapes do not fit together */
    /* Faults, not mistakes: the same command may well succeed when run again
     * (dptrain launch restarts them; docs/multi-process.md's exit codes). */
    DP_ERR_DEVICE,    /* a device failed: a GPU that does not start, faults or is lost */
    DP_ERR_COMM,      /* a rank was lost or stopped answering, or the communication failed */
    DP_ERR_PREEMPTED, /* asked to stop (SIGTERM): saved at a step boundary, then stopped */
    /* Neither: the same run would end the same way. */
    DP_ERR_DIVERGED,  /* training diverged: the model's floats became NaN or infinite (nothing saved
                         from them) */
} dp_status_t;

/* Sets this thread's error message (printf-style) and returns `status`, so
 * that `return dp_fail(DP_ERR_ARG, "...")` reads naturally. */
dp_status_t dp_fail(dp_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* This thread's last error message ("" if none). */
const char *dp_error_message(void);

/* The status of this thread's last dp_fail (DP_OK if none since the last
 * dp_error_clear): what a function that returns only NULL on failure (a
 * tape op, an arena allocation) failed with, so that a caller passes on
 * "out of memory" as such rather than as a shape error. */
dp_status_t dp_error_status(void);

/* Clears this thread's error message and status. */
void dp_error_clear(void);

/* Short name of a status ("bad argument", "I/O error", ...). */
const char *dp_status_name(dp_status_t status);

/* Checked allocation: NULL and an error message naming `what` on failure.
 * dp_alloc_aligned returns 64-byte aligned memory, released with free(). */
void *dp_alloc(size_t bytes, const char *what);
void *dp_alloc_zeroed(size_t count, size_t size, const char *what);
void *dp_alloc_aligned(size_t bytes, const char *what);

/* Always-on assertion for internal invariants (not for user input). */
#define DP_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) dp_assert_failed(#cond, __FILE__, __LINE__);              \
    } while (0)
void dp_assert_failed(const char *cond, const char *file, int line)
    __attribute__((noreturn));

/* Propagates a failing status to the caller. */
#define DP_TRY(expr)                                                           \
    do {                                                                       \
        dp_status_t dp_try_status_ = (expr);                                   \
        if (dp_try_status_ != DP_OK) return dp_try_status_;                    \
    } while (0)

#endif
