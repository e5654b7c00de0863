/* The CUDA device opened and closed: its context, streams and peer access, the backend vtable and
 * the backend row. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/device.h"
#include "core/signal.h"
#include "core/status.h"
#include "core/vec.h"
#include "cuda/cuda_device.h"
#include "cuda/nvrtc.h"

/* Open CUDA devices, for peer access between them. */
static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static cuda_device_t *g_reg_head;

const hcq__cuda_api_t *hcq__cuda_device_api(const hcq_device_t *dev) {
  return hcq__cuda_cdev(dev)->api;
}
hcq_CUcontext hcq__cuda_device_context(const hcq_device_t *dev) { return hcq__cuda_cdev(dev)->ctx; }
void hcq__cuda_device_arch(const hcq_device_t *dev, int *major, int *minor) {
  *major = hcq__cuda_cdev(dev)->cc_major;
  *minor = hcq__cuda_cdev(dev)->cc_minor;
}

/* The errors after which the context is unusable: cuda.h says of most that they leave "the process
 * in an inconsistent state and any further CUDA work will return the same error" (ILLEGAL_ADDRESS,
 * LAUNCH_TIMEOUT, HARDWARE_STACK_ERROR, ILLEGAL_INSTRUCTION, MISALIGNED_ADDRESS,
 * INVALID_ADDRESS_SPACE, INVALID_PC, LAUNCH_FAILED, CONTAINED, TENSOR_MEMORY_LEAK,
 * EXTERNAL_DEVICE); ASSERT's context "cannot be used anymore"; ECC and NVLink uncorrectable errors
 * are hardware faults. */
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
    return hcq_status_make(HCQ_DEVICE_LOST, "%s: %s failed: %s; the device is lost", dev->name,
                           what, text);
  }
  return hcq_status_make(rc == HCQ_CUDA_ERROR_OUT_OF_MEMORY ? HCQ_OUT_OF_MEMORY : HCQ_DEVICE_ERROR,
                         "%s: %s failed: %s", dev->name, what, text);
}

hcq_status_t hcq__cuda_push(hcq_device_t *dev) {
  cuda_device_t *cd = hcq__cuda_cdev(dev);
  hcq_CUresult rc = cd->api->cuCtxPushCurrent(cd->ctx);
  return rc ? hcq__cuda_fail(dev, rc, "making its context current") : NULL;
}

void hcq__cuda_pop(hcq_device_t *dev) {
  hcq_CUcontext prev;
  hcq__cuda_cdev(dev)->api->cuCtxPopCurrent(&prev);
}

/* ---- lifecycle ---- */

static void cuda_lost(hcq_device_t *dev) {
  (void)dev; /* host waits end through the core's checks */
}

