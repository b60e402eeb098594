/* train_signals.c - `dptrain train`'s signals (train.h): preemption.
 *
 * SIGTERM (what Slurm and cloud schedulers send before they kill) and
 * SIGUSR1 (what `dptrain launch` passes on for it, through mpirun, which
 * forwards SIGUSR1 to every rank) ask every rank to save at the next step
 * boundary and stop (fit.h's stop_request; the ranks agree on the step).
 * A second SIGTERM, or a SIGINT, ends the process at once, by that signal,
 * and so does a SIGTERM from the rank's parent under mpirun (mpirun or its
 * daemon ending the job after a failure: the other ranks are gone):
 * what is lost is the steps since the last checkpoint, and a checkpoint
 * being written is never torn (file_atomic.c renames a complete file).
 * Every signal is noted in the rank's record for the launcher's summary.
 * The handler only stores flags and calls async-signal-safe functions.
 */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "train.h"

static volatile sig_atomic_t stop_request;
static rank_record_t *signal_record;
static int signal_speaks, signal_under_mpirun;
static volatile sig_atomic_t training_now; /* say so only while training: mpirun's SIGTERM at the end needs no line */

static void on_signal(int sig, siginfo_t *info, void *context) {
    (void)context;
    rank_record_signal(signal_record, sig);
    /* mpirun (or its daemon: the parent) ends the ranks with SIGTERM once
     * the job has failed, or was interrupted: no time for a checkpoint,
     * the others are gone; launch asks for one with SIGUSR1 */
    int from_mpirun = signal_under_mpirun && sig == SIGTERM && info && info->si_pid == getppid();
    if (sig == SIGINT || (sig == SIGTERM && stop_request) || from_mpirun) { /* at once, by the signal itself */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    if (stop_request) return; /* SIGUSR1 again: asked already */
    stop_request = 1;
    static const char line[] = "dptrain: asked to stop: every rank saves at the next step boundary, then stops "
                               "(SIGINT or another SIGTERM: at once)\n";
    if (signal_speaks && training_now && write(STDERR_FILENO, line, sizeof line - 1) < 0) { /* the stop matters, not the line */
    }
}

void train_signals_training(int on) { training_now = on; }

volatile sig_atomic_t *train_signals_install(rank_record_t *record, int speaks, int under_mpirun) {
    signal_record = record;
    signal_speaks = speaks;
    signal_under_mpirun = under_mpirun;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_SIGINFO;
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGUSR1, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    return &stop_request;
}
