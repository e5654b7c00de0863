/* A llama2-style transformer decoder on hcq: the workload graphs exist for.
 *
 * Three parts, each usable alone:
 *  - checkpoints in the llama2.c "legacy" layout (read with full validation, generated, written);
 *  - a tokenizer in the same project's format (ids to text);
 *  - the decoder: the forward pass as hcq kernels, one step = one token, on CPU (kernels.c), Vulkan
 *    (kernels.glsl), CUDA (kernels.cu) or Metal (kernels.metal) devices: one item list for all,
 *    only the kernel sources and their launch geometry differ by kind. The position `pos` is a
 *    symbolic variable: the attention launch dims and the cache offsets depend on it, so one
 *    captured step replays every step. The greedy argmax runs on the device and writes the next
 *    token where the next step's embedding reads it, so decoding needs no host round trip per
 *    token.
 *
 * Errors are hcq statuses: INVALID_ARGUMENT for a bad file (the message names the file and what is
 * wrong with it), OUT_OF_MEMORY, and whatever the hcq calls return. Threads: one thread at a time
 * per object.
 */
#ifndef HCQ_LLAMA2_H
#define HCQ_LLAMA2_H

#include <hcq/hcq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The seven int32 of the checkpoint header, with vocab_size made positive. */
typedef struct llama2_config {
  int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
  bool shared_classifier; /* the classifier is the token embedding (header vocab_size > 0) */
} llama2_config_t;

static inline int llama2_head_size(const llama2_config_t *c) { return c->dim / c->n_heads; }
static inline int llama2_kv_dim(const llama2_config_t *c) {
  return c->dim / c->n_heads * c->n_kv_heads;
}

/* Pointers into one float array, in file order. Layer tensors hold all layers back to back:
 * wq is n_layers x (dim x dim), row-major with the output index first. */
typedef struct llama2_weights {
  const float *token_embedding; /* vocab x dim */
  const float *rms_att;         /* layers x dim */
  const float *wq, *wk, *wv, *wo;
  const float *rms_ffn;      /* layers x dim */
  const float *w1, *w2, *w3; /* w1, w3: layers x hidden x dim; w2: layers x dim x hidden */
  const float *rms_final;    /* dim */
  const float *classifier;   /* vocab x dim (== token_embedding when shared) */
} llama2_weights_t;

typedef struct llama2_checkpoint {
  llama2_config_t config;
  llama2_weights_t weights;
  float *data; /* owned: every float after the header */
  size_t data_floats;
} llama2_checkpoint_t;

/* The generated shapes of `hcq demo --size`. */
typedef enum llama2_shape { LLAMA2_SHAPE_SMALL, LLAMA2_SHAPE_15M } llama2_shape_t;

/* Validates a header (dimensions positive and bounded, dim divisible by n_heads, n_heads by
 * n_kv_heads, an even head size for the rotary pairs) and stores the config. what names the
 * source in messages. */
HCQ_MUST_USE hcq_status_t llama2_config_from_header(const int32_t header[7], const char *what,
                                                    llama2_config_t *out_config);
/* Bytes a checkpoint of this config has: header, weights, RoPE tables, separate classifier. */
uint64_t llama2_checkpoint_bytes(const llama2_config_t *config);

/* Reads and validates a checkpoint file: a short file, a bad header and a size that does not match
 * the header are INVALID_ARGUMENT naming the file and the problem. */
HCQ_MUST_USE hcq_status_t llama2_checkpoint_load(const char *path, llama2_checkpoint_t *out);
/* A deterministic model of the given shape (same bytes on every machine for one seed), with
 * weights scaled so that the logits are spread out and greedy decoding does not lock onto one
 * token. */
HCQ_MUST_USE hcq_status_t llama2_checkpoint_generate(llama2_shape_t shape, uint64_t seed,
                                                     llama2_checkpoint_t *out);
/* Writes the checkpoint in the legacy layout (RoPE tables written as zeros: nothing reads them). */
HCQ_MUST_USE hcq_status_t llama2_checkpoint_write(const llama2_checkpoint_t *ckpt,
                                                  const char *path);
void llama2_checkpoint_free(llama2_checkpoint_t *ckpt);

/* ---- tokenizer ---- */
typedef struct llama2_tokenizer {
  int vocab_size;
  char **pieces; /* NUL-terminated; a piece may hold raw bytes written as "<0xAB>" */
} llama2_tokenizer_t;

/* Reads a tokenizer file (int32 max_token_length, then per token: float score, int32 length,
 * bytes). It must hold exactly vocab_size tokens for the model. */
HCQ_MUST_USE hcq_status_t llama2_tokenizer_load(const char *path, int vocab_size,
                                                llama2_tokenizer_t *out);
void llama2_tokenizer_free(llama2_tokenizer_t *tok);
/* The text of token after prev: the leading space after BOS (token 1) is dropped, "<0xAB>" becomes
 * the byte, and a lone byte that is not printable or white space becomes "". The result lives in
 * tok or in *scratch (at least 2 bytes). */
