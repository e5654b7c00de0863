/* Batched decoding (hcq/llm.h's hcq_llm_batch_*): many sequences in one captured step, each at its
 * own position in its own cache slot. The ground truth is hcq_llm_generate (the single-sequence
 * step and prompt pass, itself checked against the plain C reference by test_llm): a sequence's
 * greedy tokens, and its sampled tokens from a seed, are generate's whatever else is in the batch
 * (batch invariance): alone, among seven others of other lengths joining at other steps, with its
 * prompt entering in chunks beside the others' decoding rows, on CPU and Vulkan (lavapipe), on
 * tiny models of two architectures (llama: rope fused into the products; qwen3: per-head norms
 * and NEOX rope in their own kernel) and on SmolLM2 (skipped when absent). Also: the batch size
 * changes with no new capture, a cancelled sequence's slot is taken at once, every stop reason,
 * and bad arguments refused by name. */
#include <hcq/llm.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llm.h"
#include "llm_batch.h"
#include "llm_test_util.h"
#include "model_status.h"
#include "test_util.h"

TestSuite(llm_batch, .timeout = 600);

enum { SEQS = 8, NEW = 12, MAX_NEW = 64 };

static char g_paths[16][PATH_MAX];
static int g_npaths;
static void remove_paths(void) {
  for (int i = 0; i < g_npaths && i < 16; i++) unlink(g_paths[i]);
}

static hcq_llm_t *open_tiny(const char *name, const char *arch, const char *device) {
  tiny_spec_t s = tiny_uniform_spec(64, 96, 2, 4, 2, 97, GGML_TYPE_Q4_1, false, 11);
  s.arch = arch;
  char path[PATH_MAX];
  tmp_path(path, sizeof(path), name);
  OK(tiny_write(&s, path));
  hcq_llm_t *llm;
  hcq_status_t st = hcq_llm_open(path, &(hcq_llm_options_t){.ctx = 128, .device = device}, &llm);
  /* the file stays for hcq_llm_batch_create, which reads it again: removed at exit */
  snprintf(g_paths[g_npaths++ % 16], PATH_MAX, "%s", path);
  if (g_npaths == 1) atexit(remove_paths);
  if (st && hcq_status_code(st) == HCQ_UNAVAILABLE) {
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", hcq_status_message(st));
    hcq_status_destroy(st);
    cr_skip_test("no %s device: %s", device, msg);
  }
  OK(st);
  return llm;
}

/* Prompt k: 3 + 5 k ids (3 .. 38), different for every k. */
static int prompt_of(int k, int32_t *out) {
  int n = 3 + 5 * k;
  for (int i = 0; i < n; i++) out[i] = (int32_t)((7 * k + 3 * i + 1) % 95);
  return n;
}

typedef struct collected {
  int32_t ids[MAX_NEW];
  size_t n;
  bool finished;
  hcq_llm_stop_t stop;
} collected_t;

/* Steps until no sequence is active, adding prompt k (of those in `joins`) at step joins[k] (the
 * sequence ids into seq[k]); tokens by sequence into got[k]. */
static void run_batch(hcq_llm_batch_t *b, int nseq, const int *joins,
                      const hcq_llm_generate_options_t *o, int *seq, collected_t *got) {
  memset(got, 0, sizeof(*got) * (size_t)nseq);
  hcq_llm_batch_event_t ev[SEQS];
  int added = 0;
  for (int step = 0; added < nseq || hcq_llm_batch_active(b); step++) {
    for (int k = 0; k < nseq; k++)
      if (joins[k] == step) {
        int32_t prompt[64];
        int n = prompt_of(k, prompt);
        OK(hcq_llm_batch_add(b, prompt, (size_t)n, o, &seq[k]));
        added++;
      }
    size_t nev;
    OK(hcq_llm_batch_step(b, ev, SEQS, &nev));
    for (size_t e = 0; e < nev; e++) {
      if (e) cr_assert_gt(ev[e].seq, ev[e - 1].seq, "events in the order of their sequences");
      int k = 0;
      while (k < nseq && seq[k] != ev[e].seq) k++;
      cr_assert_lt(k, nseq, "an event for sequence %d, never added", ev[e].seq);
      cr_assert(!got[k].finished, "an event after sequence %d finished", ev[e].seq);
      if (ev[e].id != HCQ_LLM_NO_TOKEN) got[k].ids[got[k].n++] = ev[e].id;
      cr_expect_eq(ev[e].tokens, got[k].n);
      got[k].finished = ev[e].finished, got[k].stop = ev[e].stop;
    }
    cr_assert_lt(step, 1000, "the batch never empties");
  }
}

