/* What hcq runs, by architecture and tensor type (support.h). */
#include <stdio.h>
#include <string.h>

#include "model_kernels.h"
#include "quant.h"
#include "support.h"

/* Every kind's kernels have every architecture's entries and flags (gpu_abi.h). */
static const char *const k_architectures[] = {"llama", "qwen2", "qwen3", "gemma3"};

/* The CPU kernels read every type quant.h repacks; the GPU kinds those llm_gpu_pack lays out. */
static const uint32_t k_cpu_types[] = {
    GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q4_0,   GGML_TYPE_Q4_1,
    GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K,   GGML_TYPE_Q3_K,
    GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *const *architectures_of(hcq_device_kind_t kind, size_t *n) {
  (void)kind;
  *n = COUNT(k_architectures);
  return k_architectures;
}

bool llm_type_supported(uint32_t type, hcq_device_kind_t kind) {
  bool cpu = false;
  for (size_t i = 0; i < COUNT(k_cpu_types); i++) cpu |= k_cpu_types[i] == type;
  return model_kernel_lang(kind) == MODEL_KERNELS_C ? cpu
                                                    : cpu && llm_gpu_has_layout((ggml_type_t)type);
}

bool llm_architecture_supported(const char *arch, hcq_device_kind_t kind) {
  size_t n;
  const char *const *names = architectures_of(kind, &n);
  for (size_t i = 0; i < n && arch; i++)
    if (!strcmp(names[i], arch)) return true;
  return false;
}

/* "F32, F16, Q4_0, Q4_1 and Q8_0": what kind reads, for messages. */
static void list_types(hcq_device_kind_t kind, char *out, size_t size) {
  uint32_t types[64];
  size_t n = 0, used = 0;
  for (uint32_t t = 0; t < 64; t++)
    if (llm_type_supported(t, kind)) types[n++] = t;
  out[0] = 0;
  for (size_t i = 0; i < n && used < size; i++)
    used += (size_t)snprintf(out + used, size - used, "%s%s",
                             i == 0       ? ""
                             : i + 1 == n ? " and "
                                          : ", ",
                             ggml_type_name(types[i]));
}

static void list_architectures(hcq_device_kind_t kind, char *out, size_t size) {
  size_t n, used = 0;
  const char *const *names = architectures_of(kind, &n);
  out[0] = 0;
  for (size_t i = 0; i < n && used < size; i++)
    used += (size_t)snprintf(out + used, size - used, "%s%s",
                             i == 0       ? ""
                             : i + 1 == n ? " and "
                                          : ", ",
                             names[i]);
}

hcq_status_t llm_model_check(const gguf_file_t *g, hcq_device_kind_t kind) {
  gguf_str_t arch_str;
  hcq_status_t st = gguf_get_str(g, "general.architecture", &arch_str);
  if (st) {
    hcq_status_code_t code = hcq_status_code(st);
    hcq_status_destroy(st);
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: general.architecture is %s (a GGUF model names its architecture)",
                           gguf_path(g), code == HCQ_NOT_FOUND ? "missing" : "not a string");
  }
  char arch[64], list[256];
  snprintf(arch, sizeof(arch), "%.*s", (int)(arch_str.len < 63 ? arch_str.len : 63), arch_str.ptr);
  if (arch_str.len > 63 || memchr(arch_str.ptr, 0, arch_str.len) ||
      !llm_architecture_supported(arch, kind)) {
    list_architectures(kind, list, sizeof(list));
    return hcq_status_make(HCQ_UNIMPLEMENTED, "%s: architecture \"%s\": hcq runs %s on %s",
                           gguf_path(g), arch, list, hcq_device_kind_name(kind));
  }
  for (size_t i = 0; i < gguf_tensor_count(g); i++) {
    const gguf_tensor_t *t = gguf_tensor_at(g, i);
    if (t->n_dims != 2 || llm_type_supported(t->type, kind)) continue;
    list_types(kind, list, sizeof(list));
    return hcq_status_make(
        HCQ_UNIMPLEMENTED, "%s: tensor %s is %s, which hcq's %s kernels do not read (they read %s)",
        gguf_path(g), t->name, ggml_type_name(t->type), hcq_device_kind_name(kind), list);
  }
  return NULL;
}
