/* Twins of examples/llama2/kernels.metal for the Metal stand-in, #included by fake_metal.c. Each
 * runs a whole threadgroup when called for its thread 0 (the others return): its threads in turn,
 * phase by phase where the MSL has a barrier, with the MSL's float32 arithmetic in the MSL's order,
 * so a dot product is one running sum over j and a group's best logit is the first of its largest
 * in thread order. The model's shape is compiled into the MSL by #defines; the stand-in reads them
 * from the library's source (l2_read_shape) and hands them to the twins in grid_t.shape. */
enum { L2_DIM, L2_HIDDEN, L2_KV_DIM, L2_N_HEADS, L2_KV_MUL, L2_HEAD_SIZE, L2_VOCAB, L2_SEQ_LEN, L2_ATT_CHUNK,
       L2_MAX_CHUNKS, L2_GROUP, L2_COUNT };
static const char *const l2_names[L2_COUNT] = {"DIM",     "HIDDEN",   "KV_DIM",    "N_HEADS",    "KV_MUL", "HEAD_SIZE",
                                               "VOCAB",   "SEQ_LEN",  "ATT_CHUNK", "MAX_CHUNKS", "GROUP"};

/* True when src #defines every shape name as a positive integer (into shape). */
static bool l2_read_shape(const char *src, int32_t *shape) {
  for (int k = 0; k < L2_COUNT; k++) {
    shape[k] = 0;
    for (const char *p = strstr(src, "#define "); p; p = strstr(p + 1, "#define ")) {
      const char *n = p + 8;
      size_t len = strlen(l2_names[k]);
      if (!strncmp(n, l2_names[k], len) && n[len] == ' ') {
        shape[k] = (int32_t)atoi(n + len + 1);
        break;
      }
    }
    if (shape[k] <= 0) return false;
  }
  return true;
}

#define L2_LOW (-FLT_MAX) /* kernels.metal's sentinel */
#define FB(i) ((float *)b[(i)])
#define IB(i) ((int32_t *)b[(i)])
/* The threadgroup's threads, from its thread 0's call. */
#define GROUP_THREADS(t)                                     \
  if (g->tid[0] || g->tid[1] || g->tid[2] || !g->shape) return; \
  const int32_t *S = g->shape;                               \
  (void)S;                                                   \
  for (unsigned t = 0; t < g->ntid[0]; t++)
#define ROW(t) ((int)(g->tg[0] * g->ntid[0] + (t)))

static float l2_dot(const float *w, const float *v, int n) {
  float s = 0.0f;
  for (int j = 0; j < n; j++) s += w[j] * v[j];
  return s;
}
/* load_norm: each thread's sum is the same one, so one pass computes what every thread does. */
static float *l2_norm(const float *x, const float *w, int dim) {
  float *xn = malloc((size_t)dim * sizeof(float));
  if (!xn) abort();
  float ss = 0.0f;
  for (int j = 0; j < dim; j++) ss += x[j] * x[j];
  float inv = 1.0f / sqrtf(ss / (float)dim + 1e-5f);
  for (int j = 0; j < dim; j++) xn[j] = w[j] * (inv * x[j]);
  return xn;
}
static void l2_rope(float *a, float *c, int i, const float *rot, int hs) {
  float co = rot[i % hs], si = rot[i % hs + 1], a0 = *a, c0 = *c;
  *a = a0 * co - c0 * si;
  *c = a0 * si + c0 * co;
}

