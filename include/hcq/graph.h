/* hcq graphs: an ordered list of exec items built once into device queues and replayed with new
 * input buffers and variable values.
 *
 * An exec item is a kernel (program, buffers, which buffers it writes, 32-bit values and launch
 * dims, any value or dim symbolic) or a transfer (dst, src, bytes). Dependencies come from buffer
 * access by base buffer (views count as their base): a read waits for the last write; a write waits
 * for the last write and every read since. Within one item, all accesses are considered together.
 *
 * Input buffers: every (item, argument) slot that holds one of the inputs (by identity) takes the
 * address passed for that input on each replay. A replacement must have the same size and device.
 *
 * Variables: the graph's variables are those of its items. Build needs a value for each; a replay
 * may pass new values for any of them (the others keep their last value); values for variables the
 * graph does not use are ignored, except that a variable of the same name as one it uses (another
 * object: variables are matched by object) is INVALID_ARGUMENT naming it. A value outside its
 * variable's range is an error and changes nothing.
 *
 * Replays of one graph run one after another on the devices, in the order they were submitted, and
 * may be in flight together: hcq_graph_run(..., wait = false) returns once the replay is queued,
 * and blocks only while `inflight` (default 2) earlier replays are still unfinished. Eager work
 * submitted before a replay runs before it; eager work submitted after runs after it.
 *
 * Validation (HCQ_VALIDATE=1): a kernel item's outs are checked, on every backend. A replay of a
 * graph that has a kernel item whose outs leave one of its buffers out runs item by item, eagerly,
 * with the replay's inputs and values, each kernel checked as hcq_launch checks a launch
 * (program.h); the first kernel that changed a buffer its outs do not cover fails the replay
 * (INVALID_ARGUMENT naming the item index, kernel, buffer and offset) and the items after it do not
 * run. The replay computes what the graph would, but its own queues do not run (no profile, no
 * stats), and it waits for each kernel. Graphs whose kernels all declare every buffer (outs NULL)
 * run as usual. Checking at build time would mean running the items then, on whatever the buffers
 * hold.
 *
 * Ownership: the graph retains its programs and buffers (items' and inputs') and keeps its devices
 * from closing until it is destroyed. A graph is used by one thread at a time.
 */
#ifndef HCQ_GRAPH_H
#define HCQ_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hcq/buffer.h"
#include "hcq/fence.h"
#include "hcq/program.h"
#include "hcq/queue.h"
#include "hcq/symbolic.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

typedef enum hcq_item_kind { HCQ_ITEM_KERNEL, HCQ_ITEM_TRANSFER } hcq_item_kind_t;

typedef struct hcq_kernel_item {
  hcq_program_t *program;
  hcq_buffer_t *const *bufs;
  size_t nbufs;
  /* Which buffers the kernel writes, as indices into bufs. The one rule for every API (items,
   * hcq_launch, hcq_launch_sym, graph files): outs NULL (nouts 0) means every buffer is written,
   * the graph file's missing "outs"; outs given with nouts 0 means the kernel writes nothing, the
   * file's "outs": []. Buffers not listed count as read-only: an item is ordered only after their
   * last write, so a kernel that writes one anyway races with other items in a replay.
   * HCQ_VALIDATE=1 checks the declaration (see hcq_launch in program.h). */
  const uint32_t *outs;
  size_t nouts;
  const hcq_operand_t *vals; /* 32-bit values, constant or symbolic */
  size_t nvals;
  /* Grid in work-groups and work-group size. Every dim is >= 1: a constant 0 (a dim left out of an
   * initializer) is INVALID_ARGUMENT naming the item and the dim, at build and in
   * hcq_exec_item_run. A symbolic dim may evaluate to 0 at a replay (or a run): that item then
   * launches nothing, which is how a size variable turns a kernel off. */
  hcq_operand_t global[3];
  hcq_operand_t local[3];
} hcq_kernel_item_t;

typedef struct hcq_transfer_item {
  hcq_buffer_t *dst, *src;
  uint64_t bytes; /* at most the size of each; dst and src must not overlap (see hcq_transfer) */
} hcq_transfer_item_t;

