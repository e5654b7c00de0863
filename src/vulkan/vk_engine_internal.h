/* The Vulkan queue engines' private structures, shared by the files that make them up. The engines:
 * one per queue kind, a host thread that reads the neutral command words
 * (HCQ__OPS) from a ring and turns them into Vulkan work, and a completion thread that retires it.
 *
 * Words become batches. Runs of EXEC, local COPY, TIMESTAMP and BARRIER are recorded into command
 * buffers (a full pipeline barrier before every command and at the start, so a queue stays in order
 * across batches; a barrier to the host at the end). A WAIT is resolved when the engine reaches
 * it: already satisfied, or set by a SIGNAL this device already submitted (the other engine's: a
 * timeline-semaphore wait in the next batch; our own: nothing, the queue is in order), or else a
 * host wait on the signal word after submitting what came before. A SIGNAL ends the batch: it is
 * submitted with a timeline-semaphore signal, and the completion thread writes the signal word (and
 * wakes host waiters) once the semaphore reaches that value. A COPY that involves another device's
 * memory or host memory runs on the host once the engine's earlier work finished.
 *
 * Bound command lists (hcq_queue_bind) are recorded once per run of commands and kept: EXEC reads
 * its grid from the words themselves (vkCmdDispatchIndirect: EXEC's three global dims are a
 * VkDispatchIndirectCommand) and its arguments through the kernargs buffer's device address (push
 * constant), so a replay that patched only memory resubmits the same command buffers. Each kept
 * run also keeps a copy of the words it baked in (program, group size, kernargs address, copy
 * operands, timestamp slots); a replay whose words differ there records that run again.
 *
 * Progress: submitted()/completed() count ring words handed over / retired; a region of the ring
 * retires once every batch made from it completed and its signal words were written.
 *
 * The files: vk_engine.c (the engine and completion threads, creation and teardown, the vtable
 * side), vk_interp.c (reading the words: WAIT, SIGNAL and host copies), vk_batch.c (batches, their
 * submission, the FIFO to the completion thread), vk_record.c (command buffers, bound lists' kept
 * runs) and vk_fault.c (what a fault report names). */
#ifndef HCQ_VK_ENGINE_INTERNAL_H
#define HCQ_VK_ENGINE_INTERNAL_H

#include "core/command.h"
#include "core/signal.h"
#include "core/vec.h"
#include "vulkan/vk_device.h"

#define FIFO_CAP 4096u
#define MAX_BATCH_CBS 32
#define MAX_BATCH_PEND 64
#define TS_QUERIES 256u
#define MAX_TRANSIENT_TS 32
#define FAULT_EXECS 4    /* kernels of a batch a fault report names */
#define FAULT_BATCHES 64 /* batches in flight a fault report looks at */

uint64_t hcq__vk_ticks_to_ns(const vk_device_t *vd, uint64_t ticks); /* vk_device.c */

typedef enum vk_pending_kind { P_BATCH, P_SIGNAL, P_TS, P_SEGTS, P_CB, P_RETIRE } vk_pending_kind_t;

typedef struct vk_seg {
  uint32_t start, end; /* word offsets in the list */
  VkCommandBuffer cb;
  uint32_t *words; /* the run as recorded */
  bool indirect;   /* EXEC grids read from the list's memory */
  VkQueryPool qp;
  uint32_t nts;
  hcq__signal_words_t **ts_words;
  uint64_t *ts_vals;
  uint64_t fifo_pos; /* reusable once the completion thread passed this FIFO position */
} vk_seg_t;

typedef struct vk_blist {
  const uint32_t *base;
  size_t len;
  vk_seg_t **segs; /* each allocated alone: batches and the FIFO point at them */
  uint32_t nsegs, cap;
  struct vk_blist *next;
} vk_blist_t;

