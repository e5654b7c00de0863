/* The decoder on hcq: weights in device buffers, one step as a list of exec items whose operands
 * depend on the variable pos, run eagerly item by item or captured once and replayed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama2.h"
#include "model_kernels.h"
#include "model_status.h"
#include "model_time.h"

/* Embedded at build time: kernels.c (CPU), kernels.glsl (Vulkan), kernels.cu (CUDA), kernels.metal
 * (Metal). */
extern const char llama2_kernels_source[], llama2_kernels_glsl_source[],
    llama2_kernels_cuda_source[], llama2_kernels_metal_source[];

/* Rows per work-group of the matrix-vector kernels (even: rotary pairs stay in one group). Their
 * group size is rows x steps(inputs) threads (kernels.c): the device spreads a launch over its
 * threads when it has HCQ_CPU_MIN_PARALLEL work-items, which the 15m shape's larger products have
 * and the small shape's do not. */
enum { ROWS = 16, CLASSIFIER_ROWS = 32, ATT_CHUNK = 32, MAX_ITEM_BUFS = 9 };
/* On CUDA and Metal (kernels.cu, kernels.metal) a thread per output row, GROUP threads per
 * work-group: small groups give the small shape's products several groups to spread over a device's
 * cores. */
enum { GROUP = 32 };
/* Vulkan (kernels.glsl, written for lavapipe: README.md, "The GLSL kernels on lavapipe"): every
 * work-group is VK_LANES = 8 invocations, one llvmpipe vector, sharing sums by subgroup operations;
 * a matrix-vector group takes vk_rows() rows (the classifier's VK_CLS_ROWS: one load of the
 * normalised input serves more rows), attention one (heads sharing a key/value head, chunk), the
 * embedding and the argmax one group. */
enum { VK_LANES = 8, VK_CLS_ROWS = 32 };
/* Rows per Vulkan matrix-vector group: 16 where the products are large enough to keep 16 groups
 * or more (the group's input and RMS weights are read once for more rows), else 8. */
static int vk_rows(const llama2_config_t *c) { return c->dim >= 256 ? 16 : 8; }
/* Heads per Vulkan attention group: the query heads that share a key/value head read its keys and
 * values once, as long as their queries and sums stay in registers (8 pieces of 8 floats a lane).
 */
static int vk_att_heads(const llama2_config_t *c) {
  int kv_mul = c->n_heads / c->n_kv_heads, pieces = (llama2_head_size(c) + 7) / 8;
  return kv_mul * pieces <= 8 ? kv_mul : 1;
}

// clang-format off
#define KERNELS(X)                      \
  X(EMBED, "llama_embed")               \
  X(QKV, "llama_qkv")                   \
  X(ATTN_PART, "llama_attn_part")       \
  X(ATTN_COMBINE, "llama_attn_combine") \
  X(WO, "llama_wo")                     \
  X(FFN_UP, "llama_ffn_up")             \
  X(FFN_DOWN, "llama_ffn_down")         \
  X(CLASSIFY, "llama_classify")         \
  X(ARGMAX, "llama_argmax")
// clang-format on

enum {
#define KERNEL_ENUM(name, entry) K_##name,
  KERNELS(KERNEL_ENUM)
#undef KERNEL_ENUM
      K_COUNT
};
static const char *const k_entries[K_COUNT] = {
#define KERNEL_ENTRY(name, entry) entry,
    KERNELS(KERNEL_ENTRY)
#undef KERNEL_ENTRY
};

/* Per device: its programs and scratch activations. */
typedef struct dev_state {
  hcq_device_t *dev;
  hcq_program_t *prog[K_COUNT];
  hcq_buffer_t *x, *xb, *q, *hb, *part, *rope;
} dev_state_t;

enum { W_RMS_ATT, W_Q, W_K, W_V, W_O, W_RMS_FFN, W_1, W_2, W_3, K_CACHE, V_CACHE, LAYER_BUFS };

/* Storage an exec item points into. */
typedef struct item_args {
  hcq_buffer_t *bufs[MAX_ITEM_BUFS];
  uint32_t outs[3];
  hcq_operand_t vals[2];
} item_args_t;

