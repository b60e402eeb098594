/* progress.c - the one-line terminal progress bar (dp_progress_*).
 *
 *   [=================>            ] 120/235 loss 0.5312
 *
 * Drawn only when the stream is a terminal; otherwise every call is a no-op,
 * so logs and pipes get no carriage returns. Redraws are limited to about
 * ten a second (CLOCK_MONOTONIC) plus the first and the last step, so a fast
 * loop does not spend its time on terminal output.
 */
#include "dptrain/io.h"

#include <time.h>
#include <unistd.h>

#define BAR_WIDTH 30
#define MIN_REDRAW_SEC 0.1

static double monotonic_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void dp_progress_init(dp_progress_t *bar, FILE *stream, int total) {
    bar->stream = stream;
    bar->total = total;
    bar->enabled = stream != NULL && isatty(fileno(stream));
    bar->last_draw = -1.0; /* the first update draws */
}

void dp_progress_update(dp_progress_t *bar, int done, double loss) {
    if (!bar->enabled) return;
    double now = monotonic_sec();
    int last_step = done >= bar->total;
    if (bar->last_draw >= 0.0 && !last_step && now - bar->last_draw < MIN_REDRAW_SEC) return;
    bar->last_draw = now;

    int filled = 0;
    if (bar->total > 0) {
        int clamped = done < 0 ? 0 : done > bar->total ? bar->total : done;
        filled = (int)((long long)clamped * BAR_WIDTH / bar->total);
    }
    char line[BAR_WIDTH + 96];
    int used = 0;
    line[used++] = '\r';
    line[used++] = '[';
    for (int i = 0; i < BAR_WIDTH; i++)
        line[used++] = i < filled ? '=' : (i == filled && !last_step) ? '>' : ' ';
    snprintf(line + used, sizeof line - (size_t)used, "] %d/%d loss %.4f", done, bar->total, loss);
    fputs(line, bar->stream); /* cosmetic output: errors are not reported */
    fflush(bar->stream);
}

void dp_progress_finish(dp_progress_t *bar) {
    if (!bar->enabled) return;
    fputs("\r\033[K", bar->stream);
    fflush(bar->stream);
    bar->last_draw = -1.0;
}
