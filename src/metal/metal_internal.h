/* The Metal backend's view of the Objective-C runtime and the Metal framework, shared by the device
 * (metal_device.c) and the Metal graph (metal_graph.c).
 *
 * Nothing here needs an Apple header: libobjc and Metal.framework are opened by path at run time
 * (HCQ_OBJC_LIBRARY, HCQ_METAL_FRAMEWORK), classes are looked up with objc_getClass, selectors with
 * sel_registerName (once, into hcq__mtl_sel), and every message goes through objc_msgSend cast to
 * the exact prototype of the method it calls (MSG below): structs such as MTLSize travel by value,
 * as the platform ABI passes them (on x86-64 in memory, on arm64 by reference to a copy), which the
 * compiler does from the cast. No variadic call is ever made through objc_msgSend. */
#ifndef HCQ_METAL_INTERNAL_H
#define HCQ_METAL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hcq/device.h"
#include "hcq/graph.h"
#include "hcq/status.h"

typedef void *hcq_id;
typedef void *hcq_SEL;
typedef unsigned long hcq_NSUInteger;
typedef struct hcq_MTLSize {
  hcq_NSUInteger width, height, depth;
} hcq_MTLSize;
typedef struct hcq_NSRange {
  hcq_NSUInteger location, length;
} hcq_NSRange;

/* Metal constants hcq uses (values from the Metal headers). */
enum {
  HCQ_MTL_RESOURCE_STORAGE_SHARED = 0,           /* MTLResourceStorageModeShared */
  HCQ_MTL_CB_STATUS_COMPLETED = 4,               /* MTLCommandBufferStatusCompleted */
  HCQ_MTL_CB_STATUS_ERROR = 5,                   /* MTLCommandBufferStatusError */
  HCQ_MTL_INDIRECT_CONCURRENT_DISPATCH = 1 << 5, /* MTLIndirectCommandTypeConcurrentDispatch */
  HCQ_MTL_RESOURCE_USAGE_READ_WRITE = 1 | 2,     /* MTLResourceUsageRead | MTLResourceUsageWrite */
  HCQ_MTL_MAX_BUFFER_BINDS = 31,                 /* kernel buffer argument table entries */
};

/* Every selector the backend sends, in one list (docs/metal.md lists the same). */
// clang-format off
#define HCQ__MTL_SELECTORS(X)                                                                    \
  X(new_, "new") X(release, "release") X(retain, "retain")                                       \
  X(UTF8String, "UTF8String") X(stringWithUTF8String, "stringWithUTF8String:")                   \
  X(localizedDescription, "localizedDescription") X(name, "name")                                \
  X(newCommandQueue, "newCommandQueue") X(newBufferWithLength, "newBufferWithLength:options:")   \
  X(contents, "contents") X(newSharedEvent, "newSharedEvent")                                    \
  X(signaledValue, "signaledValue")                                                              \
  X(newLibraryWithSource, "newLibraryWithSource:options:error:")                                 \
  X(newLibraryWithData, "newLibraryWithData:error:")                                             \
  X(newFunctionWithName, "newFunctionWithName:")                                                 \
  X(setComputeFunction, "setComputeFunction:")                                                   \
  X(setSupportIndirectCommandBuffers, "setSupportIndirectCommandBuffers:")                       \
  X(newComputePipelineStateWithDescriptor,                                                       \
      "newComputePipelineStateWithDescriptor:options:reflection:error:")                         \
  X(maxTotalThreadsPerThreadgroup, "maxTotalThreadsPerThreadgroup")                              \
  X(recommendedMaxWorkingSetSize, "recommendedMaxWorkingSetSize")                                \
  X(currentAllocatedSize, "currentAllocatedSize")                                                \
  X(commandBuffer, "commandBuffer") X(computeCommandEncoder, "computeCommandEncoder")            \
  X(blitCommandEncoder, "blitCommandEncoder")                                                    \
  X(setComputePipelineState, "setComputePipelineState:")                                         \
  X(setBuffer, "setBuffer:offset:atIndex:") X(setBytes, "setBytes:length:atIndex:")              \
  X(dispatchThreadgroups, "dispatchThreadgroups:threadsPerThreadgroup:")                         \
  X(copyFromBuffer, "copyFromBuffer:sourceOffset:toBuffer:destinationOffset:size:")              \
  X(endEncoding, "endEncoding") X(encodeSignalEvent, "encodeSignalEvent:value:")                 \
  X(commit, "commit") X(status, "status") X(error, "error") X(setLabel, "setLabel:")             \
  X(GPUStartTime, "GPUStartTime") X(GPUEndTime, "GPUEndTime")                                    \
  X(setCommandTypes, "setCommandTypes:") X(setInheritBuffers, "setInheritBuffers:")              \
  X(setInheritPipelineState, "setInheritPipelineState:")                                         \
  X(setMaxKernelBufferBindCount, "setMaxKernelBufferBindCount:")                                 \
  X(newIndirectCommandBuffer, "newIndirectCommandBufferWithDescriptor:maxCommandCount:options:") \
  X(indirectComputeCommandAtIndex, "indirectComputeCommandAtIndex:")                             \
  X(setKernelBuffer, "setKernelBuffer:offset:atIndex:")                                          \
  X(concurrentDispatchThreadgroups, "concurrentDispatchThreadgroups:threadsPerThreadgroup:")     \
  X(setBarrier, "setBarrier") X(useResources, "useResources:count:usage:")                       \
  X(executeCommandsInBuffer, "executeCommandsInBuffer:withRange:") X(reset, "reset")