static void t_llama_embed(void *const *b, const int32_t *v, const grid_t *g) {
  GROUP_THREADS(t) {
    int i = ROW(t);
    if (i >= S[L2_DIM]) continue;
    int tok = IB(1)[v[0]];
    if (tok < 0 || tok >= S[L2_VOCAB]) tok = 0;
    FB(0)[i] = FB(2)[(size_t)tok * (size_t)S[L2_DIM] + (size_t)i];
  }
}
static void t_llama_qkv(void *const *b, const int32_t *v, const grid_t *g) {
  if (g->tid[0] || !g->shape) return;
  const int32_t *S = g->shape;
  int dim = S[L2_DIM], kvd = S[L2_KV_DIM], hs = S[L2_HEAD_SIZE], pos = v[0];
  float *q = FB(0), *krow = FB(1) + (size_t)pos * (size_t)kvd, *vrow = FB(2) + (size_t)pos * (size_t)kvd;
  const float *wq = FB(5), *wk = FB(6), *wv = FB(7), *rot = FB(8) + (size_t)pos * (size_t)hs;
  float *xn = l2_norm(FB(3), FB(4), dim);
  for (unsigned t = 0; t < g->ntid[0]; t++) {
    int r = 2 * ROW(t);
    if (r >= dim + 2 * kvd) continue;
    if (r < dim) {
      float a = l2_dot(wq + (size_t)r * dim, xn, dim), c = l2_dot(wq + (size_t)(r + 1) * dim, xn, dim);
      l2_rope(&a, &c, r, rot, hs);
      q[r] = a, q[r + 1] = c;
    } else if (r < dim + kvd) {
      int i = r - dim;
      float a = l2_dot(wk + (size_t)i * dim, xn, dim), c = l2_dot(wk + (size_t)(i + 1) * dim, xn, dim);
      l2_rope(&a, &c, i, rot, hs);
      krow[i] = a, krow[i + 1] = c;
    } else {
      int i = r - dim - kvd;
      vrow[i] = l2_dot(wv + (size_t)i * dim, xn, dim);
      vrow[i + 1] = l2_dot(wv + (size_t)(i + 1) * dim, xn, dim);
    }
  }
  free(xn);
}
static void t_llama_attn_part(void *const *b, const int32_t *v, const grid_t *g) {
  if (g->tid[0] || !g->shape) return;
  const int32_t *S = g->shape;
  int hs = S[L2_HEAD_SIZE], kvd = S[L2_KV_DIM], chunk = S[L2_ATT_CHUNK], pos = v[0];
  int h = (int)g->tg[0], c = (int)g->tg[1], t0 = c * chunk, t1 = t0 + chunk < pos + 1 ? t0 + chunk : pos + 1;
  const float *qh = FB(1) + (size_t)h * (size_t)hs, *kc = FB(2), *vc = FB(3);
  int kv = (h / S[L2_KV_MUL]) * hs;
  float *dst = FB(0) + ((size_t)h * (size_t)S[L2_MAX_CHUNKS] + (size_t)c) * (size_t)(hs + 2);
  float *score = malloc((size_t)chunk * sizeof(float));
  if (!score) abort();
  for (unsigned i = 0; i < g->ntid[0]; i++) {
    float m = L2_LOW, scale = 1.0f / sqrtf((float)hs);
    for (int t = t0; t < t1; t++) {
      float s = l2_dot(qh, kc + (size_t)t * (size_t)kvd + (size_t)kv, hs) * scale;
      score[t - t0] = s;
      if (s > m) m = s;
    }
    float sum = 0.0f, o = 0.0f;
    for (int t = t0; t < t1; t++) {
      float e = expf(score[t - t0] - m);
      sum += e;
      o += e * vc[(size_t)t * (size_t)kvd + (size_t)kv + i];
    }
    if (i == 0) dst[0] = m, dst[1] = sum;
    dst[2 + i] = o;
  }
  free(score);
}
static void t_llama_attn_combine(void *const *b, const int32_t *v, const grid_t *g) {
  if (g->tid[0] || !g->shape) return;
  const int32_t *S = g->shape;
  int hs = S[L2_HEAD_SIZE], h = (int)g->tg[0], chunks = v[0] / S[L2_ATT_CHUNK] + 1;
  const float *p = FB(1) + (size_t)h * (size_t)S[L2_MAX_CHUNKS] * (size_t)(hs + 2);
  for (unsigned i = 0; i < g->ntid[0]; i++) {
    float m = L2_LOW;
    for (int c = 0; c < chunks; c++)
      if (p[c * (hs + 2)] > m) m = p[c * (hs + 2)];
    float total = 0.0f, acc = 0.0f;
    for (int c = 0; c < chunks; c++) {
      float w = expf(p[c * (hs + 2)] - m);
      total += w * p[c * (hs + 2) + 1];
      acc += w * p[c * (hs + 2) + 2 + (int)i];
    }
    FB(0)[h * hs + (int)i] = acc / total;
  }
}
static void l2_residual(void *const *b, const grid_t *g, bool down) {
  GROUP_THREADS(t) {
    int r = ROW(t), n = down ? S[L2_HIDDEN] : S[L2_DIM];
    if (r < S[L2_DIM]) FB(0)[r] += l2_dot(FB(2) + (size_t)r * (size_t)n, FB(1), n);
  }
}
static void t_llama_wo(void *const *b, const int32_t *v, const grid_t *g) { (void)v, l2_residual(b, g, false); }
static void t_llama_ffn_down(void *const *b, const int32_t *v, const grid_t *g) { (void)v, l2_residual(b, g, true); }
static void t_llama_ffn_up(void *const *b, const int32_t *v, const grid_t *g) {
  (void)v;
  if (g->tid[0] || !g->shape) return;
  const int32_t *S = g->shape;
  int dim = S[L2_DIM];
  float *xn = l2_norm(FB(1), FB(2), dim);
  for (unsigned t = 0; t < g->ntid[0]; t++) {
    int r = ROW(t);
    if (r >= S[L2_HIDDEN]) continue;
    float a = l2_dot(FB(3) + (size_t)r * dim, xn, dim), c = l2_dot(FB(4) + (size_t)r * dim, xn, dim);
    FB(0)[r] = a * (1.0f / (1.0f + expf(-a))) * c;
  }
  free(xn);
}
static void t_llama_classify(void *const *b, const int32_t *v, const grid_t *g) {
  (void)v;
  if (g->tid[0] || !g->shape) return;
  const int32_t *S = g->shape;
  int dim = S[L2_DIM];
  float *xn = l2_norm(FB(2), FB(3), dim), top = L2_LOW;
  int32_t arg = ROW(0);
  for (unsigned t = 0; t < g->ntid[0]; t++) { /* thread 0's scan after the barrier, in thread order */
    int r = ROW(t);
    float z = L2_LOW;
    if (r < S[L2_VOCAB]) FB(0)[r] = z = l2_dot(FB(4) + (size_t)r * dim, xn, dim);
    if (z > top) top = z, arg = r;
  }
  memcpy(&IB(1)[2 * g->tg[0]], &top, 4);
  IB(1)[2 * g->tg[0] + 1] = arg;
  free(xn);
}
static void t_llama_argmax(void *const *b, const int32_t *v, const grid_t *g) {
  if (g->tid[0] || g->tg[0]) return; /* launched as one thread */
  float top = L2_LOW;
  int32_t arg = 0;
  for (int32_t k = 0; k < v[1]; k++) {
    float z;
    memcpy(&z, &IB(1)[2 * k], 4);
    if (z > top) top = z, arg = IB(1)[2 * k + 1];
  }
  IB(0)[v[0] + 1] = arg;
}
#undef GROUP_THREADS
#undef ROW
#undef FB
#undef IB

/* For g_twins in fake_metal.c: these need a shape (pipeline creation refuses a library without). */
#define LLAMA2_TWINS                                                                                         \
  {"llama_embed", 0, t_llama_embed}, {"llama_qkv", 0, t_llama_qkv}, {"llama_attn_part", 0, t_llama_attn_part}, \
      {"llama_attn_combine", 0, t_llama_attn_combine}, {"llama_wo", 0, t_llama_wo},                          \
      {"llama_ffn_down", 0, t_llama_ffn_down}, {"llama_ffn_up", 0, t_llama_ffn_up},                          \
      {"llama_classify", 0, t_llama_classify}, {"llama_argmax", 0, t_llama_argmax},
