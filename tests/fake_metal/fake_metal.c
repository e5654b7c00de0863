/* A stand-in for the Objective-C runtime and the parts of Metal hcq uses, for tests on machines
 * without macOS (HCQ_OBJC_LIBRARY and HCQ_METAL_FRAMEWORK both name this library).
 *
 * The runtime: objc_getClass, sel_registerName (interned names), object_getClassName, autorelease
 * pools, and objc_msgSend as a trampoline (x86-64 and aarch64 assembly below) that saves the
 * caller's argument registers, looks the method up by the receiver's class and the selector, puts
 * the registers back and jumps to the method, so the method receives its arguments exactly as the
 * caller's cast prototype passed them (MTLSize by value included). A message the stand-in does not
 * implement aborts with its name.
 *
 * Metal, with its documented semantics: shared buffers are host memory; command buffers run in
 * commit order on one thread per queue, then complete (status, GPU times, signalled events); an
 * indirect command buffer's commands keep the state set on them and run with it when executed; a
 * command that binds a buffer the encoder did not declare resident (useResources:) fails its
 * command buffer, as the GPU would fault. MSL cannot be compiled here: a library's kernels are the
 * names after "kernel void" in its source, each resolved to a host twin below (a source with an
 * "#error" line fails to compile with Metal's message format). A kernel named hcq_fake_fault fails
 * its command buffer with a GPU fault. The device recommends a fixed working set (48 GiB) and
 * counts the bytes of its live buffers as currentAllocatedSize. hcq_fake_metal_counts() gives tests
 * what they count. newLibraryWithData: takes a metallib's function names the same way (see
 * device_library_data), from dispatch data this library also provides (dispatch_data_create). */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct {
  unsigned long width, height, depth;
} MTLSize;
typedef struct {
  unsigned long location, length;
} NSRange;

/* ---- the runtime ---- */

typedef struct method {
  const char *sel;
  void *imp;
} method_t;

typedef struct fclass {
  struct fclass *isa; /* class objects are objects too: their isa holds the class methods */
  const char *name;
  const method_t *methods;
  void (*dealloc)(void *self);
} fclass_t;

typedef struct obj {
  fclass_t *isa;
  atomic_int refs;
} obj_t;

static pthread_mutex_t g_sel_lock = PTHREAD_MUTEX_INITIALIZER;
static char **g_sels;
static size_t g_nsels;

EXPORT const char *sel_registerName(const char *name) {
  pthread_mutex_lock(&g_sel_lock);
  for (size_t i = 0; i < g_nsels; i++)
    if (!strcmp(g_sels[i], name)) {
      pthread_mutex_unlock(&g_sel_lock);
      return g_sels[i];
    }
  char **grown = realloc(g_sels, (g_nsels + 1) * sizeof(*g_sels));
  if (!grown) abort();
  g_sels = grown;
  g_sels[g_nsels] = strdup(name);
  const char *s = g_sels[g_nsels++];
  pthread_mutex_unlock(&g_sel_lock);
  return s;
}

static void *nil_imp(void) { return NULL; } /* messages to nil return 0 */

__attribute__((visibility("hidden"), used)) void *hcq_fake_metal_lookup(obj_t *self,
                                                                        const char *sel) {
  if (!self) return (void *)nil_imp;
  for (const method_t *m = self->isa->methods; m && m->sel; m++)
    if (!strcmp(m->sel, sel)) return m->imp;
  fprintf(stderr, "fake Metal: [%s %s] is not implemented by the stand-in\n", self->isa->name, sel);
  abort();
}

#if defined(__x86_64__)
__asm__(
    ".text\n"
    ".globl objc_msgSend\n"
    ".type objc_msgSend, @function\n"
    "objc_msgSend:\n"
    "  push %rbp\n"
    "  mov %rsp, %rbp\n"
    "  sub $0xc0, %rsp\n"
    "  mov %rdi, 0x00(%rsp)\n  mov %rsi, 0x08(%rsp)\n  mov %rdx, 0x10(%rsp)\n  mov %rcx, "
    "0x18(%rsp)\n"
    "  mov %r8, 0x20(%rsp)\n  mov %r9, 0x28(%rsp)\n  mov %rax, 0x30(%rsp)\n"
    "  movdqu %xmm0, 0x40(%rsp)\n  movdqu %xmm1, 0x50(%rsp)\n  movdqu %xmm2, 0x60(%rsp)\n  movdqu "
    "%xmm3, 0x70(%rsp)\n"
    "  movdqu %xmm4, 0x80(%rsp)\n  movdqu %xmm5, 0x90(%rsp)\n  movdqu %xmm6, 0xa0(%rsp)\n  movdqu "
    "%xmm7, 0xb0(%rsp)\n"
    "  call hcq_fake_metal_lookup\n"
    "  mov %rax, %r11\n"
    "  mov 0x00(%rsp), %rdi\n  mov 0x08(%rsp), %rsi\n  mov 0x10(%rsp), %rdx\n  mov 0x18(%rsp), "
    "%rcx\n"
    "  mov 0x20(%rsp), %r8\n  mov 0x28(%rsp), %r9\n  mov 0x30(%rsp), %rax\n"
    "  movdqu 0x40(%rsp), %xmm0\n  movdqu 0x50(%rsp), %xmm1\n  movdqu 0x60(%rsp), %xmm2\n  movdqu "
    "0x70(%rsp), %xmm3\n"
    "  movdqu 0x80(%rsp), %xmm4\n  movdqu 0x90(%rsp), %xmm5\n  movdqu 0xa0(%rsp), %xmm6\n  movdqu "
    "0xb0(%rsp), %xmm7\n"
    "  leave\n"
    "  jmp *%r11\n"
    ".size objc_msgSend, .-objc_msgSend\n");
#elif defined(__aarch64__)
__asm__(
    ".text\n"
    ".globl objc_msgSend\n"
    ".type objc_msgSend, %function\n"
    "objc_msgSend:\n"
    "  stp x29, x30, [sp, #-224]!\n"
    "  mov x29, sp\n"
    "  stp x0, x1, [sp, #16]\n  stp x2, x3, [sp, #32]\n  stp x4, x5, [sp, #48]\n  stp x6, x7, [sp, "
    "#64]\n"
    "  str x8, [sp, #80]\n"
    "  stp q0, q1, [sp, #96]\n  stp q2, q3, [sp, #128]\n  stp q4, q5, [sp, #160]\n  stp q6, q7, "
    "[sp, #192]\n"
    "  bl hcq_fake_metal_lookup\n"
    "  mov x16, x0\n"
    "  ldp x0, x1, [sp, #16]\n  ldp x2, x3, [sp, #32]\n  ldp x4, x5, [sp, #48]\n  ldp x6, x7, [sp, "
    "#64]\n"
    "  ldr x8, [sp, #80]\n"
    "  ldp q0, q1, [sp, #96]\n  ldp q2, q3, [sp, #128]\n  ldp q4, q5, [sp, #160]\n  ldp q6, q7, "
    "[sp, #192]\n"
    "  ldp x29, x30, [sp], #224\n"
    "  br x16\n"
    ".size objc_msgSend, .-objc_msgSend\n");
