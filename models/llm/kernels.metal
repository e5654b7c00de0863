// The llama forward pass in MSL: kernels.cu's entries, work split and arithmetic (kernels.cu says
// it all), so that one set of host twins (tests/llm_twins.h) serves the CUDA and Metal stand-ins. A
// threadgroup is one SIMD group of 32 (the sampler: SEL threads); sums across it are butterflies of
// simd_shuffle_xor rather than simd_sum, whose order Metal does not specify, so every lane holds
// the same bits and the twins can follow them. Buffers are at [[buffer(i)]], the values (where an
// entry has any) at [[buffer(nbufs)]].
//
// The decoder compiles it once per entry after the #defines kernels.cu gets.
// tests/llm_twins.h has host twins of these kernels for the stand-in: change both.
#include <metal_stdlib>
using namespace metal;

static_assert(ROWS == 32 && CLS_ROWS % 32 == 0 && SEL % 32 == 0 && HD % 4 == 0,
              "the kernels are written for SIMD groups of 32 rows, classifier groups of multiples "
              "of 32 and head sizes of multiples of 4");

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
// What the architecture changes (kernels.c says each; gpu_abi.h): kernels.cu's defaults.
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
#define ATTN_SCALE (1.0f / sqrt(float(HD)))
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
// Below every value: Metal compiles with fast math by default, which may assume no infinities, so
// -FLT_MAX rather than -INFINITY.
#define LOW (-FLT_MAX)

struct act {
  float d, sd;
  int s, s16;  // the sum of the q, of the first 16 (the K layouts' mins)
  int q[8];
};

static float lane_sum(float v) {
  for (ushort o = 16; o > 0; o >>= 1) v += simd_shuffle_xor(v, o);
  return v;
}
static float lane_max(float v) {
  for (ushort o = 16; o > 0; o >>= 1) v = fmax(v, simd_shuffle_xor(v, o));
  return v;
}
static int lane_sum_i(int v) {
  for (ushort o = 16; o > 0; o >>= 1) v += simd_shuffle_xor(v, o);
  return v;
}
static int lane_min_i(int v) {
  for (ushort o = 16; o > 0; o >>= 1) v = min(v, simd_shuffle_xor(v, o));
  return v;
}
// The integer dot product of 4 signed bytes each (CUDA's __dp4a).
static int dot4(uint a, int b) {
  char4 x = as_type<char4>(a), y = as_type<char4>(b);
  return int(x.x) * int(y.x) + int(x.y) * int(y.y) + int(x.z) * int(y.z) + int(x.w) * int(y.w);
}

static float weight_at(device const uchar *w, int lay, ulong rows, ulong k, ulong row, ulong j) {
  if (lay == L_F32) return ((device const float *)w)[row * k + j];
  if (lay == L_F16) return float(((device const half *)w)[row * k + j]);
  ulong nb = k / 32, b = row * nb + j / 32, e = j % 32;
  if (lay >= L_K4) {  // d sc_h q - dmin m_h, as kernels.c's llm_embed
    uchar by = w[b * 16 + e % 16];
    int q = lay == L_K4 ? int(e < 16 ? by & 15 : by >> 4) : int(as_type<char>(w[b * 32 + e]));
    device const char *scm = (device const char *)(w + rows * nb * K_QB(lay)) + 4 * b;
    device const float *sup =
        (device const float *)(w + rows * nb * (K_QB(lay) + 4)) + 2 * (b / K_SB(lay));
    return sup[0] * float(scm[e / 16]) * float(q) - sup[1] * float(scm[2 + e / 16]);
  }
  if (lay == L_Q4) {
    uchar by = w[b * 16 + e % 16];
    device const float *dm = (device const float *)(w + rows * nb * 16) + 2 * b;
    return dm[0] * float(e < 16 ? by & 15 : by >> 4) + dm[1];
  }
  return ((device const float *)(w + rows * nb * 32))[b] * float(as_type<char>(w[b * 32 + e]));
}

