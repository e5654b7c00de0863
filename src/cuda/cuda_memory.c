/* The CUDA device's memory: pinned slabs for small host-visible allocations, kept staging blocks,
 * and driver frees deferred until the streams are idle. */
#include <inttypes.h>
#include <stdlib.h>

#include "core/device.h"
#include "core/memory.h"
#include "core/options.h"
#include "core/vec.h"
#include "cuda/cuda_device.h"

#define HOST_SLACK \
  4096                      /* bytes past every host-visible allocation (a kernel's argument read \
                               that runs past a short block stays inside the mapping) */
#define PIN_SLAB (1u << 20) /* bytes of a slab (cuda_pin_slab_t) */
#define PIN_MAX (64u << 10) /* larger host-visible allocations get pinned memory of their own */
#define PIN_BLOCKS_KEPT 4   /* staging blocks kept for reuse (cuda_pin_block_t) */

static bool streams_idle(cuda_device_t *cd) {
  for (int k = 0; k < 2; k++)
    if (cd->streams[k].done &&
        atomic_load_explicit(cd->streams[k].done, memory_order_acquire) <
            atomic_load_explicit(&cd->streams[k].published, memory_order_acquire))
      return false;
  return true;
}

void hcq__cuda_flush_frees(cuda_device_t *cd, bool force) {
  pthread_mutex_lock(&cd->submit_lock);
  pthread_mutex_lock(&cd->mem_lock);
  bool go = cd->frees.len && (force || streams_idle(cd));
  cuda_driver_frees_t frees = {0};
  if (go) {
    frees = cd->frees;
    memset(&cd->frees, 0, sizeof(cd->frees));
  }
  pthread_mutex_unlock(&cd->mem_lock);
  if (go) {
    hcq_CUcontext prev;
    if (frees.len && cd->api->cuCtxPushCurrent(cd->ctx) == 0) {
      for (size_t i = 0; i < frees.len; i++) {
        if (frees.data[i].host)
          cd->api->cuMemFreeHost(frees.data[i].host);
        else
          cd->api->cuMemFree(frees.data[i].addr);
      }
      cd->api->cuCtxPopCurrent(&prev);
    }
    hcq__vec_free(&frees);
  }
  pthread_mutex_unlock(&cd->submit_lock);
}

static void defer_driver_free(cuda_device_t *cd, cuda_driver_free_t f) {
  pthread_mutex_lock(&cd->mem_lock);
  bool kept = hcq__vec_push(&cd->frees, f);
  pthread_mutex_unlock(&cd->mem_lock);
  if (kept) {
    hcq__cuda_flush_frees(cd, false);
    return;
  }
  /* No memory to remember it: free it now, at the risk of the synchronisation. */
  hcq_CUcontext prev;
  if (cd->api->cuCtxPushCurrent(cd->ctx) != 0) return;
  if (f.host)
    cd->api->cuMemFreeHost(f.host);
  else
    cd->api->cuMemFree(f.addr);
  cd->api->cuCtxPopCurrent(&prev);
}

/* bytes (a multiple of 64) from the slabs, zeroed; a new slab when none has room (the one
 * cuMemHostAlloc left, rare: a slab holds thousands of signals). The context is current. */
static hcq_status_t pin_alloc(cuda_device_t *cd, uint64_t bytes, void **out_host,
                              cuda_pin_slab_t **out_slab) {
  for (int attempt = 0; attempt < 2; attempt++) {
    pthread_mutex_lock(&cd->mem_lock);
    for (cuda_pin_slab_t *sl = cd->slabs; sl; sl = sl->next)
      for (cuda_pin_range_t **r = &sl->free; *r; r = &(*r)->next) {
        if ((*r)->len < bytes) continue;
        *out_host = sl->base + (*r)->off;
        *out_slab = sl;
        (*r)->off += bytes;
        (*r)->len -= bytes;
        if (!(*r)->len) {
          cuda_pin_range_t *gone = *r;
          *r = gone->next;
          free(gone);
        }
        pthread_mutex_unlock(&cd->mem_lock);
        memset(*out_host, 0, (size_t)bytes);
        return NULL;
      }
    pthread_mutex_unlock(&cd->mem_lock);
    if (attempt) break;
    cuda_pin_slab_t *sl = calloc(1, sizeof(*sl));
    cuda_pin_range_t *all = calloc(1, sizeof(*all));
    void *host = NULL;
    hcq_CUdeviceptr addr = 0;
    hcq_CUresult rc = sl && all ? cd->api->cuMemHostAlloc(
                                      &host, PIN_SLAB + HOST_SLACK,
                                      HCQ_CU_MEMHOSTALLOC_PORTABLE | HCQ_CU_MEMHOSTALLOC_DEVICEMAP)
                                : HCQ_CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc && ((rc = cd->api->cuMemHostGetDevicePointer(&addr, host, 0)) ||
                addr != (hcq_CUdeviceptr)(uintptr_t)host)) {
      cd->api->cuMemFreeHost(host);
      free(sl), free(all);
      return rc ? hcq__cuda_fail(cd->dev, rc, "mapping pinned memory")
                : hcq_status_make(
                      HCQ_UNAVAILABLE,
                      "%s: pinned memory has a device address other than its host address "
                      "(hcq needs unified addressing)",
                      cd->dev->name);
    }
    if (rc) {
      free(sl), free(all);
      return hcq__cuda_fail(cd->dev, rc, "cuMemHostAlloc of %u bytes", PIN_SLAB);
    }
    sl->base = host;
    *all = (cuda_pin_range_t){0, PIN_SLAB, NULL};
    sl->free = all;
    pthread_mutex_lock(&cd->mem_lock);
    sl->next = cd->slabs;
    cd->slabs = sl;
    pthread_mutex_unlock(&cd->mem_lock);
  }
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: cannot place %" PRIu64 " bytes of pinned memory",
                         cd->dev->name, bytes);
}