#else
#error "the Metal stand-in's objc_msgSend trampoline is written for x86-64 and aarch64"
#endif

EXPORT const char *object_getClassName(obj_t *o) { return o ? o->isa->name : "nil"; }

static void *alloc_obj(fclass_t *c, size_t size) {
  obj_t *o = calloc(1, size);
  if (!o) abort();
  o->isa = c;
  atomic_init(&o->refs, 1);
  return o;
}

static void obj_release(obj_t *self, const char *sel) {
  (void)sel;
  if (atomic_fetch_sub(&self->refs, 1) == 1) {
    if (self->isa->dealloc) self->isa->dealloc(self);
    free(self);
  }
}
static obj_t *obj_retain(obj_t *self, const char *sel) {
  (void)sel;
  atomic_fetch_add(&self->refs, 1);
  return self;
}

/* Autorelease pools: a per-thread stack of objects; a pool is its depth when pushed. */
static _Thread_local obj_t **t_pool;
static _Thread_local size_t t_pool_len, t_pool_cap;

EXPORT void *objc_autoreleasePoolPush(void) { return (void *)(uintptr_t)(t_pool_len + 1); }
EXPORT void objc_autoreleasePoolPop(void *pool) {
  size_t to = (size_t)(uintptr_t)pool - 1;
  while (t_pool_len > to) obj_release(t_pool[--t_pool_len], NULL);
  if (!t_pool_len) {
    free(t_pool);
    t_pool = NULL;
    t_pool_cap = 0;
  }
}
static void *autorelease(void *o) {
  if (t_pool_len == t_pool_cap) {
    t_pool_cap = t_pool_cap ? 2 * t_pool_cap : 16;
    t_pool = realloc(t_pool, t_pool_cap * sizeof(*t_pool));
    if (!t_pool) abort();
  }
  t_pool[t_pool_len++] = o;
  return o;
}

#define M(sel, fn) \
  { sel, (void *)(fn) }
#define BASE M("release", obj_release), M("retain", obj_retain)

/* ---- counters ---- */

typedef struct hcq_fake_metal_counts {
  uint64_t icb_sets;         /* calls on indirect compute commands (state set or reset) */
  uint64_t icb_executed;     /* ICB commands run */
  uint64_t dispatches;       /* direct dispatches that ran (dummy ones included) */
  uint64_t empty_dispatches; /* direct dispatches of an empty grid (the M1/M2 workaround) */
  uint64_t command_buffers;  /* committed */
  uint64_t use_resources;    /* useResources:count:usage: calls */
  char last_label[64];
} hcq_fake_metal_counts_t;

static pthread_mutex_t g_count_lock = PTHREAD_MUTEX_INITIALIZER;
static hcq_fake_metal_counts_t g_counts;
#define COUNT(field) \
  (pthread_mutex_lock(&g_count_lock), g_counts.field++, pthread_mutex_unlock(&g_count_lock))

EXPORT void hcq_fake_metal_counts(hcq_fake_metal_counts_t *out) {
  pthread_mutex_lock(&g_count_lock);
  *out = g_counts;
  pthread_mutex_unlock(&g_count_lock);
}

/* ---- NSString, NSError ---- */

typedef struct nsstring {
  obj_t o;
  char *s;
} nsstring_t;
static void string_dealloc(void *self) { free(((nsstring_t *)self)->s); }
static const char *string_utf8(nsstring_t *self, const char *sel) {
  (void)sel;
  return self->s;
}
static fclass_t c_string_meta, c_string;
static nsstring_t *make_string(const char *s) {
  nsstring_t *o = alloc_obj(&c_string, sizeof(*o));
  o->s = strdup(s ? s : "");
  return o;
}
static nsstring_t *string_with_utf8(obj_t *cls, const char *sel, const char *s) {
  (void)cls, (void)sel;
  return autorelease(make_string(s));
}
static const method_t m_string[] = {BASE, M("UTF8String", string_utf8), {0}};
static const method_t m_string_meta[] = {M("stringWithUTF8String:", string_with_utf8), {0}};
static fclass_t c_string_meta = {NULL, "NSString (class)", m_string_meta, NULL};
static fclass_t c_string = {&c_string_meta, "NSString", m_string, string_dealloc};

typedef struct nserror {
  obj_t o;
  char text[512];
} nserror_t;
static nsstring_t *error_description(nserror_t *self, const char *sel) {
  (void)sel;
  return autorelease(make_string(self->text));
}
static const method_t m_error[] = {BASE, M("localizedDescription", error_description), {0}};
static fclass_t c_error = {NULL, "NSError", m_error, NULL};
static nserror_t *make_error(const char *fmt, const char *a, int n) {
  nserror_t *e = alloc_obj(&c_error, sizeof(*e));
  snprintf(e->text, sizeof(e->text), fmt, a, n);
  return autorelease(e);
}

/* ---- host twins of the MSL kernels (tests/test_util.c, examples/kernels/ *.metal) ---- */

typedef struct grid {
  unsigned tg[3], ntg[3], tid[3], ntid[3];
  const int32_t
      *shape; /* the llama2 shape of the pipeline's library, or NULL (fake_metal_llama2.c) */
  const int32_t *llm; /* the LLM shape of the pipeline's library, or NULL (fake_metal_llm.c) */
} grid_t;
typedef void (*twin_fn)(void *const *b, const int32_t *v, const grid_t *g);
#define GI ((uint64_t)g->tg[0] * g->ntid[0] + g->tid[0])
#define ROW0 (g->tid[1] == 0 && g->tid[2] == 0)

