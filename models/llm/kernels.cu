// The llama forward pass in CUDA C: the entries, buffers and values of gpu_abi.h (kernels.c says
// what each computes), over the GPU weight layout, with kernels.glsl's arithmetic: 8-bit activation
// blocks, an integer sum per block (__dp4a) scaled once, d_w d_x sum(q_w q_x) (+ m_w s_x d_x for
// Q4).
//
// The work split (kernels.metal has the same, so one set of host twins, tests/llm_twins.h, serves
// both stand-ins): a block is one warp of 32 lanes (the sampler: SEL threads). A product gives a
// block 32 rows of one token (CLS_ROWS for the classifier, in rounds of 32): lane l holds the
// 32-element blocks l, l + 32, ... of the token's input in registers, takes the same blocks of each
// row, and a butterfly of shuffles (warp_sum: lane l adds lane l ^ o for o = 16 .. 1, so every lane
// holds the same bits) finishes the row; lane r keeps row r. Attention is a block per (head,
// token), lane l taking positions l, l + 32, ... with its own online softmax. Sums run in another
// order than on the CPU, so results match the CPU's within rounding; every block computes in a
// fixed order, so eager steps, graph replays and the prompt pass give the same bits.
//
// The decoder compiles it once per entry after the model's #defines and KERNEL_<entry>, ROWS (32),
// CLS_ROWS, SEL, ID_BITS, NORM_EPS_BITS (NORM_EPS's bits) and, for llm_matmul_add, K_IN.
// tests/llm_twins.h has host twins of these kernels for the stand-in driver: change both.

#if ROWS != 32 || CLS_ROWS % 32 != 0 || SEL % 32 != 0 || HD % 4 != 0
#error the kernels are written for warps of 32 rows, classifier groups and row selections of\
  multiples of 32, head sizes of multiples of 4
#endif

#define L_F32 0
#define L_F16 1
#define L_Q4 2
#define L_Q8 3
#define L_K4 4    // the K layouts (quant.h): d sc_h q - dmin m_h; 4-bit q, superblocks of 8 blocks
#define L_K8 5    // int8 q
#define L_K8_1 6  // int8 q, superblocks of one block (Q5_1)
#define K_QB(lay) ((lay) == L_K4 ? 16 : 32)  // bytes of a block's quants
#define K_SB(lay) ((lay) == L_K8_1 ? 1 : 8)  // blocks per superblock
#define NBLK(k) (((k) + 31) / 32)
#define KV_DIM (NKV * HD)
#define KV_MUL (NH / NKV)
// What the architecture changes (kernels.c says each; gpu_abi.h), with kernels.glsl's arithmetic;
// the stand-in's twins (tests/llm_twins.h) have every flag.
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
#define LLM_ATTN_SCALE_INIT \
  0.0f  // not a constant initializer: llm_scales says 0, the stand-in knows the default
#else
#define LLM_ATTN_SCALE_INIT ATTN_SCALE
#endif
#ifndef FFN_GELU
#define FFN_GELU 0
#endif
#ifndef QKV_FUSED
#define QKV_FUSED 1
#endif
#ifndef QKV_BIAS
#define QKV_BIAS 0
#endif
#ifndef QK_NORM
#define QK_NORM 0
#endif
#ifndef WINDOW
#define WINDOW 0
#endif
#ifndef MATMUL_SET
#define MATMUL_SET 0
#endif
#define LOW __int_as_float(0xff800000)  // below every value: -infinity
#define FULL 0xffffffffu

// Names the shape in the module: the stand-in driver's twins read it there (a GPU never runs it).
#ifdef W_LAYOUT
#define LLM_WL W_LAYOUT
#else
#define LLM_WL 0
#endif
#ifdef WQ_LAYOUT
#define LLM_WQ WQ_LAYOUT
#define LLM_WK WK_LAYOUT
#define LLM_WV WV_LAYOUT
#else
#define LLM_WQ 0
#define LLM_WK 0
#define LLM_WV 0
#endif
#ifdef WG_LAYOUT
#define LLM_WG WG_LAYOUT
#define LLM_WU WU_LAYOUT
#else
#define LLM_WG 0
#define LLM_WU 0
#endif
#ifdef K_IN
#define LLM_KIN K_IN
#else
#define LLM_KIN 0
#endif
// Then the architecture's integers (LLMT_QD .. LLMT_MATMUL_SET); its two float scales cannot be
// pasted into a name, so llm_scales holds them after a tag the stand-in finds in a cubin's
// initial data (or in the PTX's list of the global's initial bytes).
// One pasted name, split where the preprocessor joins the lines again.
// clang-format off
#define LLM_SHAPE_NAME2(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x, y, \
                        z, aa, ab)                                                                 \
  llm_shape_##a##_##b##_##c##_##d##_##e##_##f##_##g##_##h##_##i##_##j##_##k##_##l##_##m##_##n\
