/* Buffers (buffer.c): base buffers own device memory; views share a base's. */
#ifndef HCQ_CORE_BUFFER_H
#define HCQ_CORE_BUFFER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/memory.h"
#include "core/object.h"
#include "hcq/buffer.h"

struct hcq_buffer {
  hcq__obj_t obj;
  atomic_uint refs;
  hcq_device_t *dev;
  hcq_buffer_t *base; /* NULL for a base buffer */
  uint64_t offset, size, addr;
  hcq__mem_t mem; /* base buffers only */
  uint64_t id;
  uint8_t mem_class; /* hcq__mem_class_t its bytes count in (base buffers) */
  bool wrapped;      /* memory the application owns (hcq_buffer_wrap): handed back, never freed */
  bool guarded;      /* HCQ_VALIDATE canaries on both sides of its bytes (core/guard.h) */
  hcq__wrap_release_fn on_release;
  void *release_ctx;
  char label[64];
};

/* A buffer with a host mapping (kernargs, profile timestamps), for graphs. */
HCQ_MUST_USE hcq_status_t hcq__buffer_create_host_visible(hcq_device_t *dev, uint64_t size,
                                                          hcq_buffer_t **out);
/* Moves a base buffer's bytes to another accounting class (graph kernargs, profile timestamps). */
void hcq__buffer_set_mem_class(hcq_buffer_t *buf, hcq__mem_class_t mem_class);
/* A buffer as messages name it: its default label as it is ("buffer#5"), a label the user set
 * quoted after "buffer" ("buffer \"weights\""): never "buffer buffer#5". out holds 96 bytes. */
const char *hcq__buffer_name(const hcq_buffer_t *buf, char out[96]);

#endif
