/* The encoder on hcq: weights in device buffers, one query as a list of exec items whose grids and
 * values depend on the variable n (the token count), run eagerly item by item or captured once and
 * replayed for every n. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minilm.h"
#include "model_kernels.h"
#include "model_status.h"

/* Embedded at build time: kernels.c (CPU), kernels.glsl (Vulkan), kernels.cu (CUDA). */
extern const char minilm_kernels_source[], minilm_kernels_glsl_source[],
    minilm_kernels_cuda_source[];

/* CPU tiles (kernels.c): RB rows x CB columns per matrix-product group, EMB_ROWS rows per embedding
 * group, QB queries per attention group. */
enum { RB = 16, CB = 64, EMB_ROWS = 16, QB = 16, MAX_ITEM_BUFS = 8 };
/* CUDA kernels (kernels.cu): COLS threads a group along a row of a matrix product,
 * GROUP threads per row of the row kernels. */
enum { GPU_COLS = 32, GPU_GROUP = 128 };
/* kernels.glsl: VK_LANES invocations a group (lavapipe's vector width at 256 bits: a group of
 * one vector needs no coroutines for barriers); a product's group is VK_PCOLS columns x VK_ROWS
 * rows. */
enum { VK_LANES = 8, VK_PCOLS = 64, VK_ROWS = 4 };

// clang-format off
#define KERNELS(X)          \
  X(EMBED, "mlm_embed")     \
  X(QKV, "mlm_qkv")         \
  X(ATTN, "mlm_attn")       \
  X(PROJ_LN, "mlm_proj_ln") \
  X(FFN_UP, "mlm_ffn_up")   \
  X(DOWN_LN, "mlm_down_ln") \
  X(POOL, "mlm_pool")       \
  X(PROJ, "mlm_proj")       \
  X(DOWN, "mlm_down")       \
  X(RES_LN, "mlm_res_ln")
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
/* Buffers each kernel takes (its vals are always n). */
/* The kernels in each language (none in MSL yet). */
static const char *const k_sources[MODEL_KERNELS_NONE] = {
    minilm_kernels_source, minilm_kernels_glsl_source, minilm_kernels_cuda_source, NULL};
static const size_t k_nbufs[K_COUNT] = {7, 5, 3, 6, 4, 6, 2, 4, 4, 4};

enum { W_QKV, B_QKV, W_O, B_O, LN1_W, LN1_B, W_I, B_I, W_D, B_D, LN2_W, LN2_B, LAYER_BUFS };

typedef struct item_args {
  hcq_buffer_t *bufs[MAX_ITEM_BUFS];
  uint32_t outs[2];
  hcq_operand_t vals[2];
} item_args_t;

struct minilm_encoder {
  minilm_config_t c;
  model_kernel_lang_t lang; /* of the device's kind: the kernels and their geometry follow it */
  int maxlen;               /* max_seq_len rounded up to 16: the width of the transposed keys */
  hcq_device_t *dev;
  hcq_program_t *prog[K_COUNT];
  hcq_buffer_t *layer[MINILM_MAX_LAYERS][LAYER_BUFS];
  hcq_buffer_t *word, *pos, *type, *emb_ln_w, *emb_ln_b;
  hcq_buffer_t *ids, *x, *qkv, *kt, *ctx, *inter, *out;
  hcq_buffer_t *y; /* CPU: the output and down projections before their residual and LayerNorm */
  hcq_expr_t *n, *blocks; /* n and ceil(n / 16) */
  hcq_expr_t *vk_blocks;  /* ceil(n / VK_ROWS): the row blocks of the GLSL products */
  /* CPU group size of attention: its groups' multiply-adds / 64 (min(n, 16) queries x n keys), so
   * that a short query's attention, microseconds of work, stays on one thread. The products keep
   * constant group sizes and so run on both threads even for one token: a short query is bound by
   * reading the weights (42 MB a query), and two cores read them faster than one. */
  hcq_expr_t *attn_local;
  hcq_exec_item_t *items;
  item_args_t *args;
  size_t nitems;
  int cur_n; /* the n of the ids set last (0: none yet) */
  int captures;
  hcq_jit_t *jit;
};

