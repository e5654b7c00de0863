/* The decoder on hcq: weights repacked into device buffers, the forward pass as exec items whose
 * operands depend on variables, run eagerly item by item or captured once and replayed.
 *
 * Two item lists are built from one description (build_items): the decoding step (variable pos, one
 * token) and the prompt pass (variables p0 and n, up to max_batch tokens). Each is captured by its
 * first graph-mode call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_abi.h" /* the kernel ABI every kind follows */
#include "llm.h"
#include "model_status.h"
#include "quant.h"

/* Embedded at build time: kernels.c (CPU), kernels.glsl (Vulkan), kernels.cu (CUDA), kernels.metal (Metal). */
extern const char llm_kernels_source[], llm_kernels_glsl_source[], llm_kernels_cuda_source[], llm_kernels_metal_source[];

enum { MAX_ITEM_BUFS = 10, TILE = 8, CHUNK = 32, MAX_PROGRAMS = 64 };
/* A work-item, for the CPU device's choice to share a launch between its threads
 * (HCQ_CPU_MIN_PARALLEL work-items), stands for this many multiply-adds of 8-bit products. */
enum { MACS_PER_ITEM = 64 };
/* Vulkan (kernels.glsl, written for lavapipe; gpu_abi.h): work-groups of VK_LANES invocations (one
 * llvmpipe vector: sums across it are subgroup operations); products of VK_ROWS rows a group,
 * the classifier's VK_CLS_ROWS (one load of the input serves more rows); the sampler one group of
 * VK_SEL, so that its passes over the vocabulary stay far below lavapipe's 65,535 loop iterations
 * per invocation (docs/vulkan.md). */
enum { VK_LANES = 8, VK_ROWS = 16, VK_CLS_ROWS = 32, VK_SEL = 256 };
/* CUDA and Metal (kernels.cu, kernels.metal: one work split, so one set of host twins for their
 * stand-ins): a group is one warp / SIMD group of WARP lanes; products of WARP rows a group (a row
 * a lane), the classifier's WARP_CLS_ROWS; the sampler one group of WARP_SEL. */
enum { WARP = 32, WARP_CLS_ROWS = 64, WARP_SEL = 256 };

static bool warp_kind(hcq_device_kind_t kind) { return kind == HCQ_DEVICE_CUDA || kind == HCQ_DEVICE_METAL; }

/* Rows of the classifier a group computes (one entry of the best logits per group). */
static int cls_rows(hcq_device_kind_t kind) {
  return kind == HCQ_DEVICE_VULKAN ? VK_CLS_ROWS : warp_kind(kind) ? WARP_CLS_ROWS : 16;
}

/* Bits that hold a token id (the GPU sampler's keys). */
static int id_bits(int vocab) {
  int b = 1;
  while (b < 31 && (1 << b) < vocab) b++;
  return b;
}

typedef struct dev_state {
  hcq_device_t *dev;
  hcq_buffer_t *x, *xf, *xq, *q, *att, *attq, *hf, *hq, *rope, *info;
} dev_state_t;

enum { W_Q, W_K, W_V, W_O, W_GATE, W_UP, W_DOWN, N_ATTN_NORM, N_FFN_NORM, K_CACHE, V_CACHE, LAYER_BUFS };

typedef struct layer_state {
  hcq_buffer_t *b[LAYER_BUFS];
  llm_layout_t layout[W_DOWN + 1];
} layer_state_t;

typedef struct item_args {
  hcq_buffer_t *bufs[MAX_ITEM_BUFS];
  uint32_t outs[3];
  hcq_operand_t vals[2];
} item_args_t;

typedef struct item_list {
  hcq_exec_item_t *items;
  item_args_t *args;
  size_t n, cap, kernels;
} item_list_t;

typedef struct program_entry {
  int dev;
  char *key; /* entry and defines */
  hcq_program_t *prog;
} program_entry_t;

struct llm_decoder {
  llm_config_t c;
  hcq_device_kind_t kind;
  int ndev, split, ctx, max_batch, isa_cap, cls_groups, ranks;
  bool profile, reads_tokens, direct;
  dev_state_t d[2];
  layer_state_t *layers;
  llm_layout_t emb_layout, cls_layout;
  hcq_buffer_t *emb, *cls, *out_norm, *tokens, *logits, *best, *params, *scratch;
  program_entry_t programs[MAX_PROGRAMS];
  int nprograms;
  hcq_expr_t *pos, *p0, *n, *choose, *exprs[16];
  int nexprs;
  item_list_t step, pass;
  hcq_jit_t *step_jit, *pass_jit;
  const volatile int32_t *tokens_host; /* the tokens buffer mapped (hcq_buffer_map), where it can be */
  hcq_fence_t *fences[2];              /* the last two steps queued (llm_generate) */
};

/* ---- programs ---- */

static hcq_status_t program(llm_decoder_t *m, int d, const char *entry, const char *defines, hcq_program_t **out) {
  const llm_config_t *c = &m->c;
  char key[1024];
  int len = snprintf(key, sizeof(key),
                     "#define DIM %d\n#define FFN %d\n#define NH %d\n#define NKV %d\n#define HD %d\n#define RD %d\n#define VOCAB %d\n"
                     "#define CTX %d\n#define NORM_EPS %.9gf\n#define LLM_ISA_CAP %d\n%s",
                     c->dim, c->ffn, c->n_heads, c->n_kv_heads, c->head_dim, c->rope_dim, c->vocab, m->ctx, (double)c->norm_eps,
                     m->isa_cap, defines);
  if (m->kind == HCQ_DEVICE_VULKAN) /* one main() per GLSL source: KERNEL_<entry> picks it */
    snprintf(key + len, sizeof(key) - (size_t)len, "#define KERNEL_%s\n#define LANES %d\n#define ROWS %d\n#define CLS_ROWS %d\n"
             "#define SEL %d\n#define ID_BITS %d\n", entry, VK_LANES, VK_ROWS, VK_CLS_ROWS, VK_SEL, id_bits(c->vocab));
  if (warp_kind(m->kind)) { /* NORM_EPS_BITS: the stand-ins' twins read the shape back from integers */
    uint32_t eps_bits;
    memcpy(&eps_bits, &c->norm_eps, 4);
    snprintf(key + len, sizeof(key) - (size_t)len, "#define KERNEL_%s\n#define ROWS %d\n#define CLS_ROWS %d\n#define SEL %d\n"
             "#define ID_BITS %d\n#define NORM_EPS_BITS %u\n", entry, WARP, WARP_CLS_ROWS, WARP_SEL, id_bits(c->vocab),
             (unsigned)eps_bits);
  }
  const char *body = m->kind == HCQ_DEVICE_VULKAN ? llm_kernels_glsl_source
                     : m->kind == HCQ_DEVICE_CUDA ? llm_kernels_cuda_source
                     : m->kind == HCQ_DEVICE_METAL ? llm_kernels_metal_source
                                                   : llm_kernels_source;
  for (int i = 0; i < m->nprograms; i++)
    if (m->programs[i].dev == d && !strcmp(m->programs[i].key + strlen(m->programs[i].key) + 1, entry) &&
        !strcmp(m->programs[i].key, key)) {
      *out = m->programs[i].prog;
      return NULL;
    }
  if (m->nprograms == MAX_PROGRAMS) return hcq_status_make(HCQ_INTERNAL, "llm decoder: more than %d programs", MAX_PROGRAMS);
  size_t klen = strlen(key), elen = strlen(entry);
  char *stored = malloc(klen + 1 + elen + 1), *src = malloc(klen + strlen(body) + 1);
  if (!stored || !src) {
    free(stored), free(src);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  }
  memcpy(stored, key, klen + 1);
  memcpy(stored + klen + 1, entry, elen + 1);
  memcpy(src, key, klen);
  strcpy(src + klen, body);
  hcq_status_t st = hcq_program_create(m->d[d].dev, entry, src, out);
  free(src);
  if (st) {
    free(stored);
    return st;
  }
  m->programs[m->nprograms++] = (program_entry_t){d, stored, *out};
  return NULL;
}

