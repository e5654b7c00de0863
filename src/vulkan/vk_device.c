/* VULKAN:N devices: a logical device per open, its queues and memory types, the timestamp clock,
 * and the backend vtable over the engines (vk_engine.c), memory (vk_memory.c) and programs
 * (vk_compile.c). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/device.h"
#include "core/hang_report.h"
#include "core/host_wait.h"
#include "core/options.h"
#include "core/status.h"
#include "vulkan/vk_backend.h"
#include "vulkan/vk_device.h"
#include "vulkan/vk_testing.h"

uint64_t hcq__vk_ticks_to_ns(const vk_device_t *vd, uint64_t ticks) {
  double ns = (double)(ticks & vd->timestamp_mask) * vd->timestamp_period;
  int64_t v = (int64_t)ns + vd->timestamp_offset;
  return v > 0 ? (uint64_t)v : 1;
}

/* ---- vtable ---- */

static vk_device_t *VD(hcq_device_t *dev) { return dev->backend; }

static hcq_status_t vk_reserve(hcq_device_t *dev, hcq_queue_kind_t kind, size_t nwords,
                               bool bound) {
  return hcq__vk_engine_reserve(VD(dev)->engines[kind], nwords, bound);
}

static hcq_status_t vk_submit(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words,
                              size_t nwords, bool bound) {
  if (!bound) {
    /* Eager launches learn here that their geometry does not fit the device; bound lists are
     * checked by the engine when it reaches them (their grids change without a submit). */
    hcq_status_t st = hcq__vk_check_execs(VD(dev), words, nwords, false);
    if (st) return st;
  }
  return hcq__vk_engine_submit(VD(dev)->engines[kind], words, nwords, bound);
}

static uint64_t vk_submitted(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return hcq__vk_engine_submitted(VD(dev)->engines[kind]);
}

static uint64_t vk_completed(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return hcq__vk_engine_completed(VD(dev)->engines[kind]);
}

static hcq_status_t vk_wait_idle(hcq_device_t *dev, int64_t timeout_ms) {
  uint64_t deadline = hcq__deadline_after_ms(timeout_ms);
  for (int k = 0; k < 2; k++) {
    hcq_status_t st = hcq__vk_engine_wait_idle(VD(dev)->engines[k], deadline);
    if (st) return st;
  }
  return NULL;
}

static void vk_snapshot(hcq_device_t *dev, hcq_queue_kind_t kind, hcq__engine_snapshot_t *out) {
  hcq__vk_engine_snapshot(VD(dev)->engines[kind], out);
}

static void vk_lost(hcq_device_t *dev) {
  for (int k = 0; k < 2; k++)
    if (VD(dev)->engines[k]) hcq__vk_engine_wake(VD(dev)->engines[k]);
}

static bool vk_stop(hcq_device_t *dev) {
  vk_device_t *vd = VD(dev);
  uint64_t deadline = hcq__now_ns() + (hcq__device_is_lost(dev) ? 2000 : 10000) * UINT64_C(1000000);
  bool stuck = false;
  for (int k = 0; k < 2; k++) stuck |= hcq__vk_engine_stop(vd->engines[k], deadline);
  if (!stuck && vd->device) vd->fn.vkDeviceWaitIdle(vd->device);
  return stuck;
}

static void vk_destroy(hcq_device_t *dev) {
  vk_device_t *vd = VD(dev);
  if (!vd) return;
  for (int k = 0; k < 2; k++) hcq__vk_engine_destroy(vd->engines[k]);
  if (vd->device) {
    hcq__vk_memory_destroy(vd);
    if (vd->layout) vd->fn.vkDestroyPipelineLayout(vd->device, vd->layout, NULL);
    if (vd->oneshot_pool) vd->fn.vkDestroyCommandPool(vd->device, vd->oneshot_pool, NULL);
    if (vd->oneshot_fence) vd->fn.vkDestroyFence(vd->device, vd->oneshot_fence, NULL);
    vd->fn.vkDestroyDevice(vd->device, NULL);
  }
  for (int q = 0; q < 2; q++) pthread_mutex_destroy(&vd->queues[q].lock);
  pthread_mutex_destroy(&vd->mem_lock);
  pthread_mutex_destroy(&vd->oneshot_lock);
  pthread_mutex_destroy(&vd->pending_lock);
  free(vd);
  dev->backend = NULL;
}

/* The heap device buffers are made in: its size, and with VK_EXT_memory_budget what the driver says
 * this process may still use of it (its budget, which accounts for other processes, minus its
 * usage). */
