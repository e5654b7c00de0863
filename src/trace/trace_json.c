/* The profile as Chrome trace event JSON (the format docs/profiling.md describes): what Perfetto
 * and chrome://tracing open. Times are written as exact integers of nanoseconds in microsecond
 * notation ("12.345"), so no slice moves by rounding. */
#include <inttypes.h>
#include <string.h>

#include "trace/trace_model.h"

static void put_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

/* ns as microseconds with three decimals, exactly. */
static void put_us(FILE *f, uint64_t ns) {
  fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000));
}

static const char *category(const hcq__trace_slice_t *s) {
  switch (s->kind) {
    case HCQ__SLICE_KERNEL: return "kernel";
    case HCQ__SLICE_COPY: return "copy";
    case HCQ__SLICE_SUBMIT: return "replay";
    case HCQ__SLICE_ALIGN: return "profiler";
    default: return "eager";
  }
}

typedef struct flow_ctx {
  FILE *f;
  const hcq__trace_view_t *v;
  uint64_t t0, next_id;
} flow_ctx_t;

static void put_flow_end(flow_ctx_t *c, const char *ph, size_t slice) {
  const hcq__trace_slice_t *s = hcq__view_slice(c->v, slice);
  const hcq__trace_track_t *t = &c->v->tracks[s->track];
  /* Bound to the slice by a timestamp inside it: its middle (a chained item starts exactly where
   * its predecessor ends, so the start would be ambiguous). */
  uint64_t mid = s->start_ns + (s->end_ns - s->start_ns) / 2 - c->t0;
  fprintf(c->f,
          ",\n{\"ph\": \"%s\", \"id\": %" PRIu64
          ", \"name\": \"dependency\", \"cat\": \"dependency\", ",
          ph, c->next_id);
  if (ph[0] == 'f') fprintf(c->f, "\"bp\": \"e\", ");
  fprintf(c->f, "\"pid\": %" PRIu32 ", \"tid\": %" PRIu32 ", \"ts\": ", t->pid, t->tid);
  put_us(c->f, mid);
  fputc('}', c->f);
}

static void put_flow(void *ctx, size_t src, size_t dst) {
  flow_ctx_t *c = ctx;
  c->next_id++;
  put_flow_end(c, "s", src);
  put_flow_end(c, "f", dst);
}

static void put_metadata(FILE *f, const char *what, uint32_t pid, uint32_t tid, const char *key,
                         const char *name, uint32_t number) {
  fprintf(f,
          ",\n{\"ph\": \"M\", \"name\": \"%s\", \"pid\": %" PRIu32 ", \"tid\": %" PRIu32
          ", \"args\": {\"%s\": ",
          what, pid, tid, key);
  if (name)
    put_string(f, name);
  else
    fprintf(f, "%" PRIu32, number);
  fputs("}}", f);
}

/* The metadata events that name and order the processes (host, then each device) and their
 * threads (host threads, device queues), so that viewers show the rows as the SVG does. */
static void put_track_names(FILE *f, const hcq__trace_view_t *v) {
  fputs(
      "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 1, \"tid\": 0, \"args\": {\"name\": "
      "\"host\"}}",
      f);
  put_metadata(f, "process_sort_index", 1, 0, "sort_index", NULL, 0);
  for (size_t i = 0; i < v->ntracks; i++) {
    const hcq__trace_track_t *t = &v->tracks[i];
    char name[64];
    if (t->is_device) {
      bool first = true; /* the first track of its device names the process */
      for (size_t k = 0; k < i; k++) first &= v->tracks[k].pid != t->pid;
      if (first) {
        put_metadata(f, "process_name", t->pid, 0, "name", t->device, 0);
        put_metadata(f, "process_sort_index", t->pid, 0, "sort_index", NULL, t->pid);
      }
      snprintf(name, sizeof(name), "%s %s queue", t->device, hcq__queue_kind_word(t->queue));
    } else {
      snprintf(name, sizeof(name), "host thread %" PRIu32, t->host_thread);
    }
    put_metadata(f, "thread_name", t->pid, t->tid, "name", name, 0);
    put_metadata(f, "thread_sort_index", t->pid, t->tid, "sort_index", NULL, t->order);
  }
}

