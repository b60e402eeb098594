/* backend_registry.c - backends by name ("cpu", "staged", "cuda"), and the one place
 * that knows whether this build has the CUDA backend (DPTRAIN_HAVE_CUDA,
 * defined for this file only by CMakeLists.txt's CUDA section). */
#include "dptrain/backend.h"

#include <string.h>

#ifdef DPTRAIN_HAVE_CUDA
#include "cuda/backend_cuda.h"
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
    return dp_cuda_gpu_count(why);
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
    if (strcmp(name, "cuda") == 0) {
#ifdef DPTRAIN_HAVE_CUDA
        return dp_cuda_backend_open(index, out);
#else
        (void)index;
        return dp_fail(DP_ERR_ARG, "this dptrain was built without CUDA (cuda:%d asked for; "
                       "rebuild with -DDPTRAIN_CUDA=ON)", index);
#endif
    }
    return dp_fail(DP_ERR_ARG, "unknown backend '%s' (expected cpu or cuda)", name);
}
