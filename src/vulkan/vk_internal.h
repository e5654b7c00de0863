/* The Vulkan backend's private structures: the loader's entry points (one table for the instance,
 * one per logical device), memory blocks with their device addresses, queue engines, programs. */
#ifndef HCQ_VK_INTERNAL_H
#define HCQ_VK_INTERNAL_H

#define VK_NO_PROTOTYPES
#include <pthread.h>
#include <vulkan/vulkan.h>

#include "core/memory.h"
#include "core/program.h"
#include "hcq/queue.h"

/* Entry points found with vkGetInstanceProcAddr on the instance. X(name) */
// clang-format off
#define HCQ_VK_INSTANCE_FNS(X)                \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceMemoryProperties2)     \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)
// clang-format on

/* Optional instance-level entry points (NULL when the driver lacks them). */
#define HCQ_VK_INSTANCE_OPTIONAL_FNS(X) X(vkGetPhysicalDeviceCalibrateableTimeDomainsEXT)

/* Entry points found with vkGetDeviceProcAddr on each logical device. */
// clang-format off
#define HCQ_VK_DEVICE_FNS(X)       \
  X(vkDestroyDevice)               \
  X(vkGetDeviceQueue)              \
  X(vkDeviceWaitIdle)              \
  X(vkQueueSubmit)                 \
  X(vkAllocateMemory)              \
  X(vkFreeMemory)                  \
  X(vkMapMemory)                   \
  X(vkCreateBuffer)                \
  X(vkDestroyBuffer)               \
  X(vkGetBufferMemoryRequirements) \
  X(vkBindBufferMemory)            \
  X(vkGetBufferDeviceAddress)      \
  X(vkCreateSemaphore)             \
  X(vkDestroySemaphore)            \
  X(vkWaitSemaphores)              \
  X(vkGetSemaphoreCounterValue)    \
  X(vkCreateCommandPool)           \
  X(vkDestroyCommandPool)          \
  X(vkAllocateCommandBuffers)      \
  X(vkFreeCommandBuffers)          \
  X(vkBeginCommandBuffer)          \
  X(vkEndCommandBuffer)            \
  X(vkCmdPipelineBarrier)          \
  X(vkCmdBindPipeline)             \
  X(vkCmdPushConstants)            \
  X(vkCmdDispatch)                 \
  X(vkCmdDispatchIndirect)         \
  X(vkCmdCopyBuffer)               \
  X(vkCmdFillBuffer)               \
  X(vkCmdWriteTimestamp)           \
  X(vkCmdResetQueryPool)           \
  X(vkCreateShaderModule)          \
  X(vkDestroyShaderModule)         \
  X(vkCreatePipelineLayout)        \
  X(vkDestroyPipelineLayout)       \
  X(vkCreateComputePipelines)      \
  X(vkDestroyPipeline)             \
  X(vkCreateQueryPool)             \
  X(vkDestroyQueryPool)            \
  X(vkGetQueryPoolResults)         \
  X(vkCreateFence)                 \
  X(vkDestroyFence)                \
  X(vkWaitForFences)               \
  X(vkResetFences)
// clang-format on

#define HCQ_VK_DEVICE_OPTIONAL_FNS(X) X(vkGetCalibratedTimestampsEXT)

#define HCQ__VK_FIELD(name) PFN_##name name;

typedef struct hcq__vk_instance {
  void *lib;
  PFN_vkGetInstanceProcAddr gipa;
  VkInstance instance;
  uint32_t api_version; /* the loader's instance version */
  HCQ_VK_INSTANCE_FNS(HCQ__VK_FIELD)
  HCQ_VK_INSTANCE_OPTIONAL_FNS(HCQ__VK_FIELD)
  uint32_t nphys;
  VkPhysicalDevice *phys;
} hcq__vk_instance_t;

typedef struct hcq__vk_fns {
  HCQ_VK_DEVICE_FNS(HCQ__VK_FIELD)
  HCQ_VK_DEVICE_OPTIONAL_FNS(HCQ__VK_FIELD)
} hcq__vk_fns_t;

/* The process's one instance (created on first use, never destroyed); NULL with the reason why
 * Vulkan is absent. Any thread. */
const hcq__vk_instance_t *hcq__vk_instance(const char **out_why);
/* "VK_ERROR_DEVICE_LOST" for messages (vk_loader.c). */
const char *hcq__vk_result_name(VkResult r);
/* Why a physical device cannot serve hcq (Vulkan 1.2 with timeline semaphores, buffer device
 * addresses and 64-bit shader integers, a compute queue), or NULL when it can. */
const char *hcq__vk_unsuitable(const hcq__vk_instance_t *vi, VkPhysicalDevice pd);

