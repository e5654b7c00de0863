/* ggml's superblock formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS: 256 elements a superblock;
 * quant.h describes their bytes): reading one into integers (the ground truth of dequantizing and
 * the source of the K layouts' repack), simple quantizers for the models the tests write, and the
 * K layouts' terms of every type that repacks into them (Q5_1 too). */
#include <math.h>
#include <string.h>

#include "quant.h"

const int8_t llm_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

static uint16_t bits_at(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return h;
}
/* Stores f as a half and returns the half's value (what the decoder will read). */
static float put_half(uint8_t *p, float f) {
  uint16_t h = llm_float_to_half(f);
  memcpy(p, &h, 2);
  return llm_half_to_float(h);
}
static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
static int nearest(float x) { return (int)lrintf(x); }

/* A superblock as integers: element e is (d sc[e / 16]) q[e] - dmin m[e / 16], with q the integer
 * ggml multiplies by (Q3_K's q - 4, Q6_K's q - 32, IQ4_XS's kvalues[q]); m and dmin 0 for the types
 * without mins. d and dmin as half bits. */
typedef struct {
  int q[256], sc[16], m[16];
  uint16_t d, dmin;
} raw_t;

/* Q4_K's and Q5_K's 6-bit scale and min of sub-block j (0..7) of 32, from their 12 bytes. */
static void scale_min_k4(const uint8_t *s, int j, int *sc, int *m) {
  if (j < 4) {
    *sc = s[j] & 63, *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
    *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}

/* Q2_K's and Q3_K's 2-bit quants: element e is in byte 32 (e / 128) + e % 32, at bits 2 ((e % 128)
 * / 32). */
static int two_bits(const uint8_t *qs, int e) {
  return qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32)) & 3;
}

static void read_q2_k(const uint8_t *b, raw_t *r) {
  for (int i = 0; i < 16; i++) r->sc[i] = b[i] & 15, r->m[i] = b[i] >> 4;
  for (int e = 0; e < 256; e++) r->q[e] = two_bits(b + 16, e);
  r->d = bits_at(b + 80), r->dmin = bits_at(b + 82);
}

static void read_q3_k(const uint8_t *b, raw_t *r) {
  const uint8_t *hmask = b, *qs = b + 32, *s = b + 96;
  for (int i = 0; i < 16; i++) {
    int low = i < 8 ? s[i] & 15 : s[i - 8] >> 4, high = s[8 + i % 4] >> (2 * (i / 4)) & 3;
    r->sc[i] = (low | high << 4) - 32, r->m[i] = 0;
  }
  for (int e = 0; e < 256; e++) {
    int high = hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32) & 1;
    r->q[e] = two_bits(qs, e) + 4 * high - 4;
  }
  r->d = bits_at(b + 108), r->dmin = 0;
}

/* Q4_K (fifth = false) and Q5_K: element e is nibble (e % 64) / 32 of byte 32 (e / 64) + e % 32. */
static void read_q45_k(const uint8_t *b, bool fifth, raw_t *r) {
  const uint8_t *qh = b + 16, *qs = b + (fifth ? 48 : 16);
  for (int j = 0; j < 8; j++) {
    int sc, m;
    scale_min_k4(b + 4, j, &sc, &m);
    r->sc[2 * j] = r->sc[2 * j + 1] = sc, r->m[2 * j] = r->m[2 * j + 1] = m;
  }
  for (int e = 0; e < 256; e++) {
    uint8_t byte = qs[32 * (e / 64) + e % 32];
    int q = (e % 64) < 32 ? byte & 15 : byte >> 4;
    if (fifth) q |= (qh[e % 32] >> (e / 32) & 1) << 4;
    r->q[e] = q;
  }
  r->d = bits_at(b), r->dmin = bits_at(b + 2);
}