/* PyTorch's [out][in] weight w as [in][out] into dst, whose rows are ld floats wide. */
static void transpose(float *dst, size_t ld, const float *w, size_t out, size_t in) {
  for (size_t o = 0; o < out; o++)
    for (size_t i = 0; i < in; i++) dst[i * ld + o] = w[o * in + i];
}

/* The CPU and Vulkan split the products that a LayerNorm follows into a product split by columns
 * (mlm_proj, mlm_down) and a row kernel (mlm_res_ln): a short query's few rows would otherwise be
 * one or two groups, one thread reading a third of the weights while the other waits. The CUDA
 * kernels keep them fused (a work-group a row). */
static bool has_kernel(const minilm_encoder_t *m, int k) {
  bool split = k == K_PROJ || k == K_DOWN || k == K_RES_LN,
       fused = k == K_PROJ_LN || k == K_DOWN_LN;
  return m->lang == MODEL_KERNELS_CUDA ? !split : !fused;
}

static hcq_status_t make_programs(minilm_encoder_t *m) {
  const minilm_config_t *c = &m->c;
  char defines[700];
  uint32_t eps_bits;
  memcpy(&eps_bits, &c->ln_eps, 4);
  int n = snprintf(
      defines, sizeof(defines),
      "#define HIDDEN %d\n#define HEADS %d\n#define HEAD_DIM %d\n#define INTER %d\n#define VOCAB "
      "%d\n"
      "#define MAXLEN %d\n#define LN_EPS %.9gf\n#define RB %d\n#define CB %d\n#define EMB_ROWS %d\n"
      "#define QB %d\n#define COLS %d\n#define GROUP %d\n#define LN_EPS_BITS %u\n#define PCOLS "
      "%d\n#define ROWS %d\n",
      c->hidden, c->heads, c->hidden / c->heads, c->intermediate, c->vocab_size, m->maxlen,
      (double)c->ln_eps, RB, CB, EMB_ROWS, QB, GPU_COLS, GPU_GROUP, eps_bits, VK_PCOLS, VK_ROWS);
  if (n < 0 || (size_t)n >= sizeof(defines))
    return hcq_status_make(HCQ_INTERNAL, "minilm encoder: defines too long");
  const char *body = k_sources[m->lang];
  for (int k = 0; k < K_COUNT; k++) {
    if (!has_kernel(m, k)) continue;
    TRY(model_program_create(m->dev, m->lang, defines, NULL, body, k_entries[k], &m->prog[k]));
    TRY(hcq_program_declare_args(m->prog[k], k_nbufs[k], 1));
  }
  return NULL;
}

/* kernels.glsl reads a product's weights [K][N] as column blocks of VK_PCOLS: [N /
 * VK_PCOLS][K][VK_PCOLS], so that a work-group's weights are one contiguous stretch. t is reordered
 * in place (through tmp). */
static void vk_block_columns(float *t, float *tmp, size_t K, size_t N) {
  for (size_t b = 0; b < N / VK_PCOLS; b++)
    for (size_t k = 0; k < K; k++)
      memcpy(tmp + (b * K + k) * VK_PCOLS, t + k * N + b * VK_PCOLS, VK_PCOLS * 4);
  memcpy(t, tmp, K * N * 4);
}

/* Layer l's weights, the products' transposed (and on Vulkan in column blocks) through t and tmp.
 */
