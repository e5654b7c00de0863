/* The tokenizer built from a GGUF file's tokenizer.ggml.* metadata: its strings and their map, each
 * token's type and decoded bytes, the special tokens, the merges; and its accessors (tokenizer.h).
 * Text -> ids and ids -> text are in tokenizer.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_utf8.h"
#include "tokenizer_internal.h"

static const struct {
  const char *name;
  int pre;
} pre_names[] = {
    {"smollm", PRE_SMOLLM},
    {"starcoder", PRE_SMOLLM},
    {"refact", PRE_SMOLLM},
    {"codeshell", PRE_SMOLLM},
    {"gpt-2", PRE_GPT2},
    {"phi-2", PRE_GPT2},
    {"llama-bpe", PRE_LLAMA3},
    {"llama3", PRE_LLAMA3},
    {"llama-v3", PRE_LLAMA3},
    {"qwen2", PRE_QWEN2},
    {"deepseek-r1-qwen", PRE_QWEN2},
    {"megrez", PRE_QWEN2},
    {"stablelm2", PRE_QWEN2},
    {"default", PRE_DEFAULT},
};

/* Tokens that end a turn when a model spells them so (llama.cpp also makes them control tokens, so
 * that Gemma's user-defined "</s>" is one). */
static const char *const eog_texts[] = {
    "<|endoftext|>",   "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>",
    "<|end_of_text|>", "<|eom_id|>", "</s>",       "<EOT>",   "<end_of_utterance>"};

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

int64_t llm_tokenizer_find_str(const llm_tokenizer_t *t, const char *s, size_t n) {
  uint32_t v = t->map[slot_of(t, s, n)];
  return v ? (int64_t)v - 1 : -1;
}

/* Maps id's string to id, replacing what it mapped to: a vocab string that appears twice maps to
 * its last id (as llama.cpp's token_to_id). */
static void map_put(llm_tokenizer_t *t, uint32_t id) {
  t->map[slot_of(t, t->text + t->str_off[id], t->str_len[id])] = id + 1;
}

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
  int64_t id = llm_tokenizer_find_str(t, s, n);
  if (id >= 0) return id;
  if (2 * ((size_t)t->n_str + 1) > t->map_mask + 1 && !map_grow(t, 2 * (t->map_mask + 1)))
    return -1;
  id = add_str(t, s, n);
  if (id >= 0) map_put(t, (uint32_t)id);
  return id;
}

/* ---- building ---- */

static hcq_status_t required(hcq_status_t s) {
  if (hcq_status_code(s) != HCQ_NOT_FOUND) return s;
  hcq_status_t r =
      hcq_status_make(HCQ_INVALID_ARGUMENT, "%s (the tokenizer needs it)", hcq_status_message(s));
  hcq_status_destroy(s);
  return r;
}

static hcq_status_t oom(const gguf_file_t *g) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory building the tokenizer",
                         gguf_path(g));
}

static hcq_status_t get_id(const gguf_file_t *g, const char *key, int32_t n_vocab, int32_t *out) {
  uint32_t v = UINT32_MAX;
  hcq_status_t s = gguf_get_u32_or(g, key, &v);
  if (s) return s;
  if (v != UINT32_MAX && v >= (uint32_t)n_vocab)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: metadata key \"%s\" is %u, outside the vocab of %d tokens",
                           gguf_path(g), key, v, n_vocab);
  *out = v == UINT32_MAX ? -1 : (int32_t)v;
  return NULL;
}

/* The bytes a normal token stands for: each character of GPT-2's map is its byte, anything else is
 * kept as it is. */
