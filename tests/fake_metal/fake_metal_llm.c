/* Twins of models/llm/kernels.metal for the Metal stand-in, #included by fake_metal.c. Each runs a
 * whole threadgroup when called for its thread 0 (the others return), through the twins the CUDA
 * stand-in uses too (tests/llm_twins.h: kernels.metal has kernels.cu's work split and order). The
 * shape is compiled into the MSL by #defines; the stand-in reads them from the library's source
 * (llm_read_shape) and hands them to the twins in grid_t.llm. */
#include "../llm_twins.h"

/* The shape's #define names, in LLMT_* order. */
static const char *const llm_names[LLMT_COUNT] = {
    "DIM",       "FFN",           "NH",        "NKV",       "HD",        "RD",        "VOCAB",
    "CTX",       "NORM_EPS_BITS", "W_LAYOUT",  "WQ_LAYOUT", "WK_LAYOUT", "WV_LAYOUT", "WG_LAYOUT",
    "WU_LAYOUT", "K_IN",          "ID_BITS",   "ROWS",      "CLS_ROWS",  "SEL",       "QD",
    "ROPE_NEOX", "FFN_GELU",      "QKV_FUSED", "QKV_BIAS",  "QK_NORM",   "WINDOW",    "MATMUL_SET",
    "EMB_SCALE", "ATTN_SCALE"};

/* The text after `#define NAME ` in src, or NULL. */
static const char *llm_define(const char *src, const char *name) {
  size_t len = strlen(name);
  for (const char *p = strstr(src, "#define "); p; p = strstr(p + 1, "#define "))
    if (!strncmp(p + 8, name, len) && p[8 + len] == ' ') return p + 9 + len;
  return NULL;
}

/* True when src is an LLM kernel source (it #defines NORM_EPS_BITS) whose shape names are
 * integers, or a shape name (K_IN, QD: DIM or FFN); the layouts and K_IN an entry lacks are 0. The
 * first #define of a name counts: the decoder's, else the source's default (kernels.metal's
 * `#ifndef QD` ...; one that is no number, ATTN_SCALE's, is filled in by llmt_default_arch). The
 * scales are floats (the decoder writes 9 decimals after the point: strtof gives the float MSL
 * reads), kept as bits. */
static bool llm_read_shape(const char *src, int32_t *shape) {
  if (!llm_define(src, "NORM_EPS_BITS")) return false;
  for (int k = 0; k < LLMT_COUNT; k++) {
    const char *v = llm_define(src, llm_names[k]);
    shape[k] = 0;
    if (k == LLMT_EMB_SCALE_BITS || k == LLMT_ATTN_SCALE_BITS) {
      char *end;
      float f = v ? strtof(v, &end) : 0.0f;
      shape[k] = v && end != v ? llmt_int(f) : 0;
      continue;
    }
    if (v && (*v < '0' || *v > '9'))
      v = llm_define(src, !strncmp(v, "DIM", 3) ? "DIM" : !strncmp(v, "FFN", 3) ? "FFN" : "?");
    if (v)
      shape[k] = (int32_t)strtol(v, NULL, 10);
    else if (k == LLMT_QKV_FUSED)
      shape[k] = 1;
    bool optional =
        k >= LLMT_WL && k != LLMT_ID_BITS && k != LLMT_ROWS && k != LLMT_CLS_ROWS && k != LLMT_SEL;
    if (!optional && shape[k] <= 0) return false;
  }
  llmt_default_arch(shape);
  return true;
}

#define LLM_TWIN(name)                                                                       \
  static void t_llm_##name(void *const *b, const int32_t *v, const grid_t *g) {              \
    if (g->tid[0] || g->tid[1] || g->tid[2] || !g->llm) return;                              \
    llm_twin_t k = {b, v, g->llm, {g->tg[0], g->tg[1]}, -FLT_MAX /* kernels.metal's LOW */}; \
    llm_twin_##name(&k);                                                                     \
  }
LLM_TWIN(embed)
LLM_TWIN(begin)
LLM_TWIN(norm)
LLM_TWIN(quantize)
LLM_TWIN(qkv)
LLM_TWIN(rope_heads)
LLM_TWIN(attn)
LLM_TWIN(matmul_add)
LLM_TWIN(norm_add)
LLM_TWIN(gate_up)
LLM_TWIN(classify)
LLM_TWIN(select)
#undef LLM_TWIN

/* For g_twins in fake_metal.c: these need a shape (pipeline creation refuses a library without). */
#define LLM_TWINS                                                                                  \
  {"llm_embed", 0, t_llm_embed}, {"llm_begin", 0, t_llm_begin}, {"llm_norm", 0, t_llm_norm},       \
      {"llm_quantize", 0, t_llm_quantize}, {"llm_qkv", 0, t_llm_qkv}, {"llm_attn", 0, t_llm_attn}, \
      {"llm_rope_heads", 0, t_llm_rope_heads}, {"llm_norm_add", 0, t_llm_norm_add},                \
      {"llm_matmul_add", 0, t_llm_matmul_add}, {"llm_gate_up", 0, t_llm_gate_up},                  \
      {"llm_classify", 0, t_llm_classify}, {"llm_select", 0, t_llm_select},
