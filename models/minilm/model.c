/* The safetensors reader and the BERT model of a sentence-transformers directory. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "minilm.h"
#include "model_file.h"

static const struct {
  const char *name;
  unsigned size;
} k_dtypes[MINILM_DTYPE_COUNT] = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}, {"I64", 8},
                                  {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U8", 1},  {"BOOL", 1}};

const char *minilm_dtype_name(minilm_dtype_t d) {
  return (unsigned)d < MINILM_DTYPE_COUNT ? k_dtypes[d].name : "?";
}

/* Header larger than this is refused before it is parsed (the format's own readers cap it too). */
#define MAX_HEADER (100u << 20)

static int by_begin(const void *a, const void *b) {
  const minilm_tensor_t *x = *(minilm_tensor_t *const *)a, *y = *(minilm_tensor_t *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static hcq_status_t parse_tensor(const char *path, const char *name, json_t *v, uint64_t data_size,
                                 minilm_tensor_t *t) {
  if (!json_is_object(v)) return hcq_model_invalid(path, "tensor \"%s\": not a JSON object", name);
  json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
         *off = json_object_get(v, "data_offsets");
  if (!json_is_string(dt))
    return hcq_model_invalid(path, "tensor \"%s\": no \"dtype\" string", name);
  int d = -1;
  for (int i = 0; i < MINILM_DTYPE_COUNT; i++)
    if (!strcmp(json_string_value(dt), k_dtypes[i].name)) d = i;
  if (d < 0)
    return hcq_model_invalid(path, "tensor \"%s\": unknown dtype \"%s\"", name,
                             json_string_value(dt));
  t->dtype = (minilm_dtype_t)d;
  if (!json_is_array(shape) || json_array_size(shape) > 8)
    return hcq_model_invalid(path, "tensor \"%s\": \"shape\" is not an array of at most 8 dims",
                             name);
  t->ndim = (int)json_array_size(shape);
  uint64_t elems = 1;
  for (int i = 0; i < t->ndim; i++) {
    json_t *e = json_array_get(shape, (size_t)i);
    if (!json_is_integer(e) || json_integer_value(e) < 0)
      return hcq_model_invalid(path, "tensor \"%s\": shape[%d] is not a non-negative integer", name,
                               i);
    t->shape[i] = json_integer_value(e);
    if (__builtin_mul_overflow(elems, (uint64_t)t->shape[i], &elems))
      return hcq_model_invalid(path, "tensor \"%s\": shape overflows", name);
  }
  if (!json_is_array(off) || json_array_size(off) != 2 ||
      !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1)))
    return hcq_model_invalid(path, "tensor \"%s\": \"data_offsets\" is not [begin, end]", name);
  json_int_t b = json_integer_value(json_array_get(off, 0)),
             e = json_integer_value(json_array_get(off, 1));
  if (b < 0 || e < b || (uint64_t)e > data_size)
    return hcq_model_invalid(path,
                             "tensor \"%s\": data_offsets [%" JSON_INTEGER_FORMAT
                             ", %" JSON_INTEGER_FORMAT "] outside the data section of %" PRIu64
                             " bytes (a truncated file?)",
                             name, b, e, data_size);
  uint64_t bytes;
  if (__builtin_mul_overflow(elems, (uint64_t)k_dtypes[d].size, &bytes) ||
      bytes != (uint64_t)(e - b))
    return hcq_model_invalid(
        path,
        "tensor \"%s\": %" PRIu64 " %s elements need %" PRIu64 " bytes, data_offsets span %" PRIu64,
        name, elems, k_dtypes[d].name, elems * k_dtypes[d].size, (uint64_t)(e - b));
  t->begin = (uint64_t)b, t->end = (uint64_t)e;
  t->name = strdup(name);
  return t->name ? NULL : hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
}

