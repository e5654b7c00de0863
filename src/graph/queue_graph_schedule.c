/* The queue graph's scheduling (docs/design.md, "The HCQ graph", build steps 4-5; the scheme is in
 * queue_graph.c's opening comment): each item's waits, the device signals it waits for, the signal
 * it sets and where its timestamps go. */
#include <stdlib.h>

#include "core/buffer.h"
#include "core/remote.h"
#include "core/status.h"
#include "graph/queue_graph_internal.h"

static hcq_status_t oom(void) {
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory building a graph");
}

typedef struct {
  uint32_t queue, value;
} dep_t;

static int dep_by_value_desc(const void *a, const void *b) {
  const dep_t *x = a, *y = b;
  return x->value < y->value   ? 1
         : x->value > y->value ? -1
                               : (x->queue > y->queue) - (x->queue < y->queue);
}

/* What scheduling has learned so far, item by item, and its scratch. */
typedef struct sched_state {
  size_t nq;
  uint32_t *queue_access; /* [q][q']: highest value of q' that q waited for */
  uint64_t *queue_knows;  /* devices each queue knows are ready */
  uint64_t *item_knows;   /* what its queue knew after each item */
  dep_t *deps;            /* one item's dependencies */
  hcq__deps_t tracker;
  hcq__u32_vec_t rdeps; /* one item's resource dependencies */
} sched_state_t;

/* Which items are another rank's alone, and which devices this process runs queues for. */
static void mark_foreign_and_active(queue_graph_t *g) {
  hcq__runner_t *r = &g->base.runner;
  for (size_t d = 0; d < g->ndev; d++) g->active[d] = !hcq__device_is_remote(r->devices[d]);
  for (uint32_t j = 0; j < r->nitems; j++) {
    g->sched[j].foreign = hcq__item_is_foreign(&r->items[j]);
    if (!g->sched[j].foreign)
      g->active[hcq__runner_device_index(r, hcq__item_device(&r->items[j]))] = true;
  }
}

/* The item's dependencies as (queue, value) in ss->deps, highest value first, less those queue q
 * already waited for; q learns what the waited-for items knew. Returns how many are kept. */
static size_t new_deps(queue_graph_t *g, sched_state_t *ss, uint32_t q) {
  size_t nd = 0;
  dep_t *deps = ss->deps;
  for (size_t i = 0; i < ss->rdeps.len; i++) {
    uint32_t k = ss->rdeps.data[i];
    deps[nd++] = (dep_t){g->sched[k].queue, k + 1};
  }
  if (g->last_item[q] != NO_ITEM) deps[nd++] = (dep_t){q, g->last_item[q] + 1};
  qsort(deps, nd, sizeof(dep_t), dep_by_value_desc);
  size_t kept = 0;
  for (size_t i = 0; i < nd; i++) {
    uint32_t *seen = &ss->queue_access[q * ss->nq + deps[i].queue];
    if (*seen >= deps[i].value) continue;
    *seen = deps[i].value;
    ss->queue_knows[q] |= ss->item_knows[deps[i].value - 1];
    deps[kept++] = deps[i];
  }
  return kept;
}

/* Device readiness: the item waits for the device signal of every device of its buffers that its
 * queue does not know is ready. */
static hcq_status_t add_ready_waits(queue_graph_t *g, sched_state_t *ss, uint32_t q,
                                    const hcq__item_access_t *acc, item_sched_t *s) {
  hcq__runner_t *r = &g->base.runner;
  hcq_status_t st = NULL;
  s->ready_at = (uint32_t)g->ready.len;
  for (size_t i = 0; i < acc->n; i++) {
    uint32_t bd = hcq__runner_device_index(r, acc->bufs[i]->dev);
    if (!g->active[bd] || (ss->queue_knows[q] & (UINT64_C(1) << bd))) continue;
    ss->queue_knows[q] |= UINT64_C(1) << bd;
    if (!hcq__vec_push(&g->ready, bd)) st = oom();
  }
  s->nready = (uint32_t)(g->ready.len - s->ready_at);
  return st;
}

