/* A stand-in for libcuda, for tests on machines without a GPU (HCQ_CUDA_LIBRARY points at it).
 *
 * It implements the driver entry points hcq uses with the driver's documented semantics, on the
 * host: device memory is host memory, each stream is a thread running its operations in order
 * (waits on memory values poll), events carry timestamps, graphs run their nodes in creation order
 * (a valid topological order) from a copy taken at launch, and node parameter sets apply to later
 * launches only. Kernels cannot run from PTX here: a module resolves a function by name to a host
 * implementation below of the same CUDA C the tests and examples compile (and NVRTC really
 * compiles it first). What this proves is hcq's side: the calls it makes, their order and
 * arguments, and the results of its graphs against eager execution. What only a GPU can show (the
 * real driver's behaviour, kernels compiled by NVRTC running) is left to tools/gpu-check.sh.
 *
 * HCQ_FAKE_CUDA_DEVICES sets the device count (default 1); HCQ_FAKE_CUDA_SYNC_PAGEABLE and
 * HCQ_FAKE_CUDA_IMPLICIT_SYNC turn on strict modes (below, at g_streams) where it blocks the host
 * as the real driver may. hcq_fake_cuda_counts() reports the driver calls tests check counts of. A
 * kernel named hcq_fake_fault fails its stream with CUDA_ERROR_ILLEGAL_ADDRESS, as a faulting
 * kernel does (HCQ_FAKE_CUDA_FAULT=226 makes it another error, such as CUDA_ERROR_CONTAINED).
 *
 * What a real driver does and the host hides, it does too: HCQ_FAKE_CUDA_DRIVER_VERSION (default
 * 13.0) is the CUDA version it supports, and it refuses PTX and cubins newer than that;
 * HCQ_FAKE_CUDA_NO_JIT=1 makes it a driver without the PTX JIT (PTX does not load, cubins do); a
 * cubin for another architecture than its GPU's (compute capability 9.0) is refused with
 * CUDA_ERROR_NO_BINARY_FOR_GPU, and a fatbin loads the image the GPU runs (see fatbin_pick); a
 * launch whose argument block is device memory aborts the process (the real driver reads the
 * block on the host: a segfault); the timestamp kernel's store into host memory the driver does not
 * know fails its stream with CUDA_ERROR_ILLEGAL_ADDRESS unless HCQ_FAKE_CUDA_HMM=1 (HMM/ATS). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../llama2_twins.h"
#include "../llm_twins.h"
#include "cuda/cuda_api.h"

#define EXPORT __attribute__((visibility("default")))
typedef hcq_CUresult CUresult;

/* A module's shape (llama2's, MiniLM's or the LLM's, read from the name of an empty entry). */
enum { SHAPE_SLOTS = (int)LLMT_COUNT > (int)LT_COUNT ? (int)LLMT_COUNT : (int)LT_COUNT };

/* ---- kernels ---- */

typedef struct dim3 {
  uint32_t x, y, z;
} dim3_t;

typedef void (*thread_fn)(const uint8_t *params, uint64_t i);

static uint64_t p64(const uint8_t *p, int i) {
  uint64_t v;
  memcpy(&v, p + 8 * i, 8);
  return v;
}
static int32_t p32(const uint8_t *p, int nptrs, int i) {
  int32_t v;
  memcpy(&v, p + 8 * nptrs + 4 * i, 4);
  return v;
}

/* Each is the CUDA C of tests/test_cuda.c and the examples' .cu kernels for one global thread index
 * i. */
static void k_axpb(const uint8_t *p, uint64_t i) {
  uint32_t *y = (uint32_t *)p64(p, 0);
  const uint32_t *x = (const uint32_t *)p64(p, 1), *w = (const uint32_t *)p64(p, 2);
  int32_t n = p32(p, 3, 0);
  if ((int64_t)i < n) y[i] = x[i] * (uint32_t)p32(p, 3, 1) + w[i] + (uint32_t)p32(p, 3, 2);
}
static void k_mix(const uint8_t *p, uint64_t i) {
  uint32_t *y = (uint32_t *)p64(p, 0);
  const uint32_t *x = (const uint32_t *)p64(p, 1);
  int32_t n = p32(p, 2, 0);
  uint32_t s = (uint32_t)p32(p, 2, 1) & 31u, c = (uint32_t)p32(p, 2, 2);
  if ((int64_t)i < n) {
    uint32_t v = x[i];
    y[i] = (v ^ (v >> s)) * 0x9E3779B1u + c;
  }
}
static void k_sum3(const uint8_t *p, uint64_t i) {
  uint32_t *y = (uint32_t *)p64(p, 0);
  const uint32_t *a = (const uint32_t *)p64(p, 1), *b = (const uint32_t *)p64(p, 2),
                 *c = (const uint32_t *)p64(p, 3);
  int32_t n = p32(p, 4, 0);
  if ((int64_t)i < n) y[i] = a[i] + 3u * b[i] + 5u * c[i];
}
static void k_add_const(const uint8_t *p, uint64_t i) {
  uint32_t *y = (uint32_t *)p64(p, 0);
  const uint32_t *x = (const uint32_t *)p64(p, 1);
  int32_t n = p32(p, 2, 0);
  if ((int64_t)i < n) y[i] = x[i] + (uint32_t)p32(p, 2, 1);
}
static void k_saxpy_f32(const uint8_t *p, uint64_t i) {
  float *y = (float *)p64(p, 0);
  const float *x = (const float *)p64(p, 1);
  int32_t n = p32(p, 2, 0), bits = p32(p, 2, 1);
  float a;
  memcpy(&a, &bits, 4);
  if ((int64_t)i < n) y[i] = a * x[i] + y[i];
}
static void k_sum_groups(const uint8_t *p, uint64_t i) {
  float *partial = (float *)p64(p, 0);
  const float *x = (const float *)p64(p, 1);
  uint64_t n = (uint64_t)p32(p, 2, 0), per = (uint64_t)p32(p, 2, 1);
  if (i >= n || i % per) return;
  float s = 0.0f;
  for (uint64_t k = i; k < i + per && k < n; k++) s += x[k];
  partial[i / per] = s;
}
static void k_sum_final(const uint8_t *p, uint64_t i) {
  if (i) return;
  float *total = (float *)p64(p, 0);
  const float *partial = (const float *)p64(p, 1);
  float s = 0.0f;
  for (int32_t g = 0; g < p32(p, 2, 0); g++) s += partial[g];
  total[0] = s;
}
static void k_timestamp(const uint8_t *p, uint64_t i) {
  (void)i;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  __atomic_store_n((uint64_t *)p64(p, 0), (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
                   __ATOMIC_RELEASE);
}

/* Twins that need the whole CUDA thread geometry (the conformance kernels of tests/test_util.c):
 * one call per thread of every block, in the CUDA C's own terms. */
typedef struct cuda_thread {
  dim3_t blockIdx, threadIdx, blockDim, gridDim;
} cuda_thread_t;
typedef void (*cuda_thread_fn)(const uint8_t *params, const cuda_thread_t *t);

#define T_I(t) ((uint64_t)(t)->blockIdx.x * (t)->blockDim.x + (t)->threadIdx.x)
#define T_ROW0(t) ((t)->threadIdx.y == 0 && (t)->threadIdx.z == 0)
#define T_BELOW(t, n) (T_I(t) < (uint64_t)(int64_t)(n))
static void c_add_scalar(const uint8_t *p, const cuda_thread_t *t) {
  int32_t *out = (int32_t *)p64(p, 0);
  const int32_t *a = (const int32_t *)p64(p, 1);
  if (T_ROW0(t) && T_BELOW(t, p32(p, 2, 1)))
    out[T_I(t)] = (int32_t)((uint32_t)a[T_I(t)] + (uint32_t)p32(p, 2, 0));
}
static void c_mul_add(const uint8_t *p, const cuda_thread_t *t) {
  uint32_t *x = (uint32_t *)p64(p, 0);
  if (T_ROW0(t) && T_BELOW(t, p32(p, 1, 2)))
    x[T_I(t)] = x[T_I(t)] * (uint32_t)p32(p, 1, 0) + (uint32_t)p32(p, 1, 1);
}
static void c_add2(const uint8_t *p, const cuda_thread_t *t) {
  int32_t *out = (int32_t *)p64(p, 0);
  const int32_t *x = (const int32_t *)p64(p, 1), *y = (const int32_t *)p64(p, 2);
  if (T_ROW0(t) && T_BELOW(t, p32(p, 3, 0)))
    out[T_I(t)] = (int32_t)((uint32_t)x[T_I(t)] + (uint32_t)y[T_I(t)]);
}
static void c_fill(const uint8_t *p, const cuda_thread_t *t) {
  int32_t *out = (int32_t *)p64(p, 0);
  if (T_ROW0(t) && T_BELOW(t, p32(p, 1, 1))) out[T_I(t)] = p32(p, 1, 0);
}
static void c_mix3(const uint8_t *p, const cuda_thread_t *t) {
  uint32_t *out = (uint32_t *)p64(p, 0);
  const uint32_t *x = (const uint32_t *)p64(p, 1), *y = (const uint32_t *)p64(p, 2);
  if (T_ROW0(t) && T_BELOW(t, p32(p, 3, 2)))
    out[T_I(t)] = x[T_I(t)] * (uint32_t)p32(p, 3, 0) + y[T_I(t)] + (uint32_t)p32(p, 3, 1);
}
static void c_record_groups(const uint8_t *p, const cuda_thread_t *t) {
  if (t->threadIdx.x || t->threadIdx.y || t->threadIdx.z) return;
  int32_t *out = (int32_t *)p64(p, 0);
  uint32_t g = (t->blockIdx.z * t->gridDim.y + t->blockIdx.y) * t->gridDim.x + t->blockIdx.x;
  out[g] += (int32_t)(t->blockDim.x * t->blockDim.y * t->blockDim.z);
}

/* Twins of models/llama2/kernels.cu (tests/llama2_twins.h, shared with the Metal stand-in), one
 * call per block. The model's shape is compiled into the CUDA C; these read it from the module,
 * which names it in the entry llama2_shape_DIM_HIDDEN_..._GROUP (LT_* order). A kernel's parameters
 * are its buffer pointers, then its int values. */
typedef void (*cuda_block_fn)(const uint8_t *params, const int32_t *shape, dim3_t block,
                              dim3_t dim);
static llama2_twin_t l_twin(const uint8_t *p, int nbufs, int nvals, const int32_t *S, dim3_t b,
                            dim3_t d, void **bufs, int32_t *vals) {
  for (int i = 0; i < nbufs; i++) bufs[i] = (void *)(uintptr_t)p64(p, i);
  for (int i = 0; i < 2; i++)
    vals[i] = i < nvals ? p32(p, nbufs, i) : 0; /* only what the block holds */
  return (llama2_twin_t){bufs, vals, S, {b.x, b.y}, d.x, -INFINITY};
}
#define L_TWIN(name, nbufs, nvals)                                               \
  static void l_##name(const uint8_t *p, const int32_t *S, dim3_t b, dim3_t d) { \
    void *bufs[nbufs];                                                           \
    int32_t vals[2];                                                             \
    llama2_twin_t k = l_twin(p, nbufs, nvals, S, b, d, bufs, vals);              \
    llama2_twin_##name(&k);                                                      \
  }
