/* Capture bookkeeping the core keeps for the capture layer (src/jit): the thread-local recorder
 * that eager work reports to while its thread captures, and the list of captures open on any
 * thread, in which work other threads put on devices is noted. The core owns both because the eager
 * path and graph replays feed them and must not call up into the layer that captures. */
#ifndef HCQ_CORE_CAPTURE_H
#define HCQ_CORE_CAPTURE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/vec.h"
#include "hcq/buffer.h"
#include "hcq/device.h"
#include "hcq/program.h"
#include "hcq/status.h"
#include "hcq/symbolic.h"

/* While a thread records, successful eager work is reported to its recorder (installed by the
 * capture layer). hcq_exec_item_run reports the item itself with its symbols. */
struct hcq_exec_item;
typedef struct hcq__recorder {
  void (*launch)(void *ctx, const hcq_launch_desc_t *desc);
  void (*transfer)(void *ctx, hcq_buffer_t *dst, hcq_buffer_t *src, uint64_t size);
  void (*item)(void *ctx, const struct hcq_exec_item *item);
  /* what: "copyin" */
  void (*host_copy)(void *ctx, const char *what, const hcq_buffer_t *buf, uint64_t size);
  /* The variable values a symbolic launch was given (hcq_launch_sym): replays start from them. */
  void (*bind)(void *ctx, const hcq_var_value_t *vals, size_t nvals);
  void *ctx;
} hcq__recorder_t;
extern _Thread_local const hcq__recorder_t *hcq__recorder;

/* Device work another thread did on one device while a capture was open. */
typedef struct hcq__other_work {
  const hcq_device_t *dev; /* compared, never followed: the device may be closed by now */
  char dev_name[32];
  size_t count;
  char first[160]; /* the first such operation, in words */
} hcq__other_work_t;

/* What one open capture is told about other threads' work. Between open and close, others and
 * others_lost change under the core's lock; after close they are the capture's alone. */
typedef struct hcq__capture_watch {
  pthread_t owner; /* the capturing thread: its own work is recorded, not noted */
  HCQ__VEC(hcq__other_work_t) others;
  bool others_lost; /* a note could not be kept (memory) */
  struct hcq__capture_watch *next_open, **prev_open;
} hcq__capture_watch_t;

/* Starts noting other threads' work for w (zeroed), owned by the calling thread. */
void hcq__capture_watch_open(hcq__capture_watch_t *w);
/* Stops noting (idempotent); w->others stays for the caller to read and free. */
void hcq__capture_watch_close(hcq__capture_watch_t *w);

/* Captures open on any thread. While one is, device work submitted by the other threads is noted
 * (what, on dev) so that its end can say that the capture did not record it. */
extern atomic_int hcq__captures_open;
void hcq__capture_note_other_thread(const hcq_device_t *dev, const char *fmt, ...) HCQ_PRINTF(2, 3);
static inline bool hcq__captures_elsewhere(void) {
  return atomic_load_explicit(&hcq__captures_open, memory_order_relaxed) != 0;
}

#endif
