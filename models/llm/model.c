/* A language model in a GGUF file: its architecture and dimensions from the metadata, every tensor
 * checked against them. Nothing here is sized for one model: whatever the metadata says, within
 * sane bounds. What an architecture changes in the forward pass is a flag of llm_config_t (llm.h);
 * a key or tensor that would change the math in a way the decoder does not implement is refused by
 * name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm.h"
#include "model_status.h"
#include "support.h"

/* What each architecture is, as llama.cpp builds it (src/models/<arch>.cpp). */
typedef struct arch_info {
  const char *name;
  llm_arch_t arch;
  bool rope_neox, qkv_bias, qk_norm, post_norms, gelu, emb_scale, swa;
} arch_info_t;

static const arch_info_t ARCHS[] = {
    {"llama", LLM_ARCH_LLAMA, false, false, false, false, false, false, false},
    {"qwen2", LLM_ARCH_QWEN2, true, true, false, false, false, false, false},
    {"qwen3", LLM_ARCH_QWEN3, true, false, true, false, false, false, false},
    {"gemma3", LLM_ARCH_GEMMA3, true, false, true, true, true, true, true},
};
enum { NARCHS = sizeof(ARCHS) / sizeof(ARCHS[0]) };

const char *llm_arch_name(llm_arch_t arch) {
  for (int i = 0; i < NARCHS; i++)
    if (ARCHS[i].arch == arch) return ARCHS[i].name;
  return "unknown";
}

/* The metadata of one architecture: keys under its prefix ("gemma3.block_count"). */
typedef struct meta {
  const gguf_file_t *g;
  const char *path, *arch;
  char key[128];
} meta_t;

static const char *key(meta_t *M, const char *suffix) {
  snprintf(M->key, sizeof(M->key), "%s.%s", M->arch, suffix);
  return M->key;
}

static hcq_status_t get_dim(meta_t *M, const char *suffix, uint32_t lo, uint32_t hi, bool required,
                            uint32_t *out) {
  hcq_status_t st = required ? gguf_get_u32(M->g, key(M, suffix), out)
                             : gguf_get_u32_or(M->g, key(M, suffix), out);
  if (st) return st;
  if (*out < lo || *out > hi)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: %s is %u (expected %u to %u)", M->path,
                           M->key, *out, lo, hi);
  return NULL;
}

static hcq_status_t find_arch(const gguf_file_t *g, const arch_info_t **out) {
  gguf_str_t arch;
  TRY(gguf_get_str(g, "general.architecture", &arch));
  for (int i = 0; i < NARCHS; i++)
    if (arch.len == strlen(ARCHS[i].name) && !memcmp(arch.ptr, ARCHS[i].name, arch.len)) {
      *out = &ARCHS[i];
      return NULL;
    }
  return hcq_status_make(HCQ_UNIMPLEMENTED,
                         "%s: general.architecture is \"%.*s\": hcq generate runs llama, qwen2, "
                         "qwen3 and gemma3 models",
                         gguf_path(g), (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
}

/* Heads, head size (attention.key_length, else width / heads) and the rotary width. */
static hcq_status_t read_heads(meta_t *M, uint32_t dim, llm_config_t *c) {
  uint32_t heads, kv_heads, head_dim, v_len, rope_dim;
  TRY(get_dim(M, "attention.head_count", 1, 1024, true, &heads));
  kv_heads = heads;
  TRY(get_dim(M, "attention.head_count_kv", 1, 1024, false, &kv_heads));
  if (heads % kv_heads)
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "%s: %s.attention.head_count %u is not a multiple of %s.attention.head_count_kv %u",
        M->path, M->arch, heads, M->arch, kv_heads);
  bool has_len = gguf_find_kv(M->g, key(M, "attention.key_length")) != NULL;
  if (!has_len && dim % heads)
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "%s: %s.embedding_length %u is not a multiple of %s.attention.head_count %u", M->path,
        M->arch, dim, M->arch, heads);
  head_dim = has_len ? 0 : dim / heads;
  TRY(get_dim(M, "attention.key_length", 2, 4096, false, &head_dim));
  v_len = head_dim;
  TRY(get_dim(M, "attention.value_length", 1, 4096, false, &v_len));
  if (v_len != head_dim)
    return hcq_status_make(HCQ_UNIMPLEMENTED,
                           "%s: %s.attention.value_length %u differs from the key length %u",
                           M->path, M->arch, v_len, head_dim);
  if (head_dim % 2)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: the head size %u (%s.embedding_length %u / %s.attention.head_count "
                           "%u) is odd (rotary embeddings rotate pairs)",
                           M->path, head_dim, M->arch, dim, M->arch, heads);
  rope_dim = head_dim;
  TRY(gguf_get_u32_or(M->g, key(M, "rope.dimension_count"), &rope_dim));
  if (rope_dim == 0 || rope_dim > head_dim || rope_dim % 2)
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "%s: %s.rope.dimension_count is %u (expected an even number up to the head size %u)",
        M->path, M->arch, rope_dim, head_dim);
  c->n_heads = (int)heads, c->n_kv_heads = (int)kv_heads, c->head_dim = (int)head_dim,
  c->rope_dim = (int)rope_dim;
  return NULL;
}

