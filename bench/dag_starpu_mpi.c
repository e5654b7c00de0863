/* The 1000-item alternating chain of bench/mpi_bench.c on StarPU-MPI (Debian's libstarpumpi): two
 * one-int handles, x0 owned by rank 0 and x1 by rank 1; task k runs on rank k % 2 and writes that
 * rank's handle from the other's (x[k%2] = x[1-k%2] + 1), so StarPU-MPI moves 4 bytes between the
 * ranks before every task. Every rank inserts every task (StarPU-MPI's SPMD model); a replay is the
 * 1000 inserts plus starpu_mpi_wait_for_all.
 *
 *   mpirun -np 2 dag_starpu_mpi [REPLAYS]       (rank 0 prints the row, bench/rows.h)
 */
#include <starpu.h>
#include <starpu_mpi.h>
#include <string.h>

#include "dag.h"
#include "rows.h"

static void cpu_step(void *buffers[], void *arg) {
  (void)arg;
  dag_step((int32_t *)STARPU_VARIABLE_GET_PTR(buffers[0]),
           (const int32_t *)STARPU_VARIABLE_GET_PTR(buffers[1]));
}
static struct starpu_codelet cl_step = {
    .cpu_funcs = {cpu_step}, .nbuffers = 2, .modes = {STARPU_W, STARPU_R}};

#define TRY(call)                                                      \
  do {                                                                 \
    int rc_ = (call);                                                  \
    if (rc_) {                                                         \
      fprintf(stderr, "dag_starpu_mpi: %s failed (%d)\n", #call, rc_); \
      exit(1);                                                         \
    }                                                                  \
  } while (0)

int main(int argc, char **argv) {
  int replays = argc > 1 ? atoi(argv[1]) : 51;
  if (replays < 1) return 2;
  TRY(starpu_init(NULL));
  TRY(starpu_mpi_init(&argc, &argv, 1));
  int rank = 0, size = 0;
  starpu_mpi_comm_rank(MPI_COMM_WORLD, &rank);
  starpu_mpi_comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 dag_starpu_mpi [REPLAYS]\n");
    starpu_mpi_shutdown();
    starpu_shutdown();
    return 2;
  }
  int32_t x[2] = {0, 0};
  starpu_data_handle_t h[2];
  for (int r = 0; r < 2; r++) {
    if (r == rank)
      starpu_variable_data_register(&h[r], STARPU_MAIN_RAM, (uintptr_t)&x[r], sizeof(int32_t));
    else
      starpu_variable_data_register(&h[r], -1, (uintptr_t)NULL, sizeof(int32_t));
    starpu_mpi_data_register(h[r], r, r);
  }
  double *t = malloc((size_t)replays * sizeof(double));
  for (int rep = -3; rep < replays; rep++) {
    double t0 = bench_now_s();
    for (int k = 0; k < DAG_CHAIN; k++)
      TRY(starpu_mpi_task_insert(MPI_COMM_WORLD, &cl_step, STARPU_W, h[k % 2], STARPU_R,
                                 h[1 - k % 2], 0));
    TRY(starpu_mpi_wait_for_all(MPI_COMM_WORLD));
    if (rep >= 0) t[rep] = bench_now_s() - t0;
  }
  /* The last task (k = 999) ran on rank 1: bring its result home for the check. */
  starpu_mpi_get_data_on_node(MPI_COMM_WORLD, h[1], 0);
  int32_t last = 0;
  if (rank == 0) {
    starpu_data_acquire(h[1], STARPU_R);
    last = *(int32_t *)starpu_data_get_local_ptr(h[1]);
    starpu_data_release(h[1]);
  }
  for (int r = 0; r < 2; r++) starpu_data_unregister(h[r]);
  if (rank == 0) {
    const char *btl = getenv("OMPI_MCA_btl");
    char sec[160], note[160];
    snprintf(sec, sizeof(sec), "MPI, 2 ranks (%s): chain of 1000 alternating rank 0/rank 1",
             btl && strstr(btl, "tcp") ? "TCP loopback" : "shared memory");
    snprintf(note, sizeof(note),
             "%u CPU workers per rank; 1000 starpu_mpi_task_insert + wait_for_all; last value %d",
             starpu_cpu_worker_get_count(), last);
    emit_row(sec, "StarPU-MPI tasks", bench_median(t, replays) * 1e6, "us", note);
  }
  free(t);
  starpu_mpi_shutdown();
  starpu_shutdown();
  return 0;
}
