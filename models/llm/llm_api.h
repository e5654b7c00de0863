/* What the hcq tool needs of the public library (hcq/llm.h) beyond it: opening in two steps (the
 * model and tokenizer first, so that the prompt's length can choose the context; then the decoder),
 * the decoder options the public API does not offer (two devices, two MPI ranks), and the decoder
 * and tokenizer themselves for --bench and --json. Not installed. */
#ifndef HCQ_LLM_API_H
#define HCQ_LLM_API_H

#include <hcq/llm.h>

#include "llm.h"
#include "tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model's file read and checked and its tokenizer built; no device yet (tokenize, detokenize
 * and chat_prompt work; generation does not). options as hcq_llm_open's (may be NULL). */
HCQ_MUST_USE hcq_status_t llm_api_load(const char *model, const hcq_llm_options_t *options,
                                       hcq_llm_t **out);
/* The decoder on the devices, captured unless the options said eager; the model file is closed.
 * decoder: the decoder options (kind, ctx and max_batch from hcq_llm_open's options when NULL). */
HCQ_MUST_USE hcq_status_t llm_api_start(hcq_llm_t *llm, const llm_decoder_options_t *decoder);

/* hcq_llm_chat_prompt's text, malloc'd (*out), in one rendering. */
HCQ_MUST_USE hcq_status_t llm_api_chat_text(const hcq_llm_t *llm, const hcq_llm_message_t *messages,
                                            size_t n, const char *template_name, char **out);

llm_decoder_t *llm_api_decoder(hcq_llm_t *llm); /* NULL before llm_api_start */
const llm_tokenizer_t *llm_api_tokenizer(const hcq_llm_t *llm);
const llm_config_t *llm_api_config(const hcq_llm_t *llm);
uint64_t llm_api_file_bytes(const hcq_llm_t *llm);
/* INVALID_ARGUMENT naming the field (messages start with who) for options hcq_llm_generate refuses.
 */
HCQ_MUST_USE hcq_status_t llm_api_check_options(const char *who,
                                                const hcq_llm_generate_options_t *o);
/* The decoder's sampler for checked options: greedy at temperature 0, penalties only where some
 * apply (penalty_last_n 0: 64, -1: ctx). */
llm_sampler_t llm_api_sampler(const hcq_llm_sampling_t *s, int ctx);
/* id's log-probability among vocab logits l (their log-softmax: before any sampling stage) and the
 * ntop (0 .. HCQ_LLM_MAX_LOGPROBS) highest, higher first, the lower id on ties. */
void llm_logprob_of(const float *l, int vocab, int32_t id, int ntop, hcq_llm_logprob_t *out);

/* hcq_llm_generate with, under two ranks, the agreement on the end (llm_generate_options_t's
 * agree_end; NULL otherwise). */
HCQ_MUST_USE hcq_status_t llm_api_generate(hcq_llm_t *llm, const int32_t *prompt, size_t n,
                                           const hcq_llm_generate_options_t *options,
                                           bool (*agree_end)(void *ctx, bool ended),
                                           hcq_llm_result_t *out);

#ifdef __cplusplus
}
#endif
#endif