/* The size of the core's staging buffers as this backend allocates them. */
static uint64_t staging_bytes(void) { return (hcq__options()->staging_chunk + 63) & ~UINT64_C(63); }

/* A kept block of exactly bytes, or NULL. */
static void *take_block(cuda_device_t *cd, uint64_t bytes) {
  void *host = NULL;
  pthread_mutex_lock(&cd->mem_lock);
  for (cuda_pin_block_t **b = &cd->blocks; *b; b = &(*b)->next)
    if ((*b)->bytes == bytes) {
      cuda_pin_block_t *gone = *b;
      *b = gone->next;
      host = gone->host;
      free(gone);
      cd->nblocks--;
      break;
    }
  pthread_mutex_unlock(&cd->mem_lock);
  return host;
}

/* Keeps a pinned allocation of bytes for reuse; false when enough are kept already. */
static bool keep_block(cuda_device_t *cd, void *host, uint64_t bytes) {
  cuda_pin_block_t *b = malloc(sizeof(*b));
  if (!b) return false;
  pthread_mutex_lock(&cd->mem_lock);
  bool kept = cd->nblocks < PIN_BLOCKS_KEPT;
  if (kept) {
    *b = (cuda_pin_block_t){host, bytes, cd->blocks};
    cd->blocks = b;
    cd->nblocks++;
  }
  pthread_mutex_unlock(&cd->mem_lock);
  if (!kept) free(b);
  return kept;
}

static void pin_free(cuda_device_t *cd, cuda_pin_slab_t *sl, void *host, uint64_t bytes) {
  uint64_t off = (uint64_t)((char *)host - sl->base);
  pthread_mutex_lock(&cd->mem_lock);
  cuda_pin_range_t **r = &sl->free;
  while (*r && (*r)->off < off) r = &(*r)->next;
  cuda_pin_range_t *prev =
      r == &sl->free ? NULL : (cuda_pin_range_t *)((char *)r - offsetof(cuda_pin_range_t, next));
  if (prev && prev->off + prev->len == off) {
    prev->len += bytes;
    if (*r && prev->off + prev->len == (*r)->off) {
      cuda_pin_range_t *gone = *r;
      prev->len += gone->len;
      prev->next = gone->next;
      free(gone);
    }
  } else if (*r && off + bytes == (*r)->off) {
    (*r)->off = off;
    (*r)->len += bytes;
  } else {
    cuda_pin_range_t *n = malloc(sizeof(*n));
    if (n) { /* without memory for the node, the range stays unused: a leak within the slab */
      *n = (cuda_pin_range_t){off, bytes, *r};
      *r = n;
    }
  }
  pthread_mutex_unlock(&cd->mem_lock);
}

