/* The GGUF reader and writer (models/llm/gguf.c, gguf_write.c; models/common/model_file.c) and the
 * llama model checks (models/llm/model.c).
 *
 * Every file here is written by the test: with gguf_writer for valid ones, byte by byte for the
 * hostile ones, so the reader is checked against a layout written independently of it. Files that
 * are opened from memory are copied into a buffer of exactly their size, so that a read past the
 * end is an AddressSanitizer error in sanitized builds. The llama models are tiny (dim 64, 2
 * layers) with random weights; tiny_llama() writes one in any weight type and with one thing wrong.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "gguf.h"
#include "llm.h"
#include "llm_gemma.h"
#include "quant.h"
#include "support.h"
#include "test_util.h"

TestSuite(llm_gguf, .timeout = 60);
TestSuite(llm_model, .timeout = 60);

/* ---- helpers ---- */

/* A file built byte by byte. */
typedef struct buf {
  uint8_t *p;
  size_t n, cap;
} buf_t;

static void put(buf_t *b, const void *src, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n) cap *= 2;
    b->p = realloc(b->p, cap);
    cr_assert_not_null(b->p);
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, src, n);
  b->n += n;
}
static void put_u32(buf_t *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf_t *b, uint64_t v) { put(b, &v, 8); }
static void put_strn(buf_t *b, const char *s, size_t n) {
  put_u64(b, n);
  put(b, s, n);
}
static void put_str(buf_t *b, const char *s) { put_strn(b, s, strlen(s)); }
static void put_zeros(buf_t *b, size_t n) {
  for (size_t i = 0; i < n; i++) put(b, "", 1);
}
static void put_header(buf_t *b, uint32_t version, uint64_t ntensors, uint64_t nkvs) {
  put(b, "GGUF", 4);
  put_u32(b, version);
  put_u64(b, ntensors);
  put_u64(b, nkvs);
}
static void put_kv_u32(buf_t *b, const char *key, uint32_t v) {
  put_str(b, key);
  put_u32(b, GGUF_UINT32);
  put_u32(b, v);
}
static void put_tensor_info(buf_t *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                            uint32_t type, uint64_t offset) {
  put_str(b, name);
  put_u32(b, n_dims);
  for (uint32_t d = 0; d < n_dims; d++) put_u64(b, ne[d]);
  put_u32(b, type);
  put_u64(b, offset);
}
/* Zeros up to a multiple of align, then n bytes of data (a pattern). */
static void put_data(buf_t *b, size_t align, size_t n) {
  put_zeros(b, (align - b->n % align) % align);
  for (size_t i = 0; i < n; i++) put(b, &(uint8_t){(uint8_t)(i * 7 + 1)}, 1);
}

/* Opens a copy of bytes in a buffer of exactly size bytes (ASan sees a read past it) named name,
 * checks that a failure leaves *out NULL, then closes everything: NULL when the file opened. */
static hcq_status_t try_open_named(const void *bytes, size_t size, const char *name) {
  uint8_t *copy = malloc(size ? size : 1);
  cr_assert_not_null(copy);
  if (size) memcpy(copy, bytes, size);
  gguf_file_t *g = (gguf_file_t *)copy; /* anything but NULL: a failure must clear it */
  hcq_status_t st = gguf_open_memory(copy, size, name, &g);
  if (st) cr_assert_null(g, "a failed gguf_open_memory left *out set");
  gguf_close(g);
  free(copy);
  return st;
}
static hcq_status_t try_open(const buf_t *b) { return try_open_named(b->p, b->n, "bad.gguf"); }

/* The message of a failure with code (asserted), copied into msg. */
static void failure(hcq_status_t st, hcq_status_code_t code, char *msg, size_t size,
                    const char *what) {
  cr_assert_not_null(st, "%s succeeded; expected %s", what, hcq_status_code_name(code));
  snprintf(msg, size, "%s", hcq_status_message(st));
  hcq_status_code_t got = hcq_status_code(st);
  hcq_status_destroy(st);
  cr_assert_eq(got, code, "%s: %s, expected %s: %s", what, hcq_status_code_name(got),
               hcq_status_code_name(code), msg);
}

/* Memory limits for the hostile-count tests: an allocation sized by a count in the file then fails
 * (OUT_OF_MEMORY, not the INVALID_ARGUMENT expected). Not under sanitizers, whose shadow memory is
 * already far beyond any limit. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TEST_SHADOW_MEMORY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define TEST_SHADOW_MEMORY 1
#endif
#endif
static void limit_memory(void) {
#ifndef TEST_SHADOW_MEMORY
  struct rlimit r = {(rlim_t)1 << 30, (rlim_t)1 << 30};
  cr_assert_eq(setrlimit(RLIMIT_DATA, &r), 0, "setrlimit: %s", strerror(errno));
#endif
}

/* A fresh folder under HCQ_TEST_TMP (or /tmp). */
static void temp_dir(char *dir, size_t size) {
  const char *base = getenv("HCQ_TEST_TMP");
  base = base && *base ? base : "/tmp";
  mkdir(base, 0755);
  snprintf(dir, size, "%s/llm-gguf-XXXXXX", base);
  cr_assert_not_null(mkdtemp(dir), "mkdtemp %s: %s", dir, strerror(errno));
}

static uint64_t rng(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}
static float rng_float(uint64_t *s) { return (float)(rng(s) & 0xffffff) / 16777216.0f - 0.5f; }
static void rng_bytes(uint64_t *s, uint8_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = (uint8_t)rng(s);
}

/* Bytes of a tensor, from the layout in gguf.h (not from the reader's tables). */
static uint64_t tensor_bytes(ggml_type_t type, const uint64_t *ne, uint32_t n_dims) {
  uint64_t elems = 1;
  for (uint32_t d = 0; d < n_dims; d++) elems *= ne[d];
  switch (type) {
    case GGML_TYPE_F32: return elems * 4;
    case GGML_TYPE_F16: return elems * 2;
    case GGML_TYPE_Q4_0: return elems / 32 * 18;
    case GGML_TYPE_Q4_1: return elems / 32 * 20;
    case GGML_TYPE_Q8_0: return elems / 32 * 34;
    case GGML_TYPE_Q5_0: return elems / 32 * 22;
    case GGML_TYPE_Q4_K: return elems / 256 * 144;
    case GGML_TYPE_Q6_K: return elems / 256 * 210;
    default: break;
  }
  cr_assert_fail("type %d", (int)type);
  return 0;
}

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* ---- 1. the writer's files read back ---- */

/* What a metadata entry must read back as: kv->data points at payload. */
typedef struct want_kv {
  char key[256];
  uint32_t type, elem_type;
  uint64_t count;
  uint8_t payload[512];
  size_t size;
} want_kv_t;

typedef struct want_file {
  want_kv_t kv[64];
  size_t nkv;
  uint64_t kv_bytes; /* bytes of the metadata entries in the file */
} want_file_t;

static want_kv_t *want(want_file_t *f, const char *key, uint32_t type, uint32_t elem_type,
                       uint64_t count, const void *payload, size_t size) {
  cr_assert_lt(f->nkv, 64);
  cr_assert_leq(size, sizeof(f->kv[0].payload));
  want_kv_t *k = &f->kv[f->nkv++];
  snprintf(k->key, sizeof(k->key), "%s", key);
  k->type = type, k->elem_type = elem_type, k->count = count, k->size = size;
  if (size) memcpy(k->payload, payload, size);
  f->kv_bytes += 8 + strlen(key) + 4 + (type == GGUF_ARRAY ? 12 : 0) + size;
  return k;
}

static void raw_scalar(gguf_writer_t *w, want_file_t *f, const char *key, uint32_t type,
                       const void *v, size_t size) {
  OK(gguf_writer_add_raw(w, key, type, v, size));
  want(f, key, type, type, 1, v, size);
}

/* An array of elem_type with count elements whose payload is given: written with add_raw. */
static void raw_array(gguf_writer_t *w, want_file_t *f, const char *key, uint32_t elem_type,
                      uint64_t count, const void *payload, size_t size) {
  buf_t b = {0};
  put_u32(&b, elem_type);
  put_u64(&b, count);
  put(&b, payload, size);
  OK(gguf_writer_add_raw(w, key, GGUF_ARRAY, b.p, b.n));
  free(b.p);
  want(f, key, GGUF_ARRAY, elem_type, count, payload, size);
}

static size_t elem_size(uint32_t type) {
  switch (type) {
    case GGUF_UINT8:
    case GGUF_INT8:
    case GGUF_BOOL: return 1;
    case GGUF_UINT16:
    case GGUF_INT16: return 2;
    case GGUF_UINT32:
    case GGUF_INT32:
    case GGUF_FLOAT32: return 4;
    case GGUF_UINT64:
    case GGUF_INT64:
    case GGUF_FLOAT64: return 8;
  }
  return 0;
}

/* Every value type: scalars, arrays of each scalar type, strings, empties. */
static void add_every_kv(gguf_writer_t *w, want_file_t *f) {
  uint8_t u8 = 0xfe;
  int8_t i8 = -5;
  uint16_t u16 = 0xfedc;
  int16_t i16 = -1234;
  int32_t i32 = -123456789;
  uint64_t u64 = 0xfedcba9876543210ull;
  int64_t i64 = -1234567890123ll;
  double f64 = -2.5e-300;
  raw_scalar(w, f, "v.u8", GGUF_UINT8, &u8, 1);
  raw_scalar(w, f, "v.i8", GGUF_INT8, &i8, 1);
  raw_scalar(w, f, "v.u16", GGUF_UINT16, &u16, 2);
  raw_scalar(w, f, "v.i16", GGUF_INT16, &i16, 2);
  OK(gguf_writer_add_u32(w, "v.u32", 0xdeadbeefu));
  want(f, "v.u32", GGUF_UINT32, GGUF_UINT32, 1, &(uint32_t){0xdeadbeefu}, 4);
  raw_scalar(w, f, "v.i32", GGUF_INT32, &i32, 4);
  OK(gguf_writer_add_f32(w, "v.f32", 3.25f));
  want(f, "v.f32", GGUF_FLOAT32, GGUF_FLOAT32, 1, &(float){3.25f}, 4);
  OK(gguf_writer_add_bool(w, "v.true", true));
  want(f, "v.true", GGUF_BOOL, GGUF_BOOL, 1, &(uint8_t){1}, 1);
  OK(gguf_writer_add_bool(w, "v.false", false));
  want(f, "v.false", GGUF_BOOL, GGUF_BOOL, 1, &(uint8_t){0}, 1);
  raw_scalar(w, f, "v.u64", GGUF_UINT64, &u64, 8);
  raw_scalar(w, f, "v.i64", GGUF_INT64, &i64, 8);
  raw_scalar(w, f, "v.f64", GGUF_FLOAT64, &f64, 8);
  const char *strs[] = {"hello, gguf", "", "caf\xc3\xa9 \xe2\x82\xac"};
  const char *skeys[] = {"v.str", "v.str.empty", "v.str.utf8"};
  for (int i = 0; i < 3; i++) {
    OK(gguf_writer_add_str(w, skeys[i], strs[i]));
    buf_t b = {0};
    put_str(&b, strs[i]);
    want(f, skeys[i], GGUF_STRING, GGUF_STRING, 1, b.p, b.n);
    free(b.p);
  }
  /* a key of 200 bytes */
  char long_key[201];
  memset(long_key, 'k', 200);
  long_key[200] = 0;
  memcpy(long_key, "long.", 5);
  raw_scalar(w, f, long_key, GGUF_UINT8, &u8, 1);

  /* arrays of every scalar type (5 elements of random bytes; bools 0 or 1), and empty ones */
  uint64_t seed = 7;
  const uint32_t types[] = {GGUF_UINT8,   GGUF_INT8, GGUF_UINT16, GGUF_INT16, GGUF_UINT32,
                            GGUF_FLOAT32, GGUF_BOOL, GGUF_UINT64, GGUF_INT64, GGUF_FLOAT64};
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
    uint8_t payload[40];
    size_t size = 5 * elem_size(types[t]);
    rng_bytes(&seed, payload, size);
    if (types[t] == GGUF_BOOL)
      for (int i = 0; i < 5; i++) payload[i] &= 1;
    char key[64];
    snprintf(key, sizeof(key), "a.%s", gguf_value_type_name(types[t]));
    raw_array(w, f, key, types[t], 5, payload, size);
  }
  const int32_t ints[] = {1, -2, 3, INT32_MAX, INT32_MIN};
  OK(gguf_writer_add_i32_array(w, "a.int32", ints, 5));
  want(f, "a.int32", GGUF_ARRAY, GGUF_INT32, 5, ints, sizeof(ints));
  const char *words[] = {"a", "", "bc", "caf\xc3\xa9", "   "};
  OK(gguf_writer_add_str_array(w, "a.string", words, 5));
  buf_t b = {0};
  for (int i = 0; i < 5; i++) put_str(&b, words[i]);
  want(f, "a.string", GGUF_ARRAY, GGUF_STRING, 5, b.p, b.n);
  free(b.p);
  OK(gguf_writer_add_i32_array(w, "a.empty.int32", NULL, 0));
  want(f, "a.empty.int32", GGUF_ARRAY, GGUF_INT32, 0, NULL, 0);
  OK(gguf_writer_add_str_array(w, "a.empty.string", NULL, 0));
  want(f, "a.empty.string", GGUF_ARRAY, GGUF_STRING, 0, NULL, 0);
  raw_array(w, f, "a.empty.float64", GGUF_FLOAT64, 0, NULL, 0);
}

typedef struct want_tensor {
  const char *name;
  ggml_type_t type;
  uint32_t n_dims;
  uint64_t ne[GGUF_MAX_DIMS];
  uint8_t *data;
  uint64_t bytes;
} want_tensor_t;

