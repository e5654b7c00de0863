/* Capture and batching (include/hcq/jit.h): recorded items split into graph batches, replayed with
 * new inputs and variable values; leftovers run eagerly, and the report says why. */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/buffer.h"
#include "core/capture.h"
#include "core/fence.h"
#include "core/host_wait.h"
#include "core/options.h"
#include "core/queue.h"
#include "core/status.h"
#include "graph/graph_internal.h"
#include "hcq/jit.h"

/* ---- capture ---- */

typedef struct bound_value {
  const hcq_expr_t *var; /* retained */
  int64_t value;         /* the newest */
  bool changed;          /* bound to more than one value during the capture */
} bound_value_t;

struct hcq_capture {
  HCQ__VEC(hcq_exec_item_t) items;
  size_t host_copies;
  char first_host_copy[192]; /* the first one, in words */
  /* Other threads' work on devices while the capture is open (core/capture.h); watch.owner is the
   * capturing thread: only it may end or abort the capture. */
  hcq__capture_watch_t watch;
  HCQ__VEC(bound_value_t) bound; /* hcq_launch_sym's values, one per variable */
  hcq_status_t error;            /* first failure to record (memory): reported by end */
  hcq__recorder_t recorder;
};

static _Thread_local hcq_capture_t *g_capturing;

static void record(hcq_capture_t *c, const hcq_exec_item_t *it) {
  if (c->error) return;
  hcq_exec_item_t copy;
  if (!hcq__vec_reserve_for(&c->items, c->items.len + 1) ||
      (c->error = hcq__exec_item_copy(it, &copy))) {
    if (!c->error)
      c->error =
          hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory recording item %zu", c->items.len);
    return;
  }
  c->items.data[c->items.len++] = copy;
}

static void record_launch(void *ctx, const hcq_launch_desc_t *d) {
  hcq_operand_t vals[HCQ_MAX_KERNEL_VALS];
  uint32_t all[HCQ_MAX_KERNEL_BUFS];
  for (size_t i = 0; i < d->nvals; i++) vals[i] = hcq_imm(d->vals[i]);
  for (size_t i = 0; i < d->nbufs; i++) all[i] = (uint32_t)i;
  /* The one rule (graph.h): no outs array, every buffer written (recorded as the full list, so that
   * items and saved files say it explicitly); an empty array, nothing. */
  hcq_kernel_item_t k = {
      d->program, d->bufs, d->nbufs, d->outs ? d->outs : all, d->outs ? d->nouts : d->nbufs, vals,
      d->nvals,   {{0}},   {{0}}};
  for (int i = 0; i < 3; i++)
    k.global[i] = hcq_imm(d->global[i]), k.local[i] = hcq_imm(d->local[i]);
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL, .kernel = k};
  record(ctx, &it);
}

static void record_transfer(void *ctx, hcq_buffer_t *dst, hcq_buffer_t *src, uint64_t size) {
  hcq_exec_item_t it = {.kind = HCQ_ITEM_TRANSFER, .transfer = {dst, src, size}};
  record(ctx, &it);
}

static void record_item(void *ctx, const hcq_exec_item_t *it) { record(ctx, it); }
static void record_host_copy(void *ctx, const char *what, const hcq_buffer_t *buf, uint64_t size) {
  hcq_capture_t *c = ctx;
  if (c->host_copies++ == 0)
    snprintf(c->first_host_copy, sizeof(c->first_host_copy),
             "%s of %" PRIu64 " bytes %s %s, after item %zu", what, size,
             strcmp(what, "copyin") ? "from" : "to", buf->label, c->items.len);
}

/* Keeps vals as values of the capture, the newest value of each variable replacing older ones. A
 * failure to keep them (memory) fails the capture's end. */
static void record_bind(void *ctx, const hcq_var_value_t *vals, size_t nvals) {
  hcq_capture_t *c = ctx;
  for (size_t i = 0; !c->error && i < nvals; i++) {
    size_t k = 0;
    while (k < c->bound.len && c->bound.data[k].var != vals[i].var) k++;
    if (k < c->bound.len) {
      c->bound.data[k].changed |= c->bound.data[k].value != vals[i].value;
      c->bound.data[k].value = vals[i].value;
    } else if (hcq__vec_push(&c->bound, ((bound_value_t){vals[i].var, vals[i].value, false}))) {
      hcq_expr_retain(vals[i].var);
    } else {
      c->error =
          hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory keeping the values of a capture");
    }
  }
}

