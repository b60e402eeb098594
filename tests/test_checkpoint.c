/* test_checkpoint.c - the JSON parser, the safetensors writer and reader,
 * and dptrain checkpoints.
 *
 * - JSON: valid texts give the expected tree; each kind of bad text fails
 *   with a one-line message naming the byte offset; at most
 *   DP_JSON_MAX_VALUES values.
 * - Round trip: a model's parameters (and an optimizer's state, when an
 *   optimizer with state is built) written and read back bit for bit, with
 *   every metadata field; the writer is deterministic and 8-byte aligned.
 * - A table of corrupt files (every truncation, header length too large,
 *   bad JSON, wrong dtype, shape vs offsets, overlap, gap, out of range,
 *   duplicate keys, trailing bytes, ...), each a one-line error naming the
 *   file, never a crash (the suite also runs this under ASan); plus every
 *   header byte replaced by a few bad values.
 * - Checkpoint refusals: another model (naming the first mismatching tensor),
 *   an extra tensor, another fingerprint, missing or malformed metadata,
 *   another optimizer kind.
 * - Text from the file in messages (names, keys, values with a newline):
 *   one line, escaped, or refused (tests/fuzz_checkpoint.c found one).
 * - Weights-only checkpoints (imported weights): the minimal metadata
 *   loads, the optimizer's state is refused.
 * - Atomic writes: a write that fails (file size limit, missing directory,
 *   bad arguments) leaves the old checkpoint as it was and no temporary file.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include "dptrain/checkpoint.h"
#include "dptrain/json.h"
#include "dptrain/rng.h"
#include "testing.h"

/* --- helpers ------------------------------------------------------------------------ */

static void write_bytes(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size) {
        perror(path);
        exit(2);
    }
    fclose(f);
}

/* A safetensors file from a header text and `data_size` data bytes (0, 1, 2, ...). */
static void write_raw_file(const char *path, const char *header, size_t data_size) {
    size_t n = strlen(header);
    unsigned char *bytes = malloc(8 + n + data_size + 1);
    if (!bytes) exit(2);
    for (int i = 0; i < 8; i++) bytes[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(bytes + 8, header, n);
    for (size_t i = 0; i < data_size; i++) bytes[8 + n + i] = (unsigned char)i;
    write_bytes(path, bytes, 8 + n + data_size);
    free(bytes);
}


/* The read fails with a one-line message naming the file and containing `part`. */
static void check_read_fails(const char *path, const char *part, const char *label) {
    dp_safetensors_t *st = (dp_safetensors_t *)1;
    dp_error_clear();
    dp_status_t status = dp_safetensors_read(path, &st);
    const char *m = dp_error_message();
    CHECK(status == DP_ERR_FORMAT, "%s: status %d, expected a format error (message '%s')", label, (int)status, m);
    CHECK(st == NULL, "%s: *out not NULL on failure", label);
    CHECK(strstr(m, path) != NULL, "%s: message does not name the file: %s", label, m);
    CHECK(strchr(m, '\n') == NULL, "%s: message is not one line: %s", label, m);
    CHECK(!part || strstr(m, part) != NULL, "%s: message lacks '%s': %s", label, part, m);
    if (status == DP_OK) dp_safetensors_free(st);
}

/* A file of a raw header and `data` bytes whose read must fail with `part` in its one line. */
typedef struct {
    const char *header;
    size_t data;
    const char *part;
} raw_case_t;

static void check_raw_cases(const char *path, const raw_case_t *cases, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++) {
        write_raw_file(path, cases[i].header, cases[i].data);
        char label[64];
        snprintf(label, sizeof label, "%s case %zu", what, i);
        check_read_fails(path, cases[i].part, label);
    }
}

