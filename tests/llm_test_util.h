/* Helpers shared by the LLM decoder's suites (tests/test_llm.c on CPU, tests/test_llm_gpu.c on the
 * GPU kinds): tiny generated models, teacher forcing, logits compared with the reference, and the
 * real model. Static inline: each suite uses what it needs. */
#ifndef HCQ_TESTS_LLM_TEST_UTIL_H
#define HCQ_TESTS_LLM_TEST_UTIL_H

#include <limits.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llm.h"
#include "llm_reference.h"
#include "llm_tiny.h"
#include "test_util.h"

/* HCQ_TEST_TMP/llm_PID_NAME.gguf: a file of this process alone. */
static inline void tmp_path(char *out, size_t size, const char *name) {
  const char *dir = getenv("HCQ_TEST_TMP");
  if (!dir || !*dir) dir = "/tmp";
  mkdir(dir, 0700);
  snprintf(out, size, "%s/llm_%d_%s.gguf", dir, (int)getpid(), name);
}

static inline llm_model_t *tiny_model(const tiny_spec_t *s, const char *name) {
  char path[PATH_MAX];
  tmp_path(path, sizeof(path), name);
  OK(tiny_write(s, path));
  llm_model_t *m;
  OK(llm_model_open(path, &m));
  unlink(path); /* the mapping stays */
  return m;
}

static inline llm_decoder_t *decoder_on(const llm_model_t *m, hcq_device_kind_t kind, int devices,
                                        int ctx, int max_batch) {
  llm_decoder_t *d;
  OK(llm_decoder_create(m,
                        &(llm_decoder_options_t){
                            .kind = kind, .devices = devices, .ctx = ctx, .max_batch = max_batch},
                        &d));
  return d;
}

/* The layers split over two devices of kind give the tokens and the last logits of one, bit for bit
 * (steps greedy tokens after a 6-token prompt, graph replays). */
static inline void two_devices_match_one(hcq_device_kind_t kind, int steps) {
  tiny_spec_t s = tiny_uniform_spec(64, 96, 3, 4, 2, 97, GGML_TYPE_Q4_1, false, 41);
  llm_model_t *m = tiny_model(&s, "two");
  int32_t prompt[6] = {5, 10, 15, 20, 25, 30};
  llm_generate_result_t r[2];
  float lg[2][97];
  for (int devices = 1; devices <= 2; devices++) {
    llm_decoder_t *d = decoder_on(m, kind, devices, 64, 16);
    OK(llm_generate(d, prompt, 6, &(llm_generate_options_t){.steps = steps, .graph = true},
                    &r[devices - 1]));
    OK(llm_decoder_logits(d, lg[devices - 1]));
    OK(llm_decoder_destroy(d));
  }
  cr_assert_eq(r[0].n, r[1].n);
  cr_assert(!memcmp(r[0].ids, r[1].ids, (size_t)r[0].n * 4), "two devices choose other tokens");
  cr_assert(!memcmp(lg[0], lg[1], sizeof(lg[0])), "two devices give other logits");
  free(r[0].ids), free(r[1].ids);
  llm_model_close(m);
}

/* Logits after each of the n tokens, fed one step at a time (teacher forcing): out[p * vocab ...].
 */
static inline void forced(llm_decoder_t *d, const int32_t *tokens, int n, bool graph, float *out) {
  int vocab = llm_decoder_config(d)->vocab;
  for (int p = 0; p < n; p++) {
    OK(llm_decoder_set_tokens(d, p, &tokens[p], 1));
    OK(llm_decoder_step(d, p, graph));
    OK(llm_decoder_logits(d, out + (size_t)p * vocab));
  }
}

static inline void random_tokens(int32_t *t, int n, int vocab, uint64_t seed) {
  for (int i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    t[i] = (int32_t)((seed >> 33) % (uint64_t)vocab);
  }
}

/* Every position: |ours - reference| <= tol for every logit (a NaN fails), and the same argmax
 * unless the reference's own top two are within near of each other. */
static inline void compare_logits(const float *got, const float *want, int n, int vocab, float tol,
                                  float near, const char *what) {
  for (int p = 0; p < n; p++) {
    const float *g = got + (size_t)p * vocab, *w = want + (size_t)p * vocab;
    float worst = 0;
    int at = 0;
    for (int i = 0; i < vocab; i++)
      if (!(fabsf(g[i] - w[i]) <= worst)) worst = fabsf(g[i] - w[i]), at = i;
    cr_assert(worst <= tol,
              "%s: position %d: logit %d is %.6f, the reference's %.6f (off by %.3g > %.3g)", what,
              p, at, g[at], w[at], worst, tol);
    int ga = llm_ref_argmax(g, vocab), wa = llm_ref_argmax(w, vocab);
    cr_assert(ga == wa || w[wa] - w[ga] <= near,
              "%s: position %d: argmax %d, the reference's %d (%.5f vs %.5f)", what, p, ga, wa,
              w[ga], w[wa]);
  }
}

/* The reference's logits after each of the n tokens, fed one at a time: out[p * vocab ...]. */
static inline void ref_forced(const llm_model_t *m, const int32_t *tokens, int n, bool quantize,
                              float *out) {
  llm_ref_t r;
  cr_assert(llm_ref_init(&r, m, n + 1, quantize));
  for (int p = 0; p < n; p++)
    memcpy(out + (size_t)p * r.c.vocab, llm_ref_step(&r, tokens[p], p), (size_t)r.c.vocab * 4);
  llm_ref_free(&r);
}

/* The decoder's logits (teacher-forced, graph replays) against the reference's (its inputs rounded
 * to 8 bits when quantize), by compare_logits. */
