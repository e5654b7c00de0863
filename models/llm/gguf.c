/* The GGUF reader: every count, offset and size is checked against what is left of the file before
 * it is used, so a truncated or hostile file is an error naming what is wrong, never a read outside
 * the mapping or an allocation sized by the file. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "model_file.h"
#include "model_status.h"

struct gguf_file {
  char *path;
  const uint8_t *base;
  size_t size;
  void *map; /* munmap'd on close (NULL for gguf_open_memory) */
  uint32_t version, alignment;
  uint64_t data_start;
  gguf_kv_t *kvs;
  size_t nkvs;
  gguf_tensor_t *tensors;
  size_t ntensors;
  char *names; /* the tensors' NUL-terminated names, back to back */
};

/* ---- types ---- */

static bool value_type_known(uint32_t type) {
  switch (type) {
#define GGUF_VT_KNOWN(name, value, text) case value:
    GGUF_VALUE_TYPES(GGUF_VT_KNOWN)
#undef GGUF_VT_KNOWN
    return true;
    default: return false;
  }
}

const char *gguf_value_type_name(uint32_t type) {
  switch (type) {
#define GGUF_VT_NAME(name, value, text) \
  case value: return text;
    GGUF_VALUE_TYPES(GGUF_VT_NAME)
#undef GGUF_VT_NAME
    default: break;
  }
  /* gguf.h promises text for any number ("type 77"): per thread, valid until the next such call. */
  static _Thread_local char unknown[24];
  snprintf(unknown, sizeof(unknown), "type %u", type);
  return unknown;
}

static uint64_t scalar_size(uint32_t type) {
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
    default: return 0; /* strings, arrays, unknown */
  }
}

bool ggml_type_known(uint32_t type) {
  switch (type) {
#define GGML_KNOWN(name, value, text, block, bytes) case value:
    GGML_TYPES(GGML_KNOWN)
#undef GGML_KNOWN
    return true;
    default: return false;
  }
}

/* The numbers ggml has dropped, with their old names, for messages. */
static const char *removed_type_name(uint32_t type) {
  switch (type) {
    case 4: return "Q4_2";
    case 5: return "Q4_3";
    case 31: return "Q4_0_4_4";
    case 32: return "Q4_0_4_8";
    case 33: return "Q4_0_8_8";
    case 36: return "IQ4_NL_4_4";
    case 37: return "IQ4_NL_4_8";
    case 38: return "IQ4_NL_8_8";
    default: return NULL;
  }
}

bool ggml_type_removed(uint32_t type) { return removed_type_name(type) != NULL; }

const char *ggml_type_name(uint32_t type) {
  switch (type) {
#define GGML_NAME(name, value, text, block, bytes) \
  case value: return text;
    GGML_TYPES(GGML_NAME)
#undef GGML_NAME
    default: return removed_type_name(type);
  }
}

bool ggml_type_quantized(uint32_t type) {
  /* Blocks of one element are plain numbers; every block type carries a scale. */
  return ggml_type_known(type) && ggml_block_elems((ggml_type_t)type) > 1;
}

uint32_t ggml_block_elems(ggml_type_t type) {
  switch (type) {
#define GGML_BLOCK(name, value, text, block, bytes) \
  case value: return block;
    GGML_TYPES(GGML_BLOCK)
#undef GGML_BLOCK
    default: return 0;
  }
}

uint32_t ggml_block_bytes(ggml_type_t type) {
  switch (type) {
#define GGML_BYTES(name, value, text, block, bytes) \
  case value: return bytes;
    GGML_TYPES(GGML_BYTES)
#undef GGML_BYTES
    default: return 0;
  }
}

/* ---- parsing ---- */

typedef struct cursor {
  const gguf_file_t *g;
  uint64_t pos;
} cursor_t;

/* A file's string for a message: printable ASCII as it is, other bytes as \xAB, at most 64 bytes.
 */
static const char *shown(gguf_str_t s, char buf[300]) {
  size_t o = 0;
  for (uint64_t i = 0; i < s.len && i < 64; i++) {
    unsigned char c = (unsigned char)s.ptr[i];
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
      buf[o++] = (char)c;
    else
      o += (size_t)snprintf(buf + o, 5, "\\x%02x", c);
  }
  if (s.len > 64) memcpy(buf + o, "...", 3), o += 3;
  buf[o] = 0;
  return buf;
}

