/* Byte-level BPE as llama.cpp runs it for tokenizer.ggml.model "gpt2" (the contract: tokenizer.h).
 *
 * Every string the merges can produce gets an integer id: vocab tokens keep theirs, and the rare
 * string that is not a token (a merge part or result missing from the vocab, or one of the 256
 * byte characters) gets one past the vocab. Merging then works on ids: a hash maps a pair of ids to
 * its rank and the id of its result, and a word's symbols are merged with a binary heap ordered by
 * (rank, position), so a word of n bytes costs O(n log n) whatever its length. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_utf8.h"
#include "tokenizer.h"
#include "unicode_llm.h"

enum { PRE_SMOLLM, PRE_GPT2, PRE_LLAMA3 };

static const struct {
  const char *name;
  int pre;
} pre_names[] = {
    {"smollm", PRE_SMOLLM}, {"starcoder", PRE_SMOLLM}, {"refact", PRE_SMOLLM},   {"codeshell", PRE_SMOLLM},
    {"gpt-2", PRE_GPT2},    {"phi-2", PRE_GPT2},       {"llama-bpe", PRE_LLAMA3}, {"llama3", PRE_LLAMA3},
    {"llama-v3", PRE_LLAMA3},
};

/* Tokens that end a turn when a model spells them so (llama.cpp also makes them control tokens). */
static const char *const eog_texts[] = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"};

typedef struct pair_entry {
  uint64_t key; /* left id << 32 | right id; UINT64_MAX: empty */
  uint32_t rank, result;
} pair_entry_t;

struct llm_tokenizer {
  int32_t n_vocab;
  int pre;
  char *pre_name;
  int32_t bos, eos, eot;
  bool add_bos;
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

/* ---- strings ---- */

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
  return h ^ (h >> 31);
}

/* The slot of a string in the map, or the empty slot where it would go. */
static size_t slot_of(const llm_tokenizer_t *t, const char *s, size_t n) {
  for (size_t i = (size_t)hash_bytes(s, n) & t->map_mask;; i = (i + 1) & t->map_mask) {
    uint32_t v = t->map[i];
    if (!v || (t->str_len[v - 1] == n && !memcmp(t->text + t->str_off[v - 1], s, n))) return i;
  }
}

static int64_t find_str(const llm_tokenizer_t *t, const char *s, size_t n) {
  uint32_t v = t->map[slot_of(t, s, n)];
  return v ? (int64_t)v - 1 : -1;
}

/* Maps id's string to id, replacing what it mapped to: a vocab string that appears twice maps to
 * its last id (as llama.cpp's token_to_id). */
static void map_put(llm_tokenizer_t *t, uint32_t id) { t->map[slot_of(t, t->text + t->str_off[id], t->str_len[id])] = id + 1; }

static bool map_grow(llm_tokenizer_t *t, size_t cap) {
  uint32_t *m = calloc(cap, sizeof(*m));
  if (!m) return false;
  free(t->map);
  t->map = m, t->map_mask = cap - 1;
  for (uint32_t id = 0; id < t->n_str; id++) map_put(t, id);
  return true;
}

/* Appends a string (not yet in the map) and returns its id, or -1 when out of memory. */
static int64_t add_str(llm_tokenizer_t *t, const char *s, size_t n) {
  if (t->text_len + n > t->text_cap) {
    size_t cap = t->text_cap * 2 + n + 64;
    char *p = realloc(t->text, cap);
    if (!p) return -1;
    t->text = p, t->text_cap = cap;
  }
  if (t->n_str == t->str_cap) {
    uint32_t cap = t->str_cap * 2 + 64;
    size_t *o = realloc(t->str_off, cap * sizeof(*o));
    if (o) t->str_off = o;
    uint32_t *l = o ? realloc(t->str_len, cap * sizeof(*l)) : NULL;
    if (!l) return -1;
    t->str_len = l, t->str_cap = cap;
  }
  memcpy(t->text + t->text_len, s, n);
  t->str_off[t->n_str] = t->text_len, t->str_len[t->n_str] = (uint32_t)n;
  t->text_len += n;
  return t->n_str++;
}

/* The id of a string, added (past the vocab) when it is none yet; -1 when out of memory. */
static int64_t intern(llm_tokenizer_t *t, const char *s, size_t n) {
  int64_t id = find_str(t, s, n);
  if (id >= 0) return id;
  if (2 * ((size_t)t->n_str + 1) > t->map_mask + 1 && !map_grow(t, 2 * (t->map_mask + 1))) return -1;
  id = add_str(t, s, n);
  if (id >= 0) map_put(t, (uint32_t)id);
  return id;
}

/* ---- UTF-8 and character classes ---- */

/* llama.cpp's reading of UTF-8 (tokenizer.h, step 2): a lead byte and the continuation bytes it
 * announces; over-long forms and surrogates pass. *adv is what was consumed (1 for U+FFFD). */
static uint32_t decode_lenient(const uint8_t *s, size_t n, size_t *adv) {
  uint8_t b = s[0];
  size_t need = b < 0x80 ? 1 : b < 0xC0 ? 0 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF8 ? 4 : 0;
  *adv = 1;
  if (need == 1) return b;
  if (!need || need > n) return 0xFFFD;
  uint32_t cp = b & (0x7F >> need);
  for (size_t i = 1; i < need; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0xFFFD;
    cp = cp << 6 | (s[i] & 0x3F);
  }
  if (cp > 0x10FFFF) return 0xFFFD;
  *adv = need;
  return cp;
}

