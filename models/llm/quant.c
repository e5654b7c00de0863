#include "quant.h"

#include <math.h>
#include <string.h>

float llm_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13); /* infinity, NaN */
  } else if (exp) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man) { /* subnormal: normalise */
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

uint16_t llm_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0); /* inf, NaN */
  if (absx >= 0x477ff000u) return sign | 0x7c00; /* rounds past 65504 */
  if (absx < 0x38800000u) {                      /* subnormal or zero */
    if (absx < 0x33000000u) return sign;         /* below half the least subnormal */
    uint32_t man = (absx & 0x7fffff) | 0x800000;
    int shift = 126 - (int)(absx >> 23); /* 14..24 */
    uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return sign | (uint16_t)half;
  }
  uint32_t half = ((absx >> 13) - (112u << 10)), rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
  return sign | (uint16_t)half;
}

/* ---- ggml blocks ---- */

static void put_half(uint8_t *p, float f) {
  uint16_t h = llm_float_to_half(f);
  memcpy(p, &h, 2);
}
static float get_half(const uint8_t *p) {
  uint16_t h;
  memcpy(&h, p, 2);
  return llm_half_to_float(h);
}
/* f rounded to a half and back. */
static float get_half_of(float f) { return llm_half_to_float(llm_float_to_half(f)); }

static bool k_type(ggml_type_t type) { return ggml_block_elems(type) == 256; }

static int8_t clamp8(float v, int lo, int hi) {
  int q = (int)v;
  return (int8_t)(q < lo ? lo : q > hi ? hi : q);
}

/* Q4_0 / Q5_0 (bits 4 or 5: ggml's d = the signed maximum / -8 or -16), Q4_1 / Q5_1 (d = range / 15
 * or 31, m = the minimum): the block's scales into o, its quants into q[32]. */
static void quantize_nibbles(ggml_type_t type, const float *x, uint8_t *o, int q[32]) {
  bool with_min = type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1;
  int bits = type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1 ? 5 : 4, top = (1 << bits) - 1;
  if (with_min) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 32; j++) lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
    float d = (hi - lo) / (float)top, id = d ? 1 / d : 0;
    put_half(o, d);
    put_half(o + 2, lo);
    for (int j = 0; j < 32; j++) q[j] = clamp8((x[j] - lo) * id + 0.5f, 0, top);
    return;
  }
  float amax = 0, max = 0; /* the value of largest magnitude, with its sign */
  for (int j = 0; j < 32; j++)
    if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
  float d = max / (float)-(1 << (bits - 1)), id = d ? 1 / d : 0;
  put_half(o, d);
  for (int j = 0; j < 32; j++) q[j] = clamp8(x[j] * id + (float)(1 << (bits - 1)) + 0.5f, 0, top);
}

static void quantize_block(ggml_type_t type, const float *x, uint8_t *o) {
  int q[32];
  if (type == GGML_TYPE_Q8_0) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127, id = d ? 1 / d : 0;
    put_half(o, d);
    for (int j = 0; j < 32; j++) o[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    return;
  }
  if (type == GGML_TYPE_IQ4_NL) { /* the value of largest magnitude on kvalues[0] = -127 */
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
      if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    float d = get_half_of(max / -127), id = d ? 1 / d : 0;
    put_half(o, d);
    for (int j = 0; j < 32; j++) q[j] = llm_iq4_nearest(x[j] * id);
  } else {
    quantize_nibbles(type, x, o, q);
  }
  bool with_min = type == GGML_TYPE_Q4_1 || type == GGML_TYPE_Q5_1;
  bool fifth = type == GGML_TYPE_Q5_0 || type == GGML_TYPE_Q5_1;
  size_t head = (with_min ? 4 : 2) + (fifth ? 4 : 0);
  uint32_t qh = 0;
  for (int j = 0; j < 16; j++) o[head + (size_t)j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
  for (int j = 0; j < 32; j++) qh |= (uint32_t)(q[j] >> 4 & 1) << j;
  if (fifth) memcpy(o + head - 4, &qh, 4);
}

void llm_quantize_row(ggml_type_t type, const float *x, void *dst, size_t n) {
  uint8_t *o = dst;
  switch (type) {
    case GGML_TYPE_F32: memcpy(o, x, n * 4); return;
    case GGML_TYPE_F16:
      for (size_t i = 0; i < n; i++) put_half(o + 2 * i, x[i]);
      return;
    case GGML_TYPE_BF16:
      for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], 4);
        uint16_t h = (uint16_t)((bits + 0x7fff + (bits >> 16 & 1)) >>
                                16); /* to nearest even (finite inputs) */
        memcpy(o + 2 * i, &h, 2);
      }
      return;
    default: break;
  }
  if (k_type(type)) {
    llm_quantize_row_k(type, x, o, n);
    return;
  }
  for (size_t b = 0; b < n / 32; b++, x += 32, o += ggml_block_bytes(type))
    quantize_block(type, x, o);
}