/* ---- buffers ---- */

static hcq_status_t buffer(hcq_device_t *dev, size_t bytes, const char *label, int layer, hcq_buffer_t **out) {
  TRY(hcq_buffer_create(dev, bytes ? bytes : 4, out));
  char name[64];
  if (layer >= 0) snprintf(name, sizeof(name), "%s[%d]", label, layer);
  else snprintf(name, sizeof(name), "%s", label);
  hcq_buffer_set_label(*out, name);
  return NULL;
}

/* Where the devices' memory is the host's (HCQ_CAP_HOST_MEMORY: CPU devices, one process), a buffer's
 * address is its host pointer: the decoder writes weights, tokens and parameters there directly
 * (the devices idle), with no temporary copy and no staging buffers; elsewhere through copies. */
static void *host_memory(const llm_decoder_t *m, hcq_buffer_t *buf) {
  void *p = NULL;
  if (m->direct) hcq_status_destroy(hcq_buffer_map(buf, &p)); /* NULL where it cannot be mapped */
  return p;
}

static hcq_status_t write_buffer(const llm_decoder_t *m, hcq_buffer_t *buf, uint64_t offset, const void *src, uint64_t size) {
  uint8_t *p = host_memory(m, buf);
  if (!p) return hcq_buffer_copyin(buf, offset, src, size);
  memcpy(p + offset, src, size);
  return NULL;
}

/* A weight matrix (ne[1] rows of ne[0]) repacked into the kernels' layout: the CPU's 16-row
 * interleave (quant.h), or the GPU layout (gpu_abi.h). */
