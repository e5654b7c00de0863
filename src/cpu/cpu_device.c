/* The CPU device: host memory, one engine thread that interprets the command words of both queue
 * kinds (compute and copy) from their rings, and helper threads that share the work-groups of big
 * launches.
 *
 * Threads. The CPU devices open in one process share the machine's cores without oversubscribing
 * them (cpu_layout.c): each device gets its own cores where there are enough, its engine pinned to
 * the first and its active helpers to the others. One engine serves both queues of its device, so a
 * device never has more busy threads than it has cores.
 *
 * The files: cpu_engine.c (the engine thread), cpu_pool.c (the helper threads, and where each
 * thread runs), this one (the producers' side of the rings, opening and closing the device); the
 * structures they share are in cpu_engine.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/command.h"
#include "core/device.h"
#include "core/hang_report.h"
#include "core/host_wait.h"
#include "core/options.h"
#include "core/remote.h"
#include "cpu/cpu_engine.h"
#include "cpu/cpu_internal.h"
#include "cpu/cpu_testing.h"

/* Work-items (groups x group size) one launch may have: more would keep a device busy for days. */
#define CPU_MAX_WORK_ITEMS (UINT64_C(1) << 40)

static int cpu_assist(hcq_device_t *dev, const hcq__signal_words_t *s, uint64_t want,
                      uint64_t max_ns) {
  return hcq__cpu_pool_assist(&engine_of(dev)->pool, s, want, max_ns);
}

static const hcq__device_vtable_t cpu_vtable;

hcq__cpu_share_t *hcq__cpu_share(hcq_device_t *dev) { return &engine_of(dev)->share; }

uint64_t hcq__cpu_host_passes(hcq_device_t *dev) {
  return dev && dev->vt == &cpu_vtable ? atomic_load(&engine_of(dev)->host_passes) : 0;
}

uint64_t hcq__cpu_kernel_stamps(hcq_device_t *dev) {
  return dev && dev->vt == &cpu_vtable ? atomic_load(&engine_of(dev)->kernel_stamps) : 0;
}

uint64_t hcq__cpu_cadence_spins(hcq_device_t *dev) {
  return dev && dev->vt == &cpu_vtable ? atomic_load(&engine_of(dev)->cadence_spins) : 0;
}

void hcq__cpu_assist_sleeps(hcq_device_t *dev, uint64_t *sleeps, uint64_t *woken) {
  bool cpu = dev && dev->vt == &cpu_vtable;
  *sleeps = cpu ? atomic_load(&engine_of(dev)->pool.assist_sleeps) : 0;
  *woken = cpu ? atomic_load(&engine_of(dev)->pool.assist_woken) : 0;
}

uint64_t hcq__cpu_host_handbacks(hcq_device_t *dev) {
  return dev && dev->vt == &cpu_vtable ? atomic_load(&engine_of(dev)->host_handbacks) : 0;
}

/* ---- producers ---- */

/* Waits until the ring has need free words; under the device lock, so one producer at a time. */
static hcq_status_t wait_for_space(hcq_device_t *dev, cpu_queue_t *q, hcq_queue_kind_t kind,
                                   uint64_t head, uint64_t need) {
  uint64_t deadline = 0;
  for (;;) {
    uint32_t seq = atomic_load_explicit(&q->tail_seq, memory_order_seq_cst);
    if (RING_WORDS - (head - atomic_load_explicit(&q->tail, memory_order_acquire)) >= need)
      return NULL;
    hcq_status_t st = hcq__device_check(dev);
    if (st) return st;
    uint64_t now = hcq__now_ns();
    if (!deadline) deadline = hcq__deadline_after_ms(HCQ_TIMEOUT_DEFAULT);
    if (now >= deadline) {
      st = hcq_status_make(
          HCQ_TIMEOUT,
          "%s: the %s queue ring stayed full (is its work waiting on a signal that is never set?)",
          dev->name, kind == HCQ_QUEUE_COMPUTE ? "compute" : "copy");
      return hcq__device_annotate_report(st, &dev, 1);
    }
    atomic_fetch_add_explicit(&q->space_waiters, 1, memory_order_seq_cst);
    if (RING_WORDS - (head - atomic_load_explicit(&q->tail, memory_order_seq_cst)) < need)
      hcq__futex_wait(&q->tail_seq, seq, deadline - now < 1000000 ? deadline - now : 1000000);
    atomic_fetch_sub_explicit(&q->space_waiters, 1, memory_order_seq_cst);
  }
}

