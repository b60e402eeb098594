/* eval_report.c - dptrain eval's per-class table (--per-class) and
 * confusion matrix file (--confusion FILE.csv), as sklearn's
 * classification_report and confusion_matrix lay them out: rows are the
 * true classes, columns the predicted ones. A figure with nothing to divide
 * by (a class without images has no recall, one never predicted no
 * precision) is shown as "-". */
#include "eval_report.h"

#include <stdio.h>
#include <string.h>

#include "class_names.h"
#include "dptrain/io.h"

#define NAME_WIDTH 28 /* longer names are cut (at a UTF-8 character's start) and end in "..." */

static int64_t cell(const eval_counts_t *e, int truth, int predicted) {
    return e->counts[(size_t)truth * e->classes + predicted];
}

/* name cut to NAME_WIDTH bytes, never inside a UTF-8 sequence */
static void short_name(const char *name, char *out, size_t size) {
    size_t len = strlen(name);
    if (len <= NAME_WIDTH) {
        snprintf(out, size, "%s", name);
        return;
    }
    size_t cut = NAME_WIDTH - 3;
    while (cut > 0 && ((unsigned char)name[cut] & 0xC0) == 0x80) cut--;
    snprintf(out, size, "%.*s...", (int)cut, name);
}

static void ratio(int64_t a, int64_t b, char *out, size_t size) {
    if (b > 0) snprintf(out, size, "%.4f", (double)a / (double)b);
    else snprintf(out, size, "-");
}

void eval_report_print(const eval_counts_t *e) {
    const int k = e->classes;
    printf("%-5s %-*s %8s %8s %7s %9s  %s\n", "class", NAME_WIDTH, "name", "images", "correct", "recall", "precision",
           "most taken for");
    double recall_sum = 0.0;
    int with_images = 0;
    for (int i = 0; i < k; i++) {
        int64_t images = 0, predicted = 0, worst = 0;
        int worst_class = -1;
        for (int j = 0; j < k; j++) {
            images += cell(e, i, j);
            predicted += cell(e, j, i);
            if (j != i && cell(e, i, j) > worst) worst = cell(e, i, j), worst_class = j;
        }
        char buf[32], name[NAME_WIDTH + 8], recall[16], precision[16], taken[NAME_WIDTH + 32] = "-";
        short_name(cli_class_name(e->names, e->num_names, i, buf, sizeof buf), name, sizeof name);
        ratio(cell(e, i, i), images, recall, sizeof recall);
        ratio(cell(e, i, i), predicted, precision, sizeof precision);
        if (worst_class >= 0) {
            char other[NAME_WIDTH + 8];
            short_name(cli_class_name(e->names, e->num_names, worst_class, buf, sizeof buf), other, sizeof other);
            snprintf(taken, sizeof taken, "%s (%lld)", other, (long long)worst);
        }
        printf("%-5d %-*s %8lld %8lld %7s %9s  %s\n", i, NAME_WIDTH, name, (long long)images,
               (long long)cell(e, i, i), recall, precision, taken);
        if (images > 0) recall_sum += (double)cell(e, i, i) / (double)images, with_images++;
    }
    if (with_images > 0)
        printf("mean recall (balanced accuracy): %.4f over the %d class%s with images\n", recall_sum / with_images,
               with_images, with_images == 1 ? "" : "es");
}

/* A CSV field: as it is, or quoted with its quotes doubled when it holds a
 * comma, a quote, a line break or a leading or trailing space. */
static void csv_field(FILE *f, const char *s) {
    size_t len = strlen(s);
    if (strpbrk(s, ",\"\r\n") == NULL && (len == 0 || (s[0] != ' ' && s[len - 1] != ' '))) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

dp_status_t eval_report_write_csv(const eval_counts_t *e, const char *path) {
    char tmp[4096];
    FILE *f;
    DP_TRY(dp_file_begin(path, tmp, sizeof tmp, &f));
    char buf[32];
    fputs("true \\ predicted", f);
    for (int j = 0; j < e->classes; j++) {
        fputc(',', f);
        csv_field(f, cli_class_name(e->names, e->num_names, j, buf, sizeof buf));
    }
    fputc('\n', f);
    for (int i = 0; i < e->classes; i++) {
        csv_field(f, cli_class_name(e->names, e->num_names, i, buf, sizeof buf));
        for (int j = 0; j < e->classes; j++) fprintf(f, ",%lld", (long long)cell(e, i, j));
        fputc('\n', f);
    }
    return dp_file_commit(f, tmp, path);
}