static hcq_status_t upload_matrix(const llm_decoder_t *m, hcq_device_t *dev, const gguf_tensor_t *t, const char *label,
                                  int layer, hcq_buffer_t **out) {
  bool cpu = m->kind == HCQ_DEVICE_CPU;
  void (*pack)(ggml_type_t, const void *, size_t, size_t, void *) = cpu ? llm_repack : llm_gpu_pack;
  size_t rows = (size_t)t->ne[1], cols = (size_t)t->ne[0];
  size_t bytes = cpu ? llm_repack_bytes(t->type, rows, cols) : llm_gpu_pack_bytes(t->type, rows, cols);
  TRY(buffer(dev, bytes, label, layer, out));
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
static hcq_status_t upload_vector(const llm_decoder_t *m, hcq_device_t *dev, const gguf_tensor_t *t, const char *label,
                                  int layer, hcq_buffer_t **out) {
  size_t n = (size_t)t->ne[0];
  float *tmp = malloc(n * sizeof(float));
  if (!tmp) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  llm_dequantize_row(t->type, t->data, tmp, n);
  hcq_status_t st = buffer(dev, n * sizeof(float), label, layer, out);
  if (!st) st = write_buffer(m, *out, 0, tmp, n * sizeof(float));
  free(tmp);
  return st;
}

static size_t act_bytes(int rows, int cols) { return (size_t)rows * (size_t)((cols + 31) / 32) * sizeof(llm_act_block_t); }

static hcq_status_t make_scratch(llm_decoder_t *m, dev_state_t *s) {
  const llm_config_t *c = &m->c;
  size_t rows = (size_t)m->max_batch, dim = (size_t)c->dim;
  TRY(buffer(s->dev, rows * dim * 4, "x", -1, &s->x));
  TRY(buffer(s->dev, rows * dim * 4, "x normed", -1, &s->xf));
  TRY(buffer(s->dev, act_bytes(m->max_batch, c->dim), "x quantized", -1, &s->xq));
  TRY(buffer(s->dev, rows * dim * 4, "q", -1, &s->q));
  TRY(buffer(s->dev, rows * dim * 4, "attention", -1, &s->att));
  TRY(buffer(s->dev, act_bytes(m->max_batch, c->dim), "attention quantized", -1, &s->attq));
  TRY(buffer(s->dev, rows * (size_t)c->ffn * 4, "h", -1, &s->hf));
  TRY(buffer(s->dev, act_bytes(m->max_batch, c->ffn), "h quantized", -1, &s->hq));
  TRY(buffer(s->dev, 64, "pass info", -1, &s->info));
  /* cos and sin of pos x base^(-2j / rope_dim) for every position and pair, in double precision */
  size_t pairs = (size_t)c->rope_dim / 2;
  float *table = malloc((size_t)m->ctx * pairs * 2 * sizeof(float));
  if (!table) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  for (int p = 0; p < m->ctx; p++)
    for (size_t j = 0; j < pairs; j++) {
      double theta = p * pow((double)c->rope_base, -2.0 * (double)j / c->rope_dim);
      table[((size_t)p * pairs + j) * 2] = (float)cos(theta);
      table[((size_t)p * pairs + j) * 2 + 1] = (float)sin(theta);
    }
  hcq_status_t st = buffer(s->dev, (size_t)m->ctx * pairs * 8, "rotary table", -1, &s->rope);
  if (!st) st = write_buffer(m, s->rope, 0, table, (size_t)m->ctx * pairs * 8);
  free(table);
  return st;
}

static hcq_status_t make_buffers(llm_decoder_t *m, const llm_model_t *model) {
  const llm_config_t *c = &m->c;
  for (int d = 0; d < m->ndev; d++) TRY(make_scratch(m, &m->d[d]));
  hcq_device_t *d0 = m->d[0].dev;
  m->emb_layout = llm_layout_of(model->token_embd->type);
  m->cls_layout = llm_layout_of(model->output->type);
  TRY(upload_matrix(m, d0, model->token_embd, c->tied_classifier ? "embedding and classifier" : "embedding", -1, &m->emb));
  if (c->tied_classifier) m->cls = hcq_buffer_retain(m->emb);
  else TRY(upload_matrix(m, d0, model->output, "classifier", -1, &m->cls));
  TRY(upload_vector(m, d0, model->output_norm, "output norm", -1, &m->out_norm));
  m->cls_groups = (c->vocab + cls_rows(m->kind) - 1) / cls_rows(m->kind);
  /* Mapped where the device has such memory: the host reads each token as its step finishes,
   * while the next step runs (llm_generate). */
  hcq_status_t mapped = hcq_buffer_create_mapped(d0, ((size_t)m->ctx + 1) * 4, &m->tokens);
  if (mapped && hcq_status_code(mapped) != HCQ_UNAVAILABLE) return mapped;
  hcq_status_destroy(mapped);
  if (m->tokens) hcq_buffer_set_label(m->tokens, "tokens");
  else TRY(buffer(d0, ((size_t)m->ctx + 1) * 4, "tokens", -1, &m->tokens));
  TRY(buffer(d0, (size_t)c->vocab * 4, "logits", -1, &m->logits));
  TRY(buffer(d0, (size_t)m->cls_groups * 8, "best logits", -1, &m->best));
  TRY(buffer(d0, 64, "sampler", -1, &m->params));
  TRY(buffer(d0, (size_t)c->vocab * 16, "sampler scratch", -1, &m->scratch));
  if (!(m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers)))) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  size_t cache = (size_t)c->n_kv_heads * (size_t)m->ctx * (size_t)c->head_dim * 4;
  for (int l = 0; l < c->n_layers; l++) {
    const llm_layer_t *L = &model->layers[l];
    layer_state_t *S = &m->layers[l];
    hcq_device_t *dev = m->d[l < m->split ? 0 : 1].dev;
    const gguf_tensor_t *mats[] = {L->wq, L->wk, L->wv, L->wo, L->w_gate, L->w_up, L->w_down};
    const char *names[] = {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"};
    for (int i = W_Q; i <= W_DOWN; i++) {
      S->layout[i] = llm_layout_of(mats[i]->type);
      TRY(upload_matrix(m, dev, mats[i], names[i], l, &S->b[i]));
    }
    TRY(upload_vector(m, dev, L->attn_norm, "attention norm", l, &S->b[N_ATTN_NORM]));
    TRY(upload_vector(m, dev, L->ffn_norm, "ffn norm", l, &S->b[N_FFN_NORM]));
    TRY(buffer(dev, cache, "key cache", l, &S->b[K_CACHE]));
    TRY(buffer(dev, cache, "value cache", l, &S->b[V_CACHE]));
  }
  return NULL;
}

/* ---- items ---- */

static hcq_status_t list_reserve(item_list_t *L) {
  if (L->n < L->cap) return NULL;
  size_t cap = L->cap ? 2 * L->cap : 64;
  hcq_exec_item_t *items = realloc(L->items, cap * sizeof(*items));
  if (items) L->items = items;
  item_args_t *args = items ? realloc(L->args, cap * sizeof(*args)) : NULL;
  if (!items || !args) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  /* items point into args: re-aim them after the move */
  for (size_t i = 0; i < L->n; i++)
    if (L->items[i].kind == HCQ_ITEM_KERNEL) {
      L->items[i].kernel.bufs = args[i].bufs;
      L->items[i].kernel.outs = args[i].outs;
      L->items[i].kernel.vals = args[i].vals;
    }
  L->args = args;
  L->cap = cap;
  return NULL;
}

static void list_free(item_list_t *L) {
  free(L->items);
  free(L->args);
  *L = (item_list_t){0};
}

typedef struct kernel_desc {
  hcq_program_t *prog;
  hcq_buffer_t *bufs[MAX_ITEM_BUFS];
  size_t nbufs, nouts, nvals;
  hcq_operand_t vals[2], grid[2], local;
} kernel_desc_t;

/* An operand a designated initializer left out: 1 for a dim. */
static bool unset(hcq_operand_t op) { return !op.sym && op.value == 0; }

static hcq_status_t add_kernel(item_list_t *L, const kernel_desc_t *k) {
  TRY(list_reserve(L));
  item_args_t *a = &L->args[L->n];
  hcq_exec_item_t *it = &L->items[L->n++];
  memcpy(a->bufs, k->bufs, k->nbufs * sizeof(k->bufs[0]));
  for (size_t i = 0; i < k->nouts; i++) a->outs[i] = (uint32_t)i;
  memcpy(a->vals, k->vals, sizeof(a->vals));
  it->kind = HCQ_ITEM_KERNEL;
  it->kernel = (hcq_kernel_item_t){k->prog, a->bufs, k->nbufs, a->outs, k->nouts, a->vals, k->nvals,
                                   {k->grid[0], unset(k->grid[1]) ? hcq_imm(1) : k->grid[1], hcq_imm(1)},
                                   {unset(k->local) ? hcq_imm(1) : k->local, hcq_imm(1), hcq_imm(1)}};
  L->kernels++;
  return NULL;
}

static hcq_status_t add_transfer(item_list_t *L, hcq_buffer_t *dst, hcq_buffer_t *src, uint64_t bytes) {
  TRY(list_reserve(L));
  L->args[L->n] = (item_args_t){0};
  hcq_exec_item_t *it = &L->items[L->n++];
  it->kind = HCQ_ITEM_TRANSFER;
  it->transfer = (hcq_transfer_item_t){dst, src, bytes};
  return NULL;
}

/* An expression the decoder keeps (released at destroy). */
static hcq_expr_t *keep(llm_decoder_t *m, hcq_expr_t *e) {
  if (e && m->nexprs < (int)(sizeof(m->exprs) / sizeof(m->exprs[0]))) m->exprs[m->nexprs++] = e;
  else if (e) hcq_expr_release(e), e = NULL;
  return e;
}

