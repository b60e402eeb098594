/* folder_source.c - an image folder as a batch source (image_folder.h):
 * each sample read from its file and decoded and transformed when a batch
 * is filled (dp_image_sample), optionally cached.
 *
 * A training fill's generator for sample s of epoch e is seeded with
 * dp_seed_mix(dp_seed_mix(seed, e + 1), s + 1): the crop box, the flip and
 * the auto-augmentation's ops depend on nothing else; with repeated
 * augmentation, copy k > 0 of s (at a position p with p % R = k) mixes in
 * k once more: dp_seed_mix(that, k).
 *
 * DESIGN. Fills run on the loader's threads at once, each on its own
 * samples: the file bytes and the decoder's scratch are each call's own.
 * The cache is an array of slots, one per sample, written once: a thread
 * that has made a sample's entry claims its slot with a compare-and-swap
 * from "empty", within a budget counted by an atomic (an entry that does
 * not fit is not kept); readers see a slot's pointer only once it holds
 * the whole entry (the release/acquire pair of the swap and the load). The
 * bad-file count is an atomic too.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dptrain/image.h"
#include "dptrain/image_folder.h"
#include "dptrain/rng.h"

/* One cached sample: the transform's output (a mode that draws nothing) or
 * the decoded image (training: transformed anew each time). */
typedef struct {
    int decoded;         /* 1: image holds the decoded image; 0: bytes are the output */
    dp_image_t image;
    unsigned char bytes[]; /* (C, H, W) output */
} cache_entry_t;

typedef struct {
    dp_image_index_t index;
    dp_folder_options_t options;
    dp_augment_t augment; /* after the training transform (dp_augment_pixels) */
    size_t sample_bytes;
    _Atomic(cache_entry_t *) *cache; /* (index.count) NULL: not cached; NULL array: no cache */
    atomic_size_t cache_used;
    atomic_long cached, bad;
} folder_t;

static const dp_batch_source_ops_t folder_ops;

/* Sample s's file as the output of options (train or eval), from its bytes. */
static dp_status_t sample_from_file(const folder_t *f, int s, const dp_sample_options_t *o, dp_rng_t *rng,
                                    unsigned char *out) {
    unsigned char *data = NULL;
    size_t size = 0;
    DP_TRY(dp_image_file_bytes(f->index.paths[s], &data, &size));
    dp_status_t status = dp_image_sample(data, size, f->index.paths[s], o, rng, out, NULL);
    free(data);
    return status;
}

/* Keeps `entry` as sample s's when the budget allows; frees it otherwise. */
static void cache_keep(folder_t *f, int s, cache_entry_t *entry, size_t bytes) {
    size_t used = atomic_fetch_add(&f->cache_used, bytes);
    cache_entry_t *empty = NULL;
    if (used + bytes <= f->options.cache_bytes &&
        atomic_compare_exchange_strong_explicit(&f->cache[s], &empty, entry, memory_order_release,
                                                memory_order_relaxed)) {
        atomic_fetch_add(&f->cached, 1);
        return;
    }
    atomic_fetch_sub(&f->cache_used, bytes);
    dp_image_free(&entry->image);
    free(entry);
}

/* Sample s with options o, through the cache when there is one. */
static dp_status_t sample_cached(folder_t *f, int s, const dp_sample_options_t *o, dp_rng_t *rng,
                                 unsigned char *out) {
    const int draws = o->mode == DP_SAMPLE_TRAIN;
    cache_entry_t *hit = atomic_load_explicit(&f->cache[s], memory_order_acquire);
    if (hit && hit->decoded == draws) {
        if (!draws) {
            memcpy(out, hit->bytes, f->sample_bytes);
            return DP_OK;
        }
        dp_sample_options_t whole = *o;
        whole.dct_scale = 0; /* the cached image is the whole decode */
        return dp_image_sample_decoded(&hit->image, &whole, rng, out, NULL);
    }
    if (!draws) {
        DP_TRY(sample_from_file(f, s, o, rng, out));
        cache_entry_t *entry = malloc(sizeof *entry + f->sample_bytes);
        if (entry) {
            memset(entry, 0, sizeof *entry);
            memcpy(entry->bytes, out, f->sample_bytes);
            cache_keep(f, s, entry, sizeof *entry + f->sample_bytes);
        }
        return DP_OK;
    }
    /* training: keep the decoded image, transform it as a cached one is */
    cache_entry_t *entry = dp_alloc_zeroed(1, sizeof *entry, "a cached image");
    if (!entry) return DP_ERR_NOMEM;
    unsigned char *data = NULL;
    size_t size = 0;
    dp_image_options_t decode = {.channels = o->channels, .ignore_exif = o->ignore_exif};
    dp_status_t status = dp_image_file_bytes(f->index.paths[s], &data, &size);
    if (status == DP_OK) status = dp_image_decode_with(data, size, f->index.paths[s], &decode, &entry->image);
    free(data);
    dp_sample_options_t whole = *o;
    whole.dct_scale = 0;
    if (status == DP_OK) status = dp_image_sample_decoded(&entry->image, &whole, rng, out, NULL);
    if (status != DP_OK) {
        dp_image_free(&entry->image);
        free(entry);
        return status;
    }
    entry->decoded = 1;
    cache_keep(f, s, entry, sizeof *entry + (size_t)entry->image.width * entry->image.height * entry->image.channels);
    return DP_OK;
}

