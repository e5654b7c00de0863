/* Tiny llama models in GGUF files, written by the tests (models/llm): random weights from a seed,
 * each matrix in the type asked for, so every kernel layout and odd shape can be checked against
 * the plain C reference (llm_reference.h). Header-only. */
#ifndef HCQ_LLM_TINY_H
#define HCQ_LLM_TINY_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model_status.h"
#include "quant.h"

enum {
  TINY_EMB,
  TINY_Q,
  TINY_K,
  TINY_V,
  TINY_O,
  TINY_GATE,
  TINY_UP,
  TINY_DOWN,
  TINY_OUT,
  TINY_MATRICES
};

typedef struct tiny_spec {
  int dim, ffn, layers, heads, kv_heads, vocab;
  ggml_type_t types[TINY_MATRICES]; /* TINY_OUT unused when tied */
  bool tied;
  float rope_base;
  uint64_t seed;
  bool tokenizer; /* a GPT-2 tokenizer (needs vocab 97): ids 0..94 the printable ASCII bytes, 95
                     <|im_start|>, 96 <|im_end|> (the end token); no merges, a ChatML template */
  /* The architecture (NULL: "llama") and what it adds: head_dim (0: dim / heads; else written as
   * key_length and value_length), rope_freqs (llama: a rope_freqs.weight of divisors), window
   * (gemma3: attention.sliding_window) */
  const char *arch;
  int head_dim;
  bool rope_freqs;
  int window;
  const char *omit;   /* a tensor left out (its name) */
  int context_length; /* 0: 256 */
} tiny_spec_t;

static inline float tiny_uniform(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return (float)((*s >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* A rows x cols matrix (cols contiguous) of uniform values in [-scale, scale], in type. */
/* The tensor left out by the spec being written (tiny_build sets it). */
static const char *tiny_omit;

static inline hcq_status_t tiny_matrix(gguf_writer_t *w, const char *name, ggml_type_t type,
                                       int cols, int rows, float scale, uint64_t *seed) {
  size_t row_bytes = (size_t)cols / ggml_block_elems(type) * ggml_block_bytes(type);
  float *x = malloc((size_t)cols * sizeof(float));
  uint8_t *data = malloc(row_bytes * (size_t)rows);
  if (!x || !data) {
    free(x), free(data);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  }
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < cols; c++) x[c] = scale * tiny_uniform(seed);
    llm_quantize_row(type, x, data + (size_t)r * row_bytes, (size_t)cols);
  }
  uint64_t ne[2] = {(uint64_t)cols, (uint64_t)rows};
  hcq_status_t st = tiny_omit && !strcmp(name, tiny_omit)
                        ? NULL
                        : gguf_writer_add_tensor(w, name, type, ne, 2, data);
  free(x), free(data);
  return st;
}

/* n floats around center (norm weights near 1, biases and rope divisors). */
static inline hcq_status_t tiny_vector(gguf_writer_t *w, const char *name, int n, float center,
                                       float spread, uint64_t *seed) {
  float *x = malloc((size_t)n * sizeof(float));
  if (!x) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < n; i++) x[i] = center + spread * tiny_uniform(seed);
  uint64_t ne[1] = {(uint64_t)n};
  hcq_status_t st = tiny_omit && !strcmp(name, tiny_omit)
                        ? NULL
                        : gguf_writer_add_tensor(w, name, GGML_TYPE_F32, ne, 1, x);
  free(x);
  return st;
}

static inline hcq_status_t tiny_norm(gguf_writer_t *w, const char *name, int n, uint64_t *seed) {
  return tiny_vector(w, name, n, 1.0f, 0.25f, seed);
}

/* The head sizes a spec gives: per head (hd), over the key/value heads (kv), over the query heads
 * (qd). */
typedef struct tiny_heads {
  int hd, kv, qd;
} tiny_heads_t;

static inline tiny_heads_t tiny_heads(const tiny_spec_t *s) {
  int hd = s->head_dim ? s->head_dim : s->dim / s->heads;
  return (tiny_heads_t){hd, hd * s->kv_heads, hd * s->heads};
}

