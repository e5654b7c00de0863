/* BERT's WordPiece tokenizer, as the Hugging Face `tokenizers` package runs it for a BertTokenizer
 * config (BertNormalizer, BertPreTokenizer, WordPiece, [CLS] A [SEP]):
 *
 *  1. clean-up: NUL, U+FFFD and "other" characters (general category C*, tab, CR and LF excepted)
 *     are removed, white space (Unicode White_Space) becomes a space;
 *  2. CJK ideographs get a space on each side, so that each is a word;
 *  3. accent stripping (canonical decomposition, nonspacing marks dropped) and lower-casing, each
 *     as the config says;
 *  4. words: split at white space (dropped) and at punctuation (ASCII punctuation and P*, kept
 *     as one-character words);
 *  5. each word becomes its greedy longest-match pieces, continuations prefixed "##"; a word with
 *     a character no piece covers, or longer than 100 characters, is the one piece [UNK].
 * The Unicode data comes from unicode_tables.c (scripts/gen-minilm-unicode.py). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "minilm.h"
#include "model_file.h"
#include "model_utf8.h"
#include "unicode_tables.h"

enum { MAX_WORD_CHARS = 100 };

struct minilm_tokenizer {
  minilm_tokenizer_options_t opt;
  char *text;    /* the vocab, '\n' replaced by NUL */
  char **tokens; /* id -> token */
  int count;
  uint32_t *slots; /* open addressing: id + 1, 0 empty */
  size_t mask;
  int32_t unk, cls, sep;
};

static uint64_t hash_bytes(const char *s, size_t n) { return XXH3_64bits(s, n); }

static int32_t lookup(const minilm_tokenizer_t *t, const char *s, size_t n) {
  for (size_t i = (size_t)hash_bytes(s, n) & t->mask;; i = (i + 1) & t->mask) {
    uint32_t v = t->slots[i];
    if (!v) return -1;
    const char *tok = t->tokens[v - 1];
    if (!strncmp(tok, s, n) && tok[n] == 0) return (int32_t)(v - 1);
  }
}

hcq_status_t minilm_tokenizer_create(const char *vocab, size_t len,
                                     const minilm_tokenizer_options_t *opt,
                                     minilm_tokenizer_t **out) {
  *out = NULL;
  minilm_tokenizer_t *t = calloc(1, sizeof(*t));
  if (!t || !(t->text = malloc(len + 1))) {
    free(t);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory loading the vocab");
  }
  t->opt = *opt;
  memcpy(t->text, vocab, len);
  t->text[len] = 0;
  /* A final newline ends the last token, it does not start an empty one. */
  if (len && t->text[len - 1] == '\n') t->text[--len] = 0;
  size_t lines = 1;
  for (size_t i = 0; i < len; i++) lines += t->text[i] == '\n';
  size_t cap = 16;
  while (cap < 2 * lines) cap <<= 1;
  t->tokens = calloc(lines, sizeof(*t->tokens));
  t->slots = calloc(cap, sizeof(*t->slots));
  t->mask = cap - 1;
  hcq_status_t s = NULL;
  if (!t->tokens || !t->slots)
    s = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory loading the vocab");
  for (char *p = t->text; !s && len;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    size_t n = strlen(p);
    if (n && p[n - 1] == '\r') p[--n] = 0; /* a vocab written on Windows */
    if (lookup(t, p, n) >= 0) {
      s = hcq_status_make(HCQ_INVALID_ARGUMENT, "vocab: token \"%s\" appears twice (line %d)", p,
                          t->count + 1);
      break;
    }
    t->tokens[t->count] = p;
    size_t i = (size_t)hash_bytes(p, n) & t->mask;
    while (t->slots[i]) i = (i + 1) & t->mask;
    t->slots[i] = (uint32_t)++t->count;
    if (!nl) break;
    p = nl + 1;
  }
  if (!s) {
    t->unk = lookup(t, "[UNK]", 5), t->cls = lookup(t, "[CLS]", 5), t->sep = lookup(t, "[SEP]", 5);
    if (t->unk < 0 || t->cls < 0 || t->sep < 0 || lookup(t, "[PAD]", 5) < 0)
      s = hcq_status_make(HCQ_INVALID_ARGUMENT,
                          "vocab: [PAD], [UNK], [CLS] or [SEP] is missing (%d tokens)", t->count);
  }
  if (s) {
    minilm_tokenizer_free(t);
    return s;
  }
  *out = t;
  return NULL;
}

