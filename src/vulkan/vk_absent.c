/* Builds without the Vulkan headers: VULKAN:N devices are absent and say why. */
#include <stdio.h>
#include <string.h>

#include "core/device.h"
#include "vulkan/vk_backend.h"
#include "vulkan/vk_testing.h"

#define WHY                                                                                  \
  "this build of hcq has no Vulkan backend (install libvulkan-dev and libshaderc-dev, then " \
  "rebuild)"

void hcq__vk_query(hcq_device_info_t *info) {
  info->kind = HCQ_DEVICE_VULKAN;
  info->available = false;
  info->count = 0;
  snprintf(info->description, sizeof(info->description), "absent: %s", WHY);
}

hcq_status_t hcq__vk_device_create(int index, const hcq_device_options_t *opts, hcq_device_t *dev) {
  (void)opts;
  (void)index;
  return hcq_status_make(HCQ_UNAVAILABLE, "device %s is unavailable: %s", dev->name, WHY);
}

hcq_status_t hcq__vk_binary_compile(const char *entry, const char *source,
                                    hcq_binary_format_t format, const char *arch, void **out,
                                    size_t *out_size) {
  (void)source, (void)format, (void)arch, (void)out, (void)out_size;
  return hcq_status_make(HCQ_UNAVAILABLE, "cannot compile %s to SPIR-V: %s", entry, WHY);
}

bool hcq__vk_counters(hcq_device_t *dev, hcq__vk_counters_t *out) {
  (void)dev;
  memset(out, 0, sizeof(*out));
  return false;
}

bool hcq__vk_slow_completion(hcq_device_t *dev, hcq_queue_kind_t kind, uint64_t ns) {
  (void)dev, (void)kind, (void)ns;
  return false;
}
