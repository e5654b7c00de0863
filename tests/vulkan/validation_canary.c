/* Proves the validation run can fail: a deliberately invalid Vulkan call (a buffer of size 0,
 * VUID-VkBufferCreateInfo-size-00912) and a deliberate race (two fills of one buffer in one command
 * buffer with no barrier between them, SYNC-HAZARD-WRITE-AFTER-WRITE, which only synchronisation
 * validation reports) that the Khronos validation layer must report. The script
 * tests/vulkan/run_validated.sh runs it first under the same settings as the suites and fails when
 * the report is missing (layer not loaded, settings not read, output not seen).
 * Exit 0 after the call (whatever the layer said), 77 when Vulkan has no device here. */
#include <dlfcn.h>
#include <stdio.h>
#include <vulkan/vulkan.h>

/* The instance, the device and the entry points the calls below share. */
typedef struct canary {
  PFN_vkGetInstanceProcAddr gipa;
  VkInstance inst;
  VkDevice dev;
  PFN_vkGetDeviceProcAddr p_vkGetDeviceProcAddr;
  PFN_vkDestroyInstance p_vkDestroyInstance;
} canary_t;

#define GET(name) PFN_##name p_##name = (PFN_##name)c->gipa(c->inst, #name)
#define DGET(name) PFN_##name p_##name = (PFN_##name)c->p_vkGetDeviceProcAddr(c->dev, #name)

/* The loader and an instance; false (having said why) when there is neither. */
static int canary_instance(canary_t *c) {
  void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("canary: no Vulkan loader: %s\n", dlerror());
    return 0;
  }
  c->gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
  PFN_vkCreateInstance create_instance = (PFN_vkCreateInstance)c->gipa(NULL, "vkCreateInstance");
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                           .apiVersion = VK_API_VERSION_1_2};
  VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                              .pApplicationInfo = &app};
  if (!create_instance || create_instance(&ici, NULL, &c->inst) != VK_SUCCESS) {
    printf("canary: vkCreateInstance failed\n");
    return 0;
  }
  return 1;
}

/* A device with one queue of family 0 on the first physical device; false (having said why and
 * destroyed the instance) when there is none. */
static int canary_device(canary_t *c) {
  GET(vkEnumeratePhysicalDevices);
  GET(vkCreateDevice);
  c->p_vkDestroyInstance = (PFN_vkDestroyInstance)c->gipa(c->inst, "vkDestroyInstance");
  c->p_vkGetDeviceProcAddr = (PFN_vkGetDeviceProcAddr)c->gipa(c->inst, "vkGetDeviceProcAddr");
  uint32_t n = 1;
  VkPhysicalDevice phys;
  VkResult r = p_vkEnumeratePhysicalDevices(c->inst, &n, &phys);
  if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || n == 0) {
    printf("canary: no Vulkan device\n");
    c->p_vkDestroyInstance(c->inst, NULL);
    return 0;
  }
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                 .queueFamilyIndex = 0,
                                 .queueCount = 1,
                                 .pQueuePriorities = &prio};
  VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                            .queueCreateInfoCount = 1,
                            .pQueueCreateInfos = &qci};
  if (p_vkCreateDevice(phys, &dci, NULL, &c->dev) != VK_SUCCESS) {
    printf("canary: vkCreateDevice failed\n");
    c->p_vkDestroyInstance(c->inst, NULL);
    return 0;
  }
  return 1;
}

/* The invalid call: a buffer of size 0. */
static void canary_invalid_call(const canary_t *c) {
  DGET(vkCreateBuffer);
  DGET(vkDestroyBuffer);
  VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                            .size = 0,
                            .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                            .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkBuffer buf = VK_NULL_HANDLE;
  VkResult r = p_vkCreateBuffer(c->dev, &bci, NULL, &buf); /* invalid on purpose */
  if (r == VK_SUCCESS && buf != VK_NULL_HANDLE) p_vkDestroyBuffer(c->dev, buf, NULL);
}

/* Records two fills of buf in one command buffer with no barrier between them; whether it could. */
static int canary_record_two_fills(const canary_t *c, VkBuffer buf) {
  DGET(vkCreateCommandPool);
  DGET(vkDestroyCommandPool);
  DGET(vkAllocateCommandBuffers);
  DGET(vkBeginCommandBuffer);
  DGET(vkEndCommandBuffer);
  DGET(vkCmdFillBuffer);
  VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                 .queueFamilyIndex = 0};
  VkCommandPool pool;
  if (p_vkCreateCommandPool(c->dev, &pci, NULL, &pool) != VK_SUCCESS) return 0;
  VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                     .commandPool = pool,
                                     .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                     .commandBufferCount = 1};
  VkCommandBuffer cb;
  int raced = 0;
  if (p_vkAllocateCommandBuffers(c->dev, &cai, &cb) == VK_SUCCESS) {
    VkCommandBufferBeginInfo cbi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    p_vkBeginCommandBuffer(cb, &cbi);
    p_vkCmdFillBuffer(cb, buf, 0, 256, 1u);
    p_vkCmdFillBuffer(cb, buf, 0, 256, 2u); /* races the first fill on purpose */
    p_vkEndCommandBuffer(cb);
    raced = 1;
  }
  p_vkDestroyCommandPool(c->dev, pool, NULL);
  return raced;
}

/* The race: a valid buffer (with memory) filled twice with no barrier; whether it was recorded. */
static int canary_race(const canary_t *c) {
  DGET(vkCreateBuffer);
  DGET(vkDestroyBuffer);
  DGET(vkGetBufferMemoryRequirements);
  DGET(vkAllocateMemory);
  DGET(vkBindBufferMemory);
  DGET(vkFreeMemory);
  VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                            .size = 256,
                            .usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                            .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkBuffer buf = VK_NULL_HANDLE;
  if (p_vkCreateBuffer(c->dev, &bci, NULL, &buf) != VK_SUCCESS) return 0;
  VkMemoryRequirements req;
  p_vkGetBufferMemoryRequirements(c->dev, buf, &req);
  uint32_t type = 0;
  while (type < 31 && !(req.memoryTypeBits & (1u << type))) type++;
  VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                              .allocationSize = req.size,
                              .memoryTypeIndex = type};
  VkDeviceMemory mem;
  if (p_vkAllocateMemory(c->dev, &mai, NULL, &mem) != VK_SUCCESS) {
    p_vkDestroyBuffer(c->dev, buf, NULL);
    return 0;
  }
  p_vkBindBufferMemory(c->dev, buf, mem, 0);
  int raced = canary_record_two_fills(c, buf);
  p_vkDestroyBuffer(c->dev, buf, NULL);
  p_vkFreeMemory(c->dev, mem, NULL);
  return raced;
}

int main(void) {
  canary_t c0 = {0}, *c = &c0;
  if (!canary_instance(c) || !canary_device(c)) return 77;
  canary_invalid_call(c);
  int raced = canary_race(c);
  GET(vkDestroyDevice);
  p_vkDestroyDevice(c->dev, NULL);
  c->p_vkDestroyInstance(c->inst, NULL);
  printf("canary: made one invalid call (vkCreateBuffer with size 0)%s\n",
         raced ? " and one race (two fills of one buffer, no barrier)"
               : "; could not record the race");
  return raced ? 0 : 1;
}