L_TWIN(embed, 3, 1)
L_TWIN(qkv, 9, 1)
L_TWIN(attn_part, 4, 1)
L_TWIN(attn_combine, 2, 1)
L_TWIN(wo, 3, 0)
L_TWIN(ffn_down, 3, 0)
L_TWIN(ffn_up, 5, 0)
L_TWIN(classify, 5, 1)
#undef L_TWIN
static void l_argmax(const uint8_t *p, const int32_t *S, dim3_t b, dim3_t d) {
  if (d.x != 1) return; /* launched as one thread */
  void *bufs[2];
  int32_t vals[2];
  llama2_twin_t k = l_twin(p, 2, 2, S, b, d, bufs, vals);
  llama2_twin_argmax(&k);
}

/* A parameter block's i-th pointer, as a float or an int array. */
#define PF(i) ((float *)p64(p, (i)))
#define PI(i) ((int32_t *)p64(p, (i)))
#include "fake_cuda_minilm.c" /* models/minilm/kernels.cu */

/* Twins of models/llm/kernels.cu (tests/llm_twins.h, shared with the Metal stand-in), one call per
 * block; the module names the shape in the entry llm_shape_DIM_FFN_..._MATMUL_SET (LLMT_* order up
 * to LLMT_NAMED) and the scales in llm_scales (llmt_default_arch fills in a 0). An entry's buffer
 * count may follow the shape's flags (llm_qkv: 10, 11 or 14; llm_rope_heads: 5 or 7). */
enum { LLM_MAX_BUFS = 14 };
static llm_twin_t llm_twin(const uint8_t *p, int nbufs, int nvals, const int32_t *S, dim3_t b,
                           void **bufs, int32_t *vals) {
  for (int i = 0; i < nbufs; i++) bufs[i] = (void *)(uintptr_t)p64(p, i);
  for (int i = 0; i < 2; i++) vals[i] = i < nvals ? p32(p, nbufs, i) : 0;
  return (llm_twin_t){bufs, vals, S, {b.x, b.y}, -INFINITY};
}
#define LLM_TWIN(name, nbufs, nvals)                                               \
  static void llm_##name(const uint8_t *p, const int32_t *S, dim3_t b, dim3_t d) { \
    (void)d;                                                                       \
    void *bufs[LLM_MAX_BUFS];                                                      \
    int32_t vals[2];                                                               \
    llm_twin_t k = llm_twin(p, (nbufs), nvals, S, b, bufs, vals);                  \
    llm_twin_##name(&k);                                                           \
  }
LLM_TWIN(embed, 4, 2)
LLM_TWIN(begin, 1, 2)
LLM_TWIN(norm, 5, 1)
LLM_TWIN(quantize, 2, 0)
/* kraw when not fused or with biases, then the three biases */
LLM_TWIN(qkv, 10 + (!S[LLMT_QKV_FUSED] || S[LLMT_QKV_BIAS]) + 3 * !!S[LLMT_QKV_BIAS], 0)
LLM_TWIN(rope_heads, 5 + 2 * !!S[LLMT_QK_NORM], 0)
LLM_TWIN(attn, 5, 0)
LLM_TWIN(matmul_add, 5, 1)
LLM_TWIN(norm_add, 3, 0)
LLM_TWIN(gate_up, 7, 0)
LLM_TWIN(classify, 5, 1)
LLM_TWIN(select, 6, 1)
#undef LLM_TWIN

/* The scales' bits from kernels.cu's llm_scales {char tag[12] "LLM_SCALES:", float emb, attn}: in
 * a cubin its initial bytes lie as they are, in PTX they are spelled out ("llm_scales[20] = {76,
 * 76, ...}"). False when the module has neither. */
static bool llm_scales(const char *image, size_t size, int32_t *emb_bits, int32_t *attn_bits) {
  enum { TAG = 12 };
  uint8_t bytes[TAG + 8];
  const char *at = memmem(image, size, "LLM_SCALES:", TAG);
  if (at && (size_t)(at - image) + sizeof(bytes) <= size) {
    memcpy(bytes, at, sizeof(bytes));
  } else {
    at = memmem(image, size, "llm_scales[", 11);
    const char *p = at ? strchr(at, '{') : NULL; /* the image is NUL-terminated */
    for (size_t i = 0; p && i < sizeof(bytes); i++) {
      char *end;
      unsigned long v = strtoul(p + 1, &end, 10);
      if (end == p + 1 || v > 255) return false;
      bytes[i] = (uint8_t)v, p = end;
    }
    if (!p || memcmp(bytes, "LLM_SCALES:", TAG)) return false;
  }
  memcpy(emb_bits, bytes + TAG, 4);
  memcpy(attn_bits, bytes + TAG + 4, 4);
  return true;
}

typedef struct fake_kernel {
  const char *name;
  thread_fn fn;
  bool faults;
  cuda_thread_fn per_thread; /* instead of fn */
  size_t psize;            /* non-zero: the twin of the kernel of this name whose argument block has
                              this size (two sources may use one name for different kernels) */
  cuda_block_fn per_block; /* instead of fn: a llama2 twin, which needs the module's shape */
  bool minilm;             /* a per_block twin of models/minilm: its shape is a minilm_shape_ */
  bool llm;                /* a per_block twin of models/llm: its shape is an llm_shape_ */
} fake_kernel_t;

static const fake_kernel_t g_kernels[] = {
    {"axpb", k_axpb, false},
    {"mix", k_mix, false},
    {"sum3", k_sum3, false},
    {"add_const", k_add_const, false},
    {"saxpy_f32", k_saxpy_f32, false},
    {"sum_groups", k_sum_groups, false},
    {"sum_final", k_sum_final, false},
    {"hcq_timestamp", k_timestamp, false},
    {"hcq_fake_fault", NULL, true},
    /* tests/test_util.c's conformance kernels */
    {.name = "add_scalar", .per_thread = c_add_scalar},
    {.name = "mul_add", .per_thread = c_mul_add},
    {.name = "add2", .per_thread = c_add2},
    {.name = "fill", .per_thread = c_fill},
    {.name = "mix", .per_thread = c_mix3, .psize = 36},
    {.name = "record_groups", .per_thread = c_record_groups},
    /* models/llama2/kernels.cu */
    {.name = "llama_embed", .per_block = l_embed},
    {.name = "llama_qkv", .per_block = l_qkv},
    {.name = "llama_attn_part", .per_block = l_attn_part},
    {.name = "llama_attn_combine", .per_block = l_attn_combine},
    {.name = "llama_wo", .per_block = l_wo},
    {.name = "llama_ffn_down", .per_block = l_ffn_down},
    {.name = "llama_ffn_up", .per_block = l_ffn_up},
    {.name = "llama_classify", .per_block = l_classify},
    {.name = "llama_argmax", .per_block = l_argmax},
    /* models/minilm/kernels.cu */
    {.name = "mlm_embed", .per_block = m_embed, .minilm = true},
    {.name = "mlm_qkv", .per_block = m_qkv, .minilm = true},
    {.name = "mlm_attn", .per_block = m_attn, .minilm = true},
    {.name = "mlm_proj_ln", .per_block = m_proj_ln, .minilm = true},
    {.name = "mlm_ffn_up", .per_block = m_ffn_up, .minilm = true},
    {.name = "mlm_down_ln", .per_block = m_down_ln, .minilm = true},
    {.name = "mlm_pool", .per_block = m_pool, .minilm = true},
    /* models/llm/kernels.cu */
    {.name = "llm_embed", .per_block = llm_embed, .llm = true},
    {.name = "llm_begin", .per_block = llm_begin, .llm = true},
    {.name = "llm_norm", .per_block = llm_norm, .llm = true},
    {.name = "llm_quantize", .per_block = llm_quantize, .llm = true},
    {.name = "llm_qkv", .per_block = llm_qkv, .llm = true},
    {.name = "llm_attn", .per_block = llm_attn, .llm = true},
    {.name = "llm_rope_heads", .per_block = llm_rope_heads, .llm = true},
    {.name = "llm_norm_add", .per_block = llm_norm_add, .llm = true},
    {.name = "llm_matmul_add", .per_block = llm_matmul_add, .llm = true},
    {.name = "llm_gate_up", .per_block = llm_gate_up, .llm = true},
    {.name = "llm_classify", .per_block = llm_classify, .llm = true},
    {.name = "llm_select", .per_block = llm_select, .llm = true},
};

