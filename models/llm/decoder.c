/* The decoder on hcq: weights repacked into device buffers, the forward pass as exec items whose
 * operands depend on variables, run eagerly item by item or captured once and replayed.
 *
 * This file makes and releases the decoder: its devices, variables and buffers (each weight matrix
 * repacked once). decoder_items.c builds its two item lists, decoder_run.c runs them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decoder_internal.h"
#include "model_kernels.h"
#include "model_status.h"
#include "support.h"

enum { CHUNK = 32 };

/* ---- buffers ---- */

/* Where the devices' memory is the host's (HCQ_CAP_HOST_MEMORY: CPU devices, one process), a
 * buffer's address is its host pointer: the decoder writes weights, tokens and parameters there
 * directly (the devices idle), with no temporary copy and no staging buffers; elsewhere through
 * copies. */
static void *host_memory(const llm_decoder_t *m, hcq_buffer_t *buf) {
  void *p = NULL;
  if (m->direct) hcq_status_destroy(hcq_buffer_map(buf, &p)); /* NULL where it cannot be mapped */
  return p;
}

hcq_status_t llm_write_buffer(const llm_decoder_t *m, hcq_buffer_t *buf, uint64_t offset,
                              const void *src, uint64_t size) {
  uint8_t *p = host_memory(m, buf);
  if (!p) return hcq_buffer_copyin(buf, offset, src, size);
  memcpy(p + offset, src, size);
  return NULL;
}

/* A weight matrix (ne[1] rows of ne[0]) repacked into the kernels' layout: the CPU's 16-row
 * interleave (quant.h), or the GPU layout (gpu_abi.h). */
static hcq_status_t upload_matrix(const llm_decoder_t *m, hcq_device_t *dev, const gguf_tensor_t *t,
                                  const char *label, int layer, hcq_buffer_t **out) {
  bool cpu = model_kernel_lang(m->kind) == MODEL_KERNELS_C; /* the C kernels' layouts (repack.c) */
  void (*pack)(ggml_type_t, const void *, size_t, size_t, void *) = cpu ? llm_repack : llm_gpu_pack;
  size_t rows = (size_t)t->ne[1], cols = (size_t)t->ne[0];
  size_t bytes =
      cpu ? llm_repack_bytes(t->type, rows, cols) : llm_gpu_pack_bytes(t->type, rows, cols);
  TRY(model_upload(dev, NULL, bytes, label, layer, out));
  void *direct = host_memory(m, *out);
  if (direct) {
    pack(t->type, t->data, rows, cols, direct);
    return NULL;
  }
  void *tmp = malloc(bytes);
  if (!tmp) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory repacking %s", t->name);
  pack(t->type, t->data, rows, cols, tmp);
  hcq_status_t st = hcq_buffer_copyin(*out, 0, tmp, bytes);
  free(tmp);
  return st;
}

/* A norm's weights as floats. */
static hcq_status_t upload_vector(const llm_decoder_t *m, hcq_device_t *dev, const gguf_tensor_t *t,
                                  const char *label, int layer, hcq_buffer_t **out) {
  size_t n = (size_t)t->ne[0];
  TRY(model_upload(dev, NULL, n * sizeof(float), label, layer, out));
  float *tmp = malloc(n * sizeof(float));
  if (!tmp) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  llm_dequantize_row(t->type, t->data, tmp, n);
  hcq_status_t st = llm_write_buffer(m, *out, 0, tmp, n * sizeof(float));
  free(tmp);
  return st;
}

static size_t act_bytes(int rows, int cols) {
  return (size_t)rows * (size_t)((cols + 31) / 32) * sizeof(llm_act_block_t);
}

/* cos and sin of pos x base^(-2j / rope_dim) / factor_j for every position and pair j, in double
 * precision (factors: llama 3's rope_freqs, else 1). */