void llm_q8_parts(ggml_type_t type, const uint8_t *blk, int8_t q[32], uint16_t *d) {
  memcpy(d, blk, 2);
  if (type == GGML_TYPE_Q8_0) {
    memcpy(q, blk + 2, 32);
    return;
  }
  bool iq4 = type == GGML_TYPE_IQ4_NL;
  const uint8_t *qs = blk + (iq4 ? 2 : 6);
  uint32_t qh = 0;
  if (!iq4) memcpy(&qh, blk + 2, 4);
  for (int j = 0; j < 32; j++) {
    int nib = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    q[j] = iq4 ? llm_iq4_values[nib] : (int8_t)((nib | (int)(qh >> j & 1) << 4) - 16);
  }
}

/* In ggml's float operations: d q (+ m). */
static void dequantize_block(ggml_type_t type, const uint8_t *p, float *x) {
  if (type == GGML_TYPE_Q8_0 || type == GGML_TYPE_Q5_0 || type == GGML_TYPE_IQ4_NL) {
    int8_t q[32];
    uint16_t dh;
    llm_q8_parts(type, p, q, &dh);
    float d = llm_half_to_float(dh);
    for (int j = 0; j < 32; j++) x[j] = (float)q[j] * d;
  } else if (type == GGML_TYPE_Q4_0) {
    float d = get_half(p);
    for (int j = 0; j < 16; j++)
      x[j] = d * (float)((p[2 + j] & 15) - 8), x[j + 16] = d * (float)((p[2 + j] >> 4) - 8);
  } else if (type == GGML_TYPE_Q4_1) {
    float d = get_half(p), m = get_half(p + 2);
    for (int j = 0; j < 16; j++)
      x[j] = d * (float)(p[4 + j] & 15) + m, x[j + 16] = d * (float)(p[4 + j] >> 4) + m;
  } else { /* Q5_1 */
    llm_kparts_t k;
    llm_kparts(type, p, &k);
    float d = get_half(p), m = get_half(p + 2);
    for (int j = 0; j < 32; j++) x[j] = (float)k.q[j] * d + m;
  }
}

void llm_dequantize_row(ggml_type_t type, const void *src, float *x, size_t n) {
  const uint8_t *p = src;
  switch (type) {
    case GGML_TYPE_F32: memcpy(x, p, n * 4); return;
    case GGML_TYPE_F16:
      for (size_t i = 0; i < n; i++) x[i] = get_half(p + 2 * i);
      return;
    case GGML_TYPE_BF16:
      for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)p[2 * i] << 16 | (uint32_t)p[2 * i + 1] << 24;
        memcpy(&x[i], &bits, 4);
      }
      return;
    default: break;
  }
  if (k_type(type)) {
    llm_dequantize_row_k(type, p, x, n);
    return;
  }
  for (size_t b = 0; b < n / 32; b++, x += 32, p += ggml_block_bytes(type))
    dequantize_block(type, p, x);
}

/* ---- device layouts ---- */

