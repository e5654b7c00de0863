/* Host twins of the SmolLM2 decoder's GPU kernels (models/llm/kernels.cu and kernels.metal, one
 * work split), shared by the CUDA and Metal stand-ins. Each call runs one whole work-group (CUDA
 * block, Metal threadgroup) of 32 lanes (the sampler: SEL threads), lane by lane, phase by phase,
 * in float32 and in the kernel's order: a lane's part of a row runs over its blocks l, l + 32, ...;
 * a sum or maximum across the group is the kernels' butterfly (lane l adds lane l ^ o's value for o
 * = 16, 8, 4, 2, 1), so every lane holds the same bits, as on the GPU. Integer sums are exact in
 * any order; the sampler's twin runs them in one loop.
 *
 * A stand-in hands over the kernel's buffers and values as the ABI has them (gpu_abi.h), the
 * shape compiled into the source (the stand-in reads it back) in LLMT_* order, the group's index,
 * and the source's "below every value" (-INFINITY in CUDA C, -FLT_MAX in MSL). */
#ifndef HCQ_TESTS_LLM_TWINS_H
#define HCQ_TESTS_LLM_TWINS_H

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The shape: the model's, the entry's layouts (0 where the entry has none), K_IN (0 likewise), the
 * sources' constants, then what the architecture changes (gpu_abi.h; the stand-ins fill in the
 * sources' defaults where the decoder defines none: QD = DIM, QKV_FUSED 1, EMB_SCALE 1, ATTN_SCALE
 * 1 / sqrt(HD)), the two scales as their floats' bits. */
enum {
  LLMT_DIM,
  LLMT_FFN,
  LLMT_NH,
  LLMT_NKV,
  LLMT_HD,
  LLMT_RD,
  LLMT_VOCAB,
  LLMT_CTX,
  LLMT_EPS_BITS,
  LLMT_WL,
  LLMT_WQ,
  LLMT_WK,
  LLMT_WV,
  LLMT_WG,
  LLMT_WU,
  LLMT_K_IN,
  LLMT_ID_BITS,
  LLMT_ROWS,
  LLMT_CLS_ROWS,
  LLMT_SEL,
  LLMT_QD,
  LLMT_ROPE_NEOX,
  LLMT_FFN_GELU,
  LLMT_QKV_FUSED,
  LLMT_QKV_BIAS,
  LLMT_QK_NORM,
  LLMT_WINDOW,
  LLMT_MATMUL_SET,
  LLMT_EMB_SCALE_BITS,
  LLMT_ATTN_SCALE_BITS,
  LLMT_COUNT
};
/* The first architecture entry: the CUDA module names the integers up to LLMT_EMB_SCALE_BITS in its
 * shape entry, the scales apart (kernels.cu's llm_scales). */
#define LLMT_NAMED LLMT_EMB_SCALE_BITS

typedef struct llm_twin {
  void *const *b;    /* the kernel's buffers, in order */
  const int32_t *v;  /* its values */
  const int32_t *S;  /* the shape, LLMT_* */
  unsigned group[2]; /* the work-group's index (x, y) */
  float low;         /* -INFINITY (CUDA C), -FLT_MAX (MSL: fast math assumes no infinities) */
} llm_twin_t;

typedef struct llmt_act {
  float d, sd;
  int32_t s, s16; /* the sum of the q, of the first 16 */
  int8_t q[32];
} llmt_act_t;
_Static_assert(sizeof(llmt_act_t) == 48, "llm_act_block_t is 48 bytes");

enum {
  LLMT_LANES = 32,
  LLMT_F32 = 0,
  LLMT_F16 = 1,
  LLMT_Q4 = 2,
  LLMT_Q8 = 3,
  LLMT_K4 = 4,
  LLMT_K8 = 5,
  LLMT_K8_1 = 6
};
/* The K layouts: bytes of a block's quants, blocks per superblock. */
#define LLMT_K_QB(lay) ((size_t)((lay) == LLMT_K4 ? 16 : 32))
#define LLMT_K_SB(lay) ((size_t)((lay) == LLMT_K8_1 ? 1 : 8))
#define LLMT_NBLK(k) (((k) + 31) / 32)

static inline float llmt_bits(int32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}
static inline int32_t llmt_int(float f) {
  int32_t b;
  memcpy(&b, &f, 4);
  return b;
}
static inline float llmt_half(uint16_t h) {
  uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u, m = h & 1023u, bits;
  if (e == 31)
    bits = s | 0x7f800000u | (m << 13);
  else if (e)
    bits = s | ((e + 112u) << 23) | (m << 13);
  else if (!m)
    bits = s;
  else {
    e = 113;
    while (!(m & 1024u)) m <<= 1, e--;
    bits = s | (e << 23) | ((m & 1023u) << 13);
  }
  return llmt_bits((int32_t)bits);
}