static void t_add_scalar(void *const *b, const int32_t *v, const grid_t *g) {
  if (ROW0 && GI < (uint64_t)(int64_t)v[1]) ((int32_t *)b[0])[GI] = ((int32_t *)b[1])[GI] + v[0];
}
static void t_mul_add(void *const *b, const int32_t *v, const grid_t *g) {
  uint32_t *x = b[0];
  if (ROW0 && GI < (uint64_t)(int64_t)v[2]) x[GI] = x[GI] * (uint32_t)v[0] + (uint32_t)v[1];
}
static void t_add2(void *const *b, const int32_t *v, const grid_t *g) {
  if (ROW0 && GI < (uint64_t)(int64_t)v[0])
    ((int32_t *)b[0])[GI] = ((int32_t *)b[1])[GI] + ((int32_t *)b[2])[GI];
}
static void t_fill(void *const *b, const int32_t *v, const grid_t *g) {
  if (ROW0 && GI < (uint64_t)(int64_t)v[1]) ((int32_t *)b[0])[GI] = v[0];
}
static void t_mix3(void *const *b, const int32_t *v, const grid_t *g) {
  const uint32_t *x = b[1], *y = b[2];
  if (ROW0 && GI < (uint64_t)(int64_t)v[2])
    ((uint32_t *)b[0])[GI] = x[GI] * (uint32_t)v[0] + y[GI] + (uint32_t)v[1];
}
static void t_record_groups(void *const *b, const int32_t *v, const grid_t *g) {
  (void)v;
  if (g->tid[0] || g->tid[1] || g->tid[2]) return;
  unsigned k = (g->tg[2] * g->ntg[1] + g->tg[1]) * g->ntg[0] + g->tg[0];
  ((int32_t *)b[0])[k] += (int32_t)(g->ntid[0] * g->ntid[1] * g->ntid[2]);
}
/* examples/kernels */
static void t_axpb(void *const *b, const int32_t *v, const grid_t *g) {
  const uint32_t *x = b[1], *w = b[2];
  if (GI < (uint64_t)(v[0] < 0 ? 0 : v[0]))
    ((uint32_t *)b[0])[GI] = x[GI] * (uint32_t)v[1] + w[GI] + (uint32_t)v[2];
}
static void t_mix2(void *const *b, const int32_t *v, const grid_t *g) {
  const uint32_t *x = b[1];
  if (GI < (uint64_t)(v[0] < 0 ? 0 : v[0])) {
    uint32_t s = (uint32_t)v[1] & 31u, xv = x[GI];
    ((uint32_t *)b[0])[GI] = (xv ^ (xv >> s)) * 0x9E3779B1u + (uint32_t)v[2];
  }
}
static void t_sum3(void *const *b, const int32_t *v, const grid_t *g) {
  const uint32_t *a = b[1], *bb = b[2], *c = b[3];
  if (GI < (uint64_t)(v[0] < 0 ? 0 : v[0]))
    ((uint32_t *)b[0])[GI] = a[GI] + 3u * bb[GI] + 5u * c[GI];
}
static void t_saxpy_f32(void *const *b, const int32_t *v, const grid_t *g) {
  float a;
  memcpy(&a, &v[1], 4);
  float *y = b[0];
  const float *x = b[1];
  if (GI < (uint64_t)(v[0] < 0 ? 0 : v[0])) y[GI] = a * x[GI] + y[GI];
}
static void t_sum_groups(void *const *b, const int32_t *v, const grid_t *g) {
  uint64_t i = GI, n = v[0] < 0 ? 0 : (uint64_t)v[0], per = v[1] <= 0 ? 1 : (uint64_t)v[1];
  if (i >= n || i % per || !ROW0) return;
  float s = 0.0f;
  for (uint64_t k = i; k < i + per && k < n; k++) s += ((const float *)b[1])[k];
  ((float *)b[0])[i / per] = s;
}
static void t_sum_final(void *const *b, const int32_t *v, const grid_t *g) {
  if (GI != 0 || g->tg[1] || g->tg[2] || g->tid[1] || g->tid[2]) return;
  float s = 0.0f;
  for (int32_t k = 0; k < v[0]; k++) s += ((const float *)b[1])[k];
  ((float *)b[0])[0] = s;
}

#include "fake_metal_llama2.c" /* models/llama2/kernels.metal */
#include "fake_metal_llm.c"    /* models/llm/kernels.metal */

typedef struct twin {
  const char *name;
  unsigned
      nbufs; /* 0: any; else only launches binding this many buffers (two kernels share a name) */
  twin_fn fn;
} twin_t;
static const twin_t g_twins[] = {
    {"add_scalar", 0, t_add_scalar},
    {"mul_add", 0, t_mul_add},
    {"add2", 0, t_add2},
    {"fill", 0, t_fill},
    {"mix", 3, t_mix3},
    {"mix", 2, t_mix2},
    {"record_groups", 0, t_record_groups},
    {"axpb", 0, t_axpb},
    {"sum3", 0, t_sum3},
    {"saxpy_f32", 0, t_saxpy_f32},
    {"sum_groups", 0, t_sum_groups},
    {"sum_final", 0, t_sum_final},
    LLAMA2_TWINS LLM_TWINS{"hcq_fake_fault", 0, NULL},
};

static bool has_twin(const char *name) {
  for (size_t i = 0; i < sizeof(g_twins) / sizeof(g_twins[0]); i++)
    if (!strcmp(g_twins[i].name, name)) return true;
  return false;
}
static const twin_t *twin_for(const char *name, unsigned nbufs) {
  const twin_t *any = NULL;
  for (size_t i = 0; i < sizeof(g_twins) / sizeof(g_twins[0]); i++) {
    if (strcmp(g_twins[i].name, name)) continue;
    if (g_twins[i].nbufs == nbufs) return &g_twins[i];
    if (!g_twins[i].nbufs) any = &g_twins[i];
  }
  return any;
}

/* ---- device objects ---- */

typedef struct buffer {
  obj_t o;
  void *mem;
  size_t len, pages; /* pages: the bytes held, len rounded up to whole pages as Metal allocates */
} buffer_t;

/* currentAllocatedSize: bytes of the buffers alive now. One count for the process, not per device
 * object: on a Mac every MTLCreateSystemDefaultDevice returns the same device, so the allocations
 * of all of hcq's METAL:N (HCQ_METAL_VIRTUAL) count together there too. */
static _Atomic uint64_t g_allocated;

static void buffer_dealloc(void *self) {
  buffer_t *b = self;
  atomic_fetch_sub(&g_allocated, b->pages);
  free(b->mem);
}
static void *buffer_contents(buffer_t *self, const char *sel) {
  (void)sel;
  return self->mem;
}
static unsigned long buffer_length(buffer_t *self, const char *sel) {
  (void)sel;
  return self->len;
}
static const method_t m_buffer[] = {
    BASE, M("contents", buffer_contents), M("length", buffer_length), {0}};
static fclass_t c_buffer = {NULL, "FakeMTLBuffer", m_buffer, buffer_dealloc};

typedef struct event {
  obj_t o;
  _Atomic uint64_t value;
} event_t;
static uint64_t event_value(event_t *self, const char *sel) {
  (void)sel;
  return atomic_load(&self->value);
}
static const method_t m_event[] = {BASE, M("signaledValue", event_value), {0}};
static fclass_t c_event = {NULL, "FakeMTLSharedEvent", m_event, NULL};

