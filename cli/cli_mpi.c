/* The hcq tool under mpirun (docs/mpi.md): every rank runs the same command line, rank 0
 * prints, and every rank exits with the same status. Without the MPI layer these are one-process
 * stand-ins. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

#ifdef HCQ_HAVE_MPI
#include "hcq/mpi.h"

static bool g_started;

hcq_status_t cli_mpi_start(void) {
  hcq_status_t st = hcq_mpi_init_auto(&g_started);
  /* Rank 0 reports (docs/cli.md): the others keep stderr, for what fails on them, and drop stdout.
   */
  if (!st && g_started && hcq_mpi_rank() != 0 && !freopen("/dev/null", "w", stdout)) {
    /* stdout stays: the output doubles, nothing breaks */
  }
  return st;
}
int cli_mpi_rank(void) { return hcq_mpi_rank(); }
int cli_mpi_size(void) { return hcq_mpi_size(); }
bool cli_mpi_on(void) { return g_started; }

hcq_status_t cli_mpi_fetch(hcq_buffer_t *buf, void *dst, uint64_t size) {
  if (!g_started) return hcq_buffer_copyout(buf, 0, dst, size);
  return hcq_mpi_fetch(buf, 0, dst, size);
}

hcq_status_t cli_mpi_max(int value, int *out_max) {
  if (!g_started) {
    *out_max = value;
    return NULL;
  }
  return hcq_mpi_allreduce_max(value, out_max);
}

static bool g_gave_up;

void cli_mpi_give_up(hcq_status_code_t code, const char *why) {
  if (!g_started || g_gave_up) return;
  if (code != HCQ_TIMEOUT && code != HCQ_DEVICE_LOST && !hcq_mpi_peer_failed())
    return; /* every rank agrees later */
  g_gave_up = true;
  char reason[200];
  size_t len = strcspn(why, "\n"); /* the first line: hang reports follow it */
  snprintf(reason, sizeof(reason), "rank %d gave up on the job after: %.*s", hcq_mpi_rank(),
           (int)len, why);
  for (int r = 0; r < hcq_mpi_size(); r++)
    if (r != hcq_mpi_rank()) hcq_status_destroy(hcq_mpi_declare_rank_lost(r, reason));
}

int cli_mpi_finish(int rc) {
  if (!g_started) return rc;
  int agreed = rc;
  hcq_status_t st = g_gave_up ? NULL : hcq_mpi_allreduce_max(rc, &agreed);
  if (st) {
    fprintf(stderr, "hcq (rank %d): %s\n", hcq_mpi_rank(), hcq_status_message(st));
    hcq_status_destroy(st);
    agreed = rc > HCQ_EXIT_RUNTIME ? rc : HCQ_EXIT_RUNTIME;
    g_gave_up = true;
  }
  bool failed = g_gave_up || hcq_mpi_peer_failed();
  hcq_status_destroy(hcq_mpi_finalize());
  if (failed) {
    /* A peer that stopped or died: MPI_Finalize could wait for it forever, and mpirun, with
     * orte_abort_on_non_zero_status 0, stays up after a rank's _exit. MPI_Abort ends every rank (a
     * stopped one too) and mpirun with this status. */
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, agreed);
    _exit(agreed);
  }
  return agreed;
}
#else
hcq_status_t cli_mpi_start(void) { return NULL; }
int cli_mpi_rank(void) { return 0; }
int cli_mpi_size(void) { return 1; }
bool cli_mpi_on(void) { return false; }
hcq_status_t cli_mpi_fetch(hcq_buffer_t *buf, void *dst, uint64_t size) {
  return hcq_buffer_copyout(buf, 0, dst, size);
}
hcq_status_t cli_mpi_max(int value, int *out_max) {
  *out_max = value;
  return NULL;
}
void cli_mpi_give_up(hcq_status_code_t code, const char *why) { (void)code, (void)why; }
int cli_mpi_finish(int rc) { return rc; }
#endif
