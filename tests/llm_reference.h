/* A plain C llama forward pass over a GGUF model (models/llm), one token at a time: the ground
 * truth the decoder's tests compare with. Weights are dequantized row by row from the file's blocks
 * (llm_dequantize_row), dot products are one running sum per row in order, attention is the
 * textbook softmax.
 * With quantize_inputs, the inputs of matrices stored in blocks (every type but F32, F16, BF16) are
 * rounded to 8-bit blocks first (llm_quantize_act), as the decoder and llama.cpp do; the products
 * are then the dequantized weights times the dequantized inputs.
 *
 * Header-only, for the tests. Not fast: a SmolLM2 token is about 0.1 s. */
#ifndef HCQ_LLM_REFERENCE_H
#define HCQ_LLM_REFERENCE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llm.h"
#include "quant.h"

typedef struct llm_ref {
  const llm_model_t *model;
  llm_config_t c;
  int ctx;
  bool quantize_inputs;
  float *kc, *vc; /* [layer][pos][kv_dim] */
  float *x, *xb, *q, *att, *h, *g, *u, *logits, *row;
} llm_ref_t;

static inline bool llm_ref_init(llm_ref_t *r, const llm_model_t *model, int ctx,
                                bool quantize_inputs) {
  memset(r, 0, sizeof(*r));
  r->model = model;
  r->c = model->config;
  r->ctx = ctx;
  r->quantize_inputs = quantize_inputs;
  const llm_config_t *c = &r->c;
  size_t kv = (size_t)c->n_layers * (size_t)ctx * (size_t)llm_kv_dim(c);
  size_t widest = (size_t)(c->dim > c->ffn ? c->dim : c->ffn);
  r->kc = calloc(kv, 4), r->vc = calloc(kv, 4);
  size_t qd = (size_t)llm_q_dim(c);
  if (widest < qd) widest = qd;
  r->x = calloc((size_t)c->dim, 4), r->xb = calloc(widest, 4), r->q = calloc(qd, 4);
  r->att = calloc((size_t)ctx, 4), r->h = calloc((size_t)c->ffn, 4),
  r->g = calloc((size_t)c->ffn, 4);
  r->u = calloc((size_t)c->ffn, 4), r->logits = calloc((size_t)c->vocab, 4),
  r->row = calloc(widest, 4);
  return r->kc && r->vc && r->x && r->xb && r->q && r->att && r->h && r->g && r->u && r->logits &&
         r->row;
}

static inline void llm_ref_free(llm_ref_t *r) {
  float *all[] = {r->kc, r->vc, r->x, r->xb, r->q, r->att, r->h, r->g, r->u, r->logits, r->row};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) free(all[i]);
}

/* Every type but the float ones (F32, F16, BF16) takes 8-bit input blocks. */
static inline bool llm_ref_quantized(const gguf_tensor_t *t) {
  return t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16 && t->type != GGML_TYPE_BF16;
}

/* LLM_REF_Q8K (1 unless the including file says otherwise): inputs that only K-quant matrices read
 * are rounded as llama.cpp's Q8_K (llm_quantize_act_k), as the CPU kernels do; the GPU kernels
 * round every input in blocks of 32, and their suites define it 0. */
#ifndef LLM_REF_Q8K
#define LLM_REF_Q8K 1
#endif

/* out = W in, W a [k, rows] tensor; in rounded to 8-bit blocks first when asked (act_k:
 * Q8_K-style). */
static inline void llm_ref_matvec_as(llm_ref_t *r, const gguf_tensor_t *w, const float *in,
                                     float *out, bool act_k) {
  size_t k = (size_t)w->ne[0], rows = (size_t)w->ne[1];
  size_t row_bytes = k / ggml_block_elems(w->type) * ggml_block_bytes(w->type);
  float *x = malloc(k * 4);
  memcpy(x, in, k * 4);
  if (r->quantize_inputs && llm_ref_quantized(w)) {
    llm_act_block_t *blocks = malloc((k + 31) / 32 * sizeof(*blocks));
    if (act_k && LLM_REF_Q8K)
      llm_quantize_act_k(in, k, blocks);
    else
      llm_quantize_act(in, k, blocks);
    for (size_t j = 0; j < k; j++) x[j] = blocks[j / 32].d * (float)blocks[j / 32].q[j % 32];
    free(blocks);
  }
  for (size_t i = 0; i < rows; i++) {
    llm_dequantize_row(w->type, (const uint8_t *)w->data + i * row_bytes, r->row, k);
    float s = 0;
    for (size_t j = 0; j < k; j++) s += r->row[j] * x[j];
    out[i] = s;
  }
  free(x);
}

