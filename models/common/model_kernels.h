/* Building a model's kernels for a device: the models write each kernel set once per kernel
 * language and pick the one the device kind's backend compiles (hcq_device_kind_kernel_caps), never
 * by naming a kind, so a new backend that compiles one of these languages runs the models as is. */
#ifndef HCQ_MODELS_KERNELS_H
#define HCQ_MODELS_KERNELS_H

#include <hcq/hcq.h>
#include <stddef.h>

/* The languages the models' kernels are written in. */
typedef enum model_kernel_lang {
  MODEL_KERNELS_C,    /* C with the CPU ABI (hcq/program.h) */
  MODEL_KERNELS_GLSL, /* GLSL compute: one main() per source, so one source per entry
                         (KERNEL_<entry>) */
  MODEL_KERNELS_CUDA, /* CUDA C */
  MODEL_KERNELS_MSL,  /* Metal Shading Language */
  MODEL_KERNELS_NONE, /* a kind that compiles none of them; also the count of the above */
} model_kernel_lang_t;

/* The language devices of kind compile (its HCQ_CAP_COMPILE_* kernel cap), or MODEL_KERNELS_NONE.
 */
model_kernel_lang_t model_kernel_lang(hcq_device_kind_t kind);
/* "C", "GLSL", "CUDA C", "MSL"; "no kernel language" for MODEL_KERNELS_NONE. */
const char *model_kernel_lang_name(model_kernel_lang_t lang);

/* sources[lang] is the model's kernel source in lang (NULL: none written in it). The one for kind
 * in *out, or UNIMPLEMENTED naming model, the kind and its language when the model has none. */
hcq_status_t model_kernel_source(const char *model, const char *const sources[MODEL_KERNELS_NONE],
                                 hcq_device_kind_t kind, const char **out);

/* Compiles entry on dev from defines (the model's #define header), then, for GLSL, the define that
 * picks entry's main() ("#define KERNEL_<entry>"), then prefix (may be NULL) and body. hcq's
 * message names the program, the device and the compiler's complaint when it does not compile. */
hcq_status_t model_program_create(hcq_device_t *dev, model_kernel_lang_t lang, const char *defines,
                                  const char *prefix, const char *body, const char *entry,
                                  hcq_program_t **out);

/* A buffer of bytes (at least 4) on dev labelled "label" or, for layer >= 0, "label[layer]" (what
 * profiles and errors show), holding a copy of src when src is not NULL (else zeros). */
hcq_status_t model_upload(hcq_device_t *dev, const void *src, size_t bytes, const char *label,
                          int layer, hcq_buffer_t **out);

#endif
