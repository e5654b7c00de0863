/* The CUDA device: the driver API behind the backend vtable. One primary context per device, one
 * stream per queue kind, command words turned into driver calls at submit:
 *   WAIT      cuStreamWaitValue64 (>=) on the signal's address (pinned host memory the GPU maps)
 *   SIGNAL    cuStreamWriteValue64, or for a signal in ordinary host memory (a CPU device's), a
 *             host function that sets it and wakes its waiters
 *   TIMESTAMP a one-thread kernel that writes %globaltimer (ns) into the signal's timestamp
 *   EXEC      cuLaunchKernel with the packed kernargs block as CU_LAUNCH_PARAM_BUFFER_POINTER
 *             (docs/design.md, "Programs and kernel ABIs")
 *   COPY      cuMemcpyAsync (unified addressing: device, peer and host memory alike)
 * Progress: each submission ends by writing its sequence number into a host-visible completion word
 * of its stream, which completed() reads; the timeline signal and deferred frees build on that.
 *
 * Host-visible memory is pinned, mapped, portable host memory: with unified addressing its device
 * address is its host address, which is what lets a kernargs block be read on the host at launch
 * and every CUDA device wait on every other's signals.
 *
 * Its files share this header: cuda_device.c opens and closes the device (context, streams, peer
 * access, the backend row), cuda_memory.c allocates, cuda_commands.c turns command words into
 * driver calls, and cuda_submit.c submits them, follows their progress and launches CUDA graphs. */
#ifndef HCQ_CUDA_DEVICE_H
#define HCQ_CUDA_DEVICE_H

#include "core/device.h"
#include "core/hang_report.h"
#include "core/memory.h"
#include "core/vec.h"
#include "cuda/cuda_internal.h"
#include "hcq/graph.h"
#include "hcq/memory.h"
#include "hcq/queue.h"

#define HCQ__CUDA_RECORDS 1024u        /* submissions remembered per stream, for hang reports */
#define HCQ__CUDA_WORD_RING (1u << 16) /* words of unbound submissions kept for the same */
#define HCQ__CUDA_STAGE_BYTES \
  (1u << 20) /* per stream: pageable copies move through it in chunks this size */

typedef struct cuda_sub_record {
  uint64_t seq;
  const uint32_t *words;
  uint32_t nwords;
  bool bound;
} cuda_sub_record_t;

typedef struct cuda_stream {
  hcq_CUstream s;
  uint64_t submitted;         /* under the device lock */
  _Atomic uint64_t published; /* submitted, for other threads */
  _Atomic uint64_t *done;     /* the completion word the stream writes */
  hcq_CUdeviceptr done_addr;
  /* what this stream wrote last (waits it implies are dropped) */
  uint64_t last_signal_addr, last_signal_value;
  pthread_mutex_t
      records_lock; /* records and ring: written at submit, read by hang reports (trylock) */
  cuda_sub_record_t records[HCQ__CUDA_RECORDS];
  uint32_t *ring;
  uint64_t ring_head;
  void *stage; /* pinned, HCQ__CUDA_STAGE_BYTES: copies to and from pageable host memory go through
                  it */
} cuda_stream_t;

/* Pinned memory for small host-visible allocations (signals, small bound queues, profile slots):
 * slabs carved up by hcq, so that making or freeing a signal calls no cuMemHostAlloc or
 * cuMemFreeHost, which may synchronise the context (and so wait for a stream that waits for the
 * caller). A free range list per slab, sorted by offset. */
typedef struct cuda_pin_range {
  uint64_t off, len;
  struct cuda_pin_range *next;
} cuda_pin_range_t;
typedef struct cuda_pin_slab {
  char *base;
  cuda_pin_range_t *free;
  struct cuda_pin_slab *next;
} cuda_pin_slab_t;

/* Memory to give back to the driver once the device is idle (cuMemFree and cuMemFreeHost may
 * synchronise the context). */
typedef struct cuda_driver_free {
  void *host;           /* cuMemFreeHost, or */
  hcq_CUdeviceptr addr; /* cuMemFree */
} cuda_driver_free_t;
typedef HCQ__VEC(cuda_driver_free_t) cuda_driver_frees_t;

/* The core's staging buffers (pinned, larger than a slab takes) are made when the device opens,
 * kept for reuse when freed and given back at close: the first host copy would otherwise call
 * cuMemHostAlloc at any moment. */
typedef struct cuda_pin_block {
  void *host;
  uint64_t bytes; /* usable, the slack past it (cuda_memory.c) not counted */
  struct cuda_pin_block *next;
} cuda_pin_block_t;

