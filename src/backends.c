/* The backend table (src/core/backend.h): one row per device kind. A new backend
 * (docs/new-backend.md) adds its folder, its sources to the build and one line here. This list is
 * the one thing the core takes from the layer above it: data it reads, linked in with the backends
 * (tests/layers/check_layers.py allows exactly this reference). */
#include "core/backend.h"

extern const hcq__backend_t hcq__cpu_backend, hcq__cuda_backend, hcq__vk_backend, hcq__mtl_backend;
#ifndef HCQ__BUILD_BACKEND_ROWS
#define HCQ__BUILD_BACKEND_ROWS
#endif

const hcq__backend_t *const hcq__backends[] = {
    &hcq__cpu_backend,
    &hcq__cuda_backend,
    &hcq__vk_backend,
    &hcq__mtl_backend,
    HCQ__BUILD_BACKEND_ROWS /* rows a build adds for its test-only backends (include/hcq/device.h)
                             */
        NULL,
};
