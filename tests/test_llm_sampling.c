/* The decoder's sampler chain (models/llm/kernels.c sample(), llama.cpp's order: penalties, top-k,
 * top-p, min-p, temperature, the draw) against a host reference written from llama.cpp's formulas
 * (llama-sampling.cpp): the reference itself checked by hand on a 4-token vocabulary, then every
 * stage alone and all together on a tiny model, each token the reference's choice over the logits
 * the step left behind and the tokens before it. Greedy with penalties exact; the same seed the
 * same tokens; bad parameters refused. (The GPU kinds' llm_select against these CPU tokens:
 * tests/test_llm_gpu.c.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llm.h"
#include "llm_test_util.h"
#include "test_util.h"

enum { VOCAB = 97, PROMPT = 8, STEPS = 40, CTX = 64 };

static llm_model_t *g_model;
static llm_decoder_t *g_dec;

static void set_up(void) {
  tiny_spec_t s = tiny_uniform_spec(40, 72, 2, 5, 1, VOCAB, GGML_TYPE_F32, true, 51);
  g_model = tiny_model(&s, "sampling");
  g_dec = decoder_on(g_model, HCQ_DEVICE_CPU, 1, CTX, 16);
}
static void tear_down(void) {
  if (g_dec) OK(llm_decoder_destroy(g_dec));
  if (g_model) llm_model_close(g_model);
}

TestSuite(llm_sampling, .init = set_up, .fini = tear_down, .timeout = 240);

/* ---- the reference ---- */

typedef struct {
  float logit;
  int id;
} ref_cand_t;

