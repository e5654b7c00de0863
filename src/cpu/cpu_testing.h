/* The CPU backend's hooks for tests: counters of what its engines and waiting hosts did, the rule
 * that decides whether other processes contend for the cores, and a switch that forces it.
 * Production code never includes this header (cpu_device.c and cpu_layout.c define them). */
#ifndef HCQ_CPU_TESTING_H
#define HCQ_CPU_TESTING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hcq/device.h"

/* True makes hcq__cpu_host_contended say so whatever the load. */
extern _Atomic bool hcq__cpu_force_contended;
/* The rule hcq__cpu_host_contended (cpu_internal.h) applies to a sample: runnable threads
 * machine-wide (-1: unknown), this process's busy threads and the cores; true when the others make
 * at least half a thread per core. */
bool hcq__cpu_foreign_load_contends(int runnable, unsigned own, unsigned cores);

/* Passes in which a waiting host thread moved dev's queues (hcq__cpu_host_run; 0 for other
 * devices). */
uint64_t hcq__cpu_host_passes(hcq_device_t *dev);
/* Kernels dev's engine read the clock for, to stamp them for hang reports (cpu_engine.c,
 * run_kernels: one in a window while kernels are fast, each one while they are slow; tests). */
uint64_t hcq__cpu_kernel_stamps(hcq_device_t *dev);
/* Idle spins of dev's engine that a short last idle spell lengthened (cpu_engine.c, cadence_budget;
 * tests). */
uint64_t hcq__cpu_cadence_spins(hcq_device_t *dev);
/* Sleeps of waiting hosts in hcq__cpu_pool_assist, and those a wake (a job, the end of a queue
 * entry) ended rather than their time limit (cpu_pool.c; tests). */
void hcq__cpu_assist_sleeps(hcq_device_t *dev, uint64_t *sleeps, uint64_t *woken);
/* How often a waiting host handed the queues back to the engine with a cross-rank transfer still in
 * flight (tests: it polls such a transfer for HCQ_MPI_SPIN_NS, so normally never). */
uint64_t hcq__cpu_host_handbacks(hcq_device_t *dev);

#endif
