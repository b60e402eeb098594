/* file_atomic.c - atomic file replacement (dp_file_begin / dp_file_commit).
 *
 * dp_file_begin creates "PATH.tmp.XXXXXX" with mkstemp in the target's own
 * directory (rename is only atomic within one file system). dp_file_commit
 * checks the stream's error flag, then fflush, fsync, fclose and rename over
 * the target, and finally fsyncs the directory so the rename itself is
 * durable. Readers therefore see either the old file or the complete new
 * one, never a torn file. On any failure the temporary file is removed and
 * the status is DP_ERR_IO with a message naming the target path and the
 * cause: the errno of the first write, flush, fsync, close or rename that
 * failed ("No space left on device"), not a generic one.
 * dp_file_check_writable says beforehand whether a path can be written
 * there (dp_fit and `dptrain train` check their outputs with it).
 *
 * The stream is stdio over the file descriptor through fopencookie, whose
 * write function records the errno of the first failing write(2): stdio
 * itself keeps only an error flag, and a caller's fwrite that failed long
 * before the commit would otherwise be reported as EIO.
 *
 * DESIGN. Any thread may begin and commit files (rank 0's checkpoints, the
 * plot, an export). Each open stream's record (descriptor, first errno) is
 * its own: only the stream's writer touches it, through stdio. The list of
 * open records, through which dp_file_commit finds a stream's record, is
 * the one shared thing: files_lock guards every link and unlink of it.
 *
 * mkstemp creates files with mode 0600; the temporary file gets the mode of
 * the file it replaces, or 0644 for a new file (reading the umask safely is
 * not possible in a threaded process).
 */
#define _GNU_SOURCE /* fopencookie */
#include "dptrain/io.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

dp_status_t dp_file_check_writable(const char *what, const char *path) {
    char copy[4096];
    if (!*path) return dp_fail(DP_ERR_ARG, "%s is \"\" (no file named)", what);
    if (strlen(path) >= sizeof copy)
        return dp_fail(DP_ERR_ARG, "%s: a path of %zu bytes (at most %zu)", what, strlen(path), sizeof copy - 1);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return dp_fail(DP_ERR_IO, "%s %s is a directory (the name of a file to write is expected)", what, path);
    snprintf(copy, sizeof copy, "%s", path);
    const char *dir = dirname(copy);
    if (access(dir, W_OK) != 0)
        return dp_fail(DP_ERR_IO, "%s %s: directory '%s' is not writable (%s)", what, path, dir, strerror(errno));
    return DP_OK;
}

/* An open temporary file: its descriptor and the first write's errno. */
typedef struct atomic_file {
    FILE *stream;
    int fd;
    int first_errno; /* 0 until a write fails */
    struct atomic_file *next;
} atomic_file_t;

static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_file_t *files; /* the open ones */

static ssize_t cookie_write(void *cookie, const char *buf, size_t size) {
    atomic_file_t *f = cookie;
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(f->fd, buf + done, size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (!f->first_errno) f->first_errno = n < 0 ? errno : ENOSPC;
            return done > 0 ? (ssize_t)done : -1;
        }
        done += (size_t)n;
    }
    return (ssize_t)done;
}

static int cookie_close(void *cookie) {
    atomic_file_t *f = cookie;
    int status = close(f->fd);
    if (status != 0 && !f->first_errno) f->first_errno = errno;
    return status;
}

/* Takes the record of `stream` out of the list (NULL: not one of ours). */
static atomic_file_t *take_record(FILE *stream) {
    pthread_mutex_lock(&files_lock);
    atomic_file_t **link = &files;
    while (*link && (*link)->stream != stream) link = &(*link)->next;
    atomic_file_t *f = *link;
    if (f) *link = f->next;
    pthread_mutex_unlock(&files_lock);
    return f;
}

dp_status_t dp_file_begin(const char *path, char *tmp_path, size_t tmp_size, FILE **out) {
    *out = NULL;
    if (tmp_size > 0) tmp_path[0] = '\0';
    int n = snprintf(tmp_path, tmp_size, "%s.tmp.XXXXXX", path);
    if (n < 0 || (size_t)n >= tmp_size)
        return dp_fail(DP_ERR_ARG, "%s: path too long for a temporary name (%zu bytes available)",
                       path, tmp_size);
    int fd = mkstemp(tmp_path);
    if (fd < 0) {
        int err = errno;
        tmp_path[0] = '\0';
        return dp_fail(DP_ERR_IO, "%s: cannot create a temporary file next to it: %s", path,
                       strerror(err));
    }
    struct stat st;
    mode_t mode = stat(path, &st) == 0 ? (st.st_mode & 07777) : 0644;
    (void)fchmod(fd, mode); /* cosmetic: the file stays usable at 0600 */
    atomic_file_t *record = dp_alloc_zeroed(1, sizeof *record, "atomic file");
    FILE *f = NULL;
    if (record) {
        record->fd = fd;
        f = fopencookie(record, "wb", (cookie_io_functions_t){.write = cookie_write, .close = cookie_close});
    }
    if (!f) {
        int err = record ? errno : ENOMEM;
        free(record);
        close(fd);
        unlink(tmp_path);
        tmp_path[0] = '\0';
        return dp_fail(DP_ERR_IO, "%s: cannot open the temporary file: %s", path, strerror(err));
    }
    record->stream = f;
    pthread_mutex_lock(&files_lock);
    record->next = files;
    files = record;
    pthread_mutex_unlock(&files_lock);
    *out = f;
    return DP_OK;
}

/* Makes a completed rename durable; failure here is not reported because
 * some file systems cannot fsync a directory and the file is already in
 * place. */
static void sync_parent_dir(const char *path) {
    char copy[4096];
    if (snprintf(copy, sizeof copy, "%s", path) >= (int)sizeof copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

dp_status_t dp_file_commit(FILE *tmp, const char *tmp_path, const char *path) {
    if (!tmp) {
        if (tmp_path && tmp_path[0]) unlink(tmp_path);
        return dp_fail(DP_ERR_ARG, "%s: no temporary file to commit", path);
    }
    atomic_file_t *record = take_record(tmp);
    const char *failed = NULL;
    int err = 0;
    if (ferror(tmp) || fflush(tmp) != 0) { /* the first failed write's errno, from the cookie */
        failed = "write";
        err = record && record->first_errno ? record->first_errno : errno ? errno : EIO;
    } else if (fsync(record ? record->fd : fileno(tmp)) != 0) {
        failed = "fsync";
        err = errno;
    }
    /* fclose in every case; its failure matters only if all else went well. */
    if (fclose(tmp) != 0 && !failed) {
        failed = "close";
        err = record && record->first_errno ? record->first_errno : errno;
    }
    free(record);
    if (!failed && rename(tmp_path, path) != 0) {
        failed = "rename";
        err = errno;
    }
    if (failed) {
        unlink(tmp_path);
        return dp_fail(DP_ERR_IO, "%s: %s of the temporary file %s failed: %s", path, failed,
                       tmp_path, strerror(err));
    }
    sync_parent_dir(path);
    return DP_OK;
}
