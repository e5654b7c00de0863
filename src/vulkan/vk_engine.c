/* The Vulkan queue engines (vk_engine_internal.h explains the scheme): the engine thread's loop
 * over the ring, the completion thread that retires what it submitted, creation and teardown, and
 * the entry points the device's vtable calls. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/command.h"
#include "core/device.h"
#include "core/hang_report.h"
#include "core/host_wait.h"
#include "core/options.h"
#include "core/signal.h"
#include "core/vec.h"
#include "vulkan/vk_engine_internal.h"
#include "vulkan/vk_testing.h"

#define RING_WORDS (UINT64_C(1) << 16)

/* An idle engine whose work is still on a GPU: spins as long as a small model's step takes there,
 * then polls (a longer step), and sleeps past the longest. On a CPU-emulated GPU it sleeps at once
 * (spin_for_work). */
#define VK_INFLIGHT_SPIN_NS (UINT64_C(200000))
#define VK_INFLIGHT_POLL_NS 20000L
#define VK_INFLIGHT_MAX_NS (UINT64_C(20000000))

/* ---- shared helpers ---- */

const char *hcq__vk_kind_name(const vk_engine_t *e) {
  return e->kind == HCQ_QUEUE_COMPUTE ? "compute" : "copy";
}

void hcq__vk_lose(vk_engine_t *e, const uint32_t *cmd, const char *fmt, ...) {
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  uint32_t tag = 0;
  if (cmd) {
    uint32_t op = HCQ__HDR_OP(cmd[0]);
    tag = op == HCQ__OP_EXEC   ? cmd[HCQ__EXEC_TAG]
          : op == HCQ__OP_COPY ? cmd[HCQ__COPY_TAG]
          : op == HCQ__OP_WAIT ? cmd[HCQ__WAIT_TAG]
                               : 0;
  }
  if (tag)
    hcq__device_mark_lost(e->dev, "its %s queue failed at graph item %" PRIu32 ": %s",
                          hcq__vk_kind_name(e), tag - 1, what);
  else
    hcq__device_mark_lost(e->dev, "its %s queue failed: %s", hcq__vk_kind_name(e), what);
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

/* ---- the engine thread ---- */

/* Waits without sleeping in the kernel while no work comes: for as long as what the engine handed
 * to the driver is in flight (spinning for the first VK_INFLIGHT_SPIN_NS, then polling every
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
  bool cpu_device = e->vd->on_host_cores, inflight = false;
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
    if (interp == head && !e->stop)
      continue; /* woken as the device went idle: spin before sleeping */
    if (interp == head) break;
    pthread_mutex_unlock(&e->lock);
    hcq__vk_free_dead_blists(e);
    while (interp != head) {
      uint64_t pos = interp & (RING_WORDS - 1);
      uint64_t n = head - interp < RING_WORDS - pos ? head - interp : RING_WORDS - pos;
      if (!hcq__device_is_lost(e->dev)) hcq__vk_run_list(e, e->ring + pos, (size_t)n, NULL);
      hcq__vk_flush(e, NULL, 0);
      atomic_store_explicit(&e->interp_at, NULL, memory_order_relaxed);
      /* A JUMP pads to the end of the ring: the region then reaches it. */
      interp += n;
      vk_pending_t r = {.kind = P_RETIRE, .sem = e->sem_last, .u.tail = interp};
      hcq__vk_push_pending(e, &r);
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

static void apply(vk_engine_t *e, const vk_pending_t *p) {
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
        if (vd->fn.vkGetQueryPoolResults(
                vd->device, e->tsq, p->u.ts.query, 1, sizeof(ticks), &ticks, sizeof(ticks),
                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS)
          ns = hcq__vk_ticks_to_ns(vd, ticks);
        atomic_fetch_add(&e->ts_done, 1);
      }
      atomic_store_explicit(&p->u.ts.word->timestamp, ns, memory_order_release);
      break;
    }
    case P_SEGTS: {
      vk_seg_t *s = p->u.seg;
      bool ok = s->qp && vd->fn.vkGetQueryPoolResults(
                             vd->device, s->qp, 0, s->nts, s->nts * sizeof(uint64_t), s->ts_vals,
                             sizeof(uint64_t),
                             VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS;
      uint64_t now = hcq__now_ns();
      for (uint32_t i = 0; i < s->nts; i++)
        atomic_store_explicit(&s->ts_words[i]->timestamp,
                              ok ? hcq__vk_ticks_to_ns(vd, s->ts_vals[i]) : now,
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
    while (e->fifo_tail == e->fifo_head && !e->engine_exited)
      pthread_cond_wait(&e->fifo_cv, &e->lock);
    if (e->fifo_tail == e->fifo_head) break;
    vk_pending_t p = e->fifo[e->fifo_tail % FIFO_CAP];
    pthread_mutex_unlock(&e->lock);
    uint64_t delay = atomic_load_explicit(&e->completion_delay_ns, memory_order_relaxed);
    if (delay)
      nanosleep(&(struct timespec){(time_t)(delay / 1000000000u), (long)(delay % 1000000000u)},
                NULL);
    if (p.kind == P_BATCH) {
      atomic_store_explicit(&e->gpu_base, p.u.batch.base, memory_order_relaxed);
      atomic_store_explicit(&e->gpu_at, p.u.batch.first, memory_order_relaxed);
    }
    if (p.sem > atomic_load(&e->gpu_done)) hcq__vk_wait_gpu(e, p.sem, true);
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
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: a queue of %zu words is larger than half the ring (%" PRIu64
                           " words): bind it first",
                           e->dev->name, n, RING_WORDS / 2);
  uint64_t head = atomic_load(&e->head), pos = head & (RING_WORDS - 1);
  uint64_t need = n + (pos + n > RING_WORDS ? RING_WORDS - pos : 0);
  uint64_t deadline = 0;
  pthread_mutex_lock(&e->lock);
  while (RING_WORDS - (head - atomic_load(&e->tail)) < need) {
    if (hcq__device_is_lost(e->dev)) break;
    if (!deadline) deadline = hcq__deadline_after_ms(HCQ_TIMEOUT_DEFAULT);
    if (hcq__now_ns() >= deadline) {
      pthread_mutex_unlock(&e->lock);
      hcq_status_t st =
          hcq_status_make(HCQ_TIMEOUT,
                          "%s: the %s queue ring stayed full (is its work waiting on a "
                          "signal that is never set?)",
                          e->dev->name, hcq__vk_kind_name(e));
      return hcq__device_annotate_report(st, &e->dev, 1);
    }
    cond_wait_until(&e->space, &e->lock, deadline);
  }
  pthread_mutex_unlock(&e->lock);
  return hcq__device_check(e->dev);
}

hcq_status_t hcq__vk_engine_submit(vk_engine_t *e, const uint32_t *words, size_t nwords,
                                   bool bound) {
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
     * not pay the call. The engine sleeps only once it has run all it had, so that retire is
     * queued. */
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
  return hcq_status_make(HCQ_TIMEOUT, "%s: its %s queue still has work (waiting on a signal?)",
                         e->dev->name, hcq__vk_kind_name(e));
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

/* ---- creation and teardown ---- */

hcq_status_t hcq__vk_engine_create(vk_device_t *vd, hcq_queue_kind_t kind, vk_queue_t *queue,
                                   vk_engine_t **out) {
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
  e->fifo = calloc(FIFO_CAP, sizeof(vk_pending_t));
  if (!e->ring || !e->fifo)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory opening %s", vd->dev->name);
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
  if (r == VK_SUCCESS && vd->timestamps)
    r = vd->fn.vkCreateQueryPool(vd->device, &qi, NULL, &e->tsq);
  if (r != VK_SUCCESS)
    return hcq_status_make(HCQ_DEVICE_ERROR, "%s: creating the %s queue engine failed: %s",
                           vd->dev->name, hcq__vk_kind_name(e), hcq__vk_result_name(r));
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
  snprintf(name, sizeof(name), "hcqv%d.%c", vd->dev->index % 10000,
           kind == HCQ_QUEUE_COMPUTE ? 'c' : 'x');
  pthread_setname_np(e->thread, name);
  snprintf(name, sizeof(name), "hcqv%d.%cd", vd->dev->index % 10000,
           kind == HCQ_QUEUE_COMPUTE ? 'c' : 'x');
  pthread_setname_np(e->completer, name);
  hcq__vk_fault_add_engine(e);
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
  if (e->completer_started && !hcq__join_by(e->completer, &e->completer_done, deadline))
    stuck = true;
  e->completer_started = false;
  return stuck;
}

void hcq__vk_engine_destroy(vk_engine_t *e) {
  if (!e) return;
  hcq__vk_fault_remove_engine(e);
  vk_device_t *vd = e->vd;
  hcq__vk_free_blists(e);
  if (e->pool)
    vd->fn.vkDestroyCommandPool(vd->device, e->pool, NULL); /* frees its command buffers */
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
