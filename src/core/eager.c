/* Eager work: every piece waits for the device timeline's previous value, does its job, signals the
 * next value. The scratch queues are rebuilt per command under the device lock. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/buffer.h"
#include "core/capture.h"
#include "core/device.h"
#include "core/eager.h"
#include "core/guard.h"
#include "core/limits.h"
#include "core/memory.h"
#include "core/object.h"
#include "core/options.h"
#include "core/program.h"
#include "core/queue.h"
#include "core/remote.h"
#include "core/status.h"
#include "core/validate.h"
#include "trace/trace_internal.h"

static inline hcq_operand_t sig_addr(const hcq_signal_t *s) {
  return hcq_imm((int64_t)s->mem.addr);
}

/* Appends wait(timeline, tv - 1) to q. */
static hcq_status_t wait_timeline(hcq_queue_t *q, const hcq_device_t *dev) {
  return hcq_queue_wait(q, sig_addr(dev->timeline), hcq_imm((int64_t)dev->timeline_value - 1));
}

/* Appends signal(timeline, tv) to q and, once submitted, bumps tv. */
static hcq_status_t submit_and_signal(hcq_queue_t *q, hcq_device_t *on,
                                      hcq_device_t *timeline_dev) {
  HCQ__TRY(hcq_queue_signal(q, sig_addr(timeline_dev->timeline),
                            hcq_imm((int64_t)timeline_dev->timeline_value)));
  HCQ__TRY(hcq__queue_submit_locked(q, on, NULL, 0));
  hcq__timeline_advance(timeline_dev);
  hcq__trace_op_submitted(on);
  return NULL;
}

/* Kernel arguments from the ring: a segment is waited for when the head enters it. */
static hcq_status_t kernargs_alloc(hcq_device_t *dev, uint64_t size, uint64_t *out_offset) {
  uint64_t ring = dev->kernargs.size, seg = ring / HCQ__KERNARGS_SEGMENTS;
  uint64_t head = dev->kernargs_head;
  if (head + size > ring) head = 0;
  long prev_seg = dev->kernargs_head && head ? (long)((dev->kernargs_head - 1) / seg) : -1;
  uint64_t first = head / seg, last = (head + size - 1) / seg;
  for (uint64_t s = first; s <= last; s++) {
    if ((long)s == prev_seg) continue;
    hcq_status_t st = hcq__device_wait_timeline(dev, dev->kernargs_fence[s]);
    if (st) return hcq_status_annotate(st, "%s: kernel-argument ring is full", dev->name);
  }
  for (uint64_t s = first; s <= last; s++) dev->kernargs_fence[s] = dev->timeline_value;
  dev->kernargs_head = head + size;
  *out_offset = head;
  return NULL;
}

bool hcq__dims_ok(const hcq_device_t *dev, const uint64_t global[3], const uint64_t local[3]) {
  const hcq_device_limits_t *l = &dev->limits;
  uint64_t items = 1, threads = 1;
  bool over = false;
  for (int i = 0; i < 3; i++) {
    if (global[i] > UINT32_MAX || local[i] > UINT32_MAX) return false;
    if (!global[i] || !local[i]) return true; /* an empty launch runs nothing */
    over |= global[i] > l->max_grid[i] || local[i] > l->max_group_size[i];
    over |= __builtin_mul_overflow(items, global[i] * local[i], &items);
    over |= __builtin_mul_overflow(threads, local[i], &threads);
  }
  return !over && items <= l->max_work_items && threads <= l->max_group_threads;
}

hcq_status_t hcq__check_dims(const hcq_device_t *dev, const uint64_t global[3],
                             const uint64_t local[3], const char *who) {
  if (hcq__dims_ok(dev, global, local)) return NULL;
  unsigned __int128 items = 1;
  bool empty = false;
  for (int i = 0; i < 3; i++) {
    if (global[i] > UINT32_MAX || local[i] > UINT32_MAX)
      return hcq_status_make(HCQ_OUT_OF_RANGE,
                             "%s: launch dims must fit 32 bits (global[%d] %" PRIu64
                             ", local[%d] %" PRIu64 ")",
                             who, i, global[i], i, local[i]);
    empty |= global[i] == 0 || local[i] == 0;
    items *= (unsigned __int128)global[i] * local[i];
  }
  if (empty) return NULL; /* an empty launch runs nothing */
  hcq_status_t st = hcq__check_group_limits(dev, global, local, who);
  if (st) return st;
  uint64_t limit = dev->limits.max_work_items;
  if (items > limit)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "%s: grid %" PRIu64 "x%" PRIu64 "x%" PRIu64 " of groups %" PRIu64
                           "x%" PRIu64 "x%" PRIu64
                           " is %s work-items, more than %s runs in one launch (%" PRIu64 ")",
                           who, global[0], global[1], global[2], local[0], local[1], local[2],
                           items >> 64 ? "over 2^64" : "too many", dev->name, limit);
  return NULL;
}