static hcq_status_t truncated(const cursor_t *c, const char *what, uint64_t need) {
  return hcq_status_make(HCQ_INVALID_ARGUMENT,
                         "%s: truncated: %s needs %llu bytes at offset %llu, the file has %llu",
                         c->g->path, what, (unsigned long long)need, (unsigned long long)c->pos,
                         (unsigned long long)c->g->size);
}

static bool fits(const cursor_t *c, uint64_t n) { return n <= c->g->size - c->pos; }

static hcq_status_t read_bytes(cursor_t *c, void *dst, uint64_t n, const char *what) {
  if (!fits(c, n)) return truncated(c, what, n);
  memcpy(dst, c->g->base + c->pos, n);
  c->pos += n;
  return NULL;
}

static hcq_status_t read_u32(cursor_t *c, uint32_t *v, const char *what) {
  return read_bytes(c, v, 4, what);
}
static hcq_status_t read_u64(cursor_t *c, uint64_t *v, const char *what) {
  return read_bytes(c, v, 8, what);
}

static hcq_status_t read_str(cursor_t *c, gguf_str_t *s, const char *what) {
  uint64_t len = 0;
  hcq_status_t st = read_u64(c, &len, what);
  if (st) return st;
  if (!fits(c, len)) {
    c->pos -= 8;
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "%s: %s at offset %llu is %llu bytes long, past the end of the file (%llu bytes)",
        c->g->path, what, (unsigned long long)c->pos, (unsigned long long)len,
        (unsigned long long)c->g->size);
  }
  s->ptr = (const char *)c->g->base + c->pos;
  s->len = len;
  c->pos += len;
  return NULL;
}

/* Open addressing over names: duplicate keys and tensor names are refused. */
typedef struct name_set {
  const gguf_str_t **slots;
  size_t cap;
} name_set_t;

static uint64_t hash_str(gguf_str_t s) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < s.len; i++) h = (h ^ (unsigned char)s.ptr[i]) * 1099511628211ull;
  return h;
}

static bool name_set_init(name_set_t *set, size_t n) {
  set->cap = 16;
  while (set->cap < 2 * n) set->cap *= 2;
  set->slots = calloc(set->cap, sizeof(*set->slots));
  return set->slots != NULL;
}

/* false when s is already in the set. */
static bool name_set_add(name_set_t *set, const gguf_str_t *s) {
  for (size_t i = hash_str(*s) & (set->cap - 1);; i = (i + 1) & (set->cap - 1)) {
    const gguf_str_t *o = set->slots[i];
    if (!o) {
      set->slots[i] = s;
      return true;
    }
    if (o->len == s->len && !memcmp(o->ptr, s->ptr, s->len)) return false;
  }
}

static hcq_status_t oom(const gguf_file_t *g) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory", g->path);
}

static hcq_status_t parse_kv(cursor_t *c, size_t i, gguf_kv_t *kv) {
  char what[320], buf[300]; /* room for the whole key as shown() writes it */
  snprintf(what, sizeof(what), "the key of metadata entry %zu", i);
  hcq_status_t st = read_str(c, &kv->key, what);
  if (st) return st;
  if (kv->key.len == 0)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: metadata entry %zu has an empty key",
                           c->g->path, i);
  snprintf(what, sizeof(what), "the type of metadata key \"%s\"", shown(kv->key, buf));
  if ((st = read_u32(c, &kv->type, what))) return st;
  kv->elem_type = kv->type;
  kv->count = 1;
  if (kv->type == GGUF_ARRAY) {
    snprintf(what, sizeof(what), "the array header of \"%s\"", shown(kv->key, buf));
    if ((st = read_u32(c, &kv->elem_type, what)) || (st = read_u64(c, &kv->count, what))) return st;
    if (kv->elem_type == GGUF_ARRAY)
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "%s: metadata key \"%s\" is an array of arrays, which GGUF readers do not support",
          c->g->path, shown(kv->key, buf));
  }
  if (!value_type_known(kv->elem_type))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: metadata key \"%s\" has unknown value type %u", c->g->path,
                           shown(kv->key, buf), kv->elem_type);
  kv->data = c->g->base + c->pos;
  uint64_t size = scalar_size(kv->elem_type);
  if (size) {
    if (kv->count > (c->g->size - c->pos) / size)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "%s: metadata key \"%s\" holds %llu values of %llu bytes at offset "
                             "%llu: past the end of the file (%llu bytes)",
                             c->g->path, shown(kv->key, buf), (unsigned long long)kv->count,
                             (unsigned long long)size, (unsigned long long)c->pos,
                             (unsigned long long)c->g->size);
    c->pos += kv->count * size;
    kv->bytes = kv->count * size;
    return NULL;
  }
  /* Strings: each is at least its 8-byte length, so the count is bounded before the walk. */
  if (kv->count > (c->g->size - c->pos) / 8)
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "%s: metadata key \"%s\" holds %llu strings: more than the %llu bytes left can hold",
        c->g->path, shown(kv->key, buf), (unsigned long long)kv->count,
        (unsigned long long)(c->g->size - c->pos));
  for (uint64_t k = 0; k < kv->count; k++) {
    gguf_str_t s;
    snprintf(what, sizeof(what), "string %llu of \"%s\"", (unsigned long long)k,
             shown(kv->key, buf));
    if ((st = read_str(c, &s, what))) return st;
  }
  kv->bytes = (uint64_t)(c->g->base + c->pos - kv->data);
  return NULL;
}