static hcq_expr_t *binary(llm_decoder_t *m, hcq_expr_op_t op, const hcq_expr_t *a, int64_t b) {
  hcq_expr_t *k = hcq_expr_const(b), *e = k ? hcq_expr_binary(op, a, k) : NULL;
  hcq_expr_release(k);
  return keep(m, e);
}

static const char *layout_define(char *buf, size_t size, const char *name, llm_layout_t layout) {
  snprintf(buf, size, "#define %s %d\n", name, (int)layout);
  return buf;
}

/* Work-items of a launch whose groups each do macs multiply-adds (see MACS_PER_ITEM). */
static hcq_operand_t cost(double macs) {
  double items = macs / MACS_PER_ITEM;
  return hcq_imm(items < 1 ? 1 : items > 65536 ? 65536 : (int64_t)items);
}

/* ---- launch geometry: with the kernel sources, the one thing that differs by device kind ---- */

/* The kernels of the item list, in the order a layer runs them. */
typedef enum kernel_id {
  K_EMBED, K_BEGIN, K_NORM, K_QKV, K_ATTN, K_QUANTIZE, K_WO, K_GATE_UP, K_DOWN, K_NORM_LAST, K_CLASSIFY, K_SELECT
} kernel_id_t;

/* What a pass's geometry depends on: its token count n, its tiles of TILE tokens (CPU), whether it
 * chooses a token (1 or the variable choose) and the classifier's grid (choose x its groups). */
typedef struct pass_ops {
  hcq_operand_t n, tiles, chosen, cls_grid;
  int tok_per_group;
} pass_ops_t;

typedef struct geometry {
  hcq_operand_t grid[2], local;
} geometry_t;

/* CPU (kernels.c): a group is a block of 16 rows (32 FFN rows for gate_up) times a tile of TILE
 * tokens; the group size is the group's work in MACS_PER_ITEM (the device shares a launch between
 * its threads by it), never read by the kernels. */
static geometry_t cpu_geometry(const llm_decoder_t *m, kernel_id_t k, const pass_ops_t *o) {
  const llm_config_t *c = &m->c;
  int gq = (c->dim + 15) / 16, gkv = (llm_kv_dim(c) + 15) / 16, gffn = (c->ffn + 31) / 32, tpg = o->tok_per_group;
  hcq_operand_t rows_local = hcq_imm(c->dim / 8 + 1);
  switch (k) {
    case K_EMBED:
    case K_NORM:
    case K_QUANTIZE: return (geometry_t){{o->n}, rows_local};
    case K_BEGIN: return (geometry_t){{hcq_imm(1)}, hcq_imm(1)};
    case K_QKV: return (geometry_t){{hcq_imm(gq + 2 * gkv), o->tiles}, cost(16.0 * c->dim * tpg)};
    /* a group's work grows with the position; counted at 256 positions (2 x 256 x head_dim
     * multiply-adds of floats, 8 a work-item) */
    case K_ATTN: return (geometry_t){{hcq_imm(c->n_heads), o->n}, hcq_imm((int64_t)c->head_dim * 256 * 2 / 8)};
    case K_WO: return (geometry_t){{hcq_imm(gq), o->tiles}, cost(16.0 * c->dim * tpg)};
    case K_GATE_UP: return (geometry_t){{hcq_imm(gffn), o->tiles}, cost(64.0 * c->dim * tpg)};
    case K_DOWN: return (geometry_t){{hcq_imm(gq), o->tiles}, cost(16.0 * c->ffn * tpg)};
    case K_NORM_LAST: return (geometry_t){{o->chosen}, rows_local};
    case K_CLASSIFY: return (geometry_t){{o->cls_grid}, cost(16.0 * c->dim)};
    case K_SELECT: return (geometry_t){{o->chosen}, hcq_imm(1)};
  }
  return (geometry_t){{hcq_imm(1)}, hcq_imm(1)};
}

/* The GPU kinds share one split and differ in its sizes: a group of `lanes` threads, one token each
 * (grid y = n); products of `rows` rows a group (`gate_rows` FFN rows for gate_up: one activation
 * block), the classifier's rows by cls_rows(); attention a group per (head, token); the sampler one
 * group of `sel`. */
typedef struct gpu_shape {
  int lanes, rows, gate_rows, sel;
} gpu_shape_t;

/* Vulkan (kernels.glsl): groups of VK_LANES invocations (one lavapipe vector), products of VK_ROWS
 * rows in rounds of VK_LANES. CUDA (kernels.cu): blocks of one warp, WARP rows a block. Metal
 * (kernels.metal): kernels.cu's split with a SIMD group of 32 for a warp, so that the stand-ins share
 * one set of host twins (tests/llm_twins.h). */
static const gpu_shape_t vulkan_shape = {VK_LANES, VK_ROWS, 32, VK_SEL}, warp_shape = {WARP, WARP, WARP, WARP_SEL};

static geometry_t gpu_geometry(const llm_decoder_t *m, kernel_id_t k, const pass_ops_t *o, const gpu_shape_t *s) {
  const llm_config_t *c = &m->c;
  int gq = (c->dim + s->rows - 1) / s->rows, gkv = (llm_kv_dim(c) + s->rows - 1) / s->rows;
  hcq_operand_t lanes = hcq_imm(s->lanes);
  switch (k) {
    case K_EMBED:
    case K_NORM:
    case K_QUANTIZE: return (geometry_t){{o->n}, lanes};
    case K_BEGIN: return (geometry_t){{hcq_imm(1)}, lanes};
    case K_QKV: return (geometry_t){{hcq_imm(gq + 2 * gkv), o->n}, lanes};
    case K_ATTN: return (geometry_t){{hcq_imm(c->n_heads), o->n}, lanes};
    case K_WO:
    case K_DOWN: return (geometry_t){{hcq_imm(gq), o->n}, lanes};
    case K_GATE_UP: return (geometry_t){{hcq_imm((c->ffn + s->gate_rows - 1) / s->gate_rows), o->n}, lanes};
    case K_NORM_LAST: return (geometry_t){{o->chosen}, lanes};
    case K_CLASSIFY: return (geometry_t){{o->cls_grid}, lanes};
    case K_SELECT: return (geometry_t){{o->chosen}, hcq_imm(s->sel)};
  }
  return (geometry_t){{hcq_imm(1)}, lanes};
}

