/* The llama forward pass as hcq CPU kernels (the CPU ABI in include/hcq/program.h: called once per
 * work-group; each group loops over its own work).
 *
 * decoder_items.c compiles this file once per entry, after a block of #defines that fix the model's
 * shape (DIM, FFN, NH, NKV, HD, RD, VOCAB, CTX, NORM_EPS, ...) and the device layouts of the
 * matrices the entry reads (W_LAYOUT, or WQ_LAYOUT ... for the entries that read several; quant.h
 * describes the layouts). A launch covers n tokens (1 for a decoding step, up to MAXB for a prompt
 * pass), so the same kernels serve both.
 *
 * Matrix products read the weights in their 4- or 8-bit blocks, never a dequantized copy: the input
 * vector is quantized to 8 bits per block of 32 (llm_act_block_t: d = max|x| / 127, as llama.cpp
 * does), a block's products are summed in 32-bit integers and scaled once per block by d_weight x
 * d_input (Q4: plus m_weight x sum of the inputs). The weights of 16 rows are interleaved so that a
 * 64-byte load holds 4 bytes of each row: one AVX-512 VNNI instruction (vpdpbusd) multiplies them
 * with the same 4 input bytes and adds each row's 4 products into its lane, so a lane is a row and
 * no horizontal sum is needed until the end. Three versions of each product, chosen where the
 * kernel is compiled (-march=native): AVX-512 VNNI, AVX2 (with AVX-VNNI when present) and portable
 * C (LLM_ISA_CAP, from HCQ_LLM_KERNELS, caps the choice so that the tests run every version on one
 * machine). They compute the same integer sums and the same float operations in the same order
 * (fmaf in C), so they give the same bits.
 *
 * Everything a group computes is in a fixed order, whatever thread runs it: eager launches and
 * graph replays give identical results.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && (defined(__AVX2__) || defined(__AVX512F__))
#include <immintrin.h>
#endif

/* kernels_tiles.c comes first (the ISA choice, the layouts, act_t, half_at, the vector helpers,
 * quantize, group_dot). */
#define KV_DIM (NKV * HD)
#define KV_MUL (NH / NKV)
/* What the architecture changes (llm_config_t's flags; decoder_items.c defines them for the model):
 * QD the width of q and of the attention output (heads x head size), ROPE_NEOX rotary pairs
 * (e, e + RD / 2) instead of (2j, 2j + 1), EMB_SCALE the embeddings' factor, ATTN_SCALE the
 * scores', FFN_GELU a GELU gate instead of SiLU. */
#ifndef QD
#define QD DIM
#endif
#ifndef ROPE_NEOX
#define ROPE_NEOX 0
#endif
#ifndef EMB_SCALE
#define EMB_SCALE 1.0f
#endif
#ifndef ATTN_SCALE
#define ATTN_SCALE (1.0f / sqrtf((float)HD))
#endif
#ifndef FFN_GELU
#define FFN_GELU 0
#endif

/* ---- the norms (kernels_tiles.c has the vector helpers and the activations' quantization) ---- */

/* 1 / RMS of the n floats of x (with the model's epsilon). */
static inline float inv_rms(const float *x, int n) {
  vf acc = (vf){0};
  int i = 0;
  for (; i + VW <= n; i += VW) {
    vf v = vload(x + i);
    acc += v * v;
  }
  float ss = vsum(acc);
  for (; i < n; i++) ss += x[i] * x[i];
  return 1.0f / sqrtf(ss / (float)n + NORM_EPS);
}

/* RMS norm of x (DIM) scaled by w, into xf; quantized into xq. */
static void rmsnorm(const float *x, const float *w, float *xf, act_t *xq) {
  float inv = inv_rms(x, DIM);
  for (int j = 0; j < DIM; j++) xf[j] = (x[j] * inv) * w[j];
  quantize_act(xf, DIM, xq);
}

/* The pass's first position and token count, written by the first kernel of a pass on each device
 * (llm_embed, llm_begin) and read by the rest: only those take them as values, so a replay patches
 * one word per device instead of one per kernel. */
typedef struct {
  int32_t p0, n;
} info_t;

/* BATCH (a batch decoder, llm_decoder_batch_submit): each row is a token of its own sequence. p0 is
 * the step's parity: the info goes on (from word 4) with two regions the host writes, one a step
 * (so that it writes the next step's while this one runs): the count of rows that choose a token,
 * 3 words of padding, BATCH_ROWS rows {position in its sequence, position in the caches (its slot's
 * first position plus that), token id (< 0: the token chosen into tokens[-1 - id] by an earlier
 * step), padding}, then for each choosing row j the row it is. Row j's token goes into
 * tokens[p0 BATCH_ROWS + j], with sampler p0 BATCH_ROWS + j. */
