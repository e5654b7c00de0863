/* The process-wide kernel fault handler (core/fault.h).
 *
 * It is installed when the first backend registers, and chains to whatever handler was there
 * before (the application's, a sanitizer's, or the default action), so hcq only adds a line to what
 * would have happened anyway. Faults no backend claims or describes are not ours: they go straight
 * to the previous handler. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "core/fault.h"

static const int k_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
#define NSIGNALS (sizeof(k_signals) / sizeof(k_signals[0]))
static struct sigaction g_previous[NSIGNALS];
static pthread_once_t g_install_once = PTHREAD_ONCE_INIT;

#define MAX_HELPERS 4
static _Atomic(hcq__fault_claim_fn) g_claimers[MAX_HELPERS];
static _Atomic(hcq__fault_describer_fn) g_describers[MAX_HELPERS];

/* ---- async-signal-safe formatting ---- */

void hcq__fault_put(hcq__fault_line_t *l, const char *s) {
  while (*s && l->len < sizeof(l->buf) - 1) l->buf[l->len++] = *s++;
}

static void put_digits(hcq__fault_line_t *l, uint64_t v, unsigned base) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v % base];
    v /= base;
  } while (v);
  while (n && l->len < sizeof(l->buf) - 1) l->buf[l->len++] = tmp[--n];
}

void hcq__fault_put_dec(hcq__fault_line_t *l, uint64_t v) { put_digits(l, v, 10); }

void hcq__fault_put_hex(hcq__fault_line_t *l, uint64_t v) {
  hcq__fault_put(l, "0x");
  put_digits(l, v, 16);
}

const char *hcq__fault_signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    default: return "a signal";
  }
}

void hcq__fault_write(const hcq__fault_line_t *l) {
  ssize_t ignored = write(2, l->buf, l->len);
  (void)ignored;
}

/* ---- the handler ---- */

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

/* A fault on no backend's own thread: if a backend has kernels in flight on threads that are not
 * ours, this fault is most likely one of them (a kernel given a bad address faults inside the
 * driver). */
static void report_foreign(int sig, const siginfo_t *info) {
  hcq__fault_line_t what = {.len = 0};
  for (size_t i = 0; i < MAX_HELPERS; i++) {
    hcq__fault_describer_fn fn = atomic_load(&g_describers[i]);
    if (fn) fn(&what);
  }
  if (!what.len) return;
  what.buf[what.len] = '\0';
  hcq__fault_line_t l = {.len = 0};
  hcq__fault_put(&l, "hcq: ");
  hcq__fault_put(&l, hcq__fault_signal_name(sig));
  hcq__fault_put(&l, " at address ");
  hcq__fault_put_hex(&l, (uint64_t)(uintptr_t)info->si_addr);
  hcq__fault_put(&l, " outside any CPU kernel, while kernels were running in a driver: ");
  hcq__fault_put(&l, what.buf);
  hcq__fault_put(&l,
                 "; most likely one of them faulted (was it given fewer buffers or values than it "
                 "reads?); the "
                 "process ends\n");
  hcq__fault_write(&l);
}

static void on_fault(int sig, siginfo_t *info, void *uctx) {
  if (info->si_code > 0) {
    int claimed = HCQ__FAULT_NOT_MINE;
    for (size_t i = 0; i < MAX_HELPERS && claimed == HCQ__FAULT_NOT_MINE; i++) {
      hcq__fault_claim_fn fn = atomic_load(&g_claimers[i]);
      if (fn) claimed = fn(sig, info);
    }
    if (claimed == HCQ__FAULT_NOT_MINE) report_foreign(sig, info);
  }
  chain(sig, info, uctx);
}

static void install(void) {
  for (size_t i = 0; i < NSIGNALS; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fault;
    /* ONSTACK: a kernel that overflowed its stack is handled on the thread's alternate stack, if it
     * has one. NODEFER: an isolated fault leaves the handler by siglongjmp without restoring the
     * mask. */
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(k_signals[i], &sa, &g_previous[i]);
  }
}

void hcq__fault_add_claimer(hcq__fault_claim_fn fn) {
  pthread_once(&g_install_once, install);
  for (size_t i = 0; i < MAX_HELPERS; i++) {
    hcq__fault_claim_fn expected = NULL;
    if (atomic_load(&g_claimers[i]) == fn ||
        atomic_compare_exchange_strong(&g_claimers[i], &expected, fn))
      return;
  }
}

void hcq__fault_add_describer(hcq__fault_describer_fn fn) {
  pthread_once(&g_install_once, install);
  for (size_t i = 0; i < MAX_HELPERS; i++) {
    hcq__fault_describer_fn expected = NULL;
    if (atomic_load(&g_describers[i]) == fn ||
        atomic_compare_exchange_strong(&g_describers[i], &expected, fn))
      return;
  }
}
