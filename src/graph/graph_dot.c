/* Graphs as Graphviz DOT: the items, the queues they were scheduled onto, and which resource
 * dependencies became waits (hcq_graph_item_schedule) and which scheduling dropped. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buffer.h"
#include "graph/graph_internal.h"

/* Text inside a DOT double-quoted string: quotes and backslashes escaped, newlines as \n. */
static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if (*s == '\n')
      fputs("\\n", f);
    else if ((unsigned char)*s >= 0x20)
      fputc(*s, f);
  }
}

static void item_label(const hcq_graph_t *g, size_t j, const hcq_graph_item_schedule_t *s,
                       char *out, size_t size) {
  const hcq_exec_item_t *it = &g->runner.items[j];
  size_t n = 0;
#define ADD(...)                                                         \
  do {                                                                   \
    if (n < size) n += (size_t)snprintf(out + n, size - n, __VA_ARGS__); \
  } while (0)
  if (it->kind == HCQ_ITEM_KERNEL) {
    const hcq_kernel_item_t *k = &it->kernel;
    ADD("%zu: %s(", j, k->program->name);
    for (size_t b = 0; b < k->nbufs; b++) {
      bool written = k->outs == NULL; /* the rule of hcq_kernel_item_t */
      for (size_t o = 0; !written && o < k->nouts; o++) written |= k->outs[o] == b;
      ADD("%s%s%s", b ? ", " : "", k->bufs[b]->label, written ? "*" : "");
    }
    ADD(")\n%s", k->program->dev->name);
  } else {
    const hcq_transfer_item_t *t = &it->transfer;
    ADD("%zu: copy %s -> %s\n%s -> %s, %" PRIu64 " bytes", j, t->src->dev->name, t->dst->dev->name,
        t->src->label, t->dst->label, t->bytes);
  }
  if (s) {
    for (size_t r = 0; r < s->nready; r++)
      ADD("\nwaits for %s ready", g->runner.devices[s->ready_devices[r]]->name);
    if (s->signal_value) ADD("\nsignals %" PRIu32, s->signal_value);
  }
#undef ADD
}

/* Edges from the schedule: each resource dependency kept as a wait, or dropped, and waits that are
 * no resource dependency. */
static void write_schedule_edges(FILE *f, size_t gi, const hcq_graph_item_schedule_t *sched,
                                 size_t n) {
  for (size_t j = 0; j < n; j++) {
    const hcq_graph_item_schedule_t *s = &sched[j];
    bool *matched = calloc(s->nwaits + 1, sizeof(*matched)); /* waits explained by a dependency */
    if (!matched) continue; /* out of memory: the item's edges are left out */
    for (size_t d = 0; d < s->ndeps; d++) {
      uint32_t dep = s->deps[d];
      size_t w = 0;
      while (w < s->nwaits &&
             !(s->waits[w].queue == sched[dep].queue && s->waits[w].value == dep + 1))
        w++;
      if (w < s->nwaits) {
        matched[w] = true;
        fprintf(
            f,
            "  g%zu_i%" PRIu32
            " -> g%zu_i%zu [class=\"wait\", color=\"#1f4e79\", penwidth=1.6, label=\"wait\"];\n",
            gi, dep, gi, j);
      } else {
        fprintf(f,
                "  g%zu_i%" PRIu32
                " -> g%zu_i%zu [class=\"dropped\", style=dashed, color=\"#999999\", "
                "fontcolor=\"#777777\", label=\"%s\"];\n",
                gi, dep, gi, j, sched[dep].queue == s->queue ? "in order" : "implied");
      }
    }
    for (size_t w = 0; w < s->nwaits; w++) {
      if (matched[w]) continue;
      fprintf(f,
              "  g%zu_i%" PRIu32
              " -> g%zu_i%zu [class=\"order\", style=dotted, color=\"#1f4e79\", label=\"wait\"];\n",
              gi, s->waits[w].value - 1, gi, j);
    }
    free(matched);
  }
}