static void store_block(device act *o, thread const float *v) {
  float amax = 0.0f;
  for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(v[j]));
  float d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
  int s = 0, s16 = 0;
  for (int j = 0; j < 8; j++) {
    uint word = 0;
    for (int i = 0; i < 4; i++) {
      int q = int(rint(v[4 * j + i] * id));
      s += q;
      word |= uint(q & 0xff) << (8 * i);
    }
    o->q[j] = int(word);
    if (j == 3) s16 = s;
  }
  o->d = d, o->sd = float(s) * d, o->s = s, o->s16 = s16;
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
struct input {
  int q[NBL][8];
  float d[NBL], sd[NBL];
  int s[NBL], s16[NBL];
  device const float *f;
};

static void load_input(thread input &in, device const float *xf, device const act *xq, uint t,
                       uint l) {
  in.f = xf + ulong(t) * N_IN;
  for (int k = 0; k < NBL; k++) {
    uint b = l + 32u * k;
    device const act *a = xq + ulong(t) * NB + (b < NB ? b : NB - 1);
    in.d[k] = a->d, in.sd[k] = a->sd, in.s[k] = a->s, in.s16[k] = a->s16;
    for (int i = 0; i < 8; i++) in.q[k][i] = a->q[i];
  }
}

// Block blk of a K layout times the lane's k-th input block (kernels.cu's k_block).
static float k_block(thread const input &in, int k, device const uchar *w, int lay, ulong rows,
                     ulong blk) {
  const ulong nb = N_IN / 32;
  device const char *scm = (device const char *)(w + rows * nb * K_QB(lay)) + 4 * blk;
  device const float *dm =
      (device const float *)(w + rows * nb * (K_QB(lay) + 4)) + 2 * (blk / K_SB(lay));
  int sA = 0, sB = 0;
  if (lay ==
      L_K4) {  // element i < 16 the low nibble of byte i (half A), i + 16 its high one (half B)
    uint4 wv = ((device const uint4 *)w)[blk];
    for (int i = 0; i < 4; i++) {
      sA += dot4(wv[i] & 0x0f0f0f0fu, in.q[k][i]);
      sB += dot4((wv[i] >> 4) & 0x0f0f0f0fu, in.q[k][4 + i]);
    }
  } else {
    uint4 w0 = ((device const uint4 *)w)[2 * blk], w1 = ((device const uint4 *)w)[2 * blk + 1];
    for (int i = 0; i < 4; i++) sA += dot4(w0[i], in.q[k][i]), sB += dot4(w1[i], in.q[k][4 + i]);
  }
  int isum = int(scm[0]) * sA + int(scm[1]) * sB,
      msum = int(scm[2]) * in.s16[k] + int(scm[3]) * (in.s[k] - in.s16[k]);
  return (dm[0] * in.d[k]) * float(isum) - (dm[1] * in.d[k]) * float(msum);
}

static float row_part(thread const input &in, device const uchar *w, int lay, ulong rows, ulong row,
                      uint l) {
  const ulong nb = N_IN / 32;
  float s = 0.0f;
  for (int k = 0; k < NBL; k++) {
    uint b = l + 32u * k;
    if (b >= NB) continue;
    float c = 0.0f;
    if (lay == L_Q4) {
      ulong blk = row * nb + b;
      uint4 wv = ((device const uint4 *)w)[blk];
      float2 dm = ((device const float2 *)(w + rows * nb * 16))[blk];
      int acc = 0;
      for (int i = 0; i < 4; i++) {
        acc += dot4(wv[i] & 0x0f0f0f0fu, in.q[k][i]);
        acc += dot4((wv[i] >> 4) & 0x0f0f0f0fu, in.q[k][4 + i]);
      }
      c = (dm.x * in.d[k]) * float(acc) + dm.y * in.sd[k];
    } else if (lay == L_Q8) {
      ulong blk = row * nb + b;
      uint4 w0 = ((device const uint4 *)w)[2 * blk], w1 = ((device const uint4 *)w)[2 * blk + 1];
      float d = ((device const float *)(w + rows * nb * 32))[blk];
      int acc = 0;
      for (int i = 0; i < 4; i++) acc += dot4(w0[i], in.q[k][i]);
      for (int i = 0; i < 4; i++) acc += dot4(w1[i], in.q[k][4 + i]);
      c = (d * in.d[k]) * float(acc);
    } else if (lay >= L_K4) {
      c = k_block(in, k, w, lay, rows, row * nb + b);
    } else {
      for (uint j = 0; j < 32; j++) {
        uint e = 32u * b + j;
        if (e < N_IN) c += weight_at(w, lay, rows, N_IN, row, e) * in.f[e];
      }
    }
    s += c;
  }
  return s;
}