// clang-format on

typedef struct hcq__mtl_sels {
#define HCQ__MTL_SEL_FIELD(field, text) hcq_SEL field;
  HCQ__MTL_SELECTORS(HCQ__MTL_SEL_FIELD)
#undef HCQ__MTL_SEL_FIELD
} hcq__mtl_sels_t;

/* The runtime, once loaded (hcq__mtl_api): NULL with the reason where libobjc or Metal is missing.
 */
typedef struct hcq__mtl_api {
  void *objc_lib, *metal_lib;
  hcq_id (*objc_getClass)(const char *name);
  hcq_SEL (*sel_registerName)(const char *name);
  void (*objc_msgSend)(void); /* cast to the callee's prototype at each call (MSG) */
  const char *(*object_getClassName)(hcq_id obj);
  void *(*objc_autoreleasePoolPush)(void);
  void (*objc_autoreleasePoolPop)(void *pool);
  hcq_id (*MTLCreateSystemDefaultDevice)(void);
  /* libdispatch (part of libSystem, found through Metal's handle): newLibraryWithData: takes a
   * dispatch_data_t. A NULL destructor means the data copies the bytes. */
  void *(*dispatch_data_create)(const void *buffer, size_t size, void *queue, void *destructor);
  void (*dispatch_release)(void *object);
  hcq__mtl_sels_t sel;
  /* Classes */
  hcq_id NSString, MTLComputePipelineDescriptor, MTLIndirectCommandBufferDescriptor;
  char objc_path[256], metal_path[256];
} hcq__mtl_api_t;

const hcq__mtl_api_t *hcq__mtl_api(const char **why);

/* A message with the method's exact prototype: MSG(ret, argtypes...)(receiver, selector, args...).
 */
#define HCQ__MSG(api, ret, ...) \
  ((ret(*)(hcq_id, hcq_SEL, ##__VA_ARGS__))(uintptr_t)(api)->objc_msgSend)

/* A compiled program: what an EXEC carries (FN) on a Metal device. */
typedef struct hcq__mtl_kernel {
  hcq_id library, function, pipeline;
  hcq_NSUInteger max_threads; /* maxTotalThreadsPerThreadgroup */
} hcq__mtl_kernel_t;

/* ---- device (metal_device.c) ---- */

/* The MTLBuffer holding device address addr and addr's offset in it; NULL when the address is not
 * in this device's memory. */
hcq_id hcq__mtl_buffer_at(hcq_device_t *dev, uint64_t addr, uint64_t *offset);
hcq_id hcq__mtl_device(hcq_device_t *dev);
/* A graph replay on the device's engine, in order with its eager work: run(ctx) encodes and commits
 * one command buffer and returns it (retained) or NULL with *err set; the engine waits for it,
 * marks the device lost if it failed, then done(ctx, cb, failed) (GPU times), then the words (a
 * timeline SIGNAL). Counts as one submission of the compute queue. Device lock held. */
typedef struct hcq__mtl_job {
  hcq_id (*encode)(void *ctx, hcq_device_t *dev, hcq_id queue, char *err, size_t err_size);
  void (*done)(void *ctx, hcq_id cb, bool failed);
  void *ctx;
} hcq__mtl_job_t;
HCQ_MUST_USE hcq_status_t hcq__mtl_submit_job(hcq_device_t *dev, const hcq__mtl_job_t *job,
                                              const uint32_t *words, size_t nwords);
/* NSString from C text (autoreleased) and back. */
hcq_id hcq__mtl_string(const hcq__mtl_api_t *api, const char *s);
const char *hcq__mtl_cstring(const hcq__mtl_api_t *api, hcq_id str);

/* The Metal graph (metal_graph.c; docs/design.md, "The Metal graph"): the row's graph_create
 * (core/backend.h), for kernel items of one Metal device. */
struct hcq__runner;
HCQ_MUST_USE hcq_status_t hcq__mtl_graph_create(struct hcq__runner *runner, bool profile,
                                                unsigned inflight, hcq_graph_t **out);

#endif
