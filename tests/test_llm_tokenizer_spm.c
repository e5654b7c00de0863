/* SentencePiece and the qwen2 / default BPE pre-tokenizers (models/llm/tokenizer_spm.c,
 * tokenizer.c).
 *
 * Ground truth:
 *  - tests/data/llm/gemma3_tokenizer.json (HCQ_LLM_GEMMA_TOKENIZER_FIXTURE names another file),
 *    written by scripts/llm-tokenizer-reference.py --spm with llama-cpp-python 0.3.36 from
 *    gemma-3-270m-q4_k_m.gguf: llama.cpp's ids for 120-odd texts with and without special parsing,
 *    its llama_detokenize of each id list, and the bytes of 500 single tokens. The Gemma file is
 *    $HCQ_GEMMA_GGUF, else llm_data_dir()/models/gemma-3-270m-q4_k_m.gguf; without it those tests
 *    skip, saying so;
 *  - tiny vocabularies written here (a handful of tokens with scores or merges), with the ids
 *    worked out by hand in the comments. */
#include <jansson.h>
#include <time.h>

#include "gguf.h"
#include "llm.h"
#include "llm_gemma.h"
#include "test_util.h"
#include "tokenizer.h"

/* ---- helpers ---- */

static void expect(const llm_tokenizer_t *t, const char *text, bool special, bool bos,
                   const int32_t *want, size_t nwant) {
  int32_t *ids;
  size_t n;
  OK(llm_tokenize(t, text, strlen(text), special, bos, &ids, &n));
  cr_assert_eq(n, nwant, "\"%s\": %zu tokens, expected %zu", text, n, nwant);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(ids[i], want[i], "\"%s\": token %zu is %d, expected %d", text, i, ids[i], want[i]);
  free(ids);
}
#define EXPECT(t, text, special, bos, ...)                      \
  expect(t, text, special, bos, (const int32_t[]){__VA_ARGS__}, \
         sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

static void expect_text(const llm_tokenizer_t *t, const int32_t *ids, size_t n, bool special,
                        const char *want) {
  char *s;
  OK(llm_detokenize(t, ids, n, special, &s));
  cr_assert_str_eq(s, want);
  free(s);
  /* the length comes with the text, after the first token's dropped space prefix too */
  size_t len;
  OK(llm_detokenize_len(t, ids, n, special, &s, &len));
  cr_assert_eq(len, strlen(want), "length %zu of \"%s\"", len, want);
  free(s);
}

static llm_tokenizer_t *from_writer(gguf_writer_t *w, uint8_t **bytes, gguf_file_t **g) {
  size_t size;
  OK(gguf_writer_bytes(w, bytes, &size));
  gguf_writer_free(w);
  OK(gguf_open_memory(*bytes, size, "tiny.gguf", g));
  llm_tokenizer_t *t;
  OK(llm_tokenizer_from_gguf(*g, &t));
  return t;
}

static void close_all(llm_tokenizer_t *t, gguf_file_t *g, uint8_t *bytes) {
  llm_tokenizer_free(t);
  gguf_close(g);
  free(bytes);
}

/* ---- a tiny SentencePiece vocab ---- */

#define SPM_BYTE(b) (3 + (b)) /* <0x00>..<0xFF> are ids 3..258 */
enum { SP_MARK = 259, SP_A, SP_B, SP_C, SP_AB, SP_BC, SP_MARK_A, SP_ABC, SP_TOOL, SP_MARK2, SPM_N };

/* unk, <s>, </s>, the 256 byte tokens, then: "▁" -5, "a" "b" "c" -3, "ab" -2, "bc" -1, "▁a" -4,
 * "abc" -0.5, "<tool>" (user-defined), "▁▁" -6. No bos/eos/unk keys: llama.cpp's defaults 1, 2, 0.
 */
static llm_tokenizer_t *tiny_spm(int space_prefix /* -1: key absent */, uint8_t **bytes,
                                 gguf_file_t **g) {
  static char byte_text[256][8];
  const char *tokens[SPM_N] = {"<unk>", "<s>", "</s>"};
  int32_t types[SPM_N] = {2, 3, 3};
  float scores[SPM_N] = {0};
  for (int b = 0; b < 256; b++) {
    snprintf(byte_text[b], sizeof(byte_text[b]), "<0x%02X>", b);
    tokens[SPM_BYTE(b)] = byte_text[b], types[SPM_BYTE(b)] = 6;
  }
  const struct {
    const char *text;
    float score;
    int32_t type;
  } rest[] = {{"\xE2\x96\x81", -5, 1},
              {"a", -3, 1},
              {"b", -3, 1},
              {"c", -3, 1},
              {"ab", -2, 1},
              {"bc", -1, 1},
              {"\xE2\x96\x81"
               "a",
               -4, 1},
              {"abc", -0.5f, 1},
              {"<tool>", 0, 4},
              {"\xE2\x96\x81\xE2\x96\x81", -6, 1}};
  for (int i = 0; i < SPM_N - SP_MARK; i++)
    tokens[SP_MARK + i] = rest[i].text, scores[SP_MARK + i] = rest[i].score,
                     types[SP_MARK + i] = rest[i].type;
  gguf_writer_t *w;
  OK(gguf_writer_create(&w));
  OK(gguf_writer_add_str(w, "tokenizer.ggml.model", "llama"));
  OK(gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", tokens, SPM_N));
  OK(gguf_writer_add_i32_array(w, "tokenizer.ggml.token_type", types, SPM_N));
  uint8_t arr[12 + 4 * SPM_N];
  uint32_t f32 = GGUF_FLOAT32;
  uint64_t count = SPM_N;
  memcpy(arr, &f32, 4), memcpy(arr + 4, &count, 8), memcpy(arr + 12, scores, sizeof(scores));
  OK(gguf_writer_add_raw(w, "tokenizer.ggml.scores", GGUF_ARRAY, arr, sizeof(arr)));
  if (space_prefix >= 0)
    OK(gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", space_prefix));
  return from_writer(w, bytes, g);
}

Test(llm_tokenizer_spm, tiny_vocab) {
  uint8_t *bytes;
  gguf_file_t *g;
  llm_tokenizer_t *t = tiny_spm(-1, &bytes, &g);
  cr_assert(llm_tokenizer_is_spm(t) && llm_tokenizer_add_bos(t) && !llm_tokenizer_add_eos(t));
  cr_assert(llm_tokenizer_bos(t) == 1 && llm_tokenizer_eos(t) == 2 && llm_tokenizer_unk(t) == 0);
  /* "▁abc": bc (-1) first, then a+bc = abc (-0.5); "▁abc" is no token */
  EXPECT(t, "abc", true, true, 1, SP_MARK, SP_ABC);
  /* "▁ab": ▁a (-4) loses to ab (-2) */
  EXPECT(t, "ab", true, false, SP_MARK, SP_AB);
  /* "▁a▁a": two equal "▁a" pairs, the left one first; both merge */
  EXPECT(t, "a a", true, false, SP_MARK_A, SP_MARK_A);
  /* "é" is no token: its two bytes' fallback tokens */
  EXPECT(t, "a\xC3\xA9", true, false, SP_MARK_A, SPM_BYTE(0xC3), SPM_BYTE(0xA9));
  /* "▁▁▁": the leftmost "▁▁" merges, the other pair is then stale */
  EXPECT(t, "  ", true, false, SP_MARK2, SP_MARK);
  /* the user-defined token is cut out; the text after it gets the space prefix again */
  EXPECT(t, "a<tool>b", false, false, SP_MARK_A, SP_TOOL, SP_MARK, SP_B);
  /* <s> is a control token: one id only with special parsing */
  EXPECT(t, "<s>x", true, false, 1, SP_MARK, SPM_BYTE('x'));
  EXPECT(t, "<s>x", false, false, SP_MARK, SPM_BYTE('<'), SPM_BYTE('s'), SPM_BYTE('>'),
         SPM_BYTE('x'));
  EXPECT(t, "", true, true, 1);
  /* a lone continuation byte and a truncated sequence: symbols of their own, as bytes */
  EXPECT(t,
         "\x80"
         "a\xE4",
         true, false, SP_MARK, SPM_BYTE(0x80), SP_A, SPM_BYTE(0xE4));

  /* back: U+2581 is a space, byte tokens are bytes; the first token loses one leading space */
  expect_text(t, (const int32_t[]){SP_MARK_A, SP_MARK_A}, 2, false, "a a");
  expect_text(t, (const int32_t[]){1, SP_MARK_A}, 2, false, " a");
  expect_text(t, (const int32_t[]){1, SP_MARK_A}, 2, true, "<s> a");
  expect_text(t, (const int32_t[]){SP_A, SPM_BYTE(0xC3), SPM_BYTE(0xA9), SP_TOOL}, 4, false,
              "a\xC3\xA9<tool>");
  /* streaming: the first byte of "é" is held until the second completes it */
  llm_detok_t d;
  llm_detok_init(&d);
  char out[LLM_DETOK_MAX_OUT];
  cr_assert_eq(llm_detok_push(t, &d, SPM_BYTE(0xC3), false, out, sizeof(out)), 0);
  cr_assert_eq(llm_detok_push(t, &d, SPM_BYTE(0xA9), false, out, sizeof(out)), 2);
  cr_assert(!memcmp(out, "\xC3\xA9", 2));
  cr_assert_eq(llm_detok_push(t, &d, SP_MARK_A, false, out, sizeof(out)), 2,
               "no space removed while streaming");
  close_all(t, g, bytes);

  /* add_space_prefix false: "abc" alone */
  t = tiny_spm(0, &bytes, &g);
  EXPECT(t, "abc", true, false, SP_ABC);
  EXPECT(t, "a<tool>b", true, false, SP_A, SP_TOOL, SP_B);
  expect_text(t, (const int32_t[]){SP_MARK_A}, 1, false, " a");
  close_all(t, g, bytes);
}

/* ---- tiny byte-level BPE vocabs for the qwen2 and default splits ---- */

enum { BP_12 = 256, BP_123, BP_SP1, BP_SP12, BPE_N };

/* The 256 byte characters as ids 0..255 (GPT-2's map: id b is byte b), then "12", "123", "Ġ1",
 * "Ġ12"; merges by rank: "Ġ 1", "1 2", "12 3", "Ġ1 2". */
static llm_tokenizer_t *tiny_bpe(const char *pre, uint8_t **bytes, gguf_file_t **g) {
  static char chars[256][3];
  const char *tokens[BPE_N];
  for (unsigned b = 0, extra = 0; b < 256; b++) {
    bool self = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    unsigned cp = self ? b : 256 + extra++;
    if (cp < 0x80)
      chars[b][0] = (char)cp, chars[b][1] = 0;
    else
      chars[b][0] = (char)(0xC0 | cp >> 6), chars[b][1] = (char)(0x80 | (cp & 0x3F)),
      chars[b][2] = 0;
    tokens[b] = chars[b];
  }
  tokens[BP_12] = "12", tokens[BP_123] = "123",
  tokens[BP_SP1] =
      "\xC4\xA0"
      "1",
  tokens[BP_SP12] =
      "\xC4\xA0"
      "12";
  const char *merges[] = {"\xC4\xA0 1", "1 2", "12 3",
                          "\xC4\xA0"
                          "1 2"};
  gguf_writer_t *w;
  OK(gguf_writer_create(&w));
  OK(gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2"));
  OK(gguf_writer_add_str(w, "tokenizer.ggml.pre", pre));
  OK(gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", tokens, BPE_N));
  OK(gguf_writer_add_str_array(w, "tokenizer.ggml.merges", merges, 4));
  return from_writer(w, bytes, g);
}

Test(llm_tokenizer_spm, qwen2_and_default_splits) {
  uint8_t *bytes;
  gguf_file_t *g;
  /* gpt-2 for comparison: " 12" and "12345" are one word each */
  llm_tokenizer_t *t = tiny_bpe("gpt-2", &bytes, &g);
  EXPECT(t, " 12", true, true, BP_SP12);
  EXPECT(t, "12345", true, true, BP_123, '4', '5');
  close_all(t, g, bytes);

  /* qwen2: llama 3's split with single digits: no digit merges at all; " 12" is " ", "1", "2" */
  t = tiny_bpe("qwen2", &bytes, &g);
  cr_assert_not(llm_tokenizer_add_bos(t));
  EXPECT(t, "a123", true, false, 'a', '1', '2', '3');
  EXPECT(t, " 12", true, false, ' ', '1', '2');
  EXPECT(t, "x 12 y", true, false, 'x', ' ', '1', '2', ' ', 'y');
  /* llama 3's case-folded contractions and [^\r\n\p{L}\p{N}]?\p{L}+ */
  EXPECT(t, "I'M", true, false, 'I', '\'', 'M');
  close_all(t, g, bytes);

  /* default: [\p{P}$+<=>^~|]+ runs apart, then GPT-2's split, \p{N}+ apart, [0-9]{3} groups */
  t = tiny_bpe("default", &bytes, &g);
  EXPECT(t, " 12", true, false, ' ', BP_12);                     /* " 12" -> " ", "12" */
  EXPECT(t, "12345", true, false, BP_123, '4', '5');             /* "123", "45" */
  EXPECT(t, "1234567", true, false, BP_123, '4', '5', '6', '7'); /* "123", "456", "7" */
  EXPECT(t, "(12)", true, false, '(', BP_12, ')');
  EXPECT(t, "a+=12", true, false, 'a', '+', '=', BP_12);
  EXPECT(t,
         "x\xC2\xAB"
         "12",
         true, false, 'x', 0xC2, 0xAB, BP_12); /* « (Pi) is \p{P} */
  close_all(t, g, bytes);
}

/* ---- Gemma 3 against llama.cpp ---- */

static gguf_file_t *open_gemma(void) {
  static char path[4096];
  llm_gemma_path(path, sizeof(path));
  gguf_file_t *g = NULL;
  hcq_status_t st = gguf_open(path, &g);
  if (st && hcq_status_code(st) == HCQ_UNIMPLEMENTED) {
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", hcq_status_message(st));
    hcq_status_destroy(st);
    cr_skip_test("the GGUF reader refuses the file: %s", msg);
  }
  OK(st);
  return g;
}

static json_t *load_gemma_fixture(void) {
  const char *path = getenv("HCQ_LLM_GEMMA_TOKENIZER_FIXTURE");
  if (!path || !*path) path = HCQ_LLM_GEMMA_TOKENIZER_FIXTURE_DEFAULT;
  json_error_t err;
  json_t *root = json_load_file(path, JSON_ALLOW_NUL, &err);
  cr_assert(root, "%s: %s", path, err.text);
  return root;
}

/* One reference case: its ids, then llama_detokenize's bytes from them. */
static void check_case(const llm_tokenizer_t *t, json_t *c, size_t index) {
  json_t *text = json_object_get(c, "text"), *hex = json_object_get(c, "hex"),
         *want = json_object_get(c, "ids");
  static char buf[1 << 16], detok[1 << 16];
  memset(buf, 0, 64);
  size_t len =
      json_is_string(text) ? json_string_length(text) : test_unhex(json_string_value(hex), buf);
  if (json_is_string(text)) memcpy(buf, json_string_value(text), len);
  bool special = json_is_true(json_object_get(c, "special")),
       bos = json_is_true(json_object_get(c, "bos"));
  int32_t *ids;
  size_t n;
  OK(llm_tokenize(t, buf, len, special, bos, &ids, &n));
  cr_assert_eq(n, json_array_size(want),
               "case %zu (\"%.40s\", special %d): %zu tokens, llama.cpp %zu", index, buf, special,
               n, json_array_size(want));
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(ids[i], json_integer_value(json_array_get(want, i)),
                 "case %zu (\"%.40s\", special %d): token %zu", index, buf, special, i);
  char *s;
  /* llama.cpp's bytes, or where they are not UTF-8, them with U+FFFD as our detokenizer writes */
  json_t *valid = json_object_get(c, "detok_valid_hex");
  size_t dl = test_unhex(json_string_value(valid ? valid : json_object_get(c, "detok_hex")), detok);
  OK(llm_detokenize(t, ids, n, special, &s));
  /* (a text with a NUL byte: strlen stops there, the bytes are compared whole) */
  cr_assert((strlen(s) == dl || memchr(detok, 0, dl)) && !memcmp(s, detok, dl),
            "case %zu (\"%.40s\"): detokenized \"%s\", llama.cpp \"%.*s\"", index, buf, s, (int)dl,
            detok);
  free(s);
  free(ids);
}

Test(llm_tokenizer_spm, gemma3_reference) {
  gguf_file_t *g = open_gemma();
  json_t *root = load_gemma_fixture();
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  llm_tokenizer_t *t;
  OK(llm_tokenizer_from_gguf(g, &t));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  cr_log_info("Gemma 3 tokenizer (262144 tokens) built in %.1f ms", ms);
  cr_assert_lt(ms, 5000, "quadratic?");
  cr_assert_eq(llm_tokenizer_vocab_size(t), 262144);
  cr_assert(llm_tokenizer_is_spm(t) && llm_tokenizer_add_bos(t) && !llm_tokenizer_add_eos(t));
  cr_assert(llm_tokenizer_bos(t) == 2 && llm_tokenizer_eos(t) == 1 && llm_tokenizer_unk(t) == 3);
  cr_assert(llm_tokenizer_is_eog(t, 1) && llm_tokenizer_is_eog(t, 106),
            "<eos> and <end_of_turn> end a turn");
  json_t *cases = json_object_get(root, "cases");
  cr_assert(json_array_size(cases) > 100);
  for (size_t i = 0; i < json_array_size(cases); i++) check_case(t, json_array_get(cases, i), i);
  /* single tokens' bytes (llama_token_to_piece), with and without special */
  static const char *lists[] = {"pieces", "pieces_plain"};
  for (int l = 0; l < 2; l++) {
    json_t *pieces = json_object_get(root, lists[l]);
    cr_assert(json_array_size(pieces) > 100);
    for (size_t i = 0; i < json_array_size(pieces); i++) {
      json_t *p = json_array_get(pieces, i);
      int32_t id = (int32_t)json_integer_value(json_object_get(p, "id"));
      char want[1024];
      size_t wl = test_unhex(json_string_value(json_object_get(p, "hex")), want);
      const char *got;
      size_t gl = llm_token_bytes(t, id, l == 0, &got);
      cr_assert(gl == wl && !memcmp(got, want, wl), "%s: token %d", lists[l], id);
    }
  }
  json_decref(root);
  llm_tokenizer_free(t);
  gguf_close(g);
}

/* Random bytes and 1 MB texts through the Gemma tokenizer: ids in the vocab, valid UTF-8 back, and
 * no quadratic time (6,414 special tokens are cut out first; runs of spaces, one long word). */
Test(llm_tokenizer_spm, gemma3_hostile) {
  gguf_file_t *g = open_gemma();
  llm_tokenizer_t *t;
  OK(llm_tokenizer_from_gguf(g, &t));
  size_t cap = 1 << 20, size;
  char *buf = malloc(cap);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < (1 << 16); i++)
    x = x * 6364136223846793005ull + 1442695040888963407ull, buf[i] = (char)(x >> 56);
  const char *unit[] = {
      NULL, "Hello, wörld! 中文 🙂 123 don't\n\t  <start_of_turn>", "a", " ", "\xFF", "\n"};
  for (size_t u = 0; u < sizeof(unit) / sizeof(unit[0]); u++) {
    if (unit[u]) {
      size_t ul = strlen(unit[u]);
      for (size = 0; size + ul <= cap; size += ul) memcpy(buf + size, unit[u], ul);
    } else {
      size = 1 << 16;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int32_t *ids;
    size_t n;
    OK(llm_tokenize(t, buf, size, u & 1, true, &ids, &n));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    cr_log_info("unit %zu: %zu bytes, %zu tokens in %.1f ms", u, size, n, ms);
    /* quadratic would be hours at 1 MB; linear is about 2 s here, 20x that under ThreadSanitizer */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    cr_assert_lt(ms, 300000, "quadratic?");
#else
    cr_assert_lt(ms, 30000, "quadratic?");
#endif
    for (size_t i = 0; i < n; i++) cr_assert(ids[i] >= 0 && ids[i] < 262144);
    char *s;
    OK(llm_detokenize(t, ids, n, true, &s));
    free(s);
    free(ids);
  }
  free(buf);
  llm_tokenizer_free(t);
  gguf_close(g);
}
