/* The Vulkan engine thread's reading of the command words (vk_engine_internal.h): runs of
 * recordable commands go to vk_record.c, and the commands resolved when the engine reaches them
 * (WAIT, SIGNAL, a COPY that leaves the device) are handled here, against the addresses they name.
 */
#include <inttypes.h>

#include "core/command.h"
#include "core/device.h"
#include "core/signal.h"
#include "vulkan/vk_engine_internal.h"

/* ---- addresses ---- */

/* The signal words at addr, reachable by the host; NULL (device lost) when they are not. */
hcq__signal_words_t *hcq__vk_signal_words(vk_engine_t *e, const uint32_t *cmd, uint64_t addr) {
  vk_where_t at;
  char *p;
  if (hcq__vk_resolve(addr, sizeof(hcq__signal_words_t), &at)) {
    if (!at.block->host) {
      hcq__vk_lose(e, cmd, "the signal at 0x%" PRIx64 " is in device memory the host cannot map",
                   addr);
      return NULL;
    }
    p = at.block->host + at.offset;
  } else {
    p = (char *)(uintptr_t)addr; /* host memory of another device kind (a CPU signal) */
  }
  if (!p || ((uintptr_t)p & 7)) {
    hcq__vk_lose(e, cmd, "0x%" PRIx64 " is not a signal address", addr);
    return NULL;
  }
  return (hcq__signal_words_t *)(void *)p;
}

/* Whether [addr, addr + size) is memory of this engine's device. */
bool hcq__vk_own_memory(const vk_engine_t *e, uint64_t addr, uint64_t size, vk_where_t *out) {
  return hcq__vk_resolve(addr, size ? size : 1, out) && out->block->vd == e->vd;
}

static bool copy_is_local(const vk_engine_t *e, const uint32_t *cmd) {
  uint64_t size = hcq__rd64(cmd + HCQ__COPY_SIZE);
  vk_where_t d, s;
  return size == 0 || (hcq__vk_own_memory(e, hcq__rd64(cmd + HCQ__COPY_DST), size, &d) &&
                       hcq__vk_own_memory(e, hcq__rd64(cmd + HCQ__COPY_SRC), size, &s));
}

/* A host pointer for [addr, addr + size): mapped Vulkan memory, or host memory of another kind. */
static char *host_pointer(vk_engine_t *e, const uint32_t *cmd, uint64_t addr, uint64_t size,
                          const char *what) {
  vk_where_t at;
  if (hcq__vk_resolve(addr, size, &at)) {
    if (at.block->host) return at.block->host + at.offset;
    hcq__vk_lose(e, cmd,
                 "the copy %s 0x%" PRIx64
                 " is memory of %s that the host cannot map (copies between devices "
                 "go through the host)",
                 what, addr, at.block->vd->dev->name);
    return NULL;
  }
  if (!addr) hcq__vk_lose(e, cmd, "the copy %s is address 0", what);
  return (char *)(uintptr_t)addr;
}

/* ---- commands resolved when reached ---- */

static bool do_wait(vk_engine_t *e, const uint32_t *cmd) {
  hcq__signal_words_t *s = hcq__vk_signal_words(e, cmd, hcq__rd64(cmd + HCQ__WAIT_ADDR));
  if (!s) return false;
  uint64_t want = cmd[HCQ__WAIT_VALUE];
  if (atomic_load_explicit(&s->value, memory_order_acquire) >= want) return true;
  struct vk_pending_signal ps;
  if (hcq__vk_lookup_pending_signal(e->vd, s, &ps) && ps.value >= want) {
    vk_engine_t *src = e->vd->engines[ps.kind];
    if (ps.sem > atomic_load(&src->gpu_done)) {
      if (src == e) return true; /* behind it on our own in-order queue */
      if (e->nbcbs) hcq__vk_flush(e, NULL, 0);
      hcq__vk_batch_add_wait(e, src->sem, ps.sem);
      /* Our signal writes must not overtake the one we waited for: two completion threads write
       * words, and a later value written first would be overwritten by the earlier one. By its
       * number: a signal of the same semaphore value written before it would not do. */
      if (ps.seq > e->dep_other) e->dep_other = ps.seq;
      atomic_fetch_add_explicit(&e->sem_waits, 1, memory_order_relaxed);
      return true;
    }
  }
  hcq__vk_flush(e, NULL, 0); /* what came before may be what the signal waits for */
  atomic_fetch_add_explicit(&e->host_waits, 1, memory_order_relaxed);
  atomic_store_explicit(&e->blocked_at, cmd, memory_order_relaxed);
  uint64_t seen;
  int r = hcq__signal_words_wait(s, want, 0, &e->dev, 1, &seen);
  atomic_store_explicit(&e->blocked_at, NULL, memory_order_relaxed);
  return r == HCQ__WAIT_REACHED;
}

