/* Finding Vulkan: the loader (libvulkan.so.1) opened at run time, one instance for the process,
 * the physical devices it lists, and whether each can serve hcq. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/vk_backend.h"
#include "vulkan/vk_internal.h"

static hcq__vk_instance_t g_vi;
static const hcq__vk_instance_t *g_vi_ok;
static char g_why[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static const char *vk_result_name(VkResult r) {
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER (no Vulkan driver installed?)";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    default: return "a Vulkan error";
  }
}

const char *hcq__vk_result_name(VkResult r) { return vk_result_name(r); }

static void load(void) {
  hcq__vk_instance_t *vi = &g_vi;
  vi->lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!vi->lib) {
    const char *e = dlerror();
    snprintf(g_why, sizeof(g_why), "the Vulkan loader libvulkan.so.1 could not be loaded (%.180s)",
             e ? e : "not installed");
    return;
  }
  *(void **)&vi->gipa = dlsym(vi->lib, "vkGetInstanceProcAddr");
  if (!vi->gipa) {
    snprintf(g_why, sizeof(g_why), "libvulkan.so.1 lacks vkGetInstanceProcAddr");
    return;
  }
  PFN_vkEnumerateInstanceVersion enum_version =
      (PFN_vkEnumerateInstanceVersion)vi->gipa(VK_NULL_HANDLE, "vkEnumerateInstanceVersion");
  PFN_vkCreateInstance create = (PFN_vkCreateInstance)vi->gipa(VK_NULL_HANDLE, "vkCreateInstance");
  vi->api_version = VK_API_VERSION_1_0;
  if (enum_version) enum_version(&vi->api_version);
  if (!create || vi->api_version < VK_API_VERSION_1_2) {
    snprintf(g_why, sizeof(g_why), "the Vulkan loader offers version %u.%u; hcq needs 1.2",
             VK_API_VERSION_MAJOR(vi->api_version), VK_API_VERSION_MINOR(vi->api_version));
    return;
  }
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                           .pApplicationName = "hcq",
                           .pEngineName = "hcq",
                           .apiVersion = VK_API_VERSION_1_3};
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                             .pApplicationInfo = &app};
  VkResult r = create(&ci, NULL, &vi->instance);
  if (r != VK_SUCCESS) {
    snprintf(g_why, sizeof(g_why), "vkCreateInstance failed: %s", vk_result_name(r));
    return;
  }
#define HCQ__VK_LOAD_INSTANCE(name)                                                      \
  *(void **)&vi->name = (void *)vi->gipa(vi->instance, #name);                           \
  if (!vi->name) {                                                                       \
    snprintf(g_why, sizeof(g_why), "the Vulkan loader lacks the entry point %s", #name); \
    return;                                                                              \
  }
  HCQ_VK_INSTANCE_FNS(HCQ__VK_LOAD_INSTANCE)
#undef HCQ__VK_LOAD_INSTANCE
#define HCQ__VK_LOAD_OPTIONAL(name) *(void **)&vi->name = (void *)vi->gipa(vi->instance, #name);
  HCQ_VK_INSTANCE_OPTIONAL_FNS(HCQ__VK_LOAD_OPTIONAL)
#undef HCQ__VK_LOAD_OPTIONAL
  uint32_t n = 0;
  r = vi->vkEnumeratePhysicalDevices(vi->instance, &n, NULL);
  if (r != VK_SUCCESS || n == 0) {
    snprintf(g_why, sizeof(g_why),
             "no Vulkan driver lists a device (install mesa-vulkan-drivers for lavapipe)");
    return;
  }
  vi->phys = calloc(n, sizeof(*vi->phys));
  if (!vi->phys) {
    snprintf(g_why, sizeof(g_why), "out of memory listing Vulkan devices");
    return;
  }
  r = vi->vkEnumeratePhysicalDevices(vi->instance, &n, vi->phys);
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
    snprintf(g_why, sizeof(g_why), "vkEnumeratePhysicalDevices failed: %s", vk_result_name(r));
    return;
  }
  vi->nphys = n;
  g_vi_ok = vi;
}

const hcq__vk_instance_t *hcq__vk_instance(const char **out_why) {
  pthread_once(&g_once, load);
  if (out_why) *out_why = g_why;
  return g_vi_ok;
}

const char *hcq__vk_unsuitable(const hcq__vk_instance_t *vi, VkPhysicalDevice pd) {
  VkPhysicalDeviceProperties props;
  vi->vkGetPhysicalDeviceProperties(pd, &props);
  if (props.apiVersion < VK_API_VERSION_1_2)
    return "it supports Vulkan 1.1 or older (hcq needs 1.2)";
  VkPhysicalDeviceVulkan12Features f12 = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                 .pNext = &f12};
  vi->vkGetPhysicalDeviceFeatures2(pd, &f);
  if (!f12.timelineSemaphore) return "it lacks timeline semaphores";
  if (!f12.bufferDeviceAddress) return "it lacks buffer device addresses";
  if (!f.features.shaderInt64) return "it lacks 64-bit shader integers";
  uint32_t nfam = 0;
  vi->vkGetPhysicalDeviceQueueFamilyProperties(pd, &nfam, NULL);
  VkQueueFamilyProperties fams[32];
  if (nfam > 32) nfam = 32;
  vi->vkGetPhysicalDeviceQueueFamilyProperties(pd, &nfam, fams);
  for (uint32_t i = 0; i < nfam; i++)
    if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return NULL;
  return "it has no compute queue";
}

void hcq__vk_query(hcq_device_info_t *info) {
  info->kind = HCQ_DEVICE_VULKAN;
  const char *why;
  const hcq__vk_instance_t *vi = hcq__vk_instance(&why);
  if (!vi) {
    info->available = false;
    snprintf(info->description, sizeof(info->description), "absent: %.220s", why);
    return;
  }
  int usable = 0;
  bool lavapipe = false;
  char first[128] = "", bad[160] = "";
  for (uint32_t i = 0; i < vi->nphys; i++) {
    VkPhysicalDeviceProperties p;
    vi->vkGetPhysicalDeviceProperties(vi->phys[i], &p);
    const char *no = hcq__vk_unsuitable(vi, vi->phys[i]);
    if (no) {
      if (!*bad) snprintf(bad, sizeof(bad), "%.60s: %.80s", p.deviceName, no);
      continue;
    }
    if (!usable) {
      snprintf(first, sizeof(first), "%.80s, Vulkan %u.%u.%u", p.deviceName,
               VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion),
               VK_API_VERSION_PATCH(p.apiVersion));
      /* The driver reports nothing when it cuts a loop short, so this line is the only warning. */
      lavapipe = strncmp(p.deviceName, "llvmpipe", 8) == 0;
    }
    usable++;
  }
  info->count = usable;
  info->available = usable > 0;
  if (usable)
    snprintf(info->description, sizeof(info->description),
             "%d device(s), VULKAN:0 is %.86s; GLSL compute (libshaderc) and SPIR-V kernels, copy "
             "queue%s",
             usable, first,
             lavapipe
                 ? "; lavapipe: shader loops end at 65,535 iterations, silently (docs/vulkan.md)"
                 : "");
  else
    snprintf(info->description, sizeof(info->description),
             "absent: no device can serve hcq (%.200s)", bad);
}