static float rows32(thread const input &in, device const uchar *w, int lay, uint rows, uint rb,
                    uint l) {
  float mine = 0.0f;
  for (uint r = 0; r < 32; r++) {
    float s = lane_sum(row_part(in, w, lay, rows, rb + r < rows ? rb + r : rows - 1, l));
    if (l == r) mine = s;
  }
  return mine;
}
#endif

#ifdef KERNEL_llm_embed
kernel void llm_embed(device float *x [[buffer(0)]], device int *info [[buffer(1)]],
                      device const int *tokens [[buffer(2)]], device const uchar *emb [[buffer(3)]],
                      constant int *v [[buffer(4)]], uint3 tg [[threadgroup_position_in_grid]],
                      uint3 tid [[thread_position_in_threadgroup]]) {
  uint i = tg.x, l = tid.x;
  if (i == 0 && l == 0) info[0] = v[0], info[1] = v[1];
  int tok = tokens[v[0] + int(i)];
  if (tok < 0 || tok >= VOCAB) tok = 0;
  for (uint j = l; j < DIM; j += 32)
    x[ulong(i) * DIM + j] = weight_at(emb, W_LAYOUT, VOCAB, DIM, ulong(tok), j) * EMB_SCALE;
}
#endif

#ifdef KERNEL_llm_begin
kernel void llm_begin(device int *info [[buffer(0)]], constant int *v [[buffer(1)]],
                      uint3 tg [[threadgroup_position_in_grid]],
                      uint3 tid [[thread_position_in_threadgroup]]) {
  if (tg.x == 0 && tid.x == 0) info[0] = v[0], info[1] = v[1];
}
#endif

#ifdef KERNEL_llm_norm
kernel void llm_norm(device float *xf [[buffer(0)]], device act *xq [[buffer(1)]],
                     device const float *x [[buffer(2)]], device const float *w [[buffer(3)]],
                     device const int *info [[buffer(4)]], constant int *v [[buffer(5)]],
                     uint3 tg [[threadgroup_position_in_grid]],
                     uint3 tid [[thread_position_in_threadgroup]]) {
  uint i = tg.x, l = tid.x, row = v[0] ? uint(info[1] - 1) : i;
  device const float *xr = x + ulong(row) * DIM;
  float ss = 0.0f;
  for (uint b = l; b < NBLK(DIM); b += 32)
    for (uint j = 0; j < 32 && 32 * b + j < DIM; j++) ss += xr[32 * b + j] * xr[32 * b + j];
  float inv = 1.0f / sqrt(lane_sum(ss) / float(DIM) + NORM_EPS);
  for (uint b = l; b < NBLK(DIM); b += 32) {
    float vals[32];
    for (uint j = 0; j < 32; j++) {
      uint e = 32 * b + j;
      vals[j] = e < DIM ? (xr[e] * inv) * w[e] : 0.0f;
      if (e < DIM) xf[ulong(i) * DIM + e] = vals[j];
    }
    store_block(xq + ulong(i) * NBLK(DIM) + b, vals);
  }
}
#endif

#ifdef KERNEL_llm_quantize
// Rows of QD (the attention output).
kernel void llm_quantize(device act *out [[buffer(0)]], device const float *in [[buffer(1)]],
                         uint3 tg [[threadgroup_position_in_grid]],
                         uint3 tid [[thread_position_in_threadgroup]]) {
  uint i = tg.x;
  for (uint b = tid.x; b < NBLK(QD); b += 32) {
    float vals[32];
    for (uint j = 0; j < 32; j++) vals[j] = 32 * b + j < QD ? in[ulong(i) * QD + 32 * b + j] : 0.0f;
    store_block(out + ulong(i) * NBLK(QD) + b, vals);
  }
}
#endif