#ifndef BATCH
#define BATCH 0
#define BATCH_ROWS 1
#endif
#define BATCH_REGION (4 + 5 * BATCH_ROWS)
typedef struct {
  int32_t pos, cache_pos, token, pad;
} batch_row_t;
static inline const int32_t *batch_region_of(const info_t *info, int parity) {
  return (const int32_t *)info + 4 + (size_t)parity * BATCH_REGION;
}
static inline const int32_t *batch_region(const info_t *info) {
  return batch_region_of(info, info->p0);
}
static inline const batch_row_t *batch_rows(const info_t *info) {
  return (const batch_row_t *)(batch_region(info) + 4);
}
static inline int32_t batch_samples(const info_t *info) { return batch_region(info)[0]; }
static inline int32_t batch_sample_row(const info_t *info, int j) {
  return batch_region(info)[4 + 4 * BATCH_ROWS + j];
}
/* The tokens of choosing row j's sequence, positions 0..its row's (*n of them), from the history
 * (llm_select's 7th buffer, which llm_embed fills by cache position): the penalties' history. */
static inline const int32_t *batch_history(const info_t *info, const int32_t *history, int j,
                                           int *n) {
  const batch_row_t *r = &batch_rows(info)[batch_sample_row(info, j)];
  *n = r->pos + 1;
  return history + (r->cache_pos - r->pos);
}
/* Row i's position in its sequence (rope, the attention's extent) and in the caches. */
static inline int row_position(const info_t *info, int i) {
  return BATCH ? batch_rows(info)[i].pos : info->p0 + i;
}
static inline int row_cache_position(const info_t *info, int i) {
  return BATCH ? batch_rows(info)[i].cache_pos : info->p0 + i;
}

/* Tokens of the tile a group works on: [first, return value). */
#define TILE 8
static inline int tile_tokens(const hcq_launch_t *l, int n, int *first) {
  *first = (int)l->gid[1] * TILE;
  int end = *first + TILE;
  return end < n ? end : n;
}

/* ---- entries ---- */

#ifdef W_LAYOUT
/* bufs: x, info, tokens, embedding (BATCH: history); vals: p0, n. Grid: n. x[i] = embedding row of
 * tokens[p0 + i] (BATCH: of row i's token, written into the history at its cache position);
 * group 0 writes the info. */
void llm_embed(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  if (l->gid[0] == 0) *(info_t *)b[1] = (info_t){v[0], v[1]};
  float *x = (float *)b[0] + (size_t)l->gid[0] * DIM;
  /* BATCH: the parity from the value, not the info group 0 is writing */
  const batch_row_t *rows = BATCH ? (const batch_row_t *)(batch_region_of(b[1], v[0]) + 4) : NULL;
  int32_t tok = BATCH ? rows[l->gid[0]].token : ((const int32_t *)b[2])[v[0] + (int)l->gid[0]];
  if (BATCH && tok < 0 && tok >= -2 * BATCH_ROWS)
    tok = ((const int32_t *)b[2])[-1 - tok]; /* chosen on the device */
  if (BATCH)
    ((int32_t *)b[4])[rows[l->gid[0]].cache_pos] = tok; /* the slot's history, by position */
  if (tok < 0 || tok >= VOCAB) tok = 0;
  const uint8_t *g = (const uint8_t *)b[3] + (size_t)(tok / 16) * group_bytes(W_LAYOUT, DIM);
  int r = tok % 16;
  for (int k = 0; k < NBLK(DIM) * 32 && k < DIM; k += 32) {
    const uint8_t *blk = g + (size_t)(k / 32) * (W_LAYOUT == L_Q4   ? 320
                                                 : W_LAYOUT == L_Q5 ? 352
                                                                    : 544);
    for (int j = 0; j < 32 && k + j < DIM; j++) {
      if (W_LAYOUT >= L_K4 && W_LAYOUT <= L_K8_1) { /* d sc_h q - dmin m_h */
        const uint8_t *sup = g + (size_t)(k / 32 / K_SB(W_LAYOUT)) * K_SBB(W_LAYOUT);
        const uint8_t *kb = sup + 64 + (size_t)(k / 32 % K_SB(W_LAYOUT)) * K_BB(W_LAYOUT);
        const int8_t *sc = (const int8_t *)(kb + K_QB(W_LAYOUT)) + 16 * (j / 16) + r, *m = sc + 32;
        int q;
        if (W_LAYOUT == L_K4) {
          uint8_t byte = kb[64 * (j / 8) + 4 * r + (j % 4)];
          q = j % 8 < 4 ? byte & 15 : byte >> 4;
        } else {
          q = (int8_t)kb[64 * (j / 4) + 4 * r + j % 4];
        }
        x[k + j] = half_at(sup, r) * (float)*sc * (float)q - half_at(sup + 32, r) * (float)*m;
      } else if (W_LAYOUT == L_F32) {
        x[k + j] = ((const float *)g)[(size_t)(k + j) * 16 + r];
      } else if (W_LAYOUT == L_F16) {
        x[k + j] = half_at(g + (size_t)(k + j) * 32, r);
      } else if (W_LAYOUT == L_Q4) {
        int c = j / 8, i = j % 8;
        uint8_t byte = blk[64 * c + 4 * r + (i & 3)];
        x[k + j] =
            half_at(blk + 256, r) * (float)(i < 4 ? byte & 15 : byte >> 4) + half_at(blk + 288, r);
      } else if (W_LAYOUT == L_Q5) {
        int c = j / 8, i = j % 8, fifth = (int)(q5_bits(blk, c, i >= 4) >> (4 * r + (i & 3)) & 1);
        uint8_t byte = blk[64 * c + 4 * r + (i & 3)];
        x[k + j] =
            half_at(blk + 320, r) * (float)((i < 4 ? byte & 15 : byte >> 4) + 16 * fifth - 16);
      } else {
        x[k + j] = half_at(blk + 512, r) * (float)(int8_t)blk[64 * (j / 4) + 4 * r + j % 4];
      }
    }
  }
  if (EMB_SCALE != 1.0f)
    for (int k = 0; k < DIM; k++) x[k] *= EMB_SCALE;
}
#endif