static hcq_status_t check_alignment(gguf_file_t *g) {
  const gguf_kv_t *kv = gguf_find_kv(g, "general.alignment");
  g->alignment = 32;
  if (!kv) return NULL;
  if (kv->type != GGUF_UINT32)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: general.alignment is a %s (expected uint32)",
                           g->path, gguf_value_type_name(kv->type));
  uint32_t a;
  memcpy(&a, kv->data, 4);
  if (a == 0 || (a & (a - 1)))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: general.alignment is %u (expected a power of two)", g->path, a);
  g->alignment = a;
  return NULL;
}

static hcq_status_t parse_tensor(cursor_t *c, size_t i, gguf_tensor_t *t, gguf_str_t *name) {
  char what[320], buf[300]; /* room for the whole name as shown() writes it */
  snprintf(what, sizeof(what), "the name of tensor %zu", i);
  hcq_status_t st = read_str(c, name, what);
  if (st) return st;
  const char *n = shown(*name, buf);
  if (name->len == 0)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: tensor %zu has an empty name", c->g->path, i);
  if (memchr(name->ptr, 0, name->len))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: the name of tensor %zu (\"%s\") holds a NUL byte", c->g->path, i,
                           n);
  snprintf(what, sizeof(what), "the dimensions of tensor \"%s\"", n);
  if ((st = read_u32(c, &t->n_dims, what))) return st;
  if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: tensor \"%s\" has %u dimensions (expected 1 to %d)", c->g->path, n,
                           t->n_dims, GGUF_MAX_DIMS);
  uint64_t elems = 1;
  for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
    t->ne[d] = 1;
    if (d >= t->n_dims) continue;
    if ((st = read_u64(c, &t->ne[d], what))) return st;
    if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX / elems)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: tensor \"%s\": dimension %u is %llu (%s)",
                             c->g->path, n, d, (unsigned long long)t->ne[d],
                             t->ne[d] ? "the element count overflows" : "expected at least 1");
    elems *= t->ne[d];
  }
  uint32_t type;
  snprintf(what, sizeof(what), "the type of tensor \"%s\"", n);
  if ((st = read_u32(c, &type, what))) return st;
  if (!ggml_type_known(type)) {
    if (ggml_type_removed(type))
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "%s: tensor \"%s\" has type %u (%s), which ggml has removed: no GGUF reader reads it",
          c->g->path, n, type, ggml_type_name(type));
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: tensor \"%s\" has type %u, which is not a ggml type", c->g->path, n,
                           type);
  }
  t->type = (ggml_type_t)type;
  uint32_t block = ggml_block_elems(t->type), bytes = ggml_block_bytes(t->type);
  if (t->ne[0] % block)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: tensor \"%s\" (%s) has rows of %llu elements, not a multiple of "
                           "the type's block of %u",
                           c->g->path, n, ggml_type_name(type), (unsigned long long)t->ne[0],
                           block);
  /* elems fits in int64, but F32 takes 4 bytes an element: 2^62 elements would wrap to 0 bytes. */
  if (elems / block > (uint64_t)INT64_MAX / bytes)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: tensor \"%s\" (%s) has %llu elements: its byte count overflows",
                           c->g->path, n, ggml_type_name(type), (unsigned long long)elems);
  t->bytes = elems / block * bytes;
  snprintf(what, sizeof(what), "the data offset of tensor \"%s\"", n);
  if ((st = read_u64(c, &t->offset, what))) return st;
  return NULL;
}

