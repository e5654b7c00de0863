/* The Vulkan queue engines: one per queue kind, a host thread that reads the neutral command words
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
 * retires once every batch made from it completed and its signal words were written. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/fault.h"
#include "vulkan/vk_device.h"

#define RING_WORDS (UINT64_C(1) << 16)
#define FIFO_CAP 4096u
#define MAX_BATCH_CBS 32
#define MAX_BATCH_PEND 64
#define TS_QUERIES 256u
#define MAX_TRANSIENT_TS 32
#define FAULT_EXECS 4    /* kernels of a batch a fault report names */
#define FAULT_BATCHES 64 /* batches in flight a fault report looks at */
/* An idle engine whose work is still on a GPU: spins as long as a small model's step takes there,
 * then polls (a longer step), and sleeps past the longest. On a CPU-emulated GPU it sleeps at once
 * (spin_for_work). */
#define VK_INFLIGHT_SPIN_NS (UINT64_C(200000))
#define VK_INFLIGHT_POLL_NS 20000L
#define VK_INFLIGHT_MAX_NS (UINT64_C(20000000))

const char *hcq__vk_result_name(VkResult r);
uint64_t hcq__vk_ticks_to_ns(const vk_device_t *vd, uint64_t ticks);

enum { P_BATCH, P_SIGNAL, P_TS, P_SEGTS, P_CB, P_RETIRE };

typedef struct seg {
  uint32_t start, end; /* word offsets in the list */
  VkCommandBuffer cb;
  uint32_t *words;     /* the run as recorded */
  bool indirect;       /* EXEC grids read from the list's memory */
  VkQueryPool qp;
  uint32_t nts;
  hcq__signal_words_t **ts_words;
  uint64_t *ts_vals;
  uint64_t fifo_pos; /* reusable once the completion thread passed this FIFO position */
} seg_t;

typedef struct blist {
  const uint32_t *base;
  size_t len;
  seg_t **segs; /* each allocated alone: batches and the FIFO point at them */
  uint32_t nsegs, cap;
  struct blist *next;
} blist_t;

typedef struct pending {
  uint8_t kind;
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
    seg_t *seg;
    VkCommandBuffer cb;
    uint64_t tail;
  } u;
} pending_t;

typedef struct vk_engine {
  vk_device_t *vd;
  hcq_device_t *dev;
  int kind;
  vk_queue_t *q;
  VkSemaphore sem;
  uint64_t sem_last;          /* engine thread: last value submitted */
  uint64_t dep_other;         /* engine thread: the other engine's last signal (seq) waited for */
  /* Signals are numbered in the order the engine hands them to its completion thread. Several can
   * share a semaphore value (a SIGNAL with no work since the last submit adds none), so the order of
   * two engines' signal writes is kept by number, not by semaphore value. */
  _Atomic uint64_t signals_flushed;  /* written by the engine thread only */
  _Atomic uint64_t signals_applied;  /* the number of the last signal word written */
  _Atomic uint64_t gpu_done;  /* semaphore value known reached */
  _Atomic bool gpu_dead;      /* a submit failed or the driver lost the device: stop waiting for it */

  pthread_mutex_t lock;
  pthread_cond_t wake, space, fifo_cv, fifo_space, idle;
  uint32_t *ring;
  _Atomic uint64_t head, tail; /* words submitted / retired */
  bool stop, engine_exited, completer_exited;
  bool engine_sleeping; /* under lock: the engine waits on wake (a submit must signal it) */
  bool engine_idle_wake; /* under lock: the completion thread woke it when its work retired */
  bool wake_at_retire;   /* under lock: a submit found it asleep with work still to retire, and left
                            the wake-up to that retire (the host saves the call) */
  pending_t *fifo;
  uint64_t fifo_head, fifo_tail;
  VkCommandBuffer *free_cbs;
  size_t nfree_cbs, cap_cbs;
  blist_t *blists, *dead_blists;

  /* engine thread */
  VkCommandPool pool;
  VkQueryPool tsq;
  uint64_t ts_next;
  _Atomic uint64_t ts_done;
  vk_block_t *scratch;
  HCQ__VEC(vk_block_t *) old_scratch;
  VkCommandBuffer bcbs[MAX_BATCH_CBS];
  seg_t *bsegs[MAX_BATCH_CBS];
  uint32_t nbcbs;
  const uint32_t *bexecs[FAULT_EXECS]; /* the batch's first EXECs, and how many it has */
  uint32_t nbexecs;
  VkSemaphore bwait_sem[2];
  uint64_t bwait_val[2];
  uint32_t nbwaits;
  pending_t bpend[MAX_BATCH_PEND];
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

  _Atomic uint64_t completion_delay_ns; /* tests: hcq__vulkan_slow_completion */
  _Atomic uint64_t records, rerecords, submits, host_waits, sem_waits, inflight_yields, inflight_polls, wake_calls;
  pthread_t thread, completer;
  bool thread_started, completer_started;
  _Atomic bool thread_done, completer_done;
} vk_engine_t;

static const char *kind_name(const vk_engine_t *e) { return e->kind == HCQ_QUEUE_COMPUTE ? "compute" : "copy"; }

static void lose(vk_engine_t *e, const uint32_t *cmd, const char *fmt, ...) HCQ_PRINTF(3, 4);
static void lose(vk_engine_t *e, const uint32_t *cmd, const char *fmt, ...) {
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  uint32_t tag = 0;
  if (cmd) {
    uint32_t op = HCQ__HDR_OP(cmd[0]);
    tag = op == HCQ__OP_EXEC ? cmd[HCQ__EXEC_TAG] : op == HCQ__OP_COPY ? cmd[HCQ__COPY_TAG]
                                                   : op == HCQ__OP_WAIT ? cmd[HCQ__WAIT_TAG] : 0;
  }
  if (tag)
    hcq__device_mark_lost(e->dev, "its %s queue failed at graph item %" PRIu32 ": %s", kind_name(e), tag - 1, what);
  else
    hcq__device_mark_lost(e->dev, "its %s queue failed: %s", kind_name(e), what);
}

static void cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *m, uint64_t deadline_ns) {
  /* Condition variables time out on CLOCK_REALTIME: convert the monotonic deadline. */
  uint64_t now = hcq__now_ns();
  uint64_t rel = deadline_ns > now ? deadline_ns - now : 0;
  if (rel > UINT64_C(1000000000)) rel = UINT64_C(1000000000);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t ns = (uint64_t)ts.tv_nsec + rel;
  ts.tv_sec += (time_t)(ns / 1000000000u);
  ts.tv_nsec = (long)(ns % 1000000000u);
  pthread_cond_timedwait(cv, m, &ts);
}

/* ---- the FIFO to the completion thread ---- */

static void push_pending(vk_engine_t *e, const pending_t *p) {
  pthread_mutex_lock(&e->lock);
  while (e->fifo_head - e->fifo_tail == FIFO_CAP) pthread_cond_wait(&e->fifo_space, &e->lock);
  e->fifo[e->fifo_head % FIFO_CAP] = *p;
  e->fifo[e->fifo_head % FIFO_CAP].dep = e->dep_other;
  e->fifo_head++;
  pthread_cond_signal(&e->fifo_cv);
  pthread_mutex_unlock(&e->lock);
}

/* Waits until the completion thread passed FIFO position pos (or the ts ring has room). */
static void wait_fifo_pos(vk_engine_t *e, uint64_t pos) {
  pthread_mutex_lock(&e->lock);
  while (e->fifo_tail < pos) pthread_cond_wait(&e->fifo_space, &e->lock);
  pthread_mutex_unlock(&e->lock);
}

/* ---- batches ---- */

static void record_pending_signal(vk_device_t *vd, const void *word, uint64_t value, uint64_t sem, uint64_t seq,
                                  int kind) {
  size_t slot = ((uintptr_t)word >> 4) % (sizeof(vd->pending_signals) / sizeof(vd->pending_signals[0]));
  pthread_mutex_lock(&vd->pending_lock);
  vd->pending_signals[slot] = (struct vk_pending_signal){word, value, sem, seq, kind};
  pthread_mutex_unlock(&vd->pending_lock);
}