hcq_status_t hcq_capture_begin(hcq_capture_t **out) {
  if (!out) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_capture_begin: out_capture is NULL");
  *out = NULL;
  if (g_capturing)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "this thread is already capturing");
  hcq_capture_t *c = calloc(1, sizeof(*c));
  if (!c) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory starting a capture");
  c->recorder = (hcq__recorder_t){record_launch,    record_transfer, record_item,
                                  record_host_copy, record_bind,     c};
  g_capturing = c;
  hcq__recorder = &c->recorder;
  hcq__capture_watch_open(&c->watch);
  *out = c;
  return NULL;
}

size_t hcq_capture_item_count(const hcq_capture_t *c) { return c ? c->items.len : 0; }

static void capture_free(hcq_capture_t *c) {
  if (g_capturing == c) {
    g_capturing = NULL;
    hcq__recorder = NULL;
  }
  hcq__capture_watch_close(&c->watch);
  hcq__vec_free(&c->watch.others);
  for (size_t i = 0; i < c->items.len; i++) hcq__exec_item_release(&c->items.data[i]);
  hcq__vec_free(&c->items);
  for (size_t i = 0; i < c->bound.len; i++) hcq_expr_release(c->bound.data[i].var);
  hcq__vec_free(&c->bound);
  hcq_status_destroy(c->error);
  free(c);
}

/* The recorder lives in the capturing thread's thread-local state: another thread cannot take it
 * down without racing with that thread's launches. */
static bool on_owner_thread(const hcq_capture_t *c) {
  return pthread_equal(c->watch.owner, pthread_self()) && g_capturing == c;
}

void hcq_capture_abort(hcq_capture_t *c) {
  if (!c) return;
  if (!on_owner_thread(c)) {
    fprintf(stderr, "hcq: hcq_capture_abort: the capture belongs to another thread; ignored\n");
    atomic_fetch_add(&hcq__validation_errors, 1);
    return;
  }
  capture_free(c);
}

/* ---- the replayable object ---- */

typedef struct segment {
  size_t first, count;
  hcq_graph_t *graph; /* NULL: the items run eagerly */
} segment_t;

struct hcq_jit {
  hcq__runner_t runner;
  HCQ__VEC(segment_t) segments;
  HCQ__VEC(size_t) batch_sizes;
  hcq_var_value_t *vals; /* the runner's variables, values filled per replay */
  uint32_t *slots_at;    /* per item: first index into runner.slots (slots are in item order) */
  char *text;
  size_t text_len, text_cap;
  hcq_jit_report_t report;
  bool from_capture; /* values for unused variables are reported (see check_unused_vars) */
  bool strict_vars;
  unsigned inflight; /* replays of each batch graph in flight (hcq_jit_options_t; 0: the default) */
  hcq_jit_warning_fn on_warning;
  void *warning_ctx;
  HCQ__VEC(const hcq_expr_t *) unused; /* variables already reported as unused (retained) */
};

static void say(hcq_jit_t *jit, const char *fmt, ...) HCQ_PRINTF(2, 3);
static void say(hcq_jit_t *jit, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char line[1024];
  int n = vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof(line) - 1 ? (size_t)n : sizeof(line) - 1;
  if (!hcq__vec_reserve((void **)&jit->text, &jit->text_cap, jit->text_len + len + 2, 1)) return;
  memcpy(jit->text + jit->text_len, line, len);
  jit->text_len += len;
  jit->text[jit->text_len++] = '\n';
  jit->text[jit->text_len] = '\0';
}

/* A line of the report that the caller is also told about as a warning. */
static void report_warning(hcq_jit_t *jit, const char *msg) {
  say(jit, "%s", msg);
  jit->report.text = jit->text ? jit->text : "";
  if (jit->on_warning)
    jit->on_warning(jit->warning_ctx, msg);
  else
    fprintf(stderr, "hcq: warning: %s\n", msg);
}

