/* Host twins of the llama2 decoder's GPU kernels (models/llama2/kernels.cu and kernels.metal, the
 * same work split), shared by the CUDA and Metal stand-ins. Each call runs one whole work-group
 * (CUDA block, Metal threadgroup): its threads in turn, phase by phase where the kernel has a
 * barrier, in float32 and in the kernel's order, so a dot product is one running sum over j and a
 * group's best logit is the first of its largest in thread order.
 *
 * A stand-in hands over the kernel's buffers and values as the CPU ABI has them (bufs, vals), the
 * model's shape (compiled into the GPU source; the stand-in reads it back) in LT_* order, the
 * group's index and its number of threads, and the kernel language's "below every value". */
#ifndef HCQ_TESTS_LLAMA2_TWINS_H
#define HCQ_TESTS_LLAMA2_TWINS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
  LT_DIM,
  LT_HIDDEN,
  LT_KV_DIM,
  LT_N_HEADS,
  LT_KV_MUL,
  LT_HEAD_SIZE,
  LT_VOCAB,
  LT_SEQ_LEN,
  LT_ATT_CHUNK,
  LT_MAX_CHUNKS,
  LT_GROUP,
  LT_COUNT
};

typedef struct llama2_twin {
  void *const *b;    /* the kernel's buffers, in order */
  const int32_t *v;  /* its values */
  const int32_t *S;  /* the shape, LT_* */
  unsigned group[2]; /* the work-group's index (x, y) */
  unsigned threads;  /* threads per work-group (x) */
  float low;         /* -INFINITY (CUDA C), -FLT_MAX (MSL: fast math assumes no infinities) */
} llama2_twin_t;

#define LT_F(i) ((float *)k->b[(i)])
#define LT_I(i) ((int32_t *)k->b[(i)])
#define LT_ROW(t) ((int)(k->group[0] * k->threads + (t)))

static inline float lt_dot(const float *w, const float *v, int n) {
  float s = 0.0f;
  for (int j = 0; j < n; j++) s += w[j] * v[j];
  return s;
}
/* Every thread of a group computes the same norm: one pass stands for all of them. */
static inline float *lt_norm(const float *x, const float *w, int dim) {
  float *xn = malloc((size_t)dim * sizeof(float));
  if (!xn) abort();
  float ss = 0.0f;
  for (int j = 0; j < dim; j++) ss += x[j] * x[j];
  float inv = 1.0f / sqrtf(ss / (float)dim + 1e-5f);
  for (int j = 0; j < dim; j++) xn[j] = w[j] * (inv * x[j]);
  return xn;
}
static inline void lt_rope(float *a, float *c, int i, const float *rot, int hs) {
  float co = rot[i % hs], si = rot[i % hs + 1], a0 = *a, c0 = *c;
  *a = a0 * co - c0 * si;
  *c = a0 * si + c0 * co;
}

