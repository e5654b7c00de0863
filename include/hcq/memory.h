/* hcq memory accounting: what a device holds, by what holds it.
 *
 * Every device counts the bytes of device memory the core allocated for it, in classes: buffers,
 * kernel-argument blocks, command words and timestamp slots of live graphs, its own eager rings,
 * and memory released but not yet freed (a deferred free waits until the device's engines have
 * passed the work that may still use it). Counting happens where the core allocates and frees,
 * with one relaxed atomic add per allocation: it is always on and costs nothing on the replay path.
 *
 * Classes of live objects drop the moment the object is released (hcq_buffer_release,
 * hcq_graph_destroy, hcq_queue_destroy): after everything a program made is released they are back
 * at their starting values. The bytes then move to `deferred` until the engines pass them;
 * hcq_device_memory_usage() frees what has become free before it reads the counters.
 *
 * Sizes are the bytes asked for (backends may round allocations up a little). Memory a backend
 * allocates for itself (engine rings, threads) is not counted.
 */
#ifndef HCQ_MEMORY_H
#define HCQ_MEMORY_H

#include <stdint.h>

#include "hcq/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* exported from libhcq.so (see hcq.h) */

typedef struct hcq_memory_usage {
  uint64_t buffers;        /* base buffers of hcq_buffer_create (views share their base's bytes) */
  uint64_t graph_kernargs; /* kernel-argument blocks of live graphs */
  uint64_t
      graph_commands; /* bound command words: graph queues (and queues bound with hcq_queue_bind) */
  uint64_t graph_profile; /* timestamp slots of live graphs built with profiling */
  uint64_t eager;    /* the device's eager kernel-argument ring and host-copy staging buffers */
  uint64_t deferred; /* released, waiting for the engines to pass their last use */
  uint64_t total;    /* the sum of the above */
  /* Compiled kernels in the kernel cache on disk (HCQ_CACHE_DIR): shared by every device that
   * compiles C (all CPU devices); 0 for devices that keep no disk cache. */
  uint64_t kernel_cache_bytes;
  uint64_t kernel_cache_files;
} hcq_memory_usage_t;

/* Fills out_usage for device (first freeing deferred memory whose work is done; never waits).
 * INVALID_ARGUMENT for NULL arguments. Any thread. */
HCQ_MUST_USE hcq_status_t hcq_device_memory_usage(hcq_device_t *device,
                                                  hcq_memory_usage_t *out_usage);

/* What the device has, as its driver (or, for devices that run on the host, the machine) reports
 * it: not what hcq counts (hcq_device_memory_usage) but what the system sees, other processes
 * included. */
typedef struct hcq_device_memory {
  uint64_t total;     /* bytes of the memory buffers are made in: the device-local heap (Vulkan),
                         the GPU's memory (CUDA), the recommended working set (Metal), the host's
                         RAM or the cgroup's limit when lower (CPU); 0 when unknown */
  uint64_t available; /* bytes this process could still allocate there now, the driver's estimate
                         (Vulkan's heap budget minus its usage, cuMemGetInfo's free, the working set
                         minus what the device has allocated, MemAvailable or what the cgroup still
                         allows); 0 when unknown */
  const char *source; /* where the numbers come from, e.g. "VK_EXT_memory_budget", "/proc/meminfo";
                         static text */
} hcq_device_memory_t;

/* Fills out for device, first freeing deferred memory whose work is done (never waits).
 * UNAVAILABLE with the reason when its backend cannot tell (a Vulkan driver
 * without VK_EXT_memory_budget still gives the heap's size as total, available 0). INVALID_ARGUMENT
 * for NULL arguments; a closed device as for every call. Any thread; asks the driver each time. */
HCQ_MUST_USE hcq_status_t hcq_device_memory(hcq_device_t *device, hcq_device_memory_t *out);

/* The kernel cache on disk alone: files and bytes of compiled kernels under HCQ_CACHE_DIR (0 and 0
 * when the directory does not exist yet). out_dir (may be NULL) receives the directory. */
void hcq_kernel_cache_usage(uint64_t *out_bytes, uint64_t *out_files, const char **out_dir);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
