// The decoder's kernels in GLSL for Vulkan devices (SPEC 2 Vulkan ABI): the same entries, buffers
// and values as kernels.c, which documents what each computes. Only the work split differs.
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
// The matrix-vector products give a group ROWS rows (CLS_ROWS for the classifier): lane l takes
// the 8-float pieces 8 l, 64 + 8 l, 128 + 8 l, ... of every row and of the input (RMS-normalised
// by the group: a sum of squares over the lanes' pieces, then subgroupAdd), keeps one partial sum
// per row, and subgroupAdd finishes each row; lane l then holds rows l, l + 8, ... and stores
// them. Attention gives a group of 8 (head, chunk): lane l scores positions t0 + l, t0 + l + 8,
// ..., the softmax's max and sum are subgroupMax / subgroupAdd, and each element of the weighted
// value sum is a subgroupAdd of the lanes' parts. On a GPU whose subgroups are wider (32 on
// NVIDIA) a group of 8 fills part of one subgroup and the subgroup operations cover its 8 active
// invocations; subgroups narrower than 8 are not supported.
//
// Rows whose length is not a multiple of 8 floats (checkpoints may have any even head size, so
// any even dim, and any hidden size) are read with the widest load their alignment allows
// (u64vec2, uint64_t or float: ld8's wd); a lane's last piece of such a row is partly zeros.
//
// The decoder compiles this file once per entry after a block of #defines: the model's shape (as
// for kernels.c), LANES, ROWS, CLS_ROWS and KERNEL_<entry>, which selects the entry's main().
// Float sums run in another order than on the CPU, so results match the CPU's within rounding,
// not bit for bit; every group computes its outputs in a fixed order, so eager steps and graph
// replays on one device give identical bits.
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
// multiple of 8 below n, so the first load of each width is always inside the row.
void ld8(uint64_t p, uint row, uint f, uint n, uint wd, out vec4 a, out vec4 b) {
  uint at = row + f;
  if (wd == 8u) {
    u64vec4 u = u64x4s(p).v[at / 8u];
    a = f4(u.x, u.y), b = f4(u.z, u.w);
  } else if (wd == 4u) {
    u64vec2 u = u64x2s(p).v[at / 4u];
    a = f4(u.x, u.y), b = vec4(0.0);
    if (f + 4u < n) {
      u = u64x2s(p).v[at / 4u + 1u];
      b = f4(u.x, u.y);
    }
  } else if (wd == 2u) {
    u64s q = u64s(p);
    vec2 c0 = f2(q.v[at / 2u]), c1 = vec2(0.0), c2 = vec2(0.0), c3 = vec2(0.0);
    if (f + 2u < n) c1 = f2(q.v[at / 2u + 1u]);
    if (f + 4u < n) c2 = f2(q.v[at / 2u + 2u]);
    if (f + 6u < n) c3 = f2(q.v[at / 2u + 3u]);
    a = vec4(c0, c1), b = vec4(c2, c3);
  } else {
    f32s q = f32s(p);
    float e[8];
    for (uint j = 0u; j < 8u; j++) e[j] = f + j < n ? q.v[at + j] : 0.0;
    a = vec4(e[0], e[1], e[2], e[3]), b = vec4(e[4], e[5], e[6], e[7]);
  }
}

// Pieces of a row of n floats per lane (the last partly empty when n % 64 != 0).
#define PIECES(n) (((n) + 63) / 64)

