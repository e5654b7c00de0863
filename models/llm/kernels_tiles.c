/* The CPU kernels' matrix products (kernels.c's first part: decoder_items.c compiles this file and
 * kernels.c as one source, this one first): the activation blocks, the weight layouts (quant.h),
 * the vector helpers and the activations' quantization (which kernels.c's entries use too) and one
 * row group's products with the inputs of a few tokens, in three versions: AVX-512 VNNI, AVX2 (with
 * AVX-VNNI when present) and portable C, chosen where the kernel is compiled (-march=native;
 * LLM_ISA_CAP, from HCQ_LLM_KERNELS, caps the choice so that the tests run every version on one
 * machine). They compute the same integer sums and the same float operations in the same order
 * (fmaf in C), so they give the same bits. kernels.c's header says how the products work. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && (defined(__AVX2__) || defined(__AVX512F__))
#include <immintrin.h>
#endif

#ifndef LLM_ISA_CAP
#define LLM_ISA_CAP 3
#endif
#if LLM_ISA_CAP >= 3 && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define LLM_ISA 3
#elif LLM_ISA_CAP >= 2 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define LLM_ISA 2
#else
#define LLM_ISA 0
#endif

/* Small loops over chunks and tokens unrolled, so that their accumulators stay in registers. */
#define UNROLL _Pragma("GCC unroll 8")

/* Layouts (quant.h's llm_layout_t). */
#define L_F32 0
#define L_F16 1
#define L_Q4 2
#define L_Q8 3
#define L_K4 \
  4 /* two-level scales: d sc_h q - dmin m_h (quant.h), 4-bit q, superblocks of 8 blocks */
#define L_K8 5   /* the same with int8 q */
#define L_K8_1 6 /* L_K8 with superblocks of one block (Q5_1) */
#define L_Q5 7   /* 4-bit nibbles as L_Q4 plus a plane of fifth bits, d (q - 16) (Q5_0) */
#define NBLK(k) (((k) + 31) / 32)

typedef struct {
  float d, sd;
  int32_t s, s16; /* the sum of the q, of the first 16 q */
  int8_t q[32];
} act_t;
_Static_assert(sizeof(act_t) == 48, "activation block");

/* The K layouts: blocks per superblock, bytes of a block's quants, of a block (quants, int8
 * sc[2][16], int8 m[2][16]) and of a superblock (half d[16], half dmin[16], its blocks). */
#define K_SB(layout) ((layout) == L_K8_1 ? 1 : 8)
#define K_QB(layout) ((layout) == L_K4 ? 256 : 512)
#define K_BB(layout) (K_QB(layout) + 64)
#define K_SBB(layout) (64 + K_SB(layout) * K_BB(layout))

/* Bytes of one row group (16 rows) of a matrix with k columns. */
static inline size_t group_bytes(int layout, int k) {
  switch (layout) {
    case L_F32: return (size_t)k * 64;
    case L_F16: return (size_t)k * 32;
    case L_Q4: return (size_t)k / 32 * 320;
    case L_Q8: return (size_t)k / 32 * 544;
    case L_Q5: return (size_t)k / 32 * 352;
    default: return (size_t)(k / 32 / K_SB(layout)) * K_SBB(layout);
  }
}
static inline int quantized(int layout) { return layout != L_F32 && layout != L_F16; }
/* L_Q5's fifth bits of one chunk's 64 bytes (c = 0..3; hi: the high nibbles' elements): bit 4 r + i
 * for row r's byte i, as ggml's qh keeps them per element (quant.h). */
static inline uint64_t q5_bits(const uint8_t *blk, int c, int hi) {
  uint64_t bits;
  memcpy(&bits, blk + 256 + 16 * c + 8 * hi, 8);
  return bits;
}

static inline float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man) {
    int e = -1;
    do {
      e++;
      man <<= 1;
    } while (!(man & 0x400));
    bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
  } else {
    bits = sign;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
static inline float half_at(const uint8_t *p, int i) {
  uint16_t h;
  memcpy(&h, p + 2 * i, 2);
  return half_to_float(h);
}

/* ---- vectors (GCC's and clang's vector extensions) for the float work ----
 * 16 lanes on every machine (two 256-bit registers where there is no AVX-512): the sums across
 * lanes (the RMS norm's, the softmax's) then run in the same order everywhere, so every machine
 * computes the same bits, not only every kernel version on one machine. */
#define VW 16
typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));

static inline vf vload(const float *p) {
  vf v;
  memcpy(&v, p, sizeof(v));
  return v;
}
static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof(v)); }
static inline vf vselect(vi keep, vf a, vf b) { return (vf)((keep & (vi)a) | (~keep & (vi)b)); }
static inline float vsum(vf v) {
  float s = 0;
  for (int i = 0; i < VW; i++) s += v[i];
  return s;
}
static inline float vmax(vf v) {
  float m = v[0];
  for (int i = 1; i < VW; i++) m = v[i] > m ? v[i] : m;
  return m;
}