static void read_q6_k(const uint8_t *b, raw_t *r) {
  const uint8_t *ql = b, *qh = b + 128;
  for (int i = 0; i < 16; i++) r->sc[i] = (int8_t)b[192 + i], r->m[i] = 0;
  for (int e = 0; e < 256; e++) {
    int n = e / 128, k = (e % 128) / 32, l = e % 32;
    uint8_t byte = ql[64 * n + 32 * (k & 1) + l];
    int low = k < 2 ? byte & 15 : byte >> 4, high = qh[32 * n + l] >> (2 * k) & 3;
    r->q[e] = (low | high << 4) - 32;
  }
  r->d = bits_at(b + 208), r->dmin = 0;
}

static void read_iq4_xs(const uint8_t *b, raw_t *r) {
  uint16_t scales_h = bits_at(b + 2);
  for (int j = 0; j < 8; j++) {
    int ls = (b[4 + j / 2] >> (4 * (j % 2)) & 15) | (scales_h >> (2 * j) & 3) << 4;
    r->sc[2 * j] = r->sc[2 * j + 1] = ls - 32, r->m[2 * j] = r->m[2 * j + 1] = 0;
    const uint8_t *qs = b + 8 + 16 * j;
    for (int i = 0; i < 16; i++) {
      r->q[32 * j + i] = llm_iq4_values[qs[i] & 15];
      r->q[32 * j + 16 + i] = llm_iq4_values[qs[i] >> 4];
    }
  }
  r->d = bits_at(b), r->dmin = 0;
}

static void read_superblock(ggml_type_t type, const uint8_t *b, raw_t *r) {
  switch (type) {
    case GGML_TYPE_Q2_K: read_q2_k(b, r); break;
    case GGML_TYPE_Q3_K: read_q3_k(b, r); break;
    case GGML_TYPE_Q4_K: read_q45_k(b, false, r); break;
    case GGML_TYPE_Q5_K: read_q45_k(b, true, r); break;
    case GGML_TYPE_Q6_K: read_q6_k(b, r); break;
    default: read_iq4_xs(b, r); break;
  }
}

static bool has_mins(ggml_type_t type) {
  return type == GGML_TYPE_Q2_K || type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K;
}

/* In ggml's float operations: (d sc) q - dmin m. */
void llm_dequantize_row_k(ggml_type_t type, const uint8_t *src, float *x, size_t n) {
  raw_t r;
  bool mins = has_mins(type);
  for (size_t s = 0; s < n / 256; s++, src += ggml_block_bytes(type), x += 256) {
    read_superblock(type, src, &r);
    float d = llm_half_to_float(r.d), dmin = llm_half_to_float(r.dmin);
    for (int e = 0; e < 256; e++) {
      float dl = d * (float)r.sc[e / 16];
      x[e] = mins ? dl * (float)r.q[e] - dmin * (float)r.m[e / 16] : dl * (float)r.q[e];
    }
  }
}

void llm_kparts(ggml_type_t type, const uint8_t *b, llm_kparts_t *out) {
  if (type == GGML_TYPE_Q5_1) { /* d q + m = d 1 q - m (-1) */
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    for (int j = 0; j < 32; j++) {
      int nib = j < 16 ? b[8 + j] & 15 : b[8 + j - 16] >> 4;
      out->q[j] = (int8_t)(nib | (qh >> j & 1) << 4);
    }
    out->blocks = 1, out->d = bits_at(b), out->dmin = bits_at(b + 2);
    out->sc[0][0] = out->sc[0][1] = 1, out->m[0][0] = out->m[0][1] = -1;
    return;
  }
  raw_t r;
  read_superblock(type, b, &r);
  bool q3 = type == GGML_TYPE_Q3_K; /* d sc (q - 4) = d sc q' - d (4 sc), q' = q + 4 in 0..7 */
  out->blocks = 8, out->d = r.d, out->dmin = q3 ? r.d : r.dmin;
  for (int e = 0; e < 256; e++) out->q[e] = (int8_t)(q3 ? r.q[e] + 4 : r.q[e]);
  for (int i = 0; i < 16; i++) {
    out->sc[i / 2][i % 2] = (int8_t)r.sc[i];
    out->m[i / 2][i % 2] = (int8_t)(q3 ? 4 * r.sc[i] : r.m[i]);
  }
}

