/* The public LLM library (include/hcq/llm.h) on tiny models the tests write (llm_tiny.h: a GPT-2
 * tokenizer whose ids 0..94 are the printable ASCII bytes, <|im_start|> 95, <|im_end|> 96 the end
 * token, a ChatML template): what it reports of the model, tokens and text both ways with the
 * caller's buffers, the chat template, generation against the decoder's eager launches (the ground
 * truth the decoder's own suites check against the plain C reference), every way generation stops,
 * the streamed pieces against the whole text, sampling reproducible from its seed, and every bad
 * argument refused by name. */
#include <hcq/llm.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llm.h"
#include "llm_test_util.h"
#include "test_util.h"

TestSuite(llm_api, .timeout = 240);

/* A tiny model file of this process (unlinked by the caller). */
static void tiny_file(char *path, size_t size, const char *name, bool with_tokenizer) {
  tiny_spec_t s = tiny_uniform_spec(64, 96, 2, 4, 2, 97, GGML_TYPE_Q8_0, false, 7);
  s.tokenizer = with_tokenizer;
  tmp_path(path, size, name);
  OK(tiny_write(&s, path));
}

static hcq_llm_t *open_tiny(const char *name, const hcq_llm_options_t *o) {
  char path[PATH_MAX];
  tiny_file(path, sizeof(path), name, true);
  hcq_llm_t *llm;
  OK(hcq_llm_open(path, o, &llm));
  unlink(path);
  return llm;
}

Test(llm_api, info_describes_the_model) {
  hcq_llm_t *llm = open_tiny("info", &(hcq_llm_options_t){.ctx = 64});
  hcq_llm_info_t i;
  hcq_llm_get_info(llm, &i);
  cr_expect_str_eq(i.name, "tiny test model");
  cr_expect_str_eq(i.architecture, "llama");
  cr_expect_str_eq(i.weight_types, "Q8_0");
  cr_expect_str_eq(i.chat_template, "chatml");
  cr_expect_str_eq(i.device, "CPU:0");
  cr_expect_eq(i.vocab, 97);
  cr_expect_eq(i.layers, 2);
  cr_expect_eq(i.dim, 64);
  cr_expect_eq(i.heads, 4);
  cr_expect_eq(i.kv_heads, 2);
  cr_expect_geq(i.ctx, 64);
  cr_expect_gt(i.kernels_per_token, 0);
  OK(hcq_llm_close(llm));
  OK(hcq_llm_close(NULL));
}

Test(llm_api, text_to_tokens_and_back_in_the_callers_buffers) {
  hcq_llm_t *llm = open_tiny("tokens", &(hcq_llm_options_t){.ctx = 64});
  const char *text = "Hi, you!";
  size_t n = 0;
  OK(hcq_llm_tokenize(llm, text, strlen(text), false, false, NULL, 0, &n)); /* counting */
  cr_assert_eq(n, 8);
  int32_t ids[8];
  OK(hcq_llm_tokenize(llm, text, strlen(text), false, false, ids, 8, &n));
  for (size_t i = 0; i < n; i++)
    cr_expect_eq(ids[i], text[i] - 32, "id %zu", i); /* the bytes' ids */
  int32_t few[3];
  FAILS(hcq_llm_tokenize(llm, text, strlen(text), false, false, few, 3, &n), HCQ_OUT_OF_RANGE,
        "room for 3");
  cr_expect_eq(n, 8, "the count needed");
  /* no text: no tokens, into a buffer too (nothing copied from the empty list) */
  OK(hcq_llm_tokenize(llm, "", 0, false, false, ids, 8, &n));
  cr_expect_eq(n, 0);
  /* control tokens spelled in the text: one id with parse_special, their bytes without */
  OK(hcq_llm_tokenize(llm, "<|im_end|>", 10, false, true, ids, 8, &n));
  cr_expect(n == 1 && ids[0] == 96);
  cr_expect(hcq_llm_is_end_token(llm, 96) && !hcq_llm_is_end_token(llm, 40));

  int32_t back[] = {40, 73, 12, 0, 89, 79, 85, 1, 96};
  char out[32];
  size_t len = 0;
  OK(hcq_llm_detokenize(llm, back, 9, false, out, sizeof(out), &len));
  cr_expect_str_eq(out, "Hi, you!");
  cr_expect_eq(len, 8);
  /* measuring, with the end token's text */
  OK(hcq_llm_detokenize(llm, back, 9, true, NULL, 0, &len));
  cr_expect_eq(len, 18);
  FAILS(hcq_llm_detokenize(llm, back, 9, false, out, 8, &len), HCQ_OUT_OF_RANGE, "room for 8");
  cr_expect_eq(len, 8);
  int32_t bad[] = {3, 97};
  FAILS(hcq_llm_detokenize(llm, bad, 2, false, out, sizeof(out), &len), HCQ_INVALID_ARGUMENT,
        "ids[1]");
  OK(hcq_llm_close(llm));
}

