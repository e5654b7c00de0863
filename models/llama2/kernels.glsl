// The decoder's kernels in GLSL for Vulkan devices (the GLSL ABI of hcq/vulkan.h): the same
// entries, buffers and values as kernels.c, which documents what each computes. Only the work split
// differs.
//
// The split is for lavapipe (Mesa's llvmpipe: a work-group runs on one thread, its invocations 8
// to a 256-bit vector), whose costs decide it (README.md, "The GLSL kernels on lavapipe"; the
// MiniLM encoder's kernels follow the same rules): every work-group is LANES = 8 invocations, one
// vector, so nothing needs barriers or shared memory (a group of more runs as coroutines switched
// at each barrier); sums and maxima across the lanes are subgroup operations. A load from a
// buffer address is a loop over the lanes and, inside, over the load's components, so data is
// read in 64-bit components (u64vec4 / u64vec2 / uint64_t, two floats each) and no two lanes load
// the same data where it can be helped.
//
// The matrix-vector products give a group ROWS rows (CLS_ROWS for the classifier), in rounds of
// 8: lane l takes the 8-float pieces 8 l, 64 + 8 l, 128 + 8 l, ... of every row and of the input
// (RMS-normalised by the group: a sum of squares over the lanes' pieces, then subgroupAdd; kept in
// registers), reads each row front to back, and subgroupAdd finishes the row; lane l stores row l
// of each round. Attention gives a group ATT_HEADS query heads that share a key/value head and
// one chunk of positions: lane l scores positions t0 + l, t0 + l + 8, ..., the softmax's max and
// sum are subgroupMax / subgroupAdd, and each element of the weighted value sum is a subgroupAdd of
// the lanes' parts. On a GPU whose subgroups are wider (32 on NVIDIA) a group of 8 fills part of
// one subgroup and the subgroup operations cover its 8 active invocations; subgroups narrower than
// 8 are not supported. The u64vec4 loads want 32-byte aligned buffers (hcq's Vulkan buffers are
// 64-byte aligned).
//
// Rows whose length is not a multiple of 8 floats (checkpoints may have any even head size, so
// any even dim, and any hidden size) are read with the widest load their alignment allows
// (u64vec2, uint64_t or float: ld8's wd); a lane's last piece of such a row is partly zeros.
//
// The decoder compiles this file once per entry after a block of #defines: the model's shape (as
// for kernels.c), LANES, ROWS, CLS_ROWS, ATT_HEADS and KERNEL_<entry>, which selects the entry's
// main(). Float sums run in another order than on the CPU, so results match the CPU's within
// rounding, not bit for bit; every group computes its outputs in a fixed order, so eager steps and
// graph replays on one device give identical bits.
#extension GL_KHR_shader_subgroup_arithmetic : require

#if LANES != 8 || ROWS % 8 != 0 || CLS_ROWS % 8 != 0 || ATT_CHUNK % 8 != 0
#error the kernels are written for groups of 8 invocations and row blocks of multiples of 8
#endif