static geometry_t geometry(const llm_decoder_t *m, kernel_id_t k, const pass_ops_t *o) {
  switch (m->kind) {
    case HCQ_DEVICE_VULKAN: return gpu_geometry(m, k, o, &vulkan_shape);
    case HCQ_DEVICE_CUDA:
    case HCQ_DEVICE_METAL: return gpu_geometry(m, k, o, &warp_shape);
    default: return cpu_geometry(m, k, o);
  }
}

/* The kernel k with its buffers and values, at k's geometry. */
static hcq_status_t add(llm_decoder_t *m, item_list_t *L, const pass_ops_t *o, kernel_id_t k, hcq_program_t *prog,
                        hcq_buffer_t *const *bufs, size_t nbufs, size_t nouts, const hcq_operand_t *vals, size_t nvals) {
  geometry_t g = geometry(m, k, o);
  kernel_desc_t d = {prog, {0}, nbufs, nouts, nvals, {{0}}, {g.grid[0], g.grid[1]}, g.local};
  memcpy(d.bufs, bufs, nbufs * sizeof(bufs[0]));
  if (nvals) memcpy(d.vals, vals, nvals * sizeof(vals[0]));
  return add_kernel(L, &d);
}

/* The forward pass of n tokens from position p0. pass: n and p0 are the prompt pass's variables and
 * transfers move max_batch rows; otherwise n is 1 and p0 the step's pos. Only the first kernel on
 * each device takes p0 and n as values (kernels.c, info_t): a decoding replay patches one word per
 * device. The list is the same for every kind; geometry() and the sources differ. */