/* ---- quantizers: round to nearest with simple scale choices (valid blocks for the tests' models,
 * not ggml's error-minimising search) ---- */

/* The value of largest magnitude among n, with its sign. */
static float signed_max(const float *x, int n) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; i++)
    if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
  return max;
}

/* Sub-blocks of len elements as scale q - min, q in 0..nmax, min >= 0 (the block's minimum when
 * negative). */
static void scale_mins(const float *x, int len, int count, int nmax, float *scale, float *min) {
  for (int j = 0; j < count; j++) {
    float lo = 0, hi = x[j * len];
    for (int i = 0; i < len; i++) lo = fminf(lo, x[j * len + i]), hi = fmaxf(hi, x[j * len + i]);
    scale[j] = (hi - lo) / (float)nmax, min[j] = -lo;
  }
}

static float largest(const float *v, int n) {
  float m = 0;
  for (int i = 0; i < n; i++) m = fmaxf(m, v[i]);
  return m;
}

/* Q2_K (K = 2), Q4_K (4), Q5_K (5): integer sub-block scales of d, mins of dmin; then the quants.
 */
static void quantize_with_mins(ggml_type_t type, const float *x, uint8_t *o) {
  bool q2 = type == GGML_TYPE_Q2_K;
  int len = q2 ? 16 : 32, count = 256 / len,
      nmax = q2                       ? 3
             : type == GGML_TYPE_Q4_K ? 15
                                      : 31,
      smax = q2 ? 15 : 63;
  float scale[16], min[16];
  int ls[16], lm[16];
  scale_mins(x, len, count, nmax, scale, min);
  memset(o, 0, ggml_block_bytes(type));
  uint8_t *dp = q2 ? o + 80 : o;
  float d = put_half(dp, largest(scale, count) / (float)smax),
        dmin = put_half(dp + 2, largest(min, count) / (float)smax);
  for (int j = 0; j < count; j++) {
    ls[j] = d > 0 ? clampi(nearest(scale[j] / d), 0, smax) : 0;
    lm[j] = dmin > 0 ? clampi(nearest(min[j] / dmin), 0, smax) : 0;
    if (q2) {
      o[j] = (uint8_t)(ls[j] | lm[j] << 4);
    } else if (j < 4) {
      o[4 + j] = (uint8_t)ls[j], o[8 + j] = (uint8_t)lm[j];
    } else {
      o[8 + j] = (uint8_t)((ls[j] & 15) | (lm[j] & 15) << 4);
      o[4 + j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
      o[4 + j] |= (uint8_t)((lm[j] >> 4) << 6);
    }
  }
  for (int e = 0; e < 256; e++) {
    int j = e / len;
    float step = d * (float)ls[j];
    int q = step != 0 ? clampi(nearest((x[e] + dmin * (float)lm[j]) / step), 0, nmax) : 0;
    if (q2) {
      o[16 + 32 * (e / 128) + e % 32] |= (uint8_t)(q << (2 * ((e % 128) / 32)));
    } else {
      uint8_t *qs = o + (type == GGML_TYPE_Q5_K ? 48 : 16);
      qs[32 * (e / 64) + e % 32] |= (uint8_t)((q & 15) << ((e % 64) < 32 ? 0 : 4));
      if (type == GGML_TYPE_Q5_K) o[16 + e % 32] |= (uint8_t)((q >> 4) << (e / 32));
    }
  }
}

/* Signed sub-block scales (Q3_K, Q6_K, IQ4_XS): each sub-block's value of largest magnitude maps to
 * the quant qmin (-4, -32, kvalues[0] = -127); the largest scale to the integer scale smin. */
static void signed_scales(const float *x, int len, int count, float qmin, int smin, int smax,
                          float d_out[1], int *ls) {
  float scale[16], top = 0;
  for (int j = 0; j < count; j++) {
    scale[j] = signed_max(x + j * len, len) / qmin;
    if (fabsf(scale[j]) > fabsf(top)) top = scale[j];
  }
  float d = llm_half_to_float(llm_float_to_half(top / (float)smin));
  for (int j = 0; j < count; j++) ls[j] = d != 0 ? clampi(nearest(scale[j] / d), smin, smax) : 0;
  d_out[0] = d;
}

static void quantize_q3_k(const float *x, uint8_t *o) {
  int ls[16];
  float d;
  signed_scales(x, 16, 16, -4, -32, 31, &d, ls);
  memset(o, 0, 110);
  put_half(o + 108, d);
  for (int i = 0; i < 16; i++) {
    int s = ls[i] + 32;
    if (i < 8)
      o[96 + i] |= (uint8_t)(s & 15);
    else
      o[96 + i - 8] |= (uint8_t)((s & 15) << 4);
    o[96 + 8 + i % 4] |= (uint8_t)((s >> 4) << (2 * (i / 4)));
  }
  for (int e = 0; e < 256; e++) {
    float step = d * (float)ls[e / 16];
    int q = (step != 0 ? clampi(nearest(x[e] / step), -4, 3) : 0) + 4;
    o[32 + 32 * (e / 128) + e % 32] |= (uint8_t)((q & 3) << (2 * ((e % 128) / 32)));
    if (q & 4) o[e % 32] |= (uint8_t)(1 << (4 * (e / 128) + (e % 128) / 32));
  }
}

static void quantize_q6_k(const float *x, uint8_t *o) {
  int ls[16];
  float d;
  signed_scales(x, 16, 16, -32, -128, 127, &d, ls);
  memset(o, 0, 210);
  put_half(o + 208, d);
  for (int i = 0; i < 16; i++) o[192 + i] = (uint8_t)(int8_t)ls[i];
  for (int e = 0; e < 256; e++) {
    float step = d * (float)ls[e / 16];
    int q = (step != 0 ? clampi(nearest(x[e] / step), -32, 31) : 0) + 32;
    int n = e / 128, k = (e % 128) / 32, l = e % 32;
    o[64 * n + 32 * (k & 1) + l] |= (uint8_t)((q & 15) << (k < 2 ? 0 : 4));
    o[128 + 32 * n + l] |= (uint8_t)((q >> 4) << (2 * k));
  }
}

int llm_iq4_nearest(float v) {
  int best = 0;
  for (int i = 1; i < 16; i++)
    if (fabsf((float)llm_iq4_values[i] - v) < fabsf((float)llm_iq4_values[best] - v)) best = i;
  return best;
}

static void quantize_iq4_xs(const float *x, uint8_t *o) {
  int ls[8];
  float d;
  signed_scales(x, 32, 8, -127, -32, 31, &d, ls);
  memset(o, 0, 136);
  put_half(o, d);
  uint16_t scales_h = 0;
  for (int j = 0; j < 8; j++) {
    int s = ls[j] + 32;
    o[4 + j / 2] |= (uint8_t)((s & 15) << (4 * (j % 2)));
    scales_h |= (uint16_t)((s >> 4) << (2 * j));
    float step = d * (float)ls[j];
    for (int i = 0; i < 32; i++) {
      int q = step != 0 ? llm_iq4_nearest(x[32 * j + i] / step) : 8;
      o[8 + 16 * j + i % 16] |= (uint8_t)(q << (i < 16 ? 0 : 4));
    }
  }
  memcpy(o + 2, &scales_h, 2);
}

void llm_quantize_row_k(ggml_type_t type, const float *x, uint8_t *dst, size_t n) {
  for (size_t s = 0; s < n / 256; s++, x += 256, dst += ggml_block_bytes(type)) {
    if (type == GGML_TYPE_Q3_K)
      quantize_q3_k(x, dst);
    else if (type == GGML_TYPE_Q6_K)
      quantize_q6_k(x, dst);
    else if (type == GGML_TYPE_IQ4_XS)
      quantize_iq4_xs(x, dst);
    else
      quantize_with_mins(type, x, dst);
  }
}