static int cmp_offset(const void *a, const void *b) {
  const gguf_tensor_t *x = *(const gguf_tensor_t *const *)a, *y = *(const gguf_tensor_t *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static hcq_status_t place_tensors(gguf_file_t *g) {
  uint64_t data_bytes = g->size - g->data_start;
  for (size_t i = 0; i < g->ntensors; i++) {
    gguf_tensor_t *t = &g->tensors[i];
    if (t->offset % g->alignment)
      return hcq_status_make(
          HCQ_INVALID_ARGUMENT,
          "%s: tensor \"%s\" starts at data offset %llu, not a multiple of the alignment %u",
          g->path, t->name, (unsigned long long)t->offset, g->alignment);
    if (t->offset > data_bytes || t->bytes > data_bytes - t->offset)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "%s: tensor \"%s\" (%llu bytes at data offset %llu) ends past the end "
                             "of the file (the data section holds %llu bytes)",
                             g->path, t->name, (unsigned long long)t->bytes,
                             (unsigned long long)t->offset, (unsigned long long)data_bytes);
    t->data = g->base + g->data_start + t->offset;
  }
  if (g->ntensors < 2) return NULL;
  const gguf_tensor_t **order = malloc(g->ntensors * sizeof(*order));
  if (!order) return oom(g);
  for (size_t i = 0; i < g->ntensors; i++) order[i] = &g->tensors[i];
  qsort(order, g->ntensors, sizeof(*order), cmp_offset);
  hcq_status_t st = NULL;
  for (size_t i = 1; i < g->ntensors; i++)
    if (order[i - 1]->offset + order[i - 1]->bytes > order[i]->offset) {
      st = hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: tensors \"%s\" and \"%s\" overlap (data offsets %llu and %llu)",
                           g->path, order[i - 1]->name, order[i]->name,
                           (unsigned long long)order[i - 1]->offset,
                           (unsigned long long)order[i]->offset);
      break;
    }
  free(order);
  return st;
}

/* The magic, the version and the two counts, which must fit in what is left of the file. */
static hcq_status_t parse_header(gguf_file_t *g, cursor_t *c, uint64_t *ntensors, uint64_t *nkvs) {
  char magic[4];
  TRY(read_bytes(c, magic, 4, "the magic"));
  if (memcmp(magic, "GGUF", 4))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: not a GGUF file (it starts with %02x %02x %02x %02x, not \"GGUF\")",
                           g->path, (unsigned char)magic[0], (unsigned char)magic[1],
                           (unsigned char)magic[2], (unsigned char)magic[3]);
  TRY(read_u32(c, &g->version, "the version"));
  if (g->version != 2 && g->version != 3) {
    uint32_t swapped = __builtin_bswap32(g->version);
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: GGUF version %u%s: hcq reads versions 2 and 3", g->path, g->version,
                           swapped == 2 || swapped == 3 ? " (a big-endian file?)" : "");
  }
  TRY(read_u64(c, ntensors, "the tensor count"));
  TRY(read_u64(c, nkvs, "the metadata count"));
  /* A metadata entry takes at least 13 bytes (key length, one key byte, type, one value byte), a
   * tensor info at least 33: counts beyond what the file can hold are refused before allocating. */
  uint64_t left = g->size - c->pos;
  if (*nkvs > left / 13)
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "%s: the header announces %llu metadata entries, more than the file's %llu bytes can hold",
        g->path, (unsigned long long)*nkvs, (unsigned long long)g->size);
  if (*ntensors > left / 33)
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "%s: the header announces %llu tensors, more than the file's %llu bytes can hold", g->path,
        (unsigned long long)*ntensors, (unsigned long long)g->size);
  return NULL;
}

