/* Twins of models/llama2/kernels.metal for the Metal stand-in, #included by fake_metal.c. Each
 * runs a whole threadgroup when called for its thread 0 (the others return), through the twins
 * the CUDA stand-in uses too (tests/llama2_twins.h: kernels.metal has kernels.cu's work split and
 * order). The model's shape is compiled into the MSL by #defines; the stand-in reads them
 * from the library's source (l2_read_shape) and hands them to the twins in grid_t.shape. */
#include "../llama2_twins.h"

/* The shape's #define names, in LT_* order. */
static const char *const l2_names[LT_COUNT] = {"DIM",       "HIDDEN",     "KV_DIM", "N_HEADS",
                                               "KV_MUL",    "HEAD_SIZE",  "VOCAB",  "SEQ_LEN",
                                               "ATT_CHUNK", "MAX_CHUNKS", "GROUP"};

/* True when src #defines every shape name as a positive integer (into shape). */
static bool l2_read_shape(const char *src, int32_t *shape) {
  for (int k = 0; k < LT_COUNT; k++) {
    shape[k] = 0;
    for (const char *p = strstr(src, "#define "); p; p = strstr(p + 1, "#define ")) {
      const char *n = p + 8;
      size_t len = strlen(l2_names[k]);
      if (!strncmp(n, l2_names[k], len) && n[len] == ' ') {
        shape[k] = (int32_t)atoi(n + len + 1);
        break;
      }
    }
    if (shape[k] <= 0) return false;
  }
  return true;
}

/* Each twin runs its whole threadgroup when called for the group's thread 0 (the others return). */
static llama2_twin_t l2_twin(void *const *b, const int32_t *v, const grid_t *g) {
  return (llama2_twin_t){b,          v,       g->shape, {g->tg[0], g->tg[1]},
                         g->ntid[0], -FLT_MAX /* kernels.metal's sentinel */};
}
#define L2_TWIN(name)                                                             \
  static void t_llama_##name(void *const *b, const int32_t *v, const grid_t *g) { \
    if (g->tid[0] || g->tid[1] || g->tid[2] || !g->shape) return;                 \
    llama2_twin_t k = l2_twin(b, v, g);                                           \
    llama2_twin_##name(&k);                                                       \
  }
L2_TWIN(embed)
L2_TWIN(qkv)
L2_TWIN(attn_part)
L2_TWIN(attn_combine)
L2_TWIN(wo)
L2_TWIN(ffn_down)
L2_TWIN(ffn_up)
L2_TWIN(classify)
#undef L2_TWIN
static void t_llama_argmax(void *const *b, const int32_t *v, const grid_t *g) {
  if (g->tid[0] || g->tg[0] || !g->shape) return; /* launched as one thread */
  llama2_twin_t k = l2_twin(b, v, g);
  llama2_twin_argmax(&k);
}

/* For g_twins in fake_metal.c: these need a shape (pipeline creation refuses a library without). */
#define LLAMA2_TWINS                                                                              \
  {"llama_embed", 0, t_llama_embed}, {"llama_qkv", 0, t_llama_qkv},                               \
      {"llama_attn_part", 0, t_llama_attn_part}, {"llama_attn_combine", 0, t_llama_attn_combine}, \
      {"llama_wo", 0, t_llama_wo}, {"llama_ffn_down", 0, t_llama_ffn_down},                       \
      {"llama_ffn_up", 0, t_llama_ffn_up}, {"llama_classify", 0, t_llama_classify},               \
      {"llama_argmax", 0, t_llama_argmax},