static bool lookup_pending_signal(vk_device_t *vd, const void *word, struct vk_pending_signal *out) {
  size_t slot = ((uintptr_t)word >> 4) % (sizeof(vd->pending_signals) / sizeof(vd->pending_signals[0]));
  pthread_mutex_lock(&vd->pending_lock);
  *out = vd->pending_signals[slot];
  pthread_mutex_unlock(&vd->pending_lock);
  return out->word == word;
}

/* Submits the batch (when it has commands or waits), then hands its bookkeeping and the signal
 * write (word may be NULL) to the completion thread. */
static void flush(vk_engine_t *e, hcq__signal_words_t *word, uint64_t value) {
  vk_device_t *vd = e->vd;
  uint64_t sem = e->sem_last;
  bool submitted = e->nbcbs || e->nbwaits;
  if (submitted) {
    sem = e->sem_last + 1;
    VkPipelineStageFlags stages[2] = {VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT};
    VkTimelineSemaphoreSubmitInfo tsi = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                         .waitSemaphoreValueCount = e->nbwaits,
                                         .pWaitSemaphoreValues = e->bwait_val,
                                         .signalSemaphoreValueCount = 1,
                                         .pSignalSemaphoreValues = &sem};
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .pNext = &tsi,
                       .waitSemaphoreCount = e->nbwaits,
                       .pWaitSemaphores = e->bwait_sem,
                       .pWaitDstStageMask = stages,
                       .commandBufferCount = e->nbcbs,
                       .pCommandBuffers = e->bcbs,
                       .signalSemaphoreCount = 1,
                       .pSignalSemaphores = &e->sem};
    /* Published before the driver may run it (lavapipe runs it inside vkQueueSubmit or on its own
     * threads): a fault there names these kernels. */
    __typeof__(e->inflight[0]) *f = &e->inflight[sem % FAULT_BATCHES];
    atomic_store_explicit(&f->sem, 0, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    f->nexecs = e->nbexecs;
    memcpy(f->execs, e->bexecs, sizeof(f->execs));
    atomic_store_explicit(&f->sem, sem, memory_order_release);
    pthread_mutex_lock(&e->q->lock);
    VkResult r = vd->fn.vkQueueSubmit(e->q->queue, 1, &si, VK_NULL_HANDLE);
    pthread_mutex_unlock(&e->q->lock);
    if (r != VK_SUCCESS) {
      atomic_store(&e->gpu_dead, true);
      lose(e, e->bfirst, "vkQueueSubmit failed: %s", hcq__vk_result_name(r));
    }
    e->sem_last = sem;
    pending_t b = {.kind = P_BATCH, .sem = sem, .u.batch = {e->bfirst, e->blast, e->bbase}};
    push_pending(e, &b);
  }
  for (uint32_t i = 0; i < e->nbpend; i++) {
    e->bpend[i].sem = sem;
    push_pending(e, &e->bpend[i]);
  }
  if (word) {
    uint64_t seq = atomic_load_explicit(&e->signals_flushed, memory_order_relaxed) + 1;
    record_pending_signal(vd, word, value, sem, seq, e->kind);
    pending_t s = {.kind = P_SIGNAL, .sem = sem, .u.sig = {word, value, seq}};
    push_pending(e, &s);
    atomic_store_explicit(&e->signals_flushed, seq, memory_order_release);
  }
  pthread_mutex_lock(&e->lock);
  uint64_t pos = e->fifo_head;
  pthread_mutex_unlock(&e->lock);
  for (uint32_t i = 0; i < e->nbcbs; i++)
    if (e->bsegs[i]) e->bsegs[i]->fifo_pos = pos;
  /* Counted once the batch's signal can be found by the other engine. */
  if (submitted) atomic_fetch_add_explicit(&e->submits, 1, memory_order_release);
  e->nbcbs = e->nbwaits = e->nbpend = e->nbexecs = 0;
  e->bfirst = e->blast = NULL;
}

static void batch_add_cb(vk_engine_t *e, VkCommandBuffer cb, seg_t *seg, const uint32_t *first, const uint32_t *last,
                         const uint32_t *base) {
  if (e->nbcbs == MAX_BATCH_CBS || (e->nbcbs && e->bbase != base)) flush(e, NULL, 0);
  if (!e->bfirst) e->bfirst = first, e->bbase = base;
  e->blast = last;
  for (const uint32_t *c = first; c <= last && e->nbexecs < UINT32_MAX; c += HCQ__HDR_LEN(c[0])) {
    if (HCQ__HDR_OP(c[0]) != HCQ__OP_EXEC) continue;
    if (e->nbexecs < FAULT_EXECS) e->bexecs[e->nbexecs] = c;
    e->nbexecs++;
  }
  e->bsegs[e->nbcbs] = seg;
  e->bcbs[e->nbcbs++] = cb;
}

static void batch_add_pending(vk_engine_t *e, const pending_t *p) {
  if (e->nbpend == MAX_BATCH_PEND) flush(e, NULL, 0);
  e->bpend[e->nbpend++] = *p;
}

static void batch_add_wait(vk_engine_t *e, VkSemaphore sem, uint64_t value) {
  for (uint32_t i = 0; i < e->nbwaits; i++)
    if (e->bwait_sem[i] == sem) {
      if (value > e->bwait_val[i]) e->bwait_val[i] = value;
      return;
    }
  e->bwait_sem[e->nbwaits] = sem;
  e->bwait_val[e->nbwaits++] = value;
}

/* Waits on the host until this engine's submitted work finished. */
static void wait_own_gpu(vk_engine_t *e) {
  vk_device_t *vd = e->vd;
  uint64_t v = e->sem_last;
  while (atomic_load(&e->gpu_done) < v && !atomic_load(&e->gpu_dead)) {
    VkSemaphoreWaitInfo wi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                              .semaphoreCount = 1,
                              .pSemaphores = &e->sem,
                              .pValues = &v};
    VkResult r = vd->fn.vkWaitSemaphores(vd->device, &wi, UINT64_C(200000000));
    if (r == VK_SUCCESS) break;
    if (r != VK_TIMEOUT) {
      atomic_store(&e->gpu_dead, true);
      lose(e, NULL, "the Vulkan driver reported %s", hcq__vk_result_name(r));
    }
  }
}

/* ---- addresses ---- */

/* The signal words at addr, reachable by the host; NULL (device lost) when they are not. */
static hcq__signal_words_t *signal_words(vk_engine_t *e, const uint32_t *cmd, uint64_t addr) {
  vk_where_t at;
  char *p;
  if (hcq__vk_resolve(addr, sizeof(hcq__signal_words_t), &at)) {
    if (!at.block->host) {
      lose(e, cmd, "the signal at 0x%" PRIx64 " is in device memory the host cannot map", addr);
      return NULL;
    }
    p = at.block->host + at.offset;
  } else {
    p = (char *)(uintptr_t)addr; /* host memory of another device kind (a CPU signal) */
  }
  if (!p || ((uintptr_t)p & 7)) {
    lose(e, cmd, "0x%" PRIx64 " is not a signal address", addr);
    return NULL;
  }
  return (hcq__signal_words_t *)(void *)p;
}

/* Whether [addr, addr + size) is memory of this engine's device. */
static bool own_memory(const vk_engine_t *e, uint64_t addr, uint64_t size, vk_where_t *out) {
  return hcq__vk_resolve(addr, size ? size : 1, out) && out->block->vd == e->vd;
}

static bool copy_is_local(const vk_engine_t *e, const uint32_t *cmd) {
  uint64_t size = hcq__rd64(cmd + HCQ__COPY_SIZE);
  vk_where_t d, s;
  return size == 0 ||
         (own_memory(e, hcq__rd64(cmd + HCQ__COPY_DST), size, &d) && own_memory(e, hcq__rd64(cmd + HCQ__COPY_SRC), size, &s));
}

/* A host pointer for [addr, addr + size): mapped Vulkan memory, or host memory of another kind. */
static char *host_pointer(vk_engine_t *e, const uint32_t *cmd, uint64_t addr, uint64_t size, const char *what) {
  vk_where_t at;
  if (hcq__vk_resolve(addr, size, &at)) {
    if (at.block->host) return at.block->host + at.offset;
    lose(e, cmd, "the copy %s 0x%" PRIx64 " is memory of %s that the host cannot map (copies between devices go "
         "through the host)", what, addr, at.block->vd->dev->name);
    return NULL;
  }
  if (!addr) lose(e, cmd, "the copy %s is address 0", what);
  return (char *)(uintptr_t)addr;
}

