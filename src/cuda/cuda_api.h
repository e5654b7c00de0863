/* The few CUDA driver API types and entry points hcq uses, declared by us so the library builds on
 * machines without the CUDA toolkit. libcuda is loaded at run time (dlopen). */
#ifndef HCQ_CUDA_API_H
#define HCQ_CUDA_API_H

typedef int hcq_CUresult; /* 0 is CUDA_SUCCESS */
typedef int hcq_CUdevice;

/* X(name, return, parameters) */
#define HCQ_CUDA_ENTRY_POINTS(X)                                  \
  X(cuInit, hcq_CUresult, (unsigned int flags))                   \
  X(cuDriverGetVersion, hcq_CUresult, (int *version))             \
  X(cuDeviceGetCount, hcq_CUresult, (int *count))                 \
  X(cuDeviceGet, hcq_CUresult, (hcq_CUdevice * dev, int ordinal)) \
  X(cuDeviceGetName, hcq_CUresult, (char *name, int len, hcq_CUdevice dev))

typedef struct hcq__cuda_api {
  void *lib;
#define HCQ__CUDA_FIELD(name, ret, params) ret(*name) params;
  HCQ_CUDA_ENTRY_POINTS(HCQ__CUDA_FIELD)
#undef HCQ__CUDA_FIELD
} hcq__cuda_api_t;

/* Loads libcuda once per process and calls cuInit; NULL (with why) when there is no driver. */
const hcq__cuda_api_t *hcq__cuda_api(const char **out_why);

#endif
