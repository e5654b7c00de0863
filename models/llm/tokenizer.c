/* Byte-level BPE as llama.cpp runs it for tokenizer.ggml.model "gpt2" (the contract: tokenizer.h):
 * text -> ids (the special tokens cut out for SentencePiece too, whose pieces tokenizer_spm.c
 * takes), and the streaming detokenizer. The tokenizer is built in tokenizer_load.c; the
 * state they share, and how a word is merged: tokenizer_internal.h. */
#include <stdlib.h>
#include <string.h>

#include "model_utf8.h"
#include "tokenizer_internal.h"
#include "unicode_llm.h"

/* ---- UTF-8 and character classes ---- */

/* llama.cpp's reading of UTF-8 (tokenizer.h, step 2): a lead byte and the continuation bytes it
 * announces; over-long forms and surrogates pass. *adv is what was consumed (1 for U+FFFD). */
uint32_t llm_utf8_decode_lenient(const uint8_t *s, size_t n, size_t *adv) {
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
size_t llm_utf8_valid_prefix(const uint8_t *s, size_t n, size_t *len) {
  uint8_t b = s[0];
  *len = b < 0x80 ? 1 : b < 0xC2 ? 0 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF5 ? 4 : 0;
  if (*len <= 1) return *len;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b == 0xE0)
    lo = 0xA0;
  else if (b == 0xED)
    hi = 0x9F;
  else if (b == 0xF0)
    lo = 0x90;
  else if (b == 0xF4)
    hi = 0x8F;
  size_t k = 1;
  for (; k < *len && k < n; k++) {
    if (s[k] < lo || s[k] > hi) break;
    lo = 0x80, hi = 0xBF;
  }
  return k;
}

/* Unicode's White_Space property (PropList.txt): llama.cpp's \s. */
static bool cp_is_space(uint32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

enum { F_LETTER = 1, F_NUMBER = 2, F_SPACE = 4, F_OTHER = 8 };

/* The class of a code point in unicode_llm.c's table (LLM_CP_*). */
static uint8_t cp_class(uint32_t c) {
  size_t lo = 0, hi = llm_unicode_classes_count;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < llm_unicode_classes[mid].first)
      hi = mid;
    else if (c > llm_unicode_classes[mid].last)
      lo = mid + 1;
    else
      return llm_unicode_classes[mid].cls;
  }
  return LLM_CP_OTHER;
}

static uint8_t cp_flags(uint32_t c) {
  if (cp_is_space(c)) return F_SPACE;
  if (c < 0x80) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return F_LETTER;
    return c >= '0' && c <= '9' ? F_NUMBER : F_OTHER;
  }
  uint8_t k = cp_class(c);
  return k == LLM_CP_LETTER ? F_LETTER : k == LLM_CP_NUMBER ? F_NUMBER : F_OTHER;
}

/* The "default" split's first expression, [\p{P}\$\+<=>\^~\|]: punctuation and eight ASCII
 * symbols. */
static bool cp_is_default_punct(uint32_t c) {
  if (c < 0x80 && c && strchr("$+<=>^~|", (int)c)) return true;
  return c > 0x20 && cp_class(c) == LLM_CP_PUNCT;
}

/* ---- tokenizing ---- */

