#include "model_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

model_kernel_lang_t model_kernel_lang(hcq_device_kind_t kind) {
  uint32_t caps = hcq_device_kind_kernel_caps(kind);
  if (caps & HCQ_CAP_COMPILE_C) return MODEL_KERNELS_C;
  if (caps & HCQ_CAP_COMPILE_GLSL) return MODEL_KERNELS_GLSL;
  if (caps & HCQ_CAP_COMPILE_CUDA) return MODEL_KERNELS_CUDA;
  if (caps & HCQ_CAP_COMPILE_METAL) return MODEL_KERNELS_MSL;
  return MODEL_KERNELS_NONE;
}

const char *model_kernel_lang_name(model_kernel_lang_t lang) {
  static const char *const names[] = {"C", "GLSL", "CUDA C", "MSL"};
  return (unsigned)lang < MODEL_KERNELS_NONE ? names[lang] : "no kernel language";
}

hcq_status_t model_kernel_source(const char *model, const char *const sources[MODEL_KERNELS_NONE],
                                 hcq_device_kind_t kind, const char **out) {
  model_kernel_lang_t lang = model_kernel_lang(kind);
  *out = lang < MODEL_KERNELS_NONE ? sources[lang] : NULL;
  if (*out) return NULL;
  char have[64] = "";
  size_t used = 0;
  for (int l = 0; l < MODEL_KERNELS_NONE && used < sizeof(have); l++)
    if (sources[l])
      used += (size_t)snprintf(have + used, sizeof(have) - used, "%s%s", used ? ", " : "",
                               model_kernel_lang_name((model_kernel_lang_t)l));
  return hcq_status_make(
      HCQ_UNIMPLEMENTED,
      "%s: no kernels for %s devices, which compile %s (the model's kernels: %s)", model,
      hcq_device_kind_name(kind), model_kernel_lang_name(lang), have);
}

hcq_status_t model_program_create(hcq_device_t *dev, model_kernel_lang_t lang, const char *defines,
                                  const char *prefix, const char *body, const char *entry,
                                  hcq_program_t **out) {
  char main_define[96] = "";
  if (lang == MODEL_KERNELS_GLSL) /* a GLSL source has one main(): KERNEL_<entry> picks it */
    snprintf(main_define, sizeof(main_define), "#define KERNEL_%s\n", entry);
  if (!prefix) prefix = "";
  size_t len = strlen(defines) + strlen(main_define) + strlen(prefix) + strlen(body) + 1;
  char *src = malloc(len);
  if (!src)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory building the kernel source of %s",
                           entry);
  snprintf(src, len, "%s%s%s%s", defines, main_define, prefix, body);
  hcq_status_t st = hcq_program_create(dev, entry, src, out);
  free(src);
  return st;
}

hcq_status_t model_upload(hcq_device_t *dev, const void *src, size_t bytes, const char *label,
                          int layer, hcq_buffer_t **out) {
  hcq_status_t st = hcq_buffer_create(dev, bytes ? bytes : 4, out);
  if (st) return st;
  char name[64];
  if (layer >= 0)
    snprintf(name, sizeof(name), "%s[%d]", label, layer);
  else
    snprintf(name, sizeof(name), "%s", label);
  hcq_buffer_set_label(*out, name);
  return src ? hcq_buffer_copyin(*out, 0, src, bytes) : NULL;
}