layout(buffer_reference, std430, buffer_reference_align = 4) buffer f32s { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer i32s { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) buffer u64s { uint64_t v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer u64x2s { u64vec2 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 32) buffer u64x4s { u64vec4 v[]; };

vec2 f2(uint64_t a) { return uintBitsToFloat(unpackUint2x32(a)); }
uint64_t u2(vec2 v) { return packUint2x32(floatBitsToUint(v)); }
vec4 f4(uint64_t a, uint64_t b) { return vec4(f2(a), f2(b)); }
float neg_inf() { return uintBitsToFloat(0xff800000u); }

// The widest load (in floats) a row of n floats allows at every row start: 8 when n % 8 == 0, ...
#define WIDTH(n) ((n) % 8 == 0 ? 8u : (n) % 4 == 0 ? 4u : (n) % 2 == 0 ? 2u : 1u)

// Floats [f, f + 8) of the row at float index `row` of buffer p (rows of n floats, wd = WIDTH(n),
// a compile-time constant once inlined), the ones at or past the row's end n read as 0. f is a
// multiple of 8 below n, so the first load of each width is always inside the row. Loads past the
// row's end read its first piece again and are dropped by a select, not skipped by a branch: on
// lavapipe, a load under a branch tests each lane's mask (README.md).
void ld8(uint64_t p, uint row, uint f, uint n, uint wd, out vec4 a, out vec4 b) {
  uint at = row + f;
  if (wd == 8u) {
    u64vec4 u = u64x4s(p).v[at / 8u];
    a = f4(u.x, u.y), b = f4(u.z, u.w);
  } else if (wd == 4u) {
    bool two = f + 4u < n;
    u64vec2 u = u64x2s(p).v[at / 4u], w = u64x2s(p).v[two ? at / 4u + 1u : at / 4u];
    a = f4(u.x, u.y), b = two ? f4(w.x, w.y) : vec4(0.0);
  } else if (wd == 2u) {
    u64s q = u64s(p);
    uint i = at / 2u;
    vec2 c[4];
    for (uint j = 0u; j < 4u; j++) {
      bool in_row = f + 2u * j < n;
      vec2 v = f2(q.v[in_row ? i + j : i]);
      c[j] = in_row ? v : vec2(0.0);
    }
    a = vec4(c[0], c[1]), b = vec4(c[2], c[3]);
  } else {
    f32s q = f32s(p);
    float e[8];
    for (uint j = 0u; j < 8u; j++) {
      bool in_row = f + j < n;
      float v = q.v[in_row ? at + j : at];
      e[j] = in_row ? v : 0.0;
    }
    a = vec4(e[0], e[1], e[2], e[3]), b = vec4(e[4], e[5], e[6], e[7]);
  }
}

// Pieces of a row of n floats per lane (the last partly empty when n % 64 != 0). Piece k of lane
// l starts at float 64 k + 8 l; a lane past the row's end reads the row's last piece (LAST) and
// drops it.
#define PIECES(n) (((n) + 63) / 64)
#define LAST(n) (uint(((n)-1) / 8) * 8u)

// ---- the matrix-vector products ----
// A group holds ROWS (CLS_ROWS) consecutive rows, done in rounds of 8: each lane reads its pieces
// of the 8 rows one row after the other (rows outer, pieces inner: the group's weights are read
// front to back, which the CPU's prefetcher streams: pieces outer made the 15m classifier 1.5x
// slower), against the input's pieces held in registers (xa, xb). Round j's rows are stored by
// lane l as row 8 j + l. Every loop has a constant trip count and is unrolled: in a loop that
// llvmpipe keeps, each load tests every lane's mask ([[dont_unroll]] on the rounds made the small
// shape's products 25-40% slower).
#if defined(KERNEL_llama_qkv) || defined(KERNEL_llama_ffn_up) || defined(KERNEL_llama_classify) || \
    defined(KERNEL_llama_wo)
#define N_IN DIM
#elif defined(KERNEL_llama_ffn_down)
#define N_IN HIDDEN
#endif
#ifdef N_IN
#define NP PIECES(N_IN)
vec4 xa[NP], xb[NP];
uint xf[NP];   // where the lane's piece k starts (LAST(N_IN) when past the end)
bool xok[NP];  // whether it is inside the row
// The lane's pieces of the input (N_IN floats at p).
void load_input(uint64_t p) {
  uint l = gl_LocalInvocationID.x;
  for (uint k = 0u; k < uint(NP); k++) {
    uint f = 64u * k + 8u * l;
    xok[k] = f < uint(N_IN);
    xf[k] = xok[k] ? f : LAST(N_IN);
    ld8(p, 0u, xf[k], uint(N_IN), WIDTH(N_IN), xa[k], xb[k]);
    xa[k] = xok[k] ? xa[k] : vec4(0.0), xb[k] = xok[k] ? xb[k] : vec4(0.0);
  }
}
// RMS norm of the input in place (eps 1e-5), scaled by w: w * (inv * x) as in kernels.c.
void norm_input(uint64_t w) {
  float ss = 0.0;
  for (uint k = 0u; k < uint(NP); k++) ss += dot(xa[k], xa[k]) + dot(xb[k], xb[k]);
  float inv = 1.0 / sqrt(subgroupAdd(ss) / float(N_IN) + 1e-5);
  for (uint k = 0u; k < uint(NP); k++) {
    vec4 wa, wb;
    ld8(w, 0u, xf[k], uint(N_IN), WIDTH(N_IN), wa, wb);
    xa[k] = wa * (inv * xa[k]), xb[k] = wb * (inv * xb[k]);
  }
}
// The lane's part of w[row] . input, row the float index where the row starts.
float row_part(uint64_t w, uint row) {
  float s = 0.0;
  for (uint k = 0u; k < uint(NP); k++) {
    vec4 wa, wb;
    ld8(w, row, xf[k], uint(N_IN), WIDTH(N_IN), wa, wb);
    s += xok[k] ? dot(wa, xa[k]) + dot(wb, xb[k]) : 0.0;
  }
  return s;
}
// Round rb of 8 rows of w (n_rows rows of N_IN floats): lane l gets row rb + l's dot product with
// the input. Rows past the end repeat the last one, whose sum no lane keeps.
float round_of_8(uint64_t w, uint rb, uint n_rows) {
  float mine = 0.0;
  for (uint r = 0u; r < 8u; r++) {
    float s = subgroupAdd(row_part(w, min(rb + r, n_rows - 1u) * uint(N_IN)));
    mine = gl_LocalInvocationID.x == r ? s : mine;
  }
  return mine;
}
#endif

#ifdef KERNEL_llama_embed
// One group: lane l copies the float pairs l, l + 8, ... of the row (DIM is even).
void main() {
  u64s x = u64s(hcq_buf(0)), emb = u64s(hcq_buf(2));
  i32s tokens = i32s(hcq_buf(1));
  int tok = tokens.v[hcq_val(0)];
  if (tok < 0 || tok >= VOCAB) tok = 0;
  uint row = uint(tok) * uint(DIM / 2);
  for (uint i = gl_LocalInvocationID.x; i < uint(DIM / 2); i += 8u) x.v[i] = emb.v[row + i];
}
#endif

#ifdef KERNEL_llama_qkv
// Rows 0..DIM-1 are q, then KV_DIM of k, then KV_DIM of v (as in kernels.c); rounds start at
// multiples of 8 rows, so rotary pairs (even rows of q and k) stay in one round.
#define TOTAL (DIM + 2 * KV_DIM)
// The lane's part of row g of the three.
float qkv_part(uint64_t wq, uint64_t wk, uint64_t wv, uint g) {
  uint64_t w = g < uint(DIM) ? wq : g < uint(DIM + KV_DIM) ? wk : wv;
  uint i = g < uint(DIM) ? g : g < uint(DIM + KV_DIM) ? g - uint(DIM) : g - uint(DIM + KV_DIM);
  return row_part(w, i * uint(DIM));
}
void main() {
  f32s q = f32s(hcq_buf(0)), kc = f32s(hcq_buf(1)), vc = f32s(hcq_buf(2));
  uint64_t wq = hcq_buf(5), wk = hcq_buf(6), wv = hcq_buf(7);
  u64s rot = u64s(hcq_buf(8));
  uint pos = uint(hcq_val(0)), l = gl_LocalInvocationID.x, r0 = gl_WorkGroupID.x * uint(ROWS);
  load_input(hcq_buf(3));
  norm_input(hcq_buf(4));
  for (uint j = 0u; j < uint(ROWS / 8); j++) {
    uint rb = r0 + 8u * j;
    // Pairs of rows: both sums (uniform across the lanes), rotated when q or k; lane l keeps row
    // l. (Sums go straight to subgroupAdd: an array of the round's 8 partial sums made the kernel
    // twice as slow on lavapipe.)
    float mine = 0.0;
    for (uint p = 0u; p < 4u; p++) {
      uint g = rb + 2u * p, g1 = min(g + 1u, uint(TOTAL - 1));  // past the end: not stored
      g = min(g, uint(TOTAL - 1));
      float a = subgroupAdd(qkv_part(wq, wk, wv, g)), b = subgroupAdd(qkv_part(wq, wk, wv, g1));
      uint i = g < uint(DIM) ? g : g - uint(DIM);
      vec2 cs = f2(rot.v[(pos * uint(HEAD_SIZE) + i % uint(HEAD_SIZE)) / 2u]);
      bool rotate = g < uint(DIM + KV_DIM);  // q and k rows
      float ra = a * cs.x - b * cs.y, rb2 = a * cs.y + b * cs.x;
      a = rotate ? ra : a, b = rotate ? rb2 : b;
      mine = l == 2u * p ? a : l == 2u * p + 1u ? b : mine;
    }
    uint g = rb + l;
    if (g < uint(DIM))
      q.v[g] = mine;
    else if (g < uint(DIM + KV_DIM))
      kc.v[pos * uint(KV_DIM) + g - uint(DIM)] = mine;
    else if (g < uint(TOTAL))
      vc.v[pos * uint(KV_DIM) + g - uint(DIM + KV_DIM)] = mine;
  }
}
#endif

#ifdef KERNEL_llama_attn_part
// Group (ATT_HEADS heads sharing one key/value head, chunk): lane l scores positions t0 + l,
// t0 + l + 8, ... of the chunk for each of the heads (q is read whole by every lane: HEAD_SIZE
// floats a head, against the chunk's keys, each key read once for the group's heads), then per
// head the max and the sum of exponentials over the lanes, and each element of the weighted value
// sum as a subgroupAdd of the lanes' parts.
#define QP ((HEAD_SIZE + 7) / 8)
#define G ATT_HEADS
#define TJ (ATT_CHUNK / 8)
#if KV_MUL % G != 0
#error ATT_HEADS must divide KV_MUL
#endif
void main() {
  uint64_t q = hcq_buf(1), kc = hcq_buf(2), vc = hcq_buf(3);
  int pos = hcq_val(0);
  uint h0 = gl_WorkGroupID.x * uint(G), c = gl_WorkGroupID.y, l = gl_LocalInvocationID.x;
  int t0 = int(c) * ATT_CHUNK, t1 = min(t0 + ATT_CHUNK, pos + 1);
  uint kv = (h0 / uint(KV_MUL)) * uint(HEAD_SIZE);
  float scale = 1.0 / sqrt(float(HEAD_SIZE));
  vec4 qa[G * QP], qb[G * QP];
  for (uint g = 0u; g < uint(G); g++)
    for (uint e = 0u; e < uint(QP); e++) {
      ld8(q, (h0 + g) * uint(HEAD_SIZE), 8u * e, uint(HEAD_SIZE), WIDTH(HEAD_SIZE), qa[g * QP + e],
          qb[g * QP + e]);
      qa[g * QP + e] *= scale, qb[g * QP + e] *= scale;
    }
  float score[G * TJ], mx[G];
  for (uint g = 0u; g < uint(G); g++) mx[g] = neg_inf();
  for (int j = 0; j < TJ; j++) {
    int t = t0 + int(l) + 8 * j;
    bool ok = t < t1;
    uint kt = uint(ok ? t : t0) * uint(KV_DIM) + kv;  // past pos: position t0's key, dropped
    float s[G];
    for (uint g = 0u; g < uint(G); g++) s[g] = 0.0;
    for (uint e = 0u; e < uint(QP); e++) {
      vec4 ka, kb;
      ld8(kc, kt, 8u * e, uint(HEAD_SIZE), WIDTH(HEAD_SIZE), ka, kb);
      for (uint g = 0u; g < uint(G); g++) s[g] += dot(qa[g * QP + e], ka) + dot(qb[g * QP + e], kb);
    }
    for (uint g = 0u; g < uint(G); g++) {
      score[g * TJ + j] = ok ? s[g] : neg_inf();
      mx[g] = max(mx[g], score[g * TJ + j]);
    }
  }
  float sum[G];
  vec4 oa[G * QP], ob[G * QP];
  for (uint g = 0u; g < uint(G); g++) {
    mx[g] = subgroupMax(mx[g]), sum[g] = 0.0;
    for (uint e = 0u; e < uint(QP); e++) oa[g * QP + e] = vec4(0.0), ob[g * QP + e] = vec4(0.0);
  }
  for (int j = 0; j < TJ; j++) {
    int t = t0 + int(l) + 8 * j;
    bool ok = t < t1;
    uint vt = uint(ok ? t : t0) * uint(KV_DIM) + kv;
    float w[G];
    for (uint g = 0u; g < uint(G); g++) {
      w[g] = ok ? exp(score[g * TJ + j] - mx[g]) : 0.0;
      sum[g] += w[g];
    }
    for (uint e = 0u; e < uint(QP); e++) {
      vec4 va, vb;
      ld8(vc, vt, 8u * e, uint(HEAD_SIZE), WIDTH(HEAD_SIZE), va, vb);
      for (uint g = 0u; g < uint(G); g++)
        oa[g * QP + e] += ok ? w[g] * va : vec4(0.0), ob[g * QP + e] += ok ? w[g] * vb : vec4(0.0);
    }
  }
  // Lane l stores the element pairs l, l + 8, ... of each head (HEAD_SIZE + 2 is even: pairs are
  // 8-byte aligned): pair l + 8 j is component pair l % 4 of piece 2 j + l / 4.
  u64s part = u64s(hcq_buf(0));
  for (uint g = 0u; g < uint(G); g++) {
    uint dst = ((h0 + g) * uint(MAX_CHUNKS) + c) * uint(HEAD_SIZE + 2) / 2u;
    float total = subgroupAdd(sum[g]);
    if (l == 0u) part.v[dst] = u2(vec2(mx[g], total));
    vec2 mine[(HEAD_SIZE / 2 + 7) / 8];
    for (uint j = 0u; j < uint((HEAD_SIZE / 2 + 7) / 8); j++) mine[j] = vec2(0.0);
    for (uint e = 0u; e < uint(QP); e++) {
      vec4 a = subgroupAdd(oa[g * QP + e]), b = subgroupAdd(ob[g * QP + e]);
      uint i = l % 4u;
      vec2 v = i == 0u ? a.xy : i == 1u ? a.zw : i == 2u ? b.xy : b.zw;
      mine[e / 2u] = l / 4u == e % 2u ? v : mine[e / 2u];
    }
    for (uint j = 0u; j < uint((HEAD_SIZE / 2 + 7) / 8); j++)
      if (l + 8u * j < uint(HEAD_SIZE / 2)) part.v[dst + 1u + l + 8u * j] = u2(mine[j]);
  }
}
#endif

#ifdef KERNEL_llama_attn_combine
// Group per head: every lane reads each chunk's max and sum (one 64-bit load), and lane l rescales
// and adds the element pairs l, l + 8, ... of the chunks' value sums.
void main() {
  u64s part = u64s(hcq_buf(1));
  f32s outv = f32s(hcq_buf(0));
  uint h = gl_WorkGroupID.x, l = gl_LocalInvocationID.x;
  int chunks = hcq_val(0) / ATT_CHUNK + 1;
  uint p = h * uint(MAX_CHUNKS) * uint(HEAD_SIZE + 2) / 2u, stride = uint(HEAD_SIZE + 2) / 2u;
  float m = neg_inf();
  for (int c = 0; c < chunks; c++) m = max(m, f2(part.v[p + uint(c) * stride]).x);
  float total = 0.0;
  vec2 acc[(HEAD_SIZE / 2 + 7) / 8];
  for (uint j = 0u; j < uint((HEAD_SIZE / 2 + 7) / 8); j++) acc[j] = vec2(0.0);
  for (int c = 0; c < chunks; c++) {
    uint at = p + uint(c) * stride;
    vec2 ms = f2(part.v[at]);
    float w = exp(ms.x - m);
    total += w * ms.y;
    for (uint j = 0u; j < uint((HEAD_SIZE / 2 + 7) / 8); j++) {
      uint pr = l + 8u * j;
      if (pr < uint(HEAD_SIZE / 2)) acc[j] += w * f2(part.v[at + 1u + pr]);
    }
  }
  u64s o2 = u64s(hcq_buf(0));
  for (uint j = 0u; j < uint((HEAD_SIZE / 2 + 7) / 8); j++) {
    uint pr = l + 8u * j;
    if (pr < uint(HEAD_SIZE / 2)) o2.v[(h * uint(HEAD_SIZE)) / 2u + pr] = u2(acc[j] / total);
  }
}
#endif

#if defined(KERNEL_llama_wo) || defined(KERNEL_llama_ffn_down)
// x[r] += w[r] . src for the group's ROWS rows.
void main() {
  f32s x = f32s(hcq_buf(0));
  uint64_t w = hcq_buf(2);
  uint l = gl_LocalInvocationID.x, r0 = gl_WorkGroupID.x * uint(ROWS);
  load_input(hcq_buf(1));
  for (uint j = 0u; j < uint(ROWS / 8); j++) {
    uint rb = r0 + 8u * j;
    float mine = round_of_8(w, rb, uint(DIM));
    if (rb + l < uint(DIM)) x.v[rb + l] += mine;
  }
}
#endif

#ifdef KERNEL_llama_ffn_up
// hb[r] = silu(w1[r] . xn) * (w3[r] . xn) for the group's ROWS rows.
void main() {
  f32s hb = f32s(hcq_buf(0));
  uint64_t w1 = hcq_buf(3), w3 = hcq_buf(4);
  uint l = gl_LocalInvocationID.x, r0 = gl_WorkGroupID.x * uint(ROWS);
  load_input(hcq_buf(1));
  norm_input(hcq_buf(2));
  for (uint j = 0u; j < uint(ROWS / 8); j++) {
    uint rb = r0 + 8u * j;
    float a = 0.0, c = 0.0;
    for (uint r = 0u; r < 8u; r++) {
      uint row = min(rb + r, uint(HIDDEN - 1)) * uint(DIM);
      float ar = subgroupAdd(row_part(w1, row)), cr = subgroupAdd(row_part(w3, row));
      a = l == r ? ar : a, c = l == r ? cr : c;
    }
    // silu once for the round's 8 rows, one a lane
    if (rb + l < uint(HIDDEN)) hb.v[rb + l] = a * (1.0 / (1.0 + exp(-a))) * c;
  }
}
#endif

#ifdef KERNEL_llama_classify
// Logits of the group's CLS_ROWS rows and the group's best one (lowest index on ties).
void main() {
  f32s logits = f32s(hcq_buf(0));
  u64s best = u64s(hcq_buf(1));
  uint64_t w = hcq_buf(4);
  // value 0: the first group (a device may run only some groups of the whole classifier)
  uint g = gl_WorkGroupID.x + uint(hcq_val(0)), l = gl_LocalInvocationID.x, r0 = g * uint(CLS_ROWS);
  load_input(hcq_buf(2));
  norm_input(hcq_buf(3));
  // Lane l: rows r0 + l, r0 + l + 8, ... in order (strict >: its lowest index on ties).
  float top = neg_inf();
  int arg = 0x7fffffff;
  for (uint j = 0u; j < uint(CLS_ROWS / 8); j++) {
    uint rb = r0 + 8u * j;
    float mine = round_of_8(w, rb, uint(VOCAB));
    bool in_vocab = rb + l < uint(VOCAB), better = in_vocab && mine > top;
    if (in_vocab) logits.v[rb + l] = mine;
    top = better ? mine : top, arg = better ? int(rb + l) : arg;
  }
  float mx = subgroupMax(top);
  int at = subgroupMin(top == mx ? arg : 0x7fffffff);
  if (at == 0x7fffffff)
    at = int(r0);  // every logit -inf or NaN: the group's first row, as kernels.c
  if (l == 0u) best.v[g] = packUint2x32(uvec2(floatBitsToUint(mx), uint(at)));
}
#endif

#ifdef KERNEL_llama_argmax
// One group: lane l takes groups l, l + 8, ... in order, then the best over the lanes (the lowest
// index on ties: groups hold increasing rows).
void main() {
  i32s tokens = i32s(hcq_buf(0));
  u64s best = u64s(hcq_buf(1));
  uint l = gl_LocalInvocationID.x;
  float top = neg_inf();
  int arg = 0x7fffffff;
  for (uint g = l; g < uint(hcq_val(1)); g += 8u) {
    uvec2 b = unpackUint2x32(best.v[g]);
    float z = uintBitsToFloat(b.x);
    if (z > top) top = z, arg = int(b.y);
  }
  float mx = subgroupMax(top);
  int at = subgroupMin(top == mx ? arg : 0x7fffffff);
  if (l == 0u) tokens.v[hcq_val(0) + 1] = at == 0x7fffffff ? 0 : at;
}
#endif