/* --- JSON ---------------------------------------------------------------------------- */
static void test_json(void) {
    const char *text = " {\"a\": [1, -2, 0], \"b\\u00e9\\ud83d\\ude00\": \"x\\n\\\"y\", \"c\": {}} ";
    dp_json_t *v;
    CHECK(dp_json_parse(text, strlen(text), "t", &v) == DP_OK, "valid JSON refused: %s", dp_error_message());
    if (v) {
        CHECK(v->kind == DP_JSON_OBJECT && v->count == 3, "root");
        const dp_json_t *a = dp_json_get(v, "a");
        CHECK(a && a->kind == DP_JSON_ARRAY && a->count == 3 && a->items[1].integer == -2, "array");
        const dp_json_t *b = dp_json_get(v, "b\xc3\xa9\xf0\x9f\x98\x80");
        CHECK(b && b->kind == DP_JSON_STRING && strcmp(b->string, "x\n\"y") == 0, "escapes and surrogate pair");
        CHECK(dp_json_get(v, "c") && dp_json_get(v, "c")->count == 0, "empty object");
        CHECK(v->items[0].offset == 7, "offset of the first value: %zu", v->items[0].offset);
        dp_json_free(v);
    }
    /* Not NUL-terminated: only len bytes are read. */
    char unterminated[2] = {'[', ']'};
    CHECK(dp_json_parse(unterminated, 2, "t", &v) == DP_OK, "length-bounded text");
    dp_json_free(v);

    struct { const char *text, *part; } bad[] = {
        {"", "expected a value"},
        {"{", "a string key"},
        {"{\"a\" 1}", "':' after an object key"},
        {"{\"a\":1,}", "a string key"},
        {"[1 2]", "',' or ']'"},
        {"{\"a\":1}x", "only whitespace"},
        {"{\"a\":1,\"a\":2}", "duplicate key \"a\""},
        {"[01]", "leading zero"},
        {"[1.5]", "only integers"},
        {"[1e3]", "only integers"},
        {"[-]", "a digit"},
        {"[99999999999999999999]", "64 bits"},
        {"[true]", "true, false and null"},
        {"[\"abc]", "not closed"},
        {"[\"a\\x\"]", "an escape"},
        {"[\"\\u12\"]", "4 hex digits"},
        {"[\"\\udc00\"]", "lone low surrogate"},
        {"[\"\\ud800x\"]", "high surrogate"},
        {"[\"\\u0000\"]", "NUL"},
        {"[\"a\tb\"]", "control character"},
        {"[\"\xc0\xaf\"]", "invalid UTF-8"},
        {"[\"\xed\xa0\x80\"]", "invalid UTF-8"},
        {"[\"\xe2\x82\"]", "invalid UTF-8"},
        {"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", "nesting"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = (dp_json_t *)1;
        dp_status_t status = dp_json_parse(bad[i].text, strlen(bad[i].text), "hdr", &v);
        const char *m = dp_error_message();
        CHECK(status == DP_ERR_FORMAT && v == NULL, "bad JSON %zu '%s' accepted", i, bad[i].text);
        CHECK(strncmp(m, "hdr, byte ", 10) == 0 && strstr(m, bad[i].part) && !strchr(m, '\n'),
              "bad JSON %zu '%s': message '%s' lacks '%s'", i, bad[i].text, m, bad[i].part);
    }
    /* At most DP_JSON_MAX_VALUES values: a 90 MB header "[0,0,...]" took
     * 2.5 GB of dp_json_t before it was refused for its dims. */
    size_t items = DP_JSON_MAX_VALUES - 1; /* and the array: the limit */
    char *many = malloc(2 * items + 8);
    if (many) {
        size_t used = 0;
        many[used++] = '[';
        for (size_t i = 0; i < items; i++) many[used++] = '0', many[used++] = ',';
        many[used - 1] = ']';
        CHECK(dp_json_parse(many, used, "t", &v) == DP_OK && v->count == (int)items, "%zu values refused: %s",
              items + 1, dp_error_message());
        dp_json_free(v);
        memcpy(many + used - 1, ",0]", 3);
        v = (dp_json_t *)1;
        dp_status_t status = dp_json_parse(many, used + 2, "hdr", &v);
        CHECK(status == DP_ERR_FORMAT && !v && strstr(dp_error_message(), "hdr, byte 2097151: more than 1048576 values"),
              "%zu values: status %d, '%s'", items + 2, (int)status, dp_error_message());
        free(many);
    }
    /* A NUL byte inside the text is not the end of it. */
    const char with_nul[] = "[\"a\0b\"]";
    CHECK(dp_json_parse(with_nul, sizeof with_nul - 1, "t", &v) == DP_ERR_FORMAT &&
          strstr(dp_error_message(), "NUL"), "NUL byte in a string: %s", dp_error_message());
}

/* --- safetensors round trip and format ------------------------------------------------ */
static void test_safetensors_round_trip(void) {
    float a[6] = {1.0f, -2.5f, 3.25e-30f, 0.0f, -0.0f, 1e30f};
    float b[1] = {42.0f};
    dp_st_tensor_t tensors[] = {
        {"layer.weight", 2, {2, 3}, a},
        {"scalar \"quoted\"\n", 0, {0}, b},
        {"empty", 2, {0, 5}, NULL},
    };
    dp_st_meta_t meta[] = {{"k1", "v1"}, {"k\\2", "caf\xc3\xa9"}};
    const char *path = testing_tmp_file("round.safetensors");
    CHECK(dp_safetensors_write(path, tensors, 3, meta, 2) == DP_OK, "write: %s", dp_error_message());
    size_t size;
    unsigned char *bytes = testing_read_file(path, &size);
    CHECK(bytes != NULL, "cannot read back %s", path);
    if (!bytes) return;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | bytes[i];
    CHECK((8 + n) % 8 == 0, "data starts at %llu, not a multiple of 8", (unsigned long long)(8 + n));
    CHECK(size == 8 + n + 28, "file size %zu, expected %llu", size, (unsigned long long)(8 + n + 28));
    CHECK(bytes[8] == '{', "header starts with '{'");
    CHECK(bytes[8 + n - 1] == '}' || bytes[8 + n - 1] == ' ', "header padded with spaces");
    CHECK(memcmp(bytes + 8 + n, a, 24) == 0, "data of the first tensor right after the header");

    /* Deterministic: the same input gives the same bytes. */
    const char *again = testing_tmp_file("round2.safetensors");
    dp_safetensors_write(again, tensors, 3, meta, 2);
    size_t size2;
    unsigned char *bytes2 = testing_read_file(again, &size2);
    CHECK(bytes2 && size2 == size && memcmp(bytes, bytes2, size) == 0, "two writes differ");
    free(bytes2);
    free(bytes);

    dp_safetensors_t *st;
    CHECK(dp_safetensors_read(path, &st) == DP_OK, "read: %s", dp_error_message());
    if (!st) return;
    CHECK(dp_safetensors_count(st) == 3, "count %d", dp_safetensors_count(st));
    const dp_st_entry_t *e = dp_safetensors_find(st, "layer.weight");
    float got[6];
    CHECK(e && e->ndim == 2 && e->shape[0] == 2 && e->shape[1] == 3 && e->numel == 6, "layer.weight entry");
    if (e) {
        dp_safetensors_copy(e, got);
        CHECK(memcmp(got, a, sizeof a) == 0, "layer.weight bits differ");
    }
    e = dp_safetensors_find(st, "scalar \"quoted\"\n");
    CHECK(e && e->ndim == 0 && e->numel == 1, "scalar entry with an escaped name");
    if (e) {
        dp_safetensors_copy(e, got);
        CHECK(got[0] == 42.0f, "scalar value %g", got[0]);
    }
    e = dp_safetensors_find(st, "empty");
    CHECK(e && e->numel == 0 && e->shape[1] == 5, "empty entry");
    CHECK(dp_safetensors_entry(st, 0) == dp_safetensors_find(st, "layer.weight"), "header order kept");
    CHECK(dp_safetensors_meta(st, "k\\2") && strcmp(dp_safetensors_meta(st, "k\\2"), "caf\xc3\xa9") == 0,
          "metadata value");
    CHECK(dp_safetensors_meta_count(st) == 2 && strcmp(dp_safetensors_meta_at(st, 0).key, "k1") == 0,
          "metadata order");
    CHECK(dp_safetensors_meta(st, "absent") == NULL, "absent metadata");
    dp_safetensors_free(st);

    /* Bad arguments: nothing written. */
    dp_st_tensor_t twice[] = {{"x", 1, {1}, b}, {"x", 1, {1}, b}};
    const char *never = testing_tmp_file("never.safetensors");
    CHECK(dp_safetensors_write(never, twice, 2, NULL, 0) == DP_ERR_ARG && strstr(dp_error_message(), "twice"),
          "duplicate names accepted: %s", dp_error_message());
    dp_st_tensor_t reserved[] = {{"__metadata__", 1, {1}, b}};
    CHECK(dp_safetensors_write(never, reserved, 1, NULL, 0) == DP_ERR_ARG, "reserved name accepted");
    CHECK(testing_count_entries(testing_tmpdir(), "never") == 0, "a refused write left a file");
}

/* --- corrupt files --------------------------------------------------------------------- */
static void test_corrupt_files(void) {
    const char *path = testing_tmp_file("corrupt.safetensors");
    /* no path: one line, not a crash */
    dp_checkpoint_t *no_file = (dp_checkpoint_t *)&no_file;
    CHECK(dp_checkpoint_open(NULL, &no_file) == DP_ERR_ARG && no_file == NULL &&
          strcmp(dp_error_message(), "checkpoint: no path given (NULL)") == 0, "dp_checkpoint_open(NULL): '%s'",
          dp_error_message());
    /* Every truncation of a valid file is refused. */
    float a[4] = {1, 2, 3, 4};
    dp_st_tensor_t tensors[] = {{"a", 1, {3}, a}, {"b", 1, {1}, a + 3}};
    dp_st_meta_t meta[] = {{"format", "x"}};
    const char *valid = testing_tmp_file("valid.safetensors");
    CHECK(dp_safetensors_write(valid, tensors, 2, meta, 1) == DP_OK, "write: %s", dp_error_message());
    size_t size;
    unsigned char *bytes = testing_read_file(valid, &size);
    if (!bytes) return;
    int truncations_refused = 0;
    for (size_t cut = 0; cut < size; cut++) {
        write_bytes(path, bytes, cut);
        dp_safetensors_t *st = NULL;
        dp_status_t status = dp_safetensors_read(path, &st);
        const char *m = dp_error_message();
        truncations_refused += status == DP_ERR_FORMAT && st == NULL && strstr(m, path) && !strchr(m, '\n');
        if (st) dp_safetensors_free(st);
    }
    CHECK(truncations_refused == (int)size, "%d of %zu truncations refused cleanly", truncations_refused, size);
    write_bytes(path, bytes, 3);
    check_read_fails(path, "shorter than the 8-byte header length", "3-byte file");
    write_bytes(path, bytes, size - 1);
    check_read_fails(path, "truncated", "last byte cut");

    /* Header length too large, or huge. */
    unsigned char *copy = malloc(size);
    memcpy(copy, bytes, size);
    copy[0] = (unsigned char)(size - 7), copy[1] = (unsigned char)((size - 7) >> 8);
    write_bytes(path, copy, size);
    check_read_fails(path, "larger than the", "header length one past the file");
    memset(copy, 0xff, 8);
    write_bytes(path, copy, size);
    check_read_fails(path, "header length 18446744073709551615", "header length 2^64-1");
    free(copy);

    /* Every header byte replaced by a few bad values: refused or read, never a crash. */
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | bytes[i];
    const unsigned char replacements[] = {0x00, '"', '}', ']', ',', '9', '-', 0xff, '\\', '{'};
    int mutations = 0, clean = 0;
    for (size_t pos = 8; pos < 8 + n; pos++) {
        for (size_t r = 0; r < sizeof replacements; r++) {
            if (bytes[pos] == replacements[r]) continue;
            unsigned char saved = bytes[pos];
            bytes[pos] = replacements[r];
            write_bytes(path, bytes, size);
            bytes[pos] = saved;
            dp_safetensors_t *st = NULL;
            dp_error_clear();
            dp_status_t status = dp_safetensors_read(path, &st);
            const char *m = dp_error_message();
            mutations++;
            clean += status == DP_OK ? st != NULL : (st == NULL && strstr(m, path) && !strchr(m, '\n'));
            dp_safetensors_free(st);
        }
    }
    CHECK(clean == mutations, "%d of %d mutated headers handled cleanly", clean, mutations);
    free(bytes);

    raw_case_t bad[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "',' or '}'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8, "a string key"},
        {"[]", 0, "does not start with '{'"},
        {"{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "dtype 'F16'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "needs 12 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "overlap"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, "unused bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, "past the end of the data"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "duplicate key \"a\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, "4 bytes after the last tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "only integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "0 <= begin <= end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "[begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "no 'data_offsets'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "unknown key 'x'"},
        {"{\"a\":[1]}", 0, "expected an object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "9 dims"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,4]}}", 4, "2^62"},
        {"{\"__metadata__\":{\"x\":1}}", 0, "must be a string"},
        {"{\"__metadata__\":[]}", 0, "must be an object"},
        {"{\"\xff\":{}}", 0, "invalid UTF-8"},
    };
    check_raw_cases(path, bad, sizeof bad / sizeof bad[0], "corrupt");
    /* Sanity: the table's good shape is read. */
    write_raw_file(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    dp_safetensors_t *st;
    CHECK(dp_safetensors_read(path, &st) == DP_OK, "valid hand-written file refused: %s", dp_error_message());
    dp_safetensors_free(st);
    dp_safetensors_t *none = (dp_safetensors_t *)1;
    CHECK(dp_safetensors_read(testing_tmp_file("missing.safetensors"), &none) == DP_ERR_IO && !none,
          "missing file: %s", dp_error_message());
}

/* --- checkpoints ------------------------------------------------------------------------- */
static float *random_params(const dp_model_t *m, uint64_t seed) {
    size_t n = dp_model_num_params(m);
    float *p = malloc(sizeof(float) * (n ? n : 1));
    dp_rng_t rng;
    dp_rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++) p[i] = (float)((double)(dp_rng_next(&rng) >> 11) * 0x1p-53 - 0.5);
    return p;
}

/* Hyper-parameters that need all 9 (float) or 17 (double) significant
 * digits to come back exact, for an optimizer of `kind` (the fields that do
 * not apply to it are 0, as dp_optim_config_check requires), and a cosine
 * schedule with a warm-up. */
static dp_checkpoint_info_t sample_info(const char *model, dp_optim_kind_t kind) {
    dp_checkpoint_info_t info = {0};
    snprintf(info.model, sizeof info.model, "%s", model);
    snprintf(info.dptrain_version, sizeof info.dptrain_version, "9.8.7");
    info.optim = (dp_optim_config_t){.kind = kind, .lr = 1.0f / 3.0f, .weight_decay = 3e-4f / 7.0f};
    if (kind == DP_OPTIM_MOMENTUM) info.optim.momentum = 0.9f / 1.1f, info.optim.nesterov = 1;
    const int adam = kind == DP_OPTIM_ADAM || kind == DP_OPTIM_ADAMW;
    if (adam) info.optim.beta1 = 0.8f / 1.1f, info.optim.beta2 = 0.99f / 1.03f;
    if (adam || kind == DP_OPTIM_ADAGRAD) info.optim.eps = 1e-7f / 3.0f;
    info.optim.has_norm_weight_decay = 1; /* 0: a group's decay that is none */
    info.optim.has_bias_weight_decay = 1, info.optim.bias_weight_decay = 0.05f / 3.0f;
    info.schedule = (dp_lr_schedule_t){.kind = DP_LR_COSINE, .lr = 1.0 / 3.0, .total_epochs = 7,
                                       .min_lr = 1.0 / 30.0, .warmup_steps = 11,
                                       .warmup_method = DP_WARMUP_CONSTANT, .warmup_start = 0.1 / 3.0,
                                       .warmup_sequential = 1};
    info.steps_per_epoch = 235;
    info.step_count = 12345678901ULL;
    info.optimizer_steps = 12345678900ULL;
    info.epochs_completed = 3;
    info.loader_epoch = 3;
    info.loader_batch = 0;
    info.seed = 18446744073709551615ULL;
    info.batch_size = 256;
    info.accumulate = 4;
    info.epochs_planned = 7;
    info.sync_batch_norm = 1;
    info.label_smoothing = 0.1f / 3.0f; /* its shortest decimal reads back to the same float */
    info.clip_grad_norm = 2.5f;
    info.best_epoch = 2, info.best_correct = 8123, info.best_count = 10000, info.early_stop = 4;
    info.ra_reps = 4;
    info.train_examples = 60000;
    info.num_devices = 2;
    info.num_ranks = 1;
    return info;
}

/* Every field of two infos equal (floats compared exactly). */
static int same_info(const dp_checkpoint_info_t *a, const dp_checkpoint_info_t *b) {
    const dp_optim_config_t *p = &a->optim, *q = &b->optim;
    const dp_lr_schedule_t *s = &a->schedule, *t = &b->schedule;
    return strcmp(a->model, b->model) == 0 && strcmp(a->dptrain_version, b->dptrain_version) == 0 &&
           p->kind == q->kind && p->lr == q->lr && p->weight_decay == q->weight_decay &&
           p->momentum == q->momentum && p->nesterov == q->nesterov && p->beta1 == q->beta1 &&
           p->beta2 == q->beta2 && p->eps == q->eps && p->has_norm_weight_decay == q->has_norm_weight_decay &&
           p->norm_weight_decay == q->norm_weight_decay && p->has_bias_weight_decay == q->has_bias_weight_decay &&
           p->bias_weight_decay == q->bias_weight_decay && s->kind == t->kind && s->lr == t->lr &&
           s->step_epochs == t->step_epochs && s->gamma == t->gamma && s->total_epochs == t->total_epochs &&
           s->min_lr == t->min_lr && s->warmup_epochs == t->warmup_epochs && s->warmup_steps == t->warmup_steps &&
           s->warmup_method == t->warmup_method && s->warmup_start == t->warmup_start &&
           s->warmup_sequential == t->warmup_sequential && a->steps_per_epoch == b->steps_per_epoch && a->step_count == b->step_count &&
           a->optimizer_steps == b->optimizer_steps && a->epochs_completed == b->epochs_completed &&
           a->loader_epoch == b->loader_epoch && a->loader_batch == b->loader_batch && a->seed == b->seed &&
           a->batch_size == b->batch_size && a->accumulate == b->accumulate &&
           a->epochs_planned == b->epochs_planned && a->sync_batch_norm == b->sync_batch_norm &&
           a->label_smoothing == b->label_smoothing && a->clip_grad_norm == b->clip_grad_norm &&
           a->best_epoch == b->best_epoch &&
           a->best_correct == b->best_correct && a->best_count == b->best_count && a->early_stop == b->early_stop &&
           a->ra_reps == b->ra_reps && a->train_examples == b->train_examples &&
           a->num_devices == b->num_devices && a->num_ranks == b->num_ranks;
}

/* Copies `in` to `out` with metadata `key` set to `value` (NULL: dropped; added when absent)
 * and, if extra is set, one more tensor of that name. */
static void rewrite(const char *in, const char *out, const char *key, const char *value, const char *extra) {
    dp_safetensors_t *st;
    if (dp_safetensors_read(in, &st) != DP_OK) {
        fprintf(stderr, "rewrite: %s\n", dp_error_message());
        exit(2);
    }
    int count = dp_safetensors_count(st), meta_count = dp_safetensors_meta_count(st);
    dp_st_tensor_t *tensors = calloc((size_t)count + 1, sizeof *tensors);
    float **data = calloc((size_t)count + 1, sizeof *data);
    dp_st_meta_t *meta = calloc((size_t)meta_count + 1, sizeof *meta);
    for (int i = 0; i < count; i++) {
        const dp_st_entry_t *e = dp_safetensors_entry(st, i);
        data[i] = malloc(4 * e->numel + 4);
        dp_safetensors_copy(e, data[i]);
        tensors[i] = (dp_st_tensor_t){e->name, e->ndim, {0}, data[i]};
        memcpy(tensors[i].shape, e->shape, sizeof e->shape);
    }
    static const float one = 1.0f;
    if (extra) tensors[count++] = (dp_st_tensor_t){extra, 1, {1}, &one};
    int m = 0, found = 0;
    for (int i = 0; i < meta_count; i++) {
        dp_st_meta_t kv = dp_safetensors_meta_at(st, i);
        if (strcmp(kv.key, key ? key : "") == 0) {
            found = 1;
            if (value) meta[m++] = (dp_st_meta_t){kv.key, value};
        } else {
            meta[m++] = kv;
        }
    }
    if (key && value && !found) meta[m++] = (dp_st_meta_t){key, value}; /* a key the file lacks: added */
    if (dp_safetensors_write(out, tensors, count, meta, m) != DP_OK) exit(2);
    for (int i = 0; i < count; i++) free(data[i]);
    free(data);
    free(tensors);
    free(meta);
    dp_safetensors_free(st);
}

static void check_open_fails(const char *path, const char *part, const char *label) {
    dp_checkpoint_t *c = (dp_checkpoint_t *)1;
    dp_status_t status = dp_checkpoint_open(path, &c);
    const char *m = dp_error_message();
    CHECK(status != DP_OK && c == NULL, "%s: opened", label);
    CHECK(strstr(m, path) && strstr(m, part) && !strchr(m, '\n'), "%s: message '%s' lacks '%s'", label, m, part);
}

/* Each case: the checkpoint at `path` with metadata `key` set to its value
 * (written to the temporary file `name`) fails to open with one line
 * naming the file and its part. */
typedef struct {
    const char *value, *part;
} edit_case_t;
static void check_edits_refused(const char *path, const char *name, const char *key, const edit_case_t *cases,
                                size_t n) {
    const char *edited = testing_tmp_file(name);
    for (size_t i = 0; i < n; i++) {
        rewrite(path, edited, key, cases[i].value, NULL);
        check_open_fails(edited, cases[i].part, cases[i].value);
    }
}

/* A small model with batch norm: trainable conv, bn and fc parameters, then
 * the bn buffers running_mean / running_var. NULL (and a failed check) when
 * it cannot be built. */
static dp_model_t *bn_model(void) {
    dp_model_t *bn = NULL;
    int ok = dp_model_new("bn", 1, 4, 4, DP_INIT_NORMAL, 0.01f, &bn) == DP_OK &&
             dp_model_add_conv(bn, "conv1", 2, 3, 3, NULL, 1) == DP_OK &&
             dp_model_add_batch_norm(bn, "bn1", NULL) == DP_OK && dp_model_add_flatten(bn) == DP_OK &&
             dp_model_add_linear(bn, "fc", 3, 1) == DP_OK;
    CHECK(ok, "batch-norm model: %s", dp_error_message());
    if (!ok) {
        dp_model_free(bn);
        return NULL;
    }
    return bn;
}

/* Every kind of optimizer: parameters, batch-norm buffers, state buffers
 * (sized num_trainable) and step count come back bit for bit; one state
 * tensor per trainable parameter and state, none for the buffers. */
static void test_optimizer_round_trips(void) {
    dp_model_t *bn = bn_model();
    if (!bn) return;
    size_t n = dp_model_num_params(bn), trainable = dp_model_num_trainable(bn);
    int tensors = dp_model_num_param_tensors(bn), trainable_tensors = 0;
    for (int i = 0; i < tensors; i++) trainable_tensors += dp_model_param(bn, i)->trainable != 0;
    CHECK(trainable < n && trainable_tensors == 6 && tensors == 8, "bn model: %zu trainable of %zu floats, "
          "%d of %d tensors", trainable, n, trainable_tensors, tensors);
    const char *const expected_states[] = {"", "momentum_buffer", "sum", "exp_avg,exp_avg_sq", "exp_avg,exp_avg_sq"};
    for (int kind = DP_OPTIM_SGD; kind <= DP_OPTIM_ADAMW; kind++) {
        const char *kind_name = dp_optim_kind_name((dp_optim_kind_t)kind);
        dp_checkpoint_info_t info = sample_info("bn", (dp_optim_kind_t)kind);
        dp_optimizer_t *opt = NULL, *fresh = NULL;
        CHECK(dp_optimizer_new(&info.optim, trainable, &opt) == DP_OK &&
              dp_optimizer_new(&info.optim, trainable, &fresh) == DP_OK, "%s: %s", kind_name, dp_error_message());
        float *params = random_params(bn, 3 + (uint64_t)kind), *loaded = calloc(n, sizeof(float));
        float *states[2] = {NULL, NULL};
        for (int s = 0; opt && s < dp_optimizer_num_states(opt); s++) {
            states[s] = random_params(bn, 100 + 10 * (uint64_t)kind + (uint64_t)s);
            memcpy(dp_optimizer_state(opt, s, NULL), states[s], trainable * sizeof(float));
        }
        if (opt) dp_optimizer_set_steps(opt, 4242);
        info.optimizer_steps = 4242; /* what is saved: the optimizer's own count */
        char path[64];
        snprintf(path, sizeof path, "bn_%s.safetensors", kind_name);
        const char *file = testing_tmp_file(path);
        CHECK(opt && dp_checkpoint_save(file, bn, params, opt, &info) == DP_OK, "%s: save: %s", kind_name,
              dp_error_message());
        dp_checkpoint_t *c = NULL;
        CHECK(dp_checkpoint_open(file, &c) == DP_OK, "%s: open: %s", kind_name, dp_error_message());
        if (c && fresh) {
            CHECK(same_info(dp_checkpoint_info(c), &info), "%s: metadata not read back exactly", kind_name);
            const dp_safetensors_t *st = dp_checkpoint_tensors(c);
            const char *states_meta = dp_safetensors_meta(st, "optimizer.states");
            CHECK(states_meta && strcmp(states_meta, expected_states[kind]) == 0, "%s: optimizer.states '%s'",
                  kind_name, states_meta ? states_meta : "(none)");
            CHECK(dp_safetensors_count(st) == tensors + dp_optimizer_num_states(fresh) * trainable_tensors,
                  "%s: %d tensors", kind_name, dp_safetensors_count(st));
            CHECK(dp_checkpoint_load_params(c, bn, loaded) == DP_OK, "%s: load: %s", kind_name, dp_error_message());
            CHECK(memcmp(loaded, params, n * sizeof(float)) == 0, "%s: parameters or bn buffers not bit-identical",
                  kind_name);
            CHECK(dp_safetensors_find(st, "bn1.running_mean") && dp_safetensors_find(st, "bn1.running_var"),
                  "%s: no bn buffers", kind_name);
            CHECK(dp_checkpoint_load_optimizer(c, bn, fresh) == DP_OK, "%s: load optimizer: %s", kind_name,
                  dp_error_message());
            CHECK(dp_optimizer_steps(fresh) == 4242, "%s: steps %llu", kind_name,
                  (unsigned long long)dp_optimizer_steps(fresh));
            for (int s = 0; s < dp_optimizer_num_states(fresh); s++) {
                const char *name;
                const float *got = dp_optimizer_state(fresh, s, &name);
                CHECK(got && states[s] && memcmp(got, states[s], trainable * sizeof(float)) == 0,
                      "%s: state %s not bit-identical", kind_name, name);
                char tensor[128];
                snprintf(tensor, sizeof tensor, "optimizer.fc.weight.%s", name);
                CHECK(dp_safetensors_find(st, tensor) != NULL, "%s: no tensor %s", kind_name, tensor);
                snprintf(tensor, sizeof tensor, "optimizer.bn1.running_mean.%s", name);
                CHECK(dp_safetensors_find(st, tensor) == NULL, "%s: state for a buffer: %s", kind_name, tensor);
            }
            /* Another kind of optimizer is refused, naming both, and changes nothing
             * (adam's file in adamw, whose states have the same names, too). */
            dp_checkpoint_info_t other_info = sample_info("bn", (dp_optim_kind_t)((kind + 1) % (DP_OPTIM_ADAMW + 1)));
            dp_optimizer_t *other = NULL;
            if (dp_optimizer_new(&other_info.optim, trainable, &other) == DP_OK) {
                dp_optimizer_set_steps(other, 7);
                char part[128];
                snprintf(part, sizeof part, "saved with optimizer '%s', this run uses '%s'", kind_name,
                         dp_optim_kind_name(other_info.optim.kind));
                CHECK(dp_checkpoint_load_optimizer(c, bn, other) == DP_ERR_ARG && strstr(dp_error_message(), part),
                      "%s: other kind: %s", kind_name, dp_error_message());
                CHECK(dp_optimizer_steps(other) == 7, "%s: a refused load changed the step count", kind_name);
            }
            dp_optimizer_free(other);
        }
        dp_checkpoint_close(c);
        for (int s = 0; s < 2; s++) free(states[s]);
        free(params);
        free(loaded);
        dp_optimizer_free(opt);
        dp_optimizer_free(fresh);
    }

    /* An optimizer smaller than the trainable parameters, or of another kind
     * than the info says: refused on save and on load, nothing written. */
    dp_checkpoint_info_t info = sample_info("bn", DP_OPTIM_ADAM);
    dp_optimizer_t *small = NULL, *sgd = NULL;
    dp_optim_config_t sgd_config = {.kind = DP_OPTIM_SGD, .lr = 0.1f};
    float *params = random_params(bn, 5);
    const char *never = testing_tmp_file("never_bn.safetensors");
    if (dp_optimizer_new(&info.optim, trainable - 1, &small) == DP_OK) {
        CHECK(dp_checkpoint_save(never, bn, params, small, &info) == DP_ERR_ARG &&
              strstr(dp_error_message(), "the optimizer updates"), "small optimizer saved: %s", dp_error_message());
        dp_checkpoint_t *c;
        if (dp_checkpoint_open(testing_tmp_file("bn_adam.safetensors"), &c) == DP_OK) {
            CHECK(dp_checkpoint_load_optimizer(c, bn, small) == DP_ERR_ARG &&
                  strstr(dp_error_message(), "the optimizer updates"), "small optimizer loaded: %s",
                  dp_error_message());
            dp_checkpoint_close(c);
        }
    }
    if (dp_optimizer_new(&sgd_config, trainable, &sgd) == DP_OK)
        CHECK(dp_checkpoint_save(never, bn, params, sgd, &info) == DP_ERR_ARG &&
              strstr(dp_error_message(), "info says optimizer 'adam', the optimizer saved is 'sgd'"),
              "kind mismatch saved: %s", dp_error_message());
    info.schedule.min_lr = 1.0; /* above lr */
    CHECK(dp_checkpoint_save(never, bn, params, NULL, &info) == DP_ERR_ARG &&
          strstr(dp_error_message(), "lr_schedule: lr schedule cosine"), "bad schedule saved: %s", dp_error_message());
    CHECK(testing_count_entries(testing_tmpdir(), "never_bn") == 0, "a refused save wrote a file");
    free(params);
    dp_optimizer_free(small);
    dp_optimizer_free(sgd);
    dp_model_free(bn);
}

/* data.classes: an image folder's class names come back as saved (quotes,
 * backslashes, UTF-8), a checkpoint without them has none, names that a
 * checkpoint cannot hold are refused before anything is written, and a
 * data.classes that is not an array of names is refused on opening. */
/* lenet (NULL when it cannot be built), *params random from seed, *info
 * sample_info's; a checkpoint of them saved as `file` and opened into *c,
 * whose metadata must lack the optional key `key`. */
static dp_model_t *lenet_saved_without(const char *file, const char *key, uint64_t seed, float **params,
                                       dp_checkpoint_info_t *info, dp_checkpoint_t **c) {
    dp_model_t *lenet = NULL;
    *c = NULL;
    if (dp_model_builtin("lenet", &lenet) != DP_OK) {
        CHECK(0, "lenet: %s", dp_error_message());
        return NULL;
    }
    *params = random_params(lenet, seed);
    *info = sample_info("lenet", DP_OPTIM_SGD);
    const char *plain = testing_tmp_file(file);
    CHECK(dp_checkpoint_save(plain, lenet, *params, NULL, info) == DP_OK, "save: %s", dp_error_message());
    CHECK(dp_checkpoint_open(plain, c) == DP_OK && !dp_safetensors_meta(dp_checkpoint_tensors(*c), key),
          "a checkpoint saved without %s has it: %s", key, dp_error_message());
    return lenet;
}

static void test_class_names(void) {
    float *params;
    dp_checkpoint_info_t info;
    dp_checkpoint_t *c;
    dp_model_t *lenet = lenet_saved_without("no_classes.safetensors", "data.classes", 3, &params, &info, &c);
    if (!lenet) return;
    CHECK(c && dp_checkpoint_info(c)->num_class_names == 0 && !dp_checkpoint_info(c)->class_names,
          "a checkpoint saved without class names has some");
    dp_checkpoint_close(c);

    char *names[3] = {"sea \"lion\"", "back\\slash", "caf\xc3\xa9"};
    info.class_names = names;
    info.num_class_names = 3;
    const char *path = testing_tmp_file("classes.safetensors");
    CHECK(dp_checkpoint_save(path, lenet, params, NULL, &info) == DP_OK, "save: %s", dp_error_message());
    c = NULL;
    CHECK(dp_checkpoint_open(path, &c) == DP_OK, "open: %s", dp_error_message());
    if (c) {
        const dp_checkpoint_info_t *got = dp_checkpoint_info(c);
        const char *text = dp_safetensors_meta(dp_checkpoint_tensors(c), "data.classes");
        CHECK(text && strcmp(text, "[\"sea \\\"lion\\\"\",\"back\\\\slash\",\"caf\xc3\xa9\"]") == 0,
              "data.classes is '%s'", text ? text : "(none)");
        int same = got->num_class_names == 3;
        for (int i = 0; same && i < 3; i++) same = strcmp(got->class_names[i], names[i]) == 0;
        CHECK(same, "class names read back: %d of them", got->num_class_names);
        dp_checkpoint_close(c);
    }
    /* names a checkpoint cannot hold: nothing written */
    const char *never = testing_tmp_file("never_classes.safetensors");
    char long_name[300];
    memset(long_name, 'x', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    char *bad[][1] = {{"\xff\xfe"}, {""}, {"tab\there"}, {long_name}};
    const char *why[] = {"is not valid UTF-8", "is empty", "holds a control character", "is too long"};
    for (int i = 0; i < 4; i++) {
        info.class_names = bad[i];
        info.num_class_names = 1;
        dp_status_t status = dp_checkpoint_save(never, lenet, params, NULL, &info);
        const char *m = dp_error_message();
        CHECK(status == DP_ERR_ARG && strstr(m, why[i]) && strstr(m, never) && !strchr(m, '\n'),
              "bad class name %d: status %d, '%s'", i, (int)status, m);
        CHECK(dp_checkpoint_check_class_names(bad[i], 1) == DP_ERR_ARG, "check of bad class name %d passed", i);
    }
    CHECK(testing_count_entries(testing_tmpdir(), "never_classes") == 0, "a refused save left a file");
    CHECK(dp_checkpoint_check_class_names(names, 3) == DP_OK, "good names refused: %s", dp_error_message());
    /* data.classes that is not an array of 1 or more names */
    static const edit_case_t wrong[] = {
        {"[\"a\", 3]", "entry 1 is not a string"},
        {"[]", "expected a JSON array of class names"},
        {"{\"a\": \"b\"}", "expected a JSON array of class names"},
        {"[\"a\", \"\"]", "entry 1 is empty"},
        {"[\"a\"", "data.classes"},
    };
    check_edits_refused(path, "edited_classes.safetensors", "data.classes", wrong, sizeof wrong / sizeof wrong[0]);
    free(params);
    dp_model_free(lenet);
}

/* --- text from the file in messages: one line -------------------------------------------- */
/* A JSON string may hold any control character ("\n" decodes to a
 * newline). Found by tests/fuzz_checkpoint.c: metadata 'lr_schedule' of
 * "constant\n[batchnorm]\nname = bn1\n00000000000001" printed raw made the
 * message four lines. Names, keys and values are shown escaped (\n, \xNN),
 * the texts a checkpoint keeps as one line (model, freeze, transforms, ...)
 * refused on opening and on saving. Writing these cases found numbers
 * read with strtoull/strtod's leniency (a fingerprint "\n123456789abcdef"
 * or "-000000000000001", " 0.1", "1,\n2", "+1" were taken): refused, they
 * are not how the writer writes them. */
static void test_control_characters(void) {
    const char *path = testing_tmp_file("control.safetensors");
    raw_case_t raw[] = {
        {"{\"a\\nb\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
         "tensor 'a\\nb': shape [3] needs 12 bytes"},
        {"{\"__metadata__\":{\"k\\u0001\":1}}", 0, "__metadata__ 'k\\x01' must be a string"},
        {"{\"a\\\\\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
         "4 unused bytes before tensor 'a\\\\'"},
        {"{\"a\":{\"dtype\":\"F\\n32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "dtype 'F\\n32'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\\ty\":1}}", 8, "unknown key 'x\\ty'"},
        {"{\"__metadata__\":{\"a\\r\":\"1\",\"a\\r\":\"2\"}}", 0, "duplicate key \"a\\r\""},
    };
    check_raw_cases(path, raw, sizeof raw / sizeof raw[0], "control character");
    float *params;
    dp_checkpoint_info_t info;
    dp_checkpoint_t *c;
    dp_model_t *lenet = lenet_saved_without("control_base.safetensors", "data.classes", 5, &params, &info, &c);
    if (!lenet) return;
    dp_checkpoint_close(c);
    char base[4200], edited_path[4200]; /* testing_tmp_file keeps its last 8 results only */
    snprintf(base, sizeof base, "%s", testing_tmp_file("control_base.safetensors"));
    snprintf(edited_path, sizeof edited_path, "%s", testing_tmp_file("control_tensor.safetensors"));
    static const struct { const char *key; edit_case_t edit; } edits[] = {
        {"lr_schedule", {"constant\n[batchnorm]\nname = bn1\n00000000000001",
                         "'lr_schedule' is 'constant\\n[batchnorm]\\nname = bn1\\n00000000000001', expected"}},
        {"model", {"le\nnet", "metadata 'model' is \"le\\nnet\", which holds a control character (byte 0x0a at 2)"}},
        {"dptrain_version", {"0.1\t", "metadata 'dptrain_version' is \"0.1\\t\", which holds a control character"}},
        {"data.normalize", {"0.5,\n0.25", "'data.normalize' is \"0.5,\\n0.25\", which holds a control character"}},
        {"optimizer.states", {"\x7f", "'optimizer.states' is \"\\x7f\", which holds a control character"}},
        {"model.freeze", {"conv1\n", "'model.freeze' is \"conv1\\n\", which holds a control character"}},
        {"data.transform", {"resize 32\r", "'data.transform' is \"resize 32\\r\", which holds a control"}},
        {"data.train_transform", {"center\n", "'data.train_transform' is \"center\\n\", which holds a control"}},
        {"data.holdout", {"0.1\n", "'data.holdout' is '0.1\\n', expected a fraction"}},
        {"data.train_total", {"12\n", "'data.train_total' is '12\\n', expected a positive image count"}},
        {"data.train_total", {"0", "'data.train_total' is '0', expected a positive image count"}},
        {"data.train_total", {"+12", "'data.train_total' is '+12', expected a positive image count"}},
        {"data.dir", {"/data/pho\ntos", "'data.dir' is \"/data/pho\\ntos\", which holds a control character"}},
        {"data.dir", {"", "metadata 'data.dir' is empty, expected 1 to 4095 bytes"}},
        {"data.val_image_size", {"24x24\n", "'data.val_image_size' is '24x24\\n', expected HxW"}},
        {"data.val_image_size", {"24", "'data.val_image_size' is '24', expected HxW"}},
        {"data.val_image_size", {"0x24", "'data.val_image_size' is '0x24', expected HxW"}},
        {"data.val_image_size", {"24x+3", "'data.val_image_size' is '24x+3', expected HxW"}},
        {"step_count", {"1\n", "'step_count' is '1\\n', expected a decimal integer"}},
        {"optimizer.lr", {"0.1\n", "'optimizer.lr' is '0.1\\n', expected a number"}},
        {"optimizer.lr", {"\n0.1", "'optimizer.lr' is '\\n0.1', expected a number"}},
        {"lr_schedule.lr", {" 0.1", "'lr_schedule.lr' is ' 0.1', expected a number"}},
        {"model_fingerprint", {"\n123456789abcdef", "'model_fingerprint' is '\\n123456789abcdef', expected 16"}},
        {"model_fingerprint", {"-000000000000001", "'model_fingerprint' is '-000000000000001', expected 16"}},
        {"epoch.loss_sums", {"1,\n2", "'epoch.loss_sums' is '1,\\n2', expected up to"}},
        {"epoch.correct", {"+1", "'epoch.correct' is '+1', expected up to"}},
        {"data.classes", {"{\n}", "'data.classes' is '{\\n}', expected a JSON array"}},
        {"weights_only", {"1\n", "'weights_only' is '1\\n', expected 1"}},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++)
        check_edits_refused(base, "control_edit.safetensors", edits[i].key, &edits[i].edit, 1);
    /* a tensor name with a newline, which safetensors allows: shown escaped */
    rewrite(base, edited_path, NULL, NULL, "extra\n.weight");
    c = NULL;
    CHECK(dp_checkpoint_open(edited_path, &c) == DP_OK, "open: %s", dp_error_message());
    if (c) {
        float *loaded = random_params(lenet, 6);
        dp_checkpoint_init_t init;
        for (int init_path = 0; init_path < 2; init_path++) {
            dp_status_t status = init_path ? dp_checkpoint_load_init(c, lenet, loaded, 0, &init)
                                           : dp_checkpoint_load_params(c, lenet, loaded);
            const char *m = dp_error_message();
            CHECK(status == DP_ERR_FORMAT && strstr(m, "tensor 'extra\\n.weight' is not a parameter") &&
                  !strchr(m, '\n'), "%s: tensor with a newline: status %d, '%s'", init_path ? "init" : "load",
                  (int)status, m);
        }
        free(loaded);
        dp_checkpoint_close(c);
    }
    /* and a text a checkpoint keeps as one line is not written with one */
    const char *never = testing_tmp_file("never_control.safetensors");
    snprintf(info.model, sizeof info.model, "le\nnet");
    dp_status_t status = dp_checkpoint_save(never, lenet, params, NULL, &info);
    const char *m = dp_error_message();
    CHECK(status == DP_ERR_ARG && strstr(m, "model \"le\\nnet\" holds a control character") && !strchr(m, '\n'),
          "a model name with a newline saved: status %d, '%s'", (int)status, m);
    CHECK(testing_count_entries(testing_tmpdir(), "never_control") == 0, "a refused save left a file");
    snprintf(info.model, sizeof info.model, "lenet");
    snprintf(info.data_dir, sizeof info.data_dir, "/data/pho\ntos");
    status = dp_checkpoint_save(never, lenet, params, NULL, &info);
    m = dp_error_message();
    CHECK(status == DP_ERR_ARG && strstr(m, "data.dir \"/data/pho\\ntos\" holds a control character") && !strchr(m, '\n'),
          "a data.dir with a newline saved: status %d, '%s'", (int)status, m);
    CHECK(testing_count_entries(testing_tmpdir(), "never_control") == 0, "a refused save left a file");
    /* nor one that is not UTF-8 (a file or folder named in Latin-1): the writer's \udcXX, which no reader takes */
    snprintf(info.data_dir, sizeof info.data_dir, "/data/caf\xe9");
    status = dp_checkpoint_save(never, lenet, params, NULL, &info);
    m = dp_error_message();
    CHECK(status == DP_ERR_ARG && strstr(m, "data.dir \"/data/caf\xe9\" is not UTF-8") && !strchr(m, '\n'),
          "a data.dir in Latin-1 saved: status %d, '%s'", (int)status, m);
    snprintf(info.data_dir, sizeof info.data_dir, "/data/photos");
    snprintf(info.model, sizeof info.model, "le\xc3net");
    status = dp_checkpoint_save(never, lenet, params, NULL, &info);
    CHECK(status == DP_ERR_ARG && strstr(dp_error_message(), "model \"le\xc3net\" is not UTF-8"),
          "a model name with a cut sequence saved: status %d, '%s'", (int)status, dp_error_message());
    CHECK(testing_count_entries(testing_tmpdir(), "never_control") == 0, "a refused save left a file");
    snprintf(info.model, sizeof info.model, "lenet");
    snprintf(info.data_dir, sizeof info.data_dir, "/data/photos one");  /* and one that is fine comes back */
    CHECK(dp_checkpoint_save(never, lenet, params, NULL, &info) == DP_OK, "save with data.dir: %s", dp_error_message());
    c = NULL;
    CHECK(dp_checkpoint_open(never, &c) == DP_OK && !strcmp(dp_checkpoint_info(c)->data_dir, "/data/photos one"),
          "data.dir read back: '%s'", c ? dp_checkpoint_info(c)->data_dir : dp_error_message());
    dp_checkpoint_close(c);
    /* data.val_image_size: written as HxW and read back; 0 x 0 (none) writes no key, a size out of range none */
    info.val_height = 24, info.val_width = 32;
    CHECK(dp_checkpoint_save(never, lenet, params, NULL, &info) == DP_OK, "save with a test size: %s",
          dp_error_message());
    c = NULL;
    CHECK(dp_checkpoint_open(never, &c) == DP_OK && dp_checkpoint_info(c)->val_height == 24 &&
          dp_checkpoint_info(c)->val_width == 32, "data.val_image_size read back: %s",
          c ? "another size" : dp_error_message());
    dp_checkpoint_close(c);
    info.val_height = 0, info.val_width = 0;
    CHECK(dp_checkpoint_save(never, lenet, params, NULL, &info) == DP_OK, "save: %s", dp_error_message());
    c = NULL;
    CHECK(dp_checkpoint_open(never, &c) == DP_OK && dp_checkpoint_info(c)->val_height == 0 &&
          dp_checkpoint_info(c)->val_width == 0, "no data.val_image_size read back as a size");
    dp_checkpoint_close(c);
    remove(never);
    info.val_height = 24, info.val_width = 70000;
    status = dp_checkpoint_save(never, lenet, params, NULL, &info);
    CHECK(status == DP_ERR_ARG && strstr(dp_error_message(), "test size 24 x 70000 is not 1 to 65536"),
          "a test size out of range saved: status %d, '%s'", (int)status, dp_error_message());
    CHECK(testing_count_entries(testing_tmpdir(), "never_control") == 0, "a refused save left a file");
    free(params);
    dp_model_free(lenet);
}

/* cuda.conv_algorithms: the GPU convolution algorithm choices come back as
 * saved (a quote and a backslash in a key escaped), a checkpoint without
 * them has none, choices it cannot hold are refused before anything is
 * written, and a value that is not an array of {"key", "algo"} is refused
 * on opening. */
static void test_conv_algorithms(void) {
    float *params;
    dp_checkpoint_info_t info;
    dp_checkpoint_t *c;
    dp_model_t *lenet = lenet_saved_without("no_algos.safetensors", "cuda.conv_algorithms", 5, &params, &info, &c);
    if (!lenet) return;
    CHECK(c && dp_checkpoint_info(c)->num_conv_algorithms == 0 && !dp_checkpoint_info(c)->conv_algorithms,
          "a checkpoint saved without algorithm choices has some");
    dp_checkpoint_close(c);

    dp_conv_algo_t choices[2] = {{"GPU \"A\"|cuDNN 9|conv x 1x1x4x4 tf32 0|forward", 1},
                                 {"GPU\\B|cuDNN 9|conv x 1x1x4x4 tf32 0|backward data", 99}};
    info.conv_algorithms = choices;
    info.num_conv_algorithms = 2;
    const char *path = testing_tmp_file("algos.safetensors");
    CHECK(dp_checkpoint_save(path, lenet, params, NULL, &info) == DP_OK, "save: %s", dp_error_message());
    c = NULL;
    CHECK(dp_checkpoint_open(path, &c) == DP_OK, "open: %s", dp_error_message());
    if (c) {
        const dp_checkpoint_info_t *got = dp_checkpoint_info(c);
        const char *text = dp_safetensors_meta(dp_checkpoint_tensors(c), "cuda.conv_algorithms");
        CHECK(text && strcmp(text, "[{\"key\":\"GPU \\\"A\\\"|cuDNN 9|conv x 1x1x4x4 tf32 0|forward\",\"algo\":1},"
                             "{\"key\":\"GPU\\\\B|cuDNN 9|conv x 1x1x4x4 tf32 0|backward data\",\"algo\":99}]") == 0,
              "cuda.conv_algorithms is '%s'", text ? text : "(none)");
        int same = got->num_conv_algorithms == 2;
        for (int i = 0; same && i < 2; i++)
            same = strcmp(got->conv_algorithms[i].key, choices[i].key) == 0 && got->conv_algorithms[i].algo == choices[i].algo;
        CHECK(same, "choices read back: %d of them", got->num_conv_algorithms);
        dp_checkpoint_close(c);
    }
    /* choices a checkpoint cannot hold: nothing written */
    const char *never = testing_tmp_file("never_algos.safetensors");
    dp_conv_algo_t bad[] = {{"", 1}, {"tab\there", 1}, {"ok", 100}, {"ok", -1}};
    const char *why[] = {"is empty", "not printable ASCII", "expected 0 to 99", "expected 0 to 99"};
    for (int i = 0; i < 4; i++) {
        info.conv_algorithms = &bad[i];
        info.num_conv_algorithms = 1;
        dp_status_t status = dp_checkpoint_save(never, lenet, params, NULL, &info);
        const char *m = dp_error_message();
        CHECK(status == DP_ERR_ARG && strstr(m, why[i]) && strstr(m, never) && strstr(m, "cuda.conv_algorithms") &&
                  !strchr(m, '\n'),
              "bad choice %d: status %d, '%s'", i, (int)status, m);
    }
    CHECK(testing_count_entries(testing_tmpdir(), "never_algos") == 0, "a refused save left a file");
    /* cuda.conv_algorithms that is not an array of 1 or more {"key", "algo"} */
    static const edit_case_t wrong[] = {
        {"[]", "expected a JSON array of {\"key\": STRING, \"algo\": INTEGER}"},
        {"{\"key\": \"a\", \"algo\": 1}", "expected a JSON array"},
        {"[{\"key\": \"a\"}]", "entry 0 is not {\"key\": STRING, \"algo\": INTEGER}"},
        {"[{\"key\": \"a\", \"algo\": 1}, {\"key\": \"a\", \"algo\": \"1\"}]", "entry 1 is not"},
        {"[{\"key\": \"a\", \"algo\": 1, \"x\": 2}]", "entry 0 is not"},
        {"[{\"key\": \"\", \"algo\": 1}]", "entry 0: the key is empty"},
        {"[{\"key\": \"caf\u00e9\", \"algo\": 1}]", "entry 0: the key holds a byte that is not printable ASCII"},
        {"[{\"key\": \"a\", \"algo\": 100}]", "entry 0: algorithm 100, expected 0 to 99"},
        {"[{\"key\": \"a\", \"algo\": 1}", "cuda.conv_algorithms"},
    };
    check_edits_refused(path, "edited_algos.safetensors", "cuda.conv_algorithms", wrong,
                        sizeof wrong / sizeof wrong[0]);
    free(params);
    dp_model_free(lenet);
}

/* Saves that are refused in one line and write nothing: no path, no
 * parameters, an optimizer config dp_checkpoint_open would refuse. */
static void check_refused_saves(const dp_model_t *lenet, const float *params, const dp_checkpoint_info_t *info,
                                const char *path) {
    /* no path: one line, not a rename error about a temporary file */
    {
        dp_status_t st = dp_checkpoint_save("", lenet, params, NULL, info);
        CHECK(st == DP_ERR_ARG && strcmp(dp_error_message(), "checkpoint: no path given (\"\")") == 0,
              "save to \"\": %d '%s'", st, dp_error_message());
        st = dp_checkpoint_save(path, lenet, NULL, NULL, info);
        CHECK(st == DP_ERR_ARG && strstr(dp_error_message(), "lenet.safetensors: no parameters given (NULL)"),
              "save without parameters: %d '%s'", st, dp_error_message());
    }
    /* an optimizer config dp_checkpoint_open would refuse (lr 0: a zeroed info) is not written */
    const char *unreadable = testing_tmp_file("lr0.safetensors");
    dp_checkpoint_info_t lr0 = *info;
    lr0.optim.lr = 0.0f;
    dp_status_t saved = dp_checkpoint_save(unreadable, lenet, params, NULL, &lr0);
    CHECK(saved == DP_ERR_ARG && strstr(dp_error_message(), "lr0.safetensors: optimizer: learning rate must be a "
          "positive number, found 0") && access(unreadable, F_OK) != 0, "optimizer lr 0 saved: %d '%s'", saved,
          dp_error_message());
    /* nor a label smoothing outside [0, 1) */
    dp_checkpoint_info_t smooth1 = *info;
    smooth1.label_smoothing = 1.0f;
    saved = dp_checkpoint_save(unreadable, lenet, params, NULL, &smooth1);
    CHECK(saved == DP_ERR_ARG && strstr(dp_error_message(), "the label smoothing 1 is not in [0, 1)") &&
          access(unreadable, F_OK) != 0, "label smoothing 1 saved: %d '%s'", saved, dp_error_message());
    /* nor a negative gradient clipping bound */
    dp_checkpoint_info_t clip = *info;
    clip.clip_grad_norm = -1.0f;
    saved = dp_checkpoint_save(unreadable, lenet, params, NULL, &clip);
    CHECK(saved == DP_ERR_ARG && strstr(dp_error_message(), "the gradient clipping norm -1 is not in (0, 1e+30]") &&
          access(unreadable, F_OK) != 0, "clipping bound -1 saved: %d '%s'", saved, dp_error_message());
}

/* The checkpoint at `path` with one metadata value changed (in `edited`):
 * refused naming it; without every key a newer dptrain added: read as none. */
static void check_metadata_edits(const char *path, const char *edited) {
    struct { const char *key, *value, *part; } bad_meta[] = {
        {"step_count", NULL, "metadata 'step_count' is missing"},
        {"step_count", "12x", "'step_count' is '12x', expected a decimal integer"},
        {"loader.epoch", "-1", "'loader.epoch' is '-1'"},
        {"optimizer.lr", "fast", "'optimizer.lr' is 'fast', expected a number"},
        {"optimizer.lr", "inf", "'optimizer.lr' is 'inf', expected a number"},
        {"format_version", "1", "format version 1, this dptrain reads version 2"},
        {"format", NULL, "not a dptrain checkpoint"},
        {"optimizer", "rmsprop", "'optimizer' is 'rmsprop', expected sgd, momentum, adagrad, adam or adamw"},
        {"optimizer.momentum", "0.5", "metadata 'optimizer.*': "},
        {"lr_schedule", "linear", "'lr_schedule' is 'linear', expected constant, step, cosine or exponential"},
        {"lr_schedule.warmup_method", "cosine", "'lr_schedule.warmup_method' is 'cosine', expected linear or "
                                                "constant"},
        {"lr_schedule.warmup_start", "0", "'lr_schedule.warmup_start' is '0', expected a number in (0, 1]"},
        {"lr_schedule.warmup_start", "1.5", "'lr_schedule.warmup_start' is '1.5', expected a number in (0, 1]"},
        {"lr_schedule.warmup_start", "0.1x", "'lr_schedule.warmup_start' is '0.1x', expected a number in (0, 1]"},
        {"lr_schedule.warmup_sequential", "0", "'lr_schedule.warmup_sequential' is '0', expected 1 (or no such"},
        {"lr_schedule.warmup_steps", "0", "metadata 'lr_schedule.*': lr schedule: a warm-up method, start factor"},
        {"lr_schedule", NULL, "metadata 'lr_schedule' is missing"},
        {"lr_schedule.lr", "0.1x", "'lr_schedule.lr' is '0.1x', expected a number"},
        {"lr_schedule.min_lr", "1", "metadata 'lr_schedule.*': lr schedule cosine: the minimum"},
        {"lr_schedule.gamma", "0.5", "metadata 'lr_schedule.*': lr schedule cosine: the step length and gamma"},
        {"lr_schedule.steps_per_epoch", "0", "'lr_schedule.steps_per_epoch' is 0"},
        {"lr_schedule.total_steps", "1646", "'lr_schedule.total_steps' is 1646, expected 1645"},
        {"lr_schedule.warmup_steps", NULL, "metadata 'lr_schedule.warmup_steps' is missing"},
        {"accumulate", "0", "metadata 'accumulate' is 0, expected a divisor of 'batch_size'"},
        {"epochs_planned", "2x", "'epochs_planned' is '2x', expected a decimal integer"},
        {"sync_batch_norm", "2", "'sync_batch_norm' is '2', expected a decimal integer from 0 to 1"},
        {"label_smoothing", "1", "'label_smoothing' is '1', expected a number in (0, 1)"},
        {"label_smoothing", "0", "'label_smoothing' is '0', expected a number in (0, 1)"},
        {"label_smoothing", "-0.1", "'label_smoothing' is '-0.1', expected a number in (0, 1)"},
        {"label_smoothing", "0.1x", "'label_smoothing' is '0.1x', expected a number in (0, 1)"},
        {"label_smoothing", " 0.1", "'label_smoothing' is ' 0.1', expected a number in (0, 1)"},
        {"label_smoothing", "nan", "'label_smoothing' is 'nan', expected a number in (0, 1)"},
        {"label_smoothing", "", "'label_smoothing' is '', expected a number in (0, 1)"},
        {"best.epoch", "0", "metadata 'best.*' says epoch 0 with 8123 of 10000 correct"},
        {"best.epoch", "99", "metadata 'best.*' says epoch 99 with"},
        {"best.test_correct", "10001", "metadata 'best.*' says epoch 2 with 10001 of 10000 correct"},
        {"best.test_count", "0", "metadata 'best.*' says epoch 2 with 8123 of 0 correct"},
        {"best.test_count", "1e4", "'best.test_count' is '1e4', expected a decimal integer"},
        {"best.test_correct", NULL, "metadata 'best.test_correct' is missing (the file has 'best.epoch')"},
        {"early_stop", "0", "'early_stop' is '0', expected a decimal integer from 1 to 2147483647"},
        {"data.ra_reps", "1", "'data.ra_reps' is '1', expected a decimal integer from 2 to 64"},
        {"data.ra_reps", "65", "'data.ra_reps' is '65', expected a decimal integer from 2 to 64"},
        {"data.ra_reps", "03", "'data.ra_reps' is '03', expected a decimal integer from 2 to 64"},
        {"clip_grad_norm", "0", "'clip_grad_norm' is '0', expected a number in (0, 1e+30]"},
        {"clip_grad_norm", "-2", "'clip_grad_norm' is '-2', expected a number >= 0"},
        {"clip_grad_norm", "1e31", "'clip_grad_norm' is '1e31', expected a number in (0, 1e+30]"},
        {"clip_grad_norm", "inf", "'clip_grad_norm' is 'inf', expected a number >= 0"},
        {"clip_grad_norm", "1x", "'clip_grad_norm' is '1x', expected a number >= 0"},
        {"early_stop", "2.5", "'early_stop' is '2.5', expected a decimal integer from 1 to 2147483647"},
        {"optimizer.norm_weight_decay", "-1", "'optimizer.norm_weight_decay' is '-1', expected a number >= 0"},
        {"optimizer.bias_weight_decay", "inf", "'optimizer.bias_weight_decay' is 'inf', expected a number >= 0"},
        {"optimizer.bias_weight_decay", "0.1 ", "'optimizer.bias_weight_decay' is '0.1 ', expected a number >= 0"},
    };
    for (size_t i = 0; i < sizeof bad_meta / sizeof bad_meta[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "metadata %s = %s", bad_meta[i].key, bad_meta[i].value ? bad_meta[i].value : "(none)");
        rewrite(path, edited, bad_meta[i].key, bad_meta[i].value, NULL);
        check_open_fails(edited, bad_meta[i].part, label);
    }
    /* a file of an older dptrain records none of the newer keys: 0, not recorded */
    const char *older = testing_tmp_file("older.st");
    static const char *const newer_keys[] = {"accumulate", "epochs_planned", "sync_batch_norm", "label_smoothing",
                                             "optimizer.norm_weight_decay", "optimizer.bias_weight_decay",
                                             "best.epoch", "best.test_correct", "best.test_count", "early_stop",
                                             "data.ra_reps", "clip_grad_norm", "lr_schedule.warmup_method",
                                             "lr_schedule.warmup_start", "lr_schedule.warmup_sequential"};
    rewrite(path, edited, newer_keys[0], NULL, NULL);
    for (size_t k = 1; k < sizeof newer_keys / sizeof newer_keys[0]; k++) {
        rewrite(edited, older, newer_keys[k], NULL, NULL);
        rename(older, edited);
    }
    dp_checkpoint_t *old_file = NULL;
    CHECK(dp_checkpoint_open(edited, &old_file) == DP_OK && dp_checkpoint_info(old_file)->accumulate == 0 &&
          !dp_checkpoint_info(old_file)->optim.has_norm_weight_decay &&
          !dp_checkpoint_info(old_file)->optim.has_bias_weight_decay && dp_checkpoint_info(old_file)->best_epoch == 0 &&
          dp_checkpoint_info(old_file)->early_stop == 0 && dp_checkpoint_info(old_file)->ra_reps == 0 &&
          dp_checkpoint_info(old_file)->epochs_planned == 0 && dp_checkpoint_info(old_file)->sync_batch_norm == 0 &&
          dp_checkpoint_info(old_file)->label_smoothing == 0.0f && dp_checkpoint_info(old_file)->clip_grad_norm == 0.0f &&
          dp_checkpoint_info(old_file)->schedule.warmup_method == DP_WARMUP_LINEAR &&
          dp_checkpoint_info(old_file)->schedule.warmup_start == 0.0 &&
          dp_checkpoint_info(old_file)->schedule.warmup_sequential == 0,
          "a file without the newer keys: %s", dp_error_message());
    dp_checkpoint_close(old_file);
}

static void test_checkpoint_round_trip(void) {
    dp_model_t *lenet = NULL, *paddle = NULL;
    if (dp_model_builtin("lenet", &lenet) != DP_OK || dp_model_builtin("lenet-paddle", &paddle) != DP_OK) {
        CHECK(0, "builtin models: %s", dp_error_message());
        dp_model_free(lenet);
        return;
    }
    size_t n = dp_model_num_params(lenet);
    float *params = random_params(lenet, 7);
    dp_checkpoint_info_t info = sample_info("lenet", DP_OPTIM_SGD);
    dp_optimizer_t *sgd = NULL;
    CHECK(dp_optimizer_new(&info.optim, n, &sgd) == DP_OK, "sgd: %s", dp_error_message());
    if (!sgd) {
        free(params);
        dp_model_free(lenet);
        dp_model_free(paddle);
        return;
    }
    dp_optimizer_set_steps(sgd, info.optimizer_steps);
    const char *path = testing_tmp_file("lenet.safetensors");
    CHECK(dp_checkpoint_save(path, lenet, params, sgd, &info) == DP_OK, "save: %s", dp_error_message());
    CHECK(testing_count_entries(testing_tmpdir(), ".tmp.") == 0, "temporary file left after a save");
    check_refused_saves(lenet, params, &info, path);

    dp_checkpoint_t *c = NULL;
    CHECK(dp_checkpoint_open(path, &c) == DP_OK, "open: %s", dp_error_message());
    if (c) {
        const dp_checkpoint_info_t *got = dp_checkpoint_info(c);
        CHECK(same_info(got, &info), "metadata not read back exactly");
        const char *schedule = dp_safetensors_meta(dp_checkpoint_tensors(c), "lr_schedule");
        const char *total = dp_safetensors_meta(dp_checkpoint_tensors(c), "lr_schedule.total_steps");
        CHECK(schedule && strcmp(schedule, "cosine") == 0 && total && strcmp(total, "1645") == 0,
              "lr_schedule '%s', total_steps '%s'", schedule ? schedule : "", total ? total : "");
        const char *smoothing = dp_safetensors_meta(dp_checkpoint_tensors(c), "label_smoothing");
        CHECK(smoothing && strcmp(smoothing, "0.033333335") == 0, "label_smoothing '%s' (its shortest decimal)",
              smoothing ? smoothing : "(none)");
        float *loaded = calloc(n, sizeof(float));
        CHECK(dp_checkpoint_load_params(c, lenet, loaded) == DP_OK, "load: %s", dp_error_message());
        CHECK(memcmp(loaded, params, n * sizeof(float)) == 0, "parameters not bit-identical");
        dp_optimizer_t *fresh = NULL;
        if (dp_optimizer_new(&info.optim, n, &fresh) == DP_OK) {
            CHECK(dp_checkpoint_load_optimizer(c, lenet, fresh) == DP_OK, "optimizer: %s", dp_error_message());
            CHECK(dp_optimizer_steps(fresh) == info.optimizer_steps, "optimizer steps %llu",
                  (unsigned long long)dp_optimizer_steps(fresh));
        }
        dp_optimizer_free(fresh);

        /* Another model: the first mismatching tensor is named, nothing is read. */
        float *other = calloc(dp_model_num_params(paddle), sizeof(float));
        CHECK(dp_checkpoint_load_params(c, paddle, other) == DP_ERR_FORMAT, "lenet loaded into lenet-paddle");
        const char *m = dp_error_message();
        CHECK(strstr(m, path) && strstr(m, "tensor 'conv1.weight' has shape [20, 1, 3, 3], model lenet-paddle "
                                           "expects [20, 1, 5, 5]") && strstr(m, "of model lenet"), "message: %s", m);
        free(other);
        free(loaded);
        dp_checkpoint_close(c);
    }

    /* The tensor names PyTorch users expect, in table order. */
    dp_safetensors_t *st;
    if (dp_safetensors_read(path, &st) == DP_OK) {
        CHECK(dp_safetensors_count(st) == dp_model_num_param_tensors(lenet), "tensor count");
        for (int i = 0; i < dp_safetensors_count(st) && i < dp_model_num_param_tensors(lenet); i++)
            CHECK(strcmp(dp_safetensors_entry(st, i)->name, dp_model_param(lenet, i)->name) == 0, "name %d", i);
        dp_safetensors_free(st);
    }

    /* Refusals of a checkpoint that is almost right. */
    const char *edited = testing_tmp_file("edited.safetensors");
    float *loaded = calloc(n, sizeof(float));
    rewrite(path, edited, NULL, NULL, "extra.weight");
    if (dp_checkpoint_open(edited, &c) == DP_OK) {
        CHECK(dp_checkpoint_load_params(c, lenet, loaded) == DP_ERR_FORMAT &&
              strstr(dp_error_message(), "'extra.weight' is not a parameter of model lenet"), "extra tensor: %s",
              dp_error_message());
        dp_checkpoint_close(c);
    }
    rewrite(path, edited, NULL, NULL, "optimizer.conv1.weight.momentum_buffer");
    if (dp_checkpoint_open(edited, &c) == DP_OK) {
        dp_optimizer_t *fresh = NULL;
        if (dp_optimizer_new(&info.optim, n, &fresh) == DP_OK) {
            CHECK(dp_checkpoint_load_optimizer(c, lenet, fresh) == DP_ERR_FORMAT &&
                  strstr(dp_error_message(), "optimizer state tensors"), "extra state: %s", dp_error_message());
            CHECK(dp_optimizer_steps(fresh) == 0, "a refused optimizer load changed the step count");
        }
        dp_optimizer_free(fresh);
        dp_checkpoint_close(c);
    }
    rewrite(path, edited, "model_fingerprint", "0123456789abcdef", NULL);
    if (dp_checkpoint_open(edited, &c) == DP_OK) {
        CHECK(dp_checkpoint_load_params(c, lenet, loaded) == DP_ERR_FORMAT &&
              strstr(dp_error_message(), "model_fingerprint 0123456789abcdef differs"), "fingerprint: %s",
              dp_error_message());
        dp_checkpoint_close(c);
    }
    check_metadata_edits(path, edited);
    free(loaded);
    dp_optimizer_free(sgd);
    free(params);
    dp_model_free(lenet);
    dp_model_free(paddle);
}

/* --- atomic writes ----------------------------------------------------------------------- */
/* A weights-only checkpoint (checkpoint.h): the tensors with format,
 * format_version, weights_only and model load, with or without a
 * fingerprint (a wrong one refused), with data.classes and data.normalize
 * read; the optimizer's state is refused in one line (train --resume), as
 * are weights_only = 2 and a missing tensor. */
static void test_weights_only(void) {
    dp_model_t *lenet = NULL;
    CHECK(dp_model_builtin("lenet", &lenet) == DP_OK, "%s", dp_error_message());
    if (!lenet) return;
    int n = dp_model_num_param_tensors(lenet);
    size_t total = dp_model_num_params(lenet);
    float *params = malloc(sizeof(float) * total), *loaded = malloc(sizeof(float) * total);
    dp_st_tensor_t *tensors = calloc((size_t)n, sizeof *tensors);
    for (size_t i = 0; i < total; i++) params[i] = (float)i * 1e-3f - 7.0f;
    for (int i = 0; i < n; i++) {
        const dp_param_info_t *p = dp_model_param(lenet, i);
        tensors[i] = (dp_st_tensor_t){.name = p->name, .ndim = p->ndim, .data = params + p->offset};
        for (int d = 0; d < p->ndim; d++) tensors[i].shape[d] = p->shape[d];
    }
    char fingerprint[17], wrong[17];
    snprintf(fingerprint, sizeof fingerprint, "%016llx", (unsigned long long)dp_model_fingerprint(lenet));
    snprintf(wrong, sizeof wrong, "%016llx", (unsigned long long)dp_model_fingerprint(lenet) ^ 1);
    const struct {
        const char *file, *weights_only, *fingerprint, *why; /* why NULL: loads */
        int count;                                          /* tensors written */
    } cases[] = {
        {"w_minimal.safetensors", "1", NULL, NULL, n},
        {"w_fingerprint.safetensors", "1", fingerprint, NULL, n},
        {"w_wrong_fingerprint.safetensors", "1", wrong, "model_fingerprint", n},
        {"w_two.safetensors", "2", NULL, "metadata 'weights_only' is '2', expected 1", n},
        {"w_missing.safetensors", "1", NULL, "has no tensor 'fc2.bias'", n - 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        dp_st_meta_t meta[8] = {{"format", "dptrain-checkpoint"}, {"format_version", "2"},
                                {"weights_only", cases[k].weights_only}, {"model", "lenet"},
                                {"data.normalize", "0.5,0.25"}, {"data.classes", "[\"a\",\"b\"]"}};
        int count = 6;
        if (cases[k].fingerprint) meta[count++] = (dp_st_meta_t){"model_fingerprint", cases[k].fingerprint};
        const char *path = testing_tmp_file(cases[k].file);
        CHECK(dp_safetensors_write(path, tensors, cases[k].count, meta, count) == DP_OK, "%s", dp_error_message());
        dp_checkpoint_t *c = NULL;
        dp_status_t status = dp_checkpoint_open(path, &c);
        if (status == DP_OK) status = dp_checkpoint_load_params(c, lenet, loaded);
        if (!cases[k].why) {
            CHECK(status == DP_OK && memcmp(params, loaded, sizeof(float) * total) == 0, "%s: %s", cases[k].file,
                  dp_error_message());
            const dp_checkpoint_info_t *info = c ? dp_checkpoint_info(c) : NULL;
            CHECK(info && info->weights_only && strcmp(info->normalize, "0.5,0.25") == 0 &&
                      info->num_class_names == 2 && info->epochs_completed == 0 && strcmp(info->model, "lenet") == 0,
                  "%s: the metadata read back", cases[k].file);
            dp_optim_config_t config = {.kind = DP_OPTIM_SGD, .lr = 0.1f};
            dp_optimizer_t *opt = NULL;
            CHECK(dp_optimizer_new(&config, dp_model_num_trainable(lenet), &opt) == DP_OK, "%s", dp_error_message());
            if (c && opt) {
                status = dp_checkpoint_load_optimizer(c, lenet, opt);
                CHECK(status == DP_ERR_ARG && strstr(dp_error_message(), "weights-only checkpoint") &&
                          strstr(dp_error_message(), path) && !strchr(dp_error_message(), '\n'),
                      "%s: the optimizer's state was not refused: %s", cases[k].file, dp_error_message());
            }
            dp_optimizer_free(opt);
        } else {
            CHECK(status == DP_ERR_FORMAT && strstr(dp_error_message(), cases[k].why) &&
                      !strchr(dp_error_message(), '\n'),
                  "%s: status %d, '%s' (expected '%s')", cases[k].file, (int)status, dp_error_message(), cases[k].why);
        }
        dp_checkpoint_close(c);
    }
    free(tensors);
    free(loaded);
    free(params);
    dp_model_free(lenet);
}

static void test_atomic_writes(void) {
    dp_model_t *lenet;
    if (dp_model_builtin("lenet", &lenet) != DP_OK) return;
    float *old_params = random_params(lenet, 1), *new_params = random_params(lenet, 2);
    dp_checkpoint_info_t info = sample_info("lenet", DP_OPTIM_SGD);
    const char *path = testing_tmp_file("atomic.safetensors");
    CHECK(dp_checkpoint_save(path, lenet, old_params, NULL, &info) == DP_OK, "save: %s", dp_error_message());
    size_t old_size;
    unsigned char *old_bytes = testing_read_file(path, &old_size);

    /* The file size limit makes the write fail half way (EFBIG). */
    struct rlimit saved;
    getrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = {(rlim_t)old_size / 2, saved.rlim_max};
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit");
    dp_status_t status = dp_checkpoint_save(path, lenet, new_params, NULL, &info);
    setrlimit(RLIMIT_FSIZE, &saved);
    const char *m = dp_error_message();
    CHECK(status == DP_ERR_IO && strstr(m, path) && !strchr(m, '\n'), "failed write: status %d, '%s'",
          (int)status, m);
    size_t size;
    unsigned char *bytes = testing_read_file(path, &size);
    CHECK(bytes && old_bytes && size == old_size && memcmp(bytes, old_bytes, size) == 0,
          "a failed write changed the old checkpoint");
    CHECK(testing_count_entries(testing_tmpdir(), ".tmp.") == 0, "a failed write left a temporary file");
    free(bytes);

    /* A directory that does not exist. */
    char missing_dir[600];
    snprintf(missing_dir, sizeof missing_dir, "%s/no/such/dir/x.safetensors", testing_tmpdir());
    CHECK(dp_checkpoint_save(missing_dir, lenet, new_params, NULL, &info) == DP_ERR_IO &&
          strstr(dp_error_message(), missing_dir), "missing directory: %s", dp_error_message());

    /* And a good write replaces it. */
    CHECK(dp_checkpoint_save(path, lenet, new_params, NULL, &info) == DP_OK, "save: %s", dp_error_message());
    bytes = testing_read_file(path, &size);
    CHECK(bytes && size == old_size && memcmp(bytes, old_bytes, size) != 0, "the good write did not replace");
    free(bytes);
    free(old_bytes);
    free(old_params);
    free(new_params);
    dp_model_free(lenet);
}

/* The model's moving average: saved beside the parameters (ema.NAME, model_ema.*), read back by
 * dp_checkpoint_load_ema alone; its metadata checked; a file without one refused by load_ema. */
static void test_model_ema(void) {
    dp_model_t *lenet;
    DP_ASSERT(dp_model_builtin("lenet", &lenet) == DP_OK);
    const size_t n = dp_model_num_params(lenet);
    float *params = malloc(n * sizeof(float)), *ema = malloc(n * sizeof(float)), *loaded = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) params[i] = (float)i * 0.001f, ema[i] = -(float)i * 0.25f;
    dp_checkpoint_info_t info = sample_info("lenet", DP_OPTIM_SGD);
    info.model_ema_steps = 32, info.model_ema_decay = 0.99890773333333227, info.model_ema_updates = 123;
    info.model_ema = ema;
    const char *path = testing_tmp_file("ema.st"), *edited = testing_tmp_file("ema_edited.st");
    CHECK(dp_checkpoint_save(path, lenet, params, NULL, &info) == DP_OK, "save: %s", dp_error_message());
    dp_checkpoint_t *c = NULL;
    if (dp_checkpoint_open(path, &c) == DP_OK) {
        const dp_checkpoint_info_t *r = dp_checkpoint_info(c);
        CHECK(r->model_ema_steps == 32 && r->model_ema_decay == 0.99890773333333227 && r->model_ema_updates == 123 &&
                  !r->model_ema,
              "read back: %d steps, decay %.17g, %llu updates", r->model_ema_steps, r->model_ema_decay,
              (unsigned long long)r->model_ema_updates);
        CHECK(dp_checkpoint_load_params(c, lenet, loaded) == DP_OK && memcmp(loaded, params, n * sizeof(float)) == 0,
              "the parameters beside an average: %s", dp_error_message());
        CHECK(dp_checkpoint_load_ema(c, lenet, loaded) == DP_OK && memcmp(loaded, ema, n * sizeof(float)) == 0,
              "the average: %s", dp_error_message());
        dp_checkpoint_close(c);
    }
    /* what the writer refuses: steps without floats */
    dp_checkpoint_info_t bad = info;
    bad.model_ema = NULL;
    CHECK(dp_checkpoint_save(edited, lenet, params, NULL, &bad) == DP_ERR_ARG &&
              strstr(dp_error_message(), "a moving average of 32 steps"), "steps without floats: %s", dp_error_message());
    struct { const char *key, *value, *part; } bad_meta[] = {
        {"model_ema.steps", "0", "'model_ema.steps' is '0', expected a positive decimal integer"},
        {"model_ema.decay", "1.5", "'model_ema.decay' is '1.5', expected a number in [0, 1]"},
        {"model_ema.decay", "nan", "'model_ema.decay' is 'nan', expected a number in [0, 1]"},
        {"model_ema.updates", "-1", "'model_ema.updates' is '-1', expected a decimal integer"},
        {"model_ema.updates", NULL, "metadata 'model_ema.updates' is missing (the file has 'model_ema.steps')"},
    };
    for (size_t i = 0; i < sizeof bad_meta / sizeof bad_meta[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "metadata %s = %s", bad_meta[i].key, bad_meta[i].value ? bad_meta[i].value : "(none)");
        rewrite(path, edited, bad_meta[i].key, bad_meta[i].value, NULL);
        check_open_fails(edited, bad_meta[i].part, label);
    }
    /* a file without an average: load_ema says so, and nothing changes */
    info.model_ema_steps = 0, info.model_ema = NULL;
    CHECK(dp_checkpoint_save(edited, lenet, params, NULL, &info) == DP_OK, "save: %s", dp_error_message());
    if (dp_checkpoint_open(edited, &c) == DP_OK) {
        memcpy(loaded, ema, n * sizeof(float));
        CHECK(dp_checkpoint_load_ema(c, lenet, loaded) == DP_ERR_ARG &&
                  strstr(dp_error_message(), "no moving average of the model in this checkpoint") &&
                  memcmp(loaded, ema, n * sizeof(float)) == 0,
              "no average: %s", dp_error_message());
        dp_checkpoint_close(c);
    }
    free(params);
    free(ema);
    free(loaded);
    dp_model_free(lenet);
}

int main(void) {
    test_json();
    test_model_ema();
    test_safetensors_round_trip();
    test_corrupt_files();
    test_checkpoint_round_trip();
    test_class_names();
    test_control_characters();
    test_conv_algorithms();
    test_optimizer_round_trips();
    test_atomic_writes();
    test_weights_only();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", testing_tmpdir());
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", testing_tmpdir());
    return testing_finish("test_checkpoint");
}
