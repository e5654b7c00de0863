/* Kernel fault reports (docs/errors.md, "Kernel crashes"): one process-wide handler for SIGSEGV,
 * SIGBUS, SIGFPE and SIGILL that lets backends name the kernel that died before the process ends
 * the way it would have. Backends register two kinds of helpers:
 *   - a claimer, for threads the backend runs kernels on itself (the CPU engines): it recognises
 *     its own thread, names the kernel, and may leave the handler (isolation);
 *   - a describer, for kernels that run on threads hcq did not start (a Vulkan driver's): on a
 *     fault no claimer owns, each appends which kernels it has in flight ("kernel fill (graph item
 *     3) on VULKAN:0's compute queue").
 * Everything they do runs in a signal handler: async-signal-safe only (no locks, no allocation, no
 * stdio); the line helpers below are. */
#ifndef HCQ_CORE_FAULT_H
#define HCQ_CORE_FAULT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hcq__fault_line {
  char buf[512];
  size_t len;
} hcq__fault_line_t;
void hcq__fault_put(hcq__fault_line_t *line, const char *s);
void hcq__fault_put_dec(hcq__fault_line_t *line, uint64_t v);
void hcq__fault_put_hex(hcq__fault_line_t *line, uint64_t v);
/* "SIGSEGV", ... */
const char *hcq__fault_signal_name(int sig);
/* Writes the line to stderr. */
void hcq__fault_write(const hcq__fault_line_t *line);

enum {
  HCQ__FAULT_NOT_MINE, /* not a thread of the claimer's */
  HCQ__FAULT_MINE,     /* the claimer's thread, not in a kernel: nothing to add */
  HCQ__FAULT_REPORTED, /* the claimer's kernel: it wrote its line */
};
/* Called for a fault raised by the hardware (not sent with kill) on any thread. A claimer that
 * isolates the fault does not return (siglongjmp). */
typedef int (*hcq__fault_claim_fn)(int sig, const siginfo_t *info);
typedef void (*hcq__fault_describer_fn)(hcq__fault_line_t *line);

/* Registering installs the handler (once per process); registering the same function twice is a
 * no-op. Slots are few and never emptied: backends register once, before their first kernel. */
void hcq__fault_add_claimer(hcq__fault_claim_fn fn);
void hcq__fault_add_describer(hcq__fault_describer_fn fn);

#endif