/* ---- commands resolved when reached ---- */

static bool do_wait(vk_engine_t *e, const uint32_t *cmd) {
  hcq__signal_words_t *s = signal_words(e, cmd, hcq__rd64(cmd + HCQ__WAIT_ADDR));
  if (!s) return false;
  uint64_t want = cmd[HCQ__WAIT_VALUE];
  if (atomic_load_explicit(&s->value, memory_order_acquire) >= want) return true;
  struct vk_pending_signal ps;
  if (lookup_pending_signal(e->vd, s, &ps) && ps.value >= want) {
    vk_engine_t *src = e->vd->engines[ps.kind];
    if (ps.sem > atomic_load(&src->gpu_done)) {
      if (src == e) return true; /* behind it on our own in-order queue */
      if (e->nbcbs) flush(e, NULL, 0);
      batch_add_wait(e, src->sem, ps.sem);
      /* Our signal writes must not overtake the one we waited for: two completion threads write
       * words, and a later value written first would be overwritten by the earlier one. By its
       * number: a signal of the same semaphore value written before it would not do. */
      if (ps.seq > e->dep_other) e->dep_other = ps.seq;
      atomic_fetch_add_explicit(&e->sem_waits, 1, memory_order_relaxed);
      return true;
    }
  }
  flush(e, NULL, 0); /* what came before may be what the signal waits for */
  atomic_fetch_add_explicit(&e->host_waits, 1, memory_order_relaxed);
  atomic_store_explicit(&e->blocked_at, cmd, memory_order_relaxed);
  uint64_t seen;
  int r = hcq__signal_words_wait(s, want, 0, &e->dev, 1, &seen);
  atomic_store_explicit(&e->blocked_at, NULL, memory_order_relaxed);
  return r == HCQ__WAIT_REACHED;
}

static bool do_signal(vk_engine_t *e, const uint32_t *cmd) {
  hcq__signal_words_t *s = signal_words(e, cmd, hcq__rd64(cmd + HCQ__SIGNAL_ADDR));
  if (!s) return false;
  if (!e->bfirst) e->bfirst = cmd;
  e->blast = cmd;
  flush(e, s, cmd[HCQ__SIGNAL_VALUE]);
  return true;
}

/* A copy that leaves this device: on the host, after the engine's earlier work (and its waits). */
static bool do_host_copy(vk_engine_t *e, const uint32_t *cmd) {
  uint64_t size = hcq__rd64(cmd + HCQ__COPY_SIZE);
  char *dst = host_pointer(e, cmd, hcq__rd64(cmd + HCQ__COPY_DST), size, "destination");
  char *src = dst ? host_pointer(e, cmd, hcq__rd64(cmd + HCQ__COPY_SRC), size, "source") : NULL;
  if (!dst || !src) return false;
  flush(e, NULL, 0);
  wait_own_gpu(e);
  if (hcq__device_is_lost(e->dev)) return false;
  memmove(dst, src, (size_t)size);
  return true;
}

/* ---- recording ---- */

static void barrier(vk_device_t *vd, VkCommandBuffer cb, bool to_host) {
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                        .srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT,
                        .dstAccessMask = to_host ? VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT
                                                 : VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT};
  vd->fn.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                              to_host ? VK_PIPELINE_STAGE_HOST_BIT : VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &mb, 0,
                              NULL, 0, NULL);
}

static bool ensure_scratch(vk_engine_t *e, uint64_t size) {
  if (e->scratch && e->scratch->size >= size) return true;
  uint64_t want = e->scratch ? 2 * e->scratch->size : UINT64_C(1) << 20;
  while (want < size) want *= 2;
  vk_block_t *b;
  hcq_status_t st = hcq__vk_scratch_block(e->vd, want, &b);
  if (st) {
    hcq_status_destroy(st);
    return false;
  }
  /* Recorded command buffers may still name the old one: it lives as long as the engine. */
  if (e->scratch && !hcq__vec_push(&e->old_scratch, e->scratch)) {
    hcq__vk_block_destroy(b);
    return false;
  }
  e->scratch = b;
  return true;
}

typedef struct ts_note {
  uint32_t query;
  hcq__signal_words_t *word;
} ts_note_t;

/* Records the commands [i, j) of w into cb. list: where w lives in device memory (bound lists:
 * grids are read from there), or NULL. seg: the kept run (bound), else transient timestamps go to
 * notes. */
static bool record(vk_engine_t *e, VkCommandBuffer cb, const uint32_t *w, size_t i, size_t j, const vk_where_t *list,
                   seg_t *seg, ts_note_t *notes, uint32_t *nnotes) {
  vk_device_t *vd = e->vd;
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = seg ? VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT
                                              : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  VkResult r = vd->fn.vkBeginCommandBuffer(cb, &bi);
  if (r != VK_SUCCESS) {
    lose(e, w + i, "vkBeginCommandBuffer failed: %s", hcq__vk_result_name(r));
    return false;
  }
  if (seg && seg->nts) vd->fn.vkCmdResetQueryPool(cb, seg->qp, 0, seg->nts);
  uint32_t nts = 0;
  for (size_t k = i; k < j; k += HCQ__HDR_LEN(w[k])) {
    const uint32_t *c = w + k;
    uint32_t op = HCQ__HDR_OP(c[0]);
    if (op == HCQ__OP_NOP || op == HCQ__OP_BARRIER) continue;
    barrier(vd, cb, false);
    if (op == HCQ__OP_EXEC) {
      vk_program_t *p = (vk_program_t *)(uintptr_t)hcq__rd64(c + HCQ__EXEC_FN);
      const uint32_t *local = c + HCQ__EXEC_LOCAL, *global = c + HCQ__EXEC_GLOBAL;
      if (!local[0] || !local[1] || !local[2]) continue; /* an empty launch runs nothing */
      if (!list && (!global[0] || !global[1] || !global[2])) continue;
      VkPipeline pipe;
      hcq_status_t st = hcq__vk_pipeline(p, local, &pipe);
      if (st) {
        lose(e, c, "%s", hcq_status_message(st));
        hcq_status_destroy(st);
        return false;
      }
      uint64_t nbufs = c[HCQ__EXEC_NBUFS];
      vk_where_t args;
      if (!own_memory(e, hcq__rd64(c + HCQ__EXEC_ARGS), 16, &args)) {
        lose(e, c, "kernel %s: its arguments at 0x%" PRIx64 " are not memory of %s", p->entry,
             hcq__rd64(c + HCQ__EXEC_ARGS), e->dev->name);
        return false;
      }
      uint64_t push[2] = {args.block->bda + args.offset, args.block->bda + args.offset + 8 * nbufs};
      vd->fn.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
      vd->fn.vkCmdPushConstants(cb, vd->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(push), push);
      if (list)
        vd->fn.vkCmdDispatchIndirect(cb, list->block->buffer, list->offset + (uint64_t)(k + HCQ__EXEC_GLOBAL) * 4);
      else
        vd->fn.vkCmdDispatch(cb, global[0], global[1], global[2]);
    } else if (op == HCQ__OP_COPY) {
      uint64_t size = hcq__rd64(c + HCQ__COPY_SIZE);
      vk_where_t d, s;
      if (!size) continue;
      own_memory(e, hcq__rd64(c + HCQ__COPY_DST), size, &d);
      own_memory(e, hcq__rd64(c + HCQ__COPY_SRC), size, &s);
      bool overlap = d.block == s.block && d.offset < s.offset + size && s.offset < d.offset + size;
      if (overlap && d.offset == s.offset) continue;
      if (overlap) {
        /* vkCmdCopyBuffer forbids overlapping regions; the queue's COPY is a memmove. */
        if (!ensure_scratch(e, size)) {
          lose(e, c, "no device memory for an overlapping copy of %" PRIu64 " bytes", size);
          return false;
        }
        VkBufferCopy a = {s.offset, 0, size}, b = {0, d.offset, size};
        vd->fn.vkCmdCopyBuffer(cb, s.block->buffer, e->scratch->buffer, 1, &a);
        barrier(vd, cb, false);
        vd->fn.vkCmdCopyBuffer(cb, e->scratch->buffer, d.block->buffer, 1, &b);
      } else {
        VkBufferCopy region = {s.offset, d.offset, size};
        vd->fn.vkCmdCopyBuffer(cb, s.block->buffer, d.block->buffer, 1, &region);
      }
    } else if (op == HCQ__OP_TIMESTAMP) {
      hcq__signal_words_t *word = signal_words(e, c, hcq__rd64(c + HCQ__TIMESTAMP_ADDR));
      if (!word) return false;
      if (!vd->timestamps) {
        /* No device clock on this queue family: the completion thread stamps the host time. */
        if (seg) {
          seg->ts_words[nts++] = word;
        } else {
          notes[*nnotes] = (ts_note_t){UINT32_MAX, word};
          (*nnotes)++;
        }
        continue;
      }
      if (seg) {
        vd->fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, seg->qp, nts);
        seg->ts_words[nts++] = word;
      } else {
        uint32_t q = (uint32_t)(e->ts_next++ % TS_QUERIES);
        vd->fn.vkCmdResetQueryPool(cb, e->tsq, q, 1);
        vd->fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, e->tsq, q);
        notes[*nnotes] = (ts_note_t){q, word};
        (*nnotes)++;
      }
    }
  }
  barrier(vd, cb, true);
  r = vd->fn.vkEndCommandBuffer(cb);
  if (r != VK_SUCCESS) {
    lose(e, w + i, "recording a command buffer failed: %s", hcq__vk_result_name(r));
    return false;
  }
  return true;
}