#ifdef KERNEL_llm_qkv
// kernels.cu's llm_qkv: q (QD rows), k, v in groups of 32 rows, biases (QKV_BIAS), rope fused or
// q and k raw (QKV_FUSED 0: k into kraw, llm_rope_heads rotates them).
#define GQ ((QD + 31) / 32)
#define GKV ((KV_DIM + 31) / 32)
kernel void llm_qkv(device float *q [[buffer(0)]], device float *kc [[buffer(1)]],
                    device float *vc [[buffer(2)]], device const float *xf [[buffer(3)]],
                    device const act *xq [[buffer(4)]], device const uchar *wq [[buffer(5)]],
                    device const uchar *wk [[buffer(6)]], device const uchar *wv [[buffer(7)]],
                    device const float *rope [[buffer(8)]], device const int *info [[buffer(9)]],
#if !QKV_FUSED || QKV_BIAS
                    device float *kraw [[buffer(10)]],
#endif
#if QKV_BIAS
                    device const float *bq [[buffer(11)]], device const float *bk [[buffer(12)]],
                    device const float *bv [[buffer(13)]],
#endif
                    uint3 tg [[threadgroup_position_in_grid]],
                    uint3 tid [[thread_position_in_threadgroup]]) {
  uint g = tg.x, t = tg.y, l = tid.x;
  uint pos = uint(info[0]) + t;
  uint which = g < GQ ? 0 : g < GQ + GKV ? 1 : 2;
  uint lg = which == 0 ? g : which == 1 ? g - GQ : g - GQ - GKV, rows = which == 0 ? QD : KV_DIM;
  input in;
  load_input(in, xf, xq, t, l);
  float mine = which == 0   ? rows32(in, wq, WQ_LAYOUT, rows, 32 * lg, l)
               : which == 1 ? rows32(in, wk, WK_LAYOUT, rows, 32 * lg, l)
                            : rows32(in, wv, WV_LAYOUT, rows, 32 * lg, l);
  uint row = 32 * lg + l, e = row % HD, e0 = e & ~1u;
#if QKV_BIAS
  mine += (which == 0 ? bq : which == 1 ? bk : bv)[row < rows ? row : rows - 1];
#endif
  float pair = simd_shuffle_xor(mine, ushort(1));
#if QKV_FUSED
  if (which < 2 && e < RD) {
    float c = rope[ulong(pos) * RD + e0], s = rope[ulong(pos) * RD + e0 + 1];
    // even row: a c - z s with z its odd partner; odd row: a s + z c with a its even partner
    mine = (e & 1) == 0 ? mine * c - pair * s : pair * s + mine * c;
  }
#else
  (void)pair, (void)e0;
#endif
  if (row < rows) {
    if (which == 0) q[ulong(t) * QD + row] = mine;
#if QKV_FUSED
    else if (which == 1)
      kc[ulong(pos) * KV_DIM + row] = mine;
#else
    else if (which == 1)
      kraw[ulong(t) * KV_DIM + row] = mine;
#endif
    else
      vc[ulong(pos) * KV_DIM + row] = mine;
  }
}
#endif