/* bufs: info; vals: p0, n. Grid: 1. The info of a pass on a device where llm_embed does not run. */
void llm_begin(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)l;
  *(info_t *)b[0] = (info_t){v[0], v[1]};
}

/* bufs: xf, xq, x, weights, info; vals: last. Grid: rows. Row i of x (with last, the pass's last
 * row n - 1 instead), RMS-normalised and scaled, into row i of xf and xq. */
void llm_norm(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  const info_t *info = b[4];
  size_t i = l->gid[0], row = !v[0]   ? i
                              : BATCH ? (size_t)batch_sample_row(info, (int)i)
                                      : (size_t)info->n - 1;
  rmsnorm((const float *)b[2] + row * DIM, b[3], (float *)b[0] + i * DIM,
          (act_t *)b[1] + i * NBLK(DIM));
}

/* bufs: x, out, weights. Grid: rows. x[i] += RMS norm of out[i] scaled by the weights: a layer's
 * attention or FFN output normalised before its residual add (post_norms). */
void llm_norm_add(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)v;
  size_t i = l->gid[0];
  float *x = (float *)b[0] + i * DIM;
  const float *o = (const float *)b[1] + i * DIM, *w = b[2];
  float inv = inv_rms(o, DIM);
  for (int j = 0; j < DIM; j++) x[j] += (o[j] * inv) * w[j];
}

#ifndef QUANT_W
#define QUANT_W QD
#endif
/* bufs: out quantized, in. Grid: rows. Quantizes row i of in (QUANT_W floats: the attention output,
 * or with QUANT_W FFN the FFN's hidden row for a K-quant down matrix). */
void llm_quantize(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)v;
  size_t i = l->gid[0];
  quantize_act((const float *)b[1] + i * QUANT_W, QUANT_W, (act_t *)b[0] + i * NBLK(QUANT_W));
}

/* Rotates the rotary pairs of one head's HD values at the position's row of the table (cos, sin
 * per pair): (2j, 2j + 1), or with ROPE_NEOX (j, j + RD / 2). */
static inline void rope_head(float *h, const float *rot) {
  for (int j = 0; j < RD / 2; j++) {
    int e0 = ROPE_NEOX ? j : 2 * j, e1 = ROPE_NEOX ? j + RD / 2 : 2 * j + 1;
    float c = rot[2 * j], s = rot[2 * j + 1], a = h[e0], z = h[e1];
    h[e0] = a * c - z * s;
    h[e1] = a * s + z * c;
  }
}

/* Where key element e of kv head kvh at position pos lives in the key cache: [chunk of 32
 * positions] [kv head][element][position in the chunk] (attention scores a chunk's positions in
 * vector lanes). */
#define KEY_AT(pos, kvh, e) \
  ((((size_t)((pos) / 32) * NKV + (size_t)(kvh)) * HD + (size_t)(e)) * 32 + (size_t)(pos) % 32)

#ifdef WQ_LAYOUT
/* QKV_FUSED: rope applied in the product's own row group (adjacent pairs, no per-head norm), k
 * straight into the cache; otherwise q and k leave raw (k into kraw) for llm_rope_heads. QKV_BIAS:
 * biases added to the products. */
#ifndef QKV_FUSED
#define QKV_FUSED 1
#endif
#ifndef QKV_BIAS
#define QKV_BIAS 0
#endif
/* Rotates the pairs of one row group's outputs that are rotary elements of their head (adjacent
 * pairs: a pair never straddles a group). row0: the matrix's row of out[0]. */
static inline void rope_group(float *out, int row0, const float *rot) {
  for (int r = 0; r < 16; r += 2) {
    int e = (row0 + r) % HD;
    if (e >= RD) continue;
    float c = rot[e], s = rot[e + 1], a = out[r], z = out[r + 1];
    out[r] = a * c - z * s;
    out[r + 1] = a * s + z * c;
  }
}

