/* The decoder's item lists: its kernels' programs (the embedded sources compiled after the model's
 * #defines), the exec items of one forward pass and their launch geometry per device kind.
 *
 * Two item lists are built from one description (build_items): the decoding step (variable pos, one
 * token) and the prompt pass (variables p0 and n, up to max_batch tokens). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder_internal.h"
#include "gpu_abi.h" /* the kernel ABI every kind follows */
#include "model_kernels.h"
#include "model_status.h"

/* Embedded at build time: kernels_tiles.c then kernels.c (CPU), kernels.glsl (Vulkan), kernels.cu
 * (CUDA), kernels.metal (Metal). */
extern const char llm_kernels_tiles_source[], llm_kernels_source[], llm_kernels_glsl_source[],
    llm_kernels_cuda_source[], llm_kernels_metal_source[];
/* The kernels in each language: a kind's devices run the ones in the language they compile. */
static const char *const k_sources[MODEL_KERNELS_NONE] = {
    llm_kernels_source, llm_kernels_glsl_source, llm_kernels_cuda_source, llm_kernels_metal_source};

enum { MAX_ITEM_BUFS = 14, TILE = 8 };
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
/* CPU: the classifier's rows a work-group (kernels.c's CLS_ROWS), four row groups of 16 a call. */
enum { CPU_CLS_ROWS = 64 };

/* CUDA C and MSL kernels run in warps / SIMD groups of WARP lanes. */
static bool warp_kind(hcq_device_kind_t kind) {
  model_kernel_lang_t lang = model_kernel_lang(kind);
  return lang == MODEL_KERNELS_CUDA || lang == MODEL_KERNELS_MSL;
}

int llm_cls_rows(hcq_device_kind_t kind) {
  model_kernel_lang_t lang = model_kernel_lang(kind);
  return lang == MODEL_KERNELS_GLSL ? VK_CLS_ROWS : warp_kind(kind) ? WARP_CLS_ROWS : CPU_CLS_ROWS;
}

/* The kernels are C (CPU devices: tiles, repacked weights, one row group a call) rather than GPU
 * kernels. */
static bool c_kernels(const llm_decoder_t *m) {
  return model_kernel_lang(m->kind) == MODEL_KERNELS_C;
}

/* Bits that hold a token id (the GPU sampler's keys). */
static int id_bits(int vocab) {
  int b = 1;
  while (b < 31 && (1 << b) < vocab) b++;
  return b;
}

struct item_args {
  hcq_buffer_t *bufs[MAX_ITEM_BUFS];
  uint32_t outs[4];
  hcq_operand_t vals[2];
};

/* ---- programs ---- */