/* Sequence k's tokens against hcq_llm_generate's for prompt k and the options. */
static void expect_one(hcq_llm_t *llm, int k, const hcq_llm_generate_options_t *o,
                       const collected_t *got) {
  int32_t prompt[64];
  int n = prompt_of(k, prompt);
  hcq_llm_result_t r;
  OK(hcq_llm_generate(llm, prompt, (size_t)n, o, &r));
  cr_expect(got->finished, "sequence %d never finished", k);
  cr_expect_eq(got->n, r.n, "sequence %d: %zu tokens, generate %zu", k, got->n, r.n);
  for (size_t i = 0; i < r.n && i < got->n; i++)
    cr_expect_eq(got->ids[i], r.ids[i], "sequence %d token %zu: %d, generate %d", k, i, got->ids[i],
                 r.ids[i]);
  cr_expect_eq(got->stop, r.stop, "sequence %d stops for another reason", k);
  hcq_llm_result_free(&r);
}

static void expect_generate(hcq_llm_t *llm, int nseq, const hcq_llm_generate_options_t *o,
                            const collected_t *got) {
  for (int k = 0; k < nseq; k++) expect_one(llm, k, o, &got[k]);
}

/* A sequence alone, then eight of other lengths joining at steps 0..6 with prompts entering in
 * chunks of at most 12 rows beside the others' decoding rows: generate's tokens every time. */
static void invariance(const char *arch, const char *device, const hcq_llm_sampling_t *sampling) {
  hcq_llm_t *llm = open_tiny("inv", arch, device);
  hcq_llm_batch_t *b;
  OK(hcq_llm_batch_create(
      llm, &(hcq_llm_batch_options_t){.max_seqs = SEQS, .ctx = 96, .max_rows = 12}, &b));
  hcq_llm_generate_options_t o = {.max_tokens = NEW, .ignore_eos = true, .sampling = *sampling};
  int seq[SEQS], alone[1] = {0}, joins[SEQS] = {0, 0, 1, 1, 2, 3, 5, 6};
  collected_t got[SEQS];
  run_batch(b, 1, alone, &o, seq, got);
  expect_generate(llm, 1, &o, got);
  run_batch(b, SEQS, joins, &o, seq, got);
  expect_generate(llm, SEQS, &o, got);
  cr_expect_eq(hcq_llm_batch_captures(b), 1, "batch sizes 1..8 and prompt chunks: one capture");
  OK(hcq_llm_batch_destroy(b));
  OK(hcq_llm_close(llm));
}

static const hcq_llm_sampling_t greedy = {0},
                                sampled = {
                                    .temperature = 0.9f, .top_p = 0.95f, .top_k = 20, .seed = 42};
/* the whole chain: penalties over each slot's own history (the history buffer), min-p; and greedy
 * with penalties */
static const hcq_llm_sampling_t chained = {.temperature = 0.8f,
                                           .top_p = 0.9f,
                                           .top_k = 30,
                                           .seed = 7,
                                           .min_p = 0.05f,
                                           .repeat_penalty = 1.3f,
                                           .frequency_penalty = 0.2f,
                                           .presence_penalty = 0.2f,
                                           .penalty_last_n = 16},
                                penalised = {.repeat_penalty = 1.5f,
                                             .presence_penalty = 0.5f,
                                             .penalty_last_n = -1};

Test(llm_batch, greedy_sequences_are_generates_alone_and_among_seven_cpu) {
  invariance(NULL, "CPU", &greedy);
}
Test(llm_batch, greedy_qwen3_sequences_are_generates_cpu) { invariance("qwen3", "CPU", &greedy); }
Test(llm_batch, sampled_sequences_are_generates_from_their_seeds_cpu) {
  invariance(NULL, "CPU", &sampled);
}
Test(llm_batch, greedy_sequences_are_generates_alone_and_among_seven_vulkan) {
  invariance(NULL, "VULKAN", &greedy);
}
Test(llm_batch, greedy_qwen3_sequences_are_generates_vulkan) {
  invariance("qwen3", "VULKAN", &greedy);
}
Test(llm_batch, sampled_sequences_are_generates_from_their_seeds_vulkan) {
  invariance(NULL, "VULKAN", &sampled);
}
Test(llm_batch, penalised_sequences_are_generates_cpu) {
  invariance(NULL, "CPU", &chained);
  invariance(NULL, "CPU", &penalised);
}
Test(llm_batch, penalised_sequences_are_generates_vulkan) {
  invariance(NULL, "VULKAN", &chained);
  invariance(NULL, "VULKAN", &penalised);
}

