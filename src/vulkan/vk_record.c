/* The Vulkan engine's command buffers (vk_engine_internal.h): runs of EXEC, local COPY, TIMESTAMP
 * and BARRIER recorded once for ring words, or kept per bound command list and recorded again only
 * when a word they baked in changed; and the launch checks those runs pass first. */
#include <inttypes.h>
#include <stdlib.h>

#include "core/command.h"
#include "core/device.h"
#include "core/signal.h"
#include "core/vec.h"
#include "vulkan/vk_engine_internal.h"

/* ---- recording ---- */

static void barrier(vk_device_t *vd, VkCommandBuffer cb, bool to_host) {
  VkMemoryBarrier mb = {
      .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
      .srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT,
      .dstAccessMask = to_host ? VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT
                               : VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT};
  vd->fn.vkCmdPipelineBarrier(
      cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
      to_host ? VK_PIPELINE_STAGE_HOST_BIT : VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &mb, 0, NULL,
      0, NULL);
}

static bool ensure_scratch(vk_engine_t *e, uint64_t size) {
  if (e->scratch && e->scratch->size >= size) return true;
  uint64_t want = e->scratch ? 2 * e->scratch->size : UINT64_C(1) << 20;
  while (want < size) want *= 2;
  vk_block_t *b;
  hcq_status_t st = hcq__vk_scratch_block(e->vd, want, &b);
  if (st) {
    hcq_status_destroy(st);
    return false;
  }
  /* Recorded command buffers may still name the old one: it lives as long as the engine. */
  if (e->scratch && !hcq__vec_push(&e->old_scratch, e->scratch)) {
    hcq__vk_block_destroy(b);
    return false;
  }
  e->scratch = b;
  return true;
}

typedef struct vk_ts_note {
  uint32_t query;
  hcq__signal_words_t *word;
} vk_ts_note_t;

/* EXEC at word k of w: its pipeline, and its arguments' device address as push constants; its grid
 * is read from the list's memory when list is given (a replay may patch it), else recorded. */
static bool record_exec(vk_engine_t *e, VkCommandBuffer cb, const uint32_t *w, size_t k,
                        const vk_where_t *list) {
  vk_device_t *vd = e->vd;
  const uint32_t *c = w + k;
  vk_program_t *p = (vk_program_t *)(uintptr_t)hcq__rd64(c + HCQ__EXEC_FN);
  const uint32_t *local = c + HCQ__EXEC_LOCAL, *global = c + HCQ__EXEC_GLOBAL;
  if (!local[0] || !local[1] || !local[2]) return true; /* an empty launch runs nothing */
  if (!list && (!global[0] || !global[1] || !global[2])) return true;
  VkPipeline pipe;
  hcq_status_t st = hcq__vk_pipeline(p, local, &pipe);
  if (st) {
    hcq__vk_lose(e, c, "%s", hcq_status_message(st));
    hcq_status_destroy(st);
    return false;
  }
  uint64_t nbufs = c[HCQ__EXEC_NBUFS];
  vk_where_t args;
  if (!hcq__vk_own_memory(e, hcq__rd64(c + HCQ__EXEC_ARGS), 16, &args)) {
    hcq__vk_lose(e, c, "kernel %s: its arguments at 0x%" PRIx64 " are not memory of %s", p->entry,
                 hcq__rd64(c + HCQ__EXEC_ARGS), e->dev->name);
    return false;
  }
  uint64_t push[2] = {args.block->bda + args.offset, args.block->bda + args.offset + 8 * nbufs};
  vd->fn.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
  vd->fn.vkCmdPushConstants(cb, vd->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(push), push);
  if (list)
    vd->fn.vkCmdDispatchIndirect(cb, list->block->buffer,
                                 list->offset + (uint64_t)(k + HCQ__EXEC_GLOBAL) * 4);
  else
    vd->fn.vkCmdDispatch(cb, global[0], global[1], global[2]);
  return true;
}