hcq_status_t hcq__zero_dim_error(const char *dim, int index, const char *fmt, ...) {
  char who[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(who, sizeof(who), fmt, ap);
  va_end(ap);
  return hcq_status_make(HCQ_INVALID_ARGUMENT,
                         "%s: %s[%d] is 0 (launch dims must be >= 1; use 1 for unused dims)", who,
                         dim, index);
}

static hcq_status_t check_launch(const hcq_launch_desc_t *d) {
  if (!d || !d->program)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "launch: descriptor or program is NULL");
  const hcq_program_t *p = d->program;
  hcq_status_t st = hcq__obj_check(&p->obj, HCQ__OBJ_PROGRAM, "launch: program");
  if (st) return st;
  if ((d->nbufs && !d->bufs) || (d->nvals && !d->vals))
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "launch of %s: %zu buffers / %zu values but the array is NULL", p->name,
                           d->nbufs, d->nvals);
  if (d->nbufs > HCQ_MAX_KERNEL_BUFS || d->nvals > HCQ_MAX_KERNEL_VALS)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "launch of %s: %zu buffers and %zu values exceed the limits (%d, %d)",
                           p->name, d->nbufs, d->nvals, HCQ_MAX_KERNEL_BUFS, HCQ_MAX_KERNEL_VALS);
  if (!hcq__program_args_ok(p, d->nbufs, d->nvals)) {
    char who[96];
    snprintf(who, sizeof(who), "launch of %s", p->name);
    return hcq__program_check_args(p, d->nbufs, d->nvals, who);
  }
  if (d->nbufs > p->dev->limits.max_kernel_buffers || d->nvals > p->dev->limits.max_kernel_values) {
    char who[96];
    snprintf(who, sizeof(who), "launch of %s", p->name);
    return hcq__check_arg_limits(p->dev, d->nbufs, d->nvals, who);
  }
  if (d->nouts && !d->outs)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "launch of %s: %zu outs but the array is NULL",
                           p->name, d->nouts);
  for (size_t i = 0; i < d->nouts; i++)
    if (d->outs[i] >= d->nbufs)
      return hcq_status_make(HCQ_OUT_OF_RANGE,
                             "launch of %s: out %zu names buffer %u but there are %zu", p->name, i,
                             d->outs[i], d->nbufs);
  for (size_t i = 0; i < d->nbufs; i++) {
    if (!d->bufs[i])
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "launch of %s: buffer %zu is NULL", p->name, i);
    if (hcq__validating) {
      char what[128];
      snprintf(what, sizeof(what), "launch of %s: buffer %zu", p->name, i);
      if ((st = hcq__obj_check(&d->bufs[i]->obj, HCQ__OBJ_BUFFER, what))) return st;
    }
    if (d->bufs[i]->dev != p->dev)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "launch of %s: buffer %zu (%s) is on %s but the program runs on %s",
                             p->name, i, d->bufs[i]->label, d->bufs[i]->dev->name, p->dev->name);
  }
  uint64_t g[3], l[3];
  for (int i = 0; i < 3; i++) {
    /* A dim left out of an initializer ({n} for {n, 1, 1}) is 0: refused, not an empty launch. */
    if (!d->global[i] || !d->local[i])
      return hcq__zero_dim_error(!d->global[i] ? "global" : "local", i, "launch of %s", p->name);
    g[i] = d->global[i], l[i] = d->local[i];
  }
  if (hcq__dims_ok(p->dev, g, l)) return NULL; /* the message is built only for a failure */
  char who[128];
  snprintf(who, sizeof(who), "launch of %s", p->name);
  return hcq__check_dims(p->dev, g, l, who);
}

