/* The live objects of a device and the handle checks of HCQ_VALIDATE=1 (core/object.h). */
#include <pthread.h>
#include <stdio.h>

#include "core/device.h"
#include "core/object.h"

bool hcq__validating;
atomic_ulong hcq__validation_errors;

unsigned long hcq_validation_error_count(void) { return atomic_load(&hcq__validation_errors); }

void hcq__obj_add(hcq_device_t *dev, hcq__obj_t *obj, hcq__obj_kind_t kind, const char *label) {
  obj->dev = dev;
  obj->kind = (uint8_t)kind;
  obj->label = label;
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
  atomic_store_explicit(&obj->state, HCQ__OBJ_DEAD, memory_order_release);
}

const char *hcq__obj_kind_name(unsigned kind) {
  static const char *const kinds[] = {"buffer", "program", "signal", "graph"};
  return kind < 4 ? kinds[kind] : "object";
}

hcq_status_t hcq__obj_check(const hcq__obj_t *obj, hcq__obj_kind_t kind, const char *what) {
  if (!hcq__validating || !obj) return NULL;
  uint32_t state = atomic_load_explicit(&obj->state, memory_order_acquire);
  if (kind == HCQ__OBJ_SIGNAL && state == 0) return NULL; /* a device's own signal (the timeline) */
  if (state == HCQ__OBJ_DEAD)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "%s: %s \"%.64s\" was released already (HCQ_VALIDATE)", what,
                           hcq__obj_kind_name(kind), obj->label);
  if (state != HCQ__OBJ_LIVE || obj->kind != kind)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: not a live hcq %s (HCQ_VALIDATE)", what, hcq__obj_kind_name(kind));
  if (atomic_load(&obj->dev->state) != HCQ__OBJ_LIVE || obj->dev->closed)
    return hcq_status_make(HCQ_FAILED_PRECONDITION, "%s: %s \"%.64s\" belongs to %s, which was closed (HCQ_VALIDATE)",
                           what, hcq__obj_kind_name(kind), obj->label, obj->dev->name);
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
