/* Vulkan device memory: blocks with device addresses, slots of small sizes shared in blocks, and
 * the process-wide registry that turns an address from a command word back into its block. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/device.h"
#include "core/memory.h"
#include "vulkan/vk_device.h"

#define SLOT_MIN 64u
#define SLOT_CLASSES 11 /* 64 B .. 64 KiB */
#define BLOCK_BYTES (UINT64_C(1) << 20)

/* ---- the registry: address ranges of every block of every Vulkan device ---- */

typedef struct vk_range {
  uint64_t start, end;
  vk_block_t *block;
} vk_range_t;

static pthread_rwlock_t g_reg_lock = PTHREAD_RWLOCK_INITIALIZER;
static vk_range_t *g_ranges;
static size_t g_nranges, g_cap;

/* Index of the first range whose start is above addr. */
static size_t upper_bound(uint64_t addr) {
  size_t lo = 0, hi = g_nranges;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (g_ranges[mid].start <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static hcq_status_t reg_insert(uint64_t start, uint64_t end, vk_block_t *b) {
  size_t at = upper_bound(start);
  /* Two devices' address spaces may overlap on some drivers: an address would then be ambiguous. */
  if ((at > 0 && g_ranges[at - 1].end > start && g_ranges[at - 1].block != b) ||
      (at < g_nranges && g_ranges[at].start < end && g_ranges[at].block != b)) {
    const vk_block_t *other =
        at > 0 && g_ranges[at - 1].end > start ? g_ranges[at - 1].block : g_ranges[at].block;
    return hcq_status_make(HCQ_UNAVAILABLE,
                           "%s: memory at 0x%" PRIx64
                           " overlaps memory of %s: the driver gives two logical devices "
                           "overlapping addresses, so hcq cannot tell them apart",
                           b->vd->dev->name, start, other->vd->dev->name);
  }
  if (g_nranges == g_cap) {
    size_t cap = g_cap ? 2 * g_cap : 64;
    vk_range_t *r = realloc(g_ranges, cap * sizeof(*r));
    if (!r) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory registering Vulkan memory");
    g_ranges = r;
    g_cap = cap;
  }
  memmove(&g_ranges[at + 1], &g_ranges[at], (g_nranges - at) * sizeof(*g_ranges));
  g_ranges[at] = (vk_range_t){start, end, b};
  g_nranges++;
  return NULL;
}

static void reg_remove(vk_block_t *b) {
  pthread_rwlock_wrlock(&g_reg_lock);
  size_t keep = 0;
  for (size_t i = 0; i < g_nranges; i++)
    if (g_ranges[i].block != b) g_ranges[keep++] = g_ranges[i];
  g_nranges = keep;
  if (!g_nranges) {
    free(g_ranges);
    g_ranges = NULL;
    g_cap = 0;
  }
  pthread_rwlock_unlock(&g_reg_lock);
}

static hcq_status_t reg_add(vk_block_t *b) {
  pthread_rwlock_wrlock(&g_reg_lock);
  hcq_status_t st = reg_insert(b->bda, b->bda + b->size, b);
  if (!st && b->host && (uint64_t)(uintptr_t)b->host != b->bda)
    st = reg_insert((uint64_t)(uintptr_t)b->host, (uint64_t)(uintptr_t)b->host + b->size, b);
  pthread_rwlock_unlock(&g_reg_lock);
  if (st) reg_remove(b);
  return st;
}

bool hcq__vk_resolve(uint64_t addr, uint64_t size, vk_where_t *out) {
  bool found = false;
  pthread_rwlock_rdlock(&g_reg_lock);
  size_t at = upper_bound(addr);
  if (at > 0) {
    const vk_range_t *r = &g_ranges[at - 1];
    if (addr < r->end && size <= r->end - addr) {
      out->block = r->block;
      out->offset = addr - r->start;
      found = true;
    }
  }
  pthread_rwlock_unlock(&g_reg_lock);
  return found;
}

/* ---- blocks ---- */

static hcq_status_t vk_fail(const vk_device_t *vd, VkResult r, const char *what, uint64_t size) {
  hcq_status_code_t code = r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                               ? HCQ_OUT_OF_MEMORY
                               : HCQ_DEVICE_ERROR;
  return hcq_status_make(code, "%s: %s of %" PRIu64 " bytes failed: %s", vd->dev->name, what, size,
                         hcq__vk_result_name(r));
}

static void block_destroy(vk_block_t *b) {
  vk_device_t *vd = b->vd;
  reg_remove(b);
  if (b->buffer) vd->fn.vkDestroyBuffer(vd->device, b->buffer, NULL);
  if (b->memory) vd->fn.vkFreeMemory(vd->device, b->memory, NULL); /* unmaps too */
  free(b->free_slots);
  free(b);
}

/* A memory type among allowed that has want (and prefers nice); UINT32_MAX when none. */
static uint32_t pick_type(const vk_device_t *vd, uint32_t allowed, VkMemoryPropertyFlags want,
                          uint32_t preferred) {
  uint32_t best = UINT32_MAX;
  for (uint32_t i = 0; i < vd->memprops.memoryTypeCount; i++) {
    if (!(allowed & (1u << i)) || (vd->memprops.memoryTypes[i].propertyFlags & want) != want)
      continue;
    if (i == preferred) return i;
    if (best == UINT32_MAX) best = i;
  }
  return best;
}

static hcq_status_t block_create(vk_device_t *vd, uint64_t size, bool host_visible,
                                 vk_block_t **out) {
  vk_block_t *b = calloc(1, sizeof(*b));
  if (!b)
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory creating Vulkan memory on %s",
                           vd->dev->name);
  b->vd = vd;
  b->size = size;
  b->cls = -1;
  b->host_visible_pool = host_visible;
  VkBufferCreateInfo bi = {
      .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
      .size = size,
      .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
               VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT |
               VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
      .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkResult r = vd->fn.vkCreateBuffer(vd->device, &bi, NULL, &b->buffer);
  if (r != VK_SUCCESS) {
    block_destroy(b);
    return vk_fail(vd, r, "vkCreateBuffer", size);
  }
  VkMemoryRequirements req;
  vd->fn.vkGetBufferMemoryRequirements(vd->device, b->buffer, &req);
  VkMemoryPropertyFlags want =
      host_visible ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : 0;
  uint32_t type = pick_type(vd, req.memoryTypeBits, want, vd->mem_type[host_visible]);
  if (type == UINT32_MAX) {
    block_destroy(b);
    return hcq_status_make(HCQ_UNAVAILABLE, "%s: no memory type can hold a %s buffer",
                           vd->dev->name, host_visible ? "host-visible" : "device");
  }
  VkMemoryAllocateFlagsInfo flags = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                     .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
  VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                             .pNext = &flags,
                             .allocationSize = req.size,
                             .memoryTypeIndex = type};
  r = vd->fn.vkAllocateMemory(vd->device, &ai, NULL, &b->memory);
  if (r == VK_SUCCESS) r = vd->fn.vkBindBufferMemory(vd->device, b->buffer, b->memory, 0);
  if (r != VK_SUCCESS) {
    block_destroy(b);
    return vk_fail(vd, r, "allocating device memory", size);
  }
  VkBufferDeviceAddressInfo addr = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO,
                                    .buffer = b->buffer};
  b->bda = vd->fn.vkGetBufferDeviceAddress(vd->device, &addr);
  if (vd->memprops.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
    void *p = NULL;
    r = vd->fn.vkMapMemory(vd->device, b->memory, 0, VK_WHOLE_SIZE, 0, &p);
    if (r != VK_SUCCESS && host_visible) {
      block_destroy(b);
      return vk_fail(vd, r, "vkMapMemory", size);
    }
    b->host = r == VK_SUCCESS ? p : NULL;
  }
  hcq_status_t st = reg_add(b);
  if (st) {
    block_destroy(b);
    return st;
  }
  *out = b;
  return NULL;
}