static hcq_status_t build_items(llm_decoder_t *m, item_list_t *L, bool pass) {
  const llm_config_t *c = &m->c;
  hcq_operand_t p0 = hcq_sym(pass ? m->p0 : m->pos), n = pass ? hcq_sym(m->n) : hcq_imm(1);
  pass_ops_t o = {n, pass ? hcq_sym(binary(m, HCQ_EXPR_FLOORDIV, binary(m, HCQ_EXPR_ADD, m->n, TILE - 1), TILE)) : hcq_imm(1),
                  /* A pass that is not a prompt's last chooses no token (its classifier would read weights
                   * for nothing, and its token would overwrite the next pass's first prompt token):
                   * choose = 0 gives those launches an empty grid. */
                  pass ? hcq_sym(m->choose) : hcq_imm(1),
                  pass ? hcq_sym(binary(m, HCQ_EXPR_MUL, m->choose, m->cls_groups)) : hcq_imm(m->cls_groups), pass ? TILE : 1};
  if (pass && (!o.tiles.sym || !o.cls_grid.sym)) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory building the items");
  int rows_copied = pass ? m->max_batch : 1;
  uint64_t x_bytes = (uint64_t)rows_copied * (uint64_t)c->dim * 4;
  bool gpu = m->kind != HCQ_DEVICE_CPU;
  char def[3][64], defs[256];
  dev_state_t *s0 = &m->d[0];
  hcq_program_t *prog;
  hcq_operand_t p0_n[2] = {p0, n}, zero = hcq_imm(0), one = hcq_imm(1);

  TRY(program(m, 0, "llm_embed", layout_define(def[0], 64, "W_LAYOUT", m->emb_layout), &prog));
  TRY(add(m, L, &o, K_EMBED, prog, (hcq_buffer_t *[]){s0->x, s0->info, m->tokens, m->emb}, 4, 2, p0_n, 2));
  for (int l = 0; l < c->n_layers; l++) {
    int d = l < m->split ? 0 : 1;
    dev_state_t *s = &m->d[d];
    layer_state_t *S = &m->layers[l];
    if (d == 1 && l == m->split) {
      TRY(add_transfer(L, s->x, s0->x, x_bytes));
      TRY(program(m, d, "llm_begin", "", &prog));
      TRY(add(m, L, &o, K_BEGIN, prog, (hcq_buffer_t *[]){s->info}, 1, 1, p0_n, 2));
    }
    hcq_program_t *norm, *qkv, *attn, *quant, *wo, *gate_up, *down;
    TRY(program(m, d, "llm_norm", "", &norm));
    snprintf(defs, sizeof(defs), "%s%s%s", layout_define(def[0], 64, "WQ_LAYOUT", S->layout[W_Q]),
             layout_define(def[1], 64, "WK_LAYOUT", S->layout[W_K]), layout_define(def[2], 64, "WV_LAYOUT", S->layout[W_V]));
    TRY(program(m, d, "llm_qkv", defs, &qkv));
    TRY(program(m, d, "llm_attn", "", &attn));
    TRY(program(m, d, "llm_quantize", "", &quant));
    /* GPU products hold their input in registers: its length is a constant there (K_IN) */
    snprintf(defs, sizeof(defs), "%s%s", layout_define(def[0], 64, "W_LAYOUT", S->layout[W_O]), gpu ? "#define K_IN DIM\n" : "");
    TRY(program(m, d, "llm_matmul_add", defs, &wo));
    snprintf(defs, sizeof(defs), "%s%s", layout_define(def[0], 64, "WG_LAYOUT", S->layout[W_GATE]),
             layout_define(def[1], 64, "WU_LAYOUT", S->layout[W_UP]));
    TRY(program(m, d, "llm_gate_up", defs, &gate_up));
    snprintf(defs, sizeof(defs), "%s%s", layout_define(def[0], 64, "W_LAYOUT", S->layout[W_DOWN]), gpu ? "#define K_IN FFN\n" : "");
    TRY(program(m, d, "llm_matmul_add", defs, &down));

    hcq_buffer_t **w = S->b;
    hcq_operand_t k_dim = hcq_imm(c->dim), k_ffn = hcq_imm(c->ffn);
    TRY(add(m, L, &o, K_NORM, norm, (hcq_buffer_t *[]){s->xf, s->xq, s->x, w[N_ATTN_NORM], s->info}, 5, 2, &zero, 1));
    TRY(add(m, L, &o, K_QKV, qkv,
            (hcq_buffer_t *[]){s->q, w[K_CACHE], w[V_CACHE], s->xf, s->xq, w[W_Q], w[W_K], w[W_V], s->rope, s->info}, 10, 3, NULL, 0));
    TRY(add(m, L, &o, K_ATTN, attn, (hcq_buffer_t *[]){s->att, s->q, w[K_CACHE], w[V_CACHE], s->info}, 5, 1, NULL, 0));
    if (S->layout[W_O] == LLM_LAYOUT_Q4X16 || S->layout[W_O] == LLM_LAYOUT_Q8X16)
      TRY(add(m, L, &o, K_QUANTIZE, quant, (hcq_buffer_t *[]){s->attq, s->att}, 2, 1, NULL, 0));
    TRY(add(m, L, &o, K_WO, wo, (hcq_buffer_t *[]){s->x, s->att, s->attq, w[W_O], s->info}, 5, 1, &k_dim, 1));
    TRY(add(m, L, &o, K_NORM, norm, (hcq_buffer_t *[]){s->xf, s->xq, s->x, w[N_FFN_NORM], s->info}, 5, 2, &zero, 1));
    TRY(add(m, L, &o, K_GATE_UP, gate_up, (hcq_buffer_t *[]){s->hf, s->hq, s->xf, s->xq, w[W_GATE], w[W_UP], s->info}, 7, 2,
            NULL, 0));
    TRY(add(m, L, &o, K_DOWN, down, (hcq_buffer_t *[]){s->x, s->hf, s->hq, w[W_DOWN], s->info}, 5, 1, &k_ffn, 1));
  }
  if (m->split < c->n_layers) TRY(add_transfer(L, s0->x, m->d[1].x, x_bytes));
  hcq_program_t *norm, *classify, *select;
  TRY(program(m, 0, "llm_norm", "", &norm));
  TRY(program(m, 0, "llm_classify", layout_define(def[0], 64, "W_LAYOUT", m->cls_layout), &classify));
  TRY(program(m, 0, "llm_select", "", &select));
  hcq_operand_t groups = hcq_imm(m->cls_groups);
  TRY(add(m, L, &o, K_NORM_LAST, norm, (hcq_buffer_t *[]){s0->xf, s0->xq, s0->x, m->out_norm, s0->info}, 5, 2, &one, 1));
  TRY(add(m, L, &o, K_CLASSIFY, classify, (hcq_buffer_t *[]){m->logits, m->best, s0->xf, s0->xq, m->cls}, 5, 2, &zero, 1));
  TRY(add(m, L, &o, K_SELECT, select, (hcq_buffer_t *[]){m->tokens, m->scratch, m->best, m->logits, m->params, s0->info}, 6, 2,
          &groups, 1));
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

hcq_status_t llm_decoder_create(const llm_model_t *model, const llm_decoder_options_t *o, llm_decoder_t **out) {
  *out = NULL;
  if (!model) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_decoder_create: model is NULL");
  llm_decoder_options_t opts = o ? *o : (llm_decoder_options_t){0};
  int ndev = opts.ranks == 2 ? 2 : opts.devices ? opts.devices : 1;
  if (ndev != 1 && ndev != 2)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm decoder: %d devices (expected 1 or 2)", opts.devices);
  if (opts.kind != HCQ_DEVICE_CPU && opts.kind != HCQ_DEVICE_VULKAN && opts.kind != HCQ_DEVICE_CUDA &&
      opts.kind != HCQ_DEVICE_METAL)
    return hcq_status_make(HCQ_UNIMPLEMENTED, "llm decoder: no kernels for %s devices (CPU, VULKAN, CUDA and METAL have them)",
                           hcq_device_kind_name(opts.kind));
  int cap = isa_cap();
  if (cap < 0)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "HCQ_LLM_KERNELS=\"%s\": expected auto, avx512, avx2 or portable",
                           getenv("HCQ_LLM_KERNELS"));
  const llm_config_t *c = &model->config;
  if (opts.kind != HCQ_DEVICE_CPU && c->head_dim % 4)
    return hcq_status_make(HCQ_UNIMPLEMENTED, "llm decoder: a head size of %d (the %s kernels read heads in 4-float vectors)",
                           c->head_dim, hcq_device_kind_name(opts.kind));
  int ctx = opts.ctx ? opts.ctx : (c->ctx_train < 4096 ? c->ctx_train : 4096);
  if (ctx < 1 || ctx > (1 << 20))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm decoder: a context of %d positions (expected 1 to 2^20)", ctx);
  ctx = (ctx + CHUNK - 1) / CHUNK * CHUNK;
  int max_batch = opts.max_batch ? opts.max_batch : 128;
  if (max_batch < 1 || max_batch > 4096)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm decoder: a prompt batch of %d tokens (expected 1 to 4096)", max_batch);
  llm_decoder_t *m = calloc(1, sizeof(*m));
  if (!m) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating the decoder");
  m->c = *c;
  m->kind = opts.kind;
  m->ndev = ndev;
  m->split = ndev == 2 ? c->n_layers - c->n_layers / 2 : c->n_layers;
  m->ctx = ctx;
  m->max_batch = max_batch;
  m->isa_cap = cap;
  m->profile = opts.profile;
  m->ranks = opts.ranks == 2 ? 2 : 1;
  m->reads_tokens = m->ranks == 1 || opts.rank == 0;
  hcq_status_t st = NULL;
  for (int d = 0; d < ndev && !st; d++) {
    char name[32];
    if (opts.ranks == 2) snprintf(name, sizeof(name), "%d/%s:0", d, hcq_device_kind_name(m->kind));
    else snprintf(name, sizeof(name), "%s:%d", hcq_device_kind_name(m->kind), d);
    st = hcq_device_open(name, &m->d[d].dev);
  }
  m->direct = m->ranks == 1;
  for (int d = 0; d < ndev && !st; d++) m->direct &= (hcq_device_caps(m->d[d].dev) & HCQ_CAP_HOST_MEMORY) != 0;
  if (!st) st = hcq_var_create("pos", 0, ctx - 1, &m->pos);
  if (!st) st = hcq_var_create("p0", 0, ctx - 1, &m->p0);
  if (!st) st = hcq_var_create("n", 1, max_batch, &m->n);
  if (!st) st = hcq_var_create("choose", 0, 1, &m->choose);
  if (!st) st = make_buffers(m, model);
  if (!st) st = build_items(m, &m->step, false);
  if (!st) st = build_items(m, &m->pass, true);
  if (!st) st = llm_decoder_set_sampler(m, &(llm_sampler_t){0, 1, 0, 0});
  /* Under two ranks only rank 0 holds the tokens (the other's handle of its device is remote). */
  void *tokens_host = NULL;
  if (!st && m->reads_tokens) hcq_status_destroy(hcq_buffer_map(m->tokens, &tokens_host));
  m->tokens_host = tokens_host;
  for (int i = 0; i < 2 && !st; i++) st = hcq_fence_create(&m->fences[i]);
  if (!st) st = llm_decoder_sync(m);
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
  for (int d = 0; d < m->ndev; d++)
    if (m->d[d].dev && !st) st = hcq_device_synchronize(m->d[d].dev);
  if (!st && m->step_jit && !(st = hcq_jit_destroy(m->step_jit))) m->step_jit = NULL;
  if (!st && m->pass_jit && !(st = hcq_jit_destroy(m->pass_jit))) m->pass_jit = NULL;
  if (st) return st; /* still running: keep everything alive */
  list_free(&m->step);
  list_free(&m->pass);
  for (int i = 0; i < 2; i++) hcq_fence_destroy(m->fences[i]);
  for (int i = 0; i < m->nexprs; i++) hcq_expr_release(m->exprs[i]);
  hcq_expr_release(m->pos), hcq_expr_release(m->p0), hcq_expr_release(m->n), hcq_expr_release(m->choose);
  if (m->layers)
    for (int l = 0; l < m->c.n_layers; l++)
      for (int i = 0; i < LAYER_BUFS; i++) hcq_buffer_release(m->layers[l].b[i]);
  free(m->layers);
  hcq_buffer_t *shared[] = {m->emb, m->cls, m->out_norm, m->tokens, m->logits, m->best, m->params, m->scratch};
  for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++) hcq_buffer_release(shared[i]);
  for (int d = 0; d < m->ndev; d++) {
    dev_state_t *s = &m->d[d];
    hcq_buffer_t *scratch[] = {s->x, s->xf, s->xq, s->q, s->att, s->attq, s->hf, s->hq, s->rope, s->info};
    for (size_t i = 0; i < sizeof(scratch) / sizeof(scratch[0]); i++) hcq_buffer_release(scratch[i]);
  }
  for (int i = 0; i < m->nprograms; i++) {
    hcq_program_release(m->programs[i].prog);
    free(m->programs[i].key);
  }
  for (int d = m->ndev - 1; d >= 0; d--) {
    hcq_status_t cst = m->d[d].dev ? hcq_device_close(m->d[d].dev) : NULL;
    if (!st) st = cst;
    else hcq_status_destroy(cst);
  }
  free(m);
  return st;
}

