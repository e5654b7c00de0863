/* The few CUDA driver API types, constants and entry points hcq uses, declared by us so the library
 * builds on machines without the CUDA toolkit. libcuda is loaded at run time (dlopen) and every
 * entry point is fetched through cuGetProcAddress with an explicit ABI version, so a newer driver
 * gives us exactly the variant these declarations describe. tests/cuda/test_cuda_decls.c checks
 * them against the toolkit's cuda.h where one is installed. */
#ifndef HCQ_CUDA_API_H
#define HCQ_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

typedef int hcq_CUresult; /* 0 is CUDA_SUCCESS */
typedef int hcq_CUdevice;
typedef unsigned long long hcq_CUdeviceptr;
typedef struct hcq_CUctx_st *hcq_CUcontext;
typedef struct hcq_CUmod_st *hcq_CUmodule;
typedef struct hcq_CUfunc_st *hcq_CUfunction;
typedef struct hcq_CUkern_st *hcq_CUkernel;
typedef struct hcq_CUstream_st *hcq_CUstream;
typedef struct hcq_CUevent_st *hcq_CUevent;
typedef struct hcq_CUarray_st *hcq_CUarray;
typedef struct hcq_CUgraph_st *hcq_CUgraph;
typedef struct hcq_CUgraphNode_st *hcq_CUgraphNode;
typedef struct hcq_CUgraphExec_st *hcq_CUgraphExec;
typedef void (*hcq_CUhostFn)(void *user_data);

/* The ABI version every entry point is requested with (CUDA 12.0): the oldest driver hcq supports.
 * Optional entry points (below) are requested at the version that introduced them. */
#define HCQ_CUDA_FUNC_LOAD_VERSION 12040
/* The ABI version every entry point is requested with (CUDA 12.0): the oldest driver hcq supports.
 */
#define HCQ_CUDA_ABI_VERSION 12000

enum {
  HCQ_CUDA_SUCCESS = 0,
  HCQ_CUDA_ERROR_INVALID_VALUE = 1,
  HCQ_CUDA_ERROR_OUT_OF_MEMORY = 2,
  HCQ_CUDA_ERROR_NO_DEVICE = 100,
  HCQ_CUDA_ERROR_INVALID_IMAGE = 200,
  HCQ_CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  HCQ_CUDA_ERROR_ECC_UNCORRECTABLE = 214,
  HCQ_CUDA_ERROR_NOT_FOUND = 500,
  HCQ_CUDA_ERROR_NOT_READY = 600,
  HCQ_CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  HCQ_CUDA_ERROR_LAUNCH_TIMEOUT = 702,
  HCQ_CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
  HCQ_CUDA_ERROR_ASSERT = 710,
  HCQ_CUDA_ERROR_HARDWARE_STACK_ERROR = 714,
  HCQ_CUDA_ERROR_ILLEGAL_INSTRUCTION = 715,
  HCQ_CUDA_ERROR_MISALIGNED_ADDRESS = 716,
  HCQ_CUDA_ERROR_INVALID_ADDRESS_SPACE = 717,
  HCQ_CUDA_ERROR_INVALID_PC = 718,
  HCQ_CUDA_ERROR_LAUNCH_FAILED = 719,
  HCQ_CUDA_ERROR_UNKNOWN = 999,
  /* Loading images (the PTX JIT) and more of the errors that end a context for good. */
  HCQ_CUDA_ERROR_INVALID_PTX = 218,
  HCQ_CUDA_ERROR_NVLINK_UNCORRECTABLE = 220,
  HCQ_CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221,
  HCQ_CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  HCQ_CUDA_ERROR_JIT_COMPILATION_DISABLED = 223,
  HCQ_CUDA_ERROR_CONTAINED = 226,
  HCQ_CUDA_ERROR_TENSOR_MEMORY_LEAK = 721,
  HCQ_CUDA_ERROR_EXTERNAL_DEVICE = 911,
};