/* The twin a launch with an argument block of psize bytes runs: k, or another of its name made
 * for exactly that size. */
static const fake_kernel_t *twin_for(const fake_kernel_t *k, size_t psize) {
  if (k->psize == psize) return k;
  for (size_t i = 0; i < sizeof(g_kernels) / sizeof(g_kernels[0]); i++)
    if (g_kernels[i].psize == psize && !strcmp(g_kernels[i].name, k->name)) return &g_kernels[i];
  return k;
}

/* ---- bookkeeping ---- */

static atomic_ullong g_kernel_sets, g_memcpy_sets, g_enable_sets, g_graph_launches,
    g_kernel_launches;

EXPORT void hcq_fake_cuda_counts(uint64_t *kernel_sets, uint64_t *memcpy_sets,
                                 uint64_t *enable_sets, uint64_t *graph_launches,
                                 uint64_t *kernel_launches) {
  *kernel_sets = atomic_load(&g_kernel_sets);
  *memcpy_sets = atomic_load(&g_memcpy_sets);
  *enable_sets = atomic_load(&g_enable_sets);
  *graph_launches = atomic_load(&g_graph_launches);
  *kernel_launches = atomic_load(&g_kernel_launches);
}

typedef struct ctx {
  int dev;
} ctx_t;

static ctx_t g_ctx[8];
static int g_ndev = 1;
static _Thread_local ctx_t *t_stack[16];
static _Thread_local int t_depth;

typedef struct alloc {
  uintptr_t base;
  size_t size;
  ctx_t *ctx;
  struct alloc *next;
  bool device; /* cuMemAlloc memory: the host cannot read it on a real GPU */
} alloc_t;
static pthread_mutex_t g_alloc_lock = PTHREAD_MUTEX_INITIALIZER;
static alloc_t *g_allocs;

static ctx_t *current(void) { return t_depth ? t_stack[t_depth - 1] : NULL; }

static void *track(size_t size) {
  void *p = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
  alloc_t *a = malloc(sizeof(*a));
  if (!p || !a) {
    free(p);
    free(a);
    return NULL;
  }
  *a = (alloc_t){(uintptr_t)p, size, current(), NULL};
  pthread_mutex_lock(&g_alloc_lock);
  a->next = g_allocs;
  g_allocs = a;
  pthread_mutex_unlock(&g_alloc_lock);
  return p;
}

static bool untrack(uintptr_t p) {
  pthread_mutex_lock(&g_alloc_lock);
  bool found = false;
  for (alloc_t **a = &g_allocs; *a; a = &(*a)->next)
    if ((*a)->base == p) {
      alloc_t *gone = *a;
      *a = gone->next;
      free(gone);
      found = true;
      break;
    }
  pthread_mutex_unlock(&g_alloc_lock);
  if (found) free((void *)p);
  return found;
}

static ctx_t *owner_of(uintptr_t p) {
  ctx_t *c = NULL;
  pthread_mutex_lock(&g_alloc_lock);
  for (alloc_t *a = g_allocs; a && !c; a = a->next)
    if (p >= a->base && p < a->base + a->size) c = a->ctx ? a->ctx : &g_ctx[0];
  pthread_mutex_unlock(&g_alloc_lock);
  return c;
}

/* Whether p lies in device memory (cuMemAlloc), as opposed to pinned host memory or none. */
static bool in_device_memory(uintptr_t p) {
  bool device = false;
  pthread_mutex_lock(&g_alloc_lock);
  for (alloc_t *a = g_allocs; a; a = a->next)
    if (p >= a->base && p < a->base + a->size) {
      device = a->device;
      break;
    }
  pthread_mutex_unlock(&g_alloc_lock);
  return device;
}

static void mark_device(uintptr_t p) {
  pthread_mutex_lock(&g_alloc_lock);
  for (alloc_t *a = g_allocs; a; a = a->next)
    if (a->base == p) a->device = true;
  pthread_mutex_unlock(&g_alloc_lock);
}