/* ---- memory ----
 * Small allocations share blocks (one VkDeviceMemory and one VkBuffer each, slots of one size);
 * larger ones get a block of their own. Every block is registered process-wide by its address
 * ranges (device address, and host mapping when it has one), so an address in a command word can
 * be turned into a buffer, a device address or a host pointer. Host-visible allocations
 * (HCQ__MEM_HOST_VISIBLE) are addressed by their host pointer: signals, kernel arguments, staging
 * and bound command words are then reachable by every engine of the process, CPU ones too; other
 * allocations by their device address, which is what kernels dereference. */
struct vk_device;

typedef struct vk_block {
  struct vk_device *vd;
  VkDeviceMemory memory;
  VkBuffer buffer;
  uint64_t bda; /* device address of byte 0 */
  char *host;   /* host mapping of byte 0, or NULL */
  uint64_t size;
  int cls; /* slot size class, or -1 for a block of its own */
  bool host_visible_pool;
  uint32_t nslots, nfree;
  uint32_t *free_slots; /* stack of free slot indices */
  struct vk_block *next;
} vk_block_t;

/* Where an address lies: its block and the offset into it. */
typedef struct vk_where {
  vk_block_t *block;
  uint64_t offset;
} vk_where_t;

/* Finds the block holding [addr, addr + size) among every Vulkan device's memory. */
bool hcq__vk_resolve(uint64_t addr, uint64_t size, vk_where_t *out);

/* ---- programs ---- */
typedef struct vk_variant {
  uint32_t local[3];
  VkPipeline pipeline;
} vk_variant_t;

typedef struct vk_program {
  struct vk_device *vd;
  VkShaderModule module;
  char entry[64];
  pthread_mutex_t lock; /* variants */
  vk_variant_t *variants;
  size_t nvariants, cap;
} vk_program_t;

/* Compiles GLSL (after the prelude of hcq/vulkan.h) or loads "#spirv" base64 source into a shader
 * module. */
HCQ_MUST_USE hcq_status_t hcq__vk_program_compile(hcq_device_t *dev, const char *entry,
                                                  const char *source, hcq__program_impl_t *out);
void hcq__vk_program_unload(hcq_device_t *dev, hcq__program_impl_t *impl);
/* The pipeline for a group size (specialization constants 0, 1, 2), made on first use. */
HCQ_MUST_USE hcq_status_t hcq__vk_pipeline(vk_program_t *p, const uint32_t local[3],
                                           VkPipeline *out);
/* The GLSL text every Vulkan kernel source is compiled after. */
const char *hcq__vk_glsl_prelude(void);

/* ---- the device ---- */
typedef struct vk_queue {
  VkQueue queue;
  pthread_mutex_t lock; /* vkQueueSubmit needs the queue to itself */
} vk_queue_t;

struct vk_engine;

typedef struct vk_device {
  hcq_device_t *dev;
  const hcq__vk_instance_t *vi;
  VkPhysicalDevice phys;
  VkPhysicalDeviceProperties props;
  VkPhysicalDeviceMemoryProperties memprops;
  bool on_host_cores; /* a CPU device (lavapipe): its kernels run on this machine's cores */
  VkDevice device;
  hcq__vk_fns_t fn;
  uint32_t family;
  vk_queue_t queues[2];
  int nqueues;
  uint32_t mem_type[2];   /* [0] device memory, [1] host visible */
  bool device_mem_mapped; /* device memory type is host visible too */
  bool memory_budget; /* VK_EXT_memory_budget: the heap's budget and usage (hcq_device_memory) */
  VkPipelineLayout layout;
  uint64_t timestamp_mask;
  double timestamp_period;  /* ns per tick */
  int64_t timestamp_offset; /* host CLOCK_MONOTONIC ns minus device ns */
  bool timestamps;          /* the queue family writes timestamps */

  pthread_mutex_t mem_lock; /* blocks */
  vk_block_t *pools[2][12]; /* [host visible][class] */
  vk_block_t *dedicated;

  pthread_mutex_t oneshot_lock; /* synchronous fills of unmapped memory */
  VkCommandPool oneshot_pool;
  VkFence oneshot_fence;

  /* Signals a SIGNAL command set on this device, with the engine and timeline-semaphore value that
   * sets them and the signal's number among that engine's signals, so the other engine can wait on
   * the semaphore instead of on the host. A lossy cache: a missing entry costs a host wait, never
   * correctness. */
  pthread_mutex_t pending_lock;
  struct vk_pending_signal {
    const void *word;
    uint64_t value, sem, seq;
    hcq_queue_kind_t kind;
  } pending_signals[256];

  struct vk_engine *engines[2];
} vk_device_t;

#endif