struct llama2_decoder {
  llama2_config_t c;
  hcq_device_kind_t kind;
  model_kernel_lang_t lang; /* of kind: the kernels and their geometry follow it */
  int ndev, split;          /* layers [0, split) on device 0, the rest on device 1 */
  dev_state_t d[2];
  hcq_buffer_t *(*layer)[LAYER_BUFS];
  hcq_buffer_t *emb, *cls, *rms_final, *logits, *best, *tokens;
  /* classifier groups [0, cls_split) on device 0, the rest on device 1 */
  int cls_groups, cls_rows, cls_split;
  /* Device 1's part of the classifier (two devices): its weights (only its rows are filled), final
   * norm, logits and best logits; views of both devices' logits and best from its first group on.
   */
  hcq_buffer_t *cls1, *rms_final1, *logits1, *best1, *views[4];
  hcq_expr_t *pos, *chunks;
  hcq_exec_item_t *items;
  item_args_t *args;
  size_t nitems, nkernels, batch_size;
  bool profile;
  hcq_jit_t *jit; /* the captured step */
};

/* Chunks of ATT_CHUNK positions that cover the sequence (MAX_CHUNKS in the kernels). */
static int att_chunks(const llama2_config_t *c) { return (c->seq_len + ATT_CHUNK - 1) / ATT_CHUNK; }

/* n floats (zeros when src is NULL). */
static hcq_status_t upload(hcq_device_t *dev, const float *src, size_t n, const char *label,
                           int layer, hcq_buffer_t **out) {
  return model_upload(dev, src, n * sizeof(float), label, layer, out);
}

/* The kernels in each language. */
static const char *const k_sources[MODEL_KERNELS_NONE] = {
    llama2_kernels_source, llama2_kernels_glsl_source, llama2_kernels_cuda_source,
    llama2_kernels_metal_source};

static hcq_status_t make_programs(llama2_decoder_t *m) {
  const llama2_config_t *c = &m->c;
  char defines[512];
  int n =
      snprintf(defines, sizeof(defines),
               "#define DIM %d\n#define HIDDEN %d\n#define KV_DIM %d\n#define N_HEADS %d\n#define "
               "KV_MUL %d\n"
               "#define HEAD_SIZE %d\n#define VOCAB %d\n#define SEQ_LEN %d\n#define ATT_CHUNK %d\n"
               "#define MAX_CHUNKS %d\n",
               c->dim, c->hidden_dim, llama2_kv_dim(c), c->n_heads, c->n_heads / c->n_kv_heads,
               llama2_head_size(c), c->vocab_size, c->seq_len, ATT_CHUNK, att_chunks(c));
  if (m->lang == MODEL_KERNELS_GLSL)
    n += snprintf(defines + n, sizeof(defines) - (size_t)n,
                  "#define LANES %d\n#define ROWS %d\n#define CLS_ROWS %d\n#define ATT_HEADS %d\n",
                  VK_LANES, vk_rows(c), VK_CLS_ROWS, vk_att_heads(c));
  else if (m->lang != MODEL_KERNELS_C)
    n += snprintf(defines + n, sizeof(defines) - (size_t)n, "#define GROUP %d\n", GROUP);
  /* A kernel that does not compile: hcq's message names the program, the device and the
   * compiler's. */
  for (int k = 0; k < K_COUNT; k++)
    for (int d = 0; d < m->ndev; d++)
      TRY(model_program_create(m->d[d].dev, m->lang, defines, NULL, k_sources[m->lang],
                               k_entries[k], &m->d[d].prog[k]));
  return NULL;
}

static hcq_status_t make_scratch(dev_state_t *s, const llama2_config_t *c, const float *rope) {
  size_t dim = (size_t)c->dim, chunks = (size_t)att_chunks(c);
  size_t hs = (size_t)llama2_head_size(c);
  TRY(upload(s->dev, NULL, dim, "x", -1, &s->x));
  TRY(upload(s->dev, NULL, dim, "xb", -1, &s->xb));
  TRY(upload(s->dev, NULL, dim, "q", -1, &s->q));
  TRY(upload(s->dev, NULL, (size_t)c->hidden_dim, "hb", -1, &s->hb));
  TRY(upload(s->dev, NULL, (size_t)c->n_heads * chunks * (hs + 2), "attention partials", -1,
             &s->part));
  return upload(s->dev, rope, (size_t)c->seq_len * hs, "rotary table", -1, &s->rope);
}

