/* Which cores each open CPU device uses. Recomputed whenever a CPU device opens or closes: the
 * process's cores (its affinity mask) are split into contiguous, disjoint shares, one per device in
 * opening order; with more devices than cores each device gets one core, shared round-robin.
 * HCQ_CPU_THREADS (or hcq_device_options_t.threads) fixes a device's thread count instead; its
 * cores then follow the others' round-robin. */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/device.h"
#include "core/host_wait.h"
#include "core/options.h"
#include "cpu/cpu_internal.h"
#include "cpu/cpu_testing.h"

#define MAX_CPU_DEVICES 256
#define MAX_CORES 1024

static pthread_mutex_t g_layout_lock = PTHREAD_MUTEX_INITIALIZER;
static hcq_device_t *g_devs[MAX_CPU_DEVICES];
static size_t g_ndevs;
static int g_cores[MAX_CORES];
static int g_ncores;
/* Whether some core runs no engine (a waiting application thread has somewhere else to be). */
static _Atomic bool g_spare_core;
static _Atomic unsigned g_busy_threads; /* engines and helpers of every CPU device (the layout's) */

/* This process's place among the processes of one parallel job on this machine, from the launcher
 * (Open MPI, MPICH/Hydra, Slurm); false when it says nothing. */
static bool local_rank(int *rank, int *size) {
  static const char *const pairs[][2] = {
      {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
      {"SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"}};
  for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
    const char *r = getenv(pairs[i][0]), *n = getenv(pairs[i][1]);
    if (!r || !n) continue;
    char *e1, *e2;
    long rv = strtol(r, &e1, 10), nv = strtol(n, &e2, 10);
    if (*r && *n && !*e1 && !*e2 && nv > 1 && rv >= 0 && rv < nv && nv <= MAX_CORES) {
      *rank = (int)rv, *size = (int)nv;
      return true;
    }
  }
  return false;
}

static void load_cores(void) {
  if (g_ncores) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE && g_ncores < MAX_CORES; c++)
      if (CPU_ISSET(c, &set)) g_cores[g_ncores++] = c;
  if (!g_ncores) g_cores[g_ncores++] = 0;
  /* Processes of one job started unbound (mpirun --bind-to none) all see every core, and each would
   * pin its first engine to the first one. Each starts its cores at its own share instead (local
   * rank r of n: at core r * cores / n), so their engines have cores of their own, and keeps the
   * others for helpers: pipeline stages take turns, and a stage at work may use every core while
   * the others wait. */
  int rank, size;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (local_rank(&rank, &size) && online == g_ncores) {
    int first = g_ncores >= size ? (int)((long)rank * g_ncores / size) : rank % g_ncores,
        rotated[MAX_CORES];
    for (int k = 0; k < g_ncores; k++) rotated[k] = g_cores[(first + k) % g_ncores];
    memcpy(g_cores, rotated, sizeof(int) * (size_t)g_ncores);
  }
}

static unsigned fixed_threads(hcq_device_t *dev) {
  unsigned asked = hcq__cpu_share(dev)->threads_asked;
  return asked ? asked : hcq__options()->cpu_threads;
}

/* Layout lock held. */
static void relayout(void) {
  unsigned n = (unsigned)g_ncores, m = (unsigned)g_ndevs, next = 0, engines = 0, busy = 0;
  int cores[MAX_CORES];
  for (unsigned i = 0; i < m; i++) {
    hcq_device_t *dev = g_devs[i];
    unsigned want = fixed_threads(dev);
    if (!want) want = m <= n ? n / m + (i < n % m) : 1;
    if (want > MAX_CORES) want = MAX_CORES;
    busy += want;
    for (unsigned k = 0; k < want; k++) cores[k] = g_cores[(next + k) % n];
    next = (next + want) % n;
    hcq__cpu_apply_layout(dev, cores, want);
    engines++;
    hcq__cpu_share_t *sh = hcq__cpu_share(dev);
    /* Atomic stores: waiting threads read the engine's core without the lock. */
    for (unsigned k = 0; k < want && k < HCQ__CPU_MAX_SHARE; k++)
      __atomic_store_n(&sh->cores[k], cores[k], __ATOMIC_RELAXED);
    __atomic_store_n(&sh->ncores, want, __ATOMIC_RELAXED);
  }
  atomic_store(&g_spare_core, engines < n);
  atomic_store(&g_busy_threads, busy);
}

void hcq__cpu_layout_add(hcq_device_t *dev) {
  pthread_mutex_lock(&g_layout_lock);
  load_cores();
  if (g_ndevs < MAX_CPU_DEVICES) {
    /* Opening order: g_devs stays sorted by dev->order (new devices come last). */
    g_devs[g_ndevs++] = dev;
  }
  relayout();
  pthread_mutex_unlock(&g_layout_lock);
}

