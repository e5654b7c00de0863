/* Chat templates (models/llm/chat.c) against llama.cpp's built-in ones.
 *
 * Every expected string below is what llama.cpp's llama_chat_apply_template (llama-cpp-python
 * 0.3.36's low-level API, template given by name) returned for the same messages: a system
 * message, a user message, an assistant answer and a second user message, with the generation
 * prompt (which the llama2 and mistral layouts do not have); and the same with contents padded
 * with white space, which llama3, gemma and llama2-sys-strip trim. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tokenizer.h"

static const llm_chat_message_t conv[] = {{"system", "You are terse."},
                                          {"user", "Hi there"},
                                          {"assistant", "Hello!"},
                                          {"user", "What is 2+2?"}};
static const llm_chat_message_t padded[] = {
    {"system", "  S  "}, {"user", "  padded user \n"}, {"assistant", " A "}};

static const struct {
  const char *name, *full, *padded;
} golden[] = {
    {"chatml",
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi "
     "there<|im_end|>\n<|im_start|>assistant\nHello!"
     "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
     "<|im_start|>system\n  S  <|im_end|>\n<|im_start|>user\n  padded user "
     "\n<|im_end|>\n<|im_start|>assistant\n A "
     "<|im_end|>\n<|im_start|>assistant\n"},
    {"llama3",
     "<|start_header_id|>system<|end_header_id|>\n\nYou are "
     "terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
     "Hi "
     "there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_"
     "header_id|>user"
     "<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_"
     "id|>\n\npadded user"
     "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|><|start_header_id|>"
     "assistant"
     "<|end_header_id|>\n\n"},
    {"gemma",
     "<start_of_turn>user\nYou are terse.\n\nHi "
     "there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
     "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
     "<start_of_turn>user\nS\n\npadded "
     "user<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n<start_of_turn>model\n"},
    {"llama2", "[INST] You are terse.\nHi there [/INST]Hello!</s>[INST] What is 2+2? [/INST]",
     "[INST]   S  \n  padded user \n [/INST] A </s>"},
    {"llama2-sys",
     "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST]Hello!</s>[INST] What is 2+2? "
     "[/INST]",
     "[INST] <<SYS>>\n  S  \n<</SYS>>\n\n  padded user \n [/INST] A </s>"},
    {"llama2-sys-bos",
     "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST]Hello!</s><s>[INST] What is 2+2? "
     "[/INST]",
     NULL},
    {"llama2-sys-strip",
     "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST]Hello!</s>[INST] What is 2+2? "
     "[/INST]",
     "[INST] <<SYS>>\nS\n<</SYS>>\n\npadded user [/INST]A</s>"},
    {"mistral-v1",
     " [INST] You are terse.\n\nHi there [/INST] Hello!</s> [INST] What is 2+2? [/INST]",
     " [INST]   S  \n\n  padded user \n [/INST]  A </s>"},
    {"mistral-v3", "[INST] You are terse.\n\nHi there[/INST] Hello!</s>[INST] What is 2+2?[/INST]",
     "[INST]   S  \n\n  padded user \n[/INST] A</s>"},
    {"mistral-v3-tekken",
     "[INST]You are terse.\n\nHi there[/INST]Hello!</s>[INST]What is 2+2?[/INST]", NULL},
    {"mistral-v7",
     "[SYSTEM_PROMPT] You are terse.[/SYSTEM_PROMPT][INST] Hi there[/INST] Hello!</s>[INST] What "
     "is 2+2?[/INST]",
     NULL},
};

static void expect_apply(llm_chat_kind_t k, const llm_chat_message_t *m, size_t n, bool gen,
                         const char *want) {
  char *s;
  OK(llm_chat_apply(k, m, n, gen, &s));
  cr_assert_str_eq(s, want, "%s", llm_chat_kind_name(k));
  free(s);
}

Test(llm_chat, llama_cpp_layouts) {
  cr_assert_eq(sizeof(golden) / sizeof(golden[0]), LLM_CHAT_KIND_COUNT);
  for (size_t i = 0; i < sizeof(golden) / sizeof(golden[0]); i++) {
    llm_chat_kind_t k;
    OK(llm_chat_kind_from_name(golden[i].name, &k));
    cr_assert_str_eq(llm_chat_kind_name(k), golden[i].name);
    expect_apply(k, conv, 4, true, golden[i].full);
    if (golden[i].padded) expect_apply(k, padded, 3, true, golden[i].padded);
  }
  /* without the generation prompt; gemma with two system messages and a model turn first */
  expect_apply(LLM_CHAT_GEMMA, conv, 4, false,
               "<start_of_turn>user\nYou are terse.\n\nHi "
               "there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
               "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n");
  expect_apply(LLM_CHAT_GEMMA,
               (const llm_chat_message_t[]){
                   {"system", "A"}, {"system", "B"}, {"assistant", "x"}, {"user", "u"}},
               4, true,
               "<start_of_turn>model\nx<end_of_turn>\n<start_of_turn>user\nAB\n\nu<end_of_turn>\n<"
               "start_of_turn>model\n");
  expect_apply(LLM_CHAT_LLAMA2_SYS, conv, 2, true,
               "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST]");
  llm_chat_kind_t k;
  FAILS(llm_chat_kind_from_name("vicuna", &k), HCQ_INVALID_ARGUMENT, "vicuna", "chatml");
  char *s = (char *)&s;
  FAILS(llm_chat_apply(LLM_CHAT_KIND_COUNT, conv, 4, true, &s), HCQ_INVALID_ARGUMENT, "kind");
  cr_assert_null(s);
  FAILS(llm_chat_apply(LLM_CHAT_CHATML, (const llm_chat_message_t[]){{"user", NULL}}, 1, true, &s),
        HCQ_INVALID_ARGUMENT, "content");
}

