/* The profiler's summarising side: the view of the ring that trace.c hands out under its lock,
 * numbered here into processes, threads and rows, its dependency edges, and the two files written
 * from it (hcq_trace_write's JSON, hcq_trace_write_svg's timeline). Nothing here records: the
 * recording side (trace.c) keeps the ring and its lock to itself, and the writers see only a view.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_model.h"

static int cmp_device_names(const void *a, const void *b) {
  const hcq__trace_track_t *x = *(hcq__trace_track_t *const *)a,
                           *y = *(hcq__trace_track_t *const *)b;
  int c = strverscmp(x->device, y->device);
  return c ? c : (int)x->queue - (int)y->queue;
}

/* Numbers processes (host 1, devices 2, 3, ... by name) and threads, and the rows. */
static bool number_tracks(hcq__trace_view_t *v) {
  hcq__trace_track_t **dev = malloc((v->ntracks + 1) * sizeof(*dev));
  if (!dev) return false;
  size_t ndev = 0;
  uint32_t order = 0;
  for (uint32_t h = 1; h <= v->host_threads; h++)
    for (size_t i = 0; i < v->ntracks; i++)
      if (!v->tracks[i].is_device && v->tracks[i].host_thread == h) {
        v->tracks[i].pid = 1;
        v->tracks[i].tid = h;
        v->tracks[i].order = order++;
      }
  for (size_t i = 0; i < v->ntracks; i++)
    if (v->tracks[i].is_device) dev[ndev++] = &v->tracks[i];
  qsort(dev, ndev, sizeof(*dev), cmp_device_names);
  uint32_t pid = 1;
  for (size_t i = 0; i < ndev; i++) {
    if (i == 0 || strcmp(dev[i]->device, dev[i - 1]->device)) pid++;
    dev[i]->pid = pid;
    dev[i]->tid = 1000000u + pid * 16u + dev[i]->queue;
    dev[i]->order = order++;
  }
  free(dev);
  return true;
}

bool hcq__trace_view_flows(const hcq__trace_view_t *v, size_t first,
                           void (*fn)(void *ctx, size_t src, size_t dst), void *ctx) {
  size_t most = 0;
  for (size_t g = 0; g < v->ngraphs; g++)
    if (v->graphs[g]->nitems > most) most = v->graphs[g]->nitems;
  size_t *at = malloc((most + 1) * sizeof(*at));
  if (!at) return false;
  /* The slices of one replay were pushed together: consecutive slices with the same graph and
   * replay (the oldest group may have lost its head to the ring). */
  for (size_t i = first; i < v->nslices;) {
    const hcq__trace_slice_t *s = hcq__view_slice(v, i);
    if (!s->graph || s->kind == HCQ__SLICE_SUBMIT) {
      i++;
      continue;
    }
    const hcq__trace_graph_t *tg = v->graphs[s->graph - 1];
    for (size_t j = 0; j < tg->nitems; j++) at[j] = SIZE_MAX;
    size_t end = i;
    for (; end < v->nslices; end++) {
      const hcq__trace_slice_t *e = hcq__view_slice(v, end);
      if (e->graph != s->graph || e->replay != s->replay || e->kind == HCQ__SLICE_SUBMIT) break;
      if (e->item < tg->nitems) at[e->item] = end;
    }
    for (size_t k = i; k < end; k++) {
      uint32_t j = hcq__view_slice(v, k)->item;
      const hcq__trace_graph_item_rec_t *r = &tg->items[j];
      for (size_t d = 0; d < r->ndeps; d++)
        if (r->deps[d] < tg->nitems && at[r->deps[d]] != SIZE_MAX) fn(ctx, at[r->deps[d]], k);
    }
    i = end;
  }
  free(at);
  return true;
}

typedef bool (*writer_fn)(FILE *f, const hcq__trace_view_t *v);

typedef struct write_job {
  FILE *f;
  writer_fn writer;
  const char *path;
  hcq_status_t st;
} write_job_t;

/* Under the profiler's lock: the view numbered, then written. */
static void write_view(hcq__trace_view_t *v, void *ctx) {
  write_job_t *job = ctx;
  if (!number_tracks(v))
    job->st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory writing %s", job->path);
  else if (!job->writer(job->f, v))
    job->st = hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s: %s", job->path, strerror(errno));
}

static hcq_status_t write_with(const char *path, writer_fn writer, const char *what) {
  if (!path || !*path) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: no file name", what);
  if (!hcq_trace_active())
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "%s %s: the profiler is off", what, path);
  hcq__trace_collect_pending();
  FILE *f = fopen(path, "w");
  if (!f) return hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s: %s", path, strerror(errno));
  write_job_t job = {f, writer, path, NULL};
  if (!hcq__trace_with_view(write_view, &job))
    job.st =
        hcq_status_make(HCQ_FAILED_PRECONDITION, "%s %s: the profiler was stopped", what, path);
  hcq_status_t st = job.st;
  if (fclose(f) != 0 && !st)
    st = hcq_status_make(HCQ_UNAVAILABLE, "cannot write %s: %s", path, strerror(errno));
  return st;
}

hcq_status_t hcq_trace_write(const char *path) {
  return write_with(path, hcq__trace_write_json, "hcq_trace_write");
}

hcq_status_t hcq_trace_write_svg(const char *path) {
  return write_with(path, hcq__trace_write_svg_view, "hcq_trace_write_svg");
}
