/* Requantizing a GGUF model's matrices into other weight types, for the tests: SmolLM2 in each type
 * (test files, not better models: the weights go through the file's type, then the new one). The
 * metadata and the vectors are copied as they are; each matrix is dequantized (llm_dequantize_row)
 * and quantized again (llm_quantize_row), row by row, deterministically: the same input file and
 * recipe give the same bytes, so scripts/llm-llamacpp-reference.py's streams for a file written
 * here (by tests/llm_requant_main.c) hold for the file a test writes again.
 *
 * Recipes: a type name (every matrix in it; a K-quant or IQ4_XS where the row length is a multiple
 * of 256, else Q8_0, as llama.cpp falls back), or "Q4_K_M" (llama.cpp's mix, simplified: Q6_K for
 * attn_v, ffn_down and the embedding, Q4_K elsewhere; Q5_0 / Q8_0 where a row is not a multiple of
 * 256). Header-only. */
#ifndef HCQ_TESTS_LLM_REQUANT_H
#define HCQ_TESTS_LLM_REQUANT_H

#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model_status.h"
#include "quant.h"
#include "support.h"

static inline bool llm_requant_super(ggml_type_t t) { return ggml_block_elems(t) == 256; }

/* The type recipe gives the matrix name of ne0 columns; false for an unknown recipe. */
static inline bool llm_requant_type(const char *recipe, const char *name, uint64_t ne0,
                                    ggml_type_t *out) {
  ggml_type_t t;
  if (!strcmp(recipe, "Q4_K_M")) {
    bool high =
        strstr(name, "attn_v") || strstr(name, "ffn_down") || !strcmp(name, "token_embd.weight");
    t = high ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K;
    if (ne0 % 256) t = high ? GGML_TYPE_Q8_0 : GGML_TYPE_Q5_0;
    *out = t;
    return true;
  }
  for (uint32_t i = 0; i < 64; i++) {
    const char *n = ggml_type_name(i);
    if (n && !strcmp(n, recipe) && ggml_type_known(i) && llm_type_supported(i, HCQ_DEVICE_CPU)) {
      t = (ggml_type_t)i;
      if (ne0 % ggml_block_elems(t)) t = GGML_TYPE_Q8_0;
      *out = t;
      return true;
    }
  }
  return false;
}

static inline hcq_status_t llm_requant_matrix(gguf_writer_t *w, const gguf_tensor_t *t,
                                              ggml_type_t to) {
  size_t cols = (size_t)t->ne[0], rows = (size_t)(t->ne[1] ? t->ne[1] : 1);
  size_t in_row = cols / ggml_block_elems(t->type) * ggml_block_bytes(t->type);
  size_t out_row = cols / ggml_block_elems(to) * ggml_block_bytes(to);
  float *x = malloc(cols * sizeof(float));
  uint8_t *data = malloc(out_row * rows);
  hcq_status_t st;
  if (!x || !data) {
    st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory requantizing %s", t->name);
  } else {
    for (size_t r = 0; r < rows; r++) {
      llm_dequantize_row(t->type, (const uint8_t *)t->data + r * in_row, x, cols);
      llm_quantize_row(to, x, data + r * out_row, cols);
    }
    st = gguf_writer_add_tensor(w, t->name, to, t->ne, t->n_dims, data);
  }
  free(x), free(data);
  return st;
}

/* g's keys (but its alignment) and tensors into w, the matrices requantized by recipe. */
static inline hcq_status_t llm_requant_contents(const gguf_file_t *g, gguf_writer_t *w,
                                                const char *recipe) {
  for (size_t i = 0; i < gguf_kv_count(g); i++) {
    const gguf_kv_t *kv = gguf_kv_at(g, i);
    if (kv->key.len == 17 && !memcmp(kv->key.ptr, "general.alignment", 17)) continue;
    TRY(gguf_writer_copy_kv(w, kv));
  }
  for (size_t i = 0; i < gguf_tensor_count(g); i++) {
    const gguf_tensor_t *t = gguf_tensor_at(g, i);
    ggml_type_t to;
    if (t->n_dims != 2)
      TRY(gguf_writer_add_tensor(w, t->name, t->type, t->ne, t->n_dims, t->data));
    else if (!llm_requant_type(recipe, t->name, t->ne[0], &to))
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "requant: unknown recipe \"%s\"", recipe);
    else
      TRY(llm_requant_matrix(w, t, to));
  }
  return NULL;
}

/* Writes in's model with its matrices requantized by recipe to out. */
static inline hcq_status_t llm_requant(const char *in, const char *out, const char *recipe) {
  gguf_file_t *g;
  hcq_status_t st = gguf_open(in, &g);
  if (st) return st;
  gguf_writer_t *w = NULL;
  if ((st = gguf_writer_create(&w))) goto done;
  if ((st = llm_requant_contents(g, w, recipe))) goto done;
  st = gguf_writer_write(w, out);
done:
  gguf_writer_free(w);
  gguf_close(g);
  return st;
}

#endif
