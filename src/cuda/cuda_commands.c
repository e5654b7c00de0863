/* The CUDA device's command words as driver calls (the table in cuda_device.h), checked first for
 * what the driver would refuse. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/command.h"
#include "core/host_wait.h"
#include "core/signal.h"
#include "cuda/cuda_device.h"
#include "cuda/nvrtc.h"

/* Whether the driver knows addr (device memory or pinned host memory): stream memory operations
 * work on such addresses only. The few addresses seen last are remembered (the timelines). */
static bool reachable(cuda_device_t *cd, uint64_t addr) {
  for (unsigned i = 0; i < 8; i++)
    if (cd->reachable[i] == addr) return true;
  hcq_CUcontext ctx = NULL;
  if (cd->api->cuPointerGetAttribute(&ctx, HCQ_CU_POINTER_ATTRIBUTE_CONTEXT, addr) != 0)
    return false;
  cd->reachable[cd->reachable_next++ % 8] = addr;
  return true;
}

typedef struct cuda_host_signal {
  hcq__signal_words_t *words;
  uint64_t value;
} cuda_host_signal_t;

static void set_host_signal(void *arg) {
  cuda_host_signal_t *h = arg;
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

/* The same kernel as CUDA C, for NVRTC: a cubin for the device's own architecture needs no PTX JIT.
 */
static const char k_timestamp_cu[] =
    "extern \"C\" __global__ void hcq_timestamp(unsigned long long *t) {\n"
    "  unsigned long long v;\n"
    "  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(v));\n"
    "  *(volatile unsigned long long *)t = v;\n"
    "}\n";

/* Loads the timestamp kernel once, before the first submission that needs it: a cubin NVRTC made
 * for this GPU's architecture where NVRTC is usable, else the PTX above, which the driver's PTX JIT
 * compiles (a driver installed without it, libnvidia-ptxjitcompiler, cannot load PTX at all). */
hcq_status_t hcq__cuda_load_timestamp_kernel(cuda_device_t *cd) {
  if (cd->ts_fn) return NULL;
  const hcq__cuda_api_t *api = cd->api;
  hcq__cuda_image_t img;
  hcq_status_t nst = hcq__cuda_nvrtc_compile("hcq_timestamp", k_timestamp_cu,
                                             cd->cc_major * 10 + cd->cc_minor, &img);
  hcq_CUresult rc = HCQ_CUDA_ERROR_NOT_FOUND;
  if (!nst && img.cubin) rc = api->cuModuleLoadDataEx(&cd->ts_module, img.cubin, 0, NULL, NULL);
  if (!nst) hcq__cuda_image_free(&img);
  char why[300];
  snprintf(why, sizeof(why), "%.290s",
           nst  ? hcq_status_message(nst)
           : rc ? "it made no cubin that loads"
                : "");
  hcq_status_destroy(nst);
  if (rc) rc = api->cuModuleLoadDataEx(&cd->ts_module, k_timestamp_ptx, 0, NULL, NULL);
  if (rc == HCQ_CUDA_ERROR_JIT_COMPILER_NOT_FOUND ||
      rc == HCQ_CUDA_ERROR_JIT_COMPILATION_DISABLED ||
      rc == HCQ_CUDA_ERROR_UNSUPPORTED_PTX_VERSION || rc == HCQ_CUDA_ERROR_INVALID_PTX) {
    char text[192];
    hcq__cuda_error_text(rc, text, sizeof(text));
    return hcq_status_make(
        HCQ_UNAVAILABLE,
        "%s cannot run timestamps: the driver does not load the timestamp kernel's "
        "PTX (%s: its PTX JIT compiler is missing or disabled), and NVRTC gave no cubin for "
        "sm_%d%d "
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
  if (!reachable(cd, addr))
    return api->cuLaunchHostFunc(s, set_host_timestamp, (void *)(uintptr_t)addr);
  if (!cd->ts_fn) return HCQ_CUDA_ERROR_NOT_FOUND; /* check_words loads it first */
  uint64_t target = addr + offsetof(hcq__signal_words_t, timestamp);
  size_t size = sizeof(target);
  void *extra[] = {HCQ_CU_LAUNCH_PARAM_BUFFER_POINTER, &target, HCQ_CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &size, HCQ_CU_LAUNCH_PARAM_END};
  return api->cuLaunchKernel(cd->ts_fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, extra);
}

/* cuLaunchKernel copies the argument block on the host, when it is called: the block must be memory
 * the host reads (pinned or ordinary host memory). A block in GPU memory would be a host read of a
 * device address, which crashes the process, so it is refused here by the driver's own account of
 * the address (the Vulkan engine likewise checks the block is its own memory). */
static hcq_status_t check_kernargs(cuda_device_t *cd, const char *kernel, uint64_t addr,
                                   uint32_t bytes) {
  if (!bytes) return NULL; /* nothing is read */
  if (!addr)
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "launch of %s on %s: its kernel arguments are at address 0", kernel,
                           cd->dev->name);
  /* One query per launch, of the block's start: a block cannot run from host memory into a device
   * allocation without first running past the end of its own one. */
  unsigned type = 0;
  if (cd->api->cuPointerGetAttribute(&type, HCQ_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, addr) == 0 &&
      type == HCQ_CU_MEMORYTYPE_DEVICE)
    return hcq_status_make(
        HCQ_INVALID_ARGUMENT,
        "launch of %s on %s: its kernel arguments at 0x%" PRIx64 " (%" PRIu32
        " bytes) are in GPU memory, which cuLaunchKernel cannot read (it reads them on the host); "
        "write them into host-mapped memory (hcq_queue_kernargs into a host-visible buffer)",
        kernel, cd->dev->name, addr, bytes);
  return NULL;
}

hcq_status_t hcq__cuda_check_words(hcq_device_t *dev, const uint32_t *w, size_t n) {
  cuda_device_t *cd = hcq__cuda_cdev(dev);
  for (const uint32_t *end = w + n; w < end; w += HCQ__HDR_LEN(w[0])) {
    uint32_t op = HCQ__HDR_OP(w[0]);
    if (HCQ__HDR_LEN(w[0]) == 0)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: malformed command words", dev->name);
    if (op == HCQ__OP_WAIT && !reachable(cd, hcq__rd64(w + HCQ__WAIT_ADDR))) {
      char name[80] = "";
      uint64_t value;
      if (!hcq__signal_lookup(hcq__rd64(w + HCQ__WAIT_ADDR), name, sizeof(name), &value, NULL))
        snprintf(name, sizeof(name), "at 0x%" PRIx64, hcq__rd64(w + HCQ__WAIT_ADDR));
      return hcq_status_make(HCQ_UNIMPLEMENTED,
                             "%s cannot wait on signal \"%s\": it is not in memory the GPU maps (a "
                             "CPU device's signal?)",
                             dev->name, name);
    }
    if (op == HCQ__OP_TIMESTAMP && reachable(cd, hcq__rd64(w + HCQ__TIMESTAMP_ADDR))) {
      hcq_status_t tst = hcq__cuda_load_timestamp_kernel(cd);
      if (tst) return tst;
    }
    if (op != HCQ__OP_EXEC) continue;
    const hcq__cuda_kernel_t *k =
        (const hcq__cuda_kernel_t *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_FN);
    const hcq_program_t *p = (const hcq_program_t *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_PROGRAM);
    const char *name = p ? p->name : "?";
    if (!k)
      return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: exec of %s without a CUDA kernel",
                             dev->name, name);
    hcq_status_t ast = check_kernargs(cd, name, hcq__rd64(w + HCQ__EXEC_ARGS), k->param_bytes);
    if (ast) return ast;
    if (w[HCQ__EXEC_NBUFS] != k->nptrs)
      return hcq_status_make(HCQ_INVALID_ARGUMENT,
                             "launch of %s on %s: the kernel takes %" PRIu32
                             " buffers, the launch "
                             "passes %" PRIu32,
                             name, dev->name, k->nptrs, w[HCQ__EXEC_NBUFS]);
    const uint32_t *g = w + HCQ__EXEC_GLOBAL, *l = w + HCQ__EXEC_LOCAL;
    if (!g[0] || !g[1] || !g[2] || !l[0] || !l[1] || !l[2])
      continue; /* an empty launch runs nothing */
    uint64_t threads = (uint64_t)l[0] * l[1] * l[2];
    for (int i = 0; i < 3; i++)
      if (g[i] > (uint32_t)cd->max_grid[i] || l[i] > (uint32_t)cd->max_block[i] ||
          threads > (uint64_t)cd->max_threads)
        return hcq_status_make(HCQ_OUT_OF_RANGE,
                               "launch of %s on %s: grid %" PRIu32 "x%" PRIu32 "x%" PRIu32
                               " of blocks %" PRIu32 "x%" PRIu32 "x%" PRIu32
                               " is past the GPU's limits (grid %dx%dx%d, block %dx%dx%d, "
                               "%d threads)",
                               name, dev->name, g[0], g[1], g[2], l[0], l[1], l[2], cd->max_grid[0],
                               cd->max_grid[1], cd->max_grid[2], cd->max_block[0], cd->max_block[1],
                               cd->max_block[2], cd->max_threads);
  }
  return NULL;
}

/* A host-side part of a copy, run by the stream (a host function) when the copy's turn comes. */
typedef struct cuda_host_copy {
  void *dst;
  const void *src;
  size_t n;
} cuda_host_copy_t;

static void run_host_copy(void *arg) {
  cuda_host_copy_t *h = arg;
  memmove(h->dst, h->src, h->n);
  free(h);
}

static hcq_CUresult enqueue_host_copy(const hcq__cuda_api_t *api, hcq_CUstream s, void *dst,
                                      const void *src, size_t n) {
  cuda_host_copy_t *h = malloc(sizeof(*h));
  if (!h) return HCQ_CUDA_ERROR_OUT_OF_MEMORY;
  *h = (cuda_host_copy_t){dst, src, n};
  hcq_CUresult rc = api->cuLaunchHostFunc(s, run_host_copy, h);
  if (rc) free(h);
  return rc;
}

/* A COPY with an end in ordinary (pageable) host memory, a CPU device's buffer: cuMemcpyAsync
 * would be synchronous there (the driver stages it itself), blocking this thread until the stream
 * reached the copy, which may be behind a wait that only this thread will satisfy. Instead the
 * stream does the host side itself, in order, through its pinned stage: a host function fills the
 * stage, the driver copies from it (or the other way round). Nothing here waits. */
static hcq_CUresult staged_copy(cuda_device_t *cd, cuda_stream_t *cs, uint64_t dst, uint64_t src,
                                uint64_t size, bool dst_pinned, bool src_pinned,
                                const char **what) {
  const hcq__cuda_api_t *api = cd->api;
  char *d = (char *)(uintptr_t)dst;
  const char *sp = (const char *)(uintptr_t)src;
  hcq_CUresult rc = 0;
  if (!dst_pinned && !src_pinned) {
    *what = "cuLaunchHostFunc (host to host copy)";
    return enqueue_host_copy(api, cs->s, d, sp, (size_t)size);
  }
  for (uint64_t off = 0; off < size && !rc; off += HCQ__CUDA_STAGE_BYTES) {
    size_t n = (size_t)(size - off < HCQ__CUDA_STAGE_BYTES ? size - off : HCQ__CUDA_STAGE_BYTES);
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

hcq_CUresult hcq__cuda_run_command(cuda_device_t *cd, cuda_stream_t *cs, const uint32_t *w,
                                   const char **what) {
  const hcq__cuda_api_t *api = cd->api;
  hcq_device_t *dev = cd->dev;
  switch (HCQ__HDR_OP(w[0])) {
    case HCQ__OP_WAIT: {
      uint64_t addr = hcq__rd64(w + HCQ__WAIT_ADDR), value = w[HCQ__WAIT_VALUE];
      /* The stream's own last write already satisfies it (in-order stream): the device timeline
       * only, whose value nobody lowers but a wrap (which clears what we remember). */
      if (addr == cs->last_signal_addr && value <= cs->last_signal_value && dev->timeline &&
          addr == dev->timeline->mem.addr)
        return 0;
      *what = "cuStreamWaitValue64";
      return api->cuStreamWaitValue64(cs->s, addr, value, HCQ_CU_STREAM_WAIT_VALUE_GEQ);
    }
    case HCQ__OP_SIGNAL: {
      uint64_t addr = hcq__rd64(w + HCQ__SIGNAL_ADDR), value = w[HCQ__SIGNAL_VALUE];
      if (!reachable(cd, addr)) {
        cuda_host_signal_t *h = malloc(sizeof(*h));
        *what = "cuLaunchHostFunc";
        if (!h) return HCQ_CUDA_ERROR_OUT_OF_MEMORY;
        *h = (cuda_host_signal_t){(hcq__signal_words_t *)(uintptr_t)addr, value};
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
      const hcq__cuda_kernel_t *k =
          (const hcq__cuda_kernel_t *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_FN);
      const uint32_t *g = w + HCQ__EXEC_GLOBAL, *l = w + HCQ__EXEC_LOCAL;
      if (!g[0] || !g[1] || !g[2] || !l[0] || !l[1] || !l[2]) return 0;
      size_t size = k->param_bytes;
      void *args = (void *)(uintptr_t)hcq__rd64(w + HCQ__EXEC_ARGS);
      void *extra[] = {HCQ_CU_LAUNCH_PARAM_BUFFER_POINTER, args, HCQ_CU_LAUNCH_PARAM_BUFFER_SIZE,
                       &size, HCQ_CU_LAUNCH_PARAM_END};
      *what = "cuLaunchKernel";
      return api->cuLaunchKernel(k->fn, g[0], g[1], g[2], l[0], l[1], l[2], 0, cs->s, NULL,
                                 size ? extra : NULL);
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
    default:
      return 0; /* NOP, BARRIER (a stream's commands are ordered and memory operations fence) */
  }
}