/* Every device's scratch buffers, with the rotary table. */
static hcq_status_t make_scratches(llama2_decoder_t *m) {
  const llama2_config_t *c = &m->c;
  /* Rotary table, per position and even element j of a head: cos and sin of pos * 10000^(-j/hs). */
  int hs = llama2_head_size(c);
  float *rope = malloc((size_t)c->seq_len * (size_t)hs * sizeof(float));
  if (!rope) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  for (int t = 0; t < c->seq_len; t++)
    for (int j = 0; j < hs; j += 2) {
      float freq = 1.0f / powf(10000.0f, (float)j / (float)hs);
      float angle = (float)t * freq;
      rope[(size_t)t * (size_t)hs + (size_t)j] = cosf(angle);
      rope[(size_t)t * (size_t)hs + (size_t)j + 1] = sinf(angle);
    }
  hcq_status_t st = NULL;
  for (int d = 0; d < m->ndev; d++)
    if ((st = make_scratch(&m->d[d], c, rope))) break;
  free(rope);
  return st;
}

static hcq_status_t make_buffers(llama2_decoder_t *m, const llama2_checkpoint_t *ck) {
  const llama2_config_t *c = &m->c;
  const llama2_weights_t *w = &ck->weights;
  size_t dim = (size_t)c->dim, hid = (size_t)c->hidden_dim, kv = (size_t)llama2_kv_dim(c);
  size_t seq_pad = (size_t)att_chunks(c) * ATT_CHUNK;
  TRY(make_scratches(m));
  m->layer = calloc((size_t)c->n_layers, sizeof(*m->layer));
  if (!m->layer) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  for (int l = 0; l < c->n_layers; l++) {
    hcq_device_t *dev = m->d[l < m->split ? 0 : 1].dev;
    hcq_buffer_t **b = m->layer[l];
    size_t L = (size_t)l;
    TRY(upload(dev, w->rms_att + L * dim, dim, "rms_att", l, &b[W_RMS_ATT]));
    TRY(upload(dev, w->wq + L * dim * dim, dim * dim, "wq", l, &b[W_Q]));
    TRY(upload(dev, w->wk + L * dim * kv, dim * kv, "wk", l, &b[W_K]));
    TRY(upload(dev, w->wv + L * dim * kv, dim * kv, "wv", l, &b[W_V]));
    TRY(upload(dev, w->wo + L * dim * dim, dim * dim, "wo", l, &b[W_O]));
    TRY(upload(dev, w->rms_ffn + L * dim, dim, "rms_ffn", l, &b[W_RMS_FFN]));
    TRY(upload(dev, w->w1 + L * hid * dim, hid * dim, "w1", l, &b[W_1]));
    TRY(upload(dev, w->w2 + L * dim * hid, dim * hid, "w2", l, &b[W_2]));
    TRY(upload(dev, w->w3 + L * hid * dim, hid * dim, "w3", l, &b[W_3]));
    /* Whole chunks of positions: the CPU kernels store both caches in blocks of a chunk's positions
     * per element of a kv head, and run attention along those positions in vectors. */
    TRY(upload(dev, NULL, seq_pad * kv, "key cache", l, &b[K_CACHE]));
    TRY(upload(dev, NULL, seq_pad * kv, "value cache", l, &b[V_CACHE]));
  }
  hcq_device_t *d0 = m->d[0].dev;
  size_t vocab = (size_t)c->vocab_size;
  TRY(upload(d0, w->token_embedding, vocab * dim, "token embedding", -1, &m->emb));
  if (c->shared_classifier)
    m->cls = hcq_buffer_retain(m->emb);
  else
    TRY(upload(d0, w->classifier, vocab * dim, "classifier", -1, &m->cls));
  TRY(upload(d0, w->rms_final, dim, "rms_final", -1, &m->rms_final));
  TRY(upload(d0, NULL, vocab, "logits", -1, &m->logits));
  m->cls_rows = m->lang == MODEL_KERNELS_C      ? CLASSIFIER_ROWS
                : m->lang == MODEL_KERNELS_GLSL ? VK_CLS_ROWS
                                                : GROUP;
  m->cls_groups = (c->vocab_size + m->cls_rows - 1) / m->cls_rows;
  m->cls_split = m->cls_groups;
  TRY(upload(d0, NULL, 2 * (size_t)m->cls_groups, "best logits", -1, &m->best));
  if (m->ndev == 2 && m->lang == MODEL_KERNELS_C) {
    /* The classifier is the step's largest matrix: two CPU devices (each on its own cores, or on
     * its own rank) take half of its rows each (the first also embeds and picks the token), and the
     * second sends its best logits and logits. GPU devices keep it on the first: two of them are
     * often virtual devices of one GPU, and a Metal graph would leave each half a batch of one. */
    m->cls_split = (m->cls_groups + 1) / 2;
    hcq_device_t *d1 = m->d[1].dev;
    size_t r0 = (size_t)m->cls_split * (size_t)m->cls_rows, bytes = (vocab - r0) * sizeof(float);
    const float *wc = c->shared_classifier ? w->token_embedding : w->classifier;
    /* Only the rows device 1 computes (llama_classify reads them from its first group's on). */
    TRY(upload(d1, wc + r0 * dim, (vocab - r0) * dim, "classifier (second half)", -1, &m->cls1));
    TRY(upload(d1, w->rms_final, dim, "rms_final", -1, &m->rms_final1));
    TRY(upload(d1, NULL, vocab, "logits (second half)", -1, &m->logits1));
    TRY(upload(d1, NULL, 2 * (size_t)m->cls_groups, "best logits (second half)", -1, &m->best1));
    uint64_t best_at = 2 * (uint64_t)m->cls_split * sizeof(int32_t),
             best_bytes = 2 * (uint64_t)(m->cls_groups - m->cls_split) * 4;
    TRY(hcq_buffer_view_create(m->logits, r0 * sizeof(float), bytes, &m->views[0]));
    TRY(hcq_buffer_view_create(m->logits1, r0 * sizeof(float), bytes, &m->views[1]));
    TRY(hcq_buffer_view_create(m->best, best_at, best_bytes, &m->views[2]));
    TRY(hcq_buffer_view_create(m->best1, best_at, best_bytes, &m->views[3]));
  }
  TRY(hcq_buffer_create(d0, ((size_t)c->seq_len + 1) * sizeof(int32_t), &m->tokens));
  hcq_buffer_set_label(m->tokens, "tokens");
  return NULL;
}