/* In a capture, a value for a variable that no item uses changes nothing, which the caller would
 * not expect: the variable's value went to hcq_launch() as a number, so the capture holds a
 * constant. Report each such variable once, in the report and as a warning, or fail in strict mode.
 * (Items given to hcq_jit_create carry their own symbols; extra values are ignored, as by graphs.)
 */
static hcq_status_t check_unused_vars(hcq_jit_t *jit, const hcq_var_value_t *vals, size_t nvals,
                                      const char *when) {
  if (!jit->from_capture) return NULL;
  const hcq__runner_t *r = &jit->runner;
  for (size_t i = 0; i < nvals; i++) {
    const hcq_expr_t *var = vals[i].var;
    bool known = false;
    for (size_t k = 0; k < r->vars.len && !known; k++) known = r->vars.data[k] == var;
    for (size_t k = 0; k < jit->unused.len && !known; k++) known = jit->unused.data[k] == var;
    if (known) continue;
    const char *name = hcq_var_name(var) ? hcq_var_name(var) : "(not a variable)";
    char msg[256];
    snprintf(msg, sizeof(msg),
             "%s: variable %s has a value but no captured item uses it, so the value changes "
             "nothing (hcq_launch "
             "records numbers as constants; hcq_launch_sym keeps them variable)",
             when, name);
    if (jit->strict_vars) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s", msg);
    if (hcq__vec_push(&jit->unused, var)) hcq_expr_retain(var);
    jit->report.unused_vars++;
    report_warning(jit, msg);
  }
  return NULL;
}

/* The graph that can hold work on a device (hcq__graph_class: one class per runner, the queue
 * graph's host-memory devices apart from its GPU kinds); 0 for none. A batch closes where it
 * changes (docs/design.md, "Capture and batching"). */
static uintptr_t graph_kind_of(const hcq_device_t *dev) { return hcq__graph_class(dev); }

static uintptr_t item_graph_kind(const hcq_exec_item_t *it, const char **why) {
  if (it->kind == HCQ_ITEM_KERNEL) {
    uintptr_t k = graph_kind_of(it->kernel.program->dev);
    if (!k) *why = "its device has no graph runner";
    return k;
  }
  if (!hcq__graph_holds_transfers(it->transfer.src->dev)) {
    *why = "the graph of its device kind holds kernels only";
    return 0;
  }
  uintptr_t k = graph_kind_of(it->transfer.src->dev);
  if (!k || graph_kind_of(it->transfer.dst->dev) != k) {
    *why = "a transfer is graphable only when both ends are devices of the graph's kind";
    return 0;
  }
  return k;
}

static void describe_item(const hcq_exec_item_t *it, char *buf, size_t size) {
  if (it->kind == HCQ_ITEM_KERNEL)
    snprintf(buf, size, "%s on %s", it->kernel.program->name, it->kernel.program->dev->name);
  else
    snprintf(buf, size, "transfer %s -> %s", it->transfer.src->dev->name,
             it->transfer.dst->dev->name);
}

static hcq_status_t add_segment(hcq_jit_t *jit, size_t first, size_t count, hcq_graph_t *graph) {
  segment_t s = {first, count, graph};
  if (!hcq__vec_push(&jit->segments, s))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory batching");
  return NULL;
}

static hcq_status_t add_eager(hcq_jit_t *jit, size_t first, size_t count, const char *why) {
  char what[160];
  describe_item(&jit->runner.items[first], what, sizeof(what));
  if (count == 1)
    say(jit, "item %zu (%s) runs eagerly: %s", first, what, why);
  else
    say(jit, "items %zu-%zu run eagerly: %s", first, first + count - 1, why);
  jit->report.eager_items += count;
  return add_segment(jit, first, count, NULL);
}