/* The sources' defaults for what a stand-in found no value of (0): q as wide as x, no embedding
 * scale, attention scaled by 1 / sqrt(HD) (no architecture has a scale of 0). */
static inline void llmt_default_arch(int32_t *S) {
  if (S[LLMT_QD] <= 0) S[LLMT_QD] = S[LLMT_DIM];
  if (!S[LLMT_EMB_SCALE_BITS]) S[LLMT_EMB_SCALE_BITS] = llmt_int(1.0f);
  if (!S[LLMT_ATTN_SCALE_BITS] && S[LLMT_HD] > 0)
    S[LLMT_ATTN_SCALE_BITS] = llmt_int(1.0f / sqrtf((float)S[LLMT_HD]));
}

/* The butterflies across the 32 lanes (kernels.cu warp_sum etc.): lane l takes v[l] op v[l ^ o]. */
static inline float llmt_sum(const float *in) {
  float v[LLMT_LANES], t[LLMT_LANES];
  memcpy(v, in, sizeof(v));
  for (int o = 16; o > 0; o >>= 1) {
    for (int l = 0; l < LLMT_LANES; l++) t[l] = v[l] + v[l ^ o];
    memcpy(v, t, sizeof(v));
  }
  return v[0];
}
static inline float llmt_max(const float *in) {
  float v[LLMT_LANES], t[LLMT_LANES];
  memcpy(v, in, sizeof(v));
  for (int o = 16; o > 0; o >>= 1) {
    for (int l = 0; l < LLMT_LANES; l++) t[l] = fmaxf(v[l], v[l ^ o]);
    memcpy(v, t, sizeof(v));
  }
  return v[0];
}

/* Element j of row `row` of a k-column matrix of `rows` rows in the GPU layout (weight_at). */
static inline float llmt_weight(const uint8_t *w, int lay, size_t rows, size_t k, size_t row,
                                size_t j) {
  if (lay == LLMT_F32) return ((const float *)w)[row * k + j];
  if (lay == LLMT_F16) return llmt_half(((const uint16_t *)w)[row * k + j]);
  size_t nb = k / 32, b = row * nb + j / 32, e = j % 32;
  if (lay >= LLMT_K4) { /* d sc_h q - dmin m_h */
    uint8_t by = w[b * 16 + e % 16];
    int q = lay == LLMT_K4 ? (e < 16 ? by & 15 : by >> 4) : (int8_t)w[b * 32 + e];
    const int8_t *scm = (const int8_t *)(w + rows * nb * LLMT_K_QB(lay)) + 4 * b;
    const float *sup =
        (const float *)(w + rows * nb * (LLMT_K_QB(lay) + 4)) + 2 * (b / LLMT_K_SB(lay));
    return sup[0] * (float)scm[e / 16] * (float)q - sup[1] * (float)scm[2 + e / 16];
  }
  if (lay == LLMT_Q4) {
    uint8_t by = w[b * 16 + e % 16];
    const float *dm = (const float *)(w + rows * nb * 16) + 2 * b;
    return dm[0] * (float)(e < 16 ? by & 15 : by >> 4) + dm[1];
  }
  return ((const float *)(w + rows * nb * 32))[b] * (float)(int8_t)w[b * 32 + e];
}

/* Block b's part of row `row` of w . in (row_part's c): an integer sum scaled once for the block
 * layouts, a running float sum for the others. */
