/* The C decoder a user compares with: the llama2 forward pass written the way a hand-tuned single
 * file is, built with -Ofast -march=native (so the compiler reassociates and vectorises the plain
 * dot-product loops for this CPU), and once more with -fopenmp, where every matrix product is an
 * `omp parallel for` over its output rows and the attention an `omp parallel for` over its heads.
 * Those are the builds llama2.c calls `runfast` and `runomp`; this file is written here against the
 * checkpoint layout of models/llama2 (llama2_weights_t), not taken from there.
 *
 * Decodes the generated models of `hcq demo` greedily from BOS and prints tokens/s rows
 * (bench/rows.h); the note says whether the tokens equal the plain C reference's
 * (tests/llama2_reference.h): -Ofast sums in another order, so on a near tie they may not.
 *
 *   decoder_fast [STEPS] [REPS]                       (defaults 256 and 3)
 */
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "llama2.h"
#include "rows.h"

/* decoder_ref_tokens.c, built with the project's flags: the plain reference's greedy tokens. */
int decoder_ref_tokens(const llama2_checkpoint_t *ck, int n, int *out);

typedef struct run_state {
  float *x, *xb, *xb2, *hb, *hb2, *q, *att, *logits, *kcache, *vcache;
} run_state_t;

static void state_free(run_state_t *s) {
  float *all[] = {s->x, s->xb,  s->xb2,    s->hb,     s->hb2,
                  s->q, s->att, s->logits, s->kcache, s->vcache};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) free(all[i]);
}

static int state_init(run_state_t *s, const llama2_config_t *c) {
  size_t kv = (size_t)llama2_kv_dim(c), cache = (size_t)c->n_layers * (size_t)c->seq_len * kv;
  s->x = calloc((size_t)c->dim, 4);
  s->xb = calloc((size_t)c->dim, 4);
  s->xb2 = calloc((size_t)c->dim, 4);
  s->hb = calloc((size_t)c->hidden_dim, 4);
  s->hb2 = calloc((size_t)c->hidden_dim, 4);
  s->q = calloc((size_t)c->dim, 4);
  s->att = calloc((size_t)c->n_heads * (size_t)c->seq_len, 4);
  s->logits = calloc((size_t)c->vocab_size, 4);
  s->kcache = calloc(cache, 4);
  s->vcache = calloc(cache, 4);
  return s->x && s->xb && s->xb2 && s->hb && s->hb2 && s->q && s->att && s->logits && s->kcache &&
                 s->vcache
             ? 0
             : -1;
}

static void rms_norm(float *out, const float *in, const float *g, int n) {
  float ss = 0;
  for (int i = 0; i < n; i++) ss += in[i] * in[i];
  float k = 1.0f / sqrtf(ss / (float)n + 1e-5f);
  for (int i = 0; i < n; i++) out[i] = g[i] * (k * in[i]);
}

/* y (rows) = W (rows x n) x (n): one plain loop per row, the row loop shared between threads. */
static void mat_vec(float *restrict y, const float *restrict x, const float *restrict W, int n,
                    int rows) {
#ifdef _OPENMP
#pragma omp parallel for
#endif
  for (int r = 0; r < rows; r++) {
    const float *row = W + (size_t)r * (size_t)n;
    float acc = 0;
    for (int j = 0; j < n; j++) acc += row[j] * x[j];
    y[r] = acc;
  }
}

static void soft_max(float *v, int n) {
  float top = v[0];
  for (int i = 1; i < n; i++) top = v[i] > top ? v[i] : top;
  float total = 0;
  for (int i = 0; i < n; i++) {
    v[i] = expf(v[i] - top);
    total += v[i];
  }
  float inv = 1.0f / total;
  for (int i = 0; i < n; i++) v[i] *= inv;
}

