/* The part of every graph runner that does not depend on the device kind: owned copies of the exec
 * items, checked (exec_item.h), and the devices they use; input slots (which item argument each
 * input replaces at a replay) and the aliasing checks on replacements; the graph's variables;
 * staging a replay's arguments; one thread at a time. hcq__graph_alloc (graph_internal.h) builds
 * each of the three runners (queue_graph.c here, src/cuda/cuda_graph.c, src/metal/metal_graph.c) on
 * one, and they differ only in how they encode and replay the items. A jit keeps one of its own, to
 * stage its replays and run the items left out of its graphs eagerly. */
#ifndef HCQ_GRAPH_RUNNER_H
#define HCQ_GRAPH_RUNNER_H

#include "core/object.h"
#include "core/vec.h"
#include "graph/deps.h"
#include "graph/exec_item.h"
#include "hcq/graph.h"

/* The queue graph tracks devices in 64-bit sets. */
#define HCQ__GRAPH_MAX_DEVICES 64

typedef struct hcq__input_slot {
  uint32_t item;
  uint32_t arg;   /* kernel: buffer index; transfer: 0 dst, 1 src */
  uint32_t input; /* index into the inputs */
} hcq__input_slot_t;

typedef struct hcq__runner {
  hcq_exec_item_t *items; /* deep copies; their arrays are owned, buffers and programs retained */
  size_t nitems;
  hcq_buffer_t **inputs; /* current inputs (retained); build-time ones define size and device */
  hcq_buffer_t **pending_inputs;
  size_t ninputs;
  bool null_input_keeps; /* a NULL input of a replay keeps the current one (jits), else it is
                            refused */
  HCQ__VEC(hcq__input_slot_t) slots;
  HCQ__VEC(const hcq_expr_t *) vars; /* retained */
  int64_t *values;                   /* current value per variable */
  int64_t *pending_values;           /* what the replay being prepared uses */
  hcq_device_t **devices;            /* every device of the items, first use first */
  size_t ndevices, devices_cap;
  hcq_buffer_t **build_inputs; /* the inputs the items were given (retained): what slots hold */

  /* Holds on the devices (one object per device, named label): a device does not close under a
   * graph or jit. Heap allocated: the runner struct moves, list nodes must not. */
  hcq__obj_t *objs;
  char *label;

  /* Aliasing: dependencies were fixed at build from base buffers. A replay input whose base is
   * another buffer of the graph (or another input's) would need other dependencies. */
  struct hcq__runner_key {
    uintptr_t base;
    hcq_buffer_t *buf;
    uint32_t writer;
  } * fixed; /* sorted by base */
  size_t nfixed;
  uintptr_t *input_base;  /* per input: base at build */
  uint32_t *input_writer; /* per input: an item writing it, or UINT32_MAX */

  /* Items whose launch dims are symbolic: their geometry is checked again on each replay. */
  HCQ__VEC(uint32_t) symdim_items;
  hcq_var_value_t *eval_vals; /* scratch: the staged values, per variable */

  _Atomic bool busy; /* a thread is using the graph (or jit) right now */
} hcq__runner_t;

/* One thread at a time per graph or jit: enter fails with FAILED_PRECONDITION naming what while
 * another thread is inside. */
HCQ_MUST_USE hcq_status_t hcq__runner_enter(hcq__runner_t *r, const char *what);
void hcq__runner_leave(hcq__runner_t *r);

/* Validates and copies items, retains what they use, collects variables and input slots, and checks
 * that every symbolic operand evaluates to a value that fits its field with the initial values.
 * On failure everything taken is released. */
HCQ_MUST_USE hcq_status_t hcq__runner_init(hcq__runner_t *r, const hcq_exec_item_t *items,
                                           size_t nitems, hcq_buffer_t *const *inputs,
                                           size_t ninputs, const hcq_var_value_t *vals,
                                           size_t nvals, const char *kind);
void hcq__runner_deinit(hcq__runner_t *r);
/* For the leak report: names the call that made r (when created_by is not NULL), and marks r's hold
 * on each device as taken on behalf of holder (a jit's graphs: the jit), when holder is not NULL.
 */
void hcq__runner_mark(hcq__runner_t *r, const char *created_by, const hcq__runner_t *holder);

/* Checks a replay's arguments and stages them (pending_*); nothing current changes. */
HCQ_MUST_USE hcq_status_t hcq__runner_stage(hcq__runner_t *r, hcq_buffer_t *const *inputs,
                                            size_t ninputs, const hcq_var_value_t *vals,
                                            size_t nvals);
/* Stages without checking, for a caller that checked these arguments already against a runner with
 * the same inputs whose items, devices and variables include this one's (a jit's batch graph: the
 * jit staged all its items first). */
HCQ_MUST_USE hcq_status_t hcq__runner_stage_prechecked(hcq__runner_t *r,
                                                       hcq_buffer_t *const *inputs, size_t ninputs,
                                                       const hcq_var_value_t *vals, size_t nvals);
/* Makes the staged arguments current (after a replay was submitted). */
void hcq__runner_commit(hcq__runner_t *r);

/* Index of dev in r->devices. */
uint32_t hcq__runner_device_index(const hcq__runner_t *r, const hcq_device_t *dev);
/* Item j with the staged inputs of its slots [from, to) (slots are in item order) in place of the
 * buffers it was built with: a kernel's buffer list is copied into bufs (HCQ_MAX_KERNEL_BUFS)
 * first, so the runner's own item stays as it is. For running items eagerly with a replay's inputs.
 */
hcq_exec_item_t hcq__runner_item_with_inputs(const hcq__runner_t *r, size_t j, size_t from,
                                             size_t to, hcq_buffer_t **bufs);

#endif