/* Closes a batch: a graph when it can be built, else eager items with the reason. */
static hcq_status_t flush(hcq_jit_t *jit, size_t first, size_t count, size_t *max_batch,
                          bool profile) {
  if (count == 0) return NULL;
  if (count == 1) return add_eager(jit, first, 1, "a batch of one item is not graphed");
  hcq__runner_t *r = &jit->runner;
  hcq_graph_options_t opts = {.profile = profile, .inflight = jit->inflight};
  hcq_graph_t *g = NULL;
  hcq_status_t st = hcq_graph_create(r->items + first, count, r->inputs, r->ninputs, jit->vals,
                                     r->vars.len, &opts, &g);
  if (st) {
    if (hcq_status_code(st) == HCQ_OUT_OF_MEMORY) return st;
    char why[768];
    snprintf(why, sizeof(why), "building their graph failed: %s", hcq_status_message(st));
    hcq_status_destroy(st);
    return add_eager(jit, first, count, why);
  }
  hcq__runner_mark(&g->runner, NULL, r); /* the jit's graph: a leak report lists it under the jit */
  if (!hcq__vec_reserve_for(&jit->batch_sizes, jit->batch_sizes.len + 1) ||
      (st = add_segment(jit, first, count, g))) {
    hcq_status_destroy(hcq_graph_destroy(g));
    return st ? st : hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory batching");
  }
  jit->batch_sizes.data[jit->batch_sizes.len++] = count;
  jit->report.graphed_items += count;
  *max_batch *= 2;
  return NULL;
}

static hcq_status_t batch(hcq_jit_t *jit, size_t first_batch_size, bool profile) {
  hcq__runner_t *r = &jit->runner;
  size_t max_batch = first_batch_size, start = 0, len = 0;
  uintptr_t batch_kind = 0;
  for (size_t j = 0; j < r->nitems; j++) {
    const char *why = NULL;
    uintptr_t kind = item_graph_kind(&r->items[j], &why);
    bool fits = kind && len > 0 && kind == batch_kind && len < max_batch;
    if (!fits && len > 0) {
      HCQ__TRY(flush(jit, start, len, &max_batch, profile));
      len = 0;
    }
    if (!kind) {
      HCQ__TRY(add_eager(jit, j, 1, why));
      continue;
    }
    if (len == 0) start = j, batch_kind = kind;
    len++;
  }
  return flush(jit, start, len, &max_batch, profile);
}

static void jit_free(hcq_jit_t *jit) {
  for (size_t i = 0; i < jit->segments.len; i++)
    if (jit->segments.data[i].graph)
      hcq_status_destroy(hcq_graph_destroy(jit->segments.data[i].graph));
  hcq__vec_free(&jit->segments);
  hcq__vec_free(&jit->batch_sizes);
  free(jit->vals);
  free(jit->slots_at);
  free(jit->text);
  for (size_t i = 0; i < jit->unused.len; i++) hcq_expr_release(jit->unused.data[i]);
  hcq__vec_free(&jit->unused);
  hcq__runner_deinit(&jit->runner);
  free(jit);
}

/* when: "capture" for a capture's jit (its unused variables are reported), NULL for hcq_jit_create.
 */