#define GQ ((QD + 15) / 16)
#define GKV ((KV_DIM + 15) / 16)
/* bufs: q, key cache, value cache, xf, xq, wq, wk, wv, rotary table, info, kraw, bq, bk, bv.
 * Grid: (GQ + 2 GKV row groups, tiles of TILE tokens). Row groups of q, then k, then v (plus
 * biases); fused: q and k rotated at their token's position p0 + i, k stored in the key cache there
 * (KEY_AT); else q raw and k raw into kraw [token][KV_DIM]. v goes into the value cache as
 * [position][kv head][element]. Positions outermost: the memory a cache touches grows with the
 * positions used. */
void llm_qkv(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  float *q = b[0], *kc = b[1], *vc = b[2], *kraw = b[10];
  const float *xf = b[3], *rope_table = b[8];
  const act_t *xq = b[4];
  (void)v, (void)kraw, (void)rope_table;
  const info_t *info = b[9];
  int n = info->n, first, end = tile_tokens(l, n, &first), g = (int)l->gid[0];
  if (first >= end) return;
  float out[TILE][16];
  int which = g < GQ         ? 0
              : g < GQ + GKV ? 1
                             : 2,
      lg = g - (which == 0   ? 0
                : which == 1 ? GQ
                             : GQ + GKV);
  const float *fin = xf + (size_t)first * DIM;
  const act_t *qin = xq + (size_t)first * NBLK(DIM);
  if (which == 0)
    group_dot(WQ_LAYOUT, (const uint8_t *)b[5] + (size_t)lg * group_bytes(WQ_LAYOUT, DIM), DIM, fin,
              qin, end - first, out);
  else if (which == 1)
    group_dot(WK_LAYOUT, (const uint8_t *)b[6] + (size_t)lg * group_bytes(WK_LAYOUT, DIM), DIM, fin,
              qin, end - first, out);
  else
    group_dot(WV_LAYOUT, (const uint8_t *)b[7] + (size_t)lg * group_bytes(WV_LAYOUT, DIM), DIM, fin,
              qin, end - first, out);
  int rows = which == 0 ? QD : KV_DIM;
#if QKV_BIAS
  const float *bias = (const float *)b[11 + which] + lg * 16;
  for (int t = 0; t < end - first; t++)
    for (int r = 0; r < 16 && lg * 16 + r < rows; r++) out[t][r] += bias[r];
#endif
  for (int t = 0; t < end - first; t++) {
    int pos = row_position(info, first + t), at = row_cache_position(info, first + t);
    (void)pos;
#if QKV_FUSED
    if (which < 2) rope_group(out[t], lg * 16, rope_table + (size_t)pos * RD);
#endif
    for (int r = 0; r < 16 && lg * 16 + r < rows; r++) {
      int row = lg * 16 + r;
      if (which == 0) {
        q[(size_t)(first + t) * QD + row] = out[t][r];
      } else if (which == 1) {
#if QKV_FUSED
        kc[KEY_AT(at, row / HD, row % HD)] = out[t][r];
#else
        kraw[(size_t)(first + t) * KV_DIM + row] = out[t][r];
#endif
      } else {
        vc[((size_t)at * NKV + (size_t)(row / HD)) * HD + (size_t)(row % HD)] = out[t][r];
      }
    }
  }
}
#endif

#ifndef QK_NORM
#define QK_NORM 0
#endif
/* bufs: q, key cache, kraw, rotary table, info, q norm, k norm. Grid: (NH + NKV heads, n tokens).
 * The heads of q (in place) and of k (from kraw into the key cache at the token's position),
 * each RMS-normalised over its HD values and scaled by its norm's weights (QK_NORM), then rotated.
 */
void llm_rope_heads(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)v;
  float *q = b[0], *kc = b[1];
  const float *kraw = b[2], *rope_table = b[3];
  const info_t *info = b[4];
  int h = (int)l->gid[0], i = (int)l->gid[1], pos = row_position(info, i),
      at = row_cache_position(info, i);
  int is_q = h < NH;
  float *src = is_q ? q + (size_t)i * QD + (size_t)h * HD
                    : (float *)kraw + (size_t)i * KV_DIM + (size_t)(h - NH) * HD;
  float head[HD];
  memcpy(head, src, sizeof(head));
#if QK_NORM
  const float *w = is_q ? b[5] : b[6];
  float inv = inv_rms(head, HD);
  for (int e = 0; e < HD; e++) head[e] = (head[e] * inv) * w[e];
#endif
  rope_head(head, rope_table + (size_t)pos * RD);
  if (is_q)
    memcpy(src, head, sizeof(head));
  else
    for (int e = 0; e < HD; e++) kc[KEY_AT(at, h - NH, e)] = head[e];
}

#ifndef WINDOW
#define WINDOW 0
#endif
/* Chunks of 32 positions whose scores one pass over q computes: their sums are independent, so
 * their additions overlap instead of waiting on one another (each sum keeps its order). */
#define ATTN_CHUNKS 4
/* The head's output sums of HD elements: whole vectors in registers, the rest (HD % VW) one by one.
 */
#define ATTN_NA (HD / VW)
#define ATTN_TAIL (HD % VW)
#define ATTN_UNROLL _Pragma("GCC unroll 16")