/* exp(x) of each lane within 2 ulp of expf, in vector arithmetic: x = k ln2 + r with ln2 in two
 * parts (r exact), e^r by its Taylor series to r^7, 2^k put into the exponent bits. x is clamped to
 * [-87, 88] first, where 2^k is a normal float (e^-87 adds nothing next to a softmax's largest 1).
 */
static inline vf vexp(vf x) {
  vf lo = (vf){0} - 87.0f, hi = (vf){0} + 88.0f;
  x = vselect(x < lo, lo, x);
  x = vselect(x > hi, hi, x);
  const float shifter = 12582912.0f; /* 1.5 x 2^23: adding it rounds to an integer */
  vf k = (x * 1.44269504f + shifter) - shifter;
  vf r = (x - k * 0.693145752f) - k * 1.42860677e-6f;
  vf p = r * (1.0f / 5040) + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  vi bits = (__builtin_convertvector(k, vi) + 127) << 23;
  return p * (vf)bits;
}

/* ---- activations ---- */

/* Quantizes n floats (the last block padded with zeros) into blocks; rounding to nearest, ties to
 * even, by the 1.5 x 2^23 shifter (|x / d| <= 127). In vector lanes (a batch step quantizes every
 * row's activations several times a layer); each lane does the scalar form's operations, the max
 * and the integer sums do not depend on their order, so the blocks are the same bits. */
typedef int8_t vb __attribute__((vector_size(VW)));
static void quantize(const float *x, int n, act_t *out) {
  enum { NV = 32 / VW };
  const vi magnitude = (vi){0} + 0x7fffffff;
  for (int b = 0; b < NBLK(n); b++) {
    float pad[32];
    const float *src = x + 32 * b;
    int m = n - 32 * b < 32 ? n - 32 * b : 32;
    if (m < 32) {
      for (int j = 0; j < 32; j++) pad[j] = j < m ? src[j] : 0.0f;
      src = pad;
    }
    vf v[NV], top = (vf){0};
    for (int j = 0; j < NV; j++) {
      v[j] = vload(src + j * VW);
      vf a = (vf)((vi)v[j] & magnitude);
      top = vselect(a > top, a, top);
    }
    float amax = vmax(top);
    float d = amax / 127, id = d != 0.0f ? 127 / amax : 0.0f;
    int s = 0, s16 = 0;
    for (int j = 0; j < NV; j++) {
      vi q = __builtin_convertvector((v[j] * id + 12582912.0f) - 12582912.0f, vi);
      vb q8 = __builtin_convertvector(q, vb);
      memcpy(out[b].q + j * VW, &q8, VW);
      for (int k = 0; k < VW; k++) s += q[k];
      if ((j + 1) * VW == 16) s16 = s;
    }
    out[b].d = d, out[b].s = s, out[b].sd = (float)s * d, out[b].s16 = s16;
  }
}

/* The inputs of a K-quant or IQ4_XS matrix, as llama.cpp's Q8_K: one scale per 256 elements (the
 * element of largest magnitude maps to -127, d = 1 / (-127 / max)), shared by the superblock's 8
 * blocks; q = min(127, round(x / d)). n is a multiple of 256. */
static void quantize_k(const float *x, int n, act_t *out) {
  for (int sb = 0; sb < n / 256; sb++) {
    const float *v = x + 256 * sb;
    float amax = 0, max = 0;
    for (int j = 0; j < 256; j++)
      if (fabsf(v[j]) > amax) amax = fabsf(v[j]), max = v[j];
    float iscale = amax != 0.0f ? -127.0f / max : 0.0f, d = amax != 0.0f ? 1.0f / iscale : 0.0f;
    for (int b = 0; b < 8; b++) {
      act_t *o = &out[8 * sb + b];
      int s = 0, s16 = 0;
      for (int j = 0; j < 32; j++) {
        int q = (int)((iscale * v[32 * b + j] + 12582912.0f) - 12582912.0f);
        q = q < 127 ? q : 127;
        o->q[j] = (int8_t)q;
        s += q;
        if (j == 15) s16 = s;
      }
      o->d = d, o->s = s, o->sd = (float)s * d, o->s16 = s16;
    }
  }
}

/* ACT_K: the entry's quantized output feeds K-quant matrices only (llama.cpp's Q8_K inputs). */
#ifndef ACT_K
#define ACT_K 0
#endif
static inline void quantize_act(const float *x, int n, act_t *out) {
  if (ACT_K)
    quantize_k(x, n, out);
  else
    quantize(x, n, out);
}

/* ---- one row group times the inputs of nt tokens ----
 * out[t][r] = row r of the group . input t. fin: float inputs (row stride k), qin: blocks (row
 * stride NBLK(k)): float layouts read fin, quantized ones qin. */

