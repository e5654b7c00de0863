/* The Metal device (docs/metal.md): METAL:0 through the Objective-C runtime (metal_internal.h).
 *
 * Memory is shared-storage MTLBuffers: host and GPU see the same bytes, and a buffer's device
 * address is its host address (contents), so kernargs blocks and signals are read and written in
 * place. One engine thread per device takes the submissions of both queue kinds in order and turns
 * their command words into work on one MTLCommandQueue:
 *   EXEC      a dispatch on the open command buffer's compute encoder: the pipeline, the buffers at
 *             [[buffer(i)]], the values (setBytes) at [[buffer(nbufs)]], dispatchThreadgroups
 *   COPY      a blit (copyFromBuffer:...) between Metal buffers; a copy with a host-memory end (a
 *             CPU device's buffer) runs on the host once the GPU work before it finished
 *   SIGNAL    the open command buffer is committed with the device's MTLSharedEvent signalled to
 *             the next value; once the event reaches it (and the buffer did not fail) the signal
 *             is set
 *   TIMESTAMP the same, then the host clock
 *   WAIT      commits what is open (without waiting for it), then waits on the host for the signal
 * A command buffer that ends in error marks the device lost with Metal's error text. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/backend.h"
#include "core/binary.h"
#include "core/device.h"
#include "core/host_wait.h"
#include "core/options.h"
#include "core/signal.h"
#include "core/status.h"
#include "core/vec.h"
#include "metal/metal_internal.h"

/* The encoder a device's open command buffer has. */
typedef enum mtl_encoder_kind {
  MTL_ENCODER_NONE,
  MTL_ENCODER_COMPUTE,
  MTL_ENCODER_BLIT
} mtl_encoder_kind_t;

typedef struct mtl_entry {
  struct mtl_entry *next;
  hcq_queue_kind_t kind;
  const uint32_t *words;
  size_t nwords;
  uint32_t *owned;
  bool has_job;
  hcq__mtl_job_t job;
} mtl_entry_t;

typedef struct mtl_alloc {
  uint64_t addr, size;
  hcq_id buf;
} mtl_alloc_t;

typedef struct mtl_dev {
  hcq_device_t *dev;
  const hcq__mtl_api_t *api;
  hcq_id device, queue, event;
  pthread_t thread;
  bool started;
  _Atomic bool exited;
  pthread_mutex_t lock; /* the entry list */
  pthread_cond_t cond;
  mtl_entry_t *head, *tail;
  bool stopping;
  uint64_t submitted[2];         /* under the device lock */
  _Atomic uint64_t published[2]; /* submitted, for other threads */
  _Atomic uint64_t completed[2];
  _Atomic int cur_kind;
  _Atomic(const uint32_t *) cur, prev, call_base;
  pthread_mutex_t mem_lock;     /* allocs */
  HCQ__VEC(mtl_alloc_t) allocs; /* sorted by addr */
  /* Engine thread only. */
  hcq_id cb, enc;
  mtl_encoder_kind_t enc_kind;
  const char *cb_kernel;    /* a kernel the open command buffer runs, for messages */
  HCQ__VEC(hcq_id) pending; /* committed command buffers not yet seen complete (retained) */
  uint64_t event_value;
} mtl_dev_t;

static mtl_dev_t *mdev(const hcq_device_t *dev) { return dev->backend; }

hcq_id hcq__mtl_device(hcq_device_t *dev) { return mdev(dev)->device; }

#define MSG(ret, ...) HCQ__MSG(md->api, ret, ##__VA_ARGS__)
#define SEL(name) md->api->sel.name

/* ---- memory ---- */