/* A vocabulary: at most 64 MiB (bert's is 232 KB). */
static hcq_status_t read_file(const char *path, char **out, size_t *len) {
  return hcq_model_read(path, "vocabulary", (size_t)64 << 20, out, len);
}

hcq_status_t minilm_tokenizer_load(const char *dir, minilm_tokenizer_t **out) {
  *out = NULL;
  minilm_tokenizer_options_t opt = {true, true, true};
  char path[4096];
  snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
  /* optional: absent or unreadable, the defaults (a FIFO or folder is refused, never read) */
  char *config = NULL;
  size_t config_len = 0;
  hcq_status_t rs = access(path, F_OK) ? NULL
                                       : hcq_model_read(path, "tokenizer configuration",
                                                        (size_t)1 << 20, &config, &config_len);
  if (rs) return rs;
  json_error_t err;
  json_t *cfg = config ? json_loadb(config, config_len, 0, &err) : NULL;
  free(config);
  if (cfg) {
    json_t *lc = json_object_get(cfg, "do_lower_case"), *sa = json_object_get(cfg, "strip_accents"),
           *cj = json_object_get(cfg, "tokenize_chinese_chars");
    if (json_is_boolean(lc)) opt.lowercase = json_is_true(lc);
    opt.strip_accents = json_is_boolean(sa) ? json_is_true(sa) : opt.lowercase;
    if (json_is_boolean(cj)) opt.chinese_chars = json_is_true(cj);
    json_decref(cfg);
  }
  snprintf(path, sizeof(path), "%s/vocab.txt", dir);
  char *text = NULL;
  size_t len = 0;
  hcq_status_t s = read_file(path, &text, &len);
  if (s) return s;
  s = minilm_tokenizer_create(text, len, &opt, out);
  free(text);
  return s ? hcq_status_annotate(s, "%s", path) : NULL;
}

void minilm_tokenizer_free(minilm_tokenizer_t *t) {
  if (!t) return;
  free(t->slots);
  free(t->tokens);
  free(t->text);
  free(t);
}

int minilm_tokenizer_vocab_size(const minilm_tokenizer_t *t) { return t->count; }
const char *minilm_tokenizer_token(const minilm_tokenizer_t *t, int32_t id) {
  return id >= 0 && id < t->count ? t->tokens[id] : NULL;
}

/* ---- Unicode ---- */

static int char_class(uint32_t c) {
  size_t lo = 0, hi = minilm_classes_count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < minilm_classes[mid].first)
      hi = mid;
    else if (c > minilm_classes[mid].last)
      lo = mid + 1;
    else
      return minilm_classes[mid].cls;
  }
  return MINILM_CLASS_NONE;
}

static const minilm_map_t *find_map(const minilm_map_t *m, size_t n, uint32_t c) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < m[mid].cp)
      hi = mid;
    else if (c > m[mid].cp)
      lo = mid + 1;
    else
      return &m[mid];
  }
  return NULL;
}

/* Unicode's White_Space property (PropList.txt): what Rust's char::is_whitespace tests. */
static bool is_space(uint32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

static bool is_control(uint32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  int k = char_class(c);
  return k == MINILM_CLASS_OTHER || k == MINILM_CLASS_UNASSIGNED;
}

static bool is_punct(uint32_t c) {
  if (c < 128)
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
  return char_class(c) == MINILM_CLASS_PUNCT;
}

/* The CJK Unified Ideographs blocks and their extensions and compatibility blocks, as BERT
 * defines "Chinese characters". */
static bool is_cjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* A growing array of code points. */
typedef struct cps {
  uint32_t *v;
  size_t n, cap;
  bool oom;
} cps_t;

static void push(cps_t *a, uint32_t c) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 256;
    uint32_t *v = realloc(a->v, cap * sizeof(*v));
    if (!v) {
      a->oom = true;
      return;
    }
    a->v = v, a->cap = cap;
  }
  a->v[a->n++] = c;
}

static void push_lower(cps_t *a, uint32_t c, bool lower) {
  const minilm_map_t *m = lower ? find_map(minilm_lower, minilm_lower_count, c) : NULL;
  if (!m) {
    push(a, c);
    return;
  }
  for (uint32_t i = 0; i < m->len; i++) push(a, minilm_lower_pool[m->off + i]);
}