Test(llm_api, chat_prompt_in_the_models_template_or_a_named_one) {
  hcq_llm_t *llm = open_tiny("chat", &(hcq_llm_options_t){.ctx = 64});
  hcq_llm_message_t msgs[] = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Why?"}};
  char out[256];
  size_t len;
  OK(hcq_llm_chat_prompt(llm, msgs, 4, NULL, out, sizeof(out), &len));
  cr_expect_str_eq(out,
                   "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                   "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n"
                   "<|im_start|>assistant\n");
  cr_expect_eq(len, strlen(out));
  OK(hcq_llm_chat_prompt(llm, msgs + 1, 1, "llama2", out, sizeof(out), &len));
  cr_expect_str_eq(out, "[INST] Hi [/INST]");
  FAILS(hcq_llm_chat_prompt(llm, msgs, 1, "phi9", out, sizeof(out), &len), HCQ_INVALID_ARGUMENT,
        "phi9");
  FAILS(hcq_llm_chat_prompt(llm, msgs, 4, NULL, out, 16, &len), HCQ_OUT_OF_RANGE, "room for 16");
  OK(hcq_llm_close(llm));

  char path[PATH_MAX];
  tiny_file(path, sizeof(path), "notemplate", false);
  /* no tokenizer at all is a model the library cannot use for text: refused by name */
  hcq_status_t st = hcq_llm_open(path, NULL, &llm);
  unlink(path);
  FAILS(st, HCQ_INVALID_ARGUMENT, "tokenizer");
}

/* Eager launches of the decoder itself: the library's graph replays choose the same tokens. */
static void eager_tokens(const char *path, const int32_t *prompt, int n, int steps, int32_t *out,
                         int *nout) {
  llm_model_t *m;
  OK(llm_model_open(path, &m));
  llm_decoder_t *d = decoder_on(m, HCQ_DEVICE_CPU, 1, 64, 0);
  llm_generate_result_t r;
  OK(llm_generate(d, prompt, n, &(llm_generate_options_t){.steps = steps, .graph = false}, &r));
  memcpy(out, r.ids, (size_t)r.n * sizeof(int32_t));
  *nout = r.n;
  free(r.ids);
  OK(llm_decoder_destroy(d));
  llm_model_close(m);
}

typedef struct pieces {
  char text[512];
  size_t len;
  int calls, stop_after;
} pieces_t;

static bool collect(void *user, int32_t id, const char *text, size_t len) {
  pieces_t *p = user;
  cr_expect_eq(strlen(text), len, "the piece is NUL-terminated at its length");
  cr_expect(id >= 0 && id < 97);
  if (p->len + len < sizeof(p->text)) memcpy(p->text + p->len, text, len), p->len += len;
  return ++p->calls != p->stop_after;
}

