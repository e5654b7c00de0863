/* Vulkan kernel source helpers shared by the backend and builds without it. */
#ifndef HCQ_VK_SOURCE_H
#define HCQ_VK_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#define HCQ__VK_MAX_SPIRV_BYTES (64u << 20)

/* The text every GLSL kernel source is compiled after. */
const char *hcq__vk_glsl_prelude(void);
/* Decodes base64 text (whitespace ignored, '=' padding optional) into a new allocation; NULL and
 * a reason when malformed. */
uint8_t *hcq__vk_b64_decode(const char *text, size_t *out_len, const char **why);

#endif