/* Sequences with their own samplers side by side: each its own generate's tokens. */
Test(llm_batch, each_sequence_samples_with_its_own_parameters) {
  hcq_llm_t *llm = open_tiny("own", NULL, "CPU");
  hcq_llm_batch_t *b;
  OK(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = 3, .ctx = 64}, &b));
  hcq_llm_generate_options_t o[3] = {
      {.max_tokens = 10, .ignore_eos = true},
      {.max_tokens = 10, .ignore_eos = true, .sampling = {1.0f, 1.0f, 0, 7}},
      {.max_tokens = 10, .ignore_eos = true, .sampling = {0.5f, 0.8f, 5, 99}}};
  int32_t prompt[3][64];
  int n[3], seq[3];
  collected_t got[3] = {0};
  for (int k = 0; k < 3; k++) {
    n[k] = prompt_of(k, prompt[k]);
    OK(hcq_llm_batch_add(b, prompt[k], (size_t)n[k], &o[k], &seq[k]));
  }
  hcq_llm_batch_event_t ev[3];
  size_t nev;
  while (hcq_llm_batch_active(b)) {
    OK(hcq_llm_batch_step(b, ev, 3, &nev));
    for (size_t e = 0; e < nev; e++)
      got[ev[e].seq - seq[0]].ids[got[ev[e].seq - seq[0]].n++] = ev[e].id;
  }
  for (int k = 0; k < 3; k++) {
    hcq_llm_result_t r;
    OK(hcq_llm_generate(llm, prompt[k], (size_t)n[k], &o[k], &r));
    cr_expect(r.n == got[k].n && !memcmp(r.ids, got[k].ids, r.n * 4),
              "sequence %d: not generate's tokens", k);
    hcq_llm_result_free(&r);
  }
  OK(hcq_llm_batch_destroy(b));
  OK(hcq_llm_close(llm));
}

/* Batch sizes 1, 5, 2, 8, 3 and prompt chunks: the decoder captured once, its programs compiled
 * once, its jit's graphs as many as after the first step. */
Test(llm_batch, batch_size_changes_without_a_new_capture) {
  hcq_llm_t *llm = open_tiny("capture", NULL, "CPU");
  hcq_llm_batch_t *b;
  OK(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = SEQS, .ctx = 96}, &b));
  llm_decoder_t *dec = llm_batch_decoder(b);
  cr_assert_eq(hcq_llm_batch_captures(b), 1, "captured at create");
  hcq_jit_t *jit = llm_decoder_prefill_jit(dec);
  cr_assert(jit);
  size_t graphs = hcq_jit_graph_count(jit);
  int sizes[] = {1, 5, 2, 8, 3};
  hcq_llm_generate_options_t o = {.max_tokens = 3, .ignore_eos = true};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    int seq[SEQS], joins[SEQS] = {0};
    collected_t got[SEQS];
    run_batch(b, sizes[i], joins, &o, seq, got);
    for (int k = 0; k < sizes[i]; k++) cr_expect_eq(got[k].n, 3);
  }
  cr_expect_eq(hcq_llm_batch_captures(b), 1, "a new capture for another batch size");
  cr_expect_eq(llm_decoder_prefill_jit(dec), jit);
  cr_expect_eq(hcq_jit_graph_count(jit), graphs, "the jit built graphs for other sizes");
  OK(hcq_llm_batch_destroy(b));
  OK(hcq_llm_close(llm));
}

/* Two slots: a third sequence waits (UNAVAILABLE) until one is cancelled, then takes its slot at
 * once and gives generate's tokens (the cancelled sequence's caches do not leak into it); the
 * cancelled sequence gets no event after its cancel. */
Test(llm_batch, a_cancelled_sequence_frees_its_slot_at_once) {
  hcq_llm_t *llm = open_tiny("cancel", NULL, "CPU");
  hcq_llm_batch_t *b;
  OK(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = 2, .ctx = 96}, &b));
  hcq_llm_generate_options_t o = {.max_tokens = NEW, .ignore_eos = true};
  int32_t prompt[64];
  int seq[3], n;
  for (int k = 0; k < 2; k++) {
    n = prompt_of(k + 3, prompt);
    OK(hcq_llm_batch_add(b, prompt, (size_t)n, &o, &seq[k]));
  }
  hcq_llm_batch_event_t ev[2];
  size_t nev;
  for (int s = 0; s < 4; s++) OK(hcq_llm_batch_step(b, ev, 2, &nev));
  n = prompt_of(0, prompt);
  FAILS(hcq_llm_batch_add(b, prompt, (size_t)n, &o, &seq[2]), HCQ_UNAVAILABLE,
        "all 2 sequences are busy");
  OK(hcq_llm_batch_cancel(b, seq[0]));
  cr_expect_eq(hcq_llm_batch_active(b), 1);
  OK(hcq_llm_batch_add(b, prompt, (size_t)n, &o, &seq[2]));
  cr_expect(seq[2] != seq[0], "a sequence id used again");
  FAILS(hcq_llm_batch_cancel(b, seq[0]), HCQ_NOT_FOUND, "no active sequence");
  collected_t got = {0};
  while (hcq_llm_batch_active(b)) {
    OK(hcq_llm_batch_step(b, ev, 2, &nev));
    for (size_t e = 0; e < nev; e++) {
      cr_assert_neq(ev[e].seq, seq[0], "an event for a cancelled sequence");
      if (ev[e].seq == seq[2])
        got.ids[got.n++] = ev[e].id, got.finished = ev[e].finished, got.stop = ev[e].stop;
    }
  }
  expect_generate(llm, 1, &o, &got);
  OK(hcq_llm_batch_destroy(b));
  OK(hcq_llm_close(llm));
}

