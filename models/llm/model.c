/* The llama model in a GGUF file: its dimensions from the metadata, every tensor checked against
 * them. Nothing here is sized for one model: whatever the metadata says, within sane bounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm.h"
#include "model_status.h"

/* A key under the architecture's prefix ("llama.block_count"). */
static const char *key(char *buf, size_t size, const char *suffix) {
  snprintf(buf, size, "llama.%s", suffix);
  return buf;
}

static hcq_status_t get_dim(const gguf_file_t *g, const char *suffix, uint32_t lo, uint32_t hi, bool required,
                            uint32_t *out) {
  char k[96];
  hcq_status_t st = required ? gguf_get_u32(g, key(k, sizeof(k), suffix), out)
                             : gguf_get_u32_or(g, key(k, sizeof(k), suffix), out);
  if (st) return st;
  if (*out < lo || *out > hi)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: %s is %u (expected %u to %u)", gguf_path(g), k, *out, lo, hi);
  return NULL;
}

static hcq_status_t read_config(const gguf_file_t *g, llm_config_t *c) {
  gguf_str_t arch;
  hcq_status_t st = gguf_get_str(g, "general.architecture", &arch);
  if (st) return st;
  if (arch.len != 5 || memcmp(arch.ptr, "llama", 5))
    return hcq_status_make(HCQ_UNIMPLEMENTED, "%s: general.architecture is \"%.*s\": hcq generate runs llama models",
                           gguf_path(g), (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
  uint32_t layers, dim, ffn, heads, kv_heads = 0, ctx = 4096, rope_dim = 0, v;
  TRY(get_dim(g, "block_count", 1, 1024, true, &layers));
  TRY(get_dim(g, "embedding_length", 2, 65536, true, &dim));
  TRY(get_dim(g, "feed_forward_length", 1, 262144, true, &ffn));
  TRY(get_dim(g, "attention.head_count", 1, 1024, true, &heads));
  kv_heads = heads;
  TRY(get_dim(g, "attention.head_count_kv", 1, 1024, false, &kv_heads));
  TRY(get_dim(g, "context_length", 1, 1u << 24, false, &ctx));
  const char *path = gguf_path(g);
  if (dim % heads)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: llama.embedding_length %u is not a multiple of llama.attention.head_count %u",
                           path, dim, heads);
  if (heads % kv_heads)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: llama.attention.head_count %u is not a multiple of llama.attention.head_count_kv %u",
                           path, heads, kv_heads);
  uint32_t head_dim = dim / heads;
  if (head_dim % 2)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: the head size %u (llama.embedding_length %u / llama.attention.head_count %u) is odd (rotary embeddings rotate pairs)",
                           path, head_dim, dim, heads);
  char k[96];
  const char *same[] = {"attention.key_length", "attention.value_length"};
  for (int i = 0; i < 2; i++) {
    v = head_dim;
    TRY(gguf_get_u32_or(g, key(k, sizeof(k), same[i]), &v));
    if (v != head_dim)
      return hcq_status_make(HCQ_UNIMPLEMENTED, "%s: %s is %u, not the head size %u (embedding_length / head_count)", path, k, v,
                             head_dim);
  }
  rope_dim = head_dim;
  TRY(gguf_get_u32_or(g, key(k, sizeof(k), "rope.dimension_count"), &rope_dim));
  if (rope_dim == 0 || rope_dim > head_dim || rope_dim % 2)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: llama.rope.dimension_count is %u (expected an even number up to the head size %u)",
                           path, rope_dim, head_dim);
  c->rope_base = 10000.0f;
  c->norm_eps = 1e-5f;
  TRY(gguf_get_f32_or(g, key(k, sizeof(k), "rope.freq_base"), &c->rope_base));
  TRY(gguf_get_f32_or(g, key(k, sizeof(k), "attention.layer_norm_rms_epsilon"), &c->norm_eps));
  if (!(c->rope_base > 1.0f && c->rope_base < 1e12f))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: llama.rope.freq_base is %g (expected above 1)", path, c->rope_base);
  if (!(c->norm_eps > 0.0f && c->norm_eps < 1.0f))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: llama.attention.layer_norm_rms_epsilon is %g (expected between 0 and 1)",
                           path, c->norm_eps);
  gguf_str_t scaling = {"none", 4};
  if (gguf_find_kv(g, key(k, sizeof(k), "rope.scaling.type"))) TRY(gguf_get_str(g, k, &scaling));
  float factor = 1.0f;
  TRY(gguf_get_f32_or(g, key(k, sizeof(k), "rope.scaling.factor"), &factor));
  if (!(scaling.len == 4 && !memcmp(scaling.ptr, "none", 4)))
    return hcq_status_make(HCQ_UNIMPLEMENTED, "%s: llama.rope.scaling.type is \"%.*s\" (factor %g): rope scaling is not supported",
                           path, (int)(scaling.len > 32 ? 32 : scaling.len), scaling.ptr, factor);
  if (factor != 0.0f && factor != 1.0f)
    return hcq_status_make(HCQ_UNIMPLEMENTED, "%s: llama.rope.scaling.factor is %g: rope scaling is not supported", path, factor);
  *c = (llm_config_t){(int)dim,      (int)ffn,      (int)layers, (int)heads, (int)kv_heads, (int)head_dim,
                      (int)rope_dim, 0,             (int)ctx,    c->rope_base, c->norm_eps, false};
  return NULL;
}

