/* class_names.c - the names of classes on the command line (class_names.h). */
#include "class_names.h"

#include <stdio.h>

static const char *const fashion_mnist_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

const char *cli_class_name(const char *const *names, int count, int cls, char *buf, unsigned long size) {
    if (names && cls >= 0 && cls < count) return names[cls];
    if (cls >= 0 && cls < 10) return fashion_mnist_names[cls];
    snprintf(buf, size, "class %d", cls);
    return buf;
}
