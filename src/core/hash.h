/* hash.h - FNV-1a, 64 bits: the one hash of dptrain's fingerprints (a
 * model's parameter table, the ranks' file lists and options, an image
 * folder's hold-out order, a checkpoint's class names). Not for security:
 * to tell things apart that should be the same. Fed in pieces, it gives the
 * hash of their concatenation: h = dp_fnv1a(DP_FNV1A_SEED, a, n), then
 * h = dp_fnv1a(h, b, m). Header only (the CLI uses it too). */
#ifndef DP_CORE_HASH_H
#define DP_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define DP_FNV1A_SEED 0xcbf29ce484222325ull /* the offset basis */

static inline uint64_t dp_fnv1a(uint64_t h, const void *bytes, size_t n) {
    const unsigned char *b = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#endif
