/* Vulkan kernel sources without the Vulkan headers: the GLSL prelude (hcq/vulkan.h), and SPIR-V
 * carried as text ("#spirv", then the module in base64: core/binary.h) so that it travels wherever
 * source text does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcq/vulkan.h"
#include "vulkan/vk_source.h"

static const char k_prelude[] =
    "#version 460\n"
    "#extension GL_EXT_buffer_reference : require\n"
    "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n"
    "layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;\n"
    "layout(push_constant, std430) uniform hcq_push_block { uint64_t bufs; uint64_t vals; } "
    "hcq_push;\n"
    "layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer hcq_u64_array { "
    "uint64_t v[]; };\n"
    "layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer hcq_i32_array { "
    "int v[]; };\n"
    "uint64_t hcq_buf(uint i) { return hcq_u64_array(hcq_push.bufs).v[i]; }\n"
    "int hcq_val(uint i) { return hcq_i32_array(hcq_push.vals).v[i]; }\n";

const char *hcq__vk_glsl_prelude(void) { return k_prelude; }
const char *hcq_vulkan_glsl_prelude(void) { return k_prelude; }

/* ---- public: SPIR-V given directly ---- */

/* The general call's text form ("#spirv" and base64) is this function's, so they are one path. */
hcq_status_t hcq_program_create_spirv(hcq_device_t *device, const char *entry, const void *code,
                                      size_t size, hcq_program_t **out_program) {
  if (out_program) *out_program = NULL;
  if (code && size > HCQ__VK_MAX_SPIRV_BYTES)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "hcq_program_create_spirv: %zu bytes of SPIR-V, at most %u", size,
                           HCQ__VK_MAX_SPIRV_BYTES);
  return hcq_program_create_binary(device, HCQ_BINARY_SPIRV, code, size, entry, out_program);
}