static hcq_status_t parse_header(minilm_safetensors_t *st, const char *text, size_t len) {
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return hcq_model_invalid(st->path, "header is not valid JSON: %s (line %d, column %d)",
                             err.text, err.line, err.column);
  hcq_status_t s = NULL;
  if (!json_is_object(root)) s = hcq_model_invalid(st->path, "header is not a JSON object");
  size_t n = json_is_object(root) ? json_object_size(root) : 0;
  if (!s) st->tensors = calloc(n ? n : 1, sizeof(*st->tensors));
  if (!s && !st->tensors) s = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  const char *key;
  json_t *v;
  if (!s) json_object_foreach(root, key, v) {
      if (!strcmp(key, "__metadata__")) {
        const char *mk;
        json_t *mv;
        if (!json_is_object(v))
          s = hcq_model_invalid(st->path, "\"__metadata__\" is not an object");
        else
          json_object_foreach(v, mk, mv) if (!s && !json_is_string(mv)) s =
              hcq_model_invalid(st->path, "\"__metadata__\" entry \"%s\" is not a string", mk);
      } else {
        s = parse_tensor(st->path, key, v, st->data_size, &st->tensors[st->count]);
        if (!s) st->count++;
      }
      if (s) break;
    }
  json_decref(root);
  if (s || st->count < 2) return s;
  /* Overlapping tensors: a corrupt or hostile file. */
  minilm_tensor_t **order = malloc(st->count * sizeof(*order));
  if (!order) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < st->count; i++) order[i] = &st->tensors[i];
  qsort(order, st->count, sizeof(*order), by_begin);
  const minilm_tensor_t *reach = order[0]; /* the tensor ending furthest so far */
  for (size_t i = 1; i < st->count && !s; i++) {
    if (order[i]->begin < reach->end && order[i]->end > order[i]->begin)
      s = hcq_model_invalid(st->path, "tensors \"%s\" and \"%s\" overlap", reach->name,
                            order[i]->name);
    if (order[i]->end > reach->end) reach = order[i];
  }
  free(order);
  return s;
}

hcq_status_t minilm_safetensors_open(const char *path, minilm_safetensors_t *out) {
  memset(out, 0, sizeof(*out));
  out->path = strdup(path);
  if (!out->path) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  int fd;
  uint64_t file_size;
  hcq_status_t s = hcq_model_open(path, "safetensors file", &fd, &file_size);
  if (s) {
    minilm_safetensors_close(out);
    return s;
  }
  struct stat sb = {.st_size = (off_t)file_size};
  if (sb.st_size < 8)
    s = hcq_model_invalid(path,
                          "%lld bytes: too short for the 8-byte header length (a truncated file?)",
                          (long long)sb.st_size);
  if (!s) {
    out->file_size = (size_t)sb.st_size;
    void *m = mmap(NULL, out->file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
      s = hcq_model_invalid(path, "cannot map: %s", strerror(errno));
    else
      out->file = m;
  }
  close(fd);
  if (!s) {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | out->file[i];
    if (hlen > MAX_HEADER || hlen > out->file_size - 8)
      s = hcq_model_invalid(
          path, "header length %" PRIu64 " does not fit the file's %zu bytes (a truncated file?)",
          hlen, out->file_size);
    else {
      out->data = out->file + 8 + hlen;
      out->data_size = out->file_size - 8 - hlen;
      s = parse_header(out, (const char *)out->file + 8, (size_t)hlen);
    }
  }
  if (s) minilm_safetensors_close(out);
  return s;
}

void minilm_safetensors_close(minilm_safetensors_t *st) {
  for (size_t i = 0; i < st->count; i++) free(st->tensors[i].name);
  free(st->tensors);
  if (st->file) munmap(st->file, st->file_size);
  free(st->path);
  memset(st, 0, sizeof(*st));
}

const minilm_tensor_t *minilm_safetensors_find(const minilm_safetensors_t *st, const char *name) {
  for (size_t i = 0; i < st->count; i++)
    if (!strcmp(st->tensors[i].name, name)) return &st->tensors[i];
  return NULL;
}

/* ---- the model directory ---- */

static hcq_status_t load_json(const char *dir, const char *file, bool optional, json_t **out) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, file);
  *out = NULL;
  if (optional && access(path, F_OK)) return NULL;
  char *text;
  size_t len;
  hcq_status_t s = hcq_model_read(path, "model configuration", (size_t)16 << 20, &text, &len);
  if (s && hcq_status_code(s) == HCQ_NOT_FOUND)
    s = hcq_status_annotate(s, "is %s a model directory?", dir);
  if (s) return s;
  json_error_t err;
  json_t *j = json_loadb(text, len, 0, &err);
  free(text);
  if (!j) return hcq_model_invalid(path, "not valid JSON: %s (line %d)", err.text, err.line);
  if (!json_is_object(j)) {
    json_decref(j);
    return hcq_model_invalid(path, "not a JSON object");
  }
  *out = j;
  return NULL;
}

static hcq_status_t get_int(json_t *cfg, const char *path, const char *key, int lo, int hi,
                            int *out) {
  json_t *v = json_object_get(cfg, key);
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
    return hcq_model_invalid(path, "\"%s\" is missing or not an integer in %d..%d", key, lo, hi);
  *out = (int)json_integer_value(v);
  return NULL;
}