static VkCommandBuffer new_cb(vk_engine_t *e) {
  VkCommandBuffer cb = VK_NULL_HANDLE;
  pthread_mutex_lock(&e->lock);
  if (e->nfree_cbs) cb = e->free_cbs[--e->nfree_cbs];
  pthread_mutex_unlock(&e->lock);
  if (cb) return cb;
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = e->pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  VkResult r = e->vd->fn.vkAllocateCommandBuffers(e->vd->device, &ai, &cb);
  if (r != VK_SUCCESS) {
    lose(e, NULL, "vkAllocateCommandBuffers failed: %s", hcq__vk_result_name(r));
    return VK_NULL_HANDLE;
  }
  /* Room to take it back when it retires, so the completion thread never allocates. */
  pthread_mutex_lock(&e->lock);
  if (e->cap_cbs < e->nfree_cbs + 1 + FIFO_CAP) {
    size_t cap = e->cap_cbs ? 2 * e->cap_cbs : 2 * FIFO_CAP;
    VkCommandBuffer *n = realloc(e->free_cbs, cap * sizeof(*n));
    if (n) e->free_cbs = n, e->cap_cbs = cap;
  }
  pthread_mutex_unlock(&e->lock);
  return cb;
}

static uint32_t count_timestamps(const uint32_t *w, size_t i, size_t j) {
  uint32_t n = 0;
  for (size_t k = i; k < j; k += HCQ__HDR_LEN(w[k])) n += HCQ__HDR_OP(w[k]) == HCQ__OP_TIMESTAMP;
  return n;
}

static bool record_transient(vk_engine_t *e, const uint32_t *w, size_t i, size_t j, const uint32_t *base) {
  /* The timestamp ring must have room for this run's queries. */
  uint32_t nts = count_timestamps(w, i, j);
  if (nts && e->ts_next + nts - atomic_load(&e->ts_done) > TS_QUERIES) {
    flush(e, NULL, 0);
    pthread_mutex_lock(&e->lock);
    while (e->ts_next + nts - atomic_load(&e->ts_done) > TS_QUERIES) pthread_cond_wait(&e->fifo_space, &e->lock);
    pthread_mutex_unlock(&e->lock);
  }
  VkCommandBuffer cb = new_cb(e);
  if (!cb) return false;
  ts_note_t notes[MAX_TRANSIENT_TS];
  uint32_t nnotes = 0;
  if (!record(e, cb, w, i, j, NULL, NULL, notes, &nnotes)) {
    pthread_mutex_lock(&e->lock);
    e->free_cbs[e->nfree_cbs++] = cb;
    pthread_mutex_unlock(&e->lock);
    return false;
  }
  const uint32_t *last = w + i;
  for (size_t k = i; k < j; k += HCQ__HDR_LEN(w[k])) last = w + k;
  batch_add_cb(e, cb, NULL, w + i, last, base);
  pending_t p = {.kind = P_CB, .u.cb = cb};
  batch_add_pending(e, &p);
  for (uint32_t n = 0; n < nnotes; n++) {
    pending_t t = {.kind = P_TS, .u.ts = {notes[n].query, notes[n].word}};
    batch_add_pending(e, &t);
  }
  return true;
}

/* ---- bound lists: runs recorded once ---- */

static void seg_release(vk_engine_t *e, seg_t *s) {
  vk_device_t *vd = e->vd;
  if (s->cb) vd->fn.vkFreeCommandBuffers(vd->device, e->pool, 1, &s->cb);
  if (s->qp) vd->fn.vkDestroyQueryPool(vd->device, s->qp, NULL);
  free(s->words);
  free(s->ts_words);
  free(s->ts_vals);
  memset(s, 0, sizeof(*s));
}

static void blist_free(vk_engine_t *e, blist_t *bl) {
  for (uint32_t k = 0; k < bl->nsegs; k++) {
    seg_release(e, bl->segs[k]);
    free(bl->segs[k]);
  }
  free(bl->segs);
  free(bl);
}

/* Whether the words the run baked in are still the same (grids read indirectly may differ). */
static bool seg_matches(const seg_t *s, const uint32_t *w) {
  for (uint32_t k = s->start; k < s->end;) {
    const uint32_t *c = w + k, *was = s->words + (k - s->start);
    uint32_t len = HCQ__HDR_LEN(c[0]);
    if (c[0] != was[0]) return false;
    if (HCQ__HDR_OP(c[0]) == HCQ__OP_EXEC && s->indirect) {
      if (memcmp(c + 1, was + 1, (HCQ__EXEC_GLOBAL - 1) * 4) ||
          memcmp(c + HCQ__EXEC_LOCAL, was + HCQ__EXEC_LOCAL, (len - HCQ__EXEC_LOCAL) * 4))
        return false;
    } else if (memcmp(c, was, len * 4)) {
      return false;
    }
    k += len;
  }
  return true;
}

static bool seg_record(vk_engine_t *e, blist_t *bl, seg_t *s, const uint32_t *w, size_t i, size_t j,
                       const vk_where_t *list) {
  vk_device_t *vd = e->vd;
  s->start = (uint32_t)i;
  s->end = (uint32_t)j;
  s->indirect = list != NULL;
  s->words = malloc((j - i) * 4);
  s->nts = count_timestamps(w, i, j);
  if (s->nts) {
    s->ts_words = calloc(s->nts, sizeof(*s->ts_words));
    s->ts_vals = calloc(s->nts, sizeof(*s->ts_vals));
    if (vd->timestamps) {
      VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                  .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                  .queryCount = s->nts};
      VkResult r = vd->fn.vkCreateQueryPool(vd->device, &qi, NULL, &s->qp);
      if (r != VK_SUCCESS) {
        lose(e, w + i, "vkCreateQueryPool failed: %s", hcq__vk_result_name(r));
        return false;
      }
    }
  }
  if (!s->words || (s->nts && (!s->ts_words || !s->ts_vals))) {
    lose(e, w + i, "out of memory recording a bound command list");
    return false;
  }
  memcpy(s->words, w + i, (j - i) * 4);
  s->cb = new_cb(e);
  if (!s->cb) return false;
  (void)bl;
  return record(e, s->cb, w, i, j, list, s, NULL, NULL);
}