Test(llm_api, generation_follows_eager_launches_and_streams_its_text) {
  char path[PATH_MAX];
  tiny_file(path, sizeof(path), "gen", true);
  const int32_t prompt[] = {40, 73, 12, 0, 89, 79, 85};
  int32_t want[32];
  int nwant;
  eager_tokens(path, prompt, 7, 20, want, &nwant);
  hcq_llm_t *llm;
  OK(hcq_llm_open(path, &(hcq_llm_options_t){.ctx = 64}, &llm));
  unlink(path);
  pieces_t p = {0};
  hcq_llm_generate_options_t o = {.max_tokens = 20, .on_token = collect, .user = &p};
  hcq_llm_result_t r;
  OK(hcq_llm_generate(llm, prompt, 7, &o, &r));
  cr_assert_eq(r.n, (size_t)nwant);
  for (int i = 0; i < nwant; i++) cr_expect_eq(r.ids[i], want[i], "token %d", i);
  cr_expect_eq(r.prompt_tokens, 7);
  cr_expect_eq(r.stop, r.ids[r.n - 1] == 96 ? HCQ_LLM_STOP_END : HCQ_LLM_STOP_LENGTH);
  cr_expect_eq(p.calls, (int)r.n, "one call per token");
  char whole[512];
  size_t len;
  OK(hcq_llm_detokenize(llm, r.ids, r.n, false, whole, sizeof(whole), &len));
  cr_expect(len == p.len && !memcmp(whole, p.text, len),
            "the pieces are the text: \"%.*s\" vs \"%s\"", (int)p.len, p.text, whole);
  hcq_llm_result_free(&r);
  cr_expect(!r.ids && !r.n);
  OK(hcq_llm_close(llm));
}

Test(llm_api, every_way_generation_stops) {
  hcq_llm_t *llm = open_tiny("stops", &(hcq_llm_options_t){.ctx = 32});
  const int32_t prompt[] = {40, 73, 12, 0, 89};
  hcq_llm_result_t r;
  OK(hcq_llm_generate(llm, prompt, 5,
                      &(hcq_llm_generate_options_t){.max_tokens = 6, .ignore_eos = true}, &r));
  cr_expect(r.n == 6 && r.stop == HCQ_LLM_STOP_LENGTH, "n %zu, stop %s", r.n,
            hcq_llm_stop_name(r.stop));
  hcq_llm_result_free(&r);
  hcq_llm_info_t info;
  hcq_llm_get_info(llm, &info);
  OK(hcq_llm_generate(llm, prompt, 5, &(hcq_llm_generate_options_t){.ignore_eos = true}, &r));
  cr_expect(r.n == (size_t)info.ctx - 5 && r.stop == HCQ_LLM_STOP_CONTEXT, "n %zu of %d, stop %s",
            r.n, info.ctx, hcq_llm_stop_name(r.stop));
  hcq_llm_result_free(&r);
  pieces_t p = {.stop_after = 3};
  OK(hcq_llm_generate(
      llm, prompt, 5,
      &(hcq_llm_generate_options_t){.ignore_eos = true, .on_token = collect, .user = &p}, &r));
  cr_expect(r.n == 3 && r.stop == HCQ_LLM_STOP_CALLBACK && p.calls == 3, "n %zu, stop %s, calls %d",
            r.n, hcq_llm_stop_name(r.stop), p.calls);
  hcq_llm_result_free(&r);
  cr_expect_str_eq(hcq_llm_stop_name(HCQ_LLM_STOP_END), "end");
  OK(hcq_llm_close(llm));
}

Test(llm_api, sampling_is_reproducible_from_its_seed) {
  hcq_llm_t *llm = open_tiny("sampling", &(hcq_llm_options_t){.ctx = 64});
  const int32_t prompt[] = {40, 73, 12};
  hcq_llm_result_t a, b, c;
  hcq_llm_generate_options_t o = {
      .max_tokens = 24,
      .ignore_eos = true,
      .sampling = {.temperature = 1.5f, .top_p = 0.95f, .top_k = 50, .seed = 5}};
  OK(hcq_llm_generate(llm, prompt, 3, &o, &a));
  OK(hcq_llm_generate(llm, prompt, 3,
                      &(hcq_llm_generate_options_t){.max_tokens = 24, .ignore_eos = true}, &c));
  OK(hcq_llm_generate(llm, prompt, 3, &o, &b));
  cr_assert(a.n == 24 && b.n == 24 && c.n == 24);
  cr_expect(!memcmp(a.ids, b.ids, 24 * sizeof(int32_t)), "the same seed, the same tokens");
  cr_expect(memcmp(a.ids, c.ids, 24 * sizeof(int32_t)), "sampled at temperature 1.5 is not greedy");
  hcq_llm_result_free(&a), hcq_llm_result_free(&b), hcq_llm_result_free(&c);
  OK(hcq_llm_close(llm));
}