static hcq_status_t program(llm_decoder_t *m, int d, const char *entry, const char *defines,
                            hcq_program_t **out) {
  const llm_config_t *c = &m->c;
  char key[1024];
  int len = snprintf(key, sizeof(key),
                     "#define DIM %d\n#define FFN %d\n#define NH %d\n#define NKV %d\n#define HD "
                     "%d\n#define RD %d\n#define VOCAB %d\n"
                     "#define CTX %d\n#define NORM_EPS %.9gf\n#define LLM_ISA_CAP %d\n%s",
                     c->dim, c->ffn, c->n_heads, c->n_kv_heads, c->head_dim, c->rope_dim, c->vocab,
                     m->ctx_alloc, (double)c->norm_eps, m->isa_cap, defines);
  if (len < 0 || (size_t)len >= sizeof(key))
    return hcq_status_make(HCQ_INTERNAL, "llm decoder: program defines too long");
  /* what the architecture changes (kernels.c; on every kind: gpu_abi.h) */
  int arch_len =
      snprintf(key + len, sizeof(key) - (size_t)len,
               "#define QD %d\n#define ROPE_NEOX %d\n#define EMB_SCALE %.9ef\n"
               "#define ATTN_SCALE %.9ef\n#define FFN_GELU %d\n",
               llm_q_dim(c), c->rope_neox, (double)c->emb_scale, (double)c->attn_scale, c->gelu);
  if (arch_len < 0 || (size_t)(len += arch_len) >= sizeof(key))
    return hcq_status_make(HCQ_INTERNAL, "llm decoder: program defines too long");
  if (m->slots) { /* a batch decoder: rows of their own sequences (kernels.c, BATCH) */
    int batch_len = snprintf(key + len, sizeof(key) - (size_t)len,
                             "#define BATCH 1\n#define BATCH_ROWS %d\n", m->max_batch);
    if (batch_len < 0 || (size_t)(len += batch_len) >= sizeof(key))
      return hcq_status_make(HCQ_INTERNAL, "llm decoder: program defines too long");
  }
  model_kernel_lang_t lang = model_kernel_lang(m->kind);
  if (lang == MODEL_KERNELS_C) { /* the classifier's rows per work-group (llm_cls_rows) */
    int cls_len =
        snprintf(key + len, sizeof(key) - (size_t)len, "#define CLS_ROWS %d\n", CPU_CLS_ROWS);
    if (cls_len < 0 || (size_t)(len += cls_len) >= sizeof(key))
      return hcq_status_make(HCQ_INTERNAL, "llm decoder: program defines too long");
  }
  /* model_program_create adds KERNEL_<entry>, which picks the one main() */
  if (lang == MODEL_KERNELS_GLSL)
    snprintf(key + len, sizeof(key) - (size_t)len,
             "#define LANES %d\n#define ROWS %d\n#define CLS_ROWS %d\n"
             "#define SEL %d\n#define ID_BITS %d\n",
             VK_LANES, VK_ROWS, VK_CLS_ROWS, VK_SEL, id_bits(c->vocab));
  /* NORM_EPS_BITS: the stand-ins' twins read the shape back from integers */
  if (warp_kind(m->kind)) {
    uint32_t eps_bits;
    memcpy(&eps_bits, &c->norm_eps, 4);
    snprintf(key + len, sizeof(key) - (size_t)len,
             "#define KERNEL_%s\n#define ROWS %d\n#define CLS_ROWS %d\n#define SEL %d\n"
             "#define ID_BITS %d\n#define NORM_EPS_BITS %u\n",
             entry, WARP, WARP_CLS_ROWS, WARP_SEL, id_bits(c->vocab), (unsigned)eps_bits);
  }
  for (int i = 0; i < m->nprograms; i++)
    if (m->programs[i].dev == d &&
        !strcmp(m->programs[i].key + strlen(m->programs[i].key) + 1, entry) &&
        !strcmp(m->programs[i].key, key)) {
      *out = m->programs[i].prog;
      return NULL;
    }
  if (m->nprograms == MAX_PROGRAMS)
    return hcq_status_make(HCQ_INTERNAL, "llm decoder: more than %d programs", MAX_PROGRAMS);
  size_t klen = strlen(key), elen = strlen(entry);
  char *stored = malloc(klen + 1 + elen + 1);
  if (!stored) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  memcpy(stored, key, klen + 1);
  memcpy(stored + klen + 1, entry, elen + 1);
  /* the CPU's products */
  const char *first = lang == MODEL_KERNELS_C ? llm_kernels_tiles_source : NULL;
  hcq_status_t st =
      model_program_create(m->d[d].dev, lang, key, first, k_sources[lang], entry, out);
  if (st) {
    free(stored);
    return st;
  }
  m->programs[m->nprograms++] = (program_entry_t){d, stored, *out};
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

void llm_item_list_free(item_list_t *L) {
  free(L->items);
  free(L->args);
  *L = (item_list_t){0};
}

typedef struct kernel_desc {
  hcq_program_t *prog;
  hcq_buffer_t *bufs[MAX_ITEM_BUFS];
  const uint32_t *outs; /* which bufs it writes (NULL: the first nouts) */
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
  for (size_t i = 0; i < k->nouts; i++) a->outs[i] = k->outs ? k->outs[i] : (uint32_t)i;
  memcpy(a->vals, k->vals, sizeof(a->vals));
  it->kind = HCQ_ITEM_KERNEL;
  it->kernel =
      (hcq_kernel_item_t){k->prog,
                          a->bufs,
                          k->nbufs,
                          a->outs,
                          k->nouts,
                          a->vals,
                          k->nvals,
                          {k->grid[0], unset(k->grid[1]) ? hcq_imm(1) : k->grid[1], hcq_imm(1)},
                          {unset(k->local) ? hcq_imm(1) : k->local, hcq_imm(1), hcq_imm(1)}};
  L->kernels++;
  return NULL;
}

static hcq_status_t add_transfer(item_list_t *L, hcq_buffer_t *dst, hcq_buffer_t *src,
                                 uint64_t bytes) {
  TRY(list_reserve(L));
  L->args[L->n] = (item_args_t){0};
  hcq_exec_item_t *it = &L->items[L->n++];
  it->kind = HCQ_ITEM_TRANSFER;
  it->transfer = (hcq_transfer_item_t){dst, src, bytes};
  return NULL;
}

/* An expression the decoder keeps (released at destroy). */
static hcq_expr_t *keep(llm_decoder_t *m, hcq_expr_t *e) {
  if (e && m->nexprs < (int)(sizeof(m->exprs) / sizeof(m->exprs[0])))
    m->exprs[m->nexprs++] = e;
  else if (e)
    hcq_expr_release(e), e = NULL;
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
  K_EMBED,
  K_BEGIN,
  K_NORM,
  K_QKV,
  K_ROPE,
  K_ATTN,
  K_QUANTIZE,
  K_WO,
  K_NORM_ADD,
  K_GATE_UP,
  K_DOWN,
  K_NORM_LAST,
  K_CLASSIFY,
  K_SELECT
} kernel_id_t;

/* What a pass's geometry depends on: its token count n, its tiles of TILE tokens (CPU), whether it
 * chooses a token (1 or the variable choose) and the classifier's grid (choose x its groups). */
typedef struct pass_ops {
  hcq_operand_t n, tiles, chosen, cls_grid;
  int tok_per_group;
  hcq_operand_t cls_rows; /* GPU kinds: the classifier's grid y, a batch's choosing rows (else 1) */
} pass_ops_t;

typedef struct geometry {
  hcq_operand_t grid[2], local;
} geometry_t;

/* CPU (kernels.c): a group is a block of 16 rows (32 FFN rows for gate_up, the classifier's
 * CPU_CLS_ROWS) times a tile of TILE tokens; the group size is the group's work in MACS_PER_ITEM
 * (the device shares a launch between its threads by it), never read by the kernels. */
static geometry_t cpu_geometry(const llm_decoder_t *m, kernel_id_t k, const pass_ops_t *o) {
  const llm_config_t *c = &m->c;
  int gq = (llm_q_dim(c) + 15) / 16, gdim = (c->dim + 15) / 16, gkv = (llm_kv_dim(c) + 15) / 16,
      gffn = (c->ffn + 31) / 32, tpg = o->tok_per_group;
  hcq_operand_t rows_local = hcq_imm(c->dim / 8 + 1);
  switch (k) {
    case K_EMBED:
    case K_NORM:
    case K_NORM_ADD:
    case K_QUANTIZE: return (geometry_t){{o->n}, rows_local};
    case K_BEGIN: return (geometry_t){{hcq_imm(1)}, hcq_imm(1)};
    case K_QKV: return (geometry_t){{hcq_imm(gq + 2 * gkv), o->tiles}, cost(16.0 * c->dim * tpg)};
    case K_ROPE:
      return (geometry_t){{hcq_imm(c->n_heads + c->n_kv_heads), o->n},
                          hcq_imm(c->head_dim / 4 + 1)};
    /* a group's work grows with the position; counted at 256 positions (2 x 256 x head_dim
     * multiply-adds of floats, 8 a work-item) */
    case K_ATTN:
      return (geometry_t){{hcq_imm(c->n_heads), o->n}, hcq_imm((int64_t)c->head_dim * 256 * 2 / 8)};
    case K_WO: return (geometry_t){{hcq_imm(gdim), o->tiles}, cost(16.0 * llm_q_dim(c) * tpg)};
    case K_GATE_UP: return (geometry_t){{hcq_imm(gffn), o->tiles}, cost(64.0 * c->dim * tpg)};
    case K_DOWN: return (geometry_t){{hcq_imm(gdim), o->tiles}, cost(16.0 * c->ffn * tpg)};
    case K_NORM_LAST: return (geometry_t){{o->chosen}, rows_local};
    case K_CLASSIFY: return (geometry_t){{o->cls_grid}, cost((double)CPU_CLS_ROWS * c->dim)};
    case K_SELECT: return (geometry_t){{o->chosen}, hcq_imm(1)};
  }
  return (geometry_t){{hcq_imm(1)}, hcq_imm(1)};
}

/* The GPU kinds share one split and differ in its sizes: a group of `lanes` threads, one token each
 * (grid y = n); products of `rows` rows a group (`gate_rows` FFN rows for gate_up: one activation
 * block), the classifier's rows by llm_cls_rows(); attention a group per (head, token); the sampler
 * one group of `sel`. */
typedef struct gpu_shape {
  int lanes, rows, gate_rows, sel;
} gpu_shape_t;

/* Vulkan (kernels.glsl): groups of VK_LANES invocations (one lavapipe vector), products of VK_ROWS
 * rows in rounds of VK_LANES. CUDA (kernels.cu): blocks of one warp, WARP rows a block. Metal
 * (kernels.metal): kernels.cu's split with a SIMD group of 32 for a warp, so that the stand-ins
 * share one set of host twins (tests/llm_twins.h). */
static const gpu_shape_t vulkan_shape = {VK_LANES, VK_ROWS, 32, VK_SEL},
                         warp_shape = {WARP, WARP, WARP, WARP_SEL};

static geometry_t gpu_geometry(const llm_decoder_t *m, kernel_id_t k, const pass_ops_t *o,
                               const gpu_shape_t *s) {
  const llm_config_t *c = &m->c;
  int gq = (llm_q_dim(c) + s->rows - 1) / s->rows, gdim = (c->dim + s->rows - 1) / s->rows,
      gkv = (llm_kv_dim(c) + s->rows - 1) / s->rows;
  hcq_operand_t lanes = hcq_imm(s->lanes);
  switch (k) {
    case K_EMBED:
    case K_NORM:
    case K_NORM_ADD:
    case K_QUANTIZE: return (geometry_t){{o->n}, lanes};
    case K_ROPE: return (geometry_t){{hcq_imm(c->n_heads + c->n_kv_heads), o->n}, lanes};
    case K_BEGIN: return (geometry_t){{hcq_imm(1)}, lanes};
    case K_QKV: return (geometry_t){{hcq_imm(gq + 2 * gkv), o->n}, lanes};
    case K_ATTN: return (geometry_t){{hcq_imm(c->n_heads), o->n}, lanes};
    case K_WO:
    case K_DOWN: return (geometry_t){{hcq_imm(gdim), o->n}, lanes};
    case K_GATE_UP:
      return (geometry_t){{hcq_imm((c->ffn + s->gate_rows - 1) / s->gate_rows), o->n}, lanes};
    case K_NORM_LAST: return (geometry_t){{o->chosen}, lanes};
    case K_CLASSIFY: return (geometry_t){{o->cls_grid, o->cls_rows}, lanes};
    case K_SELECT: return (geometry_t){{o->chosen}, hcq_imm(s->sel)};
  }
  return (geometry_t){{hcq_imm(1)}, lanes};
}

static geometry_t geometry(const llm_decoder_t *m, kernel_id_t k, const pass_ops_t *o) {
  switch (model_kernel_lang(m->kind)) {
    case MODEL_KERNELS_GLSL: return gpu_geometry(m, k, o, &vulkan_shape);
    case MODEL_KERNELS_CUDA:
    case MODEL_KERNELS_MSL: return gpu_geometry(m, k, o, &warp_shape);
    default: return cpu_geometry(m, k, o);
  }
}

/* The kernel k with its buffers and values, at k's geometry. */
static hcq_status_t add(llm_decoder_t *m, item_list_t *L, const pass_ops_t *o, kernel_id_t k,
                        hcq_program_t *prog, hcq_buffer_t *const *bufs, size_t nbufs, size_t nouts,
                        const hcq_operand_t *vals, size_t nvals) {
  geometry_t g = geometry(m, k, o);
  /* llm_qkv without fused rope also writes kraw (its 11th buffer) */
  static const uint32_t qkv_raw_outs[] = {0, 1, 2, 10};
  /* a batch's llm_embed also writes each row's token into the history (its 5th buffer) */
  static const uint32_t embed_history_outs[] = {0, 1, 4};
  const uint32_t *outs = k == K_QKV && nouts == 4     ? qkv_raw_outs
                         : k == K_EMBED && nouts == 3 ? embed_history_outs
                                                      : NULL;
  kernel_desc_t d = {prog, {0}, outs, nbufs, nouts, nvals, {{0}}, {g.grid[0], g.grid[1]}, g.local};
  memcpy(d.bufs, bufs, nbufs * sizeof(bufs[0]));
  if (nvals) memcpy(d.vals, vals, nvals * sizeof(vals[0]));
  return add_kernel(L, &d);
}

/* One layer's programs on device d (NULL: a kernel the layer does not run). */
typedef struct layer_programs {
  hcq_program_t *norm, *ffn_norm, *qkv, *rope, *attn, *quant, *quant_h, *wo, *norm_add, *gate_up,
      *down;
} layer_programs_t;

/* The layer's programs, with its matrices' layouts and the architecture's options defined. */
static hcq_status_t layer_programs(llm_decoder_t *m, int l, int d, layer_programs_t *p) {
  const llm_config_t *c = &m->c;
  const layer_state_t *S = &m->layers[l];
  bool gpu = !c_kernels(m), fused = !c->rope_neox && !c->qk_norm, swa = llm_layer_swa(c, l);
  *p = (layer_programs_t){0};
  /* Inputs rounded as llama.cpp's Q8_K where every matrix reading them is a K-quant (CPU kernels)
   */
  const llm_layout_t *lay = S->layout;
  bool k_qkv = !gpu && llm_act_superblock(lay[W_Q]) && llm_act_superblock(lay[W_K]) &&
               llm_act_superblock(lay[W_V]);
  bool k_gate_up = !gpu && llm_act_superblock(lay[W_GATE]) && llm_act_superblock(lay[W_UP]);
  bool k_wo = !gpu && llm_act_superblock(lay[W_O]),
       k_down = !gpu && llm_act_superblock(lay[W_DOWN]);
  char def[3][64], defs[384];
  TRY(program(m, d, "llm_norm", k_qkv ? "#define ACT_K 1\n" : "", &p->norm));
  TRY(program(m, d, "llm_norm", k_gate_up ? "#define ACT_K 1\n" : "", &p->ffn_norm));
  snprintf(defs, sizeof(defs), "%s%s%s%s%s", layout_define(def[0], 64, "WQ_LAYOUT", S->layout[W_Q]),
           layout_define(def[1], 64, "WK_LAYOUT", S->layout[W_K]),
           layout_define(def[2], 64, "WV_LAYOUT", S->layout[W_V]),
           fused ? "" : "#define QKV_FUSED 0\n", c->qkv_bias ? "#define QKV_BIAS 1\n" : "");
  TRY(program(m, d, "llm_qkv", defs, &p->qkv));
  if (!fused)
    TRY(program(m, d, "llm_rope_heads", c->qk_norm ? "#define QK_NORM 1\n" : "", &p->rope));
  snprintf(defs, sizeof(defs), swa ? "#define WINDOW %d\n" : "", c->swa_window);
  TRY(program(m, d, "llm_attn", defs, &p->attn));
  TRY(program(m, d, "llm_quantize", k_wo ? "#define ACT_K 1\n" : "", &p->quant));
  if (k_down)
    TRY(program(m, d, "llm_quantize", "#define ACT_K 1\n#define QUANT_W FFN\n", &p->quant_h));
  /* GPU products hold their input in registers: its length is a constant there (K_IN: wo's is the q
   * width, as a number, since the Metal stand-in reads K_IN back as a number or DIM or FFN) */
  const char *set = c->post_norms ? "#define MATMUL_SET 1\n" : "";
  char k_in[32] = "";
  if (gpu) snprintf(k_in, sizeof(k_in), "#define K_IN %d\n", llm_q_dim(c));
  snprintf(defs, sizeof(defs), "%s%s%s", layout_define(def[0], 64, "W_LAYOUT", S->layout[W_O]),
           k_in, set);
  TRY(program(m, d, "llm_matmul_add", defs, &p->wo));
  snprintf(defs, sizeof(defs), "%s%s%s", layout_define(def[0], 64, "WG_LAYOUT", S->layout[W_GATE]),
           layout_define(def[1], 64, "WU_LAYOUT", S->layout[W_UP]),
           k_down ? "#define DOWN_ACT_K 1\n" : "");
  TRY(program(m, d, "llm_gate_up", defs, &p->gate_up));
  snprintf(defs, sizeof(defs), "%s%s%s", layout_define(def[0], 64, "W_LAYOUT", S->layout[W_DOWN]),
           gpu ? "#define K_IN FFN\n" : "", set);
  TRY(program(m, d, "llm_matmul_add", defs, &p->down));
  if (c->post_norms) TRY(program(m, d, "llm_norm_add", "", &p->norm_add));
  return NULL;
}

/* One layer's kernels on device d: norm, q k v (their rope and norms), attention, the output
 * projection (and its post-norm), norm, gate and up, down (and its post-norm). */
static hcq_status_t add_layer(llm_decoder_t *m, item_list_t *L, const pass_ops_t *o, int l, int d) {
  const llm_config_t *c = &m->c;
  dev_state_t *s = &m->d[d];
  layer_state_t *S = &m->layers[l];
  bool fused = !c->rope_neox && !c->qk_norm, swa = llm_layer_swa(c, l);
  layer_programs_t p;
  TRY(layer_programs(m, l, d, &p));
  hcq_buffer_t **w = S->b, *table = swa ? s->rope_swa : s->rope,
               *proj_out = c->post_norms ? s->xb : s->x;
  hcq_operand_t k_q = hcq_imm(llm_q_dim(c)), k_ffn = hcq_imm(c->ffn), zero = hcq_imm(0);
  TRY(add(m, L, o, K_NORM, p.norm, (hcq_buffer_t *[]){s->xf, s->xq, s->x, w[N_ATTN_NORM], s->info},
          5, 2, &zero, 1));
  hcq_buffer_t *qkv_bufs[] = {s->q,   w[K_CACHE], w[V_CACHE], s->xf,   s->xq,  w[W_Q], w[W_K],
                              w[W_V], table,      s->info,    s->kraw, w[B_Q], w[B_K], w[B_V]};
  size_t nqkv = c->qkv_bias ? 14 : fused ? 10 : 11;
  TRY(add(m, L, o, K_QKV, p.qkv, qkv_bufs, nqkv, fused ? 3 : 4, NULL, 0));
  if (!fused) {
    hcq_buffer_t *rope_bufs[] = {s->q, w[K_CACHE], s->kraw, table, s->info, w[N_Q], w[N_K]};
    TRY(add(m, L, o, K_ROPE, p.rope, rope_bufs, c->qk_norm ? 7 : 5, 2, NULL, 0));
  }
  TRY(add(m, L, o, K_ATTN, p.attn,
          (hcq_buffer_t *[]){s->att, s->q, w[K_CACHE], w[V_CACHE], s->info}, 5, 1, NULL, 0));
  if (llm_layout_quantized(S->layout[W_O]))
    TRY(add(m, L, o, K_QUANTIZE, p.quant, (hcq_buffer_t *[]){s->attq, s->att}, 2, 1, NULL, 0));
  TRY(add(m, L, o, K_WO, p.wo, (hcq_buffer_t *[]){proj_out, s->att, s->attq, w[W_O], s->info}, 5, 1,
          &k_q, 1));
  if (c->post_norms)
    TRY(add(m, L, o, K_NORM_ADD, p.norm_add, (hcq_buffer_t *[]){s->x, s->xb, w[N_POST_ATTN]}, 3, 1,
            NULL, 0));
  TRY(add(m, L, o, K_NORM, p.ffn_norm,
          (hcq_buffer_t *[]){s->xf, s->xq, s->x, w[N_FFN_NORM], s->info}, 5, 2, &zero, 1));
  TRY(add(m, L, o, K_GATE_UP, p.gate_up,
          (hcq_buffer_t *[]){s->hf, s->hq, s->xf, s->xq, w[W_GATE], w[W_UP], s->info}, 7, 2, NULL,
          0));
  if (p.quant_h)
    TRY(add(m, L, o, K_QUANTIZE, p.quant_h, (hcq_buffer_t *[]){s->hq, s->hf}, 2, 1, NULL, 0));
  TRY(add(m, L, o, K_DOWN, p.down, (hcq_buffer_t *[]){proj_out, s->hf, s->hq, w[W_DOWN], s->info},
          5, 1, &k_ffn, 1));
  if (c->post_norms)
    TRY(add(m, L, o, K_NORM_ADD, p.norm_add, (hcq_buffer_t *[]){s->x, s->xb, w[N_POST_FFN]}, 3, 1,
            NULL, 0));
  return NULL;
}

typedef enum list_kind { LIST_STEP, LIST_PASS, LIST_BATCH } list_kind_t;

/* The operands of a list's geometry. The step: one token at pos. The pass: n tokens from p0, the
 * classifier only when choose is 1. A batch: n rows (each its own position, kernels.c's BATCH),
 * choose of them choosing a token: the CPU classifier takes them all in each group, the GPU's
 * grid y. */
static hcq_status_t list_ops(llm_decoder_t *m, list_kind_t kind, pass_ops_t *o) {
  if (kind == LIST_STEP) {
    *o = (pass_ops_t){hcq_imm(1), hcq_imm(1), hcq_imm(1), hcq_imm(m->cls_groups), 1, hcq_imm(1)};
    return NULL;
  }
  hcq_operand_t tiles =
      hcq_sym(binary(m, HCQ_EXPR_FLOORDIV, binary(m, HCQ_EXPR_ADD, m->n, TILE - 1), TILE));
  /* A pass that is not a prompt's last chooses no token (its classifier would read weights for
   * nothing, and its token would overwrite the next pass's first prompt token): choose = 0 gives
   * those launches an empty grid. */
  hcq_operand_t cls = kind == LIST_PASS ? hcq_sym(binary(m, HCQ_EXPR_MUL, m->choose, m->cls_groups))
                                        : hcq_imm(m->cls_groups);
  bool gpu_rows = kind == LIST_BATCH && !c_kernels(m);
  /* A batch's CPU groups are costed at one row (tok_per_group), as a step's: the thread split of a
   * decoding step's launches (mostly 1..8 rows) is then the step's (measured: 3-10% faster at 1 and
   * 8 sequences than costing a whole tile of 8). */
  int tok_per_group = kind == LIST_BATCH ? 1 : TILE;
  *o = (pass_ops_t){hcq_sym(m->n), tiles,         hcq_sym(m->choose),
                    cls,           tok_per_group, gpu_rows ? hcq_sym(m->choose) : hcq_imm(1)};
  if (!o->tiles.sym || (kind == LIST_PASS && !o->cls_grid.sym))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory building the items");
  return NULL;
}

/* The forward pass of n tokens from position p0. pass: n and p0 are the prompt pass's variables and
 * transfers move max_batch rows; otherwise n is 1 and p0 the step's pos (a batch: list_ops). Only
 * the first kernel on each device takes p0 and n as values (kernels.c, info_t): a decoding replay
 * patches one word per device. The list is the same for every kind; geometry() and the sources
 * differ. */
static hcq_status_t build_items(llm_decoder_t *m, item_list_t *L, list_kind_t kind) {
  const llm_config_t *c = &m->c;
  bool pass = kind != LIST_STEP;
  hcq_operand_t p0 = hcq_sym(pass ? m->p0 : m->pos); /* a batch's: the step's parity */
  hcq_operand_t n = pass ? hcq_sym(m->n) : hcq_imm(1);
  pass_ops_t o;
  TRY(list_ops(m, kind, &o));
  int rows_copied = pass ? m->max_batch : 1;
  uint64_t x_bytes = (uint64_t)rows_copied * (uint64_t)c->dim * 4;
  char def[1][64];
  dev_state_t *s0 = &m->d[0];
  hcq_program_t *prog;
  hcq_operand_t p0_n[2] = {p0, n}, zero = hcq_imm(0), one = hcq_imm(1);

  TRY(program(m, 0, "llm_embed", layout_define(def[0], 64, "W_LAYOUT", m->emb_layout), &prog));
  bool batch = kind == LIST_BATCH;
  TRY(add(m, L, &o, K_EMBED, prog,
          (hcq_buffer_t *[]){s0->x, s0->info, m->tokens, m->emb, m->history}, batch ? 5 : 4,
          batch ? 3 : 2, p0_n, 2));
  for (int l = 0; l < c->n_layers; l++) {
    int d = l < m->split ? 0 : 1;
    dev_state_t *s = &m->d[d];
    if (d == 1 && l == m->split) {
      TRY(add_transfer(L, s->x, s0->x, x_bytes));
      TRY(program(m, d, "llm_begin", "", &prog));
      TRY(add(m, L, &o, K_BEGIN, prog, (hcq_buffer_t *[]){s->info}, 1, 1, p0_n, 2));
    }
    TRY(add_layer(m, L, &o, l, d));
  }
  if (m->split < c->n_layers) TRY(add_transfer(L, s0->x, m->d[1].x, x_bytes));
  hcq_program_t *norm, *classify, *select;
  bool k_cls = c_kernels(m) && llm_act_superblock(m->cls_layout);
  TRY(program(m, 0, "llm_norm", k_cls ? "#define ACT_K 1\n" : "", &norm));
  TRY(program(m, 0, "llm_classify", layout_define(def[0], 64, "W_LAYOUT", m->cls_layout),
              &classify));
  TRY(program(m, 0, "llm_select", "", &select));
  hcq_operand_t groups = hcq_imm(m->cls_groups);
  TRY(add(m, L, &o, K_NORM_LAST, norm,
          (hcq_buffer_t *[]){s0->xf, s0->xq, s0->x, m->out_norm, s0->info}, 5, 2, &one, 1));
  TRY(add(m, L, &o, K_CLASSIFY, classify,
          (hcq_buffer_t *[]){m->logits, m->best, s0->xf, s0->xq, m->cls, s0->info},
          kind == LIST_BATCH ? 6 : 5, 2, &zero, 1));
  TRY(add(m, L, &o, K_SELECT, select,
          (hcq_buffer_t *[]){m->tokens, m->scratch, m->best, m->logits, m->params, s0->info,
                             m->history},
          batch ? 7 : 6, 2, &groups, 1));
  return NULL;
}

hcq_status_t llm_build_item_lists(llm_decoder_t *m) {
  if (m->slots) return build_items(m, &m->pass, LIST_BATCH); /* a batch decoder's one list */
  TRY(build_items(m, &m->step, LIST_STEP));
  return build_items(m, &m->pass, LIST_PASS);
}
