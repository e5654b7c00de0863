/* The CPU device's helper threads: they share the work-groups of big launches with the engine
 * (which publishes each job: pool_run in cpu_engine.c), and the layout places them and the engine
 * on the device's cores (cpu_layout.c). */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/device.h"
#include "core/host_wait.h"
#include "core/object.h"
#include "core/options.h"
#include "cpu/cpu_engine.h"
#include "cpu/cpu_internal.h"

/* ---- helpers: chunks of a launch ---- */

/* Takes chunks of the current job until none are left. */
void hcq__cpu_pool_work(cpu_pool_t *p) {
  for (;;) {
    /* Once a fault lost the device, the job's buffers may be freed: no chunk starts after. */
    if (hcq__device_is_lost(p->dev)) return;
    uint64_t first = atomic_fetch_add_explicit(&p->next_group, p->chunk, memory_order_relaxed);
    if (first >= p->total) return;
    uint64_t count = p->total - first < p->chunk ? p->total - first : p->chunk;
    run_groups(p->fn, p->bufs, p->vals, p->gsz, p->lsz, first, count);
    if (atomic_fetch_sub_explicit(&p->remaining, count, memory_order_acq_rel) == count) {
      atomic_fetch_add_explicit(&p->done_seq, 1, memory_order_seq_cst);
      if (atomic_load_explicit(&p->worker_sleeping, memory_order_seq_cst))
        hcq__futex_wake(&p->done_seq);
    }
  }
}

/* A host thread waiting on a contended machine (core/backend.h, assist): the job the engine has
 * published, entered as a helper enters it, while chunks of it are left; else a sleep until the
 * next job, the end of a queue entry (wake_assisting_hosts) or max_ns, unless s has reached want.
 * Not with isolation or validation: a kernel that faults on the host's thread could not be taken
 * back there. */
int hcq__cpu_pool_assist(cpu_pool_t *p, const hcq__signal_words_t *s, uint64_t want,
                         uint64_t max_ns) {
  if (p->dev->isolate || hcq__validating || hcq__device_is_lost(p->dev) ||
      !hcq__cpu_host_contended())
    return -1;
  uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
  if (g && !(g & 1)) {
    bool worked = false;
    atomic_fetch_add_explicit(&p->active, 1, memory_order_seq_cst);
    /* The publisher waits for active == 0 before it writes the next job: with g still current,
     * the job's fields stay as they are until this thread leaves. */
    if (atomic_load_explicit(&p->gen, memory_order_seq_cst) == g &&
        atomic_load_explicit(&p->next_group, memory_order_relaxed) < p->total) {
      hcq__cpu_pool_work(p);
      worked = true;
      atomic_fetch_add_explicit(&p->assisted, 1, memory_order_relaxed);
    }
    atomic_fetch_sub_explicit(&p->active, 1, memory_order_seq_cst);
    if (worked) return 1;
  }
  /* Counted before the signal is looked at again, as the engine sets it before it looks at the
   * count: either this thread sees the signal set or the engine sees it asleep and wakes it. */
  atomic_fetch_add_explicit(&p->hosts_assisting, 1, memory_order_seq_cst);
  atomic_store_explicit(&p->assist_want, want, memory_order_seq_cst);
  atomic_store_explicit(&p->assist_signal, s, memory_order_seq_cst);
  uint32_t seq = atomic_load_explicit(&p->assist_seq, memory_order_seq_cst);
  if (atomic_load_explicit(&s->value, memory_order_seq_cst) < want &&
      atomic_load_explicit(&p->gen, memory_order_seq_cst) == g && !atomic_load(&p->stop)) {
    hcq__futex_wait(&p->assist_seq, seq, max_ns);
    atomic_fetch_add_explicit(&p->assist_sleeps, 1, memory_order_relaxed);
    if (atomic_load_explicit(&p->assist_seq, memory_order_seq_cst) != seq)
      atomic_fetch_add_explicit(&p->assist_woken, 1, memory_order_relaxed);
  }
  /* not known: wake at every end */
  atomic_store_explicit(&p->assist_signal, NULL, memory_order_seq_cst);
  /* an engine that read the pointer before it went reads the value still: the caller may free the
   * signal once this returns (wake_assisting_hosts) */
  for (unsigned i = 0; atomic_load_explicit(&p->assist_peeking, memory_order_seq_cst); i++)
    hcq__spin_step(i);
  atomic_fetch_sub_explicit(&p->hosts_assisting, 1, memory_order_seq_cst);
  return 0;
}

/* A fault inside a kernel with isolation on comes back here: the device is lost. */
void hcq__cpu_isolated_fault(hcq__cpu_fault_ctx_t *ctx) {
  char what[400];
  hcq__cpu_fault_describe(ctx, ctx->fault_signal, ctx->fault_addr, what, sizeof(what));
  hcq__device_mark_lost(ctx->device, "%s", what);
}

static __attribute__((noinline)) void pool_work_isolated(cpu_pool_t *p, hcq__cpu_fault_ctx_t *ctx) {
  sigjmp_buf jump;
  if (sigsetjmp(jump, 0) == 0) {
    ctx->jump = &jump;
    hcq__cpu_pool_work(p);
  } else {
    hcq__cpu_isolated_fault(ctx);
  }
  ctx->jump = NULL;
}

static uint64_t spin_budget_after_job(void) {
  uint64_t ns = hcq__options()->spin_ns;
  return ns == 0 || ns > CPU_INFLIGHT_SPIN_NS ? ns : CPU_INFLIGHT_SPIN_NS; /* 0: spinning is off */
}

