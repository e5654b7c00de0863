/* Finding the Objective-C runtime and Metal: both opened by path, classes and selectors by name
 * (metal_internal.h). Where the framework is missing (any OS but macOS), Metal is absent and the
 * reason says which file was not found. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metal/metal_internal.h"

#ifdef __APPLE__
#define DEFAULT_OBJC "/usr/lib/libobjc.A.dylib"
#else
#define DEFAULT_OBJC \
  "libobjc.so.4" /* tried only where a Metal framework was found (HCQ_METAL_FRAMEWORK) */
#endif
#define DEFAULT_METAL "/System/Library/Frameworks/Metal.framework/Metal"

static hcq__mtl_api_t g_api;
static const hcq__mtl_api_t *g_api_ok;
static char g_why[640];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static bool sym(void *lib, const char *path, const char *name, void *out) {
  void *p = dlsym(lib, name);
  if (!p) {
    snprintf(g_why, sizeof(g_why), "%.200s lacks %s", path, name);
    return false;
  }
  memcpy(out, &p, sizeof(p));
  return true;
}

static void load(void) {
  const char *objc = getenv("HCQ_OBJC_LIBRARY"), *metal = getenv("HCQ_METAL_FRAMEWORK");
  snprintf(g_api.objc_path, sizeof(g_api.objc_path), "%s", objc && *objc ? objc : DEFAULT_OBJC);
  snprintf(g_api.metal_path, sizeof(g_api.metal_path), "%s",
           metal && *metal ? metal : DEFAULT_METAL);
  /* The framework decides, so it is looked for first; without it no runtime is loaded (a runtime
   * such as GNU's libobjc has nothing to offer hcq, and its start-up allocations stay for good). */
  g_api.metal_lib = dlopen(g_api.metal_path, RTLD_NOW | RTLD_LOCAL);
  if (!g_api.metal_lib) {
    snprintf(g_why, sizeof(g_why),
             "Metal.framework not found at %.200s (Metal exists on macOS only; HCQ_METAL_FRAMEWORK "
             "names another path)",
             g_api.metal_path);
    return;
  }
  g_api.objc_lib = dlopen(g_api.objc_path, RTLD_NOW | RTLD_GLOBAL);
  if (!g_api.objc_lib) {
    const char *e = dlerror();
    snprintf(g_why, sizeof(g_why),
             "the Objective-C runtime %.200s could not be loaded (%.200s; HCQ_OBJC_LIBRARY names "
             "another)",
             g_api.objc_path, e ? e : "not found");
    return;
  }
  const char *op = g_api.objc_path, *mp = g_api.metal_path;
  if (!sym(g_api.objc_lib, op, "objc_getClass", &g_api.objc_getClass) ||
      !sym(g_api.objc_lib, op, "sel_registerName", &g_api.sel_registerName) ||
      !sym(g_api.objc_lib, op, "objc_msgSend", &g_api.objc_msgSend) ||
      !sym(g_api.objc_lib, op, "object_getClassName", &g_api.object_getClassName) ||
      !sym(g_api.objc_lib, op, "objc_autoreleasePoolPush", &g_api.objc_autoreleasePoolPush) ||
      !sym(g_api.objc_lib, op, "objc_autoreleasePoolPop", &g_api.objc_autoreleasePoolPop) ||
      !sym(g_api.metal_lib, mp, "MTLCreateSystemDefaultDevice",
           &g_api.MTLCreateSystemDefaultDevice) ||
      !sym(g_api.metal_lib, mp, "dispatch_data_create", &g_api.dispatch_data_create) ||
      !sym(g_api.metal_lib, mp, "dispatch_release", &g_api.dispatch_release))
    return;
#define HCQ__MTL_SEL_LOAD(field, text) g_api.sel.field = g_api.sel_registerName(text);
  HCQ__MTL_SELECTORS(HCQ__MTL_SEL_LOAD)
#undef HCQ__MTL_SEL_LOAD
  static const struct {
    const char *name;
    size_t offset;
  } classes[] = {
      {"NSString", offsetof(hcq__mtl_api_t, NSString)},
      {"MTLComputePipelineDescriptor", offsetof(hcq__mtl_api_t, MTLComputePipelineDescriptor)},
      {"MTLIndirectCommandBufferDescriptor",
       offsetof(hcq__mtl_api_t, MTLIndirectCommandBufferDescriptor)},
  };
  for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++) {
    hcq_id c = g_api.objc_getClass(classes[i].name);
    if (!c) {
      snprintf(g_why, sizeof(g_why), "the Objective-C runtime has no class %s (%.200s)",
               classes[i].name, mp);
      return;
    }
    memcpy((char *)&g_api + classes[i].offset, &c, sizeof(c));
  }
  g_api_ok = &g_api;
}

const hcq__mtl_api_t *hcq__mtl_api(const char **why) {
  pthread_once(&g_once, load);
  if (why) *why = g_api_ok ? NULL : g_why;
  return g_api_ok;
}

hcq_id hcq__mtl_string(const hcq__mtl_api_t *api, const char *s) {
  return HCQ__MSG(api, hcq_id, const char *)(api->NSString, api->sel.stringWithUTF8String, s);
}

const char *hcq__mtl_cstring(const hcq__mtl_api_t *api, hcq_id str) {
  const char *s = str ? HCQ__MSG(api, const char *)(str, api->sel.UTF8String) : NULL;
  return s ? s : "";
}