/* The keys that would change the math in ways the decoder does not implement: refused, never
 * ignored. */
static hcq_status_t refuse_unimplemented(meta_t *M) {
  gguf_str_t scaling = {"none", 4};
  if (gguf_find_kv(M->g, key(M, "rope.scaling.type"))) TRY(gguf_get_str(M->g, M->key, &scaling));
  float factor = 1.0f;
  TRY(gguf_get_f32_or(M->g, key(M, "rope.scaling.factor"), &factor));
  if (!(scaling.len == 4 && !memcmp(scaling.ptr, "none", 4)))
    return hcq_status_make(
        HCQ_UNIMPLEMENTED,
        "%s: %s.rope.scaling.type is \"%.*s\" (factor %g): rope scaling is not supported", M->path,
        M->arch, (int)(scaling.len > 32 ? 32 : scaling.len), scaling.ptr, factor);
  if (factor != 0.0f && factor != 1.0f)
    return hcq_status_make(HCQ_UNIMPLEMENTED,
                           "%s: %s.rope.scaling.factor is %g: rope scaling is not supported",
                           M->path, M->arch, factor);
  uint32_t experts = 0;
  TRY(gguf_get_u32_or(M->g, key(M, "expert_count"), &experts));
  if (experts > 0)
    return hcq_status_make(HCQ_UNIMPLEMENTED,
                           "%s: %s.expert_count is %u: mixtures of experts are not supported",
                           M->path, M->arch, experts);
  const char *caps[] = {"attention.logit_softcapping", "final_logit_softcapping"};
  for (int i = 0; i < 2; i++) {
    float cap = 0.0f;
    TRY(gguf_get_f32_or(M->g, key(M, caps[i]), &cap));
    if (cap != 0.0f)
      return hcq_status_make(HCQ_UNIMPLEMENTED, "%s: %s is %g: logit soft-capping is not supported",
                             M->path, M->key, cap);
  }
  bool causal = true;
  TRY(gguf_get_bool_or(M->g, key(M, "attention.causal"), &causal));
  if (!causal)
    return hcq_status_make(HCQ_UNIMPLEMENTED,
                           "%s: %s is false: the decoder runs causal attention only", M->path,
                           M->key);
  return NULL;
}

/* Gemma 3's sliding window: llama.cpp fixes the pattern (5 sliding layers, then a global one) and
 * the sliding layers' rotary base (10000) in code; a file may name the base (rope.freq_base_swa).
 */