static hcq_status_t rope_table(llm_decoder_t *m, dev_state_t *s, double base, const float *factors,
                               const char *label, hcq_buffer_t **out) {
  const llm_config_t *c = &m->c;
  size_t pairs = (size_t)c->rope_dim / 2;
  TRY(model_upload(s->dev, NULL, (size_t)m->ctx_alloc * pairs * 8, label, -1, out));
  float *table = malloc((size_t)m->ctx_alloc * pairs * 2 * sizeof(float));
  if (!table) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  for (int p = 0; p < m->ctx_alloc; p++)
    for (size_t j = 0; j < pairs; j++) {
      double theta =
          p * pow(base, -2.0 * (double)j / c->rope_dim) / (factors ? (double)factors[j] : 1.0);
      table[((size_t)p * pairs + j) * 2] = (float)cos(theta);
      table[((size_t)p * pairs + j) * 2 + 1] = (float)sin(theta);
    }
  hcq_status_t st = llm_write_buffer(m, *out, 0, table, (size_t)m->ctx_alloc * pairs * 8);
  free(table);
  return st;
}

static hcq_status_t make_scratch(llm_decoder_t *m, dev_state_t *s, const float *rope_factors) {
  const llm_config_t *c = &m->c;
  size_t rows = (size_t)m->max_batch, dim = (size_t)c->dim, qd = (size_t)llm_q_dim(c);
  TRY(model_upload(s->dev, NULL, rows * dim * 4, "x", -1, &s->x));
  TRY(model_upload(s->dev, NULL, rows * dim * 4, "x normed", -1, &s->xf));
  TRY(model_upload(s->dev, NULL, act_bytes(m->max_batch, c->dim), "x quantized", -1, &s->xq));
  TRY(model_upload(s->dev, NULL, rows * qd * 4, "q", -1, &s->q));
  TRY(model_upload(s->dev, NULL, rows * qd * 4, "attention", -1, &s->att));
  TRY(model_upload(s->dev, NULL, act_bytes(m->max_batch, (int)qd), "attention quantized", -1,
                   &s->attq));
  TRY(model_upload(s->dev, NULL, rows * (size_t)c->ffn * 4, "h", -1, &s->hf));
  TRY(model_upload(s->dev, NULL, act_bytes(m->max_batch, c->ffn), "h quantized", -1, &s->hq));
  /* a batch decoder's info goes on with its rows and the choosing rows' list (kernels.c, BATCH) */
  size_t info_bytes = m->slots ? 16 + 2 * LLM_BATCH_REGION_WORDS(rows) * 4 : 64;
  TRY(model_upload(s->dev, NULL, info_bytes < 64 ? 64 : info_bytes, "pass info", -1, &s->info));
  if (c->rope_neox || c->qk_norm)
    TRY(model_upload(s->dev, NULL, rows * (size_t)llm_kv_dim(c) * 4, "k before rope", -1,
                     &s->kraw));
  if (c->post_norms) TRY(model_upload(s->dev, NULL, rows * dim * 4, "layer output", -1, &s->xb));
  TRY(rope_table(m, s, c->rope_base, rope_factors, "rotary table", &s->rope));
  if (c->swa_window)
    TRY(rope_table(m, s, c->rope_base_swa, rope_factors, "sliding-window rotary table",
                   &s->rope_swa));
  return NULL;
}

