/* A two-stage pipeline over two MPI ranks (docs/mpi.md): a kernel on rank 0, its result sent to
 * rank 1, a kernel there, and the result sent back; one graph, built once on every rank and
 * replayed with a new variable value each time.
 *
 *   mpicc mpi_pipeline.c $(pkg-config --cflags --libs hcq-mpi) -o mpi_pipeline
 *   mpirun -np 2 ./mpi_pipeline
 */
#include <hcq/hcq.h>
#include <hcq/mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* One rank's failure ends the job: the others would otherwise wait for it until their timeout. */
#define CHECK(call)                                                \
  do {                                                             \
    hcq_status_t st_ = (call);                                     \
    if (st_) {                                                     \
      fprintf(stderr, "%s: %s\n", #call, hcq_status_message(st_)); \
      hcq_status_destroy(st_);                                     \
      MPI_Abort(MPI_COMM_WORLD, 1);                                \
    }                                                              \
  } while (0)

/* y[i] = y[i] * a + b for i < n; bufs = {y}, vals = {n, a, b}. */
static const char *const kScale =
    "void scale(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {\n"
    "  uint32_t *y = bufs[0];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) {\n"
    "    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;\n"
    "    if (i < (size_t)vals[0]) y[i] = y[i] * (uint32_t)vals[1] + (uint32_t)vals[2];\n"
    "  }\n"
    "}\n";

enum { N = 4096, REPLAYS = 3 };

/* The pipeline as one graph: rank 0: x = x * 2 + b, x sent to rank 1's y, rank 1: y = y * 3 + 1,
 * and y sent back to rank 0's z. Every rank builds it; the ranks check they agree. */
static hcq_graph_t *pipeline(hcq_program_t *scale0, hcq_program_t *scale1, hcq_buffer_t *x,
                             hcq_buffer_t *y, hcq_buffer_t *z, hcq_expr_t *b) {
  static const uint32_t writes_first[] = {0};
  hcq_operand_t vals0[] = {hcq_imm(N), hcq_imm(2), hcq_sym(b)},
                vals1[] = {hcq_imm(N), hcq_imm(3), hcq_imm(1)};
  hcq_exec_item_t items[4] = {
      {.kind = HCQ_ITEM_KERNEL, /* rank 0: x = x * 2 + b */
       .kernel = {scale0,
                  &x,
                  1,
                  writes_first,
                  1,
                  vals0,
                  3,
                  {hcq_imm(N / 256), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(256), hcq_imm(1), hcq_imm(1)}}},
      /* rank 0 sends, rank 1 receives */
      {.kind = HCQ_ITEM_TRANSFER, .transfer = {y, x, N * sizeof(uint32_t)}},
      {.kind = HCQ_ITEM_KERNEL, /* rank 1: y = y * 3 + 1 */
       .kernel = {scale1,
                  &y,
                  1,
                  writes_first,
                  1,
                  vals1,
                  3,
                  {hcq_imm(N / 256), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(256), hcq_imm(1), hcq_imm(1)}}},
      /* and back to rank 0 */
      {.kind = HCQ_ITEM_TRANSFER, .transfer = {z, y, N * sizeof(uint32_t)}},
  };
  hcq_var_value_t at_build[] = {{b, 0}};
  hcq_graph_t *graph; /* the graph copies the items: they may go when it is built */
  CHECK(hcq_graph_create(items, 4, NULL, 0, at_build, 1, NULL, &graph));
  return graph;
}

/* Replays the graph with b = 7, 17, 27; rank 0 reads z back into host each time and counts the
 * words that differ from what the pipeline makes of start. */
static int replay(hcq_graph_t *graph, hcq_expr_t *b, hcq_buffer_t *z, const uint32_t *start,
                  uint32_t *host) {
  static uint32_t expect[N];
  for (uint32_t i = 0; i < N; i++) expect[i] = start[i];
  int bad = 0;
  for (int r = 0; r < REPLAYS; r++) {
    hcq_var_value_t at[] = {{b, 10 * r + 7}}; /* the same values on every rank */
    CHECK(hcq_graph_run(graph, NULL, 0, at, 1, /*wait=*/true, NULL));
    for (uint32_t i = 0; i < N; i++) expect[i] = expect[i] * 2 + (uint32_t)(10 * r + 7);
    if (hcq_mpi_rank() == 0) { /* z lives on rank 0 */
      CHECK(hcq_buffer_copyout(z, 0, host, N * sizeof(uint32_t)));
      for (uint32_t i = 0; i < N; i++) bad += host[i] != expect[i] * 3 + 1;
    }
  }
  return bad;
}

int main(int argc, char **argv) {
  /* The application owns MPI; hcq's layer needs at least MPI_THREAD_SERIALIZED, and MULTIPLE lets
   * the CPU devices' engines make the graph's transfers themselves. */
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  CHECK(hcq_mpi_init(MPI_COMM_WORLD));
  if (hcq_mpi_size() < 2) {
    fprintf(stderr, "mpi_pipeline needs two ranks: mpirun -np 2 %s\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int rank = hcq_mpi_rank();

  /* Every rank runs all of this (SPMD). "R/CPU:0" is rank R's CPU:0: local on rank R, a remote
   * device elsewhere, whose buffers have no storage here and whose kernels run on R only. */
  hcq_device_t *stage0, *stage1;
  CHECK(hcq_device_open("0/CPU:0", &stage0));
  CHECK(hcq_device_open("1/CPU:0", &stage1));
  hcq_program_t *scale0, *scale1;
  CHECK(hcq_program_create(stage0, "scale", kScale, &scale0));
  CHECK(hcq_program_create(stage1, "scale", kScale, &scale1));
  hcq_buffer_t *x, *y, *z;
  CHECK(hcq_buffer_create(stage0, N * sizeof(uint32_t), &x));
  CHECK(hcq_buffer_create(stage1, N * sizeof(uint32_t), &y));
  CHECK(hcq_buffer_create(stage0, N * sizeof(uint32_t), &z));
  static uint32_t start[N], host[N];
  for (uint32_t i = 0; i < N; i++) start[i] = i;
  /* fills x on rank 0, does nothing elsewhere */
  CHECK(hcq_buffer_copyin(x, 0, start, sizeof(start)));

  hcq_expr_t *b;
  CHECK(hcq_var_create("b", 0, 1000, &b));
  hcq_graph_t *graph = pipeline(scale0, scale1, x, y, z, b);
  int bad = replay(graph, b, z, start, host);
  CHECK(hcq_mpi_allreduce_max(bad, &bad)); /* every rank exits with rank 0's verdict */
  if (rank == 0)
    printf("mpi_pipeline: %zu items over %d ranks, %d replays, z[1] = %u, %s\n",
           hcq_graph_item_count(graph), hcq_mpi_size(), REPLAYS, host[1],
           bad ? "WRONG" : "as expected");

  CHECK(hcq_graph_destroy(graph));
  hcq_expr_release(b);
  hcq_buffer_release(x);
  hcq_buffer_release(y);
  hcq_buffer_release(z);
  hcq_program_release(scale0);
  hcq_program_release(scale1);
  CHECK(hcq_device_close(stage1));
  CHECK(hcq_device_close(stage0));
  CHECK(hcq_mpi_finalize());
  MPI_Finalize();
  return bad ? 1 : 0;
}
