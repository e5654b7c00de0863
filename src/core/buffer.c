#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buffer.h"
#include "core/device.h"
#include "core/guard.h"
#include "core/limits.h"
#include "core/memory.h"
#include "core/object.h"
#include "core/remote.h"

static atomic_ulong g_buffer_ids;

static hcq_buffer_t *buffer_new(hcq_device_t *dev) {
  hcq_buffer_t *b = calloc(1, sizeof(*b));
  if (!b) return NULL;
  atomic_init(&b->refs, 1);
  b->dev = dev;
  b->id = atomic_fetch_add(&g_buffer_ids, 1) + 1;
  snprintf(b->label, sizeof(b->label), "buffer#%" PRIu64, b->id);
  return b;
}

/* call: the public call that made it, for the leak report. */
static hcq_status_t buffer_create(hcq_device_t *dev, uint64_t size, uint32_t flags,
                                  hcq_buffer_t **out_buffer, const char *call) {
  if (!out_buffer)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_buffer_create: out_buffer is NULL");
  *out_buffer = NULL;
  if (!dev) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_buffer_create: device is NULL");
  if (size == 0)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "buffer on %s: size must be greater than 0",
                           dev->name);
  hcq_status_t st = hcq__device_check(dev);
  if (st) return hcq_status_annotate(st, "buffer of %" PRIu64 " bytes", size);
  if ((st = hcq__check_buffer_size(dev, size))) return st;
  hcq_buffer_t *b = buffer_new(dev);
  if (!b)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating a buffer on %s", dev->name);
  bool guard = hcq__guard_wanted(dev, flags) && size <= UINT64_MAX - 2 * HCQ__GUARD_BYTES;
  st = dev->vt->mem_alloc(dev, guard ? size + 2 * HCQ__GUARD_BYTES : size, flags, &b->mem);
  if (st) {
    free(b);
    return hcq_status_annotate(st, "buffer of %" PRIu64 " bytes on %s", size, dev->name);
  }
  b->size = size;
  if (guard && (st = hcq__guard_set_up(b))) {
    hcq__mem_t m = hcq__guard_allocation(b);
    dev->vt->mem_free(dev, &m);
    free(b);
    return st;
  }
  b->addr = b->mem.addr;
  hcq__mem_count(dev, b->mem_class = HCQ__MEMC_BUFFERS, (int64_t)b->mem.size);
  hcq__obj_add_from(dev, &b->obj, HCQ__OBJ_BUFFER, b->label, call);
  *out_buffer = b;
  return NULL;
}

hcq_status_t hcq_buffer_create(hcq_device_t *dev, uint64_t size, hcq_buffer_t **out_buffer) {
  if (out_buffer) *out_buffer = NULL;
  hcq_status_t st = dev ? hcq__device_handle_check(dev, "hcq_buffer_create") : NULL;
  return st ? st : buffer_create(dev, size, 0, out_buffer, "hcq_buffer_create");
}

/* Why dev's buffers have no host address, for UNAVAILABLE messages. */
static const char *why_unmapped(const hcq_device_t *dev) {
  if (hcq__device_is_remote(dev))
    return "it is another process's device (MPI): its memory is not in this process";
  return "its device memory is not host-visible";
}

hcq_status_t hcq_buffer_create_mapped(hcq_device_t *dev, uint64_t size, hcq_buffer_t **out_buffer) {
  if (out_buffer) *out_buffer = NULL;
  hcq_status_t st = dev ? hcq__device_handle_check(dev, "hcq_buffer_create_mapped") : NULL;
  if (st ||
      (st = buffer_create(dev, size, HCQ__MEM_MAPPED, out_buffer, "hcq_buffer_create_mapped")))
    return st;
  if ((*out_buffer)->mem.host) return NULL;
  hcq_buffer_release(*out_buffer);
  *out_buffer = NULL;
  return hcq_status_make(HCQ_UNAVAILABLE,
                         "hcq_buffer_create_mapped on %s: %s, and it has no memory that both its "
                         "kernels and the host reach",
                         dev->name, why_unmapped(dev));
}