static void normalise_char(const minilm_tokenizer_t *t, cps_t *a, uint32_t c) {
  if (c == 0 || c == 0xFFFD || is_control(c)) return;
  if (is_space(c)) c = ' ';
  bool cjk = t->opt.chinese_chars && is_cjk(c);
  if (cjk) push(a, ' ');
  if (t->opt.strip_accents && c >= 0xAC00 && c <= 0xD7A3) {
    /* Hangul syllables decompose by arithmetic (Unicode 3.12), into jamo that are not marks. */
    uint32_t s = c - 0xAC00;
    push_lower(a, 0x1100 + s / 588, t->opt.lowercase);
    push_lower(a, 0x1161 + (s % 588) / 28, t->opt.lowercase);
    if (s % 28) push_lower(a, 0x11A7 + s % 28, t->opt.lowercase);
  } else if (t->opt.strip_accents && (c >= 0x80)) {
    const minilm_map_t *m = find_map(minilm_strip, minilm_strip_count, c);
    if (!m)
      push_lower(a, c, t->opt.lowercase);
    else
      for (uint32_t i = 0; i < m->len; i++)
        push_lower(a, minilm_strip_pool[m->off + i], t->opt.lowercase);
  } else {
    push_lower(a, c, t->opt.lowercase);
  }
  if (cjk) push(a, ' ');
}

/* Appends the pieces of word w (nc code points) to ids, at most room of them. */
static int word_pieces(const minilm_tokenizer_t *t, const uint32_t *w, size_t nc, int32_t *ids,
                       int room) {
  if (room <= 0) return 0;
  if (nc > MAX_WORD_CHARS) return ids[0] = t->unk, 1;
  char buf[4 * MAX_WORD_CHARS], piece[2 + 4 * MAX_WORD_CHARS];
  /* the word's UTF-8 and the byte offset of each character */
  size_t at[MAX_WORD_CHARS + 1], len = 0;
  for (size_t i = 0; i < nc; i++) {
    at[i] = len;
    len += hcq_model_utf8_encode(w[i], (unsigned char *)buf + len);
  }
  at[nc] = len;
  int32_t found[MAX_WORD_CHARS];
  int count = 0;
  piece[0] = piece[1] = '#';
  for (size_t start = 0; start < nc;) {
    int32_t id = -1;
    size_t end = nc;
    for (; end > start && id < 0; end--) {
      /* Continuations are looked up with "##" in front. */
      size_t bytes = at[end] - at[start];
      memcpy(piece + 2, buf + at[start], bytes);
      id = start ? lookup(t, piece, bytes + 2) : lookup(t, piece + 2, bytes);
    }
    if (id < 0) return ids[0] = t->unk, 1;
    found[count++] = id;
    start = end + 1;
  }
  int n = count < room ? count : room;
  memcpy(ids, found, (size_t)n * sizeof(*ids));
  return n;
}

hcq_status_t minilm_tokenize(const minilm_tokenizer_t *t, const char *text, int max_tokens,
                             int32_t *ids, int *out_n) {
  *out_n = 0;
  if (max_tokens < 2)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "tokenize: max_tokens %d (at least 2)",
                           max_tokens);
  cps_t a = {0};
  const unsigned char *s = (const unsigned char *)text;
  size_t n = strlen(text);
  for (size_t i = 0; i < n;) {
    uint32_t c;
    int len = (int)hcq_model_utf8_decode(s + i, n - i, &c);
    if (!len) {
      free(a.v);
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "text is not valid UTF-8 (byte %zu: 0x%02x)", i,
                             s[i]);
    }
    normalise_char(t, &a, c);
    i += (size_t)len;
  }
  if (a.oom) {
    free(a.v);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory tokenizing");
  }
  int k = 0;
  ids[k++] = t->cls;
  int room = max_tokens - 2;
  for (size_t i = 0; i < a.n && k - 1 < room;) {
    if (is_space(a.v[i])) {
      i++;
      continue;
    }
    size_t j = i + 1;
    if (!is_punct(a.v[i]))
      while (j < a.n && !is_space(a.v[j]) && !is_punct(a.v[j])) j++;
    k += word_pieces(t, a.v + i, j - i, ids + k, room - (k - 1));
    i = j;
  }
  ids[k++] = t->sep;
  free(a.v);
  *out_n = k;
  return NULL;
}