static inline void forced_matches_reference(llm_decoder_t *d, const llm_model_t *m,
                                            const int32_t *tokens, int n, bool quantize, float tol,
                                            float near, const char *name) {
  int vocab = llm_decoder_config(d)->vocab;
  float *got = malloc((size_t)n * vocab * 4), *want = malloc((size_t)n * vocab * 4);
  cr_assert(got && want);
  forced(d, tokens, n, true, got);
  ref_forced(m, tokens, n, quantize, want);
  compare_logits(got, want, n, vocab, tol, near, name);
  free(got), free(want);
}

/* Greedy generation of steps tokens after the nprompt-token prompt (graph replays) chooses the
 * float reference's argmax at every step. */
static inline void greedy_matches_reference(llm_decoder_t *d, const llm_model_t *m,
                                            const int32_t *prompt, int nprompt, int steps,
                                            const char *name) {
  llm_generate_result_t g;
  OK(llm_generate(d, prompt, nprompt, &(llm_generate_options_t){.steps = steps, .graph = true},
                  &g));
  llm_ref_t r;
  cr_assert(llm_ref_init(&r, m, 64, false));
  const float *lg = NULL;
  for (int p = 0; p < nprompt; p++) lg = llm_ref_step(&r, prompt[p], p);
  for (int i = 0; i < g.n; i++) {
    int want_tok = llm_ref_argmax(lg, r.c.vocab);
    cr_assert_eq(g.ids[i], want_tok, "%s: token %d is %d, the reference's %d", name, i, g.ids[i],
                 want_tok);
    lg = llm_ref_step(&r, want_tok, nprompt + i);
  }
  cr_assert_eq(g.n, steps);
  llm_ref_free(&r);
  free(g.ids);
}

/* Every layout in one model, as a file mixing types may have. */
static inline tiny_spec_t mixed_spec(void) {
  tiny_spec_t s = tiny_uniform_spec(64, 96, 2, 4, 1, 97, GGML_TYPE_Q4_1, false, 24);
  s.types[TINY_EMB] = GGML_TYPE_Q8_0;
  s.types[TINY_K] = GGML_TYPE_Q4_0;
  s.types[TINY_V] = GGML_TYPE_Q8_0;
  s.types[TINY_O] = GGML_TYPE_F16;
  s.types[TINY_GATE] = GGML_TYPE_Q8_0;
  s.types[TINY_DOWN] = GGML_TYPE_F32;
  s.types[TINY_OUT] = GGML_TYPE_Q4_0;
  return s;
}

/* SmolLM2 (HCQ_LLM_MODEL, else the default model path); skips, saying why, when it is absent. */
static inline llm_model_t *real_model(void) {
  char path[PATH_MAX];
  const char *env = getenv("HCQ_LLM_MODEL");
  if (env && *env)
    snprintf(path, sizeof(path), "%s", env);
  else {
    hcq_status_t st = llm_default_model_path(path, sizeof(path));
    if (st) {
      char msg[PATH_MAX + 256];
      snprintf(msg, sizeof(msg), "%s", hcq_status_message(st));
      hcq_status_destroy(st);
      cr_skip_test("%s: the llm_model test fetches it (needs PyPI)", msg);
    }
  }
  llm_model_t *m;
  OK(llm_model_open(path, &m));
  return m;
}

/* On a decoder of kind over devices: the logits of the n tokens fed step by step eagerly (eager, n
 * x vocab; may be NULL) and as graph replays (graph; may be NULL), and of the last token after one
 * prompt pass (pass, vocab floats). */
static inline void eager_graph_pass(const llm_model_t *m, hcq_device_kind_t kind, int devices,
                                    const int32_t *toks, int n, float *eager, float *graph,
                                    float *pass) {
  llm_decoder_t *d = decoder_on(m, kind, devices, 64, 32);
  if (eager) forced(d, toks, n, false, eager);
  if (graph) forced(d, toks, n, true, graph);
  OK(llm_decoder_set_tokens(d, 0, toks, n));
  OK(llm_decoder_prefill(d, 0, n, true));
  OK(llm_decoder_logits(d, pass));
  OK(llm_decoder_destroy(d));
}

/* The architectures' tiny models (test_llm_arch.c on CPU, test_llm_gpu.c on the GPU kinds): 7
 * layers so that gemma3's sixth is a global one, 4 heads of 16 over 2 KV heads (gemma3: of 24, q 96
 * wide for an x of 64, a window of 8, a tied classifier); llama with llama 3's rope_freqs. */
static inline tiny_spec_t arch_spec(const char *arch, ggml_type_t type, uint64_t seed) {
  tiny_spec_t s = tiny_uniform_spec(64, 96, 7, 4, 2, 60, type, false, seed);
  s.arch = arch;
  if (!strcmp(arch, "gemma3")) s.head_dim = 24, s.window = 8, s.tied = true;
  if (!strcmp(arch, "llama")) s.rope_freqs = true, s.rope_base = 500000.0f;
  return s;
}

/* Float weights on kind: within 1e-4 of the reference over 40 positions (past gemma3's window), the
 * same greedy tokens. */
static inline void arch_matches_reference(hcq_device_kind_t kind, const char *arch) {
  tiny_spec_t s = arch_spec(arch, GGML_TYPE_F32, 71);
  llm_model_t *m = tiny_model(&s, arch);
  llm_decoder_t *d = decoder_on(m, kind, 1, 64, 16);
  enum { N = 40 };
  int32_t toks[N];
  random_tokens(toks, N, s.vocab, 9);
  forced_matches_reference(d, m, toks, N, false, 1e-4f, 0, arch);
  greedy_matches_reference(d, m, toks, 3, 30, arch);
  OK(llm_decoder_destroy(d));
  llm_model_close(m);
}

#endif
