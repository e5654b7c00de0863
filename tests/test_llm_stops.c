/* hcq_llm_generate's stop strings, log-probabilities and llama.cpp sampling options
 * (include/hcq/llm.h) on the tiny model of tests/test_llm_api.c (one printable ASCII byte a token,
 * so every stop string spans several tokens): the text passed to on_token is the free-running text
 * cut just before the first stop string (never the stop string, nor a piece of it), a string that
 * only starts to match is held back and then passed; log-probabilities are the log-softmax of the
 * logits the decoder gives teacher-forced on the same tokens, the top alternatives in order; bad
 * options refused by name. */
#include <hcq/llm.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llm.h"
#include "llm_test_util.h"
#include "stop.h"
#include "test_util.h"

TestSuite(llm_stops, .timeout = 240);

enum { CTX = 64, STEPS = 40 };
static const int32_t k_prompt[] = {40, 73, 12, 0, 89, 79, 85};
#define NPROMPT ((int)(sizeof(k_prompt) / sizeof(k_prompt[0])))

static void tiny_file(char *path, size_t size, const char *name) {
  tiny_spec_t s = tiny_uniform_spec(64, 96, 2, 4, 2, 97, GGML_TYPE_Q8_0, false, 7);
  s.tokenizer = true;
  tmp_path(path, size, name);
  OK(tiny_write(&s, path));
}

static hcq_llm_t *open_tiny(const char *name) {
  char path[PATH_MAX];
  tiny_file(path, sizeof(path), name);
  hcq_llm_t *llm;
  OK(hcq_llm_open(path, &(hcq_llm_options_t){.ctx = CTX}, &llm));
  unlink(path);
  return llm;
}

typedef struct pieces {
  char text[1024];
  size_t len;
  int calls, logprob_calls;
  bool order_ok;
} pieces_t;

static bool collect(void *user, int32_t id, const char *text, size_t len) {
  pieces_t *p = user;
  cr_expect_eq(strlen(text), len, "the piece is NUL-terminated at its length");
  (void)id;
  if (p->len + len < sizeof(p->text)) memcpy(p->text + p->len, text, len), p->len += len;
  p->text[p->len] = 0;
  p->calls++;
  return true;
}

/* Greedy, past end tokens: the free-running text. */
static void free_text(hcq_llm_t *llm, char *out, size_t cap) {
  hcq_llm_result_t r;
  hcq_llm_generate_options_t o = {.max_tokens = STEPS, .ignore_eos = true};
  OK(hcq_llm_generate(llm, k_prompt, NPROMPT, &o, &r));
  size_t len;
  OK(hcq_llm_detokenize(llm, r.ids, r.n, false, out, cap, &len));
  cr_assert_eq(len, (size_t)STEPS, "one byte a token");
  hcq_llm_result_free(&r);
}

static hcq_llm_result_t with_stops(hcq_llm_t *llm, const char *const *stops, size_t n,
                                   pieces_t *p) {
  hcq_llm_result_t r;
  *p = (pieces_t){0};
  hcq_llm_generate_options_t o = {.max_tokens = STEPS,
                                  .ignore_eos = true,
                                  .on_token = collect,
                                  .user = p,
                                  .stop = stops,
                                  .nstop = n};
  OK(hcq_llm_generate(llm, k_prompt, NPROMPT, &o, &r));
  cr_expect_geq(p->calls, (int)r.n, "a call per token at least");
  return r;
}