static inline bool llm_ref_act_k(const gguf_tensor_t *w) {
  return llm_act_superblock(llm_layout_of(w->type));
}

/* A matrix whose input no other matrix reads. */
static inline void llm_ref_matvec(llm_ref_t *r, const gguf_tensor_t *w, const float *in,
                                  float *out) {
  llm_ref_matvec_as(r, w, in, out, llm_ref_act_k(w));
}

/* RMS norm of n floats scaled by w (n of them). */
static inline void llm_ref_rmsnorm_n(const llm_ref_t *r, const gguf_tensor_t *w, const float *x,
                                     float *out, int n) {
  float ss = 0;
  for (int i = 0; i < n; i++) ss += x[i] * x[i];
  float inv = 1.0f / sqrtf(ss / (float)n + r->c.norm_eps);
  llm_dequantize_row(w->type, w->data, r->row, (size_t)n);
  for (int i = 0; i < n; i++) out[i] = (x[i] * inv) * r->row[i];
}

static inline void llm_ref_rmsnorm(const llm_ref_t *r, const gguf_tensor_t *w, const float *x,
                                   float *out) {
  llm_ref_rmsnorm_n(r, w, x, out, r->c.dim);
}

static inline void llm_ref_add_bias(const gguf_tensor_t *b, float *v, float *tmp) {
  if (!b) return;
  llm_dequantize_row(b->type, b->data, tmp, (size_t)b->ne[0]);
  for (size_t i = 0; i < (size_t)b->ne[0]; i++) v[i] += tmp[i];
}

/* Rotates the rotary pairs of each head of v (n values) at pos: pairs (2j, 2j + 1), or (j, j + rd /
 * 2) for NEOX; angle pos x base^(-2j / rd), divided by llama 3's rope_freqs where the model has
 * them. */
static inline void llm_ref_rope(const llm_ref_t *r, float *v, int n, int pos, double base) {
  const llm_config_t *c = &r->c;
  int rd = c->rope_dim;
  float factors[2048]; /* rope_dim / 2: the head size is at most 4096 (model.c) */
  if (r->model->rope_freqs)
    llm_dequantize_row(r->model->rope_freqs->type, r->model->rope_freqs->data, factors,
                       (size_t)rd / 2);
  for (int h = 0; h < n; h += c->head_dim)
    for (int j = 0; j < rd / 2; j++) {
      int e0 = c->rope_neox ? j : 2 * j, e1 = c->rope_neox ? j + rd / 2 : 2 * j + 1;
      double theta =
          pos * pow(base, -2.0 * j / rd) / (r->model->rope_freqs ? (double)factors[j] : 1.0);
      float co = (float)cos(theta), si = (float)sin(theta), a = v[h + e0], b = v[h + e1];
      v[h + e0] = a * co - b * si;
      v[h + e1] = a * si + b * co;
    }
}

/* Head by head attention of layer l's q (r->q) over its cache, into o. */
static inline void llm_ref_attention(llm_ref_t *r, int l, int pos, float *o) {
  const llm_config_t *c = &r->c;
  int kvd = llm_kv_dim(c), hd = c->head_dim, kv_mul = c->n_heads / c->n_kv_heads;
  int lo = llm_layer_swa(c, l) && pos >= c->swa_window ? pos - c->swa_window + 1 : 0;
  for (int h = 0; h < c->n_heads; h++) {
    const float *qh = r->q + h * hd;
    int kvh = h / kv_mul;
    float mx = -INFINITY;
    for (int t = lo; t <= pos; t++) {
      const float *k = r->kc + ((size_t)l * r->ctx + (size_t)t) * (size_t)kvd + (size_t)kvh * hd;
      float s = 0;
      for (int e = 0; e < hd; e++) s += qh[e] * k[e];
      r->att[t] = s * c->attn_scale;
      if (r->att[t] > mx) mx = r->att[t];
    }
    float sum = 0;
    for (int t = lo; t <= pos; t++) sum += r->att[t] = expf(r->att[t] - mx);
    for (int e = 0; e < hd; e++) {
      float acc = 0;
      for (int t = lo; t <= pos; t++)
        acc += r->att[t] *
               r->vc[((size_t)l * r->ctx + (size_t)t) * (size_t)kvd + (size_t)kvh * hd + (size_t)e];
      o[h * hd + e] = acc / sum;
    }
  }
}