static bool do_signal(vk_engine_t *e, const uint32_t *cmd) {
  hcq__signal_words_t *s = hcq__vk_signal_words(e, cmd, hcq__rd64(cmd + HCQ__SIGNAL_ADDR));
  if (!s) return false;
  if (!e->bfirst) e->bfirst = cmd;
  e->blast = cmd;
  hcq__vk_flush(e, s, cmd[HCQ__SIGNAL_VALUE]);
  return true;
}

/* A copy that leaves this device: on the host, after the engine's earlier work (and its waits). */
static bool do_host_copy(vk_engine_t *e, const uint32_t *cmd) {
  uint64_t size = hcq__rd64(cmd + HCQ__COPY_SIZE);
  char *dst = host_pointer(e, cmd, hcq__rd64(cmd + HCQ__COPY_DST), size, "destination");
  char *src = dst ? host_pointer(e, cmd, hcq__rd64(cmd + HCQ__COPY_SRC), size, "source") : NULL;
  if (!dst || !src) return false;
  hcq__vk_flush(e, NULL, 0);
  hcq__vk_wait_gpu(e, e->sem_last, false);
  if (hcq__device_is_lost(e->dev)) return false;
  memmove(dst, src, (size_t)size);
  return true;
}

/* ---- the interpreter ---- */

static bool recordable(const vk_engine_t *e, const uint32_t *c) {
  switch (HCQ__HDR_OP(c[0])) {
    case HCQ__OP_EXEC:
    case HCQ__OP_TIMESTAMP:
    case HCQ__OP_BARRIER:
    case HCQ__OP_NOP: return true;
    case HCQ__OP_COPY: return copy_is_local(e, c);
    default: return false;
  }
}

static bool run_bound(vk_engine_t *e, const uint32_t *cmd) {
  const uint32_t *list = (const uint32_t *)(uintptr_t)hcq__rd64(cmd + HCQ__CALL_PTR);
  size_t len = cmd[HCQ__CALL_LEN];
  vk_blist_t *bl = hcq__vk_find_blist(e, list, len);
  if (!bl) {
    hcq__vk_lose(e, NULL, "out of memory tracking a bound command list");
    return false;
  }
  atomic_store_explicit(&e->interp_base, list, memory_order_relaxed);
  bool ok = hcq__vk_run_list(e, list, len, bl);
  atomic_store_explicit(&e->interp_base, NULL, memory_order_relaxed);
  return ok;
}

bool hcq__vk_run_list(vk_engine_t *e, const uint32_t *w, size_t n, vk_blist_t *bl) {
  vk_where_t list_mem, *list = NULL;
  if (bl && hcq__vk_own_memory(e, (uint64_t)(uintptr_t)w, n * 4, &list_mem)) list = &list_mem;
  uint32_t segk = 0;
  for (size_t i = 0; i < n;) {
    if (hcq__device_is_lost(e->dev)) return false;
    const uint32_t *c = w + i;
    uint32_t op = HCQ__HDR_OP(c[0]), len = HCQ__HDR_LEN(c[0]);
    if (op == HCQ__OP_JUMP && !bl) return true; /* the rest of the ring is padding */
    if (!len || len > n - i) {
      hcq__vk_lose(e, c, "malformed command words (header 0x%08" PRIx32 " at word %zu of %zu)",
                   c[0], i, n);
      return false;
    }
    atomic_store_explicit(&e->interp_at, c, memory_order_relaxed);
    bool ok = true;
    if (op == HCQ__OP_CALL && !bl) {
      ok = run_bound(e, c);
    } else if (op == HCQ__OP_WAIT) {
      ok = do_wait(e, c);
    } else if (op == HCQ__OP_SIGNAL) {
      ok = do_signal(e, c);
    } else if (op == HCQ__OP_COPY && !copy_is_local(e, c)) {
      ok = do_host_copy(e, c);
    } else if (recordable(e, c)) {
      size_t j = i;
      bool work = false;
      uint32_t nts = 0;
      while (j < n) {
        uint32_t l = HCQ__HDR_LEN(w[j]), o = HCQ__HDR_OP(w[j]);
        if (!l || l > n - j || !recordable(e, w + j)) break;
        if (o == HCQ__OP_TIMESTAMP && !bl && nts == MAX_TRANSIENT_TS) break;
        nts += o == HCQ__OP_TIMESTAMP;
        work |= o != HCQ__OP_BARRIER && o != HCQ__OP_NOP;
        j += l;
      }
      if (work)
        ok = bl ? hcq__vk_use_segment(e, bl, segk++, w, i, j, list)
                : hcq__vk_record_transient(e, w, i, j, NULL);
      len = (uint32_t)(j - i);
    } else {
      hcq__vk_lose(e, c, "unknown command 0x%08" PRIx32 " on the %s queue", c[0],
                   hcq__vk_kind_name(e));
      ok = false;
    }
    if (!ok) return false;
    i += len;
  }
  return true;
}