static hcq_status_t make_buffers(llm_decoder_t *m, const llm_model_t *model) {
  const llm_config_t *c = &m->c;
  float *factors = NULL;
  if (model->rope_freqs) {
    if (!(factors = malloc((size_t)c->rope_dim / 2 * sizeof(float))))
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
    llm_dequantize_row(model->rope_freqs->type, model->rope_freqs->data, factors,
                       (size_t)c->rope_dim / 2);
  }
  hcq_status_t st = NULL;
  for (int d = 0; d < m->ndev; d++)
    if ((st = make_scratch(m, &m->d[d], factors))) break;
  free(factors);
  if (st) return st;
  hcq_device_t *d0 = m->d[0].dev;
  /* the CPU's layouts or the GPUs' (quant.h: they differ for Q5_0) */
  bool c_kernels = model_kernel_lang(m->kind) == MODEL_KERNELS_C;
  llm_layout_t (*layout_of)(ggml_type_t) = c_kernels ? llm_layout_of : llm_gpu_layout_of;
  m->emb_layout = layout_of(model->token_embd->type);
  m->cls_layout = layout_of(model->output->type);
  TRY(upload_matrix(m, d0, model->token_embd,
                    c->tied_classifier ? "embedding and classifier" : "embedding", -1, &m->emb));
  if (c->tied_classifier)
    m->cls = hcq_buffer_retain(m->emb);
  else
    TRY(upload_matrix(m, d0, model->output, "classifier", -1, &m->cls));
  TRY(upload_vector(m, d0, model->output_norm, "output norm", -1, &m->out_norm));
  m->cls_groups = (c->vocab + llm_cls_rows(m->kind) - 1) / llm_cls_rows(m->kind);
  /* Mapped where the device has such memory: the host reads each token as its step finishes,
   * while the next step runs (llm_generate). */
  /* a batch decoder's: each choosing row's token */
  size_t per = m->slots ? (size_t)m->slots : 1;
  /* a batch's: by parity */
  size_t token_count = (size_t)m->ctx_alloc + 1, batch_rows = 2 * (size_t)m->max_batch;
  if (m->slots && token_count < batch_rows) token_count = batch_rows;
  hcq_status_t mapped = hcq_buffer_create_mapped(d0, token_count * 4, &m->tokens);
  if (mapped && hcq_status_code(mapped) != HCQ_UNAVAILABLE) return mapped;
  hcq_status_destroy(mapped);
  if (m->tokens)
    hcq_buffer_set_label(m->tokens, "tokens");
  else
    TRY(model_upload(d0, NULL, token_count * 4, "tokens", -1, &m->tokens));
  TRY(model_upload(d0, NULL, per * (size_t)c->vocab * 4, "logits", -1, &m->logits));
  TRY(model_upload(d0, NULL, per * (size_t)m->cls_groups * 8, "best logits", -1, &m->best));
  TRY(model_upload(d0, NULL, m->slots ? batch_rows * LLM_SAMPLER_BYTES : LLM_SAMPLER_BYTES,
                   "sampler", -1, &m->params));
  TRY(model_upload(d0, NULL, per * (size_t)c->vocab * 16, "sampler scratch", -1, &m->scratch));
  if (m->slots)
    TRY(model_upload(d0, NULL, per * (size_t)m->ctx_alloc * 4, "token history", -1, &m->history));
  if (!(m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers))))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  size_t cache = (size_t)c->n_kv_heads * (size_t)m->ctx_alloc * (size_t)c->head_dim * 4;
  cache *= (size_t)(m->slots ? m->slots : 1); /* a batch decoder's: a slot after the other */
  for (int l = 0; l < c->n_layers; l++) {
    const llm_layer_t *L = &model->layers[l];
    layer_state_t *S = &m->layers[l];
    hcq_device_t *dev = m->d[l < m->split ? 0 : 1].dev;
    const gguf_tensor_t *mats[] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
    const char *names[] = {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"};
    for (int i = W_Q; i <= W_DOWN; i++) {
      S->layout[i] = layout_of(mats[i]->type);
      TRY(upload_matrix(m, dev, mats[i], names[i], l, &S->b[i]));
    }
    TRY(upload_vector(m, dev, L->attn_norm, "attention norm", l, &S->b[N_ATTN_NORM]));
    TRY(upload_vector(m, dev, L->ffn_norm, "ffn norm", l, &S->b[N_FFN_NORM]));
    const gguf_tensor_t *extra[] = {
        L->bq, L->bk, L->bv, L->q_norm, L->k_norm, L->post_attn_norm, L->post_ffn_norm};
    const char *extra_names[] = {
        "q bias", "k bias", "v bias", "q norm", "k norm", "post-attention norm", "post-ffn norm"};
    for (int i = 0; i < 7; i++)
      if (extra[i]) TRY(upload_vector(m, dev, extra[i], extra_names[i], l, &S->b[B_Q + i]));
    TRY(model_upload(dev, NULL, cache, "key cache", l, &S->b[K_CACHE]));
    TRY(model_upload(dev, NULL, cache, "value cache", l, &S->b[V_CACHE]));
  }
  return NULL;
}

/* ---- create, destroy ---- */

static int isa_cap(void) {
  const char *e = getenv("HCQ_LLM_KERNELS");
  if (!e || !*e || !strcmp(e, "auto") || !strcmp(e, "avx512")) return 3;
  if (!strcmp(e, "avx2")) return 2;
  if (!strcmp(e, "portable")) return 0;
  return -1;
}