static hcq_status_t schedule_item(queue_graph_t *g, sched_state_t *ss, uint32_t j) {
  hcq__runner_t *r = &g->base.runner;
  const hcq_exec_item_t *it = &r->items[j];
  item_sched_t *s = &g->sched[j];
  uint32_t d = hcq__runner_device_index(r, hcq__item_device(it));
  uint32_t q = 2 * d + (it->kind == HCQ_ITEM_TRANSFER);
  s->queue = q;
  if (s->foreign) {
    /* Not in the tracker either: no item here waits for it (what it exchanges with this rank is
     * a message, which orders itself). */
    s->waits_at = (uint32_t)g->waits.len, s->ready_at = (uint32_t)g->ready.len,
    s->deps_at = (uint32_t)g->deps.len;
    s->start_stamp = 2 * j, s->end_stamp = 2 * j + 1;
    return NULL;
  }
  hcq__item_access_t acc;
  hcq__item_access(it, &acc);
  uintptr_t keys[HCQ_MAX_KERNEL_BUFS];
  for (size_t i = 0; i < acc.n; i++) keys[i] = (uintptr_t)hcq_buffer_base(acc.bufs[i]);
  HCQ__TRY(hcq__deps_access(&ss->tracker, keys, acc.writes, acc.n, j, &ss->rdeps));
  size_t kept = new_deps(g, ss, q);
  HCQ__TRY(add_ready_waits(g, ss, q, &acc, s));

  /* In-order queues need no waits on themselves. */
  bool in_order =
      (it->kind == HCQ_ITEM_TRANSFER) || (r->devices[d]->caps & HCQ_CAP_IN_ORDER_QUEUES);
  s->waits_at = (uint32_t)g->waits.len;
  for (size_t i = 0; i < kept; i++) {
    if (in_order && ss->deps[i].queue == q) continue;
    hcq_graph_wait_t w = {ss->deps[i].queue, ss->deps[i].value};
    if (!hcq__vec_push(&g->waits, w)) return oom();
    g->sched[ss->deps[i].value - 1].signal_value = ss->deps[i].value;
  }
  s->nwaits = (uint32_t)(g->waits.len - s->waits_at);
  if (it->kind == HCQ_ITEM_TRANSFER) {
    s->signal_value = j + 1;
    g->copied_into[hcq__runner_device_index(r, it->transfer.dst->dev)] |= UINT64_C(1) << d;
  }

  s->deps_at = (uint32_t)g->deps.len;
  for (size_t i = 0; i < ss->rdeps.len; i++)
    if (!hcq__vec_push(&g->deps, ss->rdeps.data[i])) return oom();
  s->ndeps = (uint32_t)ss->rdeps.len;

  /* A chained item (no waits at all) starts when the previous item of its queue ended. */
  bool chained = s->nwaits == 0 && s->nready == 0 && g->last_item[q] != NO_ITEM;
  s->start_stamp = chained ? 2 * g->last_item[q] + 1 : 2 * j;
  s->end_stamp = 2 * j + 1;

  ss->item_knows[j] = ss->queue_knows[q];
  g->last_item[q] = j;
  return NULL;
}

hcq_status_t hcq__queue_graph_schedule(queue_graph_t *g) {
  hcq__runner_t *r = &g->base.runner;
  sched_state_t ss = {.nq = 2 * g->ndev};
  ss.queue_access = calloc(ss.nq * ss.nq, sizeof(uint32_t));
  ss.queue_knows = calloc(ss.nq, sizeof(uint64_t));
  ss.item_knows = calloc(r->nitems, sizeof(uint64_t));
  ss.deps = malloc((r->nitems + 1) * sizeof(dep_t));
  hcq__deps_init(&ss.tracker);
  hcq_status_t st = NULL;
  if (!ss.queue_access || !ss.queue_knows || !ss.item_knows || !ss.deps) {
    st = oom();
    goto done;
  }
  for (size_t d = 0; d < g->ndev; d++) ss.queue_knows[2 * d] = UINT64_C(1) << d;
  for (size_t q = 0; q < ss.nq; q++) g->last_item[q] = NO_ITEM;
  mark_foreign_and_active(g);
  for (uint32_t j = 0; j < r->nitems; j++)
    if ((st = schedule_item(g, &ss, j))) goto done;
done:
  hcq__vec_free(&ss.rdeps);
  hcq__deps_deinit(&ss.tracker);
  free(ss.queue_access);
  free(ss.queue_knows);
  free(ss.item_knows);
  free(ss.deps);
  return st;
}