static hcq_status_t upload_layer(minilm_encoder_t *m, const minilm_layer_weights_t *w, int l,
                                 float *t, float *tmp) {
  const minilm_config_t *c = &m->c;
  size_t h = (size_t)c->hidden, in = (size_t)c->intermediate;
  bool vk = m->lang == MODEL_KERNELS_GLSL;
  hcq_buffer_t **b = m->layer[l];
  transpose(t, 3 * h, w->q_w, h, h);
  transpose(t + h, 3 * h, w->k_w, h, h);
  transpose(t + 2 * h, 3 * h, w->v_w, h, h);
  if (vk) vk_block_columns(t, tmp, h, 3 * h);
  TRY(model_upload(m->dev, t, 3 * h * h * 4, "qkv weight", l, &b[W_QKV]));
  TRY(model_upload(m->dev, NULL, 3 * h * 4, "qkv bias", l, &b[B_QKV]));
  TRY(hcq_buffer_copyin(b[B_QKV], 0, w->q_b, h * 4));
  TRY(hcq_buffer_copyin(b[B_QKV], h * 4, w->k_b, h * 4));
  TRY(hcq_buffer_copyin(b[B_QKV], 2 * h * 4, w->v_b, h * 4));
  transpose(t, h, w->o_w, h, h);
  if (vk) vk_block_columns(t, tmp, h, h);
  TRY(model_upload(m->dev, t, h * h * 4, "attention output weight", l, &b[W_O]));
  TRY(model_upload(m->dev, w->o_b, h * 4, "attention output bias", l, &b[B_O]));
  TRY(model_upload(m->dev, w->ln1_w, h * 4, "attention LayerNorm weight", l, &b[LN1_W]));
  TRY(model_upload(m->dev, w->ln1_b, h * 4, "attention LayerNorm bias", l, &b[LN1_B]));
  transpose(t, in, w->i_w, in, h);
  if (vk) vk_block_columns(t, tmp, h, in);
  TRY(model_upload(m->dev, t, in * h * 4, "intermediate weight", l, &b[W_I]));
  TRY(model_upload(m->dev, w->i_b, in * 4, "intermediate bias", l, &b[B_I]));
  transpose(t, h, w->d_w, h, in);
  if (vk) vk_block_columns(t, tmp, in, h);
  TRY(model_upload(m->dev, t, in * h * 4, "output weight", l, &b[W_D]));
  TRY(model_upload(m->dev, w->d_b, h * 4, "output bias", l, &b[B_D]));
  TRY(model_upload(m->dev, w->ln2_w, h * 4, "output LayerNorm weight", l, &b[LN2_W]));
  return model_upload(m->dev, w->ln2_b, h * 4, "output LayerNorm bias", l, &b[LN2_B]);
}

static hcq_status_t make_buffers(minilm_encoder_t *m, const minilm_model_t *md) {
  const minilm_config_t *c = &m->c;
  size_t h = (size_t)c->hidden, in = (size_t)c->intermediate, L = (size_t)m->maxlen;
  TRY(model_upload(m->dev, md->word_emb, (size_t)c->vocab_size * h * 4, "word embeddings", -1,
                   &m->word));
  TRY(model_upload(m->dev, md->pos_emb, (size_t)c->max_positions * h * 4, "position embeddings", -1,
                   &m->pos));
  TRY(model_upload(m->dev, md->type_emb, h * 4, "token type embedding 0", -1, &m->type));
  TRY(model_upload(m->dev, md->emb_ln_w, h * 4, "embedding LayerNorm weight", -1, &m->emb_ln_w));
  TRY(model_upload(m->dev, md->emb_ln_b, h * 4, "embedding LayerNorm bias", -1, &m->emb_ln_b));
  size_t tbytes = in * h * 4 > 3 * h * h * 4 ? in * h * 4 : 3 * h * h * 4;
  float *t = malloc(tbytes), *tmp = m->lang == MODEL_KERNELS_GLSL ? malloc(tbytes) : NULL;
  if (!t || (m->lang == MODEL_KERNELS_GLSL && !tmp)) {
    free(t), free(tmp);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  }
  hcq_status_t st = NULL;
  for (int l = 0; l < c->layers; l++)
    if ((st = upload_layer(m, &md->layer[l], l, t, tmp))) break;
  free(t), free(tmp);
  if (st) return st;
  TRY(model_upload(m->dev, NULL, L * 4, "token ids", -1, &m->ids));
  TRY(model_upload(m->dev, NULL, L * h * 4, "hidden states", -1, &m->x));
  TRY(model_upload(m->dev, NULL, L * 3 * h * 4, "q, k, v", -1, &m->qkv));
  TRY(model_upload(m->dev, NULL, L * h * 4, "keys transposed", -1, &m->kt));
  TRY(model_upload(m->dev, NULL, L * h * 4, "attention context", -1, &m->ctx));
  TRY(model_upload(m->dev, NULL, L * in * 4, "intermediate", -1, &m->inter));
  TRY(model_upload(m->dev, NULL, h * 4, "embedding", -1, &m->out));
  if (m->lang != MODEL_KERNELS_CUDA)
    TRY(model_upload(m->dev, NULL, L * h * 4, "projection output", -1, &m->y));
  /* Keys past n are read (and their scores dropped): zeros keep them finite. */
  float *zeros = calloc(L * h, 4);
  if (!zeros) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  st = hcq_buffer_copyin(m->kt, 0, zeros, L * h * 4);
  free(zeros);
  return st;
}