#ifdef KERNEL_llm_rope_heads
// kernels.cu's llm_rope_heads: grid (NH + NKV heads, n tokens); a head of q (in place) or of k
// (from kraw into the cache), RMS-normed (QK_NORM), rotated: pairs (2j, 2j + 1) or, ROPE_NEOX, (j,
// j + RD / 2).
kernel void llm_rope_heads(device float *q [[buffer(0)]], device float *kc [[buffer(1)]],
                           device const float *kraw [[buffer(2)]],
                           device const float *rope [[buffer(3)]],
                           device const int *info [[buffer(4)]],
#if QK_NORM
                           device const float *q_norm [[buffer(5)]],
                           device const float *k_norm [[buffer(6)]],
#endif
                           uint3 tg [[threadgroup_position_in_grid]],
                           uint3 tid [[thread_position_in_threadgroup]]) {
  uint h = tg.x, i = tg.y, l = tid.x, pos = uint(info[0]) + i;
  bool is_q = h < NH;
  device const float *x =
      is_q ? q + ulong(i) * QD + h * HD : kraw + ulong(i) * KV_DIM + (h - NH) * HD;
  device float *o = is_q ? q + ulong(i) * QD + h * HD : kc + ulong(pos) * KV_DIM + (h - NH) * HD;
  device const float *rot = rope + ulong(pos) * RD;
#if QK_NORM
  device const float *w = is_q ? q_norm : k_norm;
  float ss = 0.0f;
  for (uint e = l; e < HD; e += 32) ss += x[e] * x[e];
  float inv = 1.0f / sqrt(lane_sum(ss) / float(HD) + NORM_EPS);
#define NORMED(e) ((x[e] * inv) * w[e])
#else
#define NORMED(e) (x[e])
#endif
  float a[(RD / 2 + 31) / 32], z[(RD / 2 + 31) / 32], rest[(HD - RD + 31) / 32 + 1];
  // every lane reads its values before any writes (q is rotated in place)
  for (uint j = l, n = 0; j < RD / 2; j += 32, n++)
    a[n] = NORMED(ROPE_NEOX ? j : 2 * j), z[n] = NORMED(ROPE_NEOX ? j + RD / 2 : 2 * j + 1);
  for (uint e = RD + l, n = 0; e < HD; e += 32, n++) rest[n] = NORMED(e);
  simdgroup_barrier(mem_flags::mem_device);
  for (uint j = l, n = 0; j < RD / 2; j += 32, n++) {
    float c = rot[2 * j], s = rot[2 * j + 1];
    o[ROPE_NEOX ? j : 2 * j] = a[n] * c - z[n] * s;
    o[ROPE_NEOX ? j + RD / 2 : 2 * j + 1] = a[n] * s + z[n] * c;
  }
  for (uint e = RD + l, n = 0; e < HD; e += 32, n++) o[e] = rest[n];
#undef NORMED
}
#endif

#ifdef KERNEL_llm_attn
#define H4 (HD / 4)
kernel void llm_attn(device float *out [[buffer(0)]], device const float *q [[buffer(1)]],
                     device const float *kc [[buffer(2)]], device const float *vc [[buffer(3)]],
                     device const int *info [[buffer(4)]],
                     uint3 tg [[threadgroup_position_in_grid]],
                     uint3 tid [[thread_position_in_threadgroup]]) {
  uint h = tg.x, i = tg.y, l = tid.x;
  int pos = info[0] + int(i);
  uint kvh = h / KV_MUL;
  device const float4 *qh = (device const float4 *)(q + ulong(i) * QD + h * HD);
  float scale = ATTN_SCALE;
  int lo = WINDOW > 0 && pos >= WINDOW ? pos - WINDOW + 1 : 0;  // a sliding window's first position
  float4 qv[H4], acc[H4];
  for (int e = 0; e < H4; e++) qv[e] = qh[e], acc[e] = float4(0.0f);
  float m = LOW, total = 0.0f;
  for (int t = lo + int(l); t <= pos; t += 32) {
    device const float4 *k = (device const float4 *)(kc + ulong(t) * KV_DIM + kvh * HD);
    device const float4 *v = (device const float4 *)(vc + ulong(t) * KV_DIM + kvh * HD);
    float s = 0.0f;
    for (int e = 0; e < H4; e++) {
      float4 kk = k[e];
      s += qv[e].x * kk.x + qv[e].y * kk.y + qv[e].z * kk.z + qv[e].w * kk.w;
    }
    s *= scale;
    float nm = fmax(m, s), corr = m == LOW ? 0.0f : exp(m - nm), p = exp(s - nm);
    total = total * corr + p;
    for (int e = 0; e < H4; e++) acc[e] = acc[e] * corr + p * v[e];
    m = nm;
  }
  float mx = lane_max(m), w = m == LOW ? 0.0f : exp(m - mx);
  float sum = lane_sum(total * w);
  device float4 *o = (device float4 *)(out + ulong(i) * QD + h * HD);
  for (int e = 0; e < H4; e++) {
    float4 r = float4(lane_sum(acc[e].x * w) / sum, lane_sum(acc[e].y * w) / sum,
                      lane_sum(acc[e].z * w) / sum, lane_sum(acc[e].w * w) / sum);
    if (e % 32 == int(l)) o[e] = r;
  }
}
#endif

