/* SIM: a host-simulated device kind built only for the tests (docs/new-backend.md), the proof that
 * a backend is a folder, a row and a CMake line: this folder holds all of it, and the conformance
 * suite runs on it (suite conformance_SIM) with no line elsewhere.
 *
 * It simulates a device on the host by lending its devices the CPU backend's engine and compiler:
 * open makes the device a CPU device under the SIM kind (dev->kind stays SIM, so names, errors,
 * graph classes and the backend row are SIM's), and the row says what the core needs to know:
 * C kernels with the CPU ABI (so the test kernels, the models and graph files' "c" sources serve
 * it), no precompiled formats, no graph runner of its own (the HCQ graph runs its graphs). A real
 * backend writes its engine where this one borrows the CPU's. */
#include <stdio.h>

#include "core/backend.h"

extern const hcq__backend_t hcq__cpu_backend;

static void sim_query(hcq_device_info_t *info) {
  hcq__cpu_backend.query(info);
  info->kind = HCQ_DEVICE_SIM;
  char cpu[sizeof(info->description)];
  snprintf(cpu, sizeof(cpu), "%s", info->description);
  snprintf(info->description, sizeof(info->description),
           "host-simulated test device on the CPU engine (%.200s)", cpu);
}

static hcq_status_t sim_open(int index, const hcq_device_options_t *opts, hcq_device_t *dev) {
  return hcq__cpu_backend.open(index, opts, dev);
}

const hcq__backend_t hcq__sim_backend = {
    .kind = HCQ_DEVICE_SIM,
    .source_key = "c",
    .query = sim_query,
    .open = sim_open,
    .binary_formats = 0,
    .kernel_caps = HCQ_CAP_HOST_CALLABLE | HCQ_CAP_COMPILE_C,
    .no_compile_why = "SIM devices load no precompiled kernels; their kernels come from C source",
};
