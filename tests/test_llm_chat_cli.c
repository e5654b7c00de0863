/* hcq chat (hcq generate --interactive) over a pipe and hcq generate's sampling, --stop and
 * --logprobs options, on the tiny model of tests/test_llm_api.c (one ASCII byte a token, ChatML):
 * each reply is what the library gives for the conversation so far (the earlier replies kept in
 * it), /exit and the end of input end the chat; --stop's text is cut where the library's stop
 * string cuts it; --logprobs' entries one per token; bad values exit 2. */
#include <hcq/llm.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llm_cli_util.h"
#include "llm_test_util.h"
#include "test_util.h"

TestSuite(llm_chat_cli, .timeout = 240);

static void tiny_file(char *path, size_t size, const char *name) {
  tiny_spec_t s = tiny_uniform_spec(64, 96, 2, 4, 2, 97, GGML_TYPE_Q8_0, false, 7);
  s.tokenizer = true;
  tmp_path(path, size, name);
  OK(tiny_write(&s, path));
}

typedef struct text {
  char s[4096];
  size_t len;
} text_t;

static bool collect(void *user, int32_t id, const char *piece, size_t len) {
  text_t *t = user;
  (void)id;
  if (t->len + len < sizeof(t->s)) memcpy(t->s + t->len, piece, len), t->len += len;
  t->s[t->len] = 0;
  return true;
}

/* The library's reply to the conversation (greedy, at most 8 tokens). */
static void reply(hcq_llm_t *llm, const hcq_llm_message_t *msgs, size_t n, text_t *out) {
  *out = (text_t){0};
  hcq_llm_result_t r;
  OK(hcq_llm_chat(llm, msgs, n,
                  &(hcq_llm_generate_options_t){.max_tokens = 8, .on_token = collect, .user = out},
                  &r));
  hcq_llm_result_free(&r);
}

Test(llm_chat_cli, chat_over_a_pipe_keeps_the_conversation) {
  char path[PATH_MAX], args[PATH_MAX + 128], *out;
  tiny_file(path, sizeof(path), "chat");
  hcq_llm_t *llm;
  OK(hcq_llm_open(path, NULL, &llm));
  text_t r1, r2, r3;
  hcq_llm_message_t msgs[5] = {{"user", "Hi"}};
  reply(llm, msgs, 1, &r1);
  msgs[1] = (hcq_llm_message_t){"assistant", r1.s};
  msgs[2] = (hcq_llm_message_t){"user", "How?"};
  reply(llm, msgs, 3, &r2);
  text_t alone;
  reply(llm, &msgs[2], 1, &alone);
  cr_assert_str_neq(alone.s, r2.s,
                    "the fixture: without the first turn the second reply would differ");
  hcq_llm_message_t sys[2] = {{"system", "Be brief."}, {"user", "Hi"}};
  reply(llm, sys, 2, &r3);
  OK(hcq_llm_close(llm));
  char want[2 * sizeof(r1.s) + 8];
  snprintf(want, sizeof(want), "%s\n%s\n", r1.s, r2.s);

  snprintf(args, sizeof(args), "chat --model '%s' --steps 8", path);
  cr_assert_eq(run_cli_with("Hi\n\nHow?\n/exit\nnot read\n", args, &out), 0);
  cr_expect_str_eq(out, want, "the second reply answers the whole conversation");
  free(out);
  /* the end of the input ends it too; generate --interactive is the same; --system comes first */
  snprintf(args, sizeof(args), "generate --interactive --model '%s' --steps 8", path);
  cr_assert_eq(run_cli_with("Hi\nHow?", args, &out), 0);
  cr_expect_str_eq(out, want);
  free(out);
  snprintf(args, sizeof(args), "chat --model '%s' --steps 8 --system 'Be brief.'", path);
  cr_assert_eq(run_cli_with("Hi\n", args, &out), 0);
  snprintf(want, sizeof(want), "%s\n", r3.s);
  cr_expect_str_eq(out, want);
  free(out);
  /* nothing to say: no output, exit 0; a prompt option: exit 2 */
  cr_assert_eq(run_cli_with("", args, &out), 0);
  cr_expect_str_eq(out, "");
  free(out);
  snprintf(args, sizeof(args), "chat --model '%s' --prompt x", path);
  cr_assert_eq(run_cli_with("Hi\n", args, &out), 2);
  free(out);
  unlink(path);
}