/* ceil(n / 16): the row blocks of every tiled kernel (all tiles are 16 rows). */
_Static_assert(RB == 16 && EMB_ROWS == 16 && QB == 16, "one block expression for all tiles");
static hcq_operand_t ceil_n(minilm_encoder_t *m, int d) {
  (void)d;
  return hcq_sym(m->blocks);
}

typedef struct geometry {
  hcq_operand_t grid[3];
  uint32_t local;
  const hcq_expr_t *local_sym; /* instead of local when set */
} geometry_t;

/* The launch geometry of kernel k, with the sources the one thing that differs by kind. CPU: a
 * group is a tile (kernels.c) and its size is its multiply-adds / 64, which decides when the
 * device shares a launch between threads. */
static geometry_t geometry(minilm_encoder_t *m, int k) {
  const minilm_config_t *c = &m->c;
  uint32_t h = (uint32_t)c->hidden, in = (uint32_t)c->intermediate;
  geometry_t g = {{hcq_imm(1), hcq_imm(1), hcq_imm(1)}, 1, NULL};
  if (m->lang == MODEL_KERNELS_C) {
    switch (k) {
      case K_EMBED: g.grid[0] = ceil_n(m, EMB_ROWS), g.local = EMB_ROWS * h / 64; break;
      case K_QKV:
        g.grid[0] = hcq_imm(3 * (int64_t)h / CB), g.grid[1] = ceil_n(m, RB),
        g.local = RB * CB * h / 64;
        break;
      case K_FFN_UP:
        g.grid[0] = hcq_imm((int64_t)in / CB), g.grid[1] = ceil_n(m, RB),
        g.local = RB * CB * h / 64;
        break;
      case K_ATTN:
        g.grid[0] = hcq_imm(c->heads), g.grid[1] = ceil_n(m, QB), g.local_sym = m->attn_local;
        break;
      case K_PROJ:
        g.grid[0] = hcq_imm((int64_t)h / CB), g.grid[1] = ceil_n(m, RB), g.local = RB * CB * h / 64;
        break;
      case K_DOWN:
        g.grid[0] = hcq_imm((int64_t)h / CB), g.grid[1] = ceil_n(m, RB),
        g.local = RB * CB * in / 64;
        break;
      case K_RES_LN: g.grid[0] = ceil_n(m, EMB_ROWS), g.local = EMB_ROWS * h / 64; break;
      default: break; /* K_POOL: one group */
    }
    return g;
  }
  /* kernels.glsl, for lavapipe (see there): groups of VK_LANES invocations, one llvmpipe vector.
   * The products: a group per VK_PCOLS columns x VK_ROWS rows; the row kernels a group per row,
   * attention a group per (head, query). */
  if (m->lang == MODEL_KERNELS_GLSL) {
    hcq_operand_t prows = hcq_sym(m->vk_blocks), rows = hcq_sym(m->n);
    g.local = VK_LANES;
    switch (k) {
      case K_QKV: g.grid[0] = hcq_imm(3 * (int64_t)h / VK_PCOLS), g.grid[1] = prows; break;
      case K_FFN_UP: g.grid[0] = hcq_imm((int64_t)in / VK_PCOLS), g.grid[1] = prows; break;
      case K_PROJ:
      case K_DOWN: g.grid[0] = hcq_imm((int64_t)h / VK_PCOLS), g.grid[1] = prows; break;
      case K_ATTN: g.grid[0] = hcq_imm(c->heads), g.grid[1] = rows; break;
      case K_POOL: break;
      default: g.grid[0] = rows; break; /* embedding, residual + LayerNorm */
    }
    return g;
  }
  /* kernels.cu: a thread per output element of the matrix products, a group per row (and per head
   * of attention) for the others. */
  hcq_operand_t rows = hcq_sym(m->n);
  switch (k) {
    case K_QKV:
      g.grid[0] = hcq_imm(3 * (int64_t)h / GPU_COLS), g.grid[1] = rows, g.local = GPU_COLS;
      break;
    case K_FFN_UP:
      g.grid[0] = hcq_imm((int64_t)in / GPU_COLS), g.grid[1] = rows, g.local = GPU_COLS;
      break;
    case K_ATTN:
      g.grid[0] = hcq_imm(c->heads), g.grid[1] = rows, g.local = (uint32_t)(c->hidden / c->heads);
      break;
    case K_POOL: g.local = GPU_GROUP; break;
    default: g.grid[0] = rows, g.local = GPU_GROUP; break; /* embedding, the LayerNorm products */
  }
  return g;
}