hcq_status_t hcq_buffer_wrap(hcq_device_t *dev, void *host, uint64_t size,
                             void (*on_release)(void *ctx, void *host), void *ctx,
                             hcq_buffer_t **out_buffer) {
  if (!out_buffer)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_buffer_wrap: out_buffer is NULL");
  *out_buffer = NULL;
  hcq_status_t st = hcq__device_handle_check(dev, "hcq_buffer_wrap");
  if (st) return st;
  if (!host)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_buffer_wrap on %s: host is NULL", dev->name);
  if (size == 0)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "hcq_buffer_wrap on %s: size must be greater than 0", dev->name);
  if ((uintptr_t)host % HCQ_WRAP_ALIGN)
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "hcq_buffer_wrap on %s: host %p is not aligned to %d bytes (kernels read vector types from "
        "a buffer's start; malloc's memory is aligned enough)",
        dev->name, host, HCQ_WRAP_ALIGN);
  if ((uintptr_t)host > UINTPTR_MAX - size)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "hcq_buffer_wrap on %s: %" PRIu64
                           " bytes at %p end past the address space",
                           dev->name, size, host);
  if (!(dev->caps & HCQ_CAP_HOST_MEMORY) || hcq__device_is_remote(dev))
    return hcq_status_make(
        HCQ_UNAVAILABLE,
        "hcq_buffer_wrap on %s: %s (only devices of this process whose memory is "
        "the host's, HCQ_CAP_HOST_MEMORY, can wrap the application's memory); copy it in instead",
        dev->name,
        hcq__device_is_remote(dev) ? why_unmapped(dev) : "its kernels do not run on host memory");
  if ((st = hcq__device_check(dev))) return hcq_status_annotate(st, "hcq_buffer_wrap");
  hcq_buffer_t *b = buffer_new(dev);
  if (!b)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory wrapping memory on %s", dev->name);
  b->mem = (hcq__mem_t){(uint64_t)(uintptr_t)host, host, size, NULL};
  b->size = size;
  b->addr = b->mem.addr;
  b->wrapped = true;
  b->on_release = on_release;
  b->release_ctx = ctx;
  b->mem_class = HCQ__MEMC_BUFFERS; /* counted nowhere: the application's bytes, not hcq's */
  hcq__obj_add(dev, &b->obj, HCQ__OBJ_BUFFER, b->label);
  *out_buffer = b;
  return NULL;
}

hcq_status_t hcq_buffer_map(hcq_buffer_t *buf, void **out_host) {
  if (!out_host) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_buffer_map: out_host is NULL");
  *out_host = NULL;
  if (!buf) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_buffer_map: buffer is NULL");
  hcq_status_t st = hcq__obj_check(&buf->obj, HCQ__OBJ_BUFFER, "hcq_buffer_map");
  if (st) return st;
  const hcq_buffer_t *base = hcq_buffer_base(buf);
  if (!base->mem.host) {
    char name[96];
    /* What works instead: on a remote device no buffer maps here, hcq_buffer_create_mapped's
     * neither. */
    const char *instead =
        hcq__device_is_remote(buf->dev)
            ? "read its bytes here with hcq_mpi_fetch (every rank calls it), or map it on the rank "
              "that owns the device"
            : "hcq_buffer_create_mapped makes buffers the host can map where the device has such "
              "memory; hcq_buffer_copyin and hcq_buffer_copyout work on every buffer";
    return hcq_status_make(HCQ_UNAVAILABLE, "hcq_buffer_map: %s on %s: %s (%s)",
                           hcq__buffer_name(buf, name), buf->dev->name, why_unmapped(buf->dev),
                           instead);
  }
  *out_host = (char *)base->mem.host + buf->offset;
  return NULL;
}

hcq_status_t hcq__buffer_create_host_visible(hcq_device_t *dev, uint64_t size, hcq_buffer_t **out) {
  return buffer_create(dev, size, HCQ__MEM_HOST_VISIBLE, out, "hcq (internal)");
}

const char *hcq__buffer_name(const hcq_buffer_t *buf, char out[96]) {
  if (!strncmp(buf->label, "buffer#", 7))
    snprintf(out, 96, "%s", buf->label);
  else
    snprintf(out, 96, "buffer \"%.80s\"", buf->label);
  return out;
}

void hcq__buffer_set_mem_class(hcq_buffer_t *buf, hcq__mem_class_t mem_class) {
  if (!buf || buf->base || buf->mem_class == mem_class) return;
  hcq__mem_count(buf->dev, buf->mem_class, -(int64_t)buf->mem.size);
  hcq__mem_count(buf->dev, buf->mem_class = (uint8_t)mem_class, (int64_t)buf->mem.size);
}