hcq_status_t hcq_launch(const hcq_launch_desc_t *d) {
  uint64_t traced = hcq__trace_host_begin();
  hcq_status_t st = check_launch(d);
  if (st) return st;
  hcq__write_check_t *wc = NULL;
  if (hcq__validating && (st = hcq__write_check_begin(d, &wc))) return st;
  hcq_device_t *dev = d->program->dev;
  hcq__trace_op_t op;
  hcq_operand_t global[3], local[3];
  for (int i = 0; i < 3; i++) {
    global[i] = hcq_imm(d->global[i]);
    local[i] = hcq_imm(d->local[i]);
  }
  pthread_mutex_lock(&dev->lock);
  uint64_t args_off = 0;
  hcq_queue_t *q = dev->eager_compute;
  hcq__queue_reset(q);
  if (!(st = hcq__device_prepare_submit(dev)) &&
      !(st = kernargs_alloc(dev, hcq_kernargs_size(d->nbufs, d->nvals), &args_off))) {
    hcq__kernargs_fill((char *)dev->kernargs.host + args_off, d->bufs, d->nbufs, d->vals, d->nvals);
    if (!(st = wait_timeline(q, dev)) && !(st = hcq_queue_memory_barrier(q)) &&
        !(st = hcq__trace_op_begin(&op, dev, q)) &&
        !(st = hcq_queue_exec(q, d->program, hcq_imm((int64_t)(dev->kernargs.addr + args_off)),
                              d->nbufs, global, local)) &&
        !(st = hcq__trace_op_end(&op, dev, q, d->program->name, NULL, 0)))
      st = submit_and_signal(q, dev, dev);
  }
  pthread_mutex_unlock(&dev->lock);
  if (st) {
    hcq__write_check_free(wc);
    return hcq_status_annotate(st, "launch of %s on %s", d->program->name, dev->name);
  }
  if ((st = hcq__write_check_end(wc, d)))
    return st; /* a launch that failed the check is not recorded */
  if (hcq__validating && (st = hcq__guard_check_launch(d))) return st;
  hcq__trace_host_end(traced, 0, "launch %s", d->program->name);
  if (hcq__recorder) hcq__recorder->launch(hcq__recorder->ctx, d);
  if (hcq__captures_elsewhere())
    hcq__capture_note_other_thread(dev, "launch of %s", d->program->name);
  return NULL;
}

/* Between a device whose memory is ordinary host memory (CPU) and one whose copy queue reaches host
 * memory but cannot wait on host-memory signals (a GPU): the host first sees the host-memory
 * device's earlier work finish, then the GPU's copy queue copies and signals both timelines. */
static hcq_status_t transfer_via_host_locked(hcq_device_t *gpu, hcq_device_t *host_dev,
                                             uint64_t dst, uint64_t src, uint64_t size) {
  if (!(gpu->caps & HCQ_CAP_COPIES_HOST_MEMORY))
    return hcq_status_make(HCQ_UNIMPLEMENTED, "transfers between %s and %s are not supported",
                           gpu->name, host_dev->name);
  hcq_status_t st = hcq__device_wait_timeline(host_dev, host_dev->timeline_value - 1);
  if (st) return st;
  hcq_queue_t *q = gpu->eager_copy;
  hcq__queue_reset(q);
  if ((st = wait_timeline(q, gpu)) ||
      (st = hcq_queue_copy(q, hcq_imm((int64_t)dst), hcq_imm((int64_t)src),
                           hcq_imm((int64_t)size))) ||
      (st = hcq_queue_signal(q, sig_addr(host_dev->timeline),
                             hcq_imm((int64_t)host_dev->timeline_value))) ||
      (st = submit_and_signal(q, gpu, gpu)))
    return st;
  hcq__timeline_advance(host_dev);
  return NULL;
}

/* The copy on src's copy queue, ordered after both timelines; dst's compute queue then orders
 * its own timeline after it. Both devices are locked. */