typedef struct library {
  obj_t o;
  char names[32][64];
  int nnames;
  bool has_shape, has_llm;
  int32_t shape[LT_COUNT], llm[LLMT_COUNT];
} library_t;
typedef struct function {
  obj_t o;
  char name[64];
  bool has_shape, has_llm;
  int32_t shape[LT_COUNT], llm[LLMT_COUNT];
} function_t;
static const method_t m_function[] = {BASE, {0}};
static fclass_t c_function = {NULL, "FakeMTLFunction", m_function, NULL};
static function_t *library_function(library_t *self, const char *sel, nsstring_t *name) {
  (void)sel;
  for (int i = 0; i < self->nnames; i++)
    if (!strcmp(self->names[i], name->s)) {
      function_t *f = alloc_obj(&c_function, sizeof(*f));
      snprintf(f->name, sizeof(f->name), "%s", name->s);
      f->has_shape = self->has_shape, f->has_llm = self->has_llm;
      memcpy(f->shape, self->shape, sizeof(f->shape));
      memcpy(f->llm, self->llm, sizeof(f->llm));
      return f;
    }
  return NULL;
}
static const method_t m_library[] = {BASE, M("newFunctionWithName:", library_function), {0}};
static fclass_t c_library = {NULL, "FakeMTLLibrary", m_library, NULL};

typedef struct pipeline {
  obj_t o;
  char name[64];
  bool icb_ok;
  bool has_shape, has_llm;
  int32_t shape[LT_COUNT], llm[LLMT_COUNT];
} pipeline_t;
static unsigned long pipeline_max_threads(pipeline_t *self, const char *sel) {
  (void)self, (void)sel;
  return 1024;
}
static const method_t m_pipeline[] = {
    BASE, M("maxTotalThreadsPerThreadgroup", pipeline_max_threads), {0}};
static fclass_t c_pipeline = {NULL, "FakeMTLComputePipelineState", m_pipeline, NULL};

typedef struct pipeline_desc {
  obj_t o;
  function_t *fn;
  bool icb;
} pipeline_desc_t;
static void pdesc_dealloc(void *self) {
  pipeline_desc_t *d = self;
  if (d->fn) obj_release(&d->fn->o, NULL);
}
static void pdesc_set_function(pipeline_desc_t *self, const char *sel, function_t *fn) {
  (void)sel;
  if (fn) obj_retain(&fn->o, NULL);
  if (self->fn) obj_release(&self->fn->o, NULL);
  self->fn = fn;
}
static void pdesc_set_icb(pipeline_desc_t *self, const char *sel, signed char yes) {
  (void)sel;
  self->icb = yes;
}
static const method_t m_pdesc[] = {BASE,
                                   M("setComputeFunction:", pdesc_set_function),
                                   M("setSupportIndirectCommandBuffers:", pdesc_set_icb),
                                   {0}};
static fclass_t c_pdesc_meta, c_pdesc;
static void *pdesc_new(obj_t *cls, const char *sel) {
  (void)cls, (void)sel;
  return alloc_obj(&c_pdesc, sizeof(pipeline_desc_t));
}
static const method_t m_pdesc_meta[] = {M("new", pdesc_new), {0}};
static fclass_t c_pdesc_meta = {NULL, "MTLComputePipelineDescriptor (class)", m_pdesc_meta, NULL};
static fclass_t c_pdesc = {&c_pdesc_meta, "MTLComputePipelineDescriptor", m_pdesc, pdesc_dealloc};

typedef struct icb_desc {
  obj_t o;
  unsigned long types, max_binds;
  bool inherit_buffers, inherit_pipeline;
} icb_desc_t;
static void idesc_types(icb_desc_t *self, const char *sel, unsigned long v) {
  (void)sel, self->types = v;
}
static void idesc_inherit_buffers(icb_desc_t *self, const char *sel, signed char v) {
  (void)sel, self->inherit_buffers = v;
}
static void idesc_inherit_pipeline(icb_desc_t *self, const char *sel, signed char v) {
  (void)sel, self->inherit_pipeline = v;
}
static void idesc_binds(icb_desc_t *self, const char *sel, unsigned long v) {
  (void)sel, self->max_binds = v;
}
static const method_t m_idesc[] = {BASE,
                                   M("setCommandTypes:", idesc_types),
                                   M("setInheritBuffers:", idesc_inherit_buffers),
                                   M("setInheritPipelineState:", idesc_inherit_pipeline),
                                   M("setMaxKernelBufferBindCount:", idesc_binds),
                                   {0}};
static fclass_t c_idesc_meta, c_idesc;
static void *idesc_new(obj_t *cls, const char *sel) {
  (void)cls, (void)sel;
  return alloc_obj(&c_idesc, sizeof(icb_desc_t));
}
static const method_t m_idesc_meta[] = {M("new", idesc_new), {0}};
static fclass_t c_idesc_meta = {NULL, "MTLIndirectCommandBufferDescriptor (class)", m_idesc_meta,
                                NULL};
static fclass_t c_idesc = {&c_idesc_meta, "MTLIndirectCommandBufferDescriptor", m_idesc, NULL};

/* An indirect compute command: the state set on it, kept until set again or reset. */
#define MAX_BINDS 31
typedef struct icb_cmd {
  obj_t o;
  pipeline_t *pipeline;
  buffer_t *bufs[MAX_BINDS];
  unsigned long offs[MAX_BINDS];
  MTLSize grid, group;
  bool dispatch, barrier;
} icb_cmd_t;
static void cmd_pipeline(icb_cmd_t *self, const char *sel, pipeline_t *p) {
  (void)sel, COUNT(icb_sets), self->pipeline = p;
}
static void cmd_buffer(icb_cmd_t *self, const char *sel, buffer_t *b, unsigned long off,
                       unsigned long i) {
  (void)sel;
  COUNT(icb_sets);
  if (i >= MAX_BINDS) {
    fprintf(stderr, "fake Metal: setKernelBuffer:offset:atIndex:%lu past the bind count\n", i);
    abort();
  }
  self->bufs[i] = b, self->offs[i] = off;
}
static void cmd_dispatch(icb_cmd_t *self, const char *sel, MTLSize grid, MTLSize group) {
  (void)sel;
  COUNT(icb_sets);
  self->grid = grid, self->group = group, self->dispatch = true;
}
static void cmd_barrier(icb_cmd_t *self, const char *sel) {
  (void)sel, COUNT(icb_sets), self->barrier = true;
}
static void cmd_reset(icb_cmd_t *self, const char *sel) {
  (void)sel;
  COUNT(icb_sets);
  obj_t o = self->o;
  memset(self, 0, sizeof(*self));
  self->o = o;
}
static const method_t m_cmd[] = {
    M("setComputePipelineState:", cmd_pipeline),
    M("setKernelBuffer:offset:atIndex:", cmd_buffer),
    M("concurrentDispatchThreadgroups:threadsPerThreadgroup:", cmd_dispatch),
    M("setBarrier", cmd_barrier),
    M("reset", cmd_reset),
    {0}};