/* Scores of chunks c0 .. c0 + nc - 1 (nc <= ATTN_CHUNKS) of kv head kvh for the head's q. */
static inline void attn_scores(const float *qh, const float *kc, int kvh, int c0, int nc,
                               vf (*s)[32 / VW]) {
  enum { NV = 32 / VW };
  for (int k = 0; k < ATTN_CHUNKS; k++)
    for (int j = 0; j < NV; j++) s[k][j] = (vf){0};
  for (int e = 0; e < HD; e++) {
    _Pragma("GCC unroll 4") for (int k = 0; k < ATTN_CHUNKS; k++) {
      if (k >= nc) break;
      const float *kt = kc + ((size_t)(c0 + k) * NKV + (size_t)kvh) * HD * 32 + (size_t)e * 32;
      for (int j = 0; j < NV; j++) s[k][j] += qh[e] * vload(kt + j * VW);
    }
  }
}

/* bufs: out, q, key cache, value cache, info. Grid: (NH heads, n tokens). Head h of token i
 * (position p0 + i) attends to positions 0..p0 + i (WINDOW: the last WINDOW of them), a chunk of
 * 32 at a time with a running max (online softmax): the chunk's scores in vector lanes, masked
 * outside the positions seen. The sums live in registers (through memory, each addition would wait
 * on the store before it). */
void llm_attn(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  float *out = b[0];
  const float *q = b[1], *kc = b[2], *vc = b[3];
  (void)v;
  const info_t *info = b[4];
  int h = (int)l->gid[0], i = (int)l->gid[1], pos = row_position(info, i), kvh = h / KV_MUL;
  int lo = WINDOW && pos >= WINDOW ? pos - WINDOW + 1 : 0;
  /* a batch row's slot starts on a chunk (its first cache position a multiple of 32) */
  size_t base = (size_t)(row_cache_position(info, i) - pos);
  kc += base * KV_DIM, vc += base * KV_DIM;
  const float *qh = q + (size_t)i * QD + (size_t)h * HD;
  const float scale = ATTN_SCALE;
  enum { NV = 32 / VW };
  vi lane;
  for (int k = 0; k < VW; k++) lane[k] = k;
  float m = -INFINITY, total = 0, tail[ATTN_TAIL + 1];
  vf acc[ATTN_NA + 1];
  for (int a = 0; a < ATTN_NA; a++) acc[a] = (vf){0};
  for (int e = 0; e < ATTN_TAIL; e++) tail[e] = 0;
  for (int c0 = lo / 32; c0 <= pos / 32; c0 += ATTN_CHUNKS) {
    int nc = pos / 32 - c0 + 1 < ATTN_CHUNKS ? pos / 32 - c0 + 1 : ATTN_CHUNKS;
    vf scores[ATTN_CHUNKS][NV];
    attn_scores(qh, kc, kvh, c0, nc, scores);
    for (int k = 0; k < nc; k++) {
      int c = c0 + k;
      vf *s = scores[k];
      int valid = pos - 32 * c + 1, first = lo - 32 * c;
      vi keep[NV];
      vf top = (vf){0} - INFINITY;
      for (int j = 0; j < NV; j++) {
        s[j] *= scale;
        keep[j] = (lane + j * VW < valid) & (lane + j * VW >= first);
        top = vselect(keep[j] & (s[j] > top), s[j], top);
      }
      float cm = vmax(top), nm = cm > m ? cm : m;
      float corr = m == -INFINITY ? 0.0f : expf(m - nm);
      vf e_sum = (vf){0};
      float p[32];
      for (int j = 0; j < NV; j++) {
        vf e = vselect(keep[j], vexp(s[j] - nm), (vf){0});
        e_sum += e;
        vstore(p + j * VW, e);
      }
      total = total * corr + vsum(e_sum);
      ATTN_UNROLL for (int a = 0; a < ATTN_NA; a++) acc[a] *= corr;
      for (int e = 0; e < ATTN_TAIL; e++) tail[e] *= corr;
      int lim = valid < 32 ? valid : 32;
      for (int t = first > 0 ? first : 0; t < lim; t++) {
        const float *vt = vc + ((size_t)(32 * c + t) * NKV + (size_t)kvh) * HD;
        ATTN_UNROLL for (int a = 0; a < ATTN_NA; a++) acc[a] += p[t] * vload(vt + a * VW);
        for (int e = 0; e < ATTN_TAIL; e++) tail[e] += p[t] * vt[ATTN_NA * VW + e];
      }
      m = nm;
    }
  }
  float *o = out + (size_t)i * QD + (size_t)h * HD;
  for (int a = 0; a < ATTN_NA; a++) vstore(o + a * VW, acc[a] / total);
  for (int e = 0; e < ATTN_TAIL; e++) o[ATTN_NA * VW + e] = tail[e] / total;
}

