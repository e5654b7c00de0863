/* The backend table (src/core/backend.h): one row per device kind. A new backend adds its folder,
 * its sources to the build and one line here. */
#include "core/backend.h"

extern const hcq__backend_t hcq__cpu_backend, hcq__cuda_backend, hcq__vulkan_backend, hcq__metal_backend;

const hcq__backend_t *const hcq__backends[] = {
    &hcq__cpu_backend,
    &hcq__cuda_backend,
    &hcq__vulkan_backend,
    &hcq__metal_backend,
    NULL,
};

const hcq__backend_t *hcq__backend(hcq_device_kind_t kind) {
  for (const hcq__backend_t *const *b = hcq__backends; *b; b++)
    if ((*b)->kind == kind) return *b;
  return NULL;
}