/* COPY between buffers of this device. */
static bool record_copy(vk_engine_t *e, VkCommandBuffer cb, const uint32_t *c) {
  vk_device_t *vd = e->vd;
  uint64_t size = hcq__rd64(c + HCQ__COPY_SIZE);
  vk_where_t d, s;
  if (!size) return true;
  hcq__vk_own_memory(e, hcq__rd64(c + HCQ__COPY_DST), size, &d);
  hcq__vk_own_memory(e, hcq__rd64(c + HCQ__COPY_SRC), size, &s);
  bool overlap = d.block == s.block && d.offset < s.offset + size && s.offset < d.offset + size;
  if (overlap && d.offset == s.offset) return true;
  if (overlap) {
    /* vkCmdCopyBuffer forbids overlapping regions; the queue's COPY is a memmove. */
    if (!ensure_scratch(e, size)) {
      hcq__vk_lose(e, c, "no device memory for an overlapping copy of %" PRIu64 " bytes", size);
      return false;
    }
    VkBufferCopy a = {s.offset, 0, size}, b = {0, d.offset, size};
    vd->fn.vkCmdCopyBuffer(cb, s.block->buffer, e->scratch->buffer, 1, &a);
    barrier(vd, cb, false);
    vd->fn.vkCmdCopyBuffer(cb, e->scratch->buffer, d.block->buffer, 1, &b);
  } else {
    VkBufferCopy region = {s.offset, d.offset, size};
    vd->fn.vkCmdCopyBuffer(cb, s.block->buffer, d.block->buffer, 1, &region);
  }
  return true;
}

/* TIMESTAMP: the *nts-th query of a kept run (seg), or a query of the engine's ring noted in notes
 * for the completion thread to read. */
static bool record_timestamp(vk_engine_t *e, VkCommandBuffer cb, const uint32_t *c, vk_seg_t *seg,
                             uint32_t *nts, vk_ts_note_t *notes, uint32_t *nnotes) {
  vk_device_t *vd = e->vd;
  hcq__signal_words_t *word = hcq__vk_signal_words(e, c, hcq__rd64(c + HCQ__TIMESTAMP_ADDR));
  if (!word) return false;
  if (!vd->timestamps) {
    /* No device clock on this queue family: the completion thread stamps the host time. */
    if (seg) {
      seg->ts_words[(*nts)++] = word;
    } else {
      notes[*nnotes] = (vk_ts_note_t){UINT32_MAX, word};
      (*nnotes)++;
    }
    return true;
  }
  if (seg) {
    vd->fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, seg->qp, *nts);
    seg->ts_words[(*nts)++] = word;
  } else {
    uint32_t q = (uint32_t)(e->ts_next++ % TS_QUERIES);
    vd->fn.vkCmdResetQueryPool(cb, e->tsq, q, 1);
    vd->fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, e->tsq, q);
    notes[*nnotes] = (vk_ts_note_t){q, word};
    (*nnotes)++;
  }
  return true;
}

/* Records the commands [i, j) of w into cb. list: where w lives in device memory (bound lists:
 * grids are read from there), or NULL. seg: the kept run (bound), else transient timestamps go to
 * notes. */
static bool record(vk_engine_t *e, VkCommandBuffer cb, const uint32_t *w, size_t i, size_t j,
                   const vk_where_t *list, vk_seg_t *seg, vk_ts_note_t *notes, uint32_t *nnotes) {
  vk_device_t *vd = e->vd;
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = seg ? VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT
                                              : VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  VkResult r = vd->fn.vkBeginCommandBuffer(cb, &bi);
  if (r != VK_SUCCESS) {
    hcq__vk_lose(e, w + i, "vkBeginCommandBuffer failed: %s", hcq__vk_result_name(r));
    return false;
  }
  if (seg && seg->nts) vd->fn.vkCmdResetQueryPool(cb, seg->qp, 0, seg->nts);
  uint32_t nts = 0;
  for (size_t k = i; k < j; k += HCQ__HDR_LEN(w[k])) {
    const uint32_t *c = w + k;
    uint32_t op = HCQ__HDR_OP(c[0]);
    if (op == HCQ__OP_NOP || op == HCQ__OP_BARRIER) continue;
    barrier(vd, cb, false);
    bool ok = true;
    if (op == HCQ__OP_EXEC)
      ok = record_exec(e, cb, w, k, list);
    else if (op == HCQ__OP_COPY)
      ok = record_copy(e, cb, c);
    else if (op == HCQ__OP_TIMESTAMP)
      ok = record_timestamp(e, cb, c, seg, &nts, notes, nnotes);
    if (!ok) return false;
  }
  barrier(vd, cb, true);
  r = vd->fn.vkEndCommandBuffer(cb);
  if (r != VK_SUCCESS) {
    hcq__vk_lose(e, w + i, "recording a command buffer failed: %s", hcq__vk_result_name(r));
    return false;
  }
  return true;
}