static void nap(void) {
  struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- events ---- */

typedef struct event {
  atomic_ullong recorded, completed; /* record sequence numbers */
  atomic_ullong time_ns;
} event_t;

/* ---- graphs ---- */

typedef struct gnode {
  int kind; /* 0 kernel, 1 memcpy, 2 empty */
  int index;
  const fake_kernel_t *fn;
  int32_t shape[SHAPE_SLOTS]; /* the function's module's llama2 shape */
  dim3_t grid, block;
  uint8_t params[4096];
  size_t psize;
  uintptr_t dst, src;
  size_t bytes;
  bool enabled;
} gnode_t;

typedef struct graph {
  gnode_t **nodes;
  int n, cap;
} graph_t;

typedef struct gexec {
  gnode_t *nodes; /* copies, by index */
  int n;
} gexec_t;

/* ---- streams ---- */

enum {
  OP_WAIT,
  OP_WRITE,
  OP_KERNEL,
  OP_MEMCPY,
  OP_MEMSET,
  OP_EVENT,
  OP_WAIT_EVENT,
  OP_HOST,
  OP_GRAPH
};

typedef struct op {
  int kind;
  uintptr_t a, b;
  uint64_t v;
  size_t n;
  const fake_kernel_t *fn;
  int32_t shape[SHAPE_SLOTS];
  dim3_t grid, block;
  uint8_t params[4096];
  size_t psize;
  event_t *event;
  void (*host)(void *);
  gexec_t snapshot;
  struct op *next;
} op_t;

typedef struct stream {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  op_t *head, *tail;
  bool busy, stop;
  atomic_int error;
  uint64_t enqueued, executed; /* operations, under lock */
  ctx_t *ctx;                  /* current when it was created */
  struct stream *next;         /* g_streams */
} stream_t;

/* HCQ_FAKE_CUDA_HMM=1: kernels may store to any host memory (HMM or ATS, as on a GH200). Without
 * it, the timestamp kernel's store into memory the driver does not know (ordinary host memory)
 * fails its stream with CUDA_ERROR_ILLEGAL_ADDRESS, as on most machines. */
static bool g_hmm;

/* Every live stream, for the calls that synchronise a whole context. */
static pthread_mutex_t g_streams_lock = PTHREAD_MUTEX_INITIALIZER;
static stream_t *g_streams;

/* Strict modes, where the real driver may block the host and a host emulation would not:
 * HCQ_FAKE_CUDA_SYNC_PAGEABLE=1: cuMemcpyAsync to or from ordinary (pageable, not driver-allocated)
 *   host memory returns only once the copy ran on its stream, i.e. after the stream's earlier waits
 *   (the driver stages such copies itself, synchronously).
 * HCQ_FAKE_CUDA_IMPLICIT_SYNC=1: cuMemFree, cuMemFreeHost, cuMemHostAlloc and the first launch of a
 *   function the driver loaded lazily (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) wait
 *   until every stream of the current context is idle, as the real driver may. */
static bool strict(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

/* Waits until every stream of c has run all it was given (or stopped, or failed). */
static void sync_context(ctx_t *c) {
  pthread_mutex_lock(&g_streams_lock);
  for (stream_t *s = g_streams; s; s = s->next) {
    if (s->ctx != c) continue;
    pthread_mutex_lock(&s->lock);
    while ((s->head || s->busy) && !s->stop && !atomic_load(&s->error))
      pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
  }
  pthread_mutex_unlock(&g_streams_lock);
}
static void implicit_sync(void) {
  if (strict("HCQ_FAKE_CUDA_IMPLICIT_SYNC")) sync_context(current());
}

static void run_kernel(const fake_kernel_t *k, dim3_t grid, dim3_t block, const uint8_t *params,
                       size_t psize, const int32_t *shape) {
  atomic_fetch_add(&g_kernel_launches, 1);
  k = twin_for(k, psize);
  if (k->per_block) {
    for (uint32_t z = 0; z < grid.z; z++)
      for (uint32_t y = 0; y < grid.y; y++)
        for (uint32_t x = 0; x < grid.x; x++) k->per_block(params, shape, (dim3_t){x, y, z}, block);
    return;
  }
  if (k->per_thread) {
    cuda_thread_t t = {.blockDim = block, .gridDim = grid};
    for (t.blockIdx.z = 0; t.blockIdx.z < grid.z; t.blockIdx.z++)
      for (t.blockIdx.y = 0; t.blockIdx.y < grid.y; t.blockIdx.y++)
        for (t.blockIdx.x = 0; t.blockIdx.x < grid.x; t.blockIdx.x++)
          for (t.threadIdx.z = 0; t.threadIdx.z < block.z; t.threadIdx.z++)
            for (t.threadIdx.y = 0; t.threadIdx.y < block.y; t.threadIdx.y++)
              for (t.threadIdx.x = 0; t.threadIdx.x < block.x; t.threadIdx.x++)
                k->per_thread(params, &t);
    return;
  }
  uint64_t threads = (uint64_t)grid.x * grid.y * grid.z * block.x * block.y * block.z;
  for (uint64_t i = 0; i < threads; i++) k->fn(params, i);
}

/* A GPU copy: many blocks at once in no set order, so overlapping ranges are undefined (CUDA says
 * so). Copying 16-byte blocks in the order that memmove would not use gives such a copy's typical
 * result (bytes read after they were overwritten) instead of memmove's for free. */
static void gpu_copy(uintptr_t dst, uintptr_t src, size_t n) {
  if (dst == src || dst + n <= src || src + n <= dst) {
    memcpy((void *)dst, (const void *)src, n);
    return;
  }
  enum { BLOCK = 16 };
  size_t blocks = (n + BLOCK - 1) / BLOCK;
  for (size_t k = 0; k < blocks; k++) {
    size_t b =
        dst > src ? k : blocks - 1 - k; /* forward when memmove would go backward, and back */
    size_t at = b * BLOCK, len = n - at < BLOCK ? n - at : BLOCK;
    for (size_t i = 0; i < len; i++)
      ((volatile uint8_t *)dst)[at + i] = ((const volatile uint8_t *)src)[at + i];
  }
}

/* Runs one operation; false when it failed the stream. */
static bool run_op(stream_t *s, op_t *o) {
  switch (o->kind) {
    case OP_WAIT:
      while ((int64_t)(__atomic_load_n((uint64_t *)o->a, __ATOMIC_ACQUIRE) - o->v) < 0) {
        if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) return false;
        nap();
      }
      return true;
    case OP_WRITE: __atomic_store_n((uint64_t *)o->a, o->v, __ATOMIC_RELEASE); return true;
    case OP_KERNEL:
      if (o->fn->faults) return false;
      if (o->fn->fn == k_timestamp && !g_hmm && !owner_of((uintptr_t)p64(o->params, 0)))
        return false;
      run_kernel(o->fn, o->grid, o->block, o->params, o->psize, o->shape);
      return true;
    case OP_MEMCPY: gpu_copy(o->a, o->b, o->n); return true;
    case OP_MEMSET: memset((void *)o->a, (int)o->v, o->n); return true;
    case OP_EVENT:
      atomic_store(&o->event->time_ns, now_ns());
      atomic_store(&o->event->completed, o->v);
      return true;
    case OP_WAIT_EVENT:
      while (atomic_load(&o->event->completed) < o->v) {
        if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) return false;
        nap();
      }
      return true;
    case OP_HOST: o->host((void *)o->a); return true;
    case OP_GRAPH:
      atomic_fetch_add(&g_graph_launches, 1);
      for (int i = 0; i < o->snapshot.n; i++) {
        const gnode_t *g = &o->snapshot.nodes[i];
        if (!g->enabled) continue;
        if (g->kind == 0) {
          if (g->fn->faults) return false;
          run_kernel(g->fn, g->grid, g->block, g->params, g->psize, g->shape);
        } else if (g->kind == 1) {
          gpu_copy(g->dst, g->src, g->bytes);
        }
      }
      return true;
  }
  return true;
}

static void free_op(op_t *o) {
  free(o->snapshot.nodes);
  free(o);
}

/* The error a failed operation leaves on its stream: a faulting kernel's is HCQ_FAKE_CUDA_FAULT (a
 * CUresult number, such as 226 for CUDA_ERROR_CONTAINED), by default CUDA_ERROR_ILLEGAL_ADDRESS. */
static int g_fault_error = HCQ_CUDA_ERROR_ILLEGAL_ADDRESS;
static int fault_error(const op_t *o) {
  bool kernel = (o->kind == OP_KERNEL && o->fn->faults) || o->kind == OP_GRAPH;
  return kernel ? g_fault_error : HCQ_CUDA_ERROR_ILLEGAL_ADDRESS;
}

static void *stream_main(void *arg) {
  stream_t *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cond, &s->lock);
    if (!s->head && s->stop) break;
    op_t *o = s->head;
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    s->busy = true;
    pthread_mutex_unlock(&s->lock);
    /* A failed stream drops what follows, as a faulted GPU context does. */
    if (!atomic_load(&s->error) && !run_op(s, o)) atomic_store(&s->error, fault_error(o));
    free_op(o);
    pthread_mutex_lock(&s->lock);
    s->busy = false;
    s->executed++;
    pthread_cond_broadcast(&s->cond);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static CUresult enqueue_seq(stream_t *s, op_t *o, uint64_t *out_seq);
static CUresult enqueue(stream_t *s, op_t *o) { return enqueue_seq(s, o, NULL); }
static CUresult enqueue_seq(stream_t *s, op_t *o, uint64_t *out_seq) {
  if (!s) {
    free_op(o);
    return HCQ_CUDA_ERROR_INVALID_VALUE; /* hcq never uses the legacy stream */
  }
  int err = atomic_load(&s->error);
  if (err) {
    free_op(o);
    return err;
  }
  o->next = NULL;
  pthread_mutex_lock(&s->lock);
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  if (out_seq)
    *out_seq = ++s->enqueued;
  else
    s->enqueued++;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  return 0;
}

static op_t *new_op(int kind) {
  op_t *o = calloc(1, sizeof(*o));
  if (o) o->kind = kind;
  return o;
}

/* The packed argument block of a launch's "extra". */
static CUresult read_extra(void **extra, uint8_t *out, size_t *out_size) {
  *out_size = 0;
  if (!extra) return 0;
  void *buf = NULL;
  size_t *size = NULL;
  for (int i = 0; extra[i] != HCQ_CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == HCQ_CU_LAUNCH_PARAM_BUFFER_POINTER)
      buf = extra[i + 1];
    else if (extra[i] == HCQ_CU_LAUNCH_PARAM_BUFFER_SIZE)
      size = extra[i + 1];
    else
      return HCQ_CUDA_ERROR_INVALID_VALUE;
  }
  if (!buf || !size || *size > 4096) return HCQ_CUDA_ERROR_INVALID_VALUE;
  if (in_device_memory((uintptr_t)buf) || in_device_memory((uintptr_t)buf + *size - 1)) {
    /* The real driver copies the block on the host here: from GPU memory, that is a segfault. */
    fprintf(stderr,
            "fake libcuda: the launch's argument block at %p is device memory, which the host "
            "cannot read "
            "(a real driver crashes here)\n",
            buf);
    abort();
  }
  memcpy(out, buf, *size);
  *out_size = *size;
  return 0;
}

static CUresult check_dims(dim3_t g, dim3_t b) {
  if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z || (uint64_t)b.x * b.y * b.z > 1024 ||
      b.z > 64 || g.y > 65535 || g.z > 65535)
    return HCQ_CUDA_ERROR_INVALID_VALUE;
  return 0;
}

/* ---- entry points ---- */

static CUresult f_cuInit(unsigned int flags) {
  (void)flags;
  const char *n = getenv("HCQ_FAKE_CUDA_DEVICES");
  if (n && *n) g_ndev = atoi(n);
  if (g_ndev < 0 || g_ndev > 8) g_ndev = 1;
  const char *hmm = getenv("HCQ_FAKE_CUDA_HMM");
  g_hmm = hmm && atoi(hmm) > 0;
  const char *fault = getenv("HCQ_FAKE_CUDA_FAULT");
  if (fault && atoi(fault) > 0) g_fault_error = atoi(fault);
  for (int i = 0; i < 8; i++) g_ctx[i].dev = i;
  return g_ndev ? 0 : HCQ_CUDA_ERROR_NO_DEVICE;
}
/* HCQ_FAKE_CUDA_DRIVER_VERSION: the CUDA version this driver supports, "12.8" or 12080
 * (default 13.0, the toolkit whose NVRTC the tests find here). */
