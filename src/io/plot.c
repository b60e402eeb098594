/* plot.c - the training-curve plot as a self-contained SVG
 * (dp_plot_write_svg), in the spirit of the book's Animator.
 *
 * Layout: a title, one legend for the three series, and two panels side by
 * side sharing the epoch axis: "loss" (train loss, y from 0 to a round
 * value above the largest loss; "loss (label smoothing E)" when the loss is
 * smoothed) and "accuracy" (train and test accuracy, y up
 * to 1, the lower end rounded down below the smallest accuracy so that
 * curves near 0.9 are not squeezed against the top). Each series is a line
 * with a marker at every epoch (hovering a marker shows its value); a
 * non-finite value (a diverged loss) breaks the line instead of breaking the
 * plot. One epoch is drawn as a single marker in the middle of the axis.
 *
 * Written atomically through dp_file_begin / dp_file_commit.
 */
#include "dptrain/io.h"

#include <math.h>
#include <string.h>

#define SVG_WIDTH 960
#define SVG_HEIGHT 420

typedef struct {
    const char *name;
    const char *color;
    const char *dash; /* stroke-dasharray, "" for solid */
    char marker;      /* 'o' circle, 's' square, '^' triangle */
} series_style_t;

static const series_style_t SERIES[3] = {
    {"train loss", "#1f77b4", "", 'o'},
    {"train acc", "#c040c0", "7,4", 's'},
    {"test acc", "#2ca02c", "8,3,2,3", '^'},
};

typedef struct {
    double left, right, top, bottom; /* pixels */
    double xmin, xmax, xstep;        /* epochs */
    double ymin, ymax, ystep;        /* values */
} panel_t;

static double series_value(const dp_epoch_stats_t *s, int series) {
    return series == 0 ? s->train_loss : series == 1 ? s->train_acc : s->test_acc;
}

/* A round step (1, 2, 2.5 or 5 times a power of ten) giving at most
 * max_ticks intervals over `range`. */
static double nice_step(double range, int max_ticks) {
    if (!(range > 0)) return 1.0;
    double raw = range / max_ticks;
    double mag = pow(10.0, floor(log10(raw)));
    static const double multiples[] = {1, 2, 2.5, 5, 10};
    for (int i = 0; i < 5; i++)
        if (multiples[i] * mag >= raw * (1 - 1e-9)) return multiples[i] * mag;
    return 10 * mag;
}

static double px_x(const panel_t *p, double x) {
    return p->left + (x - p->xmin) / (p->xmax - p->xmin) * (p->right - p->left);
}

static double px_y(const panel_t *p, double y) {
    return p->bottom - (y - p->ymin) / (p->ymax - p->ymin) * (p->bottom - p->top);
}

static void write_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20) fputc(*s, f);
        }
    }
}

static void write_marker(FILE *f, char marker, double x, double y, double r, const char *color) {
    switch (marker) {
    case 's':
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">",
                x - r, y - r, 2 * r, 2 * r, color);
        break;
    case '^':
        fprintf(f, "<path d=\"M%.1f,%.1f L%.1f,%.1f L%.1f,%.1f Z\" fill=\"%s\">", x,
                y - 1.2 * r, x + 1.1 * r, y + 0.8 * r, x - 1.1 * r, y + 0.8 * r, color);
        break;
    default:
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\">", x, y, r, color);
    }
}

static const char *marker_close(char marker) {
    return marker == 's' ? "</rect>" : marker == '^' ? "</path>" : "</circle>";
}

/* Frame, grid, tick labels and the axis labels of one panel. */
static void write_axes(FILE *f, const panel_t *p, const char *ylabel) {
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\" "
               "stroke=\"#444\"/>\n",
            p->left, p->top, p->right - p->left, p->bottom - p->top);
    /* y ticks: k * ystep, computed from k so no error accumulates */
    long kmin = (long)ceil(p->ymin / p->ystep - 1e-9), kmax = (long)floor(p->ymax / p->ystep + 1e-9);
    for (long k = kmin; k <= kmax; k++) {
        double v = k * p->ystep, y = px_y(p, v);
        if (k != kmin && k != kmax)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                    p->left, y, p->right, y);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n",
                p->left - 5, y, p->left, y);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", p->left - 8,
                y + 4, fabs(v) < 1e-12 ? 0.0 : v);
    }
    kmin = (long)ceil(p->xmin / p->xstep - 1e-9);
    kmax = (long)floor(p->xmax / p->xstep + 1e-9);
    for (long k = kmin; k <= kmax; k++) {
        double v = k * p->xstep, x = px_x(p, v);
        if (x > p->left + 0.5 && x < p->right - 0.5)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
                    x, p->top, x, p->bottom);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", x,
                p->bottom, x, p->bottom + 5);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", x,
                p->bottom + 20, v);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">epoch</text>\n",
            (p->left + p->right) / 2, p->bottom + 42);
    double cy = (p->top + p->bottom) / 2, cx = p->left - 50;
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
               "transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
            cx, cy, cx, cy, ylabel);
}