/* Tensors of every type with 1 to 4 dimensions. */
static want_tensor_t k_tensors[] = {
    {"t.f32.1d", GGML_TYPE_F32, 1, {7}, NULL, 0},
    {"t.f16.2d", GGML_TYPE_F16, 2, {5, 3}, NULL, 0},
    {"t.q4_0.3d", GGML_TYPE_Q4_0, 3, {32, 2, 3}, NULL, 0},
    {"t.q4_1.4d", GGML_TYPE_Q4_1, 4, {64, 1, 2, 2}, NULL, 0},
    {"t.q8_0.2d", GGML_TYPE_Q8_0, 2, {32, 3}, NULL, 0},
    {"t.f32.4d", GGML_TYPE_F32, 4, {3, 2, 2, 2}, NULL, 0},
    {"t.q8_0.1d", GGML_TYPE_Q8_0, 1, {64}, NULL, 0},
    {"t.f16.1d", GGML_TYPE_F16, 1, {1}, NULL, 0},
    {"t.q4_0.1d", GGML_TYPE_Q4_0, 1, {32}, NULL, 0},
    {"t.q4_1.2d", GGML_TYPE_Q4_1, 2, {32, 5}, NULL, 0},
};
#define NTENSORS (sizeof(k_tensors) / sizeof(k_tensors[0]))

/* g's metadata (mapped at base, size bytes) against f's, in the order written; general.alignment
 * among it when alignment is not 32. */
static void check_round_trip_kvs(const gguf_file_t *g, const uint8_t *base, size_t size,
                                 const want_file_t *f, uint32_t alignment) {
  size_t extra = alignment != 32;
  cr_assert_eq(gguf_kv_count(g), f->nkv + extra, "%zu metadata entries, expected %zu",
               gguf_kv_count(g), f->nkv + extra);
  const gguf_kv_t *akv = gguf_find_kv(g, "general.alignment");
  if (extra) {
    cr_assert_not_null(akv);
    cr_assert_eq(akv->type, GGUF_UINT32);
    uint32_t a;
    memcpy(&a, akv->data, 4);
    cr_assert_eq(a, alignment);
    uint32_t got;
    OK(gguf_get_u32(g, "general.alignment", &got));
    cr_assert_eq(got, alignment);
  } else {
    cr_assert_null(akv, "general.alignment written although the alignment is the default 32");
  }
  size_t k = 0;
  for (size_t i = 0; i < gguf_kv_count(g); i++) {
    const gguf_kv_t *kv = gguf_kv_at(g, i);
    cr_assert_not_null(kv);
    if (kv == akv) continue;
    const want_kv_t *w = &f->kv[k++];
    cr_assert_eq(kv->key.len, strlen(w->key), "entry %zu: key length %llu, expected \"%s\"", i,
                 (unsigned long long)kv->key.len, w->key);
    cr_assert(!memcmp(kv->key.ptr, w->key, kv->key.len), "entry %zu: key \"%.*s\", expected \"%s\"",
              i, (int)kv->key.len, kv->key.ptr, w->key);
    cr_assert_eq(kv->type, w->type, "%s: type %u, expected %u", w->key, kv->type, w->type);
    cr_assert_eq(kv->elem_type, w->elem_type, "%s: element type %u, expected %u", w->key,
                 kv->elem_type, w->elem_type);
    cr_assert_eq(kv->count, w->count, "%s: count %llu, expected %llu", w->key,
                 (unsigned long long)kv->count, (unsigned long long)w->count);
    cr_assert(kv->data >= base && kv->data + w->size <= base + size, "%s: data outside the file",
              w->key);
    cr_assert(!memcmp(kv->data, w->payload, w->size), "%s: the value's bytes differ", w->key);
    cr_assert_eq(gguf_find_kv(g, w->key), kv, "gguf_find_kv(\"%s\")", w->key);
  }
  cr_assert_eq(k, f->nkv);
  cr_assert_null(gguf_kv_at(g, gguf_kv_count(g)));
  cr_assert_null(gguf_find_kv(g, "v.u3"));
  cr_assert_null(gguf_find_kv(g, "v.u32x"));
}

/* g's tensors against k_tensors: shapes, offsets and bytes, the data section aligned and ending
 * the file. */
static void check_round_trip_tensors(const gguf_file_t *g, const uint8_t *base, size_t size,
                                     const want_file_t *f, uint32_t alignment) {
  size_t extra = alignment != 32;
  cr_assert_eq(gguf_tensor_count(g), NTENSORS);
  uint64_t infos = 0;
  for (size_t i = 0; i < NTENSORS; i++)
    infos += 8 + strlen(k_tensors[i].name) + 4 + 8 * k_tensors[i].n_dims + 4 + 8;
  uint64_t data_start =
      align_up(24 + f->kv_bytes + (extra ? 8 + 17 + 4 + 4 : 0) + infos, alignment);
  uint64_t offset = 0;
  for (size_t i = 0; i < NTENSORS; i++) {
    const want_tensor_t *w = &k_tensors[i];
    const gguf_tensor_t *t = gguf_tensor_at(g, i);
    cr_assert_not_null(t);
    cr_assert_str_eq(t->name, w->name);
    cr_assert_eq(gguf_find_tensor(g, w->name), t);
    cr_assert_eq(t->n_dims, w->n_dims, "%s: %u dims", w->name, t->n_dims);
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
      cr_assert_eq(t->ne[d], d < (int)w->n_dims ? w->ne[d] : 1, "%s: ne[%d] = %llu", w->name, d,
                   (unsigned long long)t->ne[d]);
    cr_assert_eq(t->type, w->type, "%s: type %d", w->name, (int)t->type);
    cr_assert_eq(t->bytes, w->bytes, "%s: %llu bytes, expected %llu", w->name,
                 (unsigned long long)t->bytes, (unsigned long long)w->bytes);
    cr_assert_eq(t->offset, offset, "%s: offset %llu, expected %llu", w->name,
                 (unsigned long long)t->offset, (unsigned long long)offset);
    cr_assert_eq(t->offset % alignment, 0);
    cr_assert_eq((const uint8_t *)t->data, base + data_start + offset,
                 "%s: data at file offset %td, expected %llu", w->name,
                 (const uint8_t *)t->data - base, (unsigned long long)(data_start + offset));
    cr_assert(!memcmp(t->data, w->data, w->bytes), "%s: data differ", w->name);
    offset = align_up(offset + w->bytes, alignment);
    if (i + 1 == NTENSORS)
      cr_assert_eq(data_start + t->offset + t->bytes, size, "the last tensor ends the file");
  }
  cr_assert_null(gguf_tensor_at(g, NTENSORS));
  cr_assert_null(gguf_find_tensor(g, "t.f32"));
  cr_assert_null(gguf_find_tensor(g, "t.f32.1d.x"));
}

/* Checks g against f and k_tensors as written with this version and alignment. */
static void check_round_trip(const gguf_file_t *g, const uint8_t *base, size_t size,
                             const want_file_t *f, uint32_t version, uint32_t alignment) {
  cr_assert_eq(gguf_version(g), version);
  cr_assert_eq(gguf_alignment(g), alignment);
  cr_assert_eq(gguf_file_size(g), size);
  check_round_trip_kvs(g, base, size, f, alignment);
  check_round_trip_tensors(g, base, size, f, alignment);
}

