/* Twins of models/minilm/kernels.cu for the stand-in driver, one call per block, included by
 * fake_cuda.c. The model's shape is compiled into the CUDA C; these read it from the module, which
 * names it in the entry minilm_shape_HIDDEN_HEADS_HEAD_DIM_INTER_VOCAB_MAXLEN_GROUP_COLS_EPSBITS.
 * The sums run as one thread of the CUDA C would run them, not in its tree order: results match
 * within rounding, and every launch of a twin gives the same bits. */
enum { M_HIDDEN, M_HEADS, M_HEAD_DIM, M_INTER, M_VOCAB, M_MAXLEN, M_GROUP, M_COLS, M_EPS, M_COUNT };
_Static_assert((int)M_COUNT <= (int)LT_COUNT, "a MiniLM shape fits the llama2 shape's slots");

static float m_gelu(float x) {
  float z = x * 0.70710678f, az = fabsf(z);
  float t = 1.0f / (1.0f + 0.3275911f * az);
  float poly =
      t * (0.254829592f +
           t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  float e = 1.0f - poly * expf(-az * az);
  return 0.5f * x * (1.0f + (z < 0.0f ? -e : e));
}
static void m_layernorm(float *dst, const float *row, const float *w, const float *b,
                        const int32_t *S) {
  int h = S[M_HIDDEN];
  float eps, mean = 0, var = 0;
  memcpy(&eps, &S[M_EPS], 4);
  for (int j = 0; j < h; j++) mean += row[j];
  mean /= (float)h;
  for (int j = 0; j < h; j++) var += (row[j] - mean) * (row[j] - mean);
  float inv = 1.0f / sqrtf(var / (float)h + eps);
  for (int j = 0; j < h; j++) dst[j] = (row[j] - mean) * inv * w[j] + b[j];
}
static float m_linear(const float *in, const float *wt, const float *bias, int t, int j, int K,
                      int N) {
  float s = bias[j];
  for (int k = 0; k < K; k++) s += in[(size_t)t * K + k] * wt[(size_t)k * N + j];
  return s;
}
static float *m_row(const int32_t *S) {
  float *r = malloc((size_t)S[M_HIDDEN] * sizeof(float));
  if (!r) abort();
  return r;
}
static void m_embed(const uint8_t *p, const int32_t *S, dim3_t b, dim3_t d) {
  (void)d;
  int h = S[M_HIDDEN], t = (int)b.x, id = PI(1)[t];
  if (id < 0 || id >= S[M_VOCAB]) id = 0;
  float *row = m_row(S);
  for (int j = 0; j < h; j++)
    row[j] = PF(2)[(size_t)id * h + j] + PF(3)[(size_t)t * h + j] + PF(4)[j];
  m_layernorm(PF(0) + (size_t)t * h, row, PF(5), PF(6), S);
  free(row);
}
static void m_qkv(const uint8_t *p, const int32_t *S, dim3_t b, dim3_t d) {
  int h = S[M_HIDDEN], t = (int)b.y;
  for (uint32_t x = 0; x < d.x; x++) {
    int j = (int)(b.x * d.x + x);
    PF(0)[(size_t)t * 3 * h + j] = m_linear(PF(2), PF(3), PF(4), t, j, h, 3 * h);
  }
}
static void m_ffn_up(const uint8_t *p, const int32_t *S, dim3_t b, dim3_t d) {
  int h = S[M_HIDDEN], in = S[M_INTER], t = (int)b.y;
  for (uint32_t x = 0; x < d.x; x++) {
    int j = (int)(b.x * d.x + x);
    PF(0)[(size_t)t * in + j] = m_gelu(m_linear(PF(1), PF(2), PF(3), t, j, h, in));
  }
}
static void m_linear_ln(const uint8_t *p, const int32_t *S, dim3_t b, int K) {
  int h = S[M_HIDDEN], t = (int)b.x;
  float *row = m_row(S), *x = PF(0) + (size_t)t * h;
  for (int j = 0; j < h; j++) row[j] = x[j] + m_linear(PF(1), PF(2), PF(3), t, j, K, h);
  m_layernorm(x, row, PF(4), PF(5), S);
  free(row);
}
static void m_proj_ln(const uint8_t *p, const int32_t *S, dim3_t b, dim3_t d) {
  (void)d;
  m_linear_ln(p, S, b, S[M_HIDDEN]);
}
static void m_down_ln(const uint8_t *p, const int32_t *S, dim3_t b, dim3_t d) {
  (void)d;
  m_linear_ln(p, S, b, S[M_INTER]);
}
static void m_attn(const uint8_t *p, const int32_t *S, dim3_t b, dim3_t d) {
  (void)d;
  int h = S[M_HIDDEN], hd = S[M_HEAD_DIM], n = p32(p, 3, 0), head = (int)b.x, t = (int)b.y,
      stride = 3 * h;
  const float *qkv = PF(1), *q = qkv + (size_t)t * stride + head * hd;
  float *pr = malloc((size_t)n * sizeof(float)), m = -INFINITY, sum = 0,
        scale = 1.0f / sqrtf((float)hd);
  if (!pr) abort();
  for (int s = 0; s < n; s++) {
    const float *k = qkv + (size_t)s * stride + h + head * hd;
    float dd = 0;
    for (int c = 0; c < hd; c++) dd += q[c] * k[c];
    pr[s] = dd * scale;
    m = fmaxf(m, pr[s]);
  }
  for (int s = 0; s < n; s++) sum += pr[s] = expf(pr[s] - m);
  for (int i = 0; i < hd; i++) {
    float acc = 0;
    for (int s = 0; s < n; s++) acc += pr[s] * qkv[(size_t)s * stride + 2 * h + head * hd + i];
    PF(0)[(size_t)t * h + head * hd + i] = acc / sum;
  }
  free(pr);
}
static void m_pool(const uint8_t *p, const int32_t *S, dim3_t b, dim3_t d) {
  (void)b, (void)d;
  int h = S[M_HIDDEN], n = p32(p, 2, 0);
  float *row = m_row(S), ss = 0;
  for (int j = 0; j < h; j++) {
    float a = 0;
    for (int t = 0; t < n; t++) a += PF(1)[(size_t)t * h + j];
    row[j] = a / (float)n;
    ss += row[j] * row[j];
  }
  float inv = 1.0f / fmaxf(sqrtf(ss), 1e-12f);
  for (int j = 0; j < h; j++) PF(0)[j] = row[j] * inv;
  free(row);
}