llm_layout_t llm_layout_of(ggml_type_t type) {
  switch (type) {
    case GGML_TYPE_F16: return LLM_LAYOUT_F16X16;
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q4_1: return LLM_LAYOUT_Q4X16;
    case GGML_TYPE_Q5_0: return LLM_LAYOUT_Q5X16;
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_IQ4_NL: return LLM_LAYOUT_Q8X16;
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K:
    case GGML_TYPE_Q4_K: return LLM_LAYOUT_K4X16;
    case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K:
    case GGML_TYPE_IQ4_XS: return LLM_LAYOUT_K8X16;
    case GGML_TYPE_Q5_1: return LLM_LAYOUT_K8X16_1;
    default: return LLM_LAYOUT_F32X16; /* F32, BF16 */
  }
}

llm_layout_t llm_gpu_layout_of(ggml_type_t type) {
  llm_layout_t layout = llm_layout_of(type);
  return layout == LLM_LAYOUT_Q5X16 ? LLM_LAYOUT_Q8X16 : layout; /* the GPUs read Q5_0 as int8 */
}

bool llm_layout_quantized(llm_layout_t layout) {
  return layout != LLM_LAYOUT_F32X16 && layout != LLM_LAYOUT_F16X16;
}

const char *llm_layout_name(llm_layout_t layout) {
  static const char *const names[] = {"F32X16", "F16X16", "Q4X16",   "Q8X16",
                                      "K4X16",  "K8X16",  "K8X16_1", "Q5X16"};
  return names[layout];
}

/* The K layouts: bytes of a block's quants, of a block, of a superblock (its 64-byte header first).
 */
static size_t k_quant_bytes(llm_layout_t layout) { return layout == LLM_LAYOUT_K4X16 ? 256 : 512; }
static size_t k_block_bytes(llm_layout_t layout) { return k_quant_bytes(layout) + 64; }
static size_t k_blocks(llm_layout_t layout) { return layout == LLM_LAYOUT_K8X16_1 ? 1 : 8; }
static size_t k_super_bytes(llm_layout_t layout) {
  return 64 + k_blocks(layout) * k_block_bytes(layout);
}

static size_t group_bytes(llm_layout_t layout, size_t cols) {
  switch (layout) {
    case LLM_LAYOUT_F32X16: return cols * 16 * 4;
    case LLM_LAYOUT_F16X16: return cols * 16 * 2;
    case LLM_LAYOUT_Q4X16: return cols / 32 * 320;
    case LLM_LAYOUT_Q8X16: return cols / 32 * 544;
    case LLM_LAYOUT_Q5X16: return cols / 32 * 352;
    default: return cols / (32 * k_blocks(layout)) * k_super_bytes(layout);
  }
}

size_t llm_repack_bytes(ggml_type_t type, size_t rows, size_t cols) {
  return (rows + 15) / 16 * group_bytes(llm_layout_of(type), cols);
}