#if LLM_ISA == 3
/* Tokens per tile: 8 for the one-level layouts (a batch step's 8 rows share one decoding of each
 * weight block; 8 accumulators, the block's 8 registers and its scales fit the 32 registers), 4 for
 * the K layouts (their superblock sums, tD and tM, double the accumulators). */
#define TILE_MAX 8
#define TILE_MAX_K 4
/* Weights are read once per token, from memory: the loop asks for the bytes PREFETCH_DISTANCE ahead
 * of the block it is at (one hint per cache line), so that more lines are on their way than the
 * out-of-order window alone would request. */
#define PREFETCH_DISTANCE 2048
static inline __attribute__((always_inline)) void prefetch_ahead(const uint8_t *blk, int bytes) {
  UNROLL for (int o = 0; o < bytes; o += 64)
      _mm_prefetch((const char *)blk + PREFETCH_DISTANCE + o, _MM_HINT_T0);
}
/* Activation bytes 4c..4c+3 of a block in every 32-bit lane (a broadcast straight from memory). */
static inline __attribute__((always_inline)) __m512i act_word(const act_t *x, int c) {
  int32_t v;
  memcpy(&v, x->q + 4 * c, 4);
  return _mm512_set1_epi32(v);
}

static inline __attribute__((always_inline)) void q4_tile(int tn, const uint8_t *w, int nb,
                                                          const act_t *a, size_t stride,
                                                          float (*out)[16]) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m512 acc[TILE_MAX];
  UNROLL for (int t = 0; t < TILE_MAX; t++) acc[t] = _mm512_setzero_ps();
  for (int b = 0; b < nb; b++) {
    const uint8_t *blk = w + (size_t)b * 320;
    prefetch_ahead(blk, 320);
    __m512i lo[4], hi[4];
    UNROLL for (int c = 0; c < 4; c++) {
      __m512i v = _mm512_loadu_si512(blk + 64 * c);
      lo[c] = _mm512_and_si512(v, m4);
      hi[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 256)));
    __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 288)));
    UNROLL for (int t = 0; t < tn; t++) {
      const act_t *x = a + (size_t)t * stride + b;
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
      UNROLL for (int c = 0; c < 4; c++) {
        s0 = _mm512_dpbusd_epi32(s0, lo[c], act_word(x, 2 * c));
        s1 = _mm512_dpbusd_epi32(s1, hi[c], act_word(x, 2 * c + 1));
      }
      __m512 s = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x->d)), s, acc[t]);
      acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(x->sd), acc[t]);
    }
  }
  UNROLL for (int t = 0; t < tn; t++) _mm512_storeu_ps(out[t], acc[t]);
}

/* One block of 8-bit unsigned weights u (each stored as w + offset: Q8_0 flipped by 128, Q5_0's
 * q = w + 16) times the activation block x: sum u q - offset sum q, scaled by d_w d_x into acc. */
static inline __attribute__((always_inline)) __m512 offset_block(const __m512i u[8], const act_t *x,
                                                                 int offset, __m512 d, __m512 acc) {
  __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
  UNROLL for (int c = 0; c < 8; c += 2) {
    s0 = _mm512_dpbusd_epi32(s0, u[c], act_word(x, c));
    s1 = _mm512_dpbusd_epi32(s1, u[c + 1], act_word(x, c + 1));
  }
  __m512i si = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(offset * x->s));
  return _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x->d)), _mm512_cvtepi32_ps(si), acc);
}

static inline __attribute__((always_inline)) void q8_tile(int tn, const uint8_t *w, int nb,
                                                          const act_t *a, size_t stride,
                                                          float (*out)[16]) {
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  __m512 acc[TILE_MAX];
  UNROLL for (int t = 0; t < TILE_MAX; t++) acc[t] = _mm512_setzero_ps();
  for (int b = 0; b < nb; b++) {
    const uint8_t *blk = w + (size_t)b * 544;
    prefetch_ahead(blk, 544);
    __m512i u[8]; /* w + 128 as unsigned bytes: sum (w + 128) q = sum w q + 128 sum q */
    UNROLL for (int c = 0; c < 8; c++) u[c] =
        _mm512_xor_si512(_mm512_loadu_si512(blk + 64 * c), flip);
    __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 512)));
    UNROLL for (int t = 0; t < tn; t++) acc[t] =
        offset_block(u, a + (size_t)t * stride + b, 128, d, acc[t]);
  }
  UNROLL for (int t = 0; t < tn; t++) _mm512_storeu_ps(out[t], acc[t]);
}

/* L_Q5: the nibbles with their fifth bit added (q 0..31, an unsigned operand as it is), summed with
 * the inputs; sum (q - 16) x = sum q x - 16 sum x: the same integer and float operations as L_Q8
 * gives a Q5_0 matrix. */