static size_t decode_token(const llm_tokenizer_t *t, const char *s, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t len, k = llm_utf8_valid_prefix((const uint8_t *)s + i, n - i, &len);
    if (!len || k != len) {
      out[o++] = s[i++];
      continue;
    }
    size_t adv;
    uint32_t cp = llm_utf8_decode_lenient((const uint8_t *)s + i, n - i, &adv);
    if (cp < 324 && t->cp_byte[cp] >= 0)
      out[o++] = (char)t->cp_byte[cp];
    else
      memcpy(out + o, s + i, len), o += len;
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

/* The token texts, each findable by its text; *out_total: the bytes their decoded forms may take.
 */
static hcq_status_t load_token_texts(llm_tokenizer_t *t, const gguf_file_t *g, size_t *out_total) {
  const char *path = gguf_path(g);
  gguf_str_t *toks;
  uint64_t n;
  hcq_status_t s = required(gguf_get_str_array(g, "tokenizer.ggml.tokens", &toks, &n));
  if (s) return s;
  if (n == 0 || n >= INT32_MAX / 2) {
    free(toks);
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: tokenizer.ggml.tokens holds %llu tokens (expected 1 to %d)", path,
                           (unsigned long long)n, INT32_MAX / 2 - 1);
  }
  t->n_vocab = (int32_t)n;
  size_t total = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (toks[i].len > LLM_TOKEN_MAX_BYTES) {
      unsigned long long len = toks[i].len;
      free(toks);
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "%s: tokenizer.ggml.tokens: token %llu is %llu bytes long (at most %d)", path,
          (unsigned long long)i, len, LLM_TOKEN_MAX_BYTES);
    }
    total += toks[i].len ? toks[i].len : 24;
  }
  size_t cap = 1024;
  while (cap < 2 * (n + 512)) cap <<= 1;
  t->text_cap = total + 4096, t->str_cap = (uint32_t)n + 512;
  t->text = malloc(t->text_cap), t->str_off = malloc(t->str_cap * sizeof(size_t));
  t->str_len = malloc(t->str_cap * sizeof(uint32_t)), t->map = calloc(cap, sizeof(uint32_t)),
  t->map_mask = cap - 1;
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
      len = (size_t)snprintf(empty, sizeof(empty), "[EMPTY_%llu]", (unsigned long long)i),
      p = empty;
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
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "%s: tokenizer.ggml.token_type holds %llu values for %llu tokens",
                             gguf_path(g), (unsigned long long)count, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++) {
      int32_t v;
      memcpy(&v, (const char *)types + 4 * i, 4);
      t->type[i] = v >= LLM_TOKEN_NORMAL && v <= LLM_TOKEN_BYTE ? (uint8_t)v : LLM_TOKEN_UNDEFINED;
    }
  }
  for (size_t k = 0; k < sizeof(eog_texts) / sizeof(eog_texts[0]); k++) {
    int64_t id = llm_tokenizer_find_str(t, eog_texts[k], strlen(eog_texts[k]));
    if (id >= 0) t->type[id] = LLM_TOKEN_CONTROL, t->eog[id] = 1;
  }
  return NULL;
}

/* The bytes each token stands for, by its type; total bounds them all. */
static hcq_status_t decode_vocab(llm_tokenizer_t *t, const gguf_file_t *g, size_t total) {
  uint64_t n = (uint64_t)t->n_vocab;
  t->bytes = malloc(total + 1), t->bytes_off = malloc(n * sizeof(size_t)),
  t->bytes_len = malloc(n * sizeof(uint32_t));
  if (!t->bytes || !t->bytes_off || !t->bytes_len) return oom(g);
  size_t o = 0;
  for (uint64_t i = 0; i < n; i++) {
    const char *p = t->text + t->str_off[i];
    size_t len = t->str_len[i];
    t->bytes_off[i] = o;
    if (t->model == MODEL_SPM) {
      o += llm_spm_decode_token(p, len, t->type[i], t->bytes + o);
      t->bytes_len[i] = (uint32_t)(o - t->bytes_off[i]);
      continue;
    }
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
    if (t->type[i] == LLM_TOKEN_CONTROL || t->type[i] == LLM_TOKEN_USER_DEFINED ||
        t->type[i] == LLM_TOKEN_UNKNOWN)
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
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: tokenizer.ggml.merges holds %llu merges",
                           gguf_path(g), (unsigned long long)n);
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
    size_t k = llm_tokenizer_pair_slot(t, key);
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

/* tokenizer.ggml.model and, for BPE, tokenizer.ggml.pre (absent: llama.cpp's "default"). */
static hcq_status_t read_kind(const gguf_file_t *g, int *model, int *pre, gguf_str_t *pre_name) {
  const char *path = gguf_path(g);
  gguf_str_t m;
  hcq_status_t s = required(gguf_get_str(g, "tokenizer.ggml.model", &m));
  if (s) return s;
  if (m.len == 4 && !memcmp(m.ptr, "gpt2", 4))
    *model = MODEL_BPE;
  else if (m.len == 5 && !memcmp(m.ptr, "llama", 5))
    *model = MODEL_SPM;
  else
    return hcq_status_make(
        HCQ_UNIMPLEMENTED,
        "%s: tokenizer.ggml.model is \"%.*s\": only byte-level BPE (\"gpt2\") and SentencePiece "
        "(\"llama\") tokenizers are supported",
        path, (int)(m.len > 64 ? 64 : m.len), m.ptr);
  *pre_name = (gguf_str_t){"default", 7};
  if (gguf_find_kv(g, "tokenizer.ggml.pre") &&
      (s = gguf_get_str(g, "tokenizer.ggml.pre", pre_name)))
    return s;
  *pre = PRE_DEFAULT;
  if (*model == MODEL_SPM)
    return NULL; /* SentencePiece has no pre-tokenizer (llama.cpp ignores the key) */
  for (size_t i = 0; i < sizeof(pre_names) / sizeof(pre_names[0]); i++)
    if (pre_name->len == strlen(pre_names[i].name) &&
        !memcmp(pre_name->ptr, pre_names[i].name, pre_name->len)) {
      *pre = pre_names[i].pre;
      return NULL;
    }
  return hcq_status_make(
      HCQ_UNIMPLEMENTED,
      "%s: pre-tokenizer \"%.*s\" (tokenizer.ggml.pre) is not supported (smollm, gpt-2, llama-bpe, "
      "qwen2 and default are)",
      path, (int)(pre_name->len > 64 ? 64 : pre_name->len), pre_name->ptr);
}

/* A special token id: the key's value, or dflt (-1: none) when the key is absent. */
static hcq_status_t get_id_or(const gguf_file_t *g, const char *key, int32_t n_vocab, int32_t dflt,
                              int32_t *out) {
  *out = dflt < n_vocab ? dflt : -1;
  return gguf_find_kv(g, key) ? get_id(g, key, n_vocab, out) : NULL;
}

/* The special ids and flags; llama.cpp's defaults: SentencePiece bos 1, eos 2, unk 0, add_bos and
 * add_space_prefix true; BPE none, add_bos only for llama-bpe. */
static hcq_status_t load_specials(llm_tokenizer_t *t, const gguf_file_t *g) {
  bool spm = t->model == MODEL_SPM;
  int32_t n = t->n_vocab;
  t->add_bos = spm || t->pre == PRE_LLAMA3;
  t->add_space_prefix = spm;
  hcq_status_t s = NULL;
  if (!(s = get_id_or(g, "tokenizer.ggml.bos_token_id", n, spm ? 1 : -1, &t->bos)) &&
      !(s = get_id_or(g, "tokenizer.ggml.eos_token_id", n, spm ? 2 : -1, &t->eos)) &&
      !(s = get_id_or(g, "tokenizer.ggml.unknown_token_id", n, spm ? 0 : -1, &t->unk)) &&
      !(s = get_id_or(g, "tokenizer.ggml.eot_token_id", n, -1, &t->eot)) &&
      !(s = gguf_get_bool_or(g, "tokenizer.ggml.add_bos_token", &t->add_bos)) &&
      !(s = gguf_get_bool_or(g, "tokenizer.ggml.add_eos_token", &t->add_eos)) &&
      !(s = gguf_get_bool_or(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix))) {
    if (t->add_bos && t->bos < 0)
      s = hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "%s: tokenizer.ggml.add_bos_token is true but there is no tokenizer.ggml.bos_token_id",
          gguf_path(g));
    else if (t->add_eos && t->eos < 0)
      s = hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "%s: tokenizer.ggml.add_eos_token is true but there is no tokenizer.ggml.eos_token_id",
          gguf_path(g));
  }
  return s;
}