static bool stop_after_two(void *user, int32_t id, const char *text, size_t len) {
  (void)id, (void)text, (void)len;
  return ++*(int *)user < 2;
}

/* length, context (ctx 16), callback (on_token false at its second token), end (the tiny model's
 * end token 96 as its greedy choice is unlikely: the context and length cases suffice with
 * ignore_eos off, which also checks no end token was chosen) */
Test(llm_batch, every_stop_reason) {
  hcq_llm_t *llm = open_tiny("stops", NULL, "CPU");
  hcq_llm_batch_t *b;
  OK(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = 3, .ctx = 16}, &b));
  int calls = 0, seq[3];
  int32_t prompt[64];
  int n = prompt_of(1, prompt); /* 8 ids: 8 new tokens fill the 16 positions */
  hcq_llm_generate_options_t o[3] = {
      {.max_tokens = 3}, {.max_tokens = 0}, {.on_token = stop_after_two, .user = &calls}};
  for (int k = 0; k < 3; k++) OK(hcq_llm_batch_add(b, prompt, (size_t)n, &o[k], &seq[k]));
  collected_t got[3] = {0};
  hcq_llm_batch_event_t ev[3];
  size_t nev;
  while (hcq_llm_batch_active(b)) {
    OK(hcq_llm_batch_step(b, ev, 3, &nev));
    for (size_t e = 0; e < nev; e++) {
      collected_t *g = &got[ev[e].seq - seq[0]];
      g->ids[g->n++] = ev[e].id, g->finished = ev[e].finished, g->stop = ev[e].stop;
      cr_expect_eq(strlen(ev[e].text), ev[e].len);
    }
  }
  bool ended[3];
  for (int k = 0; k < 3; k++) ended[k] = got[k].n && got[k].ids[got[k].n - 1] == 96;
  cr_expect(got[0].stop == HCQ_LLM_STOP_LENGTH ? got[0].n == 3 : ended[0]);
  cr_expect(got[1].stop == HCQ_LLM_STOP_CONTEXT ? got[1].n == 8 : ended[1], "stop %d after %zu",
            got[1].stop, got[1].n);
  cr_expect(got[2].stop == HCQ_LLM_STOP_CALLBACK ? got[2].n == 2 && calls == 2 : ended[2]);
  OK(hcq_llm_batch_destroy(b));
  OK(hcq_llm_close(llm));
}