/* The architecture's keys: general.*, the shapes, rope and the norm epsilon. */
static inline hcq_status_t tiny_keys(const tiny_spec_t *s, const char *arch, gguf_writer_t *w) {
  int hd = tiny_heads(s).hd;
  char k[96];
#define TINY_KEY(suffix) (snprintf(k, sizeof(k), "%s.%s", arch, suffix), k)
  TRY(gguf_writer_add_str(w, "general.architecture", arch));
  TRY(gguf_writer_add_str(w, "general.name", "tiny test model"));
  TRY(gguf_writer_add_u32(w, TINY_KEY("block_count"), (uint32_t)s->layers));
  TRY(gguf_writer_add_u32(w, TINY_KEY("embedding_length"), (uint32_t)s->dim));
  TRY(gguf_writer_add_u32(w, TINY_KEY("feed_forward_length"), (uint32_t)s->ffn));
  TRY(gguf_writer_add_u32(w, TINY_KEY("attention.head_count"), (uint32_t)s->heads));
  TRY(gguf_writer_add_u32(w, TINY_KEY("attention.head_count_kv"), (uint32_t)s->kv_heads));
  TRY(gguf_writer_add_u32(w, TINY_KEY("context_length"),
                          s->context_length ? (uint32_t)s->context_length : 256));
  TRY(gguf_writer_add_f32(w, TINY_KEY("rope.freq_base"),
                          s->rope_base > 0 ? s->rope_base : 10000.0f));
  TRY(gguf_writer_add_f32(w, TINY_KEY("attention.layer_norm_rms_epsilon"), 1e-5f));
  if (s->head_dim) {
    TRY(gguf_writer_add_u32(w, TINY_KEY("attention.key_length"), (uint32_t)hd));
    TRY(gguf_writer_add_u32(w, TINY_KEY("attention.value_length"), (uint32_t)hd));
  }
  if (s->window)
    TRY(gguf_writer_add_u32(w, TINY_KEY("attention.sliding_window"), (uint32_t)s->window));
#undef TINY_KEY
  return NULL;
}

/* The spec's GPT-2 tokenizer (vocab 97): the printable ASCII bytes, <|im_start|>, <|im_end|>. */
static inline hcq_status_t tiny_tokenizer(gguf_writer_t *w) {
  char text[95][4];
  const char *tokens[97];
  int32_t types[97];
  for (int i = 0; i < 95; i++) {
    if (i == 0)
      strcpy(text[i], "\xc4\xa0"); /* GPT-2's byte-level spelling of a space */
    else
      text[i][0] = (char)(32 + i), text[i][1] = 0;
    tokens[i] = text[i], types[i] = 1;
  }
  tokens[95] = "<|im_start|>", tokens[96] = "<|im_end|>", types[95] = types[96] = 3;
  TRY(gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2"));
  TRY(gguf_writer_add_str(w, "tokenizer.ggml.pre", "gpt-2"));
  TRY(gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", tokens, 97));
  TRY(gguf_writer_add_i32_array(w, "tokenizer.ggml.token_type", types, 97));
  TRY(gguf_writer_add_str_array(w, "tokenizer.ggml.merges", NULL, 0));
  TRY(gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 95));
  TRY(gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 96));
  TRY(gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false));
  TRY(gguf_writer_add_str(w, "tokenizer.chat_template",
                          "{% for message in messages %}{{'<|im_start|>' + message['role'] "
                          "+ '\\n' + message['content'] + "
                          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
                          "%}{{ '<|im_start|>assistant\\n' }}{% endif %}"));
  return NULL;
}