static void add_transfer(llama2_decoder_t *m, hcq_buffer_t *dst, hcq_buffer_t *src) {
  hcq_exec_item_t *it = &m->items[m->nitems++];
  it->kind = HCQ_ITEM_TRANSFER;
  it->transfer = (hcq_transfer_item_t){dst, src, hcq_buffer_size(src)};
}

static hcq_operand_t groups(int rows, int per_group) {
  return hcq_imm((rows + per_group - 1) / per_group);
}

/* Threads of a group of `rows` rows with n inputs each: one per step of eight multiply-adds. */
static uint32_t matvec_threads(int rows, int n) { return (uint32_t)(rows * ((n + 7) / 8)); }

/* The launch geometry of kernel k: with the kernel sources, the one thing that differs by device
 * kind. CPU groups are blocks of rows (kernels.c); Vulkan groups are 8 invocations (VK_LANES);
 * CUDA and Metal threads are rows, in groups of GROUP. */
typedef struct geometry {
  hcq_operand_t grid[3];
  uint32_t local;
} geometry_t;

static geometry_t geometry(const llama2_decoder_t *m, int k) {
  const llama2_config_t *c = &m->c;
  int kv = llama2_kv_dim(c), hs = llama2_head_size(c);
  bool cpu = m->lang == MODEL_KERNELS_C;
  geometry_t g = {{hcq_imm(1), hcq_imm(1), hcq_imm(1)}, 1};
  if (m->lang == MODEL_KERNELS_GLSL) {
    g.local = VK_LANES;
    switch (k) {
      case K_QKV: g.grid[0] = groups(c->dim + 2 * kv, vk_rows(c)); break;
      case K_ATTN_PART:
        g.grid[0] = hcq_imm(c->n_heads / vk_att_heads(c)), g.grid[1] = hcq_sym(m->chunks);
        break;
      case K_ATTN_COMBINE: g.grid[0] = hcq_imm(c->n_heads); break;
      case K_WO:
      case K_FFN_DOWN: g.grid[0] = groups(c->dim, vk_rows(c)); break;
      case K_FFN_UP: g.grid[0] = groups(c->hidden_dim, vk_rows(c)); break;
      case K_CLASSIFY: g.grid[0] = hcq_imm(m->cls_groups); break;
      default: break; /* K_EMBED, K_ARGMAX: one group */
    }
    return g;
  }
  switch (k) {
    case K_EMBED:
      if (!cpu) g.grid[0] = groups(c->dim, GROUP), g.local = GROUP;
      break;
    case K_QKV:
      g.grid[0] = cpu ? groups(c->dim + 2 * kv, ROWS) : groups((c->dim + 2 * kv) / 2, GROUP);
      g.local = cpu ? matvec_threads(ROWS, c->dim) : GROUP;
      break;
    case K_ATTN_PART:
      g.grid[0] = hcq_imm(c->n_heads), g.grid[1] = hcq_sym(m->chunks);
      /* On the CPU the group size is the group's work in steps of eight multiply-adds, as for the
       * matrix products (the kernel does not read it): ATT_CHUNK scores and ATT_CHUNK weighted
       * values of a head, so that late positions' attention is shared between the threads. */
      g.local = cpu ? matvec_threads(2 * ATT_CHUNK, hs) : (uint32_t)hs;
      break;
    case K_ATTN_COMBINE: g.grid[0] = hcq_imm(c->n_heads), g.local = (uint32_t)hs; break;
    case K_WO:
    case K_FFN_DOWN:
      g.grid[0] = groups(c->dim, cpu ? ROWS : GROUP);
      g.local = cpu ? matvec_threads(ROWS, k == K_WO ? c->dim : c->hidden_dim) : GROUP;
      break;
    case K_FFN_UP:
      g.grid[0] = groups(c->hidden_dim, cpu ? ROWS : GROUP);
      g.local = cpu ? matvec_threads(ROWS, c->dim) : GROUP;
      break;
    case K_CLASSIFY:
      g.grid[0] = hcq_imm(m->cls_groups);
      g.local = cpu ? matvec_threads(CLASSIFIER_ROWS, c->dim) : GROUP;
      break;
    default: break; /* K_ARGMAX: one thread */
  }
  return g;
}