static inline float llmt_block(const uint8_t *w, int lay, size_t rows, int nin, size_t row, int b,
                               const float *xf, const llmt_act_t *xq) {
  size_t nb = (size_t)nin / 32, blk = row * nb + (size_t)b;
  if (lay == LLMT_Q4) {
    const uint8_t *q = w + blk * 16;
    const float *dm = (const float *)(w + rows * nb * 16) + 2 * blk;
    int acc = 0;
    for (int e = 0; e < 16; e++) acc += (q[e] & 15) * xq[b].q[e] + (q[e] >> 4) * xq[b].q[16 + e];
    return (dm[0] * xq[b].d) * (float)acc + dm[1] * xq[b].sd;
  }
  if (lay == LLMT_Q8) {
    const int8_t *q = (const int8_t *)(w + blk * 32);
    int acc = 0;
    for (int e = 0; e < 32; e++) acc += q[e] * xq[b].q[e];
    return (((const float *)(w + rows * nb * 32))[blk] * xq[b].d) * (float)acc;
  }
  if (lay >= LLMT_K4) { /* k_block: integer sums per half block, isum and msum in integers */
    const int8_t *scm = (const int8_t *)(w + rows * nb * LLMT_K_QB(lay)) + 4 * blk;
    const float *dm =
        (const float *)(w + rows * nb * (LLMT_K_QB(lay) + 4)) + 2 * (blk / LLMT_K_SB(lay));
    int sum[2] = {0, 0};
    for (int e = 0; e < 32; e++) {
      int q = lay == LLMT_K4
                  ? (e < 16 ? w[blk * 16 + (size_t)e] & 15 : w[blk * 16 + (size_t)e - 16] >> 4)
                  : (int8_t)w[blk * 32 + (size_t)e];
      sum[e / 16] += q * xq[b].q[e];
    }
    int isum = scm[0] * sum[0] + scm[1] * sum[1],
        msum = scm[2] * xq[b].s16 + scm[3] * (xq[b].s - xq[b].s16);
    return (dm[0] * xq[b].d) * (float)isum - (dm[1] * xq[b].d) * (float)msum;
  }
  float c = 0.0f;
  for (int j = 0; j < 32; j++) {
    int e = 32 * b + j;
    if (e < nin) c += llmt_weight(w, lay, rows, (size_t)nin, row, (size_t)e) * xf[e];
  }
  return c;
}

/* rows32: out[r] = row rb + r's product (lane r keeps it); rows past the end repeat the last. */
static inline void llmt_rows32(const uint8_t *w, int lay, int rows, int nin, int rb,
                               const float *xf, const llmt_act_t *xq, float *out) {
  int nbk = LLMT_NBLK(nin);
  for (int r = 0; r < LLMT_LANES; r++) {
    int row = rb + r < rows ? rb + r : rows - 1;
    float part[LLMT_LANES];
    for (int l = 0; l < LLMT_LANES; l++) {
      float s = 0.0f;
      for (int b = l; b < nbk; b += LLMT_LANES)
        s += llmt_block(w, lay, (size_t)rows, nin, (size_t)row, b, xf, xq);
      part[l] = s;
    }
    out[r] = llmt_sum(part);
  }
}

/* store_block: d = max |v| / 127, q = v / d rounded to nearest even. */
static inline void llmt_store(llmt_act_t *o, const float *v) {
  float amax = 0.0f;
  for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
  float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
  int s = 0, s16 = 0;
  for (int j = 0; j < 32; j++) {
    int q = (int)rintf(v[j] * id);
    s += q;
    o->q[j] = (int8_t)q;
    if (j == 15) s16 = s;
  }
  o->d = d, o->sd = (float)s * d, o->s = s, o->s16 = s16;
}

#define LLMT_F(i) ((float *)k->b[(i)])
#define LLMT_I(i) ((int32_t *)k->b[(i)])
#define LLMT_U8(i) ((const uint8_t *)k->b[(i)])
#define LLMT_A(i) ((llmt_act_t *)k->b[(i)])