static hcq_status_t vk_memory_info(hcq_device_t *dev, hcq_device_memory_t *out) {
  vk_device_t *vd = VD(dev);
  uint32_t heap = vd->memprops.memoryTypes[vd->mem_type[0]].heapIndex;
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties2 props = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
      .pNext = vd->memory_budget ? &budget : NULL};
  vd->vi->vkGetPhysicalDeviceMemoryProperties2(vd->phys, &props);
  out->total = props.memoryProperties.memoryHeaps[heap].size;
  if (!vd->memory_budget) {
    out->source = "heap size; the driver has no VK_EXT_memory_budget";
    return NULL;
  }
  uint64_t b = budget.heapBudget[heap], used = budget.heapUsage[heap];
  out->available = b > used ? b - used : 0;
  out->source = "VK_EXT_memory_budget";
  return NULL;
}

/* On lavapipe the driver's threads run the kernels on the host's cores: a spinning waiter would
 * take one from them. */
static bool vk_waiter_sleeps_at_once(hcq_device_t *dev) { return VD(dev)->on_host_cores; }

static const hcq__device_vtable_t vk_vtable = {
    .destroy = vk_destroy,
    .stop = vk_stop,
    .mem_alloc = hcq__vk_mem_alloc,
    .mem_free = hcq__vk_mem_free,
    .reserve = vk_reserve,
    .submit = vk_submit,
    .submitted = vk_submitted,
    .completed = vk_completed,
    .wait_idle = vk_wait_idle,
    .snapshot = vk_snapshot,
    .lost = vk_lost,
    .program_compile = hcq__vk_program_compile,
    .program_unload = hcq__vk_program_unload,
    .memory_info = vk_memory_info,
    .waiter_sleeps_at_once = vk_waiter_sleeps_at_once,
};

/* ---- opening ---- */

static hcq_status_t vk_error(hcq_device_t *dev, const char *what, VkResult r) {
  return hcq_status_make(r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                             ? HCQ_OUT_OF_MEMORY
                             : HCQ_UNAVAILABLE,
                         "%s: %s failed: %s", dev->name, what, hcq__vk_result_name(r));
}

static bool has_extension(const hcq__vk_instance_t *vi, VkPhysicalDevice pd, const char *name) {
  uint32_t n = 0;
  if (vi->vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS || !n)
    return false;
  VkExtensionProperties *ext = calloc(n, sizeof(*ext));
  bool found = false;
  if (ext && vi->vkEnumerateDeviceExtensionProperties(pd, NULL, &n, ext) == VK_SUCCESS)
    for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(ext[i].extensionName, name);
  free(ext);
  return found;
}