/* Zeroes [offset, offset + size) of a block the host cannot map, on the device, synchronously. */
static hcq_status_t fill_zero(vk_device_t *vd, vk_block_t *b, uint64_t offset, uint64_t size) {
  pthread_mutex_lock(&vd->oneshot_lock);
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = vd->oneshot_pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  VkCommandBuffer cb;
  VkResult r = vd->fn.vkAllocateCommandBuffers(vd->device, &ai, &cb);
  if (r == VK_SUCCESS) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    vd->fn.vkBeginCommandBuffer(cb, &bi);
    vd->fn.vkCmdFillBuffer(cb, b->buffer, offset, size, 0);
    r = vd->fn.vkEndCommandBuffer(cb);
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
    vk_queue_t *q = &vd->queues[0];
    if (r == VK_SUCCESS) {
      pthread_mutex_lock(&q->lock);
      r = vd->fn.vkQueueSubmit(q->queue, 1, &si, vd->oneshot_fence);
      pthread_mutex_unlock(&q->lock);
    }
    if (r == VK_SUCCESS)
      r = vd->fn.vkWaitForFences(vd->device, 1, &vd->oneshot_fence, VK_TRUE, UINT64_MAX);
    vd->fn.vkResetFences(vd->device, 1, &vd->oneshot_fence);
    vd->fn.vkFreeCommandBuffers(vd->device, vd->oneshot_pool, 1, &cb);
  }
  pthread_mutex_unlock(&vd->oneshot_lock);
  return r == VK_SUCCESS ? NULL : vk_fail(vd, r, "zeroing new memory", size);
}