const llm_config_t *llm_decoder_config(const llm_decoder_t *m) { return &m->c; }
int llm_decoder_ctx(const llm_decoder_t *m) { return m->ctx; }
int llm_decoder_max_batch(const llm_decoder_t *m) { return m->max_batch; }
size_t llm_decoder_kernels_per_step(const llm_decoder_t *m) { return m->step.kernels; }
hcq_jit_t *llm_decoder_step_jit(const llm_decoder_t *m) { return m->step_jit; }
hcq_jit_t *llm_decoder_prefill_jit(const llm_decoder_t *m) { return m->pass_jit; }

/* ---- running ---- */

hcq_status_t llm_decoder_sync(llm_decoder_t *m) {
  for (int d = 0; d < m->ndev; d++) TRY(hcq_device_synchronize(m->d[d].dev));
  return NULL;
}

hcq_status_t llm_decoder_set_sampler(llm_decoder_t *m, const llm_sampler_t *s) {
  if (!s) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm sampler: NULL");
  if (!(s->temperature >= 0) || !isfinite(s->temperature))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm sampler: temperature %g (expected 0 or more)", (double)s->temperature);
  if (!(s->top_p > 0 && s->top_p <= 1))
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm sampler: top-p %g (expected more than 0, at most 1)", (double)s->top_p);
  if (s->top_k < 0) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm sampler: top-k %d (expected 0 or more)", s->top_k);
  struct {
    float temperature, top_p;
    int32_t top_k;
    uint32_t seed_lo, seed_hi;
  } p = {s->temperature, s->top_p, s->top_k, (uint32_t)s->seed, (uint32_t)(s->seed >> 32)};
  TRY(llm_decoder_sync(m));
  return write_buffer(m, m->params, 0, &p, sizeof(p));
}

hcq_status_t llm_decoder_set_tokens(llm_decoder_t *m, int pos, const int32_t *ids, int n) {
  if (n < 0 || pos < 0 || pos > m->ctx - n)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "llm decoder: tokens %d..%d are outside the context (%d positions)", pos,
                           pos + n - 1, m->ctx);
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->c.vocab)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm decoder: token id %d at position %d is outside the vocabulary (%d ids)",
                             ids[i], pos + i, m->c.vocab);
  TRY(llm_decoder_sync(m));
  return n ? write_buffer(m, m->tokens, (uint64_t)pos * 4, ids, (uint64_t)n * 4) : NULL;
}

/* Arms fence (when given) at the work queued so far on the decoder's devices. */
static hcq_status_t record(llm_decoder_t *m, hcq_fence_t *fence) {
  hcq_device_t *devs[2] = {m->d[0].dev, m->ndev > 1 ? m->d[1].dev : NULL};
  return fence ? hcq_fence_record(fence, devs, (size_t)m->ndev) : NULL;
}

/* Runs list eagerly, or its capture (capturing it first, which runs it), and arms fence (may be
 * NULL) at what it queued. */
static hcq_status_t run_list(llm_decoder_t *m, item_list_t *L, hcq_jit_t **jit, const hcq_var_value_t *v, size_t nv,
                             bool graph, hcq_fence_t *fence) {
  if (!graph || *jit) {
    if (graph) return hcq_jit_submit(*jit, NULL, 0, v, nv, fence);
    for (size_t i = 0; i < L->n; i++) TRY(hcq_exec_item_run(&L->items[i], v, nv));
    return record(m, fence);
  }
  hcq_capture_t *cap;
  TRY(hcq_capture_begin(&cap));
  for (size_t i = 0; i < L->n; i++) {
    hcq_status_t st = hcq_exec_item_run(&L->items[i], v, nv);
    if (st) {
      hcq_capture_abort(cap);
      return st;
    }
  }
  hcq_jit_options_t opts = {L->n, m->profile, false, false, NULL, NULL, false};
  TRY(hcq_capture_end(cap, NULL, 0, v, nv, &opts, jit));
  return record(m, fence);
}

static hcq_status_t step(llm_decoder_t *m, int pos, bool graph, hcq_fence_t *fence) {
  if (pos < 0 || pos >= m->ctx)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "llm decoder: position %d is outside the context (0..%d)", pos, m->ctx - 1);
  hcq_var_value_t v = {m->pos, pos};
  return run_list(m, &m->step, &m->step_jit, &v, 1, graph, fence);
}

