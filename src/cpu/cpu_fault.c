/* Kernel faults on CPU devices (docs/errors.md, "Kernel crashes"): a kernel that dies with SIGSEGV,
 * SIGBUS, SIGFPE or SIGILL is named (kernel, device, graph item) on stderr before the process dies,
 * or, with isolation on, its device is marked lost and the thread goes back to its loop. The
 * handler is the core's (core/fault.h); this file is the CPU backend's claimer in it: a fault on a
 * thread running one of its kernels is the backend's. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/command.h"
#include "core/device.h"
#include "core/fault.h"
#include "core/object.h"
#include "cpu/cpu_internal.h"

_Thread_local hcq__cpu_fault_ctx_t *hcq__cpu_fault_ctx;

void hcq__cpu_fault_describe(const hcq__cpu_fault_ctx_t *ctx, int sig, uint64_t addr, char *out,
                             size_t size) {
  hcq__fault_line_t l = {.len = 0};
  const uint32_t *cmd = ctx->current_command ? ctx->current_command(ctx) : NULL;
  const hcq_program_t *p = NULL;
  uint32_t tag = 0;
  if (cmd && HCQ__HDR_OP(cmd[0]) == HCQ__OP_EXEC) {
    p = (const hcq_program_t *)(uintptr_t)hcq__rd64(cmd + HCQ__EXEC_PROGRAM);
    tag = cmd[HCQ__EXEC_TAG];
  }
  hcq__fault_put(&l, "kernel ");
  hcq__fault_put(&l, p ? p->name : "?");
  if (tag) {
    hcq__fault_put(&l, " (graph item ");
    hcq__fault_put_dec(&l, tag - 1);
    hcq__fault_put(&l, ")");
  }
  hcq__fault_put(&l, " on ");
  hcq__fault_put(&l, ctx->device->name);
  hcq__fault_put(&l, " faulted with ");
  hcq__fault_put(&l, hcq__fault_signal_name(sig));
  hcq__fault_put(&l, " at address ");
  hcq__fault_put_hex(&l, addr);
  /* Under HCQ_VALIDATE the address may be a buffer's guard page: then that is the whole story.
   * A guard page fault always jumps back (claim), so naming the buffer (which takes locks) runs
   * outside the handler; inside it, for other faults, the lookup only finds no guard page. */
  char guard[300];
  bool guarded = p && hcq__cpu_guard_describe(ctx->device, cmd, addr, guard, sizeof(guard));
  if (guarded) {
    hcq__fault_put(&l, ": it ");
    hcq__fault_put(&l, guard);
  }
  /* A kernel that reads more buffers or values than its launch passed dereferences whatever
   * follows them: say so unless the program declared what it reads (then launches are checked). */
  if (!guarded && p && !atomic_load_explicit(&((hcq_program_t *)p)->args, memory_order_relaxed))
    hcq__fault_put(&l,
                   " (was it given fewer buffers or values than it reads? hcq_program_declare_args "
                   "checks every launch)");
  l.buf[l.len] = '\0';
  size_t n = l.len < size - 1 ? l.len : size - 1;
  memcpy(out, l.buf, n);
  out[n] = '\0';
}

/* The claimer: threads that run CPU kernels point hcq__cpu_fault_ctx at their context. */
static int claim(int sig, const siginfo_t *info) {
  hcq__cpu_fault_ctx_t *ctx = hcq__cpu_fault_ctx;
  if (!ctx) return HCQ__FAULT_NOT_MINE;
  const uint32_t *cmd = ctx->current_command ? ctx->current_command(ctx) : NULL;
  if (!cmd || HCQ__HDR_OP(cmd[0]) != HCQ__OP_EXEC) return HCQ__FAULT_MINE;
  uint64_t addr = (uint64_t)(uintptr_t)info->si_addr;
  /* Under HCQ_VALIDATE the jump is armed for every kernel, but only a guard page fault is taken
   * back without HCQ_CPU_ISOLATE: any other fault still ends the process, named, as it would. */
  if (ctx->jump && (ctx->device->isolate || hcq__cpu_guard_hit(addr))) {
    ctx->fault_signal = sig;
    ctx->fault_addr = addr;
    siglongjmp(*ctx->jump, 1);
  }
  hcq__fault_line_t l = {.len = 0};
  char what[400];
  hcq__cpu_fault_describe(ctx, sig, addr, what, sizeof(what));
  hcq__fault_put(&l, "hcq: ");
  hcq__fault_put(&l, what);
  hcq__fault_put(&l, "; the process ends (HCQ_CPU_ISOLATE=1 would mark the device lost instead)\n");
  hcq__fault_write(&l);
  return HCQ__FAULT_REPORTED;
}

void hcq__cpu_fault_install(void) { hcq__fault_add_claimer(claim); }

/* A faulting kernel may have overflowed its stack: the handler runs on a stack of its own. */
void *hcq__cpu_fault_stack_alloc(void) { return malloc(HCQ__CPU_FAULT_STACK); }

void hcq__cpu_fault_thread_init(void *stack) {
  if (!stack) return;
  stack_t ss = {.ss_sp = stack, .ss_size = HCQ__CPU_FAULT_STACK, .ss_flags = 0};
  sigaltstack(&ss, NULL);
}

void hcq__cpu_fault_thread_exit(void *stack) {
  if (!stack) return;
  stack_t ss = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
  sigaltstack(&ss, NULL);
}
