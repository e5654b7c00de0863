/* What the profiler records (trace.c) and what its writers (trace_view.c, trace_json.c,
 * trace_svg.c) read: a consistent view of the ring, taken under the profiler's lock. */
#ifndef HCQ_TRACE_TRACE_MODEL_H
#define HCQ_TRACE_TRACE_MODEL_H

#include <stdio.h>

#include "trace/trace_internal.h"

typedef enum {
  HCQ__SLICE_KERNEL, /* a kernel on a compute queue (graph item or eager launch) */
  HCQ__SLICE_COPY,   /* a copy on a copy queue (graph item, eager transfer or host copy) */
  HCQ__SLICE_SUBMIT, /* host: a graph replay's submit */
  HCQ__SLICE_CALL,   /* host: an eager call */
  HCQ__SLICE_ALIGN,  /* host: the profiler aligning a device's clocks (its own overhead, shown) */
} hcq__slice_kind_t;

/* One slice: 48 bytes. Times are host times (CLOCK_MONOTONIC ns); device timestamps are aligned
 * when they are read. */
typedef struct hcq__trace_slice {
  uint64_t start_ns, end_ns;
  uint64_t bytes;  /* copies: bytes moved */
  uint64_t replay; /* graph slices: the replay (1-based) */
  uint32_t name;   /* interned */
  uint32_t graph;  /* graph index + 1 for graph item and submit slices; 0 otherwise */
  uint32_t item;   /* graph item index */
  uint16_t track;
  uint8_t kind; /* hcq__slice_kind_t */
  uint8_t pad;
} hcq__trace_slice_t;

typedef struct hcq__trace_track {
  bool is_device;
  uint8_t queue;        /* hcq_queue_kind_t (device tracks) */
  uint32_t host_thread; /* 1, 2, ... in order of first record (host tracks) */
  char device[32];
  /* Clock alignment of a device queue (the latest): device time - host time. */
  int64_t offset_ns;
  uint64_t round_trip_ns;
  uint32_t samples;
  /* Filled by the view: Chrome trace ids and the row order. */
  uint32_t pid, tid, order;
} hcq__trace_track_t;

typedef struct hcq__trace_graph_item_rec {
  uint32_t name;
  uint16_t track;
  uint8_t kind; /* HCQ__SLICE_KERNEL or HCQ__SLICE_COPY */
  uint64_t bytes;
  int64_t offset_ns;                        /* the queue's clock offset when registered */
  const hcq__signal_words_t **start, **end; /* per replay instance */
  uint32_t *deps;
  size_t ndeps;
} hcq__trace_graph_item_rec_t;

struct hcq__trace_graph {
  pthread_mutex_t lock; /* pending replay, alive */
  int refs;             /* under the profiler's lock: the graph's and the session list's */
  uint64_t session;
  uint32_t index;
  char *label;
  hcq__trace_graph_item_rec_t *items;
  size_t nitems;
  hcq_device_t **devs; /* the graph's devices (it holds them open while alive) */
  hcq__signal_words_t *
      *done; /* done[inst * ndevs + d]: set to the kickoff value when a replay ends on d */
  size_t ndevs;
  size_t ninst; /* replay instances: replays in flight at once, each with its timestamps */
  bool alive;   /* the graph exists: instances and signals are valid */
  uint64_t
      *pending; /* per instance: kickoff value of a replay whose timestamps were not read; 0 none */
  uint64_t *pending_replay; /* per instance: its replay number */
  uint64_t replays;         /* replays submitted while recording */
};

typedef struct hcq__trace_view {
  const hcq__trace_slice_t *seg[2]; /* oldest first: seg[0] then seg[1] */
  size_t seg_len[2];
  size_t nslices;
  hcq__trace_track_t *tracks; /* the writers number them (pid, tid, order) */
  size_t ntracks;
  uint32_t host_threads; /* host tracks are threads 1 to host_threads */
  char *const *names;
  hcq__trace_graph_t *const *graphs;
  size_t ngraphs;
  uint64_t capacity, dropped;
} hcq__trace_view_t;

static inline const hcq__trace_slice_t *hcq__view_slice(const hcq__trace_view_t *v, size_t i) {
  return i < v->seg_len[0] ? &v->seg[0][i] : &v->seg[1][i - v->seg_len[0]];
}

/* Reads every pending replay and eager operation into the ring: before a view is taken, so that
 * it holds all that finished. Takes no device lock (trace.c says why). */
void hcq__trace_collect_pending(void);
/* Calls fn with a view of the ring, under the profiler's lock: the view and what it points to are
 * valid during the call only. Returns false, without calling fn, when the profiler is off. */
bool hcq__trace_with_view(void (*fn)(hcq__trace_view_t *v, void *ctx), void *ctx);

/* Calls fn for every dependency edge between two slices of the same graph replay, both in view
 * slices [first, nslices): src before dst. Returns false when out of memory. */
bool hcq__trace_view_flows(const hcq__trace_view_t *v, size_t first,
                           void (*fn)(void *ctx, size_t src, size_t dst), void *ctx);

/* "compute" / "copy". */
static inline const char *hcq__queue_kind_word(unsigned queue) {
  return queue ? "copy" : "compute";
}

/* Writers: the view is valid during the call (the profiler's lock is held). Return false when the
 * output failed (errno tells). */
bool hcq__trace_write_json(FILE *f, const hcq__trace_view_t *v);
bool hcq__trace_write_svg_view(FILE *f, const hcq__trace_view_t *v);

#endif
