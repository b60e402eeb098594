/* test_io.c - metrics JSON lines, the SVG plot, atomic file replacement,
 * the progress bar and json.h's string writer (its escapes, \udcXX for a
 * byte that is not UTF-8, the text UTF-8 throughout).
 *
 * JSON and SVG are checked with two tiny validators below (a JSON syntax
 * checker and an XML tag-balance checker), plus exact text where it is
 * known. The progress bar is checked on a tmpfile (no output at all) and,
 * when the system has pseudo-terminals, on a real terminal.
 */
#define _XOPEN_SOURCE 700 /* posix_openpt, grantpt, unlockpt, ptsname */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dptrain/io.h"
#include "dptrain/json.h"
#include "testing.h"

/* --- helpers ------------------------------------------------------------- */

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(s);
        return NULL;
    }
    s[n] = '\0';
    fclose(f);
    return s;
}

/* read_text that never returns NULL: a missing file is a failure and "". */
static char *read_text_checked(const char *path) {
    char *s = read_text(path);
    CHECK(s != NULL, "cannot read %s", path);
    if (!s) s = calloc(1, 1);
    if (!s) exit(2);
    return s;
}



/* A JSON syntax check: returns the end of one value, or NULL. */
static const char *json_value(const char *p);

static const char *json_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static const char *json_string(const char *p) {
    if (*p++ != '"') return NULL;
    while (*p && *p != '"') {
        if ((unsigned char)*p < 0x20) return NULL;
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i]) return NULL;
                p += 4;
            } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
                return NULL;
            }
        }
        p++;
    }
    return *p == '"' ? p + 1 : NULL;
}

static const char *json_number(const char *p) {
    if (*p == '-') p++;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (*p >= '0' && *p <= '9') p++;
    else return NULL;
    if (*p == '.') {
        p++;
        if (!(*p >= '0' && *p <= '9')) return NULL;
        while (*p >= '0' && *p <= '9') p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return NULL;
        while (*p >= '0' && *p <= '9') p++;
    }
    return p;
}

static const char *json_value(const char *p) {
    p = json_ws(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        int object = *p == '{';
        p = json_ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (object) {
                p = json_string(json_ws(p));
                if (!p) return NULL;
                p = json_ws(p);
                if (*p++ != ':') return NULL;
            }
            p = json_value(p);
            if (!p) return NULL;
            p = json_ws(p);
            if (*p == close) return p + 1;
            if (*p++ != ',') return NULL;
        }
    }
    if (*p == '"') return json_string(p);
    if (!strncmp(p, "null", 4)) return p + 4;
    if (!strncmp(p, "true", 4)) return p + 4;
    if (!strncmp(p, "false", 5)) return p + 5;
    return json_number(p);
}

/* One JSON object followed by exactly "\n". */
static int json_line_ok(const char *line, size_t len) {
    if (len == 0 || line[0] != '{') return 0;
    const char *end = json_value(line);
    return end && end == line + len - 1 && *end == '\n';
}

/* Tag balance of an XML document: every element closed in order. */
static int xml_balanced(const char *s) {
    char stack[64][32];
    int depth = 0, roots = 0;
    const char *p = s;
    while ((p = strchr(p, '<')) != NULL) {
        if (!strncmp(p, "<?", 2)) {
            p = strstr(p, "?>");
            if (!p) return 0;
            continue;
        }
        if (!strncmp(p, "<!--", 4)) {
            p = strstr(p, "-->");
            if (!p) return 0;
            continue;
        }
        const char *end = strchr(p, '>');
        if (!end) return 0;
        int closing = p[1] == '/';
        const char *name = p + 1 + closing;
        size_t n = strcspn(name, " \t\n/>");
        if (n == 0 || n >= 32) return 0;
        if (closing) {
            if (depth == 0 || strncmp(stack[depth - 1], name, n) || stack[depth - 1][n]) return 0;
            depth--;
        } else if (end[-1] != '/') {
            if (depth == 0) roots++;
            if (depth == 64) return 0;
            memcpy(stack[depth], name, n);
            stack[depth++][n] = '\0';
        }
        p = end + 1;
    }
    return depth == 0 && roots == 1;
}