static hcq_status_t read_config(const char *dir, minilm_config_t *c) {
  json_t *cfg;
  hcq_status_t s = load_json(dir, "config.json", false, &cfg);
  if (s) return s;
  char path[4096];
  snprintf(path, sizeof(path), "%s/config.json", dir);
  memset(c, 0, sizeof(*c));
  if (!s) s = get_int(cfg, path, "vocab_size", 1, 1 << 22, &c->vocab_size);
  if (!s) s = get_int(cfg, path, "hidden_size", 1, 1 << 14, &c->hidden);
  if (!s) s = get_int(cfg, path, "num_hidden_layers", 1, MINILM_MAX_LAYERS, &c->layers);
  if (!s) s = get_int(cfg, path, "num_attention_heads", 1, 1 << 10, &c->heads);
  if (!s) s = get_int(cfg, path, "intermediate_size", 1, 1 << 16, &c->intermediate);
  if (!s) s = get_int(cfg, path, "max_position_embeddings", 1, 1 << 16, &c->max_positions);
  if (!s) s = get_int(cfg, path, "type_vocab_size", 1, 1 << 10, &c->type_vocab);
  json_t *eps = json_object_get(cfg, "layer_norm_eps"), *act = json_object_get(cfg, "hidden_act"),
         *pet = json_object_get(cfg, "position_embedding_type");
  if (!s) c->ln_eps = json_is_number(eps) ? (float)json_number_value(eps) : 1e-12f;
  if (!s && c->hidden % c->heads)
    s = hcq_model_invalid(path, "hidden_size %d is not a multiple of num_attention_heads %d",
                          c->hidden, c->heads);
  if (!s && act && (!json_is_string(act) || strcmp(json_string_value(act), "gelu")))
    s = hcq_model_invalid(path, "hidden_act is not \"gelu\" (the one activation the kernels have)");
  if (!s && pet && (!json_is_string(pet) || strcmp(json_string_value(pet), "absolute")))
    s = hcq_model_invalid(path, "position_embedding_type is not \"absolute\"");
  json_decref(cfg);
  if (s) return s;
  c->max_seq_len = c->max_positions;
  json_t *sb;
  s = load_json(dir, "sentence_bert_config.json", true, &sb);
  if (s) return s;
  if (sb) {
    snprintf(path, sizeof(path), "%s/sentence_bert_config.json", dir);
    json_t *v = json_object_get(sb, "max_seq_length");
    if (v) s = get_int(sb, path, "max_seq_length", 2, c->max_positions, &c->max_seq_len);
    json_decref(sb);
  }
  return s;
}

/* Tensor names of what the encoder uses, in the order they are copied into model.data. */
enum { EMB_WORD, EMB_POS, EMB_TYPE, EMB_LN_W, EMB_LN_B, EMB_COUNT };
enum {
  L_Q_W,
  L_Q_B,
  L_K_W,
  L_K_B,
  L_V_W,
  L_V_B,
  L_O_W,
  L_O_B,
  L_LN1_W,
  L_LN1_B,
  L_I_W,
  L_I_B,
  L_D_W,
  L_D_B,
  L_LN2_W,
  L_LN2_B,
  L_COUNT
};
static const char *const k_emb_names[EMB_COUNT] = {
    "embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
    "embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight",
    "embeddings.LayerNorm.bias"};
static const char *const k_layer_names[L_COUNT] = {"attention.self.query.weight",
                                                   "attention.self.query.bias",
                                                   "attention.self.key.weight",
                                                   "attention.self.key.bias",
                                                   "attention.self.value.weight",
                                                   "attention.self.value.bias",
                                                   "attention.output.dense.weight",
                                                   "attention.output.dense.bias",
                                                   "attention.output.LayerNorm.weight",
                                                   "attention.output.LayerNorm.bias",
                                                   "intermediate.dense.weight",
                                                   "intermediate.dense.bias",
                                                   "output.dense.weight",
                                                   "output.dense.bias",
                                                   "output.LayerNorm.weight",
                                                   "output.LayerNorm.bias"};

static void expected_shape(const minilm_config_t *c, int layer, int idx, int64_t shape[2],
                           int *ndim) {
  int64_t h = c->hidden, in = c->intermediate;
  if (layer < 0) {
    static const int rows_of[EMB_COUNT] = {0, 1, 2, -1, -1};
    int64_t rows = idx == EMB_WORD  ? c->vocab_size
                   : idx == EMB_POS ? c->max_positions
                                    : c->type_vocab;
    *ndim = rows_of[idx] < 0 ? 1 : 2;
    shape[0] = *ndim == 1 ? h : rows, shape[1] = h;
    return;
  }
  switch (idx) {
    case L_I_W: *ndim = 2, shape[0] = in, shape[1] = h; break;
    case L_I_B: *ndim = 1, shape[0] = in; break;
    case L_D_W: *ndim = 2, shape[0] = h, shape[1] = in; break;
    case L_Q_W:
    case L_K_W:
    case L_V_W:
    case L_O_W: *ndim = 2, shape[0] = h, shape[1] = h; break;
    default: *ndim = 1, shape[0] = h; break;
  }
}

