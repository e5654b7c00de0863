/* Whether hcq can run a GGUF model, asked before anything is loaded: `hcq inspect` prints the
 * answer per device kind, and the model layer may refuse with it.
 *
 * The answer is a first version of what the decoder runs: the architecture and the type of every
 * matrix. A model that passes may still be refused by llm_model_open for its shape (a missing
 * tensor, rope scaling, ...), which needs the architecture's own checks. */
#ifndef HCQ_LLM_SUPPORT_H
#define HCQ_LLM_SUPPORT_H

#include <hcq/hcq.h>
#include <stdbool.h>

#include "gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether kind's kernels read matrices of type: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q2_K..Q6_K, IQ4_NL and IQ4_XS (on the GPU kinds: those llm_gpu_pack lays out, today the same). */
bool llm_type_supported(uint32_t type, hcq_device_kind_t kind);
/* Whether kind runs general.architecture arch: llama, qwen2, qwen3 and gemma3 on CPU and VULKAN,
 * llama on CUDA and METAL. */
bool llm_architecture_supported(const char *arch, hcq_device_kind_t kind);

/* NULL when kind runs g's architecture and reads every 2-D tensor's type; else UNIMPLEMENTED naming
 * the file and the architecture or the first tensor and its type (INVALID_ARGUMENT when
 * general.architecture is missing or not a string). */
HCQ_MUST_USE hcq_status_t llm_model_check(const gguf_file_t *g, hcq_device_kind_t kind);

#ifdef __cplusplus
}
#endif
#endif