/* How many bytes of s[0..n) a well-formed sequence (Unicode table 3-7) could start with: *len is
 * the length of the complete sequence when the result equals it, else the result is the length of
 * the maximal valid prefix (0 for a byte that starts nothing). */
static size_t utf8_valid_prefix(const uint8_t *s, size_t n, size_t *len) {
  uint8_t b = s[0];
  *len = b < 0x80 ? 1 : b < 0xC2 ? 0 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF5 ? 4 : 0;
  if (*len <= 1) return *len;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b == 0xE0) lo = 0xA0;
  else if (b == 0xED) hi = 0x9F;
  else if (b == 0xF0) lo = 0x90;
  else if (b == 0xF4) hi = 0x8F;
  size_t k = 1;
  for (; k < *len && k < n; k++) {
    if (s[k] < lo || s[k] > hi) break;
    lo = 0x80, hi = 0xBF;
  }
  return k;
}

/* Unicode's White_Space property (PropList.txt): llama.cpp's \s. */
static bool cp_is_space(uint32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

enum { F_LETTER = 1, F_NUMBER = 2, F_SPACE = 4, F_OTHER = 8 };

static uint8_t cp_flags(uint32_t c) {
  if (cp_is_space(c)) return F_SPACE;
  if (c < 0x80) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return F_LETTER;
    return c >= '0' && c <= '9' ? F_NUMBER : F_OTHER;
  }
  size_t lo = 0, hi = llm_unicode_classes_count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < llm_unicode_classes[mid].first) hi = mid;
    else if (c > llm_unicode_classes[mid].last) lo = mid + 1;
    else return llm_unicode_classes[mid].cls == LLM_CP_LETTER ? F_LETTER : F_NUMBER;
  }
  return F_OTHER;
}

/* ---- building ---- */

static hcq_status_t required(hcq_status_t s) {
  if (hcq_status_code(s) != HCQ_NOT_FOUND) return s;
  hcq_status_t r = hcq_status_make(HCQ_INVALID_ARGUMENT, "%s (the tokenizer needs it)", hcq_status_message(s));
  hcq_status_destroy(s);
  return r;
}

static hcq_status_t oom(const gguf_file_t *g) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory building the tokenizer", gguf_path(g));
}

static hcq_status_t get_id(const gguf_file_t *g, const char *key, int32_t n_vocab, int32_t *out) {
  uint32_t v = UINT32_MAX;
  hcq_status_t s = gguf_get_u32_or(g, key, &v);
  if (s) return s;
  if (v != UINT32_MAX && v >= (uint32_t)n_vocab)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: metadata key \"%s\" is %u, outside the vocab of %d tokens",
                           gguf_path(g), key, v, n_vocab);
  *out = v == UINT32_MAX ? -1 : (int32_t)v;
  return NULL;
}

/* The bytes a normal token stands for: each character of GPT-2's map is its byte, anything else is
 * kept as it is. */
static size_t decode_token(const llm_tokenizer_t *t, const char *s, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t len, k = utf8_valid_prefix((const uint8_t *)s + i, n - i, &len);
    if (!len || k != len) {
      out[o++] = s[i++];
      continue;
    }
    size_t adv;
    uint32_t cp = decode_lenient((const uint8_t *)s + i, n - i, &adv);
    if (cp < 324 && t->cp_byte[cp] >= 0) out[o++] = (char)t->cp_byte[cp];
    else memcpy(out + o, s + i, len), o += len;
    i += len;
  }
  return o;
}

static int cmp_special(const void *a, const void *b) {
  const int64_t *x = a, *y = b; /* (length << 32 | id): longest first, then lower id */
  int64_t lx = x[0] >> 32, ly = y[0] >> 32;
  if (lx != ly) return lx > ly ? -1 : 1;
  return (x[0] & 0xFFFFFFFF) < (y[0] & 0xFFFFFFFF) ? -1 : (x[0] & 0xFFFFFFFF) > (y[0] & 0xFFFFFFFF);
}

/* The token texts, each findable by its text; *out_total: the bytes their decoded forms may take. */
static hcq_status_t load_token_texts(llm_tokenizer_t *t, const gguf_file_t *g, size_t *out_total) {
  const char *path = gguf_path(g);
  gguf_str_t *toks;
  uint64_t n;
  hcq_status_t s = required(gguf_get_str_array(g, "tokenizer.ggml.tokens", &toks, &n));
  if (s) return s;
  if (n == 0 || n >= INT32_MAX / 2) {
    free(toks);
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: tokenizer.ggml.tokens holds %llu tokens (expected 1 to %d)", path,
                           (unsigned long long)n, INT32_MAX / 2 - 1);
  }
  t->n_vocab = (int32_t)n;
  size_t total = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (toks[i].len > LLM_TOKEN_MAX_BYTES) {
      unsigned long long len = toks[i].len;
      free(toks);
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: tokenizer.ggml.tokens: token %llu is %llu bytes long (at most %d)",
                             path, (unsigned long long)i, len, LLM_TOKEN_MAX_BYTES);
    }
    total += toks[i].len ? toks[i].len : 24;
  }
  size_t cap = 1024;
  while (cap < 2 * (n + 512)) cap <<= 1;
  t->text_cap = total + 4096, t->str_cap = (uint32_t)n + 512;
  t->text = malloc(t->text_cap), t->str_off = malloc(t->str_cap * sizeof(size_t));
  t->str_len = malloc(t->str_cap * sizeof(uint32_t)), t->map = calloc(cap, sizeof(uint32_t)), t->map_mask = cap - 1;
  t->type = malloc(n), t->eog = calloc(n, 1);
  if (!t->text || !t->str_off || !t->str_len || !t->map || !t->type || !t->eog) {
    free(toks);
    return oom(g);
  }
  for (uint64_t i = 0; i < n; i++) {
    char empty[32];
    const char *p = toks[i].ptr;
    size_t len = toks[i].len;
    if (!len) /* as llama.cpp: an empty token is renamed, so that it matches nothing */
      len = (size_t)snprintf(empty, sizeof(empty), "[EMPTY_%llu]", (unsigned long long)i), p = empty;
    map_put(t, (uint32_t)add_str(t, p, len)); /* cannot fail: preallocated */
  }
  free(toks);
  *out_total = total;
  return NULL;
}