/* Launch geometry of one EXEC against the device's limits. */
static hcq_status_t check_exec(const vk_device_t *vd, const uint32_t *c, bool groups_only) {
  const VkPhysicalDeviceLimits *lim = &vd->props.limits;
  const uint32_t *g = c + HCQ__EXEC_GLOBAL, *l = c + HCQ__EXEC_LOCAL;
  const hcq_program_t *p = (const hcq_program_t *)(uintptr_t)hcq__rd64(c + HCQ__EXEC_PROGRAM);
  if (!g[0] || !g[1] || !g[2] || !l[0] || !l[1] || !l[2]) return NULL; /* empty: runs nothing */
  for (int d = 0; d < 3; d++)
    if (g[d] > lim->maxComputeWorkGroupCount[d])
      return hcq_status_make(HCQ_OUT_OF_RANGE, "kernel %s: grid %ux%ux%u is larger than %s allows (%ux%ux%u groups)",
                             p ? p->name : "?", g[0], g[1], g[2], vd->dev->name, lim->maxComputeWorkGroupCount[0],
                             lim->maxComputeWorkGroupCount[1], lim->maxComputeWorkGroupCount[2]);
  if (groups_only) return NULL;
  uint64_t inv = (uint64_t)l[0] * l[1] * l[2];
  for (int d = 0; d < 3; d++)
    if (l[d] > lim->maxComputeWorkGroupSize[d] || inv > lim->maxComputeWorkGroupInvocations)
      return hcq_status_make(HCQ_OUT_OF_RANGE,
                             "kernel %s: group size %ux%ux%u is larger than %s allows (%ux%ux%u, %u invocations)",
                             p ? p->name : "?", l[0], l[1], l[2], vd->dev->name, lim->maxComputeWorkGroupSize[0],
                             lim->maxComputeWorkGroupSize[1], lim->maxComputeWorkGroupSize[2],
                             lim->maxComputeWorkGroupInvocations);
  return NULL;
}

hcq_status_t hcq__vk_check_execs(vk_device_t *vd, const uint32_t *w, size_t n, bool groups_only) {
  for (size_t k = 0; k < n;) {
    uint32_t len = HCQ__HDR_LEN(w[k]);
    if (!len || len > n - k) break;
    if (HCQ__HDR_OP(w[k]) == HCQ__OP_EXEC) {
      hcq_status_t st = check_exec(vd, w + k, groups_only);
      if (st) return st;
    }
    k += len;
  }
  return NULL;
}

static bool use_segment(vk_engine_t *e, blist_t *bl, uint32_t k, const uint32_t *w, size_t i, size_t j,
                        const vk_where_t *list) {
  for (size_t c = i; c < j; c += HCQ__HDR_LEN(w[c]))
    if (HCQ__HDR_OP(w[c]) == HCQ__OP_EXEC) {
      hcq_status_t st = check_exec(e->vd, w + c, true);
      if (st) {
        lose(e, w + c, "%s", hcq_status_message(st));
        hcq_status_destroy(st);
        return false;
      }
    }
  seg_t *s;
  if (k < bl->nsegs) {
    s = bl->segs[k];
    if (s->start != i || s->end != j || !seg_matches(s, w)) {
      /* A baked word changed: record the run again once its last use has finished. */
      flush(e, NULL, 0);
      wait_fifo_pos(e, s->fifo_pos);
      seg_release(e, s);
      atomic_fetch_add_explicit(&e->rerecords, 1, memory_order_relaxed);
      if (!seg_record(e, bl, s, w, i, j, list)) return false;
    }
  } else {
    if (bl->nsegs == bl->cap) {
      uint32_t cap = bl->cap ? 2 * bl->cap : 4;
      seg_t **n = realloc(bl->segs, cap * sizeof(*n));
      if (!n) {
        lose(e, w + i, "out of memory recording a bound command list");
        return false;
      }
      bl->segs = n;
      bl->cap = cap;
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
      lose(e, w + i, "out of memory recording a bound command list");
      return false;
    }
    bl->segs[bl->nsegs++] = s;
    atomic_fetch_add_explicit(&e->records, 1, memory_order_relaxed);
    if (!seg_record(e, bl, s, w, i, j, list)) return false;
  }
  const uint32_t *last = w + i;
  for (size_t c = i; c < j; c += HCQ__HDR_LEN(w[c])) last = w + c;
  batch_add_cb(e, s->cb, s, w + i, last, bl->base);
  if (s->nts) {
    pending_t p = {.kind = P_SEGTS, .u.seg = s};
    batch_add_pending(e, &p);
  }
  return true;
}

static blist_t *find_blist(vk_engine_t *e, const uint32_t *base, size_t len) {
  pthread_mutex_lock(&e->lock);
  blist_t *bl = e->blists;
  for (; bl && !(bl->base == base && bl->len == len); bl = bl->next) {
  }
  if (!bl && (bl = calloc(1, sizeof(*bl)))) {
    bl->base = base;
    bl->len = len;
    bl->next = e->blists;
    e->blists = bl;
  }
  pthread_mutex_unlock(&e->lock);
  return bl;
}

void hcq__vk_forget_bound(vk_device_t *vd, const void *host, uint64_t size) {
  if (!host) return;
  const char *lo = host, *hi = lo + size;
  for (int k = 0; k < 2; k++) {
    vk_engine_t *e = vd->engines[k];
    if (!e) continue;
    pthread_mutex_lock(&e->lock);
    for (blist_t **p = &e->blists; *p;) {
      blist_t *bl = *p;
      if ((const char *)bl->base >= lo && (const char *)bl->base < hi) {
        *p = bl->next;
        bl->next = e->dead_blists;
        e->dead_blists = bl;
      } else {
        p = &bl->next;
      }
    }
    pthread_mutex_unlock(&e->lock);
  }
}

static bool recordable(const vk_engine_t *e, const uint32_t *c) {
  switch (HCQ__HDR_OP(c[0])) {
    case HCQ__OP_EXEC:
    case HCQ__OP_TIMESTAMP:
    case HCQ__OP_BARRIER:
    case HCQ__OP_NOP: return true;
    case HCQ__OP_COPY: return copy_is_local(e, c);
    default: return false;
  }
}

/* Runs a command list: w[0, n). bl: the bound list's kept runs (NULL for ring words). */
static bool run_list(vk_engine_t *e, const uint32_t *w, size_t n, blist_t *bl);

static bool run_bound(vk_engine_t *e, const uint32_t *cmd) {
  const uint32_t *list = (const uint32_t *)(uintptr_t)hcq__rd64(cmd + HCQ__CALL_PTR);
  size_t len = cmd[HCQ__CALL_LEN];
  blist_t *bl = find_blist(e, list, len);
  if (!bl) {
    lose(e, NULL, "out of memory tracking a bound command list");
    return false;
  }
  atomic_store_explicit(&e->interp_base, list, memory_order_relaxed);
  bool ok = run_list(e, list, len, bl);
  atomic_store_explicit(&e->interp_base, NULL, memory_order_relaxed);
  return ok;
}

static bool run_list(vk_engine_t *e, const uint32_t *w, size_t n, blist_t *bl) {
  vk_where_t list_mem, *list = NULL;
  if (bl && own_memory(e, (uint64_t)(uintptr_t)w, n * 4, &list_mem)) list = &list_mem;
  uint32_t segk = 0;
  for (size_t i = 0; i < n;) {
    if (hcq__device_is_lost(e->dev)) return false;
    const uint32_t *c = w + i;
    uint32_t op = HCQ__HDR_OP(c[0]), len = HCQ__HDR_LEN(c[0]);
    if (op == HCQ__OP_JUMP && !bl) return true; /* the rest of the ring is padding */
    if (!len || len > n - i) {
      lose(e, c, "malformed command words (header 0x%08" PRIx32 " at word %zu of %zu)", c[0], i, n);
      return false;
    }
    atomic_store_explicit(&e->interp_at, c, memory_order_relaxed);
    bool ok = true;
    if (op == HCQ__OP_CALL && !bl) {
      ok = run_bound(e, c);
    } else if (op == HCQ__OP_WAIT) {
      ok = do_wait(e, c);
    } else if (op == HCQ__OP_SIGNAL) {
      ok = do_signal(e, c);
    } else if (op == HCQ__OP_COPY && !copy_is_local(e, c)) {
      ok = do_host_copy(e, c);
    } else if (recordable(e, c)) {
      size_t j = i;
      bool work = false;
      uint32_t nts = 0;
      while (j < n) {
        uint32_t l = HCQ__HDR_LEN(w[j]), o = HCQ__HDR_OP(w[j]);
        if (!l || l > n - j || !recordable(e, w + j)) break;
        if (o == HCQ__OP_TIMESTAMP && !bl && nts == MAX_TRANSIENT_TS) break;
        nts += o == HCQ__OP_TIMESTAMP;
        work |= o != HCQ__OP_BARRIER && o != HCQ__OP_NOP;
        j += l;
      }
      if (work) ok = bl ? use_segment(e, bl, segk++, w, i, j, list) : record_transient(e, w, i, j, NULL);
      len = (uint32_t)(j - i);
    } else {
      lose(e, c, "unknown command 0x%08" PRIx32 " on the %s queue", c[0], kind_name(e));
      ok = false;
    }
    if (!ok) return false;
    i += len;
  }
  return true;
}