/* One slice as a complete event: its graph, replay and item, or that it ran eagerly, in args. */
static void put_slice(FILE *f, const hcq__trace_view_t *v, const hcq__trace_slice_t *s,
                      uint64_t t0) {
  const hcq__trace_track_t *t = &v->tracks[s->track];
  uint64_t dur = s->end_ns >= s->start_ns ? s->end_ns - s->start_ns : 0;
  fputs(",\n{\"ph\": \"X\", \"name\": ", f);
  put_string(f, v->names[s->name]);
  fprintf(f, ", \"cat\": \"%s\", \"pid\": %" PRIu32 ", \"tid\": %" PRIu32 ", \"ts\": ", category(s),
          t->pid, t->tid);
  put_us(f, s->start_ns - t0);
  fputs(", \"dur\": ", f);
  put_us(f, dur);
  fputs(", \"args\": {", f);
  const char *sep = "";
  if (s->graph) {
    const hcq__trace_graph_t *tg = v->graphs[s->graph - 1];
    fprintf(f, "\"graph\": %" PRIu32 ", \"graph_label\": ", s->graph - 1);
    put_string(f, tg->label);
    fprintf(f, ", \"replay\": %" PRIu64, s->replay);
    if (s->kind != HCQ__SLICE_SUBMIT) fprintf(f, ", \"item\": %" PRIu32, s->item);
    sep = ", ";
  } else if (s->kind == HCQ__SLICE_KERNEL || s->kind == HCQ__SLICE_COPY) {
    fputs("\"eager\": true", f);
    sep = ", ";
  }
  if (s->bytes) {
    fprintf(f, "%s\"bytes\": %" PRIu64, sep, s->bytes);
    /* bytes per nanosecond is GB/s */
    if (dur && s->kind == HCQ__SLICE_COPY)
      fprintf(f, ", \"GB/s\": %.3f", (double)s->bytes / (double)dur);
  }
  fputs("}}", f);
}

/* hcq.clocks: each device queue's clock alignment, so a reader can judge the device times. */
static void put_clocks(FILE *f, const hcq__trace_view_t *v) {
  fputs(",\n \"clocks\": [", f);
  bool first = true;
  for (size_t i = 0; i < v->ntracks; i++) {
    const hcq__trace_track_t *t = &v->tracks[i];
    if (!t->is_device) continue;
    fprintf(f, "%s\n  {\"device\": ", first ? "" : ",");
    put_string(f, t->device);
    fprintf(f,
            ", \"queue\": \"%s\", \"offset_ns\": %" PRId64 ", \"round_trip_ns\": %" PRIu64
            ", \"samples\": %" PRIu32 "}",
            hcq__queue_kind_word(t->queue), t->offset_ns, t->round_trip_ns, t->samples);
    first = false;
  }
  fputs("]", f);
}

/* hcq.graphs: each graph's items and dependencies, which the slices refer to by index. */
static void put_graphs(FILE *f, const hcq__trace_view_t *v) {
  fputs(",\n \"graphs\": [", f);
  for (size_t g = 0; g < v->ngraphs; g++) {
    const hcq__trace_graph_t *tg = v->graphs[g];
    fprintf(f, "%s\n  {\"id\": %zu, \"label\": ", g ? "," : "", g);
    put_string(f, tg->label);
    fprintf(f, ", \"replays\": %" PRIu64 ", \"items\": [", tg->replays);
    for (size_t j = 0; j < tg->nitems; j++) {
      const hcq__trace_graph_item_rec_t *r = &tg->items[j];
      const hcq__trace_track_t *t = &v->tracks[r->track];
      fprintf(f, "%s\n    {\"name\": ", j ? "," : "");
      put_string(f, v->names[r->name]);
      fputs(", \"device\": ", f);
      put_string(f, t->device);
      fprintf(f, ", \"queue\": \"%s\", \"is_copy\": %s, \"bytes\": %" PRIu64 ", \"deps\": [",
              hcq__queue_kind_word(t->queue), r->kind == HCQ__SLICE_COPY ? "true" : "false",
              r->bytes);
      for (size_t d = 0; d < r->ndeps; d++) fprintf(f, "%s%" PRIu32, d ? ", " : "", r->deps[d]);
      fputs("]}", f);
    }
    fputs("]}", f);
  }
  fputs("]", f);
}

bool hcq__trace_write_json(FILE *f, const hcq__trace_view_t *v) {
  uint64_t t0 = UINT64_MAX;
  for (size_t i = 0; i < v->nslices; i++)
    if (hcq__view_slice(v, i)->start_ns < t0) t0 = hcq__view_slice(v, i)->start_ns;
  if (t0 == UINT64_MAX) t0 = 0;

  fputs("{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n", f);
  put_track_names(f, v);
  for (size_t i = 0; i < v->nslices; i++) put_slice(f, v, hcq__view_slice(v, i), t0);
  flow_ctx_t fc = {f, v, t0, 0};
  bool ok = hcq__trace_view_flows(v, 0, put_flow, &fc);

  fputs("\n],\n\"hcq\": {\"format\": \"hcq-trace/1\", \"ring\": ", f);
  fprintf(f,
          "{\"capacity\": %" PRIu64 ", \"slices\": %zu, \"dropped\": %" PRIu64
          "}, \"start_ns\": %" PRIu64,
          v->capacity, v->nslices, v->dropped, t0);
  put_clocks(f, v);
  put_graphs(f, v);
  fputs("}}\n", f);
  return ok && !ferror(f);
}