/* The memory the host has for a decoder: $HCQ_LLM_MEMORY_BYTES (tests set it), else /proc/meminfo's
 * MemAvailable, else the physical memory; 0 when unknown. */
static uint64_t host_memory_available(void) {
  const char *env = getenv("HCQ_LLM_MEMORY_BYTES");
  if (env && *env) return strtoull(env, NULL, 10);
  FILE *f = fopen("/proc/meminfo", "r");
  char line[128];
  unsigned long long kib = 0;
  while (f && fgets(line, sizeof(line), f) && sscanf(line, "MemAvailable: %llu kB", &kib) != 1)
    kib = 0;
  if (f) fclose(f);
  if (kib) return kib * 1024ull;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

/* The caches' bytes, computed before anything is reserved: a context the host's memory cannot hold
 * is refused (the weights, already mapped, are not counted). Devices with their own memory check
 * their buffers when created. */
static hcq_status_t check_memory(const llm_config_t *c, hcq_device_kind_t kind, int ctx,
                                 int ctx_alloc, int slots) {
  uint64_t kv = (uint64_t)c->n_layers * 2 * (uint64_t)ctx_alloc * (uint64_t)llm_kv_dim(c) * 4 *
                (uint64_t)slots;
  uint64_t tables =
      (uint64_t)ctx_alloc * (uint64_t)c->rope_dim * 4 * 2 + ((uint64_t)ctx_alloc + 1) * 4;
  /* kernels run on the host */
  bool host_memory = hcq_device_kind_kernel_caps(kind) & HCQ_CAP_HOST_CALLABLE;
  uint64_t need = kv + tables, have = host_memory ? host_memory_available() : 0;
  if (!have || need <= have) return NULL;
  return hcq_status_make(HCQ_OUT_OF_RANGE,
                         "llm decoder: %d x a context of %d positions needs %.2f GB for its caches "
                         "(%d layers x 2 x %d "
                         "floats a position) and %.2f GB of memory is available: ask for fewer "
                         "positions (hcq generate "
                         "--ctx) or sequences",
                         slots, ctx, need / 1e9, c->n_layers, llm_kv_dim(c), have / 1e9);
}

/* A batch decoder: one device of a kind with batch kernels. */
static hcq_status_t check_batch_options(const llm_decoder_options_t *o, int ndev) {
  if (!o->slots) return NULL;
  if (o->slots < 0 || o->slots > LLM_MAX_SLOTS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm decoder: %d sequences (expected 1 to %d)",
                           o->slots, LLM_MAX_SLOTS);
  if (ndev != 1)
    return hcq_status_make(HCQ_UNIMPLEMENTED,
                           "llm decoder: batched decoding runs on one device, not %d", ndev);
  model_kernel_lang_t lang = model_kernel_lang(o->kind);
  if (lang != MODEL_KERNELS_C && lang != MODEL_KERNELS_GLSL)
    return hcq_status_make(HCQ_UNIMPLEMENTED,
                           "llm decoder: no batched decoding kernels for %s devices, which compile "
                           "%s (the batched kernels: C and GLSL)",
                           hcq_device_kind_name(o->kind), model_kernel_lang_name(lang));
  if (o->max_batch && o->max_batch < o->slots)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "llm decoder: %d rows a step cannot hold %d sequences' tokens",
                           o->max_batch, o->slots);
  return NULL;
}

/* What the options and the model ask for, checked before anything is made. */
typedef struct decoder_shape {
  int ndev, isa_cap, ctx, ctx_alloc, max_batch;
} decoder_shape_t;

