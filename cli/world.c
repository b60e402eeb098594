/* world.c - a subcommand as one rank of an MPI job (world.h): the options
 * every rank must share, the failure's one line, finalize or leave. */
#include "world.h"

#include <stdio.h>
#include <unistd.h>

#include "report.h"

dp_status_t cli_world_check_options(const dp_world_t *world, int argc, char **argv) {
    char joined[8192];
    size_t joined_len = 0;
    for (int i = 2; i < argc && joined_len < sizeof joined; i++)
        joined_len += (size_t)snprintf(joined + joined_len, sizeof joined - joined_len, "%s", argv[i]) + 1;
    if (joined_len > sizeof joined) joined_len = sizeof joined;
    return dp_world_check_same(world, "options", joined, joined_len);
}

int cli_world_report(const dp_world_t *world, dp_status_t status, int alone, int speaks) {
    if (status != DP_OK && (speaks || alone)) {
        if (alone && world->size > 1)
            fprintf(stderr, "dptrain: rank %d of %d: %s\n", world->rank, world->size, dp_error_message());
        else
            fprintf(stderr, "dptrain: %s\n", dp_error_message());
    }
    fflush(stdout);
    fflush(stderr);
    return status == DP_OK ? 0 : cli_exit_code(status);
}

int cli_world_end(const dp_world_t *world, int code, int alone) {
    if (!alone || world->size == 1) {
        dp_world_finalize();
        return code;
    }
    dp_world_leave();
    _exit(code);
}
