/* The live objects of a device and the handle checks of HCQ_VALIDATE=1 (object.c). */
#ifndef HCQ_CORE_OBJECT_H
#define HCQ_CORE_OBJECT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "hcq/device.h"

/* Every buffer, program, public signal and graph of a device is on the device's object list, so a
 * failed close names them. With HCQ_VALIDATE=1 a released object keeps its struct (marked dead) so
 * passing it again is reported by name. */
typedef enum {
  HCQ__OBJ_BUFFER,
  HCQ__OBJ_PROGRAM,
  HCQ__OBJ_SIGNAL,
  HCQ__OBJ_GRAPH,
  HCQ__OBJ_JIT
} hcq__obj_kind_t;
enum { HCQ__OBJ_LIVE = 0x4c495645u, HCQ__OBJ_DEAD = 0x44454144u };

typedef struct hcq__obj {
  struct hcq__obj *prev, *next;
  hcq_device_t *dev;
  const char *label; /* the object's name, valid as long as the object */
  /* Where it came from, for the leak report (docs/errors.md, "Leak report"): the function that made
   * it (a static string), the object that holds it on the user's behalf (NULL: the user made it;
   * the holder outlives it, on the same device), and the creating stack when
   * HCQ_LEAK_REPORT=backtrace. */
  const char *created_by;
  const struct hcq__obj *held_by;
  void **trace;
  uint8_t ntrace;
  _Atomic uint32_t state;
  uint8_t kind; /* hcq__obj_kind_t */
} hcq__obj_t;

/* Puts obj on dev's list (and holds the device's struct); remove takes it off. The macro records
 * the creating function; hcq__obj_add_from names another (the public call behind an internal
 * helper). */
#define hcq__obj_add(dev, obj, kind, label) hcq__obj_add_from(dev, obj, kind, label, __func__)
void hcq__obj_add_from(hcq_device_t *dev, hcq__obj_t *obj, hcq__obj_kind_t kind, const char *label,
                       const char *created_by);
void hcq__obj_remove(hcq__obj_t *obj);
/* Marks obj as made by the library for holder's owner (a jit's graphs, a graph's kernargs): the
 * leak report and a failed close list it under the user's object that holds it. */
void hcq__obj_set_holder(hcq__obj_t *obj, const hcq__obj_t *holder);
/* "cannot close" text for dev's live objects: the user's first, then what each holds on their
 * behalf, at most limit names in all ("and N more"). Takes dev's object lock; out always
 * terminated. */
void hcq__obj_describe(hcq_device_t *dev, char *out, size_t size, unsigned limit);
/* Leak reporting (HCQ_VALIDATE=1 or HCQ_LEAK_REPORT): the at-exit report is armed on the first
 * object added; hcq__leak_report_device prints dev's live objects to stderr (why: "at close"). */
bool hcq__leak_reporting(void);
void hcq__leak_report_device(hcq_device_t *dev, const char *why);
/* One line per live object of dev (and its stack, when recorded) to f, at most *budget lines (each
 * counts one off); returns how many objects it saw. The caller holds dev's object lock. */
long hcq__obj_print_locked(hcq_device_t *dev, FILE *f, long *budget);
/* Objects on every device's list, open or closed (lost). */
long hcq__obj_live_count(void);
/* The at-exit report over the open devices (device.c, which keeps them): armed by the first object
 * added while leak reporting is on; prints nothing when no object is alive. */
void hcq__devices_report_leaks_at_exit(void);
/* Validation (HCQ_VALIDATE=1): NULL when obj is a live object of kind on an open device, else an
 * error naming it and what is wrong. Cheap NULL when validation is off. what names the argument. */
HCQ_MUST_USE hcq_status_t hcq__obj_check(const hcq__obj_t *obj, hcq__obj_kind_t kind,
                                         const char *what);
/* Validation: true when obj was released already (prints the complaint to stderr). */
bool hcq__obj_released_again(const hcq__obj_t *obj, const char *call);
/* "buffer", "program", "signal", "graph", "jit": for messages. */
const char *hcq__obj_kind_name(unsigned kind);
extern bool hcq__validating;
extern atomic_ulong hcq__validation_errors;

#endif
