/* The CUDA device: the driver API behind the backend vtable. One primary context per device, one
 * stream per queue kind, command words turned into driver calls at submit:
 *   WAIT      cuStreamWaitValue64 (>=) on the signal's address (pinned host memory the GPU maps)
 *   SIGNAL    cuStreamWriteValue64, or for a signal in ordinary host memory (a CPU device's), a host
 *             function that sets it and wakes its waiters
 *   TIMESTAMP a one-thread kernel that writes %globaltimer (ns) into the signal's timestamp
 *   EXEC      cuLaunchKernel with the packed kernargs block as CU_LAUNCH_PARAM_BUFFER_POINTER
 *             (docs/design.md, "Programs and kernel ABIs")
 *   COPY      cuMemcpyAsync (unified addressing: device, peer and host memory alike)
 * Progress: each submission ends by writing its sequence number into a host-visible completion word
 * of its stream, which completed() reads; the timeline signal and deferred frees build on that.
 *
 * Host-visible memory is pinned, mapped, portable host memory: with unified addressing its device
 * address is its host address, which is what lets a kernargs block be read on the host at launch
 * and every CUDA device wait on every other's signals. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/backend.h"
#include "cuda/cuda_internal.h"
#include "cuda/nvrtc.h"

#define RECORDS 1024u           /* submissions remembered per stream, for hang reports */
#define WORD_RING (1u << 16)    /* words of unbound submissions kept for the same */
#define STAGE_BYTES (1u << 20) /* per stream: pageable copies move through it in chunks this size */
#define HOST_SLACK 4096         /* bytes past every host-visible allocation (a kernel's argument read
                                   that runs past a short block stays inside the mapping) */

typedef struct sub_record {
  uint64_t seq;
  const uint32_t *words;
  uint32_t nwords;
  bool bound;
} sub_record_t;

typedef struct cuda_stream {
  hcq_CUstream s;
  uint64_t submitted;         /* under the device lock */
  _Atomic uint64_t published; /* submitted, for other threads */
  _Atomic uint64_t *done;     /* the completion word the stream writes */
  hcq_CUdeviceptr done_addr;
  uint64_t last_signal_addr, last_signal_value; /* what this stream wrote last (waits it implies are dropped) */
  pthread_mutex_t records_lock; /* records and ring: written at submit, read by hang reports (trylock) */
  sub_record_t records[RECORDS];
  uint32_t *ring;
  uint64_t ring_head;
  void *stage; /* pinned, STAGE_BYTES: copies to and from pageable host memory go through it */
} cuda_stream_t;

/* Pinned memory for small host-visible allocations (signals, small bound queues, profile slots):
 * slabs carved up by hcq, so that making or freeing a signal calls no cuMemHostAlloc or
 * cuMemFreeHost, which may synchronise the context (and so wait for a stream that waits for the
 * caller). A free range list per slab, sorted by offset. */
#define PIN_SLAB (1u << 20)
#define PIN_MAX (64u << 10) /* larger host-visible allocations get pinned memory of their own */
typedef struct pin_range {
  uint64_t off, len;
  struct pin_range *next;
} pin_range_t;
typedef struct pin_slab {
  char *base;
  pin_range_t *free;
  struct pin_slab *next;
} pin_slab_t;

/* Memory to give back to the driver once the device is idle (cuMemFree and cuMemFreeHost may
 * synchronise the context). */
typedef struct driver_free {
  void *host;           /* cuMemFreeHost, or */
  hcq_CUdeviceptr addr; /* cuMemFree */
} driver_free_t;
typedef HCQ__VEC(driver_free_t) driver_frees_t;

/* The core's staging buffers (pinned, larger than a slab takes) are made when the device opens,
 * kept for reuse when freed and given back at close: the first host copy would otherwise call
 * cuMemHostAlloc at any moment. */
#define PIN_BLOCKS_KEPT 4
typedef struct pin_block {
  void *host;
  uint64_t bytes; /* usable, HOST_SLACK not counted */
  struct pin_block *next;
} pin_block_t;

typedef struct cuda_device {
  hcq_device_t *dev;
  const hcq__cuda_api_t *api;
  hcq_CUdevice cudev;
  hcq_CUcontext ctx;
  bool ctx_retained, counted;
  int cc_major, cc_minor;
  int max_block[3], max_grid[3], max_threads;
  cuda_stream_t streams[2];
  hcq_CUstream alloc_stream;
  void *progress; /* pinned: the streams' completion words */
  hcq_CUmodule ts_module;
  hcq_CUfunction ts_fn;
  uint64_t reachable[8]; /* addresses the driver knows (stream memory operations work on them) */
  unsigned reachable_next;
  uint64_t seen_timeline_value;
  const hcq_signal_t *seen_timeline;
  struct cuda_device *reg_next;
  /* Held while work is enqueued and published (inside the device lock): a free that found every
   * stream idle runs before any new work reaches them. */
  pthread_mutex_t submit_lock;
  pthread_mutex_t mem_lock; /* slabs and frees */
  pin_slab_t *slabs;
  pin_block_t *blocks;
  unsigned nblocks;
  driver_frees_t frees;
} cuda_device_t;

/* Open CUDA devices, for peer access between them. */
static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static cuda_device_t *g_reg_head;

static cuda_device_t *cdev(const hcq_device_t *dev) { return dev->backend; }

const hcq__cuda_api_t *hcq__cuda_device_api(const hcq_device_t *dev) { return cdev(dev)->api; }
hcq_CUcontext hcq__cuda_device_context(const hcq_device_t *dev) { return cdev(dev)->ctx; }
void hcq__cuda_device_arch(const hcq_device_t *dev, int *major, int *minor) {
  *major = cdev(dev)->cc_major;
  *minor = cdev(dev)->cc_minor;
}

/* The errors after which the context is unusable: cuda.h says of most that they leave "the process
 * in an inconsistent state and any further CUDA work will return the same error" (ILLEGAL_ADDRESS,
 * LAUNCH_TIMEOUT, HARDWARE_STACK_ERROR, ILLEGAL_INSTRUCTION, MISALIGNED_ADDRESS,
 * INVALID_ADDRESS_SPACE, INVALID_PC, LAUNCH_FAILED, CONTAINED, TENSOR_MEMORY_LEAK, EXTERNAL_DEVICE);
 * ASSERT's context "cannot be used anymore"; ECC and NVLink uncorrectable errors are hardware faults. */
static bool sticky(hcq_CUresult rc) {
  switch (rc) {
    case HCQ_CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case HCQ_CUDA_ERROR_CONTAINED:
    case HCQ_CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case HCQ_CUDA_ERROR_EXTERNAL_DEVICE:
    case HCQ_CUDA_ERROR_ECC_UNCORRECTABLE:
    case HCQ_CUDA_ERROR_ILLEGAL_ADDRESS:
    case HCQ_CUDA_ERROR_LAUNCH_TIMEOUT:
    case HCQ_CUDA_ERROR_ASSERT:
    case HCQ_CUDA_ERROR_HARDWARE_STACK_ERROR:
    case HCQ_CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case HCQ_CUDA_ERROR_MISALIGNED_ADDRESS:
    case HCQ_CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case HCQ_CUDA_ERROR_INVALID_PC:
    case HCQ_CUDA_ERROR_LAUNCH_FAILED:
    case HCQ_CUDA_ERROR_UNKNOWN: return true;
    default: return false;
  }
}

