/* The GGUF writer: metadata and tensors collected in memory, laid out as gguf.h describes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"

typedef struct bytes {
  uint8_t *p;
  size_t n, cap;
} bytes_t;

typedef struct wtensor {
  char *name;
  ggml_type_t type;
  uint64_t ne[GGUF_MAX_DIMS];
  uint32_t n_dims;
  uint64_t size;
  uint8_t *data;
} wtensor_t;

struct gguf_writer {
  bytes_t kv; /* the metadata entries as they go in the file */
  uint64_t nkv;
  wtensor_t *tensors;
  size_t ntensors, cap;
  uint32_t version, alignment;
};

static bool put(bytes_t *b, const void *src, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p, b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, src, n);
  b->n += n;
  return true;
}

static bool put_u32(bytes_t *b, uint32_t v) { return put(b, &v, 4); }
static bool put_u64(bytes_t *b, uint64_t v) { return put(b, &v, 8); }
static bool put_str(bytes_t *b, const char *s) {
  return put_u64(b, strlen(s)) && put(b, s, strlen(s));
}

static hcq_status_t oom(void) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "gguf writer: out of memory");
}

hcq_status_t gguf_writer_create(gguf_writer_t **out) {
  *out = calloc(1, sizeof(**out));
  if (!*out) return oom();
  (*out)->version = 3;
  (*out)->alignment = 32;
  return NULL;
}

void gguf_writer_free(gguf_writer_t *w) {
  if (!w) return;
  for (size_t i = 0; i < w->ntensors; i++) free(w->tensors[i].name), free(w->tensors[i].data);
  free(w->tensors);
  free(w->kv.p);
  free(w);
}

void gguf_writer_set_version(gguf_writer_t *w, uint32_t version) { w->version = version; }

hcq_status_t gguf_writer_set_alignment(gguf_writer_t *w, uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "gguf writer: alignment %u is not a power of two",
                           alignment);
  /* Written by gguf_writer_bytes: setting it twice must not put two general.alignment keys in the
   * file, nor leave one that the last setting (32) no longer matches. */
  w->alignment = alignment;
  return NULL;
}

/* key, type, then the value's bytes. */
static hcq_status_t add(gguf_writer_t *w, const char *key, uint32_t type, const void *value,
                        size_t size) {
  size_t mark = w->kv.n;
  if (!put_str(&w->kv, key) || !put_u32(&w->kv, type) || !put(&w->kv, value, size)) {
    w->kv.n = mark;
    return oom();
  }
  w->nkv++;
  return NULL;
}

hcq_status_t gguf_writer_add_raw(gguf_writer_t *w, const char *key, uint32_t type,
                                 const void *bytes, size_t size) {
  return add(w, key, type, bytes, size);
}
hcq_status_t gguf_writer_add_u32(gguf_writer_t *w, const char *key, uint32_t v) {
  return add(w, key, GGUF_UINT32, &v, 4);
}
hcq_status_t gguf_writer_add_f32(gguf_writer_t *w, const char *key, float v) {
  return add(w, key, GGUF_FLOAT32, &v, 4);
}
hcq_status_t gguf_writer_add_bool(gguf_writer_t *w, const char *key, bool v) {
  uint8_t b = v;
  return add(w, key, GGUF_BOOL, &b, 1);
}

hcq_status_t gguf_writer_add_str(gguf_writer_t *w, const char *key, const char *v) {
  bytes_t b = {0};
  hcq_status_t st = put_str(&b, v) ? add(w, key, GGUF_STRING, b.p, b.n) : oom();
  free(b.p);
  return st;
}

hcq_status_t gguf_writer_add_str_array(gguf_writer_t *w, const char *key, const char *const *v,
                                       size_t n) {
  bytes_t b = {0};
  bool ok = put_u32(&b, GGUF_STRING) && put_u64(&b, n);
  for (size_t i = 0; i < n && ok; i++) ok = put_str(&b, v[i]);
  hcq_status_t st = ok ? add(w, key, GGUF_ARRAY, b.p, b.n) : oom();
  free(b.p);
  return st;
}

hcq_status_t gguf_writer_add_i32_array(gguf_writer_t *w, const char *key, const int32_t *v,
                                       size_t n) {
  bytes_t b = {0};
  bool ok = put_u32(&b, GGUF_INT32) && put_u64(&b, n) && put(&b, v, n * 4);
  hcq_status_t st = ok ? add(w, key, GGUF_ARRAY, b.p, b.n) : oom();
  free(b.p);
  return st;
}

