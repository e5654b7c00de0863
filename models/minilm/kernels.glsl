// The MiniLM encoder's kernels in GLSL for Vulkan devices (the GLSL ABI of hcq/vulkan.h): the same
// entries, buffers and values (hcq_val(0) is n, the token count) as kernels.c, which documents what
// each computes, and as there the output and down projections (mlm_proj, mlm_down) are split from
// their residual and LayerNorm (mlm_res_ln). kt (the transposed keys) is the CPU's layout trick:
// these kernels read keys from qkv.
//
// The work split is for lavapipe (Mesa's llvmpipe: a work-group runs on one thread, its
// invocations 8 to a 256-bit vector), whose costs decide it (docs/minilm.md, "The GLSL kernels on
// lavapipe"): every work-group is 8 invocations, one vector, so no barrier needs coroutines; a
// load from a buffer address is a loop over the lanes and over the load's components, so data is
// read in 64-bit components (u64vec2 / u64vec4, two floats each) and each lane reads different
// data, which subgroup operations share (subgroupBroadcast, subgroupAdd, subgroupMax). The
// products give a group 4 rows x 64 columns (8 a lane), the row kernels (embedding, residual +
// LayerNorm, pooling) a group per row, held in registers, attention a group per (head, query).
//
// The encoder compiles this file once per entry after a block of #defines: the model's shape (as
// for kernels.c), ROWS, PCOLS and KERNEL_<entry>, which selects the entry's main(). Sums run in
// another order than on the CPU, so results match within rounding, not bit for bit; every group
// computes its outputs in a fixed order, so eager queries and replays give identical bits.
layout(buffer_reference, std430, buffer_reference_align = 4) buffer f32s { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer i32s { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer v4s { vec4 v[]; };

layout(buffer_reference, std430, buffer_reference_align = 32) buffer u64x4s { u64vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer u64x2s { u64vec2 v[]; };
vec4 f4(uint64_t a, uint64_t b) {
  return vec4(uintBitsToFloat(unpackUint2x32(a)), uintBitsToFloat(unpackUint2x32(b)));
}
vec4 ld4(u64x2s b, uint i) {
  u64vec2 u = b.v[i];
  return f4(u.x, u.y);
}
void st4(u64x2s b, uint i, vec4 v) {
  b.v[i] = u64vec2(packUint2x32(floatBitsToUint(v.xy)), packUint2x32(floatBitsToUint(v.zw)));
}

float neg_inf() { return uintBitsToFloat(0xff800000u); }

// BERT's exact GELU with erf from Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7),
// as kernels.c computes it.
float gelu(float x) {
  float z = x * 0.70710678, az = abs(z);
  float t = 1.0 / (1.0 + 0.3275911 * az);
  float poly = t * (0.254829592 +
                    t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  float e = 1.0 - poly * exp(-az * az);
  return 0.5 * x * (1.0 + (z < 0.0 ? -e : e));
}

#if defined(KERNEL_mlm_embed) || defined(KERNEL_mlm_res_ln) || defined(KERNEL_mlm_pool)
#extension GL_KHR_shader_subgroup_arithmetic : require
// A row of HIDDEN floats in one work-group of 8 invocations (one lavapipe vector, so no barriers):
// lane l holds the 12 four-float pieces 8 i + l of the row in v0..v11, read and written as
// 16-byte u64vec2 (lavapipe loads lane by lane and component by component: two 64-bit components
// cost half of four floats). Sums over the row: each lane's pieces in order, then subgroupAdd.
#if HIDDEN != 384
#error the row kernels hold a row of 384 floats in 8 invocations
#endif
#define PIECES(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
#define PIECE(i) (8u * uint(i) + gl_LocalInvocationID.x)
#define SUM4(v) ((v).x + (v).y + (v).z + (v).w)
#define P_SUM(i) s += SUM4(v##i);
#define P_SQ(i)           \
  {                       \
    vec4 d = v##i - mean; \
    q += SUM4(d * d);     \
  }
#define P_LN(i)                           \
  st4(xo, t *uint(HIDDEN / 4) + PIECE(i), \
      (v##i - mean) * inv * ld4(w, PIECE(i)) + ld4(b, PIECE(i)));
// LayerNorm of v0..v11 (weight w, bias b) into row t of xo.
#define LAYERNORM_STORE                                              \
  {                                                                  \
    float s = 0.0, q = 0.0;                                          \
    PIECES(P_SUM)                                                    \
    float mean = subgroupAdd(s) / float(HIDDEN);                     \
    PIECES(P_SQ)                                                     \
    float inv = 1.0 / sqrt(subgroupAdd(q) / float(HIDDEN) + LN_EPS); \
    PIECES(P_LN)                                                     \
  }
#endif

#ifdef KERNEL_mlm_embed
void main() {
  u64x2s xo = u64x2s(hcq_buf(0)), word = u64x2s(hcq_buf(2)), pos = u64x2s(hcq_buf(3)),
         type = u64x2s(hcq_buf(4));
  u64x2s w = u64x2s(hcq_buf(5)), b = u64x2s(hcq_buf(6));
  i32s ids = i32s(hcq_buf(1));
  uint t = gl_WorkGroupID.x;
  int id = ids.v[t];
  if (id < 0 || id >= VOCAB) id = 0;
#define P_EMB(i)                                                  \
  vec4 v##i = ld4(word, uint(id) * uint(HIDDEN / 4) + PIECE(i)) + \
              ld4(pos, t * uint(HIDDEN / 4) + PIECE(i)) + ld4(type, PIECE(i));
  PIECES(P_EMB)
  LAYERNORM_STORE
}
#endif

#if defined(KERNEL_mlm_qkv) || defined(KERNEL_mlm_ffn_up) || defined(KERNEL_mlm_proj) || \
    defined(KERNEL_mlm_down)
#extension GL_KHR_shader_subgroup_ballot : require
#ifdef KERNEL_mlm_down
#define K INTER
#else
#define K HIDDEN
#endif
#if ROWS != 4 || PCOLS != 64
#error the products' groups are 4 rows x 64 columns
#endif
// out = bias + in . wt for a group's block of 4 rows t0.. x 64 columns, wt in the encoder's
// column blocks ([N / 64][K][64]: the group's weights are one contiguous stretch). Lane l owns
// columns 8 l .. 8 l + 7 and reads them as one u64vec4 a k (lavapipe loads global memory lane by
// lane and component by component, so four 64-bit components halve the cost of eight floats);
// the rows' inputs are read 8 k at a time, one a lane, and handed round by subgroupBroadcast.
// Rows past n repeat row n - 1 and are not stored: a one-token query pays the multiply-adds of
// four rows, a small part of its weight loads.
#define MAC(kk)                                                           \
  {                                                                       \
    u64vec4 w = wt.v[wi];                                                 \
    wi += 8u;                                                             \
    vec4 wa = f4(w.x, w.y), wb = f4(w.z, w.w);                            \
    float y0 = subgroupBroadcast(x0, kk), y1 = subgroupBroadcast(x1, kk); \
    float y2 = subgroupBroadcast(x2, kk), y3 = subgroupBroadcast(x3, kk); \
    a0 += y0 * wa, b0 += y0 * wb, a1 += y1 * wa, b1 += y1 * wb;           \
    a2 += y2 * wa, b2 += y2 * wb, a3 += y3 * wa, b3 += y3 * wb;           \
  }
#define LINEAR(inp_buf, wt_buf, bias_buf)                                             \
  f32s inp = f32s(inp_buf);                                                           \
  u64x4s wt = u64x4s(wt_buf);                                                         \
  uint n = uint(hcq_val(0)), l = gl_LocalInvocationID.x, t0 = 4u * gl_WorkGroupID.y;  \
  uint c8 = gl_WorkGroupID.x * 8u + l;                                                \
  uint r0 = min(t0, n - 1u) * uint(K), r1 = min(t0 + 1u, n - 1u) * uint(K);           \
  uint r2 = min(t0 + 2u, n - 1u) * uint(K), r3 = min(t0 + 3u, n - 1u) * uint(K);      \
  vec4 a0 = ld4(u64x2s(bias_buf), 2u * c8), b0 = ld4(u64x2s(bias_buf), 2u * c8 + 1u); \
  vec4 a1 = a0, b1 = b0, a2 = a0, b2 = b0, a3 = a0, b3 = b0;                          \
  uint wi = gl_WorkGroupID.x * uint(K) * 8u + l;                                      \
  for (uint k = 0u; k < uint(K); k += 8u) {                                           \
    float x0 = inp.v[r0 + k + l], x1 = inp.v[r1 + k + l], x2 = inp.v[r2 + k + l],     \
          x3 = inp.v[r3 + k + l];                                                     \
    MAC(0u) MAC(1u) MAC(2u) MAC(3u) MAC(4u) MAC(5u) MAC(6u) MAC(7u)                   \
  }
#define STORE1(r, f)                                    \
  if (t0 + uint(r) < n) {                               \
    uint o = (t0 + uint(r)) * uint(NOUT / 4) + 2u * c8; \
    st4(outv, o, f(a##r)), st4(outv, o + 1u, f(b##r));  \
  }
#define STORE(out_buf, f)        \
  u64x2s outv = u64x2s(out_buf); \
  STORE1(0, f) STORE1(1, f) STORE1(2, f) STORE1(3, f)
vec4 ident(vec4 v) { return v; }
vec4 gelu4(vec4 s) { return vec4(gelu(s.x), gelu(s.y), gelu(s.z), gelu(s.w)); }
#endif

#if defined(KERNEL_mlm_proj) || defined(KERNEL_mlm_down)
#define NOUT HIDDEN
void main() {
  LINEAR(hcq_buf(1), hcq_buf(2), hcq_buf(3))
  STORE(hcq_buf(0), ident)
}
#endif

#ifdef KERNEL_mlm_qkv
#define NOUT (3 * HIDDEN)
void main() {
  LINEAR(hcq_buf(2), hcq_buf(3), hcq_buf(4))
  STORE(hcq_buf(0), ident)
}
#endif

#ifdef KERNEL_mlm_ffn_up
#define NOUT INTER
void main() {
  LINEAR(hcq_buf(1), hcq_buf(2), hcq_buf(3))
  STORE(hcq_buf(0), gelu4)
}
#endif

#ifdef KERNEL_mlm_res_ln
void main() {
  u64x2s xo = u64x2s(hcq_buf(0)), y = u64x2s(hcq_buf(1)), w = u64x2s(hcq_buf(2)),
         b = u64x2s(hcq_buf(3));
  uint t = gl_WorkGroupID.x;
#define P_RES(i) \
  vec4 v##i = ld4(xo, t * uint(HIDDEN / 4) + PIECE(i)) + ld4(y, t * uint(HIDDEN / 4) + PIECE(i));
  PIECES(P_RES)
  LAYERNORM_STORE
}
#endif

#ifdef KERNEL_mlm_attn
#extension GL_KHR_shader_subgroup_arithmetic : require
// One work-group of 8 invocations (one lavapipe vector, no barriers) per (head, query): lane l
// takes keys l, l + 8, ... with an online softmax (its own running max, sum and context), then the
// lanes' parts are rescaled to the common max and summed by subgroup operations.
vec4 lo4(u64vec4 u) { return f4(u.x, u.y); }
vec4 hi4(u64vec4 u) { return f4(u.z, u.w); }
#define HEAD4(M) M(0) M(1) M(2) M(3)
void main() {
  u64x4s qkv = u64x4s(hcq_buf(1));
  u64x2s ctx = u64x2s(hcq_buf(0));
  uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, l = gl_LocalInvocationID.x;
  uint n = uint(hcq_val(0)), stride = uint(3 * HIDDEN / 8), hq = h * uint(HEAD_DIM / 8);
  float scale = 1.0 / sqrt(float(HEAD_DIM));
#define Q_LOAD(i)                                   \
  u64vec4 uq##i = qkv.v[t * stride + hq + uint(i)]; \
  vec4 qa##i = lo4(uq##i) * scale, qb##i = hi4(uq##i) * scale;
  HEAD4(Q_LOAD)
#define ACC0(i) vec4 aa##i = vec4(0.0), ab##i = vec4(0.0);
  HEAD4(ACC0)
  float m = neg_inf(), sum = 0.0;
  for (uint s = l; s < n; s += 8u) {
    float d = 0.0;
#define K_DOT(i)                                                     \
  {                                                                  \
    u64vec4 u = qkv.v[s * stride + uint(HIDDEN / 8) + hq + uint(i)]; \
    d += dot(qa##i, lo4(u)) + dot(qb##i, hi4(u));                    \
  }
    HEAD4(K_DOT)
    float mn = max(m, d), c = exp(m - mn), p = exp(d - mn);
    m = mn, sum = sum * c + p;
#define V_ACC(i)                                                         \
  {                                                                      \
    u64vec4 u = qkv.v[s * stride + uint(2 * HIDDEN / 8) + hq + uint(i)]; \
    aa##i = aa##i * c + p * lo4(u);                                      \
    ab##i = ab##i * c + p * hi4(u);                                      \
  }
    HEAD4(V_ACC)
  }
  float mx = subgroupMax(m), f = exp(m - mx);
  float inv = 1.0 / subgroupAdd(sum * f);
  // Lane l stores dims 4 l .. 4 l + 3 of the head.
  vec4 mine = vec4(0.0);
#define V_SUM(i)                                                             \
  {                                                                          \
    vec4 a = subgroupAdd(aa##i * f) * inv, b = subgroupAdd(ab##i * f) * inv; \
    mine = l == 2u * uint(i) ? a : mine;                                     \
    mine = l == 2u * uint(i) + 1u ? b : mine;                                \
  }
  HEAD4(V_SUM)
  st4(ctx, t * uint(HIDDEN / 4) + h * uint(HEAD_DIM / 4) + l, mine);
}
#endif

#ifdef KERNEL_mlm_pool
// Mean over the n rows (each lane its pieces, rows in order), then L2 normalised.
void main() {
  u64x2s outv = u64x2s(hcq_buf(0)), x = u64x2s(hcq_buf(1));
  uint n = uint(hcq_val(0));
#define P_ZERO(i) vec4 v##i = vec4(0.0);
#define P_ADD(i) v##i += ld4(x, t * uint(HIDDEN / 4) + PIECE(i));
#define P_MEAN(i)   \
  v##i /= float(n); \
  s += dot(v##i, v##i);
#define P_OUT(i) st4(outv, PIECE(i), v##i *inv);
  PIECES(P_ZERO)
  for (uint t = 0u; t < n; t++) {
    PIECES(P_ADD)
  }
  float s = 0.0;
  PIECES(P_MEAN)
  float inv = 1.0 / max(sqrt(subgroupAdd(s)), 1e-12);
  PIECES(P_OUT)
}
#endif