static dp_epoch_stats_t make_stats(int epoch) {
    dp_epoch_stats_t s = {.epoch = epoch,
                          .train_loss = 2.0 / (epoch + 1),
                          .train_acc = 0.6 + 0.03 * epoch,
                          .test_acc = 0.58 + 0.028 * epoch,
                          .epoch_sec = 3.25,
                          .images_per_sec = 18461.5,
                          .devices = "cpu:0,cpu:1",
                          .num_devices = 2,
                          .num_ranks = 1,
                          .lr = 0.1};
    return s;
}

/* --- metrics ------------------------------------------------------------- */

static void test_metrics(void) {
    const char *path = testing_tmp_file("metrics.jsonl");
    dp_epoch_stats_t s = {.epoch = 1, .train_loss = 0.5, .train_acc = 0.8125, .test_acc = 0.75, .epoch_sec = 2.5,
                          .images_per_sec = 24000, .devices = "cpu:0,cpu:1", .num_devices = 2, .num_ranks = 1,
                          .lr = 0.05};
    CHECK(dp_metrics_append(path, &s) == DP_OK, "append 1: %s", dp_error_message());
    char *text = read_text_checked(path);
    const char *expected =
        "{\"epoch\": 1, \"train_loss\": 0.5, \"train_acc\": 0.8125, \"test_acc\": 0.75, "
        "\"epoch_sec\": 2.5, \"images_per_sec\": 24000, \"lr\": 0.05, \"devices\": [\"cpu:0\",\"cpu:1\"], "
        "\"num_devices\": 2, \"ranks\": 1}\n";
    CHECK(strcmp(text, expected) == 0, "line:\n%s\nexpected:\n%s", text, expected);
    CHECK(json_line_ok(text, strlen(text)), "valid JSON line");
    free(text);
    /* files an image folder left out: the key only then */
    const char *skipped_path = testing_tmp_file("metrics_skipped.jsonl");
    dp_epoch_stats_t sk = s;
    sk.skipped_files = 7;
    CHECK(dp_metrics_append(skipped_path, &sk) == DP_OK, "append: %s", dp_error_message());
    text = read_text_checked(skipped_path);
    CHECK(strstr(text, ", \"ranks\": 1, \"skipped_files\": 7}\n") && json_line_ok(text, strlen(text)),
          "skipped_files: %s", text);
    free(text);
    /* a smoothed training loss: the key right after it, only then */
    const char *smoothed_path = testing_tmp_file("metrics_smoothed.jsonl");
    dp_epoch_stats_t ls = s;
    ls.label_smoothing = 0.1;
    CHECK(dp_metrics_append(smoothed_path, &ls) == DP_OK, "append: %s", dp_error_message());
    text = read_text_checked(smoothed_path);
    CHECK(strstr(text, "\"train_loss\": 0.5, \"label_smoothing\": 0.1, \"train_acc\"") &&
              json_line_ok(text, strlen(text)),
          "label_smoothing: %s", text);
    free(text);

    /* Appending adds lines; NaN and inf become null; precision survives. */
    dp_epoch_stats_t t = {.epoch = 2, .train_loss = NAN, .train_acc = 1.0 / 3.0, .test_acc = INFINITY,
                          .epoch_sec = -INFINITY, .images_per_sec = 1e-10, .devices = " cpu:0 ,, gpu\"x\\ ",
                          .num_devices = 1, .num_ranks = 1, .lr = 0.1};
    CHECK(dp_metrics_append(path, &t) == DP_OK, "append 2: %s", dp_error_message());
    dp_epoch_stats_t u = {.epoch = 3, .train_loss = 0.1, .train_acc = 0.2, .test_acc = 0.3, .epoch_sec = 0.4,
                          .images_per_sec = 0.5, .lr = 0.1};
    CHECK(dp_metrics_append(path, &u) == DP_OK, "append 3: %s", dp_error_message());
    text = read_text_checked(path);
    int lines = 0, all_valid = 1;
    for (char *line = text; *line;) {
        char *nl = strchr(line, '\n');
        if (!nl) {
            all_valid = 0;
            break;
        }
        all_valid &= json_line_ok(line, (size_t)(nl - line + 1));
        lines++;
        line = nl + 1;
    }
    CHECK(lines == 3 && all_valid, "3 valid JSON lines, found %d (valid %d)", lines, all_valid);
    CHECK(strstr(text, "\"train_loss\": null") && strstr(text, "\"test_acc\": null") &&
              strstr(text, "\"epoch_sec\": null"),
          "NaN and inf are null:\n%s", text);
    CHECK(strstr(text, "\"train_acc\": 0.333333333"), "9 significant digits:\n%s", text);
    CHECK(strstr(text, "\"images_per_sec\": 1e-10"), "exponent form:\n%s", text);
    CHECK(strstr(text, "\"devices\": [\"cpu:0\",\"gpu\\\"x\\\\\"]"),
          "device names trimmed, empty skipped, escaped:\n%s", text);
    CHECK(strstr(text, "\"devices\": [], \"num_devices\": 0"), "no devices -> []:\n%s",
          text);
    CHECK(strncmp(text, expected, strlen(expected)) == 0, "first line kept");
    CHECK(!strstr(text, "grad_norm"), "no gradient clipping, no norms:\n%s", text);
    free(text);

    /* gradient clipping's norms: right after lr, only then */
    const char *clip_path = testing_tmp_file("metrics_clip.jsonl");
    dp_epoch_stats_t c = s;
    c.grad_norm_steps = 4;
    c.grad_norm_mean = 0.75;
    c.grad_norm_max = 1.5;
    c.clipped_fraction = 0.25;
    CHECK(dp_metrics_append(clip_path, &c) == DP_OK, "append: %s", dp_error_message());
    text = read_text_checked(clip_path);
    CHECK(strstr(text, "\"lr\": 0.05, \"grad_norm_mean\": 0.75, \"grad_norm_max\": 1.5, \"clipped_fraction\": 0.25, "
                       "\"devices\""), "the norms after lr:\n%s", text);
    free(text);

    /* top-5: right after test_acc (before test_acc_ema), only when set */
    const char *top5_path = testing_tmp_file("metrics_top5.jsonl");
    dp_epoch_stats_t t5 = s;
    t5.has_acc5 = 1;
    t5.test_acc5 = 0.9375;
    CHECK(dp_metrics_append(top5_path, &t5) == DP_OK, "append: %s", dp_error_message());
    t5.has_ema = 1;
    t5.test_acc_ema = 0.625;
    CHECK(dp_metrics_append(top5_path, &t5) == DP_OK, "append: %s", dp_error_message());
    t5.has_acc5 = 0;
    CHECK(dp_metrics_append(top5_path, &t5) == DP_OK, "append: %s", dp_error_message());
    text = read_text_checked(top5_path);
    const char *top5_lines[3] = {"\"test_acc\": 0.75, \"test_acc5\": 0.9375, \"epoch_sec\"",
                                 "\"test_acc\": 0.75, \"test_acc5\": 0.9375, \"test_acc_ema\": 0.625, \"epoch_sec\"",
                                 "\"test_acc\": 0.75, \"test_acc_ema\": 0.625, \"epoch_sec\""};
    const char *at = text;
    for (int i = 0; i < 3 && at; i++) {
        const char *end = strchr(at, '\n');
        const char *found = strstr(at, top5_lines[i]);
        CHECK(end && found && found < end && json_line_ok(at, (size_t)(end - at + 1)), "line %d has no '%s':\n%s",
              i + 1, top5_lines[i], text);
        at = end ? end + 1 : NULL;
    }
    free(text);

    /* every key, each number at its longest (the line's size bound; a line that did not fit would abort) */
    const char *long_path = testing_tmp_file("metrics_longest.jsonl");
    const double tiny = -1.23456789e-308; /* %.9g: 16 characters */
    dp_epoch_stats_t w = {.epoch = INT_MIN, .train_loss = tiny, .train_acc = tiny, .test_acc = tiny,
                          .has_acc5 = 1, .test_acc5 = tiny, .epoch_sec = tiny, .images_per_sec = tiny,
                          .num_devices = INT_MIN, .num_ranks = INT_MAX, .lr = tiny, .device_mem_peak = SIZE_MAX,
                          .skipped_files = LONG_MIN, .label_smoothing = tiny, .grad_norm_steps = 1,
                          .grad_norm_mean = tiny, .grad_norm_max = tiny, .clipped_fraction = tiny, .has_ema = 1,
                          .test_acc_ema = tiny};
    CHECK(dp_metrics_append(long_path, &w) == DP_OK, "append: %s", dp_error_message());
    text = read_text_checked(long_path);
    CHECK(json_line_ok(text, strlen(text)) && strstr(text, "\"test_acc5\": -1.23456789e-308, \"test_acc_ema\"") &&
              strstr(text, "\"skipped_files\": -9223372036854775808}"), "the longest line:\n%s", text);
    free(text);

    const char *bad = "/nonexistent-dptrain-dir/metrics.jsonl";
    dp_status_t st = dp_metrics_append(bad, &s);
    CHECK(st == DP_ERR_IO && strstr(dp_error_message(), bad), "unwritable: %s (%s)",
          dp_status_name(st), dp_error_message());
}