/* A graph kind without a queue schedule: its resource dependencies as they are. */
static void write_dependency_edges(FILE *f, const hcq_graph_t *g, size_t gi) {
  hcq__deps_t tracker;
  hcq__deps_init(&tracker);
  hcq__u32_vec_t deps = {0};
  uintptr_t keys[HCQ_MAX_KERNEL_BUFS];
  for (uint32_t j = 0; j < g->runner.nitems; j++) {
    hcq__item_access_t acc;
    hcq__item_access(&g->runner.items[j], &acc);
    for (size_t i = 0; i < acc.n; i++) keys[i] = (uintptr_t)hcq_buffer_base(acc.bufs[i]);
    hcq_status_t st = hcq__deps_access(&tracker, keys, acc.writes, acc.n, j, &deps);
    if (st) {
      hcq_status_destroy(st);
      break;
    }
    for (size_t d = 0; d < deps.len; d++)
      fprintf(f, "  g%zu_i%" PRIu32 " -> g%zu_i%" PRIu32 " [class=\"dep\"];\n", gi, deps.data[d],
              gi, j);
  }
  hcq__vec_free(&deps);
  hcq__deps_deinit(&tracker);
}

static void write_graph(FILE *f, const hcq_graph_t *g, size_t gi) {
  size_t n = g->runner.nitems;
  hcq_graph_item_schedule_t *sched = calloc(n + 1, sizeof(*sched));
  bool scheduled = sched && g->vt->item_schedule;
  for (size_t j = 0; j < n && scheduled; j++) {
    hcq_status_t st = g->vt->item_schedule(g, j, &sched[j]);
    scheduled = st == NULL;
    hcq_status_destroy(st);
  }
  fprintf(f, "  subgraph cluster_g%zu {\n    label=\"", gi);
  put_escaped(f, g->runner.label ? g->runner.label : "graph");
  fprintf(f, ", %s graph\";\n    style=rounded; color=\"#555555\"; fontsize=13;\n", g->vt->kind);

  /* A cluster per queue (or per device without a schedule), in queue order. */
  size_t ngroups = 2 * g->runner.ndevices;
  for (size_t q = 0; q < ngroups; q++) {
    bool any = false;
    for (size_t j = 0; j < n; j++) {
      const hcq_exec_item_t *it = &g->runner.items[j];
      size_t group = scheduled ? sched[j].queue
                               : 2 * hcq__runner_device_index(&g->runner, hcq__item_device(it)) +
                                     (it->kind == HCQ_ITEM_TRANSFER);
      if (group != q) continue;
      if (!any) {
        fprintf(f,
                "    subgraph cluster_g%zu_q%zu {\n      label=\"%s %s queue\"; style=filled; "
                "fillcolor=\"%s\";\n",
                gi, q, g->runner.devices[q / 2]->name, q & 1 ? "copy" : "compute",
                q & 1 ? "#fdf1e4" : "#eef3f9");
        any = true;
      }
      char label[1024];
      item_label(g, j, scheduled ? &sched[j] : NULL, label, sizeof(label));
      fprintf(f, "      g%zu_i%zu [label=\"", gi, j);
      put_escaped(f, label);
      fprintf(f, "\", fillcolor=\"%s\"];\n", it->kind == HCQ_ITEM_TRANSFER ? "#f5c28f" : "#bcd4ec");
    }
    if (any) fputs("    }\n", f);
  }
  fputs("  }\n", f);

  if (scheduled)
    write_schedule_edges(f, gi, sched, n);
  else
    write_dependency_edges(f, g, gi);
  free(sched);
}

hcq_status_t hcq_graph_write_dot(hcq_graph_t *const *graphs, size_t ngraphs, const char *path) {
  if (!path || !*path)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_write_dot: no file name");
  if (ngraphs && !graphs)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_graph_write_dot: %zu graphs but the array is NULL", ngraphs);
  for (size_t i = 0; i < ngraphs; i++) {
    if (!graphs[i])
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_graph_write_dot: graph %zu is NULL", i);
    if (hcq__validating && graphs[i]->magic != HCQ__OBJ_LIVE)
      return hcq_status_make(HCQ_FAILED_PRECONDITION,
                             "hcq_graph_write_dot: graph %zu was destroyed (HCQ_VALIDATE)", i);
  }
  FILE *f = fopen(path, "w");
  if (!f) return hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s: %s", path, strerror(errno));
  fputs(
      "digraph hcq {\n"
      "  graph [fontname=\"Helvetica\", rankdir=TB, newrank=true];\n"
      "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n"
      "  edge [fontname=\"Helvetica\", fontsize=9];\n",
      f);
  for (size_t i = 0; i < ngraphs; i++) write_graph(f, graphs[i], i);
  fputs("}\n", f);
  bool bad = ferror(f) != 0;
  if (fclose(f) != 0 || bad)
    return hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s: %s", path, strerror(errno));
  return NULL;
}
