/* hcq profiler: a process-wide recorder of graph replays and eager work, written as a Chrome trace
 * (Perfetto, chrome://tracing) or drawn as an SVG timeline.
 *
 * While the profiler is on:
 *  - every graph built (hcq_graph_create, the JIT's batches) is built with profiling, and each of
 *    its replays becomes one slice per item on the track of the queue that ran it (a kernel is
 *    named after its program, a copy "CPU:0 -> CPU:1", with its bytes), plus one slice on the host
 *    track for the submit. A replay's timestamps are read when the next replay of the graph (or its
 *    destroy, or a flush) waits for it, never on the submit path;
 *  - every eager launch, device-to-device transfer and host copy (copyin, copyout) becomes a slice
 *    on the device queue that ran it (device timestamps) and one on the host track of the calling
 *    thread (the time the call took).
 * Graphs built while the profiler is off carry no timestamps and are never recorded: when nobody
 * profiles, a replay does no per-item work.
 *
 * Clocks: each device and queue kind is aligned to the host clock (CLOCK_MONOTONIC) when the
 * profiler first meets the device: the offset is the median over HCQ_TRACE_CLOCK_SAMPLES
 * submit-and-wait round trips of (device timestamp - midpoint of the host's submit and wake-up).
 * Recorded times are host times. The alignment waits for the device to be idle; it is recorded as
 * its own host slice ("profiler: align CPU:0 clocks").
 *
 * The recorder is a ring of slices, HCQ_TRACE_DEFAULT_RING_SLICES by default: when it is full the
 * oldest slice is dropped and counted (hcq_trace_stats, and "dropped" in the written file).
 *
 * HCQ_PROFILE (read once): "1" turns the profiler on at the first use of the library, with no file;
 * any other non-empty value except "0" turns it on and names the file written at process exit
 * (atexit) and by hcq_trace_flush().
 *
 * Threads: every call may come from any thread. Writing first collects what is still pending: it
 * waits (within the wait timeout) for the last replay of every live graph and for every eager
 * operation in flight. Writing while another thread stops the profiler writes nothing (an error).
 */
#ifndef HCQ_TRACE_H
#define HCQ_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hcq/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

/* 262144 slices of 48 bytes: 12 MiB, allocated when the profiler starts. */
#define HCQ_TRACE_DEFAULT_RING_SLICES 262144u
/* Round trips per device queue when aligning its clock. */
#define HCQ_TRACE_CLOCK_SAMPLES 9

typedef struct hcq_trace_options {
  /* Written at process exit and by hcq_trace_flush(); NULL: only hcq_trace_write() writes. */
  const char *path;
  /* Ring capacity in slices; 0: HCQ_TRACE_DEFAULT_RING_SLICES. At least 1. */
  size_t ring_slices;
} hcq_trace_options_t;

/* Turns the profiler on with an empty ring. FAILED_PRECONDITION when it is on already (from
 * HCQ_PROFILE or an earlier start); options may be NULL. */
HCQ_MUST_USE hcq_status_t hcq_trace_start(const hcq_trace_options_t *options);
/* Turns the profiler off and drops everything recorded. Graphs built while it was on stop
 * recording (they keep their timestamp slots until destroyed). Idempotent. */
void hcq_trace_stop(void);
/* True while the profiler is on (paused or not). */
bool hcq_trace_active(void);
/* While paused, new eager work and new replays are not recorded (replays submitted before the pause
 * still are). For work a program does not want in its trace, e.g. a reference run. */
void hcq_trace_pause(bool paused);

/* Writes the trace to the path given at start (FAILED_PRECONDITION without one, or when off). */
HCQ_MUST_USE hcq_status_t hcq_trace_flush(void);
/* Writes the trace as Chrome trace event JSON (format in docs/profiling.md): numeric pid/tid with
 * "M" metadata naming the host, each device (process) and queue (thread); one "X" slice per item
 * per replay and per eager operation; "s"/"f" flow events for every dependency edge between items
 * of one replay; and an "hcq" object with the ring statistics, the clock offsets and each graph's
 * items. FAILED_PRECONDITION when the profiler is off; UNAVAILABLE when the file cannot be written.
 */
HCQ_MUST_USE hcq_status_t hcq_trace_write(const char *path);
/* Draws the same trace as a self-contained SVG: one row per queue (host threads first), slices as
 * labelled boxes (title on hover), dependency arrows, a time axis, and each row's busy share. Draws
 * the newest HCQ_TRACE_SVG_MAX_SLICES slices at most (the caption says when it left some out). */
#define HCQ_TRACE_SVG_MAX_SLICES 4000
HCQ_MUST_USE hcq_status_t hcq_trace_write_svg(const char *path);

typedef struct hcq_trace_stats {
  uint64_t capacity; /* ring slices */
  uint64_t slices;   /* slices in the ring now */
  uint64_t dropped;  /* slices dropped (oldest first) because the ring was full */
  uint64_t graphs;   /* graphs registered since the start */
} hcq_trace_stats_t;
/* Zeroes when the profiler is off. Does not collect pending replays. */
void hcq_trace_stats(hcq_trace_stats_t *out_stats);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