/* --- plot ---------------------------------------------------------------- */

static void check_svg(const char *path, const char *what) {
    char *svg = read_text(path);
    CHECK(svg != NULL, "%s: %s exists", what, path);
    if (!svg) return;
    CHECK(!strncmp(svg, "<?xml", 5) || !strncmp(svg, "<svg", 4), "%s: starts as SVG", what);
    CHECK(strstr(svg, "<svg") && strstr(svg, "</svg>\n") == svg + strlen(svg) - 7,
          "%s: ends with </svg>", what);
    CHECK(strstr(svg, "train loss") && strstr(svg, "train acc") && strstr(svg, "test acc"),
          "%s: names the three series", what);
    CHECK(strstr(svg, ">epoch<") && strstr(svg, ">loss<") && strstr(svg, ">accuracy<"),
          "%s: axis labels", what);
    CHECK(xml_balanced(svg), "%s: tags balanced", what);
    CHECK(!strstr(svg, "nan") && !strstr(svg, "inf"), "%s: no nan/inf coordinates", what);
    free(svg);
}

static void test_plot(void) {
    dp_epoch_stats_t stats[200];
    for (int i = 0; i < 200; i++) stats[i] = make_stats(i + 1);

    const char *path = testing_tmp_file("curves.svg");
    CHECK(dp_plot_write_svg(path, stats, 10) == DP_OK, "10 epochs: %s", dp_error_message());
    check_svg(path, "10 epochs");
    char *svg = read_text_checked(path);
    CHECK(strstr(svg, "<polyline"), "lines drawn");
    CHECK(strstr(svg, "<circle") && strstr(svg, "<rect x") && strstr(svg, "<path"),
          "markers drawn");
    CHECK(strstr(svg, ">10<"), "last epoch tick");
    CHECK(strstr(svg, "cpu:0,cpu:1"), "devices in the title");
    CHECK(!strstr(svg, "smoothing"), "no label smoothing named without it");
    free(svg);
    /* a smoothed loss: its axis says so */
    stats[9].label_smoothing = 0.1;
    CHECK(dp_plot_write_svg(path, stats, 10) == DP_OK, "10 epochs, smoothed: %s", dp_error_message());
    svg = read_text_checked(path);
    CHECK(strstr(svg, ">loss (label smoothing 0.1)<") != NULL, "the loss axis names the label smoothing");
    free(svg);
    stats[9].label_smoothing = 0.0;
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644, "new file mode 0644 (%o)",
          (unsigned)(st.st_mode & 0777));

    /* Overwrite with a single epoch. */
    CHECK(dp_plot_write_svg(path, stats, 1) == DP_OK, "1 epoch: %s", dp_error_message());
    check_svg(path, "1 epoch");
    svg = read_text_checked(path);
    CHECK(strstr(svg, "<circle") && !strstr(svg, ">2<"), "single point, one epoch tick");
    free(svg);

    const char *many = testing_tmp_file("many.svg");
    CHECK(dp_plot_write_svg(many, stats, 200) == DP_OK, "200 epochs: %s", dp_error_message());
    check_svg(many, "200 epochs");

    /* Non-finite values break the lines, not the file. */
    stats[3].train_loss = NAN;
    stats[4].train_loss = INFINITY;
    stats[6].test_acc = NAN;
    stats[0].devices = "<cpu&0>";
    const char *gaps = testing_tmp_file("gaps.svg");
    CHECK(dp_plot_write_svg(gaps, stats, 8) == DP_OK, "with NaN: %s", dp_error_message());
    check_svg(gaps, "with NaN");
    /* all-NaN loss */
    for (int i = 0; i < 8; i++) stats[i].train_loss = NAN;
    CHECK(dp_plot_write_svg(gaps, stats, 8) == DP_OK, "all NaN loss: %s", dp_error_message());
    check_svg(gaps, "all NaN loss");
    stats[0] = make_stats(1);

    CHECK(dp_plot_write_svg(path, stats, 0) == DP_ERR_ARG, "0 epochs rejected");

    /* A directory that does not exist: DP_ERR_IO naming the path. */
    char missing_dir[600], bad[700];
    snprintf(missing_dir, sizeof missing_dir, "%s/no-such-dir", testing_tmpdir());
    snprintf(bad, sizeof bad, "%s/plot.svg", missing_dir);
    dp_status_t s = dp_plot_write_svg(bad, stats, 3);
    CHECK(s == DP_ERR_IO && strstr(dp_error_message(), bad), "missing dir: %s (%s)",
          dp_status_name(s), dp_error_message());
    CHECK(access(missing_dir, F_OK) != 0, "no directory created");
    CHECK(testing_count_entries(testing_tmpdir(), ".tmp.") == 0, "no temp files left");

    /* The target is a directory: the rename fails, the temp file goes away. */
    const char *target_dir = testing_tmp_file("plot-is-a-dir.svg");
    CHECK(mkdir(target_dir, 0755) == 0, "mkdir");
    s = dp_plot_write_svg(target_dir, stats, 3);
    CHECK(s == DP_ERR_IO && strstr(dp_error_message(), target_dir), "rename onto dir: %s (%s)",
          dp_status_name(s), dp_error_message());
    CHECK(testing_count_entries(testing_tmpdir(), ".tmp.") == 0, "temp file removed after failed commit");
}