static VkCommandBuffer new_cb(vk_engine_t *e) {
  VkCommandBuffer cb = VK_NULL_HANDLE;
  pthread_mutex_lock(&e->lock);
  if (e->nfree_cbs) cb = e->free_cbs[--e->nfree_cbs];
  pthread_mutex_unlock(&e->lock);
  if (cb) return cb;
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = e->pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  VkResult r = e->vd->fn.vkAllocateCommandBuffers(e->vd->device, &ai, &cb);
  if (r != VK_SUCCESS) {
    hcq__vk_lose(e, NULL, "vkAllocateCommandBuffers failed: %s", hcq__vk_result_name(r));
    return VK_NULL_HANDLE;
  }
  /* Room to take it back when it retires, so the completion thread never allocates. */
  pthread_mutex_lock(&e->lock);
  if (e->cap_cbs < e->nfree_cbs + 1 + FIFO_CAP) {
    size_t cap = e->cap_cbs ? 2 * e->cap_cbs : 2 * FIFO_CAP;
    VkCommandBuffer *n = realloc(e->free_cbs, cap * sizeof(*n));
    if (n) e->free_cbs = n, e->cap_cbs = cap;
  }
  pthread_mutex_unlock(&e->lock);
  return cb;
}

static uint32_t count_timestamps(const uint32_t *w, size_t i, size_t j) {
  uint32_t n = 0;
  for (size_t k = i; k < j; k += HCQ__HDR_LEN(w[k])) n += HCQ__HDR_OP(w[k]) == HCQ__OP_TIMESTAMP;
  return n;
}

bool hcq__vk_record_transient(vk_engine_t *e, const uint32_t *w, size_t i, size_t j,
                              const uint32_t *base) {
  /* The timestamp ring must have room for this run's queries. */
  uint32_t nts = count_timestamps(w, i, j);
  if (nts && e->ts_next + nts - atomic_load(&e->ts_done) > TS_QUERIES) {
    hcq__vk_flush(e, NULL, 0);
    pthread_mutex_lock(&e->lock);
    while (e->ts_next + nts - atomic_load(&e->ts_done) > TS_QUERIES)
      pthread_cond_wait(&e->fifo_space, &e->lock);
    pthread_mutex_unlock(&e->lock);
  }
  VkCommandBuffer cb = new_cb(e);
  if (!cb) return false;
  vk_ts_note_t notes[MAX_TRANSIENT_TS];
  uint32_t nnotes = 0;
  if (!record(e, cb, w, i, j, NULL, NULL, notes, &nnotes)) {
    pthread_mutex_lock(&e->lock);
    e->free_cbs[e->nfree_cbs++] = cb;
    pthread_mutex_unlock(&e->lock);
    return false;
  }
  const uint32_t *last = w + i;
  for (size_t k = i; k < j; k += HCQ__HDR_LEN(w[k])) last = w + k;
  hcq__vk_batch_add_cb(e, cb, NULL, w + i, last, base);
  vk_pending_t p = {.kind = P_CB, .u.cb = cb};
  hcq__vk_batch_add_pending(e, &p);
  for (uint32_t n = 0; n < nnotes; n++) {
    vk_pending_t t = {.kind = P_TS, .u.ts = {notes[n].query, notes[n].word}};
    hcq__vk_batch_add_pending(e, &t);
  }
  return true;
}

/* ---- bound lists: runs recorded once ---- */

static void seg_release(vk_engine_t *e, vk_seg_t *s) {
  vk_device_t *vd = e->vd;
  if (s->cb) vd->fn.vkFreeCommandBuffers(vd->device, e->pool, 1, &s->cb);
  if (s->qp) vd->fn.vkDestroyQueryPool(vd->device, s->qp, NULL);
  free(s->words);
  free(s->ts_words);
  free(s->ts_vals);
  memset(s, 0, sizeof(*s));
}

static void blist_free(vk_engine_t *e, vk_blist_t *bl) {
  for (uint32_t k = 0; k < bl->nsegs; k++) {
    seg_release(e, bl->segs[k]);
    free(bl->segs[k]);
  }
  free(bl->segs);
  free(bl);
}