/* Each token's type (normal where the file gives none) and which tokens end a generation. */
static hcq_status_t load_token_types(llm_tokenizer_t *t, const gguf_file_t *g) {
  uint64_t n = (uint64_t)t->n_vocab;
  memset(t->type, LLM_TOKEN_NORMAL, n);
  if (gguf_find_kv(g, "tokenizer.ggml.token_type")) {
    const void *types;
    uint64_t count;
    hcq_status_t s = gguf_get_array(g, "tokenizer.ggml.token_type", GGUF_INT32, &types, &count);
    if (s) return s;
    if (count < n)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: tokenizer.ggml.token_type holds %llu values for %llu tokens",
                             gguf_path(g), (unsigned long long)count, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
      int32_t v;
      memcpy(&v, (const char *)types + 4 * i, 4);
      t->type[i] = v >= LLM_TOKEN_NORMAL && v <= LLM_TOKEN_BYTE ? (uint8_t)v : LLM_TOKEN_UNDEFINED;
    }
  }
  for (size_t k = 0; k < sizeof(eog_texts) / sizeof(eog_texts[0]); k++) {
    int64_t id = find_str(t, eog_texts[k], strlen(eog_texts[k]));
    if (id >= 0) t->type[id] = LLM_TOKEN_CONTROL, t->eog[id] = 1;
  }
  return NULL;
}

/* The bytes each token stands for, by its type; total bounds them all. */
static hcq_status_t decode_vocab(llm_tokenizer_t *t, const gguf_file_t *g, size_t total) {
  uint64_t n = (uint64_t)t->n_vocab;
  t->bytes = malloc(total + 1), t->bytes_off = malloc(n * sizeof(size_t)), t->bytes_len = malloc(n * sizeof(uint32_t));
  if (!t->bytes || !t->bytes_off || !t->bytes_len) return oom(g);
  size_t o = 0;
  for (uint64_t i = 0; i < n; i++) {
    const char *p = t->text + t->str_off[i];
    size_t len = t->str_len[i];
    t->bytes_off[i] = o;
    switch (t->type[i]) {
    case LLM_TOKEN_NORMAL:
    case LLM_TOKEN_BYTE: o += decode_token(t, p, len, t->bytes + o); break;
    case LLM_TOKEN_CONTROL:
    case LLM_TOKEN_UNKNOWN:
    case LLM_TOKEN_USER_DEFINED: memcpy(t->bytes + o, p, len), o += len; break;
    default: break; /* unused, undefined: nothing */
    }
    t->bytes_len[i] = (uint32_t)(o - t->bytes_off[i]);
  }
  return NULL;
}

/* Special tokens for the partition: longest first, then lower id. */
static hcq_status_t collect_special_tokens(llm_tokenizer_t *t, const gguf_file_t *g) {
  uint64_t n = (uint64_t)t->n_vocab;
  int64_t *sp = malloc(n * sizeof(*sp));
  if (!sp) return oom(g);
  size_t ns = 0;
  for (uint64_t i = 0; i < n; i++)
    if (t->type[i] == LLM_TOKEN_CONTROL || t->type[i] == LLM_TOKEN_USER_DEFINED || t->type[i] == LLM_TOKEN_UNKNOWN)
      sp[ns++] = (int64_t)t->str_len[i] << 32 | (int64_t)i;
  qsort(sp, ns, sizeof(*sp), cmp_special);
  t->special = malloc((ns ? ns : 1) * sizeof(int32_t));
  if (!t->special) {
    free(sp);
    return oom(g);
  }
  for (size_t i = 0; i < ns; i++) t->special[i] = (int32_t)(sp[i] & 0xFFFFFFFF);
  t->n_special = ns;
  free(sp);
  return NULL;
}

static hcq_status_t load_vocab(llm_tokenizer_t *t, const gguf_file_t *g) {
  size_t total = 0;
  hcq_status_t s = load_token_texts(t, g, &total);
  if (!s) s = load_token_types(t, g);
  if (!s) s = decode_vocab(t, g, total);
  if (!s) s = collect_special_tokens(t, g);
  return s;
}

static size_t pair_slot(const llm_tokenizer_t *t, uint64_t key) {
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  return (size_t)(h ^ h >> 29) & t->pair_mask;
}

