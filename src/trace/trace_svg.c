/* The profile as a self-contained SVG timeline: one row per queue (host threads first, then each
 * device's compute and copy queue), a box per slice, an arrow per dependency between items of one
 * replay, a time axis, and each row's busy share, so idle devices stand out as empty stretches. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace_model.h"

enum { LABEL_W = 230, PLOT_W = 1400, RIGHT_W = 30, TOP = 64, ROW_H = 30, BOX_H = 20, AXIS_H = 44 };
#define CHAR_W 6.6 /* average glyph width at font-size 11 */

static void put_text(FILE *f, const char *s, size_t max) {
  for (size_t n = 0; *s && n < max; s++, n++) {
    switch (*s) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      default:
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
        break;
    }
  }
}

/* "12.35 us", "1.2 ms", "850 ns": four significant digits at most */
static void format_time(uint64_t ns, char *out, size_t size) {
  if (ns >= 1000000)
    snprintf(out, size, "%.4g ms", (double)ns / 1e6);
  else if (ns >= 1000)
    snprintf(out, size, "%.4g us", (double)ns / 1e3);
  else
    snprintf(out, size, "%" PRIu64 " ns", ns);
}

static uint32_t hash_name(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

typedef struct svg_ctx {
  FILE *f;
  const hcq__trace_view_t *v;
  uint64_t t0;
  double scale;
  size_t first;
  uint32_t *row; /* per track: its row (tracks without a drawn slice get none) */
} svg_ctx_t;

static double x_of(const svg_ctx_t *c, uint64_t ns) {
  return LABEL_W + (double)(ns - c->t0) * c->scale;
}
static double y_mid(const svg_ctx_t *c, const hcq__trace_slice_t *s) {
  return TOP + c->row[s->track] * ROW_H + (ROW_H - BOX_H) / 2.0 + BOX_H / 2.0;
}

static void put_arrow(void *ctx, size_t src, size_t dst) {
  svg_ctx_t *c = ctx;
  if (src < c->first) return;
  const hcq__trace_slice_t *a = hcq__view_slice(c->v, src), *b = hcq__view_slice(c->v, dst);
  fprintf(c->f,
          "<line class=\"dep\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" "
          "marker-end=\"url(#arrow)\"/>\n",
          x_of(c, a->end_ns), y_mid(c, a), x_of(c, b->start_ns), y_mid(c, b));
}

typedef struct span {
  uint64_t start, end;
  uint32_t row;
} span_t;

static int by_row_then_start(const void *x, const void *y) {
  const span_t *a = x, *b = y;
  if (a->row != b->row) return a->row < b->row ? -1 : 1;
  return (a->start > b->start) - (a->start < b->start);
}

/* The time range of the drawn slices (at least 1 ns) and a row for each track with one of them, in
 * track order (host threads, then devices by name): empty tracks would only push rows apart.
 * Returns the number of rows. */
static uint32_t place_rows(svg_ctx_t *c, bool *drawn, uint64_t *range) {
  const hcq__trace_view_t *v = c->v;
  uint64_t t1 = 0;
  for (size_t i = c->first; i < v->nslices; i++) {
    const hcq__trace_slice_t *s = hcq__view_slice(v, i);
    if (s->start_ns < c->t0) c->t0 = s->start_ns;
    if (s->end_ns > t1) t1 = s->end_ns;
    drawn[s->track] = true;
  }
  uint32_t nrows = 0;
  for (uint32_t order = 0; order < v->ntracks; order++)
    for (size_t k = 0; k < v->ntracks; k++)
      if (v->tracks[k].order == order && drawn[k]) c->row[k] = nrows++;
  if (c->t0 == UINT64_MAX) c->t0 = t1 = 0;
  *range = t1 > c->t0 ? t1 - c->t0 : 1;
  c->scale = (double)PLOT_W / (double)*range;
  return nrows;
}

/* The document's start, its styles and arrow marker, and the title with the legend. */
static void put_header(const svg_ctx_t *c, int width, int height, uint64_t range) {
  FILE *f = c->f;
  const hcq__trace_view_t *v = c->v;
  fprintf(
      f,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n",
      width, height, width, height);
  fputs(
      "<style>\n"
      "  .row { fill: #f7f7f7; } .row.odd { fill: #eeeeee; }\n"
      "  rect.item, rect.eager, rect.submit, rect.call, rect.profiler { stroke: #333333; "
      "stroke-width: 0.5; }\n"
      "  rect.eager { stroke-dasharray: 3 2; stroke-width: 1; }\n"
      "  line.dep { stroke: #c0392b; stroke-width: 1; stroke-opacity: 0.7; }\n"
      "  line.tick { stroke: #bbbbbb; stroke-width: 0.5; }\n"
      "  text.box { fill: #111111; pointer-events: none; }\n"
      "</style>\n"
      "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"6\" "
      "markerHeight=\"6\" "
      "orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\" "
      "fill=\"#c0392b\"/></marker></defs>\n"
      "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      f);

  char range_text[32];
  format_time(range, range_text, sizeof(range_text));
  fprintf(f, "<text x=\"8\" y=\"18\" font-size=\"14\" font-weight=\"bold\">hcq profile</text>\n");
  fprintf(f,
          "<text x=\"8\" y=\"36\">%zu slices over %s; %" PRIu64
          " dropped by the ring (capacity %" PRIu64
          ")%s. Boxes: kernels (colour per kernel), copies (orange), graph submits and eager calls "
          "on the host rows; "
          "dashed boxes ran eagerly. Arrows: dependencies between items of one replay.</text>\n",
          v->nslices - c->first, range_text, v->dropped, v->capacity,
          c->first ? "; only the newest slices are drawn" : "");
}

/* busy[row]: the time the row's slices cover, overlaps counted once (the union of their spans). */
static void busy_time(const svg_ctx_t *c, span_t *spans, uint64_t *busy) {
  const hcq__trace_view_t *v = c->v;
  size_t nspans = 0;
  for (size_t i = c->first; i < v->nslices; i++) {
    const hcq__trace_slice_t *s = hcq__view_slice(v, i);
    spans[nspans++] =
        (span_t){s->start_ns, s->end_ns > s->start_ns ? s->end_ns : s->start_ns, c->row[s->track]};
  }
  qsort(spans, nspans, sizeof(*spans), by_row_then_start);
  for (size_t i = 0; i < nspans;) {
    uint32_t row = spans[i].row;
    uint64_t lo = spans[i].start, hi = spans[i].end;
    for (i++; i < nspans && spans[i].row == row; i++) {
      if (spans[i].start > hi) {
        busy[row] += hi - lo;
        lo = spans[i].start;
      }
      if (spans[i].end > hi) hi = spans[i].end;
    }
    busy[row] += hi - lo;
  }
}

/* The rows' backgrounds and labels, each with its busy share. */
static void put_rows(const svg_ctx_t *c, const bool *drawn, const uint64_t *busy, int width,
                     uint64_t range) {
  FILE *f = c->f;
  for (size_t i = 0; i < c->v->ntracks; i++) {
    const hcq__trace_track_t *t = &c->v->tracks[i];
    if (!drawn[i]) continue;
    int y = TOP + (int)c->row[i] * ROW_H;
    fprintf(f, "<rect class=\"row%s\" x=\"0\" y=\"%d\" width=\"%d\" height=\"%d\"/>\n",
            c->row[i] % 2 ? " odd" : "", y, width, ROW_H);
    char name[64];
    if (t->is_device)
      snprintf(name, sizeof(name), "%s %s queue", t->device, hcq__queue_kind_word(t->queue));
    else
      snprintf(name, sizeof(name), "host thread %" PRIu32, t->host_thread);
    fprintf(f, "<text class=\"label\" x=\"8\" y=\"%d\">", y + ROW_H / 2 + 4);
    put_text(f, name, 64);
    fprintf(f, " <tspan fill=\"#666666\">busy %.0f%%</tspan></text>\n",
            100.0 * (double)busy[c->row[i]] / (double)range);
  }
}

/* Time axis: 1, 2 or 5 times a power of ten, at most about ten ticks. */
static void put_axis(const svg_ctx_t *c, uint64_t range, uint32_t nrows) {
  FILE *f = c->f;
  double step = pow(10.0, floor(log10((double)range)));
  while (range / step < 4) step /= 2;
  while (range / step > 10) step *= 2;
  int axis_y = TOP + (int)nrows * ROW_H;
  fprintf(f, "<line class=\"tick\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333333\"/>\n",
          LABEL_W, axis_y, LABEL_W + PLOT_W, axis_y);
  for (double t = 0; t <= (double)range + 0.5; t += step) {
    double x = LABEL_W + t * c->scale;
    char label[32];
    format_time((uint64_t)llround(t), label, sizeof(label));
    fprintf(f, "<line class=\"tick\" x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>\n", x, TOP - 6,
            x, axis_y + 5);
    fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", x, axis_y + 18,
            label);
  }
  fprintf(f,
          "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#666666\">time since the first "
          "slice</text>\n",
          LABEL_W + PLOT_W / 2, axis_y + 36);
}

/* One slice's box, its tooltip (what, where from, how long) and as much of its name as fits. */
static void put_box(const svg_ctx_t *c, const hcq__trace_slice_t *s) {
  FILE *f = c->f;
  const char *name = c->v->names[s->name];
  uint64_t dur = s->end_ns > s->start_ns ? s->end_ns - s->start_ns : 0;
  double x = x_of(c, s->start_ns), w = (double)dur * c->scale;
  if (w < 1) w = 1;
  double y = TOP + c->row[s->track] * ROW_H + (ROW_H - BOX_H) / 2.0;
  const char *cls = s->kind == HCQ__SLICE_SUBMIT  ? "submit"
                    : s->kind == HCQ__SLICE_CALL  ? "call"
                    : s->kind == HCQ__SLICE_ALIGN ? "profiler"
                    : s->graph                    ? "item"
                                                  : "eager";
  char fill[32];
  if (s->kind == HCQ__SLICE_KERNEL)
    snprintf(fill, sizeof(fill), "hsl(%u, 55%%, 68%%)", hash_name(name) % 360);
  else
    snprintf(fill, sizeof(fill), "%s",
             s->kind == HCQ__SLICE_COPY     ? "#f5a65b"
             : s->kind == HCQ__SLICE_SUBMIT ? "#8fb3d9"
             : s->kind == HCQ__SLICE_ALIGN  ? "#eeeeee"
                                            : "#c8c8c8");
  char dur_text[32];
  format_time(dur, dur_text, sizeof(dur_text));
  fputs("<g><title>", f);
  put_text(f, name, 160);
  if (s->graph) {
    fputs(" (", f);
    put_text(f, c->v->graphs[s->graph - 1]->label, 80);
    fprintf(f, ", replay %" PRIu64, s->replay);
    if (s->kind != HCQ__SLICE_SUBMIT) fprintf(f, ", item %" PRIu32, s->item);
    fputc(')', f);
  }
  fprintf(f, ": %s", dur_text);
  if (s->bytes) fprintf(f, ", %" PRIu64 " bytes", s->bytes);
  if (s->bytes && dur && s->kind == HCQ__SLICE_COPY)
    fprintf(f, ", %.3f GB/s", (double)s->bytes / (double)dur);
  fprintf(
      f,
      "</title><rect class=\"%s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%d\" fill=\"%s\"/>",
      cls, x, y, w, BOX_H, fill);
  size_t len = strlen(name), fits = w > 8 ? (size_t)((w - 6) / CHAR_W) : 0;
  if (fits >= 3) {
    fprintf(f, "<text class=\"box\" x=\"%.2f\" y=\"%.2f\">", x + 3, y + BOX_H / 2.0 + 4);
    put_text(f, name, fits < len ? fits - 1 : len);
    if (fits < len) fputs("&#8230;", f);
    fputs("</text>", f);
  }
  fputs("</g>\n", f);
}

bool hcq__trace_write_svg_view(FILE *f, const hcq__trace_view_t *v) {
  svg_ctx_t c = {f,
                 v,
                 UINT64_MAX,
                 1.0,
                 v->nslices > HCQ_TRACE_SVG_MAX_SLICES ? v->nslices - HCQ_TRACE_SVG_MAX_SLICES : 0,
                 calloc(v->ntracks + 1, sizeof(uint32_t))};
  span_t *spans = malloc((v->nslices - c.first + 1) * sizeof(*spans));
  uint64_t *busy = calloc(v->ntracks + 1, sizeof(*busy));
  bool *drawn = calloc(v->ntracks + 1, sizeof(*drawn));
  if (!c.row || !spans || !busy || !drawn) {
    free(c.row);
    free(spans);
    free(busy);
    free(drawn);
    return false;
  }
  uint64_t range;
  uint32_t nrows = place_rows(&c, drawn, &range);
  int height = TOP + (int)nrows * ROW_H + AXIS_H;
  int width = LABEL_W + PLOT_W + RIGHT_W;
  put_header(&c, width, height, range);
  busy_time(&c, spans, busy);
  free(spans);
  put_rows(&c, drawn, busy, width, range);
  free(busy);
  free(drawn);
  put_axis(&c, range, nrows);
  for (size_t i = c.first; i < v->nslices; i++) put_box(&c, hcq__view_slice(v, i));
  bool ok = hcq__trace_view_flows(v, c.first, put_arrow, &c);
  free(c.row);
  fputs("</svg>\n", f);
  return ok && !ferror(f);
}