typedef struct sym {
  uint32_t id;        /* DEAD once merged into its left neighbour */
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
  const pair_entry_t *e = llm_tokenizer_find_pair(s->t, s->syms[l].id, s->syms[r].id);
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
  while (i && cand_less(&c, &s->heap[(i - 1) / 2]))
    s->heap[i] = s->heap[(i - 1) / 2], i = (i - 1) / 2;
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
    int64_t b = llm_tokenizer_find_str(t, p + i, 1);
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
    for (size_t i = 0; i < n; i++)
      len += hcq_model_utf8_encode(t->byte_cp[w[i]], (uint8_t *)s->enc + len);
    int64_t id = llm_tokenizer_find_str(t, s->enc, len);
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
  for (size_t i = 0; i < n; i++)
    y[i] = (sym_t){t->byte_sym[w[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
  s->nheap = 0;
  for (size_t i = 0; i + 1 < n && !s->nomem; i++) heap_push(s, (int32_t)i, (int32_t)i + 1);
  while (s->nheap && !s->nomem) {
    cand_t c = heap_pop(s);
    sym_t *l = &y[c.left], *r = &y[c.right];
    /* Stale when either side was merged away or the right side has grown since. */
    if (l->id == DEAD || r->id != c.right_id) continue;
    const pair_entry_t *e = llm_tokenizer_find_pair(t, l->id, r->id);
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

static void bpe_range(session_t *s, size_t a, size_t b) {
  bpe_word(s, s->norm + s->off[a], s->off[b] - s->off[a]);
}

/* The "default" split's last two expressions on a word: \p{N}+ runs apart from the rest, and
 * within them [0-9][0-9][0-9] groups apart, leftmost first ("12345": "123", "45"). */
static void default_digits(session_t *s, size_t a, size_t b) {
  const uint32_t *c = s->cps;
  for (size_t pos = a; pos < b;) {
    size_t end = pos;
    bool number = s->flags[pos] & F_NUMBER;
    while (end < b && !(s->flags[end] & F_NUMBER) == !number) end++;
    for (size_t q = pos; number && q + 3 <= end;) {
      bool three = c[q] - '0' < 10 && c[q + 1] - '0' < 10 && c[q + 2] - '0' < 10;
      if (!three) {
        q++;
        continue;
      }
      if (q > pos) bpe_range(s, pos, q);
      bpe_range(s, q, q + 3);
      pos = q += 3;
    }
    if (end > pos) bpe_range(s, pos, end);
    pos = end;
  }
}

/* A word of the split: merged, after the "default" split's digit stages. */
static void word(session_t *s, size_t a, size_t b) {
  if (s->t->pre == PRE_DEFAULT)
    default_digits(s, a, b);
  else
    bpe_range(s, a, b);
}

/* The length of an English contraction ('s 't 'm 'd 're 've 'll) starting at pos, 0 for none;
 * fold_case: the llama 3 pattern's (?i:...), which folds ASCII letters. */
static size_t contraction(const uint32_t *c, size_t pos, size_t hi, bool fold_case) {
  if (c[pos] != '\'' || pos + 1 >= hi) return 0;
  uint32_t n1 = c[pos + 1], n2 = pos + 2 < hi ? c[pos + 2] : 0;
  if (fold_case) n1 |= n1 < 0x80 ? 0x20 : 0, n2 |= n2 < 0x80 ? 0x20 : 0;
  if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') return 2;
  if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) return 3;
  return 0;
}

/* The GPT-2 split of code points [lo, hi). */
static void split_gpt2(session_t *s, size_t lo, size_t hi) {
  const uint32_t *c = s->cps;
  const uint8_t *f = s->flags;
  for (size_t pos = lo; pos < hi;) {
    size_t n = contraction(c, pos, hi, false);
    if (n) {
      word(s, pos, pos + n), pos += n;
      continue;
    }
    /* ' ?X+' for X letters, numbers or others: the class of the character after an optional space.
     */
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

/* llama 3's split of code points [lo, hi); max_digits 1 is Qwen2's (\p{N} for \p{N}{1,3}). */
static void split_llama3(session_t *s, size_t lo, size_t hi, size_t max_digits) {
  const uint32_t *c = s->cps;
  const uint8_t *f = s->flags;
  for (size_t pos = lo; pos < hi;) {
    uint32_t cp = c[pos];
    size_t n = contraction(c, pos, hi, true);
    if (n) {
      word(s, pos, pos + n), pos += n;
      continue;
    }
    size_t end = pos + 1;
    if (cp != '\r' && cp != '\n' && !(f[pos] & F_NUMBER) &&
        ((f[pos] & F_LETTER) || (end < hi && (f[end] & F_LETTER)))) {
      while (end < hi && (f[end] & F_LETTER)) end++; /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    } else if (f[pos] & F_NUMBER) {
      while (end < hi && end - pos < max_digits && (f[end] & F_NUMBER)) end++; /* \p{N}{1,3} */
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
        if (nl)
          end = nl; /* \s*[\r\n]+ */
        else if (end - pos > 1 && end < hi)
          end--; /* \s+(?!\S) */
        if (end == pos) end++;
      }
    }
    word(s, pos, end), pos = end;
  }
}

/* llama.cpp's "default" split: runs of [\p{P}$+<=>^~|] apart from the text between, each piece
 * split by GPT-2's expression, then (word()) the digit stages. */
static void split_default(session_t *s, size_t n) {
  for (size_t pos = 0; pos < n;) {
    size_t end = pos;
    bool punct = cp_is_default_punct(s->cps[pos]);
    while (end < n && cp_is_default_punct(s->cps[end]) == punct) end++;
    if (punct)
      word(s, pos, end);
    else
      split_gpt2(s, pos, end);
    pos = end;
  }
}

/* Resizes the array p to n elements (needs a void *tmp in scope); false when out of memory. */
#define RESIZE(p, n) ((tmp = realloc((p), (n) * sizeof(*(p)))) ? ((p) = tmp, true) : false)

/* Pre-tokenizes and merges one piece of plain text. */
static void plain_text(session_t *s, const uint8_t *p, size_t len) {
  if (len + 1 > s->pcap) {
    size_t cap = len + 1;
    void *tmp;
    if (!RESIZE(s->cps, cap) || !RESIZE(s->flags, cap) || !RESIZE(s->off, cap) ||
        !RESIZE(s->norm, 3 * cap)) {
      s->nomem = true;
      return;
    }
    s->pcap = cap;
  }
  size_t n = 0, o = 0;
  for (size_t i = 0; i < len; n++) {
    size_t adv;
    uint32_t cp = llm_utf8_decode_lenient(p + i, len - i, &adv);
    i += adv;
    s->cps[n] = cp, s->flags[n] = cp_flags(cp), s->off[n] = o;
    o += hcq_model_utf8_encode(cp, s->norm + o);
  }
  s->off[n] = o;
  if (s->t->pre == PRE_LLAMA3)
    split_llama3(s, 0, n, 3);
  else if (s->t->pre == PRE_QWEN2)
    split_llama3(s, 0, n, 1);
  else if (s->t->pre == PRE_GPT2)
    split_gpt2(s, 0, n);
  else if (s->t->pre == PRE_DEFAULT)
    split_default(s, n);
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
static bool partition(const llm_tokenizer_t *t, const char *text, size_t len, bool parse_special,
                      frag_t **out, size_t *out_n) {
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
    if (!find_bytes(text, len, tok, tl))
      continue; /* most specials are nowhere: one scan of the text */
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

/* SentencePiece over the pieces: a space in front of a piece at the start or after a special token
 * when the model says add_space_prefix (llama.cpp's order). */
static void spm_pieces(session_t *s, const char *text, const frag_t *fr, size_t nf) {
  llm_id_list_t ids = {0};
  bool after_special = true;
  for (size_t i = 0; i < nf && !s->nomem; i++) {
    if (fr[i].id >= 0) {
      emit(s, fr[i].id);
      after_special = true;
      continue;
    }
    ids.n = 0;
    llm_spm_tokenize(s->t, text + fr[i].off, fr[i].len, s->t->add_space_prefix && after_special,
                     &ids);
    if (ids.nomem) s->nomem = true;
    for (size_t k = 0; k < ids.n && !s->nomem; k++) emit(s, ids.ids[k]);
    after_special = false;
  }
  free(ids.ids);
}

hcq_status_t llm_tokenize(const llm_tokenizer_t *t, const char *text, size_t len,
                          bool parse_special, bool with_bos, int32_t **out_ids, size_t *out_n) {
  if (!out_ids || !out_n)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_tokenize: out_ids or out_n is NULL");
  *out_ids = NULL, *out_n = 0;
  if (!t || (!text && len))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_tokenize: tokenizer or text is NULL");
  if (len > LLM_TOKENIZE_MAX_BYTES)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_tokenize: text of %zu bytes (at most %zu)",
                           len, LLM_TOKENIZE_MAX_BYTES);
  session_t s = {.t = t};
  if (with_bos && t->add_bos) emit(&s, t->bos);
  frag_t *fr = NULL;
  size_t nf = 0;
  if (!partition(t, text, len, parse_special, &fr, &nf)) s.nomem = true;
  if (t->model == MODEL_SPM) spm_pieces(&s, text, fr, nf);
  for (size_t i = 0; i < nf && !s.nomem && t->model != MODEL_SPM; i++) {
    if (fr[i].id >= 0)
      emit(&s, fr[i].id);
    else
      plain_text(&s, (const uint8_t *)text + fr[i].off, fr[i].len);
  }
  if (with_bos && t->add_eos) emit(&s, t->eos);
  free(fr);
  free(s.cps), free(s.flags), free(s.off), free(s.norm), free(s.syms), free(s.heap), free(s.enc);
  if (s.nomem) {
    free(s.ids);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "llm_tokenize: out of memory (text of %zu bytes)",
                           len);
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

/* Feeds the bytes piece[0..n) (n <= LLM_TOKEN_MAX_BYTES). */
static size_t push_bytes(llm_detok_t *d, const char *piece, size_t n, char *out, size_t cap) {
  size_t total = d->nheld + n, o = 0;
  uint8_t buf[LLM_TOKEN_MAX_BYTES + 3];
  memcpy(buf, d->held, d->nheld);
  memcpy(buf + d->nheld, piece, n);
  d->nheld = 0;
  for (size_t i = 0; i < total;) {
    size_t len, k = llm_utf8_valid_prefix(buf + i, total - i, &len);
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

size_t llm_detok_push(const llm_tokenizer_t *t, llm_detok_t *d, int32_t id, bool special, char *out,
                      size_t cap) {
  const char *piece;
  size_t n = llm_token_bytes(t, id, special, &piece);
  return push_bytes(d, piece, n, out, cap);
}

size_t llm_detok_flush(llm_detok_t *d, char *out, size_t cap) {
  size_t o = d->nheld && cap >= 3 ? put(out, cap, 0, "\xEF\xBF\xBD", 3) : 0;
  d->nheld = 0;
  return o;
}

hcq_status_t llm_detokenize(const llm_tokenizer_t *t, const int32_t *ids, size_t n, bool special,
                            char **out) {
  size_t len;
  return llm_detokenize_len(t, ids, n, special, out, &len);
}

hcq_status_t llm_detokenize_len(const llm_tokenizer_t *t, const int32_t *ids, size_t n,
                                bool special, char **out, size_t *out_len) {
  if (!out || !out_len) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_detokenize: out is NULL");
  *out = NULL;
  *out_len = 0;
  if (!t || (!ids && n))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_detokenize: tokenizer or ids is NULL");
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
    if (i == n) {
      len += llm_detok_flush(&d, s + len, 3);
      break;
    }
    const char *piece;
    size_t k = llm_token_bytes(t, ids[i], special, &piece);
    /* llama.cpp's llama_detokenize: with add_space_prefix, the first token loses one leading space
     */
    if (i == 0 && t->add_space_prefix && k && piece[0] == ' ') piece++, k--;
    len += push_bytes(&d, piece, k, s + len, LLM_DETOK_MAX_OUT);
  }
  if (!s)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "llm_detokenize: out of memory (%zu tokens)", n);
  s[len] = 0;
  *out = s;
  *out_len = len;
  return NULL;
}