const char *llama2_tokenizer_piece(const llama2_tokenizer_t *tok, int prev, int token,
                                   char scratch[2]);

/* ---- the decoder on hcq ---- */
typedef struct llama2_decoder llama2_decoder_t;

typedef struct llama2_decoder_options {
  int devices;       /* 1 or 2: with 2, the second half of the layers runs on KIND:1 */
  size_t batch_size; /* capture: first JIT batch size; 0 puts the whole step in one graph */
  bool profile; /* capture with per-item timestamps (hcq_graph_profile on llama2_decoder_jit) */
  hcq_device_kind_t kind; /* CPU (0, the default), VULKAN (kernels.glsl), CUDA (kernels.cu) or METAL
                             (kernels.metal): the devices are KIND:0 and, with 2, KIND:1. Other
                             kinds: UNIMPLEMENTED */
  int ranks; /* 2 under the MPI layer (hcq/mpi.h; with devices 2): device d is rank d's KIND:0,
                "d/KIND:0", so the layers split over two processes; every rank creates
                the decoder and runs the same steps; tokens are read on rank 0 */
} llama2_decoder_options_t;

/* Opens the devices, uploads the weights, compiles the kernels (specialised to the config, cached
 * on disk by hcq) and builds the step's exec items. ckpt may be freed afterwards. */
HCQ_MUST_USE hcq_status_t llama2_decoder_create(const llama2_checkpoint_t *ckpt,
                                                const llama2_decoder_options_t *options,
                                                llama2_decoder_t **out);
/* Waits for the devices, frees everything, closes the devices. NULL is accepted. */
HCQ_MUST_USE hcq_status_t llama2_decoder_destroy(llama2_decoder_t *dec);

/* Restarts decoding: token 1 (BOS) at position 0. Positions are overwritten before they are read,
 * so the caches need no clearing. */
HCQ_MUST_USE hcq_status_t llama2_decoder_reset(llama2_decoder_t *dec);
/* Sets the token at position pos, the input of the step at pos (teacher forcing: the step before
 * wrote it otherwise). Waits for the devices first. */
HCQ_MUST_USE hcq_status_t llama2_decoder_set_token(llama2_decoder_t *dec, int pos, int32_t token);
/* Runs the step at pos (0 <= pos < seq_len) eagerly, kernel by kernel, without waiting. */
HCQ_MUST_USE hcq_status_t llama2_decoder_step_eager(llama2_decoder_t *dec, int pos);
/* Runs the step at pos under an hcq capture and keeps the result for llama2_decoder_step_graph.
 * The step runs (and produces its token) like an eager one. */
HCQ_MUST_USE hcq_status_t llama2_decoder_capture(llama2_decoder_t *dec, int pos);
/* Replays the captured step at pos, without waiting (steps queue back to back, like eager
 * launches). FAILED_PRECONDITION before a capture. */
HCQ_MUST_USE hcq_status_t llama2_decoder_step_graph(llama2_decoder_t *dec, int pos);
/* Waits until every step queued so far has finished. */
HCQ_MUST_USE hcq_status_t llama2_decoder_sync(llama2_decoder_t *dec);
/* Copies the tokens generated by steps 0..n-1 (the token after position i is out[i]). Waits. */
HCQ_MUST_USE hcq_status_t llama2_decoder_tokens(llama2_decoder_t *dec, int32_t *out, int n);
/* Copies the logits of the last step (vocab_size floats). Waits. */
HCQ_MUST_USE hcq_status_t llama2_decoder_logits(llama2_decoder_t *dec, float *out);

/* How fast the decoder runs one way (eager launches or replays of the captured step). */
typedef struct llama2_timing {
  double tok_s; /* median over repetitions of steps / (first submit .. all done), steps queued back
                   to back */
  double host_us; /* median over steps of the host's time to submit one step, the devices idle
                     before it */
} llama2_timing_t;

/* Decodes `steps` tokens from BOS reps + 1 times (the first warms caches and is not counted), then
 * once more waiting for the devices before each step to time the host's own part; the tokens of
 * that last decode go to tokens (steps of them; NULL: not read, as on a rank that does not hold
 * them). graph: replays (after llama2_decoder_capture).
 * reps is 1..LLAMA2_MAX_REPS. */
#define LLAMA2_MAX_REPS 50
HCQ_MUST_USE hcq_status_t llama2_decoder_time(llama2_decoder_t *dec, bool graph, int steps,
                                              int reps, llama2_timing_t *out, int32_t *tokens);

/* Kernel launches and transfers per step; the capture report (NULL before a capture). */
size_t llama2_decoder_items_per_step(const llama2_decoder_t *dec);
size_t llama2_decoder_kernels_per_step(const llama2_decoder_t *dec);
const hcq_jit_report_t *llama2_decoder_report(const llama2_decoder_t *dec);
const llama2_config_t *llama2_decoder_config(const llama2_decoder_t *dec);
/* The captured step (borrowed; NULL before a capture). */
hcq_jit_t *llama2_decoder_jit(const llama2_decoder_t *dec);

#ifdef __cplusplus
}
#endif
#endif