static void add_kernel(minilm_encoder_t *m, int k, hcq_buffer_t *const *bufs, size_t nouts) {
  geometry_t g = geometry(m, k);
  item_args_t *a = &m->args[m->nitems];
  hcq_exec_item_t *it = &m->items[m->nitems++];
  size_t nbufs = k_nbufs[k];
  memcpy(a->bufs, bufs, nbufs * sizeof(*bufs));
  for (size_t i = 0; i < nouts; i++) a->outs[i] = (uint32_t)i;
  a->vals[0] = hcq_sym(m->n);
  it->kind = HCQ_ITEM_KERNEL;
  it->kernel = (hcq_kernel_item_t){
      m->prog[k],
      a->bufs,
      nbufs,
      a->outs,
      nouts,
      a->vals,
      1,
      {g.grid[0], g.grid[1], g.grid[2]},
      {g.local_sym ? hcq_sym(g.local_sym) : hcq_imm(g.local), hcq_imm(1), hcq_imm(1)}};
}

static hcq_status_t make_items(minilm_encoder_t *m) {
  const minilm_config_t *c = &m->c;
  TRY(hcq_var_create("n", 1, c->max_seq_len, &m->n));
  hcq_expr_t *c15 = hcq_expr_const(15), *c16 = hcq_expr_const(16),
             *sum = hcq_expr_binary(HCQ_EXPR_ADD, m->n, c15);
  m->blocks = hcq_expr_binary(HCQ_EXPR_FLOORDIV, sum, c16);
  hcq_expr_release(c15), hcq_expr_release(c16), hcq_expr_release(sum);
  if (!m->blocks) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  char text[96];
  snprintf(text, sizeof(text), "(n + %d) // %d", VK_ROWS - 1, VK_ROWS);
  TRY(hcq_expr_parse(text, (const hcq_expr_t *const[]){m->n}, 1, &m->vk_blocks));
  snprintf(text, sizeof(text), "min(n, %d) * n * %d // 32", QB, c->hidden / c->heads);
  TRY(hcq_expr_parse(text, (const hcq_expr_t *const[]){m->n}, 1, &m->attn_local));
  size_t cap = 2 + 7 * (size_t)c->layers;
  m->items = calloc(cap, sizeof(*m->items));
  m->args = calloc(cap, sizeof(*m->args));
  if (!m->items || !m->args) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory");
  add_kernel(m, K_EMBED,
             (hcq_buffer_t *[]){m->x, m->ids, m->word, m->pos, m->type, m->emb_ln_w, m->emb_ln_b},
             1);
  for (int l = 0; l < c->layers; l++) {
    hcq_buffer_t **w = m->layer[l];
    add_kernel(m, K_QKV, (hcq_buffer_t *[]){m->qkv, m->kt, m->x, w[W_QKV], w[B_QKV]}, 2);
    add_kernel(m, K_ATTN, (hcq_buffer_t *[]){m->ctx, m->qkv, m->kt}, 1);
    if (m->lang != MODEL_KERNELS_CUDA) {
      add_kernel(m, K_PROJ, (hcq_buffer_t *[]){m->y, m->ctx, w[W_O], w[B_O]}, 1);
      add_kernel(m, K_RES_LN, (hcq_buffer_t *[]){m->x, m->y, w[LN1_W], w[LN1_B]}, 1);
    } else {
      add_kernel(m, K_PROJ_LN, (hcq_buffer_t *[]){m->x, m->ctx, w[W_O], w[B_O], w[LN1_W], w[LN1_B]},
                 1);
    }
    add_kernel(m, K_FFN_UP, (hcq_buffer_t *[]){m->inter, m->x, w[W_I], w[B_I]}, 1);
    if (m->lang != MODEL_KERNELS_CUDA) {
      add_kernel(m, K_DOWN, (hcq_buffer_t *[]){m->y, m->inter, w[W_D], w[B_D]}, 1);
      add_kernel(m, K_RES_LN, (hcq_buffer_t *[]){m->x, m->y, w[LN2_W], w[LN2_B]}, 1);
    } else {
      add_kernel(m, K_DOWN_LN,
                 (hcq_buffer_t *[]){m->x, m->inter, w[W_D], w[B_D], w[LN2_W], w[LN2_B]}, 1);
    }
  }
  add_kernel(m, K_POOL, (hcq_buffer_t *[]){m->out, m->x}, 1);
  return NULL;
}