static fclass_t c_cmd = {NULL, "FakeMTLIndirectComputeCommand", m_cmd, NULL};

typedef struct icb {
  obj_t o;
  icb_cmd_t *cmds;
  unsigned long n;
} icb_t;
static void icb_dealloc(void *self) { free(((icb_t *)self)->cmds); }
static icb_cmd_t *icb_command(icb_t *self, const char *sel, unsigned long i) {
  (void)sel;
  if (i >= self->n) {
    fprintf(stderr, "fake Metal: indirectComputeCommandAtIndex:%lu of %lu\n", i, self->n);
    abort();
  }
  return &self->cmds[i];
}
static const method_t m_icb[] = {BASE, M("indirectComputeCommandAtIndex:", icb_command), {0}};
/* Not an AGXG15X (M3) class: hcq applies the M1/M2 workaround, which the counts show. */
static fclass_t c_icb = {NULL, "FakeMTLIndirectCommandBuffer", m_icb, icb_dealloc};

/* ---- command buffers ---- */

enum { OP_DISPATCH, OP_COPY, OP_ICB, OP_SIGNAL };
typedef struct op {
  int kind;
  pipeline_t *pipeline;
  void *bufs[MAX_BINDS];
  unsigned nbufs;
  int32_t vals[64];
  MTLSize grid, group;
  void *dst;
  const void *src;
  size_t size;
  icb_t *icb;
  NSRange range;
  buffer_t **resident;
  size_t nresident;
  event_t *event;
  uint64_t value;
} op_t;

typedef struct queue queue_t;
typedef struct cmdbuf {
  obj_t o;
  queue_t *queue;
  op_t *ops;
  size_t nops, cap;
  _Atomic long status; /* 0 not enqueued .. 4 completed, 5 error */
  double t0, t1;
  char label[64];
  char error[512];
  struct cmdbuf *next;
} cmdbuf_t;

static op_t *add_op(cmdbuf_t *cb, int kind) {
  if (cb->nops == cb->cap) {
    cb->cap = cb->cap ? 2 * cb->cap : 8;
    cb->ops = realloc(cb->ops, cb->cap * sizeof(op_t));
    if (!cb->ops) abort();
  }
  op_t *o = &cb->ops[cb->nops++];
  memset(o, 0, sizeof(*o));
  o->kind = kind;
  return o;
}
static void cmdbuf_dealloc(void *self) {
  cmdbuf_t *cb = self;
  for (size_t i = 0; i < cb->nops; i++) free(cb->ops[i].resident);
  free(cb->ops);
}

typedef struct encoder {
  obj_t o;
  cmdbuf_t *cb;
  pipeline_t *pipeline;
  void *bufs[MAX_BINDS];
  unsigned nbufs;
  int32_t vals[64];
  unsigned vals_at;
  bool has_vals;
  buffer_t **resident;
  size_t nresident;
} encoder_t;
static void enc_dealloc(void *self) { free(((encoder_t *)self)->resident); }
static void enc_pipeline(encoder_t *e, const char *sel, pipeline_t *p) {
  (void)sel, e->pipeline = p;
}
static void enc_buffer(encoder_t *e, const char *sel, buffer_t *b, unsigned long off,
                       unsigned long i) {
  (void)sel;
  if (i < MAX_BINDS) {
    e->bufs[i] = (char *)b->mem + off;
    if (i + 1 > e->nbufs) e->nbufs = (unsigned)i + 1;
  }
}
static void enc_bytes(encoder_t *e, const char *sel, const void *p, unsigned long len,
                      unsigned long i) {
  (void)sel;
  memset(e->vals, 0, sizeof(e->vals));
  memcpy(e->vals, p, len < sizeof(e->vals) ? len : sizeof(e->vals));
  e->vals_at = (unsigned)i;
  e->has_vals = true;
}
static void enc_dispatch(encoder_t *e, const char *sel, MTLSize grid, MTLSize group) {
  (void)sel;
  op_t *o = add_op(e->cb, OP_DISPATCH);
  o->pipeline = e->pipeline;
  memcpy(o->bufs, e->bufs, sizeof(o->bufs));
  o->nbufs = e->has_vals && e->vals_at < e->nbufs ? e->vals_at : e->nbufs;
  if (e->has_vals) o->nbufs = e->vals_at;
  memcpy(o->vals, e->vals, sizeof(o->vals));
  o->grid = grid, o->group = group;
}
static void enc_use_resources(encoder_t *e, const char *sel, buffer_t *const *res, unsigned long n,
                              unsigned long usage) {
  (void)sel, (void)usage;
  COUNT(use_resources);
  buffer_t **grown = realloc(e->resident, (e->nresident + n + 1) * sizeof(*grown));
  if (!grown) abort();
  e->resident = grown;
  memcpy(e->resident + e->nresident, res, n * sizeof(*res));
  e->nresident += n;
}
static void enc_execute(encoder_t *e, const char *sel, icb_t *icb, NSRange range) {
  (void)sel;
  op_t *o = add_op(e->cb, OP_ICB);
  o->icb = icb;
  obj_retain(&icb->o, NULL);
  o->range = range;
  o->resident = malloc((e->nresident + 1) * sizeof(buffer_t *));
  if (!o->resident) abort();
  memcpy(o->resident, e->resident, e->nresident * sizeof(buffer_t *));
  o->nresident = e->nresident;
}
static void enc_end(encoder_t *e, const char *sel) { (void)e, (void)sel; }
static void blit_copy(encoder_t *e, const char *sel, buffer_t *src, unsigned long soff,
                      buffer_t *dst, unsigned long doff, unsigned long size) {
  (void)sel;
  op_t *o = add_op(e->cb, OP_COPY);
  o->src = (char *)src->mem + soff, o->dst = (char *)dst->mem + doff, o->size = size;
}
static const method_t m_compute[] = {BASE,
                                     M("setComputePipelineState:", enc_pipeline),
                                     M("setBuffer:offset:atIndex:", enc_buffer),
                                     M("setBytes:length:atIndex:", enc_bytes),
                                     M("dispatchThreadgroups:threadsPerThreadgroup:", enc_dispatch),
                                     M("useResources:count:usage:", enc_use_resources),
                                     M("executeCommandsInBuffer:withRange:", enc_execute),
                                     M("endEncoding", enc_end),
                                     {0}};
static fclass_t c_compute = {NULL, "FakeMTLComputeCommandEncoder", m_compute, enc_dealloc};
static const method_t m_blit[] = {
    BASE,
    M("copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:", blit_copy),
    M("endEncoding", enc_end),
    {0}};
