/* The tokenizer's private state, shared by its files: tokenizer_load.c (its strings, the tokenizer
 * built from the GGUF metadata, its accessors), tokenizer.c (UTF-8 and character classes, text ->
 * ids, ids -> text) and tokenizer_spm.c (SentencePiece's scores and merging). The contract is
 * tokenizer.h.
 *
 * Every string the merges can produce gets an integer id: vocab tokens keep theirs, and the rare
 * string that is not a token (a merge part or result missing from the vocab, or one of the 256
 * byte characters) gets one past the vocab. Merging then works on ids: a hash maps a pair of ids to
 * its rank and the id of its result, and a word's symbols are merged with a binary heap ordered by
 * (rank, position), so a word of n bytes costs O(n log n) whatever its length. */
#ifndef HCQ_LLM_TOKENIZER_INTERNAL_H
#define HCQ_LLM_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

/* tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece, tokenizer_spm.c). */
enum { MODEL_BPE, MODEL_SPM };
/* The BPE pre-tokenizers (tokenizer.h, step 3). */
enum { PRE_SMOLLM, PRE_GPT2, PRE_LLAMA3, PRE_QWEN2, PRE_DEFAULT };

typedef struct pair_entry {
  uint64_t key; /* left id << 32 | right id; UINT64_MAX: empty */
  uint32_t rank, result;
} pair_entry_t;

struct llm_tokenizer {
  int32_t n_vocab;
  int model, pre;
  char *pre_name;
  int32_t bos, eos, eot, unk;
  bool add_bos, add_eos;
  bool add_space_prefix; /* SPM: a space in front of the text (and after each special token) */
  float *scores;         /* SPM: tokenizer.ggml.scores, per vocab id */
  int32_t
      spm_byte[256]; /* SPM: each byte's fallback token (<0xXX>, else the byte itself), -1: none */
  /* Strings: vocab ids 0..n_vocab-1, then the strings that are not tokens. */
  char *text;
  size_t text_len, text_cap;
  size_t *str_off;
  uint32_t *str_len;
  uint32_t n_str, str_cap;
  uint32_t *map; /* open addressing over the strings: id + 1, 0 empty */
  size_t map_mask;
  /* Per vocab id. */
  uint8_t *type, *eog;
  char *bytes; /* decoded bytes (llm_token_bytes) */
  size_t *bytes_off;
  uint32_t *bytes_len;
  pair_entry_t *pairs;
  size_t pair_mask;
  uint32_t byte_sym[256]; /* the string id of each byte's character */
  int32_t *special;       /* control, user-defined and unknown tokens, longest first */
  size_t n_special;
  uint16_t byte_cp[256]; /* GPT-2's byte -> character map */
  int16_t cp_byte[324];  /* and back (-1: none) */
};

/* The merges' hash (inline: merging a word looks up a pair for every candidate). */
static inline size_t llm_tokenizer_pair_slot(const llm_tokenizer_t *t, uint64_t key) {
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  return (size_t)(h ^ h >> 29) & t->pair_mask;
}

/* The merge of the strings l and r (ids): its rank and the id of its result; NULL when none. */
static inline const pair_entry_t *llm_tokenizer_find_pair(const llm_tokenizer_t *t, uint32_t l,
                                                          uint32_t r) {
  uint64_t key = (uint64_t)l << 32 | r;
  for (size_t i = llm_tokenizer_pair_slot(t, key);; i = (i + 1) & t->pair_mask) {
    if (t->pairs[i].key == key) return &t->pairs[i];
    if (t->pairs[i].key == UINT64_MAX) return NULL;
  }
}

/* tokenizer_load.c */

/* The id of the string s[0..n): a vocab id, or one past the vocab for a string the merges need; -1
 * when it is none. */
int64_t llm_tokenizer_find_str(const llm_tokenizer_t *t, const char *s, size_t n);

/* tokenizer_spm.c */

/* SentencePiece's part of llm_tokenizer_from_gguf: scores, byte tokens, defaults. */
HCQ_MUST_USE hcq_status_t llm_spm_load(llm_tokenizer_t *t, const gguf_file_t *g);
/* The bytes an SPM token of the given type stands for (U+2581 as a space, <0xXX> as its byte),
 * written to out (room for n bytes suffices); the length. */
size_t llm_spm_decode_token(const char *s, size_t n, int type, char *out);

/* Ids appended by a tokenizing step; nomem is set (and nothing more appended) when out of memory.
 */
typedef struct llm_id_list {
  int32_t *ids;
  size_t n, cap;
  bool nomem;
} llm_id_list_t;
void llm_id_list_push(llm_id_list_t *l, int32_t id);

/* SentencePiece over one piece of plain text (special tokens already cut out): appends its ids.
 * space_prefix: a space goes in front (add_space_prefix at the start or after a special token). */
void llm_spm_tokenize(const llm_tokenizer_t *t, const char *text, size_t len, bool space_prefix,
                      llm_id_list_t *out);

/* tokenizer.c */

/* The code point at s[0..n) (n >= 1) read as llama.cpp reads UTF-8, *adv the bytes it took. */
uint32_t llm_utf8_decode_lenient(const uint8_t *s, size_t n, size_t *adv);
/* How much of s[0..n) (n >= 1) a well-formed UTF-8 sequence starts with; *len its full length. */
size_t llm_utf8_valid_prefix(const uint8_t *s, size_t n, size_t *len);

#endif
