// The llama forward pass in GLSL for Vulkan devices: the entries, buffers and values of kernels.c
// (which says what each computes), over the GPU weight layout (gpu_abi.h says it all in one
// place). Only the work split differs from the CPU's.
//
// Written for lavapipe (Mesa's llvmpipe: a work-group runs on one thread, its invocations 8 to a
// 256-bit vector; docs/vulkan.md): every work-group but the sampler's is LANES = 8 invocations, so
// sums and maxima across it are subgroup operations and nothing needs shared memory or barriers.
// A matrix product gives a group ROWS rows (CLS_ROWS for the classifier) of one token, in rounds
// of 8: lane l takes the 32-element blocks l, l + 8, ... of the token's input (held in registers,
// as ints) and of each row, subgroupAdd finishes the row, lane l keeps row l of the round. A
// block's product is an integer sum scaled once, as on the CPU: d_w d_x sum(q_w q_x) (+ m_w s_x d_x
// for Q4). lavapipe ends an invocation's loops after 65,535 iterations in all (docs/vulkan.md):
// every loop here is bounded by the model's shape, attention's by the position / 8 (at most 512
// with a context of 4096), the sampler's by the vocabulary / SEL per step.
//
// The decoder compiles this file once per entry after the model's #defines (as kernels.c) and
// KERNEL_<entry>, LANES, ROWS, CLS_ROWS, SEL, ID_BITS and, for llm_matmul_add, K_IN. Float sums
// run in another order than on the CPU, so results match the CPU's within rounding, not bit for
// bit; every group computes in a fixed order, so eager steps and graph replays give the same bits.
#extension GL_KHR_shader_subgroup_arithmetic : require

#if LANES != 8 || ROWS % 8 != 0 || CLS_ROWS % 8 != 0 || HD % 4 != 0
#error the kernels are written for groups of 8 invocations, row blocks of multiples of 8 and\
  head sizes of multiples of 4
#endif