static void test_file_atomic(void) {
    const char *path = testing_tmp_file("atomic.txt");
    FILE *f = fopen(path, "w");
    fputs("old content\n", f);
    fclose(f);
    chmod(path, 0600);

    char tmp_path[600];
    FILE *out = NULL;
    CHECK(dp_file_begin(path, tmp_path, sizeof tmp_path, &out) == DP_OK, "begin: %s",
          dp_error_message());
    if (!out) return;
    CHECK(strncmp(tmp_path, path, strlen(path)) == 0 && strstr(tmp_path, ".tmp."),
          "temp name next to the target: %s", tmp_path);
    fputs("new content\n", out);
    char *text = read_text_checked(path);
    CHECK(!strcmp(text, "old content\n"), "target untouched before commit");
    free(text);
    CHECK(dp_file_commit(out, tmp_path, path) == DP_OK, "commit: %s", dp_error_message());
    text = read_text_checked(path);
    CHECK(!strcmp(text, "new content\n"), "target replaced: %s", text);
    free(text);
    CHECK(access(tmp_path, F_OK) != 0, "temp name gone after commit");
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "mode kept (%o)",
          (unsigned)(st.st_mode & 0777));

    char small[8];
    CHECK(dp_file_begin(path, small, sizeof small, &out) == DP_ERR_ARG && out == NULL,
          "tmp_path buffer too small: %s", dp_error_message());
    CHECK(testing_count_entries(testing_tmpdir(), ".tmp.") == 0, "no temp files left");
}

