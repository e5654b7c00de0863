/* CPU backend pieces shared between its files. */
#ifndef HCQ_CPU_INTERNAL_H
#define HCQ_CPU_INTERNAL_H

#include <setjmp.h>

#include "core/memory.h"
#include "core/program.h"
#include "hcq/memory.h"

/* Compiles source with the system C compiler into a cached shared object and resolves entry. */
HCQ_MUST_USE hcq_status_t hcq__cpu_compile(hcq_device_t *dev, const char *entry, const char *source,
                                           hcq__program_impl_t *out);
void hcq__cpu_unload(hcq_device_t *dev, hcq__program_impl_t *impl);

/* ---- threads and cores (cpu_layout.c) ----
 * The CPU devices open together share the process's cores: each gets its own cores where there are
 * enough (its engine pinned to the first, its helpers to the rest), so no core runs two busy hcq
 * threads. HCQ_CPU_THREADS (or the device option) sets the threads per device instead. */
#define HCQ__CPU_MAX_HELPERS 255
void hcq__cpu_layout_add(hcq_device_t *dev);
void hcq__cpu_layout_remove(hcq_device_t *dev);
/* Called by the layout (its lock held) with the cores a device may use, first for its engine. */
void hcq__cpu_apply_layout(hcq_device_t *dev, const int *cores, unsigned ncores);
/* A CPU device's place in the layout, kept in its engine. */
#define HCQ__CPU_MAX_SHARE 64
typedef struct hcq__cpu_share {
  unsigned threads_asked; /* by the device option (0: the layout decides) */
  unsigned ncores;        /* the cores its threads are pinned to (layout lock; read atomically) */
  int cores[HCQ__CPU_MAX_SHARE];
} hcq__cpu_share_t;
hcq__cpu_share_t *hcq__cpu_share(hcq_device_t *dev);
/* The cores this process may use. */
size_t hcq__cpu_core_count(void);
/* The device's waiter_sleeps_at_once (core/backend.h): the caller is on its engine's core. */
bool hcq__cpu_waiter_sleeps_at_once(hcq_device_t *dev);
/* Whether other processes' threads compete with this one's for the cores now (cpu_layout.c): a
 * waiting host thread then works on shared launches (hcq__cpu_pool_assist) instead of sleeping. */
bool hcq__cpu_host_contended(void);

/* ---- kernel faults (cpu_fault.c) ----
 * Every thread that runs kernels points hcq__cpu_fault_ctx at its context; the fault handler reads
 * the command being run from it to name the kernel and item. With isolation, jump is armed around
 * each kernel call and the handler returns through it with fault_signal/fault_addr set. */
typedef struct hcq__cpu_fault_ctx {
  hcq_device_t *device;
  const uint32_t *(*current_command)(const struct hcq__cpu_fault_ctx *ctx); /* async-signal-safe */
  const void *owner;
  sigjmp_buf *jump;
  volatile int fault_signal;
  volatile uint64_t fault_addr;
} hcq__cpu_fault_ctx_t;
extern _Thread_local hcq__cpu_fault_ctx_t *hcq__cpu_fault_ctx;

/* Registers the CPU claimer with the core fault handler (core/fault.h), installing it once. */
void hcq__cpu_fault_install(void);
/* "kernel mix (graph item 3) on CPU:0 faulted with SIGSEGV at address 0x10" */
void hcq__cpu_fault_describe(const hcq__cpu_fault_ctx_t *ctx, int sig, uint64_t addr, char *out,
                             size_t size);
/* An alternate signal stack for a kernel thread: allocated by the thread's creator (threads
 * allocate nothing), installed by the thread, uninstalled before it exits; NULL is fine (no
 * alternate stack). */
#define HCQ__CPU_FAULT_STACK (64 * 1024)
void *hcq__cpu_fault_stack_alloc(void);
void hcq__cpu_fault_thread_init(void *stack);
void hcq__cpu_fault_thread_exit(void *stack);

/* ---- memory (cpu_memory.c): the CPU device's mem_alloc and mem_free ---- */
HCQ_MUST_USE hcq_status_t hcq__cpu_mem_alloc(hcq_device_t *dev, uint64_t size, uint32_t flags,
                                             hcq__mem_t *out);
void hcq__cpu_mem_free(hcq_device_t *dev, hcq__mem_t *mem);
/* HCQ_VALIDATE=1 (docs/errors.md, "Out-of-bounds accesses"): CPU buffers sit between guard pages,
 * with canaries in the slack around them. bounds_check, after each kernel (w its EXEC command),
 * compares the canaries of the buffers w was given; on a change it marks dev lost, naming the
 * kernel, the argument, the buffer and the offsets, and returns false. guard_describe says which
 * buffer's guard page addr (a fault address) is in, and where, for the fault report; false when
 * none. Validation arms the fault jump around every kernel (cpu_engine.c, cpu_pool.c) even without
 * HCQ_CPU_ISOLATE; the handler takes it only for a guard page fault. */
bool hcq__cpu_bounds_check(hcq_device_t *dev, const uint32_t *w);
bool hcq__cpu_guard_hit(uint64_t addr); /* addr is in a guard page (for the fault handler) */
bool hcq__cpu_guard_describe(hcq_device_t *dev, const uint32_t *w, uint64_t addr, char *out,
                             size_t size);
/* The host's memory (MemTotal, MemAvailable), bounded by the process's cgroup v2 limit. */
HCQ_MUST_USE hcq_status_t hcq__cpu_memory_info(hcq_device_t *dev, hcq_device_memory_t *out);

#endif
