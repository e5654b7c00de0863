/* The live objects of a device and the handle checks of HCQ_VALIDATE=1 (core/object.h). */
#include <execinfo.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "core/object.h"
#include "core/validate.h"

bool hcq__validating;
atomic_ulong hcq__validation_errors;
/* Every device's, open or not: the exit report tells those of closed (lost) devices by the
 * difference. */
static atomic_long g_live_objects;

unsigned long hcq_validation_error_count(void) { return atomic_load(&hcq__validation_errors); }

bool hcq__leak_reporting(void) { return hcq__validating || hcq__leak_report_env() != 0; }

long hcq__obj_live_count(void) { return atomic_load(&g_live_objects); }

static pthread_once_t g_exit_report_once = PTHREAD_ONCE_INIT;
static void arm_exit_report(void) { atexit(hcq__devices_report_leaks_at_exit); }

/* The creating stack, without this function's own frame. Best effort: no memory, no stack. */
static void record_trace(hcq__obj_t *obj) {
  void *frames[33];
  int n = backtrace(frames, 33);
  if (n <= 1 || !(obj->trace = malloc((size_t)(n - 1) * sizeof(void *)))) return;
  memcpy(obj->trace, frames + 1, (size_t)(n - 1) * sizeof(void *));
  obj->ntrace = (uint8_t)(n - 1);
}

void hcq__obj_add_from(hcq_device_t *dev, hcq__obj_t *obj, hcq__obj_kind_t kind, const char *label,
                       const char *created_by) {
  obj->dev = dev;
  obj->kind = (uint8_t)kind;
  obj->label = label;
  obj->created_by = created_by;
  obj->held_by = NULL;
  obj->trace = NULL;
  obj->ntrace = 0;
  if (hcq__leak_reporting()) {
    pthread_once(&g_exit_report_once, arm_exit_report);
    if (hcq__leak_report_env() == 2) record_trace(obj);
  }
  atomic_fetch_add_explicit(&g_live_objects, 1, memory_order_relaxed);
  atomic_store_explicit(&obj->state, HCQ__OBJ_LIVE, memory_order_relaxed);
  atomic_fetch_add_explicit(&dev->struct_refs, 1, memory_order_relaxed);
  pthread_mutex_lock(&dev->obj_lock);
  obj->next = &dev->objects;
  obj->prev = dev->objects.prev;
  obj->prev->next = obj;
  dev->objects.prev = obj;
  dev->nobjects++;
  pthread_mutex_unlock(&dev->obj_lock);
}

void hcq__obj_remove(hcq__obj_t *obj) {
  hcq_device_t *dev = obj->dev;
  pthread_mutex_lock(&dev->obj_lock);
  obj->prev->next = obj->next;
  obj->next->prev = obj->prev;
  obj->next = obj->prev = NULL;
  dev->nobjects--;
  pthread_mutex_unlock(&dev->obj_lock);
  atomic_fetch_sub_explicit(&g_live_objects, 1, memory_order_relaxed);
  free(obj->trace);
  obj->trace = NULL;
  obj->ntrace = 0;
  atomic_store_explicit(&obj->state, HCQ__OBJ_DEAD, memory_order_release);
}

void hcq__obj_set_holder(hcq__obj_t *obj, const hcq__obj_t *holder) {
  pthread_mutex_lock(&obj->dev->obj_lock); /* messages read it under the lock */
  obj->held_by = holder;
  pthread_mutex_unlock(&obj->dev->obj_lock);
}

const char *hcq__obj_kind_name(unsigned kind) {
  static const char *const kinds[] = {"buffer", "program", "signal", "graph", "jit"};
  return kind < 5 ? kinds[kind] : "object";
}

hcq_status_t hcq__obj_check(const hcq__obj_t *obj, hcq__obj_kind_t kind, const char *what) {
  if (!hcq__validating || !obj) return NULL;
  uint32_t state = atomic_load_explicit(&obj->state, memory_order_acquire);
  if (kind == HCQ__OBJ_SIGNAL && state == 0) return NULL; /* a device's own signal (the timeline) */
  if (state == HCQ__OBJ_DEAD)
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "%s: %s \"%.64s\" was released already (HCQ_VALIDATE)", what,
                           hcq__obj_kind_name(kind), obj->label);
  if (state != HCQ__OBJ_LIVE || obj->kind != kind)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: not a live hcq %s (HCQ_VALIDATE)", what,
                           hcq__obj_kind_name(kind));
  if (atomic_load(&obj->dev->state) != HCQ__OBJ_LIVE || obj->dev->closed)
    return hcq_status_make(HCQ_FAILED_PRECONDITION,
                           "%s: %s \"%.64s\" belongs to %s, which was closed (HCQ_VALIDATE)", what,
                           hcq__obj_kind_name(kind), obj->label, obj->dev->name);
  return NULL;
}

bool hcq__obj_released_again(const hcq__obj_t *obj, const char *call) {
  if (!hcq__validating) return false;
  uint32_t state = atomic_load_explicit(&obj->state, memory_order_acquire);
  if (state == HCQ__OBJ_LIVE) return false;
  if (state == HCQ__OBJ_DEAD)
    fprintf(stderr, "hcq: %s: %s \"%.64s\" was released already (HCQ_VALIDATE); ignored\n", call,
            hcq__obj_kind_name(obj->kind), obj->label);
  else
    fprintf(stderr, "hcq: %s: not a live hcq object (HCQ_VALIDATE); ignored\n", call);
  hcq__validation_errors++;
  return true;
}

/* ---- the leak report: what is alive, whose it is, where it came from ---- */

/* "buffer \"x\"", or the label alone where it says the kind already ("graph#2 (2 items)",
 * "buffer#7"). */