static int size_class(uint64_t rounded) {
  int c = 0;
  while (((uint64_t)SLOT_MIN << c) < rounded) c++;
  return c;
}

hcq_status_t hcq__vk_mem_alloc(hcq_device_t *dev, uint64_t size, uint32_t flags, hcq__mem_t *out) {
  vk_device_t *vd = dev->backend;
  bool hv = (flags & HCQ__MEM_HOST_VISIBLE) != 0;
  uint64_t rounded = (size + 63) & ~UINT64_C(63);
  if (rounded < size || rounded > (UINT64_C(1) << 46))
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: cannot allocate %" PRIu64 " bytes", dev->name,
                           size);
  vk_block_t *b = NULL;
  uint64_t offset = 0, span = rounded;
  hcq_status_t st = NULL;
  if (rounded <= ((uint64_t)SLOT_MIN << (SLOT_CLASSES - 1))) {
    int cls = size_class(rounded);
    span = (uint64_t)SLOT_MIN << cls;
    pthread_mutex_lock(&vd->mem_lock);
    for (b = vd->pools[hv][cls]; b && !b->nfree; b = b->next) {}
    if (!b && !(st = block_create(vd, BLOCK_BYTES, hv, &b))) {
      b->cls = cls;
      b->nslots = (uint32_t)(BLOCK_BYTES / span);
      b->free_slots = malloc(b->nslots * sizeof(uint32_t));
      if (!b->free_slots) {
        block_destroy(b);
        b = NULL;
        st = hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory on %s", dev->name);
      } else {
        for (uint32_t i = 0; i < b->nslots; i++) b->free_slots[i] = b->nslots - 1 - i;
        b->nfree = b->nslots;
        b->next = vd->pools[hv][cls];
        vd->pools[hv][cls] = b;
      }
    }
    if (b) offset = (uint64_t)b->free_slots[--b->nfree] * span;
    pthread_mutex_unlock(&vd->mem_lock);
  } else {
    st = block_create(vd, rounded, hv, &b);
    if (!st) {
      pthread_mutex_lock(&vd->mem_lock);
      b->next = vd->dedicated;
      vd->dedicated = b;
      pthread_mutex_unlock(&vd->mem_lock);
    }
  }
  if (st) return st;
  if (b->host)
    memset(b->host + offset, 0, span);
  else if ((st = fill_zero(vd, b, offset, span))) {
    hcq__mem_t m = {b->bda + offset, NULL, size, b};
    hcq__vk_mem_free(dev, &m);
    return st;
  }
  out->host = b->host ? b->host + offset : NULL;
  out->addr = hv ? (uint64_t)(uintptr_t)out->host : b->bda + offset;
  out->size = size;
  out->handle = b;
  return NULL;
}

void hcq__vk_mem_free(hcq_device_t *dev, hcq__mem_t *mem) {
  vk_device_t *vd = dev->backend;
  vk_block_t *b = mem->handle;
  if (!b) return;
  uint64_t offset =
      mem->host && b->host ? (uint64_t)((char *)mem->host - b->host) : mem->addr - b->bda;
  /* Command buffers recorded for bound words in this memory must never run again. */
  if (b->host_visible_pool) hcq__vk_forget_bound(vd, mem->host, mem->size);
  pthread_mutex_lock(&vd->mem_lock);
  if (b->cls >= 0) {
    b->free_slots[b->nfree++] = (uint32_t)(offset / ((uint64_t)SLOT_MIN << b->cls));
    pthread_mutex_unlock(&vd->mem_lock);
  } else {
    for (vk_block_t **p = &vd->dedicated; *p; p = &(*p)->next)
      if (*p == b) {
        *p = b->next;
        break;
      }
    pthread_mutex_unlock(&vd->mem_lock);
    block_destroy(b);
  }
  mem->host = NULL;
  mem->handle = NULL;
}

void hcq__vk_memory_destroy(vk_device_t *vd) {
  for (int hv = 0; hv < 2; hv++)
    for (int c = 0; c < SLOT_CLASSES; c++)
      while (vd->pools[hv][c]) {
        vk_block_t *b = vd->pools[hv][c];
        vd->pools[hv][c] = b->next;
        block_destroy(b);
      }
  while (vd->dedicated) {
    vk_block_t *b = vd->dedicated;
    vd->dedicated = b->next;
    block_destroy(b);
  }
}

hcq_status_t hcq__vk_scratch_block(vk_device_t *vd, uint64_t size, vk_block_t **out) {
  return block_create(vd, size, false, out);
}
void hcq__vk_block_destroy(vk_block_t *b) { block_destroy(b); }