void hcq__cpu_layout_remove(hcq_device_t *dev) {
  pthread_mutex_lock(&g_layout_lock);
  size_t k = 0;
  for (size_t i = 0; i < g_ndevs; i++)
    if (g_devs[i] != dev) g_devs[k++] = g_devs[i];
  g_ndevs = k;
  relayout();
  pthread_mutex_unlock(&g_layout_lock);
}

size_t hcq_device_cores(const hcq_device_t *dev, int *out_cores, size_t cap) {
  /* A device struct outlives its engine while objects of a closed device are alive. */
  if (!dev || dev->kind != HCQ_DEVICE_CPU || !dev->backend) return 0;
  pthread_mutex_lock(&g_layout_lock);
  const hcq__cpu_share_t *sh = hcq__cpu_share((hcq_device_t *)dev);
  size_t n = sh->ncores;
  for (size_t i = 0; i < n && i < cap && i < HCQ__CPU_MAX_SHARE && out_cores; i++)
    out_cores[i] = sh->cores[i];
  pthread_mutex_unlock(&g_layout_lock);
  return n;
}

size_t hcq__cpu_core_count(void) {
  pthread_mutex_lock(&g_layout_lock);
  load_cores();
  size_t n = (size_t)g_ncores;
  pthread_mutex_unlock(&g_layout_lock);
  return n;
}

bool hcq__cpu_waiter_sleeps_at_once(hcq_device_t *dev) {
  if (!atomic_load_explicit(&g_spare_core, memory_order_relaxed)) return false;
  int cpu = sched_getcpu();
  /* The first core of a CPU device's share runs its engine (read without the layout lock: a stale
   * answer only changes how the caller waits). */
  const hcq__cpu_share_t *sh = hcq__cpu_share(dev);
  return cpu >= 0 && __atomic_load_n(&sh->ncores, __ATOMIC_RELAXED) &&
         __atomic_load_n(&sh->cores[0], __ATOMIC_RELAXED) == cpu;
}

/* ---- is the host contended? ----
 *
 * /proc/loadavg's fourth field counts the threads runnable right now, machine-wide. Less this
 * process's busy threads (the layout's engines and helpers, and the caller), what is left runs
 * beside them: when that is at least half a thread per core in two samples in a row (10 ms apart:
 * one could catch a passing burst), the host is contended for the next 250 ms. The spin policy's
 * own sign (a spinner seen off its core, core/host_wait.h) counts too. */
#define CONTENDED_SAMPLE_NS UINT64_C(10000000)
#define CONTENDED_HOLD_NS UINT64_C(250000000)

static _Atomic uint64_t g_next_sample_ns, g_contended_until_ns;
static _Atomic int g_loadavg_fd = -2, g_streak;

/* Threads runnable machine-wide now, or -1 when /proc/loadavg cannot be read. */
static int runnable_now(void) {
  int fd = atomic_load_explicit(&g_loadavg_fd, memory_order_relaxed);
  if (fd == -2) {
    int opened = open("/proc/loadavg", O_RDONLY | O_CLOEXEC), expected = -2;
    if (!atomic_compare_exchange_strong(&g_loadavg_fd, &expected, opened) && opened >= 0)
      close(opened);
    fd = atomic_load(&g_loadavg_fd);
  }
  char buf[128];
  ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;
  if (n <= 0) return -1;
  buf[n] = 0;
  int running = -1;
  const char *slash = strchr(buf, '/');
  while (slash && slash > buf && slash[-1] >= '0' && slash[-1] <= '9') slash--;
  if (slash) running = atoi(slash);
  return running;
}

bool hcq__cpu_foreign_load_contends(int runnable, unsigned own, unsigned cores) {
  int foreign = runnable - (int)own;
  return runnable >= 0 && foreign > 0 && 2 * (unsigned)foreign >= cores;
}

_Atomic bool hcq__cpu_force_contended;

bool hcq__cpu_host_contended(void) {
  if (atomic_load_explicit(&hcq__cpu_force_contended, memory_order_relaxed)) return true;
  uint64_t now = hcq__now_ns();
  if (now >= atomic_load_explicit(&g_next_sample_ns, memory_order_relaxed)) {
    atomic_store_explicit(&g_next_sample_ns, now + CONTENDED_SAMPLE_NS, memory_order_relaxed);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned own = atomic_load_explicit(&g_busy_threads, memory_order_relaxed) + 1;
    if (hcq__cpu_foreign_load_contends(runnable_now(), own, cores > 0 ? (unsigned)cores : 1)) {
      if (atomic_fetch_add_explicit(&g_streak, 1, memory_order_relaxed) >= 1)
        atomic_store_explicit(&g_contended_until_ns, now + CONTENDED_HOLD_NS, memory_order_relaxed);
    } else {
      atomic_store_explicit(&g_streak, 0, memory_order_relaxed);
    }
  }
  return now < atomic_load_explicit(&g_contended_until_ns, memory_order_relaxed) ||
         hcq__host_contended_now();
}
