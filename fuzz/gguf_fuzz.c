/* libFuzzer target: any bytes as a GGUF file (models/llm/gguf.c). When they open, everything that
 * reads a file before a model is loaded runs over them: the support check for every device kind,
 * the tokenizer built from the metadata (tokenizer_load.c), tokenizing and detokenizing a few fixed
 * texts and the input's own tail, streaming detokenization, and the chat template. Nothing may read
 * outside the input or leak (ASan), whatever the bytes. Seeds: gguf_seeds writes them (make fuzz).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "support.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void drop(hcq_status_t st) { hcq_status_destroy(st); }

/* Tokenizes text both ways (special tokens matched or not), detokenizes what came out, and streams
 * it through a detokenizer with a small output buffer. */
static void round_trip(const llm_tokenizer_t *tok, const char *text, size_t len) {
  for (int special = 0; special < 2; special++) {
    int32_t *ids = NULL;
    size_t n = 0;
    hcq_status_t st = llm_tokenize(tok, text, len, special, true, &ids, &n);
    if (st) {
      drop(st);
      continue;
    }
    char *out = NULL;
    if (!(st = llm_detokenize(tok, ids, n, special, &out))) free(out);
    drop(st);
    llm_detok_t d;
    llm_detok_init(&d);
    char piece[8];
    for (size_t i = 0; i < n; i++) llm_detok_push(tok, &d, ids[i], special, piece, sizeof(piece));
    llm_detok_flush(&d, piece, sizeof(piece));
    free(ids);
  }
}

/* Every token's bytes and text for small vocabularies, the first and last 64 ids otherwise, and
 * ids just outside the vocabulary. */
static void every_token(const llm_tokenizer_t *tok) {
  int32_t vocab = llm_tokenizer_vocab_size(tok);
  for (int32_t id = -2; id < vocab + 2; id++) {
    if (vocab > 256 && id == 64) id = vocab - 64;
    const char *bytes;
    size_t len;
    llm_token_bytes(tok, id, true, &bytes);
    llm_token_bytes(tok, id, false, &bytes);
    llm_token_text(tok, id, &len);
    (void)llm_token_type(tok, id);
    (void)llm_tokenizer_is_eog(tok, id);
  }
  int32_t ids[] = {llm_tokenizer_bos(tok), llm_tokenizer_eos(tok), llm_tokenizer_eot(tok), 0,
                   vocab - 1};
  char *out = NULL;
  hcq_status_t st = llm_detokenize(tok, ids, sizeof(ids) / sizeof(ids[0]), true, &out);
  if (!st) free(out);
  drop(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gguf_file_t *g = NULL;
  hcq_status_t st = gguf_open_memory(data, size, "fuzz.gguf", &g);
  if (st) {
    drop(st);
    return 0;
  }
  for (int k = 0; k < HCQ_DEVICE_KIND_COUNT; k++) drop(llm_model_check(g, (hcq_device_kind_t)k));
  char *chat = NULL;
  if (!(st = llm_chat_format(g, "You are terse.", "Hi <|im_end|> there", &chat))) free(chat);
  drop(st);
  llm_tokenizer_t *tok = NULL;
  if ((st = llm_tokenizer_from_gguf(g, &tok))) {
    drop(st);
    gguf_close(g);
    return 0;
  }
  static const char *const texts[] = {
      "Hello world! It's 2024, don't   stop.\n\n",
      "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n<|im_start|>assistant\n",
      "\xff\xfe\x80 not UTF-8 \xc3",
      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e caf\xc3\xa9 \xf0\x9f\x99\x82\t\ttabs  ",
      "",
  };
  for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
    round_trip(tok, texts[i], strlen(texts[i]));
  /* the input's own bytes as text: the fuzzer steers them too */
  size_t tail = size < 96 ? size : 96;
  round_trip(tok, (const char *)data + size - tail, tail);
  every_token(tok);
  llm_tokenizer_free(tok);
  gguf_close(g);
  return 0;
}