/* Ring words a submission takes: bound lists travel as one CALL. */
static size_t ring_words(size_t nwords, bool bound) { return bound ? HCQ__LEN_CALL : nwords; }

static hcq_status_t cpu_reserve(hcq_device_t *dev, hcq_queue_kind_t kind, size_t nwords,
                                bool bound) {
  cpu_queue_t *q = &engine_of(dev)->q[kind];
  nwords = ring_words(nwords, bound);
  if (nwords > RING_WORDS / 2)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: a queue of %zu words is larger than half the ring (%" PRIu64
                           " words): bind it first",
                           dev->name, nwords, RING_WORDS / 2);
  uint64_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
  uint64_t pos = head & (RING_WORDS - 1);
  uint64_t pad = pos + nwords > RING_WORDS ? RING_WORDS - pos : 0;
  return wait_for_space(dev, q, kind, head, pad + nwords);
}

static hcq_status_t cpu_submit(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words,
                               size_t nwords, bool bound) {
  hcq_status_t st = cpu_reserve(dev, kind, nwords, bound);
  if (st) return st;
  cpu_engine_t *e = engine_of(dev);
  cpu_queue_t *q = &e->q[kind];
  uint32_t call[HCQ__LEN_CALL];
  if (bound) {
    hcq__encode_call(call, words, nwords);
    words = call;
    nwords = HCQ__LEN_CALL;
  }
  uint64_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
  uint64_t pos = head & (RING_WORDS - 1);
  if (pos + nwords > RING_WORDS) {
    q->ring[pos] = HCQ__HDR(JUMP);
    head += RING_WORDS - pos;
  }
  memcpy(q->ring + (head & (RING_WORDS - 1)), words, nwords * sizeof(uint32_t));
  atomic_store_explicit(&q->head, head + nwords, memory_order_seq_cst);
  wake_engine(e);
  return NULL;
}

static uint64_t cpu_submitted(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&engine_of(dev)->q[kind].head, memory_order_acquire);
}

static uint64_t cpu_completed(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&engine_of(dev)->q[kind].tail, memory_order_acquire);
}

static void cpu_snapshot(hcq_device_t *dev, hcq_queue_kind_t kind, hcq__engine_snapshot_t *out) {
  cpu_queue_t *q = &engine_of(dev)->q[kind];
  out->submitted = atomic_load_explicit(&q->head, memory_order_acquire);
  out->completed = atomic_load_explicit(&q->tail, memory_order_acquire);
  hcq__cursor_snapshot(&q->c, out);
}

static void cpu_lost(hcq_device_t *dev) {
  cpu_engine_t *e = engine_of(dev);
  wake_engine(e);
  atomic_fetch_add(&e->pool.done_seq, 1);
  hcq__futex_wake(&e->pool.done_seq);
}

/* ---- lifecycle ---- */

static bool cpu_stop(hcq_device_t *dev) {
  cpu_engine_t *e = engine_of(dev);
  hcq__cpu_layout_remove(dev);
  /* A healthy device has no work left; a lost one drops it at once. Only a kernel that never
   * returns keeps a thread past this. */
  uint64_t deadline = hcq__now_ns() + (hcq__device_is_lost(dev) ? 500 : 10000) * UINT64_C(1000000);
  bool abandoned = false;
  if (e->started) {
    atomic_store(&e->stop, true);
    atomic_fetch_add(&e->doorbell, 1);
    hcq__futex_wake(&e->doorbell);
    atomic_fetch_add(&e->defer_word, 1);
    hcq__futex_wake(&e->defer_word);
    wake_engine(e);
    if (!hcq__join_by(e->thread, &e->exited, deadline)) abandoned = true;
    e->started = false;
  }
  cpu_pool_t *p = &e->pool;
  atomic_store(&p->stop, true);
  atomic_fetch_add(&p->gen, 2);
  hcq__futex_wake(&p->gen);
  atomic_fetch_add(&p->layout_seq, 1);
  hcq__futex_wake(&p->layout_seq);
  for (unsigned i = 0; i < p->created; i++)
    if (!hcq__join_by(p->threads[i], &p->helper_exited[i], deadline)) abandoned = true;
  p->created = 0;
  return abandoned;
}

static void cpu_destroy(hcq_device_t *dev) {
  cpu_engine_t *e = engine_of(dev);
  if (!e) return;
  for (int k = 0; k < 2; k++) free(e->q[k].ring);
  free(e->altstack);
  for (unsigned i = 0; i < HCQ__CPU_MAX_HELPERS; i++) free(e->pool.altstacks[i]);
  free(e);
  dev->backend = NULL;
}