Test(llm_gguf, writer_round_trip) {
  uint64_t seed = 42;
  for (size_t i = 0; i < NTENSORS; i++) {
    k_tensors[i].bytes = tensor_bytes(k_tensors[i].type, k_tensors[i].ne, k_tensors[i].n_dims);
    k_tensors[i].data = malloc(k_tensors[i].bytes);
    rng_bytes(&seed, k_tensors[i].data, k_tensors[i].bytes);
  }
  char dir[512], path[600];
  temp_dir(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/round.gguf", dir);
  const uint32_t versions[] = {2, 3}, alignments[] = {32, 64, 8, 1, 256};
  for (int v = 0; v < 2; v++)
    for (int a = 0; a < 5; a++) {
      gguf_writer_t *w;
      OK(gguf_writer_create(&w));
      want_file_t *f = calloc(1, sizeof(*f));
      add_every_kv(w, f);
      if (versions[v] != 3) gguf_writer_set_version(w, versions[v]);
      if (alignments[a] != 32) OK(gguf_writer_set_alignment(w, alignments[a]));
      for (size_t i = 0; i < NTENSORS; i++) {
        const want_tensor_t *t = &k_tensors[i];
        OK(gguf_writer_add_tensor(w, t->name, t->type, t->ne, t->n_dims, t->data));
      }
      uint8_t *bytes;
      size_t size;
      OK(gguf_writer_bytes(w, &bytes, &size));
      cr_assert_eq(memcmp(bytes, "GGUF", 4), 0);
      uint8_t *copy = malloc(size);
      memcpy(copy, bytes, size);
      gguf_file_t *g;
      OK(gguf_open_memory(copy, size, "round.gguf", &g));
      cr_assert_str_eq(gguf_path(g), "round.gguf");
      check_round_trip(g, copy, size, f, versions[v], alignments[a]);
      gguf_close(g);
      free(copy);

      /* the same on disk: the same bytes, the same reading */
      OK(gguf_writer_write(w, path));
      OK(gguf_open(path, &g));
      cr_assert_str_eq(gguf_path(g), path);
      FILE *fp = fopen(path, "rb");
      cr_assert_not_null(fp);
      uint8_t *disk = malloc(size + 1);
      cr_assert_eq(fread(disk, 1, size + 1, fp), size, "the file on disk has another size");
      fclose(fp);
      cr_assert(!memcmp(disk, bytes, size), "gguf_writer_write and gguf_writer_bytes differ");
      free(disk);
      cr_assert_eq(gguf_kv_count(g), f->nkv + (alignments[a] != 32));
      cr_assert_eq(gguf_tensor_count(g), NTENSORS);
      for (size_t i = 0; i < NTENSORS; i++)
        cr_assert(!memcmp(gguf_tensor_at(g, i)->data, k_tensors[i].data, k_tensors[i].bytes));
      gguf_close(g);
      unlink(path);
      free(bytes);
      free(f);
      gguf_writer_free(w);
    }
  rmdir(dir);
  for (size_t i = 0; i < NTENSORS; i++) free(k_tensors[i].data);
}

Test(llm_gguf, writer_alignment_set_twice) {
  /* the last alignment set is the file's, written once (32: not at all) */
  const uint32_t seq[][3] = {{64, 8, 8}, {64, 32, 32}, {8, 8, 8}, {32, 64, 64}};
  for (int i = 0; i < 4; i++) {
    gguf_writer_t *w;
    OK(gguf_writer_create(&w));
    OK(gguf_writer_set_alignment(w, seq[i][0]));
    OK(gguf_writer_add_u32(w, "x", 1));
    OK(gguf_writer_set_alignment(w, seq[i][1]));
    float data[3] = {1, 2, 3};
    OK(gguf_writer_add_tensor(w, "a", GGML_TYPE_F32, (uint64_t[]){3}, 1, data));
    OK(gguf_writer_add_tensor(w, "b", GGML_TYPE_F32, (uint64_t[]){3}, 1, data));
    uint8_t *bytes;
    size_t size;
    OK(gguf_writer_bytes(w, &bytes, &size));
    gguf_writer_free(w);
    gguf_file_t *g;
    OK(gguf_open_memory(bytes, size, "twice.gguf", &g));
    cr_assert_eq(gguf_alignment(g), seq[i][2]);
    cr_assert_eq(gguf_kv_count(g), seq[i][2] == 32 ? 1u : 2u);
    cr_assert_eq(gguf_tensor_at(g, 1)->offset, align_up(12, seq[i][2]));
    gguf_close(g);
    free(bytes);
  }
}

Test(llm_gguf, writer_refuses_bad_arguments) {
  gguf_writer_t *w;
  OK(gguf_writer_create(&w));
  FAILS(gguf_writer_set_alignment(w, 0), HCQ_INVALID_ARGUMENT, "0");
  FAILS(gguf_writer_set_alignment(w, 3), HCQ_INVALID_ARGUMENT, "3");
  FAILS(gguf_writer_set_alignment(w, 48), HCQ_INVALID_ARGUMENT, "48");
  float data[64] = {0};
  FAILS(gguf_writer_add_tensor(w, "q", GGML_TYPE_Q4_0, (uint64_t[]){33}, 1, data),
        HCQ_INVALID_ARGUMENT, "\"q\"", "33");
  FAILS(gguf_writer_add_tensor(w, "k", (ggml_type_t)14, (uint64_t[]){32}, 1, data),
        HCQ_INVALID_ARGUMENT, "\"k\"");
  FAILS(gguf_writer_add_tensor(w, "d0", GGML_TYPE_F32, (uint64_t[]){4}, 0, data),
        HCQ_INVALID_ARGUMENT, "\"d0\"");
  FAILS(gguf_writer_add_tensor(w, "d5", GGML_TYPE_F32, (uint64_t[]){1, 1, 1, 1, 1}, 5, data),
        HCQ_INVALID_ARGUMENT, "\"d5\"");
  FAILS(gguf_writer_add_tensor(w, "z", GGML_TYPE_F32, (uint64_t[]){4, 0}, 2, data),
        HCQ_INVALID_ARGUMENT, "\"z\"");
  FAILS(gguf_writer_add_tensor(w, "big", GGML_TYPE_F32, (uint64_t[]){1ull << 32, 1ull << 32}, 2,
                               data),
        HCQ_INVALID_ARGUMENT, "\"big\"");
  /* nothing was added: the file is empty and opens */
  uint8_t *bytes;
  size_t size;
  OK(gguf_writer_bytes(w, &bytes, &size));
  cr_assert_eq(size, 24u);
  gguf_file_t *g;
  OK(gguf_open_memory(bytes, size, "empty.gguf", &g));
  cr_assert_eq(gguf_kv_count(g), 0u);
  cr_assert_eq(gguf_tensor_count(g), 0u);
  cr_assert_eq(gguf_alignment(g), 32u);
  gguf_close(g);
  free(bytes);
  FAILS(gguf_writer_write(w, "/nonexistent-folder-for-hcq/x.gguf"), HCQ_INVALID_ARGUMENT,
        "/nonexistent-folder-for-hcq/x.gguf");
  gguf_writer_free(w);
}

/* ggml's types with their blocks, written from ggml-common.h's block structs (QK_K = 256, a half is
 * 2 bytes) rather than from gguf.h's table. */
static const struct {
  uint32_t type;
  const char *name;
  uint32_t block, bytes;
} k_ggml_types[] = {
    {0, "F32", 1, 4},
    {1, "F16", 1, 2},
    {2, "Q4_0", 32, 2 + 16},             /* d, 32 nibbles */
    {3, "Q4_1", 32, 2 + 2 + 16},         /* d, m, nibbles */
    {6, "Q5_0", 32, 2 + 4 + 16},         /* d, qh, nibbles */
    {7, "Q5_1", 32, 2 + 2 + 4 + 16},     /* d, m, qh, nibbles */
    {8, "Q8_0", 32, 2 + 32},             /* d, bytes */
    {9, "Q8_1", 32, 2 + 2 + 32},         /* d, s, bytes */
    {10, "Q2_K", 256, 16 + 64 + 2 + 2},  /* scales, 2-bit quants, d, dmin */
    {11, "Q3_K", 256, 32 + 64 + 12 + 2}, /* hmask, quants, scales, d */
    /* ql, qh, scales, d */
    /* float d, quants, 16 int16 sums */
    {12, "Q4_K", 256, 2 + 2 + 12 + 128},
    {13, "Q5_K", 256, 2 + 2 + 12 + 32 + 128},
    {14, "Q6_K", 256, 128 + 64 + 16 + 2},
    {15, "Q8_K", 256, 4 + 256 + 32},
    {16, "IQ2_XXS", 256, 2 + 64},
    {17, "IQ2_XS", 256, 2 + 64 + 8},
    {18, "IQ3_XXS", 256, 2 + 96},
    {19, "IQ1_S", 256, 2 + 32 + 16},
    {20, "IQ4_NL", 32, 2 + 16},
    {21, "IQ3_S", 256, 2 + 64 + 8 + 32 + 4},
    {22, "IQ2_S", 256, 2 + 64 + 8 + 8},
    {23, "IQ4_XS", 256, 2 + 2 + 4 + 128},
    {24, "I8", 1, 1},
    {25, "I16", 1, 2},
    {26, "I32", 1, 4},
    {27, "I64", 1, 8},
    {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 32 + 16 + 8},
    {30, "BF16", 1, 2},
    {34, "TQ1_0", 256, 48 + 4 + 2},
    {35, "TQ2_0", 256, 64 + 2},
    {39, "MXFP4", 32, 1 + 16},
};

Test(llm_gguf, type_tables) {
  size_t n = sizeof(k_ggml_types) / sizeof(k_ggml_types[0]);
  for (size_t i = 0; i < n; i++) {
    uint32_t t = k_ggml_types[i].type;
    cr_assert(ggml_type_known(t), "type %u", t);
    cr_assert_not(ggml_type_removed(t));
    cr_assert_str_eq(ggml_type_name(t), k_ggml_types[i].name);
    cr_assert_eq(ggml_block_elems((ggml_type_t)t), k_ggml_types[i].block, "%s",
                 k_ggml_types[i].name);
    cr_assert_eq(ggml_block_bytes((ggml_type_t)t), k_ggml_types[i].bytes, "%s",
                 k_ggml_types[i].name);
    cr_assert_eq(ggml_type_quantized(t), k_ggml_types[i].block > 1, "%s", k_ggml_types[i].name);
  }
  /* every other number below 64: removed (with its old name) or not a type at all */
  const uint32_t removed[] = {4, 5, 31, 32, 33, 36, 37, 38};
  const char *removed_names[] = {"Q4_2",     "Q4_3",       "Q4_0_4_4",   "Q4_0_4_8",
                                 "Q4_0_8_8", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8"};
  for (int i = 0; i < 8; i++) {
    cr_assert_not(ggml_type_known(removed[i]));
    cr_assert(ggml_type_removed(removed[i]));
    cr_assert_str_eq(ggml_type_name(removed[i]), removed_names[i]);
    cr_assert_eq(ggml_block_bytes((ggml_type_t)removed[i]), 0u);
  }
  size_t known = 0;
  for (uint32_t t = 0; t < 64; t++) known += ggml_type_known(t);
  cr_assert_eq(known, n);
  cr_assert_not(ggml_type_known(40));
  cr_assert_null(ggml_type_name(40));
  cr_assert_null(ggml_type_name(77));
  cr_assert_null(ggml_type_name(UINT32_MAX));
  cr_assert_not(ggml_type_quantized(77));
  cr_assert_eq(ggml_block_elems((ggml_type_t)77), 0u);
  cr_assert_eq(ggml_block_bytes((ggml_type_t)77), 0u);
  cr_assert_str_eq(gguf_value_type_name(GGUF_UINT32), "uint32");
  cr_assert_str_eq(gguf_value_type_name(GGUF_FLOAT64), "float64");
  cr_assert_str_eq(gguf_value_type_name(GGUF_ARRAY), "array");
  /* unknown ones: "type 77" style text (gguf.h) */
  cr_assert_str_eq(gguf_value_type_name(13), "type 13");
  cr_assert_str_eq(gguf_value_type_name(UINT32_MAX), "type 4294967295");
}

/* ---- getters ---- */

/* w's file, written into memory (*bytes, the caller's to free with the file) and opened as name. */
static gguf_file_t *writer_opened(gguf_writer_t *w, const char *name, uint8_t **bytes) {
  size_t size;
  OK(gguf_writer_bytes(w, bytes, &size));
  gguf_writer_free(w);
  gguf_file_t *g;
  OK(gguf_open_memory(*bytes, size, name, &g));
  return g;
}

static gguf_file_t *getters_file(uint8_t **bytes) {
  gguf_writer_t *w;
  OK(gguf_writer_create(&w));
  OK(gguf_writer_add_raw(w, "u8", GGUF_UINT8, &(uint8_t){200}, 1));
  OK(gguf_writer_add_raw(w, "i8", GGUF_INT8, &(int8_t){-3}, 1));
  OK(gguf_writer_add_raw(w, "i8.pos", GGUF_INT8, &(int8_t){127}, 1));
  OK(gguf_writer_add_raw(w, "u16", GGUF_UINT16, &(uint16_t){60000}, 2));
  OK(gguf_writer_add_raw(w, "i16", GGUF_INT16, &(int16_t){-300}, 2));
  OK(gguf_writer_add_u32(w, "u32", 4000000000u));
  OK(gguf_writer_add_raw(w, "i32", GGUF_INT32, &(int32_t){-7}, 4));
  OK(gguf_writer_add_raw(w, "i32.pos", GGUF_INT32, &(int32_t){7}, 4));
  OK(gguf_writer_add_raw(w, "u64", GGUF_UINT64, &(uint64_t){123}, 8));
  OK(gguf_writer_add_raw(w, "u64.u32max", GGUF_UINT64, &(uint64_t){UINT32_MAX}, 8));
  OK(gguf_writer_add_raw(w, "u64.2^32", GGUF_UINT64, &(uint64_t){1ull << 32}, 8));
  OK(gguf_writer_add_raw(w, "u64.i64max", GGUF_UINT64, &(uint64_t){INT64_MAX}, 8));
  OK(gguf_writer_add_raw(w, "u64.2^63", GGUF_UINT64, &(uint64_t){1ull << 63}, 8));
  OK(gguf_writer_add_raw(w, "u64.max", GGUF_UINT64, &(uint64_t){UINT64_MAX}, 8));
  OK(gguf_writer_add_raw(w, "i64", GGUF_INT64, &(int64_t){-1}, 8));
  OK(gguf_writer_add_raw(w, "i64.min", GGUF_INT64, &(int64_t){INT64_MIN}, 8));
  OK(gguf_writer_add_raw(w, "i64.2^33", GGUF_INT64, &(int64_t){1ll << 33}, 8));
  OK(gguf_writer_add_f32(w, "f32", 1.5f));
  OK(gguf_writer_add_raw(w, "f64", GGUF_FLOAT64, &(double){2.25}, 8));
  OK(gguf_writer_add_raw(w, "f64.huge", GGUF_FLOAT64, &(double){1e300}, 8));
  OK(gguf_writer_add_raw(w, "f64.-huge", GGUF_FLOAT64, &(double){-1e300}, 8));
  OK(gguf_writer_add_bool(w, "bool", true));
  OK(gguf_writer_add_raw(w, "bool.2", GGUF_BOOL, &(uint8_t){2}, 1));
  OK(gguf_writer_add_str(w, "str", "hello"));
  OK(gguf_writer_add_str(w, "str.empty", ""));
  const char *words[] = {"x", "", "yz"};
  OK(gguf_writer_add_str_array(w, "strs", words, 3));
  OK(gguf_writer_add_str_array(w, "strs.empty", NULL, 0));
  const int32_t ints[] = {5, -6, 7};
  OK(gguf_writer_add_i32_array(w, "ints", ints, 3));
  return writer_opened(w, "getters.gguf", bytes);
}

Test(llm_gguf, getters_integers) {
  uint8_t *bytes;
  gguf_file_t *g = getters_file(&bytes);
  const struct {
    const char *key;
    uint32_t value;
  } fit[] = {
      {"u8", 200},  {"i8.pos", 127},           {"u16", 60000}, {"u32", 4000000000u}, {"i32.pos", 7},
      {"u64", 123}, {"u64.u32max", UINT32_MAX}};
  for (size_t i = 0; i < sizeof(fit) / sizeof(fit[0]); i++) {
    uint32_t v = 0;
    OK(gguf_get_u32(g, fit[i].key, &v));
    cr_assert_eq(v, fit[i].value, "%s: %u", fit[i].key, v);
    v = 0;
    OK(gguf_get_u32_or(g, fit[i].key, &v));
    cr_assert_eq(v, fit[i].value);
  }
  /* values that do not fit: INVALID_ARGUMENT naming the key and the value, *out untouched */
  const struct {
    const char *key, *value;
  } out_of_range[] = {{"i8", "-3"},
                      {"i16", "-300"},
                      {"i32", "-7"},
                      {"u64.2^32", "4294967296"},
                      {"i64", "-1"},
                      {"i64.min", "-9223372036854775808"},
                      {"i64.2^33", "8589934592"},
                      {"u64.i64max", "9223372036854775807"}};
  for (size_t i = 0; i < sizeof(out_of_range) / sizeof(out_of_range[0]); i++) {
    uint32_t v = 99;
    char key[64];
    snprintf(key, sizeof(key), "\"%s\"", out_of_range[i].key);
    FAILS(gguf_get_u32(g, out_of_range[i].key, &v), HCQ_INVALID_ARGUMENT, "getters.gguf", key,
          out_of_range[i].value);
    FAILS(gguf_get_u32_or(g, out_of_range[i].key, &v), HCQ_INVALID_ARGUMENT, key);
    cr_assert_eq(v, 99u);
  }
  gguf_close(g);
  free(bytes);
}

/* uint64 values of 2^63 and more do not fit in int64 either; int64 takes every other integer. */
Test(llm_gguf, getters_int64_range) {
  uint8_t *bytes;
  gguf_file_t *g = getters_file(&bytes);
  uint32_t v = 99;
  int64_t i64 = 5;
  FAILS(gguf_get_u32(g, "u64.2^63", &v), HCQ_INVALID_ARGUMENT, "\"u64.2^63\"");
  FAILS(gguf_get_u32(g, "u64.max", &v), HCQ_INVALID_ARGUMENT, "\"u64.max\"");
  FAILS(gguf_get_i64(g, "u64.2^63", &i64), HCQ_INVALID_ARGUMENT, "\"u64.2^63\"");
  FAILS(gguf_get_i64(g, "u64.max", &i64), HCQ_INVALID_ARGUMENT, "\"u64.max\"",
        "18446744073709551615");
  FAILS(gguf_get_i64(g, "u64.2^63", &i64), HCQ_INVALID_ARGUMENT, "9223372036854775808");
  cr_assert_eq(v, 99u);
  cr_assert_eq(i64, 5, "a failed gguf_get_i64 changed *out");
  OK(gguf_get_i64(g, "u64.i64max", &i64));
  cr_assert_eq(i64, INT64_MAX);
  OK(gguf_get_i64(g, "i64.min", &i64));
  cr_assert_eq(i64, INT64_MIN);
  OK(gguf_get_i64(g, "i8", &i64));
  cr_assert_eq(i64, -3);
  OK(gguf_get_i64(g, "i16", &i64));
  cr_assert_eq(i64, -300);
  OK(gguf_get_i64(g, "u32", &i64));
  cr_assert_eq(i64, 4000000000ll);
  gguf_close(g);
  free(bytes);
}

/* Other types are not integers, whatever their value; absent keys are NOT_FOUND, or leave *out as
 * it was (the _or getters). */
Test(llm_gguf, getters_integers_refuse_other_types_and_absent_keys) {
  uint8_t *bytes;
  gguf_file_t *g = getters_file(&bytes);
  uint32_t v = 99;
  int64_t i64 = 5;
  const struct {
    const char *key, *type;
  } wrong[] = {{"f32", "float32"}, {"f64", "float64"},         {"bool", "bool"},
               {"str", "string"},  {"ints", "array of int32"}, {"strs", "array of string"}};
  for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
    char key[64];
    snprintf(key, sizeof(key), "\"%s\"", wrong[i].key);
    FAILS(gguf_get_u32(g, wrong[i].key, &v), HCQ_INVALID_ARGUMENT, "getters.gguf", key,
          wrong[i].type, "integer");
    FAILS(gguf_get_u32_or(g, wrong[i].key, &v), HCQ_INVALID_ARGUMENT, key, wrong[i].type);
    FAILS(gguf_get_i64(g, wrong[i].key, &i64), HCQ_INVALID_ARGUMENT, key, wrong[i].type);
  }
  cr_assert_eq(v, 99u);
  /* absent keys */
  FAILS(gguf_get_u32(g, "nope", &v), HCQ_NOT_FOUND, "getters.gguf", "\"nope\"");
  FAILS(gguf_get_i64(g, "u", &i64), HCQ_NOT_FOUND, "getters.gguf", "\"u\"");
  FAILS(gguf_get_u32(g, "u8x", &v), HCQ_NOT_FOUND, "\"u8x\"");
  FAILS(gguf_get_u32(g, "", &v), HCQ_NOT_FOUND, "getters.gguf");
  OK(gguf_get_u32_or(g, "nope", &v));
  cr_assert_eq(v, 99u, "an absent key changed *out");
  gguf_close(g);
  free(bytes);
}

Test(llm_gguf, getters_floats_and_bools) {
  uint8_t *bytes;
  gguf_file_t *g = getters_file(&bytes);
  float f = 0;
  OK(gguf_get_f32(g, "f32", &f));
  cr_assert_eq(f, 1.5f);
  OK(gguf_get_f32(g, "f64", &f));
  cr_assert_eq(f, 2.25f);
  f = 7;
  FAILS(gguf_get_f32(g, "f64.huge", &f), HCQ_INVALID_ARGUMENT, "\"f64.huge\"");
  FAILS(gguf_get_f32(g, "f64.-huge", &f), HCQ_INVALID_ARGUMENT, "\"f64.-huge\"");
  FAILS(gguf_get_f32(g, "u32", &f), HCQ_INVALID_ARGUMENT, "\"u32\"", "uint32", "float32");
  FAILS(gguf_get_f32(g, "str", &f), HCQ_INVALID_ARGUMENT, "\"str\"", "string");
  FAILS(gguf_get_f32(g, "nope", &f), HCQ_NOT_FOUND, "getters.gguf", "\"nope\"");
  OK(gguf_get_f32_or(g, "nope", &f));
  cr_assert_eq(f, 7.0f);
  OK(gguf_get_f32_or(g, "f32", &f));
  cr_assert_eq(f, 1.5f);
  FAILS(gguf_get_f32_or(g, "bool", &f), HCQ_INVALID_ARGUMENT, "\"bool\"");

  bool b = false;
  OK(gguf_get_bool(g, "bool", &b));
  cr_assert(b);
  b = false;
  OK(gguf_get_bool(g, "bool.2", &b));
  cr_assert(b, "a bool byte of 2 is true");
  FAILS(gguf_get_bool(g, "u8", &b), HCQ_INVALID_ARGUMENT, "\"u8\"", "uint8", "bool");
  FAILS(gguf_get_bool(g, "nope", &b), HCQ_NOT_FOUND, "\"nope\"");
  b = false;
  OK(gguf_get_bool_or(g, "nope", &b));
  cr_assert_not(b);
  OK(gguf_get_bool_or(g, "bool", &b));
  cr_assert(b);
  FAILS(gguf_get_bool_or(g, "str", &b), HCQ_INVALID_ARGUMENT, "\"str\"");
  gguf_close(g);
  free(bytes);
}

Test(llm_gguf, getters_strings) {
  uint8_t *bytes;
  gguf_file_t *g = getters_file(&bytes);
  gguf_str_t s;
  OK(gguf_get_str(g, "str", &s));
  cr_assert_eq(s.len, 5u);
  cr_assert(!memcmp(s.ptr, "hello", 5));
  OK(gguf_get_str(g, "str.empty", &s));
  cr_assert_eq(s.len, 0u);
  FAILS(gguf_get_str(g, "strs", &s), HCQ_INVALID_ARGUMENT, "\"strs\"", "array of string",
        "expected a string");
  FAILS(gguf_get_str(g, "u32", &s), HCQ_INVALID_ARGUMENT, "\"u32\"");
  FAILS(gguf_get_str(g, "nope", &s), HCQ_NOT_FOUND, "\"nope\"");
  gguf_close(g);
  free(bytes);
}

Test(llm_gguf, getters_arrays) {
  uint8_t *bytes;
  gguf_file_t *g = getters_file(&bytes);
  gguf_str_t *arr;
  uint64_t count;
  OK(gguf_get_str_array(g, "strs", &arr, &count));
  cr_assert_eq(count, 3u);
  cr_assert(arr[0].len == 1 && !memcmp(arr[0].ptr, "x", 1));
  cr_assert_eq(arr[1].len, 0u);
  cr_assert(arr[2].len == 2 && !memcmp(arr[2].ptr, "yz", 2));
  free(arr);
  OK(gguf_get_str_array(g, "strs.empty", &arr, &count));
  cr_assert_eq(count, 0u);
  free(arr);
  FAILS(gguf_get_str_array(g, "ints", &arr, &count), HCQ_INVALID_ARGUMENT, "\"ints\"",
        "array of int32");
  cr_assert_null(arr);
  cr_assert_eq(count, 0u);
  FAILS(gguf_get_str_array(g, "str", &arr, &count), HCQ_INVALID_ARGUMENT, "\"str\"");
  FAILS(gguf_get_str_array(g, "nope", &arr, &count), HCQ_NOT_FOUND, "\"nope\"");

  const void *p;
  OK(gguf_get_array(g, "ints", GGUF_INT32, &p, &count));
  cr_assert_eq(count, 3u);
  int32_t ints[3];
  memcpy(ints, p, sizeof(ints));
  cr_assert(ints[0] == 5 && ints[1] == -6 && ints[2] == 7);
  FAILS(gguf_get_array(g, "ints", GGUF_FLOAT32, &p, &count), HCQ_INVALID_ARGUMENT, "\"ints\"",
        "array of int32", "array of float32");
  cr_assert_null(p);
  FAILS(gguf_get_array(g, "ints", 13, &p, &count), HCQ_INVALID_ARGUMENT, "\"ints\"", "type 13");
  FAILS(gguf_get_array(g, "u32", GGUF_UINT32, &p, &count), HCQ_INVALID_ARGUMENT, "\"u32\"");
  FAILS(gguf_get_array(g, "nope", GGUF_UINT32, &p, &count), HCQ_NOT_FOUND, "\"nope\"");
  OK(gguf_get_array(g, "strs.empty", GGUF_STRING, &p, &count));
  cr_assert_eq(count, 0u);
  gguf_close(g);
  free(bytes);
}

/* ---- 2. truncation at every byte ---- */

/* A small valid file: several kinds of metadata (a long key, string arrays), three tensors. */
static uint8_t *small_file(size_t *size) {
  gguf_writer_t *w;
  OK(gguf_writer_create(&w));
  OK(gguf_writer_add_str(w, "general.architecture", "llama"));
  OK(gguf_writer_add_u32(w, "llama.block_count", 1));
  OK(gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
  const char *tokens[] = {"<s>", "</s>",  "a",     "b", "ab", "\xc4\xa0the",
                          "",    "hello", "world", "x", "yz", "end"};
  OK(gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", tokens, 12));
  const int32_t types[] = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  OK(gguf_writer_add_i32_array(w, "tokenizer.ggml.token_type", types, 12));
  OK(gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true));
  OK(gguf_writer_add_raw(w, "general.file_size", GGUF_UINT64, &(uint64_t){12345}, 8));
  OK(gguf_writer_add_str(w, "general.name", "a truncated model"));
  uint64_t seed = 3;
  uint8_t data[256];
  rng_bytes(&seed, data, sizeof(data));
  OK(gguf_writer_add_tensor(w, "token_embd.weight", GGML_TYPE_Q8_0, (uint64_t[]){32, 4}, 2, data));
  OK(gguf_writer_add_tensor(w, "output_norm.weight", GGML_TYPE_F32, (uint64_t[]){24}, 1, data));
  OK(gguf_writer_add_tensor(w, "blk.0.attn_q.weight", GGML_TYPE_F16, (uint64_t[]){16, 4}, 2, data));
  uint8_t *bytes;
  OK(gguf_writer_bytes(w, &bytes, size));
  gguf_writer_free(w);
  return bytes;
}

/* Where a metadata value ends, walked from its data pointer. */
static size_t value_end(const gguf_kv_t *kv, const uint8_t *base) {
  const uint8_t *p = kv->data;
  size_t size = elem_size(kv->elem_type);
  if (size) return (size_t)(p - base) + size * kv->count;
  for (uint64_t i = 0; i < kv->count; i++) {
    uint64_t len;
    memcpy(&len, p, 8);
    p += 8 + len;
  }
  return (size_t)(p - base);
}

/* Where the parts of small_file lie: each metadata entry, tensor info and tensor's data (the entry,
 * its key or name, the end of the entry; the name quoted, as messages give it), the end of the
 * infos and the start of the data. */
typedef struct region {
  size_t start, name_end, end;
  char name[64];
} region_t;

typedef struct small_layout {
  size_t nkv, nt;
  region_t kvs[8], infos[3], datas[3];
  size_t infos_end, data_start;
} small_layout_t;

/* The layout of the whole file (size bytes at bytes). */
static void small_file_layout(const uint8_t *bytes, size_t size, small_layout_t *l) {
  gguf_file_t *g;
  OK(gguf_open_memory(bytes, size, "trunc.gguf", &g));
  l->nkv = gguf_kv_count(g), l->nt = gguf_tensor_count(g);
  cr_assert_eq(l->nkv, 8u);
  cr_assert_eq(l->nt, 3u);
  region_t *kvs = l->kvs, *infos = l->infos, *datas = l->datas;
  for (size_t i = 0; i < l->nkv; i++) {
    const gguf_kv_t *kv = gguf_kv_at(g, i);
    kvs[i].start = (size_t)((const uint8_t *)kv->key.ptr - bytes) - 8;
    kvs[i].name_end = kvs[i].start + 8 + kv->key.len;
    kvs[i].end = value_end(kv, bytes);
    snprintf(kvs[i].name, sizeof(kvs[i].name), "\"%.*s\"", (int)kv->key.len, kv->key.ptr);
    if (i) cr_assert_eq(kvs[i].start, kvs[i - 1].end);
  }
  size_t pos = kvs[l->nkv - 1].end;
  for (size_t i = 0; i < l->nt; i++) {
    const gguf_tensor_t *t = gguf_tensor_at(g, i);
    infos[i].start = pos;
    infos[i].name_end = pos + 8 + strlen(t->name);
    infos[i].end = infos[i].name_end + 4 + 8 * t->n_dims + 4 + 8;
    pos = infos[i].end;
    snprintf(infos[i].name, sizeof(infos[i].name), "\"%s\"", t->name);
    datas[i].start = (size_t)((const uint8_t *)t->data - bytes);
    datas[i].end = datas[i].start + t->bytes;
    snprintf(datas[i].name, sizeof(datas[i].name), "\"%s\"", t->name);
  }
  l->infos_end = pos;
  l->data_start = datas[0].start;
  cr_assert_eq(datas[l->nt - 1].end, size);
  cr_assert_gt(l->data_start, pos, "the test wants padding before the data");
  gguf_close(g);
}

/* The message for the file cut to its first len bytes names the entry, info or tensor cut (its
 * key or name once that is whole, its index while it is not) or the padding. */
static void check_cut_names_the_part(const small_layout_t *l, size_t len, const char *msg,
                                     const char *what) {
  const char *must = NULL;
  char index[64] = "";
  for (size_t i = 0; i < l->nkv; i++) {
    if (len >= l->kvs[i].name_end && len < l->kvs[i].end) must = l->kvs[i].name;
    if (len >= l->kvs[i].start && len < l->kvs[i].name_end)
      snprintf(index, sizeof(index), "metadata entry %zu", i);
  }
  for (size_t i = 0; i < l->nt; i++) {
    if (len >= l->infos[i].name_end && len < l->infos[i].end) must = l->infos[i].name;
    if (len >= l->infos[i].start && len < l->infos[i].name_end)
      snprintf(index, sizeof(index), "tensor %zu", i);
  }
  if (len >= l->data_start)
    for (size_t i = l->nt; i-- > 0;)
      if (len < l->datas[i].end) must = l->datas[i].name; /* the first tensor that does not fit */
  if (len >= l->infos_end && len < l->data_start) must = "padding";
  if (must) cr_assert(strstr(msg, must), "%s: the message does not name %s: %s", what, must, msg);
  if (*index)
    cr_assert(strstr(msg, index), "%s: the message does not name %s: %s", what, index, msg);
}

/* A few cuts by hand: in a type, in a string array, in the dims of a tensor. */
static void check_cuts_by_hand(const uint8_t *bytes, const small_layout_t *l) {
  char msg[2048];
  size_t key = l->kvs[2].name_end + 2; /* inside the type of the long key */
  failure(try_open_named(bytes, key, "trunc.gguf"), HCQ_INVALID_ARGUMENT, msg, sizeof(msg),
          "cut in a type");
  cr_assert(strstr(msg, "\"llama.attention.layer_norm_rms_epsilon\""), "%s", msg);
  size_t tok = l->kvs[3].name_end + 4 + 12 + 8 * 5 + 3; /* inside the tokens */
  failure(try_open_named(bytes, tok, "trunc.gguf"), HCQ_INVALID_ARGUMENT, msg, sizeof(msg),
          "cut in a string array");
  cr_assert(strstr(msg, "\"tokenizer.ggml.tokens\""), "%s", msg);
  failure(try_open_named(bytes, l->infos[1].name_end + 6, "trunc.gguf"), HCQ_INVALID_ARGUMENT, msg,
          sizeof(msg), "cut in the dims of a tensor");
  cr_assert(strstr(msg, "\"output_norm.weight\""), "%s", msg);
}

Test(llm_gguf, truncated_at_every_byte) {
  size_t size;
  uint8_t *bytes = small_file(&size);
  cr_assert(size > 700 && size < 2048, "the small file has %zu bytes", size);
  small_layout_t l;
  small_file_layout(bytes, size, &l);
  /* Below this size the counts in the header are refused outright (a metadata entry takes at
   * least 13 bytes, a tensor info 33): the message names the file and the count. */
  size_t counts_fit = 24 + (13 * l.nkv > 33 * l.nt ? 13 * l.nkv : 33 * l.nt);
  for (size_t len = 0; len < size; len++) {
    char msg[2048], what[64];
    snprintf(what, sizeof(what), "the first %zu of %zu bytes", len, size);
    failure(try_open_named(bytes, len, "trunc.gguf"), HCQ_INVALID_ARGUMENT, msg, sizeof(msg), what);
    cr_assert(strstr(msg, "trunc.gguf"), "%s: the message does not name the file: %s", what, msg);
    if (len >= counts_fit) check_cut_names_the_part(&l, len, msg, what);
  }
  check_cuts_by_hand(bytes, &l);
  free(bytes);
}

/* ---- 3. hostile files ---- */

Test(llm_gguf, hostile_counts) {
  limit_memory();
  const uint64_t counts[] = {UINT64_MAX,       1ull << 63, 1ull << 62,
                             (1ull << 62) + 1, 1ull << 40, 1ull << 32,
                             1ull << 26,       1000,       2};
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
    buf_t b = {0};
    put_header(&b, 3, counts[i], 0);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "tensors");
    b.n = 0;
    put_header(&b, 3, 0, counts[i]);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "metadata entries");
    b.n = 0;
    put_header(&b, 2, counts[i], counts[i]);
    put_zeros(&b, 40);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf");
    /* a count one past what the rest holds: a real entry, then the end */
    b.n = 0;
    put_header(&b, 3, 0, counts[i] < 1000 ? counts[i] : 2);
    put_kv_u32(&b, "only.one", 1);
    put_zeros(&b, 100);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf");
    free(b.p);
  }
}