static bool cuda_stop(hcq_device_t *dev) {
  cuda_device_t *cd = hcq__cuda_cdev(dev);
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
  cuda_device_t *cd = hcq__cuda_cdev(dev);
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
    hcq__cuda_flush_frees(cd, true); /* the streams are gone */
    api->cuCtxPushCurrent(cd->ctx);
    hcq__cuda_memory_release(cd);
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
    .mem_alloc = hcq__cuda_mem_alloc,
    .mem_free = hcq__cuda_mem_free,
    .reserve = hcq__cuda_reserve,
    .submit = hcq__cuda_submit,
    .submitted = hcq__cuda_submitted,
    .completed = hcq__cuda_completed,
    .wait_idle = hcq__cuda_wait_idle,
    .snapshot = hcq__cuda_snapshot,
    .lost = cuda_lost,
    .poll = hcq__cuda_poll,
    .program_compile = hcq__cuda_compile,
    .program_unload = hcq__cuda_unload,
    .memory_info = hcq__cuda_memory_info,
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

/* The driver's block and grid limits (read by setup) and its static shared memory per block. */
static void set_limits(hcq_device_t *dev, const cuda_device_t *cd) {
  hcq_device_limits_t *l = &dev->limits;
  l->max_group_threads = (uint32_t)cd->max_threads;
  for (int i = 0; i < 3; i++) {
    l->max_group_size[i] = (uint32_t)cd->max_block[i];
    l->max_grid[i] = (uint32_t)cd->max_grid[i];
  }
  /* Kernel arguments travel as the kernel's parameters: 8 bytes per buffer, 4 per value, within
   * the 4 KiB every architecture takes, so hcq's own argument limits hold. */
  l->view_offset_alignment = 16; /* float4, int4: CUDA's widest vector loads */
  int shared = 0;
  if (cd->api->cuDeviceGetAttribute(&shared, HCQ_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
                                    cd->cudev) ||
      shared <= 0)
    shared = 48 << 10; /* the static shared memory every architecture gives a block */
  l->shared_memory = (uint32_t)shared;
}

/* The streams, the pinned progress words and the copy stream's stage, the staging blocks and the
 * word rings, with the device's context current. */
static hcq_status_t create_streams(hcq_device_t *dev, cuda_device_t *cd) {
  const hcq__cuda_api_t *api = cd->api;
  hcq_CUresult rc = 0;
  for (int k = 0; k < 2 && !rc; k++)
    rc = api->cuStreamCreate(&cd->streams[k].s, HCQ_CU_STREAM_NON_BLOCKING);
  if (!rc) rc = api->cuStreamCreate(&cd->alloc_stream, HCQ_CU_STREAM_NON_BLOCKING);
  if (!rc)
    rc = api->cuMemHostAlloc(&cd->progress, 128,
                             HCQ_CU_MEMHOSTALLOC_PORTABLE | HCQ_CU_MEMHOSTALLOC_DEVICEMAP);
  /* Only copy queues copy: the copy stream's stage, made now, while no stream can be waiting. */
  if (!rc)
    rc = api->cuMemHostAlloc(&cd->streams[HCQ_QUEUE_COPY].stage, HCQ__CUDA_STAGE_BYTES,
                             HCQ_CU_MEMHOSTALLOC_PORTABLE | HCQ_CU_MEMHOSTALLOC_DEVICEMAP);
  if (rc) return hcq__cuda_fail(dev, rc, "creating its streams");
  HCQ__TRY(hcq__cuda_make_staging_blocks(cd));
  for (int k = 0; k < 2; k++) {
    cuda_stream_t *cs = &cd->streams[k];
    cs->done = (_Atomic uint64_t *)((char *)cd->progress + 64 * k);
    atomic_store(cs->done, 0);
    hcq_CUdeviceptr addr = 0;
    if ((rc = api->cuMemHostGetDevicePointer(&addr, (void *)cs->done, 0)))
      return hcq__cuda_fail(dev, rc, "mapping pinned memory");
    cs->done_addr = addr;
    if (!(cs->ring = calloc(HCQ__CUDA_WORD_RING, sizeof(uint32_t))))
      return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating %s", dev->name);
  }
  /* The timestamp kernel too, while no stream can be waiting on the host (loading it may
   * synchronise the context). Where it cannot be loaded, the first submission that needs it says
   * why. */
  hcq_status_destroy(hcq__cuda_load_timestamp_kernel(cd));
  return NULL;
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
  api->cuDeviceGetAttribute(&memops, HCQ_CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                            cd->cudev);
  if (!uva || !map || !memops)
    return hcq_status_make(HCQ_UNAVAILABLE, "%s lacks what hcq needs: %s%s%s", dev->name,
                           uva ? "" : "unified addressing; ", map ? "" : "mapped host memory; ",
                           memops ? "" : "64-bit stream memory operations (cuStreamWaitValue64)");
  if ((rc = api->cuDevicePrimaryCtxRetain(&cd->ctx, cd->cudev)))
    return hcq__cuda_fail(dev, rc, "retaining its context");
  cd->ctx_retained = true;
  HCQ__TRY(hcq__cuda_push(dev));
  hcq_status_t st = create_streams(dev, cd);
  hcq__cuda_pop(dev);
  return st;
}

static hcq_status_t cuda_device_create(int index, const hcq_device_options_t *opts,
                                       hcq_device_t *dev) {
  (void)opts;
  const char *why;
  const hcq__cuda_api_t *api = hcq__cuda_api(&why);
  if (!api)
    return hcq_status_make(HCQ_UNAVAILABLE, "device CUDA:%d is unavailable: %s", index, why);
  int count = 0;
  api->cuDeviceGetCount(&count);
  if (index >= count)
    return hcq_status_make(
        HCQ_NOT_FOUND, "unknown device CUDA:%d: this machine has %d CUDA device(s)", index, count);
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
  dev->caps = HCQ_CAP_IN_ORDER_QUEUES | HCQ_CAP_COPY_QUEUE | HCQ_CAP_COMPILE_CUDA |
              HCQ_CAP_COPIES_HOST_MEMORY;
  dev->threads = 1;
  set_limits(dev, cd);
  return NULL;
}

static void cuda_query(hcq_device_info_t *info) {
  const char *why;
  const hcq__cuda_api_t *api = hcq__cuda_api(&why);
  char nvrtc[400];
  hcq__cuda_nvrtc_describe(nvrtc, sizeof(nvrtc));
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
  int used = snprintf(
      desc, sizeof(info->description), "driver %d.%d, %d device(s), CUDA:0 is %.60s (sm_%d%d); ",
      api->driver_version / 1000, (api->driver_version % 1000) / 10, count, name, major, minor);
  size_t at = used > 0 && (size_t)used < sizeof(info->description) ? (size_t)used : 0,
         n = strlen(nvrtc);
  if (n > sizeof(info->description) - 1 - at) n = sizeof(info->description) - 1 - at;
  memcpy(desc + at, nvrtc, n);
  desc[at + n] = 0;
}

const hcq__backend_t hcq__cuda_backend = {
    /* docs/design.md, "The CUDA graph" */
    .kind = HCQ_DEVICE_CUDA,
    .source_key = "cuda",
    .query = cuda_query,
    .open = cuda_device_create,
    .binary_formats = 1u << HCQ_BINARY_PTX | 1u << HCQ_BINARY_CUBIN | 1u << HCQ_BINARY_FATBIN,
    .binary_arch = true,
    .kernel_caps = HCQ_CAP_COMPILE_CUDA,
    .binary_compile = hcq__cuda_binary_compile,
    .graph_create = hcq__cuda_graph_create,
};