/* bufs x, info, tokens, embedding; vals p0, n. Group: token. */
static inline void llm_twin_embed(const llm_twin_t *k) {
  const int32_t *S = k->S;
  int i = (int)k->group[0], dim = S[LLMT_DIM];
  if (i == 0) LLMT_I(1)[0] = k->v[0], LLMT_I(1)[1] = k->v[1];
  int tok = LLMT_I(2)[k->v[0] + i];
  if (tok < 0 || tok >= S[LLMT_VOCAB]) tok = 0;
  float scale = llmt_bits(S[LLMT_EMB_SCALE_BITS]);
  for (int j = 0; j < dim; j++) LLMT_F(0)
  [(size_t)i * dim + j] = llmt_weight(LLMT_U8(3), S[LLMT_WL], (size_t)S[LLMT_VOCAB], (size_t)dim,
                                      (size_t)tok, (size_t)j) *
                          scale;
}
/* bufs info; vals p0, n */
static inline void llm_twin_begin(const llm_twin_t *k) {
  if (k->group[0] == 0) LLMT_I(0)[0] = k->v[0], LLMT_I(0)[1] = k->v[1];
}
/* bufs xf, xq, x, weights, info; vals last. Group: row. */
static inline void llm_twin_norm(const llm_twin_t *k) {
  int dim = k->S[LLMT_DIM], nbk = LLMT_NBLK(dim), i = (int)k->group[0];
  int row = k->v[0] ? LLMT_I(4)[1] - 1 : i;
  const float *x = LLMT_F(2) + (size_t)row * dim, *w = LLMT_F(3);
  float *xf = LLMT_F(0) + (size_t)i * dim, ss[LLMT_LANES];
  for (int l = 0; l < LLMT_LANES; l++) {
    ss[l] = 0.0f;
    for (int b = l; b < nbk; b += LLMT_LANES)
      for (int j = 0; j < 32 && 32 * b + j < dim; j++) ss[l] += x[32 * b + j] * x[32 * b + j];
  }
  float inv = 1.0f / sqrtf(llmt_sum(ss) / (float)dim + llmt_bits(k->S[LLMT_EPS_BITS]));
  for (int b = 0; b < nbk; b++) {
    float v[32];
    for (int j = 0; j < 32; j++) {
      int e = 32 * b + j;
      v[j] = e < dim ? (x[e] * inv) * w[e] : 0.0f;
      if (e < dim) xf[e] = v[j];
    }
    llmt_store(LLMT_A(1) + (size_t)i * nbk + b, v);
  }
}
/* bufs out blocks, in. Group: row (of QD, the attention output). */
static inline void llm_twin_quantize(const llm_twin_t *k) {
  int dim = k->S[LLMT_QD], nbk = LLMT_NBLK(dim), i = (int)k->group[0];
  const float *x = LLMT_F(1) + (size_t)i * dim;
  for (int b = 0; b < nbk; b++) {
    float v[32];
    for (int j = 0; j < 32; j++) v[j] = 32 * b + j < dim ? x[32 * b + j] : 0.0f;
    llmt_store(LLMT_A(0) + (size_t)i * nbk + b, v);
  }
}
/* bufs q, key cache, value cache, xf, xq, wq, wk, wv, rotary table, info[, kraw (not fused or
 * biases)[, bq, bk, bv (biases)]]. Group (row block of q (QD rows), k or v, token): the biases
 * added to every lane's row (the rows past the end take the last one's), then, fused, q and k
 * rotated (pairs (2j, 2j + 1)) and k into the cache; not fused, q raw and k raw into kraw
 * [token][KV_DIM] (llm_rope_heads rotates them). */
static inline void llm_twin_qkv(const llm_twin_t *k) {
  const int32_t *S = k->S;
  int dim = S[LLMT_DIM], qd = S[LLMT_QD], kvd = S[LLMT_NKV] * S[LLMT_HD], hd = S[LLMT_HD],
      rd = S[LLMT_RD];
  int gq = (qd + 31) / 32, gkv = (kvd + 31) / 32, g = (int)k->group[0], t = (int)k->group[1];
  int pos = LLMT_I(9)[0] + t, which = g < gq ? 0 : g < gq + gkv ? 1 : 2;
  int lg = which == 0 ? g : which == 1 ? g - gq : g - gq - gkv, rows = which == 0 ? qd : kvd;
  int lay = S[which == 0 ? LLMT_WQ : which == 1 ? LLMT_WK : LLMT_WV];
  bool fused = S[LLMT_QKV_FUSED] != 0, bias = S[LLMT_QKV_BIAS] != 0;
  float out[LLMT_LANES];
  llmt_rows32(LLMT_U8(5 + which), lay, rows, dim, 32 * lg, LLMT_F(3) + (size_t)t * dim,
              LLMT_A(4) + (size_t)t * LLMT_NBLK(dim), out);
  for (int l = 0; l < LLMT_LANES && bias; l++) {
    int row = 32 * lg + l;
    out[l] += LLMT_F(11 + which)[row < rows ? row : rows - 1];
  }
  const float *rot = LLMT_F(8) + (size_t)pos * rd;
  for (int l = 0; l < LLMT_LANES; l++) {
    int row = 32 * lg + l, e = row % hd, e0 = e & ~1;
    float mine = out[l], pair = out[l ^ 1];
    if (fused && which < 2 && e < rd)
      mine =
          (e & 1) == 0 ? mine * rot[e0] - pair * rot[e0 + 1] : pair * rot[e0 + 1] + mine * rot[e0];
    if (row >= rows) continue;
    if (which == 0)
      LLMT_F(0)[(size_t)t * qd + row] = mine;
    else if (fused || which == 2)
      LLMT_F(which)[(size_t)pos * kvd + row] = mine;
    else
      LLMT_F(10)[(size_t)t * kvd + row] = mine;
  }
}
/* bufs q, key cache, kraw, rotary table, info[, q norm, k norm (QK_NORM)]. Group (head of q (NH) or
 * of k (NKV), token): the head RMS-normed over its HD values and scaled by its norm's weights
 * (QK_NORM: lane l sums elements l, l + 32, ...), then rotated: pairs (2j, 2j + 1), or with
 * ROPE_NEOX (j, j + RD / 2); q in place, k from kraw into the cache at the token's position. Every
 * value is read before any is written (kernels.cu's registers). */