static const pair_entry_t *find_pair(const llm_tokenizer_t *t, uint32_t l, uint32_t r) {
  uint64_t key = (uint64_t)l << 32 | r;
  for (size_t i = pair_slot(t, key);; i = (i + 1) & t->pair_mask) {
    if (t->pairs[i].key == key) return &t->pairs[i];
    if (t->pairs[i].key == UINT64_MAX) return NULL;
  }
}

/* GPT-2's byte characters: printable Latin-1 stands for itself, the other bytes for 256, 257... */
static void init_byte_map(llm_tokenizer_t *t) {
  memset(t->cp_byte, 0xFF, sizeof(t->cp_byte));
  for (int b = 0, extra = 0; b < 256; b++) {
    bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    t->byte_cp[b] = (uint16_t)(self ? b : 256 + extra++);
    t->cp_byte[t->byte_cp[b]] = (int16_t)b;
  }
}

static hcq_status_t load_merges(llm_tokenizer_t *t, const gguf_file_t *g) {
  for (int b = 0; b < 256; b++) {
    uint8_t u[4];
    int64_t id = intern(t, (const char *)u, hcq_model_utf8_encode(t->byte_cp[b], u));
    if (id < 0) return oom(g);
    t->byte_sym[b] = (uint32_t)id;
  }
  gguf_str_t *m;
  uint64_t n;
  hcq_status_t s = required(gguf_get_str_array(g, "tokenizer.ggml.merges", &m, &n));
  if (s) return s;
  if (n >= UINT32_MAX / 4) {
    free(m);
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: tokenizer.ggml.merges holds %llu merges", gguf_path(g),
                           (unsigned long long)n);
  }
  size_t cap = 1024;
  while (cap < 2 * n) cap <<= 1;
  t->pairs = malloc(cap * sizeof(*t->pairs)), t->pair_mask = cap - 1;
  char *buf = NULL;
  size_t buf_cap = 0;
  if (!t->pairs) goto nomem;
  memset(t->pairs, 0xFF, cap * sizeof(*t->pairs));
  for (uint64_t i = 0; i < n; i++) {
    /* "left right", split at the first space after the first byte (a merge may start with one). */
    const char *p = m[i].ptr;
    size_t len = m[i].len;
    const char *sp = len > 1 ? memchr(p + 1, ' ', len - 1) : NULL;
    if (!sp) continue; /* llama.cpp keeps it as a pair of empty strings, which never matches */
    size_t ll = (size_t)(sp - p), rl = len - ll - 1;
    if (ll + rl > buf_cap) {
      char *nb = realloc(buf, buf_cap = 2 * (ll + rl) + 64);
      if (!nb) goto nomem;
      buf = nb;
    }
    memcpy(buf, p, ll), memcpy(buf + ll, sp + 1, rl);
    int64_t l = intern(t, p, ll), r = intern(t, sp + 1, rl), res = intern(t, buf, ll + rl);
    if (l < 0 || r < 0 || res < 0) goto nomem;
    uint64_t key = (uint64_t)l << 32 | (uint64_t)r;
    size_t k = pair_slot(t, key);
    while (t->pairs[k].key != UINT64_MAX && t->pairs[k].key != key) k = (k + 1) & t->pair_mask;
    if (t->pairs[k].key == key) continue; /* the first rank of a repeated pair wins */
    t->pairs[k] = (pair_entry_t){key, (uint32_t)i, (uint32_t)res};
  }
  free(buf);
  free(m);
  return NULL;
nomem:
  free(buf);
  free(m);
  return oom(g);
}

hcq_status_t llm_tokenizer_from_gguf(const gguf_file_t *g, llm_tokenizer_t **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_tokenizer_from_gguf: out is NULL");
  *out = NULL;
  if (!g) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_tokenizer_from_gguf: g is NULL");
  const char *path = gguf_path(g);
  gguf_str_t model;
  hcq_status_t s = required(gguf_get_str(g, "tokenizer.ggml.model", &model));
  if (s) return s;
  if (model.len != 4 || memcmp(model.ptr, "gpt2", 4))
    return hcq_status_make(HCQ_UNIMPLEMENTED,
                           "%s: tokenizer.ggml.model is \"%.*s\": only byte-level BPE (\"gpt2\") tokenizers are supported",
                           path, (int)(model.len > 64 ? 64 : model.len), model.ptr);
  if (!gguf_find_kv(g, "tokenizer.ggml.pre"))
    return hcq_status_make(HCQ_UNIMPLEMENTED,
                           "%s: no tokenizer.ggml.pre: llama.cpp's \"default\" pre-tokenizer is not supported (smollm, "
                           "gpt-2 and llama-bpe are)",
                           path);
  gguf_str_t pre;
  if ((s = gguf_get_str(g, "tokenizer.ggml.pre", &pre))) return s;
  int kind = -1;
  for (size_t i = 0; i < sizeof(pre_names) / sizeof(pre_names[0]); i++)
    if (pre.len == strlen(pre_names[i].name) && !memcmp(pre.ptr, pre_names[i].name, pre.len)) kind = pre_names[i].pre;
  if (kind < 0)
    return hcq_status_make(HCQ_UNIMPLEMENTED,
                           "%s: pre-tokenizer \"%.*s\" (tokenizer.ggml.pre) is not supported (smollm, gpt-2 and llama-bpe are)",
                           path, (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);

  llm_tokenizer_t *t = calloc(1, sizeof(*t));
  if (!t || !(t->pre_name = malloc(pre.len + 1))) {
    free(t);
    return oom(g);
  }
  memcpy(t->pre_name, pre.ptr, pre.len);
  t->pre_name[pre.len] = 0;
  t->pre = kind;
  t->add_bos = kind == PRE_LLAMA3;
  init_byte_map(t);
  if (!(s = load_vocab(t, g)) && !(s = load_merges(t, g)) &&
      !(s = get_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos)) &&
      !(s = get_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos)) &&
      !(s = get_id(g, "tokenizer.ggml.eot_token_id", t->n_vocab, &t->eot)) &&
      !(s = gguf_get_bool_or(g, "tokenizer.ggml.add_bos_token", &t->add_bos))) {
    if (t->add_bos && t->bos < 0)
      s = hcq_status_make(HCQ_INVALID_ARGUMENT,
                          "%s: tokenizer.ggml.add_bos_token is true but there is no tokenizer.ggml.bos_token_id", path);
  }
  if (s) {
    llm_tokenizer_free(t);
    return s;
  }
  if (t->eos >= 0) t->eog[t->eos] = 1;
  if (t->eot >= 0) t->eog[t->eot] = 1;
  *out = t;
  return NULL;
}

