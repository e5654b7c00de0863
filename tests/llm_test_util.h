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

/* Logits after each of the n tokens, fed one step at a time (teacher forcing): out[p * vocab ...]. */
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
static inline void compare_logits(const float *got, const float *want, int n, int vocab, float tol, float near,
                                  const char *what) {
  for (int p = 0; p < n; p++) {
    const float *g = got + (size_t)p * vocab, *w = want + (size_t)p * vocab;
    float worst = 0;
    int at = 0;
    for (int i = 0; i < vocab; i++)
      if (!(fabsf(g[i] - w[i]) <= worst)) worst = fabsf(g[i] - w[i]), at = i;
    cr_assert(worst <= tol, "%s: position %d: logit %d is %.6f, the reference's %.6f (off by %.3g > %.3g)", what, p, at, g[at],
              w[at], worst, tol);
    int ga = llm_ref_argmax(g, vocab), wa = llm_ref_argmax(w, vocab);
    cr_assert(ga == wa || w[wa] - w[ga] <= near, "%s: position %d: argmax %d, the reference's %d (%.5f vs %.5f)", what, p, ga,
              wa, w[ga], w[wa]);
  }
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
  if (env && *env) snprintf(path, sizeof(path), "%s", env);
  else {
    hcq_status_t st = llm_default_model_path(path, sizeof(path));
    if (st) {
      char msg[PATH_MAX + 256];
      snprintf(msg, sizeof(msg), "%s", hcq_status_message(st));
      hcq_status_free(st);
      cr_skip_test("%s: the llm_model test fetches it (needs PyPI)", msg);
    }
  }
  llm_model_t *m;
  OK(llm_model_open(path, &m));
  return m;
}

#endif