Test(llm_stops, a_stop_string_across_tokens_ends_generation_before_it) {
  hcq_llm_t *llm = open_tiny("stop");
  char whole[STEPS + 1];
  free_text(llm, whole, sizeof(whole));
  /* three bytes (three tokens) from byte 10: the text up to its first occurrence, never the string
   */
  char stop[4] = {whole[10], whole[11], whole[12], 0};
  size_t first = (size_t)(strstr(whole, stop) - whole);
  pieces_t p;
  hcq_llm_result_t r = with_stops(llm, (const char *const[]){stop}, 1, &p);
  cr_expect_eq(r.stop, HCQ_LLM_STOP_STRING, "stop %s", hcq_llm_stop_name(r.stop));
  cr_expect_str_eq(hcq_llm_stop_name(r.stop), "stop");
  cr_expect_eq(r.stop_index, 0);
  cr_expect_eq(r.n, first + 3, "generation ends with the token that completes the stop string");
  cr_expect(p.len == first && !memcmp(p.text, whole, first),
            "passed \"%s\", expected the first %zu bytes of \"%s\"", p.text, first, whole);
  hcq_llm_result_free(&r);

  /* two stop strings: the earlier in the text wins, whichever comes first in the list */
  char later[3] = {whole[30], whole[31], 0};
  size_t first_later = (size_t)(strstr(whole, later) - whole);
  r = with_stops(llm, (const char *const[]){later, stop}, 2, &p);
  size_t cut = first_later < first ? first_later : first;
  cr_expect_eq(r.stop_index, first_later < first ? 0 : 1);
  cr_expect(p.len == cut && !memcmp(p.text, whole, cut), "passed \"%s\"", p.text);
  hcq_llm_result_free(&r);
  OK(hcq_llm_close(llm));
}

Test(llm_stops, text_that_only_starts_a_stop_string_is_held_then_passed) {
  hcq_llm_t *llm = open_tiny("held");
  char whole[STEPS + 1];
  free_text(llm, whole, sizeof(whole));
  /* the last two bytes and one that never follows them: held at the end, then passed with no token
   */
  char decoy[4] = {whole[STEPS - 2], whole[STEPS - 1], '~', 0};
  if (whole[STEPS - 1] == '~') decoy[2] = '#';
  pieces_t p;
  hcq_llm_result_t r = with_stops(llm, (const char *const[]){decoy}, 1, &p);
  cr_expect_eq(r.stop, HCQ_LLM_STOP_LENGTH);
  cr_expect_str_eq(p.text, whole, "every byte passed in the end");
  cr_expect_eq(p.calls, STEPS + 1, "the held bytes came after the last token, with no token");
  /* a prefix in the middle: held for a token, then passed */
  char mid[4] = {whole[20], whole[21], '~', 0};
  if (whole[21] == '~') mid[2] = '#';
  if (!strstr(whole, mid)) {
    hcq_llm_result_free(&r);
    r = with_stops(llm, (const char *const[]){mid}, 1, &p);
    cr_expect_str_eq(p.text, whole);
  }
  hcq_llm_result_free(&r);
  OK(hcq_llm_close(llm));
}

static void on_logprob(void *user, const hcq_llm_logprob_t *lp) {
  pieces_t *p = user;
  p->order_ok &= p->logprob_calls == p->calls; /* before the token's on_token */
  p->logprob_calls++;
  (void)lp;
}

