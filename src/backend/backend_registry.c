/* backend_registry.c - backends by name ("cpu", "staged", "split", "cuda"), and the one place
 * that knows about CUDA. In a build with CUDA (DPTRAIN_HAVE_CUDA, defined
 * for this file only by CMakeLists.txt's CUDA section) the CUDA backend is
 * a module of its own, libdptrain_cuda.so, the only file that links cudart,
 * cuBLAS and cuDNN: it is dlopen'd on first need (a cuda:N device asked for,
 * or the default-devices decision on a machine that seems to have an NVIDIA
 * GPU) and reached through the table of src/backend/cuda/cuda_module.h. A
 * run on CPU devices never loads it, so it starts as fast and as small as a
 * build without CUDA (loading the CUDA libraries costs about 0.2 s and 210 MB).
 *
 * Where the module is looked for, in order: $DPTRAIN_CUDA_MODULE (a path;
 * then nothing else), the folder of the file this code is in (libdptrain.so,
 * or the program that linked libdptrain.a), its lib/ (the build tree:
 * build/dptrain, build/lib/), its ../LIBDIR (an installed bin/dptrain), and
 * the libdir it was configured to install to. The first file that exists
 * is the one loaded; if it fails to load, that failure is the error.
 *
 * DESIGN. The module is loaded at most once per process, under a
 * pthread_once; its outcome (the table, or the one-line reason it failed)
 * is then read-only, so any thread may open backends or count GPUs.
 */
#define _GNU_SOURCE
#include "dptrain/backend.h"

#include <string.h>

#ifdef DPTRAIN_HAVE_CUDA
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../core/self_path.h"
#include "cuda/cuda_module.h"

#ifndef DPTRAIN_INSTALL_LIBDIR /* both set by CMakeLists.txt */
#define DPTRAIN_INSTALL_LIBDIR "/usr/local/lib"
#endif
#ifndef DPTRAIN_RELATIVE_LIBDIR
#define DPTRAIN_RELATIVE_LIBDIR "lib"
#endif

static pthread_once_t module_once = PTHREAD_ONCE_INIT;
static const dp_cuda_module_t *module;
static char module_error[768];  /* why it did not load (one line), when module is NULL */
static char count_why[832];     /* the same, as dp_backend_cuda_count's *why */

/* candidates[n] = the path (unless too long, or already there); the new n. */
static int add_candidate(char (*candidates)[PATH_MAX], int n, const char *fmt, const char *a, const char *b) {
    int len = snprintf(candidates[n], PATH_MAX, fmt, a, b);
    if (len < 0 || len >= PATH_MAX) return n;
    for (int i = 0; i < n; i++)
        if (strcmp(candidates[i], candidates[n]) == 0) return n;
    return n + 1;
}

static void try_load(void) {
    static const dp_cuda_host_t host = {
        .abi = DP_CUDA_MODULE_ABI,
        .size = sizeof(dp_cuda_host_t),
        .layout = DP_CUDA_MODULE_LAYOUT,
        .fail = dp_fail,
        .assert_failed = dp_assert_failed,
        .alloc_zeroed = dp_alloc_zeroed,
        .arena_alloc = dp_arena_alloc,
        .arena_floats = dp_arena_floats,
        .arena_host_alloc = dp_arena_host_alloc,
        .conv_out_size = dp_conv_out_size,
        .conv_shape = dp_conv_shape,
        .conv_transpose_shape = dp_conv_transpose_shape,
        .norm_check = dp_norm_check,
        .batch_norm_check = dp_batch_norm_check,
        .masked_check = dp_masked_check,
        .xent_check = dp_xent_check,
        .mse_check = dp_mse_check,
        .float_decimal = dp_float_decimal,
        .grad_alloc = dp_grad_alloc,
        .grad_claim = dp_grad_claim,
        .optimizer_config = dp_optimizer_config,
        .optimizer_kind = dp_optimizer_kind,
        .optimizer_num_params = dp_optimizer_num_params,
        .optimizer_num_states = dp_optimizer_num_states,
        .optimizer_state = dp_optimizer_state,
        .optimizer_steps = dp_optimizer_steps,
        .optimizer_decay_run = dp_optimizer_decay_run,
        .optim_group_weight_decay = dp_optim_group_weight_decay,
        .tensor_numel = dp_tensor_numel,
        .tensor_set_shape = dp_tensor_set_shape,
        .tensor_shape_str = dp_tensor_shape_str,
    };
    static dp_cuda_host_t lent;
    lent = host;
    /* the CPU's flatten (a view, no arithmetic), as the CPU table has it */
    lent.flatten_forward = dp_backend_cpu()->ops[DP_OP_FLATTEN].forward;
    lent.flatten_backward = dp_backend_cpu()->ops[DP_OP_FLATTEN].backward;

    char candidates[4][PATH_MAX];
    int n = 0;
    const char *env = getenv("DPTRAIN_CUDA_MODULE");
    if (env && env[0]) {
        n = add_candidate(candidates, n, "%s", env, "");
    } else {
        char dir[PATH_MAX], parent[PATH_MAX];
        dp_self_dir(dir, sizeof dir);
        if (dir[0]) {
            snprintf(parent, sizeof parent, "%s", dir);
            char *slash = strrchr(parent, '/');
            if (slash) slash[slash == parent] = '\0'; /* "/usr/bin" -> "/usr", "/bin" -> "/" */
            n = add_candidate(candidates, n, "%s/%s", dir, DP_CUDA_MODULE_FILE);
            n = add_candidate(candidates, n, "%s/lib/%s", dir, DP_CUDA_MODULE_FILE);
            n = add_candidate(candidates, n, "%s/" DPTRAIN_RELATIVE_LIBDIR "/%s", strcmp(parent, "/") ? parent : "",
                              DP_CUDA_MODULE_FILE);
        }
        n = add_candidate(candidates, n, "%s/%s", DPTRAIN_INSTALL_LIBDIR, DP_CUDA_MODULE_FILE);
    }
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        const char *path = candidates[i];
        if (access(path, F_OK) != 0) { /* not there: the next place */
            int w = snprintf(module_error + len, sizeof module_error - len, "%s%s", i ? ", " : "not found (tried ", path);
            len = w < 0 || (size_t)w >= sizeof module_error - len ? sizeof module_error - 1 : len + (size_t)w;
            continue;
        }
        void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            const char *e = dlerror();
            snprintf(module_error, sizeof module_error, "%.700s", e ? e : path);
            return;
        }
        dp_cuda_module_entry_fn entry = (dp_cuda_module_entry_fn)dlsym(handle, DP_CUDA_MODULE_ENTRY);
        if (!entry) {
            snprintf(module_error, sizeof module_error, "%.600s: no %s in it (not a dptrain CUDA module)", path,
                     DP_CUDA_MODULE_ENTRY);
            dlclose(handle);
            return;
        }
        char why[512] = "";
        const dp_cuda_module_t *m = entry(&lent, why, sizeof why);
        if (!m || m->abi != DP_CUDA_MODULE_ABI || m->size != sizeof(dp_cuda_module_t)) {
            snprintf(module_error, sizeof module_error, "%.400s: %s", path,
                     m ? "it answered with another interface version (a module of another dptrain build)" : why);
            dlclose(handle);
            return;
        }
        module = m; /* kept until exit, like the backends it opens */
        return;
    }
    if (len < sizeof module_error - 1) snprintf(module_error + len, sizeof module_error - len, ")");
}

