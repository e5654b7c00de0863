/* The queue graph's state (queue_graph.c), shared with its scheduling (queue_graph_schedule.c). */
#ifndef HCQ_GRAPH_QUEUE_GRAPH_INTERNAL_H
#define HCQ_GRAPH_QUEUE_GRAPH_INTERNAL_H

#include "graph/graph_internal.h"
#include "trace/trace_internal.h"

#define NO_ITEM UINT32_MAX

typedef struct item_sched {
  uint32_t queue;
  uint32_t signal_value;
  uint32_t waits_at, nwaits;
  uint32_t ready_at, nready;
  uint32_t deps_at, ndeps;
  uint32_t start_stamp, end_stamp; /* indices of its timestamp words in a profile buffer */
  uint64_t kernargs_offset;
  bool foreign; /* another rank's alone (hcq__item_is_foreign): not encoded here */
} item_sched_t;

/* One replay instance: its own bound queues, kernel arguments, signals and profile timestamps, so
 * up to `inflight` replays of one graph can be in flight at once, each patched on its own. Replays
 * use the instances in turn; an instance is reused once its previous replay finished. */
typedef struct graph_inst {
  hcq_queue_t *queues[2 * HCQ__GRAPH_MAX_DEVICES]; /* 2d compute, 2d+1 copy (NULL when unused) */
  hcq_signal_t *queue_sig[2 * HCQ__GRAPH_MAX_DEVICES];
  hcq_signal_t *dev_sig[HCQ__GRAPH_MAX_DEVICES];
  /* Each compute queue ends by setting its device's done signal to K: a later replay of this
   * instance, a profile and destroy wait for it. The graph's own signal, so timeline wraps cannot
   * reset it. */
  hcq_signal_t *done_sig[HCQ__GRAPH_MAX_DEVICES];
  hcq_buffer_t *kernargs[HCQ__GRAPH_MAX_DEVICES];
  hcq_buffer_t *prof_stamps[HCQ__GRAPH_MAX_DEVICES];
  hcq_signal_t *kickoff;
  uint64_t kickoff_value; /* K of the instance's last replay (0: none yet) */
  char *queue_label[2 * HCQ__GRAPH_MAX_DEVICES];
} graph_inst_t;

typedef struct queue_graph {
  struct hcq_graph base;
  size_t ndev;
  uint32_t last_item[2 * HCQ__GRAPH_MAX_DEVICES];
  uint64_t copied_into[HCQ__GRAPH_MAX_DEVICES]; /* bit s: device s's copy queue wrote here */
  /* Devices this process runs queues for: every local one, and a remote one only where an item runs
   * on its queues (a cross-rank transfer the communication thread makes). A graph ignores the
   * others' signals and timelines. */
  bool active[HCQ__GRAPH_MAX_DEVICES];
  uint64_t kickoff_value; /* K of the last replay */
  graph_inst_t *inst;
  unsigned ninst, next_inst;
  graph_inst_t *last_inst; /* the instance of the last replay */

  /* Variables the queues are patched with; values[] is the array every submit receives. */
  hcq_expr_t *kickoff_var;
  hcq_expr_t *timeline_val[HCQ__GRAPH_MAX_DEVICES], *timeline_addr[HCQ__GRAPH_MAX_DEVICES];
  hcq_expr_t **input_vars;
  hcq_var_value_t *values;
  size_t nvalues, user_at, timeline_at, inputs_at;

  item_sched_t *sched;
  HCQ__VEC(hcq_graph_wait_t) waits;
  hcq__u32_vec_t ready, deps;

  bool profile;
  hcq_profile_entry_t *prof_entries;
  char *prof_names; /* storage for entry names */
  const uint32_t **prof_deps;
  size_t *prof_ndeps;
  uint64_t *prof_timestamps;
  hcq_profile_event_t prof_event;
  hcq__trace_graph_t *trace; /* the profiler's entry (NULL when it was off at build) */
} queue_graph_t;

/* Schedules every item onto its queue: its waits, device readiness, signal and timestamp words
 * (docs/design.md, "The HCQ graph", build steps 4-5). Fills in g->sched, last_item, active,
 * copied_into, waits, ready and deps. */
HCQ_MUST_USE hcq_status_t hcq__queue_graph_schedule(queue_graph_t *g);

#endif