static hcq_status_t jit_build(const hcq_exec_item_t *items, size_t nitems,
                              hcq_buffer_t *const *inputs, size_t ninputs,
                              const hcq_var_value_t *vals, size_t nvals,
                              const hcq_jit_options_t *options, size_t host_copies,
                              const char *when, hcq_jit_t **out) {
  hcq_jit_t *jit = calloc(1, sizeof(*jit));
  if (!jit) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating a jit");
  hcq_status_t st =
      hcq__runner_init(&jit->runner, items, nitems, inputs, ninputs, vals, nvals, "jit");
  if (st) {
    free(jit);
    return st;
  }
  hcq__runner_t *r = &jit->runner;
  r->null_input_keeps = true; /* a replay's NULL input keeps its binding (hcq/jit.h) */
  if (when) hcq__runner_mark(r, "hcq_capture_end", NULL);
  if (options) {
    jit->strict_vars = options->strict_vars;
    jit->on_warning = options->on_warning;
    jit->warning_ctx = options->warning_ctx;
  }
  jit->vals = calloc(r->vars.len + 1, sizeof(*jit->vals));
  jit->slots_at = calloc(r->nitems + 1, sizeof(*jit->slots_at));
  if (!jit->vals || !jit->slots_at) {
    st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating a jit");
    goto fail;
  }
  for (size_t i = 0; i < r->vars.len; i++)
    jit->vals[i] = (hcq_var_value_t){r->vars.data[i], r->values[i]};
  for (size_t j = 0, s = 0; j <= r->nitems; j++) {
    while (s < r->slots.len && r->slots.data[s].item < j) s++;
    jit->slots_at[j] = (uint32_t)s;
  }
  size_t first = options && options->first_batch_size ? options->first_batch_size
                                                      : hcq__options()->jit_batch_size;
  jit->inflight = options ? options->inflight : 0;
  if (options && options->eager_only)
    st = add_eager(jit, 0, r->nitems, "graphs are turned off (eager only)");
  else
    st = batch(jit, first, options && options->profile);
  if (st) goto fail;
  jit->report.items = r->nitems;
  jit->report.batches = jit->batch_sizes.len;
  jit->report.batch_sizes = jit->batch_sizes.data;
  jit->report.host_copies = host_copies;
  /* The summary goes first: prepend it to the per-item reasons. */
  char *reasons = jit->text;
  jit->text = NULL;
  jit->text_len = jit->text_cap = 0;
  char sizes[512] = "";
  size_t used = 0;
  for (size_t i = 0; i < jit->batch_sizes.len && used + 24 < sizeof(sizes); i++)
    used += (size_t)snprintf(sizes + used, sizeof(sizes) - used, "%s%zu", i ? ", " : "",
                             jit->batch_sizes.data[i]);
  say(jit, "%zu items: %zu graphed in %zu batch%s%s%s%s, %zu eager", r->nitems,
      jit->report.graphed_items, jit->batch_sizes.len, jit->batch_sizes.len == 1 ? "" : "es",
      used ? " (" : "", sizes, used ? ")" : "", jit->report.eager_items);
  if (reasons) {
    say(jit, "%s", reasons);
    jit->text[--jit->text_len] = '\0'; /* reasons end with their own newline */
    free(reasons);
  }
  jit->report.text = jit->text ? jit->text : "";
  jit->from_capture = when != NULL;
  if ((st = check_unused_vars(jit, vals, nvals, when))) goto fail;
  *out = jit;
  return NULL;
fail:
  jit_free(jit);
  return st;
}

hcq_status_t hcq_jit_create(const hcq_exec_item_t *items, size_t nitems,
                            hcq_buffer_t *const *inputs, size_t ninputs,
                            const hcq_var_value_t *vals, size_t nvals,
                            const hcq_jit_options_t *options, hcq_jit_t **out_jit) {
  if (!out_jit) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_jit_create: out_jit is NULL");
  *out_jit = NULL;
  return jit_build(items, nitems, inputs, ninputs, vals, nvals, options, 0, NULL, out_jit);
}

/* Inputs no captured item holds (by identity, as replays swap them): a replay would replace
 * nothing. Returns how many, with the message about them in msg. */
static size_t unused_inputs(const hcq_capture_t *c, hcq_buffer_t *const *inputs, size_t ninputs,
                            bool warning, char *msg, size_t size) {
  size_t unused = 0, first = 0;
  for (size_t k = 0; inputs && k < ninputs; k++) {
    const hcq_buffer_t *in = inputs[k];
    bool used = in == NULL; /* the runner names NULL inputs */
    for (size_t j = 0; j < c->items.len && !used; j++) {
      const hcq_exec_item_t *it = &c->items.data[j];
      if (it->kind == HCQ_ITEM_TRANSFER) {
        used = it->transfer.dst == in || it->transfer.src == in;
        continue;
      }
      for (size_t i = 0; i < it->kernel.nbufs && !used; i++) used = it->kernel.bufs[i] == in;
    }
    if (!used && unused++ == 0) first = k;
  }
  if (!unused) return 0;
  char more[64] = "", name[96];
  if (unused > 1) snprintf(more, sizeof(more), " (and %zu more inputs)", unused - 1);
  snprintf(
      msg, size,
      "hcq_capture_end: input %zu (%s)%s is used by no captured item, so a replay that replaces it "
      "changes nothing (items hold the buffers they were given: a view of an input is not the "
      "input)%s",
      first, hcq__buffer_name(inputs[first], name), more,
      warning
          ? ""
          : "; pass the buffers the items use, or set allow_unused_inputs to make this a warning");
  return unused;
}

/* Work of other threads on the devices the capture's items use (hcq__capture_note_other_thread):
 * one warning per device. */