#ifdef KERNEL_llm_matmul_add
kernel void llm_matmul_add(device float *x [[buffer(0)]], device const float *inf [[buffer(1)]],
                           device const act *inq [[buffer(2)]], device const uchar *w [[buffer(3)]],
                           device const int *info [[buffer(4)]], constant int *v [[buffer(5)]],
                           uint3 tg [[threadgroup_position_in_grid]],
                           uint3 tid [[thread_position_in_threadgroup]]) {
  uint g = tg.x, t = tg.y, l = tid.x;
  input in;
  load_input(in, inf, inq, t, l);
  float mine = rows32(in, w, W_LAYOUT, DIM, 32 * g, l);
  if (32 * g + l < DIM) {
    device float *dst = &x[ulong(t) * DIM + 32 * g + l];
    *dst = MATMUL_SET ? mine : *dst + mine;  // MATMUL_SET: post-norms, llm_norm_add adds it normed
  }
}
#endif

#ifdef KERNEL_llm_norm_add
// Threadgroup per row: x[i] += RMS norm of out[i] scaled by the weights (post-norms).
kernel void llm_norm_add(device float *x [[buffer(0)]], device const float *out [[buffer(1)]],
                         device const float *w [[buffer(2)]],
                         uint3 tg [[threadgroup_position_in_grid]],
                         uint3 tid [[thread_position_in_threadgroup]]) {
  uint i = tg.x, l = tid.x;
  device const float *o = out + ulong(i) * DIM;
  float ss = 0.0f;
  for (uint e = l; e < DIM; e += 32) ss += o[e] * o[e];
  float inv = 1.0f / sqrt(lane_sum(ss) / float(DIM) + NORM_EPS);
  for (uint e = l; e < DIM; e += 32) x[ulong(i) * DIM + e] += (o[e] * inv) * w[e];
}
#endif

#ifdef KERNEL_llm_gate_up
// silu(a), or with FFN_GELU GELU's tanh form with tanh(y) = 1 - 2 / (e^2y + 1), as kernels.cu.
static float gate_fn(float a) {
#if FFN_GELU
  float y = 0.7978845608f * (a + 0.044715f * a * a * a);
  return 0.5f * a * (1.0f + (1.0f - 2.0f / (exp(2.0f * y) + 1.0f)));
#else
  return a / (1.0f + exp(-a));
#endif
}
kernel void llm_gate_up(device float *hf [[buffer(0)]], device act *hq [[buffer(1)]],
                        device const float *xf [[buffer(2)]], device const act *xq [[buffer(3)]],
                        device const uchar *wg [[buffer(4)]], device const uchar *wu [[buffer(5)]],
                        device const int *info [[buffer(6)]],
                        uint3 tg [[threadgroup_position_in_grid]],
                        uint3 tid [[thread_position_in_threadgroup]]) {
  uint g = tg.x, t = tg.y, l = tid.x, row = 32 * g + l;
  input in;
  load_input(in, xf, xq, t, l);
  float a = rows32(in, wg, WG_LAYOUT, FFN, 32 * g, l),
        u = rows32(in, wu, WU_LAYOUT, FFN, 32 * g, l);
  float h = row < FFN ? gate_fn(a) * u : 0.0f;
  if (row < FFN) hf[ulong(t) * FFN + row] = h;
  float amax = lane_max(fabs(h)), d = amax / 127.0f, id = d != 0.0f ? 127.0f / amax : 0.0f;
  int q = int(rint(h * id)), s = lane_sum_i(q), s16 = lane_sum_i(l < 16 ? q : 0);
  device act *o = hq + ulong(t) * NBLK(FFN) + g;
  ((device char *)o->q)[l] = char(q);
  if (l == 0) o->d = d, o->sd = float(s) * d, o->s = s, o->s16 = s16;
}
#endif