#if defined(KERNEL_llama_qkv) || defined(KERNEL_llama_ffn_up) || defined(KERNEL_llama_classify)
// 1 / rms of x (DIM floats): each lane's pieces, then subgroupAdd.
float rms_inv(uint64_t x) {
  float ss = 0.0;
  uint l = gl_LocalInvocationID.x;
  for (uint k = 0u; k < uint(PIECES(DIM)); k++) {
    uint f = 64u * k + 8u * l;
    if (f < uint(DIM)) {
      vec4 a, b;
      ld8(x, 0u, f, uint(DIM), WIDTH(DIM), a, b);
      ss += dot(a, a) + dot(b, b);
    }
  }
  return 1.0 / sqrt(subgroupAdd(ss) / float(DIM) + 1e-5);
}
// The lane's piece at f of the normalised input, w * (inv * x) as in kernels.c.
void norm8(uint64_t x, uint64_t w, float inv, uint f, out vec4 a, out vec4 b) {
  vec4 wa, wb;
  ld8(x, 0u, f, uint(DIM), WIDTH(DIM), a, b);
  ld8(w, 0u, f, uint(DIM), WIDTH(DIM), wa, wb);
  a = wa * (inv * a), b = wb * (inv * b);
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
// Rows 0..DIM-1 are q, then KV_DIM of k, then KV_DIM of v (as in kernels.c); a group's ROWS rows
// start at a multiple of 8, so rotary pairs (even rows of q and k) never straddle two groups.
#define TOTAL (DIM + 2 * KV_DIM)
void main() {
  f32s q = f32s(hcq_buf(0)), kc = f32s(hcq_buf(1)), vc = f32s(hcq_buf(2));
  uint64_t x = hcq_buf(3), rms = hcq_buf(4), wq = hcq_buf(5), wk = hcq_buf(6), wv = hcq_buf(7);
  u64s rot = u64s(hcq_buf(8));
  uint pos = uint(hcq_val(0)), l = gl_LocalInvocationID.x, r0 = gl_WorkGroupID.x * uint(ROWS);
  float inv = rms_inv(x), acc[ROWS];
  for (uint r = 0u; r < uint(ROWS); r++) acc[r] = 0.0;
  for (uint k = 0u; k < uint(PIECES(DIM)); k++) {
    uint f = 64u * k + 8u * l;
    if (f >= uint(DIM)) continue;
    vec4 xa, xb;
    norm8(x, rms, inv, f, xa, xb);
    for (uint r = 0u; r < uint(ROWS); r++) {
      uint g = r0 + r;
      if (g >= uint(TOTAL)) break;
      uint64_t w = g < uint(DIM) ? wq : g < uint(DIM + KV_DIM) ? wk : wv;
      uint i = g < uint(DIM) ? g : g < uint(DIM + KV_DIM) ? g - uint(DIM) : g - uint(DIM + KV_DIM);
      vec4 wa, wb;
      ld8(w, i * uint(DIM), f, uint(DIM), WIDTH(DIM), wa, wb);
      acc[r] += dot(wa, xa) + dot(wb, xb);
    }
  }
  // Pairs of rows: both sums (uniform across the lanes), rotated when q or k; lane l keeps rows
  // l, l + 8, ...
  float mine[ROWS / 8];
  for (uint p = 0u; p < uint(ROWS / 2); p++) {
    uint g = r0 + 2u * p;
    if (g >= uint(TOTAL)) break;
    float a = subgroupAdd(acc[2u * p]), b = subgroupAdd(acc[2u * p + 1u]);
    if (g < uint(DIM + KV_DIM)) {
      uint i = g < uint(DIM) ? g : g - uint(DIM);
      vec2 cs = f2(rot.v[(pos * uint(HEAD_SIZE) + i % uint(HEAD_SIZE)) / 2u]);
      float a0 = a, b0 = b;
      a = a0 * cs.x - b0 * cs.y;
      b = a0 * cs.y + b0 * cs.x;
    }
    if (l == (2u * p) % 8u) mine[p / 4u] = a;
    if (l == (2u * p + 1u) % 8u) mine[p / 4u] = b;
  }
  for (uint j = 0u; j < uint(ROWS / 8); j++) {
    uint g = r0 + l + 8u * j;
    if (g < uint(DIM)) q.v[g] = mine[j];
    else if (g < uint(DIM + KV_DIM)) kc.v[pos * uint(KV_DIM) + g - uint(DIM)] = mine[j];
    else if (g < uint(TOTAL)) vc.v[pos * uint(KV_DIM) + g - uint(DIM + KV_DIM)] = mine[j];
  }
}
#endif

#ifdef KERNEL_llama_attn_part
// Group (head, chunk): lane l scores positions t0 + l, t0 + l + 8, ... of the chunk (q is read
// whole by every lane: HEAD_SIZE floats, against the chunk's keys), then the max and the sum of
// exponentials over the lanes, and each element of the weighted value sum as a subgroupAdd.
#define QP ((HEAD_SIZE + 7) / 8)
void main() {
  uint64_t q = hcq_buf(1), kc = hcq_buf(2), vc = hcq_buf(3);
  int pos = hcq_val(0);
  uint h = gl_WorkGroupID.x, c = gl_WorkGroupID.y, l = gl_LocalInvocationID.x;
  int t0 = int(c) * ATT_CHUNK, t1 = min(t0 + ATT_CHUNK, pos + 1);
  uint qh = h * uint(HEAD_SIZE), kv = (h / uint(KV_MUL)) * uint(HEAD_SIZE);
  float scale = 1.0 / sqrt(float(HEAD_SIZE));
  vec4 qa[QP], qb[QP];
  for (uint j = 0u; j < uint(QP); j++) {
    ld8(q, qh, 8u * j, uint(HEAD_SIZE), WIDTH(HEAD_SIZE), qa[j], qb[j]);
    qa[j] *= scale, qb[j] *= scale;
  }
  float score[ATT_CHUNK / 8], m = neg_inf();
  for (int j = 0; j < ATT_CHUNK / 8; j++) {
    int t = t0 + int(l) + 8 * j;
    float s = neg_inf();
    if (t < t1) {
      s = 0.0;
      for (uint e = 0u; e < uint(QP); e++) {
        vec4 ka, kb;
        ld8(kc, uint(t) * uint(KV_DIM) + kv, 8u * e, uint(HEAD_SIZE), WIDTH(HEAD_SIZE), ka, kb);
        s += dot(qa[e], ka) + dot(qb[e], kb);
      }
    }
    score[j] = s;
    m = max(m, s);
  }
  m = subgroupMax(m);
  float sum = 0.0;
  vec4 oa[QP], ob[QP];
  for (uint e = 0u; e < uint(QP); e++) oa[e] = vec4(0.0), ob[e] = vec4(0.0);
  for (int j = 0; j < ATT_CHUNK / 8; j++) {
    int t = t0 + int(l) + 8 * j;
    if (t >= t1) break;
    float w = exp(score[j] - m);
    sum += w;
    for (uint e = 0u; e < uint(QP); e++) {
      vec4 va, vb;
      ld8(vc, uint(t) * uint(KV_DIM) + kv, 8u * e, uint(HEAD_SIZE), WIDTH(HEAD_SIZE), va, vb);
      oa[e] += w * va, ob[e] += w * vb;
    }
  }
  sum = subgroupAdd(sum);
  // Lane l stores the element pairs l, l + 8, ... (HEAD_SIZE + 2 is even: pairs are 8-byte
  // aligned): pair l + 8 j is component pair l % 4 of piece 2 j + l / 4.
  u64s part = u64s(hcq_buf(0));
  uint dst = (h * uint(MAX_CHUNKS) + c) * uint(HEAD_SIZE + 2) / 2u;
  if (l == 0u) part.v[dst] = u2(vec2(m, sum));
  vec2 mine[(HEAD_SIZE / 2 + 7) / 8];
  for (uint e = 0u; e < uint(QP); e++) {
    vec4 a = subgroupAdd(oa[e]), b = subgroupAdd(ob[e]);
    if (l / 4u == e % 2u) {
      uint i = l % 4u;
      mine[e / 2u] = i == 0u ? a.xy : i == 1u ? a.zw : i == 2u ? b.xy : b.zw;
    }
  }
  for (uint j = 0u; j < uint((HEAD_SIZE / 2 + 7) / 8); j++)
    if (l + 8u * j < uint(HEAD_SIZE / 2)) part.v[dst + 1u + l + 8u * j] = u2(mine[j]);
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
#ifdef KERNEL_llama_wo
#define N DIM
#else
#define N HIDDEN
#endif
// x[r] += w[r] . src for the group's ROWS rows.
void main() {
  f32s x = f32s(hcq_buf(0));
  uint64_t src = hcq_buf(1), w = hcq_buf(2);
  uint l = gl_LocalInvocationID.x, r0 = gl_WorkGroupID.x * uint(ROWS);
  float acc[ROWS];
  for (uint r = 0u; r < uint(ROWS); r++) acc[r] = 0.0;
  for (uint k = 0u; k < uint(PIECES(N)); k++) {
    uint f = 64u * k + 8u * l;
    if (f >= uint(N)) continue;
    vec4 sa, sb;
    ld8(src, 0u, f, uint(N), WIDTH(N), sa, sb);
    for (uint r = 0u; r < uint(ROWS); r++) {
      if (r0 + r >= uint(DIM)) break;
      vec4 wa, wb;
      ld8(w, (r0 + r) * uint(N), f, uint(N), WIDTH(N), wa, wb);
      acc[r] += dot(wa, sa) + dot(wb, sb);
    }
  }
  float mine[ROWS / 8];
  for (uint r = 0u; r < uint(ROWS); r++) {
    if (r0 + r >= uint(DIM)) break;
    float s = subgroupAdd(acc[r]);
    if (l == r % 8u) mine[r / 8u] = s;
  }
  for (uint j = 0u; j < uint(ROWS / 8); j++) {
    uint g = r0 + l + 8u * j;
    if (g < uint(DIM)) x.v[g] += mine[j];
  }
}
#endif

#ifdef KERNEL_llama_ffn_up
// hb[r] = silu(w1[r] . xn) * (w3[r] . xn) for the group's ROWS rows.
void main() {
  f32s hb = f32s(hcq_buf(0));
  uint64_t x = hcq_buf(1), rms = hcq_buf(2), w1 = hcq_buf(3), w3 = hcq_buf(4);
  uint l = gl_LocalInvocationID.x, r0 = gl_WorkGroupID.x * uint(ROWS);
  float inv = rms_inv(x), a1[ROWS], a3[ROWS];
  for (uint r = 0u; r < uint(ROWS); r++) a1[r] = 0.0, a3[r] = 0.0;
  for (uint k = 0u; k < uint(PIECES(DIM)); k++) {
    uint f = 64u * k + 8u * l;
    if (f >= uint(DIM)) continue;
    vec4 xa, xb;
    norm8(x, rms, inv, f, xa, xb);
    for (uint r = 0u; r < uint(ROWS); r++) {
      if (r0 + r >= uint(HIDDEN)) break;
      vec4 wa, wb;
      ld8(w1, (r0 + r) * uint(DIM), f, uint(DIM), WIDTH(DIM), wa, wb);
      a1[r] += dot(wa, xa) + dot(wb, xb);
      ld8(w3, (r0 + r) * uint(DIM), f, uint(DIM), WIDTH(DIM), wa, wb);
      a3[r] += dot(wa, xa) + dot(wb, xb);
    }
  }
  float mine[ROWS / 8];
  for (uint r = 0u; r < uint(ROWS); r++) {
    if (r0 + r >= uint(HIDDEN)) break;
    float a = subgroupAdd(a1[r]), c = subgroupAdd(a3[r]);
    if (l == r % 8u) mine[r / 8u] = a * (1.0 / (1.0 + exp(-a))) * c;
  }
  for (uint j = 0u; j < uint(ROWS / 8); j++) {
    uint g = r0 + l + 8u * j;
    if (g < uint(HIDDEN)) hb.v[g] = mine[j];
  }
}
#endif

#ifdef KERNEL_llama_classify
// Logits of the group's CLS_ROWS rows and the group's best one (lowest index on ties).
void main() {
  f32s logits = f32s(hcq_buf(0));
  u64s best = u64s(hcq_buf(1));
  uint64_t x = hcq_buf(2), rms = hcq_buf(3), w = hcq_buf(4);
  // value 0: the first group (a device may run only some groups of the whole classifier)
  uint g = gl_WorkGroupID.x + uint(hcq_val(0)), l = gl_LocalInvocationID.x, r0 = g * uint(CLS_ROWS);
  float inv = rms_inv(x), acc[CLS_ROWS];
  for (uint r = 0u; r < uint(CLS_ROWS); r++) acc[r] = 0.0;
  for (uint k = 0u; k < uint(PIECES(DIM)); k++) {
    uint f = 64u * k + 8u * l;
    if (f >= uint(DIM)) continue;
    vec4 xa, xb;
    norm8(x, rms, inv, f, xa, xb);
    for (uint r = 0u; r < uint(CLS_ROWS); r++) {
      if (r0 + r >= uint(VOCAB)) break;
      vec4 wa, wb;
      ld8(w, (r0 + r) * uint(DIM), f, uint(DIM), WIDTH(DIM), wa, wb);
      acc[r] += dot(wa, xa) + dot(wb, xb);
    }
  }
  float mine[CLS_ROWS / 8];
  for (uint r = 0u; r < uint(CLS_ROWS); r++) {
    if (r0 + r >= uint(VOCAB)) break;
    float z = subgroupAdd(acc[r]);
    if (l == r % 8u) mine[r / 8u] = z;
  }
  // Lane l: rows r0 + l, r0 + l + 8, ... in order (strict >: its lowest index on ties).
  float top = neg_inf();
  int arg = 0x7fffffff;
  for (uint j = 0u; j < uint(CLS_ROWS / 8); j++) {
    uint r = r0 + l + 8u * j;
    if (r >= uint(VOCAB)) break;
    logits.v[r] = mine[j];
    if (mine[j] > top) top = mine[j], arg = int(r);
  }
  float mx = subgroupMax(top);
  int at = subgroupMin(top == mx ? arg : 0x7fffffff);
  if (at == 0x7fffffff) at = int(r0); // every logit -inf or NaN: the group's first row, as kernels.c
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