/* ---- the engine thread ---- */

static void free_dead_blists(vk_engine_t *e) {
  pthread_mutex_lock(&e->lock);
  blist_t *dead = e->dead_blists;
  e->dead_blists = NULL;
  pthread_mutex_unlock(&e->lock);
  while (dead) {
    blist_t *next = dead->next;
    blist_free(e, dead);
    dead = next;
  }
}

/* Waits without sleeping in the kernel while no work comes: for as long as what the engine handed to
 * the driver is in flight (spinning for the first VK_INFLIGHT_SPIN_NS, then polling every
 * VK_INFLIGHT_POLL_NS up to VK_INFLIGHT_MAX_NS), then spinning HCQ_SPIN_NS more. A host that waits
 * for the device and submits again at once (decode step after decode step) then finds the engine
 * awake and pays no wake-up call, which costs it more than a whole graph replay; the spin yields
 * the core to the driver's threads after its first pauses, and a poll only sleeps and looks.
 * On a CPU-emulated GPU (lavapipe) the driver's threads run the kernels on the host's cores: there
 * the engine does not spin or poll while work is in flight (that took a core from the kernels for
 * about a tenth of every decode step), it sleeps until the next submit wakes it, whose wake-up
 * call the host pays while the device is busy anyway. */
static void spin_for_work(vk_engine_t *e, uint64_t interp) {
  uint64_t budget = hcq__options()->spin_ns, start = 0, busy_since = 0, yields = 0;
  bool cpu_device = e->dev->on_host_cores, inflight = false;
  for (unsigned i = 1; atomic_load_explicit(&e->head, memory_order_acquire) == interp; i++) {
    if ((i & 63) != 0) {
      hcq__spin_step(i);
      yields += i >= 64 && inflight;
      continue;
    }
    uint64_t now = hcq__now_ns();
    inflight = budget && atomic_load_explicit(&e->tail, memory_order_acquire) < interp;
    if (inflight) {
      if (cpu_device) break;
      if (!busy_since) busy_since = now;
      if (now - busy_since < VK_INFLIGHT_SPIN_NS) continue;
      if (now - busy_since < VK_INFLIGHT_MAX_NS) {
        struct timespec ts = {0, VK_INFLIGHT_POLL_NS};
        nanosleep(&ts, NULL);
        atomic_fetch_add_explicit(&e->inflight_polls, 1, memory_order_relaxed);
        start = 0;
        i = 63; /* the next pass looks at the ring and the clock again, without spinning first */
        continue;
      }
    }
    if (!start)
      start = now;
    else if (now - start >= budget)
      break;
  }
  atomic_fetch_add_explicit(&e->inflight_yields, yields, memory_order_relaxed);
}

static void *engine_main(void *arg) {
  vk_engine_t *e = arg;
  uint64_t interp = 0;
  pthread_mutex_lock(&e->lock);
  for (;;) {
    if (interp == atomic_load(&e->head) && !e->stop) {
      pthread_mutex_unlock(&e->lock);
      spin_for_work(e, interp);
      pthread_mutex_lock(&e->lock);
    }
    bool idle_wake = false;
    while (interp == atomic_load(&e->head) && !e->stop && !idle_wake) {
      e->engine_sleeping = true;
      pthread_cond_wait(&e->wake, &e->lock);
      e->engine_sleeping = false;
      idle_wake = e->engine_idle_wake;
      e->engine_idle_wake = false;
    }
    uint64_t head = atomic_load(&e->head);
    if (interp == head && !e->stop) continue; /* woken as the device went idle: spin before sleeping */
    if (interp == head) break;
    pthread_mutex_unlock(&e->lock);
    free_dead_blists(e);
    while (interp != head) {
      uint64_t pos = interp & (RING_WORDS - 1);
      uint64_t n = head - interp < RING_WORDS - pos ? head - interp : RING_WORDS - pos;
      if (!hcq__device_is_lost(e->dev)) run_list(e, e->ring + pos, (size_t)n, NULL);
      flush(e, NULL, 0);
      atomic_store_explicit(&e->interp_at, NULL, memory_order_relaxed);
      /* A JUMP pads to the end of the ring: the region then reaches it. */
      interp += n;
      pending_t r = {.kind = P_RETIRE, .sem = e->sem_last, .u.tail = interp};
      push_pending(e, &r);
    }
    pthread_mutex_lock(&e->lock);
  }
  e->engine_exited = true;
  pthread_cond_broadcast(&e->fifo_cv);
  pthread_mutex_unlock(&e->lock);
  atomic_store(&e->thread_done, true);
  return NULL;
}

/* ---- the completion thread ---- */

static void wait_gpu(vk_engine_t *e, uint64_t v) {
  vk_device_t *vd = e->vd;
  while (atomic_load(&e->gpu_done) < v && !atomic_load(&e->gpu_dead)) {
    VkSemaphoreWaitInfo wi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                              .semaphoreCount = 1,
                              .pSemaphores = &e->sem,
                              .pValues = &v};
    VkResult r = vd->fn.vkWaitSemaphores(vd->device, &wi, UINT64_C(200000000));
    if (r == VK_SUCCESS) {
      uint64_t done = atomic_load(&e->gpu_done);
      while (done < v && !atomic_compare_exchange_weak(&e->gpu_done, &done, v)) {
      }
      return;
    }
    if (r != VK_TIMEOUT) {
      atomic_store(&e->gpu_dead, true);
      lose(e, NULL, "the Vulkan driver reported %s", hcq__vk_result_name(r));
    }
  }
}

