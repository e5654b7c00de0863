/* SentencePiece (tokenizer.ggml.model "llama") as llama.cpp runs it: the vocab's scores and byte
 * fallback tokens, and text -> ids for one piece of plain text (the contract: tokenizer.h). The
 * special tokens are cut out before (tokenizer.c), and ids -> bytes is the table tokenizer_load.c
 * fills with llm_spm_decode_token.
 *
 * A piece of text: spaces become U+2581 ("\xE2\x96\x81"), with one in front when asked; the symbols
 * are its UTF-8 characters as llama.cpp counts them (a lead byte's length, whatever follows: a
 * continuation or invalid byte is a symbol of its own, a truncated sequence at the end is shorter);
 * then, repeatedly, the adjacent pair whose concatenation is a vocab token of the highest score
 * (leftmost on ties) is merged. A binary heap of candidate pairs makes a piece of n symbols cost
 * O(n log n); a candidate is stale when either side has been merged away or the right side has
 * grown since it was queued (the left side only grows by swallowing its right one). Each final
 * symbol is its token, or, when its text is none, the fallback tokens of its bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

#define SPACE_MARK "\xE2\x96\x81" /* U+2581, SentencePiece's space */

/* ---- loading ---- */

static hcq_status_t load_scores(llm_tokenizer_t *t, const gguf_file_t *g) {
  size_t n = (size_t)t->n_vocab;
  if (!(t->scores = calloc(n, sizeof(float))))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory building the tokenizer",
                           gguf_path(g));
  const gguf_kv_t *kv = gguf_find_kv(g, "tokenizer.ggml.scores");
  if (!kv) return NULL; /* as llama.cpp: every score 0 */
  const void *data;
  uint64_t count;
  bool ints = false;
  hcq_status_t s = gguf_get_array(g, "tokenizer.ggml.scores", GGUF_FLOAT32, &data, &count);
  if (s && hcq_status_code(s) == HCQ_INVALID_ARGUMENT) { /* llama.cpp also takes int32 scores */
    hcq_status_t si = gguf_get_array(g, "tokenizer.ggml.scores", GGUF_INT32, &data, &count);
    if (!si)
      hcq_status_destroy(s), s = NULL, ints = true;
    else
      hcq_status_destroy(si);
  }
  if (s) return s;
  if (count < n)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: tokenizer.ggml.scores holds %llu values for %zu tokens",
                           gguf_path(g), (unsigned long long)count, n);
  for (size_t i = 0; i < n; i++) {
    if (ints) {
      int32_t v;
      memcpy(&v, (const char *)data + 4 * i, 4);
      t->scores[i] = (float)v;
    } else {
      memcpy(&t->scores[i], (const char *)data + 4 * i, 4);
    }
  }
  return NULL;
}

hcq_status_t llm_spm_load(llm_tokenizer_t *t, const gguf_file_t *g) {
  hcq_status_t s = load_scores(t, g);
  if (s) return s;
  /* llama.cpp's byte_to_token: "<0xXX>" (upper-case hex), else the one-byte token. */
  for (int b = 0; b < 256; b++) {
    char hex[8];
    snprintf(hex, sizeof(hex), "<0x%02X>", b);
    int32_t id = llm_token_find(t, hex, 6);
    if (id < 0) {
      char c = (char)b;
      id = llm_token_find(t, &c, 1);
    }
    t->spm_byte[b] = id;
  }
  return NULL;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
  return -1;
}

size_t llm_spm_decode_token(const char *s, size_t n, int type, char *out) {
  switch (type) {
    case LLM_TOKEN_NORMAL: {
      size_t o = 0;
      for (size_t i = 0; i < n;) {
        if (n - i >= 3 && !memcmp(s + i, SPACE_MARK, 3))
          out[o++] = ' ', i += 3;
        else
          out[o++] = s[i++];
      }
      return o;
    }
    case LLM_TOKEN_BYTE: { /* "<0xXX>": the byte (llama.cpp reads the two characters after "<0x") */
      int hi = n >= 5 ? hex_digit(s[3]) : -1, lo = n >= 5 ? hex_digit(s[4]) : -1;
      if (hi < 0 || lo < 0) return 0;
      out[0] = (char)(hi << 4 | lo);
      return 1;
    }
    case LLM_TOKEN_CONTROL:
    case LLM_TOKEN_UNKNOWN:
    case LLM_TOKEN_USER_DEFINED: memcpy(out, s, n); return n;
    default: return 0; /* unused, undefined: nothing */
  }
}

/* ---- tokenizing ---- */

void llm_id_list_push(llm_id_list_t *l, int32_t id) {
  if (l->nomem) return;
  if (l->n == l->cap) {
    size_t cap = 2 * l->cap + 64;
    int32_t *p = realloc(l->ids, cap * sizeof(*p));
    if (!p) {
      l->nomem = true;
      return;
    }
    l->ids = p, l->cap = cap;
  }
  l->ids[l->n++] = id;
}

typedef struct spm_sym {
  size_t off;
  uint32_t len; /* 0: merged into its left neighbour */
  int32_t prev, next;
} spm_sym_t;

