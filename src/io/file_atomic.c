/* file_atomic.c - atomic file replacement (dp_file_begin / dp_file_commit).
 *
 * dp_file_begin creates "PATH.tmp.XXXXXX" with mkstemp in the target's own
 * directory (rename is only atomic within one file system). dp_file_commit
 * checks the stream's error flag, then fflush, fsync, fclose and rename over
 * the target, and finally fsyncs the directory so the rename itself is
 * durable. Readers therefore see either the old file or the complete new
 * one, never a torn file. On any failure the temporary file is removed and
 * the status is DP_ERR_IO with a message naming the target path.
 *
 * mkstemp creates files with mode 0600; the temporary file gets the mode of
 * the file it replaces, or 0644 for a new file (reading the umask safely is
 * not possible in a threaded process).
 */
#include "dptrain/io.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int err = errno;
        close(fd);
        unlink(tmp_path);
        tmp_path[0] = '\0';
        return dp_fail(DP_ERR_IO, "%s: cannot open the temporary file: %s", path, strerror(err));
    }
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
    const char *failed = NULL;
    int err = 0;
    if (ferror(tmp)) {
        failed = "write";
        err = EIO;
    } else if (fflush(tmp) != 0) {
        failed = "write";
        err = errno;
    } else if (fsync(fileno(tmp)) != 0) {
        failed = "fsync";
        err = errno;
    }
    /* fclose in every case; its failure matters only if all else went well. */
    if (fclose(tmp) != 0 && !failed) {
        failed = "close";
        err = errno;
    }
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