/* The metadata entries, each key once. */
static hcq_status_t parse_kvs(gguf_file_t *g, cursor_t *c, uint64_t nkvs) {
  g->kvs = calloc(nkvs ? nkvs : 1, sizeof(*g->kvs));
  if (!g->kvs) return oom(g);
  name_set_t keys;
  if (!name_set_init(&keys, nkvs)) return oom(g);
  hcq_status_t st = NULL;
  char buf[300];
  for (size_t i = 0; i < nkvs; i++) {
    if ((st = parse_kv(c, i, &g->kvs[i]))) goto done;
    g->nkvs++;
    if (!name_set_add(&keys, &g->kvs[i].key)) {
      st = hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: metadata key \"%s\" appears twice", g->path,
                           shown(g->kvs[i].key, buf));
      goto done;
    }
  }
done:
  free(keys.slots);
  return st;
}

/* The tensor infos, each name once; the names copied into one block. */
static hcq_status_t parse_tensors(gguf_file_t *g, cursor_t *c, uint64_t ntensors) {
  hcq_status_t st = NULL;
  g->tensors = calloc(ntensors ? ntensors : 1, sizeof(*g->tensors));
  gguf_str_t *names = calloc(ntensors ? ntensors : 1, sizeof(*names));
  name_set_t set = {0};
  size_t name_bytes = 0;
  char buf[300];
  if (!g->tensors || !names || !name_set_init(&set, ntensors)) {
    st = oom(g);
    goto done;
  }
  for (size_t i = 0; i < ntensors; i++) {
    if ((st = parse_tensor(c, i, &g->tensors[i], &names[i]))) goto done;
    name_bytes += names[i].len + 1;
    if (!name_set_add(&set, &names[i])) {
      st = hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: tensor \"%s\" appears twice", g->path,
                           shown(names[i], buf));
      goto done;
    }
  }
  if (!(g->names = malloc(name_bytes ? name_bytes : 1))) {
    st = oom(g);
    goto done;
  }
  char *p = g->names;
  for (size_t i = 0; i < ntensors; i++) {
    memcpy(p, names[i].ptr, names[i].len);
    p[names[i].len] = 0;
    g->tensors[i].name = p;
    p += names[i].len + 1;
  }
  g->ntensors = ntensors;
done:
  free(set.slots);
  free(names);
  return st;
}

static hcq_status_t parse(gguf_file_t *g) {
  cursor_t c = {g, 0};
  uint64_t ntensors, nkvs;
  TRY(parse_header(g, &c, &ntensors, &nkvs));
  TRY(parse_kvs(g, &c, nkvs));
  TRY(check_alignment(g));
  TRY(parse_tensors(g, &c, ntensors));
  uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
  if (ntensors && !fits(&c, pad))
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "%s: truncated: the file ends at %llu, inside the padding before the tensor data", g->path,
        (unsigned long long)g->size);
  g->data_start = ntensors ? c.pos + pad : c.pos;
  return place_tensors(g);
}

static hcq_status_t make(const char *name, gguf_file_t **out) {
  *out = calloc(1, sizeof(**out));
  if (*out && !((*out)->path = strdup(name))) {
    free(*out);
    *out = NULL;
  }
  return *out ? NULL : hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory", name);
}

static hcq_status_t finish(gguf_file_t *g, gguf_file_t **out) {
  hcq_status_t st = parse(g);
  if (st) {
    gguf_close(g);
    return st;
  }
  *out = g;
  return NULL;
}

hcq_status_t gguf_open_memory(const void *bytes, size_t size, const char *name, gguf_file_t **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "gguf_open_memory: out is NULL");
  *out = NULL;
  if (!bytes && size)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "gguf_open_memory: bytes is NULL");
  gguf_file_t *g;
  hcq_status_t st = make(name ? name : "(memory)", &g);
  if (st) return st;
  g->base = bytes;
  g->size = size;
  return finish(g, out);
}

hcq_status_t gguf_open(const char *path, gguf_file_t **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "gguf_open: out is NULL");
  *out = NULL;
  if (!path) return hcq_status_make(HCQ_INVALID_ARGUMENT, "gguf_open: path is NULL");
  int fd;
  uint64_t size;
  hcq_status_t st = hcq_model_open(path, "model file", &fd, &size);
  if (st) return st;
  if (size == 0) {
    close(fd);
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: empty file (not a GGUF model)", path);
  }
  if (size > SIZE_MAX) {
    close(fd);
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: %llu bytes do not fit in this address space",
                           path, (unsigned long long)size);
  }
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (map == MAP_FAILED)
    return hcq_status_make(HCQ_UNAVAILABLE, "%s: cannot map it: %s", path, strerror(err));
  gguf_file_t *g;
  if ((st = make(path, &g))) {
    munmap(map, (size_t)size);
    return st;
  }
  g->map = map;
  g->base = map;
  g->size = (size_t)size;
  return finish(g, out);
}