static hcq_status_t transfer_locked(hcq_device_t *sd, hcq_device_t *dd, uint64_t dst, uint64_t src,
                                    uint64_t size) {
  HCQ__TRY(hcq__device_prepare_submit(sd));
  if (dd != sd) HCQ__TRY(hcq__device_prepare_submit(dd));
  hcq_status_t st;
  if (sd != dd && ((sd->caps ^ dd->caps) & HCQ_CAP_HOST_MEMORY))
    return sd->caps & HCQ_CAP_HOST_MEMORY ? transfer_via_host_locked(dd, sd, dst, src, size)
                                          : transfer_via_host_locked(sd, dd, dst, src, size);
  hcq_queue_t *q = sd->eager_copy;
  hcq__queue_reset(q);
  if ((st = wait_timeline(q, sd))) return st;
  if (dd != sd && (st = wait_timeline(q, dd))) return st;
  hcq__trace_op_t op;
  if ((st = hcq__trace_op_begin(&op, sd, q)) ||
      (st = hcq_queue_copy(q, hcq_imm((int64_t)dst), hcq_imm((int64_t)src),
                           hcq_imm((int64_t)size))) ||
      (st = hcq__trace_op_end(&op, sd, q, sd->name, dd->name, size)))
    return st;
  uint64_t copied = sd->timeline_value;
  if ((st = submit_and_signal(q, sd, sd)) || dd == sd) return st;
  hcq_queue_t *dq = dd->eager_compute;
  hcq__queue_reset(dq);
  if ((st = hcq_queue_wait(dq, sig_addr(sd->timeline), hcq_imm((int64_t)copied)))) return st;
  return submit_and_signal(dq, dd, dd);
}

hcq_status_t hcq__transfer_overlap_check(const hcq_buffer_t *dst, const hcq_buffer_t *src,
                                         uint64_t size, const char *who) {
  const hcq_buffer_t *db = dst->base ? dst->base : dst, *sb = src->base ? src->base : src;
  uint64_t d0 = dst->base ? dst->offset : 0, s0 = src->base ? src->offset : 0;
  if (db != sb || size == 0 || d0 == s0 || d0 >= s0 + size || s0 >= d0 + size) return NULL;
  return hcq_status_make(
      HCQ_INVALID_ARGUMENT,
      "%s: transfer of %" PRIu64 " bytes from %s to %s: the ranges overlap (bytes %" PRIu64
      "..%" PRIu64 " and %" PRIu64 "..%" PRIu64
      " of %s); a copy between overlapping ranges is undefined on GPUs, so "
      "hcq refuses it everywhere: copy through a scratch buffer",
      who, size, src->label, dst->label, s0, s0 + size, d0, d0 + size, db->label);
}

hcq_status_t hcq_transfer(hcq_buffer_t *dst, hcq_buffer_t *src, uint64_t size) {
  uint64_t traced = hcq__trace_host_begin();
  if (!dst || !src)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "transfer: destination or source is NULL");
  hcq_status_t vst = hcq__obj_check(&dst->obj, HCQ__OBJ_BUFFER, "transfer: destination");
  if (!vst) vst = hcq__obj_check(&src->obj, HCQ__OBJ_BUFFER, "transfer: source");
  if (vst) return vst;
  if (size > dst->size || size > src->size)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "transfer of %" PRIu64 " bytes from %s (%" PRIu64
                           " bytes) to %s (%" PRIu64 " bytes): larger than a buffer",
                           size, src->label, src->size, dst->label, dst->size);
  if (size == 0) return NULL;
  if ((vst = hcq__transfer_overlap_check(dst, src, size, "transfer"))) return vst;
  hcq_device_t *devs[2] = {src->dev, dst->dev};
  hcq__device_lock_many(devs, 2);
  hcq_status_t st;
  if (hcq__device_is_remote(src->dev) || hcq__device_is_remote(dst->dev)) {
    /* Another rank's end (docs/mpi.md): on the remote device's copy queue (the one that sends or
     * receives), its COPY tagged with the transfer's sequence number, which every rank draws in the
     * same order. */
    const hcq__remote_hooks_t *hooks = atomic_load(&hcq__remote);
    hcq_device_t *qd = hcq__device_is_remote(dst->dev) ? dst->dev : src->dev;
    hcq_device_t *od = qd == dst->dev ? src->dev : dst->dev;
    qd->eager_copy->tag = hooks ? hooks->eager_tag(src->dev, dst->dev) : 0;
    st = transfer_locked(qd, od, dst->addr, src->addr, size);
    qd->eager_copy->tag = 0;
  } else {
    st = transfer_locked(src->dev, dst->dev, dst->addr, src->addr, size);
  }
  hcq__device_unlock_many(devs, 2);
  if (st) return hcq_status_annotate(st, "transfer %s -> %s", src->label, dst->label);
  hcq__trace_host_end(traced, size, "transfer %s -> %s", src->dev->name, dst->dev->name);
  if (hcq__recorder) hcq__recorder->transfer(hcq__recorder->ctx, dst, src, size);
  if (hcq__captures_elsewhere()) {
    hcq__capture_note_other_thread(src->dev, "transfer %s -> %s", src->label, dst->label);
    if (dst->dev != src->dev)
      hcq__capture_note_other_thread(dst->dev, "transfer %s -> %s", src->label, dst->label);
  }
  return NULL;
}