static void report_other_threads(const hcq_capture_t *c, hcq_jit_t *jit) {
  for (size_t k = 0; k < c->watch.others.len; k++) {
    const hcq__other_work_t *w = &c->watch.others.data[k];
    bool used = false;
    for (size_t j = 0; j < c->items.len && !used; j++) {
      const hcq_exec_item_t *it = &c->items.data[j];
      /* A transfer uses both ends' devices, whichever queue runs it (a cross-rank one runs on its
       * local end's: runner.c). */
      used = it->kind == HCQ_ITEM_TRANSFER
                 ? it->transfer.src->dev == w->dev || it->transfer.dst->dev == w->dev
                 : it->kernel.program->dev == w->dev;
    }
    if (!used) continue;
    jit->report.other_thread_work += w->count;
    char msg[512];
    snprintf(msg, sizeof(msg),
             "capture: while it was open, other threads did %zu operation%s on %s, which the "
             "captured items use, and "
             "the capture did not record %s (first: %s): a replay does not repeat %s (capture on "
             "the thread that "
             "does the work, or keep other threads off the device while capturing)",
             w->count, w->count == 1 ? "" : "s", w->dev_name, w->count == 1 ? "it" : "them",
             w->first, w->count == 1 ? "it" : "them");
    report_warning(jit, msg);
  }
  if (c->watch.others_lost)
    report_warning(
        jit,
        "capture: other threads worked on devices while it was open, and not all of it could be "
        "noted (out of memory)");
}

/* The arguments of hcq_capture_end and the capture's own state: its first error, its items. */
static hcq_status_t check_capture_end(hcq_capture_t *c, const hcq_var_value_t *vals, size_t nvals,
                                      hcq_jit_t **out_jit) {
  if (!out_jit) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_capture_end: out_jit is NULL");
  if (c->error) {
    hcq_status_t st = hcq_status_annotate(c->error, "capture");
    c->error = NULL;
    return st;
  }
  if (c->items.len == 0)
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "the capture recorded no launches or transfers");
  if (nvals && !vals)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_capture_end: %zu values but vals is NULL",
                           nvals);
  return hcq__var_values_check(vals, nvals, "hcq_capture_end");
}

/* vals, then the values hcq_launch_sym bound for the variables vals does not name: *all (NULL when
 * nothing was bound; the caller frees it) holds *nall values. */
static hcq_status_t with_bound_values(const hcq_capture_t *c, const hcq_var_value_t *vals,
                                      size_t nvals, hcq_var_value_t **all, size_t *nall) {
  *all = NULL;
  *nall = nvals;
  if (!c->bound.len) return NULL;
  hcq_var_value_t *v = malloc((nvals + c->bound.len) * sizeof(*v));
  if (!v) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory ending a capture");
  if (nvals) memcpy(v, vals, nvals * sizeof(*v));
  for (size_t b = 0; b < c->bound.len; b++) {
    size_t k = 0;
    while (k < nvals && vals[k].var != c->bound.data[b].var) k++;
    if (k == nvals) v[(*nall)++] = (hcq_var_value_t){c->bound.data[b].var, c->bound.data[b].value};
  }
  *all = v;
  return NULL;
}

/* What the jit a capture became cannot replay as it ran: unused inputs, host copies, other threads'
 * work, variables bound to several values. */
static void report_capture_warnings(const hcq_capture_t *c, hcq_jit_t *jit, size_t unused,
                                    const char *unused_msg) {
  if (unused) {
    jit->report.unused_inputs = unused;
    report_warning(jit, unused_msg);
  }
  if (c->host_copies) {
    char msg[512];
    snprintf(msg, sizeof(msg),
             "capture: %zu host cop%s ran once during the capture and %s not recorded (first: %s): "
             "a replay does not "
             "repeat %s (host memory is not replayed)",
             c->host_copies, c->host_copies == 1 ? "y" : "ies",
             c->host_copies == 1 ? "was" : "were", c->first_host_copy,
             c->host_copies == 1 ? "it" : "them");
    report_warning(jit, msg);
  }
  report_other_threads(c, jit);
  /* Every item of a replay sees one value per variable; a capture whose launches saw several saw
   * work that no replay repeats. */
  for (size_t b = 0; b < c->bound.len; b++) {
    if (!c->bound.data[b].changed) continue;
    const char *name = hcq_var_name(c->bound.data[b].var);
    char msg[256];
    snprintf(msg, sizeof(msg),
             "capture: variable %s was bound to several values during the capture (last %" PRId64
             "); a replay gives every item one value",
             name ? name : "(not a variable)", c->bound.data[b].value);
    report_warning(jit, msg);
  }
}