hcq_status_t hcq__cuda_mem_alloc(hcq_device_t *dev, uint64_t size, uint32_t flags,
                                 hcq__mem_t *out) {
  cuda_device_t *cd = hcq__cuda_cdev(dev);
  const hcq__cuda_api_t *api = cd->api;
  if (size > (UINT64_C(1) << 46))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: cannot allocate %" PRIu64 " bytes", dev->name,
                           size);
  size_t bytes = (size_t)((size + 63) & ~UINT64_C(63));
  if (!bytes) bytes = 64;
  hcq_status_t st = hcq__cuda_push(dev);
  if (st) return st;
  hcq_CUresult rc;
  memset(out, 0, sizeof(*out));
  /* Mapped buffers are pinned host memory at the same address on both sides, as ours are. */
  if (flags & HCQ__MEM_MAPPED) flags |= HCQ__MEM_HOST_VISIBLE;
  if ((flags & HCQ__MEM_HOST_VISIBLE) && bytes <= PIN_MAX) {
    void *host = NULL;
    cuda_pin_slab_t *slab = NULL;
    if (!(st = pin_alloc(cd, bytes, &host, &slab))) {
      out->host = host;
      out->addr = (uint64_t)(uintptr_t)host;
      out->handle = slab;
    }
  } else if ((flags & HCQ__MEM_HOST_VISIBLE) && (out->host = take_block(cd, bytes))) {
    memset(out->host, 0, bytes + HOST_SLACK);
    out->addr = (uint64_t)(uintptr_t)out->host;
    out->handle = out->host;
  } else if (flags & HCQ__MEM_HOST_VISIBLE) {
    void *host = NULL;
    hcq_CUdeviceptr addr = 0;
    rc = api->cuMemHostAlloc(&host, bytes + HOST_SLACK,
                             HCQ_CU_MEMHOSTALLOC_PORTABLE | HCQ_CU_MEMHOSTALLOC_DEVICEMAP);
    if (rc) {
      st = hcq__cuda_fail(dev, rc, "cuMemHostAlloc of %zu bytes", bytes);
    } else if ((rc = api->cuMemHostGetDevicePointer(&addr, host, 0)) ||
               addr != (hcq_CUdeviceptr)(uintptr_t)host) {
      st =
          rc ? hcq__cuda_fail(dev, rc, "mapping pinned memory")
             : hcq_status_make(HCQ_UNAVAILABLE,
                               "%s: pinned memory has a device address other than its host address "
                               "(hcq needs unified addressing)",
                               dev->name);
      api->cuMemFreeHost(host);
    } else {
      memset(host, 0, bytes + HOST_SLACK);
      out->host = host;
      out->addr = addr;
      out->handle = host;
    }
  } else {
    hcq_CUdeviceptr addr = 0;
    rc = api->cuMemAlloc(&addr, bytes);
    if (rc) {
      st = hcq__cuda_fail(dev, rc, "cuMemAlloc of %zu bytes", bytes);
    } else if ((rc = api->cuMemsetD8Async(addr, 0, bytes, cd->alloc_stream)) ||
               (rc = api->cuStreamSynchronize(cd->alloc_stream))) {
      /* Zeroed on a stream of its own: waiting for it waits for nothing else. */
      st = hcq__cuda_fail(dev, rc, "clearing %zu new bytes", bytes);
      api->cuMemFree(addr);
    } else {
      out->addr = addr;
    }
  }
  hcq__cuda_pop(dev);
  if (!st) out->size = size;
  return st;
}

void hcq__cuda_mem_free(hcq_device_t *dev, hcq__mem_t *mem) {
  cuda_device_t *cd = hcq__cuda_cdev(dev);
  uint64_t bytes = (mem->size + 63) & ~UINT64_C(63);
  if (mem->handle && mem->handle != mem->host)
    pin_free(cd, mem->handle, mem->host, bytes ? bytes : 64);
  else if (mem->handle && !(bytes == staging_bytes() && keep_block(cd, mem->handle, bytes)))
    defer_driver_free(cd, (cuda_driver_free_t){mem->handle, 0});
  else if (mem->addr)
    defer_driver_free(cd, (cuda_driver_free_t){NULL, mem->addr});
  mem->host = NULL;
  mem->handle = NULL;
  mem->addr = 0;
}

/* What the driver says the GPU has and this process could still allocate there. */
hcq_status_t hcq__cuda_memory_info(hcq_device_t *dev, hcq_device_memory_t *out) {
  cuda_device_t *cd = hcq__cuda_cdev(dev);
  /* Memory of released buffers that waits here for the streams to pass it would otherwise count
   * as taken, though the caller gave it back; hand it to the driver first where the streams allow.
   */
  hcq__cuda_flush_frees(cd, false);
  hcq_status_t st = hcq__cuda_push(dev);
  if (st) return st;
  size_t free_bytes = 0, total_bytes = 0;
  hcq_CUresult rc = cd->api->cuMemGetInfo(&free_bytes, &total_bytes);
  hcq__cuda_pop(dev);
  if (rc) return hcq__cuda_fail(dev, rc, "cuMemGetInfo");
  out->total = total_bytes;
  out->available = free_bytes;
  out->source = "cuMemGetInfo";
  return NULL;
}

hcq_status_t hcq__cuda_make_staging_blocks(cuda_device_t *cd) {
  uint64_t chunk = staging_bytes();
  for (int i = 0; i < HCQ__STAGING_BUFFERS && chunk > PIN_MAX; i++) {
    void *host = NULL;
    hcq_CUresult rc = cd->api->cuMemHostAlloc(
        &host, chunk + HOST_SLACK, HCQ_CU_MEMHOSTALLOC_PORTABLE | HCQ_CU_MEMHOSTALLOC_DEVICEMAP);
    if (rc)
      return hcq__cuda_fail(cd->dev, rc, "cuMemHostAlloc of %" PRIu64 " bytes (staging)", chunk);
    if (!keep_block(cd, host, chunk)) cd->api->cuMemFreeHost(host);
  }
  return NULL;
}

void hcq__cuda_memory_release(cuda_device_t *cd) {
  const hcq__cuda_api_t *api = cd->api;
  for (cuda_pin_slab_t *sl = cd->slabs, *next; sl; sl = next) {
    next = sl->next;
    for (cuda_pin_range_t *r = sl->free, *rn; r; r = rn) {
      rn = r->next;
      free(r);
    }
    api->cuMemFreeHost(sl->base);
    free(sl);
  }
  cd->slabs = NULL;
  for (cuda_pin_block_t *b = cd->blocks, *next; b; b = next) {
    next = b->next;
    api->cuMemFreeHost(b->host);
    free(b);
  }
  cd->blocks = NULL;
}