static int driver_version(void) {
  const char *v = getenv("HCQ_FAKE_CUDA_DRIVER_VERSION");
  int major = 0, minor = 0;
  if (v && sscanf(v, "%d.%d", &major, &minor) == 2) return major * 1000 + minor * 10;
  if (v && major >= 1000) return major;
  return 13000;
}
static CUresult f_cuDriverGetVersion(int *v) {
  *v = driver_version();
  return 0;
}
static CUresult f_cuGetErrorName(CUresult e, const char **s) {
  switch (e) {
    case 0: *s = "CUDA_SUCCESS"; break;
    case 1: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case 2: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case 500: *s = "CUDA_ERROR_NOT_FOUND"; break;
    case 600: *s = "CUDA_ERROR_NOT_READY"; break;
    case 700: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case 218: *s = "CUDA_ERROR_INVALID_PTX"; break;
    case 221: *s = "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"; break;
    case 222: *s = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"; break;
    case 226: *s = "CUDA_ERROR_CONTAINED"; break;
    case 719: *s = "CUDA_ERROR_LAUNCH_FAILED"; break;
    case 721: *s = "CUDA_ERROR_TENSOR_MEMORY_LEAK"; break;
    default: *s = "CUDA_ERROR_UNKNOWN"; break;
  }
  return 0;
}
static CUresult f_cuGetErrorString(CUresult e, const char **s) {
  switch (e) {
    case 700: *s = "an illegal memory access was encountered"; break;
    case 1: *s = "invalid argument"; break;
    case 221: *s = "PTX JIT compiler library not found"; break;
    case 222: *s = "the provided PTX was compiled with an unsupported toolchain."; break;
    case 226: *s = "uncorrectable error contained by the GPU"; break;
    default: *s = "fake driver error"; break;
  }
  return 0;
}
static CUresult f_cuDeviceGetCount(int *n) {
  *n = g_ndev;
  return 0;
}
static CUresult f_cuDeviceGet(hcq_CUdevice *d, int i) {
  if (i < 0 || i >= g_ndev) return HCQ_CUDA_ERROR_INVALID_VALUE;
  *d = i;
  return 0;
}
static CUresult f_cuDeviceGetName(char *name, int len, hcq_CUdevice d) {
  snprintf(name, (size_t)len, "hcq fake GPU %d", d);
  return 0;
}
static CUresult f_cuDeviceGetAttribute(int *v, int attr, hcq_CUdevice d) {
  (void)d;
  switch (attr) {
    case HCQ_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case HCQ_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case HCQ_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
    case HCQ_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case HCQ_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
    case HCQ_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case HCQ_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case HCQ_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 49152; break;
    case HCQ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case HCQ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    default: *v = 1; break;
  }
  return 0;
}
/* Every stand-in GPU has this much memory; cuMemGetInfo counts what cuMemAlloc took from it. */
#define FAKE_DEVICE_MEMORY ((size_t)4 << 30)
static CUresult f_cuDeviceTotalMem(size_t *b, hcq_CUdevice d) {
  (void)d;
  *b = FAKE_DEVICE_MEMORY;
  return 0;
}
static CUresult f_cuDeviceCanAccessPeer(int *can, hcq_CUdevice a, hcq_CUdevice b) {
  *can = a != b;
  return 0;
}
static CUresult f_cuDevicePrimaryCtxRetain(hcq_CUcontext *c, hcq_CUdevice d) {
  *c = (hcq_CUcontext)&g_ctx[d];
  return 0;
}
static CUresult f_cuDevicePrimaryCtxRelease(hcq_CUdevice d) {
  (void)d;
  return 0;
}
static CUresult f_cuCtxPushCurrent(hcq_CUcontext c) {
  if (t_depth == 16) return HCQ_CUDA_ERROR_INVALID_VALUE;
  t_stack[t_depth++] = (ctx_t *)c;
  return 0;
}
static CUresult f_cuCtxPopCurrent(hcq_CUcontext *c) {
  if (!t_depth) return HCQ_CUDA_ERROR_INVALID_VALUE;
  *c = (hcq_CUcontext)t_stack[--t_depth];
  return 0;
}
static CUresult f_cuCtxEnablePeerAccess(hcq_CUcontext peer, unsigned int flags) {
  (void)flags;
  return current() && (ctx_t *)peer != current() ? 0 : HCQ_CUDA_ERROR_INVALID_VALUE;
}
static CUresult f_cuMemAlloc(hcq_CUdeviceptr *p, size_t n) {
  if (!current()) return 201;
  void *m = track(n ? n : 1);
  if (!m) return HCQ_CUDA_ERROR_OUT_OF_MEMORY;
  mark_device((uintptr_t)m);
  /* Device memory holds garbage until written: hcq must clear it. */
  memset(m, 0xA5, n);
  *p = (hcq_CUdeviceptr)(uintptr_t)m;
  return 0;
}
static CUresult f_cuMemFree(hcq_CUdeviceptr p) {
  implicit_sync();
  return untrack((uintptr_t)p) ? 0 : HCQ_CUDA_ERROR_INVALID_VALUE;
}
/* The current context's device's memory, less its live cuMemAlloc allocations (pinned host memory
 * is not device memory and does not count), as the driver's free estimate. */