void llm_tokenizer_free(llm_tokenizer_t *t) {
  if (!t) return;
  free(t->pre_name);
  free(t->text);
  free(t->str_off);
  free(t->str_len);
  free(t->map);
  free(t->type);
  free(t->eog);
  free(t->bytes);
  free(t->bytes_off);
  free(t->bytes_len);
  free(t->pairs);
  free(t->special);
  free(t);
}

int32_t llm_tokenizer_vocab_size(const llm_tokenizer_t *t) { return t->n_vocab; }
int32_t llm_tokenizer_bos(const llm_tokenizer_t *t) { return t->bos; }
int32_t llm_tokenizer_eos(const llm_tokenizer_t *t) { return t->eos; }
int32_t llm_tokenizer_eot(const llm_tokenizer_t *t) { return t->eot; }
bool llm_tokenizer_add_bos(const llm_tokenizer_t *t) { return t->add_bos; }
const char *llm_tokenizer_pre_name(const llm_tokenizer_t *t) { return t->pre_name; }

bool llm_tokenizer_is_eog(const llm_tokenizer_t *t, int32_t id) { return id >= 0 && id < t->n_vocab && t->eog[id]; }

llm_token_type_t llm_token_type(const llm_tokenizer_t *t, int32_t id) {
  return id >= 0 && id < t->n_vocab ? (llm_token_type_t)t->type[id] : LLM_TOKEN_UNDEFINED;
}

const char *llm_token_text(const llm_tokenizer_t *t, int32_t id, size_t *out_len) {
  if (id < 0 || id >= t->n_vocab) {
    if (out_len) *out_len = 0;
    return NULL;
  }
  if (out_len) *out_len = t->str_len[id];
  return t->text + t->str_off[id];
}

int32_t llm_token_find(const llm_tokenizer_t *t, const char *text, size_t len) {
  int64_t id = find_str(t, text, len);
  return id >= 0 && id < t->n_vocab ? (int32_t)id : -1;
}

size_t llm_token_bytes(const llm_tokenizer_t *t, int32_t id, bool special, const char **out) {
  *out = "";
  if (id < 0 || id >= t->n_vocab) return 0;
  if (!special && (t->type[id] == LLM_TOKEN_CONTROL || t->type[id] == LLM_TOKEN_UNKNOWN)) return 0;
  *out = t->bytes + t->bytes_off[id];
  return t->bytes_len[id];
}

/* ---- tokenizing ---- */

typedef struct sym {
  uint32_t id; /* DEAD once merged into its left neighbour */
  int32_t prev, next; /* -1: none */
} sym_t;
#define DEAD UINT32_MAX

typedef struct cand {
  uint32_t rank, right_id;
  int32_t left, right;
} cand_t;

/* One call's working memory. */
typedef struct session {
  const llm_tokenizer_t *t;
  int32_t *ids;
  size_t n, cap;
  uint32_t *cps;  /* a text piece's code points */
  uint8_t *flags; /* F_* of each */
  size_t *off;    /* byte offset of each in norm, and the end */
  uint8_t *norm;  /* the piece re-encoded (invalid bytes as U+FFFD) */
  size_t pcap;
  sym_t *syms;
  cand_t *heap;
  size_t scap, hcap, nheap;
  char *enc; /* a word in GPT-2 characters (llama-bpe's whole-word lookup) */
  size_t ecap;
  bool nomem;
} session_t;

static void emit(session_t *s, int32_t id) {
  if (s->n == s->cap) {
    size_t cap = s->cap * 2 + 256;
    int32_t *p = realloc(s->ids, cap * sizeof(*p));
    if (!p) {
      s->nomem = true;
      return;
    }
    s->ids = p, s->cap = cap;
  }
  s->ids[s->n++] = id;
}