static const float *forward(run_state_t *s, const llama2_config_t *c, const llama2_weights_t *w,
                            int token, int pos) {
  const int dim = c->dim, hid = c->hidden_dim, hs = llama2_head_size(c), kvd = llama2_kv_dim(c);
  const int group = c->n_heads / c->n_kv_heads;
  const size_t D = (size_t)dim, H = (size_t)hid, KV = (size_t)kvd, S = (size_t)c->seq_len;
  memcpy(s->x, w->token_embedding + (size_t)token * D, D * 4);
  for (int l = 0; l < c->n_layers; l++) {
    const size_t L = (size_t)l;
    float *kc = s->kcache + L * S * KV, *vc = s->vcache + L * S * KV;
    float *k = kc + (size_t)pos * KV, *v = vc + (size_t)pos * KV;
    rms_norm(s->xb, s->x, w->rms_att + L * D, dim);
    mat_vec(s->q, s->xb, w->wq + L * D * D, dim, dim);
    mat_vec(k, s->xb, w->wk + L * D * KV, dim, kvd);
    mat_vec(v, s->xb, w->wv + L * D * KV, dim, kvd);
    /* Rotary embedding: each (even, odd) pair of q, and of k while inside kv_dim. */
    for (int i = 0; i < dim; i += 2) {
      float theta = (float)pos / powf(10000.0f, (float)(i % hs) / (float)hs);
      float cs = cosf(theta), sn = sinf(theta);
      float a = s->q[i], b = s->q[i + 1];
      s->q[i] = a * cs - b * sn;
      s->q[i + 1] = a * sn + b * cs;
      if (i < kvd) {
        a = k[i], b = k[i + 1];
        k[i] = a * cs - b * sn;
        k[i + 1] = a * sn + b * cs;
      }
    }
    const float scale = 1.0f / sqrtf((float)hs);
#ifdef _OPENMP
#pragma omp parallel for
#endif
    for (int h = 0; h < c->n_heads; h++) {
      const float *qh = s->q + (size_t)h * (size_t)hs;
      const size_t off = (size_t)(h / group) * (size_t)hs;
      float *att = s->att + (size_t)h * S, *out = s->xb + (size_t)h * (size_t)hs;
      for (int t = 0; t <= pos; t++) {
        const float *kt = kc + (size_t)t * KV + off;
        float d = 0;
        for (int i = 0; i < hs; i++) d += qh[i] * kt[i];
        att[t] = d * scale;
      }
      soft_max(att, pos + 1);
      for (int i = 0; i < hs; i++) out[i] = 0;
      for (int t = 0; t <= pos; t++) {
        const float *vt = vc + (size_t)t * KV + off;
        const float a = att[t];
        for (int i = 0; i < hs; i++) out[i] += a * vt[i];
      }
    }
    mat_vec(s->xb2, s->xb, w->wo + L * D * D, dim, dim);
    for (int i = 0; i < dim; i++) s->x[i] += s->xb2[i];
    rms_norm(s->xb, s->x, w->rms_ffn + L * D, dim);
    mat_vec(s->hb, s->xb, w->w1 + L * H * D, dim, hid);
    mat_vec(s->hb2, s->xb, w->w3 + L * H * D, dim, hid);
    for (int i = 0; i < hid; i++) {
      float g = s->hb[i];
      s->hb[i] = g / (1.0f + expf(-g)) * s->hb2[i];
    }
    mat_vec(s->xb, s->hb, w->w2 + L * D * H, hid, dim);
    for (int i = 0; i < dim; i++) s->x[i] += s->xb[i];
  }
  rms_norm(s->x, s->x, w->rms_final, dim);
  mat_vec(s->logits, s->x, w->classifier, dim, c->vocab_size);
  return s->logits;
}

static int arg_max(const float *v, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (v[i] > v[best]) best = i;
  return best;
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 256, reps = argc > 2 ? atoi(argv[2]) : 3;
  if (reps < 1 || reps > 50 || steps < 1) return 2;
#ifdef _OPENMP
  const char *who = "C decoder -Ofast, OpenMP parallel for";
  char threads[64];
  snprintf(threads, sizeof(threads), "%d threads, rows of every matrix product and heads",
           omp_get_max_threads());
  const char *how = threads;
#else
  const char *who = "C decoder -Ofast, one thread";
  const char *how = "plain loops, -Ofast -march=native";
#endif
  const llama2_shape_t shapes[2] = {LLAMA2_SHAPE_SMALL, LLAMA2_SHAPE_15M};
  const char *names[2] = {"decoder small", "decoder 15m"};
  for (int sh = 0; sh < 2; sh++) {
    llama2_checkpoint_t ck;
    hcq_status_t st = llama2_checkpoint_generate(shapes[sh], 42, &ck);
    if (st) {
      fprintf(stderr, "decoder_fast: %s\n", hcq_status_message(st));
      return 1;
    }
    const llama2_config_t *c = &ck.config;
    int n = steps < c->seq_len ? steps : c->seq_len;
    int *tokens = calloc((size_t)n, sizeof(int)), *first = calloc((size_t)n, sizeof(int));
    run_state_t s = {0};
    if (!tokens || !first || state_init(&s, c)) {
      fprintf(stderr, "decoder_fast: out of memory\n");
      return 1;
    }
    double rate[50];
    for (int r = 0; r <= reps; r++) { /* run 0 warms up */
      double t0 = bench_now_s();
      int token = 1;
      for (int p = 0; p < n; p++)
        tokens[p] = token = arg_max(forward(&s, c, &ck.weights, token, p), c->vocab_size);
      if (r) rate[r - 1] = n / (bench_now_s() - t0);
      if (r == 0)
        memcpy(first, tokens, (size_t)n * sizeof(int));
      else if (memcmp(first, tokens, (size_t)n * sizeof(int)))
        fprintf(stderr, "decoder_fast: runs disagree\n");
    }
    /* The plain reference's tokens, outside the timing: does -Ofast decode the same text? */
    int *ref = calloc((size_t)n, sizeof(int));
    bool same =
        ref && decoder_ref_tokens(&ck, n, ref) == 0 && !memcmp(ref, first, (size_t)n * sizeof(int));
    free(ref);
    char note[256];
    snprintf(note, sizeof(note), "%s (%d steps); tokens %s the C reference's", how, n,
             same ? "equal" : "DIFFER FROM");
    emit_row(names[sh], who, bench_median(rate, reps), "tok/s", note);
    state_free(&s);
    free(tokens);
    free(first);
    llama2_checkpoint_free(&ck);
  }
  return 0;
}