/* ---- host transfers through staging buffers ---- */

static hcq_status_t next_staging(hcq_device_t *dev, unsigned *out_index) {
  unsigned s = dev->staging_next;
  dev->staging_next = (s + 1) % HCQ__STAGING_BUFFERS;
  if (!dev->staging[s].host) {
    hcq_status_t st = dev->vt->mem_alloc(dev, hcq__options()->staging_chunk, HCQ__MEM_HOST_VISIBLE,
                                         &dev->staging[s]);
    if (st) return hcq_status_annotate(st, "staging buffer on %s", dev->name);
    hcq__mem_count(dev, HCQ__MEMC_EAGER, (int64_t)dev->staging[s].size);
  }
  hcq_status_t st = hcq__device_wait_timeline(dev, dev->staging_fence[s]);
  if (st) return st;
  *out_index = s;
  return NULL;
}

static hcq_status_t check_host_copy(const char *what, hcq_buffer_t *buf, uint64_t offset,
                                    const void *host, uint64_t size) {
  if (!buf) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: buffer is NULL", what);
  hcq_status_t st = hcq__obj_check(&buf->obj, HCQ__OBJ_BUFFER, what);
  if (st) return st;
  if (size && !host)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s of %s: host pointer is NULL", what,
                           buf->label);
  if (offset > buf->size || size > buf->size - offset)
    return hcq_status_make(HCQ_OUT_OF_RANGE,
                           "%s: %" PRIu64 " bytes at offset %" PRIu64 " are outside %s (%" PRIu64
                           " bytes)",
                           what, size, offset, buf->label, buf->size);
  return NULL;
}

/* hcq__device_write with dev locked. */
static hcq_status_t device_write_locked(hcq_device_t *dev, uint64_t addr, const void *src,
                                        uint64_t size) {
  hcq__trace_op_t op;
  uint64_t chunk = hcq__options()->staging_chunk;
  /* One wrap check up front: a wrap mid-way would invalidate the fences of chunks in flight. */
  HCQ__TRY(hcq__device_prepare_submit(dev));
  for (uint64_t done = 0; done < size; done += chunk) {
    uint64_t n = size - done < chunk ? size - done : chunk;
    unsigned s;
    HCQ__TRY(next_staging(dev, &s));
    memcpy(dev->staging[s].host, (const char *)src + done, n);
    hcq_queue_t *q = dev->eager_copy;
    hcq__queue_reset(q);
    HCQ__TRY(wait_timeline(q, dev));
    HCQ__TRY(hcq__trace_op_begin(&op, dev, q));
    HCQ__TRY(hcq_queue_copy(q, hcq_imm((int64_t)(addr + done)),
                            hcq_imm((int64_t)dev->staging[s].addr), hcq_imm((int64_t)n)));
    HCQ__TRY(hcq__trace_op_end(&op, dev, q, "host", dev->name, n));
    dev->staging_fence[s] = dev->timeline_value;
    HCQ__TRY(submit_and_signal(q, dev, dev));
  }
  return NULL;
}

hcq_status_t hcq__device_write(hcq_device_t *dev, uint64_t addr, const void *src, uint64_t size) {
  pthread_mutex_lock(&dev->lock);
  hcq_status_t st = device_write_locked(dev, addr, src, size);
  pthread_mutex_unlock(&dev->lock);
  return st;
}