Test(llm_gguf, hostile_string_lengths) {
  limit_memory();
  const uint64_t lens[] = {UINT64_MAX, UINT64_MAX - 7, 1ull << 63, 1ull << 62, 1ull << 32, 100};
  for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
    buf_t b = {0};
    /* a key */
    put_header(&b, 3, 0, 1);
    put_u64(&b, lens[i]);
    put_zeros(&b, 40);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "metadata entry 0", "past the end");
    /* a string value */
    b.n = 0;
    put_header(&b, 3, 0, 2);
    put_kv_u32(&b, "first", 1);
    put_str(&b, "s");
    put_u32(&b, GGUF_STRING);
    put_u64(&b, lens[i]);
    put_zeros(&b, 40);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"s\"", "past the end");
    /* the second string of an array */
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_str(&b, "strings");
    put_u32(&b, GGUF_ARRAY);
    put_u32(&b, GGUF_STRING);
    put_u64(&b, 3);
    put_str(&b, "abc");
    put_u64(&b, lens[i]);
    put_zeros(&b, 40);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"strings\"", "past the end");
    /* a tensor name */
    b.n = 0;
    put_header(&b, 3, 1, 0);
    put_u64(&b, lens[i]);
    put_zeros(&b, 60);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "tensor 0", "past the end");
    free(b.p);
  }
}