typedef struct cuda_device {
  hcq_device_t *dev;
  const hcq__cuda_api_t *api;
  hcq_CUdevice cudev;
  hcq_CUcontext ctx;
  bool ctx_retained, counted;
  int cc_major, cc_minor;
  int max_block[3], max_grid[3], max_threads;
  cuda_stream_t streams[2];
  hcq_CUstream alloc_stream;
  void *progress; /* pinned: the streams' completion words */
  hcq_CUmodule ts_module;
  hcq_CUfunction ts_fn;
  uint64_t reachable[8]; /* addresses the driver knows (stream memory operations work on them) */
  unsigned reachable_next;
  uint64_t seen_timeline_value;
  const hcq_signal_t *seen_timeline;
  struct cuda_device *reg_next;
  /* Held while work is enqueued and published (inside the device lock): a free that found every
   * stream idle runs before any new work reaches them. */
  pthread_mutex_t submit_lock;
  pthread_mutex_t mem_lock; /* slabs and frees */
  cuda_pin_slab_t *slabs;
  cuda_pin_block_t *blocks;
  unsigned nblocks;
  cuda_driver_frees_t frees;
} cuda_device_t;

static inline cuda_device_t *hcq__cuda_cdev(const hcq_device_t *dev) { return dev->backend; }

/* ---- memory (cuda_memory.c) ---- */

HCQ_MUST_USE hcq_status_t hcq__cuda_mem_alloc(hcq_device_t *dev, uint64_t size, uint32_t flags,
                                              hcq__mem_t *out);
void hcq__cuda_mem_free(hcq_device_t *dev, hcq__mem_t *mem);
HCQ_MUST_USE hcq_status_t hcq__cuda_memory_info(hcq_device_t *dev, hcq_device_memory_t *out);
/* Gives the deferred frees back to the driver if no stream has work (or always: force, when the
 * streams are gone). */
void hcq__cuda_flush_frees(cuda_device_t *cd, bool force);
/* The staging buffers the core will ask for, made when the device opens (see cuda_pin_block_t). The
 * context is current. */
HCQ_MUST_USE hcq_status_t hcq__cuda_make_staging_blocks(cuda_device_t *cd);
/* At close, the streams gone and the context current: the slabs and kept blocks go back to the
 * driver. */
void hcq__cuda_memory_release(cuda_device_t *cd);

/* ---- command words as driver calls (cuda_commands.c) ---- */

/* Loads the timestamp kernel once, before the first submission that needs it. */
HCQ_MUST_USE hcq_status_t hcq__cuda_load_timestamp_kernel(cuda_device_t *cd);
/* Checks what the driver would refuse before anything is enqueued: a submission runs whole or
 * fails without side effects (the driver's own asynchronous failures aside). */
HCQ_MUST_USE hcq_status_t hcq__cuda_check_words(hcq_device_t *dev, const uint32_t *w, size_t n);
/* Enqueues the command at w on cs; on failure *what names the driver call. */
hcq_CUresult hcq__cuda_run_command(cuda_device_t *cd, cuda_stream_t *cs, const uint32_t *w,
                                   const char **what);

/* ---- submission and progress (cuda_submit.c): the vtable's queue members ---- */

HCQ_MUST_USE hcq_status_t hcq__cuda_reserve(hcq_device_t *dev, hcq_queue_kind_t kind, size_t nwords,
                                            bool bound);
HCQ_MUST_USE hcq_status_t hcq__cuda_submit(hcq_device_t *dev, hcq_queue_kind_t kind,
                                           const uint32_t *words, size_t nwords, bool bound);
uint64_t hcq__cuda_submitted(hcq_device_t *dev, hcq_queue_kind_t kind);
uint64_t hcq__cuda_completed(hcq_device_t *dev, hcq_queue_kind_t kind);
void hcq__cuda_poll(hcq_device_t *dev);
HCQ_MUST_USE hcq_status_t hcq__cuda_wait_idle(hcq_device_t *dev, int64_t timeout_ms);
void hcq__cuda_snapshot(hcq_device_t *dev, hcq_queue_kind_t kind, hcq__engine_snapshot_t *out);

/* The CUDA graph (cuda_graph.c; docs/design.md, "The CUDA graph"): the row's graph_create
 * (core/backend.h). Every device of the runner is a CUDA device; inflight is unused (the driver
 * orders launches of one graph). */
struct hcq__runner;
HCQ_MUST_USE hcq_status_t hcq__cuda_graph_create(struct hcq__runner *runner, bool profile,
                                                 unsigned inflight, hcq_graph_t **out);

#endif