Test(llm_stops, log_probabilities_are_the_log_softmax_of_the_logits) {
  char path[PATH_MAX];
  tiny_file(path, sizeof(path), "logprobs");
  hcq_llm_t *llm;
  OK(hcq_llm_open(path, &(hcq_llm_options_t){.ctx = CTX}, &llm));
  pieces_t p = {.order_ok = true};
  hcq_llm_generate_options_t o = {.max_tokens = 12,
                                  .ignore_eos = true,
                                  .logprobs = true,
                                  .top_logprobs = 5,
                                  .on_logprob = on_logprob,
                                  .on_token = collect,
                                  .user = &p,
                                  .sampling = {.temperature = 3, .top_p = 1, .seed = 4}};
  p.order_ok = true;
  hcq_llm_result_t r;
  OK(hcq_llm_generate(llm, k_prompt, NPROMPT, &o, &r));
  cr_assert(r.logprobs && r.n == 12);
  cr_expect(p.order_ok && p.logprob_calls == 12, "on_logprob before each on_token: %d calls",
            p.logprob_calls);
  /* ground truth: the decoder teacher-forced on the prompt and the tokens, eagerly */
  llm_model_t *m;
  OK(llm_model_open(path, &m));
  unlink(path);
  llm_decoder_t *d = decoder_on(m, HCQ_DEVICE_CPU, 1, CTX, 0);
  int32_t all[NPROMPT + 12];
  memcpy(all, k_prompt, sizeof(k_prompt));
  memcpy(all + NPROMPT, r.ids, 12 * sizeof(int32_t));
  float *logits = malloc((size_t)(NPROMPT + 12) * 97 * sizeof(float));
  forced(d, all, NPROMPT + 11, false, logits);
  int differ_from_top = 0;
  for (int i = 0; i < 12; i++) {
    const float *l = logits + (size_t)(NPROMPT - 1 + i) * 97;
    double sum = 0;
    for (int v = 0; v < 97; v++) sum += exp((double)l[v]);
    const hcq_llm_logprob_t *lp = &r.logprobs[i];
    cr_expect_eq(lp->id, r.ids[i]);
    cr_expect(fabs(lp->logprob - (l[lp->id] - log(sum))) <= 1e-4, "token %d: %g vs %g", i,
              (double)lp->logprob, l[lp->id] - log(sum));
    cr_expect_eq(lp->n_top, 5);
    double mass = 0;
    for (int k = 0; k < lp->n_top; k++) {
      cr_expect(fabs(lp->top_logprobs[k] - (l[lp->top_ids[k]] - log(sum))) <= 1e-4,
                "alternative %d of token %d", k, i);
      if (k) cr_expect_geq(lp->top_logprobs[k - 1], lp->top_logprobs[k], "highest first");
      mass += exp(lp->top_logprobs[k]);
    }
    cr_expect_leq(mass, 1 + 1e-5, "the top alternatives' probabilities sum to at most 1");
    int argmax = llm_ref_argmax(l, 97);
    cr_expect_eq(lp->top_ids[0], argmax, "the most likely token first");
    cr_expect_leq(lp->logprob, lp->top_logprobs[0] + 1e-6);
    differ_from_top += lp->id != argmax;
  }
  cr_expect_gt(differ_from_top, 0, "at temperature 3 some draws are not the top token");
  free(logits);
  hcq_llm_result_free(&r);
  cr_expect(!r.logprobs);
  OK(llm_decoder_destroy(d));
  llm_model_close(m);
  /* without logprobs: none */
  OK(hcq_llm_generate(llm, k_prompt, NPROMPT, &(hcq_llm_generate_options_t){.max_tokens = 3}, &r));
  cr_expect(!r.logprobs);
  hcq_llm_result_free(&r);
  OK(hcq_llm_close(llm));
}

Test(llm_stops, penalties_apply_to_greedy_generation_and_seeds_repeat) {
  hcq_llm_t *llm = open_tiny("penalties");
  hcq_llm_result_t a, b, c;
  hcq_llm_generate_options_t o = {.max_tokens = 30, .ignore_eos = true};
  OK(hcq_llm_generate(llm, k_prompt, NPROMPT, &o, &a));
  /* the whole context */
  o.sampling = (hcq_llm_sampling_t){.presence_penalty = 100, .penalty_last_n = -1};
  OK(hcq_llm_generate(llm, k_prompt, NPROMPT, &o, &b));
  cr_expect(memcmp(a.ids, b.ids, 30 * sizeof(int32_t)), "the presence penalty changed nothing");
  for (int i = 0; i < 30; i++) {
    for (int j = 0; j < i; j++)
      cr_expect_neq(b.ids[i], b.ids[j], "token %d repeats token %d", i, j);
    for (int j = 0; j < NPROMPT; j++)
      cr_expect_neq(b.ids[i], k_prompt[j], "token %d repeats the prompt", i);
  }
  hcq_llm_result_free(&a), hcq_llm_result_free(&b);
  o.sampling = (hcq_llm_sampling_t){.temperature = 1.5f,
                                    .top_p = 0.95f,
                                    .top_k = 40,
                                    .min_p = 0.05f,
                                    .repeat_penalty = 1.1f,
                                    .frequency_penalty = 0.1f,
                                    .presence_penalty = 0.1f,
                                    .seed = 5};
  OK(hcq_llm_generate(llm, k_prompt, NPROMPT, &o, &a));
  OK(hcq_llm_generate(llm, k_prompt, NPROMPT, &o, &b));
  o.sampling.seed = 6;
  OK(hcq_llm_generate(llm, k_prompt, NPROMPT, &o, &c));
  cr_expect(!memcmp(a.ids, b.ids, 30 * sizeof(int32_t)), "the same seed, the same tokens");
  cr_expect(memcmp(a.ids, c.ids, 30 * sizeof(int32_t)), "another seed, other tokens");
  hcq_llm_result_free(&a), hcq_llm_result_free(&b), hcq_llm_result_free(&c);
  OK(hcq_llm_close(llm));
}