static int ref_cmp(const void *pa, const void *pb) {
  const ref_cand_t *a = pa, *b = pb;
  if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

/* llama_sampler_penalties_apply: over the last penalty_last_n tokens, a token seen c times:
 * logit <= 0 ? logit * repeat : logit / repeat, then minus c * frequency + (c > 0) * presence. */
static void ref_penalize(float *l, int vocab, const llm_sampler_t *s, const int32_t *hist,
                         int nhist) {
  int n = s->penalty_last_n < nhist ? s->penalty_last_n : nhist;
  float repeat = s->repeat_penalty > 0 ? s->repeat_penalty : 1.0f;
  if (n <= 0) return;
  int *count = calloc((size_t)vocab, sizeof(int));
  cr_assert(count);
  for (int i = nhist - n; i < nhist; i++) count[hist[i]]++;
  for (int t = 0; t < vocab; t++) {
    if (!count[t]) continue;
    l[t] = l[t] <= 0 ? l[t] * repeat : l[t] / repeat;
    l[t] -= (float)count[t] * s->frequency_penalty + (float)(count[t] > 0) * s->presence_penalty;
  }
  free(count);
}

/* The candidates left after top-k, top-p and min-p (both at temperature 1), best first in c: how
 * many. */
static int ref_keep(const float *l, int vocab, const llm_sampler_t *s, ref_cand_t *c) {
  for (int i = 0; i < vocab; i++) c[i] = (ref_cand_t){l[i], i};
  qsort(c, (size_t)vocab, sizeof(*c), ref_cmp);
  int keep = s->top_k > 0 && s->top_k < vocab ? s->top_k : vocab;
  if (s->top_p < 1) {
    double total = 0, cum = 0;
    for (int i = 0; i < keep; i++) total += exp((double)c[i].logit - c[0].logit);
    for (int i = 0; i < keep; i++) {
      cum += exp((double)c[i].logit - c[0].logit) / total;
      if (cum >= s->top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (s->min_p > 0) {
    int i = 1;
    while (i < keep && c[i].logit >= c[0].logit + logf(s->min_p)) i++;
    keep = i;
  }
  return keep;
}

static double ref_uniform(uint64_t seed, uint64_t pos) { /* splitmix64, as kernels.c */
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (pos + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* The token the chain picks from logits after the nhist tokens of hist, at position pos. */
static int ref_sample(const float *logits, int vocab, const llm_sampler_t *s, const int32_t *hist,
                      int nhist, int pos) {
  float *l = malloc((size_t)vocab * sizeof(float));
  ref_cand_t *c = malloc((size_t)vocab * sizeof(*c));
  cr_assert(l && c);
  memcpy(l, logits, (size_t)vocab * sizeof(float));
  ref_penalize(l, vocab, s, hist, nhist);
  int keep = ref_keep(l, vocab, s, c), pick = c[0].id;
  if (s->temperature > 0) {
    double total = 0, cum = 0;
    for (int i = 0; i < keep; i++) total += exp(((double)c[i].logit - c[0].logit) / s->temperature);
    double u = ref_uniform(s->seed, (uint64_t)pos) * total;
    pick = c[keep - 1].id;
    for (int i = 0; i < keep; i++) {
      cum += exp(((double)c[i].logit - c[0].logit) / s->temperature);
      if (u < cum) {
        pick = c[i].id;
        break;
      }
    }
  }
  free(l), free(c);
  return pick;
}

/* ---- the reference by hand ---- */

Test(llm_sampling, the_reference_agrees_with_hand_computed_values) {
  /* penalties: logits {2, -1, 0.5, 3}, history 0 0 1 3; repeat 2, frequency 0.5, presence 0.25 */
  const int32_t hist[] = {0, 0, 1, 3};
  float l[4] = {2, -1, 0.5f, 3};
  ref_penalize(l, 4,
               &(llm_sampler_t){.repeat_penalty = 2,
                                .frequency_penalty = 0.5f,
                                .presence_penalty = 0.25f,
                                .penalty_last_n = 3},
               hist, 4);
  /* the last 3: 0, 1, 3 once each: 2/2 - 0.75, -1*2 - 0.75, 0.5 untouched, 3/2 - 0.75 */
  cr_assert(l[0] == 0.25f && l[1] == -2.75f && l[2] == 0.5f && l[3] == 0.75f, "%g %g %g %g", l[0],
            l[1], l[2], l[3]);
  float m[4] = {2, -1, 0.5f, 3};
  ref_penalize(m, 4,
               &(llm_sampler_t){.repeat_penalty = 2,
                                .frequency_penalty = 0.5f,
                                .presence_penalty = 0.25f,
                                .penalty_last_n = 4},
               hist, 4);
  cr_assert(m[0] == -0.25f, "token 0 twice: 2/2 - (2 x 0.5 + 0.25) = -0.25, not %g", m[0]);
  /* logits {2, 1, 0, -1}: probabilities at temperature 1 0.6439 0.2369 0.0871 0.0321 */
  const float z[4] = {0, 1, 2, -1}; /* ids 2, 1, 0, 3 by rank */
  ref_cand_t c[4];
  cr_assert_eq(ref_keep(z, 4, &(llm_sampler_t){.top_p = 1, .top_k = 2}, c), 2);
  cr_assert(c[0].id == 2 && c[1].id == 1);
  cr_assert_eq(ref_keep(z, 4, &(llm_sampler_t){.top_p = 0.8f}, c), 2,
               "0.6439 + 0.2369 reaches 0.8");
  cr_assert_eq(ref_keep(z, 4, &(llm_sampler_t){.top_p = 0.9f}, c), 3, "0.9679 reaches 0.9");
  cr_assert_eq(ref_keep(z, 4, &(llm_sampler_t){.top_p = 0.6f}, c), 1);
  cr_assert_eq(ref_keep(z, 4, &(llm_sampler_t){.top_p = 1, .min_p = 0.3f}, c), 2,
               "2 + ln 0.3 = 0.796: ids 2, 1");
  cr_assert_eq(ref_keep(z, 4, &(llm_sampler_t){.top_p = 1, .min_p = 0.1f}, c), 3,
               "2 + ln 0.1 = -0.303");
  cr_assert_eq(ref_keep(z, 4, &(llm_sampler_t){.top_p = 1, .min_p = 1}, c), 1);
  /* the draw: at temperature 1 over all four, u < 0.6439 gives id 2, then 1 up to 0.8808, 0 to
   * 0.9679 */
  llm_sampler_t t1 = {.temperature = 1, .top_p = 1};
  for (uint64_t seed = 0; seed < 64; seed++) {
    t1.seed = seed;
    double u = ref_uniform(seed, 5);
    int want = u < 0.64391 ? 2 : u < 0.88079 ? 1 : u < 0.96795 ? 0 : 3;
    if (fabs(u - 0.64391) > 1e-4 && fabs(u - 0.88079) > 1e-4 && fabs(u - 0.96795) > 1e-4)
      cr_assert_eq(ref_sample(z, 4, &t1, NULL, 0, 5), want, "seed %llu, u %g",
                   (unsigned long long)seed, u);
  }
  /* temperature 0.01: the top one, whatever the draw */
  cr_assert_eq(
      ref_sample(z, 4, &(llm_sampler_t){.temperature = 0.01f, .top_p = 1, .seed = 3}, NULL, 0, 5),
      2);
}

/* ---- the decoder against the reference ---- */

/* PROMPT tokens (with repeats, so that the penalties have something to do), then STEPS steps: each
 * new token checked against ref_sample over the step's logits and every token before it. The
 * tokens (prompt and new) into out when given. */
static void matches_reference(const llm_sampler_t *s, bool graph, int32_t *out) {
  OK(llm_decoder_set_sampler(g_dec, s));
  int32_t tokens[PROMPT + STEPS + 1];
  random_tokens(tokens, PROMPT, 6, 17); /* ids 0..5: repeated */
  float logits[VOCAB];
  for (int p = 0; p < PROMPT + STEPS; p++) {
    if (p < PROMPT) OK(llm_decoder_set_tokens(g_dec, p, &tokens[p], 1));
    OK(llm_decoder_step(g_dec, p, graph));
    OK(llm_decoder_logits(g_dec, logits));
    int32_t got;
    OK(llm_decoder_tokens(g_dec, p + 1, &got, 1));
    int want = ref_sample(logits, VOCAB, s, tokens, p + 1, p + 1);
    cr_assert_eq(
        got, want,
        "T %g top-k %d top-p %g min-p %g penalties %g %g %g over %d, seed %llu: position %d is %d, "
        "the reference's %d",
        (double)s->temperature, s->top_k, (double)s->top_p, (double)s->min_p,
        (double)s->repeat_penalty, (double)s->frequency_penalty, (double)s->presence_penalty,
        s->penalty_last_n, (unsigned long long)s->seed, p + 1, got, want);
    if (p + 1 >= PROMPT) tokens[p + 1] = got;
  }
  if (out) memcpy(out, tokens, sizeof(tokens));
}

Test(llm_sampling, each_stage_alone_matches_the_reference) {
  const llm_sampler_t cases[] = {
      {.top_p = 1},                                               /* greedy */
      {.temperature = 3, .top_p = 1, .seed = 1},                  /* temperature, every candidate */
      {.temperature = 3, .top_p = 1, .top_k = 3, .seed = 2},      /* top-k */
      {.temperature = 3, .top_p = 0.95f, .seed = 3},              /* top-p at temperature 1 */
      {.temperature = 3, .top_p = 1, .min_p = 0.01f, .seed = 4},  /* min-p */
      {.top_p = 1, .repeat_penalty = 1.5f, .penalty_last_n = 64}, /* greedy, repeat penalty */
      {.top_p = 1, .frequency_penalty = 2, .penalty_last_n = 16}, /* greedy, frequency */
      {.top_p = 1, .presence_penalty = 5, .penalty_last_n = 4},   /* greedy, presence over 4 */
      {.temperature = 2,
       .top_p = 1,
       .repeat_penalty = 0.7f,
       .penalty_last_n = 8,
       .seed = 5}, /* below 1 rewards */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    matches_reference(&cases[i], i % 2 == 0, NULL);
}

Test(llm_sampling, the_whole_chain_matches_the_reference) {
  /* llama-cli's defaults (top-k 40, top-p 0.95, min-p 0.05, temperature 0.8) with penalties, and
   * wider ones */
  const llm_sampler_t cases[] = {
      {.temperature = 0.8f,
       .top_p = 0.95f,
       .top_k = 40,
       .min_p = 0.05f,
       .repeat_penalty = 1.1f,
       .penalty_last_n = 64,
       .seed = 7},
      {.temperature = 5,
       .top_p = 0.999f,
       .top_k = 30,
       .min_p = 0.0001f,
       .repeat_penalty = 1.3f,
       .frequency_penalty = 0.4f,
       .presence_penalty = 0.6f,
       .penalty_last_n = 12,
       .seed = 8},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    matches_reference(&cases[i], true, NULL);
}

Test(llm_sampling, penalties_change_greedy_decoding_and_a_huge_presence_penalty_never_repeats) {
  int32_t plain[PROMPT + STEPS + 1], penalised[PROMPT + STEPS + 1];
  matches_reference(&(llm_sampler_t){.top_p = 1}, true, plain);
  /* every token seen in the last 32 loses 1000: no token comes back within 32 */
  matches_reference(&(llm_sampler_t){.top_p = 1, .presence_penalty = 1000, .penalty_last_n = 32},
                    true, penalised);
  cr_assert(memcmp(plain, penalised, sizeof(plain)), "the presence penalty changed nothing");
  for (int i = PROMPT; i <= PROMPT + STEPS; i++)
    for (int j = i - 32 > 0 ? i - 32 : 0; j < i; j++)
      cr_assert_neq(penalised[i], penalised[j], "token %d at %d came back from %d", penalised[i], i,
                    j);
}

Test(llm_sampling, min_p_one_and_top_k_one_are_greedy_and_seeds_repeat) {
  int32_t greedy[PROMPT + STEPS + 1], a[PROMPT + STEPS + 1], b[PROMPT + STEPS + 1],
      c[PROMPT + STEPS + 1];
  matches_reference(&(llm_sampler_t){.top_p = 1}, true, greedy);
  matches_reference(&(llm_sampler_t){.temperature = 50, .top_p = 1, .min_p = 1, .seed = 9}, true,
                    a);
  cr_assert_arr_eq(a, greedy, sizeof(a), "min-p 1 keeps the top token only");
  matches_reference(&(llm_sampler_t){.temperature = 50, .top_p = 1, .top_k = 1, .seed = 9}, false,
                    a);
  cr_assert_arr_eq(a, greedy, sizeof(a), "top-k 1 keeps the top token only");
  llm_sampler_t s = {.temperature = 4,
                     .top_p = 0.999f,
                     .min_p = 0.001f,
                     .repeat_penalty = 1.2f,
                     .penalty_last_n = 8,
                     .seed = 10};
  matches_reference(&s, true, a);
  matches_reference(&s, false, b); /* eager launches: the same */
  s.seed = 11;
  matches_reference(&s, true, c);
  cr_assert_arr_eq(a, b, sizeof(a), "the same seed gave other tokens");
  cr_assert(memcmp(a, c, sizeof(a)), "another seed gave the same tokens");
  cr_assert(memcmp(a, greedy, sizeof(a)), "temperature 4 gave the greedy tokens");
}

Test(llm_sampling, bad_parameters_are_refused) {
  const llm_sampler_t bad[] = {{.top_p = 1, .min_p = 1.5f},
                               {.top_p = 1, .min_p = NAN},
                               {.top_p = 1, .repeat_penalty = -1},
                               {.top_p = 1, .repeat_penalty = INFINITY},
                               {.top_p = 1, .frequency_penalty = NAN},
                               {.top_p = 1, .presence_penalty = -INFINITY},
                               {.top_p = 1, .penalty_last_n = -2}};
  const char *what[] = {
      "min-p", "min-p", "repeat penalty", "repeat penalty", "frequency penalty", "presence penalty",
      "last-n"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    FAILS(llm_decoder_set_sampler(g_dec, &bad[i]), HCQ_INVALID_ARGUMENT, what[i]);
}
