/* image_index_ranks.c - every rank indexes its own copy of an image folder
 * (image_folder.h); their lists must agree entry by entry (paths relative
 * to DIR/SPLIT, labels), or the ranks would train on different samples
 * for the same sample number. dp_image_index_check_ranks compares them.
 *
 * Cheap when they agree: one allgather of (count, a hash of the whole
 * list). When they do not, to name the first difference: rank 0's hashes
 * of every chunk of CHUNK entries are broadcast, each rank finds its first
 * differing chunk, the ranks agree on the earliest, rank 0's entries of
 * that chunk are broadcast, and each rank that differs words its first
 * differing entry; rank 0's message names the lowest such rank.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/comm.h"
#include "dptrain/image_folder.h"
#include "../core/hash.h"

#define CHUNK 256
#define LINE 768

/* The path of entry i without the folder's own prefix (DIR/SPLIT/). */
static const char *relative(const dp_image_index_t *x, int i) { return x->paths[i] + x->root_length; }

static uint64_t entry_hash(const dp_image_index_t *x, int i, uint64_t h) {
    const char *r = relative(x, i);
    h = dp_fnv1a(h, r, strlen(r) + 1);
    return dp_fnv1a(h, &x->labels[i], sizeof x->labels[i]);
}

/* The hash of entries [first, first + n). */
static uint64_t range_hash(const dp_image_index_t *x, int first, int n) {
    uint64_t h = DP_FNV1A_SEED;
    for (int i = first; i < first + n && i < x->count; i++) h = entry_hash(x, i, h);
    return h;
}

/* Rank 0's entries [first, first + CHUNK) as "LABEL PATH\n" lines, NUL-ended, broadcast. */
static dp_status_t broadcast_chunk(const dp_image_index_t *x, int rank, int count0, int first, char **text) {
    uint64_t bytes = 0;
    char *mine = NULL;
    if (rank == 0) {
        for (int i = first; i < first + CHUNK && i < count0; i++) bytes += strlen(relative(x, i)) + 16;
        mine = malloc(bytes + 1);
        if (!mine) return dp_fail(DP_ERR_NOMEM, "out of memory comparing file lists");
        size_t used = 0;
        for (int i = first; i < first + CHUNK && i < count0; i++)
            used += (size_t)snprintf(mine + used, bytes + 1 - used, "%d %s\n", (int)x->labels[i], relative(x, i));
        bytes = used + 1;
    }
    DP_TRY(dp_world_broadcast_bytes(&bytes, sizeof bytes));
    if (rank != 0 && !(mine = malloc(bytes))) return dp_fail(DP_ERR_NOMEM, "out of memory comparing file lists");
    dp_status_t status = dp_world_broadcast_bytes(mine, bytes);
    *text = mine;
    return status;
}

/* This rank's first entry at or after `first` that differs from rank 0's
 * chunk (text), worded into line; "" when none. */
static void word_difference(const dp_image_index_t *x, int rank, int count0, int first, const char *text,
                            char line[LINE]) {
    line[0] = '\0';
    const char *p = text;
    for (int i = first; i < first + CHUNK && (i < count0 || i < x->count); i++) {
        const char *end = p ? strchr(p, '\n') : NULL;
        char theirs[LINE / 2] = "(no entry)", mine[LINE / 2] = "(no entry)";
        if (i < count0 && end) {
            snprintf(theirs, sizeof theirs, "%.*s", (int)(end - p), p);
            p = end + 1;
        }
        if (i < x->count) snprintf(mine, sizeof mine, "%d %s", (int)x->labels[i], relative(x, i));
        if (strcmp(theirs, mine) != 0) {
            snprintf(line, LINE, "rank %d's file list differs from rank 0's at entry %d: rank 0 has '%s', rank %d "
                     "'%s' (label, path); every rank must see the same files", rank, i, theirs, rank, mine);
            return;
        }
    }
}

dp_status_t dp_image_index_check_ranks(const dp_image_index_t *x, const dp_world_t *w, const char *what) {
    if (w->size < 2) return DP_OK;
    const dp_world_t world = *w;
    uint64_t mine[2] = {(uint64_t)x->count, range_hash(x, 0, x->count)};
    uint64_t *all = malloc(sizeof mine * (size_t)world.size);
    if (!all) return dp_fail(DP_ERR_NOMEM, "out of memory comparing file lists");
    dp_status_t status = dp_world_allgather_bytes(mine, all, sizeof mine);
    int agree = 1;
    for (int r = 1; status == DP_OK && r < world.size; r++) agree &= all[2 * r] == all[0] && all[2 * r + 1] == all[1];
    const int count0 = (int)all[0];
    free(all);
    if (status != DP_OK || agree) return status;
    /* the earliest differing chunk of any rank */
    int chunks = count0 / CHUNK + 1, first_chunk = chunks;
    uint64_t *hashes = malloc(sizeof *hashes * (size_t)chunks);
    int *firsts = malloc(sizeof *firsts * (size_t)world.size);
    char *line = malloc(LINE), *lines = malloc((size_t)LINE * world.size), *text = NULL;
    if (!hashes || !firsts || !line || !lines) status = dp_fail(DP_ERR_NOMEM, "out of memory comparing file lists");
    for (int c = 0; status == DP_OK && c < chunks; c++) hashes[c] = range_hash(x, c * CHUNK, CHUNK);
    if (status == DP_OK) status = dp_world_broadcast_bytes(hashes, sizeof *hashes * (size_t)chunks);
    int own = chunks;
    for (int c = 0; status == DP_OK && c < chunks && own == chunks; c++)
        if (hashes[c] != range_hash(x, c * CHUNK, CHUNK) || (c == chunks - 1 && x->count != count0)) own = c;
    if (status == DP_OK) status = dp_world_allgather_bytes(&own, firsts, sizeof own);
    for (int r = 0; status == DP_OK && r < world.size; r++) first_chunk = firsts[r] < first_chunk ? firsts[r] : first_chunk;
    if (first_chunk >= chunks) first_chunk = chunks - 1; /* the counts differ past rank 0's last chunk */
    if (status == DP_OK) status = broadcast_chunk(x, world.rank, count0, first_chunk * CHUNK, &text);
    if (status == DP_OK) {
        word_difference(x, world.rank, count0, first_chunk * CHUNK, text, line);
        status = dp_world_allgather_bytes(line, lines, LINE);
    }
    if (status == DP_OK) {
        const char *said = "the ranks' file lists differ";
        for (int r = 0; r < world.size; r++)
            if (lines[(size_t)r * LINE]) {
                said = lines + (size_t)r * LINE;
                break;
            }
        status = dp_fail(DP_ERR_ARG, "%s: %s", what, said);
    }
    free(text);
    free(hashes);
    free(firsts);
    free(line);
    free(lines);
    return status;
}
