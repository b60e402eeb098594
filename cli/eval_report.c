/* eval_report.c - dptrain eval's per-class table (--per-class) and
 * confusion matrix file (--confusion FILE.csv), as sklearn's
 * classification_report and confusion_matrix lay them out: rows are the
 * true classes, columns the predicted ones. A figure with nothing to divide
 * by (a class without images has no recall, one never predicted no
 * precision: confusion.h's NaN) is shown as "-". */
#include "eval_report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dptrain/confusion.h"
#include "dptrain/io.h"
#include "text_width.h"

#define NAME_COLUMNS 28 /* at most: a longer name is cut and ends in "..." */

static void ratio(double value, char *out, size_t size) {
    if (!isnan(value)) snprintf(out, size, "%.4f", value);
    else snprintf(out, size, "-");
}

/* s padded with spaces to `columns` terminal columns */
static void print_padded(const char *s, int columns) {
    const int width = cli_text_width(s);
    printf("%s%*s", s, width < columns ? columns - width : 0, "");
}

void eval_report_print(const eval_counts_t *e) {
    const int k = e->classes;
    int columns = 4; /* "name" */
    for (int i = 0; i < k; i++) {
        const int width = cli_text_width(e->names[i]);
        if (width > columns) columns = width < NAME_COLUMNS ? width : NAME_COLUMNS;
    }
    printf("%-5s ", "class");
    print_padded("name", columns);
    printf(" %8s %8s %7s %9s  %s\n", "images", "correct", "recall", "precision", "most taken for");
    for (int i = 0; i < k; i++) {
        dp_class_figures_t f;
        dp_confusion_class(e->counts, k, i, &f);
        char name[256], recall[16], precision[16], taken[300] = "-";
        cli_text_fit(e->names[i], columns, name, sizeof name);
        ratio(f.recall, recall, sizeof recall);
        ratio(f.precision, precision, sizeof precision);
        if (f.mistaken_for >= 0) {
            char other[256];
            cli_text_fit(e->names[f.mistaken_for], columns, other, sizeof other);
            snprintf(taken, sizeof taken, "%s (%lld)", other, (long long)f.mistaken_count);
        }
        printf("%-5d ", i);
        print_padded(name, columns);
        printf(" %8lld %8lld %7s %9s  %s\n", (long long)f.samples, (long long)f.correct, recall, precision, taken);
    }
    int with_images;
    const double mean = dp_confusion_mean_recall(e->counts, k, &with_images);
    if (with_images > 0)
        printf("mean recall (balanced accuracy): %.4f over the %d class%s with images\n", mean, with_images,
               with_images == 1 ? "" : "es");
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
    fputs("true \\ predicted", f);
    for (int j = 0; j < e->classes; j++) {
        fputc(',', f);
        csv_field(f, e->names[j]);
    }
    fputc('\n', f);
    for (int i = 0; i < e->classes; i++) {
        csv_field(f, e->names[i]);
        for (int j = 0; j < e->classes; j++) fprintf(f, ",%lld", (long long)e->counts[(size_t)i * e->classes + j]);
        fputc('\n', f);
    }
    return dp_file_commit(f, tmp, path);
}