static void load_module(void) {
    try_load();
    if (!module) snprintf(count_why, sizeof count_why, "the CUDA backend module did not load: %s", module_error);
}

static const dp_cuda_module_t *cuda_module(void) {
    pthread_once(&module_once, load_module);
    return module;
}

/* Cheap signs of an NVIDIA GPU, without loading anything: CUDA_VISIBLE_DEVICES
 * not hiding every GPU, and a device node of the driver (/dev/nvidia0..,
 * /dev/nvidiactl; /dev/dxg under WSL) or its /proc folder. NULL when there
 * may be one; else why not (static text). */
static const char *gpu_absent(void) {
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (visible) {
        while (*visible == ' ') visible++;
        if (*visible == '\0' || *visible == ',') return "CUDA_VISIBLE_DEVICES is empty (it hides every GPU)";
        if (*visible == '-') return "CUDA_VISIBLE_DEVICES starts with a negative index (it hides every GPU)";
    }
    /* a module named explicitly is asked (a GPU whose nodes live elsewhere, or a test double of one) */
    const char *module_path = getenv("DPTRAIN_CUDA_MODULE");
    if (module_path && *module_path) return NULL;
    if (access("/dev/nvidiactl", F_OK) == 0 || access("/dev/dxg", F_OK) == 0) return NULL;
    DIR *dev = opendir("/dev");
    if (dev) {
        struct dirent *e;
        int found = 0;
        while (!found && (e = readdir(dev)))
            found = strncmp(e->d_name, "nvidia", 6) == 0 && e->d_name[6] >= '0' && e->d_name[6] <= '9';
        closedir(dev);
        if (found) return NULL;
    }
    DIR *proc = opendir("/proc/driver/nvidia/gpus");
    if (proc) {
        struct dirent *e;
        int found = 0;
        while (!found && (e = readdir(proc))) found = e->d_name[0] != '.';
        closedir(proc);
        if (found) return NULL;
    }
    return "no NVIDIA GPU device (/dev/nvidia*) on this machine";
}
#endif

int dp_backend_cuda_built(void) {
#ifdef DPTRAIN_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

int dp_backend_cuda_count(const char **why) {
#ifdef DPTRAIN_HAVE_CUDA
    const char *absent = gpu_absent();
    if (absent) {
        if (why) *why = absent;
        return 0;
    }
    const dp_cuda_module_t *m = cuda_module();
    if (!m) {
        if (why) *why = count_why;
        return 0;
    }
    return m->gpu_count(why);
#else
    if (why) *why = "this dptrain was built without CUDA";
    return 0;
#endif
}

dp_status_t dp_backend_by_name(const char *name, int index, const dp_backend_t **out) {
    *out = NULL;
    if (strcmp(name, "cpu") == 0) {
        *out = dp_backend_cpu();
        return DP_OK;
    }
    if (strcmp(name, "staged") == 0) { /* the test double of a GPU (backend_cpu_staged.c) */
        *out = dp_backend_cpu_staged();
        return DP_OK;
    }
    if (strcmp(name, "split") == 0) { /* the test double of distinct GPUs (backend_cpu_split.c) */
        if (!(*out = dp_backend_cpu_split(index)))
            return dp_fail(DP_ERR_ARG, "split:%d: no such device (split:0 to split:63)", index);
        return DP_OK;
    }
    if (strcmp(name, "cuda") == 0) {
#ifdef DPTRAIN_HAVE_CUDA
        const dp_cuda_module_t *m = cuda_module();
        if (!m) return dp_fail(DP_ERR_ARG, "cuda:%d: cannot load the CUDA backend module %s: %s", index,
                               DP_CUDA_MODULE_FILE, module_error);
        return m->backend_open(index, out);
#else
        (void)index;
        return dp_fail(DP_ERR_ARG, "this dptrain was built without CUDA (cuda:%d asked for; "
                       "rebuild with -DDPTRAIN_CUDA=ON)", index);
#endif
    }
    return dp_fail(DP_ERR_ARG, "unknown backend '%s' (expected cpu or cuda)", name);
}
