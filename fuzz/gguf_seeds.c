/* Writes the seed corpus of gguf_fuzz into a folder: small GGUF files with hcq's writer, each a
 * starting point the fuzzer mutates. A byte-level BPE tokenizer (the 256 GPT-2 byte characters, a
 * few merges, ChatML's special tokens, a template) under each pre-tokenizer hcq reads; one with
 * tensors of every ggml block type; a SentencePiece-style ("llama") vocabulary with scores.
 *
 *   gguf_seeds DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

#define TRY(call)                                                                  \
  do {                                                                             \
    hcq_status_t try_st_ = (call);                                                 \
    if (try_st_) {                                                                 \
      fprintf(stderr, "gguf_seeds: %s: %s\n", #call, hcq_status_message(try_st_)); \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

/* GPT-2's byte-to-character map: printable Latin-1 bytes stand for themselves, the others for
 * U+0100 onwards in byte order. The character as UTF-8 in out (3 bytes with the NUL). */
static void byte_char(int b, char out[3]) {
  static int shifted[256], ready = 0;
  if (!ready) {
    int next = 256;
    for (int i = 0; i < 256; i++) {
      bool plain = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255);
      shifted[i] = plain ? i : next++;
    }
    ready = 1;
  }
  int c = shifted[b];
  if (c < 0x80)
    out[0] = (char)c, out[1] = 0;
  else
    out[0] = (char)(0xc0 | c >> 6), out[1] = (char)(0x80 | (c & 0x3f)), out[2] = 0;
}

static const char *const k_merges[] = {"\xc4\xa0 t", "h e",        "\xc4\xa0t he", "i n",
                                       "e r",        "\xc4\xa0 a", "o n",          "r e"};
static const char *const k_merged[] = {"\xc4\xa0t", "he",           "\xc4\xa0the", "in",
                                       "er",        "\xc4\xa0\x61", "on",          "re"};
#define N_MERGES 8
#define N_VOCAB (256 + N_MERGES + 3)

static void add_bpe_tokenizer(gguf_writer_t *w, const char *pre) {
  static char chars[256][3];
  const char *tokens[N_VOCAB];
  int32_t types[N_VOCAB];
  for (int b = 0; b < 256; b++) byte_char(b, chars[b]), tokens[b] = chars[b], types[b] = 1;
  for (int i = 0; i < N_MERGES; i++) tokens[256 + i] = k_merged[i], types[256 + i] = 1;
  const char *specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int i = 0; i < 3; i++)
    tokens[256 + N_MERGES + i] = specials[i], types[256 + N_MERGES + i] = 3;
  TRY(gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2"));
  TRY(gguf_writer_add_str(w, "tokenizer.ggml.pre", pre));
  TRY(gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", tokens, N_VOCAB));
  TRY(gguf_writer_add_i32_array(w, "tokenizer.ggml.token_type", types, N_VOCAB));
  TRY(gguf_writer_add_str_array(w, "tokenizer.ggml.merges", k_merges, N_MERGES));
  TRY(gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 256 + N_MERGES + 1));
  TRY(gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 256 + N_MERGES + 2));
  TRY(gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false));
  TRY(gguf_writer_add_str(w, "tokenizer.chat_template",
                          "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' "
                          "+ message['content'] + "
                          "'<|im_end|>' + '\\n'}}{% endfor %}"));
}

/* A SentencePiece-style vocabulary: <unk>, <s>, </s>, the byte tokens <0x00>.., a few pieces with
 * scores (hcq may not read it yet; the fuzzer then explores the refusal). */
static void add_spm_tokenizer(gguf_writer_t *w) {
  static char bytes[256][8];
  const char *tokens[256 + 6];
  int32_t types[256 + 6];
  float scores[256 + 6];
  const char *pieces[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81the", "\xe2\x96\x81\x61", "in"};
  for (int i = 0; i < 6; i++)
    tokens[i] = pieces[i], types[i] = i < 3 ? (i ? 3 : 2) : 1, scores[i] = -(float)i;
  for (int b = 0; b < 256; b++) {
    snprintf(bytes[b], sizeof(bytes[b]), "<0x%02X>", b);
    tokens[6 + b] = bytes[b], types[6 + b] = 6, scores[6 + b] = 0;
  }
  TRY(gguf_writer_add_str(w, "tokenizer.ggml.model", "llama"));
  TRY(gguf_writer_add_str(w, "tokenizer.ggml.pre", "default"));
  TRY(gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", tokens, 262));
  TRY(gguf_writer_add_i32_array(w, "tokenizer.ggml.token_type", types, 262));
  uint8_t raw[4 + 8 + sizeof(scores)];
  uint32_t elem = GGUF_FLOAT32;
  uint64_t count = 262;
  memcpy(raw, &elem, 4), memcpy(raw + 4, &count, 8), memcpy(raw + 12, scores, sizeof(scores));
  TRY(gguf_writer_add_raw(w, "tokenizer.ggml.scores", GGUF_ARRAY, raw, sizeof(raw)));
  TRY(gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1));
  TRY(gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2));
  TRY(gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true));
  TRY(gguf_writer_add_str(w, "tokenizer.chat_template",
                          "<start_of_turn>user\n{{ content }}<end_of_turn>\n"));
}

/* One tensor of two blocks of each ggml type, and a llama header naming them. */
static void add_every_type(gguf_writer_t *w) {
  TRY(gguf_writer_add_str(w, "general.architecture", "llama"));
  TRY(gguf_writer_add_u32(w, "llama.block_count", 1));
  static uint8_t data[2 * 292];
  for (size_t i = 0; i < sizeof(data); i++) data[i] = (uint8_t)(i * 31 + 7);
  for (uint32_t type = 0; type < 64; type++) {
    if (!ggml_type_known(type)) continue;
    char name[48];
    snprintf(name, sizeof(name), "blk.0.%s.weight", ggml_type_name(type));
    uint64_t ne[2] = {ggml_block_elems((ggml_type_t)type), 2};
    TRY(gguf_writer_add_tensor(w, name, (ggml_type_t)type, ne, 2, data));
  }
}

static void write_seed(const char *dir, const char *name, gguf_writer_t *w) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  TRY(gguf_writer_write(w, path));
  gguf_writer_free(w);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gguf_seeds DIR\n");
    return 2;
  }
  const char *pres[] = {"smollm", "gpt-2", "llama-bpe"};
  for (int i = 0; i < 3; i++) {
    gguf_writer_t *w;
    TRY(gguf_writer_create(&w));
    TRY(gguf_writer_add_str(w, "general.architecture", "llama"));
    add_bpe_tokenizer(w, pres[i]);
    char name[64];
    snprintf(name, sizeof(name), "bpe-%s.gguf", pres[i]);
    write_seed(argv[1], name, w);
  }
  gguf_writer_t *w;
  TRY(gguf_writer_create(&w));
  add_spm_tokenizer(w);
  write_seed(argv[1], "spm.gguf", w);
  TRY(gguf_writer_create(&w));
  add_every_type(w);
  write_seed(argv[1], "every-type.gguf", w);
  return 0;
}