/* One series: polylines over runs of finite values, then the markers. */
static void write_series(FILE *f, const panel_t *p, const dp_epoch_stats_t *stats, int count,
                         int series) {
    const series_style_t *style = &SERIES[series];
    double r = count <= 60 ? 3.5 : 2.0;
    fprintf(f, "<!-- %s -->\n<g>\n", style->name);
    int in_line = 0;
    for (int i = 0; i <= count; i++) {
        double v = i < count ? series_value(&stats[i], series) : NAN;
        if (isfinite(v)) {
            if (!in_line) {
                fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s%s%s points=\"",
                        style->color, style->dash[0] ? " stroke-dasharray=\"" : "", style->dash,
                        style->dash[0] ? "\"" : "");
                in_line = 1;
            }
            fprintf(f, "%.1f,%.1f ", px_x(p, stats[i].epoch), px_y(p, v));
        } else if (in_line) {
            fputs("\"/>\n", f);
            in_line = 0;
        }
    }
    for (int i = 0; i < count; i++) {
        double v = series_value(&stats[i], series);
        if (!isfinite(v)) continue;
        write_marker(f, style->marker, px_x(p, stats[i].epoch), px_y(p, v), r, style->color);
        fprintf(f, "<title>epoch %d: %s %.4f</title>%s\n", stats[i].epoch, style->name, v,
                marker_close(style->marker));
    }
    fputs("</g>\n", f);
}

static void write_legend(FILE *f) {
    double x = SVG_WIDTH / 2.0 - 190, y = 56;
    for (int s = 0; s < 3; s++) {
        const series_style_t *style = &SERIES[s];
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                   "stroke-width=\"2\"%s%s%s/>\n",
                x, y, x + 36, y, style->color, style->dash[0] ? " stroke-dasharray=\"" : "",
                style->dash, style->dash[0] ? "\"" : "");
        write_marker(f, style->marker, x + 18, y, 3.5, style->color);
        fprintf(f, "%s\n<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", marker_close(style->marker),
                x + 44, y + 4, style->name);
        x += 135;
    }
}

/* Epoch axis shared by both panels. */
static void epoch_range(const dp_epoch_stats_t *stats, int count, double *lo, double *hi,
                        double *step) {
    double first = stats[0].epoch, last = stats[0].epoch;
    for (int i = 1; i < count; i++) {
        if (stats[i].epoch < first) first = stats[i].epoch;
        if (stats[i].epoch > last) last = stats[i].epoch;
    }
    if (last - first < 1) { /* one epoch: centre it */
        *lo = first - 0.5;
        *hi = first + 0.5;
        *step = 1;
        return;
    }
    *lo = first;
    *hi = last;
    *step = ceil(nice_step(last - first, 10)); /* whole epochs */
}

dp_status_t dp_plot_write_svg(const char *path, const dp_epoch_stats_t *stats, int count) {
    if (!stats || count < 1)
        return dp_fail(DP_ERR_ARG, "%s: nothing to plot (%d epochs)", path, count);

    panel_t loss = {70, 450, 80, 350, 0, 1, 1, 0, 1, 0.2};
    panel_t acc = {560, 940, 80, 350, 0, 1, 1, 0, 1, 0.1};
    epoch_range(stats, count, &loss.xmin, &loss.xmax, &loss.xstep);
    acc.xmin = loss.xmin;
    acc.xmax = loss.xmax;
    acc.xstep = loss.xstep;

    double max_loss = 0, min_acc = 1;
    for (int i = 0; i < count; i++) {
        if (isfinite(stats[i].train_loss) && stats[i].train_loss > max_loss)
            max_loss = stats[i].train_loss;
        for (int s = 1; s < 3; s++) {
            double v = series_value(&stats[i], s);
            if (isfinite(v) && v < min_acc) min_acc = v;
        }
    }
    if (max_loss > 0) {
        loss.ystep = nice_step(max_loss, 6);
        loss.ymax = ceil(max_loss / loss.ystep - 1e-9) * loss.ystep;
        if (loss.ymax <= 0) loss.ymax = loss.ystep;
    }
    acc.ymin = floor((min_acc - 0.05) * 10) / 10;
    if (acc.ymin < 0) acc.ymin = 0;
    if (acc.ymin > 0.9) acc.ymin = 0.9;
    acc.ystep = nice_step(acc.ymax - acc.ymin, 6);

    char tmp_path[4200];
    FILE *f = NULL;
    DP_TRY(dp_file_begin(path, tmp_path, sizeof tmp_path, &f));

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
               "font-size=\"13\">\n",
            SVG_WIDTH, SVG_HEIGHT, SVG_WIDTH, SVG_HEIGHT);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    const dp_epoch_stats_t *last = &stats[count - 1];
    fprintf(f, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"17\" "
               "font-weight=\"bold\">dptrain: loss and accuracy per epoch",
            SVG_WIDTH / 2);
    if (last->devices && last->devices[0]) {
        fprintf(f, " (%d device%s: ", last->num_devices, last->num_devices == 1 ? "" : "s");
        write_escaped(f, last->devices);
        fputs(")", f);
    }
    fputs("</text>\n", f);
    write_legend(f);
    char loss_label[64] = "loss"; /* the training loss: say so when it is smoothed */
    if (last->label_smoothing != 0.0)
        snprintf(loss_label, sizeof loss_label, "loss (label smoothing %.9g)", last->label_smoothing);
    write_axes(f, &loss, loss_label);
    write_axes(f, &acc, "accuracy");
    write_series(f, &loss, stats, count, 0);
    write_series(f, &acc, stats, count, 1);
    write_series(f, &acc, stats, count, 2);
    fputs("</svg>\n", f);
    return dp_file_commit(f, tmp_path, path); /* reports any failed write above */
}