static void refused(hcq_llm_t *llm, hcq_llm_generate_options_t o, const char *needle) {
  hcq_llm_result_t r;
  hcq_status_t st = hcq_llm_generate(llm, k_prompt, NPROMPT, &o, &r);
  cr_assert(st, "expected INVALID_ARGUMENT (%s), got OK", needle);
  cr_expect_eq(hcq_status_code(st), HCQ_INVALID_ARGUMENT);
  cr_expect(strstr(hcq_status_message(st), needle), "\"%s\" lacks \"%s\"", hcq_status_message(st),
            needle);
  cr_expect(!r.ids && !r.logprobs && !r.n);
  hcq_status_destroy(st);
}

Test(llm_stops, bad_options_are_refused_by_name) {
  hcq_llm_t *llm = open_tiny("bad");
  refused(llm, (hcq_llm_generate_options_t){.stop = (const char *const[]){"ok", ""}, .nstop = 2},
          "stop[1] is empty");
  refused(llm, (hcq_llm_generate_options_t){.stop = (const char *const[]){NULL}, .nstop = 1},
          "stop[0] is NULL");
  refused(llm, (hcq_llm_generate_options_t){.nstop = 1}, "stop is NULL");
  refused(llm, (hcq_llm_generate_options_t){.logprobs = true, .top_logprobs = 21},
          "top_logprobs 21");
  refused(llm, (hcq_llm_generate_options_t){.top_logprobs = -1}, "top_logprobs -1");
  refused(llm, (hcq_llm_generate_options_t){.sampling = {.min_p = 1.5f}}, "min_p");
  refused(llm, (hcq_llm_generate_options_t){.sampling = {.min_p = NAN}}, "min_p");
  refused(llm, (hcq_llm_generate_options_t){.sampling = {.repeat_penalty = -1}}, "repeat_penalty");
  refused(llm, (hcq_llm_generate_options_t){.sampling = {.repeat_penalty = INFINITY}},
          "repeat_penalty");
  refused(llm, (hcq_llm_generate_options_t){.sampling = {.frequency_penalty = NAN}},
          "frequency_penalty");
  refused(llm, (hcq_llm_generate_options_t){.sampling = {.presence_penalty = 101}},
          "presence_penalty");
  refused(llm, (hcq_llm_generate_options_t){.sampling = {.penalty_last_n = -2}}, "penalty_last_n");
  OK(hcq_llm_close(llm));
}

/* On Vulkan (lavapipe here; skipped without it) the log-probabilities are read after the same step
 * as on the CPU: the two agree within the kinds' rounding (a step off would differ by whole units).
 */
