/* self_path.c - dp_self_dir (self_path.h): the folder of the file holding
 * this code, from the dynamic linker's map of loaded objects: a shared
 * libdptrain's own path, or "" for the main program (libdptrain.a linked
 * into it), which is then /proc/self/exe. */
#define _GNU_SOURCE /* dladdr1, RTLD_DL_LINKMAP */
#include "self_path.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dp_self_dir(char *dir, size_t size) {
    Dl_info info;
    struct link_map *map = NULL;
    char path[PATH_MAX] = "";
    if (size) dir[0] = '\0';
    if (dladdr1((void *)dp_self_dir, &info, (void **)&map, RTLD_DL_LINKMAP) && map && map->l_name[0] != '\0') {
        if (!realpath(map->l_name, path)) return;
    } else if (!realpath("/proc/self/exe", path)) {
        return;
    }
    char *slash = strrchr(path, '/');
    if (!slash) return;
    *slash = '\0';
    snprintf(dir, size, "%s", path[0] ? path : "/");
}