static inline void llm_twin_rope_heads(const llm_twin_t *k) {
  const int32_t *S = k->S;
  int nh = S[LLMT_NH], hd = S[LLMT_HD], rd = S[LLMT_RD], qd = S[LLMT_QD], kvd = S[LLMT_NKV] * hd;
  int h = (int)k->group[0], i = (int)k->group[1], pos = LLMT_I(4)[0] + i;
  bool is_q = h < nh, neox = S[LLMT_ROPE_NEOX] != 0;
  const float *x = is_q ? LLMT_F(0) + (size_t)i * qd + (size_t)h * hd
                        : LLMT_F(2) + (size_t)i * kvd + (size_t)(h - nh) * hd;
  float *o = is_q ? LLMT_F(0) + (size_t)i * qd + (size_t)h * hd
                  : LLMT_F(1) + (size_t)pos * kvd + (size_t)(h - nh) * hd;
  const float *rot = LLMT_F(3) + (size_t)pos * rd;
  float *v = malloc((size_t)hd * sizeof(float));
  if (!v) abort();
  if (S[LLMT_QK_NORM]) {
    const float *w = LLMT_F(is_q ? 5 : 6);
    float ss[LLMT_LANES];
    for (int l = 0; l < LLMT_LANES; l++) {
      ss[l] = 0.0f;
      for (int e = l; e < hd; e += LLMT_LANES) ss[l] += x[e] * x[e];
    }
    float inv = 1.0f / sqrtf(llmt_sum(ss) / (float)hd + llmt_bits(S[LLMT_EPS_BITS]));
    for (int e = 0; e < hd; e++) v[e] = (x[e] * inv) * w[e];
  } else {
    memcpy(v, x, (size_t)hd * sizeof(float));
  }
  for (int j = 0; j < rd / 2; j++) {
    int ea = neox ? j : 2 * j, ez = neox ? j + rd / 2 : 2 * j + 1;
    float c = rot[2 * j], sn = rot[2 * j + 1];
    o[ea] = v[ea] * c - v[ez] * sn;
    o[ez] = v[ea] * sn + v[ez] * c;
  }
  for (int e = rd; e < hd; e++) o[e] = v[e];
  free(v);
}
/* bufs out, q, key cache, value cache, info. Group (head, token); lane l takes positions lo + l, lo
 * + l + 32,
 * ... (lo: the window's first position, WINDOW > 0), scores scaled by ATTN_SCALE. */
static inline void llm_twin_attn(const llm_twin_t *k) {
  const int32_t *S = k->S;
  int hd = S[LLMT_HD], kvd = S[LLMT_NKV] * hd, qd = S[LLMT_QD], h = (int)k->group[0],
      i = (int)k->group[1];
  int pos = LLMT_I(4)[0] + i, kvh = h / (S[LLMT_NH] / S[LLMT_NKV]), window = S[LLMT_WINDOW];
  /* a sliding window's first position */
  int lo = window > 0 && pos >= window ? pos - window + 1 : 0;
  const float *q = LLMT_F(1) + (size_t)i * qd + (size_t)h * hd;
  float scale = llmt_bits(S[LLMT_ATTN_SCALE_BITS]), m[LLMT_LANES], total[LLMT_LANES],
        wt[LLMT_LANES];
  float *acc = calloc((size_t)LLMT_LANES * hd, sizeof(float));
  if (!acc) abort();
  for (int l = 0; l < LLMT_LANES; l++) {
    m[l] = k->low, total[l] = 0.0f;
    for (int t = lo + l; t <= pos; t += LLMT_LANES) {
      const float *kr = LLMT_F(2) + (size_t)t * kvd + (size_t)kvh * hd,
                  *vr = LLMT_F(3) + (size_t)t * kvd + (size_t)kvh * hd;
      float s = 0.0f;
      for (int e = 0; e < hd; e += 4)
        s += q[e] * kr[e] + q[e + 1] * kr[e + 1] + q[e + 2] * kr[e + 2] + q[e + 3] * kr[e + 3];
      s *= scale;
      float nm = fmaxf(m[l], s), corr = m[l] == k->low ? 0.0f : expf(m[l] - nm), p = expf(s - nm);
      total[l] = total[l] * corr + p;
      for (int e = 0; e < hd; e++) acc[l * hd + e] = acc[l * hd + e] * corr + p * vr[e];
      m[l] = nm;
    }
  }
  float mx = llmt_max(m), part[LLMT_LANES];
  for (int l = 0; l < LLMT_LANES; l++)
    wt[l] = m[l] == k->low ? 0.0f : expf(m[l] - mx), part[l] = total[l] * wt[l];
  float sum = llmt_sum(part);
  float *o = LLMT_F(0) + (size_t)i * qd + (size_t)h * hd;
  for (int e = 0; e < hd; e++) {
    for (int l = 0; l < LLMT_LANES; l++) part[l] = acc[l * hd + e] * wt[l];
    o[e] = llmt_sum(part) / sum;
  }
  free(acc);
}
/* bufs x, in floats, in blocks, w, info; vals k. Group (32 rows, token): x[t] += w . in[t]
 * (MATMUL_SET: =). */