/* x += out, or with post_norms x += RMS norm of out scaled by post (the gemma3 layer outputs). */
static inline void llm_ref_residual(llm_ref_t *r, const gguf_tensor_t *post, const float *out) {
  float *tmp = malloc((size_t)r->c.dim * 4);
  if (post)
    llm_ref_rmsnorm(r, post, out, tmp);
  else
    memcpy(tmp, out, (size_t)r->c.dim * 4);
  for (int i = 0; i < r->c.dim; i++) r->x[i] += tmp[i];
  free(tmp);
}

static inline float llm_ref_gate(const llm_config_t *c, float g) {
  if (c->gelu) return 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g)));
  return g / (1.0f + expf(-g));
}

/* The logits after token at position pos (positions 0..pos-1 must have been run before). */
static inline const float *llm_ref_step(llm_ref_t *r, int32_t token, int pos) {
  const llm_model_t *m = r->model;
  const llm_config_t *c = &r->c;
  int dim = c->dim, kvd = llm_kv_dim(c), hd = c->head_dim, qd = llm_q_dim(c);
  size_t emb_row =
      (size_t)dim / ggml_block_elems(m->token_embd->type) * ggml_block_bytes(m->token_embd->type);
  llm_dequantize_row(m->token_embd->type,
                     (const uint8_t *)m->token_embd->data + (size_t)token * emb_row, r->x,
                     (size_t)dim);
  if (c->emb_scale != 1.0f)
    for (int i = 0; i < dim; i++) r->x[i] *= c->emb_scale;
  float *o = malloc((size_t)qd * 4), *tmp = malloc((size_t)(qd > dim ? qd : dim) * 4);
  for (int l = 0; l < c->n_layers; l++) {
    const llm_layer_t *L = &m->layers[l];
    float *kc = r->kc + ((size_t)l * r->ctx + (size_t)pos) * (size_t)kvd;
    float *vc = r->vc + ((size_t)l * r->ctx + (size_t)pos) * (size_t)kvd;
    llm_ref_rmsnorm(r, L->attn_norm, r->x, r->xb);
    /* one input for q, k and v: Q8_K-style only when all three are K-quants (decoder_items.c) */
    bool qkv_k = llm_ref_act_k(L->wq) && llm_ref_act_k(L->wk) && llm_ref_act_k(L->wv);
    llm_ref_matvec_as(r, L->wq, r->xb, r->q, qkv_k);
    llm_ref_matvec_as(r, L->wk, r->xb, kc, qkv_k);
    llm_ref_matvec_as(r, L->wv, r->xb, vc, qkv_k);
    llm_ref_add_bias(L->bq, r->q, tmp), llm_ref_add_bias(L->bk, kc, tmp),
        llm_ref_add_bias(L->bv, vc, tmp);
    if (c->qk_norm) {
      for (int h = 0; h < c->n_heads; h++)
        memcpy(tmp, r->q + h * hd, (size_t)hd * 4),
            llm_ref_rmsnorm_n(r, L->q_norm, tmp, r->q + h * hd, hd);
      for (int h = 0; h < c->n_kv_heads; h++)
        memcpy(tmp, kc + h * hd, (size_t)hd * 4),
            llm_ref_rmsnorm_n(r, L->k_norm, tmp, kc + h * hd, hd);
    }
    double base = llm_layer_swa(c, l) ? c->rope_base_swa : c->rope_base;
    llm_ref_rope(r, r->q, qd, pos, base);
    llm_ref_rope(r, kc, kvd, pos, base);
    llm_ref_attention(r, l, pos, o);
    llm_ref_matvec(r, L->wo, o, r->xb);
    llm_ref_residual(r, L->post_attn_norm, r->xb);
    llm_ref_rmsnorm(r, L->ffn_norm, r->x, r->xb);
    bool gate_up_k = llm_ref_act_k(L->w_gate) && llm_ref_act_k(L->w_up);
    llm_ref_matvec_as(r, L->w_gate, r->xb, r->g, gate_up_k);
    llm_ref_matvec_as(r, L->w_up, r->xb, r->u, gate_up_k);
    for (int i = 0; i < c->ffn; i++) r->h[i] = llm_ref_gate(c, r->g[i]) * r->u[i];
    llm_ref_matvec(r, L->w_down, r->h, r->xb);
    llm_ref_residual(r, L->post_ffn_norm, r->xb);
  }
  free(o), free(tmp);
  llm_ref_rmsnorm(r, m->output_norm, r->x, r->xb);
  llm_ref_matvec(r, m->output, r->xb, r->logits);
  return r->logits;
}

static inline int llm_ref_argmax(const float *v, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (v[i] > v[best]) best = i;
  return best;
}

#endif