typedef struct hcq_exec_item {
  hcq_item_kind_t kind;
  union {
    hcq_kernel_item_t kernel;
    hcq_transfer_item_t transfer;
  };
} hcq_exec_item_t;

/* Runs one exec item eagerly, its symbolic operands evaluated with vals: the ground truth a graph
 * replay is compared with, and what capture falls back to. Errors name the item's program or
 * buffers, or the variable. */
HCQ_MUST_USE hcq_status_t hcq_exec_item_run(const hcq_exec_item_t *item,
                                            const hcq_var_value_t *vals, size_t nvals);

typedef struct hcq_graph hcq_graph_t;

typedef struct hcq_graph_options {
  /* Record a start and end timestamp per item (see hcq_graph_profile). HCQ_PROFILE=1 also turns it
   * on. */
  bool profile;
  /* How many replays of the graph may be in flight at once (each has its own copy of the patched
   * command words and kernel arguments); 0 means HCQ_GRAPH_INFLIGHT, default 2. */
  unsigned inflight;
} hcq_graph_options_t;

/* Builds a graph. Arrays are copied; the caller keeps its own references. Errors name the item
 * index, buffer, program, device or variable at fault. options may be NULL. */
HCQ_MUST_USE hcq_status_t hcq_graph_create(const hcq_exec_item_t *items, size_t nitems,
                                           hcq_buffer_t *const *inputs, size_t ninputs,
                                           const hcq_var_value_t *vals, size_t nvals,
                                           const hcq_graph_options_t *options,
                                           hcq_graph_t **out_graph);

/* Replays the graph with ninputs input buffers (the same count as at build; each the size and
 * device of the one it replaces) and variable values. With wait, returns once the replay finished
 * and stores its elapsed host time in nanoseconds (out_elapsed_ns may be NULL); without, returns
 * once it is submitted. A TIMEOUT says which wait timed out: "waiting for the previous replay ...
 * (this replay was NOT queued: running it again is safe)" when the replay's instance was still
 * busy, or "this replay ... was queued but did not finish ...: do not run it again" when it was
 * submitted and its own wait (wait=true) ran out: it still runs once. */
HCQ_MUST_USE hcq_status_t hcq_graph_run(hcq_graph_t *graph, hcq_buffer_t *const *inputs,
                                        size_t ninputs, const hcq_var_value_t *vals, size_t nvals,
                                        bool wait, uint64_t *out_elapsed_ns);

/* Replays the graph as hcq_graph_run without waiting, and arms fence (may be NULL; hcq/fence.h) at
 * this replay: it is reached once the replay, and everything submitted before it on the graph's
 * devices, finished. Waiting on it waits for this replay only, not for replays submitted later. An
 * error leaves the fence as it was; its message says, as hcq_graph_run's do, whether the replay
 * was queued. */
HCQ_MUST_USE hcq_status_t hcq_graph_submit(hcq_graph_t *graph, hcq_buffer_t *const *inputs,
                                           size_t ninputs, const hcq_var_value_t *vals,
                                           size_t nvals, hcq_fence_t *fence);

/* Waits for the last replay and frees the graph. On a timeout it returns the error and the graph
 * stays valid (destroy again later). NULL is accepted. Once it succeeded the graph is gone: running
 * or destroying it again is undefined behaviour that may return OK, unless HCQ_VALIDATE=1 (hcq.h),
 * which reports it by name. */
HCQ_MUST_USE hcq_status_t hcq_graph_destroy(hcq_graph_t *graph);

size_t hcq_graph_item_count(const hcq_graph_t *graph);
/* The graph's variables (borrowed). */
size_t hcq_graph_var_count(const hcq_graph_t *graph);
const hcq_expr_t *hcq_graph_var(const hcq_graph_t *graph, size_t i);
/* The devices the graph runs on: every device of any item's buffers and programs. */
size_t hcq_graph_device_count(const hcq_graph_t *graph);
hcq_device_t *hcq_graph_device(const hcq_graph_t *graph, size_t i);
/* "hcq" for the HCQ graph, "cuda" for the CUDA graph (built when every device is a CUDA device;
 * a graph that mixes CUDA devices with others is refused). */
const char *hcq_graph_kind(const hcq_graph_t *graph);

