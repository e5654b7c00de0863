/* Force-included (-include) into every source of the sim build (tests/sim/CMakeLists.txt): the SIM
 * kind after the public kinds and its row after the others, through the hooks the kind list
 * (include/hcq/device.h) and the backend table (src/backends.c) leave for test-only backends. */
#ifndef HCQ_TESTS_SIM_BUILD_H
#define HCQ_TESTS_SIM_BUILD_H

#define HCQ__BUILD_DEVICE_KINDS(X, arg) X(SIM, "SIM", arg)
#define HCQ__BUILD_BACKEND_ROWS &hcq__sim_backend,

struct hcq__backend;
extern const struct hcq__backend hcq__sim_backend;

#endif