Test(llm_batch, bad_arguments_are_refused_by_name) {
  hcq_llm_t *llm = open_tiny("bad", NULL, "CPU");
  hcq_llm_batch_t *b = NULL;
  FAILS(hcq_llm_batch_create(NULL, NULL, &b), HCQ_INVALID_ARGUMENT, "llm is NULL");
  FAILS(hcq_llm_batch_create(llm, NULL, NULL), HCQ_INVALID_ARGUMENT, "out is NULL");
  FAILS(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = 65}, &b),
        HCQ_INVALID_ARGUMENT, "max_seqs 65");
  FAILS(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = -1}, &b),
        HCQ_INVALID_ARGUMENT, "max_seqs -1");
  FAILS(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.ctx = -5}, &b), HCQ_INVALID_ARGUMENT,
        "ctx -5");
  FAILS(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = 8, .max_rows = 4}, &b),
        HCQ_INVALID_ARGUMENT, "max_rows 4");
  cr_expect_null(b);
  /* caches of 8 x 64 positions (2 layers x 2 x 32 floats a position: 256 KiB) past the memory there
   * is */
  setenv("HCQ_LLM_MEMORY_BYTES", "100000", 1);
  FAILS(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = 8, .ctx = 64}, &b),
        HCQ_OUT_OF_RANGE, "8 x a context of 64 positions");
  unsetenv("HCQ_LLM_MEMORY_BYTES");
  cr_expect_null(b);
  OK(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = 2, .ctx = 32}, &b));
  int32_t prompt[40] = {1, 2, 3}, bad_id[2] = {1, 97};
  int seq;
  FAILS(hcq_llm_batch_add(b, prompt, 0, NULL, &seq), HCQ_OUT_OF_RANGE, "a prompt of 0 tokens");
  FAILS(hcq_llm_batch_add(b, prompt, 32, NULL, &seq), HCQ_OUT_OF_RANGE, "a prompt of 32 tokens");
  FAILS(hcq_llm_batch_add(b, bad_id, 2, NULL, &seq), HCQ_INVALID_ARGUMENT, "prompt id 97 (at 1)");
  FAILS(hcq_llm_batch_add(b, NULL, 3, NULL, &seq), HCQ_INVALID_ARGUMENT, "NULL");
  FAILS(hcq_llm_batch_add(b, prompt, 3, NULL, NULL), HCQ_INVALID_ARGUMENT, "NULL");
  FAILS(hcq_llm_batch_add(b, prompt, 3, &(hcq_llm_generate_options_t){.max_tokens = -1}, &seq),
        HCQ_INVALID_ARGUMENT, "max_tokens -1");
  FAILS(hcq_llm_batch_add(b, prompt, 3,
                          &(hcq_llm_generate_options_t){.sampling = {.temperature = -1}}, &seq),
        HCQ_INVALID_ARGUMENT, "temperature -1");
  FAILS(hcq_llm_batch_add(b, prompt, 3, &(hcq_llm_generate_options_t){.sampling = {.top_p = 2}},
                          &seq),
        HCQ_INVALID_ARGUMENT, "top_p 2");
  FAILS(hcq_llm_batch_add(b, prompt, 3, &(hcq_llm_generate_options_t){.sampling = {.top_k = -3}},
                          &seq),
        HCQ_INVALID_ARGUMENT, "top_k -3");
  cr_expect_eq(hcq_llm_batch_active(b), 0, "a refused sequence was added");
  hcq_llm_batch_event_t ev[2];
  size_t nev = 99;
  OK(hcq_llm_batch_step(b, ev, 2, &nev));
  cr_expect_eq(nev, 0, "a step with no sequence");
  FAILS(hcq_llm_batch_step(b, ev, 1, &nev), HCQ_INVALID_ARGUMENT, "room for 1 events");
  FAILS(hcq_llm_batch_step(b, NULL, 2, &nev), HCQ_INVALID_ARGUMENT, "NULL");
  FAILS(hcq_llm_batch_step(NULL, ev, 2, &nev), HCQ_INVALID_ARGUMENT, "NULL");
  FAILS(hcq_llm_batch_cancel(b, 12345), HCQ_NOT_FOUND, "no active sequence 12345");
  FAILS(hcq_llm_batch_cancel(b, -1), HCQ_NOT_FOUND, "no active sequence -1");
  FAILS(hcq_llm_batch_cancel(NULL, 0), HCQ_INVALID_ARGUMENT, "NULL");
  cr_expect_eq(hcq_llm_batch_active(NULL), 0);
  cr_expect_eq(hcq_llm_batch_captures(NULL), 0);
  OK(hcq_llm_batch_destroy(b));
  OK(hcq_llm_batch_destroy(NULL));
  OK(hcq_llm_close(llm));
}

/* SmolLM2 (skipped when absent): four prompts joining at steps 0..3, greedy with end tokens on:
 * generate's tokens and stop reasons, the chat question's answer ending at its end token. */
Test(llm_batch, smollm2_greedy_sequences_are_generates) {
  llm_model_close(real_model()); /* skips when the model is absent */
  const char *env = getenv("HCQ_LLM_MODEL");
  hcq_llm_t *llm;
  OK(hcq_llm_open(env && *env ? env : NULL, &(hcq_llm_options_t){.ctx = 256, .no_download = true},
                  &llm));
  hcq_llm_batch_t *b;
  OK(hcq_llm_batch_create(
      llm, &(hcq_llm_batch_options_t){.max_seqs = 4, .ctx = 128, .max_rows = 16}, &b));
  char chat[512];
  size_t chat_len;
  hcq_llm_message_t question = {"user", "What is 2 + 2? Answer with the number only."};
  OK(hcq_llm_chat_prompt(llm, &question, 1, NULL, chat, sizeof(chat), &chat_len));
  const char *texts[4] = {"The capital of France is", "1, 2, 3, 4,",
                          "Once upon a time, in a land far away, there lived a", chat};
  int32_t ids[4][64];
  size_t n[4];
  int seq[4];
  hcq_llm_generate_options_t o = {.max_tokens = 12}; /* end tokens on: the question's answer ends */
  collected_t got[4] = {0};
  for (int k = 0; k < 4; k++)
    OK(hcq_llm_tokenize(llm, texts[k], strlen(texts[k]), k < 3, k == 3, ids[k], 64, &n[k]));
  hcq_llm_batch_event_t ev[4];
  size_t nev;
  for (int step = 0; step == 0 || hcq_llm_batch_active(b); step++) {
    if (step < 4) OK(hcq_llm_batch_add(b, ids[step], n[step], &o, &seq[step]));
    OK(hcq_llm_batch_step(b, ev, 4, &nev));
    for (size_t e = 0; e < nev; e++) {
      collected_t *g = &got[ev[e].seq - seq[0]];
      g->ids[g->n++] = ev[e].id, g->stop = ev[e].stop, g->finished = ev[e].finished;
    }
  }
  for (int k = 0; k < 4; k++) {
    hcq_llm_result_t r;
    OK(hcq_llm_generate(llm, ids[k], n[k], &o, &r));
    cr_expect(r.n == got[k].n && !memcmp(r.ids, got[k].ids, r.n * 4),
              "\"%s\": not generate's tokens", texts[k]);
    cr_expect(got[k].finished && got[k].stop == r.stop, "\"%s\": stops for another reason",
              texts[k]);
    hcq_llm_result_free(&r);
  }
  cr_expect_eq(got[3].stop, HCQ_LLM_STOP_END, "the answer to the question did not end");
  OK(hcq_llm_batch_destroy(b));
  OK(hcq_llm_close(llm));
}