static size_t alloc_index(const mtl_dev_t *md, uint64_t addr) { /* first alloc with addr > given */
  size_t lo = 0, hi = md->allocs.len;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (md->allocs.data[mid].addr <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

hcq_id hcq__mtl_buffer_at(hcq_device_t *dev, uint64_t addr, uint64_t *offset) {
  mtl_dev_t *md = mdev(dev);
  hcq_id buf = NULL;
  pthread_mutex_lock(&md->mem_lock);
  size_t i = alloc_index(md, addr);
  if (i > 0 && addr < md->allocs.data[i - 1].addr + md->allocs.data[i - 1].size) {
    buf = md->allocs.data[i - 1].buf;
    *offset = addr - md->allocs.data[i - 1].addr;
  }
  pthread_mutex_unlock(&md->mem_lock);
  return buf;
}

/* Bytes of the allocation holding addr from addr on (0: not this device's). */
static uint64_t bytes_left(mtl_dev_t *md, uint64_t addr) {
  pthread_mutex_lock(&md->mem_lock);
  size_t i = alloc_index(md, addr);
  uint64_t left = 0;
  if (i > 0 && addr < md->allocs.data[i - 1].addr + md->allocs.data[i - 1].size)
    left = md->allocs.data[i - 1].addr + md->allocs.data[i - 1].size - addr;
  pthread_mutex_unlock(&md->mem_lock);
  return left;
}

static hcq_status_t mtl_mem_alloc(hcq_device_t *dev, uint64_t size, uint32_t flags,
                                  hcq__mem_t *out) {
  (void)flags; /* shared storage: every allocation is host visible */
  mtl_dev_t *md = mdev(dev);
  uint64_t bytes = size < 64 ? 64 : (size + 63) & ~UINT64_C(63);
  void *pool = md->api->objc_autoreleasePoolPush();
  hcq_id buf = MSG(hcq_id, hcq_NSUInteger, hcq_NSUInteger)(
      md->device, SEL(newBufferWithLength), (hcq_NSUInteger)bytes, HCQ_MTL_RESOURCE_STORAGE_SHARED);
  void *host = buf ? MSG(void *)(buf, SEL(contents)) : NULL;
  md->api->objc_autoreleasePoolPop(pool);
  if (!host) {
    if (buf) MSG(void)(buf, SEL(release));
    return hcq_status_make(HCQ_OUT_OF_MEMORY,
                           "%s: newBufferWithLength:%" PRIu64 " failed (out of device memory)",
                           dev->name, bytes);
  }
  memset(host, 0, (size_t)bytes);
  mtl_alloc_t a = {(uint64_t)(uintptr_t)host, bytes, buf};
  pthread_mutex_lock(&md->mem_lock);
  bool ok = hcq__vec_reserve_for(&md->allocs, md->allocs.len + 1);
  if (ok) {
    size_t i = alloc_index(md, a.addr);
    memmove(md->allocs.data + i + 1, md->allocs.data + i, (md->allocs.len - i) * sizeof(a));
    md->allocs.data[i] = a;
    md->allocs.len++;
  }
  pthread_mutex_unlock(&md->mem_lock);
  if (!ok) {
    MSG(void)(buf, SEL(release));
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory tracking a buffer", dev->name);
  }
  *out = (hcq__mem_t){a.addr, host, size, buf};
  return NULL;
}

static void mtl_mem_free(hcq_device_t *dev, hcq__mem_t *mem) {
  mtl_dev_t *md = mdev(dev);
  if (!mem->handle) return;
  pthread_mutex_lock(&md->mem_lock);
  size_t i = alloc_index(md, mem->addr);
  if (i > 0 && md->allocs.data[i - 1].addr == mem->addr) {
    memmove(md->allocs.data + i - 1, md->allocs.data + i,
            (md->allocs.len - i) * sizeof(mtl_alloc_t));
    md->allocs.len--;
  }
  pthread_mutex_unlock(&md->mem_lock);
  MSG(void)(mem->handle, SEL(release));
  memset(mem, 0, sizeof(*mem));
}

/* Metal's own numbers, not hcq's count: the working set is the most the GPU can use without the
 * system paging (unified memory has no fixed device heap), and the device's allocated size counts
 * everything this process made on it, hcq's internal buffers included. Allocations can exceed the
 * recommendation, hence the clamp. */
static hcq_status_t mtl_memory_info(hcq_device_t *dev, hcq_device_memory_t *out) {
  mtl_dev_t *md = mdev(dev);
  uint64_t total = MSG(uint64_t)(md->device, SEL(recommendedMaxWorkingSetSize));
  uint64_t used = MSG(hcq_NSUInteger)(md->device, SEL(currentAllocatedSize));
  out->total = total;
  out->available = used < total ? total - used : 0;
  out->source = "MTLDevice recommendedMaxWorkingSetSize";
  return NULL;
}

/* ---- the engine ---- */

static void end_encoder(mtl_dev_t *md) {
  if (md->enc) MSG(void)(md->enc, SEL(endEncoding));
  md->enc = NULL;
  md->enc_kind = MTL_ENCODER_NONE;
}

/* The open command buffer with an encoder of kind. */
static bool encoder(mtl_dev_t *md, mtl_encoder_kind_t kind) {
  if (md->enc_kind == kind) return true;
  end_encoder(md);
  if (!md->cb) {
    md->cb = MSG(hcq_id)(md->queue, SEL(commandBuffer));
    if (!md->cb) return false;
    MSG(hcq_id)(md->cb, SEL(retain));
    md->cb_kernel = NULL;
  }
  md->enc = MSG(hcq_id)(
      md->cb, kind == MTL_ENCODER_COMPUTE ? SEL(computeCommandEncoder) : SEL(blitCommandEncoder));
  md->enc_kind = md->enc ? kind : MTL_ENCODER_NONE;
  return md->enc != NULL;
}

/* Commits cb (retained by the caller, handed over) behind what was committed before, the event
 * signalled to the next value after it. */
static void commit(mtl_dev_t *md, hcq_id cb) {
  MSG(void, hcq_id, uint64_t)(cb, SEL(encodeSignalEvent), md->event, ++md->event_value);
  MSG(void)(cb, SEL(commit));
  if (!hcq__vec_push(&md->pending, cb)) {
    /* Without room to remember it, wait for it now (below) by keeping it the only one. */
    md->pending.len = 0;
    MSG(void)(cb, SEL(release));
  }
}

static void commit_open(mtl_dev_t *md) {
  end_encoder(md);
  if (!md->cb) return;
  commit(md, md->cb);
  md->cb = NULL;
}

/* Waits until every committed command buffer finished (the event reached the last value); a buffer
 * that failed marks the device lost with Metal's words. false when the device is lost. */
static bool drain(mtl_dev_t *md, const char *what) {
  commit_open(md);
  hcq_device_t *dev = md->dev;
  for (unsigned spin = 0; md->pending.len; spin++) {
    uint64_t v = MSG(uint64_t)(md->event, SEL(signaledValue));
    if (v >= md->event_value) break;
    if (hcq__device_is_lost(dev)) break;
    if (spin < 200) {
      hcq__spin_step(spin);
    } else {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
  for (size_t i = 0; i < md->pending.len; i++) {
    hcq_id cb = md->pending.data[i];
    long status = MSG(long)(cb, SEL(status));
    if (status == HCQ_MTL_CB_STATUS_ERROR && !hcq__device_is_lost(dev)) {
      hcq_id err = MSG(hcq_id)(cb, SEL(error));
      hcq_id text = err ? MSG(hcq_id)(err, SEL(localizedDescription)) : NULL;
      hcq__device_mark_lost(dev, "a command buffer (%s) failed: %s", what,
                            text ? hcq__mtl_cstring(md->api, text) : "no error given");
    }
    MSG(void)(cb, SEL(release));
  }
  md->pending.len = 0;
  return !hcq__device_is_lost(dev);
}

static void run_exec(mtl_dev_t *md, const uint32_t *w) {
  const hcq_program_t *p = (const hcq_program_t *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_PROGRAM);
  const hcq__mtl_kernel_t *k = (const hcq__mtl_kernel_t *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_FN);
  const uint8_t *args = (const uint8_t *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_ARGS);
  uint32_t nbufs = w[HCQ__EXEC_NBUFS];
  hcq_MTLSize grid = {w[HCQ__EXEC_GLOBAL], w[HCQ__EXEC_GLOBAL + 1], w[HCQ__EXEC_GLOBAL + 2]};
  hcq_MTLSize group = {w[HCQ__EXEC_LOCAL], w[HCQ__EXEC_LOCAL + 1], w[HCQ__EXEC_LOCAL + 2]};
  if (!grid.width || !grid.height || !grid.depth || !group.width || !group.height || !group.depth)
    return;
  if (group.width * group.height * group.depth > k->max_threads) {
    hcq__device_mark_lost(
        md->dev, "kernel %s: a group of %lux%lux%lu threads is more than its pipeline's %lu",
        p->name, group.width, group.height, group.depth, k->max_threads);
    return;
  }
  if (!encoder(md, MTL_ENCODER_COMPUTE)) {
    hcq__device_mark_lost(md->dev, "kernel %s: no command buffer or compute encoder", p->name);
    return;
  }
  md->cb_kernel = p->name;
  MSG(void, hcq_id)(md->enc, SEL(setComputePipelineState), k->pipeline);
  for (uint32_t i = 0; i < nbufs; i++) {
    uint64_t addr, off = 0;
    memcpy(&addr, args + 8 * i, 8);
    hcq_id buf = hcq__mtl_buffer_at(md->dev, addr, &off);
    if (!buf) {
      hcq__device_mark_lost(md->dev,
                            "kernel %s: buffer argument %u (0x%" PRIx64 ") is not %s memory",
                            p->name, i, addr, md->dev->name);
      return;
    }
    MSG(void, hcq_id, hcq_NSUInteger, hcq_NSUInteger)
    (md->enc, SEL(setBuffer), buf, (hcq_NSUInteger)off, i);
  }
  /* The values follow the addresses in the kernargs block; how many the kernel reads is not in the
   * words, so as many as fit (bounded by the block's allocation) travel. */
  uint64_t vals_addr = (uint64_t)(uintptr_t)(args + 8 * nbufs), left = bytes_left(md, vals_addr);
  size_t len = left < 4u * HCQ_MAX_KERNEL_VALS ? (size_t)left : 4u * HCQ_MAX_KERNEL_VALS;
  if (len >= 4) MSG(void, const void *, hcq_NSUInteger, hcq_NSUInteger)
  (md->enc, SEL(setBytes), args + 8 * nbufs, len, nbufs);
  MSG(void, hcq_MTLSize, hcq_MTLSize)(md->enc, SEL(dispatchThreadgroups), grid, group);
}

static void run_copy(mtl_dev_t *md, const uint32_t *w) {
  uint64_t dst = hcq__rd64(w + HCQ__COPY_DST), src = hcq__rd64(w + HCQ__COPY_SRC),
           size = hcq__rd64(w + HCQ__COPY_SIZE);
  if (!size) return;
  uint64_t doff = 0, soff = 0;
  hcq_id db = hcq__mtl_buffer_at(md->dev, dst, &doff), sb = hcq__mtl_buffer_at(md->dev, src, &soff);
  if (db && sb) {
    if (!encoder(md, MTL_ENCODER_BLIT)) {
      hcq__device_mark_lost(md->dev, "copy: no command buffer or blit encoder");
      return;
    }
    MSG(void, hcq_id, hcq_NSUInteger, hcq_id, hcq_NSUInteger, hcq_NSUInteger)
    (md->enc, SEL(copyFromBuffer), sb, (hcq_NSUInteger)soff, db, (hcq_NSUInteger)doff,
     (hcq_NSUInteger)size);
    return;
  }
  /* An end in ordinary host memory: shared storage lets the host do it once the GPU is done. */
  if (drain(md, "before a host copy"))
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, (size_t)size);
}

/* Runs a list of words (a CALL runs its bound list). false when the device was lost. */
static bool run_words(mtl_dev_t *md, const uint32_t *w, const uint32_t *end, bool nested) {
  hcq_device_t *dev = md->dev;
  while (w < end) {
    if (hcq__device_is_lost(dev)) return false;
    uint32_t h = w[0];
    atomic_store_explicit(&md->cur, w, memory_order_relaxed);
    switch (HCQ__HDR_OP(h)) {
      case HCQ__OP_WAIT: {
        hcq__signal_words_t *s = (hcq__signal_words_t *)(uintptr_t)hcq__rd64(w + HCQ__WAIT_ADDR);
        uint64_t want = w[HCQ__WAIT_VALUE], seen;
        if (atomic_load_explicit(&s->value, memory_order_acquire) >= want) break;
        commit_open(md); /* what came before runs while we wait */
        if (hcq__signal_words_wait(s, want, 0, &dev, 1, &seen) != HCQ__WAIT_REACHED) return false;
        break;
      }
      case HCQ__OP_SIGNAL:
        if (!drain(md, md->cb_kernel ? md->cb_kernel : "copies")) return false;
        hcq__signal_words_set((hcq__signal_words_t *)(uintptr_t)hcq__rd64(w + HCQ__SIGNAL_ADDR),
                              w[HCQ__SIGNAL_VALUE]);
        break;
      case HCQ__OP_TIMESTAMP: {
        if (!drain(md, md->cb_kernel ? md->cb_kernel : "copies")) return false;
        hcq__signal_words_t *s =
            (hcq__signal_words_t *)(uintptr_t)hcq__rd64(w + HCQ__TIMESTAMP_ADDR);
        atomic_store_explicit(&s->timestamp, hcq__now_ns(), memory_order_release);
        break;
      }
      case HCQ__OP_EXEC: run_exec(md, w); break;
      case HCQ__OP_COPY: run_copy(md, w); break;
      case HCQ__OP_CALL: {
        const uint32_t *list = (const uint32_t *)(uintptr_t)hcq__rd64(w + HCQ__CALL_PTR);
        if (nested) break; /* bound lists do not call others */
        atomic_store_explicit(&md->call_base, list, memory_order_relaxed);
        atomic_store_explicit(&md->prev, NULL, memory_order_relaxed);
        bool ok = run_words(md, list, list + w[HCQ__CALL_LEN], true);
        atomic_store_explicit(&md->call_base, NULL, memory_order_relaxed);
        if (!ok) return false;
        break;
      }
      default: break; /* NOP, BARRIER (one serial encoder orders dispatches), JUMP */
    }
    atomic_store_explicit(&md->prev, w, memory_order_relaxed);
    w += HCQ__HDR_LEN(h) ? HCQ__HDR_LEN(h) : 1;
  }
  return true;
}

static void run_job(mtl_dev_t *md, const hcq__mtl_job_t *job) {
  if (!drain(md, "eager work before a graph")) return;
  char err[256] = "";
  hcq_id cb = job->encode(job->ctx, md->dev, md->queue, err, sizeof(err));
  if (!cb) {
    hcq__device_mark_lost(md->dev, "graph replay: %s", err);
    job->done(job->ctx, NULL, true);
    return;
  }
  MSG(void)(cb, SEL(retain)); /* drain releases it; the job's own reference is released by done */
  commit(md, cb);
  bool ok = drain(md, "graph replay");
  job->done(job->ctx, cb, !ok);
}

static void *engine_main(void *arg) {
  mtl_dev_t *md = arg;
  for (;;) {
    pthread_mutex_lock(&md->lock);
    while (!md->head && !md->stopping) pthread_cond_wait(&md->cond, &md->lock);
    mtl_entry_t *e = md->head;
    if (e) {
      md->head = e->next;
      if (!md->head) md->tail = NULL;
    }
    pthread_mutex_unlock(&md->lock);
    if (!e) break;
    atomic_store_explicit(&md->cur_kind, e->kind, memory_order_relaxed);
    if (!hcq__device_is_lost(md->dev)) {
      void *pool = md->api->objc_autoreleasePoolPush();
      if (e->has_job) run_job(md, &e->job);
      bool ok = run_words(md, e->words, e->words + e->nwords, false);
      if (ok) drain(md, md->cb_kernel ? md->cb_kernel : "copies");
      md->api->objc_autoreleasePoolPop(pool);
    } else if (e->has_job) {
      e->job.done(e->job.ctx, NULL, true);
    }
    if (hcq__device_is_lost(md->dev)) { /* nothing half-encoded survives a loss */
      end_encoder(md);
      if (md->cb) MSG(void)(md->cb, SEL(release));
      md->cb = NULL;
      for (size_t i = 0; i < md->pending.len; i++) MSG(void)(md->pending.data[i], SEL(release));
      md->pending.len = 0;
    }
    /* Under the lock a hang report copies the current command under (mtl_snapshot). */
    pthread_mutex_lock(&md->lock);
    atomic_store_explicit(&md->cur, NULL, memory_order_relaxed);
    atomic_store_explicit(&md->prev, NULL, memory_order_relaxed);
    atomic_fetch_add_explicit(&md->completed[e->kind], 1, memory_order_release);
    free(e->owned);
    pthread_mutex_unlock(&md->lock);
    free(e);
  }
  atomic_store(&md->exited, true);
  return NULL;
}

/* ---- vtable ---- */

static hcq_status_t enqueue(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words,
                            size_t nwords, bool bound, const hcq__mtl_job_t *job) {
  mtl_dev_t *md = mdev(dev);
  if (hcq__device_is_lost(dev)) return hcq__device_check(dev);
  mtl_entry_t *e = calloc(1, sizeof(*e));
  if (!e) return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory submitting", dev->name);
  e->kind = kind;
  e->nwords = nwords;
  if (bound || !nwords) {
    e->words = words;
  } else {
    e->owned = malloc(nwords * sizeof(uint32_t));
    if (!e->owned) {
      free(e);
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: out of memory submitting", dev->name);
    }
    memcpy(e->owned, words, nwords * sizeof(uint32_t));
    e->words = e->owned;
  }
  if (job) e->has_job = true, e->job = *job;
  md->submitted[kind]++;
  atomic_store_explicit(&md->published[kind], md->submitted[kind], memory_order_release);
  pthread_mutex_lock(&md->lock);
  if (md->tail)
    md->tail->next = e;
  else
    md->head = e;
  md->tail = e;
  pthread_cond_signal(&md->cond);
  pthread_mutex_unlock(&md->lock);
  return NULL;
}

static hcq_status_t mtl_submit(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words,
                               size_t nwords, bool bound) {
  return enqueue(dev, kind, words, nwords, bound, NULL);
}

hcq_status_t hcq__mtl_submit_job(hcq_device_t *dev, const hcq__mtl_job_t *job,
                                 const uint32_t *words, size_t nwords) {
  return enqueue(dev, HCQ_QUEUE_COMPUTE, words, nwords, false, job);
}

static hcq_status_t mtl_reserve(hcq_device_t *dev, hcq_queue_kind_t kind, size_t nwords,
                                bool bound) {
  (void)kind, (void)nwords, (void)bound; /* the entry list has no bound */
  return hcq__device_is_lost(dev) ? hcq__device_check(dev) : NULL;
}

static uint64_t mtl_submitted(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&mdev(dev)->published[kind], memory_order_acquire);
}
static uint64_t mtl_completed(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&mdev(dev)->completed[kind], memory_order_acquire);
}

static bool idle(hcq_device_t *dev) {
  for (int k = 0; k < 2; k++)
    if (mtl_completed(dev, (hcq_queue_kind_t)k) < mtl_submitted(dev, (hcq_queue_kind_t)k))
      return false;
  return true;
}

static hcq_status_t mtl_wait_idle(hcq_device_t *dev, int64_t timeout_ms) {
  uint64_t deadline = hcq__deadline_after_ms(timeout_ms);
  for (unsigned i = 0; !idle(dev); i++) {
    if (hcq__device_is_lost(dev)) return hcq__device_check(dev);
    if (deadline && hcq__now_ns() >= deadline)
      return hcq_status_make(HCQ_TIMEOUT, "%s: its work did not finish within %" PRId64 " ms",
                             dev->name, timeout_ms);
    if (i < 200) {
      hcq__spin_step(i);
    } else {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  }
  return NULL;
}

static void mtl_snapshot(hcq_device_t *dev, hcq_queue_kind_t kind, hcq__engine_snapshot_t *out) {
  mtl_dev_t *md = mdev(dev);
  out->present = true;
  out->submitted = mtl_submitted(dev, kind);
  out->completed = mtl_completed(dev, kind);
  bool mine = atomic_load_explicit(&md->cur_kind, memory_order_relaxed) == (int)kind &&
              out->completed < out->submitted;
  /* An unbound submission's words are freed once it ran: copied while the engine cannot free them.
   */
  pthread_mutex_lock(&md->lock);
  out->cur = mine ? atomic_load_explicit(&md->cur, memory_order_relaxed) : NULL;
  out->prev = mine ? atomic_load_explicit(&md->prev, memory_order_relaxed) : NULL;
  out->call_base = mine ? atomic_load_explicit(&md->call_base, memory_order_relaxed) : NULL;
  if (out->cur) hcq__copy_command(out->cur, out->cur_words);
  if (out->prev) hcq__copy_command(out->prev, out->prev_words);
  out->words_copied = true;
  pthread_mutex_unlock(&md->lock);
}

static void mtl_lost(hcq_device_t *dev) {
  mtl_dev_t *md = mdev(dev);
  pthread_mutex_lock(&md->lock);
  pthread_cond_broadcast(&md->cond);
  pthread_mutex_unlock(&md->lock);
}

static bool mtl_stop(hcq_device_t *dev) {
  mtl_dev_t *md = mdev(dev);
  if (!md->started) return false;
  pthread_mutex_lock(&md->lock);
  md->stopping = true;
  pthread_cond_broadcast(&md->cond);
  pthread_mutex_unlock(&md->lock);
  md->started = false;
  /* A GPU that never completes a command buffer keeps the engine polling until the device is lost.
   */
  return !hcq__join_by(md->thread, &md->exited,
                       hcq__deadline_after_ms(hcq__options()->wait_timeout_ms));
}

static void release(mtl_dev_t *md, hcq_id obj) {
  if (obj) MSG(void)(obj, SEL(release));
}

static void mtl_destroy(hcq_device_t *dev) {
  mtl_dev_t *md = mdev(dev);
  if (!md) return;
  for (mtl_entry_t *e = md->head, *n; e; e = n) {
    n = e->next;
    free(e->owned);
    free(e);
  }
  hcq__vec_free(&md->pending);
  hcq__vec_free(&md->allocs);
  release(md, md->event);
  release(md, md->queue);
  release(md, md->device);
  pthread_mutex_destroy(&md->lock);
  pthread_mutex_destroy(&md->mem_lock);
  pthread_cond_destroy(&md->cond);
  free(md);
  dev->backend = NULL;
}

/* A metallib starts "MTLB" and records its own size as a u64 at byte 16 (after the platform, the
 * file version, the library type and the OS version): fewer bytes than that is a truncated file. */
static hcq_status_t metallib_check(const char *entry, const uint8_t *b, size_t size) {
  if (size < 24 || memcmp(b, "MTLB", 4)) {
    char what[128];
    hcq__binary_describe(b, size, what, sizeof(what));
    return hcq_status_make(HCQ_COMPILE_ERROR,
                           "metallib kernel %s: %zu bytes are not a Metal library (\"MTLB\" and a "
                           "24-byte header): %s",
                           entry, size, what);
  }
  uint64_t file_size = 0;
  for (int i = 7; i >= 0; i--) file_size = file_size << 8 | b[16 + i];
  if (file_size > size || file_size < 24)
    return hcq_status_make(
        HCQ_COMPILE_ERROR, "metallib kernel %s: %s: its header says %llu bytes, but there are %zu",
        entry, file_size > size ? "truncated" : "damaged", (unsigned long long)file_size, size);
  return NULL;
}

/* Metal's error text, or a stand-in. */
static const char *error_text(mtl_dev_t *md, hcq_id err) {
  hcq_id text = err ? MSG(hcq_id)(err, SEL(localizedDescription)) : NULL;
  return text ? hcq__mtl_cstring(md->api, text) : "(no error text)";
}

/* A metallib (core/binary.h): checked to be one, and whole, before Metal reads it. */
static hcq_status_t load_metallib(hcq_device_t *dev, const char *entry, const char *source,
                                  hcq__mtl_kernel_t *k) {
  mtl_dev_t *md = mdev(dev);
  const hcq__mtl_api_t *api = md->api;
  uint8_t *bytes = NULL;
  size_t len = 0;
  hcq_id err = NULL;
  void *data;
  hcq_status_t st;
  if ((st = hcq__binary_decode(source, entry, &bytes, &len))) goto out;
  if ((st = metallib_check(entry, bytes, len))) goto out;
  if (!(data = api->dispatch_data_create(bytes, len, NULL, NULL))) {
    st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory loading the metallib of %s", entry);
    goto out;
  }
  k->library = MSG(hcq_id, void *, hcq_id *)(md->device, SEL(newLibraryWithData), data, &err);
  api->dispatch_release(data);
  if (!k->library)
    st = hcq_status_make(HCQ_COMPILE_ERROR, "%s: Metal rejected the metallib of %s: %s", dev->name,
                         entry, error_text(md, err));
out:
  free(bytes);
  return st;
}

static hcq_status_t compile_source(hcq_device_t *dev, const char *entry, const char *source,
                                   hcq__mtl_kernel_t *k) {
  mtl_dev_t *md = mdev(dev);
  hcq_id err = NULL;
  k->library = MSG(hcq_id, hcq_id, hcq_id, hcq_id *)(md->device, SEL(newLibraryWithSource),
                                                     hcq__mtl_string(md->api, source), NULL, &err);
  if (!k->library)
    return hcq_status_make(HCQ_COMPILE_ERROR,
                           "%s: the Metal compiler rejected the source of %s:\n%s", dev->name,
                           entry, error_text(md, err));
  return NULL;
}

/* The kernel function and its compute pipeline, which the Metal graph's ICBs can run too. */
static hcq_status_t make_pipeline(hcq_device_t *dev, const char *entry, hcq__mtl_kernel_t *k) {
  mtl_dev_t *md = mdev(dev);
  const hcq__mtl_api_t *api = md->api;
  if (!(k->function =
            MSG(hcq_id, hcq_id)(k->library, SEL(newFunctionWithName), hcq__mtl_string(api, entry))))
    return hcq_status_make(HCQ_COMPILE_ERROR,
                           "%s: the Metal library has no kernel function named %s", dev->name,
                           entry);
  hcq_id desc = MSG(hcq_id)(api->MTLComputePipelineDescriptor, SEL(new_));
  MSG(void, hcq_id)(desc, SEL(setComputeFunction), k->function);
  MSG(void, signed char)(desc, SEL(setSupportIndirectCommandBuffers), 1);
  hcq_id err = NULL;
  k->pipeline = MSG(hcq_id, hcq_id, hcq_NSUInteger, void *, hcq_id *)(
      md->device, SEL(newComputePipelineStateWithDescriptor), desc, 0, NULL, &err);
  MSG(void)(desc, SEL(release));
  if (!k->pipeline)
    return hcq_status_make(HCQ_COMPILE_ERROR, "%s: no compute pipeline for %s: %s", dev->name,
                           entry, error_text(md, err));
  k->max_threads = MSG(hcq_NSUInteger)(k->pipeline, SEL(maxTotalThreadsPerThreadgroup));
  return NULL;
}

static hcq_status_t build_kernel(hcq_device_t *dev, const char *entry, const char *source,
                                 hcq__mtl_kernel_t *k) {
  if (hcq__binary_of_source(source) != HCQ_BINARY_NONE)
    HCQ__TRY(load_metallib(dev, entry, source, k));
  else
    HCQ__TRY(compile_source(dev, entry, source, k));
  return make_pipeline(dev, entry, k);
}

static hcq_status_t mtl_compile(hcq_device_t *dev, const char *entry, const char *source,
                                hcq__program_impl_t *out) {
  mtl_dev_t *md = mdev(dev);
  const hcq__mtl_api_t *api = md->api;
  hcq__mtl_kernel_t *k = calloc(1, sizeof(*k));
  if (!k) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory compiling %s", entry);
  void *pool = api->objc_autoreleasePoolPush();
  hcq_status_t st = build_kernel(dev, entry, source, k);
  api->objc_autoreleasePoolPop(pool);
  if (st) {
    release(md, k->pipeline);
    release(md, k->function);
    release(md, k->library);
    free(k);
    return st;
  }
  out->handle = (uint64_t)(uintptr_t)k;
  out->object = k;
  return NULL;
}

static void mtl_unload(hcq_device_t *dev, hcq__program_impl_t *impl) {
  mtl_dev_t *md = mdev(dev);
  hcq__mtl_kernel_t *k = impl->object;
  if (!k) return;
  release(md, k->pipeline);
  release(md, k->function);
  release(md, k->library);
  free(k);
  impl->object = NULL;
}

static const hcq__device_vtable_t mtl_vtable = {
    .destroy = mtl_destroy,
    .stop = mtl_stop,
    .mem_alloc = mtl_mem_alloc,
    .mem_free = mtl_mem_free,
    .reserve = mtl_reserve,
    .submit = mtl_submit,
    .submitted = mtl_submitted,
    .completed = mtl_completed,
    .wait_idle = mtl_wait_idle,
    .snapshot = mtl_snapshot,
    .lost = mtl_lost,
    .program_compile = mtl_compile,
    .program_unload = mtl_unload,
    .memory_info = mtl_memory_info,
};

static hcq_status_t mtl_open(int index, const hcq_device_options_t *opts, hcq_device_t *dev) {
  (void)opts;
  const char *why;
  const hcq__mtl_api_t *api = hcq__mtl_api(&why);
  if (!api) return hcq_status_make(HCQ_UNAVAILABLE, "device %s is unavailable: %s", dev->name, why);
  /* HCQ_METAL_VIRTUAL=1: METAL:N past 0 are more logical devices on the same GPU (each its own
   * queue, memory and engine), so multi-device behaviour can be tested on one GPU, as with Vulkan.
   */
  const char *virt = getenv("HCQ_METAL_VIRTUAL");
  if (index != 0 && !(virt && !strcmp(virt, "1")))
    return hcq_status_make(HCQ_NOT_FOUND,
                           "device %s: hcq opens the system's default Metal device only (METAL:0; "
                           "HCQ_METAL_VIRTUAL=1 opens more logical devices on it)",
                           dev->name);
  mtl_dev_t *md = calloc(1, sizeof(*md));
  if (!md) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory opening %s", dev->name);
  md->dev = dev;
  md->api = api;
  pthread_mutex_init(&md->lock, NULL);
  pthread_mutex_init(&md->mem_lock, NULL);
  pthread_cond_init(&md->cond, NULL);
  dev->backend = md;
  dev->vt = &mtl_vtable;
  hcq_status_t st = NULL;
  if (!(md->device = api->MTLCreateSystemDefaultDevice()))
    st = hcq_status_make(HCQ_UNAVAILABLE,
                         "device %s is unavailable: MTLCreateSystemDefaultDevice found no GPU",
                         dev->name);
  if (!st && !(md->queue = MSG(hcq_id)(md->device, SEL(newCommandQueue))))
    st = hcq_status_make(HCQ_UNAVAILABLE, "%s: newCommandQueue failed", dev->name);
  if (!st && !(md->event = MSG(hcq_id)(md->device, SEL(newSharedEvent))))
    st = hcq_status_make(HCQ_UNAVAILABLE, "%s: newSharedEvent failed", dev->name);
  if (!st && pthread_create(&md->thread, NULL, engine_main, md))
    st = hcq_status_make(HCQ_UNAVAILABLE, "%s: cannot start its engine thread", dev->name);
  if (st) {
    mtl_destroy(dev);
    dev->vt = NULL;
    return st;
  }
  md->started = true;
  dev->caps = HCQ_CAP_IN_ORDER_QUEUES | HCQ_CAP_COPY_QUEUE | HCQ_CAP_COMPILE_METAL |
              HCQ_CAP_COPIES_HOST_MEMORY;
  dev->threads = 1;
  /* Every Apple GPU family: 1024 threads per threadgroup (a pipeline may allow fewer: checked when
   * it runs), 32 KiB of threadgroup memory; the argument table's 31 entries hold the buffers and,
   * in the last, the values. */
  dev->limits.max_group_threads = 1024;
  for (int i = 0; i < 3; i++) dev->limits.max_group_size[i] = 1024;
  dev->limits.max_kernel_buffers = 30;
  dev->limits.view_offset_alignment = 16;
  dev->limits.shared_memory = 32u << 10;
  return NULL;
}

static void mtl_query(hcq_device_info_t *info) {
  const char *why;
  const hcq__mtl_api_t *api = hcq__mtl_api(&why);
  if (!api) {
    snprintf(info->description, sizeof(info->description), "%s", why);
    return;
  }
  void *pool = api->objc_autoreleasePoolPush();
  hcq_id device = api->MTLCreateSystemDefaultDevice();
  if (device) {
    hcq_id name = HCQ__MSG(api, hcq_id)(device, api->sel.name);
    snprintf(info->description, sizeof(info->description),
             "METAL:0 is %.80s: shared-storage buffers, MSL kernels (newLibraryWithSource), "
             "indirect-command-buffer "
             "graphs; runtime %.60s",
             hcq__mtl_cstring(api, name), api->metal_path);
    HCQ__MSG(api, void)(device, api->sel.release);
    info->available = true;
    info->count = 1;
  } else {
    snprintf(info->description, sizeof(info->description),
             "absent: MTLCreateSystemDefaultDevice found no GPU");
  }
  api->objc_autoreleasePoolPop(pool);
}

const hcq__backend_t hcq__mtl_backend = {
    /* docs/design.md, "The Metal graph" */
    .kind = HCQ_DEVICE_METAL,
    .source_key = "metal",
    .query = mtl_query,
    .open = mtl_open,
    .binary_formats = 1u << HCQ_BINARY_METALLIB,
    .kernel_caps = HCQ_CAP_COMPILE_METAL,
    .graph_create = hcq__mtl_graph_create,
    .graph_kernels_only = true,
    .graph_one_device = true,
    .no_compile_why =
        "a metallib is built by Apple's toolchain, which hcq does not drive: on macOS, "
        "xcrun -sdk macosx metal -c k.metal -o k.air && xcrun -sdk macosx metallib k.air -o "
        "k.metallib",
};