static void pick_memory_types(vk_device_t *vd) {
  const VkPhysicalDeviceMemoryProperties *m = &vd->memprops;
  const VkMemoryPropertyFlags hv =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  uint64_t biggest = 0;
  for (uint32_t h = 0; h < m->memoryHeapCount; h++)
    if ((m->memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
        m->memoryHeaps[h].size > biggest)
      biggest = m->memoryHeaps[h].size;
  int best_dev = -1, best_dev_score = -1, best_hv = -1, best_hv_score = -1;
  for (uint32_t i = 0; i < m->memoryTypeCount; i++) {
    VkMemoryPropertyFlags f = m->memoryTypes[i].propertyFlags;
    uint64_t heap = m->memoryHeaps[m->memoryTypes[i].heapIndex].size;
    if (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) {
      /* Device memory in the big heap; mappable too when the host can reach all of it (lavapipe,
       * unified memory, resizable BAR): copies between devices then go straight through the host.
       */
      int score = (heap == biggest ? 4 : 0) + ((f & hv) == hv && heap * 2 >= biggest ? 2 : 0);
      if (score > best_dev_score) best_dev = (int)i, best_dev_score = score;
    }
    if ((f & hv) == hv) {
      int score = (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT ? 2 : 0) + 1;
      if (score > best_hv_score) best_hv = (int)i, best_hv_score = score;
    }
  }
  vd->mem_type[0] = best_dev >= 0 ? (uint32_t)best_dev : (best_hv >= 0 ? (uint32_t)best_hv : 0);
  vd->mem_type[1] = best_hv >= 0 ? (uint32_t)best_hv : 0;
  vd->device_mem_mapped = (m->memoryTypes[vd->mem_type[0]].propertyFlags & hv) == hv;
}

/* The offset from device timestamps to host CLOCK_MONOTONIC nanoseconds. */
static void calibrate(vk_device_t *vd, bool calibrated_ext) {
  vd->timestamp_offset = 0;
  if (!vd->timestamps) return;
  if (calibrated_ext && vd->fn.vkGetCalibratedTimestampsEXT &&
      vd->vi->vkGetPhysicalDeviceCalibrateableTimeDomainsEXT) {
    uint32_t n = 0;
    VkTimeDomainEXT domains[8];
    vd->vi->vkGetPhysicalDeviceCalibrateableTimeDomainsEXT(vd->phys, &n, NULL);
    if (n > 8) n = 8;
    vd->vi->vkGetPhysicalDeviceCalibrateableTimeDomainsEXT(vd->phys, &n, domains);
    bool dev_ok = false, mono_ok = false;
    for (uint32_t i = 0; i < n; i++) {
      dev_ok |= domains[i] == VK_TIME_DOMAIN_DEVICE_EXT;
      mono_ok |= domains[i] == VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT;
    }
    if (dev_ok && mono_ok) {
      VkCalibratedTimestampInfoEXT info[2] = {
          {.sType = VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT,
           .timeDomain = VK_TIME_DOMAIN_DEVICE_EXT},
          {.sType = VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT,
           .timeDomain = VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT}};
      uint64_t ts[2], dev_ns;
      uint64_t deviation;
      if (vd->fn.vkGetCalibratedTimestampsEXT(vd->device, 2, info, ts, &deviation) == VK_SUCCESS) {
        dev_ns = (uint64_t)((double)(ts[0] & vd->timestamp_mask) * vd->timestamp_period);
        vd->timestamp_offset = (int64_t)ts[1] - (int64_t)dev_ns;
        return;
      }
    }
  }
  /* No calibrated clocks: write one timestamp and take the host time around it. */
  VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                              .queryType = VK_QUERY_TYPE_TIMESTAMP,
                              .queryCount = 1};
  VkQueryPool qp;
  if (vd->fn.vkCreateQueryPool(vd->device, &qi, NULL, &qp) != VK_SUCCESS) return;
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = vd->oneshot_pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  VkCommandBuffer cb;
  if (vd->fn.vkAllocateCommandBuffers(vd->device, &ai, &cb) == VK_SUCCESS) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vd->fn.vkBeginCommandBuffer(cb, &bi);
    vd->fn.vkCmdResetQueryPool(cb, qp, 0, 1);
    vd->fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, qp, 0);
    vd->fn.vkEndCommandBuffer(cb);
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
    uint64_t t0 = hcq__now_ns(), ticks = 0;
    if (vd->fn.vkQueueSubmit(vd->queues[0].queue, 1, &si, vd->oneshot_fence) == VK_SUCCESS &&
        vd->fn.vkWaitForFences(vd->device, 1, &vd->oneshot_fence, VK_TRUE, UINT64_C(5000000000)) ==
            VK_SUCCESS &&
        vd->fn.vkGetQueryPoolResults(vd->device, qp, 0, 1, sizeof(ticks), &ticks, sizeof(ticks),
                                     VK_QUERY_RESULT_64_BIT) == VK_SUCCESS) {
      uint64_t t1 = hcq__now_ns();
      uint64_t dev_ns = (uint64_t)((double)(ticks & vd->timestamp_mask) * vd->timestamp_period);
      vd->timestamp_offset = (int64_t)((t0 + t1) / 2) - (int64_t)dev_ns;
    }
    vd->fn.vkResetFences(vd->device, 1, &vd->oneshot_fence);
    vd->fn.vkFreeCommandBuffers(vd->device, vd->oneshot_pool, 1, &cb);
  }
  vd->fn.vkDestroyQueryPool(vd->device, qp, NULL);
}

/* The queue family: one that computes, preferably with two queues (compute and copy side by side)
 * and a clock; how many queues to take and how its timestamps read. */
