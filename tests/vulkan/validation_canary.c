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

int main(void) {
  void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("canary: no Vulkan loader: %s\n", dlerror());
    return 77;
  }
  PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
  PFN_vkCreateInstance create_instance = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                           .apiVersion = VK_API_VERSION_1_2};
  VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                              .pApplicationInfo = &app};
  VkInstance inst;
  if (!create_instance || create_instance(&ici, NULL, &inst) != VK_SUCCESS) {
    printf("canary: vkCreateInstance failed\n");
    return 77;
  }
#define GET(name) PFN_##name p_##name = (PFN_##name)gipa(inst, #name)
  GET(vkEnumeratePhysicalDevices);
  GET(vkCreateDevice);
  GET(vkGetDeviceProcAddr);
  GET(vkDestroyDevice);
  GET(vkDestroyInstance);
  uint32_t n = 1;
  VkPhysicalDevice phys;
  VkResult r = p_vkEnumeratePhysicalDevices(inst, &n, &phys);
  if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || n == 0) {
    printf("canary: no Vulkan device\n");
    p_vkDestroyInstance(inst, NULL);
    return 77;
  }
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                 .queueFamilyIndex = 0,
                                 .queueCount = 1,
                                 .pQueuePriorities = &prio};
  VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                            .queueCreateInfoCount = 1,
                            .pQueueCreateInfos = &qci};
  VkDevice dev;
  if (p_vkCreateDevice(phys, &dci, NULL, &dev) != VK_SUCCESS) {
    printf("canary: vkCreateDevice failed\n");
    p_vkDestroyInstance(inst, NULL);
    return 77;
  }
  PFN_vkCreateBuffer create_buffer =
      (PFN_vkCreateBuffer)p_vkGetDeviceProcAddr(dev, "vkCreateBuffer");
  PFN_vkDestroyBuffer destroy_buffer =
      (PFN_vkDestroyBuffer)p_vkGetDeviceProcAddr(dev, "vkDestroyBuffer");
  VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                            .size = 0,
                            .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                            .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkBuffer buf = VK_NULL_HANDLE;
  r = create_buffer(dev, &bci, NULL, &buf); /* invalid on purpose */
  if (r == VK_SUCCESS && buf != VK_NULL_HANDLE) destroy_buffer(dev, buf, NULL);

    /* The race: a valid buffer filled twice with no barrier. */
#define DGET(name) PFN_##name p_##name = (PFN_##name)p_vkGetDeviceProcAddr(dev, #name)
  DGET(vkGetBufferMemoryRequirements);
  DGET(vkAllocateMemory);
  DGET(vkBindBufferMemory);
  DGET(vkFreeMemory);
  DGET(vkCreateCommandPool);
  DGET(vkDestroyCommandPool);
  DGET(vkAllocateCommandBuffers);
  DGET(vkBeginCommandBuffer);
  DGET(vkEndCommandBuffer);
  DGET(vkCmdFillBuffer);
  bci.size = 256;
  bci.usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  int raced = 0;
  if (create_buffer(dev, &bci, NULL, &buf) == VK_SUCCESS) {
    VkMemoryRequirements req;
    p_vkGetBufferMemoryRequirements(dev, buf, &req);
    uint32_t type = 0;
    while (type < 31 && !(req.memoryTypeBits & (1u << type))) type++;
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .allocationSize = req.size,
                                .memoryTypeIndex = type};
    VkDeviceMemory mem;
    if (p_vkAllocateMemory(dev, &mai, NULL, &mem) == VK_SUCCESS) {
      p_vkBindBufferMemory(dev, buf, mem, 0);
      VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                     .queueFamilyIndex = 0};
      VkCommandPool pool;
      if (p_vkCreateCommandPool(dev, &pci, NULL, &pool) == VK_SUCCESS) {
        VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                           .commandPool = pool,
                                           .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                           .commandBufferCount = 1};
        VkCommandBuffer cb;
        if (p_vkAllocateCommandBuffers(dev, &cai, &cb) == VK_SUCCESS) {
          VkCommandBufferBeginInfo cbi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
          p_vkBeginCommandBuffer(cb, &cbi);
          p_vkCmdFillBuffer(cb, buf, 0, 256, 1u);
          p_vkCmdFillBuffer(cb, buf, 0, 256, 2u); /* races the first fill on purpose */
          p_vkEndCommandBuffer(cb);
          raced = 1;
        }
        p_vkDestroyCommandPool(dev, pool, NULL);
      }
      destroy_buffer(dev, buf, NULL);
      p_vkFreeMemory(dev, mem, NULL);
    } else {
      destroy_buffer(dev, buf, NULL);
    }
  }
  p_vkDestroyDevice(dev, NULL);
  p_vkDestroyInstance(inst, NULL);
  printf("canary: made one invalid call (vkCreateBuffer with size 0)%s\n",
         raced ? " and one race (two fills of one buffer, no barrier)"
               : "; could not record the race");
  return raced ? 0 : 1;
}