static fclass_t c_blit = {NULL, "FakeMTLBlitCommandEncoder", m_blit, NULL};

static encoder_t *cb_compute(cmdbuf_t *cb, const char *sel) {
  (void)sel;
  encoder_t *e = alloc_obj(&c_compute, sizeof(*e));
  e->cb = cb;
  return autorelease(e);
}
static encoder_t *cb_blit(cmdbuf_t *cb, const char *sel) {
  (void)sel;
  encoder_t *e = alloc_obj(&c_blit, sizeof(*e));
  e->cb = cb;
  return autorelease(e);
}
static void cb_signal(cmdbuf_t *cb, const char *sel, event_t *ev, uint64_t value) {
  (void)sel;
  op_t *o = add_op(cb, OP_SIGNAL);
  o->event = ev, o->value = value;
}
static void cb_label(cmdbuf_t *cb, const char *sel, nsstring_t *s) {
  (void)sel;
  snprintf(cb->label, sizeof(cb->label), "%s", s ? s->s : "");
}
static long cb_status(cmdbuf_t *cb, const char *sel) {
  (void)sel;
  return atomic_load(&cb->status);
}
static nserror_t *cb_error(cmdbuf_t *cb, const char *sel) {
  (void)sel;
  return atomic_load(&cb->status) == 5 ? make_error("%s%.0d", cb->error, 0) : NULL;
}
static double cb_t0(cmdbuf_t *cb, const char *sel) { return (void)sel, cb->t0; }
static double cb_t1(cmdbuf_t *cb, const char *sel) { return (void)sel, cb->t1; }
static void cb_commit(cmdbuf_t *cb, const char *sel);
static const method_t m_cmdbuf[] = {BASE,
                                    M("computeCommandEncoder", cb_compute),
                                    M("blitCommandEncoder", cb_blit),
                                    M("encodeSignalEvent:value:", cb_signal),
                                    M("setLabel:", cb_label),
                                    M("commit", cb_commit),
                                    M("status", cb_status),
                                    M("error", cb_error),
                                    M("GPUStartTime", cb_t0),
                                    M("GPUEndTime", cb_t1),
                                    {0}};
static fclass_t c_cmdbuf = {NULL, "FakeMTLCommandBuffer", m_cmdbuf, cmdbuf_dealloc};

/* One thread per queue runs its command buffers in commit order. */
struct queue {
  obj_t o;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  cmdbuf_t *head, *tail;
  bool stop;
  pthread_t thread;
};

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool run_twin(cmdbuf_t *cb, pipeline_t *p, void *const *bufs, unsigned nbufs,
                     const int32_t *vals, MTLSize grid, MTLSize group) {
  if (!p) {
    snprintf(cb->error, sizeof(cb->error), "a dispatch without a compute pipeline state");
    return false;
  }
  if (!grid.width || !grid.height || !grid.depth) {
    COUNT(empty_dispatches);
    return true;
  }
  const twin_t *t = twin_for(p->name, nbufs);
  if (!t || !t->fn) {
    snprintf(cb->error, sizeof(cb->error),
             "Execution of the command buffer was aborted due to an error during execution. Caused "
             "GPU Address Fault "
             "Error (0000000b:kIOGPUCommandBufferCallbackErrorPageFault) in kernel %s",
             p->name);
    return false;
  }
  grid_t g = {.shape = p->has_shape ? p->shape : NULL, .llm = p->has_llm ? p->llm : NULL};
  MTLSize sz[2] = {grid, group};
  unsigned long dims[2][3];
  for (int k = 0; k < 2; k++)
    dims[k][0] = sz[k].width, dims[k][1] = sz[k].height, dims[k][2] = sz[k].depth;
  for (int i = 0; i < 3; i++) g.ntg[i] = (unsigned)dims[0][i], g.ntid[i] = (unsigned)dims[1][i];
  for (g.tg[2] = 0; g.tg[2] < g.ntg[2]; g.tg[2]++)
    for (g.tg[1] = 0; g.tg[1] < g.ntg[1]; g.tg[1]++)
      for (g.tg[0] = 0; g.tg[0] < g.ntg[0]; g.tg[0]++)
        for (g.tid[2] = 0; g.tid[2] < g.ntid[2]; g.tid[2]++)
          for (g.tid[1] = 0; g.tid[1] < g.ntid[1]; g.tid[1]++)
            for (g.tid[0] = 0; g.tid[0] < g.ntid[0]; g.tid[0]++) t->fn(bufs, vals, &g);
  return true;
}

static bool run_icb(cmdbuf_t *cb, const op_t *o) {
  for (unsigned long i = o->range.location;
       i < o->range.location + o->range.length && i < o->icb->n; i++) {
    icb_cmd_t *c = &o->icb->cmds[i];
    if (!c->dispatch) continue; /* a reset command does nothing */
    COUNT(icb_executed);
    void *bufs[MAX_BINDS];
    unsigned nbufs = 0;
    const int32_t *vals = NULL;
    for (unsigned k = 0; k < MAX_BINDS; k++) {
      if (!c->bufs[k]) continue;
      bool resident = false;
      for (size_t r = 0; r < o->nresident && !resident; r++)
        resident = o->resident[r] == c->bufs[k];
      if (!resident) {
        snprintf(cb->error, sizeof(cb->error),
                 "indirect command %lu (%s) binds a buffer at index %u that the encoder "
                 "did not make resident (useResources:count:usage:)",
                 i, c->pipeline ? c->pipeline->name : "?", k);
        return false;
      }
      bufs[k] = (char *)c->bufs[k]->mem + c->offs[k];
      nbufs = k + 1;
    }
    /* The values are the last binding (the MSL ABI, docs/metal.md: constant int *vals
     * [[buffer(nbufs)]]). */
    if (nbufs) vals = bufs[--nbufs];
    if (!run_twin(cb, c->pipeline, bufs, nbufs, vals, c->grid, c->group)) return false;
  }
  return true;
}

static void run_cmdbuf(cmdbuf_t *cb) {
  cb->t0 = seconds();
  bool ok = true;
  size_t i = 0;
  for (; i < cb->nops && ok; i++) {
    op_t *o = &cb->ops[i];
    switch (o->kind) {
      case OP_DISPATCH:
        COUNT(dispatches);
        ok = run_twin(cb, o->pipeline, o->bufs, o->nbufs, o->vals, o->grid, o->group);
        break;
      case OP_COPY: memmove(o->dst, o->src, o->size); break;
      case OP_ICB:
        ok = run_icb(cb, o);
        obj_release(&o->icb->o, NULL);
        o->icb = NULL;
        break;
      default: break;
    }
  }
  for (; i < cb->nops; i++) /* what a failure skipped still lets go of its ICB */
    if (cb->ops[i].kind == OP_ICB && cb->ops[i].icb)
      obj_release(&cb->ops[i].icb->o, NULL), cb->ops[i].icb = NULL;
  cb->t1 = seconds();
  atomic_store(&cb->status, ok ? 4 : 5);
  /* Events are signalled even when the buffer failed: waiters see it finished. */
  for (i = 0; i < cb->nops; i++)
    if (cb->ops[i].kind == OP_SIGNAL) atomic_store(&cb->ops[i].event->value, cb->ops[i].value);
}