static inline void llm_twin_matmul_add(const llm_twin_t *k) {
  int dim = k->S[LLMT_DIM], nin = k->S[LLMT_K_IN], g = (int)k->group[0], t = (int)k->group[1];
  float out[LLMT_LANES];
  llmt_rows32(LLMT_U8(3), k->S[LLMT_WL], dim, nin, 32 * g, LLMT_F(1) + (size_t)t * nin,
              LLMT_A(2) + (size_t)t * LLMT_NBLK(nin), out);
  for (int l = 0; l < LLMT_LANES && 32 * g + l < dim; l++) {
    float *dst = &LLMT_F(0)[(size_t)t * dim + 32 * g + l];
    *dst = k->S[LLMT_MATMUL_SET] ? out[l] : *dst + out[l];
  }
}
/* bufs x, out, weights. Group: row i: x[i] += RMS norm of out[i] times the weights (post-norms;
 * lane l sums elements l, l + 32, ...). */
static inline void llm_twin_norm_add(const llm_twin_t *k) {
  int dim = k->S[LLMT_DIM], i = (int)k->group[0];
  const float *o = LLMT_F(1) + (size_t)i * dim, *w = LLMT_F(2);
  float ss[LLMT_LANES];
  for (int l = 0; l < LLMT_LANES; l++) {
    ss[l] = 0.0f;
    for (int e = l; e < dim; e += LLMT_LANES) ss[l] += o[e] * o[e];
  }
  float inv = 1.0f / sqrtf(llmt_sum(ss) / (float)dim + llmt_bits(k->S[LLMT_EPS_BITS]));
  for (int e = 0; e < dim; e++) LLMT_F(0)[(size_t)i * dim + e] += (o[e] * inv) * w[e];
}
/* silu(a), or GELU's tanh form with tanh(y) = 1 - 2 / (e^2y + 1) (kernels.cu's gate_fn). */
static inline float llmt_gate(float a, bool gelu) {
  if (!gelu) return a / (1.0f + expf(-a));
  float y = 0.7978845608f * (a + 0.044715f * a * a * a);
  return 0.5f * a * (1.0f + (1.0f - 2.0f / (expf(2.0f * y) + 1.0f)));
}
/* bufs hf, hq, xf, xq, w_gate, w_up, info. Group (32 FFN rows: one activation block, token). */
static inline void llm_twin_gate_up(const llm_twin_t *k) {
  int dim = k->S[LLMT_DIM], ffn = k->S[LLMT_FFN], g = (int)k->group[0], t = (int)k->group[1];
  const float *xf = LLMT_F(2) + (size_t)t * dim;
  const llmt_act_t *xq = LLMT_A(3) + (size_t)t * LLMT_NBLK(dim);
  float a[LLMT_LANES], u[LLMT_LANES], h[LLMT_LANES], mag[LLMT_LANES];
  llmt_rows32(LLMT_U8(4), k->S[LLMT_WG], ffn, dim, 32 * g, xf, xq, a);
  llmt_rows32(LLMT_U8(5), k->S[LLMT_WU], ffn, dim, 32 * g, xf, xq, u);
  for (int l = 0; l < LLMT_LANES; l++) {
    int row = 32 * g + l;
    h[l] = row < ffn ? llmt_gate(a[l], k->S[LLMT_FFN_GELU] != 0) * u[l] : 0.0f;
    if (row < ffn) LLMT_F(0)[(size_t)t * ffn + row] = h[l];
    mag[l] = fabsf(h[l]);
  }
  float amax = llmt_max(mag), d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
  llmt_act_t *o = LLMT_A(1) + (size_t)t * LLMT_NBLK(ffn) + g;
  int s = 0, s16 = 0;
  for (int l = 0; l < LLMT_LANES; l++) {
    int q = (int)rintf(h[l] * id);
    s += q;
    o->q[l] = (int8_t)q;
    if (l == 15) s16 = s;
  }
  o->d = d, o->sd = (float)s * d, o->s = s, o->s16 = s16;
}
/* bufs logits, best, xf, xq, classifier; vals first group. Group: CLS_ROWS rows of row 0's logits,
 * and the group's best (the value's bits, its lowest index). */