/* cuDeviceGetAttribute */
enum {
  HCQ_CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  HCQ_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2,
  HCQ_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3,
  HCQ_CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4,
  HCQ_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5,
  HCQ_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6,
  HCQ_CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7,
  HCQ_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  HCQ_CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19,
  HCQ_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  HCQ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  HCQ_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  HCQ_CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 122,
};

enum {
  HCQ_CU_MEMHOSTALLOC_PORTABLE = 0x01,
  HCQ_CU_MEMHOSTALLOC_DEVICEMAP = 0x02,
  HCQ_CU_STREAM_NON_BLOCKING = 0x1,
  HCQ_CU_EVENT_DEFAULT = 0x0,
  HCQ_CU_EVENT_DISABLE_TIMING = 0x2,
  HCQ_CU_STREAM_WAIT_VALUE_GEQ = 0x0,
  HCQ_CU_STREAM_WRITE_VALUE_DEFAULT = 0x0,
  HCQ_CU_MEMORYTYPE_HOST = 0x01,
  HCQ_CU_MEMORYTYPE_DEVICE = 0x02,
  HCQ_CU_MEMORYTYPE_UNIFIED = 0x04,
  HCQ_CU_POINTER_ATTRIBUTE_CONTEXT = 1,
  HCQ_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  HCQ_CU_JIT_ERROR_LOG_BUFFER = 5,
  HCQ_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
};

/* cuLaunchKernel / kernel node "extra": one packed argument block. */
#define HCQ_CU_LAUNCH_PARAM_END ((void *)0x00)
#define HCQ_CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define HCQ_CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

/* CUDA_KERNEL_NODE_PARAMS_v2 (the layout cuGraphAddKernelNode takes from CUDA 12.0 on). */
typedef struct hcq_CUDA_KERNEL_NODE_PARAMS {
  hcq_CUfunction func;
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  void **kernelParams;
  void **extra;
  hcq_CUkernel kern;
  hcq_CUcontext ctx;
} hcq_CUDA_KERNEL_NODE_PARAMS;

/* CUDA_MEMCPY3D (v2 layout). */
typedef struct hcq_CUDA_MEMCPY3D {
  size_t srcXInBytes, srcY, srcZ, srcLOD;
  int srcMemoryType;
  const void *srcHost;
  hcq_CUdeviceptr srcDevice;
  hcq_CUarray srcArray;
  void *reserved0;
  size_t srcPitch, srcHeight;
  size_t dstXInBytes, dstY, dstZ, dstLOD;
  int dstMemoryType;
  void *dstHost;
  hcq_CUdeviceptr dstDevice;
  hcq_CUarray dstArray;
  void *reserved1;
  size_t dstPitch, dstHeight;
  size_t WidthInBytes, Height, Depth;
} hcq_CUDA_MEMCPY3D;

/* X(name, return, parameters): fetched as cuGetProcAddress(name, HCQ_CUDA_ABI_VERSION). name is the
 * base name: the driver hands back the variant current at that version (cuMemAlloc_v2,
 * cuMemGetInfo_v2 with size_t sizes), never the 32-bit originals. */