static hcq_status_t read_window(meta_t *M, const arch_info_t *a, llm_config_t *c) {
  c->swa_window = 0, c->swa_pattern = 1, c->rope_base_swa = c->rope_base;
  if (!a->swa) return NULL;
  uint32_t window = 0;
  TRY(get_dim(M, "attention.sliding_window", 0, 1u << 24, false, &window));
  if (!window) return NULL;
  c->swa_window = (int)window, c->swa_pattern = 6, c->rope_base_swa = 10000.0f;
  TRY(gguf_get_f32_or(M->g, key(M, "rope.freq_base_swa"), &c->rope_base_swa));
  if (!(c->rope_base_swa > 1.0f && c->rope_base_swa < 1e12f))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: %s is %g (expected above 1)", M->path, M->key,
                           c->rope_base_swa);
  return NULL;
}

static hcq_status_t read_config(const gguf_file_t *g, llm_config_t *c) {
  const arch_info_t *a = NULL;
  TRY(find_arch(g, &a));
  meta_t M = {g, gguf_path(g), a->name, {0}};
  uint32_t layers, dim, ffn, ctx = 4096;
  TRY(get_dim(&M, "block_count", 1, 1024, true, &layers));
  TRY(get_dim(&M, "embedding_length", 2, 65536, true, &dim));
  TRY(get_dim(&M, "feed_forward_length", 1, 262144, true, &ffn));
  TRY(get_dim(&M, "context_length", 1, 1u << 24, false, &ctx));
  *c = (llm_config_t){.dim = (int)dim,
                      .ffn = (int)ffn,
                      .n_layers = (int)layers,
                      .ctx_train = (int)ctx,
                      .arch = a->arch,
                      .rope_neox = a->rope_neox,
                      .qkv_bias = a->qkv_bias,
                      .qk_norm = a->qk_norm,
                      .post_norms = a->post_norms,
                      .gelu = a->gelu,
                      .emb_scale = a->emb_scale ? sqrtf((float)dim) : 1.0f};
  TRY(read_heads(&M, dim, c));
  /* llama.cpp's gemma3 scales queries by 1 / sqrt(dim / heads) for its 62-layer (27B) model only */
  int scale_by = a->arch == LLM_ARCH_GEMMA3 && layers == 62 ? (int)dim / c->n_heads : c->head_dim;
  c->attn_scale = 1.0f / sqrtf((float)scale_by);
  c->rope_base = 10000.0f;
  c->norm_eps = 1e-5f;
  TRY(gguf_get_f32_or(g, key(&M, "rope.freq_base"), &c->rope_base));
  if (!(c->rope_base > 1.0f && c->rope_base < 1e12f))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: %s is %g (expected above 1)", M.path, M.key,
                           c->rope_base);
  TRY(gguf_get_f32_or(g, key(&M, "attention.layer_norm_rms_epsilon"), &c->norm_eps));
  if (!(c->norm_eps > 0.0f && c->norm_eps < 1.0f))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: %s is %g (expected between 0 and 1)", M.path,
                           M.key, c->norm_eps);
  TRY(read_window(&M, a, c));
  return refuse_unimplemented(&M);
}

/* ---- tensors ---- */

typedef enum tensor_kind { T_MATRIX, T_VECTOR } tensor_kind_t;