static inline void llm_twin_classify(const llm_twin_t *k) {
  const int32_t *S = k->S;
  int dim = S[LLMT_DIM], vocab = S[LLMT_VOCAB], g = (int)k->group[0] + k->v[0],
      r0 = g * S[LLMT_CLS_ROWS];
  float top[LLMT_LANES], out[LLMT_LANES];
  int arg[LLMT_LANES];
  for (int l = 0; l < LLMT_LANES; l++) top[l] = k->low, arg[l] = INT_MAX;
  for (int rb = r0; rb < r0 + S[LLMT_CLS_ROWS]; rb += LLMT_LANES) {
    llmt_rows32(LLMT_U8(4), S[LLMT_WL], vocab, dim, rb, LLMT_F(2), LLMT_A(3), out);
    for (int l = 0; l < LLMT_LANES; l++) {
      if (rb + l >= vocab) continue;
      LLMT_F(0)[rb + l] = out[l];
      if (out[l] > top[l]) top[l] = out[l], arg[l] = rb + l;
    }
  }
  float mx = llmt_max(top);
  int at = INT_MAX;
  for (int l = 0; l < LLMT_LANES; l++)
    if (top[l] == mx && arg[l] < at) at = arg[l];
  if (at == INT_MAX)
    at = r0; /* every logit below `low` or NaN: the group's first row, as kernels.c */
  LLMT_I(1)[2 * g] = llmt_int(mx), LLMT_I(1)[2 * g + 1] = at;
}

static inline uint32_t llmt_ordered(uint32_t b) { return b & 0x80000000u ? ~b : b | 0x80000000u; }
static inline float llmt_unordered(uint32_t o) {
  return llmt_bits((int32_t)(o & 0x80000000u ? o & 0x7fffffffu : ~o));
}
/* The largest key K such that the sum over keys >= K of (count ? 1 : P) >= need (> with above). */
static inline uint64_t llmt_search(const uint64_t *keys, const uint64_t *probs, int vocab,
                                   int key_bits, bool count, uint64_t need, bool above) {
  uint64_t kk = 0;
  for (int bit = key_bits - 1; bit >= 0; bit--) {
    uint64_t trial = kk | (uint64_t)1 << bit, total = 0;
    for (int i = 0; i < vocab; i++) total += keys[i] >= trial ? (count ? 1 : probs[i]) : 0;
    if (above ? total > need : total >= need) kk = trial;
  }
  return kk;
}
static inline uint64_t llmt_scale_down(uint64_t need, uint64_t frac, int bits) {
  return ((need >> 32) * frac << (32 - bits)) + (((need & 0xffffffffu) * frac) >> bits);
}
static inline uint64_t llmt_key(float logit, uint32_t id, int id_bits) {
  return (uint64_t)llmt_ordered((uint32_t)llmt_int(logit)) << id_bits |
         ((((uint64_t)1 << id_bits) - 1) - id);
}
/* The probabilities exp((logit - mx) / t) x 2^40 of the keys from cut up; their sum. */
static inline uint64_t llmt_weigh(const uint64_t *keys, uint64_t *probs, int vocab, int id_bits,
                                  uint64_t cut, float mx, float t) {
  uint64_t kept = 0;
  for (int i = 0; i < vocab; i++) {
    float x = llmt_unordered((uint32_t)(keys[i] >> id_bits));
    probs[i] = keys[i] >= cut ? (uint64_t)(expf((x - mx) / t) * 1099511627776.0f + 0.5f) : 0;
    kept += probs[i];
  }
  return kept;
}
/* kernels.cu's penalize(), its counts in the probabilities' words. */
static inline void llmt_penalize(uint64_t *keys, uint32_t *count, const int32_t *tokens, int at,
                                 int n, int vocab, int id_bits, const float pen[3]) {
  for (int j = at - n; j < at; j++)
    if ((uint32_t)tokens[j] < (uint32_t)vocab) count[tokens[j]] = 0;
  for (int j = at - n; j < at; j++)
    if ((uint32_t)tokens[j] < (uint32_t)vocab) count[tokens[j]]++;
  for (int j = at - n; j < at; j++) {
    int32_t t = tokens[j];
    if ((uint32_t)t >= (uint32_t)vocab || !count[t]) continue;
    float c = (float)count[t], x = llmt_unordered((uint32_t)(keys[t] >> id_bits));
    x = x <= 0.0f ? x * pen[0] : x / pen[0];
    keys[t] = llmt_key(x - (c * pen[1] + pen[2]), (uint32_t)t, id_bits);
    count[t] = 0;
  }
}
/* bufs tokens, scratch, best, logits, sampler, info; vals groups. One group: the token into
 * tokens[p0 + n] (kernels.cu's llm_select, whose sums are exact integers: one loop here). */
