/* The llm decoder's private state, shared by its files: decoder.c (create, destroy, the weights and
 * buffers), decoder_items.c (the kernels' programs, the item lists and their launch geometry) and
 * decoder_run.c (eager runs, capture, replay, generation). */
#ifndef HCQ_LLM_DECODER_INTERNAL_H
#define HCQ_LLM_DECODER_INTERNAL_H

/* Decoding steps queued ahead of the one whose token the host reads (llm_generate), and replays
 * of the captured step in flight: on a busy machine the host may wait several milliseconds for a
 * core when its token is ready, and the devices go on with the steps already queued meanwhile. */
#define LLM_STEPS_AHEAD 4

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llm.h"
#include "quant.h"

enum { MAX_PROGRAMS = 128 };

/* One device's activations, rotary tables and pass info (each device holds its own): kraw holds k
 * between the product and llm_rope_heads, xb a layer output before its post-norm (post_norms),
 * rope_swa the sliding-window layers' table (rope where the model has none). */
typedef struct dev_state {
  hcq_device_t *dev;
  hcq_buffer_t *x, *xf, *xq, *q, *att, *attq, *hf, *hq, *rope, *info, *kraw, *xb, *rope_swa;
} dev_state_t;

/* A layer's buffers: its matrices, its norms' weights and its caches; then what some architectures
 * add (biases, per-head norms, post-norms: NULL where the model has none). */
enum {
  W_Q,
  W_K,
  W_V,
  W_O,
  W_GATE,
  W_UP,
  W_DOWN,
  N_ATTN_NORM,
  N_FFN_NORM,
  K_CACHE,
  V_CACHE,
  B_Q,
  B_K,
  B_V,
  N_Q,
  N_K,
  N_POST_ATTN,
  N_POST_FFN,
  LAYER_BUFS
};

typedef struct layer_state {
  hcq_buffer_t *b[LAYER_BUFS];
  llm_layout_t layout[W_DOWN + 1];
} layer_state_t;

/* The sampler's parameters as the kernels read them (kernels.c's sampler_t; gpu_abi.h): a batch
 * decoder holds one a choosing row, packed (an array of this struct). */
typedef struct llm_sampler_params {
  float temperature, top_p;
  int32_t top_k;
  uint32_t seed_lo, seed_hi;
  float min_p, repeat_penalty, frequency_penalty, presence_penalty;
  int32_t penalty_last_n;
} llm_sampler_params_t;
/* A batch decoder's info region of one parity (kernels.c, BATCH), in words. */
#define LLM_BATCH_REGION_WORDS(rows) (4 + 5 * (size_t)(rows))
#define LLM_SAMPLER_BYTES (sizeof(llm_sampler_params_t) > 64 ? sizeof(llm_sampler_params_t) : 64)
/* INVALID_ARGUMENT for parameters out of range (decoder_run.c). */
HCQ_MUST_USE hcq_status_t llm_sampler_params(const llm_sampler_t *s, llm_sampler_params_t *out);

/* One item's buffers, outputs and values, which its exec item points into (decoder_items.c). */
typedef struct item_args item_args_t;

typedef struct item_list {
  hcq_exec_item_t *items;
  item_args_t *args;
  size_t n, cap, kernels;
} item_list_t;

typedef struct program_entry {
  int dev;
  char *key; /* entry and defines */
  hcq_program_t *prog;
} program_entry_t;

/* The decoder owns every device, buffer, program, expression, list and jit it points to;
 * llm_decoder_destroy releases them (decoder.c). */
struct llm_decoder {
  llm_config_t c;
  hcq_device_kind_t kind;
  int ndev, split, ctx, max_batch, isa_cap, cls_groups, ranks;
  int ctx_alloc;   /* the positions the caches and tables hold: ctx rounded up to whole chunks (ctx:
                      those used) */
  size_t captures; /* lists captured so far */
  int slots; /* a batch decoder's sequences (0: single-sequence); its one list: `pass`; caches:
                slots x ctx_alloc */
  bool profile, reads_tokens, direct;
  dev_state_t d[2];
  layer_state_t *layers;
  llm_layout_t emb_layout, cls_layout;
  hcq_buffer_t *emb, *cls, *out_norm, *tokens, *logits, *best, *params, *scratch;
  hcq_buffer_t *history; /* a batch decoder's: each slot's tokens by position, as the caches (the
                            penalties' history) */
  program_entry_t programs[MAX_PROGRAMS];
  int nprograms;
  hcq_expr_t *pos, *p0, *n, *choose, *exprs[16];
  int nexprs;
  item_list_t step, pass;
  hcq_jit_t *step_jit, *pass_jit;
  const volatile int32_t
      *tokens_host; /* the tokens buffer mapped (hcq_buffer_map), where it can be */
  hcq_fence_t *fences[LLM_STEPS_AHEAD]; /* the last steps queued (llm_generate) */
};

/* decoder.c */

/* Writes size bytes from src at offset in buf: straight into its memory where the devices' memory
 * is the host's (the devices idle), elsewhere as a copy. */
HCQ_MUST_USE hcq_status_t llm_write_buffer(const llm_decoder_t *m, hcq_buffer_t *buf,
                                           uint64_t offset, const void *src, uint64_t size);

/* decoder_items.c */

/* Rows of the classifier a group computes on kind (one entry of the best logits per group). */
int llm_cls_rows(hcq_device_kind_t kind);
/* Builds m->step and m->pass (compiling the programs they run), once the buffers exist. */
HCQ_MUST_USE hcq_status_t llm_build_item_lists(llm_decoder_t *m);
void llm_item_list_free(item_list_t *L);

#endif