/* Marks and checks one tensor: present (unless optional), this shape, a type the kernels read. */
static hcq_status_t tensor(const gguf_file_t *g, bool *used, const char *name, uint64_t ne0,
                           uint64_t ne1, bool optional, const gguf_tensor_t **out) {
  *out = gguf_find_tensor(g, name);
  if (!*out) {
    if (optional) return NULL;
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: no tensor \"%s\" (the architecture has one)",
                           gguf_path(g), name);
  }
  used[*out - gguf_tensor_at(g, 0)] = true;
  const gguf_tensor_t *t = *out;
  uint32_t dims = ne1 ? 2 : 1;
  if (t->n_dims != dims || t->ne[0] != ne0 || (ne1 && t->ne[1] != ne1)) {
    char want[64], got[96];
    if (ne1)
      snprintf(want, sizeof(want), "[%llu, %llu]", (unsigned long long)ne0,
               (unsigned long long)ne1);
    else
      snprintf(want, sizeof(want), "[%llu]", (unsigned long long)ne0);
    int n = snprintf(got, sizeof(got), "[%llu", (unsigned long long)t->ne[0]);
    for (uint32_t d = 1; d < t->n_dims; d++)
      n += snprintf(got + n, sizeof(got) - (size_t)n, ", %llu", (unsigned long long)t->ne[d]);
    snprintf(got + n, sizeof(got) - (size_t)n, "]");
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: tensor \"%s\" has shape %s; the metadata implies %s", gguf_path(g),
                           name, got, want);
  }
  if (!ne1 && t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16 && t->type != GGML_TYPE_BF16)
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "%s: tensor \"%s\" is %s (norm weights and biases must be F32, F16 or BF16)", gguf_path(g),
        name, ggml_type_name(t->type));
  if (ne1 && !llm_type_supported(t->type, HCQ_DEVICE_CPU))
    return hcq_status_make(HCQ_UNIMPLEMENTED,
                           "%s: tensor \"%s\" has type %s, which the decoder's kernels do not read",
                           gguf_path(g), name, ggml_type_name(t->type));
  return NULL;
}

typedef struct want {
  const char *name;
  uint64_t ne0, ne1;
  const gguf_tensor_t **out;
  bool present; /* in this architecture */
} want_t;

static hcq_status_t read_layer(const gguf_file_t *g, bool *used, const llm_config_t *c, int l,
                               llm_layer_t *L) {
  uint64_t dim = (uint64_t)c->dim, qd = (uint64_t)llm_q_dim(c), kv = (uint64_t)llm_kv_dim(c),
           ffn = (uint64_t)c->ffn, hd = (uint64_t)c->head_dim;
  want_t want[] = {
      {"attn_norm.weight", dim, 0, &L->attn_norm, true},
      {"attn_q.weight", dim, qd, &L->wq, true},
      {"attn_k.weight", dim, kv, &L->wk, true},
      {"attn_v.weight", dim, kv, &L->wv, true},
      {"attn_output.weight", qd, dim, &L->wo, true},
      {"ffn_norm.weight", dim, 0, &L->ffn_norm, true},
      {"ffn_gate.weight", dim, ffn, &L->w_gate, true},
      {"ffn_up.weight", dim, ffn, &L->w_up, true},
      {"ffn_down.weight", ffn, dim, &L->w_down, true},
      {"attn_q.bias", qd, 0, &L->bq, c->qkv_bias},
      {"attn_k.bias", kv, 0, &L->bk, c->qkv_bias},
      {"attn_v.bias", kv, 0, &L->bv, c->qkv_bias},
      {"attn_q_norm.weight", hd, 0, &L->q_norm, c->qk_norm},
      {"attn_k_norm.weight", hd, 0, &L->k_norm, c->qk_norm},
      {"post_attention_norm.weight", dim, 0, &L->post_attn_norm, c->post_norms},
      {"post_ffw_norm.weight", dim, 0, &L->post_ffn_norm, c->post_norms},
  };
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    if (!want[i].present) continue;
    char name[96];
    snprintf(name, sizeof(name), "blk.%d.%s", l, want[i].name);
    TRY(tensor(g, used, name, want[i].ne0, want[i].ne1, false, want[i].out));
  }
  return NULL;
}