void gguf_close(gguf_file_t *g) {
  if (!g) return;
  if (g->map) munmap(g->map, g->size);
  free(g->kvs);
  free(g->tensors);
  free(g->names);
  free(g->path);
  free(g);
}

const char *gguf_path(const gguf_file_t *g) { return g->path; }
uint32_t gguf_version(const gguf_file_t *g) { return g->version; }
uint64_t gguf_file_size(const gguf_file_t *g) { return g->size; }
uint32_t gguf_alignment(const gguf_file_t *g) { return g->alignment; }
size_t gguf_kv_count(const gguf_file_t *g) { return g->nkvs; }
const gguf_kv_t *gguf_kv_at(const gguf_file_t *g, size_t i) {
  return i < g->nkvs ? &g->kvs[i] : NULL;
}
size_t gguf_tensor_count(const gguf_file_t *g) { return g->ntensors; }
const gguf_tensor_t *gguf_tensor_at(const gguf_file_t *g, size_t i) {
  return i < g->ntensors ? &g->tensors[i] : NULL;
}

const gguf_kv_t *gguf_find_kv(const gguf_file_t *g, const char *key) {
  size_t len = strlen(key);
  for (size_t i = 0; i < g->nkvs; i++)
    if (g->kvs[i].key.len == len && !memcmp(g->kvs[i].key.ptr, key, len)) return &g->kvs[i];
  return NULL;
}

const gguf_tensor_t *gguf_find_tensor(const gguf_file_t *g, const char *name) {
  for (size_t i = 0; i < g->ntensors; i++)
    if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
  return NULL;
}

/* ---- typed getters ---- */

static hcq_status_t find(const gguf_file_t *g, const char *key, const gguf_kv_t **kv) {
  if (!(*kv = gguf_find_kv(g, key)))
    return hcq_status_make(HCQ_NOT_FOUND, "%s: no metadata key \"%s\"", g->path, key);
  return NULL;
}

static hcq_status_t wrong_type(const gguf_file_t *g, const gguf_kv_t *kv, const char *key,
                               const char *want) {
  char found[48];
  if (kv->type == GGUF_ARRAY)
    snprintf(found, sizeof(found), "an array of %s", gguf_value_type_name(kv->elem_type));
  else
    snprintf(found, sizeof(found), "a %s", gguf_value_type_name(kv->type));
  return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: metadata key \"%s\" is %s (expected %s)",
                         g->path, key, found, want);
}

/* An integer value as int64 with its unsigned flag: false when kv is not an integer. */
static bool int_value(const gguf_kv_t *kv, int64_t *v, bool *big) {
  *big = false;
  if (kv->type == GGUF_ARRAY) return false;
  union {
    uint8_t u8;
    int8_t i8;
    uint16_t u16;
    int16_t i16;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
  } u;
  memcpy(&u, kv->data, scalar_size(kv->type) ? scalar_size(kv->type) : 1);
  switch (kv->type) {
    case GGUF_UINT8: *v = u.u8; return true;
    case GGUF_INT8: *v = u.i8; return true;
    case GGUF_UINT16: *v = u.u16; return true;
    case GGUF_INT16: *v = u.i16; return true;
    case GGUF_UINT32: *v = u.u32; return true;
    case GGUF_INT32: *v = u.i32; return true;
    case GGUF_INT64: *v = u.i64; return true;
    case GGUF_UINT64:
      *big = u.u64 > (uint64_t)INT64_MAX;
      *v = (int64_t)(u.u64 & (uint64_t)INT64_MAX);
      return true;
    default: return false;
  }
}

hcq_status_t gguf_get_i64(const gguf_file_t *g, const char *key, int64_t *out) {
  const gguf_kv_t *kv;
  hcq_status_t st = find(g, key, &kv);
  if (st) return st;
  int64_t v;
  bool big;
  if (!int_value(kv, &v, &big)) return wrong_type(g, kv, key, "an integer");
  if (big)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: metadata key \"%s\" is %llu (expected at most 2^63 - 1)", g->path,
                           key, (unsigned long long)v | 1ull << 63);
  *out = v;
  return NULL;
}

