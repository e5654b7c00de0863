/* HCQ_VALIDATE=1 bounds canaries on devices whose memory is not the host's (guard.h).
 *
 * Their memory cannot be guarded by pages the host protects, and their kernels reach buffers by
 * address, beyond what robust buffer access bounds. So each buffer is allocated HCQ__GUARD_BYTES
 * larger on both sides, its address is past the front guard, and both guards are filled with a
 * pattern. After each launch (its work done) the guards of the buffers it was given are read back
 * through the ordinary copy path and compared: a changed byte is a write outside the buffer, by
 * that kernel. What it cannot see: reads, writes farther than the guards, and writes of the
 * pattern's own bytes. Graph replays are checked where HCQ_VALIDATE already runs them item by
 * item, eagerly (a kernel item whose outs leave buffers undeclared: graph/exec_item.c); other
 * replays run on the device as they would without validation (forcing them eager would change
 * what a replay waits for and signals), and a canary they change is found by the next launch
 * given that buffer. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/device.h"
#include "core/eager.h"
#include "core/guard.h"
#include "core/program.h"
#include "core/remote.h"
#include "core/validate.h"

static unsigned char canary_byte(uint64_t i) { return (unsigned char)(0xA5u ^ (i * 29u)); }

static void canary(unsigned char *out) {
  for (uint64_t i = 0; i < HCQ__GUARD_BYTES; i++) out[i] = canary_byte(i);
}

bool hcq__guard_wanted(const hcq_device_t *dev, uint32_t mem_flags) {
  return hcq__validating && !(dev->caps & HCQ_CAP_HOST_MEMORY) && !hcq__device_is_remote(dev) &&
         !(mem_flags & HCQ__MEM_HOST_VISIBLE);
}

/* The two guards' device addresses. */
static uint64_t front_of(const hcq_buffer_t *b) { return b->mem.addr - HCQ__GUARD_BYTES; }
static uint64_t back_of(const hcq_buffer_t *b) { return b->mem.addr + b->size; }

hcq_status_t hcq__guard_set_up(hcq_buffer_t *b) {
  b->mem.addr += HCQ__GUARD_BYTES;
  if (b->mem.host) b->mem.host = (char *)b->mem.host + HCQ__GUARD_BYTES;
  b->guarded = true;
  unsigned char pattern[HCQ__GUARD_BYTES];
  canary(pattern);
  hcq_status_t st;
  if ((st = hcq__device_write(b->dev, front_of(b), pattern, HCQ__GUARD_BYTES)) ||
      (st = hcq__device_write(b->dev, back_of(b), pattern, HCQ__GUARD_BYTES)))
    return hcq_status_annotate(st, "HCQ_VALIDATE filling the guards of a buffer");
  return NULL;
}

hcq__mem_t hcq__guard_allocation(const hcq_buffer_t *b) {
  hcq__mem_t m = b->mem;
  if (!b->guarded) return m;
  m.addr -= HCQ__GUARD_BYTES;
  if (m.host) m.host = (char *)m.host - HCQ__GUARD_BYTES;
  return m;
}

/* The first and last changed byte of a guard read back: false when it holds the canary. */
static bool changed(const unsigned char *got, uint64_t *first, uint64_t *last) {
  unsigned char want[HCQ__GUARD_BYTES];
  canary(want);
  if (!memcmp(got, want, HCQ__GUARD_BYTES)) return false;
  *first = 0, *last = HCQ__GUARD_BYTES - 1;
  while (got[*first] == want[*first]) ++*first;
  while (got[*last] == want[*last]) --*last;
  return true;
}

/* "buffer "x" (argument 2, 16 bytes)", with ", a view at its byte N" for a view. */
static void name_arg(const hcq_launch_desc_t *d, size_t arg, char *out, size_t size) {
  const hcq_buffer_t *b = d->bufs[arg], *base = hcq_buffer_base(b);
  char name[96], view[48] = "";
  hcq__buffer_name(base, name);
  if (b != base) snprintf(view, sizeof(view), ", a view at its byte %" PRIu64, b->offset);
  snprintf(out, size, "%s (argument %zu%s, %" PRIu64 " bytes)", name, arg, view, base->size);
}

/* One guarded base buffer: NULL, or the device lost with the kernel and bytes named. */
static hcq_status_t check_one(const hcq_launch_desc_t *d, size_t arg) {
  hcq_buffer_t *b = hcq_buffer_base(d->bufs[arg]);
  hcq_device_t *dev = b->dev;
  unsigned char front[HCQ__GUARD_BYTES], back[HCQ__GUARD_BYTES];
  hcq_status_t st;
  if ((st = hcq__device_read(dev, front_of(b), front, HCQ__GUARD_BYTES)) ||
      (st = hcq__device_read(dev, back_of(b), back, HCQ__GUARD_BYTES)))
    return hcq_status_annotate(st, "HCQ_VALIDATE reading the guards of argument %zu", arg);
  uint64_t first, last;
  bool before = changed(front, &first, &last), after = !before && changed(back, &first, &last);
  if (!before && !after) return NULL;
  unsigned char pattern[HCQ__GUARD_BYTES];
  canary(pattern); /* repaired: reported once, and checked again afterwards */
  st = hcq__device_write(dev, before ? front_of(b) : back_of(b), pattern, HCQ__GUARD_BYTES);
  hcq_status_destroy(st);
  char buffer[200];
  name_arg(d, arg, buffer, sizeof(buffer));
  if (after)
    hcq__device_mark_lost(
        dev,
        "kernel %s on %s wrote past the end of %s: bytes %" PRIu64 " to %" PRIu64 " of it, %" PRIu64
        " to %" PRIu64 " bytes past its end (an HCQ_VALIDATE canary changed)",
        d->program->name, dev->name, buffer, b->size + first, b->size + last, first, last);
  else
    hcq__device_mark_lost(dev,
                          "kernel %s on %s wrote before the start of %s: %" PRIu64 " to %" PRIu64
                          " bytes before "
                          "its start (an HCQ_VALIDATE canary changed)",
                          d->program->name, dev->name, buffer, HCQ__GUARD_BYTES - first,
                          HCQ__GUARD_BYTES - last);
  return hcq_device_health(dev);
}

hcq_status_t hcq__guard_check_launch(const hcq_launch_desc_t *d) {
  for (size_t i = 0; i < d->nbufs; i++) {
    const hcq_buffer_t *base = hcq_buffer_base(d->bufs[i]);
    if (!base->guarded) continue;
    bool seen = false;
    for (size_t k = 0; k < i && !seen; k++) seen = hcq_buffer_base(d->bufs[k]) == base;
    hcq_status_t st = seen ? NULL : check_one(d, i);
    if (st) return st;
  }
  return NULL;
}