static hcq_status_t check_config(const minilm_config_t *c) {
  int hd = c->hidden / c->heads;
  if (c->hidden % 128 || c->intermediate % 128 || hd != 32)
    return hcq_status_make(
        HCQ_UNIMPLEMENTED,
        "minilm encoder: hidden %d and intermediate %d must be multiples of 128 and the head size "
        "(hidden / heads) 32, not %d: the kernels' tiles assume it",
        c->hidden, c->intermediate, hd);
  if (c->max_seq_len > c->max_positions || c->max_seq_len < 1)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "minilm encoder: max_seq_len %d outside 1..%d",
                           c->max_seq_len, c->max_positions);
  return NULL;
}

hcq_status_t minilm_encoder_kernels_for(hcq_device_kind_t kind) {
  const char *body;
  return model_kernel_source("minilm encoder", k_sources, kind, &body);
}

/* Everything a new encoder holds, made in order; its destroy undoes what was made on a failure. */
static hcq_status_t make_encoder(minilm_encoder_t *m, const minilm_model_t *model,
                                 hcq_device_kind_t kind) {
  char name[32];
  snprintf(name, sizeof(name), "%s:0", hcq_device_kind_name(kind));
  TRY(hcq_device_open(name, &m->dev));
  TRY(make_programs(m));
  TRY(make_buffers(m, model));
  TRY(make_items(m));
  return hcq_device_synchronize(m->dev);
}

hcq_status_t minilm_encoder_create(const minilm_model_t *model,
                                   const minilm_encoder_options_t *options,
                                   minilm_encoder_t **out) {
  *out = NULL;
  TRY(check_config(&model->config));
  hcq_device_kind_t kind = options ? options->kind : HCQ_DEVICE_CPU;
  TRY(minilm_encoder_kernels_for(kind));
  if (model_kernel_lang(kind) == MODEL_KERNELS_GLSL && model->config.hidden != 384)
    return hcq_status_make(
        HCQ_UNIMPLEMENTED,
        "minilm encoder: the GLSL kernels' row kernels hold a row of 384 floats, not %d (hidden)",
        model->config.hidden);
  minilm_encoder_t *m = calloc(1, sizeof(*m));
  if (!m) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating the encoder");
  m->c = model->config;
  m->lang = model_kernel_lang(kind);
  m->maxlen = (m->c.max_seq_len + 15) / 16 * 16;
  hcq_status_t st = make_encoder(m, model, kind);
  if (st) {
    hcq_status_destroy(minilm_encoder_destroy(m));
    return hcq_status_annotate(st, "minilm encoder");
  }
  *out = m;
  return NULL;
}

