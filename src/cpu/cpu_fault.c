/* Kernel faults on CPU devices (docs/errors.md, "Kernel crashes"): a kernel that dies with SIGSEGV,
 * SIGBUS, SIGFPE or SIGILL is named (kernel, device, graph item) on stderr before the process dies,
 * or, with isolation on, its device is marked lost and the thread goes back to its loop.
 *
 * The handler is installed once, when the first CPU device opens, and chains to whatever handler
 * was there before (the application's, a sanitizer's, or the default action), so hcq only adds a
 * line to what would have happened anyway. Faults outside a kernel are not ours: they go straight
 * to the previous handler. Everything in the handler is async-signal-safe: no stdio, no locks. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/cpu_internal.h"

static const int k_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
#define NSIGNALS (sizeof(k_signals) / sizeof(k_signals[0]))
static struct sigaction g_previous[NSIGNALS];
static pthread_once_t g_install_once = PTHREAD_ONCE_INIT;

_Thread_local hcq__cpu_fault_ctx_t *hcq__cpu_fault_ctx;

/* ---- async-signal-safe formatting ---- */

typedef hcq__fault_line_t line_t;

static void put(line_t *l, const char *s) {
  while (*s && l->len < sizeof(l->buf) - 1) l->buf[l->len++] = *s++;
}

void hcq__fault_put(hcq__fault_line_t *l, const char *s) { put(l, s); }

static void put_dec(line_t *l, uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n && l->len < sizeof(l->buf) - 1) l->buf[l->len++] = tmp[--n];
}

void hcq__fault_put_dec(hcq__fault_line_t *l, uint64_t v) { put_dec(l, v); }

static void put_hex(line_t *l, uint64_t v) {
  char tmp[16];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  put(l, "0x");
  while (n && l->len < sizeof(l->buf) - 1) l->buf[l->len++] = tmp[--n];
}

static const char *signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    default: return "a signal";
  }
}

void hcq__cpu_fault_describe(const hcq__cpu_fault_ctx_t *ctx, int sig, uint64_t addr, char *out, size_t size) {
  line_t l = {.len = 0};
  const uint32_t *cmd = ctx->current_command ? ctx->current_command(ctx) : NULL;
  const hcq_program_t *p = NULL;
  uint32_t tag = 0;
  if (cmd && HCQ__HDR_OP(cmd[0]) == HCQ__OP_EXEC) {
    p = (const hcq_program_t *)(uintptr_t)hcq__rd64(cmd + HCQ__EXEC_PROGRAM);
    tag = cmd[HCQ__EXEC_TAG];
  }
  put(&l, "kernel ");
  put(&l, p ? p->name : "?");
  if (tag) {
    put(&l, " (graph item ");
    put_dec(&l, tag - 1);
    put(&l, ")");
  }
  put(&l, " on ");
  put(&l, ctx->device->name);
  put(&l, " faulted with ");
  put(&l, signal_name(sig));
  put(&l, " at address ");
  put_hex(&l, addr);
  /* A kernel that reads more buffers or values than its launch passed dereferences whatever
   * follows them: say so unless the program declared what it reads (then launches are checked). */
  if (p && !atomic_load_explicit(&((hcq_program_t *)p)->args, memory_order_relaxed))
    put(&l, " (was it given fewer buffers or values than it reads? hcq_program_declare_args checks every launch)");
  l.buf[l.len] = '\0';
  size_t n = l.len < size - 1 ? l.len : size - 1;
  memcpy(out, l.buf, n);
  out[n] = '\0';
}

static void chain(int sig, siginfo_t *info, void *uctx) {
  size_t i = 0;
  while (i < NSIGNALS && k_signals[i] != sig) i++;
  if (i == NSIGNALS) return;
  struct sigaction *prev = &g_previous[i];
  if (prev->sa_flags & SA_SIGINFO) {
    if (prev->sa_sigaction) {
      prev->sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
    prev->sa_handler(sig);
    return;
  }
  /* Default action: restore it and return; the faulting instruction runs again and the process
   * ends the way it would have without hcq (a core dump, exit status 128 + signal). */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  if (info->si_code <= 0) raise(sig); /* sent by kill(): it would not come back by itself */
}

/* Backends whose kernels run on threads hcq did not start (a Vulkan driver's). Slots are filled
 * once, before the backend's first kernel, and never emptied. */
#define MAX_DESCRIBERS 4
static _Atomic(hcq__fault_describer_fn) g_describers[MAX_DESCRIBERS];

void hcq__fault_add_describer(hcq__fault_describer_fn fn) {
  hcq__cpu_fault_install();
  for (size_t i = 0; i < MAX_DESCRIBERS; i++) {
    hcq__fault_describer_fn expected = NULL;
    if (atomic_load(&g_describers[i]) == fn) return;
    if (atomic_compare_exchange_strong(&g_describers[i], &expected, fn)) return;
  }
}

/* A fault outside a CPU kernel: if a backend has kernels in flight on threads that are not ours,
 * this fault is most likely one of them (a kernel given a bad address faults inside the driver). */
static void report_foreign(int sig, const siginfo_t *info) {
  line_t what = {.len = 0};
  for (size_t i = 0; i < MAX_DESCRIBERS; i++) {
    hcq__fault_describer_fn fn = atomic_load(&g_describers[i]);
    if (fn) fn(&what);
  }
  if (!what.len) return;
  what.buf[what.len] = '\0';
  line_t l = {.len = 0};
  put(&l, "hcq: ");
  put(&l, signal_name(sig));
  put(&l, " at address ");
  put_hex(&l, (uint64_t)(uintptr_t)info->si_addr);
  put(&l, " outside any CPU kernel, while kernels were running in a driver: ");
  put(&l, what.buf);
  put(&l, "; most likely one of them faulted (was it given fewer buffers or values than it reads?); the process ends\n");
  ssize_t ignored = write(2, l.buf, l.len);
  (void)ignored;
}

static void on_fault(int sig, siginfo_t *info, void *uctx) {
  hcq__cpu_fault_ctx_t *ctx = hcq__cpu_fault_ctx;
  const uint32_t *cmd = ctx && ctx->current_command ? ctx->current_command(ctx) : NULL;
  if (!cmd || HCQ__HDR_OP(cmd[0]) != HCQ__OP_EXEC || info->si_code <= 0) {
    if (!ctx && info->si_code > 0) report_foreign(sig, info);
    chain(sig, info, uctx);
    return;
  }
  uint64_t addr = (uint64_t)(uintptr_t)info->si_addr;
  if (ctx->jump) {
    ctx->fault_signal = sig;
    ctx->fault_addr = addr;
    siglongjmp(*ctx->jump, 1);
  }
  line_t l = {.len = 0};
  char what[400];
  hcq__cpu_fault_describe(ctx, sig, addr, what, sizeof(what));
  put(&l, "hcq: ");
  put(&l, what);
  put(&l, "; the process ends (HCQ_CPU_ISOLATE=1 would mark the device lost instead)\n");
  ssize_t ignored = write(2, l.buf, l.len);
  (void)ignored;
  chain(sig, info, uctx);
}

static void install(void) {
  for (size_t i = 0; i < NSIGNALS; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fault;
    /* NODEFER: an isolated fault leaves the handler by siglongjmp without restoring the mask. */
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(k_signals[i], &sa, &g_previous[i]);
  }
}

void hcq__cpu_fault_install(void) { pthread_once(&g_install_once, install); }

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