static inline __attribute__((always_inline)) void q5_tile(int tn, const uint8_t *w, int nb,
                                                          const act_t *a, size_t stride,
                                                          float (*out)[16]) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
  __m512 acc[TILE_MAX];
  UNROLL for (int t = 0; t < TILE_MAX; t++) acc[t] = _mm512_setzero_ps();
  for (int b = 0; b < nb; b++) {
    const uint8_t *blk = w + (size_t)b * 352;
    prefetch_ahead(blk, 352);
    __m512i u[8]; /* u[2c]: elements 8c..8c+3 of each row, u[2c + 1]: 8c+4..8c+7 */
    UNROLL for (int c = 0; c < 4; c++) {
      __m512i v = _mm512_loadu_si512(blk + 64 * c);
      __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      u[2 * c] = _mm512_mask_add_epi8(lo, _cvtu64_mask64(q5_bits(blk, c, 0)), lo, sixteen);
      u[2 * c + 1] = _mm512_mask_add_epi8(hi, _cvtu64_mask64(q5_bits(blk, c, 1)), hi, sixteen);
    }
    __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(blk + 320)));
    UNROLL for (int t = 0; t < tn; t++) acc[t] =
        offset_block(u, a + (size_t)t * stride + b, 16, d, acc[t]);
  }
  UNROLL for (int t = 0; t < tn; t++) _mm512_storeu_ps(out[t], acc[t]);
}

/* A K layout's block (quant.h): the integer sums of each half of the block (elements 0-15: sA,
 * 16-31: sB) times the half's scale, the activation's sum over each half times the half's min,
 * scaled by the activation's d into the superblock's sums tD, tM; at the superblock's end acc += d
 * tD - dmin tM. */
static inline __attribute__((always_inline)) void k_block_sums(const uint8_t *scales,
                                                               const act_t *x, __m512i sA,
                                                               __m512i sB, __m512 *tD, __m512 *tM) {
  __m512i scA = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)scales));
  __m512i scB = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(scales + 16)));
  __m512i mA = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(scales + 32)));
  __m512i mB = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(scales + 48)));
  __m512i isum = _mm512_add_epi32(_mm512_mullo_epi32(scA, sA), _mm512_mullo_epi32(scB, sB));
  __m512i msum = _mm512_add_epi32(_mm512_mullo_epi32(mA, _mm512_set1_epi32(x->s16)),
                                  _mm512_mullo_epi32(mB, _mm512_set1_epi32(x->s - x->s16)));
  __m512 xd = _mm512_set1_ps(x->d);
  *tD = _mm512_fmadd_ps(xd, _mm512_cvtepi32_ps(isum), *tD);
  *tM = _mm512_fmadd_ps(xd, _mm512_cvtepi32_ps(msum), *tM);
}

/* The K layouts (L_K4: unsigned nibbles as L_Q4's; L_K8, L_K8_1: int8 as L_Q8's, flipped by 128).
 */
static inline __attribute__((always_inline)) void k_tile(int tn, int layout, const uint8_t *w,
                                                         int nb, const act_t *a, size_t stride,
                                                         float (*out)[16]) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), flip = _mm512_set1_epi8((char)0x80);
  const int sb = K_SB(layout);
  __m512 acc[TILE_MAX];
  UNROLL for (int t = 0; t < TILE_MAX; t++) acc[t] = _mm512_setzero_ps();
  for (int s = 0; s < nb / sb; s++) {
    const uint8_t *sup = w + (size_t)s * K_SBB(layout);
    __m512 tD[TILE_MAX], tM[TILE_MAX];
    UNROLL for (int t = 0; t < TILE_MAX; t++) tD[t] = tM[t] = _mm512_setzero_ps();
    for (int b = 0; b < sb; b++) {
      const uint8_t *blk = sup + 64 + (size_t)b * K_BB(layout);
      prefetch_ahead(blk, K_BB(layout) + (b == 0 ? 64 : 0));
      __m512i u[8]; /* L_K4: the low and high nibbles of chunks 0-3 (elements 4i..4i+3 in u[i]);
                       L_K8: q + 128 */
      if (layout == L_K4) {
        UNROLL for (int c = 0; c < 4; c++) {
          __m512i v = _mm512_loadu_si512(blk + 64 * c);
          u[2 * c] = _mm512_and_si512(v, m4);
          u[2 * c + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
      } else {
        UNROLL for (int c = 0; c < 8; c++) u[c] =
            _mm512_xor_si512(_mm512_loadu_si512(blk + 64 * c), flip);
      }
      UNROLL for (int t = 0; t < tn; t++) {
        const act_t *x = a + (size_t)t * stride + (size_t)s * sb + b;
        __m512i sA = _mm512_setzero_si512(), sB = _mm512_setzero_si512();
        UNROLL for (int c = 0; c < 4; c++) {
          sA = _mm512_dpbusd_epi32(sA, u[c], act_word(x, c));
          sB = _mm512_dpbusd_epi32(sB, u[c + 4], act_word(x, c + 4));
        }
        if (layout != L_K4) { /* sum (q + 128) x = sum q x + 128 sum x, per half */
          sA = _mm512_sub_epi32(sA, _mm512_set1_epi32(128 * x->s16));
          sB = _mm512_sub_epi32(sB, _mm512_set1_epi32(128 * (x->s - x->s16)));
        }
        k_block_sums(blk + K_QB(layout), x, sA, sB, &tD[t], &tM[t]);
      }
    }
    __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)sup));
    __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sup + 32)));
    UNROLL for (int t = 0; t < tn; t++) {
      acc[t] = _mm512_fmadd_ps(d, tD[t], acc[t]);
      acc[t] = _mm512_fnmadd_ps(dmin, tM[t], acc[t]);
    }
  }
  UNROLL for (int t = 0; t < tn; t++) _mm512_storeu_ps(out[t], acc[t]);
}