#ifdef KERNEL_llm_classify
kernel void llm_classify(device float *logits [[buffer(0)]], device int *best [[buffer(1)]],
                         device const float *xf [[buffer(2)]], device const act *xq [[buffer(3)]],
                         device const uchar *w [[buffer(4)]], constant int *v [[buffer(5)]],
                         uint3 tg [[threadgroup_position_in_grid]],
                         uint3 tid [[thread_position_in_threadgroup]]) {
  uint g = tg.x + uint(v[0]), l = tid.x, r0 = g * CLS_ROWS;
  input in;
  load_input(in, xf, xq, 0, l);
  float top = LOW;
  int arg = 0x7fffffff;
  for (uint rb = r0; rb < r0 + CLS_ROWS; rb += 32) {
    float mine = rows32(in, w, W_LAYOUT, VOCAB, rb, l);
    if (rb + l < VOCAB) {
      logits[rb + l] = mine;
      if (mine > top) top = mine, arg = int(rb + l);
    }
  }
  float mx = lane_max(top);
  int at = lane_min_i(top == mx ? arg : 0x7fffffff);
  if (at == 0x7fffffff)
    at = int(r0);  // every logit at LOW or NaN: the group's first row, as kernels.c
  if (l == 0) best[2 * g] = as_type<int>(mx), best[2 * g + 1] = at;
}
#endif

#ifdef KERNEL_llm_select
static ulong reduce(threadgroup ulong *red, ulong v, bool is_max, uint l) {
  red[l] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = SEL / 2; s > 0; s >>= 1) {
    if (l < s) red[l] = is_max ? max(red[l], red[l + s]) : red[l] + red[l + s];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  ulong r = red[0];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return r;
}
static uint ordered(uint bits) { return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u; }
static float unordered(uint o) { return as_type<float>((o & 0x80000000u) ? o & 0x7fffffffu : ~o); }
#define ID_MASK ((1ul << ID_BITS) - 1ul)
#define KEY_BITS (32 + ID_BITS)

static ulong search(threadgroup ulong *red, device const ulong *keys, device const ulong *probs,
                    bool count, ulong need, bool above, uint l) {
  ulong k = 0;
  for (int bit = KEY_BITS - 1; bit >= 0; bit--) {
    ulong trial = k | (1ul << bit), part = 0;
    for (uint i = l; i < VOCAB; i += SEL) part += keys[i] >= trial ? (count ? 1ul : probs[i]) : 0ul;
    ulong total = reduce(red, part, false, l);
    if (above ? total > need : total >= need) k = trial;
  }
  return k;
}
static ulong scale_down(ulong need, ulong frac, int bits) {
  return ((need >> 32) * frac << (32 - bits)) + (((need & 0xfffffffful) * frac) >> bits);
}
static ulong key_of(float logit, uint id) {
  return ulong(ordered(as_type<uint>(logit))) << ID_BITS | (ID_MASK - ulong(id));
}
static float logit_of(ulong key) { return unordered(uint(key >> ID_BITS)); }

// kernels.glsl's penalize(): the counts of the last n tokens in the probabilities' words, the
// thread whose exchange takes a token's count back to 0 rewrites its key.
static void penalize(device ulong *keys, device atomic_uint *count, device const int *tokens,
                     int at, int n, float rep, float freq, float pres, uint l) {
  int from = at - n;
  for (int j = from + int(l); j < at; j += SEL)
    if (uint(tokens[j]) < VOCAB) atomic_store_explicit(&count[tokens[j]], 0u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_device);
  for (int j = from + int(l); j < at; j += SEL)
    if (uint(tokens[j]) < VOCAB)
      atomic_fetch_add_explicit(&count[tokens[j]], 1u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_device);
  for (int j = from + int(l); j < at; j += SEL) {
    int t = tokens[j];
    if (uint(t) >= VOCAB) continue;
    uint c = atomic_exchange_explicit(&count[t], 0u, memory_order_relaxed);
    if (c == 0u) continue;
    float x = logit_of(keys[t]);
    x = x <= 0.0f ? x * rep : x / rep;
    keys[t] = key_of(x - (float(c) * freq + pres), uint(t));
  }
  threadgroup_barrier(mem_flags::mem_device);
}

