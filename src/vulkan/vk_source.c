/* Vulkan kernel sources without the Vulkan headers: the GLSL prelude (SPEC 2), and SPIR-V carried
 * as text ("#spirv", then the module in base64) so that it travels wherever source text does. */
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
    "layout(push_constant, std430) uniform hcq_push_block { uint64_t bufs; uint64_t vals; } hcq_push;\n"
    "layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer hcq_u64_array { uint64_t v[]; };\n"
    "layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer hcq_i32_array { int v[]; };\n"
    "uint64_t hcq_buf(uint i) { return hcq_u64_array(hcq_push.bufs).v[i]; }\n"
    "int hcq_val(uint i) { return hcq_i32_array(hcq_push.vals).v[i]; }\n";

const char *hcq__vk_glsl_prelude(void) { return k_prelude; }
const char *hcq_vulkan_glsl_prelude(void) { return k_prelude; }

/* ---- base64 (the "#spirv" source form) ---- */

static const char k_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(char c) {
  const char *p = c ? strchr(k_b64, c) : NULL;
  return p ? (int)(p - k_b64) : -1;
}

/* Decodes base64 text (whitespace ignored, '=' padding optional); NULL and a reason when malformed. */
uint8_t *hcq__vk_b64_decode(const char *text, size_t *out_len, const char **why) {
  size_t cap = strlen(text) / 4 * 3 + 3, len = 0;
  uint8_t *out = malloc(cap ? cap : 1);
  if (!out) {
    *why = "out of memory";
    return NULL;
  }
  uint32_t acc = 0;
  int bits = 0;
  bool padding = false;
  for (const char *c = text; *c; c++) {
    if (*c == ' ' || *c == '\n' || *c == '\r' || *c == '\t') continue;
    if (*c == '=') {
      padding = true;
      continue;
    }
    int v = b64_value(*c);
    if (v < 0 || padding) {
      free(out);
      *why = padding ? "text after the '=' padding" : "a character that is not base64";
      return NULL;
    }
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[len++] = (uint8_t)(acc >> bits);
    }
  }
  *out_len = len;
  return out;
}

static char *b64_encode(const uint8_t *data, size_t n) {
  char *out = malloc(n / 3 * 4 + 8 + n / 57 + 2);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)data[i] << 16 | (i + 1 < n ? (uint32_t)data[i + 1] << 8 : 0) | (i + 2 < n ? data[i + 2] : 0);
    out[o++] = k_b64[v >> 18];
    out[o++] = k_b64[(v >> 12) & 63];
    out[o++] = i + 1 < n ? k_b64[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? k_b64[v & 63] : '=';
    if ((i / 3 + 1) % 19 == 0) out[o++] = '\n';
  }
  out[o] = '\0';
  return out;
}

/* ---- public: SPIR-V given directly ---- */

hcq_status_t hcq_program_create_spirv(hcq_device_t *device, const char *entry, const void *code, size_t size,
                                      hcq_program_t **out_program) {
  if (!out_program) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_program_create_spirv: out_program is NULL");
  *out_program = NULL;
  if (!code || size == 0) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_program_create_spirv: no code");
  if (size > HCQ__VK_MAX_SPIRV_BYTES)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "hcq_program_create_spirv: %zu bytes of SPIR-V, at most %u", size,
                           HCQ__VK_MAX_SPIRV_BYTES);
  char *b64 = b64_encode(code, size);
  char *text = b64 ? malloc(strlen(b64) + 8) : NULL;
  if (!text) {
    free(b64);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory loading SPIR-V");
  }
  sprintf(text, "#spirv\n%s", b64);
  free(b64);
  hcq_status_t st = hcq_program_create(device, entry, text, out_program);
  free(text);
  return st;
}