Test(llm_gguf, hostile_array_counts) {
  limit_memory();
  const uint32_t types[] = {GGUF_UINT8,  GGUF_INT8,   GGUF_UINT16,  GGUF_INT16,
                            GGUF_UINT32, GGUF_INT32,  GGUF_FLOAT32, GGUF_BOOL,
                            GGUF_STRING, GGUF_UINT64, GGUF_INT64,   GGUF_FLOAT64};
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
    uint64_t size = elem_size(types[t]) ? elem_size(types[t]) : 8;
    /* UINT64_MAX / size + 1 values take 2^64 bytes: 0 when multiplied in uint64 */
    const uint64_t counts[] = {UINT64_MAX,
                               UINT64_MAX - 1,
                               1ull << 63,
                               1ull << 62,
                               1ull << 61,
                               size > 1 ? UINT64_MAX / size + 1 : UINT64_MAX,
                               UINT64_MAX / size / 2 + 1,
                               1ull << 32,
                               256 / size + 1};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
      buf_t b = {0};
      put_header(&b, 3, 0, 1);
      put_str(&b, "arr");
      put_u32(&b, GGUF_ARRAY);
      put_u32(&b, types[t]);
      put_u64(&b, counts[c]);
      put_zeros(&b,
                256); /* 256 bytes of values, or 32 strings of length 0: one more does not fit */
      char what[96];
      snprintf(what, sizeof(what), "an array of %llu %s", (unsigned long long)counts[c],
               gguf_value_type_name(types[t]));
      char msg[2048];
      failure(try_open(&b), HCQ_INVALID_ARGUMENT, msg, sizeof(msg), what);
      cr_assert(strstr(msg, "\"arr\"") && strstr(msg, "bad.gguf"), "%s: %s", what, msg);
      free(b.p);
    }
    /* the count that just fits opens */
    buf_t b = {0};
    put_header(&b, 3, 0, 1);
    put_str(&b, "arr");
    put_u32(&b, GGUF_ARRAY);
    put_u32(&b, types[t]);
    put_u64(&b, 256 / size);
    put_zeros(&b, 256);
    OK(try_open(&b));
    free(b.p);
  }
}

Test(llm_gguf, hostile_value_types) {
  buf_t b = {0};
  /* nested arrays */
  put_header(&b, 3, 0, 1);
  put_str(&b, "nested");
  put_u32(&b, GGUF_ARRAY);
  put_u32(&b, GGUF_ARRAY);
  put_u64(&b, 1);
  put_u32(&b, GGUF_UINT8);
  put_u64(&b, 1);
  put_zeros(&b, 8);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"nested\"", "array of arrays");
  const uint32_t unknown[] = {13, 14, 0x100, 0xffffffffu};
  for (int i = 0; i < 4; i++) {
    char num[32];
    snprintf(num, sizeof(num), "%u", unknown[i]);
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_str(&b, "odd");
    put_u32(&b, unknown[i]);
    put_zeros(&b, 16);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"odd\"", "unknown value type", num);
    b.n = 0;
    put_header(&b, 3, 0, 1);
    put_str(&b, "odd.array");
    put_u32(&b, GGUF_ARRAY);
    put_u32(&b, unknown[i]);
    put_u64(&b, 1);
    put_zeros(&b, 16);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"odd.array\"", "unknown value type",
          num);
  }
  /* an empty key, duplicate keys */
  b.n = 0;
  put_header(&b, 3, 0, 2);
  put_kv_u32(&b, "fine", 1);
  put_kv_u32(&b, "", 1);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "metadata entry 1", "empty key");
  b.n = 0;
  put_header(&b, 3, 0, 3);
  put_kv_u32(&b, "dup", 1);
  put_kv_u32(&b, "other", 1);
  put_str(&b, "dup");
  put_u32(&b, GGUF_STRING);
  put_str(&b, "again");
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"dup\"", "twice");
  /* keys that differ only in length are not duplicates */
  b.n = 0;
  put_header(&b, 3, 0, 3);
  put_kv_u32(&b, "dup", 1);
  put_kv_u32(&b, "du", 1);
  put_kv_u32(&b, "dupe", 1);
  OK(try_open(&b));
  free(b.p);
}

/* A file with one tensor info as given and data of data_bytes after it (alignment 32). */
static void one_tensor(buf_t *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t data_bytes) {
  b->n = 0;
  put_header(b, 3, 1, 1);
  put_kv_u32(b, "x", 1);
  put_tensor_info(b, name, n_dims, ne, type, offset);
  put_data(b, 32, data_bytes);
}

Test(llm_gguf, hostile_tensor_infos) {
  limit_memory();
  buf_t b = {0};
  one_tensor(&b, "w", 2, (uint64_t[]){32, 2}, GGML_TYPE_F32, 0, 256);
  OK(try_open(&b));
  /* dimension counts */
  const uint32_t dims[] = {0, 5, 64, 0xffffffffu};
  for (int i = 0; i < 4; i++) {
    one_tensor(&b, "w", 4, (uint64_t[]){1, 1, 1, 1}, GGML_TYPE_F32, 0, 64);
    /* n_dims, after the metadata and the name */
    memcpy(b.p + 24 + 8 + 1 + 4 + 4 + 8 + 1, &dims[i], 4);
    char num[32];
    snprintf(num, sizeof(num), "%u dimensions", dims[i]);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"w\"", num);
  }
  /* a dimension of 0, in each place */
  for (int d = 0; d < 4; d++) {
    uint64_t ne[4] = {32, 2, 2, 2};
    ne[d] = 0;
    one_tensor(&b, "zero", 4, ne, GGML_TYPE_F32, 0, 4096);
    char what[32];
    snprintf(what, sizeof(what), "dimension %d is 0", d);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"zero\"", what);
  }
  /* element counts past int64 */
  const uint64_t big[][4] = {
      {1ull << 32, 1ull << 32, 1, 1}, {1ull << 63, 1, 1, 1},
      {UINT64_MAX, 1, 1, 1},          {1, 1ull << 62, 2, 1},
      {2, 2, 2, 1ull << 61},          {1ull << 21, 1ull << 21, 1ull << 21, 2}};
  for (int i = 0; i < 6; i++) {
    one_tensor(&b, "huge", 4, big[i], GGML_TYPE_F16, 0, 64);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"huge\"", "overflow");
  }
  /* element counts within int64 whose byte count is past 2^64 (F32: 4 bytes each) or the file */
  const uint64_t wide[][2] = {{1ull << 62, 1},
                              {1ull << 31, 1ull << 31},
                              {(1ull << 62) + 1, 1},
                              {1ull << 61, 3},
                              {INT64_MAX, 1}};
  for (int i = 0; i < 5; i++) {
    one_tensor(&b, "wide", 2, wide[i], GGML_TYPE_F32, 0, 64);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"wide\"");
    one_tensor(&b, "wide16", 2, wide[i], GGML_TYPE_F16, 0, 64);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"wide16\"");
  }
  one_tensor(&b, "wideq", 2, (uint64_t[]){1ull << 61, 3}, GGML_TYPE_Q8_0, 0, 64);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"wideq\"");
  free(b.p);
}

Test(llm_gguf, hostile_tensor_types) {
  limit_memory();
  buf_t b = {0};
  /* rows not a multiple of the block */
  const uint32_t blocked[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0};
  for (int i = 0; i < 3; i++) {
    one_tensor(&b, "rows", 2, (uint64_t[]){48, 2}, blocked[i], 0, 256);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"rows\"", ggml_type_name(blocked[i]),
          "48", "32");
    one_tensor(&b, "rows", 2, (uint64_t[]){1, 32}, blocked[i], 0, 256);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"rows\"", "not a multiple");
  }
  /* every ggml type is sized: Q6_K [256, 2] is 420 bytes, BF16 [32] 64 */
  one_tensor(&b, "k6", 2, (uint64_t[]){256, 2}, GGML_TYPE_Q6_K, 0, 420);
  OK(try_open(&b));
  one_tensor(&b, "bf", 1, (uint64_t[]){32}, GGML_TYPE_BF16, 0, 64);
  OK(try_open(&b));
  /* removed numbers, and numbers that never were types */
  const uint32_t removed[] = {4, 5, 31, 33, 36, 38};
  for (int i = 0; i < 6; i++) {
    one_tensor(&b, "old", 1, (uint64_t[]){256}, removed[i], 0, 512);
    char num[16];
    snprintf(num, sizeof(num), "type %u", removed[i]);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"old\"", num,
          ggml_type_name(removed[i]), "removed");
  }
  const uint32_t unknown[] = {40, 77, 200, UINT32_MAX};
  for (int i = 0; i < 4; i++) {
    one_tensor(&b, "t", 1, (uint64_t[]){32}, unknown[i], 0, 64);
    char num[32];
    snprintf(num, sizeof(num), "type %u", unknown[i]);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"t\"", num, "not a ggml type");
  }
  free(b.p);
}

/* Tensor names: empty, with a NUL byte. */
Test(llm_gguf, hostile_tensor_names) {
  limit_memory();
  buf_t b = {0};
  one_tensor(&b, "", 1, (uint64_t[]){4}, GGML_TYPE_F32, 0, 16);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "tensor 0", "empty name");
  b.n = 0;
  put_header(&b, 3, 1, 0);
  put_strn(&b, "ab\0cd", 5);
  put_u32(&b, 1);
  put_u64(&b, 4);
  put_u32(&b, GGML_TYPE_F32);
  put_u64(&b, 0);
  put_data(&b, 32, 16);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "tensor 0", "NUL", "ab\\x00cd");
  free(b.p);
}

/* The types the reader learned beyond F32..Q8_0: every one sized from its block, a tensor cut short
 * by one byte refused, rows that are not whole blocks refused, counts whose bytes pass the end. */
Test(llm_gguf, hostile_block_types) {
  limit_memory();
  buf_t b = {0};
  size_t n = sizeof(k_ggml_types) / sizeof(k_ggml_types[0]);
  for (size_t i = 0; i < n; i++) {
    uint32_t t = k_ggml_types[i].type, block = k_ggml_types[i].block, bytes = k_ggml_types[i].bytes;
    const char *name = k_ggml_types[i].name;
    /* 3 rows of 2 blocks: exactly 6 blocks of data opens, one byte less does not */
    one_tensor(&b, "w", 2, (uint64_t[]){2 * block, 3}, t, 0, 6 * bytes);
    OK(try_open(&b));
    one_tensor(&b, "w", 2, (uint64_t[]){2 * block, 3}, t, 0, 6 * bytes - 1);
    char size[32];
    snprintf(size, sizeof(size), "(%u bytes", 6 * bytes);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"w\"", size, "past the end");
    /* far more rows than the file holds */
    one_tensor(&b, "w", 2, (uint64_t[]){block, 1ull << 40}, t, 0, 4 * bytes);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"w\"", "past the end");
    /* counts whose byte count passes 2^63 */
    one_tensor(&b, "w", 3, (uint64_t[]){block, 1ull << 31, 1ull << 31}, t, 0, 64);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"w\"");
    if (block == 1) continue;
    /* a row that is not whole blocks: Q4_K of 100 columns, Q4_0 of 48 */
    uint64_t cols = block == 256 ? 100 : 48;
    one_tensor(&b, "rows", 2, (uint64_t[]){cols, 4}, t, 0, 4 * bytes);
    char what[64];
    snprintf(what, sizeof(what), "rows of %llu elements", (unsigned long long)cols);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"rows\"", name, what,
          block == 256 ? "block of 256" : "block of 32");
  }
  /* a K-quant tensor whose data ends inside its last super-block */
  one_tensor(&b, "blk.0.ffn_down.weight", 2, (uint64_t[]){512, 4}, GGML_TYPE_Q4_K, 0,
             8 * 144 - 100);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"blk.0.ffn_down.weight\"", "1152 bytes",
        "past the end");
  free(b.p);
}

/* A real file with K-quants (Gemma 3 270M, Q4_K_M: Q5_0, Q4_K, Q6_K, Q8_0 and F32 tensors): every
 * tensor sized from its block, so the last one ends where the file does. */