hcq_status_t llm_decoder_step(llm_decoder_t *m, int pos, bool graph) { return step(m, pos, graph, NULL); }

hcq_status_t llm_decoder_prefill(llm_decoder_t *m, int p0, int n, bool graph) {
  if (n < 1 || p0 < 0 || p0 > m->ctx - n)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "llm decoder: a prompt at positions %d..%d is outside the context (%d positions)",
                           p0, p0 + n - 1, m->ctx);
  for (int done = 0; done < n;) {
    int k = n - done < m->max_batch ? n - done : m->max_batch;
    hcq_var_value_t v[3] = {{m->p0, p0 + done}, {m->n, k}, {m->choose, done + k == n}};
    TRY(run_list(m, &m->pass, &m->pass_jit, v, 3, graph, NULL));
    done += k;
  }
  return NULL;
}

hcq_status_t llm_decoder_capture(llm_decoder_t *m) {
  /* A pass of one token at 0 and a step at 1: what they write (the caches at 0 and 1, tokens 1 and
   * 2) is written again before anything reads it. */
  int32_t zero[2] = {0, 0};
  TRY(llm_decoder_set_tokens(m, 0, zero, 2));
  if (!m->pass_jit) TRY(llm_decoder_prefill(m, 0, 1, true));
  if (!m->step_jit && m->ctx > 1) TRY(llm_decoder_step(m, 1, true));
  return llm_decoder_sync(m);
}

hcq_status_t llm_decoder_tokens(llm_decoder_t *m, int pos, int32_t *out, int n) {
  if (n < 0 || pos < 0 || pos > m->ctx + 1 - n)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "llm decoder: tokens %d..%d are outside 0..%d", pos, pos + n - 1, m->ctx);
  TRY(llm_decoder_sync(m));
  return n ? hcq_buffer_copyout(m->tokens, (uint64_t)pos * 4, out, (uint64_t)n * 4) : NULL;
}

hcq_status_t llm_decoder_logits(llm_decoder_t *m, float *out) {
  TRY(llm_decoder_sync(m));
  return hcq_buffer_copyout(m->logits, 0, out, (uint64_t)m->c.vocab * 4);
}

/* ---- generation ---- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The token at pos once the work fence f covers has finished: read through the mapped tokens
 * buffer, so later steps keep running; where it cannot be mapped, a copy (which waits for them
 * too). */
static hcq_status_t token_at(llm_decoder_t *m, const hcq_fence_t *f, int pos, int32_t *out) {
  if (m->tokens_host) {
    TRY(hcq_fence_wait(f, HCQ_TIMEOUT_DEFAULT));
    *out = m->tokens_host[pos];
    return NULL;
  }
  return hcq_buffer_copyout(m->tokens, (uint64_t)pos * 4, out, 4);
}

/* Records token tok as generated (while the run has not ended). */
static void took(llm_generate_result_t *out, const llm_generate_options_t *o, int32_t tok) {
  if (out->ended) return;
  out->ids[out->n++] = tok;
  if (o->on_token) o->on_token(o->ctx, tok);
  out->ended = !o->ignore_eos && o->is_end && o->is_end(o->ctx, tok);
}

hcq_status_t llm_generate(llm_decoder_t *m, const int32_t *prompt, int nprompt, const llm_generate_options_t *o,
                          llm_generate_result_t *out) {
  *out = (llm_generate_result_t){0};
  if (!o || o->steps < 0) return hcq_status_make(HCQ_INVALID_ARGUMENT, "llm_generate: bad options");
  if (nprompt < 1 || nprompt >= m->ctx)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "llm_generate: a prompt of %d tokens (the context holds %d positions)", nprompt,
                           m->ctx);
  int steps = o->steps < m->ctx - nprompt ? o->steps : m->ctx - nprompt;
  out->ids = malloc(((size_t)steps + 1) * sizeof(int32_t));
  double *host = malloc(((size_t)steps + 1) * sizeof(double));
  if (!out->ids || !host) {
    free(out->ids), free(host);
    out->ids = NULL;
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  }
  /* Under two ranks both run the same steps (an early stop on one would leave the other waiting
   * for it): only the rank holding the tokens reads them, and what follows an end token is dropped. */
  bool stop_early = m->ranks == 1 || o->agree_end, reads = m->reads_tokens, all_ended = false;
  hcq_status_t st = llm_decoder_set_tokens(m, 0, prompt, nprompt);
  double t0 = now_ms(), t1 = t0, t_last = t0;
  int nhost = 0;
  if (!st && steps > 0) st = llm_decoder_prefill(m, 0, nprompt, o->graph);
  if (!st && steps > 0) {
    int32_t tok = 0;
    if (reads && !(st = record(m, m->fences[0]))) st = token_at(m, m->fences[0], nprompt, &tok);
    else if (!reads) st = llm_decoder_sync(m);
    t_last = t1 = now_ms();
    out->prefill_ms = t1 - t0;
    if (!st && reads) took(out, o, tok);
  }
  /* Step p reads the token at p and writes p + 1. One step is queued ahead of the one whose token
   * is awaited, so the devices never wait for the host. */
  int next = nprompt, read = nprompt, last = nprompt + steps - 1; /* next step to queue; next step whose token to read */
  if (m->ranks > 1 && o->agree_end && steps > 0) all_ended = o->agree_end(o->ctx, out->ended);
  while (!st && !(stop_early && (m->ranks > 1 ? all_ended : out->ended)) && read < last) {
    while (!st && next - read < 2 && next < last) {
      double h0 = now_ms();
      st = step(m, next, o->graph, m->fences[next % 2]);
      host[nhost++] = (now_ms() - h0) * 1e3;
      next++;
    }
    if (st) break;
    int32_t tok = 0;
    if (reads) st = token_at(m, m->fences[read % 2], read + 1, &tok);
    if (!st && reads && !out->ended) {
      took(out, o, tok);
      t_last = now_ms();
    }
    read++;
    if (!st && m->ranks > 1 && o->agree_end) all_ended = o->agree_end(o->ctx, out->ended);
  }
  /* to the last token known: a step queued past an end token is not counted */
  out->decode_ms = (reads ? t_last : now_ms()) - t1;
  if (!st) st = llm_decoder_sync(m);
  if (nhost) {
    qsort(host, (size_t)nhost, sizeof(double), cmp_double);
    out->host_us_per_step = host[nhost / 2];
  }
  free(host);
  if (st) {
    free(out->ids);
    out->ids = NULL;
    out->n = 0;
  }
  return st;
}
