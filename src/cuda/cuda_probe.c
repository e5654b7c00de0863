/* Finding the CUDA driver. The CUDA queue backend itself is not part of this build yet: a machine
 * with a driver reports its GPUs and opening one says so plainly. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "cuda/cuda_api.h"

static hcq__cuda_api_t g_api;
static const hcq__cuda_api_t *g_api_ok;
static char g_why[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void) {
  g_api.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!g_api.lib) {
    const char *e = dlerror();
    snprintf(g_why, sizeof(g_why), "libcuda.so.1 could not be loaded (%s)", e ? e : "no NVIDIA driver");
    return;
  }
#define HCQ__CUDA_LOAD(name, ret, params)                                       \
  *(void **)&g_api.name = dlsym(g_api.lib, #name);                              \
  if (!g_api.name) {                                                            \
    snprintf(g_why, sizeof(g_why), "libcuda.so.1 lacks the entry point %s", #name); \
    return;                                                                     \
  }
  HCQ_CUDA_ENTRY_POINTS(HCQ__CUDA_LOAD)
#undef HCQ__CUDA_LOAD
  int rc = g_api.cuInit(0);
  if (rc != 0) {
    snprintf(g_why, sizeof(g_why), "cuInit failed with CUDA error %d (no usable GPU?)", rc);
    return;
  }
  g_api_ok = &g_api;
}

const hcq__cuda_api_t *hcq__cuda_api(const char **out_why) {
  pthread_once(&g_once, load);
  if (out_why) *out_why = g_why;
  return g_api_ok;
}

void hcq__cuda_query(hcq_device_info_t *info) {
  const char *why;
  const hcq__cuda_api_t *api = hcq__cuda_api(&why);
  info->kind = HCQ_DEVICE_CUDA;
  if (!api) {
    info->available = false;
    snprintf(info->description, sizeof(info->description), "absent: %.200s", why);
    return;
  }
  int version = 0, count = 0;
  api->cuDriverGetVersion(&version);
  api->cuDeviceGetCount(&count);
  char name[128] = "?";
  hcq_CUdevice d;
  if (count > 0 && api->cuDeviceGet(&d, 0) == 0) api->cuDeviceGetName(name, sizeof(name), d);
  info->available = count > 0;
  info->count = count;
  snprintf(info->description, sizeof(info->description),
           "driver %d.%d, %d device(s), CUDA:0 is %s; the CUDA queue backend is not in this build", version / 1000,
           (version % 1000) / 10, count, name);
}

hcq_status_t hcq__cuda_device_create(int index, hcq_device_t *dev) {
  (void)dev;
  const char *why;
  const hcq__cuda_api_t *api = hcq__cuda_api(&why);
  if (!api) return hcq_status_make(HCQ_UNAVAILABLE, "device CUDA:%d is unavailable: %s", index, why);
  int count = 0;
  api->cuDeviceGetCount(&count);
  if (index >= count)
    return hcq_status_make(HCQ_NOT_FOUND, "unknown device CUDA:%d: this machine has %d CUDA device(s)", index, count);
  return hcq_status_make(HCQ_UNIMPLEMENTED, "device CUDA:%d: the CUDA queue backend is not in this build", index);
}