static hcq_status_t find_tensor(const minilm_safetensors_t *st, const minilm_config_t *c, int layer,
                                int idx, const minilm_tensor_t **out) {
  char name[256];
  if (layer < 0)
    snprintf(name, sizeof(name), "%s", k_emb_names[idx]);
  else
    snprintf(name, sizeof(name), "encoder.layer.%d.%s", layer, k_layer_names[idx]);
  const minilm_tensor_t *t = minilm_safetensors_find(st, name);
  if (!t) {
    char prefixed[300];
    snprintf(prefixed, sizeof(prefixed), "bert.%s", name);
    t = minilm_safetensors_find(st, prefixed);
  }
  if (!t)
    return hcq_model_invalid(st->path, "tensor \"%s\" is missing (the config has %d layers)", name,
                             c->layers);
  int64_t shape[2];
  int ndim;
  expected_shape(c, layer, idx, shape, &ndim);
  if (t->dtype != MINILM_F32)
    return hcq_model_invalid(st->path, "tensor \"%s\" is %s, expected F32", name,
                             minilm_dtype_name(t->dtype));
  if (t->ndim != ndim || t->shape[0] != shape[0] || (ndim == 2 && t->shape[1] != shape[1])) {
    char want[64], got[96] = "";
    if (ndim == 2)
      snprintf(want, sizeof(want), "[%" PRId64 ", %" PRId64 "]", shape[0], shape[1]);
    else
      snprintf(want, sizeof(want), "[%" PRId64 "]", shape[0]);
    size_t o = 0;
    for (int i = 0; i < t->ndim && o < sizeof(got) - 24; i++)
      o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%" PRId64, i ? ", " : "", t->shape[i]);
    return hcq_model_invalid(st->path, "tensor \"%s\" has shape [%s], the config says %s", name,
                             got, want);
  }
  *out = t;
  return NULL;
}

hcq_status_t minilm_model_load(const char *dir, minilm_model_t *out) {
  memset(out, 0, sizeof(*out));
  minilm_config_t c;
  hcq_status_t s = read_config(dir, &c);
  if (s) return s;
  char path[4096];
  snprintf(path, sizeof(path), "%s/model.safetensors", dir);
  minilm_safetensors_t st;
  if ((s = minilm_safetensors_open(path, &st))) return s;
  const minilm_tensor_t *emb[EMB_COUNT], *(*lay)[L_COUNT] = calloc((size_t)c.layers, sizeof(*lay));
  if (!lay) s = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  uint64_t bytes = 0;
  for (int i = 0; i < EMB_COUNT && !s; i++)
    if (!(s = find_tensor(&st, &c, -1, i, &emb[i]))) bytes += emb[i]->end - emb[i]->begin;
  for (int l = 0; l < c.layers && !s; l++)
    for (int i = 0; i < L_COUNT && !s; i++)
      if (!(s = find_tensor(&st, &c, l, i, &lay[l][i]))) bytes += lay[l][i]->end - lay[l][i]->begin;
  if (!s && !(out->data = malloc(bytes)))
    s = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory for %" PRIu64 " bytes of weights", bytes);
  if (!s) {
    /* Copied rather than used in place: the data section need not be 4-byte aligned. */
    float *p = out->data;
    const float **emb_at[EMB_COUNT] = {&out->word_emb, &out->pos_emb, &out->type_emb,
                                       &out->emb_ln_w, &out->emb_ln_b};
    for (int i = 0; i < EMB_COUNT; i++) {
      size_t n = (size_t)(emb[i]->end - emb[i]->begin);
      memcpy(p, st.data + emb[i]->begin, n);
      *emb_at[i] = p;
      p += n / 4;
    }
    for (int l = 0; l < c.layers; l++) {
      minilm_layer_weights_t *w = &out->layer[l];
      const float **at[L_COUNT] = {&w->q_w, &w->q_b, &w->k_w,   &w->k_b,   &w->v_w, &w->v_b,
                                   &w->o_w, &w->o_b, &w->ln1_w, &w->ln1_b, &w->i_w, &w->i_b,
                                   &w->d_w, &w->d_b, &w->ln2_w, &w->ln2_b};
      for (int i = 0; i < L_COUNT; i++) {
        size_t n = (size_t)(lay[l][i]->end - lay[l][i]->begin);
        memcpy(p, st.data + lay[l][i]->begin, n);
        *at[i] = p;
        p += n / 4;
      }
    }
    out->data_floats = (size_t)(bytes / 4);
    out->config = c;
  }
  free(lay);
  minilm_safetensors_close(&st);
  if (s) minilm_model_free(out);
  return s;
}

void minilm_model_free(minilm_model_t *m) {
  free(m->data);
  memset(m, 0, sizeof(*m));
}
