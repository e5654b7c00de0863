/* What a Vulkan engine had in flight, for a fault report (vk_engine_internal.h).
 *
 * A kernel given a bad address faults inside the driver, on a thread hcq did not start (lavapipe's
 * compute threads): the shared fault handler (core/fault.h) asks what each engine had in
 * flight and prints it before the process dies. Engines are listed here while they exist. */
#include "core/command.h"
#include "core/device.h"
#include "core/fault.h"
#include "vulkan/vk_engine_internal.h"

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
      if (atomic_load_explicit(&f->sem, memory_order_acquire) != sem)
        break; /* not handed over (yet) */
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

void hcq__vk_fault_add_engine(vk_engine_t *e) {
  hcq__fault_add_describer(describe_in_flight);
  fault_register(e, true);
}

void hcq__vk_fault_remove_engine(vk_engine_t *e) { fault_register(e, false); }
