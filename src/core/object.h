/* The live objects of a device and the handle checks of HCQ_VALIDATE=1 (object.c). */
#ifndef HCQ_CORE_OBJECT_H
#define HCQ_CORE_OBJECT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hcq/device.h"

/* Every buffer, program, public signal and graph of a device is on the device's object list, so a
 * failed close names them. With HCQ_VALIDATE=1 a released object keeps its struct (marked dead) so
 * passing it again is reported by name. */
typedef enum { HCQ__OBJ_BUFFER, HCQ__OBJ_PROGRAM, HCQ__OBJ_SIGNAL, HCQ__OBJ_GRAPH } hcq__obj_kind_t;
enum { HCQ__OBJ_LIVE = 0x4c495645u, HCQ__OBJ_DEAD = 0x44454144u };

typedef struct hcq__obj {
  struct hcq__obj *prev, *next;
  hcq_device_t *dev;
  const char *label; /* the object's name, valid as long as the object */
  _Atomic uint32_t state;
  uint8_t kind;      /* hcq__obj_kind_t */
} hcq__obj_t;

/* Puts obj on dev's list (and holds the device's struct); remove takes it off. */
void hcq__obj_add(hcq_device_t *dev, hcq__obj_t *obj, hcq__obj_kind_t kind, const char *label);
void hcq__obj_remove(hcq__obj_t *obj);
/* Validation (HCQ_VALIDATE=1): NULL when obj is a live object of kind on an open device, else an
 * error naming it and what is wrong. Cheap NULL when validation is off. what names the argument. */
HCQ_MUST_USE hcq_status_t hcq__obj_check(const hcq__obj_t *obj, hcq__obj_kind_t kind, const char *what);
/* Validation: true when obj was released already (prints the complaint to stderr). */
bool hcq__obj_released_again(const hcq__obj_t *obj, const char *call);
/* "buffer", "program", "signal", "graph": for messages. */
const char *hcq__obj_kind_name(unsigned kind);
extern bool hcq__validating;
extern atomic_ulong hcq__validation_errors;

#endif
