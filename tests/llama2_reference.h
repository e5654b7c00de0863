/* A plain sequential C forward pass of the llama2 decoder: the ground truth the hcq decoder is
 * checked against, and the "plain C" and "OpenMP" decoders of the benchmarks.
 *
 * Deliberately simple: one output row per loop iteration, each dot product accumulated in order
 * with one running sum, a whole-row softmax, no fast-math. Compiled with -fopenmp, the row loops of
 * the matrix products and the heads of the attention are `omp parallel for` (each row is still
 * computed by one thread, in order, so the results are the same bits).
 *
 * Header-only (static functions) so that one program can hold a plain and an OpenMP copy.
 */
#ifndef HCQ_LLAMA2_REFERENCE_H
#define HCQ_LLAMA2_REFERENCE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llama2.h"

#ifdef _OPENMP
#define REF_PARALLEL_FOR _Pragma("omp parallel for")
#else
#define REF_PARALLEL_FOR
#endif

typedef struct llama2_reference {
  llama2_config_t c;
  const llama2_weights_t *w;
  float *x, *xb, *xb2, *hb, *hb2, *q, *att, *logits, *key_cache, *value_cache;
} llama2_reference_t;

static inline void ref_free(llama2_reference_t *r) {
  float *all[] = {r->x, r->xb,  r->xb2,    r->hb,        r->hb2,
                  r->q, r->att, r->logits, r->key_cache, r->value_cache};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) free(all[i]);
  memset(r, 0, sizeof(*r));
}

/* Returns 0 on success, -1 when memory runs out. ck must outlive r. */
static inline int ref_init(llama2_reference_t *r, const llama2_checkpoint_t *ck) {
  memset(r, 0, sizeof(*r));
  const llama2_config_t *c = &ck->config;
  r->c = *c;
  r->w = &ck->weights;
  size_t cache = (size_t)c->n_layers * (size_t)c->seq_len * (size_t)llama2_kv_dim(c);
  r->x = calloc((size_t)c->dim, sizeof(float));
  r->xb = calloc((size_t)c->dim, sizeof(float));
  r->xb2 = calloc((size_t)c->dim, sizeof(float));
  r->hb = calloc((size_t)c->hidden_dim, sizeof(float));
  r->hb2 = calloc((size_t)c->hidden_dim, sizeof(float));
  r->q = calloc((size_t)c->dim, sizeof(float));
  r->att = calloc((size_t)c->n_heads * (size_t)c->seq_len, sizeof(float));
  r->logits = calloc((size_t)c->vocab_size, sizeof(float));
  r->key_cache = calloc(cache, sizeof(float));
  r->value_cache = calloc(cache, sizeof(float));
  if (!r->x || !r->xb || !r->xb2 || !r->hb || !r->hb2 || !r->q || !r->att || !r->logits ||
      !r->key_cache || !r->value_cache) {
    ref_free(r);
    return -1;
  }
  return 0;
}

static inline void ref_rmsnorm(float *o, const float *x, const float *weight, int n) {
  float ss = 0.0f;
  for (int j = 0; j < n; j++) ss += x[j] * x[j];
  ss /= (float)n;
  ss += 1e-5f;
  ss = 1.0f / sqrtf(ss);
  for (int j = 0; j < n; j++) o[j] = weight[j] * (ss * x[j]);
}

/* out (d) = w (d x n) . x (n) */
static inline void ref_matmul(float *out, const float *x, const float *w, int n, int d) {
  REF_PARALLEL_FOR
  for (int i = 0; i < d; i++) {
    float val = 0.0f;
    for (int j = 0; j < n; j++) val += w[(size_t)i * (size_t)n + (size_t)j] * x[j];
    out[i] = val;
  }
}

static inline void ref_softmax(float *x, int n) {
  float max = x[0];
  for (int i = 1; i < n; i++)
    if (x[i] > max) max = x[i];
  float sum = 0.0f;
  for (int i = 0; i < n; i++) {
    x[i] = expf(x[i] - max);
    sum += x[i];
  }
  for (int i = 0; i < n; i++) x[i] /= sum;
}