hcq_status_t llm_tokenizer_from_gguf(const gguf_file_t *g, llm_tokenizer_t **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_tokenizer_from_gguf: out is NULL");
  *out = NULL;
  if (!g) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_tokenizer_from_gguf: g is NULL");
  int model = MODEL_BPE, kind = PRE_DEFAULT;
  gguf_str_t pre;
  hcq_status_t s = read_kind(g, &model, &kind, &pre);
  if (s) return s;
  llm_tokenizer_t *t = calloc(1, sizeof(*t));
  if (!t || !(t->pre_name = malloc(pre.len + 1))) {
    free(t);
    return oom(g);
  }
  memcpy(t->pre_name, pre.ptr, pre.len);
  t->pre_name[pre.len] = 0;
  t->model = model, t->pre = kind;
  init_byte_map(t);
  if (!(s = load_vocab(t, g)) && !(s = model == MODEL_SPM ? llm_spm_load(t, g) : load_merges(t, g)))
    s = load_specials(t, g);
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
  free(t->scores);
  free(t);
}

int32_t llm_tokenizer_vocab_size(const llm_tokenizer_t *t) { return t->n_vocab; }
int32_t llm_tokenizer_bos(const llm_tokenizer_t *t) { return t->bos; }
int32_t llm_tokenizer_eos(const llm_tokenizer_t *t) { return t->eos; }
int32_t llm_tokenizer_eot(const llm_tokenizer_t *t) { return t->eot; }
int32_t llm_tokenizer_unk(const llm_tokenizer_t *t) { return t->unk; }
bool llm_tokenizer_add_bos(const llm_tokenizer_t *t) { return t->add_bos; }
bool llm_tokenizer_add_eos(const llm_tokenizer_t *t) { return t->add_eos; }
bool llm_tokenizer_is_spm(const llm_tokenizer_t *t) { return t->model == MODEL_SPM; }
const char *llm_tokenizer_pre_name(const llm_tokenizer_t *t) { return t->pre_name; }

bool llm_tokenizer_is_eog(const llm_tokenizer_t *t, int32_t id) {
  return id >= 0 && id < t->n_vocab && t->eog[id];
}

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
  int64_t id = llm_tokenizer_find_str(t, text, len);
  return id >= 0 && id < t->n_vocab ? (int32_t)id : -1;
}

size_t llm_token_bytes(const llm_tokenizer_t *t, int32_t id, bool special, const char **out) {
  *out = "";
  if (id < 0 || id >= t->n_vocab) return 0;
  if (!special && (t->type[id] == LLM_TOKEN_CONTROL || t->type[id] == LLM_TOKEN_UNKNOWN)) return 0;
  *out = t->bytes + t->bytes_off[id];
  return t->bytes_len[id];
}