/* Appends one kernel item: grid global x local, buffers, the first nouts buffers written. */
static void add_kernel(llama2_decoder_t *m, const dev_state_t *s, int k, hcq_buffer_t *const *bufs,
                       size_t nbufs, size_t nouts, const hcq_operand_t *vals, size_t nvals) {
  geometry_t g = geometry(m, k);
  item_args_t *a = &m->args[m->nitems];
  hcq_exec_item_t *it = &m->items[m->nitems++];
  memcpy(a->bufs, bufs, nbufs * sizeof(*bufs));
  for (size_t i = 0; i < nouts; i++) a->outs[i] = (uint32_t)i;
  if (nvals) memcpy(a->vals, vals, nvals * sizeof(*vals));
  it->kind = HCQ_ITEM_KERNEL;
  it->kernel = (hcq_kernel_item_t){s->prog[k],
                                   a->bufs,
                                   nbufs,
                                   a->outs,
                                   nouts,
                                   a->vals,
                                   nvals,
                                   {g.grid[0], g.grid[1], g.grid[2]},
                                   {hcq_imm(g.local), hcq_imm(1), hcq_imm(1)}};
  m->nkernels++;
}

static hcq_status_t make_items(llama2_decoder_t *m) {
  const llama2_config_t *c = &m->c;
  TRY(hcq_var_create("pos", 0, c->seq_len - 1, &m->pos));
  hcq_expr_t *chunk = hcq_expr_const(ATT_CHUNK), *one = hcq_expr_const(1);
  hcq_expr_t *div = hcq_expr_binary(HCQ_EXPR_FLOORDIV, m->pos, chunk);
  m->chunks = hcq_expr_binary(HCQ_EXPR_ADD, div, one); /* pos // ATT_CHUNK + 1 */
  hcq_expr_release(chunk), hcq_expr_release(one), hcq_expr_release(div);
  if (!m->chunks) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  size_t cap = 4 + 6 * (size_t)c->n_layers + 2 + 4;
  m->items = calloc(cap, sizeof(*m->items));
  m->args = calloc(cap, sizeof(*m->args));
  if (!m->items || !m->args) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");

  hcq_operand_t pos[1] = {hcq_sym(m->pos)};
  dev_state_t *s0 = &m->d[0];
  add_kernel(m, s0, K_EMBED, (hcq_buffer_t *[]){s0->x, m->tokens, m->emb}, 3, 1, pos, 1);
  for (int l = 0; l < c->n_layers; l++) {
    int d = l < m->split ? 0 : 1;
    dev_state_t *s = &m->d[d];
    hcq_buffer_t **w = m->layer[l];
    if (d == 1 && l == m->split) add_transfer(m, s->x, s0->x);
    hcq_buffer_t *qkv_bufs[9] = {s->q,   w[K_CACHE], w[V_CACHE], s->x,   w[W_RMS_ATT],
                                 w[W_Q], w[W_K],     w[W_V],     s->rope};
    add_kernel(m, s, K_QKV, qkv_bufs, 9, 3, pos, 1);
    add_kernel(m, s, K_ATTN_PART, (hcq_buffer_t *[]){s->part, s->q, w[K_CACHE], w[V_CACHE]}, 4, 1,
               pos, 1);
    add_kernel(m, s, K_ATTN_COMBINE, (hcq_buffer_t *[]){s->xb, s->part}, 2, 1, pos, 1);
    add_kernel(m, s, K_WO, (hcq_buffer_t *[]){s->x, s->xb, w[W_O]}, 3, 1, NULL, 0);
    add_kernel(m, s, K_FFN_UP, (hcq_buffer_t *[]){s->hb, s->x, w[W_RMS_FFN], w[W_1], w[W_3]}, 5, 1,
               NULL, 0);
    add_kernel(m, s, K_FFN_DOWN, (hcq_buffer_t *[]){s->x, s->hb, w[W_2]}, 3, 1, NULL, 0);
  }
  if (m->split < c->n_layers) add_transfer(m, s0->x, m->d[1].x);
  hcq_operand_t first[2] = {hcq_imm(0), hcq_imm(m->cls_split)};
  if (m->cls1) {
    /* Device 1's half reads a copy of x made after x was sent: its copy queue sends first, so the
     * other device starts its half at once (an engine runs its compute queue until it blocks). */
    dev_state_t *s1 = &m->d[1];
    add_transfer(m, s1->xb, s1->x);
    add_kernel(m, s1, K_CLASSIFY,
               (hcq_buffer_t *[]){m->logits1, m->best1, s1->xb, m->rms_final1, m->cls1}, 5, 2,
               &first[1], 1);
    m->items[m->nitems - 1].kernel.global[0] = hcq_imm(m->cls_groups - m->cls_split);
  }
  add_kernel(m, s0, K_CLASSIFY, (hcq_buffer_t *[]){m->logits, m->best, s0->x, m->rms_final, m->cls},
             5, 2, &first[0], 1);
  m->items[m->nitems - 1].kernel.global[0] = hcq_imm(m->cls_split);
  if (m->cls1) {
    add_transfer(m, m->views[2], m->views[3]);
    add_transfer(m, m->views[0], m->views[1]);
  }
  hcq_operand_t argmax_vals[2] = {hcq_sym(m->pos), hcq_imm(m->cls_groups)};
  add_kernel(m, s0, K_ARGMAX, (hcq_buffer_t *[]){m->tokens, m->best}, 2, 1, argmax_vals, 2);
  return NULL;
}