hcq_status_t hcq_buffer_view_create(hcq_buffer_t *buf, uint64_t offset, uint64_t size,
                                    hcq_buffer_t **out_view) {
  if (!out_view)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_buffer_view_create: out_view is NULL");
  *out_view = NULL;
  if (!buf) return hcq_status_make(HCQ_INVALID_ARGUMENT, "hcq_buffer_view_create: buffer is NULL");
  hcq_status_t st = hcq__obj_check(&buf->obj, HCQ__OBJ_BUFFER, "hcq_buffer_view_create");
  if (st) return st;
  if (size > UINT64_MAX - offset) /* no wrapped end in the message: the numbers as given */
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "view at offset %" PRIu64 " of %" PRIu64
                           " bytes ends past 2^64: outside %s (%" PRIu64 " bytes)",
                           offset, size, buf->label, buf->size);
  if (size == 0 || offset > buf->size || size > buf->size - offset)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "view [%" PRIu64 ", %" PRIu64 ") is outside %s (%" PRIu64
                           " bytes) or empty",
                           offset, offset + size, buf->label, buf->size);
  hcq_buffer_t *base = hcq_buffer_base(buf);
  if ((st = hcq__check_view_offset(buf->dev, buf->offset + offset, base->label))) return st;
  hcq_buffer_t *v = buffer_new(buf->dev);
  if (!v)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating a view of %s", buf->label);
  v->base = hcq_buffer_retain(base);
  v->offset = buf->offset + offset;
  v->size = size;
  v->addr = base->addr + v->offset;
  snprintf(v->label, sizeof(v->label), "%.40s[%" PRIu64 ":%" PRIu64 "]", base->label, v->offset,
           v->offset + size);
  hcq__obj_add(buf->dev, &v->obj, HCQ__OBJ_BUFFER, v->label);
  *out_view = v;
  return NULL;
}

hcq_buffer_t *hcq_buffer_retain(hcq_buffer_t *buf) {
  if (buf) atomic_fetch_add_explicit(&buf->refs, 1, memory_order_relaxed);
  return buf;
}

void hcq_buffer_release(hcq_buffer_t *buf) {
  if (!buf || hcq__obj_released_again(&buf->obj, "hcq_buffer_release")) return;
  if (atomic_fetch_sub_explicit(&buf->refs, 1, memory_order_acq_rel) != 1) return;
  hcq_device_t *dev = buf->dev;
  if (buf->base) {
    hcq_buffer_release(buf->base);
  } else if (buf->wrapped) {
    hcq__device_defer_wrapped(dev, buf->mem.host, buf->on_release, buf->release_ctx);
  } else {
    hcq__mem_count(dev, buf->mem_class, -(int64_t)buf->mem.size);
    hcq__device_defer_mem(dev, hcq__guard_allocation(buf));
  }
  hcq__obj_remove(&buf->obj);
  /* Validation keeps the struct to recognise it if passed again. */
  if (hcq__validating)
    hcq__keep(buf);
  else
    free(buf);
  hcq__device_struct_release(dev);
}

uint64_t hcq_buffer_address(const hcq_buffer_t *buf) { return buf ? buf->addr : 0; }
uint64_t hcq_buffer_size(const hcq_buffer_t *buf) { return buf ? buf->size : 0; }
uint64_t hcq_buffer_offset(const hcq_buffer_t *buf) { return buf ? buf->offset : 0; }
hcq_buffer_t *hcq_buffer_base(const hcq_buffer_t *buf) {
  return buf ? (buf->base ? buf->base : (hcq_buffer_t *)buf) : NULL;
}
hcq_device_t *hcq_buffer_device(const hcq_buffer_t *buf) { return buf ? buf->dev : NULL; }
const char *hcq_buffer_label(const hcq_buffer_t *buf) { return buf ? buf->label : ""; }
void hcq_buffer_set_label(hcq_buffer_t *buf, const char *label) {
  if (!buf || !label) return;
  /* Messages read labels under the device's object lock (close names live buffers). */
  pthread_mutex_lock(&buf->dev->obj_lock);
  snprintf(buf->label, sizeof(buf->label), "%s", label);
  pthread_mutex_unlock(&buf->dev->obj_lock);
}