layout(buffer_reference, std430, buffer_reference_align = 4) buffer f32s { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer i32s { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer u32s { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer u64s { uint64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer v4s { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer u64x2s { u64vec2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 32) buffer u64x4s { u64vec4 v[]; };

#define L_F32 0
#define L_F16 1
#define L_Q4 2
#define L_Q8 3
#define L_K4 4    // the K layouts (quant.h): d sc_h q - dmin m_h; 4-bit q, superblocks of 8 blocks
#define L_K8 5    // int8 q
#define L_K8_1 6  // int8 q, superblocks of one block (Q5_1)
#define K_QB(lay) ((lay) == L_K4 ? 16u : 32u)  // bytes of a block's quants
#define K_SB(lay) ((lay) == L_K8_1 ? 1u : 8u)  // blocks per superblock
#define NBLK(k) (((k) + 31) / 32)
#define KV_DIM (NKV * HD)
// What the architecture changes (kernels.c says each; decoder_items.c defines them for the model):
// QD the width of q and of the attention output, ROPE_NEOX rotary pairs (j, j + RD / 2),
// EMB_SCALE, ATTN_SCALE, FFN_GELU; per entry QKV_FUSED (rope in llm_qkv), QKV_BIAS, QK_NORM,
// WINDOW (sliding-window attention), MATMUL_SET (x = w . in, for post-norms).
#ifndef QD
#define QD DIM
#endif
#ifndef ROPE_NEOX
#define ROPE_NEOX 0
#endif
#ifndef EMB_SCALE
#define EMB_SCALE 1.0
#endif
#ifndef ATTN_SCALE
#define ATTN_SCALE (1.0 / sqrt(float(HD)))
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
#define KV_MUL (NH / NKV)
#define ACT_WORDS 12u  // an activation block (llm_act_block_t): d, sd, s, s16, 8 words of int8

float neg_inf() { return uintBitsToFloat(0xff800000u); }
uint lane() { return gl_LocalInvocationID.x; }

// The pass's first position and token count (llm_embed, llm_begin write them).
int info_p0(uint64_t info) { return i32s(info).v[0]; }
int info_n(uint64_t info) { return i32s(info).v[1]; }
// BATCH (a batch decoder): kernels.c's layout: p0 the step's parity, its region from word
// 4 + p0 BATCH_REGION: {choosing rows, 3 pad}, BATCH_ROWS rows {position in the sequence, position
// in the caches, token (< 0: tokens[-1 - token]), pad}, then the choosing rows' list.
#ifndef BATCH
#define BATCH 0
#define BATCH_ROWS 1
#endif
#define BATCH_REGION (4 + 5 * BATCH_ROWS)
uint region_at(uint64_t info) { return 4u + uint(info_p0(info)) * uint(BATCH_REGION); }
int row_pos(uint64_t info, uint i) {
  return BATCH != 0 ? i32s(info).v[region_at(info) + 4u + 4u * i] : info_p0(info) + int(i);
}
int row_cache_pos(uint64_t info, uint i) {
  return BATCH != 0 ? i32s(info).v[region_at(info) + 5u + 4u * i] : info_p0(info) + int(i);
}
int batch_sample_row(uint64_t info, uint j) {
  return i32s(info).v[region_at(info) + 4u + 4u * uint(BATCH_ROWS) + j];
}

// Element j of row `row` of a matrix of `rows` rows and k columns in the GPU layout: for the
// embedding and the float layouts' products, where speed does not matter.
float weight_at(uint64_t w, int lay, uint rows, uint k, uint row, uint j) {
  if (lay == L_F32) return f32s(w).v[row * k + j];
  if (lay == L_F16) {
    uint e = row * k + j;
    vec2 h = unpackHalf2x16(u32s(w).v[e / 2u]);
    return (e & 1u) == 0u ? h.x : h.y;
  }
  uint nb = k / 32u, b = row * nb + j / 32u, e = j % 32u;
  if (lay >= L_K4) {  // d sc_h q - dmin m_h, as kernels.c's llm_embed
    int q;
    if (lay == L_K4) {
      uint byte = (u32s(w).v[b * 4u + (e % 16u) / 4u] >> (8u * (e % 4u))) & 0xffu;
      q = int(e < 16u ? byte & 15u : byte >> 4u);
    } else {
      q = bitfieldExtract(int(u32s(w).v[b * 8u + e / 4u]), int(8u * (e % 4u)), 8);
    }
    uint64_t sc_at = w + uint64_t(rows) * nb * K_QB(lay);
    int scm = int(u32s(sc_at).v[b]), h = int(e / 16u);
    f32s sup = f32s(sc_at + uint64_t(rows) * nb * 4u);
    uint at = 2u * (b / K_SB(lay));
    return sup.v[at] * float(bitfieldExtract(scm, 8 * h, 8)) * float(q) -
           sup.v[at + 1u] * float(bitfieldExtract(scm, 16 + 8 * h, 8));
  }
  if (lay == L_Q4) {
    uint byte = (u32s(w).v[b * 4u + (e % 16u) / 4u] >> (8u * (e % 4u))) & 0xffu;
    uint q = e < 16u ? byte & 15u : byte >> 4u;
    f32s s = f32s(w + uint64_t(rows) * nb * 16u);
    return s.v[2u * b] * float(q) + s.v[2u * b + 1u];
  }
  int q = bitfieldExtract(int(u32s(w).v[b * 8u + e / 4u]), int(8u * (e % 4u)), 8);
  return f32s(w + uint64_t(rows) * nb * 32u).v[b] * float(q);
}

// Quantizes v (a block of 32 floats, zeros past the row's end) into activation block b at xq:
// d = max |v| / 127, q = v / d rounded to nearest even, as kernels.c's quantize().
void store_block(uint64_t xq, uint b, float v[32]) {
  float amax = 0.0;
  for (int j = 0; j < 32; j++) amax = max(amax, abs(v[j]));
  float d = amax / 127.0, id = d != 0.0 ? 127.0 / amax : 0.0;
  int s = 0, s16 = 0;
  u32s o = u32s(xq);
  uint at = b * ACT_WORDS;
  for (int j = 0; j < 8; j++) {
    uint word = 0u;
    for (int i = 0; i < 4; i++) {
      int q = int(roundEven(v[4 * j + i] * id));
      s += q;
      word |= uint(q & 0xff) << (8 * i);
    }
    o.v[at + 4u + uint(j)] = word;
    if (j == 3) s16 = s;
  }
  o.v[at] = floatBitsToUint(d), o.v[at + 1u] = floatBitsToUint(float(s) * d),
  o.v[at + 2u] = uint(s), o.v[at + 3u] = uint(s16);
}

// ---- the products ----
// The lane's blocks of one token's input (N_IN elements): ints for the quantized layouts, read
// from memory for the float ones.
#if defined(KERNEL_llm_qkv) || defined(KERNEL_llm_gate_up) || defined(KERNEL_llm_classify)
#define N_IN DIM
#elif defined(KERNEL_llm_matmul_add)
#define N_IN K_IN
#endif
#ifdef N_IN
#define NB (NBLK(N_IN))
#define NBL ((NB + 7) / 8)
ivec4 aq[NBL][8];  // the block's 32 int8 inputs, 4 a vector
float ad[NBL], asd[NBL];
int asum[NBL], asum16[NBL];  // the block's sum of q, of its first 16 q (the K layouts' mins)
uint64_t in_f;               // the token's float inputs (float layouts)

void load_input(uint64_t xf, uint64_t xq, uint t) {
  in_f = xf + uint64_t(t) * uint(N_IN) * 4u;
  u32s q = u32s(xq);
  for (uint k = 0u; k < uint(NBL); k++) {
    uint b = min(lane() + 8u * k, uint(NB - 1)), at = (t * uint(NB) + b) * ACT_WORDS;
    ad[k] = uintBitsToFloat(q.v[at]), asd[k] = uintBitsToFloat(q.v[at + 1u]),
    asum[k] = int(q.v[at + 2u]), asum16[k] = int(q.v[at + 3u]);
    for (uint i = 0u; i < 8u; i++)
      aq[k][i] = ivec4(uvec4(q.v[at + 4u + i]) << uvec4(24, 16, 8, 0)) >> 24;
  }
}

int isum4(ivec4 p) { return p.x + p.y + p.z + p.w; }

// Block blk of a K layout times the lane's k-th input block: integer sums per half block (sA, sB),
// sc_0 sA + sc_1 sB and m_0 s16 + m_1 (s - s16) in integers as kernels.c's k tiles, then
// d d_x isum - dmin d_x msum.
float k_block(uint64_t w, int lay, uint rows, uint blk, uint k) {
  uint nb = uint(N_IN) / 32u;
  uint64_t sc_at = w + uint64_t(rows) * nb * K_QB(lay);
  ivec4 scm =
      ivec4(uvec4(u32s(sc_at).v[blk]) << uvec4(24, 16, 8, 0)) >> 24;  // sc_0, sc_1, m_0, m_1
  f32s sup = f32s(sc_at + uint64_t(rows) * nb * 4u);
  uint at = 2u * (blk / K_SB(lay));
  int sA = 0, sB = 0;
  if (lay ==
      L_K4) {  // element i < 16 the low nibble of byte i (half A), i + 16 its high one (half B)
    u64vec2 qq = u64x2s(w).v[blk];
    uvec4 wv = uvec4(unpackUint2x32(qq.x), unpackUint2x32(qq.y));
    for (uint i = 0u; i < 4u; i++) {
      uvec4 by = uvec4(wv[i]) >> uvec4(0, 8, 16, 24);
      sA += isum4(ivec4(by & 15u) * aq[k][i]);
      sB += isum4(ivec4((by >> 4u) & 15u) * aq[k][4u + i]);
    }
  } else {
    u64vec4 qq = u64x4s(w).v[blk];
    uvec2 p0 = unpackUint2x32(qq.x), p1 = unpackUint2x32(qq.y), p2 = unpackUint2x32(qq.z),
          p3 = unpackUint2x32(qq.w);
    uint wv[8] = uint[8](p0.x, p0.y, p1.x, p1.y, p2.x, p2.y, p3.x, p3.y);
    for (uint i = 0u; i < 4u; i++) {
      sA += isum4((ivec4(uvec4(wv[i]) << uvec4(24, 16, 8, 0)) >> 24) * aq[k][i]);
      sB += isum4((ivec4(uvec4(wv[4u + i]) << uvec4(24, 16, 8, 0)) >> 24) * aq[k][4u + i]);
    }
  }
  int isum = scm.x * sA + scm.y * sB, msum = scm.z * asum16[k] + scm.w * (asum[k] - asum16[k]);
  return (sup.v[at] * ad[k]) * float(isum) - (sup.v[at + 1u] * ad[k]) * float(msum);
}

// The lane's part of row `row` (of `rows`) of w . the input.
float row_part(uint64_t w, int lay, uint rows, uint row) {
  float s = 0.0;
  uint nb = uint(N_IN) / 32u;
  for (uint k = 0u; k < uint(NBL); k++) {
    uint b = lane() + 8u * k;
    bool ok = b < uint(NB);
    float c = 0.0;
    if (lay == L_Q4) {
      uint blk = row * nb + min(b, nb - 1u);
      u64vec2 qq = u64x2s(w).v[blk];
      uvec4 wv = uvec4(unpackUint2x32(qq.x), unpackUint2x32(qq.y));
      vec2 dm = uintBitsToFloat(unpackUint2x32(u64s(w + uint64_t(rows) * nb * 16u).v[blk]));
      int acc = 0;
      for (uint i = 0u; i < 4u; i++) {
        uvec4 by = uvec4(wv[i]) >> uvec4(0, 8, 16, 24);
        acc += isum4(ivec4(by & 15u) * aq[k][i]) + isum4(ivec4((by >> 4u) & 15u) * aq[k][4u + i]);
      }
      c = (dm.x * ad[k]) * float(acc) + dm.y * asd[k];
    } else if (lay == L_Q8) {
      uint blk = row * nb + min(b, nb - 1u);
      u64vec4 qq = u64x4s(w).v[blk];
      uvec2 p0 = unpackUint2x32(qq.x), p1 = unpackUint2x32(qq.y), p2 = unpackUint2x32(qq.z),
            p3 = unpackUint2x32(qq.w);
      uint wv[8] = uint[8](p0.x, p0.y, p1.x, p1.y, p2.x, p2.y, p3.x, p3.y);
      float d = f32s(w + uint64_t(rows) * nb * 32u).v[blk];
      int acc = 0;
      for (uint i = 0u; i < 8u; i++)
        acc += isum4((ivec4(uvec4(wv[i]) << uvec4(24, 16, 8, 0)) >> 24) * aq[k][i]);
      c = (d * ad[k]) * float(acc);
    } else if (lay >= L_K4) {
      c = k_block(w, lay, rows, row * nb + min(b, nb - 1u), k);
    } else {
      f32s x = f32s(in_f);
      for (uint j = 0u; j < 32u; j++) {
        uint e = 32u * b + j;
        c += e < uint(N_IN) ? weight_at(w, lay, rows, uint(N_IN), row, min(e, uint(N_IN - 1))) *
                                  x.v[min(e, uint(N_IN - 1))]
                            : 0.0;
      }
    }
    s += ok ? c : 0.0;
  }
  return s;
}

// Round rb of 8 rows of w: lane l gets row rb + l's dot product, and `pair` that of row rb + (l ^
// 1) (rotary pairs). Rows past the end repeat the last one, which no lane stores.
float round_of_8(uint64_t w, int lay, uint rows, uint rb, out float pair) {
  float mine = 0.0;
  pair = 0.0;
  for (uint r = 0u; r < 8u; r++) {
    float s = subgroupAdd(row_part(w, lay, rows, min(rb + r, rows - 1u)));
    mine = lane() == r ? s : mine;
    pair = (lane() ^ 1u) == r ? s : pair;
  }
  return mine;
}
#endif

#ifdef KERNEL_llm_embed
// bufs: x, info, tokens, embedding; vals: p0, n. Group per token; lane l copies elements l, l + 8,
// ...
void main() {
  uint i = gl_WorkGroupID.x;
  if (i == 0u && lane() == 0u)
    i32s(hcq_buf(1)).v[0] = hcq_val(0), i32s(hcq_buf(1)).v[1] = hcq_val(1);
  // BATCH: the parity from the value, not the info group 0 is writing; a token < 0 chosen on the
  // device
  int tok = BATCH != 0
                ? i32s(hcq_buf(1)).v[4u + uint(hcq_val(0)) * uint(BATCH_REGION) + 6u + 4u * i]
                : i32s(hcq_buf(2)).v[hcq_val(0) + int(i)];
  if (BATCH != 0 && tok < 0 && tok >= -2 * BATCH_ROWS) tok = i32s(hcq_buf(2)).v[-1 - tok];
  // the slot's history (the penalties'), by cache position
  if (BATCH != 0 && lane() == 0u)
    i32s(hcq_buf(4))
        .v[i32s(hcq_buf(1)).v[4u + uint(hcq_val(0)) * uint(BATCH_REGION) + 5u + 4u * i]] = tok;
  if (tok < 0 || tok >= VOCAB) tok = 0;
  f32s x = f32s(hcq_buf(0) + uint64_t(i) * uint(DIM) * 4u);
  for (uint j = lane(); j < uint(DIM); j += 8u)
    x.v[j] = weight_at(hcq_buf(3), W_LAYOUT, uint(VOCAB), uint(DIM), uint(tok), j) * EMB_SCALE;
}
#endif

#ifdef KERNEL_llm_begin
// bufs: info; vals: p0, n.
void main() {
  if (gl_WorkGroupID.x == 0u && lane() == 0u)
    i32s(hcq_buf(0)).v[0] = hcq_val(0), i32s(hcq_buf(0)).v[1] = hcq_val(1);
}
#endif

#ifdef KERNEL_llm_norm
// bufs: xf, xq, x, weights, info; vals: last. Group per row; lane l takes blocks l, l + 8, ...
void main() {
  uint i = gl_WorkGroupID.x;
  uint row = hcq_val(0) == 0 ? i
             : BATCH != 0    ? uint(batch_sample_row(hcq_buf(4), i))
                             : uint(info_n(hcq_buf(4)) - 1);
  f32s x = f32s(hcq_buf(2) + uint64_t(row) * uint(DIM) * 4u), w = f32s(hcq_buf(3));
  f32s xf = f32s(hcq_buf(0) + uint64_t(i) * uint(DIM) * 4u);
  float ss = 0.0;
  for (uint b = lane(); b < uint(NBLK(DIM)); b += 8u)
    for (uint j = 0u; j < 32u; j++) {
      uint e = min(32u * b + j, uint(DIM - 1));
      float v = x.v[e];
      ss += 32u * b + j < uint(DIM) ? v * v : 0.0;
    }
  float inv = 1.0 / sqrt(subgroupAdd(ss) / float(DIM) + NORM_EPS);
  for (uint b = lane(); b < uint(NBLK(DIM)); b += 8u) {
    float v[32];
    for (uint j = 0u; j < 32u; j++) {
      uint e = min(32u * b + j, uint(DIM - 1));
      v[j] = 32u * b + j < uint(DIM) ? (x.v[e] * inv) * w.v[e] : 0.0;
      if (32u * b + j < uint(DIM)) xf.v[e] = v[j];
    }
    store_block(hcq_buf(1), i * uint(NBLK(DIM)) + b, v);
  }
}
#endif

#ifdef KERNEL_llm_quantize
// bufs: out quantized, in. Group per row of QD (the attention output).
void main() {
  uint i = gl_WorkGroupID.x;
  f32s x = f32s(hcq_buf(1) + uint64_t(i) * uint(QD) * 4u);
  for (uint b = lane(); b < uint(NBLK(QD)); b += 8u) {
    float v[32];
    for (uint j = 0u; j < 32u; j++)
      v[j] = 32u * b + j < uint(QD) ? x.v[min(32u * b + j, uint(QD - 1))] : 0.0;
    store_block(hcq_buf(0), i * uint(NBLK(QD)) + b, v);
  }
}
#endif

#ifdef KERNEL_llm_qkv
// bufs: q, key cache, value cache, xf, xq, wq, wk, wv, rotary table, info, kraw, bq, bk, bv. Grid:
// (GQ + 2 GKV groups of ROWS rows, n tokens). Groups of q (QD rows), then k, then v (each starts a
// round: rotary pairs, even row first, stay in one), plus their biases (QKV_BIAS). QKV_FUSED: q and
// k rotated at the token's position, k into the cache; else q raw and k raw into kraw
// [token][KV_DIM] (llm_rope_heads rotates them). Caches as [position][kv head][element].
#define GQ ((QD + ROWS - 1) / ROWS)
#define GKV ((KV_DIM + ROWS - 1) / ROWS)
void main() {
  uint g = gl_WorkGroupID.x, t = gl_WorkGroupID.y, l = lane();
  uint pos = uint(row_pos(hcq_buf(9), t)), at = uint(row_cache_pos(hcq_buf(9), t));
  uint which = g < uint(GQ) ? 0u : g < uint(GQ + GKV) ? 1u : 2u;
  uint lg = which == 0u ? g : which == 1u ? g - uint(GQ) : g - uint(GQ + GKV);
  uint rows = which == 0u ? uint(QD) : uint(KV_DIM);
  load_input(hcq_buf(3), hcq_buf(4), t);
  f32s rot = f32s(hcq_buf(8));
  for (uint j = 0u; j < uint(ROWS / 8); j++) {
    uint rb = lg * uint(ROWS) + 8u * j, row = rb + l;
    float mine, pair;
    if (which == 0u)
      mine = round_of_8(hcq_buf(5), WQ_LAYOUT, rows, rb, pair);
    else if (which == 1u)
      mine = round_of_8(hcq_buf(6), WK_LAYOUT, rows, rb, pair);
    else
      mine = round_of_8(hcq_buf(7), WV_LAYOUT, rows, rb, pair);
#if QKV_BIAS
    f32s bias = f32s(hcq_buf(11u + which));
    mine += bias.v[min(row, rows - 1u)], pair += bias.v[min(rb + (l ^ 1u), rows - 1u)];
#endif
    uint e = row % uint(HD), e0 = e & ~1u;
#if QKV_FUSED
    if (which < 2u && e < uint(RD)) {
      float c = rot.v[pos * uint(RD) + e0], s = rot.v[pos * uint(RD) + e0 + 1u];
      // even row: a c - z s with z its odd partner; odd row: a s + z c with a its even partner
      mine = (e & 1u) == 0u ? mine * c - pair * s : pair * s + mine * c;
    }
#endif
    if (row < rows) {
      if (which == 0u) f32s(hcq_buf(0)).v[t * uint(QD) + row] = mine;
#if QKV_FUSED
      else if (which == 1u)
        f32s(hcq_buf(1)).v[at * uint(KV_DIM) + row] = mine;
#else
      else if (which == 1u)
        f32s(hcq_buf(10)).v[t * uint(KV_DIM) + row] = mine;
#endif
      else
        f32s(hcq_buf(2)).v[at * uint(KV_DIM) + row] = mine;
    }
  }
}
#endif

#ifdef KERNEL_llm_rope_heads
// bufs: q, key cache, kraw, rotary table, info, q norm, k norm. Grid: (NH + NKV heads, n tokens).
// A head of q (in place) or of k (from kraw into the key cache at the token's position): RMS-normed
// over its HD values and scaled by its norm (QK_NORM), then rotated, pairs (2j, 2j + 1) or with
// ROPE_NEOX (j, j + RD / 2). Lane l takes the pairs l, l + 8, ... and the unrotated elements
// RD + l, RD + l + 8, ...
void main() {
  uint h = gl_WorkGroupID.x, i = gl_WorkGroupID.y, l = lane();
  uint pos = uint(row_pos(hcq_buf(4), i)), at = uint(row_cache_pos(hcq_buf(4), i));
  bool is_q = h < uint(NH);
  uint64_t src = is_q ? hcq_buf(0) + (uint64_t(i) * uint(QD) + h * uint(HD)) * 4u
                      : hcq_buf(2) + (uint64_t(i) * uint(KV_DIM) + (h - uint(NH)) * uint(HD)) * 4u;
  uint64_t dst =
      is_q ? src : hcq_buf(1) + (uint64_t(at) * uint(KV_DIM) + (h - uint(NH)) * uint(HD)) * 4u;
  f32s x = f32s(src), o = f32s(dst), rot = f32s(hcq_buf(3) + uint64_t(pos) * uint(RD) * 4u);
  float inv = 1.0;
#if QK_NORM
  f32s w = f32s(is_q ? hcq_buf(5) : hcq_buf(6));
  float ss = 0.0;
  for (uint e = l; e < uint(HD); e += 8u) ss += x.v[e] * x.v[e];
  inv = 1.0 / sqrt(subgroupAdd(ss) / float(HD) + NORM_EPS);
#define NORMED(e) ((x.v[e] * inv) * w.v[e])
#else
#define NORMED(e) (x.v[e])
#endif
  for (uint j = l; j < uint(RD / 2); j += 8u) {
    uint e0 = ROPE_NEOX != 0 ? j : 2u * j, e1 = ROPE_NEOX != 0 ? j + uint(RD / 2) : 2u * j + 1u;
    float c = rot.v[2u * j], s = rot.v[2u * j + 1u], a = NORMED(e0), z = NORMED(e1);
    o.v[e0] = a * c - z * s;
    o.v[e1] = a * s + z * c;
  }
  for (uint e = uint(RD) + l; e < uint(HD); e += 8u) o.v[e] = NORMED(e);
}
#endif

#ifdef KERNEL_llm_attn
// bufs: out, q, key cache, value cache, info. Grid: (NH heads, n tokens). Lane l takes positions
// lo + l, lo + l + 8, ... up to the token's (lo: 0, or with WINDOW the first of the last WINDOW),
// with its own running max, sum and weighted values (online softmax); the lanes' parts are rescaled
// to the overall max and summed at the end.
#define H4 (HD / 4)
void main() {
  uint h = gl_WorkGroupID.x, i = gl_WorkGroupID.y, l = lane();
  int pos = row_pos(hcq_buf(4), i);
  uint64_t base =
      uint64_t(row_cache_pos(hcq_buf(4), i) - pos);  // a batch row's slot's first position
  uint kvh = h / uint(KV_MUL);
  int lo = WINDOW > 0 && pos >= WINDOW ? pos - WINDOW + 1 : 0;
  v4s q = v4s(hcq_buf(1) + (uint64_t(i) * uint(QD) + h * uint(HD)) * 4u);
  float scale = ATTN_SCALE;
  vec4 qv[H4], acc[H4];
  for (uint e = 0u; e < uint(H4); e++) qv[e] = q.v[e], acc[e] = vec4(0.0);
  float m = neg_inf(), total = 0.0;
  for (int t = lo + int(l); t <= pos; t += 8) {
    uint64_t at = ((base + uint64_t(t)) * uint(KV_DIM) + kvh * uint(HD)) * 4u;
    v4s k = v4s(hcq_buf(2) + at), v = v4s(hcq_buf(3) + at);
    float s = 0.0;
    for (uint e = 0u; e < uint(H4); e++) s += dot(qv[e], k.v[e]);
    s *= scale;
    float nm = max(m, s), corr = m == neg_inf() ? 0.0 : exp(m - nm), p = exp(s - nm);
    total = total * corr + p;
    for (uint e = 0u; e < uint(H4); e++) acc[e] = acc[e] * corr + p * v.v[e];
    m = nm;
  }
  float mx = subgroupMax(m), w = m == neg_inf() ? 0.0 : exp(m - mx);
  float sum = subgroupAdd(total * w);
  v4s o = v4s(hcq_buf(0) + (uint64_t(i) * uint(QD) + h * uint(HD)) * 4u);
  for (uint e = 0u; e < uint(H4); e++) {
    vec4 r = subgroupAdd(acc[e] * w) / sum;
    if (e % 8u == l) o.v[e] = r;
  }
}
#endif

#ifdef KERNEL_llm_matmul_add
// bufs: x, in floats, in blocks, w, info; vals: k (K_IN). Grid: (groups of ROWS rows of DIM, n).
// x[t] += w . in[t]; MATMUL_SET: x[t] = w . in[t] (post-norms: llm_norm_add adds it normed).
void main() {
  uint g = gl_WorkGroupID.x, t = gl_WorkGroupID.y, l = lane();
  load_input(hcq_buf(1), hcq_buf(2), t);
  f32s x = f32s(hcq_buf(0) + uint64_t(t) * uint(DIM) * 4u);
  for (uint j = 0u; j < uint(ROWS / 8); j++) {
    uint rb = g * uint(ROWS) + 8u * j;
    float pair, mine = round_of_8(hcq_buf(3), W_LAYOUT, uint(DIM), rb, pair);
    if (rb + l < uint(DIM)) x.v[rb + l] = MATMUL_SET != 0 ? mine : x.v[rb + l] + mine;
  }
}
#endif

#ifdef KERNEL_llm_norm_add
// bufs: x, out, weights. Group per row: x[i] += RMS norm of out[i] scaled by the weights
// (post-norms).
void main() {
  uint i = gl_WorkGroupID.x;
  f32s x = f32s(hcq_buf(0) + uint64_t(i) * uint(DIM) * 4u),
       o = f32s(hcq_buf(1) + uint64_t(i) * uint(DIM) * 4u);
  f32s w = f32s(hcq_buf(2));
  float ss = 0.0;
  for (uint e = lane(); e < uint(DIM); e += 8u) ss += o.v[e] * o.v[e];
  float inv = 1.0 / sqrt(subgroupAdd(ss) / float(DIM) + NORM_EPS);
  for (uint e = lane(); e < uint(DIM); e += 8u) x.v[e] += (o.v[e] * inv) * w.v[e];
}
#endif

#ifdef KERNEL_llm_gate_up
// The FFN's gate: silu(a) = a / (1 + e^-a), or with FFN_GELU GELU's tanh form
// 0.5 a (1 + tanh(sqrt(2 / pi) (a + 0.044715 a^3))), tanh(y) = 1 - 2 / (e^2y + 1) as kernels.c.
float gate_fn(float a) {
#if FFN_GELU
  float y = 0.7978845608 * (a + 0.044715 * a * a * a);
  return 0.5 * a * (1.0 + (1.0 - 2.0 / (exp(2.0 * y) + 1.0)));
#else
  return a / (1.0 + exp(-a));
#endif
}

// bufs: hf, hq, xf, xq, w_gate, w_up, info. Grid: (blocks of 32 FFN rows, n). h = gate_fn(gate . x)
// x (up . x) for the block's rows (lane l: rows l, 8 + l, 16 + l, 24 + l), into hf and, quantized,
// block g of hq (the rows past FFN zeros).
void main() {
  uint g = gl_WorkGroupID.x, t = gl_WorkGroupID.y, l = lane();
  load_input(hcq_buf(2), hcq_buf(3), t);
  float h[4];
  float amax = 0.0;
  for (uint j = 0u; j < 4u; j++) {
    uint rb = 32u * g + 8u * j;
    float pair, a = round_of_8(hcq_buf(4), WG_LAYOUT, uint(FFN), rb, pair);
    float u = round_of_8(hcq_buf(5), WU_LAYOUT, uint(FFN), rb, pair);
    h[j] = rb + l < uint(FFN) ? gate_fn(a) * u : 0.0;
    amax = max(amax, abs(h[j]));
    if (rb + l < uint(FFN)) f32s(hcq_buf(0)).v[t * uint(FFN) + rb + l] = h[j];
  }
  amax = subgroupMax(amax);
  float d = amax / 127.0, id = d != 0.0 ? 127.0 / amax : 0.0;
  int q[4], s = 0;
  for (uint j = 0u; j < 4u; j++) q[j] = int(roundEven(h[j] * id)), s += q[j];
  int s16 = subgroupAdd(q[0] + q[1]);  // rounds 0 and 1: the block's first 16 rows
  s = subgroupAdd(s);
  // word w holds rows 4w .. 4w + 3: round w / 2, lanes 4 (w % 2) ..
  u32s o = u32s(hcq_buf(1));
  uint at = (t * uint(NBLK(FFN)) + g) * ACT_WORDS;
  for (uint w = 0u; w < 8u; w++) {
    uint mine = l / 4u == w % 2u ? uint(q[w / 2u] & 0xff) << (8u * (l % 4u)) : 0u;
    uint word = subgroupAdd(mine);
    if (l == 0u) o.v[at + 4u + w] = word;
  }
  if (l == 0u)
    o.v[at] = floatBitsToUint(d), o.v[at + 1u] = floatBitsToUint(float(s) * d),
    o.v[at + 2u] = uint(s), o.v[at + 3u] = uint(s16);
}
#endif

#ifdef KERNEL_llm_classify
// bufs: logits, best, xf, xq, classifier; vals: first group. Grid: groups of CLS_ROWS rows. The
// group's logits and its best: best[2 g] the value's bits, best[2 g + 1] the lowest index holding
// it. BATCH: bufs + info; grid y the choosing rows j: row j's logits at j VOCAB, its best at j 2
// groups.
#define CLS_GROUPS ((VOCAB + CLS_ROWS - 1) / CLS_ROWS)
void main() {
  uint g = gl_WorkGroupID.x + uint(hcq_val(0)), l = lane(), r0 = g * uint(CLS_ROWS),
       j = gl_WorkGroupID.y;
  load_input(hcq_buf(2), hcq_buf(3), j);
  f32s logits = f32s(hcq_buf(0) + uint64_t(j) * uint(VOCAB) * 4u);
  uint64_t best = hcq_buf(1) + uint64_t(j) * uint(2 * CLS_GROUPS) * 4u;
  float top = neg_inf();
  int arg = 0x7fffffff;
  for (uint j = 0u; j < uint(CLS_ROWS / 8); j++) {
    uint rb = r0 + 8u * j;
    float pair, mine = round_of_8(hcq_buf(4), W_LAYOUT, uint(VOCAB), rb, pair);
    bool in_vocab = rb + l < uint(VOCAB), better = in_vocab && mine > top;
    if (in_vocab) logits.v[rb + l] = mine;
    top = better ? mine : top, arg = better ? int(rb + l) : arg;
  }
  float mx = subgroupMax(top);
  int at = subgroupMin(top == mx ? arg : 0x7fffffff);
  if (at == 0x7fffffff)
    at = int(r0);  // every logit -inf or NaN: the group's first row, as kernels.c
  if (l == 0u) i32s(best).v[2u * g] = floatBitsToInt(mx), i32s(best).v[2u * g + 1u] = at;
}
#endif

#ifdef KERNEL_llm_select
// bufs: tokens, scratch, best, logits, sampler, info; vals: groups. One group of SEL invocations.
// The token into tokens[p0 + n]. Greedy: the highest of the groups' bests (lowest index on ties).
// Sampling, with kernels.c's semantics without its sort: a candidate's rank is its 64-bit key
// (the logit's bits in an order-preserving form, then (2^ID_BITS - 1 - id): higher logit first,
// then lower id), and each choice is a search for a key, bit by bit from the top, over sums
// across the vocabulary: the top_k-th key (a count), the top-p cut (a sum of probabilities), the
// draw (a sum). Probabilities are exp((logit - max) / T) as integers (x 2^40), so the sums are
// exact in any order: only exp's rounding (float here, double on the CPU) and the draw's 32 bits
// (53 on the CPU) differ, and the token differs only where the draw falls within about 1e-7 of a
// boundary between two candidates.
shared uint64_t red[SEL];
uint64_t reduce(uint64_t v, bool is_max) {
  uint l = lane();
  red[l] = v;
  barrier();
  for (uint s = uint(SEL) / 2u; s > 0u; s >>= 1u) {
    if (l < s) red[l] = is_max ? max(red[l], red[l + s]) : red[l] + red[l + s];
    barrier();
  }
  uint64_t r = red[0];
  barrier();
  return r;
}
uint ordered(uint bits) { return (bits & 0x80000000u) != 0u ? ~bits : bits | 0x80000000u; }
float unordered(uint o) { return uintBitsToFloat((o & 0x80000000u) != 0u ? o & 0x7fffffffu : ~o); }
#define ID_MASK ((uint64_t(1) << ID_BITS) - 1ul)
#define KEY_BITS (32 + ID_BITS)

// The largest key K (a candidate's) such that sum over keys >= K of (count ? 1 : P) >= need
// (strictly more with `above`).
uint64_t search(u64s keys, u64s probs, bool count, uint64_t need, bool above) {
  uint64_t k = 0ul;
  for (int bit = KEY_BITS - 1; bit >= 0; bit--) {
    uint64_t trial = k | (uint64_t(1) << bit), part = 0ul;
    for (uint i = lane(); i < uint(VOCAB); i += uint(SEL))
      part += keys.v[i] >= trial ? (count ? 1ul : probs.v[i]) : 0ul;
    uint64_t total = reduce(part, false);
    if (above ? total > need : total >= need) k = trial;
  }
  return k;
}
// need x frac / 2^bits, frac < 2^32, need < 2^56, without overflow.
uint64_t scale_down(uint64_t need, uint64_t frac, int bits) {
  return ((need >> 32) * frac << (32 - bits)) + (((need & 0xfffffffful) * frac) >> bits);
}
uint64_t key_of(float logit, uint id) {
  return (uint64_t(ordered(floatBitsToUint(logit))) << ID_BITS) | (ID_MASK - uint64_t(id));
}
float logit_of(uint64_t key) { return unordered(uint(key >> ID_BITS)); }

// kernels.c's penalize() on the keys: the counts of the last n tokens in the probabilities' words
// (zeroed at those tokens only, then atomic increments), and the one invocation whose exchange
// takes a token's count back to 0 rewrites its key.
void penalize(u64s keys, u32s count, i32s tokens, int at, int n, float rep, float freq,
              float pres) {
  uint l = lane();
  int from = at - n;
  for (int j = from + int(l); j < at; j += SEL)
    if (uint(tokens.v[j]) < uint(VOCAB)) count.v[tokens.v[j]] = 0u;
  memoryBarrierBuffer();
  barrier();
  for (int j = from + int(l); j < at; j += SEL)
    if (uint(tokens.v[j]) < uint(VOCAB)) atomicAdd(count.v[tokens.v[j]], 1u);
  memoryBarrierBuffer();
  barrier();
  for (int j = from + int(l); j < at; j += SEL) {
    int t = tokens.v[j];
    if (uint(t) >= uint(VOCAB)) continue;
    uint c = atomicExchange(count.v[t], 0u);
    if (c == 0u) continue;
    float x = logit_of(keys.v[t]);
    x = x <= 0.0 ? x * rep : x / rep;
    keys.v[t] = key_of(x - (float(c) * freq + pres), uint(t));
  }
  memoryBarrierBuffer();
  barrier();
}

// The probabilities exp((logit - mx) / temperature) x 2^40 of the keys from cut up; their sum.
uint64_t weigh(u64s keys, u64s probs, uint64_t cut, float mx, float temperature) {
  uint64_t part = 0ul;
  for (uint i = lane(); i < uint(VOCAB); i += uint(SEL)) {
    uint64_t k = keys.v[i];
    uint64_t p =
        k >= cut ? uint64_t(exp((logit_of(k) - mx) / temperature) * 1099511627776.0 + 0.5) : 0ul;
    probs.v[i] = p;
    part += p;
  }
  memoryBarrierBuffer();
  barrier();
  return reduce(part, false);
}

void main() {
  uint l = lane();
  // BATCH: group j the j-th choosing row, with its own sampler (10 words), scratch, logits and
  // best; its token into tokens[j]
  uint j = gl_WorkGroupID.x;
  int at = info_p0(hcq_buf(5)) + info_n(hcq_buf(5)), dest = at;
  uint parity = BATCH != 0 ? uint(info_p0(hcq_buf(5))) : 0u, bj = BATCH != 0 ? j : 0u;
  if (BATCH != 0)
    at = row_pos(hcq_buf(5), uint(batch_sample_row(hcq_buf(5), j))) + 1,
    dest = int(parity * uint(BATCH_ROWS) + j);
  i32s tokens = i32s(hcq_buf(0));
  i32s history =
      tokens;  // the tokens before the new one (a batch row's: its slot's, from the history buffer)
  if (BATCH != 0) {
    uint row = uint(batch_sample_row(hcq_buf(5), j));
    history =
        i32s(hcq_buf(6) + uint64_t(row_cache_pos(hcq_buf(5), row) - row_pos(hcq_buf(5), row)) * 4u);
  }
  u32s sp = u32s(hcq_buf(4) + uint64_t(parity * uint(BATCH_ROWS) + bj) * 40u);
  uint64_t scratch = hcq_buf(1) + uint64_t(bj) * uint(VOCAB) * 16u;
  float temperature = uintBitsToFloat(sp.v[0]), top_p = uintBitsToFloat(sp.v[1]),
        min_p = uintBitsToFloat(sp.v[5]);
  float rep = uintBitsToFloat(sp.v[6]), freq = uintBitsToFloat(sp.v[7]),
        pres = uintBitsToFloat(sp.v[8]);
  int top_k = int(sp.v[2]), last_n = int(sp.v[9]);
  bool penalties = last_n > 0 && (rep != 1.0 || freq != 0.0 || pres != 0.0);
  uint64_t seed = packUint2x32(uvec2(sp.v[3], sp.v[4]));
  if (!(temperature > 0.0) && !penalties) {
    i32s best = i32s(hcq_buf(2) + uint64_t(bj) * uint(hcq_val(0)) * 8u);
    uint64_t mine = 0ul;
    for (uint g = l; g < uint(hcq_val(0)); g += uint(SEL))
      mine = max(mine, packUint2x32(uvec2(0xffffffffu - uint(best.v[2u * g + 1u]),
                                          ordered(uint(best.v[2u * g])))));
    uint64_t k = reduce(mine, true);
    if (l == 0u) tokens.v[dest] = int(0xffffffffu - unpackUint2x32(k).x);
    return;
  }
  u64s keys = u64s(scratch), probs = u64s(scratch + uint64_t(VOCAB) * 8u);
  f32s logits = f32s(hcq_buf(3) + uint64_t(bj) * uint(VOCAB) * 4u);
  for (uint i = l; i < uint(VOCAB); i += uint(SEL)) keys.v[i] = key_of(logits.v[i], i);
  memoryBarrierBuffer();
  barrier();
  if (penalties)
    penalize(keys, u32s(scratch + uint64_t(VOCAB) * 8u), history, at, min(last_n, at), rep, freq,
             pres);
  uint64_t top = 0ul;
  for (uint i = l; i < uint(VOCAB); i += uint(SEL)) top = max(top, keys.v[i]);
  top = reduce(top, true);
  if (!(temperature > 0.0)) {  // greedy over the penalised logits
    if (l == 0u) tokens.v[dest] = int(ID_MASK - (top & ID_MASK));
    return;
  }
  float mx = logit_of(top);
  // llama.cpp's order: top-k, top-p and min-p on the probabilities at temperature 1, then the
  // temperature
  uint64_t cut =
      top_k > 0 && top_k < VOCAB ? search(keys, probs, true, uint64_t(top_k), false) : 0ul;
  uint64_t kept = weigh(keys, probs, cut, mx, 1.0);
  if (top_p < 1.0) {
    uint64_t need = scale_down(kept, uint64_t(top_p * 16777216.0), 24);
    cut = search(keys, probs, false, need, false);
  }
  if (min_p > 0.0) {  // logit >= mx + log(min_p) (a zero as -0, the least key of the zeros)
    float floor_logit = mx + log(min_p);
    uint64_t floor_key =
        uint64_t(ordered(floor_logit == 0.0 ? 0x80000000u : floatBitsToUint(floor_logit)))
        << ID_BITS;
    cut = max(cut, min(floor_key, top));
  }
  kept = weigh(keys, probs, cut, mx, temperature);
  // splitmix64 of the seed and the position, as kernels.c's uniform(); its top 32 bits
  uint64_t z = seed + 0x9e3779b97f4a7c15ul * uint64_t(at + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ul;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebul;
  z ^= z >> 31;
  uint64_t u = scale_down(kept, z >> 32, 32);
  uint64_t k = search(keys, probs, false, u, true);
  if (l == 0u) tokens.v[dest] = int(ID_MASK - (k & ID_MASK));
}
#endif
