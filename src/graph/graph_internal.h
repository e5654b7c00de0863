/* Graph objects: a common header with the runner and a const vtable per graph kind. */
#ifndef HCQ_GRAPH_INTERNAL_H
#define HCQ_GRAPH_INTERNAL_H

#include "core/backend.h"
#include "core/device.h"
#include "graph/runner.h"

typedef struct hcq__graph_vtable {
  const char *kind;
  /* Waits for the last replay (TIMEOUT leaves the graph intact) and frees everything but the
   * runner. Mandatory. */
  hcq_status_t (*destroy)(hcq_graph_t *g);
  /* Frees everything but the runner without waiting (a device of the graph is lost); memory the
   * engines may still use goes through the devices' deferred frees. Mandatory. */
  hcq_status_t (*destroy_anyway)(hcq_graph_t *g);
  /* Replays with the runner's staged arguments; must not change anything when it fails before
   * submitting. Mandatory. */
  hcq_status_t (*run)(hcq_graph_t *g, bool wait, uint64_t *out_elapsed_ns);
  /* Optional (NULL: FAILED_PRECONDITION / NULL). */
  hcq_status_t (*item_schedule)(const hcq_graph_t *g, size_t i, hcq_graph_item_schedule_t *out);
  const hcq_queue_t *(*queue)(const hcq_graph_t *g, uint32_t queue);
  hcq_status_t (*profile)(hcq_graph_t *g, const hcq_profile_event_t **out);
} hcq__graph_vtable_t;

struct hcq_graph {
  const hcq__graph_vtable_t *vt;
  uint32_t
      magic; /* HCQ__OBJ_LIVE; HCQ__OBJ_DEAD once destroyed (the struct is kept when validating) */
  hcq__runner_t runner;
  bool validated_replays; /* HCQ_VALIDATE and a kernel item leaves buffers undeclared: set at build
                           */
  hcq_graph_stats_t
      stats; /* replays and updates, where the runner counts them (CUDA, Metal); else 0 */
};

/* The last step of every runner's free: the struct (whose first member is g) is freed, or kept as a
 * dead graph while validating, so that a use after destroy is reported rather than undefined. */
static inline void hcq__graph_struct_free(hcq_graph_t *g) {
  g->magic = HCQ__OBJ_DEAD;
  if (hcq__validating)
    hcq__keep(g);
  else
    free(g);
}

/* The start of every runner's constructor: a zeroed struct of size bytes (its first member a struct
 * hcq_graph) with vt set, live, and holding a copy of the runner; NULL when memory ran out. */
void *hcq__graph_alloc(size_t size, const hcq__graph_vtable_t *vt, const hcq__runner_t *runner);

/* The graph runners (docs/design.md, "Graph runners"): the queue graph (the HCQ graph runner) here,
 * for every kind whose backend row has no graph_create of its own (core/backend.h). It builds a
 * graph over the runner's items and takes the runner on success; inflight is the replays one graph
 * may have in flight (0: the HCQ_GRAPH_INFLIGHT default). */
HCQ_MUST_USE hcq_status_t hcq__queue_graph_create(hcq__runner_t *runner, bool profile,
                                                  unsigned inflight, hcq_graph_t **out);

/* The backend row of kind when its devices run a graph runner of its own (graph_create), else NULL
 * (they run the queue graph). */
const hcq__backend_t *hcq__graph_kind(hcq_device_kind_t kind);

/* HCQ_VALIDATE=1 (exec_item.c): whether replays of g run item by item with each kernel's writes
 * checked (a kernel item declares outs that leave a buffer out; decided once, at build), and that
 * replay. */
bool hcq__graph_validates_writes(const hcq_graph_t *g);
HCQ_MUST_USE hcq_status_t hcq__graph_run_validated(hcq_graph_t *g, bool wait,
                                                   uint64_t *out_elapsed_ns);
/* hcq_graph_run without waiting, for a jit's batch graph: the jit checked the inputs, values,
 * devices and symbolic launch dims of all its items with these arguments just before
 * (hcq__runner_stage), so the graph does not repeat those checks on its own runner. */
HCQ_MUST_USE hcq_status_t hcq__graph_run_prechecked(hcq_graph_t *g, hcq_buffer_t *const *inputs,
                                                    size_t ninputs, const hcq_var_value_t *vals,
                                                    size_t nvals);

/* Which graph can hold work on dev: devices with equal non-zero classes can share one graph (each
 * runner spans devices of its kind, or just one; the queue graph keeps host-memory devices apart
 * from GPU ones); 0 for a device no graph runner serves. The JIT closes a batch where the class
 * changes.
 */
uintptr_t hcq__graph_class(const hcq_device_t *dev);
/* Whether the graph of dev's class holds transfers (the Metal graph holds kernels only). */
bool hcq__graph_holds_transfers(const hcq_device_t *dev);

#endif