hcq_status_t hcq__cuda_fail(hcq_device_t *dev, hcq_CUresult rc, const char *fmt, ...) {
  char what[512], text[192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  hcq__cuda_error_text(rc, text, sizeof(text));
  if (sticky(rc)) {
    /* The context is unusable from now on: every later call would fail the same way. */
    hcq__device_mark_lost(dev, "the GPU reported %s (%s)", text, what);
    return hcq_status_make(HCQ_DEVICE_LOST, "%s: %s failed: %s; the device is lost", dev->name, what, text);
  }
  return hcq_status_make(rc == HCQ_CUDA_ERROR_OUT_OF_MEMORY ? HCQ_OUT_OF_MEMORY : HCQ_DEVICE_ERROR, "%s: %s failed: %s",
                         dev->name, what, text);
}

hcq_status_t hcq__cuda_push(hcq_device_t *dev) {
  cuda_device_t *cd = cdev(dev);
  hcq_CUresult rc = cd->api->cuCtxPushCurrent(cd->ctx);
  return rc ? hcq__cuda_fail(dev, rc, "making its context current") : NULL;
}

void hcq__cuda_pop(hcq_device_t *dev) {
  hcq_CUcontext prev;
  cdev(dev)->api->cuCtxPopCurrent(&prev);
}

/* ---- memory ---- */

static bool streams_idle(cuda_device_t *cd) {
  for (int k = 0; k < 2; k++)
    if (cd->streams[k].done && atomic_load_explicit(cd->streams[k].done, memory_order_acquire) <
        atomic_load_explicit(&cd->streams[k].published, memory_order_acquire))
      return false;
  return true;
}

/* Gives the deferred frees back to the driver if no stream has work (or always: force, when the
 * streams are gone). */
static void flush_frees(cuda_device_t *cd, bool force) {
  pthread_mutex_lock(&cd->submit_lock);
  pthread_mutex_lock(&cd->mem_lock);
  bool go = cd->frees.len && (force || streams_idle(cd));
  driver_frees_t frees = {0};
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

static void defer_driver_free(cuda_device_t *cd, driver_free_t f) {
  pthread_mutex_lock(&cd->mem_lock);
  bool kept = hcq__vec_push(&cd->frees, f);
  pthread_mutex_unlock(&cd->mem_lock);
  if (kept) {
    flush_frees(cd, false);
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
static hcq_status_t pin_alloc(cuda_device_t *cd, uint64_t bytes, void **out_host, pin_slab_t **out_slab) {
  for (int attempt = 0; attempt < 2; attempt++) {
    pthread_mutex_lock(&cd->mem_lock);
    for (pin_slab_t *sl = cd->slabs; sl; sl = sl->next)
      for (pin_range_t **r = &sl->free; *r; r = &(*r)->next) {
        if ((*r)->len < bytes) continue;
        *out_host = sl->base + (*r)->off;
        *out_slab = sl;
        (*r)->off += bytes;
        (*r)->len -= bytes;
        if (!(*r)->len) {
          pin_range_t *gone = *r;
          *r = gone->next;
          free(gone);
        }
        pthread_mutex_unlock(&cd->mem_lock);
        memset(*out_host, 0, (size_t)bytes);
        return NULL;
      }
    pthread_mutex_unlock(&cd->mem_lock);
    if (attempt) break;
    pin_slab_t *sl = calloc(1, sizeof(*sl));
    pin_range_t *all = calloc(1, sizeof(*all));
    void *host = NULL;
    hcq_CUdeviceptr addr = 0;
    hcq_CUresult rc = sl && all ? cd->api->cuMemHostAlloc(&host, PIN_SLAB + HOST_SLACK, HCQ_CU_MEMHOSTALLOC_PORTABLE |
                                                                                       HCQ_CU_MEMHOSTALLOC_DEVICEMAP)
                                : HCQ_CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc && ((rc = cd->api->cuMemHostGetDevicePointer(&addr, host, 0)) || addr != (hcq_CUdeviceptr)(uintptr_t)host)) {
      cd->api->cuMemFreeHost(host);
      free(sl), free(all);
      return rc ? hcq__cuda_fail(cd->dev, rc, "mapping pinned memory")
                : hcq_status_make(HCQ_UNAVAILABLE, "%s: pinned memory has a device address other than its host address "
                                  "(hcq needs unified addressing)", cd->dev->name);
    }
    if (rc) {
      free(sl), free(all);
      return hcq__cuda_fail(cd->dev, rc, "cuMemHostAlloc of %u bytes", PIN_SLAB);
    }
    sl->base = host;
    *all = (pin_range_t){0, PIN_SLAB, NULL};
    sl->free = all;
    pthread_mutex_lock(&cd->mem_lock);
    sl->next = cd->slabs;
    cd->slabs = sl;
    pthread_mutex_unlock(&cd->mem_lock);
  }
  return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: cannot place %" PRIu64 " bytes of pinned memory", cd->dev->name, bytes);
}

/* The size of the core's staging buffers as this backend allocates them. */
static uint64_t staging_bytes(void) { return (hcq__options()->staging_chunk + 63) & ~UINT64_C(63); }

/* A kept block of exactly bytes, or NULL. */
static void *take_block(cuda_device_t *cd, uint64_t bytes) {
  void *host = NULL;
  pthread_mutex_lock(&cd->mem_lock);
  for (pin_block_t **b = &cd->blocks; *b; b = &(*b)->next)
    if ((*b)->bytes == bytes) {
      pin_block_t *gone = *b;
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
  pin_block_t *b = malloc(sizeof(*b));
  if (!b) return false;
  pthread_mutex_lock(&cd->mem_lock);
  bool kept = cd->nblocks < PIN_BLOCKS_KEPT;
  if (kept) {
    *b = (pin_block_t){host, bytes, cd->blocks};
    cd->blocks = b;
    cd->nblocks++;
  }
  pthread_mutex_unlock(&cd->mem_lock);
  if (!kept) free(b);
  return kept;
}

static void pin_free(cuda_device_t *cd, pin_slab_t *sl, void *host, uint64_t bytes) {
  uint64_t off = (uint64_t)((char *)host - sl->base);
  pthread_mutex_lock(&cd->mem_lock);
  pin_range_t **r = &sl->free;
  while (*r && (*r)->off < off) r = &(*r)->next;
  pin_range_t *prev = r == &sl->free ? NULL : (pin_range_t *)((char *)r - offsetof(pin_range_t, next));
  if (prev && prev->off + prev->len == off) {
    prev->len += bytes;
    if (*r && prev->off + prev->len == (*r)->off) {
      pin_range_t *gone = *r;
      prev->len += gone->len;
      prev->next = gone->next;
      free(gone);
    }
  } else if (*r && off + bytes == (*r)->off) {
    (*r)->off = off;
    (*r)->len += bytes;
  } else {
    pin_range_t *n = malloc(sizeof(*n));
    if (n) { /* without memory for the node, the range stays unused: a leak within the slab */
      *n = (pin_range_t){off, bytes, *r};
      *r = n;
    }
  }
  pthread_mutex_unlock(&cd->mem_lock);
}

static hcq_status_t cuda_mem_alloc(hcq_device_t *dev, uint64_t size, uint32_t flags, hcq__mem_t *out) {
  cuda_device_t *cd = cdev(dev);
  const hcq__cuda_api_t *api = cd->api;
  if (size > (UINT64_C(1) << 46))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: cannot allocate %" PRIu64 " bytes", dev->name, size);
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
    pin_slab_t *slab = NULL;
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
    rc = api->cuMemHostAlloc(&host, bytes + HOST_SLACK, HCQ_CU_MEMHOSTALLOC_PORTABLE | HCQ_CU_MEMHOSTALLOC_DEVICEMAP);
    if (rc) {
      st = hcq__cuda_fail(dev, rc, "cuMemHostAlloc of %zu bytes", bytes);
    } else if ((rc = api->cuMemHostGetDevicePointer(&addr, host, 0)) || addr != (hcq_CUdeviceptr)(uintptr_t)host) {
      st = rc ? hcq__cuda_fail(dev, rc, "mapping pinned memory")
              : hcq_status_make(HCQ_UNAVAILABLE, "%s: pinned memory has a device address other than its host address "
                                "(hcq needs unified addressing)", dev->name);
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

static void cuda_mem_free(hcq_device_t *dev, hcq__mem_t *mem) {
  cuda_device_t *cd = cdev(dev);
  uint64_t bytes = (mem->size + 63) & ~UINT64_C(63);
  if (mem->handle && mem->handle != mem->host)
    pin_free(cd, mem->handle, mem->host, bytes ? bytes : 64);
  else if (mem->handle && !(bytes == staging_bytes() && keep_block(cd, mem->handle, bytes)))
    defer_driver_free(cd, (driver_free_t){mem->handle, 0});
  else if (mem->addr)
    defer_driver_free(cd, (driver_free_t){NULL, mem->addr});
  mem->host = NULL;
  mem->handle = NULL;
  mem->addr = 0;
}

/* What the driver says the GPU has and this process could still allocate there. */
static hcq_status_t cuda_memory_info(hcq_device_t *dev, hcq_device_memory_t *out) {
  cuda_device_t *cd = cdev(dev);
  /* Memory of released buffers that waits here for the streams to pass it would otherwise count
   * as taken, though the caller gave it back; hand it to the driver first where the streams allow. */
  flush_frees(cd, false);
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

/* ---- submission ---- */

/* Whether the driver knows addr (device memory or pinned host memory): stream memory operations
 * work on such addresses only. The few addresses seen last are remembered (the timelines). */
static bool reachable(cuda_device_t *cd, uint64_t addr) {
  for (unsigned i = 0; i < 8; i++)
    if (cd->reachable[i] == addr) return true;
  hcq_CUcontext ctx = NULL;
  if (cd->api->cuPointerGetAttribute(&ctx, HCQ_CU_POINTER_ATTRIBUTE_CONTEXT, addr) != 0) return false;
  cd->reachable[cd->reachable_next++ % 8] = addr;
  return true;
}

typedef struct host_signal {
  hcq__signal_words_t *words;
  uint64_t value;
} host_signal_t;

static void set_host_signal(void *arg) {
  host_signal_t *h = arg;
  hcq__signal_words_set(h->words, h->value);
  free(h);
}

static const char k_timestamp_ptx[] =
    ".version 6.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    ".visible .entry hcq_timestamp(.param .u64 hcq_timestamp_param_0)\n"
    "{\n"
    "  .reg .b64 %rd<3>;\n"
    "  ld.param.u64 %rd1, [hcq_timestamp_param_0];\n"
    "  mov.u64 %rd2, %globaltimer;\n"
    "  st.volatile.u64 [%rd1], %rd2;\n"
    "  ret;\n"
    "}\n";

/* A timestamp for a signal in ordinary host memory (a CPU device's), written on the host when the
 * stream reaches it: a kernel's store there is an illegal address on machines without HMM/ATS. */
static void set_host_timestamp(void *arg) {
  hcq__signal_words_t *s = arg;
  atomic_store_explicit(&s->timestamp, hcq__now_ns(), memory_order_release);
}

/* The same kernel as CUDA C, for NVRTC: a cubin for the device's own architecture needs no PTX JIT. */
static const char k_timestamp_cu[] =
    "extern \"C\" __global__ void hcq_timestamp(unsigned long long *t) {\n"
    "  unsigned long long v;\n"
    "  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(v));\n"
    "  *(volatile unsigned long long *)t = v;\n"
    "}\n";

/* Loads the timestamp kernel once, before the first submission that needs it: a cubin NVRTC made for
 * this GPU's architecture where NVRTC is usable, else the PTX above, which the driver's PTX JIT
 * compiles (a driver installed without it, libnvidia-ptxjitcompiler, cannot load PTX at all). */
static hcq_status_t load_timestamp_kernel(cuda_device_t *cd) {
  if (cd->ts_fn) return NULL;
  const hcq__cuda_api_t *api = cd->api;
  hcq__cuda_image_t img;
  hcq_status_t nst = hcq__nvrtc_compile("hcq_timestamp", k_timestamp_cu, cd->cc_major * 10 + cd->cc_minor, &img);
  hcq_CUresult rc = HCQ_CUDA_ERROR_NOT_FOUND;
  if (!nst && img.cubin) rc = api->cuModuleLoadDataEx(&cd->ts_module, img.cubin, 0, NULL, NULL);
  if (!nst) hcq__cuda_image_free(&img);
  char why[300];
  snprintf(why, sizeof(why), "%.290s", nst ? hcq_status_message(nst) : rc ? "it made no cubin that loads" : "");
  hcq_status_destroy(nst);
  if (rc) rc = api->cuModuleLoadDataEx(&cd->ts_module, k_timestamp_ptx, 0, NULL, NULL);
  if (rc == HCQ_CUDA_ERROR_JIT_COMPILER_NOT_FOUND || rc == HCQ_CUDA_ERROR_JIT_COMPILATION_DISABLED ||
      rc == HCQ_CUDA_ERROR_UNSUPPORTED_PTX_VERSION || rc == HCQ_CUDA_ERROR_INVALID_PTX) {
    char text[192];
    hcq__cuda_error_text(rc, text, sizeof(text));
    return hcq_status_make(HCQ_UNAVAILABLE, "%s cannot run timestamps: the driver does not load the timestamp kernel's "
                           "PTX (%s: its PTX JIT compiler is missing or disabled), and NVRTC gave no cubin for sm_%d%d "
                           "(%s); install NVRTC, or the driver's PTX JIT (libnvidia-ptxjitcompiler.so.1)",
                           cd->dev->name, text, cd->cc_major, cd->cc_minor, why);
  }
  if (rc) return hcq__cuda_fail(cd->dev, rc, "loading the timestamp kernel");
  if ((rc = api->cuModuleGetFunction(&cd->ts_fn, cd->ts_module, "hcq_timestamp"))) {
    api->cuModuleUnload(cd->ts_module);
    cd->ts_module = NULL;
    cd->ts_fn = NULL;
    return hcq__cuda_fail(cd->dev, rc, "resolving the timestamp kernel");
  }
  /* Loaded now, not at its first launch: a lazily loaded function's first launch may wait for every
   * stream of the context, one of which may be waiting on the host. */
  if (api->cuFuncLoad && (rc = api->cuFuncLoad(cd->ts_fn))) {
    api->cuModuleUnload(cd->ts_module);
    cd->ts_module = NULL;
    cd->ts_fn = NULL;
    return hcq__cuda_fail(cd->dev, rc, "loading the timestamp kernel (cuFuncLoad)");
  }
  return NULL;
}

static hcq_CUresult write_timestamp(cuda_device_t *cd, hcq_CUstream s, uint64_t addr) {
  const hcq__cuda_api_t *api = cd->api;
  if (!reachable(cd, addr)) return api->cuLaunchHostFunc(s, set_host_timestamp, (void *)(uintptr_t)addr);
  if (!cd->ts_fn) return HCQ_CUDA_ERROR_NOT_FOUND; /* check_words loads it first */
  uint64_t target = addr + offsetof(hcq__signal_words_t, timestamp);
  size_t size = sizeof(target);
  void *extra[] = {HCQ_CU_LAUNCH_PARAM_BUFFER_POINTER, &target, HCQ_CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   HCQ_CU_LAUNCH_PARAM_END};
  return api->cuLaunchKernel(cd->ts_fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, extra);
}

/* cuLaunchKernel copies the argument block on the host, when it is called: the block must be memory
 * the host reads (pinned or ordinary host memory). A block in GPU memory would be a host read of a
 * device address, which crashes the process, so it is refused here by the driver's own account of
 * the address (the Vulkan engine likewise checks the block is its own memory). */
static hcq_status_t check_kernargs(cuda_device_t *cd, const char *kernel, uint64_t addr, uint32_t bytes) {
  if (!bytes) return NULL; /* nothing is read */
  if (!addr)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "launch of %s on %s: its kernel arguments are at address 0", kernel,
                           cd->dev->name);
  /* One query per launch, of the block's start: a block cannot run from host memory into a device
   * allocation without first running past the end of its own one. */
  unsigned type = 0;
  if (cd->api->cuPointerGetAttribute(&type, HCQ_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, addr) == 0 &&
      type == HCQ_CU_MEMORYTYPE_DEVICE)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "launch of %s on %s: its kernel arguments at 0x%" PRIx64 " (%" PRIu32
                           " bytes) are in GPU memory, which cuLaunchKernel cannot read (it reads them on the host); "
                           "write them into host-mapped memory (hcq_queue_kernargs into a host-visible buffer)",
                           kernel, cd->dev->name, addr, bytes);
  return NULL;
}

/* Checks what the driver would refuse before anything is enqueued: a submission runs whole or
 * fails without side effects (the driver's own asynchronous failures aside). */
static hcq_status_t check_words(hcq_device_t *dev, const uint32_t *w, size_t n) {
  cuda_device_t *cd = cdev(dev);
  for (const uint32_t *end = w + n; w < end; w += HCQ__HDR_LEN(w[0])) {
    uint32_t op = HCQ__HDR_OP(w[0]);
    if (HCQ__HDR_LEN(w[0]) == 0) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: malformed command words", dev->name);
    if (op == HCQ__OP_WAIT && !reachable(cd, hcq__rd64(w + HCQ__WAIT_ADDR))) {
      char name[80] = "";
      uint64_t value;
      if (!hcq__signal_lookup(hcq__rd64(w + HCQ__WAIT_ADDR), name, sizeof(name), &value, NULL))
        snprintf(name, sizeof(name), "at 0x%" PRIx64, hcq__rd64(w + HCQ__WAIT_ADDR));
      return hcq_status_make(HCQ_UNIMPLEMENTED, "%s cannot wait on signal \"%s\": it is not in memory the GPU maps (a "
                             "CPU device's signal?)", dev->name, name);
    }
    if (op == HCQ__OP_TIMESTAMP && reachable(cd, hcq__rd64(w + HCQ__TIMESTAMP_ADDR))) {
      hcq_status_t tst = load_timestamp_kernel(cd);
      if (tst) return tst;
    }
    if (op != HCQ__OP_EXEC) continue;
    const hcq__cuda_kernel_t *k = (const hcq__cuda_kernel_t *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_FN);
    const hcq_program_t *p = (const hcq_program_t *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_PROGRAM);
    const char *name = p ? p->name : "?";
    if (!k) return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: exec of %s without a CUDA kernel", dev->name, name);
    hcq_status_t ast = check_kernargs(cd, name, hcq__rd64(w + HCQ__EXEC_ARGS), k->param_bytes);
    if (ast) return ast;
    if (w[HCQ__EXEC_NBUFS] != k->nptrs)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "launch of %s on %s: the kernel takes %" PRIu32 " buffers, the launch "
                             "passes %" PRIu32, name, dev->name, k->nptrs, w[HCQ__EXEC_NBUFS]);
    const uint32_t *g = w + HCQ__EXEC_GLOBAL, *l = w + HCQ__EXEC_LOCAL;
    if (!g[0] || !g[1] || !g[2] || !l[0] || !l[1] || !l[2]) continue; /* an empty launch runs nothing */
    uint64_t threads = (uint64_t)l[0] * l[1] * l[2];
    for (int i = 0; i < 3; i++)
      if (g[i] > (uint32_t)cd->max_grid[i] || l[i] > (uint32_t)cd->max_block[i] || threads > (uint64_t)cd->max_threads)
        return hcq_status_make(HCQ_OUT_OF_RANGE, "launch of %s on %s: grid %" PRIu32 "x%" PRIu32 "x%" PRIu32 " of blocks %"
                               PRIu32 "x%" PRIu32 "x%" PRIu32 " is past the GPU's limits (grid %dx%dx%d, block %dx%dx%d, "
                               "%d threads)", name, dev->name, g[0], g[1], g[2], l[0], l[1], l[2], cd->max_grid[0],
                               cd->max_grid[1], cd->max_grid[2], cd->max_block[0], cd->max_block[1], cd->max_block[2],
                               cd->max_threads);
  }
  return NULL;
}

/* A host-side part of a copy, run by the stream (a host function) when the copy's turn comes. */
typedef struct host_copy {
  void *dst;
  const void *src;
  size_t n;
} host_copy_t;

static void run_host_copy(void *arg) {
  host_copy_t *h = arg;
  memmove(h->dst, h->src, h->n);
  free(h);
}

static hcq_CUresult enqueue_host_copy(const hcq__cuda_api_t *api, hcq_CUstream s, void *dst, const void *src, size_t n) {
  host_copy_t *h = malloc(sizeof(*h));
  if (!h) return HCQ_CUDA_ERROR_OUT_OF_MEMORY;
  *h = (host_copy_t){dst, src, n};
  hcq_CUresult rc = api->cuLaunchHostFunc(s, run_host_copy, h);
  if (rc) free(h);
  return rc;
}

/* A COPY with an end in ordinary (pageable) host memory, a CPU device's buffer: cuMemcpyAsync
 * would be synchronous there (the driver stages it itself), blocking this thread until the stream
 * reached the copy, which may be behind a wait that only this thread will satisfy. Instead the
 * stream does the host side itself, in order, through its pinned stage: a host function fills the
 * stage, the driver copies from it (or the other way round). Nothing here waits. */
static hcq_CUresult staged_copy(cuda_device_t *cd, cuda_stream_t *cs, uint64_t dst, uint64_t src, uint64_t size,
                                bool dst_pinned, bool src_pinned, const char **what) {
  const hcq__cuda_api_t *api = cd->api;
  char *d = (char *)(uintptr_t)dst;
  const char *sp = (const char *)(uintptr_t)src;
  hcq_CUresult rc = 0;
  if (!dst_pinned && !src_pinned) {
    *what = "cuLaunchHostFunc (host to host copy)";
    return enqueue_host_copy(api, cs->s, d, sp, (size_t)size);
  }
  for (uint64_t off = 0; off < size && !rc; off += STAGE_BYTES) {
    size_t n = (size_t)(size - off < STAGE_BYTES ? size - off : STAGE_BYTES);
    hcq_CUdeviceptr stage = (hcq_CUdeviceptr)(uintptr_t)cs->stage;
    if (!src_pinned) {
      *what = "cuLaunchHostFunc (filling the copy stage)";
      if (!(rc = enqueue_host_copy(api, cs->s, cs->stage, sp + off, n))) {
        *what = "cuMemcpyAsync (from the copy stage)";
        rc = api->cuMemcpyAsync(dst + off, stage, n, cs->s);
      }
    } else {
      *what = "cuMemcpyAsync (into the copy stage)";
      if (!(rc = api->cuMemcpyAsync(stage, src + off, n, cs->s))) {
        *what = "cuLaunchHostFunc (draining the copy stage)";
        rc = enqueue_host_copy(api, cs->s, d + off, cs->stage, n);
      }
    }
  }
  return rc;
}

static hcq_CUresult run_command(cuda_device_t *cd, cuda_stream_t *cs, const uint32_t *w, const char **what) {
  const hcq__cuda_api_t *api = cd->api;
  hcq_device_t *dev = cd->dev;
  switch (HCQ__HDR_OP(w[0])) {
    case HCQ__OP_WAIT: {
      uint64_t addr = hcq__rd64(w + HCQ__WAIT_ADDR), value = w[HCQ__WAIT_VALUE];
      /* The stream's own last write already satisfies it (in-order stream): the device timeline only,
       * whose value nobody lowers but a wrap (which clears what we remember). */
      if (addr == cs->last_signal_addr && value <= cs->last_signal_value && dev->timeline &&
          addr == dev->timeline->mem.addr)
        return 0;
      *what = "cuStreamWaitValue64";
      return api->cuStreamWaitValue64(cs->s, addr, value, HCQ_CU_STREAM_WAIT_VALUE_GEQ);
    }
    case HCQ__OP_SIGNAL: {
      uint64_t addr = hcq__rd64(w + HCQ__SIGNAL_ADDR), value = w[HCQ__SIGNAL_VALUE];
      if (!reachable(cd, addr)) {
        host_signal_t *h = malloc(sizeof(*h));
        *what = "cuLaunchHostFunc";
        if (!h) return HCQ_CUDA_ERROR_OUT_OF_MEMORY;
        *h = (host_signal_t){(hcq__signal_words_t *)(uintptr_t)addr, value};
        hcq_CUresult rc = api->cuLaunchHostFunc(cs->s, set_host_signal, h);
        if (rc) free(h);
        return rc;
      }
      cs->last_signal_addr = addr;
      cs->last_signal_value = value;
      *what = "cuStreamWriteValue64";
      return api->cuStreamWriteValue64(cs->s, addr, value, HCQ_CU_STREAM_WRITE_VALUE_DEFAULT);
    }
    case HCQ__OP_TIMESTAMP:
      *what = "the timestamp kernel";
      return write_timestamp(cd, cs->s, hcq__rd64(w + HCQ__TIMESTAMP_ADDR));
    case HCQ__OP_EXEC: {
      const hcq__cuda_kernel_t *k = (const hcq__cuda_kernel_t *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_FN);
      const uint32_t *g = w + HCQ__EXEC_GLOBAL, *l = w + HCQ__EXEC_LOCAL;
      if (!g[0] || !g[1] || !g[2] || !l[0] || !l[1] || !l[2]) return 0;
      size_t size = k->param_bytes;
      void *args = (void *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_ARGS);
      void *extra[] = {HCQ_CU_LAUNCH_PARAM_BUFFER_POINTER, args, HCQ_CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                       HCQ_CU_LAUNCH_PARAM_END};
      *what = "cuLaunchKernel";
      return api->cuLaunchKernel(k->fn, g[0], g[1], g[2], l[0], l[1], l[2], 0, cs->s, NULL, size ? extra : NULL);
    }
    case HCQ__OP_COPY: {
      uint64_t size = hcq__rd64(w + HCQ__COPY_SIZE);
      if (!size) return 0;
      uint64_t dst = hcq__rd64(w + HCQ__COPY_DST), src = hcq__rd64(w + HCQ__COPY_SRC);
      bool dst_pinned = reachable(cd, dst), src_pinned = reachable(cd, src);
      if (cs->stage && (!dst_pinned || !src_pinned))
        return staged_copy(cd, cs, dst, src, size, dst_pinned, src_pinned, what);
      *what = "cuMemcpyAsync";
      return api->cuMemcpyAsync(dst, src, (size_t)size, cs->s);
    }
    default: return 0; /* NOP, BARRIER (a stream's commands are ordered and memory operations fence) */
  }
}

/* Remembers a submission's words for hang reports: bound words stay valid, others are copied. */
static void remember_locked(cuda_stream_t *cs, uint64_t seq, const uint32_t *words, size_t n, bool bound);
static void remember(cuda_stream_t *cs, uint64_t seq, const uint32_t *words, size_t n, bool bound) {
  pthread_mutex_lock(&cs->records_lock);
  remember_locked(cs, seq, words, n, bound);
  pthread_mutex_unlock(&cs->records_lock);
}

static void remember_locked(cuda_stream_t *cs, uint64_t seq, const uint32_t *words, size_t n, bool bound) {
  sub_record_t *r = &cs->records[seq % RECORDS];
  r->seq = seq;
  r->bound = bound;
  r->nwords = (uint32_t)n;
  if (bound) {
    r->words = words;
    return;
  }
  if (n == 0 || n > WORD_RING / 4) {
    r->words = NULL;
    return;
  }
  uint64_t pos = cs->ring_head % WORD_RING;
  if (pos + n > WORD_RING) {
    cs->ring_head += WORD_RING - pos;
    pos = 0;
  }
  memcpy(cs->ring + pos, words, n * sizeof(uint32_t));
  cs->ring_head += n;
  r->words = cs->ring + pos;
}

/* Ends a submission: the stream writes its sequence number into the completion word. */
static hcq_status_t finish_submission(cuda_device_t *cd, cuda_stream_t *cs, const uint32_t *words, size_t n, bool bound) {
  uint64_t seq = cs->submitted + 1;
  hcq_CUresult rc = cd->api->cuStreamWriteValue64(cs->s, cs->done_addr, seq, HCQ_CU_STREAM_WRITE_VALUE_DEFAULT);
  if (rc) {
    hcq_status_t st = hcq__cuda_fail(cd->dev, rc, "cuStreamWriteValue64 (completion word)");
    if (!hcq__device_is_lost(cd->dev)) hcq__device_mark_lost(cd->dev, "%s", hcq_status_message(st));
    return st;
  }
  remember(cs, seq, words, n, bound);
  cs->submitted = seq;
  atomic_store_explicit(&cs->published, seq, memory_order_release);
  return NULL;
}

/* A timeline wrap lowers the timeline value: what the streams remember of their writes is void. */
static void note_timeline(cuda_device_t *cd) {
  hcq_device_t *dev = cd->dev;
  if (dev->timeline_value < cd->seen_timeline_value || dev->timeline != cd->seen_timeline) {
    for (int k = 0; k < 2; k++) cd->streams[k].last_signal_addr = 0;
  }
  cd->seen_timeline_value = dev->timeline_value;
  cd->seen_timeline = dev->timeline;
}

static hcq_status_t cuda_reserve(hcq_device_t *dev, hcq_queue_kind_t kind, size_t nwords, bool bound) {
  (void)kind, (void)nwords, (void)bound; /* the driver queues whatever it is given */
  return hcq__device_check(dev);
}

static hcq_status_t cuda_submit(hcq_device_t *dev, hcq_queue_kind_t kind, const uint32_t *words, size_t nwords,
                                bool bound) {
  cuda_device_t *cd = cdev(dev);
  cuda_stream_t *cs = &cd->streams[kind];
  hcq_status_t st = hcq__device_check(dev);
  if (!st) st = hcq__cuda_push(dev);
  if (st) return st;
  if ((st = check_words(dev, words, nwords))) {
    hcq__cuda_pop(dev);
    return st;
  }
  note_timeline(cd);
  flush_frees(cd, false);
  pthread_mutex_lock(&cd->submit_lock);
  hcq_CUresult rc = 0;
  const char *what = "";
  const uint32_t *w = words, *end = words + nwords;
  for (; w < end && !rc; w += HCQ__HDR_LEN(w[0])) rc = run_command(cd, cs, w, &what);
  if (rc) st = hcq__cuda_fail(dev, rc, "%s", what);
  /* Whatever was enqueued counts: completion must catch up with it. */
  hcq_status_t fst = finish_submission(cd, cs, words, nwords, bound);
  pthread_mutex_unlock(&cd->submit_lock);
  hcq__cuda_pop(dev);
  if (st) {
    hcq_status_destroy(fst);
    return st;
  }
  return fst;
}

static uint64_t cuda_submitted(hcq_device_t *dev, hcq_queue_kind_t kind) {
  return atomic_load_explicit(&cdev(dev)->streams[kind].published, memory_order_acquire);
}

static uint64_t cuda_completed(hcq_device_t *dev, hcq_queue_kind_t kind) {
  const cuda_stream_t *cs = &cdev(dev)->streams[kind];
  uint64_t done = atomic_load_explicit(cs->done, memory_order_acquire);
  /* A lost device's streams never finish: what they were given is abandoned, not pending. */
  if (hcq__device_is_lost(dev)) return atomic_load_explicit(&cs->published, memory_order_acquire);
  return done;
}

/* Asynchronous failures (a faulting kernel) surface through stream queries. */
static void cuda_poll(hcq_device_t *dev) {
  cuda_device_t *cd = cdev(dev);
  if (hcq__device_is_lost(dev)) return;
  hcq_status_t st = hcq__cuda_push(dev);
  if (st) {
    hcq_status_destroy(st);
    return;
  }
  for (int k = 0; k < 2 && !st; k++) {
    hcq_CUresult rc = cd->api->cuStreamQuery(cd->streams[k].s);
    if (rc && rc != HCQ_CUDA_ERROR_NOT_READY) st = hcq__cuda_fail(dev, rc, "the %s stream", k ? "copy" : "compute");
  }
  hcq__cuda_pop(dev);
  hcq_status_destroy(st);
}

/* The core's wait, then the frees that waited for the streams. */
static hcq_status_t cuda_wait_idle(hcq_device_t *dev, int64_t timeout_ms) {
  hcq_status_t st = hcq__device_wait_engines(dev, timeout_ms);
  if (!st) flush_frees(cdev(dev), false);
  return st;
}

/* The command a stream is at: the first wait of its oldest unfinished submission whose signal has
 * not reached the value, else that submission's first kernel, else its first command. */
static void cuda_snapshot(hcq_device_t *dev, hcq_queue_kind_t kind, hcq__engine_snapshot_t *out) {
  cuda_stream_t *cs = &cdev(dev)->streams[kind];
  out->present = true;
  out->submitted = atomic_load_explicit(&cs->published, memory_order_acquire);
  out->completed = atomic_load_explicit(cs->done, memory_order_acquire);
  out->cur = out->prev = out->call_base = NULL;
  if (out->completed >= out->submitted || out->submitted - out->completed > RECORDS) return;
  /* Never blocks: while a submission is being recorded, the report goes without the detail. */
  if (pthread_mutex_trylock(&cs->records_lock) != 0) return;
  sub_record_t rec = cs->records[(out->completed + 1) % RECORDS];
  pthread_mutex_unlock(&cs->records_lock);
  const sub_record_t *r = &rec;
  if (r->seq != out->completed + 1 || !r->words || !r->nwords) return;
  const uint32_t *w = r->words, *end = r->words + r->nwords, *prev = NULL, *exec = NULL, *exec_prev = NULL;
  for (; w < end && HCQ__HDR_LEN(w[0]); prev = w, w += HCQ__HDR_LEN(w[0])) {
    uint32_t op = HCQ__HDR_OP(w[0]);
    if (op == HCQ__OP_EXEC && !exec) exec = w, exec_prev = prev;
    if (op != HCQ__OP_WAIT) continue;
    char name[8];
    uint64_t value = 0;
    if (hcq__signal_lookup(hcq__rd64(w + HCQ__WAIT_ADDR), name, sizeof(name), &value, NULL) &&
        value < w[HCQ__WAIT_VALUE])
      break;
  }
  if (w < end) {
    out->cur = w, out->prev = prev;
  } else if (exec) {
    out->cur = exec, out->prev = exec_prev;
  } else {
    out->cur = r->words;
  }
  if (r->bound) out->call_base = r->words;
}

static void cuda_lost(hcq_device_t *dev) { (void)dev; /* host waits end through the core's checks */ }

/* ---- lifecycle ---- */

static bool cuda_stop(hcq_device_t *dev) {
  cuda_device_t *cd = cdev(dev);
  bool pending = false;
  for (int k = 0; k < 2; k++)
    pending |= atomic_load_explicit(cd->streams[k].done, memory_order_acquire) <
               atomic_load_explicit(&cd->streams[k].published, memory_order_acquire);
  /* A lost GPU may still be running (or stuck in) work that touches any of this device's memory. */
  return pending && hcq__device_is_lost(dev);
}

static void reg_remove(cuda_device_t *cd) {
  pthread_mutex_lock(&g_reg_lock);
  for (cuda_device_t **p = &g_reg_head; *p; p = &(*p)->reg_next)
    if (*p == cd) {
      *p = cd->reg_next;
      break;
    }
  pthread_mutex_unlock(&g_reg_lock);
}

static void cuda_destroy(hcq_device_t *dev) {
  cuda_device_t *cd = cdev(dev);
  if (!cd) return;
  reg_remove(cd);
  const hcq__cuda_api_t *api = cd->api;
  if (cd->ctx && api->cuCtxPushCurrent(cd->ctx) == 0) {
    for (int k = 0; k < 2; k++) {
      if (cd->streams[k].s) {
        api->cuStreamSynchronize(cd->streams[k].s);
        api->cuStreamDestroy(cd->streams[k].s);
      }
    }
    if (cd->alloc_stream) api->cuStreamDestroy(cd->alloc_stream);
    hcq_CUcontext none;
    api->cuCtxPopCurrent(&none);
    flush_frees(cd, true); /* the streams are gone */
    api->cuCtxPushCurrent(cd->ctx);
    for (pin_slab_t *sl = cd->slabs, *next; sl; sl = next) {
      next = sl->next;
      for (pin_range_t *r = sl->free, *rn; r; r = rn) {
        rn = r->next;
        free(r);
      }
      api->cuMemFreeHost(sl->base);
      free(sl);
    }
    cd->slabs = NULL;
    for (pin_block_t *b = cd->blocks, *next; b; b = next) {
      next = b->next;
      api->cuMemFreeHost(b->host);
      free(b);
    }
    cd->blocks = NULL;
    if (cd->ts_module) api->cuModuleUnload(cd->ts_module);
    if (cd->progress) api->cuMemFreeHost(cd->progress);
    for (int k = 0; k < 2; k++)
      if (cd->streams[k].stage) api->cuMemFreeHost(cd->streams[k].stage);
    hcq_CUcontext prev;
    api->cuCtxPopCurrent(&prev);
  }
  if (cd->ctx_retained) api->cuDevicePrimaryCtxRelease(cd->cudev);
  if (cd->counted) hcq__signal_device_writers_add(-1);
  for (int k = 0; k < 2; k++) {
    free(cd->streams[k].ring);
    pthread_mutex_destroy(&cd->streams[k].records_lock);
  }
  hcq__vec_free(&cd->frees);
  pthread_mutex_destroy(&cd->submit_lock);
  pthread_mutex_destroy(&cd->mem_lock);
  free(cd);
  dev->backend = NULL;
}

static const hcq__device_vtable_t cuda_vtable = {
    .destroy = cuda_destroy,
    .stop = cuda_stop,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .reserve = cuda_reserve,
    .submit = cuda_submit,
    .submitted = cuda_submitted,
    .completed = cuda_completed,
    .wait_idle = cuda_wait_idle,
    .snapshot = cuda_snapshot,
    .lost = cuda_lost,
    .poll = cuda_poll,
    .program_compile = hcq__cuda_compile,
    .program_unload = hcq__cuda_unload,
    .memory_info = cuda_memory_info,
};

/* Peer access both ways with every other open CUDA device that allows it (copies between them then
 * go device to device); without it the driver still copies, through the host. */
static void enable_peers(cuda_device_t *cd) {
  const hcq__cuda_api_t *api = cd->api;
  pthread_mutex_lock(&g_reg_lock);
  for (cuda_device_t *o = g_reg_head; o; o = o->reg_next) {
    if (o->cudev == cd->cudev) continue;
    int a = 0, b = 0;
    api->cuDeviceCanAccessPeer(&a, cd->cudev, o->cudev);
    api->cuDeviceCanAccessPeer(&b, o->cudev, cd->cudev);
    hcq_CUcontext prev;
    if (a && api->cuCtxPushCurrent(cd->ctx) == 0) {
      api->cuCtxEnablePeerAccess(o->ctx, 0); /* already enabled is fine */
      api->cuCtxPopCurrent(&prev);
    }
    if (b && api->cuCtxPushCurrent(o->ctx) == 0) {
      api->cuCtxEnablePeerAccess(cd->ctx, 0);
      api->cuCtxPopCurrent(&prev);
    }
  }
  cd->reg_next = g_reg_head;
  g_reg_head = cd;
  pthread_mutex_unlock(&g_reg_lock);
}

static hcq_status_t setup(hcq_device_t *dev, cuda_device_t *cd, int index) {
  const hcq__cuda_api_t *api = cd->api;
  hcq_CUresult rc;
  if ((rc = api->cuDeviceGet(&cd->cudev, index))) return hcq__cuda_fail(dev, rc, "cuDeviceGet");
  struct {
    int attr, *out;
  } attrs[] = {
      {HCQ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &cd->cc_major},
      {HCQ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &cd->cc_minor},
      {HCQ_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &cd->max_threads},
      {HCQ_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, &cd->max_block[0]},
      {HCQ_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, &cd->max_block[1]},
      {HCQ_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, &cd->max_block[2]},
      {HCQ_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, &cd->max_grid[0]},
      {HCQ_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, &cd->max_grid[1]},
      {HCQ_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, &cd->max_grid[2]},
  };
  for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++)
    if ((rc = api->cuDeviceGetAttribute(attrs[i].out, attrs[i].attr, cd->cudev)))
      return hcq__cuda_fail(dev, rc, "cuDeviceGetAttribute(%d)", attrs[i].attr);
  int uva = 0, map = 0, memops = 0;
  api->cuDeviceGetAttribute(&uva, HCQ_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, cd->cudev);
  api->cuDeviceGetAttribute(&map, HCQ_CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, cd->cudev);
  api->cuDeviceGetAttribute(&memops, HCQ_CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, cd->cudev);
  if (!uva || !map || !memops)
    return hcq_status_make(HCQ_UNAVAILABLE, "%s lacks what hcq needs: %s%s%s", dev->name,
                           uva ? "" : "unified addressing; ", map ? "" : "mapped host memory; ",
                           memops ? "" : "64-bit stream memory operations (cuStreamWaitValue64)");
  if ((rc = api->cuDevicePrimaryCtxRetain(&cd->ctx, cd->cudev))) return hcq__cuda_fail(dev, rc, "retaining its context");
  cd->ctx_retained = true;
  hcq_status_t st = hcq__cuda_push(dev);
  if (st) return st;
  for (int k = 0; k < 2 && !rc; k++) rc = api->cuStreamCreate(&cd->streams[k].s, HCQ_CU_STREAM_NON_BLOCKING);
  if (!rc) rc = api->cuStreamCreate(&cd->alloc_stream, HCQ_CU_STREAM_NON_BLOCKING);
  if (!rc) rc = api->cuMemHostAlloc(&cd->progress, 128, HCQ_CU_MEMHOSTALLOC_PORTABLE | HCQ_CU_MEMHOSTALLOC_DEVICEMAP);
  /* Only copy queues copy: the copy stream's stage, made now, while no stream can be waiting. */
  if (!rc)
    rc = api->cuMemHostAlloc(&cd->streams[HCQ_QUEUE_COPY].stage, STAGE_BYTES,
                             HCQ_CU_MEMHOSTALLOC_PORTABLE | HCQ_CU_MEMHOSTALLOC_DEVICEMAP);
  if (rc) st = hcq__cuda_fail(dev, rc, "creating its streams");
  /* The staging buffers the core will ask for, made now (see pin_block_t). */
  uint64_t chunk = staging_bytes();
  for (int i = 0; i < HCQ__STAGING_SLOTS && !st && chunk > PIN_MAX; i++) {
    void *host = NULL;
    if ((rc = api->cuMemHostAlloc(&host, chunk + HOST_SLACK, HCQ_CU_MEMHOSTALLOC_PORTABLE | HCQ_CU_MEMHOSTALLOC_DEVICEMAP)))
      st = hcq__cuda_fail(dev, rc, "cuMemHostAlloc of %" PRIu64 " bytes (staging)", chunk);
    else if (!keep_block(cd, host, chunk))
      api->cuMemFreeHost(host);
  }
  for (int k = 0; k < 2 && !st; k++) {
    cuda_stream_t *cs = &cd->streams[k];
    cs->done = (_Atomic uint64_t *)((char *)cd->progress + 64 * k);
    atomic_store(cs->done, 0);
    hcq_CUdeviceptr addr = 0;
    if ((rc = api->cuMemHostGetDevicePointer(&addr, (void *)cs->done, 0))) st = hcq__cuda_fail(dev, rc, "mapping pinned memory");
    cs->done_addr = addr;
    cs->ring = calloc(WORD_RING, sizeof(uint32_t));
    if (!st && !cs->ring) st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating %s", dev->name);
  }
  /* The timestamp kernel too, while no stream can be waiting on the host (loading it may synchronise
   * the context). Where it cannot be loaded, the first submission that needs it says why. */
  if (!st) hcq_status_destroy(load_timestamp_kernel(cd));
  hcq__cuda_pop(dev);
  return st;
}

static hcq_status_t cuda_device_create(int index, const hcq_device_options_t *opts, hcq_device_t *dev) {
  (void)opts;
  const char *why;
  const hcq__cuda_api_t *api = hcq__cuda_api(&why);
  if (!api) return hcq_status_make(HCQ_UNAVAILABLE, "device CUDA:%d is unavailable: %s", index, why);
  int count = 0;
  api->cuDeviceGetCount(&count);
  if (index >= count)
    return hcq_status_make(HCQ_NOT_FOUND, "unknown device CUDA:%d: this machine has %d CUDA device(s)", index, count);
  cuda_device_t *cd = calloc(1, sizeof(*cd));
  if (!cd) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating %s", dev->name);
  cd->dev = dev;
  cd->api = api;
  for (int k = 0; k < 2; k++) pthread_mutex_init(&cd->streams[k].records_lock, NULL);
  pthread_mutex_init(&cd->submit_lock, NULL);
  pthread_mutex_init(&cd->mem_lock, NULL);
  dev->vt = &cuda_vtable;
  dev->backend = cd;
  hcq_status_t st = setup(dev, cd, index);
  if (st) {
    cuda_destroy(dev);
    dev->vt = NULL;
    return st;
  }
  enable_peers(cd);
  hcq__signal_device_writers_add(1);
  cd->counted = true;
  dev->caps = HCQ_CAP_IN_ORDER_QUEUES | HCQ_CAP_COPY_QUEUE | HCQ_CAP_COMPILE_CUDA | HCQ_CAP_COPIES_HOST_MEMORY;
  dev->threads = 1;
  dev->max_work_items = 0; /* the grid and block limits are checked per launch */
  return NULL;
}

static void cuda_query(hcq_device_info_t *info) {
  const char *why;
  const hcq__cuda_api_t *api = hcq__cuda_api(&why);
  char nvrtc[400];
  hcq__nvrtc_describe(nvrtc, sizeof(nvrtc));
  info->kind = HCQ_DEVICE_CUDA;
  if (!api) {
    info->available = false;
    snprintf(info->description, sizeof(info->description), "%.150s; %.90s", why, nvrtc);
    return;
  }
  int count = 0, major = 0, minor = 0;
  api->cuDeviceGetCount(&count);
  char name[128] = "?";
  hcq_CUdevice d;
  if (count > 0 && api->cuDeviceGet(&d, 0) == 0) {
    api->cuDeviceGetName(name, sizeof(name), d);
    api->cuDeviceGetAttribute(&major, HCQ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
    api->cuDeviceGetAttribute(&minor, HCQ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
  }
  info->available = count > 0;
  info->count = count;
  /* NVRTC's part says whether it fits the driver before its path, so a long path is what is cut. */
  char *desc = info->description;
  int used = snprintf(desc, sizeof(info->description), "driver %d.%d, %d device(s), CUDA:0 is %.60s (sm_%d%d); ",
                      api->driver_version / 1000, (api->driver_version % 1000) / 10, count, name, major, minor);
  size_t at = used > 0 && (size_t)used < sizeof(info->description) ? (size_t)used : 0, n = strlen(nvrtc);
  if (n > sizeof(info->description) - 1 - at) n = sizeof(info->description) - 1 - at;
  memcpy(desc + at, nvrtc, n);
  desc[at + n] = 0;
}

/* ---- CUDA graph launches (src/graph/cuda_graph.c) ---- */

hcq_status_t hcq__cuda_graph_launch(hcq_device_t *const *devs, size_t ndevs, hcq_CUgraphExec exec, hcq_CUevent start,
                                    hcq_CUevent end) {
  hcq_device_t *d0 = devs[0];
  cuda_device_t *c0 = cdev(d0);
  const hcq__cuda_api_t *api = c0->api;
  cuda_stream_t *s0 = &c0->streams[HCQ_QUEUE_COMPUTE];
  hcq_status_t st = hcq__cuda_push(d0);
  if (st) return st;
  note_timeline(c0);
  pthread_mutex_lock(&c0->submit_lock);
  hcq_CUresult rc = 0;
  const char *what = "";
  /* Kept as command words too, so a hang report can say which earlier work the replay waits for. */
  uint32_t waits[HCQ__CUDA_GRAPH_MAX_DEVICES * HCQ__LEN_WAIT];
  size_t nwords = 0;
  for (size_t i = 0; i < ndevs && i < HCQ__CUDA_GRAPH_MAX_DEVICES && !rc; i++) {
    hcq_device_t *d = devs[i];
    uint32_t *wait = waits + nwords;
    memset(wait, 0, HCQ__LEN_WAIT * sizeof(uint32_t));
    wait[0] = HCQ__HDR(WAIT);
    hcq__wr64(wait + HCQ__WAIT_ADDR, d->timeline->mem.addr);
    wait[HCQ__WAIT_VALUE] = (uint32_t)(d->timeline_value - 1);
    nwords += HCQ__LEN_WAIT;
    rc = run_command(c0, s0, wait, &what);
  }
  if (!rc && start && (rc = api->cuEventRecord(start, s0->s))) what = "cuEventRecord";
  if (!rc && (rc = api->cuGraphLaunch(exec, s0->s))) what = "cuGraphLaunch";
  if (!rc && (rc = api->cuEventRecord(end, s0->s))) what = "cuEventRecord";
  uint32_t signal[HCQ__LEN_SIGNAL] = {HCQ__HDR(SIGNAL)};
  hcq__wr64(signal + HCQ__SIGNAL_ADDR, d0->timeline->mem.addr);
  signal[HCQ__SIGNAL_VALUE] = (uint32_t)d0->timeline_value;
  if (!rc) rc = run_command(c0, s0, signal, &what);
  if (rc) st = hcq__cuda_fail(d0, rc, "graph launch: %s", what);
  hcq_status_t fst = finish_submission(c0, s0, waits, nwords, false);
  pthread_mutex_unlock(&c0->submit_lock);
  hcq__cuda_pop(d0);
  if (st || fst) {
    hcq_status_destroy(fst);
    return st ? st : fst;
  }
  /* The other devices' compute streams follow the graph (an event the driver sees), then signal. */
  for (size_t i = 1; i < ndevs && !st; i++) {
    hcq_device_t *d = devs[i];
    cuda_device_t *cd = cdev(d);
    cuda_stream_t *cs = &cd->streams[HCQ_QUEUE_COMPUTE];
    if ((st = hcq__cuda_push(d))) break;
    note_timeline(cd);
    pthread_mutex_lock(&cd->submit_lock);
    rc = api->cuStreamWaitEvent(cs->s, end, 0);
    what = "cuStreamWaitEvent";
    signal[0] = HCQ__HDR(SIGNAL);
    hcq__wr64(signal + HCQ__SIGNAL_ADDR, d->timeline->mem.addr);
    signal[HCQ__SIGNAL_VALUE] = (uint32_t)d->timeline_value;
    if (!rc) rc = run_command(cd, cs, signal, &what);
    if (rc) st = hcq__cuda_fail(d, rc, "graph launch: %s", what);
    fst = finish_submission(cd, cs, NULL, 0, false);
    pthread_mutex_unlock(&cd->submit_lock);
    hcq__cuda_pop(d);
    if (!st) st = fst;
    else hcq_status_destroy(fst);
  }
  return st;
}

const hcq__backend_t hcq__cuda_backend = {
    .kind = HCQ_DEVICE_CUDA,
    .source_key = "cuda",
    .query = cuda_query,
    .open = cuda_device_create,
    .binary_formats = 1u << HCQ_BINARY_PTX | 1u << HCQ_BINARY_CUBIN | 1u << HCQ_BINARY_FATBIN,
    .binary_arch = true,
    .kernel_caps = HCQ_CAP_COMPILE_CUDA,
    .binary_compile = hcq__cuda_binary_compile,
};