/* Whether the words the run baked in are still the same (grids read indirectly may differ). */
static bool seg_matches(const vk_seg_t *s, const uint32_t *w) {
  for (uint32_t k = s->start; k < s->end;) {
    const uint32_t *c = w + k, *was = s->words + (k - s->start);
    uint32_t len = HCQ__HDR_LEN(c[0]);
    if (c[0] != was[0]) return false;
    if (HCQ__HDR_OP(c[0]) == HCQ__OP_EXEC && s->indirect) {
      if (memcmp(c + 1, was + 1, (HCQ__EXEC_GLOBAL - 1) * 4) ||
          memcmp(c + HCQ__EXEC_LOCAL, was + HCQ__EXEC_LOCAL, (len - HCQ__EXEC_LOCAL) * 4))
        return false;
    } else if (memcmp(c, was, len * 4)) {
      return false;
    }
    k += len;
  }
  return true;
}

static bool seg_record(vk_engine_t *e, vk_seg_t *s, const uint32_t *w, size_t i, size_t j,
                       const vk_where_t *list) {
  vk_device_t *vd = e->vd;
  s->start = (uint32_t)i;
  s->end = (uint32_t)j;
  s->indirect = list != NULL;
  s->words = malloc((j - i) * 4);
  s->nts = count_timestamps(w, i, j);
  if (s->nts) {
    s->ts_words = calloc(s->nts, sizeof(*s->ts_words));
    s->ts_vals = calloc(s->nts, sizeof(*s->ts_vals));
    if (vd->timestamps) {
      VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                  .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                  .queryCount = s->nts};
      VkResult r = vd->fn.vkCreateQueryPool(vd->device, &qi, NULL, &s->qp);
      if (r != VK_SUCCESS) {
        hcq__vk_lose(e, w + i, "vkCreateQueryPool failed: %s", hcq__vk_result_name(r));
        return false;
      }
    }
  }
  if (!s->words || (s->nts && (!s->ts_words || !s->ts_vals))) {
    hcq__vk_lose(e, w + i, "out of memory recording a bound command list");
    return false;
  }
  memcpy(s->words, w + i, (j - i) * 4);
  s->cb = new_cb(e);
  if (!s->cb) return false;
  return record(e, s->cb, w, i, j, list, s, NULL, NULL);
}

/* Launch geometry of one EXEC against the device's limits. */
static hcq_status_t check_exec(const vk_device_t *vd, const uint32_t *c, bool groups_only) {
  const VkPhysicalDeviceLimits *lim = &vd->props.limits;
  const uint32_t *g = c + HCQ__EXEC_GLOBAL, *l = c + HCQ__EXEC_LOCAL;
  const hcq_program_t *p = (const hcq_program_t *)(uintptr_t)hcq__rd64(c + HCQ__EXEC_PROGRAM);
  if (!g[0] || !g[1] || !g[2] || !l[0] || !l[1] || !l[2]) return NULL; /* empty: runs nothing */
  for (int d = 0; d < 3; d++)
    if (g[d] > lim->maxComputeWorkGroupCount[d])
      return hcq_status_make(
          HCQ_OUT_OF_RANGE, "kernel %s: grid %ux%ux%u is larger than %s allows (%ux%ux%u groups)",
          p ? p->name : "?", g[0], g[1], g[2], vd->dev->name, lim->maxComputeWorkGroupCount[0],
          lim->maxComputeWorkGroupCount[1], lim->maxComputeWorkGroupCount[2]);
  if (groups_only) return NULL;
  uint64_t inv = (uint64_t)l[0] * l[1] * l[2];
  for (int d = 0; d < 3; d++)
    if (l[d] > lim->maxComputeWorkGroupSize[d] || inv > lim->maxComputeWorkGroupInvocations)
      return hcq_status_make(
          HCQ_OUT_OF_RANGE,
          "kernel %s: group size %ux%ux%u is larger than %s allows (%ux%ux%u, %u invocations)",
          p ? p->name : "?", l[0], l[1], l[2], vd->dev->name, lim->maxComputeWorkGroupSize[0],
          lim->maxComputeWorkGroupSize[1], lim->maxComputeWorkGroupSize[2],
          lim->maxComputeWorkGroupInvocations);
  return NULL;
}

hcq_status_t hcq__vk_check_execs(vk_device_t *vd, const uint32_t *w, size_t n, bool groups_only) {
  for (size_t k = 0; k < n;) {
    uint32_t len = HCQ__HDR_LEN(w[k]);
    if (!len || len > n - k) break;
    if (HCQ__HDR_OP(w[k]) == HCQ__OP_EXEC) {
      hcq_status_t st = check_exec(vd, w + k, groups_only);
      if (st) return st;
    }
    k += len;
  }
  return NULL;
}