Test(llm_chat_cli, a_long_chat_drops_its_oldest_turns_and_a_line_too_long_is_not_sent) {
  char path[PATH_MAX], args[PATH_MAX + 128], input[1024] = "", *out;
  tiny_file(path, sizeof(path), "long");
  /* ten turns of about 20 positions each in a context of 64: older turns must go; then a line of
   * 100 bytes (100 tokens here) alone outgrows it: no reply, and the chat goes on */
  for (int i = 0; i < 10; i++) strcat(input, "Hello there\n");
  memset(input + strlen(input), 'x', 100);
  strcat(input, "\nHi\n");
  snprintf(args, sizeof(args), "chat --model '%s' --steps 6 --ctx 64 --ignore-eos", path);
  cr_assert_eq(run_cli_with(input, args, &out), 0);
  int lines = 0;
  for (const char *p = out; *p; p++) lines += *p == '\n';
  cr_expect_eq(lines, 11, "a reply a line but the long one: %d in \"%s\"", lines, out);
  free(out);
  unlink(path);
}

Test(llm_chat_cli, generate_takes_stop_strings_logprobs_and_the_sampling_chain) {
  char path[PATH_MAX], args[PATH_MAX + 256];
  tiny_file(path, sizeof(path), "opts");
  snprintf(args, sizeof(args),
           "generate --model '%s' --prompt-ids 40,73,12 --steps 30 --ignore-eos --json", path);
  json_t *plain = run_json(args);
  const char *text = json_string_value(json_object_get(plain, "text"));
  cr_assert(text && strlen(text) == 30);
  cr_expect_str_eq(json_string_value(json_object_get(plain, "stop_reason")), "length");
  /* --stop: two bytes from the middle (two tokens); the text before their first occurrence */
  char stop[3] = {text[12], text[13], 0};
  size_t first = (size_t)(strstr(text, stop) - text);
  snprintf(args, sizeof(args),
           "generate --model '%s' --prompt-ids 40,73,12 --steps 30 --ignore-eos --json --stop '%s' "
           "--stop '\x7f~'",
           path, stop);
  json_t *cut = run_json(args);
  cr_expect_str_eq(json_string_value(json_object_get(cut, "stop_reason")), "stop");
  const char *cut_text = json_string_value(json_object_get(cut, "text"));
  cr_expect(strlen(cut_text) == first && !strncmp(cut_text, text, first),
            "\"%s\" vs \"%s\" up to %zu", cut_text, text, first);
  cr_expect_eq(json_array_size(json_object_get(cut, "token_ids")), first + 2);
  /* --logprobs 3: an entry per token, its three alternatives highest first */
  snprintf(args, sizeof(args),
           "generate --model '%s' --prompt-ids 40,73,12 --steps 6 --ignore-eos --json --logprobs 3 "
           "--temperature 2 --min-p 0.01 --repeat-penalty 1.2 --repeat-last-n 16 "
           "--frequency-penalty 0.1 "
           "--presence-penalty 0.1 --threads 1",
           path);
  json_t *lp = run_json(args);
  json_t *entries = json_object_get(lp, "logprobs"), *ids = json_object_get(lp, "token_ids");
  cr_assert_eq(json_array_size(entries), 6);
  for (size_t i = 0; i < 6; i++) {
    json_t *e = json_array_get(entries, i), *top = json_object_get(e, "top_logprobs");
    cr_expect_eq(json_integer_value(json_object_get(e, "id")),
                 json_integer_value(json_array_get(ids, i)));
    cr_expect_leq(json_number_value(json_object_get(e, "logprob")), 0);
    cr_assert_eq(json_array_size(top), 3);
    for (size_t k = 1; k < 3; k++)
      cr_expect_geq(json_number_value(json_object_get(json_array_get(top, k - 1), "logprob")),
                    json_number_value(json_object_get(json_array_get(top, k), "logprob")));
    cr_expect(json_is_string(json_object_get(json_array_get(top, 0), "token")));
  }
  /* a presence penalty changes greedy decoding */
  snprintf(args, sizeof(args),
           "generate --model '%s' --prompt-ids 40,73,12 --steps 30 --ignore-eos --json "
           "--presence-penalty 50 --repeat-last-n -1",
           path);
  json_t *pen = run_json(args);
  cr_expect_str_neq(json_string_value(json_object_get(pen, "text")), text);
  json_decref(pen);
  json_decref(plain), json_decref(cut), json_decref(lp); /* text is plain's */
  unlink(path);
}

Test(llm_chat_cli, bad_sampling_options_exit_2) {
  const char *bad[] = {"--min-p 1.5",
                       "--min-p x",
                       "--repeat-penalty -1",
                       "--repeat-last-n -2",
                       "--repeat-last-n 2.5",
                       "--frequency-penalty 101",
                       "--presence-penalty nan",
                       "--stop ''",
                       "--logprobs 21 --json",
                       "--logprobs 2",
                       "--threads 0",
                       "--threads 257",
                       "--interactive",
                       "--min-p"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char args[256], *out;
    snprintf(args, sizeof(args), "generate --model /nonexistent.gguf --prompt a %s", bad[i]);
    cr_expect_eq(run_cli_with("", args, &out), 2, "hcq %s", args);
    free(out);
  }
}