static hcq_status_t read_embedding(const gguf_file_t *g, llm_config_t *c) {
  const gguf_tensor_t *emb = gguf_find_tensor(g, "token_embd.weight");
  if (!emb)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: no tensor \"token_embd.weight\" (the architecture has one)",
                           gguf_path(g));
  if (emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > (1u << 22))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: tensor \"token_embd.weight\" must be [embedding_length, "
                           "vocabulary] with a vocabulary of 1 to 2^22",
                           gguf_path(g));
  c->vocab = (int)emb->ne[1];
  uint32_t v = (uint32_t)c->vocab;
  char k[64];
  snprintf(k, sizeof(k), "%s.vocab_size", llm_arch_name(c->arch));
  TRY(gguf_get_u32_or(g, k, &v));
  if (v != (uint32_t)c->vocab)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: %s is %u but token_embd.weight has %d rows",
                           gguf_path(g), k, v, c->vocab);
  /* More rows than tokens is padding (Qwen pads to a multiple of 128); more tokens than rows would
   * let the tokenizer give ids the embedding does not have. */
  const gguf_kv_t *tokens = gguf_find_kv(g, "tokenizer.ggml.tokens");
  if (tokens && tokens->type == GGUF_ARRAY && tokens->count > (uint64_t)c->vocab)
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "%s: tokenizer.ggml.tokens holds %llu tokens but token_embd.weight has %d rows",
        gguf_path(g), (unsigned long long)tokens->count, c->vocab);
  return NULL;
}

/* A tensor nothing claimed: a layer past block_count contradicts the metadata (bad input); anything
 * else is part of a model this decoder does not run. */
static hcq_status_t unused_tensor(const gguf_file_t *g, const llm_config_t *c, const char *name) {
  int layer;
  if (sscanf(name, "blk.%d.", &layer) == 1 && layer >= c->n_layers)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: tensor \"%s\" belongs to layer %d, but %s.block_count is %d",
                           gguf_path(g), name, layer, llm_arch_name(c->arch), c->n_layers);
  return hcq_status_make(
      HCQ_UNIMPLEMENTED,
      "%s: tensor \"%s\" is not part of the %s layout this decoder runs (%d layers)", gguf_path(g),
      name, llm_arch_name(c->arch), c->n_layers);
}

static hcq_status_t read_tensors_into(llm_model_t *m, bool *used) {
  const gguf_file_t *g = m->file;
  llm_config_t *c = &m->config;
  TRY(read_embedding(g, c));
  TRY(tensor(g, used, "token_embd.weight", (uint64_t)c->dim, (uint64_t)c->vocab, false,
             &m->token_embd));
  TRY(tensor(g, used, "output_norm.weight", (uint64_t)c->dim, 0, false, &m->output_norm));
  TRY(tensor(g, used, "output.weight", (uint64_t)c->dim, (uint64_t)c->vocab, true, &m->output));
  if (!m->output) m->output = m->token_embd, c->tied_classifier = true;
  /* Llama 3's rotary frequency divisors (llama.cpp reads them for the llama architecture) */
  if (c->arch == LLM_ARCH_LLAMA) {
    TRY(tensor(g, used, "rope_freqs.weight", (uint64_t)c->rope_dim / 2, 0, true, &m->rope_freqs));
  }
  if (!(m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers))))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  for (int l = 0; l < c->n_layers; l++) TRY(read_layer(g, used, c, l, &m->layers[l]));
  size_t nt = gguf_tensor_count(g);
  for (size_t i = 0; i < nt; i++)
    if (!used[i]) return unused_tensor(g, c, gguf_tensor_at(g, i)->name);
  return NULL;
}

static hcq_status_t read_tensors(llm_model_t *m) {
  size_t nt = gguf_tensor_count(m->file);
  bool *used = calloc(nt ? nt : 1, sizeof(bool));
  if (!used) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  hcq_status_t st = read_tensors_into(m, used);
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
  hcq_status_t st;
  if ((st = read_config(file, &m->config)) || (st = read_tensors(m))) {
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
      n += (size_t)snprintf(out + n, size - n, "%s%s", first ? "" : ", ",
                            ggml_type_name((uint32_t)ty));
      first = false;
    }
  if (count > 1 && n < size) snprintf(out + n, size - n, ")");
}