/* A write that fails at the file size limit (RLIMIT_FSIZE: EFBIG, as a
 * full disk gives ENOSPC) long before the commit: the commit names that
 * errno, not a generic EIO, and the old file stays. */
static void test_file_atomic_write_error(void) {
    const char *path = testing_tmp_file("atomic-big.bin");
    FILE *f = fopen(path, "w");
    fputs("old content\n", f);
    fclose(f);
    struct rlimit saved, small;
    if (getrlimit(RLIMIT_FSIZE, &saved) != 0) return;
    small = saved;
    small.rlim_cur = 64 * 1024;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN); /* write(2) then fails with EFBIG */
    char tmp_path[600];
    FILE *out = NULL;
    CHECK(dp_file_begin(path, tmp_path, sizeof tmp_path, &out) == DP_OK, "begin: %s", dp_error_message());
    if (!out) return;
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit");
    static char block[4096];
    for (int i = 0; i < 64; i++) fwrite(block, 1, sizeof block, out); /* 256 KB: fails after 64 */
    errno = 0; /* what a later call left there must not be the cause */
    dp_status_t status = dp_file_commit(out, tmp_path, path);
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, old_handler);
    char want[800];
    snprintf(want, sizeof want, "write of the temporary file %s failed: %s", tmp_path, strerror(EFBIG));
    CHECK(status == DP_ERR_IO && strstr(dp_error_message(), want), "the first write's errno: %s",
          dp_error_message());
    char *text = read_text_checked(path);
    CHECK(!strcmp(text, "old content\n"), "the old file stays: %.40s", text);
    free(text);
    CHECK(testing_count_entries(testing_tmpdir(), ".tmp.") == 0, "no temp files left");
}