/* Marks and checks one tensor: present (unless optional), this shape, a type the kernels read. */
static hcq_status_t tensor(const gguf_file_t *g, bool *used, const char *name, uint64_t ne0, uint64_t ne1, bool norm,
                           bool optional, const gguf_tensor_t **out) {
  *out = gguf_find_tensor(g, name);
  if (!*out) {
    if (optional) return NULL;
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: no tensor \"%s\" (a llama model has one)", gguf_path(g), name);
  }
  used[*out - gguf_tensor_at(g, 0)] = true;
  const gguf_tensor_t *t = *out;
  uint32_t dims = ne1 ? 2 : 1;
  if (t->n_dims != dims || t->ne[0] != ne0 || (ne1 && t->ne[1] != ne1)) {
    char want[64], got[96];
    if (ne1) snprintf(want, sizeof(want), "[%llu, %llu]", (unsigned long long)ne0, (unsigned long long)ne1);
    else snprintf(want, sizeof(want), "[%llu]", (unsigned long long)ne0);
    int n = snprintf(got, sizeof(got), "[%llu", (unsigned long long)t->ne[0]);
    for (uint32_t d = 1; d < t->n_dims; d++) n += snprintf(got + n, sizeof(got) - (size_t)n, ", %llu", (unsigned long long)t->ne[d]);
    snprintf(got + n, sizeof(got) - (size_t)n, "]");
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: tensor \"%s\" has shape %s; the metadata implies %s", gguf_path(g), name,
                           got, want);
  }
  if (norm && t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16 && t->type != GGML_TYPE_BF16)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: tensor \"%s\" is %s (norm weights must be F32, F16 or BF16)", gguf_path(g), name,
                           ggml_type_name(t->type));
  return NULL;
}