##_##o##_##p##_##q##_##r##_##s##_##t##_##u##_##v##_##w##_##x##_##y##_##z##_##aa##_##ab
// clang-format on
#define LLM_SHAPE_NAME(...) LLM_SHAPE_NAME2(__VA_ARGS__)
extern "C" __global__ void LLM_SHAPE_NAME(DIM, FFN, NH, NKV, HD, RD, VOCAB, CTX, NORM_EPS_BITS,
                                          LLM_WL, LLM_WQ, LLM_WK, LLM_WV, LLM_WG, LLM_WU, LLM_KIN,
                                          ID_BITS, ROWS, CLS_ROWS, SEL, QD, ROPE_NEOX, FFN_GELU,
                                          QKV_FUSED, QKV_BIAS, QK_NORM, WINDOW, MATMUL_SET)() {}
struct llm_scales_t {
  char tag[12];
  float emb, attn;
};
extern "C" __device__ llm_scales_t llm_scales = {"LLM_SCALES:", EMB_SCALE, LLM_ATTN_SCALE_INIT};

// An activation block (llm_act_block_t): d = max|x| / 127, s d, s = sum q, s16 = the sum of the
// first 16 q (the K layouts' mins), q (int8, 4 a word).
struct act {
  float d, sd;
  int s, s16;
  int q[8];
};

__device__ __forceinline__ unsigned lane() { return threadIdx.x & 31u; }
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
  return v;
}
__device__ __forceinline__ int warp_sum_i(int v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
  return v;
}
__device__ __forceinline__ int warp_min_i(int v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(FULL, v, o));
  return v;
}
__device__ __forceinline__ float half_at(const unsigned short *h, size_t i) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h[i]));
  return f;
}

// Element j of row `row` of a matrix of `rows` rows and k columns in the GPU layout: for the
// embedding and the float layouts' products.
__device__ float weight_at(const unsigned char *w, int lay, size_t rows, size_t k, size_t row,
                           size_t j) {
  if (lay == L_F32) return ((const float *)w)[row * k + j];
  if (lay == L_F16) return half_at((const unsigned short *)w, row * k + j);
  size_t nb = k / 32, b = row * nb + j / 32, e = j % 32;
  if (lay >= L_K4) {  // d sc_h q - dmin m_h, as kernels.c's llm_embed
    unsigned char by = w[b * 16 + e % 16];
    int q = lay == L_K4 ? (e < 16 ? by & 15 : by >> 4) : (signed char)w[b * 32 + e];
    const signed char *scm = (const signed char *)(w + rows * nb * K_QB(lay)) + 4 * b;
    const float *sup = (const float *)(w + rows * nb * (K_QB(lay) + 4)) + 2 * (b / K_SB(lay));
    return sup[0] * (float)scm[e / 16] * (float)q - sup[1] * (float)scm[2 + e / 16];
  }
  if (lay == L_Q4) {
    unsigned char by = w[b * 16 + e % 16];
    const float *dm = (const float *)(w + rows * nb * 16) + 2 * b;
    return dm[0] * (float)(e < 16 ? by & 15 : by >> 4) + dm[1];
  }
  return ((const float *)(w + rows * nb * 32))[b] * (float)(signed char)w[b * 32 + e];
}

// Quantizes v (a block of 32 floats, zeros past the row's end) into o, as kernels.c's quantize().
__device__ void store_block(act *o, const float *v) {
  float amax = 0.0f;
  for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
  float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
  int s = 0, s16 = 0;
  for (int j = 0; j < 8; j++) {
    unsigned word = 0;
    for (int i = 0; i < 4; i++) {
      int q = (int)rintf(v[4 * j + i] * id);
      s += q;
      word |= (unsigned)(q & 0xff) << (8 * i);
    }
    o->q[j] = (int)word;
    if (j == 3) s16 = s;
  }
  o->d = d, o->sd = (float)s * d, o->s = s, o->s16 = s16;
}

// ---- the products ----
#if defined(KERNEL_llm_qkv) || defined(KERNEL_llm_gate_up) || defined(KERNEL_llm_classify)
#define N_IN DIM
#elif defined(KERNEL_llm_matmul_add)
#define N_IN K_IN
#endif
#ifdef N_IN
#define NB (NBLK(N_IN))
#define NBL ((NB + 31) / 32)
// The lane's blocks of one token's input: ints for the block layouts, the floats' address for the
// others.
struct input {
  int q[NBL][8];
  float d[NBL], sd[NBL];
  int s[NBL], s16[NBL];
  const float *f;
};