/* Layer l's tensors: attention, its arch's biases and norms, the feed-forward. */
static inline hcq_status_t tiny_layer(const tiny_spec_t *s, const char *arch, int l,
                                      gguf_writer_t *w, uint64_t *seed) {
  bool qwen2 = !strcmp(arch, "qwen2"), qk_norm = !strcmp(arch, "qwen3") || !strcmp(arch, "gemma3"),
       gemma = !strcmp(arch, "gemma3");
  tiny_heads_t h = tiny_heads(s);
  float in_dim = 1.0f / sqrtf((float)s->dim), in_ffn = 1.0f / sqrtf((float)s->ffn);
  char n[64];
#define TINY_NAME(x) (snprintf(n, sizeof(n), "blk.%d.%s.weight", l, x), n)
  TRY(tiny_norm(w, TINY_NAME("attn_norm"), s->dim, seed));
  TRY(tiny_matrix(w, TINY_NAME("attn_q"), s->types[TINY_Q], s->dim, h.qd, 2.0f * in_dim, seed));
  TRY(tiny_matrix(w, TINY_NAME("attn_k"), s->types[TINY_K], s->dim, h.kv, 2.0f * in_dim, seed));
  TRY(tiny_matrix(w, TINY_NAME("attn_v"), s->types[TINY_V], s->dim, h.kv, in_dim, seed));
  TRY(tiny_matrix(w, TINY_NAME("attn_output"), s->types[TINY_O], h.qd, s->dim,
                  1.0f / sqrtf((float)h.qd), seed));
  TRY(tiny_norm(w, TINY_NAME("ffn_norm"), s->dim, seed));
  if (qwen2) {
    snprintf(n, sizeof(n), "blk.%d.attn_q.bias", l);
    TRY(tiny_vector(w, n, h.qd, 0.0f, 0.5f, seed));
    snprintf(n, sizeof(n), "blk.%d.attn_k.bias", l);
    TRY(tiny_vector(w, n, h.kv, 0.0f, 0.5f, seed));
    snprintf(n, sizeof(n), "blk.%d.attn_v.bias", l);
    TRY(tiny_vector(w, n, h.kv, 0.0f, 0.5f, seed));
  }
  if (qk_norm) {
    TRY(tiny_norm(w, TINY_NAME("attn_q_norm"), h.hd, seed));
    TRY(tiny_norm(w, TINY_NAME("attn_k_norm"), h.hd, seed));
  }
  if (gemma) {
    TRY(tiny_norm(w, TINY_NAME("post_attention_norm"), s->dim, seed));
    TRY(tiny_norm(w, TINY_NAME("post_ffw_norm"), s->dim, seed));
  }
  TRY(tiny_matrix(w, TINY_NAME("ffn_gate"), s->types[TINY_GATE], s->dim, s->ffn, 2.0f * in_dim,
                  seed));
  TRY(tiny_matrix(w, TINY_NAME("ffn_up"), s->types[TINY_UP], s->dim, s->ffn, in_dim, seed));
  TRY(tiny_matrix(w, TINY_NAME("ffn_down"), s->types[TINY_DOWN], s->ffn, s->dim, in_ffn, seed));
#undef TINY_NAME
  return NULL;
}

/* Every key and tensor of the spec, in the order the files have always had. */
static inline hcq_status_t tiny_contents(const tiny_spec_t *s, gguf_writer_t *w) {
  uint64_t seed = s->seed * 2654435761u + 1;
  const char *arch = s->arch ? s->arch : "llama";
  TRY(tiny_keys(s, arch, w));
  if (s->tokenizer && s->vocab == 97) TRY(tiny_tokenizer(w));
  float in_dim = 1.0f / sqrtf((float)s->dim);
  TRY(tiny_matrix(w, "token_embd.weight", s->types[TINY_EMB], s->dim, s->vocab, 1.0f, &seed));
  TRY(tiny_norm(w, "output_norm.weight", s->dim, &seed));
  if (!s->tied)
    TRY(tiny_matrix(w, "output.weight", s->types[TINY_OUT], s->dim, s->vocab, 2.0f * in_dim,
                    &seed));
  if (s->rope_freqs)
    TRY(tiny_vector(w, "rope_freqs.weight", tiny_heads(s).hd / 2, 4.0f, 3.0f, &seed));
  for (int l = 0; l < s->layers; l++) TRY(tiny_layer(s, arch, l, w, &seed));
  return NULL;
}

/* The model in a writer (more keys may be added before it is written). Weights are scaled by 1 /
 * sqrt(inputs) (the embedding by 1) so that activations stay near 1 and the logits spread over a
 * few units. */
static inline hcq_status_t tiny_build(const tiny_spec_t *s, gguf_writer_t **out) {
  gguf_writer_t *w;
  hcq_status_t st = gguf_writer_create(&w);
  if (st) return st;
  tiny_omit = s->omit;
  if ((st = tiny_contents(s, w))) gguf_writer_free(w), w = NULL;
  *out = w;
  return st;
}

/* Writes the model to path (tiny_build, then the file). */
static inline hcq_status_t tiny_write(const tiny_spec_t *s, const char *path) {
  gguf_writer_t *w;
  hcq_status_t st = tiny_build(s, &w);
  if (st) return st;
  st = gguf_writer_write(w, path);
  gguf_writer_free(w);
  return st;
}

/* Every matrix of one type. */
static inline tiny_spec_t tiny_uniform_spec(int dim, int ffn, int layers, int heads, int kv_heads,
                                            int vocab, ggml_type_t type, bool tied, uint64_t seed) {
  tiny_spec_t s = {dim,      ffn,  layers,      heads, kv_heads, vocab, {0}, tied,
                   10000.0f, seed, vocab == 97, NULL,  0,        false, 0,   NULL};
  for (int i = 0; i < TINY_MATRICES; i++) s.types[i] = type;
  return s;
}

#endif