/* Everything a new decoder holds, made in order; its destroy undoes what was made on a failure.
 * ranks: the devices are rank 0's and rank 1's KIND:0, else KIND:0 and KIND:1. */
static hcq_status_t make_decoder(llama2_decoder_t *m, const llama2_checkpoint_t *ck, bool ranks) {
  for (int d = 0; d < m->ndev; d++) {
    char name[32];
    if (ranks)
      snprintf(name, sizeof(name), "%d/%s:0", d, hcq_device_kind_name(m->kind));
    else
      snprintf(name, sizeof(name), "%s:%d", hcq_device_kind_name(m->kind), d);
    TRY(hcq_device_open(name, &m->d[d].dev));
  }
  TRY(make_programs(m));
  TRY(make_buffers(m, ck));
  TRY(make_items(m));
  TRY(llama2_decoder_reset(m));
  return llama2_decoder_sync(m);
}

hcq_status_t llama2_decoder_create(const llama2_checkpoint_t *ck,
                                   const llama2_decoder_options_t *options,
                                   llama2_decoder_t **out) {
  *out = NULL;
  int ndev = options && options->devices ? options->devices : 1;
  if (ndev != 1 && ndev != 2)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llama2 decoder: %d devices (expected 1 or 2)",
                           ndev);
  llama2_decoder_t *m = calloc(1, sizeof(*m));
  if (!m) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating the decoder");
  m->c = ck->config;
  m->ndev = ndev;
  m->split = ndev == 2 ? m->c.n_layers - m->c.n_layers / 2 : m->c.n_layers;
  m->batch_size = options ? options->batch_size : 0;
  m->profile = options && options->profile;
  m->kind = options ? options->kind : HCQ_DEVICE_CPU;
  m->lang = model_kernel_lang(m->kind);
  const char *body;
  hcq_status_t refused = model_kernel_source("llama2 decoder", k_sources, m->kind, &body);
  if (refused) {
    free(m);
    return refused;
  }
  hcq_status_t st = make_decoder(m, ck, options && options->ranks == 2);
  if (st) {
    hcq_status_destroy(llama2_decoder_destroy(m));
    return hcq_status_annotate(st, "llama2 decoder");
  }
  *out = m;
  return NULL;
}

