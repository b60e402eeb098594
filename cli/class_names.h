/* class_names.h - the name the CLI shows for a class: the checkpoint's or
 * the data's names where there are some, else Fashion-MNIST's ten (the
 * default data's), else "class N" (predict.c, eval_report.c). */
#ifndef DPTRAIN_CLI_CLASS_NAMES_H
#define DPTRAIN_CLI_CLASS_NAMES_H

/* names[cls] when cls < count (names may be NULL, count 0), else
 * Fashion-MNIST's name of cls when cls < 10, else "class N" in buf. */
const char *cli_class_name(const char *const *names, int count, int cls, char *buf, unsigned long size);

#endif