static hcq_status_t pick_queue_family(vk_device_t *vd) {
  hcq_device_t *dev = vd->dev;
  const hcq__vk_instance_t *vi = vd->vi;
  uint32_t nfam = 0;
  VkQueueFamilyProperties fams[32];
  vi->vkGetPhysicalDeviceQueueFamilyProperties(vd->phys, &nfam, NULL);
  if (nfam > 32) nfam = 32;
  vi->vkGetPhysicalDeviceQueueFamilyProperties(vd->phys, &nfam, fams);
  int best = -1;
  for (uint32_t i = 0; i < nfam; i++) {
    if (!(fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
    /* Prefer a family with two queues (compute and copy side by side) and a clock. */
    if (best < 0 || (fams[i].queueCount > fams[best].queueCount && fams[best].queueCount < 2) ||
        (fams[i].timestampValidBits && !fams[best].timestampValidBits))
      best = (int)i;
  }
  if (best < 0) return hcq_status_make(HCQ_UNAVAILABLE, "%s: no compute queue", dev->name);
  vd->family = (uint32_t)best;
  vd->nqueues = fams[best].queueCount >= 2 ? 2 : 1;
  uint32_t bits = fams[best].timestampValidBits;
  vd->timestamps = bits > 0 && vd->props.limits.timestampPeriod > 0;
  vd->timestamp_mask = bits >= 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
  vd->timestamp_period = vd->props.limits.timestampPeriod;

  return NULL;
}

/* The logical device with the extensions hcq uses where present (calibrated timestamps, memory
 * budget), its entry points and its queues. */
static hcq_status_t create_device(vk_device_t *vd, bool *out_calibrated) {
  hcq_device_t *dev = vd->dev;
  const hcq__vk_instance_t *vi = vd->vi;
  float prio[2] = {1.0f, 1.0f};
  VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                 .queueFamilyIndex = vd->family,
                                 .queueCount = (uint32_t)vd->nqueues,
                                 .pQueuePriorities = prio};
  VkPhysicalDeviceVulkan12Features f12 = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
      .timelineSemaphore = VK_TRUE,
      .bufferDeviceAddress = VK_TRUE};
  VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                 .pNext = &f12};
  f.features.shaderInt64 = VK_TRUE;
  const char *exts[2];
  uint32_t next = 0;
  bool calibrated = *out_calibrated =
      has_extension(vi, vd->phys, VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME);
  if (calibrated) exts[next++] = VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME;
  vd->memory_budget = has_extension(vi, vd->phys, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  if (vd->memory_budget) exts[next++] = VK_EXT_MEMORY_BUDGET_EXTENSION_NAME;
  VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                            .pNext = &f,
                            .queueCreateInfoCount = 1,
                            .pQueueCreateInfos = &qci,
                            .enabledExtensionCount = next,
                            .ppEnabledExtensionNames = exts};
  VkResult r = vi->vkCreateDevice(vd->phys, &dci, NULL, &vd->device);
  if (r != VK_SUCCESS) return vk_error(dev, "vkCreateDevice", r);
#define HCQ__VK_LOAD_DEVICE(fname)                                               \
  *(void **)&vd->fn.fname = (void *)vi->vkGetDeviceProcAddr(vd->device, #fname); \
  if (!vd->fn.fname)                                                             \
    return hcq_status_make(HCQ_UNAVAILABLE, "%s: the driver lacks %s", dev->name, #fname);
  HCQ_VK_DEVICE_FNS(HCQ__VK_LOAD_DEVICE)
#undef HCQ__VK_LOAD_DEVICE
  if (calibrated)
    *(void **)&vd->fn.vkGetCalibratedTimestampsEXT =
        (void *)vi->vkGetDeviceProcAddr(vd->device, "vkGetCalibratedTimestampsEXT");
  for (int q = 0; q < vd->nqueues; q++)
    vd->fn.vkGetDeviceQueue(vd->device, vd->family, (uint32_t)q, &vd->queues[q].queue);

  return NULL;
}

/* The pipeline layout every kernel shares (a 16-byte push constant) and the pool and fence of
 * one-shot command buffers. */
static hcq_status_t create_shared_objects(vk_device_t *vd) {
  hcq_device_t *dev = vd->dev;
  VkResult r;
  VkPushConstantRange pc = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 16};
  VkPipelineLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                   .pushConstantRangeCount = 1,
                                   .pPushConstantRanges = &pc};
  if ((r = vd->fn.vkCreatePipelineLayout(vd->device, &li, NULL, &vd->layout)) != VK_SUCCESS)
    return vk_error(dev, "vkCreatePipelineLayout", r);
  VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                .queueFamilyIndex = vd->family};
  if ((r = vd->fn.vkCreateCommandPool(vd->device, &pi, NULL, &vd->oneshot_pool)) != VK_SUCCESS)
    return vk_error(dev, "vkCreateCommandPool", r);
  VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if ((r = vd->fn.vkCreateFence(vd->device, &fi, NULL, &vd->oneshot_fence)) != VK_SUCCESS)
    return vk_error(dev, "vkCreateFence", r);
  return NULL;
}

