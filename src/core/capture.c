/* The core's side of capturing (core/capture.h): the recorder hook and the list of open captures
 * that other threads' device work is noted in. */
#include <stdarg.h>
#include <stdio.h>

#include "core/capture.h"
#include "core/device.h"
#include "core/vec.h"

_Thread_local const hcq__recorder_t *hcq__recorder;

atomic_int hcq__captures_open;
static pthread_mutex_t g_open_lock = PTHREAD_MUTEX_INITIALIZER;
static hcq__capture_watch_t *g_open;

void hcq__capture_watch_open(hcq__capture_watch_t *w) {
  w->owner = pthread_self();
  pthread_mutex_lock(&g_open_lock);
  w->next_open = g_open;
  w->prev_open = &g_open;
  if (g_open) g_open->prev_open = &w->next_open;
  g_open = w;
  atomic_fetch_add(&hcq__captures_open, 1);
  pthread_mutex_unlock(&g_open_lock);
}

void hcq__capture_watch_close(hcq__capture_watch_t *w) {
  pthread_mutex_lock(&g_open_lock);
  if (w->prev_open) {
    *w->prev_open = w->next_open;
    if (w->next_open) w->next_open->prev_open = w->prev_open;
    w->prev_open = NULL;
    w->next_open = NULL;
    atomic_fetch_sub(&hcq__captures_open, 1);
  }
  pthread_mutex_unlock(&g_open_lock);
}

/* A capture records its own thread's work only. Work another thread puts on a device the capture
 * uses may be work the captured items depend on (or race with), and no replay repeats it: each open
 * capture of another thread keeps a count per device and the first such operation, and its end
 * reports those on devices its items use. */
void hcq__capture_note_other_thread(const hcq_device_t *dev, const char *fmt, ...) {
  /* The common case while capturing: the only open capture is this thread's (a thread with a
   * recorder is capturing). */
  if (hcq__recorder && atomic_load_explicit(&hcq__captures_open, memory_order_relaxed) == 1) return;
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  pthread_t self = pthread_self();
  pthread_mutex_lock(&g_open_lock);
  for (hcq__capture_watch_t *w = g_open; w; w = w->next_open) {
    if (pthread_equal(w->owner, self)) continue;
    size_t k = 0;
    while (k < w->others.len && w->others.data[k].dev != dev) k++;
    if (k == w->others.len) {
      hcq__other_work_t o = {.dev = dev, .count = 0};
      snprintf(o.dev_name, sizeof(o.dev_name), "%s", dev->name);
      snprintf(o.first, sizeof(o.first), "%s", what);
      if (!hcq__vec_push(&w->others, o)) {
        w->others_lost = true;
        continue;
      }
    }
    w->others.data[k].count++;
  }
  pthread_mutex_unlock(&g_open_lock);
}