static CUresult f_cuMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  ctx_t *c = current();
  if (!c) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
  size_t taken = 0;
  pthread_mutex_lock(&g_alloc_lock);
  for (alloc_t *a = g_allocs; a; a = a->next)
    if (a->device && a->ctx && a->ctx->dev == c->dev) taken += a->size;
  pthread_mutex_unlock(&g_alloc_lock);
  *total_bytes = FAKE_DEVICE_MEMORY;
  *free_bytes = taken < FAKE_DEVICE_MEMORY ? FAKE_DEVICE_MEMORY - taken : 0;
  return 0;
}
static CUresult f_cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
  (void)flags;
  if (!current()) return 201;
  implicit_sync();
  *p = track(n ? n : 1);
  if (*p) memset(*p, 0x5A, n);
  return *p ? 0 : HCQ_CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult f_cuMemFreeHost(void *p) {
  implicit_sync();
  return untrack((uintptr_t)p) ? 0 : HCQ_CUDA_ERROR_INVALID_VALUE;
}
static CUresult f_cuMemHostGetDevicePointer(hcq_CUdeviceptr *d, void *h, unsigned int flags) {
  (void)flags;
  if (!owner_of((uintptr_t)h)) return HCQ_CUDA_ERROR_INVALID_VALUE;
  *d = (hcq_CUdeviceptr)(uintptr_t)h;
  return 0;
}
static CUresult f_cuMemsetD8Async(hcq_CUdeviceptr dst, unsigned char v, size_t n, hcq_CUstream s) {
  op_t *o = new_op(OP_MEMSET);
  if (!o) return 2;
  o->a = (uintptr_t)dst, o->v = v, o->n = n;
  return enqueue((stream_t *)s, o);
}
static CUresult f_cuMemcpyAsync(hcq_CUdeviceptr dst, hcq_CUdeviceptr src, size_t n,
                                hcq_CUstream s) {
  op_t *o = new_op(OP_MEMCPY);
  if (!o) return 2;
  o->a = (uintptr_t)dst, o->b = (uintptr_t)src, o->n = n;
  bool pageable = n && (!owner_of((uintptr_t)dst) || !owner_of((uintptr_t)src));
  if (!pageable || !strict("HCQ_FAKE_CUDA_SYNC_PAGEABLE")) return enqueue((stream_t *)s, o);
  uint64_t seq = 0;
  CUresult rc = enqueue_seq((stream_t *)s, o, &seq);
  stream_t *st = (stream_t *)s;
  if (rc) return rc;
  pthread_mutex_lock(&st->lock);
  while (st->executed < seq && !st->stop) pthread_cond_wait(&st->cond, &st->lock);
  pthread_mutex_unlock(&st->lock);
  return atomic_load(&st->error);
}
static CUresult f_cuPointerGetAttribute(void *data, int attr, hcq_CUdeviceptr p) {
  ctx_t *c = owner_of((uintptr_t)p);
  if (!c) return HCQ_CUDA_ERROR_INVALID_VALUE;
  if (attr == HCQ_CU_POINTER_ATTRIBUTE_CONTEXT)
    *(hcq_CUcontext *)data = (hcq_CUcontext)c;
  else if (attr == HCQ_CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
    *(unsigned *)data =
        in_device_memory((uintptr_t)p) ? HCQ_CU_MEMORYTYPE_DEVICE : HCQ_CU_MEMORYTYPE_HOST;
  else
    return HCQ_CUDA_ERROR_INVALID_VALUE;
  return 0;
}
static CUresult f_cuStreamCreate(hcq_CUstream *out, unsigned int flags) {
  (void)flags;
  stream_t *s = calloc(1, sizeof(*s));
  if (!s) return 2;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  if (pthread_create(&s->thread, NULL, stream_main, s)) {
    free(s);
    return 2;
  }
  s->ctx = current();
  pthread_mutex_lock(&g_streams_lock);
  s->next = g_streams;
  g_streams = s;
  pthread_mutex_unlock(&g_streams_lock);
  *out = (hcq_CUstream)s;
  return 0;
}
static CUresult f_cuStreamDestroy(hcq_CUstream h) {
  stream_t *s = (stream_t *)h;
  pthread_mutex_lock(&g_streams_lock);
  for (stream_t **p = &g_streams; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  pthread_mutex_unlock(&g_streams_lock);
  pthread_mutex_lock(&s->lock);
  __atomic_store_n(&s->stop, true, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  for (op_t *o = s->head, *n; o; o = n) {
    n = o->next;
    free_op(o);
  }
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
  return 0;
}
static CUresult f_cuStreamSynchronize(hcq_CUstream h) {
  stream_t *s = (stream_t *)h;
  pthread_mutex_lock(&s->lock);
  while ((s->head || s->busy) && !s->stop) pthread_cond_wait(&s->cond, &s->lock);
  pthread_mutex_unlock(&s->lock);
  return atomic_load(&s->error);
}
static CUresult f_cuStreamQuery(hcq_CUstream h) {
  stream_t *s = (stream_t *)h;
  int err = atomic_load(&s->error);
  if (err) return err;
  pthread_mutex_lock(&s->lock);
  bool idle = !s->head && !s->busy;
  pthread_mutex_unlock(&s->lock);
  return idle ? 0 : HCQ_CUDA_ERROR_NOT_READY;
}
static CUresult f_cuStreamWaitValue64(hcq_CUstream s, hcq_CUdeviceptr addr, uint64_t v,
                                      unsigned int flags) {
  /* Only memory the driver knows may be waited on (as with the real one). */
  if (flags != HCQ_CU_STREAM_WAIT_VALUE_GEQ || !owner_of((uintptr_t)addr))
    return HCQ_CUDA_ERROR_INVALID_VALUE;
  op_t *o = new_op(OP_WAIT);
  if (!o) return 2;
  o->a = (uintptr_t)addr, o->v = v;
  return enqueue((stream_t *)s, o);
}
static CUresult f_cuStreamWriteValue64(hcq_CUstream s, hcq_CUdeviceptr addr, uint64_t v,
                                       unsigned int flags) {
  if (flags != 0 || !owner_of((uintptr_t)addr)) return HCQ_CUDA_ERROR_INVALID_VALUE;
  op_t *o = new_op(OP_WRITE);
  if (!o) return 2;
  o->a = (uintptr_t)addr, o->v = v;
  return enqueue((stream_t *)s, o);
}
static CUresult f_cuStreamWaitEvent(hcq_CUstream s, hcq_CUevent e, unsigned int flags) {
  (void)flags;
  op_t *o = new_op(OP_WAIT_EVENT);
  if (!o) return 2;
  o->event = (event_t *)e;
  o->v = atomic_load(&o->event->recorded);
  return enqueue((stream_t *)s, o);
}
static CUresult f_cuLaunchHostFunc(hcq_CUstream s, hcq_CUhostFn fn, void *user) {
  op_t *o = new_op(OP_HOST);
  if (!o) return 2;
  o->host = fn, o->a = (uintptr_t)user;
  return enqueue((stream_t *)s, o);
}
static CUresult f_cuEventCreate(hcq_CUevent *e, unsigned int flags) {
  (void)flags;
  *e = (hcq_CUevent)calloc(1, sizeof(event_t));
  return *e ? 0 : 2;
}
static CUresult f_cuEventDestroy(hcq_CUevent e) {
  free(e);
  return 0;
}
static CUresult f_cuEventRecord(hcq_CUevent e, hcq_CUstream s) {
  event_t *ev = (event_t *)e;
  op_t *o = new_op(OP_EVENT);
  if (!o) return 2;
  o->event = ev;
  o->v = atomic_fetch_add(&ev->recorded, 1) + 1;
  return enqueue((stream_t *)s, o);
}
static CUresult f_cuEventQuery(hcq_CUevent e) {
  event_t *ev = (event_t *)e;
  return atomic_load(&ev->completed) >= atomic_load(&ev->recorded) ? 0 : HCQ_CUDA_ERROR_NOT_READY;
}
static CUresult f_cuEventElapsedTime(float *ms, hcq_CUevent a, hcq_CUevent b) {
  event_t *x = (event_t *)a, *y = (event_t *)b;
  if (!atomic_load(&x->recorded) || f_cuEventQuery(a) || f_cuEventQuery(b))
    return HCQ_CUDA_ERROR_INVALID_VALUE;
  *ms = (float)((double)(int64_t)(atomic_load(&y->time_ns) - atomic_load(&x->time_ns)) / 1e6);
  return 0;
}

/* A module's function: loaded lazily, on its first launch (or cuFuncLoad), as CUDA 12.2 and later
 * do by default. */
typedef struct fake_func {
  const fake_kernel_t *k;
  atomic_bool loaded;
  int32_t shape[SHAPE_SLOTS];
} fake_func_t;

typedef struct module {
  char *image;
  size_t size;
  fake_func_t funcs[16];
  int nfuncs;
} module_t;

/* The newest PTX ISA (major * 10 + minor) a driver of this CUDA version loads, which is the one its
 * toolkit writes (the PTX ISA release notes' table): 12.0-12.5 -> 8.0-8.5, 12.6 -> 8.5, 12.7
 * -> 8.6, 12.8 -> 8.7, 12.9 -> 8.8, 13.x -> 9.x, 11.x -> 7.x. */
static int max_ptx_isa(int cuda) {
  int major = cuda / 1000, minor = cuda % 1000 / 10;
  if (major == 12 && minor >= 6) return minor == 6 ? 85 : 79 + minor;
  return (major - 4) * 10 + minor;
}

/* Refuses what this driver version cannot load, with the real driver's error: PTX of a newer ISA
 * (its ".version X.Y" line), a cubin of a newer CUDA major (ELF ABI version 8 is CUDA 13's, 7 CUDA
 * 12's and older), and with HCQ_FAKE_CUDA_NO_JIT=1 any PTX (a driver installed without its PTX JIT
 * compiler library, libnvidia-ptxjitcompiler). */
static CUresult check_image(const unsigned char *p, bool elf) {
  int driver = driver_version();
  if (elf) {
    int abi = p[8]; /* e_ident[EI_ABIVERSION] */
    if (p[7] == 0x41 && abi >= 8 && driver < 13000) return HCQ_CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
    return 0;
  }
  const char *no_jit = getenv("HCQ_FAKE_CUDA_NO_JIT");
  if (no_jit && atoi(no_jit) > 0) return HCQ_CUDA_ERROR_JIT_COMPILER_NOT_FOUND;
  const char *v = strstr((const char *)p, ".version");
  int major = 0, minor = 0;
  if (!v || sscanf(v + 8, " %d.%d", &major, &minor) != 2) return HCQ_CUDA_ERROR_INVALID_PTX;
  return major * 10 + minor > max_ptx_isa(driver) ? HCQ_CUDA_ERROR_UNSUPPORTED_PTX_VERSION : 0;
}

static const fake_kernel_t *kernel_of(hcq_CUfunction f) {
  return f ? ((const fake_func_t *)f)->k : NULL;
}

/* Loads f if it is not loaded yet: in the implicit-sync mode that waits for the context's streams.
 */
static void load_function(hcq_CUfunction f) {
  fake_func_t *fn = (fake_func_t *)f;
  if (!fn || atomic_load(&fn->loaded)) return;
  implicit_sync();
  atomic_store(&fn->loaded, true);
}
static CUresult f_cuFuncLoad(hcq_CUfunction f) {
  if (!f) return HCQ_CUDA_ERROR_INVALID_VALUE;
  load_function(f);
  return 0;
}
static CUresult f_cuModuleGetLoadingMode(int *mode) {
  if (!mode) return HCQ_CUDA_ERROR_INVALID_VALUE;
  *mode = strict("HCQ_FAKE_CUDA_IMPLICIT_SYNC") ? 2 /* CU_MODULE_LAZY_LOADING */ : 1 /* EAGER */;
  return 0;
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const unsigned char *p) { return le32(p) | (uint64_t)le32(p + 4) << 32; }

/* The stand-in's GPU is compute capability 9.0 (cuDeviceGetAttribute): code for sm_XY runs on it
 * when X is 9 and Y is 0, as the real driver's rule goes (same major version, no newer minor). */
static bool runs_here(int arch) { return arch / 10 == 9 && arch % 10 <= 0; }

/* A cubin's architecture from e_flags: bits 0-7 up to ELF ABI version 7, bits 8-15 from 8. */
static int elf_arch(const unsigned char *p) {
  uint32_t flags = le32(p + 0x30);
  return (int)(p[8] >= 8 ? (flags >> 8) & 0xff : flags & 0xff);
}

/* An ELF image's size from its headers (the driver gets no size): the end of the section header
 * table or of the furthest section, whichever is later. */
static size_t elf_size(const unsigned char *p) {
  uint64_t shoff = le64(p + 0x28), end;
  uint16_t shentsize = (uint16_t)(p[0x3A] | p[0x3B] << 8),
           shnum = (uint16_t)(p[0x3C] | p[0x3D] << 8);
  end = shoff + (uint64_t)shentsize * shnum;
  for (unsigned i = 0; i < shnum; i++) {
    const unsigned char *sh = p + shoff + (uint64_t)i * shentsize;
    if (le32(sh + 4) != 8 /* SHT_NOBITS */ && le64(sh + 24) + le64(sh + 32) > end)
      end = le64(sh + 24) + le64(sh + 32);
  }
  return (size_t)end;
}

/* The image of a fatbin (magic 0xBA55ED50, entries of kind 1 PTX or 2 ELF with their architecture
 * at byte 28 and flags at 40) that this GPU runs: its cubin for sm_90, else its PTX for compute_90
 * or older. Compressed entries (flags 0x2000 or 0x8000) the stand-in cannot read: it refuses them
 * with CUDA_ERROR_INVALID_IMAGE, saying so, where the real driver would decompress them. */
static CUresult fatbin_pick(const unsigned char *p, const unsigned char **out, bool *elf) {
  uint64_t hs = (uint64_t)(p[6] | p[7] << 8), fat = le64(p + 8);
  const unsigned char *ptx = NULL;
  bool compressed_ptx = false;
  for (uint64_t off = hs; off < hs + fat;) {
    const unsigned char *e = p + off;
    uint16_t kind = (uint16_t)(e[0] | e[1] << 8);
    uint32_t ehs = le32(e + 4);
    uint64_t size = le64(e + 8), flags = le64(e + 40);
    int arch = (int)le32(e + 28);
    bool compressed = (flags & 0xA000u) != 0;
    if (kind == 2 && runs_here(arch)) {
      if (compressed) {
        fprintf(stderr,
                "fake libcuda: fatbin cubin for sm_%d is compressed; the stand-in cannot read it\n",
                arch);
        return HCQ_CUDA_ERROR_INVALID_IMAGE;
      }
      *out = e + ehs;
      *elf = true;
      return 0;
    }
    if (kind == 1 && arch <= 90 && !ptx) ptx = e + ehs, compressed_ptx = compressed;
    off += ehs + size;
  }
  if (!ptx) return HCQ_CUDA_ERROR_NO_BINARY_FOR_GPU;
  if (compressed_ptx) {
    fprintf(stderr, "fake libcuda: fatbin PTX is compressed; the stand-in cannot read it\n");
    return HCQ_CUDA_ERROR_INVALID_IMAGE;
  }
  *out = ptx;
  *elf = false;
  return 0;
}

static CUresult f_cuModuleLoadDataEx(hcq_CUmodule *m, const void *image, unsigned int n, int *opts,
                                     void **vals) {
  (void)n, (void)opts, (void)vals;
  const unsigned char *p = image;
  size_t size;
  if (le32(p) == 0xBA55ED50u) {
    bool is_elf = false;
    CUresult frc = fatbin_pick(p, &p, &is_elf);
    if (frc) return frc;
    image = p;
  }
  bool elf = p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F';
  if (elf && (p[18] != 190 || p[19] != 0))
    return HCQ_CUDA_ERROR_INVALID_IMAGE; /* not for EM_CUDA */
  if (elf && !runs_here(elf_arch(p))) return HCQ_CUDA_ERROR_NO_BINARY_FOR_GPU;
  CUresult rc = elf || strstr((const char *)image, ".version") ? check_image(p, elf) : 0;
  if (rc) return rc;
  if (elf) {
    size = elf_size(p);
  } else if (strstr((const char *)image, ".version")) {
    size = strlen(image);
  } else {
    return 218; /* CUDA_ERROR_INVALID_PTX */
  }
  module_t *mod = malloc(sizeof(*mod));
  if (!mod || !(mod->image = malloc(size + 1))) {
    free(mod);
    return 2;
  }
  memcpy(mod->image, image, size);
  mod->image[size] = '\0';
  mod->size = size;
  mod->nfuncs = 0;
  *m = (hcq_CUmodule)mod;
  return 0;
}
static CUresult f_cuModuleUnload(hcq_CUmodule m) {
  module_t *mod = (module_t *)m;
  free(mod->image);
  free(mod);
  return 0;
}
/* Whether the image defines the symbol name itself: a whole identifier, not part of another (a
 * C++ kernel's mangled name, _Z3addPi, contains "add" but does not define it). */
static bool defines_symbol(const module_t *mod, const char *name) {
  size_t len = strlen(name);
  for (const char *p = mod->image, *end = mod->image + mod->size; p < end;) {
    const char *hit = memmem(p, (size_t)(end - p), name, len);
    if (!hit) return false;
    char before = hit > mod->image ? hit[-1] : '\0', after = hit + len < end ? hit[len] : '\0';
    bool ident_before = before == '_' || before == '$' || (before >= '0' && before <= '9') ||
                        (before >= 'A' && before <= 'Z') || (before >= 'a' && before <= 'z');
    bool ident_after = after == '_' || after == '$' || (after >= '0' && after <= '9') ||
                       (after >= 'A' && after <= 'Z') || (after >= 'a' && after <= 'z');
    if (!ident_before && !ident_after) return true;
    p = hit + 1;
  }
  return false;
}
static CUresult f_cuModuleGetFunction(hcq_CUfunction *fn, hcq_CUmodule m, const char *name) {
  module_t *mod = (module_t *)m;
  if (!defines_symbol(mod, name)) return HCQ_CUDA_ERROR_NOT_FOUND;
  for (size_t i = 0; i < sizeof(g_kernels) / sizeof(g_kernels[0]); i++)
    if (!strcmp(g_kernels[i].name, name)) {
      for (int j = 0; j < mod->nfuncs; j++)
        if (mod->funcs[j].k == &g_kernels[i]) {
          *fn = (hcq_CUfunction)&mod->funcs[j];
          return 0;
        }
      if (mod->nfuncs == 16) return HCQ_CUDA_ERROR_OUT_OF_MEMORY;
      fake_func_t *f = &mod->funcs[mod->nfuncs++];
      f->k = &g_kernels[i];
      memset(f->shape, 0, sizeof(f->shape));
      const char *sh =
          g_kernels[i].per_block ? memmem(mod->image, mod->size, "llama2_shape_", 13) : NULL;
      int32_t *v = f->shape;
      if (g_kernels[i].llm) {
        sh = memmem(mod->image, mod->size, "llm_shape_", 10);
        int got = 0;
        for (int k = 0; sh && k < LLMT_NAMED; k++) { /* the values joined by '_' after the prefix */
          char *end;
          const char *at = k == 0 ? sh + 10 : sh;
          long x = strtol(at, &end, 10);
          if (end == at || (k + 1 < LLMT_NAMED && *end != '_')) break;
          v[k] = (int32_t)x, got++, sh = end + 1;
        }
        if (got == LLMT_NAMED && llm_scales((const char *)mod->image, mod->size,
                                            &v[LLMT_EMB_SCALE_BITS], &v[LLMT_ATTN_SCALE_BITS]))
          llmt_default_arch(v);
        else
          got = 0;
        if (got != LLMT_NAMED) {
          fprintf(stderr, "fake libcuda: kernel %s: the module names no llm shape\n", name);
          mod->nfuncs--;
          return HCQ_CUDA_ERROR_NOT_FOUND;
        }
      } else if (g_kernels[i].minilm) {
        sh = memmem(mod->image, mod->size, "minilm_shape_", 13);
        if (!sh || sscanf(sh, "minilm_shape_%d_%d_%d_%d_%d_%d_%d_%d_%d", &v[0], &v[1], &v[2], &v[3],
                          &v[4], &v[5], &v[6], &v[7], &v[8]) != M_COUNT) {
          fprintf(stderr, "fake libcuda: kernel %s: the module names no minilm shape\n", name);
          mod->nfuncs--;
          return HCQ_CUDA_ERROR_NOT_FOUND;
        }
      } else if (g_kernels[i].per_block &&
                 (!sh ||
                  sscanf(sh, "llama2_shape_%d_%d_%d_%d_%d_%d_%d_%d_%d_%d_%d", &v[0], &v[1], &v[2],
                         &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10]) != LT_COUNT)) {
        fprintf(stderr, "fake libcuda: kernel %s: the module names no llama2 shape\n", name);
        mod->nfuncs--;
        return HCQ_CUDA_ERROR_NOT_FOUND;
      }
      atomic_init(&f->loaded, false);
      *fn = (hcq_CUfunction)f;
      return 0;
    }
  fprintf(stderr, "fake libcuda: no host implementation of kernel %s\n", name);
  return HCQ_CUDA_ERROR_NOT_FOUND;
}
static CUresult f_cuLaunchKernel(hcq_CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                 unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                 hcq_CUstream s, void **params, void **extra) {
  (void)shared;
  op_t *o = new_op(OP_KERNEL);
  if (!o) return 2;
  o->fn = kernel_of(f);
  if (!o->fn) {
    free_op(o);
    return HCQ_CUDA_ERROR_INVALID_VALUE;
  }
  memcpy(o->shape, ((const fake_func_t *)f)->shape, sizeof(o->shape));
  load_function(f); /* a lazily loaded function loads at its first launch */
  o->grid = (dim3_t){gx, gy, gz};
  o->block = (dim3_t){bx, by, bz};
  CUresult rc = params ? HCQ_CUDA_ERROR_INVALID_VALUE : check_dims(o->grid, o->block);
  if (!rc) rc = read_extra(extra, o->params, &o->psize);
  if (rc) {
    free_op(o);
    return rc;
  }
  return enqueue((stream_t *)s, o);
}
static CUresult f_cuGraphCreate(hcq_CUgraph *g, unsigned int flags) {
  (void)flags;
  *g = (hcq_CUgraph)calloc(1, sizeof(graph_t));
  return *g ? 0 : 2;
}
static CUresult f_cuGraphDestroy(hcq_CUgraph h) {
  graph_t *g = (graph_t *)h;
  for (int i = 0; i < g->n; i++) free(g->nodes[i]);
  free(g->nodes);
  free(g);
  return 0;
}
static CUresult add_node(graph_t *g, gnode_t *n, const hcq_CUgraphNode *deps, size_t ndeps,
                         hcq_CUgraphNode *out) {
  for (size_t i = 0; i < ndeps; i++) {
    const gnode_t *d = (const gnode_t *)deps[i];
    if (!d || d->index >= g->n || g->nodes[d->index] != d) {
      free(n);
      return HCQ_CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 16;
    gnode_t **nodes = realloc(g->nodes, (size_t)cap * sizeof(*nodes));
    if (!nodes) {
      free(n);
      return 2;
    }
    g->nodes = nodes, g->cap = cap;
  }
  n->index = g->n;
  n->enabled = true;
  g->nodes[g->n++] = n;
  *out = (hcq_CUgraphNode)n;
  return 0;
}
static CUresult kernel_node(gnode_t *n, const hcq_CUDA_KERNEL_NODE_PARAMS *p) {
  if (!p->func || p->kernelParams) return HCQ_CUDA_ERROR_INVALID_VALUE;
  n->kind = 0;
  n->fn = kernel_of(p->func);
  if (n->fn) memcpy(n->shape, ((const fake_func_t *)p->func)->shape, sizeof(n->shape));
  n->grid = (dim3_t){p->gridDimX, p->gridDimY, p->gridDimZ};
  n->block = (dim3_t){p->blockDimX, p->blockDimY, p->blockDimZ};
  CUresult rc = check_dims(n->grid, n->block);
  return rc ? rc : read_extra(p->extra, n->params, &n->psize);
}
static CUresult copy_node(gnode_t *n, const hcq_CUDA_MEMCPY3D *p) {
  if (p->srcMemoryType != HCQ_CU_MEMORYTYPE_UNIFIED ||
      p->dstMemoryType != HCQ_CU_MEMORYTYPE_UNIFIED || p->Height != 1 || p->Depth != 1 ||
      !p->WidthInBytes || p->srcXInBytes || p->dstXInBytes)
    return HCQ_CUDA_ERROR_INVALID_VALUE;
  n->kind = 1;
  n->dst = (uintptr_t)p->dstDevice;
  n->src = (uintptr_t)p->srcDevice;
  n->bytes = p->WidthInBytes;
  return 0;
}
static CUresult f_cuGraphAddKernelNode(hcq_CUgraphNode *out, hcq_CUgraph g,
                                       const hcq_CUgraphNode *deps, size_t nd,
                                       const hcq_CUDA_KERNEL_NODE_PARAMS *p) {
  gnode_t *n = calloc(1, sizeof(*n));
  if (!n) return 2;
  CUresult rc = kernel_node(n, p);
  if (rc) {
    free(n);
    return rc;
  }
  return add_node((graph_t *)g, n, deps, nd, out);
}
static CUresult f_cuGraphAddMemcpyNode(hcq_CUgraphNode *out, hcq_CUgraph g,
                                       const hcq_CUgraphNode *deps, size_t nd,
                                       const hcq_CUDA_MEMCPY3D *p, hcq_CUcontext ctx) {
  gnode_t *n = calloc(1, sizeof(*n));
  if (!n) return 2;
  CUresult rc = ctx ? copy_node(n, p) : HCQ_CUDA_ERROR_INVALID_VALUE;
  if (rc) {
    free(n);
    return rc;
  }
  return add_node((graph_t *)g, n, deps, nd, out);
}
static CUresult f_cuGraphAddEmptyNode(hcq_CUgraphNode *out, hcq_CUgraph g,
                                      const hcq_CUgraphNode *deps, size_t nd) {
  gnode_t *n = calloc(1, sizeof(*n));
  if (!n) return 2;
  n->kind = 2;
  return add_node((graph_t *)g, n, deps, nd, out);
}
static CUresult f_cuGraphInstantiateWithFlags(hcq_CUgraphExec *out, hcq_CUgraph h,
                                              unsigned long long flags) {
  (void)flags;
  graph_t *g = (graph_t *)h;
  gexec_t *e = calloc(1, sizeof(*e));
  if (!e || !(e->nodes = calloc((size_t)g->n + 1, sizeof(gnode_t)))) {
    free(e);
    return 2;
  }
  for (int i = 0; i < g->n; i++) e->nodes[i] = *g->nodes[i];
  e->n = g->n;
  *out = (hcq_CUgraphExec)e;
  return 0;
}
static CUresult f_cuGraphExecDestroy(hcq_CUgraphExec h) {
  gexec_t *e = (gexec_t *)h;
  free(e->nodes);
  free(e);
  return 0;
}
static CUresult f_cuGraphLaunch(hcq_CUgraphExec h, hcq_CUstream s) {
  gexec_t *e = (gexec_t *)h;
  op_t *o = new_op(OP_GRAPH);
  if (!o || !(o->snapshot.nodes = malloc(((size_t)e->n + 1) * sizeof(gnode_t)))) {
    free(o);
    return 2;
  }
  memcpy(o->snapshot.nodes, e->nodes, (size_t)e->n * sizeof(gnode_t));
  o->snapshot.n = e->n;
  return enqueue((stream_t *)s, o);
}
static gnode_t *exec_node(gexec_t *e, hcq_CUgraphNode node) {
  int i = ((const gnode_t *)node)->index;
  return i >= 0 && i < e->n ? &e->nodes[i] : NULL;
}
static CUresult f_cuGraphExecKernelNodeSetParams(hcq_CUgraphExec h, hcq_CUgraphNode node,
                                                 const hcq_CUDA_KERNEL_NODE_PARAMS *p) {
  gnode_t *n = exec_node((gexec_t *)h, node);
  if (!n || n->kind != 0) return HCQ_CUDA_ERROR_INVALID_VALUE;
  atomic_fetch_add(&g_kernel_sets, 1);
  gnode_t copy = *n;
  CUresult rc = kernel_node(&copy, p);
  if (!rc) *n = copy;
  return rc;
}
static CUresult f_cuGraphExecMemcpyNodeSetParams(hcq_CUgraphExec h, hcq_CUgraphNode node,
                                                 const hcq_CUDA_MEMCPY3D *p, hcq_CUcontext ctx) {
  gnode_t *n = exec_node((gexec_t *)h, node);
  if (!n || n->kind != 1 || !ctx) return HCQ_CUDA_ERROR_INVALID_VALUE;
  atomic_fetch_add(&g_memcpy_sets, 1);
  gnode_t copy = *n;
  CUresult rc = copy_node(&copy, p);
  if (!rc) *n = copy;
  return rc;
}
static CUresult f_cuGraphNodeSetEnabled(hcq_CUgraphExec h, hcq_CUgraphNode node,
                                        unsigned int enabled) {
  gnode_t *n = exec_node((gexec_t *)h, node);
  if (!n || n->kind != 0) return HCQ_CUDA_ERROR_INVALID_VALUE;
  atomic_fetch_add(&g_enable_sets, 1);
  n->enabled = enabled != 0;
  return 0;
}

static const struct {
  const char *name;
  void *fn;
} g_entries[] = {
#define FAKE_ENTRY(name, ret, params) {#name, (void *)f_##name},
    HCQ_CUDA_ENTRY_POINTS(FAKE_ENTRY)
#undef FAKE_ENTRY
};

/* Entry points hcq looks for only where the driver has them, with the version that introduced them.
 */
static const struct {
  const char *name;
  void *fn;
  int since;
} g_optional[] = {
    {"cuFuncLoad", (void *)f_cuFuncLoad, 12040},
    {"cuModuleGetLoadingMode", (void *)f_cuModuleGetLoadingMode, 11070},
};

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags,
                                    int *status) {
  (void)flags;
  for (size_t i = 0; i < sizeof(g_optional) / sizeof(g_optional[0]); i++)
    if (!strcmp(g_optional[i].name, symbol)) {
      bool ok = version >= g_optional[i].since;
      *pfn = ok ? g_optional[i].fn : NULL;
      if (status) *status = ok ? 0 : 2; /* CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT */
      return ok ? 0 : HCQ_CUDA_ERROR_NOT_FOUND;
    }
  for (size_t i = 0; i < sizeof(g_entries) / sizeof(g_entries[0]); i++)
    if (!strcmp(g_entries[i].name, symbol) && version >= 12000) {
      *pfn = g_entries[i].fn;
      if (status) *status = 0;
      return 0;
    }
  *pfn = NULL;
  if (status) *status = 1;
  return HCQ_CUDA_ERROR_NOT_FOUND;
}
