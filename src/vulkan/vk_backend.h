/* What the Vulkan row of the backend table (vk_backend.c) points at: vk_loader.c and vk_device.c,
 * or vk_absent.c where the build has no Vulkan headers. */
#ifndef HCQ_VULKAN_VK_BACKEND_H
#define HCQ_VULKAN_VK_BACKEND_H

#include "hcq/device.h"
#include "hcq/program.h"
#include "hcq/status.h"

void hcq__vk_query(hcq_device_info_t *info);
HCQ_MUST_USE hcq_status_t hcq__vk_device_create(int index, const hcq_device_options_t *opts,
                                                hcq_device_t *dev);
/* The row's binary_compile: GLSL (or "#spirv" text) to SPIR-V, without a device. */
HCQ_MUST_USE hcq_status_t hcq__vk_binary_compile(const char *entry, const char *source,
                                                 hcq_binary_format_t format, const char *arch,
                                                 void **out, size_t *out_size);

#endif
