/* text_width.c - the terminal columns of UTF-8 text (text_width.h): a
 * small wcwidth of its own, as the CLI sets no locale. */
#include "text_width.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The character at s: its code point in *cp and its length in bytes; a
 * byte that starts no well-formed sequence is one character of itself. */
static int next_char(const unsigned char *s, uint32_t *cp) {
    int len = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    uint32_t v = len == 1 ? s[0] : len == 2 ? s[0] & 0x1Fu : len == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) len = 0; /* a cut sequence (the NUL ends it too) */
        else v = v << 6 | (s[i] & 0x3Fu);
    }
    if (len == 0) v = s[0], len = 1;
    *cp = v;
    return len;
}

static int char_width(uint32_t cp) {
    static const uint32_t wide[][2] = {{0x1100, 0x115F},   {0x2E80, 0x303E},   {0x3041, 0x33FF}, {0x3400, 0x4DBF},
                                       {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},   {0xAC00, 0xD7A3}, {0xF900, 0xFAFF},
                                       {0xFE30, 0xFE4F},   {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6}, {0x1F300, 0x1F64F},
                                       {0x1F900, 0x1F9FF}, {0x20000, 0x3FFFD}};
    if ((cp >= 0x0300 && cp <= 0x036F) || (cp >= 0x1AB0 && cp <= 0x1AFF) || (cp >= 0x1DC0 && cp <= 0x1DFF) ||
        (cp >= 0x20D0 && cp <= 0x20FF) || (cp >= 0xFE20 && cp <= 0xFE2F) || cp == 0x200D || cp == 0xFE0F)
        return 0; /* combining marks, the zero-width joiner, the emoji selector */
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
        if (cp >= wide[i][0] && cp <= wide[i][1]) return 2;
    return 1;
}

int cli_text_width(const char *s) {
    int width = 0;
    uint32_t cp;
    for (const unsigned char *p = (const unsigned char *)s; *p; p += next_char(p, &cp)) {
        next_char(p, &cp);
        width += char_width(cp);
    }
    return width;
}

void cli_text_fit(const char *s, int columns, char *out, size_t size) {
    const int fits = cli_text_width(s) <= columns, room = fits ? columns : columns - 3;
    size_t at = 0;
    int width = 0;
    uint32_t cp;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        const int len = next_char(p, &cp), w = char_width(cp);
        if (width + w > room || at + (size_t)len + 4 > size) break;
        for (int i = 0; i < len; i++) out[at++] = cp < 0x20 || cp == 0x7F ? '?' : (char)p[i];
        width += w;
        p += len;
    }
    if (!fits && at + 4 <= size) memcpy(out + at, "...", 3), at += 3;
    out[at] = '\0';
}