static hcq_status_t read_tensors(llm_model_t *m) {
  const gguf_file_t *g = m->file;
  llm_config_t *c = &m->config;
  size_t nt = gguf_tensor_count(g);
  bool *used = calloc(nt ? nt : 1, sizeof(bool));
  if (!used) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  hcq_status_t st = NULL;
  const gguf_tensor_t *emb = gguf_find_tensor(g, "token_embd.weight");
  if (!emb) st = hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: no tensor \"token_embd.weight\" (a llama model has one)", gguf_path(g));
  else if (emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > (1u << 22))
    st = hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: tensor \"token_embd.weight\" must be [embedding_length, vocabulary] with a vocabulary of 1 to 2^22",
                         gguf_path(g));
  if (!st) {
    c->vocab = (int)emb->ne[1];
    uint32_t v = (uint32_t)c->vocab;
    if ((st = gguf_get_u32_or(g, "llama.vocab_size", &v))) goto done;
    if (v != (uint32_t)c->vocab)
      st = hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: llama.vocab_size is %u but token_embd.weight has %d rows", gguf_path(g), v,
                           c->vocab);
  }
  if (!st) st = tensor(g, used, "token_embd.weight", (uint64_t)c->dim, (uint64_t)c->vocab, false, false, &m->token_embd);
  if (!st) st = tensor(g, used, "output_norm.weight", (uint64_t)c->dim, 0, true, false, &m->output_norm);
  if (!st) st = tensor(g, used, "output.weight", (uint64_t)c->dim, (uint64_t)c->vocab, false, true, &m->output);
  if (!st && !m->output) m->output = m->token_embd, c->tied_classifier = true;
  if (!st && !(m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers))))
    st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  uint64_t dim = (uint64_t)c->dim, kv = (uint64_t)llm_kv_dim(c), ffn = (uint64_t)c->ffn;
  for (int l = 0; l < c->n_layers && !st; l++) {
    llm_layer_t *L = &m->layers[l];
    struct {
      const char *name;
      uint64_t ne0, ne1;
      const gguf_tensor_t **out;
    } want[] = {
        {"attn_norm", dim, 0, &L->attn_norm}, {"attn_q", dim, dim, &L->wq},     {"attn_k", dim, kv, &L->wk},
        {"attn_v", dim, kv, &L->wv},          {"attn_output", dim, dim, &L->wo}, {"ffn_norm", dim, 0, &L->ffn_norm},
        {"ffn_gate", dim, ffn, &L->w_gate},   {"ffn_up", dim, ffn, &L->w_up},   {"ffn_down", ffn, dim, &L->w_down},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]) && !st; i++) {
      char name[64];
      snprintf(name, sizeof(name), "blk.%d.%s.weight", l, want[i].name);
      st = tensor(g, used, name, want[i].ne0, want[i].ne1, want[i].ne1 == 0, false, want[i].out);
    }
  }
  for (size_t i = 0; i < nt && !st; i++)
    if (!used[i])
      st = hcq_status_make(HCQ_UNIMPLEMENTED, "%s: tensor \"%s\" is not part of the llama layout this decoder runs (%d layers)",
                           gguf_path(g), gguf_tensor_at(g, i)->name, c->n_layers);
done:
  free(used);
  return st;
}

hcq_status_t llm_model_from_gguf(gguf_file_t *file, llm_model_t **out) {
  *out = NULL;
  llm_model_t *m = calloc(1, sizeof(*m));
  if (!m) {
    gguf_close(file);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  }
  m->file = file;
  hcq_status_t st = read_config(file, &m->config);
  if (!st) st = read_tensors(m);
  if (st) {
    llm_model_close(m);
    return st;
  }
  gguf_str_t name;
  if (gguf_find_kv(file, "general.name") && !gguf_get_str(file, "general.name", &name)) {
    snprintf(m->name, sizeof(m->name), "%.*s", (int)(name.len < 127 ? name.len : 127), name.ptr);
  } else {
    const char *slash = strrchr(gguf_path(file), '/');
    snprintf(m->name, sizeof(m->name), "%s", slash ? slash + 1 : gguf_path(file));
  }
  *out = m;
  return NULL;
}

hcq_status_t llm_model_open(const char *path, llm_model_t **out) {
  *out = NULL;
  gguf_file_t *g;
  TRY(gguf_open(path, &g));
  return llm_model_from_gguf(g, out);
}

void llm_model_close(llm_model_t *m) {
  if (!m) return;
  gguf_close(m->file);
  free(m->layers);
  free(m);
}

void llm_model_weight_types(const llm_model_t *m, char *out, size_t size) {
  bool seen[64] = {false};
  int count = 0;
  const gguf_tensor_t *t;
  for (size_t i = 0; (t = gguf_tensor_at(m->file, i)); i++)
    if (t->n_dims == 2 && t->type < 64 && !seen[t->type]) seen[t->type] = true, count++;
  size_t n = 0;
  if (count > 1) n += (size_t)snprintf(out, size, "mixed (");
  bool first = true;
  for (int ty = 0; ty < 64 && n < size; ty++)
    if (seen[ty]) {
      n += (size_t)snprintf(out + n, size - n, "%s%s", first ? "" : ", ", ggml_type_name((uint32_t)ty));
      first = false;
    }
  if (count > 1 && n < size) snprintf(out + n, size - n, ")");
}