hcq_status_t minilm_encoder_destroy(minilm_encoder_t *m) {
  if (!m) return NULL;
  /* a failure here: still running, so everything stays alive */
  if (m->dev) TRY(hcq_device_synchronize(m->dev));
  if (m->jit) TRY(hcq_jit_destroy(m->jit));
  m->jit = NULL;
  free(m->items);
  free(m->args);
  hcq_expr_release(m->blocks);
  hcq_expr_release(m->vk_blocks);
  hcq_expr_release(m->attn_local);
  hcq_expr_release(m->n);
  for (int l = 0; l < m->c.layers; l++)
    for (int i = 0; i < LAYER_BUFS; i++) hcq_buffer_release(m->layer[l][i]);
  hcq_buffer_t *bufs[] = {m->word, m->pos, m->type, m->emb_ln_w, m->emb_ln_b, m->ids, m->x,
                          m->qkv,  m->kt,  m->ctx,  m->inter,    m->out,      m->y};
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) hcq_buffer_release(bufs[i]);
  for (int k = 0; k < K_COUNT; k++) hcq_program_release(m->prog[k]);
  hcq_status_t st = m->dev ? hcq_device_close(m->dev) : NULL;
  free(m);
  return st;
}

hcq_status_t minilm_encoder_set_input(minilm_encoder_t *m, const int32_t *ids, int n) {
  if (n < 1 || n > m->c.max_seq_len)
    return hcq_status_make(HCQ_OUT_OF_RANGE, "minilm encoder: %d tokens (expected 1..%d)", n,
                           m->c.max_seq_len);
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->c.vocab_size)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "minilm encoder: token %d is id %d, outside the vocab 0..%d", i,
                             (int)ids[i], m->c.vocab_size - 1);
  TRY(hcq_device_synchronize(m->dev));
  TRY(hcq_buffer_copyin(m->ids, 0, ids, (size_t)n * sizeof(*ids)));
  m->cur_n = n;
  return NULL;
}

static hcq_status_t need_input(const minilm_encoder_t *m) {
  return m->cur_n ? NULL
                  : hcq_status_make(HCQ_FAILED_PRECONDITION, "minilm encoder: no token ids set");
}

hcq_status_t minilm_encoder_run_eager(minilm_encoder_t *m) {
  TRY(need_input(m));
  hcq_var_value_t v = {m->n, m->cur_n};
  for (size_t i = 0; i < m->nitems; i++) TRY(hcq_exec_item_run(&m->items[i], &v, 1));
  return NULL;
}

hcq_status_t minilm_encoder_capture(minilm_encoder_t *m) {
  TRY(need_input(m));
  if (m->jit) {
    TRY(hcq_jit_destroy(m->jit));
    m->jit = NULL;
  }
  hcq_var_value_t v = {m->n, m->cur_n};
  hcq_capture_t *cap;
  TRY(hcq_capture_begin(&cap));
  for (size_t i = 0; i < m->nitems; i++) {
    hcq_status_t st = hcq_exec_item_run(&m->items[i], &v, 1);
    if (st) {
      hcq_capture_abort(cap);
      return st;
    }
  }
  hcq_jit_options_t opts = {m->nitems, false, false};
  TRY(hcq_capture_end(cap, NULL, 0, &v, 1, &opts, &m->jit));
  m->captures++;
  return NULL;
}

hcq_status_t minilm_encoder_run_graph(minilm_encoder_t *m) {
  if (!m->jit)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "minilm encoder: no captured query to replay");
  TRY(need_input(m));
  hcq_var_value_t v = {m->n, m->cur_n};
  return hcq_jit_run(m->jit, NULL, 0, &v, 1, false, NULL);
}

hcq_status_t minilm_encoder_embedding(minilm_encoder_t *m, float *out) {
  TRY(hcq_device_synchronize(m->dev));
  return hcq_buffer_copyout(m->out, 0, out, (size_t)m->c.hidden * sizeof(float));
}

hcq_status_t minilm_encoder_hidden(minilm_encoder_t *m, float *out) {
  TRY(need_input(m));
  TRY(hcq_device_synchronize(m->dev));
  return hcq_buffer_copyout(m->x, 0, out, (size_t)m->cur_n * (size_t)m->c.hidden * sizeof(float));
}

int minilm_encoder_captures(const minilm_encoder_t *m) { return m->captures; }
size_t minilm_encoder_kernels(const minilm_encoder_t *m) { return m->nitems; }
hcq_jit_t *minilm_encoder_jit(const minilm_encoder_t *m) { return m->jit; }
const minilm_config_t *minilm_encoder_config(const minilm_encoder_t *m) { return &m->c; }
hcq_device_t *minilm_encoder_device(const minilm_encoder_t *m) { return m->dev; }