/* bufs x, tokens, embedding; vals pos */
static inline void llama2_twin_embed(const llama2_twin_t *k) {
  const int32_t *S = k->S;
  for (unsigned t = 0; t < k->threads; t++) {
    int i = LT_ROW(t);
    if (i >= S[LT_DIM]) continue;
    int tok = LT_I(1)[k->v[0]];
    if (tok < 0 || tok >= S[LT_VOCAB]) tok = 0;
    LT_F(0)[i] = LT_F(2)[(size_t)tok * (size_t)S[LT_DIM] + (size_t)i];
  }
}
/* bufs q, key cache, value cache, x, rms weights, wq, wk, wv, rotary table; vals pos */
static inline void llama2_twin_qkv(const llama2_twin_t *k) {
  const int32_t *S = k->S;
  int dim = S[LT_DIM], kvd = S[LT_KV_DIM], hs = S[LT_HEAD_SIZE], pos = k->v[0];
  float *q = LT_F(0), *krow = LT_F(1) + (size_t)pos * (size_t)kvd,
        *vrow = LT_F(2) + (size_t)pos * (size_t)kvd;
  const float *wq = LT_F(5), *wk = LT_F(6), *wv = LT_F(7),
              *rot = LT_F(8) + (size_t)pos * (size_t)hs;
  float *xn = lt_norm(LT_F(3), LT_F(4), dim);
  for (unsigned t = 0; t < k->threads; t++) {
    int r = 2 * LT_ROW(t);
    if (r >= dim + 2 * kvd) continue;
    if (r < dim) {
      float a = lt_dot(wq + (size_t)r * dim, xn, dim),
            c = lt_dot(wq + (size_t)(r + 1) * dim, xn, dim);
      lt_rope(&a, &c, r, rot, hs);
      q[r] = a, q[r + 1] = c;
    } else if (r < dim + kvd) {
      int i = r - dim;
      float a = lt_dot(wk + (size_t)i * dim, xn, dim),
            c = lt_dot(wk + (size_t)(i + 1) * dim, xn, dim);
      lt_rope(&a, &c, i, rot, hs);
      krow[i] = a, krow[i + 1] = c;
    } else {
      int i = r - dim - kvd;
      vrow[i] = lt_dot(wv + (size_t)i * dim, xn, dim);
      vrow[i + 1] = lt_dot(wv + (size_t)(i + 1) * dim, xn, dim);
    }
  }
  free(xn);
}
/* bufs partials, q, key cache, value cache; vals pos. Group (head, chunk). */
static inline void llama2_twin_attn_part(const llama2_twin_t *k) {
  const int32_t *S = k->S;
  int hs = S[LT_HEAD_SIZE], kvd = S[LT_KV_DIM], chunk = S[LT_ATT_CHUNK], pos = k->v[0];
  int h = (int)k->group[0], c = (int)k->group[1], t0 = c * chunk,
      t1 = t0 + chunk < pos + 1 ? t0 + chunk : pos + 1;
  const float *qh = LT_F(1) + (size_t)h * (size_t)hs, *kc = LT_F(2), *vc = LT_F(3);
  int kv = (h / S[LT_KV_MUL]) * hs;
  float *dst = LT_F(0) + ((size_t)h * (size_t)S[LT_MAX_CHUNKS] + (size_t)c) * (size_t)(hs + 2);
  float *score = malloc((size_t)chunk * sizeof(float));
  if (!score) abort();
  for (unsigned i = 0; i < k->threads; i++) {
    float m = k->low, scale = 1.0f / sqrtf((float)hs);
    for (int t = t0; t < t1; t++) {
      float s = lt_dot(qh, kc + (size_t)t * (size_t)kvd + (size_t)kv, hs) * scale;
      score[t - t0] = s;
      if (s > m) m = s;
    }
    float sum = 0.0f, o = 0.0f;
    for (int t = t0; t < t1; t++) {
      float e = expf(score[t - t0] - m);
      sum += e;
      o += e * vc[(size_t)t * (size_t)kvd + (size_t)kv + i];
    }
    if (i == 0) dst[0] = m, dst[1] = sum;
    dst[2 + i] = o;
  }
  free(score);
}
/* bufs out, partials; vals pos. Group: head. */
static inline void llama2_twin_attn_combine(const llama2_twin_t *k) {
  const int32_t *S = k->S;
  int hs = S[LT_HEAD_SIZE], h = (int)k->group[0], chunks = k->v[0] / S[LT_ATT_CHUNK] + 1;
  const float *part = LT_F(1) + (size_t)h * (size_t)S[LT_MAX_CHUNKS] * (size_t)(hs + 2);
  for (unsigned i = 0; i < k->threads; i++) {
    float m = k->low;
    for (int c = 0; c < chunks; c++)
      if (part[c * (hs + 2)] > m) m = part[c * (hs + 2)];
    float total = 0.0f, acc = 0.0f;
    for (int c = 0; c < chunks; c++) {
      float w = expf(part[c * (hs + 2)] - m);
      total += w * part[c * (hs + 2) + 1];
      acc += w * part[c * (hs + 2) + 2 + (int)i];
    }
    LT_F(0)[h * hs + (int)i] = acc / total;
  }
}
/* bufs x, input, weights: x += W input, with n inputs (DIM for wo, HIDDEN for ffn_down) */
static inline void llama2_twin_residual(const llama2_twin_t *k, int n) {
  for (unsigned t = 0; t < k->threads; t++) {
    int r = LT_ROW(t);
    if (r < k->S[LT_DIM]) LT_F(0)[r] += lt_dot(LT_F(2) + (size_t)r * (size_t)n, LT_F(1), n);
  }
}
static inline void llama2_twin_wo(const llama2_twin_t *k) { llama2_twin_residual(k, k->S[LT_DIM]); }
static inline void llama2_twin_ffn_down(const llama2_twin_t *k) {
  llama2_twin_residual(k, k->S[LT_HIDDEN]);
}
/* bufs hidden, x, rms weights, w1, w3: hidden = silu(w1 xn) * (w3 xn) */
static inline void llama2_twin_ffn_up(const llama2_twin_t *k) {
  int dim = k->S[LT_DIM];
  float *xn = lt_norm(LT_F(1), LT_F(2), dim);
  for (unsigned t = 0; t < k->threads; t++) {
    int r = LT_ROW(t);
    if (r >= k->S[LT_HIDDEN]) continue;
    float a = lt_dot(LT_F(3) + (size_t)r * dim, xn, dim),
          c = lt_dot(LT_F(4) + (size_t)r * dim, xn, dim);
    LT_F(0)[r] = a * (1.0f / (1.0f + expf(-a))) * c;
  }
  free(xn);
}
/* bufs logits, best, x, final rms weights, classifier; vals the first group: the group's logits and
 * its best one */
static inline void llama2_twin_classify(const llama2_twin_t *k) {
  int dim = k->S[LT_DIM];
  int g = (int)k->group[0] + k->v[0];
  float *xn = lt_norm(LT_F(2), LT_F(3), dim), top = k->low;
  int32_t arg = g * (int)k->threads;
  for (unsigned t = 0; t < k->threads;
       t++) { /* the group's scan after its barrier, in thread order */
    int r = g * (int)k->threads + (int)t;
    float z = k->low;
    if (r < k->S[LT_VOCAB]) LT_F(0)[r] = z = lt_dot(LT_F(4) + (size_t)r * dim, xn, dim);
    if (z > top) top = z, arg = r;
  }
  memcpy(&LT_I(1)[2 * g], &top, 4);
  LT_I(1)[2 * g + 1] = arg;
  free(xn);
}
/* bufs tokens, best; vals pos, groups: launched as one thread */
static inline void llama2_twin_argmax(const llama2_twin_t *k) {
  float top = k->low;
  int32_t arg = 0;
  for (int32_t g = 0; g < k->v[1]; g++) {
    float z;
    memcpy(&z, &LT_I(1)[2 * g], 4);
    if (z > top) top = z, arg = LT_I(1)[2 * g + 1];
  }
  LT_I(0)[k->v[0] + 1] = arg;
}

#undef LT_F
#undef LT_I
#undef LT_ROW
#endif