/* Sample s at `position` of the epoch's order: copy k = position % repeats of s (repeated augmentation) draws
 * from its own generator, copy 0 from s's. */
static dp_status_t fill_one(folder_t *f, int s, const dp_fill_keys_t *keys, int64_t position, unsigned char *out) {
    const dp_sample_options_t *o = keys->training ? &f->options.train : &f->options.eval;
    const uint64_t copy = keys->repeats > 1 ? (uint64_t)(position % keys->repeats) : 0;
    uint64_t key = dp_seed_mix(dp_seed_mix(keys->seed, (uint64_t)keys->epoch + 1), (uint64_t)s + 1);
    if (copy) key = dp_seed_mix(key, copy);
    dp_rng_t rng;
    dp_rng_seed(&rng, key);
    return f->cache ? sample_cached(f, s, o, &rng, out) : sample_from_file(f, s, o, &rng, out);
}

static dp_status_t folder_fill(void *self, const int *samples, int n, const dp_fill_keys_t *keys, uint8_t *pixels,
                               int32_t *labels) {
    folder_t *f = self;
    const int augment = keys->training && (f->augment.crop_padding || f->augment.flip);
    uint8_t *copy = augment ? dp_alloc(f->sample_bytes, "a sample to augment") : NULL;
    if (augment && !copy) return DP_ERR_NOMEM;
    dp_status_t status = DP_OK;
    for (int i = 0; i < n && status == DP_OK; i++) {
        uint8_t *out = pixels + (size_t)i * f->sample_bytes;
        int s = samples[i];
        status = fill_one(f, s, keys, keys->first_position + i, out);
        /* skip_bad: the next sample of the index that decodes takes its place */
        for (int tries = 1; status != DP_OK && f->options.skip_bad && tries < f->index.count; tries++) {
            atomic_fetch_add(&f->bad, 1);
            fprintf(stderr, "dptrain: %s (replaced by the next file that decodes)\n", dp_error_message());
            s = (s + 1) % f->index.count;
            status = fill_one(f, s, keys, keys->first_position + i, out);
        }
        if (status != DP_OK) break;
        if (augment) { /* --augment on top */
            memcpy(copy, out, f->sample_bytes);
            dp_augment_pixels(&f->augment, keys->seed, keys->epoch, keys->first_position + i, copy,
                              f->options.train.channels, f->options.train.height, f->options.train.width, out);
        }
        labels[i] = f->index.labels[s];
    }
    free(copy);
    return status;
}

static void folder_free(void *self) {
    folder_t *f = self;
    if (!f) return;
    for (int s = 0; f->cache && s < f->index.count; s++) {
        cache_entry_t *e = atomic_load(&f->cache[s]);
        if (e) dp_image_free(&e->image);
        free(e);
    }
    free((void *)f->cache);
    dp_image_index_free(&f->index);
    free(f);
}

/* The index's unreadable files left out, and the files replaced since. */
static long folder_skipped(const void *self) {
    const folder_t *f = self;
    return f->index.skipped + atomic_load(&((folder_t *)f)->bad);
}

static const dp_batch_source_ops_t folder_ops = {.kind = "image folder", .fill = folder_fill, .free = folder_free,
                                                 .skipped = folder_skipped};

static dp_status_t check_options(const dp_folder_options_t *o) {
    const dp_sample_options_t *t = &o->train, *e = &o->eval;
    if (t->channels != e->channels || t->height != e->height || t->width != e->width)
        return dp_fail(DP_ERR_ARG, "image folder: training samples of %dx%dx%d, evaluation samples of %dx%dx%d: they "
                       "must agree", t->channels, t->height, t->width, e->channels, e->height, e->width);
    if ((t->channels != 1 && t->channels != 3) || t->height < 1 || t->width < 1)
        return dp_fail(DP_ERR_ARG, "image folder: samples of %dx%dx%d (1 or 3 channels, sizes >= 1)", t->channels,
                       t->height, t->width);
    return DP_OK;
}