typedef struct spm_pair {
  float score;
  int32_t left, right;
  uint32_t len; /* the merged length when queued */
} spm_pair_t;

typedef struct spm_work {
  const llm_tokenizer_t *t;
  const char *text;
  spm_sym_t *sym;
  spm_pair_t *heap;
  size_t nheap, hcap;
  bool nomem;
} spm_work_t;

/* Higher score first, then the leftmost. */
static bool pair_before(const spm_pair_t *a, const spm_pair_t *b) {
  return a->score > b->score || (a->score == b->score && a->left < b->left);
}

/* Queues the pair (l, r) when its concatenation is a vocab token. */
static void try_pair(spm_work_t *w, int32_t l, int32_t r) {
  if (l < 0 || r < 0) return;
  const spm_sym_t *a = &w->sym[l], *b = &w->sym[r];
  uint32_t len = a->len + b->len;
  int32_t id = llm_token_find(w->t, w->text + a->off, len);
  if (id < 0) return;
  if (w->nheap == w->hcap) {
    size_t cap = 2 * w->hcap + 64;
    spm_pair_t *h = realloc(w->heap, cap * sizeof(*h));
    if (!h) {
      w->nomem = true;
      return;
    }
    w->heap = h, w->hcap = cap;
  }
  spm_pair_t p = {w->t->scores[id], l, r, len};
  size_t i = w->nheap++;
  while (i && pair_before(&p, &w->heap[(i - 1) / 2]))
    w->heap[i] = w->heap[(i - 1) / 2], i = (i - 1) / 2;
  w->heap[i] = p;
}

static spm_pair_t pop_pair(spm_work_t *w) {
  spm_pair_t top = w->heap[0], last = w->heap[--w->nheap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= w->nheap) break;
    if (c + 1 < w->nheap && pair_before(&w->heap[c + 1], &w->heap[c])) c++;
    if (!pair_before(&w->heap[c], &last)) break;
    w->heap[i] = w->heap[c], i = c;
  }
  if (w->nheap) w->heap[i] = last;
  return top;
}

/* The final symbol: its token, or its bytes' fallback tokens (a byte with none is left out;
 * llama.cpp throws there). */
static void emit_symbol(const llm_tokenizer_t *t, const char *s, size_t len, llm_id_list_t *out) {
  int32_t id = llm_token_find(t, s, len);
  if (id >= 0) {
    llm_id_list_push(out, id);
    return;
  }
  for (size_t i = 0; i < len; i++)
    if (t->spm_byte[(uint8_t)s[i]] >= 0) llm_id_list_push(out, t->spm_byte[(uint8_t)s[i]]);
}

/* Merges the symbols of text[0..len) and appends the result. */
static void merge_and_emit(spm_work_t *w, size_t len, llm_id_list_t *out) {
  static const uint8_t utf8_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  int32_t n = 0;
  for (size_t off = 0; off < len; n++) {
    size_t k = utf8_len[(uint8_t)w->text[off] >> 4];
    if (k > len - off) k = len - off;
    w->sym[n] = (spm_sym_t){off, (uint32_t)k, n - 1, off + k < len ? n + 1 : -1};
    off += k;
  }
  for (int32_t i = 1; i < n && !w->nomem; i++) try_pair(w, i - 1, i);
  while (w->nheap && !w->nomem) {
    spm_pair_t p = pop_pair(w);
    spm_sym_t *l = &w->sym[p.left], *r = &w->sym[p.right];
    if (!l->len || !r->len || l->len + r->len != p.len) continue; /* stale */
    l->len += r->len;
    r->len = 0;
    l->next = r->next;
    if (r->next >= 0) w->sym[r->next].prev = p.left;
    try_pair(w, l->prev, p.left);
    try_pair(w, p.left, l->next);
  }
  if (w->nomem) {
    out->nomem = true;
    return;
  }
  for (int32_t i = 0; n && i >= 0; i = w->sym[i].next)
    emit_symbol(w->t, w->text + w->sym[i].off, w->sym[i].len, out);
}

void llm_spm_tokenize(const llm_tokenizer_t *t, const char *text, size_t len, bool space_prefix,
                      llm_id_list_t *out) {
  size_t spaces = space_prefix;
  for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
  size_t elen = len + (space_prefix ? 1 : 0) + 2 * spaces; /* each space: 1 byte -> 3 */
  char *esc = malloc(elen ? elen : 1);
  spm_work_t w = {.t = t, .text = esc, .sym = malloc((elen ? elen : 1) * sizeof(spm_sym_t))};
  if (!esc || !w.sym) {
    free(esc), free(w.sym);
    out->nomem = true;
    return;
  }
  size_t o = 0;
  if (space_prefix) memcpy(esc, SPACE_MARK, 3), o = 3;
  for (size_t i = 0; i < len; i++) {
    if (text[i] == ' ')
      memcpy(esc + o, SPACE_MARK, 3), o += 3;
    else
      esc[o++] = text[i];
  }
  merge_and_emit(&w, o, out);
  free(esc), free(w.sym), free(w.heap);
}
