/* text_width.h - how many terminal columns a UTF-8 string takes, and a
 * string fitted to a column (eval_report.c's table of class names: a
 * name in Chinese, an emoji or a macOS folder's decomposed accents keeps
 * the columns after it aligned). */
#ifndef DPTRAIN_CLI_TEXT_WIDTH_H
#define DPTRAIN_CLI_TEXT_WIDTH_H

#include <stddef.h>

/* The columns s takes: 2 for an East Asian wide or full-width character or
 * an emoji, 0 for a combining mark, else 1 (a byte that is not well-formed
 * UTF-8 too). */
int cli_text_width(const char *s);
/* s in out (size bytes) taking at most `columns` columns (>= 4): whole if it
 * fits, else cut at a character's boundary and ended with "..."; control
 * characters (a folder name's line break) shown as '?'. */
void cli_text_fit(const char *s, int columns, char *out, size_t size);

#endif