static inline __attribute__((always_inline)) void f_tile(int tn, int layout, const uint8_t *w,
                                                         int k, const float *x, float (*out)[16]) {
  __m512 acc[TILE_MAX];
  UNROLL for (int t = 0; t < TILE_MAX; t++) acc[t] = _mm512_setzero_ps();
  for (int j = 0; j < k; j++) {
    __m512 wv = layout == L_F32
                    ? _mm512_loadu_ps((const float *)w + (size_t)j * 16)
                    : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + (size_t)j * 32)));
    UNROLL for (int t = 0; t < tn; t++) acc[t] =
        _mm512_fmadd_ps(wv, _mm512_set1_ps(x[(size_t)t * k + j]), acc[t]);
  }
  UNROLL for (int t = 0; t < tn; t++) _mm512_storeu_ps(out[t], acc[t]);
}

#elif LLM_ISA == 2
/* 8 rows per 256-bit register: a row group is two halves, h = 0 (rows 0-7) and 1 (rows 8-15). */
static inline __m256i dp_u8s8(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
  /* u < 256, |s| <= 127: a pair of products fits in 16 bits only when u <= 128 (callers make sure)
   */
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

static inline __attribute__((always_inline)) void q4_tile(int tn, const uint8_t *w, int nb,
                                                          const act_t *a, size_t stride,
                                                          float (*out)[16]) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  for (int h = 0; h < 2; h++) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int b = 0; b < nb; b++) {
      const uint8_t *blk = w + (size_t)b * 320;
      __m256i lo[4], hi[4];
      UNROLL for (int c = 0; c < 4; c++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 64 * c + 32 * h));
        lo[c] = _mm256_and_si256(v, m4);
        hi[c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      }
      __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 256 + 16 * h)));
      __m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 288 + 16 * h)));
      UNROLL for (int t = 0; t < tn; t++) {
        const act_t *x = a + (size_t)t * stride + b;
        int32_t q[8];
        memcpy(q, x->q, 32);
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
        UNROLL for (int c = 0; c < 4; c++) {
          s0 = dp_u8s8(s0, lo[c], _mm256_set1_epi32(q[2 * c]));
          s1 = dp_u8s8(s1, hi[c], _mm256_set1_epi32(q[2 * c + 1]));
        }
        __m256 s = _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1));
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x->d)), s, acc[t]);
        acc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(x->sd), acc[t]);
      }
    }
    UNROLL for (int t = 0; t < tn; t++) _mm256_storeu_ps(out[t] + 8 * h, acc[t]);
  }
}

static inline __attribute__((always_inline)) void q8_tile(int tn, const uint8_t *w, int nb,
                                                          const act_t *a, size_t stride,
                                                          float (*out)[16]) {
  for (int h = 0; h < 2; h++) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int b = 0; b < nb; b++) {
      const uint8_t *blk = w + (size_t)b * 544;
      /* the weights and their magnitudes: sum |w| (q with w's sign) = sum w q */
      __m256i wv[8], aw[8];
      UNROLL for (int c = 0; c < 8; c++) {
        wv[c] = _mm256_loadu_si256((const __m256i *)(blk + 64 * c + 32 * h));
        aw[c] = _mm256_sign_epi8(wv[c], wv[c]);
      }
      __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 512 + 16 * h)));
      UNROLL for (int t = 0; t < tn; t++) {
        const act_t *x = a + (size_t)t * stride + b;
        int32_t q[8];
        memcpy(q, x->q, 32);
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
        UNROLL for (int c = 0; c < 8; c += 2) {
          s0 = dp_u8s8(s0, aw[c], _mm256_sign_epi8(_mm256_set1_epi32(q[c]), wv[c]));
          s1 = dp_u8s8(s1, aw[c + 1], _mm256_sign_epi8(_mm256_set1_epi32(q[c + 1]), wv[c + 1]));
        }
        __m256 s = _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1));
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x->d)), s, acc[t]);
      }
    }
    UNROLL for (int t = 0; t < tn; t++) _mm256_storeu_ps(out[t] + 8 * h, acc[t]);
  }
}

/* L_Q5, rows 8h..8h+7 (the AVX-512 version says what): each byte's fifth bit, from its bit of the
 * 32 that cover the half's bytes, made 16 by a byte shuffle, a test and a mask; q <= 31 is safe for
 * maddubs. */