dp_status_t dp_folder_source_new(dp_image_index_t *index, const dp_folder_options_t *options,
                                 dp_batch_source_t **out) {
    *out = NULL;
    dp_status_t status = check_options(options);
    folder_t *f = status == DP_OK ? dp_alloc_zeroed(1, sizeof *f, "image folder source") : NULL;
    if (!f) {
        dp_image_index_free(index);
        return status != DP_OK ? status : DP_ERR_NOMEM;
    }
    f->index = *index;
    memset(index, 0, sizeof *index);
    f->options = *options;
    f->sample_bytes = (size_t)options->train.channels * options->train.height * options->train.width;
    if (options->cache_bytes > 0 &&
        !(f->cache = dp_alloc_zeroed((size_t)f->index.count, sizeof *f->cache, "the image cache's slots"))) {
        folder_free(f);
        return DP_ERR_NOMEM;
    }
    dp_source_info_t info = {.count = f->index.count, .channels = options->train.channels,
                             .height = options->train.height, .width = options->train.width,
                             .num_classes = f->index.num_classes,
                             .class_names = (const char *const *)f->index.class_names};
    return dp_batch_source_new(&folder_ops, f, &info, out);
}

dp_status_t dp_folder_source_set_augment(dp_batch_source_t *src, const dp_augment_t *augment) {
    folder_t *f = dp_batch_source_impl(src, &folder_ops);
    if (!f) return dp_fail(DP_ERR_ARG, "set_augment: not an image folder source");
    if (augment->crop_padding < 0 || augment->crop_padding > 64)
        return dp_fail(DP_ERR_ARG, "augment: crop padding must be from 0 to 64, found %d", augment->crop_padding);
    f->augment = *augment;
    return DP_OK;
}

long dp_folder_source_cached(const dp_batch_source_t *src) {
    const folder_t *f = dp_batch_source_impl(src, &folder_ops);
    return f ? atomic_load(&((folder_t *)f)->cached) : 0;
}
void dp_eval_transform_text(const dp_sample_options_t *eval, char *text, size_t size) {
    const char *exif = eval->ignore_exif ? ", exif ignore" : "";
    const char *bicubic = eval->interpolation == DP_INTERP_BICUBIC ? ", bicubic" : ""; /* bilinear: older text */
    if (eval->mode == DP_SAMPLE_SQUASH) {
        snprintf(text, size, "squash%s%s", exif, bicubic);
        return;
    }
    int resize = eval->resize_size ? eval->resize_size : dp_eval_resize_default(eval->height, eval->width);
    snprintf(text, size, "resize %d%s%s", resize, exif, bicubic);
}

/* Skips `suffix` at *text when it is there: 1, else 0. */
static int skip_suffix(const char **text, const char *suffix) {
    size_t n = strlen(suffix);
    if (strncmp(*text, suffix, n) != 0 || ((*text)[n] != '\0' && (*text)[n] != ',')) return 0;
    *text += n;
    return 1;
}

dp_status_t dp_eval_transform_parse(const char *text, int channels, int height, int width, dp_sample_options_t *out) {
    /* fixed: as the run's evaluation took its images (cli/data_options.c), one of the output's size as it is */
    *out = dp_sample_options_default(DP_SAMPLE_FIXED, channels, height, width);
    int resize = 0, used = 0;
    if (strncmp(text, "squash", 6) == 0) {
        out->mode = DP_SAMPLE_SQUASH;
        used = 6;
    } else if (sscanf(text, "resize %d%n", &resize, &used) != 1 || resize < 1 || resize > 65535) {
        return dp_fail(DP_ERR_FORMAT, "the data's transform '%s' is not 'resize S' (S from 1 to 65535) or 'squash'",
                       text);
    }
    const char *rest = text + used;
    out->ignore_exif = skip_suffix(&rest, ", exif ignore");
    if (skip_suffix(&rest, ", bicubic")) out->interpolation = DP_INTERP_BICUBIC;
    if (*rest != '\0')
        return dp_fail(DP_ERR_FORMAT, "the data's transform '%s': unknown '%s' after the %s", text, text + used,
                       out->mode == DP_SAMPLE_SQUASH ? "squash" : "resize");
    out->resize_size = resize;
    return DP_OK;
}