#ifdef W_LAYOUT
#ifndef MATMUL_SET
#define MATMUL_SET 0
#endif
/* bufs: x, in floats, in blocks, w, info; vals: k. Grid: (row groups of DIM, tiles). x[i] += w .
 * in[i] (k inputs): the output projections with the residual add fused; MATMUL_SET: x[i] = w .
 * in[i] (post_norms: the output is normalised before the add, llm_norm_add). */
void llm_matmul_add(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  float *x = b[0];
  int n = ((const info_t *)b[4])->n, k = v[0], first, end = tile_tokens(l, n, &first),
      g = (int)l->gid[0];
  if (first >= end) return;
  float out[TILE][16];
  group_dot(W_LAYOUT, (const uint8_t *)b[3] + (size_t)g * group_bytes(W_LAYOUT, k), k,
            (const float *)b[1] + (size_t)first * k, (const act_t *)b[2] + (size_t)first * NBLK(k),
            end - first, out);
  for (int t = 0; t < end - first; t++)
    for (int r = 0; r < 16 && g * 16 + r < DIM; r++) {
      float *dst = &x[(size_t)(first + t) * DIM + g * 16 + r];
      *dst = MATMUL_SET ? out[t][r] : *dst + out[t][r];
    }
}
#endif

/* The FFN's gate: silu(a) = a / (1 + e^-a), or with FFN_GELU GELU's tanh form
 * 0.5 a (1 + tanh(sqrt(2 / pi) (a + 0.044715 a^3))), tanh(y) = 1 - 2 / (e^2y + 1). */
static inline vf gate_fn(vf a) {
#if FFN_GELU
  vf y = 0.7978845608f * (a + 0.044715f * a * a * a);
  vf t = 1.0f - 2.0f / (vexp(2.0f * y) + 1.0f);
  return 0.5f * a * (1.0f + t);
#else
  return a / (1.0f + vexp(-a));
#endif
}

#ifdef WG_LAYOUT
/* DOWN_ACT_K: the down matrix takes Q8_K-style inputs, which llm_quantize makes from hf over the
 * whole row (a group sees 32 rows of it): hq is not written here. */
#ifndef DOWN_ACT_K
#define DOWN_ACT_K 0
#endif
/* bufs: hf, hq, xf, xq, w_gate, w_up, info. Grid: (blocks of 32 FFN rows, tiles).
 * h = gate(gate . x) * (up . x) for the group's 32 rows, into hf and, quantized, block g of hq. */
void llm_gate_up(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  float *hf = b[0];
  act_t *hq = b[1];
  (void)v;
  int n = ((const info_t *)b[6])->n, first, end = tile_tokens(l, n, &first), g = (int)l->gid[0];
  if (first >= end) return;
  const float *fin = (const float *)b[2] + (size_t)first * DIM;
  const act_t *qin = (const act_t *)b[3] + (size_t)first * NBLK(DIM);
  float gate[2][TILE][16], up[2][TILE][16];
  for (int half = 0; half < 2; half++) {
    int rg = 2 * g + half;
    if (rg * 16 >= FFN) {
      memset(gate[half], 0, sizeof(gate[half])), memset(up[half], 0, sizeof(up[half]));
      continue;
    }
    group_dot(WG_LAYOUT, (const uint8_t *)b[4] + (size_t)rg * group_bytes(WG_LAYOUT, DIM), DIM, fin,
              qin, end - first, gate[half]);
    group_dot(WU_LAYOUT, (const uint8_t *)b[5] + (size_t)rg * group_bytes(WU_LAYOUT, DIM), DIM, fin,
              qin, end - first, up[half]);
  }
  for (int t = 0; t < end - first; t++) {
    float h[32];
    for (int half = 0; half < 2; half++)
      for (int j = 0; j < 16; j += VW)
        vstore(&h[16 * half + j], gate_fn(vload(&gate[half][t][j])) * vload(&up[half][t][j]));
    int rows = FFN - 32 * g < 32 ? FFN - 32 * g : 32;
    float *dst = hf + (size_t)(first + t) * FFN + 32 * g;
    for (int j = 0; j < rows; j++) dst[j] = h[j];
    if (!DOWN_ACT_K) quantize(h, rows, hq + (size_t)(first + t) * NBLK(FFN) + g);
  }
}
#endif

#ifdef W_LAYOUT
#ifndef CLS_ROWS
#define CLS_ROWS 16
#endif
/* bufs: logits, best, xf, xq, classifier; vals: first group. Grid: groups of CLS_ROWS rows (a
 * multiple of 16: llm_cls_rows(), several row groups a call, so that the engine's cost per call is
 * shared by more weights). Logits of the group's rows (for the input in row 0) and its best: best[2
 * g] the value's bits, best[2 g + 1] the lowest index holding it. BATCH: bufs logits, best, xf, xq,
 * classifier, info; the rows that choose a token (row j's logits at j VOCAB, its best at j 2
 * CLS_GROUPS) in tiles of TILE, so the group's weights are read once for a tile; a row's sums are
 * the same whatever the tile holds (group_dot). */