typedef struct vk_pending {
  vk_pending_kind_t kind;
  uint64_t sem;
  uint64_t dep; /* the other engine's signal writes up to this one (its seq) come first */
  union {
    struct {
      const uint32_t *first, *last, *base;
    } batch;
    struct {
      hcq__signal_words_t *word;
      uint64_t value, seq;
    } sig;
    struct {
      uint32_t query;
      hcq__signal_words_t *word;
    } ts;
    vk_seg_t *seg;
    VkCommandBuffer cb;
    uint64_t tail;
  } u;
} vk_pending_t;

typedef struct vk_engine {
  vk_device_t *vd;
  hcq_device_t *dev;
  hcq_queue_kind_t kind;
  vk_queue_t *q;
  VkSemaphore sem;
  uint64_t sem_last;  /* engine thread: last value submitted */
  uint64_t dep_other; /* engine thread: the other engine's last signal (seq) waited for */
  /* Signals are numbered in the order the engine hands them to its completion thread. Several can
   * share a semaphore value (a SIGNAL with no work since the last submit adds none), so the order
   * of two engines' signal writes is kept by number, not by semaphore value. */
  _Atomic uint64_t signals_flushed; /* written by the engine thread only */
  _Atomic uint64_t signals_applied; /* the number of the last signal word written */
  _Atomic uint64_t gpu_done;        /* semaphore value known reached */
  _Atomic bool gpu_dead; /* a submit failed or the driver lost the device: stop waiting for it */

  pthread_mutex_t lock;
  pthread_cond_t wake, space, fifo_cv, fifo_space, idle;
  uint32_t *ring;
  _Atomic uint64_t head, tail; /* words submitted / retired */
  bool stop, engine_exited, completer_exited;
  bool engine_sleeping;  /* under lock: the engine waits on wake (a submit must signal it) */
  bool engine_idle_wake; /* under lock: the completion thread woke it when its work retired */
  bool wake_at_retire;   /* under lock: a submit found it asleep with work still to retire, and left
                            the wake-up to that retire (the host saves the call) */
  vk_pending_t *fifo;
  uint64_t fifo_head, fifo_tail;
  VkCommandBuffer *free_cbs;
  size_t nfree_cbs, cap_cbs;
  vk_blist_t *blists, *dead_blists;

  /* engine thread */
  VkCommandPool pool;
  VkQueryPool tsq;
  uint64_t ts_next;
  _Atomic uint64_t ts_done;
  vk_block_t *scratch;
  HCQ__VEC(vk_block_t *) old_scratch;
  VkCommandBuffer bcbs[MAX_BATCH_CBS];
  vk_seg_t *bsegs[MAX_BATCH_CBS];
  uint32_t nbcbs;
  const uint32_t *bexecs[FAULT_EXECS]; /* the batch's first EXECs, and how many it has */
  uint32_t nbexecs;
  VkSemaphore bwait_sem[2];
  uint64_t bwait_val[2];
  uint32_t nbwaits;
  vk_pending_t bpend[MAX_BATCH_PEND];
  uint32_t nbpend;
  const uint32_t *bfirst, *blast, *bbase;

  /* hang reports */
  _Atomic(const uint32_t *) blocked_at, interp_at, interp_base, gpu_at, gpu_base, prev;

  /* Batches handed to the driver, by semaphore value, for the fault report (any thread reads them,
   * without locks, in a signal handler): a slot is valid while its sem is above gpu_done. */
  struct {
    _Atomic uint64_t sem;
    const uint32_t *execs[FAULT_EXECS];
    uint32_t nexecs;
  } inflight[FAULT_BATCHES];

  _Atomic uint64_t completion_delay_ns; /* tests: hcq__vk_slow_completion */
  _Atomic uint64_t records, rerecords, submits, host_waits, sem_waits, inflight_yields,
      inflight_polls, wake_calls;
  pthread_t thread, completer;
  bool thread_started, completer_started;
  _Atomic bool thread_done, completer_done;
} vk_engine_t;