static void apply(vk_engine_t *e, const pending_t *p) {
  vk_device_t *vd = e->vd;
  switch (p->kind) {
    case P_BATCH: atomic_store_explicit(&e->prev, p->u.batch.last, memory_order_relaxed); break;
    case P_SIGNAL:
      hcq__signal_words_set(p->u.sig.word, p->u.sig.value);
      atomic_store(&e->signals_applied, p->u.sig.seq);
      break;
    case P_TS: {
      uint64_t ns = hcq__now_ns();
      if (p->u.ts.query != UINT32_MAX) {
        uint64_t ticks = 0;
        if (vd->fn.vkGetQueryPoolResults(vd->device, e->tsq, p->u.ts.query, 1, sizeof(ticks), &ticks, sizeof(ticks),
                                         VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS)
          ns = hcq__vk_ticks_to_ns(vd, ticks);
        atomic_fetch_add(&e->ts_done, 1);
      }
      atomic_store_explicit(&p->u.ts.word->timestamp, ns, memory_order_release);
      break;
    }
    case P_SEGTS: {
      seg_t *s = p->u.seg;
      bool ok = s->qp && vd->fn.vkGetQueryPoolResults(vd->device, s->qp, 0, s->nts, s->nts * sizeof(uint64_t),
                                                      s->ts_vals, sizeof(uint64_t),
                                                      VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS;
      uint64_t now = hcq__now_ns();
      for (uint32_t i = 0; i < s->nts; i++)
        atomic_store_explicit(&s->ts_words[i]->timestamp, ok ? hcq__vk_ticks_to_ns(vd, s->ts_vals[i]) : now,
                              memory_order_release);
      break;
    }
    case P_CB:
      pthread_mutex_lock(&e->lock);
      if (e->nfree_cbs < e->cap_cbs) e->free_cbs[e->nfree_cbs++] = p->u.cb;
      pthread_mutex_unlock(&e->lock);
      break;
    case P_RETIRE:
      pthread_mutex_lock(&e->lock);
      atomic_store(&e->tail, p->u.tail);
      pthread_cond_broadcast(&e->space);
      pthread_cond_broadcast(&e->idle);
      /* An engine that slept through its work (a CPU device) spins HCQ_SPIN_NS once the device is
       * idle, as one that waited awake does: a host that waited for the device and submits at once
       * then pays no wake-up call, nor the driver's threads preempting it from that call. */
      if (e->engine_sleeping && (p->u.tail == atomic_load(&e->head) || e->wake_at_retire)) {
        e->engine_idle_wake = true;
        e->wake_at_retire = false;
        pthread_cond_signal(&e->wake);
      }
      pthread_mutex_unlock(&e->lock);
      break;
    default: break;
  }
}

static void *completer_main(void *arg) {
  vk_engine_t *e = arg;
  pthread_mutex_lock(&e->lock);
  for (;;) {
    while (e->fifo_tail == e->fifo_head && !e->engine_exited) pthread_cond_wait(&e->fifo_cv, &e->lock);
    if (e->fifo_tail == e->fifo_head) break;
    pending_t p = e->fifo[e->fifo_tail % FIFO_CAP];
    pthread_mutex_unlock(&e->lock);
    uint64_t delay = atomic_load_explicit(&e->completion_delay_ns, memory_order_relaxed);
    if (delay) nanosleep(&(struct timespec){(time_t)(delay / 1000000000u), (long)(delay % 1000000000u)}, NULL);
    if (p.kind == P_BATCH) {
      atomic_store_explicit(&e->gpu_base, p.u.batch.base, memory_order_relaxed);
      atomic_store_explicit(&e->gpu_at, p.u.batch.first, memory_order_relaxed);
    }
    if (p.sem > atomic_load(&e->gpu_done)) wait_gpu(e, p.sem);
    if (p.dep) {
      vk_engine_t *other = e->vd->engines[!e->kind];
      pthread_mutex_lock(&other->lock);
      while (atomic_load(&other->signals_applied) < p.dep && !other->completer_exited)
        pthread_cond_wait(&other->fifo_space, &other->lock);
      pthread_mutex_unlock(&other->lock);
    }
    if (p.kind == P_BATCH) atomic_store_explicit(&e->gpu_at, NULL, memory_order_relaxed);
    apply(e, &p);
    pthread_mutex_lock(&e->lock);
    e->fifo_tail++;
    pthread_cond_broadcast(&e->fifo_space);
  }
  e->completer_exited = true;
  pthread_cond_broadcast(&e->fifo_space);
  pthread_mutex_unlock(&e->lock);
  atomic_store(&e->completer_done, true);
  return NULL;
}

/* ---- the vtable side ---- */

static size_t ring_need(size_t nwords, bool bound) { return bound ? HCQ__LEN_CALL : nwords; }

hcq_status_t hcq__vk_engine_reserve(vk_engine_t *e, size_t nwords, bool bound) {
  size_t n = ring_need(nwords, bound);
  if (n > RING_WORDS / 2)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: a queue of %zu words is larger than half the ring (%" PRIu64
                           " words): bind it first", e->dev->name, n, RING_WORDS / 2);
  uint64_t head = atomic_load(&e->head), pos = head & (RING_WORDS - 1);
  uint64_t need = n + (pos + n > RING_WORDS ? RING_WORDS - pos : 0);
  uint64_t deadline = 0;
  pthread_mutex_lock(&e->lock);
  while (RING_WORDS - (head - atomic_load(&e->tail)) < need) {
    if (hcq__device_is_lost(e->dev)) break;
    if (!deadline) deadline = hcq__deadline_after_ms(HCQ_TIMEOUT_DEFAULT);
    if (hcq__now_ns() >= deadline) {
      pthread_mutex_unlock(&e->lock);
      hcq_status_t st = hcq_status_make(HCQ_TIMEOUT, "%s: the %s queue ring stayed full (is its work waiting on a "
                                        "signal that is never set?)", e->dev->name, kind_name(e));
      return hcq__device_annotate_report(st, &e->dev, 1);
    }
    cond_wait_until(&e->space, &e->lock, deadline);
  }
  pthread_mutex_unlock(&e->lock);
  return hcq__device_check(e->dev);
}

hcq_status_t hcq__vk_engine_submit(vk_engine_t *e, const uint32_t *words, size_t nwords, bool bound) {
  hcq_status_t st = hcq__vk_engine_reserve(e, nwords, bound);
  if (st) return st;
  uint32_t call[HCQ__LEN_CALL];
  if (bound) {
    hcq__encode_call(call, words, nwords);
    words = call;
    nwords = HCQ__LEN_CALL;
  }
  uint64_t before = atomic_load(&e->head), head = before, pos = head & (RING_WORDS - 1);
  if (pos + nwords > RING_WORDS) {
    e->ring[pos] = HCQ__HDR(JUMP);
    head += RING_WORDS - pos;
  }
  memcpy(e->ring + (head & (RING_WORDS - 1)), words, nwords * sizeof(uint32_t));
  pthread_mutex_lock(&e->lock);
  atomic_store(&e->head, head + nwords);
  if (e->engine_sleeping) {
    /* Asleep with work not yet retired (a host that saw the device's last signal and submits at
     * once, before the completion thread retired that work): the retire wakes it, the host does
     * not pay the call. The engine sleeps only once it has run all it had, so that retire is queued. */
    if (atomic_load(&e->tail) < before)
      e->wake_at_retire = true;
    else if (!e->engine_idle_wake) { /* else that retire has woken it already: it finds this work */
      pthread_cond_signal(&e->wake);
      atomic_fetch_add_explicit(&e->wake_calls, 1, memory_order_relaxed);
    }
  }
  pthread_mutex_unlock(&e->lock);
  return NULL;
}

uint64_t hcq__vk_engine_submitted(vk_engine_t *e) { return atomic_load(&e->head); }
uint64_t hcq__vk_engine_completed(vk_engine_t *e) { return atomic_load(&e->tail); }

hcq_status_t hcq__vk_engine_wait_idle(vk_engine_t *e, uint64_t deadline) {
  uint64_t head = atomic_load(&e->head);
  pthread_mutex_lock(&e->lock);
  while (atomic_load(&e->tail) < head) {
    if (hcq__device_is_lost(e->dev) || hcq__now_ns() >= deadline) break;
    cond_wait_until(&e->idle, &e->lock, deadline);
  }
  bool done = atomic_load(&e->tail) >= head;
  pthread_mutex_unlock(&e->lock);
  hcq_status_t st = hcq__device_check(e->dev);
  if (st || done) return st;
  return hcq_status_make(HCQ_TIMEOUT, "%s: its %s queue still has work (waiting on a signal?)", e->dev->name,
                         kind_name(e));
}

void hcq__vk_engine_snapshot(vk_engine_t *e, hcq__engine_snapshot_t *out) {
  out->present = true;
  out->submitted = atomic_load(&e->head);
  out->completed = atomic_load(&e->tail);
  const uint32_t *cur = atomic_load_explicit(&e->blocked_at, memory_order_relaxed);
  const uint32_t *base = atomic_load_explicit(&e->interp_base, memory_order_relaxed);
  if (!cur) {
    cur = atomic_load_explicit(&e->gpu_at, memory_order_relaxed);
    base = atomic_load_explicit(&e->gpu_base, memory_order_relaxed);
  }
  if (!cur) {
    cur = atomic_load_explicit(&e->interp_at, memory_order_relaxed);
    base = atomic_load_explicit(&e->interp_base, memory_order_relaxed);
  }
  out->cur = cur;
  out->prev = atomic_load_explicit(&e->prev, memory_order_relaxed);
  out->call_base = base;
  if (out->completed >= out->submitted) out->cur = out->prev = NULL;
}

void hcq__vk_engine_wake(vk_engine_t *e) {
  pthread_mutex_lock(&e->lock);
  pthread_cond_broadcast(&e->wake);
  pthread_cond_broadcast(&e->space);
  pthread_cond_broadcast(&e->idle);
  pthread_cond_broadcast(&e->fifo_space);
  pthread_mutex_unlock(&e->lock);
}

void hcq__vk_engine_counters(vk_engine_t *e, hcq__vk_counters_t *out) {
  out->records += atomic_load(&e->records);
  out->rerecords += atomic_load(&e->rerecords);
  out->submits += atomic_load(&e->submits);
  out->host_waits += atomic_load(&e->host_waits);
  out->semaphore_waits += atomic_load(&e->sem_waits);
  out->signals += atomic_load(&e->signals_flushed);
  out->inflight_yields += atomic_load(&e->inflight_yields);
  out->inflight_polls += atomic_load(&e->inflight_polls);
  out->wake_calls += atomic_load(&e->wake_calls);
}

void hcq__vk_engine_slow_completion(vk_engine_t *e, uint64_t ns) {
  atomic_store_explicit(&e->completion_delay_ns, ns, memory_order_relaxed);
}

/* ---- fault reports ----
 * A kernel given a bad address faults inside the driver, on a thread hcq did not start (lavapipe's
 * compute threads): the shared fault handler (src/cpu/cpu_fault.c) asks what each engine had in
 * flight and prints it before the process dies. Engines are listed here while they exist. */
#define MAX_FAULT_ENGINES 64
static _Atomic(vk_engine_t *) g_fault_engines[MAX_FAULT_ENGINES];

static void describe_exec(hcq__fault_line_t *l, const uint32_t *c) {
  const hcq_program_t *p = (const hcq_program_t *)(uintptr_t)hcq__rd64(c + HCQ__EXEC_PROGRAM);
  hcq__fault_put(l, "kernel ");
  hcq__fault_put(l, p ? p->name : "?");
  if (c[HCQ__EXEC_TAG]) {
    hcq__fault_put(l, " (graph item ");
    hcq__fault_put_dec(l, c[HCQ__EXEC_TAG] - 1);
    hcq__fault_put(l, ")");
  }
}

/* Async-signal-safe: reads only; oldest batch first, as the queue runs them in order. */
static void describe_in_flight(hcq__fault_line_t *l) {
  for (size_t i = 0; i < MAX_FAULT_ENGINES; i++) {
    vk_engine_t *e = atomic_load_explicit(&g_fault_engines[i], memory_order_acquire);
    if (!e) continue;
    uint64_t done = atomic_load_explicit(&e->gpu_done, memory_order_relaxed);
    size_t start = l->len;
    hcq__fault_put(l, start ? "; " : "");
    hcq__fault_put(l, e->dev->name);
    hcq__fault_put(l, e->kind == HCQ_QUEUE_COMPUTE ? " compute queue: " : " copy queue: ");
    uint64_t shown = 0, more = 0;
    for (uint64_t sem = done + 1; sem <= done + FAULT_BATCHES; sem++) {
      const __typeof__(e->inflight[0]) *f = &e->inflight[sem % FAULT_BATCHES];
      if (atomic_load_explicit(&f->sem, memory_order_acquire) != sem) break; /* not handed over (yet) */
      for (uint32_t k = 0; k < f->nexecs; k++) {
        if (shown == FAULT_EXECS || k == FAULT_EXECS) {
          more += f->nexecs - k;
          break;
        }
        if (shown++) hcq__fault_put(l, ", ");
        describe_exec(l, f->execs[k]);
      }
    }
    if (!shown) {
      l->len = start; /* nothing of this engine's in flight */
      continue;
    }
    if (more) {
      hcq__fault_put(l, " and ");
      hcq__fault_put_dec(l, more);
      hcq__fault_put(l, " more");
    }
  }
}

static void fault_register(vk_engine_t *e, bool add) {
  for (size_t i = 0; i < MAX_FAULT_ENGINES; i++) {
    vk_engine_t *expected = add ? NULL : e;
    if (atomic_compare_exchange_strong(&g_fault_engines[i], &expected, add ? e : NULL)) return;
  }
}

hcq_status_t hcq__vk_engine_create(vk_device_t *vd, int kind, vk_queue_t *queue, vk_engine_t **out) {
  vk_engine_t *e = calloc(1, sizeof(*e));
  if (!e) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory opening %s", vd->dev->name);
  e->vd = vd;
  e->dev = vd->dev;
  e->kind = kind;
  e->q = queue;
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->wake, NULL);
  pthread_cond_init(&e->space, NULL);
  pthread_cond_init(&e->fifo_cv, NULL);
  pthread_cond_init(&e->fifo_space, NULL);
  pthread_cond_init(&e->idle, NULL);
  *out = e;
  e->ring = calloc(RING_WORDS, sizeof(uint32_t));
  e->fifo = calloc(FIFO_CAP, sizeof(pending_t));
  if (!e->ring || !e->fifo) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory opening %s", vd->dev->name);
  VkSemaphoreTypeCreateInfo ti = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                  .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
                                  .initialValue = 0};
  VkSemaphoreCreateInfo si = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &ti};
  VkResult r = vd->fn.vkCreateSemaphore(vd->device, &si, NULL, &e->sem);
  VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                .queueFamilyIndex = vd->family};
  if (r == VK_SUCCESS) r = vd->fn.vkCreateCommandPool(vd->device, &pi, NULL, &e->pool);
  VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                              .queryType = VK_QUERY_TYPE_TIMESTAMP,
                              .queryCount = TS_QUERIES};
  if (r == VK_SUCCESS && vd->timestamps) r = vd->fn.vkCreateQueryPool(vd->device, &qi, NULL, &e->tsq);
  if (r != VK_SUCCESS)
    return hcq_status_make(HCQ_DEVICE_ERROR, "%s: creating the %s queue engine failed: %s", vd->dev->name,
                           kind_name(e), hcq__vk_result_name(r));
  if (pthread_create(&e->thread, NULL, engine_main, e))
    return hcq_status_make(HCQ_UNAVAILABLE, "%s: cannot start a worker thread", vd->dev->name);
  e->thread_started = true;
  if (pthread_create(&e->completer, NULL, completer_main, e)) {
    /* Without a completion thread the engine must go too. */
    pthread_mutex_lock(&e->lock);
    e->stop = true;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    e->thread_started = false;
    return hcq_status_make(HCQ_UNAVAILABLE, "%s: cannot start a worker thread", vd->dev->name);
  }
  e->completer_started = true;
  /* "hcqv0.c" and "hcqv0.cd": VULKAN:0's compute engine and its completion thread ("x" for the copy
   * engine), told apart from the driver's threads in top, perf and /proc. */
  char name[16];
  snprintf(name, sizeof(name), "hcqv%d.%c", vd->dev->index % 10000, kind == HCQ_QUEUE_COMPUTE ? 'c' : 'x');
  pthread_setname_np(e->thread, name);
  snprintf(name, sizeof(name), "hcqv%d.%cd", vd->dev->index % 10000, kind == HCQ_QUEUE_COMPUTE ? 'c' : 'x');
  pthread_setname_np(e->completer, name);
  hcq__fault_add_describer(describe_in_flight);
  fault_register(e, true);
  return NULL;
}