#define CLS_GROUPS ((VOCAB + CLS_ROWS - 1) / CLS_ROWS)
void llm_classify(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  int g = (int)l->gid[0] + v[0], rows = BATCH ? batch_samples(b[5]) : 1;
  for (int j0 = 0; j0 < rows; j0 += TILE) {
    int nt = rows - j0 < TILE ? rows - j0 : TILE, arg[TILE];
    float top[TILE], *logits = (float *)b[0] + (size_t)j0 * VOCAB;
    for (int t = 0; t < nt; t++) top[t] = -INFINITY, arg[t] = g * CLS_ROWS;
    for (int rg = g * (CLS_ROWS / 16); rg < (g + 1) * (CLS_ROWS / 16) && rg * 16 < VOCAB; rg++) {
      float out[TILE][16];
      const uint8_t *w = (const uint8_t *)b[4] +
                         (size_t)(rg - v[0] * (CLS_ROWS / 16)) * group_bytes(W_LAYOUT, DIM);
      group_dot(W_LAYOUT, w, DIM, (const float *)b[2] + (size_t)j0 * DIM,
                (const act_t *)b[3] + (size_t)j0 * NBLK(DIM), nt, out);
      for (int t = 0; t < nt; t++)
        for (int r = 0; r < 16 && rg * 16 + r < VOCAB; r++) {
          logits[(size_t)t * VOCAB + (size_t)rg * 16 + (size_t)r] = out[t][r];
          if (out[t][r] > top[t]) top[t] = out[t][r], arg[t] = rg * 16 + r;
        }
    }
    for (int t = 0; t < nt; t++) {
      int32_t *best = (int32_t *)b[1] + (size_t)(j0 + t) * 2 * CLS_GROUPS;
      memcpy(&best[2 * g], &top[t], 4);
      best[2 * g + 1] = arg[t];
    }
  }
}
#endif

/* ---- choosing the next token ---- */

/* gpu_abi.h's parameter layout. repeat_penalty 1, frequency and presence 0 or penalty_last_n 0:
 * no penalties. */
typedef struct {
  float temperature, top_p;
  int32_t top_k;
  uint32_t seed_lo, seed_hi;
  float min_p, repeat_penalty, frequency_penalty, presence_penalty;
  int32_t penalty_last_n;
} sampler_t;

typedef struct {
  float logit;
  int32_t id;
} cand_t;