static inline __m256i q5_fifth(uint32_t bits) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                          2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread), bit);
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(16));
}

static inline __attribute__((always_inline)) void q5_tile(int tn, const uint8_t *w, int nb,
                                                          const act_t *a, size_t stride,
                                                          float (*out)[16]) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  for (int h = 0; h < 2; h++) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int b = 0; b < nb; b++) {
      const uint8_t *blk = w + (size_t)b * 352;
      __m256i u[8];
      UNROLL for (int c = 0; c < 4; c++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 64 * c + 32 * h));
        u[2 * c] = _mm256_or_si256(_mm256_and_si256(v, m4),
                                   q5_fifth((uint32_t)(q5_bits(blk, c, 0) >> (32 * h))));
        u[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                       q5_fifth((uint32_t)(q5_bits(blk, c, 1) >> (32 * h))));
      }
      __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 320 + 16 * h)));
      UNROLL for (int t = 0; t < tn; t++) {
        const act_t *x = a + (size_t)t * stride + b;
        int32_t q[8];
        memcpy(q, x->q, 32);
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
        UNROLL for (int c = 0; c < 8; c += 2) {
          s0 = dp_u8s8(s0, u[c], _mm256_set1_epi32(q[c]));
          s1 = dp_u8s8(s1, u[c + 1], _mm256_set1_epi32(q[c + 1]));
        }
        __m256i si = _mm256_sub_epi32(_mm256_add_epi32(s0, s1), _mm256_set1_epi32(16 * x->s));
        acc[t] =
            _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x->d)), _mm256_cvtepi32_ps(si), acc[t]);
      }
    }
    UNROLL for (int t = 0; t < tn; t++) _mm256_storeu_ps(out[t] + 8 * h, acc[t]);
  }
}

/* A K layout's block, rows 8h..8h+7 (the AVX-512 version says what). */
static inline __attribute__((always_inline)) void k_block_sums(const uint8_t *scales, int h,
                                                               const act_t *x, __m256i sA,
                                                               __m256i sB, __m256 *tD, __m256 *tM) {
  __m256i scA = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(scales + 8 * h)));
  __m256i scB = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(scales + 16 + 8 * h)));
  __m256i mA = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(scales + 32 + 8 * h)));
  __m256i mB = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(scales + 48 + 8 * h)));
  __m256i isum = _mm256_add_epi32(_mm256_mullo_epi32(scA, sA), _mm256_mullo_epi32(scB, sB));
  __m256i msum = _mm256_add_epi32(_mm256_mullo_epi32(mA, _mm256_set1_epi32(x->s16)),
                                  _mm256_mullo_epi32(mB, _mm256_set1_epi32(x->s - x->s16)));
  __m256 xd = _mm256_set1_ps(x->d);
  *tD = _mm256_fmadd_ps(xd, _mm256_cvtepi32_ps(isum), *tD);
  *tM = _mm256_fmadd_ps(xd, _mm256_cvtepi32_ps(msum), *tM);
}

/* The K layouts: L_K4's nibbles are at most 15, safe for maddubs; L_K8's int8 by their magnitudes
 * and the inputs given their signs, as q8_tile. */
static inline __attribute__((always_inline)) void k_tile(int tn, int layout, const uint8_t *w,
                                                         int nb, const act_t *a, size_t stride,
                                                         float (*out)[16]) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const int sb = K_SB(layout);
  for (int h = 0; h < 2; h++) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int s = 0; s < nb / sb; s++) {
      const uint8_t *sup = w + (size_t)s * K_SBB(layout);
      __m256 tD[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()},
             tM[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int b = 0; b < sb; b++) {
        const uint8_t *blk = sup + 64 + (size_t)b * K_BB(layout);
        __m256i u[8], wv[8]; /* L_K4: nibbles (elements 4i..4i+3 in u[i]); L_K8: |q| and q */
        if (layout == L_K4) {
          UNROLL for (int c = 0; c < 4; c++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(blk + 64 * c + 32 * h));
            u[2 * c] = _mm256_and_si256(v, m4);
            u[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          }
        } else {
          UNROLL for (int c = 0; c < 8; c++) {
            wv[c] = _mm256_loadu_si256((const __m256i *)(blk + 64 * c + 32 * h));
            u[c] = _mm256_sign_epi8(wv[c], wv[c]);
          }
        }
        UNROLL for (int t = 0; t < tn; t++) {
          const act_t *x = a + (size_t)t * stride + (size_t)s * sb + b;
          int32_t q[8];
          memcpy(q, x->q, 32);
          __m256i sA = _mm256_setzero_si256(), sB = _mm256_setzero_si256();
          UNROLL for (int c = 0; c < 4; c++) {
            __m256i xa = _mm256_set1_epi32(q[c]), xb = _mm256_set1_epi32(q[c + 4]);
            if (layout != L_K4)
              xa = _mm256_sign_epi8(xa, wv[c]), xb = _mm256_sign_epi8(xb, wv[c + 4]);
            sA = dp_u8s8(sA, u[c], xa);
            sB = dp_u8s8(sB, u[c + 4], xb);
          }
          k_block_sums(blk + K_QB(layout), h, x, sA, sB, &tD[t], &tM[t]);
        }
      }
      __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sup + 16 * h)));
      __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sup + 32 + 16 * h)));
      UNROLL for (int t = 0; t < tn; t++) {
        acc[t] = _mm256_fmadd_ps(d, tD[t], acc[t]);
        acc[t] = _mm256_fnmadd_ps(dmin, tM[t], acc[t]);
      }
    }
    UNROLL for (int t = 0; t < tn; t++) _mm256_storeu_ps(out[t] + 8 * h, acc[t]);
  }
}