/* CUDA and Metal have no batch kernels yet: refused by name before any device is opened. */
Test(llm_batch, cuda_and_metal_batches_are_unimplemented) {
  tiny_spec_t s = tiny_uniform_spec(64, 96, 2, 4, 2, 97, GGML_TYPE_Q4_1, false, 11);
  llm_model_t *m = tiny_model(&s, "kinds");
  hcq_device_kind_t kinds[2] = {HCQ_DEVICE_CUDA, HCQ_DEVICE_METAL};
  for (int k = 0; k < 2; k++) {
    llm_decoder_t *d = NULL;
    char want[96];
    snprintf(want, sizeof(want), "no batched decoding kernels for %s devices",
             hcq_device_kind_name(kinds[k]));
    FAILS(llm_decoder_create(m, &(llm_decoder_options_t){.kind = kinds[k], .ctx = 32, .slots = 2},
                             &d),
          HCQ_UNIMPLEMENTED, want);
    cr_expect_null(d);
  }
  llm_decoder_t *d = NULL;
  FAILS(llm_decoder_create(m, &(llm_decoder_options_t){.devices = 2, .ctx = 32, .slots = 2}, &d),
        HCQ_UNIMPLEMENTED, "batched decoding runs on one device, not 2");
  llm_model_close(m);
}

typedef struct adder {
  hcq_llm_batch_t *b;
  int seq[6];
  atomic_int steps; /* the stepping thread's count */
  atomic_bool done;
} adder_t;

/* Adds prompt k as sequence a->seq[k]; cancels sequence 1 at once. */
static hcq_status_t add_prompt(adder_t *a, int k, const hcq_llm_generate_options_t *o) {
  int32_t prompt[64];
  int n = prompt_of(k, prompt);
  TRY(hcq_llm_batch_add(a->b, prompt, (size_t)n, o, &a->seq[k]));
  return k == 1 ? hcq_llm_batch_cancel(a->b, a->seq[1]) : NULL;
}

/* Adds prompts 0..5, one every two steps of the other thread, and cancels sequence 1 at once. */
static void *add_meanwhile(void *arg) {
  adder_t *a = arg;
  hcq_llm_generate_options_t o = {.max_tokens = NEW, .ignore_eos = true};
  for (int k = 0; k < 6; k++) {
    while (atomic_load(&a->steps) < 2 * k) sched_yield();
    hcq_status_t st = add_prompt(a, k, &o);
    if (st) {
      fprintf(stderr, "add_meanwhile: %s\n", hcq_status_message(st));
      hcq_status_destroy(st);
      a->seq[k] = -2;
    }
  }
  atomic_store(&a->done, true);
  return NULL;
}

/* Sequences added and cancelled from another thread while this one steps: the others' tokens are
 * generate's, the cancelled one's events stop. */
Test(llm_batch, add_and_cancel_from_another_thread_while_stepping) {
  hcq_llm_t *llm = open_tiny("threads", NULL, "CPU");
  adder_t a = {0};
  OK(hcq_llm_batch_create(
      llm, &(hcq_llm_batch_options_t){.max_seqs = SEQS, .ctx = 96, .max_rows = 12}, &a.b));
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, add_meanwhile, &a), 0);
  collected_t got[6] = {0};
  hcq_llm_batch_event_t ev[SEQS];
  size_t nev;
  for (int step = 0; !atomic_load(&a.done) || hcq_llm_batch_active(a.b); step++) {
    OK(hcq_llm_batch_step(a.b, ev, SEQS, &nev));
    atomic_store(&a.steps, step + 1);
    for (size_t e = 0; e < nev; e++) {
      collected_t *g = &got[ev[e].seq]; /* this batch's ids are 0..5 */
      cr_assert_lt(g->n, (size_t)MAX_NEW);
      g->ids[g->n++] = ev[e].id, g->finished = ev[e].finished, g->stop = ev[e].stop;
    }
    if (nev == 0 && !atomic_load(&a.done)) sched_yield();
    cr_assert_lt(step, 100000, "the batch never empties");
  }
  pthread_join(t, NULL);
  for (int k = 0; k < 6; k++) cr_assert_eq(a.seq[k], k, "sequence %d was not added", k);
  cr_expect(!got[1].finished, "the cancelled sequence finished");
  for (int k = 0; k < 6; k++)
    if (k != 1)
      expect_one(llm, k, &(hcq_llm_generate_options_t){.max_tokens = NEW, .ignore_eos = true},
                 &got[k]);
  OK(hcq_llm_batch_destroy(a.b));
  OK(hcq_llm_close(llm));
}

