/* Programs (program.c): a kernel as its backend loaded it, and what the core knows of its
 * arguments. */
#ifndef HCQ_CORE_PROGRAM_H
#define HCQ_CORE_PROGRAM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/object.h"
#include "hcq/program.h"

typedef struct hcq__program_impl {
  uint64_t handle; /* what EXEC carries: on CPU the kernel function pointer */
  void *object;    /* backend's loaded module, or NULL */
  /* What the kernel reads, where the backend knows it from the compiled code (CUDA: the PTX
   * parameter list): hcq__args_pack(nbufs, nvals, HCQ__ARGS_FROM_BACKEND); 0 when unknown. */
  uint32_t args;
} hcq__program_impl_t;

/* A program's argument counts in one word (launches on any thread read it with one relaxed load):
 * bits 0-15 values, 16-29 buffers, 30-31 where they come from; 0 means not known. */
enum { HCQ__ARGS_DECLARED = 1u << 30, HCQ__ARGS_FROM_BACKEND = 2u << 30 };
static inline uint32_t hcq__args_pack(size_t nbufs, size_t nvals, uint32_t from) {
  return from | (uint32_t)nbufs << 16 | (uint32_t)nvals;
}

struct hcq_program {
  hcq__obj_t obj;
  atomic_uint refs;
  hcq_device_t *dev;
  hcq__program_impl_t impl;
  char name[64];
  char *source;          /* NULL for function-pointer programs */
  _Atomic uint32_t args; /* hcq__args_pack(): declared, or known to the backend; 0 unknown */
};

/* Whether a launch with nbufs buffers and nvals values fits what p is known to take (cheap). */
static inline bool hcq__program_args_ok(const hcq_program_t *p, size_t nbufs, size_t nvals) {
  uint32_t a = atomic_load_explicit(&((hcq_program_t *)p)->args, memory_order_relaxed);
  return !a || (a & ~(3u << 30)) == hcq__args_pack(nbufs, nvals, 0);
}
/* INVALID_ARGUMENT "<who>: kernel K takes 2 buffers and 1 value (declared), ... passes 1 and 1"
 * when the counts do not fit; NULL when they do. */
HCQ_MUST_USE hcq_status_t hcq__program_check_args(const hcq_program_t *p, size_t nbufs,
                                                  size_t nvals, const char *who);

typedef enum { HCQ__FIELD_U32, HCQ__FIELD_I32, HCQ__FIELD_U64 } hcq__field_t;
/* Unloads and frees a program whose work is done. */
void hcq__program_destroy(hcq_program_t *program);

#endif