static inline __attribute__((always_inline)) void f_tile(int tn, int layout, const uint8_t *w,
                                                         int k, const float *x, float (*out)[16]) {
  for (int h = 0; h < 2; h++) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int j = 0; j < k; j++) {
      __m256 wv =
          layout == L_F32
              ? _mm256_loadu_ps((const float *)w + (size_t)j * 16 + 8 * h)
              : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + (size_t)j * 32 + 16 * h)));
      UNROLL for (int t = 0; t < tn; t++) acc[t] =
          _mm256_fmadd_ps(wv, _mm256_set1_ps(x[(size_t)t * k + j]), acc[t]);
    }
    UNROLL for (int t = 0; t < tn; t++) _mm256_storeu_ps(out[t] + 8 * h, acc[t]);
  }
}
#define TILE_MAX 2
#define TILE_MAX_K 2

#else /* portable C: the same sums and the same float operations, one lane at a time */
static inline void q4_tile(int tn, const uint8_t *w, int nb, const act_t *a, size_t stride,
                           float (*out)[16]) {
  for (int t = 0; t < tn; t++) {
    float acc[16] = {0};
    for (int b = 0; b < nb; b++) {
      const uint8_t *blk = w + (size_t)b * 320;
      const act_t *x = a + (size_t)t * stride + b;
      for (int r = 0; r < 16; r++) {
        int32_t s = 0;
        for (int c = 0; c < 4; c++)
          for (int i = 0; i < 4; i++) {
            uint8_t byte = blk[64 * c + 4 * r + i];
            s += (byte & 15) * x->q[8 * c + i] + (byte >> 4) * x->q[8 * c + 4 + i];
          }
        acc[r] = fmaf(half_at(blk + 256, r) * x->d, (float)s, acc[r]);
        acc[r] = fmaf(half_at(blk + 288, r), x->sd, acc[r]);
      }
    }
    memcpy(out[t], acc, sizeof(acc));
  }
}

static inline void q8_tile(int tn, const uint8_t *w, int nb, const act_t *a, size_t stride,
                           float (*out)[16]) {
  for (int t = 0; t < tn; t++) {
    float acc[16] = {0};
    for (int b = 0; b < nb; b++) {
      const uint8_t *blk = w + (size_t)b * 544;
      const act_t *x = a + (size_t)t * stride + b;
      for (int r = 0; r < 16; r++) {
        int32_t s = 0;
        for (int c = 0; c < 8; c++)
          for (int i = 0; i < 4; i++) s += (int8_t)blk[64 * c + 4 * r + i] * x->q[4 * c + i];
        acc[r] = fmaf(half_at(blk + 512, r) * x->d, (float)s, acc[r]);
      }
    }
    memcpy(out[t], acc, sizeof(acc));
  }
}

static inline void q5_tile(int tn, const uint8_t *w, int nb, const act_t *a, size_t stride,
                           float (*out)[16]) {
  for (int t = 0; t < tn; t++) {
    float acc[16] = {0};
    for (int b = 0; b < nb; b++) {
      const uint8_t *blk = w + (size_t)b * 352;
      const act_t *x = a + (size_t)t * stride + b;
      for (int r = 0; r < 16; r++) {
        int32_t s = 0;
        for (int c = 0; c < 4; c++) {
          uint64_t lo_bits = q5_bits(blk, c, 0) >> 4 * r, hi_bits = q5_bits(blk, c, 1) >> 4 * r;
          for (int i = 0; i < 4; i++) {
            uint8_t byte = blk[64 * c + 4 * r + i];
            int lo = (byte & 15) | (int)(lo_bits >> i & 1) << 4,
                hi = (byte >> 4) | (int)(hi_bits >> i & 1) << 4;
            s += (lo - 16) * x->q[8 * c + i] + (hi - 16) * x->q[8 * c + 4 + i];
          }
        }
        acc[r] = fmaf(half_at(blk + 320, r) * x->d, (float)s, acc[r]);
      }
    }
    memcpy(out[t], acc, sizeof(acc));
  }
}

/* The K layouts: per row, the integer sums of each half block times the half's scale (and the
 * activation's half sums times its min), then acc += d tD - dmin tM per superblock. */