/* Each slot's history (what the sampler's penalties read) holds its sequence's tokens by position:
 * the prompt, then every token chosen but the last (which no row ran). */
static void history_by_slot(const char *device) {
  hcq_llm_t *llm = open_tiny("history", NULL, device);
  hcq_llm_batch_t *b;
  OK(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = 3, .ctx = 64, .max_rows = 8},
                          &b));
  hcq_llm_generate_options_t o = {.max_tokens = 10, .ignore_eos = true};
  int seq[3], joins[3] = {0, 0, 2};
  collected_t got[3];
  run_batch(b, 3, joins, &o, seq, got);
  for (int k = 0; k < 3; k++) { /* a fresh batch: sequence k took slot k */
    int32_t prompt[64], hist[64];
    int n = prompt_of(k, prompt), len = n + (int)got[k].n - 1;
    OK(llm_decoder_batch_history(llm_batch_decoder(b), k, hist, len));
    cr_expect(!memcmp(hist, prompt, (size_t)n * 4), "slot %d: not its prompt", k);
    cr_expect(!memcmp(hist + n, got[k].ids, (got[k].n - 1) * 4), "slot %d: not its tokens", k);
  }
  OK(hcq_llm_batch_destroy(b));
  OK(hcq_llm_close(llm));
}

Test(llm_batch, each_slots_history_holds_its_sequence_cpu) { history_by_slot("CPU"); }
Test(llm_batch, each_slots_history_holds_its_sequence_vulkan) { history_by_slot("VULKAN"); }

typedef struct text_sink {
  char text[2048];
  size_t len;
} text_sink_t;

static bool sink_text(void *user, int32_t id, const char *text, size_t len) {
  (void)id;
  text_sink_t *t = user;
  if (t->len + len < sizeof(t->text)) memcpy(t->text + t->len, text, len), t->len += len;
  return true;
}

/* Stop strings: a batch sequence's events carry hcq_llm_generate's text with the same stop strings
 * (cut before the first one found, held-back prefixes passed on later, across token boundaries),
 * stop reason "stop", beside a sequence without them; the strings are copied by add. */
Test(llm_batch, stop_strings_cut_the_text_as_generates) {
  llm_model_close(real_model()); /* skips when the model is absent */
  const char *env = getenv("HCQ_LLM_MODEL");
  hcq_llm_t *llm;
  OK(hcq_llm_open(env && *env ? env : NULL, &(hcq_llm_options_t){.ctx = 256, .no_download = true},
                  &llm));
  const char *prompt = "Once upon a time, in a land far away, there lived a";
  text_sink_t full = {0};
  hcq_llm_result_t r;
  OK(hcq_llm_generate_text(
      llm, prompt,
      &(hcq_llm_generate_options_t){.max_tokens = 24, .on_token = sink_text, .user = &full}, &r));
  hcq_llm_result_free(&r);
  cr_assert_gt(full.len, 20, "too little text to cut");
  char cut[8] = {0}; /* 3 bytes from the middle of the text: most likely inside or across tokens */
  memcpy(cut, full.text + full.len / 2, 3);
  char *stops[2] = {strdup("never-in-this-text"), strdup(cut)};
  hcq_llm_generate_options_t with = {.max_tokens = 24,
                                     .stop = (const char *const *)stops,
                                     .nstop = 2},
                             without = {.max_tokens = 24};
  text_sink_t want = {0};
  hcq_llm_generate_options_t o = with;
  o.on_token = sink_text, o.user = &want;
  OK(hcq_llm_generate_text(llm, prompt, &o, &r));
  cr_assert_eq(r.stop, HCQ_LLM_STOP_STRING);
  hcq_llm_result_free(&r);
  int32_t ids[64];
  size_t n;
  OK(hcq_llm_tokenize(llm, prompt, strlen(prompt), true, false, ids, 64, &n));
  hcq_llm_batch_t *b;
  OK(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = 2, .ctx = 128}, &b));
  int seq[2];
  OK(hcq_llm_batch_add(b, ids, n, &with, &seq[0]));
  OK(hcq_llm_batch_add(b, ids, n, &without, &seq[1]));
  free(stops[0]), free(stops[1]); /* add copied them */
  text_sink_t got[2] = {0};
  hcq_llm_stop_t stop[2] = {0};
  hcq_llm_batch_event_t ev[2];
  size_t nev;
  while (hcq_llm_batch_active(b)) {
    OK(hcq_llm_batch_step(b, ev, 2, &nev));
    for (size_t e = 0; e < nev; e++) {
      int k = ev[e].seq == seq[0] ? 0 : 1;
      cr_assert_eq(strlen(ev[e].text), ev[e].len);
      sink_text(&got[k], ev[e].id, ev[e].text, ev[e].len);
      if (ev[e].finished) stop[k] = ev[e].stop;
    }
  }
  cr_expect_eq(stop[0], HCQ_LLM_STOP_STRING);
  cr_expect(got[0].len == want.len && !memcmp(got[0].text, want.text, want.len),
            "with stop strings: \"%.*s\", "
            "generate's \"%.*s\"",
            (int)got[0].len, got[0].text, (int)want.len, want.text);
  cr_expect_eq(stop[1], HCQ_LLM_STOP_LENGTH);
  cr_expect(got[1].len == full.len && !memcmp(got[1].text, full.text, full.len),
            "without: \"%.*s\", generate's "
            "\"%.*s\"",
            (int)got[1].len, got[1].text, (int)full.len, full.text);
  OK(hcq_llm_batch_destroy(b));
  OK(hcq_llm_close(llm));
}