static llm_chat_kind_t detect(const char *tmpl) {
  llm_chat_kind_t k = LLM_CHAT_KIND_COUNT;
  OK(llm_chat_detect(tmpl, strlen(tmpl), &k));
  return k;
}

Test(llm_chat, detection) {
  cr_assert_eq(detect("{{ '<|im_start|>' + role }}"), LLM_CHAT_CHATML);
  cr_assert_eq(detect("{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}"), LLM_CHAT_LLAMA3);
  cr_assert_eq(
      detect("{{ bos_token }}{% if role == 'system' %}{% endif %}{{ '<start_of_turn>' + role }}"),
      LLM_CHAT_GEMMA);
  cr_assert_eq(detect("{{ '[INST] ' + content + ' [/INST]' }}"), LLM_CHAT_LLAMA2);
  cr_assert_eq(detect("{{ '[INST] <<SYS>>\\n' }}"), LLM_CHAT_LLAMA2_SYS);
  cr_assert_eq(detect("{{ bos_token + '[INST] ' + '<<SYS>>' }}"), LLM_CHAT_LLAMA2_SYS_BOS);
  cr_assert_eq(detect("[INST] <<SYS>> {{ message['content'].strip() }} {{ content.strip() }}"),
               LLM_CHAT_LLAMA2_SYS_STRIP);
  cr_assert_eq(detect("{{ ' [INST] ' + system_message }}"), LLM_CHAT_MISTRAL_V1);
  cr_assert_eq(detect("[AVAILABLE_TOOLS] {{ '[INST]' }}"), LLM_CHAT_MISTRAL_V3);
  cr_assert_eq(detect("[AVAILABLE_TOOLS] {{ \"[INST]\" }}"), LLM_CHAT_MISTRAL_V3_TEKKEN);
  cr_assert_eq(detect("[SYSTEM_PROMPT] [INST]"), LLM_CHAT_MISTRAL_V7);
  cr_assert_eq(detect("mistral"), LLM_CHAT_LLAMA2);
  cr_assert_eq(detect("gemma"), LLM_CHAT_GEMMA, "a template that is a family's name");
  /* llama.cpp's order: phi3's markers win over gemma's */
  llm_chat_kind_t k;
  const char *phi3 = "<|assistant|> <|end|> <start_of_turn>";
  FAILS(llm_chat_detect(phi3, strlen(phi3), &k), HCQ_UNIMPLEMENTED, "phi3");
  const char *cmdr = "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>";
  FAILS(llm_chat_detect(cmdr, strlen(cmdr), &k), HCQ_UNIMPLEMENTED, "command-r");
  const char *smolvlm = "<|im_start|>User:<end_of_utterance>";
  FAILS(llm_chat_detect(smolvlm, strlen(smolvlm), &k), HCQ_UNIMPLEMENTED, "smolvlm");
  /* one user message through a detected template, and a forced family */
  char *s;
  const char *gemma = "{{ '<start_of_turn>' }}";
  OK(llm_chat_format_template(gemma, strlen(gemma), NULL, "Be brief.", "Hi", &s));
  cr_assert_str_eq(s, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  free(s);
  OK(llm_chat_format_template(gemma, strlen(gemma), "llama3", NULL, "Hi", &s));
  cr_assert_str_eq(s,
                   "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>"
                   "assistant<|end_header_id|>\n\n");
  free(s);
  FAILS(llm_chat_format_template(gemma, strlen(gemma), "alpaca", NULL, "Hi", &s),
        HCQ_INVALID_ARGUMENT, "alpaca");
}