hcq_status_t gguf_get_u32(const gguf_file_t *g, const char *key, uint32_t *out) {
  int64_t v;
  hcq_status_t st = gguf_get_i64(g, key, &v);
  if (st) return st;
  if (v < 0 || v > UINT32_MAX)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: metadata key \"%s\" is %lld (expected 0 to %u)", g->path, key,
                           (long long)v, UINT32_MAX);
  *out = (uint32_t)v;
  return NULL;
}

hcq_status_t gguf_get_f32(const gguf_file_t *g, const char *key, float *out) {
  const gguf_kv_t *kv;
  hcq_status_t st = find(g, key, &kv);
  if (st) return st;
  if (kv->type == GGUF_FLOAT32) {
    memcpy(out, kv->data, 4);
  } else if (kv->type == GGUF_FLOAT64) {
    double d;
    memcpy(&d, kv->data, 8);
    if (isfinite(d) && fabs(d) > FLT_MAX)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "%s: metadata key \"%s\" is %g, beyond the range of a float32",
                             g->path, key, d);
    *out = (float)d;
  } else {
    return wrong_type(g, kv, key, "a float32");
  }
  return NULL;
}

hcq_status_t gguf_get_bool(const gguf_file_t *g, const char *key, bool *out) {
  const gguf_kv_t *kv;
  hcq_status_t st = find(g, key, &kv);
  if (st) return st;
  if (kv->type != GGUF_BOOL) return wrong_type(g, kv, key, "a bool");
  *out = kv->data[0] != 0;
  return NULL;
}

hcq_status_t gguf_get_str(const gguf_file_t *g, const char *key, gguf_str_t *out) {
  const gguf_kv_t *kv;
  hcq_status_t st = find(g, key, &kv);
  if (st) return st;
  if (kv->type != GGUF_STRING) return wrong_type(g, kv, key, "a string");
  uint64_t len;
  memcpy(&len, kv->data, 8);
  *out = (gguf_str_t){(const char *)kv->data + 8, len};
  return NULL;
}

/* Runs a getter, turning NOT_FOUND into "leave *out as it is". */
#define OPTIONAL_GETTER(name, getter, type)                             \
  hcq_status_t name(const gguf_file_t *g, const char *key, type *out) { \
    if (!gguf_find_kv(g, key)) return NULL;                             \
    return getter(g, key, out);                                         \
  }
OPTIONAL_GETTER(gguf_get_u32_or, gguf_get_u32, uint32_t)
OPTIONAL_GETTER(gguf_get_f32_or, gguf_get_f32, float)
OPTIONAL_GETTER(gguf_get_bool_or, gguf_get_bool, bool)
#undef OPTIONAL_GETTER

hcq_status_t gguf_get_str_array(const gguf_file_t *g, const char *key, gguf_str_t **out,
                                uint64_t *count) {
  *out = NULL;
  *count = 0;
  const gguf_kv_t *kv;
  hcq_status_t st = find(g, key, &kv);
  if (st) return st;
  if (kv->type != GGUF_ARRAY || kv->elem_type != GGUF_STRING)
    return wrong_type(g, kv, key, "an array of string");
  gguf_str_t *s = malloc((kv->count ? kv->count : 1) * sizeof(*s));
  if (!s) return oom(g);
  const uint8_t *p = kv->data;
  for (uint64_t i = 0; i < kv->count; i++) { /* bounds were checked by parse_kv */
    memcpy(&s[i].len, p, 8);
    s[i].ptr = (const char *)p + 8;
    p += 8 + s[i].len;
  }
  *out = s;
  *count = kv->count;
  return NULL;
}

hcq_status_t gguf_get_array(const gguf_file_t *g, const char *key, uint32_t elem_type,
                            const void **out, uint64_t *count) {
  *out = NULL;
  *count = 0;
  const gguf_kv_t *kv;
  hcq_status_t st = find(g, key, &kv);
  if (st) return st;
  if (kv->type != GGUF_ARRAY || kv->elem_type != elem_type) {
    char want[48];
    snprintf(want, sizeof(want), "an array of %s", gguf_value_type_name(elem_type));
    return wrong_type(g, kv, key, want);
  }
  *out = kv->data;
  *count = kv->count;
  return NULL;
}