static void obj_name(const hcq__obj_t *o, char *out, size_t size) {
  const char *kind = hcq__obj_kind_name(o->kind);
  size_t k = strlen(kind);
  if (!strncmp(o->label, kind, k) && o->label[k] == '#')
    snprintf(out, size, "%.80s", o->label);
  else
    snprintf(out, size, "%s \"%.64s\"", kind, o->label);
}

/* What held objects are listed under when their holder chain does not end at a live object of the
 * user's on the same device (not expected: holders outlive what they hold). */
static const hcq__obj_t k_library_held;

/* NULL for the user's own objects; else the user's object that holds o (through graphs a jit holds,
 * say), or &k_library_held. Under dev's object lock. */
static const hcq__obj_t *group_of(const hcq_device_t *dev, const hcq__obj_t *o) {
  if (!o->held_by) return NULL;
  const hcq__obj_t *root = o;
  for (int depth = 0; root->held_by && depth < 16; depth++) root = root->held_by;
  bool live = atomic_load_explicit(&root->state, memory_order_relaxed) == HCQ__OBJ_LIVE;
  return !root->held_by && live && root->dev == dev ? root : &k_library_held;
}

typedef struct text {
  char *out;
  size_t size, used;
  unsigned shown, limit;
} text_t;

static void put(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_t *t, const char *fmt, ...) {
  if (t->used + 1 >= t->size) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->out + t->used, t->size - t->used, fmt, ap);
  va_end(ap);
  if (n > 0) t->used = t->used + (size_t)n < t->size ? t->used + (size_t)n : t->size - 1;
}

/* Names the objects of group (the user's own: NULL, with the call that made each), the rest
 * counted once t's limit is reached. */
static void put_group(text_t *t, hcq_device_t *dev, const hcq__obj_t *group) {
  long listed = 0, unnamed = 0;
  for (hcq__obj_t *o = dev->objects.next; o != &dev->objects; o = o->next) {
    if (group_of(dev, o) != group) continue;
    if (t->shown >= t->limit) {
      unnamed++;
      continue;
    }
    char name[128];
    obj_name(o, name, sizeof(name));
    put(t, "%s%s", listed++ ? ", " : "", name);
    if (!group && o->created_by) put(t, " (%s)", o->created_by);
    t->shown++;
  }
  if (unnamed) put(t, "%s%ld more", listed ? " and " : "", unnamed);
}

void hcq__obj_describe(hcq_device_t *dev, char *out, size_t size, unsigned limit) {
  text_t t = {out, size, 0, 0, limit};
  out[0] = '\0';
  pthread_mutex_lock(&dev->obj_lock);
  long users = 0, library = 0;
  for (hcq__obj_t *o = dev->objects.next; o != &dev->objects; o = o->next) {
    const hcq__obj_t *g = group_of(dev, o);
    users += !g;
    library += g == &k_library_held;
  }
  if (users) {
    put(&t, "%ld you created: ", users);
    put_group(&t, dev, NULL);
  }
  for (hcq__obj_t *h = dev->objects.next; h != &dev->objects; h = h->next) {
    long held = 0;
    for (hcq__obj_t *o = dev->objects.next; o != &dev->objects; o = o->next)
      held += group_of(dev, o) == h;
    if (!h->held_by && held) {
      char name[128];
      obj_name(h, name, sizeof(name));
      put(&t, "%s%ld held by %s on your behalf (released with it): ", t.used ? "; " : "", held,
          name);
      put_group(&t, dev, h);
    }
  }
  if (library) {
    put(&t, "%s%ld held by hcq itself: ", t.used ? "; " : "", library);
    put_group(&t, dev, &k_library_held);
  }
  pthread_mutex_unlock(&dev->obj_lock);
}

long hcq__obj_print_locked(hcq_device_t *dev, FILE *f, long *budget) {
  long seen = 0;
  for (hcq__obj_t *o = dev->objects.next; o != &dev->objects; o = o->next, seen++) {
    if (*budget <= 0) continue;
    (*budget)--;
    char name[128], holder[160] = "";
    obj_name(o, name, sizeof(name));
    const hcq__obj_t *g = group_of(dev, o);
    if (g == &k_library_held) {
      snprintf(holder, sizeof(holder), ", held by hcq itself");
    } else if (g) {
      char hname[128];
      obj_name(g, hname, sizeof(hname));
      snprintf(holder, sizeof(holder), ", held by %s on your behalf", hname);
    }
    fprintf(f, "  %s: %s, made by %s%s\n", dev->name, name, o->created_by ? o->created_by : "hcq",
            holder);
    if (!o->ntrace) continue;
    char **lines = backtrace_symbols(o->trace, o->ntrace);
    for (int i = 0; i < o->ntrace; i++) {
      if (lines)
        fprintf(f, "      #%d %s\n", i, lines[i]);
      else
        fprintf(f, "      #%d %p\n", i, o->trace[i]);
    }
    free(lines);
  }
  return seen;
}

void hcq__leak_report_device(hcq_device_t *dev, const char *why) {
  if (!hcq__leak_reporting()) return;
  pthread_mutex_lock(&dev->obj_lock);
  if (dev->nobjects > 0) {
    long budget = 200;
    fprintf(stderr, "hcq: %ld object%s of %s still alive %s:\n", dev->nobjects,
            dev->nobjects == 1 ? "" : "s", dev->name, why);
    long seen = hcq__obj_print_locked(dev, stderr, &budget), printed = 200 - budget;
    if (seen > printed) fprintf(stderr, "  and %ld more\n", seen - printed);
  }
  pthread_mutex_unlock(&dev->obj_lock);
}
