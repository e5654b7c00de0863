/* A question to a language model through libhcq_llm (hcq/llm.h), the answer streamed as it is
 * generated: the model's file (or a known name: smollm2-135m, gemma-3-270m; none: SmolLM2-135M-
 * Instruct, downloaded on first use), its chat template, greedy decoding as graph replays.
 *
 *   cc llm_chat.c $(pkg-config --cflags --libs hcq-llm) -o llm_chat
 *   ./llm_chat [MODEL] ["QUESTION"]
 */
#include <hcq/llm.h>
#include <stdio.h>
#include <stdlib.h>

static bool print_piece(void *user, int32_t id, const char *text, size_t len) {
  (void)id;
  int *pieces = user;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  (*pieces)++;
  return true;
}

static int fail(hcq_status_t st) {
  fprintf(stderr, "llm_chat: %s\n", hcq_status_message(st));
  hcq_status_destroy(st);
  return 1;
}

int main(int argc, char **argv) {
  const char *model = argc > 1 ? argv[1] : NULL;
  const char *question =
      argc > 2 ? argv[2] : "What is the capital of France? Answer in one sentence.";
  hcq_llm_options_t options = {.log = stderr}; /* a download says what it does */
  hcq_llm_t *llm;
  hcq_status_t st = hcq_llm_open(model, &options, &llm);
  if (st) return fail(st);

  hcq_llm_info_t info;
  hcq_llm_get_info(llm, &info);
  fprintf(stderr, "%s (%s, %s) on %s\n", info.name, info.architecture, info.weight_types,
          info.device);

  hcq_llm_message_t chat[] = {{"user", question}};
  int pieces = 0;
  hcq_llm_generate_options_t generate = {
      .max_tokens = 48, .on_token = print_piece, .user = &pieces};
  hcq_llm_result_t result;
  st = hcq_llm_chat(llm, chat, 1, &generate, &result);
  if (!st) {
    printf("\n");
    fprintf(stderr,
            "%zu prompt tokens, %zu new tokens (%d pieces streamed), stopped: %s; %.1f tokens/s\n",
            result.prompt_tokens, result.n, pieces, hcq_llm_stop_name(result.stop),
            result.n > 1 && result.decode_ms > 0 ? (double)(result.n - 1) / (result.decode_ms / 1e3)
                                                 : 0.0);
  }
  hcq_llm_result_free(&result);
  hcq_status_t closed = hcq_llm_close(llm);
  if (st) {
    hcq_status_destroy(closed);
    return fail(st);
  }
  return closed ? fail(closed) : 0;
}