/* What replays applied to a CUDA graph's instantiated graph: every parameter set (node params, a
 * node enabled or disabled) is one driver call, and a replay makes them only for nodes whose
 * parameters differ from what the instantiated graph holds, so an unchanged replay makes none.
 * Other graph kinds report zeros. Read it from the thread that replays the graph. */
typedef struct hcq_graph_stats {
  uint64_t replays;
  uint64_t updatable_nodes; /* nodes holding an input buffer, a symbolic value or a symbolic dim */
  uint64_t last_replay_updates; /* driver parameter calls of the last replay */
  uint64_t total_updates;
} hcq_graph_stats_t;
void hcq_graph_stats(const hcq_graph_t *graph, hcq_graph_stats_t *out_stats);

/* ---- inspection of the HCQ graph's schedule ----
 * Queues are numbered 2*d for the compute queue of device d and 2*d+1 for its copy queue. */
typedef struct hcq_graph_wait {
  uint32_t queue; /* whose signal */
  uint32_t value; /* waits for signal >= value, value = item index + 1 of the item waited for */
} hcq_graph_wait_t;

typedef struct hcq_graph_item_schedule {
  uint32_t queue;                /* the queue the item runs on */
  const hcq_graph_wait_t *waits; /* queue waits, as recorded (highest first) */
  size_t nwaits;
  const uint32_t *ready_devices; /* devices whose device signal the item waits for (readiness) */
  size_t nready;
  uint32_t signal_value; /* value the item signals on its queue's signal after it runs; 0: none */
  const uint32_t *deps;  /* resource dependencies, as item indices */
  size_t ndeps;
} hcq_graph_item_schedule_t;

/* Fills out_schedule for item i of an HCQ graph (pointers valid until destroy). */
HCQ_MUST_USE hcq_status_t hcq_graph_item_schedule(const hcq_graph_t *graph, size_t i,
                                                  hcq_graph_item_schedule_t *out_schedule);
/* The bound queue (queue numbering above), or NULL when the graph has none. */
const hcq_queue_t *hcq_graph_queue(const hcq_graph_t *graph, uint32_t queue);

/* ---- profiling ---- */
typedef struct hcq_profile_entry {
  const char *device;  /* "CPU:0" */
  const char *name;    /* program name, or "CPU:0 -> CPU:1" for a transfer */
  uint32_t start_slot; /* index into timestamps */
  uint32_t end_slot;
  bool is_copy;
} hcq_profile_entry_t;

typedef struct hcq_profile_event {
  const hcq_profile_entry_t *entries; /* one per item */
  size_t nentries;
  const uint32_t *const *deps; /* per entry: resource dependencies as entry indices */
  const size_t *ndeps;
  const uint64_t
      *timestamps; /* per slot, nanoseconds (CLOCK_MONOTONIC on CPU); 0 for unused slots */
  size_t nslots;
  uint64_t replay; /* which replay (1-based) the timestamps belong to */
} hcq_profile_event_t;

/* Waits for the last replay and returns its profile event (valid until the next run or destroy).
 * FAILED_PRECONDITION when the graph was built without profiling or has not run. */
HCQ_MUST_USE hcq_status_t hcq_graph_profile(hcq_graph_t *graph,
                                            const hcq_profile_event_t **out_event);

/* ---- graph dump (graph_dot.c) ----
 * Writes graphs as one Graphviz DOT digraph to path (`dot -Tsvg` draws it): a cluster per graph
 * and, inside, one per queue (the HCQ graph's schedule) holding a node per item (index, kernel and
 * its buffers with the written ones starred, or the copy with its devices and bytes). Edges are the
 * resource dependencies: solid (class "wait") where the item waits for the other's signal, dashed
 * grey (class "dropped") where scheduling dropped the wait because the queue runs in order or
 * already waited for as much; waits that are not resource dependencies (queue order on devices
 * whose queues run out of order) are dotted (class "order"). Readiness waits and signals are noted
 * in the node. No graphs writes an empty digraph. UNAVAILABLE when the file cannot be written. */
HCQ_MUST_USE hcq_status_t hcq_graph_write_dot(hcq_graph_t *const *graphs, size_t ngraphs,
                                              const char *path);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