/* Higher logit first, then lower id: a total order, so the choice never depends on the sort. */
static int cand_cmp(const void *pa, const void *pb) {
  const cand_t *a = pa, *b = pb;
  if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
  return a->id < b->id ? -1 : a->id > b->id;
}
static inline int cand_before(cand_t a, cand_t b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

/* splitmix64 of the seed and the position: a uniform number in [0, 1). */
static double uniform(uint64_t seed, uint64_t pos) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (pos + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* Keeps the k best candidates of logits in c[0..k) (a min-heap on cand_before, its worst at c[0]).
 */
static void heap_down(cand_t *c, int k, int i) {
  for (;;) {
    int w = i, a = 2 * i + 1, z = 2 * i + 2;
    if (a < k && cand_before(c[w], c[a])) w = a;
    if (z < k && cand_before(c[w], c[z])) w = z;
    if (w == i) return;
    cand_t t = c[i];
    c[i] = c[w], c[w] = t, i = w;
  }
}

static inline int penalties_on(const sampler_t *sp) {
  return sp->penalty_last_n > 0 && (sp->repeat_penalty != 1.0f || sp->frequency_penalty != 0.0f ||
                                    sp->presence_penalty != 0.0f);
}

/* llama.cpp's penalties over the last penalty_last_n tokens of the history: a token seen c times
 * has its logit divided by repeat_penalty (multiplied when it is not positive), then c x
 * frequency_penalty + presence_penalty taken off. Returns logits itself when there is nothing to
 * do, else pen (VOCAB floats) holding the penalised copy; count is VOCAB int32 of scratch, of
 * which only the history's entries are touched. */
static const float *penalize(const float *logits, const sampler_t *sp, float *pen, int32_t *count,
                             const int32_t *hist, int nhist) {
  int n = sp->penalty_last_n < nhist ? sp->penalty_last_n : nhist;
  if (!penalties_on(sp) || n <= 0) return logits;
  const int32_t *h = hist + (nhist - n);
  memcpy(pen, logits, (size_t)VOCAB * sizeof(float));
  for (int i = 0; i < n; i++)
    if ((uint32_t)h[i] < (uint32_t)VOCAB) count[h[i]] = 0;
  for (int i = 0; i < n; i++)
    if ((uint32_t)h[i] < (uint32_t)VOCAB) count[h[i]]++;
  for (int i = 0; i < n; i++) {
    int32_t t = h[i];
    if ((uint32_t)t >= (uint32_t)VOCAB || count[t] == 0) continue; /* outside, or already done */
    float c = (float)count[t], l = pen[t];
    l = l <= 0 ? l * sp->repeat_penalty : l / sp->repeat_penalty;
    pen[t] = l - (c * sp->frequency_penalty + sp->presence_penalty);
    count[t] = 0;
  }
  return pen;
}

/* The top_k best of logits (all for 0), best first, into c; returns how many. */
static int top_k_sorted(const float *logits, int top_k, cand_t *c) {
  int k = top_k > 0 && top_k < VOCAB ? top_k : VOCAB;
  if (k == VOCAB) {
    for (int i = 0; i < VOCAB; i++) c[i] = (cand_t){logits[i], i};
  } else {
    for (int i = 0; i < k; i++) c[i] = (cand_t){logits[i], i};
    for (int i = k / 2 - 1; i >= 0; i--) heap_down(c, k, i);
    for (int i = k; i < VOCAB; i++) {
      cand_t x = {logits[i], i};
      if (cand_before(x, c[0])) c[0] = x, heap_down(c, k, 0);
    }
  }
  qsort(c, (size_t)k, sizeof(cand_t), cand_cmp);
  return k;
}

/* The next token of one sequence (a row: the batched step calls it once per row): its logits
 * (VOCAB), the sampler, scratch (VOCAB x 16 bytes), the tokens before it (hist[0..nhist), for the
 * penalties) and its position (for the draw). llama.cpp's chain, in its order: penalties, top-k,
 * top-p, min-p (both on the probabilities at temperature 1), temperature, the draw; temperature 0
 * is the highest penalised logit (the lowest id on ties). */
static int32_t sample(const float *logits, const sampler_t *sp, void *scratch, const int32_t *hist,
                      int nhist, int pos) {
  cand_t *c = scratch;
  double *p = (double *)(c + VOCAB); /* the scratch holds VOCAB candidates, then VOCAB doubles */
  const float *l = penalize(logits, sp, (float *)p, (int32_t *)p + VOCAB, hist, nhist);
  if (!(sp->temperature > 0)) {
    int32_t arg = 0;
    for (int i = 1; i < VOCAB; i++)
      if (l[i] > l[arg] || (l[arg] != l[arg] && l[i] == l[i])) arg = i; /* NaN never wins */
    return arg;
  }
  int k = top_k_sorted(l, sp->top_k, c), keep = k;
  double total = 0;
  for (int i = 0; i < k; i++) total += p[i] = exp((double)c[i].logit - c[0].logit);
  if (sp->top_p < 1.0f) {
    double cum = 0;
    for (int i = 0; i < k; i++) {
      cum += p[i] / total;
      if (cum >= sp->top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (sp->min_p > 0) { /* p_i >= min_p p_max, as llama.cpp: logit >= max + log(min_p) */
    float floor_logit = c[0].logit + logf(sp->min_p);
    int i = 1;
    while (i < keep && c[i].logit >= floor_logit) i++;
    keep = i;
  }
  double kept = 0;
  for (int i = 0; i < keep; i++)
    kept += p[i] = exp(((double)c[i].logit - c[0].logit) / sp->temperature);
  double u = uniform((uint64_t)sp->seed_hi << 32 | sp->seed_lo, (uint64_t)pos) * kept, cum = 0;
  for (int i = 0; i < keep; i++) {
    cum += p[i];
    if (u < cum) return c[i].id;
  }
  return c[keep - 1].id;
}

/* bufs: tokens, scratch, best, logits, sampler, info (a batch's: and the slots' token history);
 * vals: groups. Grid: 1 (a batch's: one group per choosing row). The next token into tokens[p0 +
 * n]: the highest logit (the lowest index on ties: the classifier's groups' bests) when the
 * temperature is 0 and no penalties apply, else sample() over the tokens before it. */
void llm_select(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  const int32_t *best = b[2];
  const sampler_t *sp = b[4];
  const info_t *info = b[5];
  int at = info->p0 + info->n;
  int32_t *tokens = b[0], *dest = tokens + at;
  /* the tokens before the new one: the sampler's penalties look back over them */
  const int32_t *hist = tokens;
  int nhist = at;
  const float *logits = b[3];
  cand_t *scratch = b[1];
  if (BATCH) { /* group j: the j-th choosing row, with its own sampler, scratch, logits and history;
                  its token into tokens[j] */
    int j = (int)l->gid[0];
    at = batch_rows(info)[batch_sample_row(info, j)].pos + 1;
    dest = tokens + info->p0 * BATCH_ROWS + j, sp += info->p0 * BATCH_ROWS + j;
    best += (size_t)j * 2 * v[0], logits += (size_t)j * VOCAB;
    scratch += (size_t)j * VOCAB * 2; /* VOCAB x 16 bytes a row */
    hist = batch_history(info, b[6], j, &nhist);
  }
  if (sp->temperature > 0 || penalties_on(sp)) {
    *dest = sample(logits, sp, scratch, hist, nhist, at);
    return;
  }
  float top = -INFINITY;
  int32_t arg = 0;
  for (int g = 0; g < v[0]; g++) {
    float z;
    memcpy(&z, &best[2 * g], 4);
    if (z > top) top = z, arg = best[2 * g + 1];
  }
  *dest = arg;
}