/* One step: token at pos; returns the logits (vocab_size floats, owned by r). */
static inline const float *ref_forward(llama2_reference_t *r, int token, int pos) {
  const llama2_config_t *c = &r->c;
  const llama2_weights_t *w = r->w;
  int dim = c->dim, hidden = c->hidden_dim, hs = llama2_head_size(c), kv_dim = llama2_kv_dim(c);
  int kv_mul = c->n_heads / c->n_kv_heads;
  size_t D = (size_t)dim, H = (size_t)hidden, KV = (size_t)kv_dim, S = (size_t)c->seq_len;
  memcpy(r->x, w->token_embedding + (size_t)token * D, D * sizeof(float));
  for (int l = 0; l < c->n_layers; l++) {
    size_t L = (size_t)l;
    ref_rmsnorm(r->xb, r->x, w->rms_att + L * D, dim);
    float *k = r->key_cache + L * S * KV + (size_t)pos * KV;
    float *v = r->value_cache + L * S * KV + (size_t)pos * KV;
    ref_matmul(r->q, r->xb, w->wq + L * D * D, dim, dim);
    ref_matmul(k, r->xb, w->wk + L * D * KV, dim, kv_dim);
    ref_matmul(v, r->xb, w->wv + L * D * KV, dim, kv_dim);
    for (int i = 0; i < dim; i += 2) {
      int head_dim = i % hs;
      float freq = 1.0f / powf(10000.0f, (float)head_dim / (float)hs);
      float val = (float)pos * freq;
      float fcr = cosf(val), fci = sinf(val);
      int rotn = i < kv_dim ? 2 : 1;
      for (int t = 0; t < rotn; t++) {
        float *vec = t == 0 ? r->q : k;
        float v0 = vec[i], v1 = vec[i + 1];
        vec[i] = v0 * fcr - v1 * fci;
        vec[i + 1] = v0 * fci + v1 * fcr;
      }
    }
    REF_PARALLEL_FOR
    for (int h = 0; h < c->n_heads; h++) {
      const float *qh = r->q + (size_t)h * (size_t)hs;
      float *att = r->att + (size_t)h * S;
      size_t kvo = (size_t)(h / kv_mul) * (size_t)hs;
      for (int t = 0; t <= pos; t++) {
        const float *kt = r->key_cache + L * S * KV + (size_t)t * KV + kvo;
        float score = 0.0f;
        for (int i = 0; i < hs; i++) score += qh[i] * kt[i];
        att[t] = score / sqrtf((float)hs);
      }
      ref_softmax(att, pos + 1);
      float *xb = r->xb + (size_t)h * (size_t)hs;
      memset(xb, 0, (size_t)hs * sizeof(float));
      for (int t = 0; t <= pos; t++) {
        const float *vt = r->value_cache + L * S * KV + (size_t)t * KV + kvo;
        for (int i = 0; i < hs; i++) xb[i] += att[t] * vt[i];
      }
    }
    ref_matmul(r->xb2, r->xb, w->wo + L * D * D, dim, dim);
    for (int i = 0; i < dim; i++) r->x[i] += r->xb2[i];
    ref_rmsnorm(r->xb, r->x, w->rms_ffn + L * D, dim);
    ref_matmul(r->hb, r->xb, w->w1 + L * H * D, dim, hidden);
    ref_matmul(r->hb2, r->xb, w->w3 + L * H * D, dim, hidden);
    for (int i = 0; i < hidden; i++) {
      float val = r->hb[i];
      val *= 1.0f / (1.0f + expf(-val));
      r->hb[i] = val * r->hb2[i];
    }
    ref_matmul(r->xb, r->hb, w->w2 + L * D * H, hidden, dim);
    for (int i = 0; i < dim; i++) r->x[i] += r->xb[i];
  }
  ref_rmsnorm(r->x, r->x, w->rms_final, dim);
  ref_matmul(r->logits, r->x, w->classifier, dim, c->vocab_size);
  return r->logits;
}

/* Index of the largest value; the lowest index on ties. */
static inline int ref_argmax(const float *v, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (v[i] > v[best]) best = i;
  return best;
}

#endif