typedef struct logprob_sink {
  hcq_llm_logprob_t lp[MAX_NEW];
  size_t n;
} logprob_sink_t;

static void sink_logprob(void *user, const hcq_llm_logprob_t *lp) {
  logprob_sink_t *s = user;
  if (s->n < MAX_NEW) s->lp[s->n++] = *lp;
}

/* Log-probabilities: a sequence asking for them among others that do not gets, per token, those
 * hcq_llm_generate reports (the same token, its log-softmax within float error, the same top 5),
 * in the events and to on_logprob; the others' events carry none. */
static void logprobs_as_generates(const char *device) {
  hcq_llm_t *llm = open_tiny("logprobs", NULL, device);
  hcq_llm_batch_t *b;
  OK(hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = 3, .ctx = 96, .max_rows = 12},
                          &b));
  logprob_sink_t called = {0};
  hcq_llm_generate_options_t with = {.max_tokens = NEW,
                                     .ignore_eos = true,
                                     .logprobs = true,
                                     .top_logprobs = 5,
                                     .on_logprob = sink_logprob,
                                     .user = &called},
                             without = {.max_tokens = NEW, .ignore_eos = true};
  int32_t prompt[3][64];
  int n[3], seq[3];
  for (int k = 0; k < 3; k++) n[k] = prompt_of(k + 1, prompt[k]);
  OK(hcq_llm_batch_add(b, prompt[0], (size_t)n[0], &without, &seq[0]));
  OK(hcq_llm_batch_add(b, prompt[1], (size_t)n[1], &with, &seq[1]));
  OK(hcq_llm_batch_add(b, prompt[2], (size_t)n[2], &without, &seq[2]));
  logprob_sink_t got = {0};
  hcq_llm_batch_event_t ev[3];
  size_t nev;
  while (hcq_llm_batch_active(b)) {
    OK(hcq_llm_batch_step(b, ev, 3, &nev));
    for (size_t e = 0; e < nev; e++) {
      if (ev[e].seq != seq[1]) {
        cr_expect_null(ev[e].logprob, "a sequence without logprobs gets none");
        continue;
      }
      cr_assert_not_null(ev[e].logprob);
      cr_expect_eq(ev[e].logprob->id, ev[e].id);
      got.lp[got.n++] = *ev[e].logprob;
    }
  }
  hcq_llm_result_t r;
  with.on_logprob = NULL;
  OK(hcq_llm_generate(llm, prompt[1], (size_t)n[1], &with, &r));
  cr_assert_eq(got.n, r.n, "%zu events with log-probabilities, generate %zu tokens", got.n, r.n);
  cr_expect_eq(called.n, r.n, "on_logprob once per token");
  for (size_t i = 0; i < r.n; i++) {
    const hcq_llm_logprob_t *a = &got.lp[i], *w = &r.logprobs[i];
    cr_expect_eq(a->id, w->id, "token %zu", i);
    cr_expect(fabsf(a->logprob - w->logprob) < 1e-3f, "token %zu: log-probability %g, generate %g",
              i, (double)a->logprob, (double)w->logprob);
    cr_expect_eq(a->n_top, 5);
    cr_expect(!memcmp(&called.lp[i], a, sizeof(*a)), "on_logprob got the event's");
    for (int k = 0; k < a->n_top && k < w->n_top; k++) {
      cr_expect_eq(a->top_ids[k], w->top_ids[k], "token %zu alternative %d", i, k);
      cr_expect(fabsf(a->top_logprobs[k] - w->top_logprobs[k]) < 1e-3f);
    }
  }
  hcq_llm_result_free(&r);
  OK(hcq_llm_batch_destroy(b));
  OK(hcq_llm_close(llm));
}

Test(llm_batch, logprobs_are_generates_cpu) { logprobs_as_generates("CPU"); }
Test(llm_batch, logprobs_are_generates_vulkan) { logprobs_as_generates("VULKAN"); }