static bool cand_less(const cand_t *a, const cand_t *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(session_t *s, int32_t l, int32_t r) {
  const pair_entry_t *e = find_pair(s->t, s->syms[l].id, s->syms[r].id);
  if (!e) return;
  if (s->nheap == s->hcap) {
    size_t cap = 2 * s->hcap + 64;
    cand_t *h = realloc(s->heap, cap * sizeof(*h));
    if (!h) {
      s->nomem = true;
      return;
    }
    s->heap = h, s->hcap = cap;
  }
  cand_t c = {e->rank, s->syms[r].id, l, r};
  size_t i = s->nheap++;
  while (i && cand_less(&c, &s->heap[(i - 1) / 2])) s->heap[i] = s->heap[(i - 1) / 2], i = (i - 1) / 2;
  s->heap[i] = c;
}

static cand_t heap_pop(session_t *s) {
  cand_t top = s->heap[0], last = s->heap[--s->nheap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= s->nheap) break;
    if (c + 1 < s->nheap && cand_less(&s->heap[c + 1], &s->heap[c])) c++;
    if (!cand_less(&s->heap[c], &last)) break;
    s->heap[i] = s->heap[c], i = c;
  }
  if (s->nheap) s->heap[i] = last;
  return top;
}

static void emit_piece(session_t *s, uint32_t id) {
  const llm_tokenizer_t *t = s->t;
  if (id < (uint32_t)t->n_vocab) {
    emit(s, (int32_t)id);
    return;
  }
  /* Not a token: as llama.cpp, each byte of its text that is a token on its own. */
  const char *p = t->text + t->str_off[id];
  for (uint32_t i = 0; i < t->str_len[id]; i++) {
    int64_t b = find_str(t, p + i, 1);
    if (b >= 0 && b < t->n_vocab) emit(s, (int32_t)b);
  }
}

/* BPE over one word: bytes w[0..n). */
static void bpe_word(session_t *s, const uint8_t *w, size_t n) {
  const llm_tokenizer_t *t = s->t;
  if (n == 0) return;
  if (t->pre == PRE_LLAMA3) { /* a word that is a token is that token */
    if (2 * n > s->ecap) {
      char *e = realloc(s->enc, 2 * n);
      if (!e) {
        s->nomem = true;
        return;
      }
      s->enc = e, s->ecap = 2 * n;
    }
    size_t len = 0;
    for (size_t i = 0; i < n; i++) len += hcq_model_utf8_encode(t->byte_cp[w[i]], (uint8_t *)s->enc + len);
    int64_t id = find_str(t, s->enc, len);
    if (id >= 0 && id < t->n_vocab) {
      emit(s, (int32_t)id);
      return;
    }
  }
  if (n == 1) {
    emit_piece(s, t->byte_sym[w[0]]);
    return;
  }
  if (n > s->scap) {
    sym_t *y = realloc(s->syms, n * sizeof(*y));
    if (!y) {
      s->nomem = true;
      return;
    }
    s->syms = y, s->scap = n;
  }
  sym_t *y = s->syms;
  for (size_t i = 0; i < n; i++) y[i] = (sym_t){t->byte_sym[w[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
  s->nheap = 0;
  for (size_t i = 0; i + 1 < n && !s->nomem; i++) heap_push(s, (int32_t)i, (int32_t)i + 1);
  while (s->nheap && !s->nomem) {
    cand_t c = heap_pop(s);
    sym_t *l = &y[c.left], *r = &y[c.right];
    /* Stale when either side was merged away or the right side has grown since. */
    if (l->id == DEAD || r->id != c.right_id) continue;
    const pair_entry_t *e = find_pair(t, l->id, r->id);
    if (!e) continue; /* cannot happen: the left side never changes while its right one lives */
    l->id = e->result;
    r->id = DEAD;
    l->next = r->next;
    if (r->next >= 0) y[r->next].prev = c.left;
    if (l->prev >= 0) heap_push(s, l->prev, c.left);
    if (l->next >= 0) heap_push(s, c.left, l->next);
  }
  for (int32_t i = 0; i >= 0; i = y[i].next) emit_piece(s, y[i].id);
}

static void word(session_t *s, size_t a, size_t b) { bpe_word(s, s->norm + s->off[a], s->off[b] - s->off[a]); }

/* The GPT-2 split of code points [lo, hi). */
static void split_gpt2(session_t *s, size_t lo, size_t hi) {
  const uint32_t *c = s->cps;
  const uint8_t *f = s->flags;
  for (size_t pos = lo; pos < hi;) {
    if (c[pos] == '\'' && pos + 1 < hi) {
      uint32_t n1 = c[pos + 1], n2 = pos + 2 < hi ? c[pos + 2] : 0;
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
        word(s, pos, pos + 2), pos += 2;
        continue;
      }
      if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
        word(s, pos, pos + 3), pos += 3;
        continue;
      }
    }
    /* ' ?X+' for X letters, numbers or others: the class of the character after an optional space. */
    size_t start = pos, first = c[pos] == ' ' ? pos + 1 : pos;
    uint8_t k = first < hi ? f[first] : 0;
    if (k & (F_LETTER | F_NUMBER | F_OTHER)) {
      size_t end = first + 1;
      while (end < hi && f[end] == k) end++;
      word(s, start, end), pos = end;
      continue;
    }
    size_t end = pos;
    while (end < hi && (f[end] & F_SPACE)) end++;
    if (end - pos > 1 && end < hi) end--; /* \s+(?!\S): leave the last space to the next word */
    if (end == pos) end++;
    word(s, pos, end), pos = end;
  }
}

/* llama 3's split of code points [lo, hi). */
static void split_llama3(session_t *s, size_t lo, size_t hi) {
  const uint32_t *c = s->cps;
  const uint8_t *f = s->flags;
  for (size_t pos = lo; pos < hi;) {
    uint32_t cp = c[pos];
    if (cp == '\'' && pos + 1 < hi) {
      uint32_t n1 = c[pos + 1] | (c[pos + 1] < 0x80 ? 0x20 : 0), n2 = pos + 2 < hi ? c[pos + 2] | (c[pos + 2] < 0x80 ? 0x20 : 0) : 0;
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
        word(s, pos, pos + 2), pos += 2;
        continue;
      }
      if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
        word(s, pos, pos + 3), pos += 3;
        continue;
      }
    }
    size_t end = pos + 1;
    if (cp != '\r' && cp != '\n' && !(f[pos] & F_NUMBER) && ((f[pos] & F_LETTER) || (end < hi && (f[end] & F_LETTER)))) {
      while (end < hi && (f[end] & F_LETTER)) end++; /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    } else if (f[pos] & F_NUMBER) {
      while (end < hi && end - pos < 3 && (f[end] & F_NUMBER)) end++; /* \p{N}{1,3} */
    } else {
      size_t first = cp == ' ' ? pos + 1 : pos;
      if (first < hi && (f[first] & F_OTHER)) { /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
        end = first + 1;
        while (end < hi && (f[end] & F_OTHER)) end++;
        while (end < hi && (c[end] == '\r' || c[end] == '\n')) end++;
      } else {
        size_t nl = 0;
        for (end = pos; end < hi && (f[end] & F_SPACE); end++)
          if (c[end] == '\r' || c[end] == '\n') nl = end + 1;
        if (nl) end = nl;                             /* \s*[\r\n]+ */
        else if (end - pos > 1 && end < hi) end--;    /* \s+(?!\S) */
        if (end == pos) end++;
      }
    }
    word(s, pos, end), pos = end;
  }
}