/* --- progress ------------------------------------------------------------ */

static void test_progress_not_a_tty(void) {
    FILE *f = tmpfile();
    CHECK(f != NULL, "tmpfile");
    if (!f) return;
    dp_progress_t bar;
    dp_progress_init(&bar, f, 100);
    CHECK(!bar.enabled, "not a terminal -> disabled");
    for (int i = 1; i <= 100; i++) dp_progress_update(&bar, i, 0.5);
    dp_progress_finish(&bar);
    fflush(f);
    CHECK(ftell(f) == 0, "nothing written to a file (%ld bytes)", ftell(f));
    fclose(f);
}

/* Reads whatever the terminal has for us (non-blocking). */
static size_t drain(int master, char *buf, size_t size) {
    size_t used = 0;
    struct pollfd pfd = {master, POLLIN, 0};
    while (used + 1 < size && poll(&pfd, 1, 50) > 0) {
        ssize_t n = read(master, buf + used, size - 1 - used);
        if (n <= 0) break;
        used += (size_t)n;
    }
    buf[used] = '\0';
    return used;
}

static void test_progress_tty(void) {
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
        printf("note: no pseudo-terminal; skipping the progress bar terminal check\n");
        if (master >= 0) close(master);
        return;
    }
    FILE *term = fopen(ptsname(master), "w");
    if (!term) {
        printf("note: cannot open the pseudo-terminal; skipping\n");
        close(master);
        return;
    }
    static char buf[1 << 16];
    dp_progress_t bar;
    dp_progress_init(&bar, term, 235);
    CHECK(bar.enabled, "a terminal -> enabled");
    dp_progress_update(&bar, 120, 0.53125);
    drain(master, buf, sizeof buf);
    CHECK(strstr(buf, "\r[") && strstr(buf, "] 120/235 loss 0.5312") && strstr(buf, "=>"),
          "bar drawn: '%s'", buf);

    /* 1000 quick updates: rate-limited, but the last step is always drawn. */
    for (int i = 121; i < 235; i++) dp_progress_update(&bar, i, 0.4);
    dp_progress_update(&bar, 235, 0.25);
    drain(master, buf, sizeof buf);
    int redraws = 0;
    for (char *p = buf; (p = strchr(p, '\r')) != NULL; p++) redraws++;
    CHECK(redraws >= 1 && redraws <= 3, "%d redraws for 115 quick updates", redraws);
    CHECK(strstr(buf, "235/235 loss 0.2500") && strstr(buf, "==]"), "last step drawn: '%s'", buf);

    dp_progress_finish(&bar);
    drain(master, buf, sizeof buf);
    CHECK(!strcmp(buf, "\r\033[K"), "finish erases the line");
    fclose(term);
    close(master);
}