hcq_status_t hcq_buffer_copyin(hcq_buffer_t *buf, uint64_t offset, const void *src, uint64_t size) {
  uint64_t traced = hcq__trace_host_begin();
  hcq_status_t st = check_host_copy("copyin", buf, offset, src, size);
  if (st || size == 0) return st;
  /* Another rank's buffer (docs/mpi.md): its owner's copyin, in the same SPMD program, fills it. */
  if (hcq__device_is_remote(buf->dev)) return NULL;
  hcq_device_t *dev = buf->dev;
  if ((st = hcq__device_write(dev, buf->addr + offset, src, size)))
    return hcq_status_annotate(st, "copyin to %s", buf->label);
  hcq__trace_host_end(traced, size, "copyin %s", dev->name);
  if (hcq__recorder) hcq__recorder->host_copy(hcq__recorder->ctx, "copyin", buf, size);
  if (hcq__captures_elsewhere()) hcq__capture_note_other_thread(dev, "copyin to %s", buf->label);
  return NULL;
}

/* Queues the copy of n bytes at addr into staging buffer *s; *fence is its timeline value. */
static hcq_status_t read_chunk_locked(hcq_device_t *dev, uint64_t addr, uint64_t n, unsigned *s,
                                      uint64_t *fence) {
  hcq__trace_op_t op;
  hcq_queue_t *q = dev->eager_copy;
  HCQ__TRY(next_staging(dev, s));
  hcq__queue_reset(q);
  HCQ__TRY(wait_timeline(q, dev));
  HCQ__TRY(hcq__trace_op_begin(&op, dev, q));
  HCQ__TRY(hcq_queue_copy(q, hcq_imm((int64_t)dev->staging[*s].addr), hcq_imm((int64_t)addr),
                          hcq_imm((int64_t)n)));
  HCQ__TRY(hcq__trace_op_end(&op, dev, q, dev->name, "host", n));
  *fence = dev->timeline_value;
  dev->staging_fence[*s] = *fence;
  return submit_and_signal(q, dev, dev);
}

/* hcq__device_read with dev locked. Two chunks in flight: the device fills one staging buffer
 * while the host drains the other. */
static hcq_status_t device_read_locked(hcq_device_t *dev, uint64_t addr, void *dst, uint64_t size) {
  uint64_t chunk = hcq__options()->staging_chunk;
  uint64_t pending_off = 0, pending_n = 0, pending_fence = 0;
  unsigned pending_buf = 0;
  HCQ__TRY(hcq__device_prepare_submit(dev));
  for (uint64_t done = 0; done < size || pending_n; done += chunk) {
    uint64_t n = done < size ? (size - done < chunk ? size - done : chunk) : 0;
    unsigned s = 0;
    uint64_t fence = 0;
    if (n) HCQ__TRY(read_chunk_locked(dev, addr + done, n, &s, &fence));
    if (pending_n) {
      HCQ__TRY(hcq__device_wait_timeline(dev, pending_fence));
      memcpy((char *)dst + pending_off, dev->staging[pending_buf].host, pending_n);
    }
    pending_off = done, pending_n = n, pending_fence = fence, pending_buf = s;
  }
  return NULL;
}

hcq_status_t hcq__device_read(hcq_device_t *dev, uint64_t addr, void *dst, uint64_t size) {
  pthread_mutex_lock(&dev->lock);
  hcq_status_t st = device_read_locked(dev, addr, dst, size);
  pthread_mutex_unlock(&dev->lock);
  return st;
}

hcq_status_t hcq_buffer_copyout(hcq_buffer_t *buf, uint64_t offset, void *dst, uint64_t size) {
  uint64_t traced = hcq__trace_host_begin();
  hcq_status_t st = check_host_copy("copyout", buf, offset, dst, size);
  if (st || size == 0) return st;
  if (hcq__device_is_remote(buf->dev))
    return hcq_status_make(
        HCQ_FAILED_PRECONDITION,
        "copyout from %s: it lives on another rank (%s); fetch it with "
        "hcq_transfer into a local buffer (every rank calls it) or hcq_mpi_fetch",
        buf->label, buf->dev->name);
  hcq_device_t *dev = buf->dev;
  if ((st = hcq__device_read(dev, buf->addr + offset, dst, size)))
    return hcq_status_annotate(st, "copyout from %s", buf->label);
  hcq__trace_host_end(traced, size, "copyout %s", dev->name);
  if (hcq__recorder) hcq__recorder->host_copy(hcq__recorder->ctx, "copyout", buf, size);
  return NULL;
}
