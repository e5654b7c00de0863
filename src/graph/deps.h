/* Dependency inference from buffer access, backend neutral: the queue graph and the CUDA graph both
 * use it. Keys identify base buffers (views count as their base); tokens identify items. */
#ifndef HCQ_GRAPH_DEPS_H
#define HCQ_GRAPH_DEPS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/vec.h"
#include "hcq/status.h"

typedef HCQ__VEC(uint32_t) hcq__u32_vec_t;

typedef struct hcq__deps_entry {
  uintptr_t key;          /* 0: empty slot */
  uint32_t writer;        /* UINT32_MAX: none yet */
  hcq__u32_vec_t readers; /* since the last write */
} hcq__deps_entry_t;

typedef struct hcq__deps {
  hcq__deps_entry_t *table;
  size_t cap, len;
} hcq__deps_t;

void hcq__deps_init(hcq__deps_t *d);
void hcq__deps_deinit(hcq__deps_t *d);

/* Records that item token accesses keys[i] (writing where writes[i]) and stores in *out (cleared
 * first) the tokens it depends on, ascending and without repeats: a read depends on the last
 * writer, a write on the last writer and every reader since. All accesses of one item are taken
 * together, so an item never depends on itself. Keys must not be 0. */
HCQ_MUST_USE hcq_status_t hcq__deps_access(hcq__deps_t *d, const uintptr_t *keys,
                                           const bool *writes, size_t n, uint32_t token,
                                           hcq__u32_vec_t *out);

#endif