Test(llm_gguf, real_k_quant_file) {
  char buf[4096];
  const char *path = llm_gemma_path(buf, sizeof(buf));
  gguf_file_t *g;
  OK(gguf_open(path, &g));
  uint64_t end = 0;
  size_t counts[64] = {0};
  for (size_t i = 0; i < gguf_tensor_count(g); i++) {
    const gguf_tensor_t *t = gguf_tensor_at(g, i);
    cr_assert_lt((uint32_t)t->type, 64u);
    counts[t->type]++;
    if (t->offset + t->bytes > end) end = t->offset + t->bytes;
  }
  /* what is before the data section: the header, metadata (the tokenizer's 262144 tokens) and
   * infos, padded to the alignment; a block size wrong by one byte would move the end by thousands
   */
  uint64_t head = gguf_file_size(g) - end;
  cr_assert_eq(head % gguf_alignment(g), 0u, "the data ends %llu bytes before the file does",
               (unsigned long long)head);
  cr_assert_lt(head, 8u << 20);
  cr_assert_eq(gguf_file_size(g), 253113024u);
  cr_assert_eq(gguf_tensor_count(g), 236u);
  cr_assert_eq(counts[GGML_TYPE_Q5_0], 81u);
  cr_assert_eq(counts[GGML_TYPE_Q4_K], 27u);
  cr_assert_eq(counts[GGML_TYPE_Q6_K], 9u);
  cr_assert_eq(counts[GGML_TYPE_Q8_0], 10u);
  cr_assert_eq(counts[GGML_TYPE_F32], 109u);
  gguf_close(g);
}

/* A file with one norm (F32) and one matrix of type, general.architecture arch (NULL: none). */
static gguf_file_t *support_file(const char *arch, ggml_type_t type, uint8_t **bytes) {
  gguf_writer_t *w;
  OK(gguf_writer_create(&w));
  if (arch) OK(gguf_writer_add_str(w, "general.architecture", arch));
  uint32_t block = ggml_block_elems(type), size = ggml_block_bytes(type);
  uint8_t *data = calloc(4 * size + 1024, 1);
  cr_assert_not_null(data);
  OK(gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", GGML_TYPE_F32, (uint64_t[]){64}, 1, data));
  OK(gguf_writer_add_tensor(w, "blk.0.attn_k.weight", type, (uint64_t[]){2 * block, 2}, 2, data));
  free(data);
  return writer_opened(w, "support.gguf", bytes);
}

Test(llm_gguf, support_check) {
  uint8_t *bytes;
  gguf_file_t *g = support_file("gemma3", GGML_TYPE_Q5_0, &bytes);
  OK(llm_model_check(g, HCQ_DEVICE_CPU));
  OK(llm_model_check(g, HCQ_DEVICE_VULKAN));
  OK(llm_model_check(g, HCQ_DEVICE_CUDA));
  OK(llm_model_check(g, HCQ_DEVICE_METAL));
  gguf_close(g), free(bytes);
  g = support_file("llama", GGML_TYPE_Q6_K, &bytes);
  OK(llm_model_check(g, HCQ_DEVICE_CPU));
  OK(llm_model_check(g, HCQ_DEVICE_CUDA));
  gguf_close(g), free(bytes);
  g = support_file("llama", GGML_TYPE_IQ2_XS, &bytes);
  FAILS(llm_model_check(g, HCQ_DEVICE_METAL), HCQ_UNIMPLEMENTED,
        "tensor blk.0.attn_k.weight is IQ2_XS", "METAL");
  gguf_close(g), free(bytes);
  g = support_file("llama", GGML_TYPE_IQ2_XS, &bytes);
  FAILS(llm_model_check(g, HCQ_DEVICE_CPU), HCQ_UNIMPLEMENTED,
        "tensor blk.0.attn_k.weight is IQ2_XS", "CPU", "IQ4_XS");
  gguf_close(g), free(bytes);
  g = support_file("phi3", GGML_TYPE_Q8_0, &bytes);
  FAILS(llm_model_check(g, HCQ_DEVICE_CPU), HCQ_UNIMPLEMENTED, "architecture \"phi3\"",
        "llama, qwen2, qwen3 and gemma3");
  FAILS(llm_model_check(g, HCQ_DEVICE_METAL), HCQ_UNIMPLEMENTED, "architecture \"phi3\"",
        "runs llama, qwen2, qwen3 and gemma3 on METAL");
  gguf_close(g), free(bytes);
  g = support_file(NULL, GGML_TYPE_Q8_0, &bytes);
  FAILS(llm_model_check(g, HCQ_DEVICE_CPU), HCQ_INVALID_ARGUMENT,
        "general.architecture is missing");
  gguf_close(g), free(bytes);
  /* the predicates */
  const uint32_t cpu[] = {0, 1, 30, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23};
  for (int i = 0; i < 15; i++) cr_assert(llm_type_supported(cpu[i], HCQ_DEVICE_CPU), "%u", cpu[i]);
  for (uint32_t t = 0; t < 64; t++) {
    /* every type the CPU reads has a GPU layout */
    cr_assert_eq(llm_type_supported(t, HCQ_DEVICE_VULKAN), llm_type_supported(t, HCQ_DEVICE_CPU),
                 "%u", t);
  }
  cr_assert_not(llm_type_supported(GGML_TYPE_Q8_K, HCQ_DEVICE_CPU));
  cr_assert_not(llm_type_supported(GGML_TYPE_MXFP4, HCQ_DEVICE_CPU));
  /* every kind runs every architecture */
  const hcq_device_kind_t kinds[] = {HCQ_DEVICE_CPU, HCQ_DEVICE_VULKAN, HCQ_DEVICE_CUDA,
                                     HCQ_DEVICE_METAL};
  for (int k = 0; k < 4; k++) {
    cr_assert(llm_architecture_supported("qwen3", kinds[k]));
    cr_assert(llm_architecture_supported("gemma3", kinds[k]));
    cr_assert_not(llm_architecture_supported("phi3", kinds[k]));
  }
  cr_assert_not(llm_architecture_supported(NULL, HCQ_DEVICE_CPU));
}

/* Two tensors of 64 bytes (F32 [16]) at the given offsets, data_bytes of data. */
static void two_tensors(buf_t *b, const char *n0, uint64_t o0, const char *n1, uint64_t o1,
                        size_t data_bytes) {
  b->n = 0;
  put_header(b, 3, 2, 0);
  put_tensor_info(b, n0, 1, (uint64_t[]){16}, GGML_TYPE_F32, o0);
  put_tensor_info(b, n1, 1, (uint64_t[]){16}, GGML_TYPE_F32, o1);
  put_data(b, 32, data_bytes);
}

Test(llm_gguf, hostile_tensor_placement) {
  buf_t b = {0};
  two_tensors(&b, "a", 0, "b", 64, 128);
  OK(try_open(&b));
  two_tensors(&b, "a", 64, "b", 0, 128); /* in any order */
  OK(try_open(&b));
  /* offsets not a multiple of the alignment */
  two_tensors(&b, "a", 0, "b", 80, 160);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"b\"", "80", "alignment 32");
  two_tensors(&b, "a", 1, "b", 64, 160);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"a\"", "alignment");
  /* data past the end */
  two_tensors(&b, "a", 0, "b", 64, 127);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"b\"", "past the end");
  const uint64_t far[] = {128, 1ull << 40, 1ull << 63, UINT64_MAX - 31, UINT64_MAX & ~(uint64_t)31};
  for (int i = 0; i < 5; i++) {
    two_tensors(&b, "a", 0, "b", far[i], 128);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"b\"");
  }
  /* overlapping, in either order, and sharing an offset */
  two_tensors(&b, "a", 0, "b", 32, 128);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"a\"", "\"b\"", "overlap");
  two_tensors(&b, "a", 32, "b", 0, 128);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"a\"", "\"b\"", "overlap");
  two_tensors(&b, "a", 64, "b", 64, 128);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "overlap");
  /* duplicate names */
  two_tensors(&b, "same", 0, "same", 64, 128);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"same\"", "twice");
  /* one tensor inside another, three tensors */
  b.n = 0;
  put_header(&b, 3, 3, 0);
  put_tensor_info(&b, "big", 1, (uint64_t[]){64}, GGML_TYPE_F32, 0);
  put_tensor_info(&b, "in", 1, (uint64_t[]){8}, GGML_TYPE_F32, 64);
  put_tensor_info(&b, "after", 1, (uint64_t[]){8}, GGML_TYPE_F32, 256);
  put_data(&b, 32, 288);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"big\"", "\"in\"", "overlap");
  free(b.p);
}

Test(llm_gguf, hostile_alignment) {
  buf_t b = {0};
  const uint32_t bad[] = {0, 3, 48, 0x80000001u, UINT32_MAX};
  for (int i = 0; i < 5; i++) {
    b.n = 0;
    put_header(&b, 3, 1, 1);
    put_kv_u32(&b, "general.alignment", bad[i]);
    put_tensor_info(&b, "w", 1, (uint64_t[]){8}, GGML_TYPE_F32, 0);
    put_data(&b, 64, 32);
    char num[32];
    snprintf(num, sizeof(num), "%u", bad[i]);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "general.alignment", num, "power of two");
  }
  b.n = 0;
  put_header(&b, 3, 0, 1);
  put_str(&b, "general.alignment");
  put_u32(&b, GGUF_STRING);
  put_str(&b, "64");
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "general.alignment", "string", "uint32");
  b.n = 0;
  put_header(&b, 3, 0, 1);
  put_str(&b, "general.alignment");
  put_u32(&b, GGUF_UINT64);
  put_u64(&b, 64);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "general.alignment", "uint64", "uint32");
  /* valid ones: the padding and offsets follow it */
  const uint32_t good[] = {1, 2, 16, 64, 4096};
  for (int i = 0; i < 5; i++) {
    b.n = 0;
    put_header(&b, 3, 2, 1);
    put_kv_u32(&b, "general.alignment", good[i]);
    put_tensor_info(&b, "a", 1, (uint64_t[]){3}, GGML_TYPE_F32, 0);
    put_tensor_info(&b, "b", 1, (uint64_t[]){3}, GGML_TYPE_F32, align_up(12, good[i]));
    put_data(&b, good[i], align_up(12, good[i]) + 12);
    uint8_t *copy = malloc(b.n);
    memcpy(copy, b.p, b.n);
    gguf_file_t *g;
    OK(gguf_open_memory(copy, b.n, "aligned.gguf", &g));
    cr_assert_eq(gguf_alignment(g), good[i]);
    /* header 24, general.alignment 33, two tensor infos of 33 */
    cr_assert_eq((const uint8_t *)gguf_tensor_at(g, 0)->data - copy,
                 (ptrdiff_t)align_up(123, good[i]));
    gguf_close(g);
    free(copy);
    /* the same with the data one byte short, and a misaligned second offset (at 24 + 33 + 33 + 25)
     */
    FAILS(try_open_named(b.p, b.n - 1, "short.gguf"), HCQ_INVALID_ARGUMENT, "short.gguf", "\"b\"");
    if (good[i] > 1) {
      uint64_t off = align_up(12, good[i]) + 1;
      memcpy(b.p + 115, &off, 8);
      FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "\"b\"", "alignment");
    }
  }
  free(b.p);
}

Test(llm_gguf, hostile_magic_and_version) {
  buf_t b = {0};
  put_header(&b, 3, 0, 0);
  OK(try_open(&b));
  memcpy(b.p, "GGML", 4);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "not a GGUF file");
  memcpy(b.p, "FUGG", 4);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "not a GGUF file");
  memcpy(b.p, "\0\0\0\0", 4);
  FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "not a GGUF file");
  memcpy(b.p, "GGUF", 4);
  const uint32_t versions[] = {0, 1, 4, 0xffffffffu};
  for (int i = 0; i < 4; i++) {
    memcpy(b.p + 4, &versions[i], 4);
    char num[48];
    snprintf(num, sizeof(num), "version %u", versions[i]);
    char msg[2048];
    failure(try_open(&b), HCQ_INVALID_ARGUMENT, msg, sizeof(msg), num);
    cr_assert(strstr(msg, "bad.gguf") && strstr(msg, num), "%s", msg);
    cr_assert_null(strstr(msg, "big-endian"), "%s", msg);
  }
  const uint32_t swapped[] = {0x02000000u, 0x03000000u};
  for (int i = 0; i < 2; i++) {
    memcpy(b.p + 4, &swapped[i], 4);
    FAILS(try_open(&b), HCQ_INVALID_ARGUMENT, "bad.gguf", "big-endian");
  }
  /* empty and short files */
  for (size_t n = 0; n < 24; n++)
    FAILS(try_open_named("GGUF\3\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", n, "short.gguf"),
          HCQ_INVALID_ARGUMENT, "short.gguf");
  FAILS(gguf_open_memory(NULL, 0, "null.gguf", &(gguf_file_t *){NULL}), HCQ_INVALID_ARGUMENT,
        "null.gguf");
  FAILS(gguf_open_memory(NULL, 10, "null.gguf", &(gguf_file_t *){NULL}), HCQ_INVALID_ARGUMENT,
        "bytes is NULL");
  FAILS(gguf_open_memory(b.p, b.n, "x", NULL), HCQ_INVALID_ARGUMENT, "out is NULL");
  /* no name: "(memory)" */
  memcpy(b.p, "GGML", 4);
  gguf_file_t *g;
  FAILS(gguf_open_memory(b.p, b.n, NULL, &g), HCQ_INVALID_ARGUMENT, "(memory)");
  free(b.p);
}

/* ---- 4. files on disk ---- */

static void write_file(const char *path, const void *bytes, size_t size) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "cannot write %s", path);
  cr_assert_eq(fwrite(bytes, 1, size, f), size);
  fclose(f);
}