/* --- JSON strings written --------------------------------------------------- */

typedef struct {
    char text[256];
    size_t used;
    int calls;
} collected_t;

static void collect(void *ctx, const char *bytes, size_t len) {
    collected_t *c = ctx;
    DP_ASSERT(c->used + len < sizeof c->text);
    memcpy(c->text + c->used, bytes, len);
    c->used += len;
    c->text[c->used] = '\0';
    c->calls++;
}

/* json.h's writer: the escapes, well-formed UTF-8 as it is (in runs: not a
 * call per byte), any other byte as \udcXX; its well-formed output parses
 * back to the input with the project's parser. */
static void test_json_write(void) {
    const char in[] = "a\"b\\c\n\t\r\x01 caf\xc3\xa9 \xe2\x82\xac \xe9 \xe2\x82";
    const char want[] = "\"a\\\"b\\\\c\\u000a\\u0009\\u000d\\u0001 caf\xc3\xa9 \xe2\x82\xac \\udce9 \\udce2\\udc82\"";
    collected_t c = {0};
    dp_json_write_string(in, sizeof in - 1, collect, &c);
    CHECK(strcmp(c.text, want) == 0, "written: %s", c.text);
    /* the text is UTF-8 throughout, where the input was not (Latin-1, a cut sequence) */
    CHECK(dp_utf8_valid(c.text, c.used) && !dp_utf8_valid(in, sizeof in - 1) && !dp_utf8_valid("\xe2\x82", 2) &&
              !dp_utf8_valid("caf\xe9", 4) && dp_utf8_valid("caf\xc3\xa9 \xe2\x82\xac", 9) && dp_utf8_valid("", 0),
          "UTF-8 checked");
    collected_t plain = {0};
    dp_json_write_string("cpu:0 caf\xc3\xa9", 11, collect, &plain);
    CHECK(strcmp(plain.text, "\"cpu:0 caf\xc3\xa9\"") == 0 && plain.calls == 3, "a plain string: %s in %d calls",
          plain.text, plain.calls);
    collected_t nul = {0};
    dp_json_write_string("a\0b", 3, collect, &nul);
    CHECK(strcmp(nul.text, "\"a\\u0000b\"") == 0, "a NUL inside: %s", nul.text);
    /* the well-formed part read back */
    const char good[] = "say \"hi\"\\\n\x01 caf\xc3\xa9";
    collected_t g = {0};
    dp_json_write_string(good, sizeof good - 1, collect, &g);
    dp_json_t *v = NULL;
    CHECK(dp_json_parse(g.text, g.used, "test", &v) == DP_OK && v->kind == DP_JSON_STRING &&
              strcmp(v->string, good) == 0,
          "parsed back: %s", dp_error_message());
    dp_json_free(v);
    /* the project's parser takes no lone surrogate: a \udcXX string does not read back (checkpoints hold UTF-8) */
    CHECK(dp_json_parse(c.text, c.used, "test", &v) == DP_ERR_FORMAT && strstr(dp_error_message(), "lone low surrogate"),
          "\\udcXX parsed: %s", dp_error_message());
}

int main(void) {
    test_json_write();
    test_metrics();
    test_plot();
    test_file_atomic();
    test_file_atomic_write_error();
    test_progress_not_a_tty();
    test_progress_tty();
    return testing_finish("test_io");
}