/* ---- shared by the engine's files ----
 * Engine thread only, unless said otherwise. The bool answers of those that act (run_list,
 * record_transient, use_segment) are false once the device is lost, with its reason recorded. */

/* Any thread. */
const char *hcq__vk_kind_name(const vk_engine_t *e);
/* Marks the device lost, naming the graph item of cmd (may be NULL) when it has one. Any thread. */
void hcq__vk_lose(vk_engine_t *e, const uint32_t *cmd, const char *fmt, ...) HCQ_PRINTF(3, 4);

/* batches (vk_batch.c) */
void hcq__vk_push_pending(vk_engine_t *e, const vk_pending_t *p);
/* Waits until the completion thread passed FIFO position pos (or the ts ring has room). */
void hcq__vk_wait_fifo_pos(vk_engine_t *e, uint64_t pos);
/* Any thread. */
bool hcq__vk_lookup_pending_signal(vk_device_t *vd, const void *word,
                                   struct vk_pending_signal *out);
/* Submits the batch (when it has commands or waits), then hands its bookkeeping and the signal
 * write (word may be NULL) to the completion thread. */
void hcq__vk_flush(vk_engine_t *e, hcq__signal_words_t *word, uint64_t value);
void hcq__vk_batch_add_cb(vk_engine_t *e, VkCommandBuffer cb, vk_seg_t *seg, const uint32_t *first,
                          const uint32_t *last, const uint32_t *base);
void hcq__vk_batch_add_pending(vk_engine_t *e, const vk_pending_t *p);
void hcq__vk_batch_add_wait(vk_engine_t *e, VkSemaphore sem, uint64_t value);
/* Waits on the host until this engine's work up to semaphore value v finished (a lost driver marks
 * the device lost). note_done: the completion thread, which owns gpu_done, advances it to v. */
void hcq__vk_wait_gpu(vk_engine_t *e, uint64_t v, bool note_done);

/* reading the words (vk_interp.c) */
/* The signal words at addr, reachable by the host; NULL (device lost) when they are not. */
hcq__signal_words_t *hcq__vk_signal_words(vk_engine_t *e, const uint32_t *cmd, uint64_t addr);
/* Whether [addr, addr + size) is memory of this engine's device. */
bool hcq__vk_own_memory(const vk_engine_t *e, uint64_t addr, uint64_t size, vk_where_t *out);
/* Runs a command list: w[0, n). bl: the bound list's kept runs (NULL for ring words). */
bool hcq__vk_run_list(vk_engine_t *e, const uint32_t *w, size_t n, vk_blist_t *bl);

/* recording (vk_record.c) */
/* Records the commands [i, j) of w into a command buffer used once and adds it to the batch. */
bool hcq__vk_record_transient(vk_engine_t *e, const uint32_t *w, size_t i, size_t j,
                              const uint32_t *base);
/* Adds the bound list's k-th kept run, [i, j) of w, to the batch: recorded the first time, and
 * again when a word it baked in changed. list: where w lives in device memory, or NULL. */
bool hcq__vk_use_segment(vk_engine_t *e, vk_blist_t *bl, uint32_t k, const uint32_t *w, size_t i,
                         size_t j, const vk_where_t *list);
/* The kept runs of the bound list at base (made empty on first use); NULL when out of memory. Any
 * thread. */
vk_blist_t *hcq__vk_find_blist(vk_engine_t *e, const uint32_t *base, size_t len);
/* Frees the lists hcq__vk_forget_bound dropped. */
void hcq__vk_free_dead_blists(vk_engine_t *e);
/* Frees every list, dropped or kept (the engine's threads are gone). */
void hcq__vk_free_blists(vk_engine_t *e);

/* fault reports (vk_fault.c) */
/* Lists the engine for the fault handler while it exists; any thread. */
void hcq__vk_fault_add_engine(vk_engine_t *e);
void hcq__vk_fault_remove_engine(vk_engine_t *e);

#endif