hcq_status_t hcq_capture_end(hcq_capture_t *c, hcq_buffer_t *const *inputs, size_t ninputs,
                             const hcq_var_value_t *vals, size_t nvals,
                             const hcq_jit_options_t *options, hcq_jit_t **out_jit) {
  if (!c) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_capture_end: capture is NULL");
  if (!on_owner_thread(c))
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "hcq_capture_end: the capture belongs to another thread (end it on the "
                           "thread that began it; "
                           "it is not consumed)");
  /* Recording stops before the graphs are built; so does noting other threads' work. */
  g_capturing = NULL;
  hcq__recorder = NULL;
  hcq__capture_watch_close(&c->watch);
  if (out_jit) *out_jit = NULL;
  hcq_var_value_t *all = NULL;
  size_t nall = nvals, unused;
  bool allow_unused = options && options->allow_unused_inputs;
  char unused_msg[512] = "";
  hcq_status_t st;
  if ((st = check_capture_end(c, vals, nvals, out_jit))) goto done;
  if ((st = with_bound_values(c, vals, nvals, &all, &nall))) goto done;
  unused = unused_inputs(c, inputs, ninputs, allow_unused, unused_msg, sizeof(unused_msg));
  if (unused && !allow_unused) {
    st = hcq_status_make(HCQ_INVALID_ARGUMENT, "%s", unused_msg);
    goto done;
  }
  if ((st = jit_build(c->items.data, c->items.len, inputs, ninputs, all ? all : vals, nall, options,
                      c->host_copies, "capture", out_jit)))
    goto done;
  report_capture_warnings(c, *out_jit, unused, unused_msg);
done:
  free(all);
  capture_free(c);
  return st;
}

/* Runs items [first, first+count) eagerly with the staged inputs and values. */
static hcq_status_t run_eager(hcq_jit_t *jit, const segment_t *s) {
  hcq__runner_t *r = &jit->runner;
  hcq_buffer_t *bufs[HCQ_MAX_KERNEL_BUFS];
  for (size_t j = s->first; j < s->first + s->count; j++) {
    hcq_exec_item_t it =
        hcq__runner_item_with_inputs(r, j, jit->slots_at[j], jit->slots_at[j + 1], bufs);
    hcq_status_t st = hcq_exec_item_run(&it, jit->vals, r->vars.len);
    if (st) return hcq_status_annotate(st, "item %zu", j);
  }
  return NULL;
}

static hcq_status_t jit_run(hcq_jit_t *jit, hcq_buffer_t *const *inputs, size_t ninputs,
                            const hcq_var_value_t *vals, size_t nvals, bool wait,
                            uint64_t *out_elapsed_ns);

hcq_status_t hcq_jit_run(hcq_jit_t *jit, hcq_buffer_t *const *inputs, size_t ninputs,
                         const hcq_var_value_t *vals, size_t nvals, bool wait,
                         uint64_t *out_elapsed_ns) {
  if (!jit) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_jit_run: jit is NULL");
  hcq__runner_t *r = &jit->runner;
  hcq_status_t st = hcq__runner_enter(r, "hcq_jit_run");
  if (st) return st;
  st = jit_run(jit, inputs, ninputs, vals, nvals, wait, out_elapsed_ns);
  hcq__runner_leave(r);
  return st;
}

hcq_status_t hcq_jit_submit(hcq_jit_t *jit, hcq_buffer_t *const *inputs, size_t ninputs,
                            const hcq_var_value_t *vals, size_t nvals, hcq_fence_t *fence) {
  if (!jit) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_jit_submit: jit is NULL");
  hcq__runner_t *r = &jit->runner;
  hcq_status_t st = hcq__runner_enter(r, "hcq_jit_submit");
  if (st) return st;
  /* Room first: a replay that was queued never fails for the fence. */
  if (fence && (st = hcq__fence_reserve(fence, r->ndevices))) goto leave;
  if ((st = jit_run(jit, inputs, ninputs, vals, nvals, false, NULL))) goto leave;
  if (fence) hcq__fence_arm(fence, r->devices, r->ndevices);
leave:
  hcq__runner_leave(r);
  return st;
}