static inline void llm_twin_select(const llm_twin_t *k) {
  const int32_t *S = k->S;
  int vocab = S[LLMT_VOCAB], id_bits = S[LLMT_ID_BITS];
  const uint32_t *sp = (const uint32_t *)k->b[4];
  float temperature = llmt_bits((int32_t)sp[0]), top_p = llmt_bits((int32_t)sp[1]),
        min_p = llmt_bits((int32_t)sp[5]);
  float pen[3] = {llmt_bits((int32_t)sp[6]), llmt_bits((int32_t)sp[7]), llmt_bits((int32_t)sp[8])};
  int top_k = (int)sp[2], last_n = (int)sp[9];
  bool penalties = last_n > 0 && (pen[0] != 1.0f || pen[1] != 0.0f || pen[2] != 0.0f);
  uint64_t seed = sp[3] | (uint64_t)sp[4] << 32, mask = ((uint64_t)1 << id_bits) - 1;
  int at = LLMT_I(5)[0] + LLMT_I(5)[1];
  if (!(temperature > 0.0f) && !penalties) {
    uint64_t best = 0;
    for (int g = 0; g < k->v[0]; g++) {
      uint64_t key = (uint64_t)llmt_ordered((uint32_t)LLMT_I(2)[2 * g]) << 32 |
                     (0xffffffffu - (uint32_t)LLMT_I(2)[2 * g + 1]);
      if (key > best) best = key;
    }
    LLMT_I(0)[at] = (int32_t)(0xffffffffu - (uint32_t)best);
    return;
  }
  uint64_t *keys = (uint64_t *)k->b[1], *probs = keys + vocab, top = 0;
  const float *logits = LLMT_F(3);
  for (int i = 0; i < vocab; i++) keys[i] = llmt_key(logits[i], (uint32_t)i, id_bits);
  if (penalties)
    llmt_penalize(keys, (uint32_t *)probs, LLMT_I(0), at, last_n < at ? last_n : at, vocab, id_bits,
                  pen);
  for (int i = 0; i < vocab; i++)
    if (keys[i] > top) top = keys[i];
  if (!(temperature > 0.0f)) {
    LLMT_I(0)[at] = (int32_t)(mask - (top & mask));
    return;
  }
  float mx = llmt_unordered((uint32_t)(top >> id_bits));
  int key_bits = 32 + id_bits;
  uint64_t cut = top_k > 0 && top_k < vocab
                     ? llmt_search(keys, probs, vocab, key_bits, true, (uint64_t)top_k, false)
                     : 0;
  uint64_t kept = llmt_weigh(keys, probs, vocab, id_bits, cut, mx, 1.0f);
  if (top_p < 1.0f)
    cut = llmt_search(keys, probs, vocab, key_bits, false,
                      llmt_scale_down(kept, (uint64_t)(top_p * 16777216.0f), 24), false);
  if (min_p > 0.0f) {
    float floor_logit = mx + logf(min_p);
    uint32_t floor_bits = floor_logit == 0.0f ? 0x80000000u : (uint32_t)llmt_int(floor_logit);
    uint64_t floor_key = (uint64_t)llmt_ordered(floor_bits) << id_bits;
    floor_key = floor_key < top ? floor_key : top;
    cut = cut > floor_key ? cut : floor_key;
  }
  kept = llmt_weigh(keys, probs, vocab, id_bits, cut, mx, temperature);
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(at + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  uint64_t u = llmt_scale_down(kept, z >> 32, 32);
  uint64_t kk = llmt_search(keys, probs, vocab, key_bits, false, u, true);
  LLMT_I(0)[at] = (int32_t)(mask - (kk & mask));
}

#undef LLMT_F
#undef LLMT_I
#undef LLMT_U8
#undef LLMT_A
#endif