bool hcq__vk_engine_stop(vk_engine_t *e, uint64_t deadline) {
  if (!e) return false;
  pthread_mutex_lock(&e->lock);
  e->stop = true;
  pthread_cond_broadcast(&e->wake);
  pthread_mutex_unlock(&e->lock);
  bool stuck = false;
  if (e->thread_started && !hcq__join_by(e->thread, &e->thread_done, deadline)) stuck = true;
  e->thread_started = false;
  if (e->completer_started && !hcq__join_by(e->completer, &e->completer_done, deadline)) stuck = true;
  e->completer_started = false;
  return stuck;
}

void hcq__vk_engine_destroy(vk_engine_t *e) {
  if (!e) return;
  fault_register(e, false);
  vk_device_t *vd = e->vd;
  free_dead_blists(e);
  while (e->blists) {
    blist_t *bl = e->blists;
    e->blists = bl->next;
    blist_free(e, bl);
  }
  if (e->pool) vd->fn.vkDestroyCommandPool(vd->device, e->pool, NULL); /* frees its command buffers */
  if (e->tsq) vd->fn.vkDestroyQueryPool(vd->device, e->tsq, NULL);
  if (e->sem) vd->fn.vkDestroySemaphore(vd->device, e->sem, NULL);
  if (e->scratch) hcq__vk_block_destroy(e->scratch);
  for (size_t i = 0; i < e->old_scratch.len; i++) hcq__vk_block_destroy(e->old_scratch.data[i]);
  hcq__vec_free(&e->old_scratch);
  free(e->free_cbs);
  free(e->ring);
  free(e->fifo);
  pthread_mutex_destroy(&e->lock);
  pthread_cond_destroy(&e->wake);
  pthread_cond_destroy(&e->space);
  pthread_cond_destroy(&e->fifo_cv);
  pthread_cond_destroy(&e->fifo_space);
  pthread_cond_destroy(&e->idle);
  free(e);
}