static hcq_status_t open_logical(vk_device_t *vd) {
  const hcq__vk_instance_t *vi = vd->vi;
  vi->vkGetPhysicalDeviceProperties(vd->phys, &vd->props);
  vi->vkGetPhysicalDeviceMemoryProperties(vd->phys, &vd->memprops);
  /* Set before the engines start: they read it. */
  vd->on_host_cores = vd->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  HCQ__TRY(pick_queue_family(vd));
  bool calibrated;
  HCQ__TRY(create_device(vd, &calibrated));
  pick_memory_types(vd);
  HCQ__TRY(create_shared_objects(vd));
  calibrate(vd, calibrated);
  HCQ__TRY(hcq__vk_engine_create(vd, HCQ_QUEUE_COMPUTE, &vd->queues[0], &vd->engines[0]));
  return hcq__vk_engine_create(vd, HCQ_QUEUE_COPY, &vd->queues[vd->nqueues - 1], &vd->engines[1]);
}

/* The physical device's compute limits. Kernels reach their buffers through device addresses (push
 * constants point at the arguments), so no descriptor limit applies to the argument counts. */
static void set_limits(hcq_device_t *dev, const VkPhysicalDeviceLimits *vl) {
  hcq_device_limits_t *l = &dev->limits;
  l->max_group_threads = vl->maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; i++) {
    l->max_group_size[i] = vl->maxComputeWorkGroupSize[i];
    l->max_grid[i] = vl->maxComputeWorkGroupCount[i];
  }
  const uint32_t *g = vl->maxComputeWorkGroupCount;
  unsigned __int128 items =
      (unsigned __int128)g[0] * g[1] * g[2] * vl->maxComputeWorkGroupInvocations;
  l->max_work_items = items > (UINT64_C(1) << 62) ? (UINT64_C(1) << 62) : (uint64_t)items;
  l->view_offset_alignment = 16; /* vec4 loads through a device address */
  l->shared_memory = vl->maxComputeSharedMemorySize;
}

hcq_status_t hcq__vk_device_create(int index, const hcq_device_options_t *opts, hcq_device_t *dev) {
  (void)opts;
  const char *why;
  const hcq__vk_instance_t *vi = hcq__vk_instance(&why);
  if (!vi) return hcq_status_make(HCQ_UNAVAILABLE, "device %s is unavailable: %s", dev->name, why);
  uint32_t phys = (uint32_t)index;
  if (phys >= vi->nphys) {
    if (!hcq__options()->vulkan_virtual)
      return hcq_status_make(
          HCQ_NOT_FOUND,
          "unknown device %s: this machine has %u Vulkan device(s) (HCQ_VULKAN_VIRTUAL=1 opens "
          "further logical devices over them)",
          dev->name, vi->nphys);
    phys %= vi->nphys;
  }
  const char *no = hcq__vk_unsuitable(vi, vi->phys[phys]);
  if (no) return hcq_status_make(HCQ_UNAVAILABLE, "device %s cannot serve hcq: %s", dev->name, no);
  vk_device_t *vd = calloc(1, sizeof(*vd));
  if (!vd) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory opening %s", dev->name);
  vd->dev = dev;
  vd->vi = vi;
  vd->phys = vi->phys[phys];
  for (int q = 0; q < 2; q++) pthread_mutex_init(&vd->queues[q].lock, NULL);
  pthread_mutex_init(&vd->mem_lock, NULL);
  pthread_mutex_init(&vd->oneshot_lock, NULL);
  pthread_mutex_init(&vd->pending_lock, NULL);
  dev->backend = vd;
  dev->vt = &vk_vtable;
  hcq_status_t st = open_logical(vd);
  if (st) {
    vk_stop(dev);
    vk_destroy(dev);
    dev->vt = NULL;
    return st;
  }
  /* Its copy engine copies to and from host memory and sets host signals (eager CPU transfers). */
  dev->caps = HCQ_CAP_IN_ORDER_QUEUES | HCQ_CAP_COPY_QUEUE | HCQ_CAP_COMPILE_GLSL |
              HCQ_CAP_COPIES_HOST_MEMORY;
  dev->threads = 1;
  set_limits(dev, &vd->props.limits);
  return NULL;
}

bool hcq__vk_counters(hcq_device_t *dev, hcq__vk_counters_t *out) {
  memset(out, 0, sizeof(*out));
  if (!dev || dev->vt != &vk_vtable) return false;
  for (int k = 0; k < 2; k++) hcq__vk_engine_counters(VD(dev)->engines[k], out);
  return true;
}

bool hcq__vk_slow_completion(hcq_device_t *dev, hcq_queue_kind_t kind, uint64_t ns) {
  if (!dev || dev->vt != &vk_vtable || (kind != HCQ_QUEUE_COMPUTE && kind != HCQ_QUEUE_COPY))
    return false;
  hcq__vk_engine_slow_completion(VD(dev)->engines[kind], ns);
  return true;
}