Test(llm_gguf, files_on_disk) {
  char dir[512], path[600];
  temp_dir(dir, sizeof(dir));
  gguf_file_t *g = (gguf_file_t *)dir;
  /* a valid file opens; a missing one is NOT_FOUND */
  size_t size;
  uint8_t *bytes = small_file(&size);
  snprintf(path, sizeof(path), "%s/small.gguf", dir);
  write_file(path, bytes, size);
  OK(gguf_open(path, &g));
  cr_assert_eq(gguf_tensor_count(g), 3u);
  cr_assert_eq(gguf_file_size(g), size);
  cr_assert(!memcmp(gguf_tensor_at(g, 2)->data, bytes + size - gguf_tensor_at(g, 2)->bytes,
                    gguf_tensor_at(g, 2)->bytes));
  gguf_close(g);
  /* through a symbolic link */
  char link[600];
  snprintf(link, sizeof(link), "%s/link.gguf", dir);
  cr_assert_eq(symlink(path, link), 0);
  OK(gguf_open(link, &g));
  gguf_close(g);
  unlink(link);
  snprintf(path, sizeof(path), "%s/missing.gguf", dir);
  FAILS(gguf_open(path, &g), HCQ_NOT_FOUND, path);
  cr_assert_null(g);
  snprintf(path, sizeof(path), "%s/small.gguf/below.gguf", dir);
  FAILS(gguf_open(path, &g), HCQ_NOT_FOUND, path);
  /* a truncated file on disk, an empty one */
  snprintf(path, sizeof(path), "%s/cut.gguf", dir);
  write_file(path, bytes, size - 1);
  FAILS(gguf_open(path, &g), HCQ_INVALID_ARGUMENT, path, "\"blk.0.attn_q.weight\"");
  write_file(path, bytes, 0);
  FAILS(gguf_open(path, &g), HCQ_INVALID_ARGUMENT, path, "empty");
  unlink(path);
  /* a folder, a character device, a link to one */
  FAILS(gguf_open(dir, &g), HCQ_INVALID_ARGUMENT, dir, "folder");
  FAILS(gguf_open("/dev/null", &g), HCQ_INVALID_ARGUMENT, "/dev/null", "character device");
  cr_assert_eq(symlink("/dev/null", link), 0);
  FAILS(gguf_open(link, &g), HCQ_INVALID_ARGUMENT, link, "character device");
  unlink(link);
  FAILS(gguf_open(NULL, &g), HCQ_INVALID_ARGUMENT, "path is NULL");
  FAILS(gguf_open("x", NULL), HCQ_INVALID_ARGUMENT, "out is NULL");
  snprintf(path, sizeof(path), "%s/small.gguf", dir);
  unlink(path);
  rmdir(dir);
  free(bytes);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A FIFO with no writer: an open() for reading would wait for one forever. */
Test(llm_gguf, fifo_refused_without_blocking, .timeout = 10) {
  char dir[512], path[600];
  temp_dir(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/pipe.gguf", dir);
  cr_assert_eq(mkfifo(path, 0600), 0, "mkfifo: %s", strerror(errno));
  alarm(5); /* the test's own guard as well as Criterion's timeout */
  double t0 = now_s();
  gguf_file_t *g;
  FAILS(gguf_open(path, &g), HCQ_INVALID_ARGUMENT, path, "FIFO");
  llm_model_t *m = (llm_model_t *)dir;
  FAILS(llm_model_open(path, &m), HCQ_INVALID_ARGUMENT, path, "FIFO");
  cr_assert_null(m);
  double s = now_s() - t0;
  alarm(0);
  cr_assert_lt(s, 1.0, "refusing the FIFO took %.2f s", s);
  unlink(path);
  rmdir(dir);
}

static bool can_read(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

/* A file of mode 000. Root reads it anyway: there the test runs as user nobody (seteuid, undone at
 * the end; Criterion runs each test in a process of its own), and skips when it cannot. */
Test(llm_gguf, unreadable_file) {
  char dir[512], path[600];
  temp_dir(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/secret.gguf", dir);
  size_t size;
  uint8_t *bytes = small_file(&size);
  write_file(path, bytes, size);
  free(bytes);
  cr_assert_eq(chmod(path, 0), 0);
  uid_t euid = geteuid();
  bool switched = can_read(path) && euid == 0 && seteuid(65534) == 0;
  bool readable = can_read(path);
  gguf_file_t *g = NULL;
  hcq_status_t st = readable ? NULL : gguf_open(path, &g);
  if (switched) cr_assert_eq(seteuid(euid), 0, "seteuid back: %s", strerror(errno));
  unlink(path);
  rmdir(dir);
  if (readable)
    cr_skip_test(
        "this process reads a file of mode 000 (root or CAP_DAC_OVERRIDE) and could not switch to "
        "user nobody: "
        "nothing to test");
  test_expect_failure(st, HCQ_INVALID_ARGUMENT, "gguf_open(mode 000)",
                      (const char *[]){path, "Permission denied", NULL});
  cr_assert_null(g);
}

/* ---- 5. the llama model checks ---- */

/* A tiny llama and what to get wrong in it. */
typedef struct tiny_llama {
  const char *arch; /* general.architecture ("llama") */
  /* kv_heads 0: llama.attention.head_count_kv absent */
  uint32_t dim, ffn, layers, heads, kv_heads, vocab;
  ggml_type_t wtype;     /* the matrices and token_embd */
  ggml_type_t norm_type; /* the norms */
  bool untied;           /* write output.weight */
  uint32_t rope_dims;    /* llama.rope.dimension_count (0: absent) */
  uint32_t vocab_key;    /* llama.vocab_size (0: absent) */
  const char *skip_key;  /* a metadata key left out */
  const char *omit;      /* a tensor left out */
  const char *reshape;   /* a tensor of another shape: */
  uint32_t reshape_dims;
  uint64_t reshape_ne[GGUF_MAX_DIMS];
  const char *retype; /* a tensor of another type: */
  ggml_type_t retype_to;
  const char *extra; /* an extra tensor, F32 [dim] */
} tiny_llama_t;

static tiny_llama_t tiny(void) {
  return (tiny_llama_t){.dim = 64,
                        .ffn = 96,
                        .layers = 2,
                        .heads = 4,
                        .kv_heads = 2,
                        .vocab = 40,
                        .wtype = GGML_TYPE_F32,
                        .norm_type = GGML_TYPE_F32};
}

/* Random values around base (norms around 1), in type's layout: rows of ne0 elements. */
static uint8_t *random_weights(ggml_type_t type, uint64_t ne0, uint64_t rows, float base,
                               uint64_t *seed) {
  size_t row_bytes = (size_t)(ne0 / ggml_block_elems(type) * ggml_block_bytes(type));
  uint8_t *out = malloc(row_bytes * rows + 1);
  float *x = malloc(ne0 * sizeof(float));
  cr_assert(out && x);
  for (uint64_t r = 0; r < rows; r++) {
    for (uint64_t i = 0; i < ne0; i++) x[i] = base + rng_float(seed);
    llm_quantize_row(type, x, out + r * row_bytes, ne0);
  }
  free(x);
  return out;
}

static void tiny_tensor(gguf_writer_t *w, const tiny_llama_t *s, const char *name, uint64_t ne0,
                        uint64_t ne1, uint64_t *seed) {
  if (s->omit && !strcmp(s->omit, name)) return;
  bool norm = ne1 == 0;
  ggml_type_t type = norm ? s->norm_type : s->wtype;
  uint64_t ne[GGUF_MAX_DIMS] = {ne0, ne1, 1, 1};
  uint32_t n_dims = norm ? 1 : 2;
  if (s->retype && !strcmp(s->retype, name)) type = s->retype_to;
  if (s->reshape && !strcmp(s->reshape, name)) {
    n_dims = s->reshape_dims;
    memcpy(ne, s->reshape_ne, sizeof(ne));
  }
  uint64_t rows = 1;
  for (uint32_t d = 1; d < n_dims; d++) rows *= ne[d];
  uint8_t *data = random_weights(type, ne[0], rows, norm ? 1.0f : 0.0f, seed);
  OK(gguf_writer_add_tensor(w, name, type, ne, n_dims, data));
  free(data);
}

/* The writer of a tiny llama as s says (add keys to it before writing). */
static gguf_writer_t *tiny_llama(const tiny_llama_t *s) {
  gguf_writer_t *w;
  OK(gguf_writer_create(&w));
  const struct {
    const char *key;
    uint32_t value;
  } dims[] = {{"llama.block_count", s->layers},
              {"llama.embedding_length", s->dim},
              {"llama.feed_forward_length", s->ffn},
              {"llama.attention.head_count", s->heads},
              {"llama.attention.head_count_kv", s->kv_heads},
              {"llama.context_length", 256},
              {"llama.rope.dimension_count", s->rope_dims},
              {"llama.vocab_size", s->vocab_key}};
  bool skip = s->skip_key && !strcmp(s->skip_key, "general.architecture");
  if (!skip) OK(gguf_writer_add_str(w, "general.architecture", s->arch ? s->arch : "llama"));
  if (!(s->skip_key && !strcmp(s->skip_key, "general.name")))
    OK(gguf_writer_add_str(w, "general.name", "tiny llama"));
  for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
    bool optional = i == 4 || i >= 6;
    if ((optional && dims[i].value == 0) || (s->skip_key && !strcmp(s->skip_key, dims[i].key)))
      continue;
    OK(gguf_writer_add_u32(w, dims[i].key, dims[i].value));
  }
  OK(gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-6f));
  OK(gguf_writer_add_f32(w, "llama.rope.freq_base", 500000.0f));
  uint64_t seed = 1;
  uint64_t dim = s->dim, ffn = s->ffn, head_dim = s->heads ? s->dim / s->heads : 1;
  uint64_t kv = head_dim * (s->kv_heads ? s->kv_heads : s->heads);
  tiny_tensor(w, s, "token_embd.weight", dim, s->vocab, &seed);
  tiny_tensor(w, s, "output_norm.weight", dim, 0, &seed);
  if (s->untied) tiny_tensor(w, s, "output.weight", dim, s->vocab, &seed);
  for (uint32_t l = 0; l < s->layers; l++) {
    const struct {
      const char *name;
      uint64_t ne0, ne1;
    } t[] = {{"attn_norm", dim, 0},  {"attn_q", dim, dim},      {"attn_k", dim, kv},
             {"attn_v", dim, kv},    {"attn_output", dim, dim}, {"ffn_norm", dim, 0},
             {"ffn_gate", dim, ffn}, {"ffn_up", dim, ffn},      {"ffn_down", ffn, dim}};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
      char name[64];
      snprintf(name, sizeof(name), "blk.%u.%s.weight", l, t[i].name);
      tiny_tensor(w, s, name, t[i].ne0, t[i].ne1, &seed);
    }
  }
  if (s->extra) {
    tiny_llama_t plain = tiny();
    tiny_tensor(w, &plain, s->extra, dim, 0, &seed);
  }
  return w;
}

/* Writes w (freed) to a temporary tiny.gguf and opens it with llm_model_open. */
static hcq_status_t open_tiny(gguf_writer_t *w, llm_model_t **m) {
  char dir[512], path[600];
  temp_dir(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/tiny.gguf", dir);
  hcq_status_t st = gguf_writer_write(w, path);
  gguf_writer_free(w);
  OK(st);
  *m = (llm_model_t *)dir; /* a failed open must set it to NULL */
  st = llm_model_open(path, m);
  if (st) cr_assert_null(*m, "a failed llm_model_open left *out set");
  unlink(path);
  rmdir(dir);
  return st;
}

static llm_model_t *open_ok(const tiny_llama_t *s) {
  llm_model_t *m;
  OK(open_tiny(tiny_llama(s), &m));
  return m;
}

static void check_layers(const llm_model_t *m) {
  const gguf_file_t *g = m->file;
  for (int l = 0; l < m->config.n_layers; l++) {
    const llm_layer_t *L = &m->layers[l];
    const gguf_tensor_t *got[] = {L->attn_norm, L->wq,     L->wk,   L->wv,    L->wo,
                                  L->ffn_norm,  L->w_gate, L->w_up, L->w_down};
    const char *names[] = {"attn_norm", "attn_q",   "attn_k", "attn_v",  "attn_output",
                           "ffn_norm",  "ffn_gate", "ffn_up", "ffn_down"};
    for (int i = 0; i < 9; i++) {
      char name[64];
      snprintf(name, sizeof(name), "blk.%d.%s.weight", l, names[i]);
      cr_assert_not_null(got[i], "%s not set", name);
      cr_assert_eq(got[i], gguf_find_tensor(g, name), "layer %d's %s is %s", l, names[i],
                   got[i]->name);
    }
  }
}

Test(llm_model, tiny_llama_opens) {
  tiny_llama_t s = tiny();
  llm_model_t *m = open_ok(&s);
  const llm_config_t *c = &m->config;
  cr_assert_eq(c->dim, 64);
  cr_assert_eq(c->ffn, 96);
  cr_assert_eq(c->n_layers, 2);
  cr_assert_eq(c->n_heads, 4);
  cr_assert_eq(c->n_kv_heads, 2);
  cr_assert_eq(c->head_dim, 16);
  cr_assert_eq(llm_kv_dim(c), 32);
  cr_assert_eq(c->rope_dim, 16, "the rope dimensions default to the head size");
  cr_assert_eq(c->vocab, 40);
  cr_assert_eq(c->ctx_train, 256);
  cr_assert_eq(c->rope_base, 500000.0f);
  cr_assert_eq(c->norm_eps, 1e-6f);
  cr_assert(c->tied_classifier);
  cr_assert_eq(m->output, m->token_embd, "tied: the classifier is token_embd");
  cr_assert_eq(m->token_embd, gguf_find_tensor(m->file, "token_embd.weight"));
  cr_assert_eq(m->output_norm, gguf_find_tensor(m->file, "output_norm.weight"));
  cr_assert_str_eq(m->name, "tiny llama");
  check_layers(m);
  char types[64];
  llm_model_weight_types(m, types, sizeof(types));
  cr_assert_str_eq(types, "F32");
  llm_model_close(m);
  llm_model_close(NULL);
}

Test(llm_model, tiny_llama_options) {
  /* no head_count_kv: as many KV heads as heads; rope dimensions given; output.weight; no
   * general.name: the file's name; defaults for the context, rope base and epsilon */
  tiny_llama_t s = tiny();
  s.kv_heads = 0;
  s.rope_dims = 8;
  s.untied = true;
  s.skip_key = "general.name";
  s.vocab_key = 40;
  llm_model_t *m = open_ok(&s);
  cr_assert_eq(m->config.n_kv_heads, 4);
  cr_assert_eq(llm_kv_dim(&m->config), 64);
  cr_assert_eq(m->config.rope_dim, 8);
  cr_assert_not(m->config.tied_classifier);
  cr_assert_eq(m->output, gguf_find_tensor(m->file, "output.weight"));
  cr_assert_neq(m->output, m->token_embd);
  cr_assert_str_eq(m->name, "tiny.gguf");
  check_layers(m);
  llm_model_close(m);

  s = tiny();
  s.skip_key = "llama.context_length";
  gguf_writer_t *w = tiny_llama(&s);
  OK(gguf_writer_add_u32(w, "llama.attention.key_length", 16));
  OK(gguf_writer_add_u32(w, "llama.attention.value_length", 16));
  OK(open_tiny(w, &m));
  cr_assert_eq(m->config.ctx_train, 4096, "the context defaults to 4096");
  llm_model_close(m);

  /* one head of 64, one layer */
  s = tiny();
  s.heads = 1, s.kv_heads = 1, s.layers = 1;
  m = open_ok(&s);
  cr_assert_eq(m->config.head_dim, 64);
  cr_assert_eq(m->config.n_layers, 1);
  llm_model_close(m);
}

Test(llm_model, tiny_llama_weight_types) {
  const ggml_type_t types[] = {GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0};
  for (int i = 0; i < 4; i++) {
    tiny_llama_t s = tiny();
    s.wtype = types[i];
    s.norm_type = i == 0 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    s.untied = i == 2;
    llm_model_t *m = open_ok(&s);
    cr_assert_eq(m->token_embd->type, types[i]);
    cr_assert_eq(m->layers[1].w_down->type, types[i]);
    cr_assert_eq(m->layers[0].attn_norm->type, s.norm_type);
    char got[64];
    llm_model_weight_types(m, got, sizeof(got));
    cr_assert_str_eq(got, ggml_type_name(types[i]));
    check_layers(m);
    llm_model_close(m);
  }
  tiny_llama_t s = tiny();
  s.wtype = GGML_TYPE_Q4_1;
  s.retype = "blk.1.ffn_down.weight";
  s.retype_to = GGML_TYPE_Q8_0;
  llm_model_t *m = open_ok(&s);
  char got[64];
  llm_model_weight_types(m, got, sizeof(got));
  cr_assert_str_eq(got, "mixed (Q4_1, Q8_0)");
  llm_model_close(m);
}

/* Opening s (with w's extra keys) fails with code and a message naming each fragment and the file.
 */
#define MODEL_FAILS(w, code, ...)                                   \
  do {                                                              \
    llm_model_t *mf_m;                                              \
    FAILS(open_tiny((w), &mf_m), (code), "tiny.gguf", __VA_ARGS__); \
  } while (0)

Test(llm_model, wrong_architecture) {
  tiny_llama_t s = tiny();
  s.arch = "gpt2";
  MODEL_FAILS(tiny_llama(&s), HCQ_UNIMPLEMENTED, "general.architecture", "\"gpt2\"");
  s.arch = "llama2";
  MODEL_FAILS(tiny_llama(&s), HCQ_UNIMPLEMENTED, "\"llama2\"");
  s.arch = "";
  MODEL_FAILS(tiny_llama(&s), HCQ_UNIMPLEMENTED, "general.architecture");
  s = tiny();
  s.skip_key = "general.architecture";
  MODEL_FAILS(tiny_llama(&s), HCQ_NOT_FOUND, "general.architecture");
}

Test(llm_model, missing_tensor) {
  const char *names[] = {"token_embd.weight", "output_norm.weight", "blk.0.attn_q.weight",
                         "blk.1.ffn_up.weight", "blk.1.ffn_norm.weight"};
  for (int i = 0; i < 5; i++) {
    tiny_llama_t s = tiny();
    s.omit = names[i];
    char quoted[80];
    snprintf(quoted, sizeof(quoted), "\"%s\"", names[i]);
    MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, quoted);
  }
}

Test(llm_model, wrong_shape) {
  tiny_llama_t s = tiny();
  s.reshape = "blk.0.attn_k.weight";
  s.reshape_dims = 2;
  memcpy(s.reshape_ne, (uint64_t[]){64, 64, 1, 1}, sizeof(s.reshape_ne));
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "\"blk.0.attn_k.weight\"", "[64, 64]",
              "[64, 32]");
  /* transposed */
  s.reshape = "blk.1.ffn_down.weight";
  memcpy(s.reshape_ne, (uint64_t[]){64, 96, 1, 1}, sizeof(s.reshape_ne));
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "\"blk.1.ffn_down.weight\"", "[64, 96]",
              "[96, 64]");
  /* three dimensions where two are expected, two for a norm */
  s.reshape = "blk.0.attn_q.weight";
  s.reshape_dims = 3;
  memcpy(s.reshape_ne, (uint64_t[]){64, 64, 1, 1}, sizeof(s.reshape_ne));
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "\"blk.0.attn_q.weight\"", "[64, 64, 1]",
              "[64, 64]");
  s.reshape = "output_norm.weight";
  s.reshape_dims = 2;
  memcpy(s.reshape_ne, (uint64_t[]){64, 1, 1, 1}, sizeof(s.reshape_ne));
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "\"output_norm.weight\"", "[64, 1]", "[64]");
  /* token_embd of the wrong width; an output.weight of another vocabulary */
  s.reshape = "token_embd.weight";
  memcpy(s.reshape_ne, (uint64_t[]){32, 40, 1, 1}, sizeof(s.reshape_ne));
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "\"token_embd.weight\"", "[32, 40]",
              "[64, 40]");
  s.reshape_dims = 1;
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "\"token_embd.weight\"");
  s = tiny();
  s.untied = true;
  s.reshape = "output.weight";
  s.reshape_dims = 2;
  memcpy(s.reshape_ne, (uint64_t[]){64, 41, 1, 1}, sizeof(s.reshape_ne));
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "\"output.weight\"", "[64, 41]", "[64, 40]");
}

