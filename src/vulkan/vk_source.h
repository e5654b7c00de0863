/* Vulkan kernel source helpers shared by the backend and builds without it. */
#ifndef HCQ_VK_SOURCE_H
#define HCQ_VK_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#define HCQ__VK_MAX_SPIRV_BYTES (64u << 20)

/* The text every GLSL kernel source is compiled after. */
const char *hcq__vk_glsl_prelude(void);

#endif
