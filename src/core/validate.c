/* HCQ_VALIDATE=1: writes a launch did not declare (include/hcq/program.h, hcq_launch).
 *
 * A graph orders an item after the last write of each buffer it uses; a write that outs does not
 * list is ordered after nothing, so a replay may run it alongside the items that read or write the
 * same buffer. Eager execution is ordered anyway, which is why such a kernel looks right until it
 * is graphed. The check copies every buffer the launch did not declare written out before the
 * kernel, and again after it, and compares: any changed byte is a write outs should have listed.
 * The copies go through the ordinary host copy path (each waits for the device's earlier work), so
 * it works on every backend, at the price of two full copies of those buffers per launch.
 *
 * What it cannot see: a write of the bytes a buffer already held. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buffer.h"
#include "core/capture.h"
#include "core/remote.h"
#include "core/validate.h"

struct hcq__write_check {
  size_t n;
  struct snap {
    size_t arg;        /* first argument slot holding buf */
    hcq_buffer_t *buf; /* borrowed: the launch's caller holds it */
    unsigned char *bytes;
  } snaps[];
};

void hcq__write_check_free(hcq__write_check_t *wc) {
  if (!wc) return;
  for (size_t i = 0; i < wc->n; i++) free(wc->snaps[i].bytes);
  free(wc);
}

static const hcq_buffer_t *base_of(const hcq_buffer_t *b) { return b->base ? b->base : b; }

/* The host copies of the check are not the application's: a capture must not count them. */
static hcq_status_t copy_out(hcq_buffer_t *b, void *dst) {
  const hcq__recorder_t *rec = hcq__recorder;
  hcq__recorder = NULL;
  hcq_status_t st = hcq_buffer_copyout(b, 0, dst, b->size);
  hcq__recorder = rec;
  return st;
}

static int g_leak_report_env;
static pthread_once_t g_leak_report_once = PTHREAD_ONCE_INIT;

static void read_leak_report_env(void) {
  const char *s = getenv("HCQ_LEAK_REPORT");
  if (!s || !*s || !strcmp(s, "0")) return;
  if (!strcmp(s, "1"))
    g_leak_report_env = 1;
  else if (!strcmp(s, "backtrace"))
    g_leak_report_env = 2;
  else
    fprintf(stderr, "hcq: ignoring HCQ_LEAK_REPORT=\"%.64s\": expected 0, 1 or backtrace\n", s);
}

int hcq__leak_report_env(void) {
  pthread_once(&g_leak_report_once, read_leak_report_env);
  return g_leak_report_env;
}

hcq_status_t hcq__write_check_begin(const hcq_launch_desc_t *d, hcq__write_check_t **out) {
  *out = NULL;
  if (!d->outs) return NULL; /* every buffer is declared written */
  if (hcq__device_is_remote(d->program->dev))
    return NULL; /* another rank runs it, and checks it there */
  hcq__write_check_t *wc = calloc(1, sizeof(*wc) + d->nbufs * sizeof(wc->snaps[0]));
  if (!wc)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "launch of %s: out of memory for HCQ_VALIDATE",
                           d->program->name);
  for (size_t i = 0; i < d->nbufs; i++) {
    hcq_buffer_t *b = d->bufs[i];
    /* Dependencies are by base buffer: a write anywhere in a declared buffer's base is ordered. */
    bool declared = false, seen = false;
    for (size_t o = 0; o < d->nouts && !declared; o++)
      declared = base_of(d->bufs[d->outs[o]]) == base_of(b);
    for (size_t k = 0; k < wc->n && !seen; k++) seen = wc->snaps[k].buf == b;
    if (declared || seen || b->size == 0) continue;
    struct snap *s = &wc->snaps[wc->n];
    s->arg = i, s->buf = b;
    if (!(s->bytes = malloc(b->size))) {
      hcq__write_check_free(wc);
      return hcq_status_make(HCQ_OUT_OF_MEMORY,
                             "launch of %s: out of memory copying buffer %zu (%s) for HCQ_VALIDATE",
                             d->program->name, i, b->label);
    }
    wc->n++;
    hcq_status_t st = copy_out(b, s->bytes);
    if (st) {
      hcq__write_check_free(wc);
      return hcq_status_annotate(st,
                                 "launch of %s: HCQ_VALIDATE copying buffer %zu before the kernel",
                                 d->program->name, i);
    }
  }
  if (wc->n == 0) {
    hcq__write_check_free(wc);
    return NULL;
  }
  *out = wc;
  return NULL;
}

hcq_status_t hcq__write_check_end(hcq__write_check_t *wc, const hcq_launch_desc_t *d) {
  if (!wc) return NULL;
  hcq_status_t st = NULL;
  size_t changed = 0;
  const struct snap *first = NULL;
  uint64_t at = 0;
  unsigned char *after = NULL;
  for (size_t i = 0; i < wc->n; i++) {
    const struct snap *s = &wc->snaps[i];
    unsigned char *now = realloc(after, s->buf->size);
    if (!now) {
      st = hcq_status_make(HCQ_OUT_OF_MEMORY, "launch of %s: out of memory for HCQ_VALIDATE",
                           d->program->name);
      break;
    }
    after = now;
    if ((st = copy_out(s->buf, after))) {
      st = hcq_status_annotate(st, "launch of %s: HCQ_VALIDATE copying buffer %zu after the kernel",
                               d->program->name, s->arg);
      break;
    }
    if (!memcmp(after, s->bytes, s->buf->size)) continue;
    if (!first) {
      first = s;
      while (after[at] == s->bytes[at]) at++;
    }
    changed++;
  }
  free(after);
  if (st || !first) goto done;
  char more[64] = "";
  if (changed > 1)
    snprintf(more, sizeof(more), "; %zu more undeclared buffers changed too", changed - 1);
  st = hcq_status_make(HCQ_INVALID_ARGUMENT,
                       "launch of %s on %s wrote buffer %zu (%s), which its outs do not list%s "
                       "(first changed byte at "
                       "offset %" PRIu64 " of %" PRIu64
                       "%s): a graph replay would not order that write (HCQ_VALIDATE); "
                       "list the buffer in outs, or pass no outs array (every buffer written)",
                       d->program->name, d->program->dev->name, first->arg, first->buf->label,
                       d->nouts ? "" : " (outs is empty: it declared that it writes nothing)", at,
                       first->buf->size, more);
done:
  hcq__write_check_free(wc);
  return st;
}