__device__ void load_input(input &in, const float *xf, const act *xq, unsigned t) {
  in.f = xf + (size_t)t * N_IN;
  for (int k = 0; k < NBL; k++) {
    unsigned b = lane() + 32u * k;
    const act *a = xq + (size_t)t * NB + (b < NB ? b : NB - 1);
    in.d[k] = a->d, in.sd[k] = a->sd, in.s[k] = a->s, in.s16[k] = a->s16;
    for (int i = 0; i < 8; i++) in.q[k][i] = a->q[i];
  }
}

// Block blk of a K layout times the lane's k-th input block: integer sums per half block (sA, sB),
// sc_0 sA + sc_1 sB and m_0 s16 + m_1 (s - s16) in integers as kernels.c's k tiles, then
// d d_x isum - dmin d_x msum.
__device__ float k_block(const input &in, int k, const unsigned char *w, int lay, size_t rows,
                         size_t blk) {
  const size_t nb = N_IN / 32;
  const signed char *scm = (const signed char *)(w + rows * nb * K_QB(lay)) + 4 * blk;
  // 4-byte loads: with Q5_1's superblocks of one block the floats may start off an 8-byte boundary
  const float *dm = (const float *)(w + rows * nb * (K_QB(lay) + 4)) + 2 * (blk / K_SB(lay));
  int sA = 0, sB = 0;
  if (lay ==
      L_K4) {  // element i < 16 the low nibble of byte i (half A), i + 16 its high one (half B)
    uint4 wv = ((const uint4 *)w)[blk];
    unsigned ww[4] = {wv.x, wv.y, wv.z, wv.w};
    for (int i = 0; i < 4; i++) {
      sA = __dp4a((int)(ww[i] & 0x0f0f0f0fu), in.q[k][i], sA);
      sB = __dp4a((int)((ww[i] >> 4) & 0x0f0f0f0fu), in.q[k][4 + i], sB);
    }
  } else {
    uint4 w0 = ((const uint4 *)w)[2 * blk], w1 = ((const uint4 *)w)[2 * blk + 1];
    unsigned ww[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
    for (int i = 0; i < 4; i++)
      sA = __dp4a((int)ww[i], in.q[k][i], sA), sB = __dp4a((int)ww[4 + i], in.q[k][4 + i], sB);
  }
  int isum = scm[0] * sA + scm[1] * sB, msum = scm[2] * in.s16[k] + scm[3] * (in.s[k] - in.s16[k]);
  return (dm[0] * in.d[k]) * (float)isum - (dm[1] * in.d[k]) * (float)msum;
}

// The lane's part of row `row` (of `rows`) of w . the input: its blocks' products in order.
__device__ float row_part(const input &in, const unsigned char *w, int lay, size_t rows,
                          size_t row) {
  const size_t nb = N_IN / 32;
  float s = 0.0f;
  for (int k = 0; k < NBL; k++) {
    unsigned b = lane() + 32u * k;
    if (b >= NB) continue;
    float c = 0.0f;
    if (lay == L_Q4) {
      size_t blk = row * nb + b;
      uint4 wv = ((const uint4 *)w)[blk];
      float2 dm = ((const float2 *)(w + rows * nb * 16))[blk];
      unsigned ww[4] = {wv.x, wv.y, wv.z, wv.w};
      int acc = 0;
      for (int i = 0; i < 4; i++) {
        acc = __dp4a((int)(ww[i] & 0x0f0f0f0fu), in.q[k][i],
                     acc);  // elements 4i .. 4i + 3: low nibbles
        acc = __dp4a((int)((ww[i] >> 4) & 0x0f0f0f0fu), in.q[k][4 + i],
                     acc);  // 16 + 4i ..: high nibbles
      }
      c = (dm.x * in.d[k]) * (float)acc + dm.y * in.sd[k];
    } else if (lay == L_Q8) {
      size_t blk = row * nb + b;
      uint4 w0 = ((const uint4 *)w)[2 * blk], w1 = ((const uint4 *)w)[2 * blk + 1];
      unsigned ww[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
      float d = ((const float *)(w + rows * nb * 32))[blk];
      int acc = 0;
      for (int i = 0; i < 8; i++) acc = __dp4a((int)ww[i], in.q[k][i], acc);
      c = (d * in.d[k]) * (float)acc;
    } else if (lay >= L_K4) {
      c = k_block(in, k, w, lay, rows, row * nb + b);
    } else {
      for (unsigned j = 0; j < 32; j++) {
        unsigned e = 32u * b + j;
        if (e < N_IN) c += weight_at(w, lay, rows, N_IN, row, e) * in.f[e];
      }
    }
    s += c;
  }
  return s;
}

// Rows rb .. rb + 31 of w: lane l gets row rb + l's product. Rows past the end repeat the last one,
// which no lane stores.
__device__ float rows32(const input &in, const unsigned char *w, int lay, unsigned rows,
                        unsigned rb) {
  float mine = 0.0f;
  for (unsigned r = 0; r < 32; r++) {
    float s = warp_sum(row_part(in, w, lay, rows, rb + r < rows ? rb + r : rows - 1));
    if (lane() == r) mine = s;
  }
  return mine;
}
#endif

#ifdef KERNEL_llm_embed
// Block per token; lane l copies elements l, l + 32, ...
extern "C" __global__ void llm_embed(float *x, int *info, const int *tokens,
                                     const unsigned char *emb, int p0, int n) {
  unsigned i = blockIdx.x;
  if (i == 0 && lane() == 0) info[0] = p0, info[1] = n;
  int tok = tokens[p0 + i];
  if (tok < 0 || tok >= VOCAB) tok = 0;
  for (unsigned j = lane(); j < DIM; j += 32)
    x[(size_t)i * DIM + j] = weight_at(emb, W_LAYOUT, VOCAB, DIM, tok, j) * EMB_SCALE;
}
#endif

#ifdef KERNEL_llm_begin
extern "C" __global__ void llm_begin(int *info, int p0, int n) {
  if (blockIdx.x == 0 && lane() == 0) info[0] = p0, info[1] = n;
}
#endif

#ifdef KERNEL_llm_norm
// Block per row; lane l takes blocks l, l + 32, ...
extern "C" __global__ void llm_norm(float *xf, act *xq, const float *x, const float *w,
                                    const int *info, int last) {
  unsigned i = blockIdx.x, row = last ? info[1] - 1 : i;
  const float *xr = x + (size_t)row * DIM;
  float ss = 0.0f;
  for (unsigned b = lane(); b < NBLK(DIM); b += 32)
    for (unsigned j = 0; j < 32 && 32 * b + j < DIM; j++) ss += xr[32 * b + j] * xr[32 * b + j];
  float inv = 1.0f / sqrtf(warp_sum(ss) / (float)DIM + NORM_EPS);
  for (unsigned b = lane(); b < NBLK(DIM); b += 32) {
    float v[32];
    for (unsigned j = 0; j < 32; j++) {
      unsigned e = 32 * b + j;
      v[j] = e < DIM ? (xr[e] * inv) * w[e] : 0.0f;
      if (e < DIM) xf[(size_t)i * DIM + e] = v[j];
    }
    store_block(xq + (size_t)i * NBLK(DIM) + b, v);
  }
}
#endif

#ifdef KERNEL_llm_quantize
// Rows of QD (the attention output).
extern "C" __global__ void llm_quantize(act *out, const float *in) {
  unsigned i = blockIdx.x;
  for (unsigned b = lane(); b < NBLK(QD); b += 32) {
    float v[32];
    for (unsigned j = 0; j < 32; j++)
      v[j] = 32 * b + j < QD ? in[(size_t)i * QD + 32 * b + j] : 0.0f;
    store_block(out + (size_t)i * NBLK(QD) + b, v);
  }
}
#endif

#ifdef KERNEL_llm_qkv
// Grid (GQ + 2 GKV blocks of 32 rows, n tokens): q (QD rows), then k, then v (each block starts at
// an even row, so rotary pairs stay in one), plus their biases (QKV_BIAS). QKV_FUSED: q and k
// rotated at the token's position, k into the cache; else q raw and k raw into kraw [token][KV_DIM]
// (llm_rope_heads rotates them). Caches as [position][kv head][element].
#define GQ ((QD + 31) / 32)
#define GKV ((KV_DIM + 31) / 32)
extern "C" __global__ void llm_qkv(float *q, float *kc, float *vc, const float *xf, const act *xq,
                                   const unsigned char *wq, const unsigned char *wk,
                                   const unsigned char *wv, const float *rope, const int *info
#if !QKV_FUSED || QKV_BIAS
                                   ,
                                   float *kraw
#endif
#if QKV_BIAS
                                   ,
                                   const float *bq, const float *bk, const float *bv
#endif
) {
  unsigned g = blockIdx.x, t = blockIdx.y, l = lane();
  unsigned pos = (unsigned)info[0] + t;
  unsigned which = g < GQ ? 0 : g < GQ + GKV ? 1 : 2;
  unsigned lg = which == 0   ? g
                : which == 1 ? g - GQ
                             : g - GQ - GKV,
           rows = which == 0 ? QD : KV_DIM;
  input in;
  load_input(in, xf, xq, t);
  float mine = which == 0   ? rows32(in, wq, WQ_LAYOUT, rows, 32 * lg)
               : which == 1 ? rows32(in, wk, WK_LAYOUT, rows, 32 * lg)
                            : rows32(in, wv, WV_LAYOUT, rows, 32 * lg);
  unsigned row = 32 * lg + l, e = row % HD, e0 = e & ~1u;
#if QKV_BIAS
  mine += (which == 0 ? bq : which == 1 ? bk : bv)[row < rows ? row : rows - 1];
#endif
  float pair = __shfl_xor_sync(FULL, mine, 1);
#if QKV_FUSED
  if (which < 2 && e < RD) {
    float c = rope[(size_t)pos * RD + e0], s = rope[(size_t)pos * RD + e0 + 1];
    // even row: a c - z s with z its odd partner; odd row: a s + z c with a its even partner
    mine = (e & 1) == 0 ? mine * c - pair * s : pair * s + mine * c;
  }
#else
  (void)pair, (void)e0;
#endif
  if (row < rows) {
    if (which == 0) q[(size_t)t * QD + row] = mine;
#if QKV_FUSED
    else
      (which == 1 ? kc : vc)[(size_t)pos * KV_DIM + row] = mine;
#else
    else if (which == 1)
      kraw[(size_t)t * KV_DIM + row] = mine;
    else
      vc[(size_t)pos * KV_DIM + row] = mine;
#endif
  }
}
#endif

#ifdef KERNEL_llm_rope_heads
// Grid (NH + NKV heads, n tokens): a head of q (in place) or of k (from kraw into the key cache at
// the token's position), RMS-normed over its HD values and scaled by its norm (QK_NORM), then
// rotated: pairs (2j, 2j + 1), or with ROPE_NEOX (j, j + RD / 2). Lane l takes pairs l, l + 32, ...
// and the unrotated elements RD + l, ...
extern "C" __global__ void llm_rope_heads(float *q, float *kc, const float *kraw, const float *rope,
                                          const int *info
#if QK_NORM
                                          ,
                                          const float *q_norm, const float *k_norm
#endif
) {
  unsigned h = blockIdx.x, i = blockIdx.y, l = lane(), pos = (unsigned)info[0] + i;
  bool is_q = h < NH;
  const float *x = is_q ? q + (size_t)i * QD + h * HD : kraw + (size_t)i * KV_DIM + (h - NH) * HD;
  float *o = is_q ? q + (size_t)i * QD + h * HD : kc + (size_t)pos * KV_DIM + (h - NH) * HD;
  const float *rot = rope + (size_t)pos * RD;
#if QK_NORM
  const float *w = is_q ? q_norm : k_norm;
  float ss = 0.0f;
  for (unsigned e = l; e < HD; e += 32) ss += x[e] * x[e];
  float inv = 1.0f / sqrtf(warp_sum(ss) / (float)HD + NORM_EPS);
#define NORMED(e) ((x[e] * inv) * w[e])
#else
#define NORMED(e) (x[e])
#endif
  float a[(RD / 2 + 31) / 32], z[(RD / 2 + 31) / 32], rest[(HD - RD + 31) / 32 + 1];
  // every lane reads its values before any writes (q is rotated in place)
  for (unsigned j = l, n = 0; j < RD / 2; j += 32, n++)
    a[n] = NORMED(ROPE_NEOX ? j : 2 * j), z[n] = NORMED(ROPE_NEOX ? j + RD / 2 : 2 * j + 1);
  for (unsigned e = RD + l, n = 0; e < HD; e += 32, n++) rest[n] = NORMED(e);
  __syncwarp();
  for (unsigned j = l, n = 0; j < RD / 2; j += 32, n++) {
    float c = rot[2 * j], s = rot[2 * j + 1];
    o[ROPE_NEOX ? j : 2 * j] = a[n] * c - z[n] * s;
    o[ROPE_NEOX ? j + RD / 2 : 2 * j + 1] = a[n] * s + z[n] * c;
  }
  for (unsigned e = RD + l, n = 0; e < HD; e += 32, n++) o[e] = rest[n];
#undef NORMED
}
#endif

#ifdef KERNEL_llm_attn
// Grid (NH heads, n tokens). Lane l takes positions l, l + 32, ... up to the token's, with its own
// running max, sum and weighted values; the lanes' parts are rescaled to the overall max and
// summed.
#define H4 (HD / 4)
extern "C" __global__ void llm_attn(float *out, const float *q, const float *kc, const float *vc,
                                    const int *info) {
  unsigned h = blockIdx.x, i = blockIdx.y, l = lane();
  int pos = info[0] + (int)i;
  unsigned kvh = h / KV_MUL;
  const float4 *qh = (const float4 *)(q + (size_t)i * QD + h * HD);
  float scale = ATTN_SCALE;
  int lo = WINDOW > 0 && pos >= WINDOW ? pos - WINDOW + 1 : 0;  // a sliding window's first position
  float4 qv[H4], acc[H4];
  for (int e = 0; e < H4; e++) qv[e] = qh[e], acc[e] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float m = LOW, total = 0.0f;
  for (int t = lo + (int)l; t <= pos; t += 32) {
    const float4 *k = (const float4 *)(kc + (size_t)t * KV_DIM + kvh * HD),
                 *v = (const float4 *)(vc + (size_t)t * KV_DIM + kvh * HD);
    float s = 0.0f;
    for (int e = 0; e < H4; e++) {
      float4 kk = k[e];
      s += qv[e].x * kk.x + qv[e].y * kk.y + qv[e].z * kk.z + qv[e].w * kk.w;
    }
    s *= scale;
    float nm = fmaxf(m, s), corr = m == LOW ? 0.0f : expf(m - nm), p = expf(s - nm);
    total = total * corr + p;
    for (int e = 0; e < H4; e++) {
      float4 vv = v[e];
      acc[e].x = acc[e].x * corr + p * vv.x, acc[e].y = acc[e].y * corr + p * vv.y;
      acc[e].z = acc[e].z * corr + p * vv.z, acc[e].w = acc[e].w * corr + p * vv.w;
    }
    m = nm;
  }
  float mx = warp_max(m), w = m == LOW ? 0.0f : expf(m - mx);
  float sum = warp_sum(total * w);
  float4 *o = (float4 *)(out + (size_t)i * QD + h * HD);
  for (int e = 0; e < H4; e++) {
    float4 r = make_float4(warp_sum(acc[e].x * w) / sum, warp_sum(acc[e].y * w) / sum,
                           warp_sum(acc[e].z * w) / sum, warp_sum(acc[e].w * w) / sum);
    if (e % 32 == (int)l) o[e] = r;
  }
}
#endif

#ifdef KERNEL_llm_matmul_add
// Grid (blocks of 32 rows of DIM, n): x[t] += w . in[t].
extern "C" __global__ void llm_matmul_add(float *x, const float *inf, const act *inq,
                                          const unsigned char *w, const int *info, int k) {
  unsigned g = blockIdx.x, t = blockIdx.y, l = lane();
  input in;
  load_input(in, inf, inq, t);
  float mine = rows32(in, w, W_LAYOUT, DIM, 32 * g);
  if (32 * g + l < DIM) {
    float *dst = &x[(size_t)t * DIM + 32 * g + l];
    *dst = MATMUL_SET ? mine : *dst + mine;  // MATMUL_SET: post-norms, llm_norm_add adds it normed
  }
}
#endif

#ifdef KERNEL_llm_norm_add
// Block per row: x[i] += RMS norm of out[i] scaled by the weights (post-norms).
extern "C" __global__ void llm_norm_add(float *x, const float *out, const float *w) {
  unsigned i = blockIdx.x, l = lane();
  const float *o = out + (size_t)i * DIM;
  float ss = 0.0f;
  for (unsigned e = l; e < DIM; e += 32) ss += o[e] * o[e];
  float inv = 1.0f / sqrtf(warp_sum(ss) / (float)DIM + NORM_EPS);
  for (unsigned e = l; e < DIM; e += 32) x[(size_t)i * DIM + e] += (o[e] * inv) * w[e];
}
#endif

#ifdef KERNEL_llm_gate_up
// silu(a), or with FFN_GELU GELU's tanh form with tanh(y) = 1 - 2 / (e^2y + 1), as kernels.c.
__device__ float gate_fn(float a) {
#if FFN_GELU
  float y = 0.7978845608f * (a + 0.044715f * a * a * a);
  return 0.5f * a * (1.0f + (1.0f - 2.0f / (expf(2.0f * y) + 1.0f)));
#else
  return a / (1.0f + expf(-a));
#endif
}
// Grid (blocks of 32 FFN rows, n): h = silu(gate . x) (up . x) for the block's rows (lane l: row
// l), into hf and, quantized, block g of hq (the rows past FFN zeros).
extern "C" __global__ void llm_gate_up(float *hf, act *hq, const float *xf, const act *xq,
                                       const unsigned char *wg, const unsigned char *wu,
                                       const int *info) {
  unsigned g = blockIdx.x, t = blockIdx.y, l = lane(), row = 32 * g + l;
  input in;
  load_input(in, xf, xq, t);
  float a = rows32(in, wg, WG_LAYOUT, FFN, 32 * g), u = rows32(in, wu, WU_LAYOUT, FFN, 32 * g);
  float h = row < FFN ? gate_fn(a) * u : 0.0f;
  if (row < FFN) hf[(size_t)t * FFN + row] = h;
  float amax = warp_max(fabsf(h)), d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
  int q = (int)rintf(h * id), s = warp_sum_i(q), s16 = warp_sum_i(l < 16 ? q : 0);
  act *o = hq + (size_t)t * NBLK(FFN) + g;
  ((signed char *)o->q)[l] = (signed char)q;
  if (l == 0) o->d = d, o->sd = (float)s * d, o->s = s, o->s16 = s16;
}
#endif

#ifdef KERNEL_llm_classify
// Grid: blocks of CLS_ROWS rows of row 0's logits. The block's best: best[2 g] the value's bits,
// best[2 g + 1] the lowest index holding it.
extern "C" __global__ void llm_classify(float *logits, int *best, const float *xf, const act *xq,
                                        const unsigned char *w, int first) {
  unsigned g = blockIdx.x + (unsigned)first, l = lane(), r0 = g * CLS_ROWS;
  input in;
  load_input(in, xf, xq, 0);
  float top = LOW;
  int arg = 0x7fffffff;
  for (unsigned rb = r0; rb < r0 + CLS_ROWS; rb += 32) {
    float mine = rows32(in, w, W_LAYOUT, VOCAB, rb);
    if (rb + l < VOCAB) {
      logits[rb + l] = mine;
      if (mine > top) top = mine, arg = (int)(rb + l);
    }
  }
  float mx = warp_max(top);
  int at = warp_min_i(top == mx ? arg : 0x7fffffff);
  if (at == 0x7fffffff)
    at = (int)r0;  // every logit -inf or NaN: the group's first row, as kernels.c
  if (l == 0) best[2 * g] = __float_as_int(mx), best[2 * g + 1] = at;
}
#endif

#ifdef KERNEL_llm_select
// One block of SEL threads: the token into tokens[p0 + n]. Greedy: the highest of the groups' bests
// (lowest index on ties). Sampling: kernels.glsl's llm_select (which explains it): keys ranking the
// candidates, each choice a search for a key bit by bit over exact integer sums across the
// vocabulary, probabilities exp((logit - max) / T) x 2^40 as integers; penalties rewrite the keys.
typedef unsigned long long u64;
__device__ u64 reduce(u64 *red, u64 v, bool is_max) {
  unsigned l = threadIdx.x;
  red[l] = v;
  __syncthreads();
  for (unsigned s = SEL / 2; s > 0; s >>= 1) {
    if (l < s) red[l] = is_max ? max(red[l], red[l + s]) : red[l] + red[l + s];
    __syncthreads();
  }
  u64 r = red[0];
  __syncthreads();
  return r;
}
__device__ unsigned ordered(unsigned bits) {
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}
__device__ float unordered(unsigned o) {
  return __uint_as_float((o & 0x80000000u) ? o & 0x7fffffffu : ~o);
}
#define ID_MASK ((1ull << ID_BITS) - 1ull)
#define KEY_BITS (32 + ID_BITS)

// The largest key K (a candidate's) such that sum over keys >= K of (count ? 1 : P) >= need
// (strictly more with `above`).
__device__ u64 search(u64 *red, const u64 *keys, const u64 *probs, bool count, u64 need,
                      bool above) {
  u64 k = 0;
  for (int bit = KEY_BITS - 1; bit >= 0; bit--) {
    u64 trial = k | (1ull << bit), part = 0;
    for (unsigned i = threadIdx.x; i < VOCAB; i += SEL)
      part += keys[i] >= trial ? (count ? 1ull : probs[i]) : 0ull;
    u64 total = reduce(red, part, false);
    if (above ? total > need : total >= need) k = trial;
  }
  return k;
}
// need x frac / 2^bits, frac < 2^32, need < 2^56, without overflow.
__device__ u64 scale_down(u64 need, u64 frac, int bits) {
  return ((need >> 32) * frac << (32 - bits)) + (((need & 0xffffffffull) * frac) >> bits);
}
__device__ u64 key_of(float logit, unsigned id) {
  return (u64)ordered(__float_as_uint(logit)) << ID_BITS | (ID_MASK - id);
}
__device__ float logit_of(u64 key) { return unordered((unsigned)(key >> ID_BITS)); }

// kernels.glsl's penalize(): the counts of the last n tokens in the probabilities' words, the
// thread whose exchange takes a token's count back to 0 rewrites its key.
__device__ void penalize(u64 *keys, unsigned *count, const int *tokens, int at, int n, float rep,
                         float freq, float pres) {
  int from = at - n;
  for (int j = from + (int)threadIdx.x; j < at; j += SEL)
    if ((unsigned)tokens[j] < VOCAB) count[tokens[j]] = 0u;
  __syncthreads();
  for (int j = from + (int)threadIdx.x; j < at; j += SEL)
    if ((unsigned)tokens[j] < VOCAB) atomicAdd(&count[tokens[j]], 1u);
  __syncthreads();
  for (int j = from + (int)threadIdx.x; j < at; j += SEL) {
    int t = tokens[j];
    if ((unsigned)t >= VOCAB) continue;
    unsigned c = atomicExch(&count[t], 0u);
    if (c == 0u) continue;
    float x = logit_of(keys[t]);
    x = x <= 0.0f ? x * rep : x / rep;
    keys[t] = key_of(x - ((float)c * freq + pres), (unsigned)t);
  }
  __syncthreads();
}

// The probabilities exp((logit - mx) / temperature) x 2^40 of the keys from cut up; their sum.
__device__ u64 weigh(u64 *red, const u64 *keys, u64 *probs, u64 cut, float mx, float temperature) {
  u64 part = 0;
  for (unsigned i = threadIdx.x; i < VOCAB; i += SEL) {
    u64 k = keys[i];
    u64 p = k >= cut ? (u64)(expf((logit_of(k) - mx) / temperature) * 1099511627776.0f + 0.5f) : 0;
    probs[i] = p;
    part += p;
  }
  __syncthreads();
  return reduce(red, part, false);
}

extern "C" __global__ void llm_select(int *tokens, u64 *scratch, const int *best,
                                      const float *logits, const unsigned *sp, const int *info,
                                      int groups) {
  __shared__ u64 red[SEL];
  unsigned l = threadIdx.x;
  float temperature = __uint_as_float(sp[0]), top_p = __uint_as_float(sp[1]),
        min_p = __uint_as_float(sp[5]);
  float rep = __uint_as_float(sp[6]), freq = __uint_as_float(sp[7]), pres = __uint_as_float(sp[8]);
  int top_k = (int)sp[2], last_n = (int)sp[9];
  bool penalties = last_n > 0 && (rep != 1.0f || freq != 0.0f || pres != 0.0f);
  u64 seed = (u64)sp[3] | (u64)sp[4] << 32;
  int at = info[0] + info[1];
  if (!(temperature > 0.0f) && !penalties) {
    u64 mine = 0;
    for (int g = (int)l; g < groups; g += SEL)
      mine = max(mine, (u64)ordered((unsigned)best[2 * g]) << 32 |
                           (0xffffffffu - (unsigned)best[2 * g + 1]));
    u64 k = reduce(red, mine, true);
    if (l == 0) tokens[at] = (int)(0xffffffffu - (unsigned)k);
    return;
  }
  u64 *keys = scratch, *probs = scratch + VOCAB;
  for (unsigned i = l; i < VOCAB; i += SEL) keys[i] = key_of(logits[i], i);
  __syncthreads();
  if (penalties)
    penalize(keys, (unsigned *)probs, tokens, at, last_n < at ? last_n : at, rep, freq, pres);
  u64 top = 0;
  for (unsigned i = l; i < VOCAB; i += SEL) top = max(top, keys[i]);
  top = reduce(red, top, true);
  if (!(temperature > 0.0f)) {  // greedy over the penalised logits
    if (l == 0) tokens[at] = (int)(ID_MASK - (top & ID_MASK));
    return;
  }
  float mx = logit_of(top);
  // llama.cpp's order: top-k, top-p and min-p on the probabilities at temperature 1, then the
  // temperature
  u64 cut = top_k > 0 && top_k < VOCAB ? search(red, keys, probs, true, (u64)top_k, false) : 0;
  u64 kept = weigh(red, keys, probs, cut, mx, 1.0f);
  if (top_p < 1.0f)
    cut = search(red, keys, probs, false, scale_down(kept, (u64)(top_p * 16777216.0f), 24), false);
  if (min_p > 0.0f) {  // logit >= mx + log(min_p) (a zero as -0, the least key of the zeros)
    float floor_logit = mx + logf(min_p);
    u64 floor_key = (u64)ordered(floor_logit == 0.0f ? 0x80000000u : __float_as_uint(floor_logit))
                    << ID_BITS;
    cut = max(cut, min(floor_key, top));
  }
  kept = weigh(red, keys, probs, cut, mx, temperature);
  // splitmix64 of the seed and the position, as kernels.c's uniform(); its top 32 bits
  u64 z = seed + 0x9e3779b97f4a7c15ull * (u64)(at + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  u64 u = scale_down(kept, z >> 32, 32);
  u64 k = search(red, keys, probs, false, u, true);
  if (l == 0) tokens[at] = (int)(ID_MASK - (k & ID_MASK));
}
#endif