hcq_status_t gguf_writer_copy_kv(gguf_writer_t *w, const gguf_kv_t *kv) {
  char *key = strndup(kv->key.ptr, kv->key.len);
  bytes_t b = {0};
  bool ok = key &&
            (kv->type != GGUF_ARRAY || (put_u32(&b, kv->elem_type) && put_u64(&b, kv->count))) &&
            put(&b, kv->data, kv->bytes);
  hcq_status_t st = ok ? add(w, key, kv->type, b.p, b.n) : oom();
  free(b.p), free(key);
  return st;
}

hcq_status_t gguf_writer_add_tensor(gguf_writer_t *w, const char *name, ggml_type_t type,
                                    const uint64_t *ne, uint32_t n_dims, const void *data) {
  if (!ggml_type_known(type) || n_dims < 1 || n_dims > GGUF_MAX_DIMS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "gguf writer: tensor \"%s\": bad type %u or %u dimensions", name, type,
                           n_dims);
  uint64_t elems = 1;
  for (uint32_t d = 0; d < n_dims; d++) {
    if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX / 4 / elems)
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT, "gguf writer: tensor \"%s\": dimension %u is %llu (%s)", name, d,
          (unsigned long long)ne[d], ne[d] ? "too many elements" : "expected at least 1");
    elems *= ne[d];
  }
  if (ne[0] % ggml_block_elems(type))
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "gguf writer: tensor \"%s\": %llu elements per row, not a multiple of %u", name,
        (unsigned long long)ne[0], ggml_block_elems(type));
  if (w->ntensors == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 16;
    wtensor_t *t = realloc(w->tensors, cap * sizeof(*t));
    if (!t) return oom();
    w->tensors = t, w->cap = cap;
  }
  wtensor_t *t = &w->tensors[w->ntensors];
  *t = (wtensor_t){.type = type,
                   .n_dims = n_dims,
                   .size = elems / ggml_block_elems(type) * ggml_block_bytes(type)};
  for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
  t->name = strdup(name);
  t->data = malloc(t->size ? t->size : 1);
  if (!t->name || !t->data) {
    free(t->name), free(t->data);
    return oom();
  }
  memcpy(t->data, data, t->size);
  w->ntensors++;
  return NULL;
}

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

hcq_status_t gguf_writer_bytes(const gguf_writer_t *w, uint8_t **out, size_t *out_size) {
  *out = NULL;
  *out_size = 0;
  bytes_t b = {0};
  static const uint8_t zeros[256];
  bool align_kv = w->alignment != 32; /* general.alignment, after the metadata added */
  bool ok = put(&b, "GGUF", 4) && put_u32(&b, w->version) && put_u64(&b, w->ntensors) &&
            put_u64(&b, w->nkv + align_kv) && put(&b, w->kv.p, w->kv.n);
  if (align_kv)
    ok = ok && put_str(&b, "general.alignment") && put_u32(&b, GGUF_UINT32) &&
         put_u32(&b, w->alignment);
  uint64_t offset = 0;
  for (size_t i = 0; i < w->ntensors && ok; i++) {
    const wtensor_t *t = &w->tensors[i];
    ok = put_str(&b, t->name) && put_u32(&b, t->n_dims);
    for (uint32_t d = 0; d < t->n_dims && ok; d++) ok = put_u64(&b, t->ne[d]);
    ok = ok && put_u32(&b, t->type) && put_u64(&b, offset);
    offset = align_up(offset + t->size, w->alignment);
  }
  for (size_t i = 0; i < w->ntensors && ok; i++) {
    size_t pad = (size_t)(align_up(b.n, w->alignment) - b.n);
    while (pad && ok) {
      size_t n = pad < sizeof(zeros) ? pad : sizeof(zeros);
      ok = put(&b, zeros, n);
      pad -= n;
    }
    ok = ok && put(&b, w->tensors[i].data, w->tensors[i].size);
  }
  if (!ok) {
    free(b.p);
    return oom();
  }
  *out = b.p;
  *out_size = b.n;
  return NULL;
}

/* bytes as the file at path, closed. */
static hcq_status_t write_file(const char *path, const uint8_t *bytes, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: cannot create it: %s", path, strerror(errno));
  if (fwrite(bytes, 1, size, f) != size) {
    hcq_status_t st =
        hcq_status_make(HCQ_UNAVAILABLE, "%s: write failed: %s", path, strerror(errno));
    fclose(f);
    return st;
  }
  if (fclose(f))
    return hcq_status_make(HCQ_UNAVAILABLE, "%s: write failed: %s", path, strerror(errno));
  return NULL;
}

hcq_status_t gguf_writer_write(const gguf_writer_t *w, const char *path) {
  uint8_t *bytes;
  size_t size;
  hcq_status_t st = gguf_writer_bytes(w, &bytes, &size);
  if (st) return st;
  st = write_file(path, bytes, size);
  free(bytes);
  return st;
}