/* Resizes the array p to n elements (needs a void *tmp in scope); false when out of memory. */
#define RESIZE(p, n) ((tmp = realloc((p), (n) * sizeof(*(p)))) ? ((p) = tmp, true) : false)

/* Pre-tokenizes and merges one piece of plain text. */
static void plain_text(session_t *s, const uint8_t *p, size_t len) {
  if (len + 1 > s->pcap) {
    size_t cap = len + 1;
    void *tmp;
    if (!RESIZE(s->cps, cap) || !RESIZE(s->flags, cap) || !RESIZE(s->off, cap) || !RESIZE(s->norm, 3 * cap)) {
      s->nomem = true;
      return;
    }
    s->pcap = cap;
  }
  size_t n = 0, o = 0;
  for (size_t i = 0; i < len; n++) {
    size_t adv;
    uint32_t cp = decode_lenient(p + i, len - i, &adv);
    i += adv;
    s->cps[n] = cp, s->flags[n] = cp_flags(cp), s->off[n] = o;
    o += hcq_model_utf8_encode(cp, s->norm + o);
  }
  s->off[n] = o;
  if (s->t->pre == PRE_LLAMA3) split_llama3(s, 0, n);
  else if (s->t->pre == PRE_GPT2) split_gpt2(s, 0, n);
  else /* smollm: each \p{N} alone, the GPT-2 split between */
    for (size_t a = 0; a < n;) {
      size_t b = a;
      while (b < n && !(s->flags[b] & F_NUMBER)) b++;
      if (b > a) split_gpt2(s, a, b);
      if (b < n) word(s, b, b + 1), b++;
      a = b;
    }
}

typedef struct frag {
  size_t off, len;
  int32_t id; /* a special token, or -1 for plain text */
} frag_t;

/* The first occurrence of needle[0..m) in hay[0..n). (Not memmem: sanitizers check its whole
 * haystack on every call, which made cutting out many specials quadratic under them.) */
static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
  if (!m || m > n) return NULL;
  for (const char *p = hay, *last = hay + (n - m); p <= last; p++) {
    if (!(p = memchr(p, needle[0], (size_t)(last - p) + 1))) return NULL;
    if (!memcmp(p, needle, m)) return p;
  }
  return NULL;
}

/* Cuts the special tokens out of text (tokenizer.h, step 1): *out is the list of pieces, plain text
 * and special tokens in order. False when out of memory. */