static hcq_status_t jit_run(hcq_jit_t *jit, hcq_buffer_t *const *inputs, size_t ninputs,
                            const hcq_var_value_t *vals, size_t nvals, bool wait,
                            uint64_t *out_elapsed_ns) {
  uint64_t start = hcq__now_ns();
  hcq__runner_t *r = &jit->runner;
  hcq_status_t st = hcq__runner_stage(r, inputs, ninputs, vals, nvals);
  if (st) return hcq_status_annotate(st, "jit replay");
  if ((st = check_unused_vars(jit, vals, nvals, "jit replay"))) return st;
  for (size_t i = 0; i < r->vars.len; i++) jit->vals[i].value = r->pending_values[i];
  /* Replaying is not recording: a capture around a replay would record its items twice. */
  const hcq__recorder_t *rec = hcq__recorder;
  hcq__recorder = NULL;
  for (size_t i = 0; i < jit->segments.len; i++) {
    const segment_t *s = &jit->segments.data[i];
    if (s->graph)
      st = hcq__graph_run_prechecked(s->graph, r->pending_inputs, r->ninputs, jit->vals,
                                     r->vars.len);
    else
      st = run_eager(jit, s);
    if (st) {
      st = hcq_status_annotate(st, "jit replay, batch %zu (items %zu-%zu)", i, s->first,
                               s->first + s->count - 1);
      break;
    }
  }
  hcq__recorder = rec;
  if (st) return st;
  hcq__runner_commit(r);
  if (!wait) return NULL;
  for (size_t d = 0; d < r->ndevices; d++) HCQ__TRY(hcq_device_synchronize(r->devices[d]));
  if (out_elapsed_ns) *out_elapsed_ns = hcq__now_ns() - start;
  return NULL;
}

hcq_status_t hcq_jit_destroy(hcq_jit_t *jit) {
  if (!jit) return NULL;
  hcq_status_t st = hcq__runner_enter(&jit->runner, "hcq_jit_destroy");
  if (st) return st;
  /* Destroy graphs one by one so that a timeout leaves the jit consistent. */
  for (size_t i = 0; i < jit->segments.len; i++) {
    segment_t *s = &jit->segments.data[i];
    if (!s->graph) continue;
    st = hcq_graph_destroy(s->graph);
    if (st) {
      hcq__runner_leave(&jit->runner);
      return st;
    }
    s->graph = NULL;
  }
  jit_free(jit);
  return NULL;
}

const hcq_jit_report_t *hcq_jit_report(const hcq_jit_t *jit) { return jit ? &jit->report : NULL; }
size_t hcq_jit_item_count(const hcq_jit_t *jit) { return jit ? jit->runner.nitems : 0; }
const hcq_exec_item_t *hcq_jit_item(const hcq_jit_t *jit, size_t i) {
  return jit && i < jit->runner.nitems ? &jit->runner.items[i] : NULL;
}
size_t hcq_jit_input_count(const hcq_jit_t *jit) { return jit ? jit->runner.ninputs : 0; }
hcq_buffer_t *hcq_jit_input(const hcq_jit_t *jit, size_t i) {
  return jit && i < jit->runner.ninputs ? jit->runner.build_inputs[i] : NULL;
}
size_t hcq_jit_var_count(const hcq_jit_t *jit) { return jit ? jit->runner.vars.len : 0; }
const hcq_expr_t *hcq_jit_var(const hcq_jit_t *jit, size_t i) {
  return jit && i < jit->runner.vars.len ? jit->runner.vars.data[i] : NULL;
}
int64_t hcq_jit_var_value(const hcq_jit_t *jit, size_t i) {
  return jit && i < jit->runner.vars.len ? jit->runner.values[i] : 0;
}
size_t hcq_jit_graph_count(const hcq_jit_t *jit) { return jit ? jit->batch_sizes.len : 0; }
hcq_graph_t *hcq_jit_graph(const hcq_jit_t *jit, size_t i) {
  if (!jit) return NULL;
  for (size_t s = 0; s < jit->segments.len; s++)
    if (jit->segments.data[s].graph && i-- == 0) return jit->segments.data[s].graph;
  return NULL;
}