Test(llm_stops, log_probabilities_on_vulkan_are_the_cpus) {
  char path[PATH_MAX];
  tiny_file(path, sizeof(path), "logprobs_vk");
  hcq_llm_t *cpu, *vk;
  OK(hcq_llm_open(path, &(hcq_llm_options_t){.ctx = CTX}, &cpu));
  hcq_status_t st = hcq_llm_open(path, &(hcq_llm_options_t){.ctx = CTX, .device = "VULKAN"}, &vk);
  unlink(path);
  if (st && hcq_status_code(st) == HCQ_UNAVAILABLE) {
    hcq_status_destroy(st);
    OK(hcq_llm_close(cpu));
    cr_skip_test("no Vulkan device");
  }
  OK(st);
  hcq_llm_generate_options_t o = {
      .max_tokens = 10, .ignore_eos = true, .logprobs = true, .top_logprobs = 3};
  hcq_llm_result_t a, b;
  OK(hcq_llm_generate(cpu, k_prompt, NPROMPT, &o, &a));
  OK(hcq_llm_generate(vk, k_prompt, NPROMPT, &o, &b));
  cr_assert(a.n == 10 && b.n == 10 && !memcmp(a.ids, b.ids, 10 * sizeof(int32_t)),
            "greedy: the same tokens");
  for (int i = 0; i < 10; i++) {
    cr_expect(fabsf(a.logprobs[i].logprob - b.logprobs[i].logprob) <= 0.02f,
              "token %d: %g on CPU, %g on Vulkan", i, (double)a.logprobs[i].logprob,
              (double)b.logprobs[i].logprob);
    for (int k = 0; k < 3; k++)
      cr_expect(fabsf(a.logprobs[i].top_logprobs[k] - b.logprobs[i].top_logprobs[k]) <= 0.02f,
                "token %d, top %d", i, k);
  }
  hcq_llm_result_free(&a), hcq_llm_result_free(&b);
  OK(hcq_llm_close(cpu));
  OK(hcq_llm_close(vk));
}

/* The matcher itself (stop.h), by hand: pieces that split a stop string, a prefix that fails, two
 * stop strings, a multi-byte character never split. */
static size_t push(llm_stop_t *s, const char *text, bool end, char *passed) {
  size_t n = 0;
  OK(llm_stop_push(s, text, strlen(text), end, &n));
  strncat(passed, s->held, n);
  llm_stop_consume(s, n);
  return n;
}

Test(llm_stops, the_matcher_holds_back_exactly_what_could_still_match) {
  const char *stops[] = {"END", "\xc3\xa9t\xc3\xa9"}; /* "END" and "été" */
  llm_stop_t s;
  char passed[64] = "";
  llm_stop_init(&s, stops, 2);
  cr_expect_eq(push(&s, "abE", false, passed), 2, "\"E\" could begin END: held");
  cr_expect_eq(push(&s, "Nx", false, passed), 3, "\"ENx\" cannot: passed");
  cr_expect_str_eq(passed, "abENx");
  cr_expect_eq(push(&s, "\xc3\xa9", false, passed), 0, "\"\xc3\xa9\" begins \"\xc3\xa9t\xc3\xa9\"");
  cr_expect_eq(push(&s, "t", false, passed), 0);
  cr_expect_eq(push(&s, "\xc3\xa9 and E", false, passed), 0, "the stop string: nothing more");
  cr_expect_eq(s.found, 1);
  cr_expect_str_eq(passed, "abENx");
  cr_expect_eq(push(&s, "more", false, passed), 0, "after a stop string, nothing is taken");
  llm_stop_free(&s);

  /* the earlier of two in one piece; a held prefix passed at the end */
  llm_stop_init(&s, stops, 2);
  passed[0] = 0;
  push(&s, "x \xc3\xa9t\xc3\xa9 END", false, passed);
  cr_expect(s.found == 1 && !strcmp(passed, "x "), "found %d, passed \"%s\"", s.found, passed);
  llm_stop_free(&s);
  llm_stop_init(&s, stops, 2);
  passed[0] = 0;
  push(&s, "tail EN", false, passed);
  cr_expect_str_eq(passed, "tail ");
  push(&s, "", true, passed);
  cr_expect(s.found == -1 && !strcmp(passed, "tail EN"), "the end passes what was held");
  llm_stop_free(&s);
}
