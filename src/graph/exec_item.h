/* One exec item (exec_item.c): where it runs, what it touches, the checks every item passes, owned
 * copies of it. The runner (runner.h) and the graph runners are built on these; hcq_exec_item_run
 * (graph.h) runs one eagerly. */
#ifndef HCQ_GRAPH_EXEC_ITEM_H
#define HCQ_GRAPH_EXEC_ITEM_H

#include "hcq/graph.h"

/* The buffers an item touches and whether it writes each: kernels their arguments, transfers
 * {dst (written), src}. */
typedef struct hcq__item_access {
  hcq_buffer_t *const *bufs;
  size_t n;
  hcq_buffer_t *pair[2];
  bool writes[HCQ_MAX_KERNEL_BUFS];
} hcq__item_access_t;
void hcq__item_access(const hcq_exec_item_t *it, hcq__item_access_t *out);

/* The device an item runs on: the program's, or the transfer source's (a cross-rank transfer:
 * exec_item.c). */
hcq_device_t *hcq__item_device(const hcq_exec_item_t *it);
/* An item of another rank's alone (its kernel, a transfer between two other ranks): this rank runs
 * nothing for it, and its own items need not wait for it; what they exchange with it is ordered by
 * the messages themselves (docs/mpi.md). */
bool hcq__item_is_foreign(const hcq_exec_item_t *it);

/* Checks a kernel item (who names it in messages): its program, buffers, outs and dims, and each
 * operand evaluated with vals into its field. vals NULL evaluates no symbol (constants only); to
 * evaluate with no values at all, pass hcq__no_var_values. */
HCQ_MUST_USE hcq_status_t hcq__kernel_item_check(const hcq_kernel_item_t *k, const char *who,
                                                 const hcq_var_value_t *vals, size_t nvals);
extern const hcq_var_value_t hcq__no_var_values[1];
/* Checks a transfer item (named who in messages): its buffers, size and the source's copy queue. */
HCQ_MUST_USE hcq_status_t hcq__transfer_item_check(const hcq_transfer_item_t *t, const char *who);

/* Whether a launch dim of k is an expression that is not a constant. */
bool hcq__kernel_dims_symbolic(const hcq_kernel_item_t *k);
/* Every value the variables may take makes a valid launch: no dim can be negative, fail to
 * evaluate, exceed 32 bits or take the launch past the device's work-item limit. Such an item needs
 * no check per replay. */
bool hcq__kernel_dims_always_ok(const hcq_kernel_item_t *k);
/* Quick form of hcq__kernel_item_check's dims check, with no message (a replay's check): every dim
 * evaluates with vals and the launch is valid. */
bool hcq__kernel_dims_ok(const hcq_kernel_item_t *k, const hcq_var_value_t *vals, size_t nvals);

/* A deep copy of an item that owns its arrays and holds references to its program, buffers and
 * symbols (no validation); release undoes it. On failure dst holds nothing to release. */
HCQ_MUST_USE hcq_status_t hcq__exec_item_copy(const hcq_exec_item_t *src, hcq_exec_item_t *dst);
void hcq__exec_item_release(hcq_exec_item_t *it);

#endif
