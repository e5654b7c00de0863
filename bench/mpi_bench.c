/* Graphs across two ranks (docs/mpi.md) against MPI itself, measured in the same run:
 *   - MPI's one-way latency for 4 bytes (ping-pong / 2, MPI_Send/MPI_Recv);
 *   - an hcq graph whose only work is a 4-byte transfer rank 0 -> rank 1 and one back, per
 *     transfer;
 *   - a chain of 1000 one-int kernels alternating between the ranks with a 4-byte transfer after
 *     each (the hand-off DAG of dag.h, spread over two processes), per replay, against 1000 one-way
 *     latencies.
 *
 *   mpirun -np 2 mpi_bench [REPLAYS]      (rank 0 prints the rows, bench/rows.h)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dag.h"
#include "hcq/hcq.h"
#include "hcq/mpi.h"
#include "rows.h"

static int rank;

#define CHECK(x)                                                                        \
  do {                                                                                  \
    hcq_status_t s_ = (x);                                                              \
    if (s_) {                                                                           \
      fprintf(stderr, "mpi_bench rank %d: %s: %s\n", rank, #x, hcq_status_message(s_)); \
      _exit(1);                                                                         \
    }                                                                                   \
  } while (0)

static void k_step(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  (void)vals, (void)l;
  dag_step(bufs[0], bufs[0]);
}

/* MPI one-way latency of 4 bytes: median over rounds of (ping-pong time / 2). */
static double mpi_latency_us(int rounds) {
  int32_t v = 0;
  double *t = malloc(sizeof(double) * (size_t)rounds);
  for (int r = -100; r < rounds; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now_s();
    for (int k = 0; k < 100; k++) {
      if (rank == 0) {
        MPI_Send(&v, 4, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(&v, 4, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(&v, 4, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&v, 4, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
      }
    }
    if (r >= 0) t[r] = (bench_now_s() - t0) / 200 * 1e6;
  }
  double m = bench_median(t, rounds);
  free(t);
  return m;
}

/* Median replay time (us) of g: every rank replays; rank 0 times each replay to completion. */
static double replay_us(hcq_graph_t *g, int replays) {
  double *t = malloc(sizeof(double) * (size_t)replays);
  for (int r = -20; r < replays; r++) {
    double t0 = bench_now_s();
    CHECK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
    if (r >= 0) t[r] = (bench_now_s() - t0) * 1e6;
  }
  double m = bench_median(t, replays);
  free(t);
  return m;
}

/* 1. 4 bytes there and back: the median replay (us). */
static double pingpong_us(hcq_buffer_t *const x[2], int replays) {
  hcq_exec_item_t pp[2] = {{.kind = HCQ_ITEM_TRANSFER, .transfer = {x[1], x[0], 4}},
                           {.kind = HCQ_ITEM_TRANSFER, .transfer = {x[0], x[1], 4}}};
  hcq_graph_t *g = NULL;
  CHECK(hcq_graph_create(pp, 2, NULL, 0, NULL, 0, NULL, &g));
  double us = replay_us(g, replays);
  CHECK(hcq_graph_destroy(g));
  return us;
}

/* 2. The alternating chain: kernel on rank i % 2, then its 4 bytes to the other rank. The median
 * replay (us); *got: the first replay's result. */
static double chain_us(hcq_buffer_t *const x[2], hcq_program_t *const p[2], int replays,
                       int32_t *got) {
  hcq_exec_item_t *items = calloc(2 * DAG_CHAIN, sizeof(*items));
  hcq_buffer_t *bufs[DAG_CHAIN];
  static const uint32_t out0[] = {0};
  for (int i = 0; i < DAG_CHAIN; i++) {
    int r = i % 2;
    bufs[i] = x[r];
    hcq_exec_item_t *k = &items[2 * i];
    k->kind = HCQ_ITEM_KERNEL;
    k->kernel.program = p[r];
    k->kernel.bufs = &bufs[i];
    k->kernel.nbufs = 1;
    k->kernel.outs = out0;
    k->kernel.nouts = 1;
    for (int j = 0; j < 3; j++) k->kernel.global[j] = k->kernel.local[j] = hcq_imm(1);
    items[2 * i + 1] =
        (hcq_exec_item_t){.kind = HCQ_ITEM_TRANSFER, .transfer = {x[1 - r], x[r], 4}};
  }
  hcq_graph_t *g = NULL;
  CHECK(hcq_graph_create(items, 2 * DAG_CHAIN, NULL, 0, NULL, 0, NULL, &g));
  int32_t zero = 0;
  CHECK(hcq_buffer_copyin(x[0], 0, &zero, 4));
  CHECK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  CHECK(hcq_mpi_fetch(x[0], 0, got, 4));
  double us = replay_us(g, replays / 4 > 5 ? replays / 4 : 5);
  CHECK(hcq_graph_destroy(g));
  free(items);
  return us;
}

/* The graphs over hcq's MPI layer, between MPI's latency before and after. */
typedef struct measured {
  double lat_before, lat_after, pingpong, chain;
  int32_t got;
} measured_t;

static void hcq_graphs(int replays, measured_t *m) {
  CHECK(hcq_mpi_init(MPI_COMM_WORLD));
  hcq_device_t *d[2];
  CHECK(hcq_device_open("0/CPU:0", &d[0]));
  CHECK(hcq_device_open("1/CPU:0", &d[1]));
  hcq_buffer_t *x[2];
  hcq_program_t *p[2];
  for (int i = 0; i < 2; i++) {
    CHECK(hcq_buffer_create(d[i], 4, &x[i]));
    CHECK(hcq_program_create_fn(d[i], "step", k_step, &p[i]));
  }
  m->pingpong = pingpong_us(x, replays);
  m->chain = chain_us(x, p, replays, &m->got);
  for (int i = 0; i < 2; i++) {
    hcq_buffer_release(x[i]);
    hcq_program_release(p[i]);
    CHECK(hcq_device_synchronize(d[i]));
    CHECK(hcq_device_close(d[i]));
  }
  CHECK(hcq_mpi_finalize());
}

/* Rank 0's rows. HCQ_MPI_HOST_RUNS=0: the waiting host leaves the work to the engines
 * (docs/mpi.md), a row of its own. */
static void emit_rows(const measured_t *m) {
  double lat = m->lat_before < m->lat_after ? m->lat_before : m->lat_after;
  const char *host_runs = getenv("HCQ_MPI_HOST_RUNS");
  bool engines_only = host_runs && !strcmp(host_runs, "0");
  const char *suffix = engines_only ? ", engines only (HCQ_MPI_HOST_RUNS=0)" : "";
  const char *btl = getenv("OMPI_MCA_btl");
  char sec[160], note[256], name[160];
  snprintf(sec, sizeof(sec), "MPI, 2 ranks (%s): 4-byte transfer",
           btl && strstr(btl, "tcp") ? "TCP loopback" : "shared memory");
  snprintf(note, sizeof(note),
           "MPI_Send/MPI_Recv ping-pong / 2, median; %.2f us before hcq ran, %.2f after",
           m->lat_before, m->lat_after);
  if (!engines_only) emit_row(sec, "MPI one-way latency", lat, "us", note);
  snprintf(note, sizeof(note),
           "graph 0->1->0 replayed to completion / 2; %.2fx MPI one-way latency (target <= 2x + "
           "2 us = %.2f us)",
           m->pingpong / 2 / lat, 2 * lat + 2);
  snprintf(name, sizeof(name), "hcq graph replay, per 4-byte transfer between ranks%s", suffix);
  emit_row(sec, name, m->pingpong / 2, "us", note);
  snprintf(sec, sizeof(sec), "MPI, 2 ranks (%s): chain of 1000 alternating rank 0/rank 1",
           btl && strstr(btl, "tcp") ? "TCP loopback" : "shared memory");
  snprintf(note, sizeof(note), "1000 x the MPI one-way latency above");
  if (!engines_only) emit_row(sec, "1000 MPI one-way latencies", 1000 * lat, "us", note);
  snprintf(note, sizeof(note),
           "one-int kernels, a 4-byte transfer after each; %.2fx 1000 one-way latencies (target "
           "<= 3x); "
           "first replay's result %d (expect %d)",
           m->chain / (1000 * lat), m->got, DAG_CHAIN);
  snprintf(name, sizeof(name), "hcq graph replay%s", suffix);
  emit_row(sec, name, m->chain, "us", note);
}

int main(int argc, char **argv) {
  int provided = 0, size = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int replays = argc > 1 ? atoi(argv[1]) : 201;
  if (size != 2 || replays < 1) {
    if (rank == 0) fprintf(stderr, "usage: mpirun -np 2 mpi_bench [REPLAYS]\n");
    MPI_Finalize();
    return 2;
  }
  measured_t m = {0};
  m.lat_before = mpi_latency_us(51);
  hcq_graphs(replays, &m);
  m.lat_after = mpi_latency_us(51);
  if (rank == 0) emit_rows(&m);
  MPI_Finalize();
  return rank == 0 && m.got != DAG_CHAIN ? 1 : 0;
}