static void *queue_main(void *arg) {
  queue_t *q = arg;
  for (;;) {
    pthread_mutex_lock(&q->lock);
    while (!q->head && !q->stop) pthread_cond_wait(&q->cond, &q->lock);
    cmdbuf_t *cb = q->head;
    if (cb) {
      q->head = cb->next;
      if (!q->head) q->tail = NULL;
    }
    pthread_mutex_unlock(&q->lock);
    if (!cb) break;
    run_cmdbuf(cb);
    obj_release(&cb->o, NULL); /* the queue's reference */
  }
  return NULL;
}

static void cb_commit(cmdbuf_t *cb, const char *sel) {
  (void)sel;
  COUNT(command_buffers);
  pthread_mutex_lock(&g_count_lock);
  snprintf(g_counts.last_label, sizeof(g_counts.last_label), "%s", cb->label);
  pthread_mutex_unlock(&g_count_lock);
  queue_t *q = cb->queue;
  obj_retain(&cb->o, NULL);
  atomic_store(&cb->status, 2); /* MTLCommandBufferStatusCommitted */
  pthread_mutex_lock(&q->lock);
  if (q->tail)
    q->tail->next = cb;
  else
    q->head = cb;
  q->tail = cb;
  pthread_cond_signal(&q->cond);
  pthread_mutex_unlock(&q->lock);
}

static cmdbuf_t *queue_command_buffer(queue_t *q, const char *sel) {
  (void)sel;
  cmdbuf_t *cb = alloc_obj(&c_cmdbuf, sizeof(*cb));
  cb->queue = q;
  return autorelease(cb);
}
static void queue_dealloc(void *self) {
  queue_t *q = self;
  pthread_mutex_lock(&q->lock);
  q->stop = true;
  pthread_cond_signal(&q->cond);
  pthread_mutex_unlock(&q->lock);
  pthread_join(q->thread, NULL);
  pthread_mutex_destroy(&q->lock);
  pthread_cond_destroy(&q->cond);
}
static const method_t m_queue[] = {BASE, M("commandBuffer", queue_command_buffer), {0}};
static fclass_t c_queue = {NULL, "FakeMTLCommandQueue", m_queue, queue_dealloc};

/* ---- the device ---- */

static nsstring_t *device_name(obj_t *self, const char *sel) {
  (void)self, (void)sel;
  return autorelease(make_string("hcq stand-in Metal device (tests/fake_metal)"));
}
static queue_t *device_queue(obj_t *self, const char *sel) {
  (void)self, (void)sel;
  queue_t *q = alloc_obj(&c_queue, sizeof(*q));
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->cond, NULL);
  if (pthread_create(&q->thread, NULL, queue_main, q)) abort();
  return q;
}
static buffer_t *device_buffer(obj_t *self, const char *sel, unsigned long len,
                               unsigned long options) {
  (void)self, (void)sel;
  if (options != 0) { /* hcq asks for shared storage only */
    fprintf(stderr,
            "fake Metal: newBufferWithLength:options:%lu (only MTLResourceStorageModeShared)\n",
            options);
    abort();
  }
  buffer_t *b = alloc_obj(&c_buffer, sizeof(*b));
  b->pages = (len + 4095) & ~(size_t)4095;
  b->mem = aligned_alloc(4096, b->pages);
  if (!b->mem) {
    free(b);
    return NULL;
  }
  memset(b->mem, 0, len); /* Metal's new buffers are zero-filled */
  b->len = len;
  atomic_fetch_add(&g_allocated, b->pages);
  return b;
}
/* A fixed working set, about what a Mac with 64 GiB of unified memory recommends (three quarters).
 */
static uint64_t device_working_set(obj_t *self, const char *sel) {
  (void)self, (void)sel;
  return UINT64_C(48) << 30;
}
static unsigned long device_allocated(obj_t *self, const char *sel) {
  (void)self, (void)sel;
  return (unsigned long)atomic_load(&g_allocated);
}
static event_t *device_event(obj_t *self, const char *sel) {
  (void)self, (void)sel;
  return alloc_obj(&c_event, sizeof(event_t));
}
static library_t *device_library(obj_t *self, const char *sel, nsstring_t *src, obj_t *options,
                                 nserror_t **err) {
  (void)self, (void)sel, (void)options;
  const char *s = src->s;
  int line = 1;
  for (const char *p = s; *p; p++) {
    if (*p == '\n') line++;
    if (!strncmp(p, "#error", 6) && (p == s || p[-1] == '\n')) {
      char msg[256];
      const char *e = p + 6;
      while (*e == ' ') e++;
      size_t n = strcspn(e, "\n");
      snprintf(msg, sizeof(msg), "%.*s", (int)n, e);
      if (err) *err = make_error("program_source:%s", "", 0);
      if (err)
        snprintf((*err)->text, sizeof((*err)->text), "program_source:%d:2: error: %s", line, msg);
      return NULL;
    }
  }
  library_t *lib = alloc_obj(&c_library, sizeof(*lib));
  for (const char *p = strstr(s, "kernel void"); p && lib->nnames < 32;
       p = strstr(p + 1, "kernel void")) {
    const char *n = p + strlen("kernel void");
    while (*n == ' ' || *n == '\n' || *n == '\t') n++;
    size_t len = strcspn(n, " (\n\t");
    if (len && len < sizeof(lib->names[0]))
      snprintf(lib->names[lib->nnames++], sizeof(lib->names[0]), "%.*s", (int)len, n);
  }
  lib->has_shape = l2_read_shape(s, lib->shape);
  lib->has_llm = llm_read_shape(s, lib->llm);
  if (!lib->nnames) {
    obj_release(&lib->o, NULL);
    if (err)
      *err = make_error("program_source: error: no kernel function in the source%s%.0d", "", 0);
    return NULL;
  }
  return lib;
}
/* libdispatch's data objects, as newLibraryWithData: receives them: dispatch_data_create with no
 * destructor copies the bytes. */
