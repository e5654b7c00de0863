/* Finding the CUDA driver: dlopen, then every entry point through cuGetProcAddress at one ABI
 * version, so the declarations in cuda_api.h are what we get whatever the driver's own version. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/options.h"
#include "cuda/cuda_api.h"

typedef hcq_CUresult (*get_proc_fn)(const char *symbol, void **pfn, int version, uint64_t flags,
                                    int *status);

static hcq__cuda_api_t g_api;
static const hcq__cuda_api_t *g_api_ok;
static char g_why[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void) {
  const char *path = hcq__options()->cuda_library;
  snprintf(g_api.path, sizeof(g_api.path), "%s", path);
  g_api.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!g_api.lib) {
    const char *e = dlerror();
    snprintf(g_why, sizeof(g_why), "%.100s could not be loaded (%.180s): no NVIDIA driver", path,
             e ? e : "not found");
    return;
  }
  /* cuGetProcAddress_v2 exists from CUDA 12.0 on, the oldest driver these declarations describe. */
  get_proc_fn get_proc = (get_proc_fn)(uintptr_t)dlsym(g_api.lib, "cuGetProcAddress_v2");
  if (!get_proc) {
    snprintf(g_why, sizeof(g_why), "%.100s is older than CUDA 12.0 (it lacks cuGetProcAddress_v2)",
             path);
    return;
  }
#define HCQ__CUDA_LOAD(name, ret, params)                                                          \
  {                                                                                                \
    void *fn = NULL;                                                                               \
    int found = -1;                                                                                \
    hcq_CUresult rc = get_proc(#name, &fn, HCQ_CUDA_ABI_VERSION, 0, &found);                       \
    if (rc != 0 || found != 0 || !fn) {                                                            \
      snprintf(g_why, sizeof(g_why), "%.100s lacks the entry point %s (CUDA %d.%d ABI; error %d)", \
               path, #name, HCQ_CUDA_ABI_VERSION / 1000, HCQ_CUDA_ABI_VERSION % 1000 / 10, rc);    \
      return;                                                                                      \
    }                                                                                              \
    memcpy(&g_api.name, &fn, sizeof(fn));                                                          \
  }
  HCQ_CUDA_ENTRY_POINTS(HCQ__CUDA_LOAD)
#undef HCQ__CUDA_LOAD
  {
    void *fn = NULL;
    int found = -1;
    if (get_proc("cuFuncLoad", &fn, HCQ_CUDA_FUNC_LOAD_VERSION, 0, &found) == 0 && found == 0 && fn)
      memcpy(&g_api.cuFuncLoad, &fn, sizeof(fn));
  }
  int rc = g_api.cuInit(0);
  if (rc != 0) {
    char text[160];
    hcq__cuda_error_text(rc, text, sizeof(text));
    snprintf(g_why, sizeof(g_why), "cuInit failed: %s%s", text,
             rc == HCQ_CUDA_ERROR_NO_DEVICE ? "" : " (is the GPU visible to this process?)");
    return;
  }
  if (g_api.cuDriverGetVersion(&g_api.driver_version) != 0 ||
      g_api.driver_version < HCQ_CUDA_ABI_VERSION) {
    snprintf(g_why, sizeof(g_why), "the NVIDIA driver supports CUDA %d.%d; hcq needs 12.0 or newer",
             g_api.driver_version / 1000, g_api.driver_version % 1000 / 10);
    return;
  }
  g_api_ok = &g_api;
}

const hcq__cuda_api_t *hcq__cuda_api(const char **out_why) {
  pthread_once(&g_once, load);
  if (out_why) *out_why = g_why;
  return g_api_ok;
}

void hcq__cuda_error_text(hcq_CUresult rc, char *out, size_t size) {
  const char *name = NULL, *text = NULL;
  /* The error functions are usable once loading got past them, even when cuInit failed. */
  if (g_api.cuGetErrorName) g_api.cuGetErrorName(rc, &name);
  if (g_api.cuGetErrorString) g_api.cuGetErrorString(rc, &text);
  if (name && text)
    snprintf(out, size, "%s (%s)", name, text);
  else
    snprintf(out, size, "CUDA error %d", rc);
}