bool hcq__vk_use_segment(vk_engine_t *e, vk_blist_t *bl, uint32_t k, const uint32_t *w, size_t i,
                         size_t j, const vk_where_t *list) {
  for (size_t c = i; c < j; c += HCQ__HDR_LEN(w[c]))
    if (HCQ__HDR_OP(w[c]) == HCQ__OP_EXEC) {
      hcq_status_t st = check_exec(e->vd, w + c, true);
      if (st) {
        hcq__vk_lose(e, w + c, "%s", hcq_status_message(st));
        hcq_status_destroy(st);
        return false;
      }
    }
  vk_seg_t *s;
  if (k < bl->nsegs) {
    s = bl->segs[k];
    if (s->start != i || s->end != j || !seg_matches(s, w)) {
      /* A baked word changed: record the run again once its last use has finished. */
      hcq__vk_flush(e, NULL, 0);
      hcq__vk_wait_fifo_pos(e, s->fifo_pos);
      seg_release(e, s);
      atomic_fetch_add_explicit(&e->rerecords, 1, memory_order_relaxed);
      if (!seg_record(e, s, w, i, j, list)) return false;
    }
  } else {
    if (bl->nsegs == bl->cap) {
      uint32_t cap = bl->cap ? 2 * bl->cap : 4;
      vk_seg_t **n = realloc(bl->segs, cap * sizeof(*n));
      if (!n) {
        hcq__vk_lose(e, w + i, "out of memory recording a bound command list");
        return false;
      }
      bl->segs = n;
      bl->cap = cap;
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
      hcq__vk_lose(e, w + i, "out of memory recording a bound command list");
      return false;
    }
    bl->segs[bl->nsegs++] = s;
    atomic_fetch_add_explicit(&e->records, 1, memory_order_relaxed);
    if (!seg_record(e, s, w, i, j, list)) return false;
  }
  const uint32_t *last = w + i;
  for (size_t c = i; c < j; c += HCQ__HDR_LEN(w[c])) last = w + c;
  hcq__vk_batch_add_cb(e, s->cb, s, w + i, last, bl->base);
  if (s->nts) {
    vk_pending_t p = {.kind = P_SEGTS, .u.seg = s};
    hcq__vk_batch_add_pending(e, &p);
  }
  return true;
}

vk_blist_t *hcq__vk_find_blist(vk_engine_t *e, const uint32_t *base, size_t len) {
  pthread_mutex_lock(&e->lock);
  vk_blist_t *bl = e->blists;
  for (; bl && !(bl->base == base && bl->len == len); bl = bl->next) {}
  if (!bl && (bl = calloc(1, sizeof(*bl)))) {
    bl->base = base;
    bl->len = len;
    bl->next = e->blists;
    e->blists = bl;
  }
  pthread_mutex_unlock(&e->lock);
  return bl;
}

void hcq__vk_forget_bound(vk_device_t *vd, const void *host, uint64_t size) {
  if (!host) return;
  const char *lo = host, *hi = lo + size;
  for (int k = 0; k < 2; k++) {
    vk_engine_t *e = vd->engines[k];
    if (!e) continue;
    pthread_mutex_lock(&e->lock);
    for (vk_blist_t **p = &e->blists; *p;) {
      vk_blist_t *bl = *p;
      if ((const char *)bl->base >= lo && (const char *)bl->base < hi) {
        *p = bl->next;
        bl->next = e->dead_blists;
        e->dead_blists = bl;
      } else {
        p = &bl->next;
      }
    }
    pthread_mutex_unlock(&e->lock);
  }
}

/* ---- freeing bound lists ---- */

void hcq__vk_free_dead_blists(vk_engine_t *e) {
  pthread_mutex_lock(&e->lock);
  vk_blist_t *dead = e->dead_blists;
  e->dead_blists = NULL;
  pthread_mutex_unlock(&e->lock);
  while (dead) {
    vk_blist_t *next = dead->next;
    blist_free(e, dead);
    dead = next;
  }
}

void hcq__vk_free_blists(vk_engine_t *e) {
  hcq__vk_free_dead_blists(e);
  while (e->blists) {
    vk_blist_t *bl = e->blists;
    e->blists = bl->next;
    blist_free(e, bl);
  }
}
