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
  if (absx >= 0x477ff000u) return sign | 0x7c00;                                     /* rounds past 65504 */
  if (absx < 0x38800000u) {                                                          /* subnormal or zero */
    if (absx < 0x33000000u) return sign;                                             /* below half the least subnormal */
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

void llm_quantize_row(ggml_type_t type, const float *x, void *dst, size_t n) {
  uint8_t *o = dst;
  switch (type) {
    case GGML_TYPE_F32: memcpy(o, x, n * 4); return;
    case GGML_TYPE_F16:
      for (size_t i = 0; i < n; i++) put_half(o + 2 * i, x[i]);
      return;
    default: break;
  }
  for (size_t b = 0; b < n / 32; b++, x += 32) {
    if (type == GGML_TYPE_Q8_0) {
      float amax = 0;
      for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
      float d = amax / 127, id = d ? 1 / d : 0;
      put_half(o, d);
      for (int j = 0; j < 32; j++) o[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
      o += 34;
    } else if (type == GGML_TYPE_Q4_0) {
      float amax = 0, max = 0; /* the value of largest magnitude, with its sign */
      for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
      float d = max / -8, id = d ? 1 / d : 0;
      put_half(o, d);
      for (int j = 0; j < 16; j++) {
        int lo4 = (int)fminf(15, x[j] * id + 8.5f), hi4 = (int)fminf(15, x[j + 16] * id + 8.5f);
        o[2 + j] = (uint8_t)(lo4 | hi4 << 4);
      }
      o += 18;
    } else { /* Q4_1 */
      float lo = x[0], hi = x[0];
      for (int j = 1; j < 32; j++) lo = fminf(lo, x[j]), hi = fmaxf(hi, x[j]);
      float d = (hi - lo) / 15, id = d ? 1 / d : 0;
      put_half(o, d);
      put_half(o + 2, lo);
      for (int j = 0; j < 16; j++) {
        int lo4 = (int)fminf(15, (x[j] - lo) * id + 0.5f), hi4 = (int)fminf(15, (x[j + 16] - lo) * id + 0.5f);
        o[4 + j] = (uint8_t)(lo4 | hi4 << 4);
      }
      o += 20;
    }
  }
}

void llm_dequantize_row(ggml_type_t type, const void *src, float *x, size_t n) {
  const uint8_t *p = src;
  switch (type) {
    case GGML_TYPE_F32: memcpy(x, p, n * 4); return;
    case GGML_TYPE_F16:
      for (size_t i = 0; i < n; i++) x[i] = get_half(p + 2 * i);
      return;
    default: break;
  }
  for (size_t b = 0; b < n / 32; b++, x += 32) {
    if (type == GGML_TYPE_Q8_0) {
      float d = get_half(p);
      for (int j = 0; j < 32; j++) x[j] = d * (float)(int8_t)p[2 + j];
      p += 34;
    } else if (type == GGML_TYPE_Q4_0) {
      float d = get_half(p);
      for (int j = 0; j < 16; j++) x[j] = d * (float)((p[2 + j] & 15) - 8), x[j + 16] = d * (float)((p[2 + j] >> 4) - 8);
      p += 18;
    } else {
      float d = get_half(p), m = get_half(p + 2);
      for (int j = 0; j < 16; j++) x[j] = d * (float)(p[4 + j] & 15) + m, x[j + 16] = d * (float)(p[4 + j] >> 4) + m;
      p += 20;
    }
  }
}

/* ---- device layouts ---- */

llm_layout_t llm_layout_of(ggml_type_t type) {
  switch (type) {
    case GGML_TYPE_F16: return LLM_LAYOUT_F16X16;
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q4_1: return LLM_LAYOUT_Q4X16;
    case GGML_TYPE_Q8_0: return LLM_LAYOUT_Q8X16;
    default: return LLM_LAYOUT_F32X16;
  }
}

const char *llm_layout_name(llm_layout_t layout) {
  static const char *const names[] = {"F32X16", "F16X16", "Q4X16", "Q8X16"};
  return names[layout];
}

static size_t group_bytes(llm_layout_t layout, size_t cols) {
  switch (layout) {
    case LLM_LAYOUT_F32X16: return cols * 16 * 4;
    case LLM_LAYOUT_F16X16: return cols * 16 * 2;
    case LLM_LAYOUT_Q4X16: return cols / 32 * 320;
    default: return cols / 32 * 544;
  }
}

size_t llm_repack_bytes(ggml_type_t type, size_t rows, size_t cols) {
  return (rows + 15) / 16 * group_bytes(llm_layout_of(type), cols);
}

/* Element e (0..31) of a Q4_0/Q4_1 block's nibbles. */
static unsigned nibble(const uint8_t *qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

void llm_repack(ggml_type_t type, const void *src, size_t rows, size_t cols, void *dst) {
  llm_layout_t layout = llm_layout_of(type);
  size_t gbytes = group_bytes(layout, cols), row_bytes = cols / ggml_block_elems(type) * ggml_block_bytes(type);
  size_t groups = (rows + 15) / 16, nb = cols / 32;
  memset(dst, 0, groups * gbytes);
  for (size_t r = 0; r < rows; r++) {
    const uint8_t *in = (const uint8_t *)src + r * row_bytes;
    uint8_t *g = (uint8_t *)dst + r / 16 * gbytes;
    size_t lane = r % 16;
    if (layout == LLM_LAYOUT_F32X16 || layout == LLM_LAYOUT_F16X16) {
      size_t es = layout == LLM_LAYOUT_F32X16 ? 4 : 2;
      for (size_t k = 0; k < cols; k++) memcpy(g + (k * 16 + lane) * es, in + k * es, es);
      continue;
    }
    for (size_t b = 0; b < nb; b++) {
      if (layout == LLM_LAYOUT_Q8X16) {
        const uint8_t *blk = in + b * 34;
        uint8_t *o = g + b * 544;
        for (int c = 0; c < 8; c++)
          for (int i = 0; i < 4; i++) o[c * 64 + lane * 4 + (size_t)i] = blk[2 + 4 * c + i];
        memcpy(o + 512 + lane * 2, blk, 2);
        continue;
      }
      bool q41 = type == GGML_TYPE_Q4_1;
      const uint8_t *blk = in + b * (q41 ? 20 : 18), *qs = blk + (q41 ? 4 : 2);
      uint8_t *o = g + b * 320;
      for (int c = 0; c < 4; c++)
        for (int i = 0; i < 4; i++)
          o[c * 64 + lane * 4 + (size_t)i] = (uint8_t)(nibble(qs, 8 * c + i) | nibble(qs, 8 * c + 4 + i) << 4);
      memcpy(o + 256 + lane * 2, blk, 2);
      if (q41) {
        memcpy(o + 288 + lane * 2, blk + 2, 2);
      } else { /* d (q - 8) = d q + m with m = -8 d: exact in half precision (a power of two) */
        put_half(o + 288 + lane * 2, -8 * get_half(blk));
      }
    }
  }
}

size_t llm_gpu_pack_bytes(ggml_type_t type, size_t rows, size_t cols) {
  switch (llm_layout_of(type)) {
    case LLM_LAYOUT_F32X16: return rows * cols * 4;
    case LLM_LAYOUT_F16X16: return rows * cols * 2;
    case LLM_LAYOUT_Q4X16: return rows * (cols / 32) * (16 + 8);
    default: return rows * (cols / 32) * (32 + 4);
  }
}

void llm_gpu_pack(ggml_type_t type, const void *src, size_t rows, size_t cols, void *dst) {
  llm_layout_t layout = llm_layout_of(type);
  if (layout == LLM_LAYOUT_F32X16 || layout == LLM_LAYOUT_F16X16) {
    memcpy(dst, src, rows * cols * (layout == LLM_LAYOUT_F32X16 ? 4 : 2));
    return;
  }
  size_t nb = rows * (cols / 32), qbytes = layout == LLM_LAYOUT_Q4X16 ? 16 : 32;
  size_t in_bytes = type == GGML_TYPE_Q4_1 ? 20 : type == GGML_TYPE_Q4_0 ? 18 : 34;
  uint8_t *quants = dst;
  float *scales = (float *)(quants + nb * qbytes);
  for (size_t b = 0; b < nb; b++) { /* rows are whole blocks: block b of the matrix is block b of the file */
    const uint8_t *blk = (const uint8_t *)src + b * in_bytes;
    float d = get_half(blk);
    if (layout == LLM_LAYOUT_Q8X16) {
      memcpy(quants + b * 32, blk + 2, 32);
      scales[b] = d;
    } else {
      bool q41 = type == GGML_TYPE_Q4_1;
      memcpy(quants + b * 16, blk + (q41 ? 4 : 2), 16);
      scales[2 * b] = d;
      scales[2 * b + 1] = q41 ? get_half(blk + 2) : -8 * d;
    }
  }
}

void llm_quantize_act(const float *x, size_t n, llm_act_block_t *out) {
  for (size_t b = 0; b < (n + 31) / 32; b++) {
    float v[32] = {0}, amax = 0;
    for (size_t j = 0; j < 32 && b * 32 + j < n; j++) v[j] = x[b * 32 + j];
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
    float d = amax / 127, id = d ? 127 / amax : 0;
    int s = 0;
    for (int j = 0; j < 32; j++) {
      int q = (int)nearbyintf(v[j] * id);
      out[b].q[j] = (int8_t)q;
      s += q;
    }
    out[b].d = d;
    out[b].s = s;
    out[b].sd = (float)s * d;
    out[b].pad = 0;
  }
}
