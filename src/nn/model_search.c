/* model_search.c - dp_model_load (model_file.h): what `--model NAME|FILE`
 * names, looked for in this order:
 * 1. a file at that path (relative to the working directory);
 * 2. a built-in network's name (dp_builtin_models);
 * 3. the installed model files: NAME.cfg (NAME itself when it ends in
 *    .cfg) in share/dptrain/models of the prefix this libdptrain is
 *    installed in (found from the folder of libdptrain.so or of the program
 *    that linked libdptrain.a: its bin/ or lib/ folder, self_path.h; the
 *    relative paths are CMake's, DPTRAIN_MODELS_FROM_BINDIR and
 *    DPTRAIN_MODELS_FROM_LIBDIR), so an installed dptrain finds them
 *    wherever the prefix was moved;
 * 4. the source tree's models/ (DPTRAIN_SOURCE_MODELS_DIR), only when this
 *    libdptrain is the build tree's (a build not installed).
 * A name with a '/' is a path only. The first file found is the model; if
 * it does not parse, that is the error.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/self_path.h"
#include "dptrain/model_file.h"

#ifndef DPTRAIN_MODELS_FROM_BINDIR /* all four set by CMakeLists.txt */
#define DPTRAIN_MODELS_FROM_BINDIR "../share/dptrain/models"
#endif
#ifndef DPTRAIN_MODELS_FROM_LIBDIR
#define DPTRAIN_MODELS_FROM_LIBDIR "../share/dptrain/models"
#endif
#ifndef DPTRAIN_BUILD_DIR
#define DPTRAIN_BUILD_DIR ""
#endif
#ifndef DPTRAIN_SOURCE_MODELS_DIR
#define DPTRAIN_SOURCE_MODELS_DIR ""
#endif

#define MAX_DIRS 3

/* The folders of steps 3 and 4 that exist, in order (no duplicates); their count. */
static int model_dirs(char (*dirs)[PATH_MAX]) {
    char self[PATH_MAX], build[PATH_MAX], candidate[PATH_MAX];
    const char *tries[MAX_DIRS] = {DPTRAIN_MODELS_FROM_BINDIR, DPTRAIN_MODELS_FROM_LIBDIR, NULL};
    int n = 0;
    dp_self_dir(self, sizeof self);
    for (int t = 0; self[0] && t < 2; t++) {
        if (snprintf(candidate, sizeof candidate, "%s/%s", self, tries[t]) >= (int)sizeof candidate) continue;
        if (!realpath(candidate, dirs[n])) continue;
        int seen = 0;
        for (int i = 0; i < n; i++) seen |= strcmp(dirs[i], dirs[n]) == 0;
        n += !seen;
    }
    size_t len = strlen(DPTRAIN_BUILD_DIR);
    if (self[0] && len && realpath(DPTRAIN_BUILD_DIR, build) && (len = strlen(build)) &&
        strncmp(self, build, len) == 0 && (self[len] == '\0' || self[len] == '/') &&
        realpath(DPTRAIN_SOURCE_MODELS_DIR, dirs[n]))
        n++;
    return n;
}

dp_status_t dp_model_load(const char *name_or_path, dp_model_t **out) {
    *out = NULL;
    if (!name_or_path) return dp_fail(DP_ERR_ARG, "model: no name or path given (NULL)");
    if (access(name_or_path, F_OK) == 0) return dp_model_load_file(name_or_path, out);
    for (int i = 0; dp_builtin_models[i]; i++)
        if (strcmp(dp_builtin_models[i], name_or_path) == 0) return dp_model_builtin(name_or_path, out);
    size_t n = strlen(name_or_path);
    int has_cfg = n > 4 && strcmp(name_or_path + n - 4, ".cfg") == 0;
    char dirs[MAX_DIRS][PATH_MAX], path[PATH_MAX + 300];
    int num_dirs = strchr(name_or_path, '/') || n > 255 ? 0 : model_dirs(dirs);
    for (int d = 0; d < num_dirs; d++) {
        int len = snprintf(path, sizeof path, "%s/%s%s", dirs[d], name_or_path, has_cfg ? "" : ".cfg");
        if (len > 0 && len < (int)sizeof path && access(path, F_OK) == 0) return dp_model_load_file(path, out);
    }
    if (strchr(name_or_path, '/') || has_cfg) /* a path that is not there */
        return dp_model_load_file(name_or_path, out);
    char names[256] = "", where[2 * PATH_MAX + 64] = "";
    for (int i = 0; dp_builtin_models[i]; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", dp_builtin_models[i]);
    if (num_dirs > 0)
        snprintf(where, sizeof where, " (looked for %s.cfg in %s%s%s)", name_or_path, dirs[0],
                 num_dirs > 1 ? " and " : "", num_dirs > 1 ? dirs[1] : "");
    return dp_fail(DP_ERR_ARG, "unknown model '%s': not a built-in model (%s) nor a model file%s", name_or_path,
                   names, where);
}
