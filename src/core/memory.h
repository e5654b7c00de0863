/* Device memory as backends hand it out, and the classes the core accounts it in (memory.c reads
 * the counters: hcq_device_memory_usage). */
#ifndef HCQ_CORE_MEMORY_H
#define HCQ_CORE_MEMORY_H

#include <stdint.h>

typedef struct hcq__mem {
  uint64_t addr; /* device address */
  void *host;    /* host mapping (NULL when not host visible) */
  uint64_t size;
  void *handle; /* backend's own */
} hcq__mem_t;

/* mem_alloc flags. */
enum {
  HCQ__MEM_HOST_VISIBLE = 1u << 0, /* host must read and write it through mem.host (signals,
                                      kernargs, staging, bound command words) */
  HCQ__MEM_MAPPED = 1u << 1, /* kernels use it and the host maps it (hcq_buffer_create_mapped):
                                backends whose device memory is not host-visible allocate such
                                memory if they can; the core checks mem.host */
};

/* Memory accounting: live bytes per device in these classes (see hcq_device_memory_usage). */
typedef enum {
  HCQ__MEMC_BUFFERS,  /* base buffers (hcq_buffer_create) */
  HCQ__MEMC_KERNARGS, /* kernel-argument blocks of graphs */
  HCQ__MEMC_COMMANDS, /* bound command words (graph queues, bound queues) */
  HCQ__MEMC_PROFILE,  /* timestamps of profiled graphs */
  HCQ__MEMC_EAGER,    /* the device's eager kernel-argument ring and staging buffers */
  HCQ__MEMC_DEFERRED, /* released memory waiting for the engines (deferred frees) */
  HCQ__MEMC_COUNT
} hcq__mem_class_t;

/* Hands wrapped memory back to its owner once no work uses it (hcq_buffer_wrap). */
typedef void (*hcq__wrap_release_fn)(void *ctx, void *host);

#endif