Test(llm_api, bad_arguments_are_refused_by_name) {
  hcq_llm_t *llm = open_tiny("bad", &(hcq_llm_options_t){.ctx = 32});
  const int32_t prompt[] = {40, 73, 12};
  hcq_llm_result_t r;
  struct {
    hcq_llm_generate_options_t o;
    const char *needle;
  } cases[] = {{{.max_tokens = -1}, "max_tokens"},
               {{.sampling = {.temperature = -1}}, "temperature"},
               {{.sampling = {.temperature = 1, .top_p = 1.5f}}, "top_p"},
               {{.sampling = {.temperature = 1, .top_k = -2}}, "top_k"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    FAILS(hcq_llm_generate(llm, prompt, 3, &cases[i].o, &r), HCQ_INVALID_ARGUMENT, cases[i].needle);
    cr_expect(!r.ids && !r.n);
  }
  int32_t outside[] = {40, 400};
  FAILS(hcq_llm_generate(llm, outside, 2, NULL, &r), HCQ_INVALID_ARGUMENT, "400");
  int32_t longer[40] = {0};
  FAILS(hcq_llm_generate(llm, longer, 40, NULL, &r), HCQ_OUT_OF_RANGE, "40 tokens");
  FAILS(hcq_llm_generate(llm, prompt, 0, NULL, &r), HCQ_OUT_OF_RANGE, "0 tokens");
  FAILS(hcq_llm_generate(llm, NULL, 3, NULL, &r), HCQ_INVALID_ARGUMENT, "NULL");
  FAILS(hcq_llm_generate_text(llm, NULL, NULL, &r), HCQ_INVALID_ARGUMENT, "NULL");
  OK(hcq_llm_close(llm));

  FAILS(hcq_llm_open("/nonexistent/model.gguf", NULL, &llm), HCQ_NOT_FOUND,
        "/nonexistent/model.gguf");
  cr_expect_null(llm);
  char path[PATH_MAX];
  tiny_file(path, sizeof(path), "badopts", true);
  FAILS(hcq_llm_open(path, &(hcq_llm_options_t){.device = "TPU"}, &llm), HCQ_INVALID_ARGUMENT,
        "TPU");
  FAILS(hcq_llm_open(path, &(hcq_llm_options_t){.ctx = -1}, &llm), HCQ_INVALID_ARGUMENT, "ctx");
  FAILS(hcq_llm_open(path, &(hcq_llm_options_t){.max_batch = 5000}, &llm), HCQ_INVALID_ARGUMENT,
        "max_batch");
  FAILS(hcq_llm_open(path, NULL, NULL), HCQ_INVALID_ARGUMENT, "out");
  unlink(path);
}

Test(llm_api, known_models_by_name_without_downloading) {
  cr_assert_geq(hcq_llm_known_model_count(), 2);
  cr_expect_str_eq(hcq_llm_known_model(0), "smollm2-135m");
  bool gemma = false;
  for (size_t i = 0; i < hcq_llm_known_model_count(); i++)
    gemma |= !strcmp(hcq_llm_known_model(i), "gemma-3-270m");
  cr_expect(gemma);
  cr_expect_null(hcq_llm_known_model(hcq_llm_known_model_count()));
  /* an empty data folder: the name is known, the file is not there, and no download is allowed */
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/llm_api_data_%d",
           getenv("HCQ_TEST_TMP") ? getenv("HCQ_TEST_TMP") : "/tmp", (int)getpid());
  setenv("HCQ_DATA_DIR", dir, 1);
  hcq_llm_t *llm;
  FAILS(hcq_llm_open("gemma-3-270m", &(hcq_llm_options_t){.no_download = true}, &llm),
        HCQ_NOT_FOUND, dir);
  FAILS(hcq_llm_open(NULL, &(hcq_llm_options_t){.no_download = true}, &llm), HCQ_NOT_FOUND, dir);
  FAILS(hcq_llm_open("not-a-model", NULL, &llm), HCQ_NOT_FOUND, "not a model name");
}