/* Element e (0..31) of a Q4_0/Q4_1 block's nibbles. */
static unsigned nibble(const uint8_t *qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

/* 32 values (unsigned nibbles, or int8) of one row into a Q4X16/K4X16 or Q8X16/K8X16 block's
 * quants. */
static void put_quants4(uint8_t *o, size_t lane, const int8_t q[32]) {
  for (int c = 0; c < 4; c++)
    for (int i = 0; i < 4; i++)
      o[c * 64 + lane * 4 + (size_t)i] =
          (uint8_t)((q[8 * c + i] & 15) | (q[8 * c + 4 + i] & 15) << 4);
}
static void put_quants8(uint8_t *o, size_t lane, const int8_t q[32]) {
  for (int c = 0; c < 8; c++)
    for (int i = 0; i < 4; i++) o[c * 64 + lane * 4 + (size_t)i] = (uint8_t)q[4 * c + i];
}

/* One row (lane of its group g) of a type in a K layout. */
static void repack_k_row(ggml_type_t type, llm_layout_t layout, const uint8_t *in, size_t cols,
                         uint8_t *g, size_t lane) {
  size_t supers = cols / (32 * k_blocks(layout)), in_bytes = ggml_block_bytes(type),
         qb = k_quant_bytes(layout);
  llm_kparts_t k;
  for (size_t s = 0; s < supers; s++) {
    llm_kparts(type, in + s * in_bytes, &k);
    uint8_t *o = g + s * k_super_bytes(layout);
    memcpy(o + lane * 2, &k.d, 2);
    memcpy(o + 32 + lane * 2, &k.dmin, 2);
    for (int b = 0; b < k.blocks; b++) {
      uint8_t *blk = o + 64 + (size_t)b * k_block_bytes(layout);
      if (layout == LLM_LAYOUT_K4X16)
        put_quants4(blk, lane, k.q + 32 * b);
      else
        put_quants8(blk, lane, k.q + 32 * b);
      for (int h = 0; h < 2; h++) {
        blk[qb + (size_t)h * 16 + lane] = (uint8_t)k.sc[b][h];
        blk[qb + 32 + (size_t)h * 16 + lane] = (uint8_t)k.m[b][h];
      }
    }
  }
}

/* One row of Q5_0 in Q5X16: its nibbles as Q4X16's, the fifth bits apart (quant.h), d. */
static void repack_q5_row(const uint8_t *in, size_t cols, uint8_t *g, size_t lane) {
  for (size_t b = 0; b < cols / 32; b++) {
    const uint8_t *blk = in + b * ggml_block_bytes(GGML_TYPE_Q5_0);
    int8_t q[32];
    uint16_t d;
    llm_q8_parts(GGML_TYPE_Q5_0, blk, q, &d); /* q - 16 */
    uint8_t *o = g + b * 352;
    for (int e = 0; e < 32; e++) q[e] = (int8_t)(q[e] + 16);
    put_quants4(o, lane, q);
    for (int e = 0; e < 32; e++) { /* element 8c + 4h + i: bit 4 lane + i of mask 2c + h */
      size_t bit = 4 * lane + (size_t)(e % 4);
      if (q[e] & 16) o[256 + 16 * (e / 8) + 8 * (e % 8 / 4) + bit / 8] |= (uint8_t)(1u << bit % 8);
    }
    memcpy(o + 320 + lane * 2, &d, 2);
  }
}

/* One row of a type in Q4X16 or Q8X16. */
static void repack_block_row(ggml_type_t type, llm_layout_t layout, const uint8_t *in, size_t cols,
                             uint8_t *g, size_t lane) {
  size_t in_bytes = ggml_block_bytes(type);
  for (size_t b = 0; b < cols / 32; b++) {
    const uint8_t *blk = in + b * in_bytes;
    if (layout == LLM_LAYOUT_Q8X16) {
      int8_t q[32];
      uint16_t d;
      llm_q8_parts(type, blk, q, &d);
      put_quants8(g + b * 544, lane, q);
      memcpy(g + b * 544 + 512 + lane * 2, &d, 2);
      continue;
    }
    bool q41 = type == GGML_TYPE_Q4_1;
    const uint8_t *qs = blk + (q41 ? 4 : 2);
    int8_t q[32];
    for (int e = 0; e < 32; e++) q[e] = (int8_t)nibble(qs, e);
    uint8_t *o = g + b * 320;
    put_quants4(o, lane, q);
    memcpy(o + 256 + lane * 2, blk, 2);
    if (q41) {
      memcpy(o + 288 + lane * 2, blk + 2, 2);
    } else { /* d (q - 8) = d q + m with m = -8 d: exact in half precision (a power of two) */
      put_half(o + 288 + lane * 2, -8 * get_half(blk));
    }
  }
}

void llm_repack(ggml_type_t type, const void *src, size_t rows, size_t cols, void *dst) {
  llm_layout_t layout = llm_layout_of(type);
  size_t gbytes = group_bytes(layout, cols),
         row_bytes = cols / ggml_block_elems(type) * ggml_block_bytes(type);
  size_t groups = (rows + 15) / 16;
  memset(dst, 0, groups * gbytes);
  for (size_t r = 0; r < rows; r++) {
    const uint8_t *in = (const uint8_t *)src + r * row_bytes;
    uint8_t *g = (uint8_t *)dst + r / 16 * gbytes;
    size_t lane = r % 16;
    if (type == GGML_TYPE_BF16) { /* exactly a float's high half */
      for (size_t k = 0; k < cols; k++) {
        uint8_t f[4] = {0, 0, in[2 * k], in[2 * k + 1]};
        memcpy(g + (k * 16 + lane) * 4, f, 4);
      }
    } else if (layout == LLM_LAYOUT_F32X16 || layout == LLM_LAYOUT_F16X16) {
      size_t es = layout == LLM_LAYOUT_F32X16 ? 4 : 2;
      for (size_t k = 0; k < cols; k++) memcpy(g + (k * 16 + lane) * es, in + k * es, es);
    } else if (layout == LLM_LAYOUT_Q4X16 || layout == LLM_LAYOUT_Q8X16) {
      repack_block_row(type, layout, in, cols, g, lane);
    } else if (layout == LLM_LAYOUT_Q5X16) {
      repack_q5_row(in, cols, g, lane);
    } else {
      repack_k_row(type, layout, in, cols, g, lane);
    }
  }
}

/* Every type with a CPU layout (llm_layout_of's default, F32X16, also stands for types it does not
 * know). */
bool llm_gpu_has_layout(ggml_type_t type) {
  return type == GGML_TYPE_F32 || type == GGML_TYPE_BF16 ||
         llm_gpu_layout_of(type) != LLM_LAYOUT_F32X16;
}

/* The GPU's K layouts: bytes of a block's quants (unsigned nibbles, or int8). */
static size_t gpu_k_quant_bytes(llm_layout_t layout) {
  return layout == LLM_LAYOUT_K4X16 ? 16 : 32;
}

size_t llm_gpu_pack_bytes(ggml_type_t type, size_t rows, size_t cols) {
  llm_layout_t layout = llm_gpu_layout_of(type);
  size_t nb = rows * (cols / 32);
  switch (layout) {
    case LLM_LAYOUT_F32X16: return rows * cols * 4;
    case LLM_LAYOUT_F16X16: return rows * cols * 2;
    case LLM_LAYOUT_Q4X16: return nb * (16 + 8);
    case LLM_LAYOUT_Q8X16: return nb * (32 + 4);
    default: /* quants and a word of sc, m per block; d, dmin per superblock */
      return nb * (gpu_k_quant_bytes(layout) + 4) + nb / k_blocks(layout) * 8;
  }
}

/* A type in a K layout: each row's superblocks (llm_kparts) into the quants, the per-block words
 * {sc[0], sc[1], m[0], m[1]} (int8 each) and the per-superblock floats {d, dmin}. */
static void gpu_pack_k(ggml_type_t type, llm_layout_t layout, const uint8_t *src, size_t rows,
                       size_t cols, uint8_t *dst) {
  size_t sb = k_blocks(layout), nb = rows * (cols / 32), qb = gpu_k_quant_bytes(layout);
  size_t supers = nb / sb, in_bytes = ggml_block_bytes(type);
  uint8_t *scales = dst + nb * qb;
  float *super = (float *)(scales + nb * 4);
  llm_kparts_t k;
  for (size_t s = 0; s < supers;
       s++) { /* rows are whole superblocks: superblock s of the matrix is the file's */
    llm_kparts(type, src + s * in_bytes, &k);
    super[2 * s] = llm_half_to_float(k.d);
    super[2 * s + 1] = llm_half_to_float(k.dmin);
    for (size_t b = 0; b < sb; b++) {
      size_t blk = s * sb + b;
      const int8_t *q = k.q + 32 * b;
      uint8_t *o = dst + blk * qb;
      if (layout == LLM_LAYOUT_K4X16) /* Q4_0's order: element j < 16 the low nibble of byte j, j +
                                         16 its high one */
        for (int j = 0; j < 16; j++) o[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
      else
        memcpy(o, q, 32);
      uint8_t *w = scales + blk * 4;
      w[0] = (uint8_t)k.sc[b][0], w[1] = (uint8_t)k.sc[b][1], w[2] = (uint8_t)k.m[b][0],
      w[3] = (uint8_t)k.m[b][1];
    }
  }
}

void llm_gpu_pack(ggml_type_t type, const void *src, size_t rows, size_t cols, void *dst) {
  llm_layout_t layout = llm_gpu_layout_of(type);
  if (type == GGML_TYPE_BF16) {
    llm_dequantize_row(type, src, dst, rows * cols); /* exact */
    return;
  }
  if (layout == LLM_LAYOUT_F32X16 || layout == LLM_LAYOUT_F16X16) {
    memcpy(dst, src, rows * cols * (layout == LLM_LAYOUT_F32X16 ? 4 : 2));
    return;
  }
  if (layout != LLM_LAYOUT_Q4X16 && layout != LLM_LAYOUT_Q8X16) {
    gpu_pack_k(type, layout, src, rows, cols, dst);
    return;
  }
  size_t nb = rows * (cols / 32), qbytes = layout == LLM_LAYOUT_Q4X16 ? 16 : 32,
         in_bytes = ggml_block_bytes(type);
  uint8_t *quants = dst;
  float *scales = (float *)(quants + nb * qbytes);
  for (size_t b = 0; b < nb;
       b++) { /* rows are whole blocks: block b of the matrix is block b of the file */
    const uint8_t *blk = (const uint8_t *)src + b * in_bytes;
    if (layout == LLM_LAYOUT_Q8X16) {
      uint16_t d;
      llm_q8_parts(type, blk, (int8_t *)quants + b * 32, &d);
      scales[b] = llm_half_to_float(d);
    } else {
      bool q41 = type == GGML_TYPE_Q4_1;
      float d = get_half(blk);
      memcpy(quants + b * 16, blk + (q41 ? 4 : 2), 16);
      scales[2 * b] = d;
      scales[2 * b + 1] = q41 ? get_half(blk + 2) : -8 * d;
    }
  }
}

bool llm_act_superblock(llm_layout_t layout) {
  return layout == LLM_LAYOUT_K4X16 || layout == LLM_LAYOUT_K8X16;
}

void llm_quantize_act_k(const float *x, size_t n, llm_act_block_t *out) {
  for (size_t sb = 0; sb < n / 256; sb++) {
    const float *v = x + sb * 256;
    float amax = 0, max = 0;
    for (int j = 0; j < 256; j++)
      if (fabsf(v[j]) > amax) amax = fabsf(v[j]), max = v[j];
    float iscale = amax != 0.0f ? -127.0f / max : 0.0f, d = amax != 0.0f ? 1.0f / iscale : 0.0f;
    for (int b = 0; b < 8; b++) {
      llm_act_block_t *o = &out[sb * 8 + (size_t)b];
      int sum = 0, s16 = 0;
      for (int j = 0; j < 32; j++) {
        int q = (int)nearbyintf(iscale * v[32 * b + j]);
        q = q < 127 ? q : 127;
        o->q[j] = (int8_t)q;
        sum += q;
        if (j == 15) s16 = sum;
      }
      o->d = d, o->s = sum, o->s16 = s16, o->sd = (float)sum * d;
    }
  }
}

void llm_quantize_act(const float *x, size_t n, llm_act_block_t *out) {
  for (size_t b = 0; b < (n + 31) / 32; b++) {
    float v[32] = {0}, amax = 0;
    for (size_t j = 0; j < 32 && b * 32 + j < n; j++) v[j] = x[b * 32 + j];
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
    float d = amax / 127, id = d ? 127 / amax : 0;
    int s = 0, s16 = 0;
    for (int j = 0; j < 32; j++) {
      int q = (int)nearbyintf(v[j] * id);
      out[b].q[j] = (int8_t)q;
      s += q;
      if (j == 15) s16 = s;
    }
    out[b].d = d;
    out[b].s = s;
    out[b].sd = (float)s * d;
    out[b].s16 = s16;
  }
}