Test(llm_model, quantized_norm) {
  const char *norms[] = {"blk.0.attn_norm.weight", "blk.1.ffn_norm.weight", "output_norm.weight"};
  const ggml_type_t types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1};
  for (int i = 0; i < 3; i++) {
    tiny_llama_t s = tiny();
    s.retype = norms[i];
    s.retype_to = types[i];
    char quoted[80];
    snprintf(quoted, sizeof(quoted), "\"%s\"", norms[i]);
    MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, quoted, ggml_type_name(types[i]));
  }
}

Test(llm_model, extra_tensor) {
  tiny_llama_t s = tiny();
  s.extra = "blk.0.attn_q.bias";
  MODEL_FAILS(tiny_llama(&s), HCQ_UNIMPLEMENTED, "\"blk.0.attn_q.bias\"");
  /* a layer past block_count: the metadata disagrees with the tensors (bad input, not unsupported)
   */
  s.extra = "blk.2.attn_norm.weight";
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "\"blk.2.attn_norm.weight\"",
              "llama.block_count is 2");
  /* rope_freqs of the wrong length (a llama 3 file has rope dimensions / 2 of them) */
  s.extra = "rope_freqs.weight";
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "\"rope_freqs.weight\"");
}

Test(llm_model, bad_heads) {
  tiny_llama_t s = tiny();
  s.heads = 3, s.kv_heads = 3;
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "llama.embedding_length",
              "llama.attention.head_count", "64", "3");
  s = tiny();
  s.kv_heads = 3;
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "llama.attention.head_count_kv", "3");
  s.kv_heads = 8;
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "llama.attention.head_count_kv", "8");
  /* an odd head size: 72 / 8 = 9 */
  s = tiny();
  s.dim = 72, s.heads = 8, s.kv_heads = 8;
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "head size 9", "llama.embedding_length",
              "llama.attention.head_count");
  /* head counts of 0 or absent */
  s = tiny();
  s.heads = 0;
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "llama.attention.head_count", "0");
  s = tiny();
  s.skip_key = "llama.attention.head_count";
  MODEL_FAILS(tiny_llama(&s), HCQ_NOT_FOUND, "\"llama.attention.head_count\"");
  /* key_length sets the head size: q's rows are then heads x 32, which the tensors do not have */
  s = tiny();
  gguf_writer_t *w = tiny_llama(&s);
  OK(gguf_writer_add_u32(w, "llama.attention.key_length", 32));
  MODEL_FAILS(w, HCQ_INVALID_ARGUMENT, "\"blk.0.attn_q.weight\"", "[64, 128]");
  /* a value length other than the key length */
  w = tiny_llama(&s);
  OK(gguf_writer_add_u32(w, "llama.attention.value_length", 32));
  MODEL_FAILS(w, HCQ_UNIMPLEMENTED, "llama.attention.value_length", "32", "16");
  /* rope dimensions: odd, larger than the head */
  s.rope_dims = 7;
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "llama.rope.dimension_count", "7");
  s.rope_dims = 32;
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "llama.rope.dimension_count", "32");
}

Test(llm_model, rope_scaling) {
  tiny_llama_t s = tiny();
  gguf_writer_t *w = tiny_llama(&s);
  OK(gguf_writer_add_str(w, "llama.rope.scaling.type", "linear"));
  OK(gguf_writer_add_f32(w, "llama.rope.scaling.factor", 4.0f));
  MODEL_FAILS(w, HCQ_UNIMPLEMENTED, "llama.rope.scaling.type", "\"linear\"");
  w = tiny_llama(&s);
  OK(gguf_writer_add_str(w, "llama.rope.scaling.type", "yarn"));
  MODEL_FAILS(w, HCQ_UNIMPLEMENTED, "llama.rope.scaling.type", "\"yarn\"");
  w = tiny_llama(&s);
  OK(gguf_writer_add_f32(w, "llama.rope.scaling.factor", 2.0f));
  MODEL_FAILS(w, HCQ_UNIMPLEMENTED, "llama.rope.scaling.factor", "2");
  w = tiny_llama(&s);
  OK(gguf_writer_add_u32(w, "llama.rope.scaling.type", 1));
  MODEL_FAILS(w, HCQ_INVALID_ARGUMENT, "\"llama.rope.scaling.type\"", "uint32");
  /* "none" and a factor of 1 are no scaling */
  w = tiny_llama(&s);
  OK(gguf_writer_add_str(w, "llama.rope.scaling.type", "none"));
  OK(gguf_writer_add_f32(w, "llama.rope.scaling.factor", 1.0f));
  llm_model_t *m;
  OK(open_tiny(w, &m));
  llm_model_close(m);
}

Test(llm_model, vocab_size_disagrees) {
  tiny_llama_t s = tiny();
  s.vocab_key = 41;
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "llama.vocab_size", "41", "token_embd.weight",
              "40");
  s.vocab_key = 40;
  llm_model_t *m = open_ok(&s);
  cr_assert_eq(m->config.vocab, 40);
  llm_model_close(m);
}

/* More tokenizer tokens than embedding rows: ids the embedding lacks (bad input); fewer is padding.
 */
Test(llm_model, tokenizer_tokens_beyond_the_embedding) {
  const char *tokens[41];
  for (int i = 0; i < 41; i++) tokens[i] = "t";
  tiny_llama_t s = tiny();
  gguf_writer_t *w = tiny_llama(&s);
  OK(gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", tokens, 41));
  MODEL_FAILS(w, HCQ_INVALID_ARGUMENT, "tokenizer.ggml.tokens", "41 tokens", "40 rows");
  w = tiny_llama(&s);
  OK(gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", tokens, 39));
  llm_model_t *m;
  OK(open_tiny(w, &m));
  llm_model_close(m);
}

Test(llm_model, bad_dimensions) {
  tiny_llama_t s = tiny();
  s.layers = 0;
  MODEL_FAILS(tiny_llama(&s), HCQ_INVALID_ARGUMENT, "llama.block_count", "0");
  s = tiny();
  s.layers = 1;
  gguf_writer_t *w = tiny_llama(&s);
  /* now there twice */
  OK(gguf_writer_add_raw(w, "llama.block_count", GGUF_INT32, &(int32_t){-1}, 4));
  llm_model_t *m;
  FAILS(open_tiny(w, &m), HCQ_INVALID_ARGUMENT, "tiny.gguf", "\"llama.block_count\"", "twice");
  s = tiny();
  s.skip_key = "llama.embedding_length";
  MODEL_FAILS(tiny_llama(&s), HCQ_NOT_FOUND, "\"llama.embedding_length\"");
  s.skip_key = "llama.feed_forward_length";
  MODEL_FAILS(tiny_llama(&s), HCQ_NOT_FOUND, "\"llama.feed_forward_length\"");
  s.skip_key = "llama.block_count";
  MODEL_FAILS(tiny_llama(&s), HCQ_NOT_FOUND, "\"llama.block_count\"");
  /* a dimension of the wrong type */
  s.skip_key = "llama.embedding_length";
  w = tiny_llama(&s);
  OK(gguf_writer_add_str(w, "llama.embedding_length", "64"));
  MODEL_FAILS(w, HCQ_INVALID_ARGUMENT, "\"llama.embedding_length\"", "string");
  /* an epsilon and a rope base out of range */
  s = tiny();
  s.skip_key = "llama.context_length";
  w = tiny_llama(&s);
  OK(gguf_writer_add_u32(w, "llama.context_length", 0));
  MODEL_FAILS(w, HCQ_INVALID_ARGUMENT, "llama.context_length", "0");
}

Test(llm_model, from_gguf_takes_the_file) {
  /* llm_model_from_gguf over memory: the model closes the file, on success and on failure */
  tiny_llama_t s = tiny();
  s.layers = 1;
  gguf_writer_t *w = tiny_llama(&s);
  uint8_t *bytes;
  size_t size;
  OK(gguf_writer_bytes(w, &bytes, &size));
  gguf_writer_free(w);
  gguf_file_t *g;
  OK(gguf_open_memory(bytes, size, "memory-llama", &g));
  llm_model_t *m;
  OK(llm_model_from_gguf(g, &m));
  cr_assert_eq(m->file, g);
  cr_assert_str_eq(m->name, "tiny llama");
  llm_model_close(m);
  free(bytes);
  s.arch = "gpt2";
  w = tiny_llama(&s);
  OK(gguf_writer_bytes(w, &bytes, &size));
  gguf_writer_free(w);
  OK(gguf_open_memory(bytes, size, "memory-gpt2", &g));
  FAILS(llm_model_from_gguf(g, &m), HCQ_UNIMPLEMENTED, "memory-gpt2", "gpt2");
  cr_assert_null(m);
  free(bytes);
}
