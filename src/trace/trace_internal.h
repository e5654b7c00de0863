/* The profiler's hooks, called by the core's eager paths, device teardown and the queue graph. Each
 * hook costs one relaxed load and a branch while the profiler is off (hcq/trace.h says what is
 * recorded while it is on). */
#ifndef HCQ_TRACE_TRACE_INTERNAL_H
#define HCQ_TRACE_TRACE_INTERNAL_H

#include "core/device.h"
#include "core/host_wait.h"
#include "core/signal.h"
#include "hcq/trace.h"

/* Recording now: started and not paused. */
extern atomic_bool hcq__trace_recording;
static inline bool hcq__tracing(void) {
  return atomic_load_explicit(&hcq__trace_recording, memory_order_relaxed);
}
/* Started (paused or not): graphs built now get timestamp words and are registered. */
extern atomic_bool hcq__trace_started;
static inline bool hcq__trace_on(void) {
  return atomic_load_explicit(&hcq__trace_started, memory_order_relaxed);
}

/* HCQ_PROFILE, once, while the options are read: "" and "0" leave the profiler off. */
void hcq__trace_start_from_env(const char *value);

/* ---- eager work (eager.c) ----
 * Around one device operation recorded into an eager queue q, under the device lock:
 *   begin (before the command: a start timestamp), the command, end (an end timestamp and a flag),
 *   and hcq__trace_op_submitted() once the queue was submitted. Only then is the operation
 *   pending; its timestamps are read when its entry is needed again or at a flush. */
typedef struct hcq__trace_op {
  uint32_t entry;
  bool on;
} hcq__trace_op_t;

HCQ_MUST_USE hcq_status_t hcq__trace_op_begin_slow(hcq__trace_op_t *op, hcq_device_t *dev,
                                                   hcq_queue_t *q);
HCQ_MUST_USE static inline hcq_status_t hcq__trace_op_begin(hcq__trace_op_t *op, hcq_device_t *dev,
                                                            hcq_queue_t *q) {
  op->on = false;
  return hcq__tracing() ? hcq__trace_op_begin_slow(op, dev, q) : NULL;
}
/* name: the kernel; for a copy from -> to (either may be "host"). */
HCQ_MUST_USE hcq_status_t hcq__trace_op_end_slow(hcq__trace_op_t *op, hcq_device_t *dev,
                                                 hcq_queue_t *q, const char *name, const char *to,
                                                 uint64_t bytes);
HCQ_MUST_USE static inline hcq_status_t hcq__trace_op_end(hcq__trace_op_t *op, hcq_device_t *dev,
                                                          hcq_queue_t *q, const char *name,
                                                          const char *to, uint64_t bytes) {
  return op->on ? hcq__trace_op_end_slow(op, dev, q, name, to, bytes) : NULL;
}
void hcq__trace_op_submitted_slow(hcq_device_t *dev);
static inline void hcq__trace_op_submitted(hcq_device_t *dev) {
  if (dev->trace) hcq__trace_op_submitted_slow(dev);
}

/* The host side of an eager call: begin returns 0 when not recording; end records the calling
 * thread's slice from begin to now, named by fmt. */
static inline uint64_t hcq__trace_host_begin(void) { return hcq__tracing() ? hcq__now_ns() : 0; }
void hcq__trace_host_end(uint64_t begin_ns, uint64_t bytes, const char *fmt, ...) HCQ_PRINTF(3, 4);

/* Device teardown, after the engines stopped: reads what finished and frees the profiler's memory
 * on the device. */
void hcq__trace_device_gone(hcq_device_t *dev);

/* ---- graphs (queue_graph.c) ---- */
typedef struct hcq__trace_graph hcq__trace_graph_t;

typedef struct hcq__trace_graph_item {
  const char *name;  /* the kernel, or "CPU:0 -> CPU:1" */
  hcq_device_t *dev; /* whose queue runs it */
  hcq_queue_kind_t queue;
  uint64_t bytes;                         /* copies */
  const hcq__signal_words_t *start, *end; /* its timestamp words (the graph's memory) */
  const uint32_t *deps;                   /* resource dependencies, item indices */
  size_t ndeps;
} hcq__trace_graph_item_t;

/* Registers a graph built with timestamps: NULL when the profiler is off (or out of memory: the
 * graph is then not traced). A graph has ninst replay instances (replays in flight at once), each
 * with its own timestamp words and done signals: items holds ninst * nitems entries, instance by
 * instance (names, devices, queues and dependencies are read from instance 0); done[inst * ndevs +
 * d] is the signal devs[d]'s compute queue sets to the kickoff value at the end of a replay in that
 * instance. Aligns the clocks of devices met for the first time (waits for their work). */
hcq__trace_graph_t *hcq__trace_graph_register(const char *label,
                                              const hcq__trace_graph_item_t *items, size_t nitems,
                                              size_t ninst, hcq_device_t *const *devs,
                                              hcq__signal_words_t *const *done, size_t ndevs);
/* A replay was submitted in instance inst with kickoff value K; host_start_ns is when its submit
 * began. */
void hcq__trace_graph_submitted(hcq__trace_graph_t *tg, unsigned inst, uint64_t kickoff,
                                uint64_t host_start_ns);
/* The graph's thread waited for the instance's last replay: its timestamps are read now (before
 * the instance is reused). */
void hcq__trace_graph_collect(hcq__trace_graph_t *tg, unsigned inst);
/* The same when the instance's replay has finished on every device already, without waiting: called
 * right after the next replay was submitted, so reading overlaps that replay instead of delaying
 * it. */
void hcq__trace_graph_collect_finished(hcq__trace_graph_t *tg, unsigned inst);
/* Before the graph frees its instances and signals. NULL is accepted. */
void hcq__trace_graph_unregister(hcq__trace_graph_t *tg);

#endif
