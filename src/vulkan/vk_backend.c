/* The Vulkan row of the backend table (vk_device.c and vk_loader.c, or vk_absent.c in builds
 * without the Vulkan headers, define what it points at). */
#include "vulkan/vk_backend.h"
#include "core/backend.h"

const hcq__backend_t hcq__vk_backend = {
    .kind = HCQ_DEVICE_VULKAN,
    .source_key = "glsl",
    .query = hcq__vk_query,
    .open = hcq__vk_device_create,
    .binary_formats = 1u << HCQ_BINARY_SPIRV,
    .kernel_caps = HCQ_CAP_COMPILE_GLSL,
    .binary_compile = hcq__vk_binary_compile,
};