hcq_status_t llama2_decoder_destroy(llama2_decoder_t *m) {
  if (!m) return NULL;
  hcq_status_t st = NULL;
  /* a failure here: still running, so everything stays alive */
  for (int d = 0; d < m->ndev; d++)
    if (m->d[d].dev) TRY(hcq_device_synchronize(m->d[d].dev));
  if (m->jit) TRY(hcq_jit_destroy(m->jit));
  m->jit = NULL;
  free(m->items);
  free(m->args);
  hcq_expr_release(m->chunks);
  hcq_expr_release(m->pos);
  if (m->layer)
    for (int l = 0; l < m->c.n_layers; l++)
      for (int i = 0; i < LAYER_BUFS; i++) hcq_buffer_release(m->layer[l][i]);
  free(m->layer);
  hcq_buffer_t *shared[] = {m->emb,      m->cls,      m->rms_final,  m->logits,  m->best,
                            m->tokens,   m->cls1,     m->rms_final1, m->logits1, m->best1,
                            m->views[0], m->views[1], m->views[2],   m->views[3]};
  for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++) hcq_buffer_release(shared[i]);
  for (int d = 0; d < m->ndev; d++) {
    dev_state_t *s = &m->d[d];
    hcq_buffer_t *scratch[] = {s->x, s->xb, s->q, s->hb, s->part, s->rope};
    for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++)
      hcq_buffer_release(scratch[i]);
    for (int k = 0; k < K_COUNT; k++) hcq_program_release(s->prog[k]);
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

hcq_status_t llama2_decoder_reset(llama2_decoder_t *m) {
  int32_t bos = 1;
  return hcq_buffer_copyin(m->tokens, 0, &bos, sizeof(bos));
}

static hcq_status_t check_pos(const llama2_decoder_t *m, int pos) {
  if (pos < 0 || pos >= m->c.seq_len)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "llama2 decoder: position %d is outside 0..%d (seq_len %d)", pos,
                           m->c.seq_len - 1, m->c.seq_len);
  return NULL;
}

hcq_status_t llama2_decoder_set_token(llama2_decoder_t *m, int pos, int32_t token) {
  TRY(check_pos(m, pos));
  TRY(llama2_decoder_sync(m));
  return hcq_buffer_copyin(m->tokens, (size_t)pos * sizeof(int32_t), &token, sizeof(token));
}

hcq_status_t llama2_decoder_step_eager(llama2_decoder_t *m, int pos) {
  TRY(check_pos(m, pos));
  hcq_var_value_t v = {m->pos, pos};
  for (size_t i = 0; i < m->nitems; i++) TRY(hcq_exec_item_run(&m->items[i], &v, 1));
  return NULL;
}

hcq_status_t llama2_decoder_capture(llama2_decoder_t *m, int pos) {
  TRY(check_pos(m, pos));
  if (m->jit) {
    TRY(hcq_jit_destroy(m->jit));
    m->jit = NULL;
  }
  hcq_var_value_t v = {m->pos, pos};
  hcq_capture_t *cap;
  TRY(hcq_capture_begin(&cap));
  for (size_t i = 0; i < m->nitems; i++) {
    hcq_status_t st = hcq_exec_item_run(&m->items[i], &v, 1);
    if (st) {
      hcq_capture_abort(cap);
      return st;
    }
  }
  hcq_jit_options_t opts = {m->batch_size ? m->batch_size : m->nitems, m->profile, false};
  return hcq_capture_end(cap, NULL, 0, &v, 1, &opts, &m->jit);
}

/* Without waiting: the library keeps a few replays of one graph in flight, so the host queues the
 * next step while the devices run this one, as eager launches do. */