static inline void k_tile(int tn, int layout, const uint8_t *w, int nb, const act_t *a,
                          size_t stride, float (*out)[16]) {
  const int sb = K_SB(layout);
  for (int t = 0; t < tn; t++) {
    float acc[16] = {0};
    for (int s = 0; s < nb / sb; s++) {
      const uint8_t *sup = w + (size_t)s * K_SBB(layout);
      float tD[16] = {0}, tM[16] = {0};
      for (int b = 0; b < sb; b++) {
        const uint8_t *blk = sup + 64 + (size_t)b * K_BB(layout);
        const int8_t *sc = (const int8_t *)(blk + K_QB(layout)), *m = sc + 32;
        const act_t *x = a + (size_t)t * stride + (size_t)s * sb + b;
        for (int r = 0; r < 16; r++) {
          int32_t sum[2] = {0, 0}; /* elements 0-15, 16-31 */
          if (layout == L_K4) {
            for (int c = 0; c < 4; c++)
              for (int i = 0; i < 4; i++) {
                uint8_t byte = blk[64 * c + 4 * r + i];
                sum[c / 2] += (byte & 15) * x->q[8 * c + i] + (byte >> 4) * x->q[8 * c + 4 + i];
              }
          } else {
            for (int c = 0; c < 8; c++)
              for (int i = 0; i < 4; i++)
                sum[c / 4] += (int8_t)blk[64 * c + 4 * r + i] * x->q[4 * c + i];
          }
          int32_t isum = sc[r] * sum[0] + sc[16 + r] * sum[1],
                  msum = m[r] * x->s16 + m[16 + r] * (x->s - x->s16);
          tD[r] = fmaf(x->d, (float)isum, tD[r]);
          tM[r] = fmaf(x->d, (float)msum, tM[r]);
        }
      }
      for (int r = 0; r < 16; r++) {
        acc[r] = fmaf(half_at(sup, r), tD[r], acc[r]);
        acc[r] = fmaf(-half_at(sup + 32, r), tM[r], acc[r]);
      }
    }
    memcpy(out[t], acc, sizeof(acc));
  }
}

static inline void f_tile(int tn, int layout, const uint8_t *w, int k, const float *x,
                          float (*out)[16]) {
  for (int t = 0; t < tn; t++) {
    float acc[16] = {0};
    for (int j = 0; j < k; j++)
      for (int r = 0; r < 16; r++) {
        float wv = layout == L_F32 ? ((const float *)w)[(size_t)j * 16 + r]
                                   : half_at(w + (size_t)j * 32, r);
        acc[r] = fmaf(wv, x[(size_t)t * k + j], acc[r]);
      }
    memcpy(out[t], acc, sizeof(acc));
  }
}
#define TILE_MAX 1
#define TILE_MAX_K 1
#endif

/* Row group g of a matrix (layout, k columns) times the inputs of nt tokens. */
static inline __attribute__((always_inline)) void group_dot(int layout, const uint8_t *w, int k,
                                                            const float *fin, const act_t *qin,
                                                            int nt, float (*out)[16]) {
  int nb = k / 32;
  size_t stride = (size_t)NBLK(k);
  const int k_layout = quantized(layout) && layout != L_Q4 && layout != L_Q8 && layout != L_Q5;
  const int cap = k_layout ? TILE_MAX_K : TILE_MAX;
  for (int t0 = 0; t0 < nt; t0 += cap) {
    int tn = nt - t0 < cap ? nt - t0 : cap;
    /* tn as a constant in each call, so that the tile's accumulators stay in registers; the K
     * layouts' cases above TILE_MAX_K are never taken */
#define TILE_CASE(N)                                                         \
  case N:                                                                    \
    if (layout == L_Q4)                                                      \
      q4_tile(N, w, nb, qin + (size_t)t0 * stride, stride, out + t0);        \
    else if (layout == L_Q8)                                                 \
      q8_tile(N, w, nb, qin + (size_t)t0 * stride, stride, out + t0);        \
    else if (layout == L_Q5)                                                 \
      q5_tile(N, w, nb, qin + (size_t)t0 * stride, stride, out + t0);        \
    else if (k_layout && N <= TILE_MAX_K)                                    \
      k_tile(N, layout, w, nb, qin + (size_t)t0 * stride, stride, out + t0); \
    else if (!k_layout)                                                      \
      f_tile(N, layout, w, k, fin + (size_t)t0 * k, out + t0);               \
    break;
    switch (tn) {
      TILE_CASE(1)
#if TILE_MAX >= 2
      TILE_CASE(2)
#endif
#if TILE_MAX >= 4
      TILE_CASE(3)
      TILE_CASE(4)
#endif
#if TILE_MAX >= 8
      TILE_CASE(5)
      TILE_CASE(6)
      TILE_CASE(7)
      TILE_CASE(8)
#endif
      default: break;
    }
#undef TILE_CASE
  }
}
