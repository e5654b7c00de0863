/* What the Vulkan row of the backend table (vk_backend.c) points at: vk_loader.c and vk_device.c,
 * or vk_absent.c where the build has no Vulkan headers. */
#ifndef HCQ_VULKAN_VK_BACKEND_H
#define HCQ_VULKAN_VK_BACKEND_H

#include "core/internal.h"

void hcq__vulkan_query(hcq_device_info_t *info);
hcq_status_t hcq__vulkan_device_create(int index, hcq_device_t *dev);

#endif