static hcq_status_t check_options(const llm_model_t *model, const llm_decoder_options_t *opts,
                                  decoder_shape_t *out) {
  int ndev = opts->ranks == 2 ? 2 : opts->devices ? opts->devices : 1;
  if (ndev != 1 && ndev != 2)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm decoder: %d devices (expected 1 or 2)",
                           opts->devices);
  if (model_kernel_lang(opts->kind) == MODEL_KERNELS_NONE)
    return hcq_status_make(HCQ_UNIMPLEMENTED,
                           "llm decoder: no kernels for %s devices (the kernels: C, GLSL, CUDA C, "
                           "MSL)",
                           hcq_device_kind_name(opts->kind));
  int cap = isa_cap();
  if (cap < 0)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "HCQ_LLM_KERNELS=\"%s\": expected auto, avx512, avx2 or portable",
                           getenv("HCQ_LLM_KERNELS"));
  const llm_config_t *c = &model->config;
  /* every kind's kernels have every architecture's entries and flags (gpu_abi.h) */
  if (model_kernel_lang(opts->kind) != MODEL_KERNELS_C && c->head_dim % 4)
    return hcq_status_make(
        HCQ_UNIMPLEMENTED,
        "llm decoder: a head size of %d (the %s kernels read heads in 4-float vectors)",
        c->head_dim, hcq_device_kind_name(opts->kind));
  /* the architecture and every matrix's type on this kind (support.c) */
  TRY(llm_model_check(model->file, opts->kind));
  int ctx = opts->ctx ? opts->ctx : (c->ctx_train < 4096 ? c->ctx_train : 4096);
  if (ctx < 1 || ctx > (1 << 20))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "llm decoder: a context of %d positions (expected 1 to 2^20)", ctx);
  int ctx_alloc = (ctx + CHUNK - 1) / CHUNK * CHUNK;
  TRY(check_batch_options(opts, ndev));
  TRY(check_memory(c, opts->kind, ctx, ctx_alloc, opts->slots ? opts->slots : 1));
  int max_batch = opts->max_batch ? opts->max_batch : 128;
  if (max_batch < 1 || max_batch > 4096)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "llm decoder: a prompt batch of %d tokens (expected 1 to 4096)",
                           max_batch);
  *out = (decoder_shape_t){ndev, cap, ctx, ctx_alloc, max_batch};
  return NULL;
}

/* KIND:0 and KIND:1, or rank 0's and rank 1's KIND:0. */
static hcq_status_t open_devices(llm_decoder_t *m) {
  for (int d = 0; d < m->ndev; d++) {
    char name[32];
    if (m->ranks == 2)
      snprintf(name, sizeof(name), "%d/%s:0", d, hcq_device_kind_name(m->kind));
    else
      snprintf(name, sizeof(name), "%s:%d", hcq_device_kind_name(m->kind), d);
    TRY(hcq_device_open(name, &m->d[d].dev));
  }
  m->direct = m->ranks == 1;
  for (int d = 0; d < m->ndev; d++)
    m->direct &= (hcq_device_caps(m->d[d].dev) & HCQ_CAP_HOST_MEMORY) != 0;
  return NULL;
}

/* Everything a new decoder holds, made in order; its destroy undoes what was made on a failure. */
static hcq_status_t make_decoder(llm_decoder_t *m, const llm_model_t *model) {
  TRY(open_devices(m));
  TRY(hcq_var_create("pos", 0, m->ctx - 1, &m->pos));
  /* a batch's: the step's parity */
  TRY(hcq_var_create("p0", 0, m->slots ? 1 : m->ctx - 1, &m->p0));
  TRY(hcq_var_create("n", 1, m->max_batch, &m->n));
  TRY(hcq_var_create("choose", 0, m->slots ? m->slots : 1, &m->choose));
  TRY(make_buffers(m, model));
  TRY(llm_build_item_lists(m));
  TRY(llm_decoder_set_sampler(m, &(llm_sampler_t){0, 1, 0, 0}));
  /* Under two ranks only rank 0 holds the tokens (the other's handle of its device is remote). */
  void *tokens_host = NULL;
  if (m->reads_tokens) hcq_status_destroy(hcq_buffer_map(m->tokens, &tokens_host));
  m->tokens_host = tokens_host;
  for (int i = 0; i < LLM_STEPS_AHEAD; i++) TRY(hcq_fence_create(&m->fences[i]));
  return llm_decoder_sync(m);
}