// clang-format off
#define HCQ_CUDA_ENTRY_POINTS(X)                                                              \
  X(cuInit, hcq_CUresult, (unsigned int flags))                                               \
  X(cuDriverGetVersion, hcq_CUresult, (int *version))                                         \
  X(cuGetErrorName, hcq_CUresult, (hcq_CUresult error, const char **str))                     \
  X(cuGetErrorString, hcq_CUresult, (hcq_CUresult error, const char **str))                   \
  X(cuDeviceGetCount, hcq_CUresult, (int *count))                                             \
  X(cuDeviceGet, hcq_CUresult, (hcq_CUdevice * dev, int ordinal))                             \
  X(cuDeviceGetName, hcq_CUresult, (char *name, int len, hcq_CUdevice dev))                   \
  X(cuDeviceGetAttribute, hcq_CUresult, (int *value, int attribute, hcq_CUdevice dev))        \
  X(cuDeviceTotalMem, hcq_CUresult, (size_t * bytes, hcq_CUdevice dev))                       \
  X(cuDeviceCanAccessPeer, hcq_CUresult, (int *can, hcq_CUdevice dev, hcq_CUdevice peer))     \
  X(cuDevicePrimaryCtxRetain, hcq_CUresult, (hcq_CUcontext * ctx, hcq_CUdevice dev))          \
  X(cuDevicePrimaryCtxRelease, hcq_CUresult, (hcq_CUdevice dev))                              \
  X(cuCtxPushCurrent, hcq_CUresult, (hcq_CUcontext ctx))                                      \
  X(cuCtxPopCurrent, hcq_CUresult, (hcq_CUcontext * ctx))                                     \
  X(cuCtxEnablePeerAccess, hcq_CUresult, (hcq_CUcontext peer, unsigned int flags))            \
  X(cuMemAlloc, hcq_CUresult, (hcq_CUdeviceptr * ptr, size_t bytes))                          \
  X(cuMemFree, hcq_CUresult, (hcq_CUdeviceptr ptr))                                           \
  X(cuMemGetInfo, hcq_CUresult, (size_t * free_bytes, size_t * total_bytes))                  \
  X(cuMemHostAlloc, hcq_CUresult, (void **ptr, size_t bytes, unsigned int flags))             \
  X(cuMemFreeHost, hcq_CUresult, (void *ptr))                                                 \
  X(cuMemHostGetDevicePointer, hcq_CUresult, (hcq_CUdeviceptr * dptr, void *host,             \
      unsigned int flags))                                                                    \
  X(cuMemsetD8Async, hcq_CUresult, (hcq_CUdeviceptr dst, unsigned char value, size_t n,       \
      hcq_CUstream stream))                                                                   \
  X(cuMemcpyAsync, hcq_CUresult, (hcq_CUdeviceptr dst, hcq_CUdeviceptr src, size_t n,         \
      hcq_CUstream stream))                                                                   \
  X(cuPointerGetAttribute, hcq_CUresult, (void *data, int attribute, hcq_CUdeviceptr ptr))    \
  X(cuStreamCreate, hcq_CUresult, (hcq_CUstream * stream, unsigned int flags))                \
  X(cuStreamDestroy, hcq_CUresult, (hcq_CUstream stream))                                     \
  X(cuStreamSynchronize, hcq_CUresult, (hcq_CUstream stream))                                 \
  X(cuStreamQuery, hcq_CUresult, (hcq_CUstream stream))                                       \
  X(cuStreamWaitValue64, hcq_CUresult, (hcq_CUstream stream, hcq_CUdeviceptr addr,            \
      uint64_t value, unsigned int flags))                                                    \
  X(cuStreamWriteValue64, hcq_CUresult,                                                       \
    (hcq_CUstream stream, hcq_CUdeviceptr addr, uint64_t value, unsigned int flags))          \
  X(cuStreamWaitEvent, hcq_CUresult, (hcq_CUstream stream, hcq_CUevent event,                 \
      unsigned int flags))                                                                    \
  X(cuLaunchHostFunc, hcq_CUresult, (hcq_CUstream stream, hcq_CUhostFn fn, void *user_data))  \
  X(cuEventCreate, hcq_CUresult, (hcq_CUevent * event, unsigned int flags))                   \
  X(cuEventDestroy, hcq_CUresult, (hcq_CUevent event))                                        \
  X(cuEventRecord, hcq_CUresult, (hcq_CUevent event, hcq_CUstream stream))                    \
  X(cuEventQuery, hcq_CUresult, (hcq_CUevent event))                                          \
  X(cuEventElapsedTime, hcq_CUresult, (float *ms, hcq_CUevent start, hcq_CUevent end))        \
  X(cuModuleLoadDataEx, hcq_CUresult,                                                         \
    (hcq_CUmodule * module, const void *image, unsigned int noptions, int *options,           \
        void **values))                                                                       \
  X(cuModuleUnload, hcq_CUresult, (hcq_CUmodule module))                                      \
  X(cuModuleGetFunction, hcq_CUresult, (hcq_CUfunction * fn, hcq_CUmodule module,             \
      const char *name))                                                                      \
  X(cuLaunchKernel, hcq_CUresult,                                                             \
    (hcq_CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,   \
        unsigned int by,                                                                      \
     unsigned int bz, unsigned int shared, hcq_CUstream stream, void **params, void **extra)) \
  X(cuGraphCreate, hcq_CUresult, (hcq_CUgraph * graph, unsigned int flags))                   \
  X(cuGraphDestroy, hcq_CUresult, (hcq_CUgraph graph))                                        \
  X(cuGraphAddKernelNode, hcq_CUresult,                                                       \
    (hcq_CUgraphNode * node, hcq_CUgraph graph, const hcq_CUgraphNode *deps, size_t ndeps,    \
     const hcq_CUDA_KERNEL_NODE_PARAMS *params))                                              \
  X(cuGraphAddMemcpyNode, hcq_CUresult,                                                       \
    (hcq_CUgraphNode * node, hcq_CUgraph graph, const hcq_CUgraphNode *deps, size_t ndeps,    \
     const hcq_CUDA_MEMCPY3D *params, hcq_CUcontext ctx))                                     \
  X(cuGraphAddEmptyNode, hcq_CUresult,                                                        \
    (hcq_CUgraphNode * node, hcq_CUgraph graph, const hcq_CUgraphNode *deps, size_t ndeps))   \
  X(cuGraphInstantiateWithFlags, hcq_CUresult, (hcq_CUgraphExec * exec, hcq_CUgraph graph,    \
      unsigned long long flags))                                                              \
  X(cuGraphExecDestroy, hcq_CUresult, (hcq_CUgraphExec exec))                                 \
  X(cuGraphLaunch, hcq_CUresult, (hcq_CUgraphExec exec, hcq_CUstream stream))                 \
  X(cuGraphExecKernelNodeSetParams, hcq_CUresult,                                             \
    (hcq_CUgraphExec exec, hcq_CUgraphNode node, const hcq_CUDA_KERNEL_NODE_PARAMS *params))  \
  X(cuGraphExecMemcpyNodeSetParams, hcq_CUresult,                                             \
    (hcq_CUgraphExec exec, hcq_CUgraphNode node, const hcq_CUDA_MEMCPY3D *params,             \
        hcq_CUcontext ctx))                                                                   \
  X(cuGraphNodeSetEnabled, hcq_CUresult, (hcq_CUgraphExec exec, hcq_CUgraphNode node,         \
      unsigned int enabled))
// clang-format on

typedef struct hcq__cuda_api {
  void *lib;
  int driver_version; /* e.g. 12080 */
  char path[256];     /* the library that was loaded */
#define HCQ__CUDA_FIELD(name, ret, params) ret(*name) params;
  HCQ_CUDA_ENTRY_POINTS(HCQ__CUDA_FIELD)
#undef HCQ__CUDA_FIELD
  /* Optional, NULL where the driver is older: cuFuncLoad (CUDA 12.4), fetched at its own ABI
   * version. It finishes loading a function the driver loads lazily (CUDA_MODULE_LOADING=LAZY, the
   * default from 12.2), which a first launch would otherwise do, synchronising the context. */
  hcq_CUresult (*cuFuncLoad)(hcq_CUfunction fn);
} hcq__cuda_api_t;

/* Loads libcuda once per process (HCQ_CUDA_LIBRARY names another library, such as the tests'
 * stand-in driver), fetches every entry point and calls cuInit; NULL, with why in *out_why, when
 * there is no usable driver. Any thread. */
const hcq__cuda_api_t *hcq__cuda_api(const char **out_why);

/* "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)" for messages. */
void hcq__cuda_error_text(hcq_CUresult rc, char *out, size_t size);

#endif