typedef struct dispatch_data {
  obj_t o;
  size_t size;
  unsigned char bytes[];
} dispatch_data_t_;
static void data_dealloc(void *self) { (void)self; }
static const method_t m_data[] = {BASE, {0}};
static fclass_t c_data = {NULL, "OS_dispatch_data", m_data, data_dealloc};
EXPORT void *dispatch_data_create(const void *buffer, size_t size, void *queue, void *destructor) {
  if (queue || destructor) {
    fprintf(stderr,
            "fake Metal: dispatch_data_create with a queue or destructor is not modelled\n");
    abort();
  }
  dispatch_data_t_ *d = alloc_obj(&c_data, sizeof(*d) + size);
  d->size = size;
  memcpy(d->bytes, buffer, size);
  return d;
}
EXPORT void dispatch_release(void *object) { obj_release(object, NULL); }

static uint64_t rd_le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* A metallib as Apple's metallib tool writes it: "MTLB", then at byte 16 the file's size (u64), at
 * 24 and 32 the function list's offset and size; the list is a u32 count and per function a u32
 * byte count and tags (4 letters, a u16 size, the data) up to "ENDT", the function's name in the
 * "NAME" tag. The stand-in takes the names as the library's kernels (host twins, as for sources);
 * anything else is Metal's "Invalid library file". */
static library_t *device_library_data(obj_t *self, const char *sel, dispatch_data_t_ *data,
                                      nserror_t **err) {
  (void)self, (void)sel;
  const unsigned char *b = data->bytes;
  size_t n = data->size;
  uint64_t list = n >= 40 ? rd_le(b + 24, 8) : 0, list_size = n >= 40 ? rd_le(b + 32, 8) : 0;
  if (n < 40 || memcmp(b, "MTLB", 4) || rd_le(b + 16, 8) != n || list > n || list_size > n - list ||
      list_size < 4) {
    if (err) *err = make_error("Invalid library file%s%.0d", "", 0);
    return NULL;
  }
  library_t *lib = alloc_obj(&c_library, sizeof(*lib));
  const unsigned char *p = b + list, *end = b + list + list_size;
  uint32_t count = (uint32_t)rd_le(p, 4);
  p += 4;
  for (uint32_t f = 0; f < count && p + 4 <= end; f++) {
    uint32_t fsize = (uint32_t)rd_le(p, 4);
    const unsigned char *fend = p + fsize <= end ? p + fsize : end, *t = p + 4;
    while (t + 4 <= fend && memcmp(t, "ENDT", 4)) {
      if (t + 6 > fend) break;
      size_t tsize = (size_t)rd_le(t + 4, 2);
      if (!memcmp(t, "NAME", 4) && tsize && t + 6 + tsize <= fend && memchr(t + 6, 0, tsize) &&
          lib->nnames < 32)
        snprintf(lib->names[lib->nnames++], sizeof(lib->names[0]), "%s", (const char *)t + 6);
      t += 6 + tsize;
    }
    p += fsize ? fsize : 4;
  }
  if (!lib->nnames) {
    obj_release(&lib->o, NULL);
    if (err) *err = make_error("Invalid library file: no functions%s%.0d", "", 0);
    return NULL;
  }
  return lib;
}
static pipeline_t *device_pipeline(obj_t *self, const char *sel, pipeline_desc_t *desc,
                                   unsigned long options, void *reflection, nserror_t **err) {
  (void)self, (void)sel, (void)options, (void)reflection;
  if (!desc->fn || !has_twin(desc->fn->name)) {
    if (err)
      *err = make_error(
          "the Metal stand-in has no host twin of kernel %s (tests/fake_metal/fake_metal.c)%.0d",
          desc->fn ? desc->fn->name : "?", 0);
    return NULL;
  }
  if (!strncmp(desc->fn->name, "llama_", 6) && !desc->fn->has_shape) {
    if (err)
      *err = make_error(
          "kernel %s: the source #defines no llama2 shape (DIM ... GROUP; tests/fake_metal/"
          "fake_metal_llama2.c)%.0d",
          desc->fn->name, 0);
    return NULL;
  }
  if (!strncmp(desc->fn->name, "llm_", 4) && !desc->fn->has_llm) {
    if (err)
      *err = make_error(
          "kernel %s: the source #defines no LLM shape (DIM ... NORM_EPS_BITS ...; "
          "tests/fake_metal/"
          "fake_metal_llm.c)%.0d",
          desc->fn->name, 0);
    return NULL;
  }
  pipeline_t *p = alloc_obj(&c_pipeline, sizeof(*p));
  snprintf(p->name, sizeof(p->name), "%s", desc->fn->name);
  p->has_shape = desc->fn->has_shape, p->has_llm = desc->fn->has_llm;
  memcpy(p->shape, desc->fn->shape, sizeof(p->shape));
  memcpy(p->llm, desc->fn->llm, sizeof(p->llm));
  p->icb_ok = desc->icb;
  return p;
}
static icb_t *device_icb(obj_t *self, const char *sel, icb_desc_t *desc, unsigned long max,
                         unsigned long options) {
  (void)self, (void)sel, (void)options;
  if (desc->types != (1u << 5) || desc->inherit_buffers || desc->inherit_pipeline ||
      desc->max_binds > MAX_BINDS) {
    fprintf(stderr, "fake Metal: an ICB descriptor the stand-in does not model (types %lu)\n",
            desc->types);
    abort();
  }
  icb_t *icb = alloc_obj(&c_icb, sizeof(*icb));
  icb->n = max;
  icb->cmds = calloc(max + 1, sizeof(icb_cmd_t));
  if (!icb->cmds) abort();
  for (unsigned long i = 0; i < max; i++) icb->cmds[i].o.isa = &c_cmd;
  return icb;
}
static const method_t m_device[] = {
    BASE,
    M("name", device_name),
    M("newCommandQueue", device_queue),
    M("newBufferWithLength:options:", device_buffer),
    M("newSharedEvent", device_event),
    M("newLibraryWithSource:options:error:", device_library),
    M("newLibraryWithData:error:", device_library_data),
    M("newComputePipelineStateWithDescriptor:options:reflection:error:", device_pipeline),
    M("newIndirectCommandBufferWithDescriptor:maxCommandCount:options:", device_icb),
    M("recommendedMaxWorkingSetSize", device_working_set),
    M("currentAllocatedSize", device_allocated),
    {0}};
static fclass_t c_device = {NULL, "FakeMTLDevice", m_device, NULL};

EXPORT obj_t *MTLCreateSystemDefaultDevice(void) {
  const char *none = getenv("HCQ_FAKE_METAL_NO_DEVICE");
  if (none && *none == '1') return NULL;
  return alloc_obj(&c_device, sizeof(obj_t));
}

EXPORT fclass_t *objc_getClass(const char *name) {
  static fclass_t *const classes[] = {&c_string, &c_pdesc, &c_idesc};
  for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
    if (!strcmp(classes[i]->name, name)) return classes[i];
  return NULL;
}