hcq_status_t llm_decoder_create(const llm_model_t *model, const llm_decoder_options_t *o,
                                llm_decoder_t **out) {
  *out = NULL;
  if (!model) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_decoder_create: model is NULL");
  llm_decoder_options_t opts = o ? *o : (llm_decoder_options_t){0};
  decoder_shape_t shape = {0};
  TRY(check_options(model, &opts, &shape));
  llm_decoder_t *m = calloc(1, sizeof(*m));
  if (!m) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating the decoder");
  const llm_config_t *c = &model->config;
  m->c = *c;
  m->kind = opts.kind;
  m->ndev = shape.ndev;
  m->split = shape.ndev == 2 ? c->n_layers - c->n_layers / 2 : c->n_layers;
  m->ctx = shape.ctx;
  m->ctx_alloc = shape.ctx_alloc;
  m->slots = opts.slots;
  m->max_batch = shape.max_batch;
  m->isa_cap = shape.isa_cap;
  m->profile = opts.profile;
  m->ranks = opts.ranks == 2 ? 2 : 1;
  m->reads_tokens = m->ranks == 1 || opts.rank == 0;
  hcq_status_t st = make_decoder(m, model);
  if (st) {
    hcq_status_destroy(llm_decoder_destroy(m));
    return hcq_status_annotate(st, "llm decoder");
  }
  *out = m;
  return NULL;
}

hcq_status_t llm_decoder_destroy(llm_decoder_t *m) {
  if (!m) return NULL;
  hcq_status_t st = NULL;
  /* a failure here: still running, so everything stays alive */
  for (int d = 0; d < m->ndev; d++)
    if (m->d[d].dev) TRY(hcq_device_synchronize(m->d[d].dev));
  if (m->step_jit) TRY(hcq_jit_destroy(m->step_jit));
  m->step_jit = NULL;
  if (m->pass_jit) TRY(hcq_jit_destroy(m->pass_jit));
  m->pass_jit = NULL;
  llm_item_list_free(&m->step);
  llm_item_list_free(&m->pass);
  for (int i = 0; i < LLM_STEPS_AHEAD; i++) hcq_fence_destroy(m->fences[i]);
  for (int i = 0; i < m->nexprs; i++) hcq_expr_release(m->exprs[i]);
  hcq_expr_release(m->pos), hcq_expr_release(m->p0), hcq_expr_release(m->n),
      hcq_expr_release(m->choose);
  if (m->layers)
    for (int l = 0; l < m->c.n_layers; l++)
      for (int i = 0; i < LAYER_BUFS; i++) hcq_buffer_release(m->layers[l].b[i]);
  free(m->layers);
  hcq_buffer_t *shared[] = {m->emb,  m->cls,    m->out_norm, m->tokens, m->logits,
                            m->best, m->params, m->scratch,  m->history};
  for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++) hcq_buffer_release(shared[i]);
  for (int d = 0; d < m->ndev; d++) {
    dev_state_t *s = &m->d[d];
    hcq_buffer_t *scratch[] = {s->x,  s->xf,   s->xq,   s->q,    s->att, s->attq,    s->hf,
                               s->hq, s->rope, s->info, s->kraw, s->xb,  s->rope_swa};
    for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++)
      hcq_buffer_release(scratch[i]);
  }
  for (int i = 0; i < m->nprograms; i++) {
    hcq_program_release(m->programs[i].prog);
    free(m->programs[i].key);
  }
  for (int d = m->ndev - 1; d >= 0; d--) {
    hcq_status_t cst = m->d[d].dev ? hcq_device_close(m->d[d].dev) : NULL;
    if (!st)
      st = cst;
    else
      hcq_status_destroy(cst);
  }
  free(m);
  return st;
}

const llm_config_t *llm_decoder_config(const llm_decoder_t *m) { return &m->c; }
int llm_decoder_ctx(const llm_decoder_t *m) { return m->ctx; }
int llm_decoder_max_batch(const llm_decoder_t *m) { return m->max_batch; }
int llm_decoder_slots(const llm_decoder_t *m) { return m->slots; }
size_t llm_decoder_captures(const llm_decoder_t *m) { return m->captures; }
size_t llm_decoder_kernels_per_step(const llm_decoder_t *m) { return m->step.kernels; }
hcq_jit_t *llm_decoder_step_jit(const llm_decoder_t *m) { return m->step_jit; }
hcq_jit_t *llm_decoder_prefill_jit(const llm_decoder_t *m) { return m->pass_jit; }
