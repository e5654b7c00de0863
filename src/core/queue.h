/* Queues (queue.c): recorded command words with symbolic patch points, and how they are submitted.
 */
#ifndef HCQ_CORE_QUEUE_H
#define HCQ_CORE_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/memory.h"
#include "core/symset.h"
#include "core/vec.h"
#include "hcq/queue.h"

/* Where a patch point's field lives. */
typedef enum hcq__patch_place {
  HCQ__PATCH_IN_QUEUE,  /* the queue's words, at offset (in words) */
  HCQ__PATCH_IN_MEMORY, /* a buffer (mem), at offset (in bytes) */
} hcq__patch_place_t;

typedef struct hcq__patch {
  uint32_t sym;
  uint32_t next; /* next patch of the same symbol, UINT32_MAX ends */
  uint8_t field; /* hcq__field_t */
  uint8_t place; /* hcq__patch_place_t */
  uint16_t what; /* which operand, for messages: hcq__operand_name() */
  uint32_t tag;  /* the queue's tag when recorded (graph item + 1) */
  uint64_t offset;
  hcq_buffer_t *mem;
} hcq__patch_t;

/* Operand names for messages: kind in the high byte, index in the low one. */
enum {
  HCQ__WHAT_SIGNAL_ADDR = 1 << 8,
  HCQ__WHAT_VALUE = 2 << 8,
  HCQ__WHAT_KERNARGS = 3 << 8,
  HCQ__WHAT_GLOBAL = 4 << 8,
  HCQ__WHAT_LOCAL = 5 << 8,
  HCQ__WHAT_COPY_DST = 6 << 8,
  HCQ__WHAT_COPY_SRC = 7 << 8,
  HCQ__WHAT_COPY_SIZE = 8 << 8,
  HCQ__WHAT_ARG_BUFFER = 9 << 8,
  HCQ__WHAT_ARG_VALUE = 10 << 8,
};
void hcq__operand_name(uint16_t what, char *out, size_t size);

struct hcq_queue {
  hcq_queue_kind_t kind;
  HCQ__VEC(uint32_t) words;
  hcq__symset_t syms;
  HCQ__VEC(hcq__patch_t) patches;
  HCQ__VEC(uint32_t) sym_head; /* first patch of each symbol */
  HCQ__VEC(int64_t) sym_lo;    /* narrowest range a symbol's fields accept */
  HCQ__VEC(int64_t) sym_hi;
  HCQ__VEC(int64_t) sym_last; /* value written by the previous submit */
  HCQ__VEC(int64_t) sym_new;
  bool submitted;
  HCQ__VEC(hcq_program_t *) programs; /* retained */
  HCQ__VEC(hcq_buffer_t *) mems;      /* retained */
  hcq_device_t *device;               /* the device its programs and memory belong to, if any */
  hcq_device_t *bound_dev;
  hcq__mem_t bound;
  bool
      retain_refs; /* false for the eager scratch queues, whose objects outlive their work anyway */
  size_t
      last_patch_writes; /* patch points the last submit rewrote (tests prove O(changed) with it) */
  uint32_t tag;          /* stamped on WAIT/EXEC/COPY recorded from now on (graph item + 1) */
  hcq__symset_mark_t cmd_mark; /* symbols before the command being recorded (rollback) */
  const hcq__patch_t
      *failed_patch; /* after a failed prepare: the first patch of the failing symbol */
  struct hcq_queue *reg_prev, *reg_next; /* registry of bound queues, for hang reports */
  const char *label; /* set by owners (graphs): names the queue in reports; may be NULL */
};

/* Bound queues are registered so a report can tell which queue (and graph) a command belongs to. */
const hcq_queue_t *hcq__queue_find_bound(const uint32_t *word, char *label, size_t label_size);

/* Queue internals for the eager path: recording without references, resetting for reuse, and
 * submitting while the caller holds the device lock. */
HCQ_MUST_USE hcq_status_t hcq__queue_create(hcq_queue_kind_t kind, bool retain_refs,
                                            hcq_queue_t **out);
void hcq__queue_reset(hcq_queue_t *q);
HCQ_MUST_USE hcq_status_t hcq__queue_submit_locked(hcq_queue_t *q, hcq_device_t *dev,
                                                   const hcq_var_value_t *vals, size_t nvals);
/* Submit in two steps, for callers that submit several queues all-or-nothing: prepare evaluates
 * every symbol and checks every field (nothing written); commit patches what changed and submits
 * (device lock held). No other prepare of q may come between. */
HCQ_MUST_USE hcq_status_t hcq__queue_prepare(hcq_queue_t *q, const hcq_var_value_t *vals,
                                             size_t nvals);
HCQ_MUST_USE hcq_status_t hcq__queue_commit_locked(hcq_queue_t *q, hcq_device_t *dev);
/* Makes sure a following commit of q cannot block or fail (device lock held until the commit). */
HCQ_MUST_USE hcq_status_t hcq__queue_reserve_locked(hcq_queue_t *q, hcq_device_t *dev);
/* Kernel-argument block written with constants only (eager path). */
void hcq__kernargs_fill(void *host, hcq_buffer_t *const *bufs, size_t nbufs, const int32_t *vals,
                        size_t nvals);
/* Values handed to a public call (what names it; NULL: no prefix, for a caller that annotates):
 * each names a variable (not NULL, not another expression), and no variable twice. INVALID_ARGUMENT
 * naming the value otherwise (symbolic.c). */
HCQ_MUST_USE hcq_status_t hcq__var_values_check(const hcq_var_value_t *vals, size_t nvals,
                                                const char *what);

#endif