static const hcq__device_vtable_t cpu_vtable = {
    .destroy = cpu_destroy,
    .stop = cpu_stop,
    .mem_alloc = hcq__cpu_mem_alloc,
    .mem_free = hcq__cpu_mem_free,
    .reserve = cpu_reserve,
    .submit = cpu_submit,
    .submitted = cpu_submitted,
    .completed = cpu_completed,
    .snapshot = cpu_snapshot,
    .memory_info = hcq__cpu_memory_info,
    .lost = cpu_lost,
    .host_run = hcq__cpu_host_run,
    .program_compile = hcq__cpu_compile,
    .program_unload = hcq__cpu_unload,
    .waiter_sleeps_at_once = hcq__cpu_waiter_sleeps_at_once,
    .assist = cpu_assist,
};

static hcq_status_t cpu_device_create(int index, const hcq_device_options_t *opts,
                                      hcq_device_t *dev) {
  (void)index;
  hcq__cpu_fault_install();
  /* Producer and consumer fields sit on separate cache lines: 64-byte aligned. */
  cpu_engine_t *e = aligned_alloc(64, (sizeof(*e) + 63) & ~(size_t)63);
  if (!e) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating %s", dev->name);
  memset(e, 0, sizeof(*e));
  dev->vt = &cpu_vtable;
  dev->backend = e;
  dev->caps = HCQ_CAP_IN_ORDER_QUEUES | HCQ_CAP_COPY_QUEUE | HCQ_CAP_HOST_CALLABLE |
              HCQ_CAP_COMPILE_C | HCQ_CAP_HOST_MEMORY | HCQ__CAP_ENGINE_REMOTE_COPY;
  dev->threads = 1;
  /* A CPU kernel loops over its group's threads itself: only the total work per launch is bounded.
   */
  dev->limits.max_work_items = CPU_MAX_WORK_ITEMS;
  e->dev = dev;
  e->share.threads_asked = opts ? opts->threads : 0;
  e->pool.dev = dev;
  e->pool.engine = e;
  e->pool.min_parallel = hcq__options()->cpu_min_parallel;
  e->fault = (hcq__cpu_fault_ctx_t){dev, hcq__cpu_engine_current_command, e, NULL, 0, 0};
  e->altstack = hcq__cpu_fault_stack_alloc();
  for (int k = 0; k < 2; k++) {
    e->q[k].ring = calloc(RING_WORDS, sizeof(uint32_t));
    if (!e->q[k].ring) {
      cpu_destroy(dev);
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating %s", dev->name);
    }
  }
  if (pthread_create(&e->thread, NULL, hcq__cpu_engine_main, e)) {
    cpu_destroy(dev);
    return hcq_status_make(HCQ_UNAVAILABLE, "%s: cannot start its engine thread", dev->name);
  }
  e->started = true;
  hcq__cpu_name_thread(e->thread, dev, "e", 0);
  hcq__cpu_layout_add(dev);
  return NULL;
}

static void cpu_query(hcq_device_info_t *info) {
  const hcq__options_t *o = hcq__options();
  info->available = true;
  info->count = 1;
  size_t ncores = hcq__cpu_core_count();
  char threads[96];
  if (o->cpu_threads)
    snprintf(threads, sizeof(threads), "%u threads per device (HCQ_CPU_THREADS)", o->cpu_threads);
  else
    snprintf(threads, sizeof(threads),
             "%zu cores split between the open devices (1 device: %zu threads, 2: %zu each)",
             ncores, ncores, ncores >= 2 ? ncores / 2 : 1);
  snprintf(info->description, sizeof(info->description),
           "CPU:N (any N): %s, C kernels compiled by %.64s, function-pointer kernels, copy queue",
           threads, o->cc ? o->cc : "cc");
}

const hcq__backend_t hcq__cpu_backend = {
    .kind = HCQ_DEVICE_CPU,
    .source_key = "c",
    .query = cpu_query,
    .open = cpu_device_create,
    /* No binary formats: a shared object would be machine code hcq cannot check, run in-process,
     * and tied to one OS, libc and CPU; C source through the kernel cache gives the same reuse. */
    .binary_formats = 0,
    .kernel_caps = HCQ_CAP_HOST_CALLABLE | HCQ_CAP_COMPILE_C,
    .no_compile_why =
        "CPU devices load no precompiled kernels; their kernels come from C source "
        "(hcq_program_create), compiled once into the kernel cache",
};
