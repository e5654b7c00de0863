/* Memory accounting: the counters live in each device (core/device.h, hcq__mem_count at the core's
 * allocation and free points); this file reads them and sizes the kernel cache on disk. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/device.h"
#include "core/memory.h"
#include "core/options.h"
#include "hcq/memory.h"

static uint64_t read_class(hcq_device_t *dev, hcq__mem_class_t c) {
  int64_t v = atomic_load_explicit(&dev->mem_bytes[c], memory_order_relaxed);
  return v > 0 ? (uint64_t)v : 0;
}

void hcq_kernel_cache_usage(uint64_t *out_bytes, uint64_t *out_files, const char **out_dir) {
  const char *dir = hcq__options()->cache_dir;
  uint64_t bytes = 0, files = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    /* Compiled kernels only: not the temporary files of a compile in progress. */
    if (len < 4 || strcmp(e->d_name + len - 3, ".so") != 0 || !strncmp(e->d_name, "tmp-", 4))
      continue;
    char path[2048];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    bytes += (uint64_t)st.st_size;
    files++;
  }
  if (d) closedir(d);
  if (out_bytes) *out_bytes = bytes;
  if (out_files) *out_files = files;
  if (out_dir) *out_dir = dir;
}

/* The checks both memory calls make, then frees the deferred memory whose work is done (never
 * waits): released bytes count as free, in hcq's classes and for the driver alike. */
static hcq_status_t check_and_reclaim(hcq_device_t *dev, const void *out, const char *what) {
  if (!dev || !out)
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: device or output is NULL", what);
  hcq_status_t st = hcq__device_handle_check(dev, what);
  if (st) return st;
  pthread_mutex_lock(&dev->lock);
  hcq__device_reclaim(dev);
  pthread_mutex_unlock(&dev->lock);
  return NULL;
}

hcq_status_t hcq_device_memory_usage(hcq_device_t *dev, hcq_memory_usage_t *out) {
  hcq_status_t st = check_and_reclaim(dev, out, "hcq_device_memory_usage");
  if (st) return st;
  memset(out, 0, sizeof(*out));
  out->buffers = read_class(dev, HCQ__MEMC_BUFFERS);
  out->graph_kernargs = read_class(dev, HCQ__MEMC_KERNARGS);
  out->graph_commands = read_class(dev, HCQ__MEMC_COMMANDS);
  out->graph_profile = read_class(dev, HCQ__MEMC_PROFILE);
  out->eager = read_class(dev, HCQ__MEMC_EAGER);
  out->deferred = read_class(dev, HCQ__MEMC_DEFERRED);
  out->total = out->buffers + out->graph_kernargs + out->graph_commands + out->graph_profile +
               out->eager + out->deferred;
  if (dev->caps & HCQ_CAP_COMPILE_C)
    hcq_kernel_cache_usage(&out->kernel_cache_bytes, &out->kernel_cache_files, NULL);
  return NULL;
}

hcq_status_t hcq_device_memory(hcq_device_t *dev, hcq_device_memory_t *out) {
  hcq_status_t st = check_and_reclaim(dev, out, "hcq_device_memory");
  if (st) return st;
  memset(out, 0, sizeof(*out));
  if (!dev->vt->memory_info)
    return hcq_status_make(
        HCQ_UNAVAILABLE,
        "hcq_device_memory: %s cannot tell its memory (its backend does not ask a driver)",
        dev->name);
  return dev->vt->memory_info(dev, out);
}