hcq_status_t llama2_decoder_step_graph(llama2_decoder_t *m, int pos) {
  if (!m->jit)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "llama2 decoder: no captured step to replay");
  TRY(check_pos(m, pos));
  hcq_var_value_t v = {m->pos, pos};
  return hcq_jit_run(m->jit, NULL, 0, &v, 1, false, NULL);
}

hcq_status_t llama2_decoder_sync(llama2_decoder_t *m) {
  for (int d = 0; d < m->ndev; d++) TRY(hcq_device_synchronize(m->d[d].dev));
  return NULL;
}

hcq_status_t llama2_decoder_tokens(llama2_decoder_t *m, int32_t *out, int n) {
  if (n < 0 || n > m->c.seq_len)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "llama2 decoder: %d tokens asked, at most %d", n,
                           m->c.seq_len);
  TRY(llama2_decoder_sync(m));
  return n ? hcq_buffer_copyout(m->tokens, sizeof(int32_t), out, (size_t)n * sizeof(int32_t))
           : NULL;
}

hcq_status_t llama2_decoder_logits(llama2_decoder_t *m, float *out) {
  TRY(llama2_decoder_sync(m));
  return hcq_buffer_copyout(m->logits, 0, out, (size_t)m->c.vocab_size * sizeof(float));
}

size_t llama2_decoder_items_per_step(const llama2_decoder_t *m) { return m->nitems; }
size_t llama2_decoder_kernels_per_step(const llama2_decoder_t *m) { return m->nkernels; }
const hcq_jit_report_t *llama2_decoder_report(const llama2_decoder_t *m) {
  return m->jit ? hcq_jit_report(m->jit) : NULL;
}
const llama2_config_t *llama2_decoder_config(const llama2_decoder_t *m) { return &m->c; }
hcq_jit_t *llama2_decoder_jit(const llama2_decoder_t *m) { return m->jit; }

/* ---- timing (hcq demo, make bench) ---- */

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static double median(double *v, size_t n) {
  qsort(v, n, sizeof(double), hcq_model_cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static hcq_status_t step_one(llama2_decoder_t *m, bool graph, int pos) {
  return graph ? llama2_decoder_step_graph(m, pos) : llama2_decoder_step_eager(m, pos);
}

/* A warm-up and reps timed runs of steps steps from the start: each run's tokens a second. */
static hcq_status_t step_rates(llama2_decoder_t *m, bool graph, int steps, int reps, double *rate) {
  for (int r = 0; r <= reps; r++) {
    TRY(llama2_decoder_reset(m));
    TRY(llama2_decoder_sync(m));
    double t0 = now_us();
    for (int p = 0; p < steps; p++) TRY(step_one(m, graph, p));
    TRY(llama2_decoder_sync(m));
    if (r > 0) rate[r - 1] = steps / ((now_us() - t0) / 1e6);
  }
  return NULL;
}

/* steps steps from the start, each waited for: the host's time to issue each (us). */
static hcq_status_t host_times(llama2_decoder_t *m, bool graph, int steps, double *host) {
  TRY(llama2_decoder_reset(m));
  for (int p = 0; p < steps; p++) {
    TRY(llama2_decoder_sync(m));
    double t0 = now_us();
    TRY(step_one(m, graph, p));
    host[p] = now_us() - t0;
  }
  return NULL;
}

hcq_status_t llama2_decoder_time(llama2_decoder_t *m, bool graph, int steps, int reps,
                                 llama2_timing_t *out, int32_t *tokens) {
  if (!m || !out)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llama2_decoder_time: NULL argument");
  if (reps < 1 || reps > LLAMA2_MAX_REPS)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "llama2_decoder_time: %d repetitions, expected 1..%d",
                           reps, LLAMA2_MAX_REPS);
  if (steps < 1 || steps > m->c.seq_len)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "llama2_decoder_time: %d steps, expected 1..%d", steps,
                           m->c.seq_len);
  double rate[LLAMA2_MAX_REPS], *host = malloc((size_t)steps * sizeof(double));
  if (!host) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  hcq_status_t st;
  if ((st = step_rates(m, graph, steps, reps, rate))) goto done;
  if ((st = host_times(m, graph, steps, host))) goto done;
  if (tokens && (st = llama2_decoder_tokens(m, tokens, steps))) goto done;
  out->tok_s = median(rate, (size_t)reps);
  out->host_us = median(host, (size_t)steps);
done:
  free(host);
  return st;
}