// The probabilities exp((logit - mx) / temperature) x 2^40 of the keys from cut up; their sum.
static ulong weigh(threadgroup ulong *red, device const ulong *keys, device ulong *probs, ulong cut,
                   float mx, float temperature, uint l) {
  ulong part = 0;
  for (uint i = l; i < VOCAB; i += SEL) {
    ulong k = keys[i];
    ulong p = k >= cut ? ulong(exp((logit_of(k) - mx) / temperature) * 1099511627776.0f + 0.5f) : 0;
    probs[i] = p;
    part += p;
  }
  threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
  return reduce(red, part, false, l);
}

kernel void llm_select(device int *tokens [[buffer(0)]], device ulong *scratch [[buffer(1)]],
                       device const int *best [[buffer(2)]],
                       device const float *logits [[buffer(3)]],
                       device const uint *sp [[buffer(4)]], device const int *info [[buffer(5)]],
                       constant int *v [[buffer(6)]],
                       uint3 tid [[thread_position_in_threadgroup]]) {
  threadgroup ulong red[SEL];
  uint l = tid.x;
  float temperature = as_type<float>(sp[0]), top_p = as_type<float>(sp[1]),
        min_p = as_type<float>(sp[5]);
  float rep = as_type<float>(sp[6]), freq = as_type<float>(sp[7]), pres = as_type<float>(sp[8]);
  int top_k = int(sp[2]), last_n = int(sp[9]);
  bool penalties = last_n > 0 && (rep != 1.0f || freq != 0.0f || pres != 0.0f);
  ulong seed = ulong(sp[3]) | ulong(sp[4]) << 32;
  int at = info[0] + info[1];
  if (!(temperature > 0.0f) && !penalties) {
    ulong mine = 0;
    for (int g = int(l); g < v[0]; g += SEL)
      mine = max(mine, ulong(ordered(uint(best[2 * g]))) << 32 |
                           ulong(0xffffffffu - uint(best[2 * g + 1])));
    ulong k = reduce(red, mine, true, l);
    if (l == 0) tokens[at] = int(0xffffffffu - uint(k));
    return;
  }
  device ulong *keys = scratch, *probs = scratch + VOCAB;
  for (uint i = l; i < VOCAB; i += SEL) keys[i] = key_of(logits[i], i);
  threadgroup_barrier(mem_flags::mem_device);
  if (penalties)
    penalize(keys, (device atomic_uint *)probs, tokens, at, min(last_n, at), rep, freq, pres, l);
  ulong top = 0;
  for (uint i = l; i < VOCAB; i += SEL) top = max(top, keys[i]);
  top = reduce(red, top, true, l);
  if (!(temperature > 0.0f)) {  // greedy over the penalised logits
    if (l == 0) tokens[at] = int(ID_MASK - (top & ID_MASK));
    return;
  }
  float mx = logit_of(top);
  // llama.cpp's order: top-k, top-p and min-p on the probabilities at temperature 1, then the
  // temperature
  ulong cut =
      top_k > 0 && top_k < VOCAB ? search(red, keys, probs, true, ulong(top_k), false, l) : 0;
  ulong kept = weigh(red, keys, probs, cut, mx, 1.0f, l);
  if (top_p < 1.0f)
    cut =
        search(red, keys, probs, false, scale_down(kept, ulong(top_p * 16777216.0f), 24), false, l);
  if (min_p > 0.0f) {  // logit >= mx + log(min_p) (a zero as -0, the least key of the zeros)
    float floor_logit = mx + log(min_p);
    ulong floor_key = ulong(ordered(floor_logit == 0.0f ? 0x80000000u : as_type<uint>(floor_logit)))
                      << ID_BITS;
    cut = max(cut, min(floor_key, top));
  }
  kept = weigh(red, keys, probs, cut, mx, temperature, l);
  // splitmix64 of the seed and the position, as kernels.c's uniform(); its top 32 bits
  ulong z = seed + 0x9e3779b97f4a7c15ul * ulong(at + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ul;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebul;
  z ^= z >> 31;
  ulong u = scale_down(kept, z >> 32, 32);
  ulong k = search(red, keys, probs, false, u, true, l);
  if (l == 0) tokens[at] = int(ID_MASK - (k & ID_MASK));
}
#endif