typedef struct cpu_helper_arg {
  cpu_pool_t *pool;
  unsigned index;
} cpu_helper_arg_t;

static void *helper_main(void *arg) {
  cpu_pool_t *p = ((cpu_helper_arg_t *)arg)->pool;
  unsigned index = ((cpu_helper_arg_t *)arg)->index;
  free(arg);
  void *altstack = p->altstacks[index];
  hcq__cpu_fault_thread_init(altstack);
  hcq__cpu_fault_ctx_t ctx = {p->dev, hcq__cpu_engine_current_command, p->engine, NULL, 0, 0};
  hcq__cpu_fault_ctx = &ctx;
  /* The generation before any job (jobs are 2, 4, ...): a job published before this thread first
   * ran (a launch right after the device opened, on a loaded machine) is still taken. Starting from
   * the current generation made every helper skip it, and the engine ran that launch alone. */
  uint32_t seen = 0;
  bool fresh = true; /* no job yet: sleep at once instead of spinning for one */
  for (;;) {
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    /* A helper outside the budget stays parked: it takes no jobs and burns nothing. */
    if (index >= atomic_load_explicit(&p->nactive, memory_order_acquire)) {
      uint32_t ls = atomic_load_explicit(&p->layout_seq, memory_order_seq_cst);
      if (index >= atomic_load_explicit(&p->nactive, memory_order_seq_cst) &&
          !atomic_load(&p->stop))
        hcq__futex_wait(&p->layout_seq, ls, 0);
      seen = atomic_load_explicit(&p->gen, memory_order_acquire);
      continue;
    }
    uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
    if (g == seen || (g & 1)) {
      /* After a job the next one is usually near: a step's launches follow each other, with
       * engine-only ones (too small to share) in between that can take tens of microseconds. A
       * helper that slept through them would be woken for every big launch, and a wake-up on a VM
       * costs about as much as a small launch. It spins as long as a blocked engine does. */
      uint64_t budget = spin_budget_after_job();
      if (fresh || !spin_while_equal32_for(&p->gen, g, budget)) {
        atomic_fetch_add_explicit(&p->helpers_sleeping, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&p->gen, memory_order_seq_cst) == g && !atomic_load(&p->stop))
          hcq__futex_wait(&p->gen, g, 0);
        atomic_fetch_sub_explicit(&p->helpers_sleeping, 1, memory_order_seq_cst);
      }
      continue;
    }
    /* Enter, then confirm the job did not change meanwhile (the publisher waits for active == 0).
     */
    atomic_fetch_add_explicit(&p->active, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&p->gen, memory_order_seq_cst) == g && !hcq__device_is_lost(p->dev)) {
      if (p->dev->isolate || hcq__validating) /* HCQ_VALIDATE: guard page faults (cpu_fault.c) */
        pool_work_isolated(p, &ctx);
      else
        hcq__cpu_pool_work(p);
    }
    atomic_fetch_sub_explicit(&p->active, 1, memory_order_seq_cst);
    seen = g;
    fresh = false;
  }
  hcq__cpu_fault_ctx = NULL;
  hcq__cpu_fault_thread_exit(altstack);
  atomic_store(&p->helper_exited[index], true);
  return NULL;
}

/* ---- threads and their placement ---- */

/* "hcq3.e" (engine of CPU:3), "hcq3.h1" (its second helper): visible in top, gdb and /proc. */
void hcq__cpu_name_thread(pthread_t t, const hcq_device_t *dev, const char *role, unsigned n) {
  char name[16];
  snprintf(name, sizeof(name), "hcq%d.%s%u", dev->index % 10000, role, n);
  pthread_setname_np(t, name);
}

static void pin(pthread_t t, const int *cores, unsigned n) {
  if (!n) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned i = 0; i < n; i++) CPU_SET(cores[i], &set);
  pthread_setaffinity_np(t, sizeof(set), &set);
}

void hcq__cpu_apply_layout(hcq_device_t *dev, const int *cores, unsigned ncores) {
  cpu_engine_t *e = engine_of(dev);
  cpu_pool_t *p = &e->pool;
  unsigned want = ncores > 1 ? ncores - 1 : 0;
  if (want > HCQ__CPU_MAX_HELPERS) want = HCQ__CPU_MAX_HELPERS;
  while (p->created < want) {
    unsigned i = p->created;
    cpu_helper_arg_t *arg = malloc(sizeof(*arg));
    if (!p->altstacks[i]) p->altstacks[i] = hcq__cpu_fault_stack_alloc();
    if (!arg) break;
    *arg = (cpu_helper_arg_t){p, i};
    if (pthread_create(&p->threads[i], NULL, helper_main, arg)) {
      free(arg);
      break;
    }
    hcq__cpu_name_thread(p->threads[i], dev, "h", i + 1);
    p->created++;
  }
  if (want > p->created) want = p->created;
  /* The engine on the share's first core, each helper on one of the others. (An application thread
   * that waits on the engine's core costs every replay two context switches: see
   * docs/cpu-device.md.) */
  pin(e->thread, cores, ncores ? 1 : 0);
  for (unsigned i = 0; i < want; i++) pin(p->threads[i], &cores[i + 1], 1);
  atomic_store_explicit(&p->nactive, want, memory_order_seq_cst);
  /* Parked helpers wake to see whether they are in the budget now. */
  atomic_fetch_add_explicit(&p->layout_seq, 1, memory_order_seq_cst);
  hcq__futex_wake(&p->layout_seq);
  /* Helpers leaving the budget may sleep on the job word: wake them (without a new job, so that no
   * helper spins for one) to park. */
  hcq__futex_wake(&p->gen);
  dev->threads = 1 + want;
}