static bool partition(const llm_tokenizer_t *t, const char *text, size_t len, bool parse_special, frag_t **out,
                      size_t *out_n) {
  frag_t *fr = malloc(sizeof(*fr)), *next = NULL;
  void *tmp;
  size_t nf = 0;
  if (!fr) return false;
  if (len) fr[nf++] = (frag_t){0, len, -1};
  for (size_t k = 0; k < t->n_special; k++) {
    int32_t id = t->special[k];
    if (!parse_special && t->type[id] != LLM_TOKEN_USER_DEFINED) continue;
    const char *tok = t->text + t->str_off[id];
    size_t tl = t->str_len[id];
    if (!find_bytes(text, len, tok, tl)) continue; /* most specials are nowhere: one scan of the text */
    size_t nn = 0, ncap = nf + 16;
    if (!(next = malloc(ncap * sizeof(*next)))) goto nomem;
    for (size_t i = 0; i < nf; i++) {
      if (fr[i].id >= 0) {
        if (nn + 1 > ncap && !RESIZE(next, ncap = 2 * ncap)) goto nomem;
        next[nn++] = fr[i];
        continue;
      }
      for (size_t a = fr[i].off, end = fr[i].off + fr[i].len;;) {
        const char *hit = find_bytes(text + a, end - a, tok, tl);
        if (nn + 2 > ncap && !RESIZE(next, ncap = 2 * ncap + 2)) goto nomem;
        if (!hit) {
          if (end > a) next[nn++] = (frag_t){a, end - a, -1};
          break;
        }
        size_t h = (size_t)(hit - text);
        if (h > a) next[nn++] = (frag_t){a, h - a, -1};
        next[nn++] = (frag_t){h, tl, id};
        a = h + tl;
      }
    }
    free(fr);
    fr = next, nf = nn, next = NULL;
  }
  *out = fr, *out_n = nf;
  return true;
nomem:
  free(next);
  free(fr);
  return false;
}

hcq_status_t llm_tokenize(const llm_tokenizer_t *t, const char *text, size_t len, bool parse_special, bool with_bos,
                          int32_t **out_ids, size_t *out_n) {
  if (!out_ids || !out_n) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_tokenize: out_ids or out_n is NULL");
  *out_ids = NULL, *out_n = 0;
  if (!t || (!text && len)) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_tokenize: tokenizer or text is NULL");
  if (len > LLM_TOKENIZE_MAX_BYTES)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_tokenize: text of %zu bytes (at most %zu)", len,
                           LLM_TOKENIZE_MAX_BYTES);
  session_t s = {.t = t};
  if (with_bos && t->add_bos) emit(&s, t->bos);
  frag_t *fr = NULL;
  size_t nf = 0;
  if (!partition(t, text, len, parse_special, &fr, &nf)) s.nomem = true;
  for (size_t i = 0; i < nf && !s.nomem; i++) {
    if (fr[i].id >= 0) emit(&s, fr[i].id);
    else plain_text(&s, (const uint8_t *)text + fr[i].off, fr[i].len);
  }
  free(fr);
  free(s.cps), free(s.flags), free(s.off), free(s.norm), free(s.syms), free(s.heap), free(s.enc);
  if (s.nomem) {
    free(s.ids);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "llm_tokenize: out of memory (text of %zu bytes)", len);
  }
  *out_ids = s.ids, *out_n = s.n;
  return NULL;
}

/* ---- detokenizing ---- */

void llm_detok_init(llm_detok_t *d) { memset(d, 0, sizeof(*d)); }

static size_t put(char *out, size_t cap, size_t o, const void *p, size_t n) {
  if (o + n <= cap) memcpy(out + o, p, n);
  return o + n <= cap ? o + n : cap + 1; /* past cap: nothing more is written */
}

size_t llm_detok_push(const llm_tokenizer_t *t, llm_detok_t *d, int32_t id, bool special, char *out, size_t cap) {
  const char *piece;
  size_t n = llm_token_bytes(t, id, special, &piece), total = d->nheld + n, o = 0;
  uint8_t buf[LLM_TOKEN_MAX_BYTES + 3];
  memcpy(buf, d->held, d->nheld);
  memcpy(buf + d->nheld, piece, n);
  d->nheld = 0;
  for (size_t i = 0; i < total;) {
    size_t len, k = utf8_valid_prefix(buf + i, total - i, &len);
    if (len && k == len) {
      o = put(out, cap, o, buf + i, len), i += len;
    } else if (k && i + k == total) { /* a valid start cut off by the end: wait for the rest */
      memcpy(d->held, buf + i, k), d->nheld = (uint8_t)k;
      break;
    } else {
      o = put(out, cap, o, "\xEF\xBF\xBD", 3), i += k ? k : 1;
    }
  }
  return o > cap ? cap : o;
}

size_t llm_detok_flush(llm_detok_t *d, char *out, size_t cap) {
  size_t o = d->nheld && cap >= 3 ? put(out, cap, 0, "\xEF\xBF\xBD", 3) : 0;
  d->nheld = 0;
  return o;
}

hcq_status_t llm_detokenize(const llm_tokenizer_t *t, const int32_t *ids, size_t n, bool special, char **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_detokenize: out is NULL");
  *out = NULL;
  if (!t || (!ids && n)) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_detokenize: tokenizer or ids is NULL");
  size_t len = 0, cap = 256;
  char *s = malloc(cap);
  llm_detok_t d;
  llm_detok_init(&d);
  for (size_t i = 0; s && i <= n; i++) {
    if (len + LLM_DETOK_MAX_OUT + 1 > cap) {
      char *p = realloc(s, cap = 2 * cap + LLM_DETOK_MAX_OUT + 1);
      if (!p) free(s);
      s = p;
      if (!s) break;
    }
    len += i < n ? llm_detok_push(t, &d, ids[i], special, s + len, LLM_DETOK_MAX_OUT) : llm_detok_flush(&d, s + len, 3);
  }
  if (!s) return hcq_status_make(HCQ_OUT_OF_MEMORY, "llm_detokenize: out of memory (%zu tokens)", n);
  s[len] = 0;
  *out = s;
  return NULL;
}
