/* The MPI layer's tests (docs/mpi.md), run under mpirun by tests/mpi/run_mpi_test.sh: every rank
 * runs the same scenario; rank 0 compares what the ranks computed together with the same items run
 * eagerly on local devices of one process (the ground truth), byte for byte.
 *
 *   mpi_test eager      eager transfers both ways between every rank and rank 0, kernels between
 *   mpi_test graph      a graph over every rank (fan-out, pipeline, views, an input, a variable),
 *                       replayed with new inputs and values; the same items through the JIT in
 *                       small batches; and a capture of them replayed with new inputs and values
 *   mpi_test mismatch   rank 1 builds a different item: every rank gets the error naming item 2
 *   mpi_test hang       rank 1 never replays: rank 0's replay times out naming rank 1, bytes, tag
 *   mpi_test kill       rank 1 dies before the replay: rank 0 fails (no hang) naming rank 1
 *   mpi_test stopped    rank 1 stops: rank 0's replay fails in time naming it; once rank 0 declares
 *                       it lost, control calls fail at once and teardown waits for nothing
 *   mpi_test absent     rank 1 is late to an allreduce: every rank's error names it
 * Prints "mpi_test SCENARIO: ok" on rank 0 and exits 0 on success. */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hcq/hcq.h"
#include "hcq/mpi.h"

#include "cpu/cpu_testing.h"

static int rank, size;

static void die(int line, const char *what, hcq_status_t st) {
  fprintf(stderr, "mpi_test rank %d: line %d: %s: %s\n", rank, line, what,
          st ? hcq_status_message(st) : "failed");
  fflush(stderr);
  _exit(1);
}
#define OK(x)                      \
  do {                             \
    hcq_status_t s_ = (x);         \
    if (s_) die(__LINE__, #x, s_); \
  } while (0)
#define EXPECT(c)                      \
  do {                                 \
    if (!(c)) die(__LINE__, #c, NULL); \
  } while (0)

enum { N = 64 };

/* x[i] = x[i] * a + b, wrapping (unsigned: replays grow the values past INT32_MAX) */
static void k_mul_add(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  (void)l;
  uint32_t *x = bufs[0];
  for (int i = 0; i < vals[2]; i++) x[i] = x[i] * (uint32_t)vals[0] + (uint32_t)vals[1];
}
/* out[i] = sum over rows r of g[r * n + i] */
static void k_sum_rows(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  (void)l;
  int32_t *out = bufs[0];
  const int32_t *g = bufs[1];
  for (int i = 0; i < vals[1]; i++) {
    uint32_t s = 0;
    for (int r = 0; r < vals[0]; r++) s += (uint32_t)g[r * vals[1] + i];
    out[i] = (int32_t)s;
  }
}

static hcq_device_t *open_dev(const char *name) {
  hcq_device_t *d = NULL;
  OK(hcq_device_open(name, &d));
  return d;
}

static hcq_buffer_t *buffer(hcq_device_t *d, uint64_t bytes, int seed) {
  hcq_buffer_t *b = NULL;
  OK(hcq_buffer_create(d, bytes, &b));
  if (seed) {
    int32_t *v = malloc(bytes);
    for (uint64_t i = 0; i < bytes / 4; i++) v[i] = (int32_t)(i * 7 + (uint64_t)seed);
    OK(hcq_buffer_copyin(b, 0, v, bytes)); /* a remote buffer: its owner's copyin fills it */
    free(v);
  }
  return b;
}

/* ---- the graph scenario's world: built once with MPI devices, once with local ones ---- */

#define MAXR 8
typedef struct world {
  hcq_device_t *dev[MAXR], *side; /* dev[r] on rank r; side: a second device of rank 0 */
  hcq_program_t *mul[MAXR], *sum, *side_mul;
  hcq_buffer_t *x0a, *x0b, *xr[MAXR], *g, *gview[MAXR], *out, *y, *z;
  hcq_exec_item_t items[64];
  hcq_operand_t vals[64][3];
  hcq_buffer_t *bufs[64][2];
  size_t nitems;
  hcq_expr_t *k;
} world_t;

static hcq_exec_item_t *kernel_item(world_t *w, hcq_program_t *p, hcq_buffer_t *b0,
                                    hcq_buffer_t *b1, hcq_operand_t v0, hcq_operand_t v1,
                                    int32_t v2) {
  size_t j = w->nitems++;
  w->bufs[j][0] = b0;
  w->bufs[j][1] = b1;
  w->vals[j][0] = v0;
  w->vals[j][1] = v1;
  w->vals[j][2] = hcq_imm(v2);
  hcq_exec_item_t *it = &w->items[j];
  memset(it, 0, sizeof(*it));
  it->kind = HCQ_ITEM_KERNEL;
  it->kernel.program = p;
  it->kernel.bufs = w->bufs[j];
  it->kernel.nbufs = b1 ? 2 : 1;
  it->kernel.vals = w->vals[j];
  it->kernel.nvals = p == w->sum ? 2 : 3;
  for (int i = 0; i < 3; i++) it->kernel.global[i] = it->kernel.local[i] = hcq_imm(1);
  static const uint32_t out0[] = {0};
  it->kernel.outs = out0;
  it->kernel.nouts = 1;
  return it;
}

static void transfer_item(world_t *w, hcq_buffer_t *dst, hcq_buffer_t *src, uint64_t bytes) {
  hcq_exec_item_t *it = &w->items[w->nitems++];
  memset(it, 0, sizeof(*it));
  it->kind = HCQ_ITEM_TRANSFER;
  it->transfer.dst = dst;
  it->transfer.src = src;
  it->transfer.bytes = bytes;
}

/* names[r]: rank r's device; side: rank 0's second device. */
static void world_build(world_t *w, char names[][32], const char *side, hcq_expr_t *k) {
  memset(w, 0, sizeof(*w));
  w->k = k;
  for (int r = 0; r < size; r++) {
    w->dev[r] = open_dev(names[r]);
    OK(hcq_program_create_fn(w->dev[r], "mul_add", k_mul_add, &w->mul[r]));
  }
  w->side = open_dev(side);
  OK(hcq_program_create_fn(w->side, "mul_add", k_mul_add, &w->side_mul));
  OK(hcq_program_create_fn(w->dev[0], "sum_rows", k_sum_rows, &w->sum));
  w->x0a = buffer(w->dev[0], N * 4, 1);
  w->x0b = buffer(w->dev[0], N * 4, 1000);
  w->g = buffer(w->dev[0], (uint64_t)size * N * 4, 0);
  for (int r = 0; r < size; r++)
    OK(hcq_buffer_view_create(w->g, (uint64_t)r * N * 4, N * 4, &w->gview[r]));
  for (int r = 1; r < size; r++) w->xr[r] = buffer(w->dev[r], N * 4, 5 * r);
  w->out = buffer(w->dev[0], N * 4, 0);
  w->y = buffer(w->dev[size - 1], N * 4, 0);
  w->z = buffer(w->side, N * 4, 0);
  /* x0 = x0 * 3 + k (x0 is the input; k a variable) */
  kernel_item(w, w->mul[0], w->x0a, NULL, hcq_imm(3), hcq_sym(k), N);
  transfer_item(w, w->gview[0], w->x0a, N * 4);
  /* fan out to every rank, work there, gather into views of g on rank 0 */
  for (int r = 1; r < size; r++) {
    transfer_item(w, w->xr[r], w->x0a, N * 4);
    kernel_item(w, w->mul[r], w->xr[r], NULL, hcq_imm(r + 2), hcq_imm(r), N);
    transfer_item(w, w->gview[r], w->xr[r], N * 4);
  }
  kernel_item(w, w->sum, w->out, w->g, hcq_imm(size), hcq_imm(N), 0);
  /* a pipeline out to the last rank and back onto rank 0's second device */
  transfer_item(w, w->y, w->out, N * 4);
  kernel_item(w, w->mul[size - 1], w->y, NULL, hcq_imm(-1), hcq_sym(k), N);
  transfer_item(w, w->z, w->y, N * 4);
  kernel_item(w, w->side_mul, w->z, NULL, hcq_imm(2), hcq_imm(5), N);
}

/* Buffers compared after each run, in one order on every rank. */
static size_t world_outputs(world_t *w, hcq_buffer_t **out) {
  size_t n = 0;
  out[n++] = w->x0a;
  out[n++] = w->x0b;
  out[n++] = w->g;
  out[n++] = w->out;
  out[n++] = w->y;
  out[n++] = w->z;
  for (int r = 1; r < size; r++) out[n++] = w->xr[r];
  return n;
}

static void world_free(world_t *w) {
  for (int r = 0; r < size; r++) hcq_buffer_release(w->gview[r]);
  hcq_buffer_t *o[MAXR + 8];
  size_t n = world_outputs(w, o);
  for (size_t i = 0; i < n; i++) hcq_buffer_release(o[i]);
  for (int r = 0; r < size; r++) hcq_program_release(w->mul[r]);
  hcq_program_release(w->sum);
  hcq_program_release(w->side_mul);
  for (int r = 0; r < size; r++) {
    OK(hcq_device_synchronize(w->dev[r]));
    OK(hcq_device_close(w->dev[r]));
  }
  OK(hcq_device_synchronize(w->side));
  OK(hcq_device_close(w->side));
}

/* The items with x0 replaced by input and k = kv, eagerly (ground truth, or captured). */
static void run_eager(world_t *w, hcq_buffer_t *input, int64_t kv, bool sym) {
  hcq_var_value_t vv = {w->k, kv};
  for (size_t j = 0; j < w->nitems; j++) {
    hcq_exec_item_t it = w->items[j];
    hcq_buffer_t *bufs[2];
    if (it.kind == HCQ_ITEM_KERNEL) {
      for (size_t i = 0; i < it.kernel.nbufs; i++)
        bufs[i] = it.kernel.bufs[i] == w->x0a ? input : it.kernel.bufs[i];
      it.kernel.bufs = bufs;
      if (sym) {
        hcq_launch_sym_desc_t d = {it.kernel.program,
                                   bufs,
                                   it.kernel.nbufs,
                                   it.kernel.vals,
                                   it.kernel.nvals,
                                   {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                                   {hcq_imm(1), hcq_imm(1), hcq_imm(1)},
                                   it.kernel.outs,
                                   it.kernel.nouts};
        OK(hcq_launch_sym(&d, &vv, 1));
        continue;
      }
    } else {
      if (it.transfer.src == w->x0a) it.transfer.src = input;
      if (it.transfer.dst == w->x0a) it.transfer.dst = input;
    }
    OK(hcq_exec_item_run(&it, &vv, 1));
  }
}

/* Every output fetched to rank 0 and compared with the ground truth's. */
static void compare(world_t *mw, world_t *tw, const char *what) {
  hcq_buffer_t *mo[MAXR + 8], *to[MAXR + 8];
  size_t n = world_outputs(mw, mo);
  if (rank == 0) world_outputs(tw, to);
  for (size_t i = 0; i < n; i++) {
    uint64_t bytes = hcq_buffer_size(mo[i]);
    int32_t *a = malloc(bytes), *b = malloc(bytes);
    OK(hcq_mpi_fetch(mo[i], 0, a, bytes));
    if (rank == 0) {
      OK(hcq_device_synchronize(hcq_buffer_device(to[i])));
      OK(hcq_buffer_copyout(to[i], 0, b, bytes));
      for (uint64_t e = 0; e < bytes / 4; e++)
        if (a[e] != b[e]) {
          fprintf(stderr, "mpi_test: %s: output %zu element %llu: %d over MPI, %d in one process\n",
                  what, i, (unsigned long long)e, a[e], b[e]);
          _exit(1);
        }
    }
    free(a);
    free(b);
  }
}

static void scenario_graph(void) {
  hcq_expr_t *k = NULL;
  OK(hcq_var_create("k", -100, 100, &k));
  char names[MAXR][32], tnames[MAXR][32];
  for (int r = 0; r < size; r++) {
    snprintf(names[r], sizeof(names[r]), "%d/CPU:0", r);
    snprintf(tnames[r], sizeof(tnames[r]), "CPU:%d", 10 + r);
  }
  world_t mw, tw;
  world_build(&mw, names, "0/CPU:1", k);
  if (rank == 0) world_build(&tw, tnames, "CPU:20", k);
  struct {
    bool b;
    int64_t k;
  } runs[] = {{false, 1}, {true, 7}, {false, -2}, {true, 0}, {false, 3}};
  /* 1. hcq_graph_run with the input replaced and k changed each replay. */
  hcq_var_value_t vv = {k, 1};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(mw.items, mw.nitems, &mw.x0a, 1, &vv, 1, NULL, &g));
  for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
    vv.value = runs[i].k;
    hcq_buffer_t *in = runs[i].b ? mw.x0b : mw.x0a;
    OK(hcq_graph_run(g, &in, 1, &vv, 1, i % 2 == 0, NULL));
    if (rank == 0) run_eager(&tw, runs[i].b ? tw.x0b : tw.x0a, runs[i].k, false);
    compare(&mw, &tw, "graph replay");
  }
  /* Several replays in flight without waiting, then one comparison. */
  for (int i = 0; i < 20; i++) {
    vv.value = i % 5;
    hcq_buffer_t *in = i % 3 ? mw.x0b : mw.x0a;
    OK(hcq_graph_run(g, &in, 1, &vv, 1, false, NULL));
    if (rank == 0) run_eager(&tw, i % 3 ? tw.x0b : tw.x0a, i % 5, false);
  }
  compare(&mw, &tw, "graph replays in flight");
  OK(hcq_graph_destroy(g));
  /* 2. The JIT over the same items in small batches (graphs and eager leftovers). */
  hcq_jit_options_t jo = {.first_batch_size = 3};
  hcq_jit_t *jit = NULL;
  vv.value = 2;
  OK(hcq_jit_create(mw.items, mw.nitems, &mw.x0a, 1, &vv, 1, &jo, &jit));
  for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
    vv.value = runs[i].k + 1;
    hcq_buffer_t *in = runs[i].b ? mw.x0b : mw.x0a;
    OK(hcq_jit_run(jit, &in, 1, &vv, 1, true, NULL));
    if (rank == 0) run_eager(&tw, runs[i].b ? tw.x0b : tw.x0a, runs[i].k + 1, false);
    compare(&mw, &tw, "jit replay");
  }
  OK(hcq_jit_destroy(jit));
  /* 3. A capture of the same work, replayed with new inputs and values. */
  hcq_capture_t *cap = NULL;
  OK(hcq_capture_begin(&cap));
  run_eager(&mw, mw.x0a, 4, true);
  vv.value = 4;
  OK(hcq_capture_end(cap, &mw.x0a, 1, &vv, 1, NULL, &jit));
  if (rank == 0) run_eager(&tw, tw.x0a, 4, false);
  compare(&mw, &tw, "capture run");
  for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
    vv.value = -runs[i].k;
    hcq_buffer_t *in = runs[i].b ? mw.x0b : mw.x0a;
    OK(hcq_jit_run(jit, &in, 1, &vv, 1, true, NULL));
    if (rank == 0) run_eager(&tw, runs[i].b ? tw.x0b : tw.x0a, -runs[i].k, false);
    compare(&mw, &tw, "capture replay");
  }
  OK(hcq_jit_destroy(jit));
  world_free(&mw);
  if (rank == 0) world_free(&tw);
  hcq_expr_release(k);
}

/* Eager transfers both ways between rank 0 and every other rank, with kernels between. */
static void scenario_eager(void) {
  hcq_device_t *d0 = open_dev("0/CPU:0");
  for (int r = 1; r < size; r++) {
    char name[32];
    snprintf(name, sizeof(name), "%d/CPU:0", r);
    hcq_device_t *dr = open_dev(name);
    EXPECT(hcq_mpi_device_rank(dr) == r);
    hcq_program_t *p = NULL;
    OK(hcq_program_create_fn(dr, "mul_add", k_mul_add, &p));
    hcq_buffer_t *a = buffer(d0, N * 4, 3), *b = buffer(dr, N * 4, 0), *c = buffer(d0, N * 4, 0);
    EXPECT(hcq_mpi_buffer_is_remote(a) == (rank != 0) &&
           hcq_mpi_buffer_is_remote(b) == (rank != r));
    int32_t expect[N];
    for (int i = 0; i < N; i++) expect[i] = (int32_t)(i * 7 + 3);
    for (int round = 0; round < 30; round++) {
      OK(hcq_transfer(b, a, N * 4));
      int32_t vals[] = {2, round, N};
      hcq_buffer_t *bb[] = {b};
      hcq_launch_desc_t ld = {p, bb, 1, vals, 3, {1, 1, 1}, {1, 1, 1}, NULL, 0};
      OK(hcq_launch(&ld));
      OK(hcq_transfer(c, b, N * 4));
      OK(hcq_transfer(a, c, N * 4)); /* rank 0 to rank 0: a local copy in the same stream */
      for (int i = 0; i < N; i++) expect[i] = (int32_t)((uint32_t)expect[i] * 2u + (uint32_t)round);
    }
    int32_t got[N];
    OK(hcq_mpi_fetch(c, 0, got, sizeof(got)));
    if (rank == 0)
      for (int i = 0; i < N; i++)
        if (got[i] != expect[i]) {
          fprintf(stderr, "mpi_test eager: rank %d element %d: %d, expected %d\n", r, i, got[i],
                  expect[i]);
          _exit(1);
        }
    /* The other way: fetch b to rank 0 from rank r. */
    OK(hcq_mpi_fetch(b, 0, got, sizeof(got)));
    if (rank == 0) EXPECT(got[5] == expect[5]);
    if (rank != 0) {
      hcq_status_t st = hcq_buffer_copyout(a, 0, got, sizeof(got));
      EXPECT(st && hcq_status_code(st) == HCQ_FAILED_PRECONDITION &&
             strstr(hcq_status_message(st), "another rank"));
      hcq_status_destroy(st);
      /* Mapping it fails too, and the message suggests what works here (not create_mapped, which
       * fails as well). */
      void *host = NULL;
      st = hcq_buffer_map(a, &host);
      EXPECT(st && hcq_status_code(st) == HCQ_UNAVAILABLE &&
             strstr(hcq_status_message(st), "hcq_mpi_fetch") &&
             !strstr(hcq_status_message(st), "hcq_buffer_create_mapped") && !host);
      hcq_status_destroy(st);
    }
    hcq_buffer_release(a);
    hcq_buffer_release(b);
    hcq_buffer_release(c);
    hcq_program_release(p);
    OK(hcq_device_synchronize(dr));
    OK(hcq_device_close(dr));
  }
  OK(hcq_device_synchronize(d0));
  OK(hcq_device_close(d0));
}

/* A small graph rank 0 -> rank 1 -> rank 0; rank 1's third item differs when differ is set. */
/* What small_graph made (its graph destroyed first), with the devices synchronised. */
static void small_graph_free(hcq_device_t *d0, hcq_device_t *d1, hcq_buffer_t **bufs,
                             hcq_program_t **progs) {
  for (int i = 0; i < 3; i++) hcq_buffer_release(bufs[i]);
  for (int i = 0; i < 2; i++) hcq_program_release(progs[i]);
  OK(hcq_device_synchronize(d0));
  OK(hcq_device_synchronize(d1));
  OK(hcq_device_close(d0));
  OK(hcq_device_close(d1));
}

static hcq_status_t small_graph(bool differ, hcq_graph_t **out, hcq_device_t **d0,
                                hcq_device_t **d1, hcq_buffer_t **bufs, hcq_program_t **progs) {
  *d0 = open_dev("0/CPU:0");
  *d1 = open_dev("1/CPU:0");
  OK(hcq_program_create_fn(*d0, "mul_add", k_mul_add, &progs[0]));
  OK(hcq_program_create_fn(*d1, "mul_add", k_mul_add, &progs[1]));
  bufs[0] = buffer(*d0, N * 4, 1);
  bufs[1] = buffer(*d1, N * 4, 0);
  bufs[2] = buffer(*d0, N * 4, 0);
  world_t w;
  memset(&w, 0, sizeof(w));
  w.sum = NULL;
  kernel_item(&w, progs[0], bufs[0], NULL, hcq_imm(3), hcq_imm(1), N);
  transfer_item(&w, bufs[1], bufs[0], N * 4);
  kernel_item(&w, progs[1], bufs[1], NULL, hcq_imm(differ ? 5 : 2), hcq_imm(1), N);
  transfer_item(&w, bufs[2], bufs[1], N * 4);
  return hcq_graph_create(w.items, w.nitems, NULL, 0, NULL, 0, NULL, out);
}

static void scenario_mismatch(void) {
  hcq_graph_t *g = NULL;
  hcq_device_t *d0, *d1;
  hcq_buffer_t *bufs[3];
  hcq_program_t *progs[2];
  hcq_status_t st = small_graph(rank == 1, &g, &d0, &d1, bufs, progs);
  if (rank > 1) { /* not part of the graph: builds it (all remote), no check */
    EXPECT(!st);
    OK(hcq_graph_destroy(g));
  } else {
    EXPECT(st != NULL);
    const char *m = hcq_status_message(st);
    if (hcq_status_code(st) != HCQ_INVALID_ARGUMENT || !strstr(m, "first at item 2") ||
        !strstr(m, "rank 1")) {
      fprintf(stderr, "mpi_test mismatch rank %d: unexpected error: %s\n", rank, m);
      _exit(1);
    }
    if (rank == 0) printf("rank 0 error: %s\n", m);
    hcq_status_destroy(st);
  }
  /* Both ranks go on working: a matching graph builds and runs afterwards. */
  for (int i = 0; i < 3; i++) hcq_buffer_release(bufs[i]);
  for (int i = 0; i < 2; i++) hcq_program_release(progs[i]);
  OK(hcq_device_close(d0));
  OK(hcq_device_close(d1));
  OK(small_graph(false, &g, &d0, &d1, bufs, progs));
  OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  int32_t got[N];
  OK(hcq_mpi_fetch(bufs[2], 0, got, sizeof(got)));
  if (rank == 0) EXPECT(got[2] == ((2 * 7 + 1) * 3 + 1) * 2 + 1);
  OK(hcq_graph_destroy(g));
  small_graph_free(d0, d1, bufs, progs);
}

/* The fault scenarios' start: the small graph between ranks 0 and 1, replayed once correctly. */
typedef struct fault_world {
  hcq_graph_t *g;
  hcq_device_t *d0, *d1;
  hcq_buffer_t *bufs[3];
  hcq_program_t *progs[2];
} fault_world_t;

static void fault_world_build(fault_world_t *w) {
  w->g = NULL;
  OK(small_graph(false, &w->g, &w->d0, &w->d1, w->bufs, w->progs));
  OK(hcq_graph_run(w->g, NULL, 0, NULL, 0, true, NULL)); /* one good replay first */
}

/* Rank 1 never replays (hang) or dies first (kill): rank 0's replay must fail, not hang. */
static void scenario_fault(bool kill_rank) {
  fault_world_t w;
  fault_world_build(&w);
  hcq_graph_t *g = w.g;
  hcq_device_t *d0 = w.d0, *d1 = w.d1;
  hcq_buffer_t **bufs = w.bufs;
  hcq_program_t **progs = w.progs;
  OK(hcq_mpi_barrier());
  if (rank == 1 && kill_rank) raise(SIGKILL);
  if (rank == 0) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    hcq_status_t st = hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    EXPECT(st != NULL);
    const char *m = hcq_status_message(st);
    printf("rank 0 error after %.2f s: %s\n", s, m);
    fflush(stdout);
    if (!strstr(m, "rank 1") || (!kill_rank && (!strstr(m, "tag") || !strstr(m, "256 bytes")))) {
      fprintf(stderr, "mpi_test fault: the error does not name rank 1, the bytes and the tag\n");
      _exit(1);
    }
    /* Which thread waits at the receive (docs/mpi.md, HCQ_MPI_COPIES): the local CPU engine, whose
     * copy queue the report lists first, or the communication thread on 1/CPU:0's. */
    const char *copies = getenv("HCQ_MPI_COPIES");
    bool thread = copies && !strcmp(copies, "thread");
    const char *at = strstr(m, "MPI receive of 256 bytes from rank 1"),
               *remote = strstr(m, "1/CPU:0:");
    if (!kill_rank && (!at || !remote || (thread ? at < remote : at > remote))) {
      fprintf(stderr, "mpi_test fault: the receive is not on the %s's queue\n",
              thread ? "communication thread" : "CPU engine");
      _exit(1);
    }
    /* The receive has been posted since the replay began: its line says so, not "0 ms". */
    const char *ms = at ? strstr(at, ", for at least ") : NULL;
    const char *t = getenv("HCQ_WAIT_TIMEOUT_MS");
    if (!kill_rank &&
        (!ms || (strchr(at, '\n') && ms > strchr(at, '\n')) ||
         strtol(ms + strlen(", for at least "), NULL, 10) < (t ? atol(t) : 30000) / 2)) {
      fprintf(stderr, "mpi_test fault: the receive's line does not say how long it has waited\n");
      _exit(1);
    }
    hcq_status_destroy(st);
    printf("mpi_test %s: ok\n", kill_rank ? "kill" : "hang");
    fflush(stdout);
    if (kill_rank) _exit(0); /* a dead peer: MPI_Finalize could wait for it */
  } else {
    /* Past rank 0's wait timeout (the runner sets a short one). */
    const char *t = getenv("HCQ_WAIT_TIMEOUT_MS");
    long ms = t ? atol(t) : 30000;
    struct timespec ts = {(ms * 3 / 2) / 1000, ((ms * 3 / 2) % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  /* hang: let rank 1's side of the stuck replay go (it sends what rank 0 waited for) and finish. */
  if (rank == 1)
    OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  else if (rank == 0) {
    hcq_status_t st = hcq_graph_destroy(g); /* the stuck replay completes now */
    if (st) die(__LINE__, "destroy after the hang", st);
    g = NULL;
  }
  OK(hcq_mpi_barrier());
  if (g) OK(hcq_graph_destroy(g));
  small_graph_free(d0, d1, bufs, progs);
}

static double seconds_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static double wait_timeout_s(void) {
  const char *t = getenv("HCQ_WAIT_TIMEOUT_MS");
  return (t ? atof(t) : 30000) / 1000;
}

/* A failure whose code and message are as expected (die otherwise). */
static void expect_error(int line, hcq_status_t st, hcq_status_code_t code, const char *needle) {
  if (!st || hcq_status_code(st) != code || !strstr(hcq_status_message(st), needle)) {
    fprintf(stderr, "mpi_test rank %d: line %d: expected %s naming \"%s\", got %s: %s\n", rank,
            line, hcq_status_code_name(code), needle,
            st ? hcq_status_code_name(hcq_status_code(st)) : "OK",
            st ? hcq_status_message(st) : "");
    _exit(1);
  }
  hcq_status_destroy(st);
}

/* Rank 1 stops (SIGSTOP) before a replay, as a process stopped by a debugger or the scheduler
 * would: rank 0's replay fails at the wait timeout naming it. Once rank 0 gives up on it
 * (hcq_mpi_declare_rank_lost), tearing everything down takes no timeout per object, and control
 * calls with it fail at once naming it. Rank 0 then kills it. */
static void scenario_stopped(void) {
  EXPECT(size == 2);
  fault_world_t w;
  fault_world_build(&w);
  hcq_graph_t *g = w.g;
  hcq_device_t *d0 = w.d0, *d1 = w.d1;
  hcq_buffer_t **bufs = w.bufs;
  hcq_program_t **progs = w.progs;
  int pid = (int)getpid(), pids[2] = {0, 0};
  MPI_Allgather(&pid, 1, MPI_INT, pids, 1, MPI_INT, MPI_COMM_WORLD);
  OK(hcq_mpi_barrier());
  if (rank == 1) {
    raise(SIGSTOP);
    _exit(0); /* continued: the job is over */
  }
  double timeout = wait_timeout_s();
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  hcq_status_t st = hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL);
  double found = seconds_since(&t0);
  printf("rank 0: the replay failed after %.2f s\n", found);
  expect_error(__LINE__, st, HCQ_TIMEOUT, "rank 1");
  EXPECT(found <= timeout + 1.0);

  OK(hcq_mpi_rank_health(1));
  expect_error(__LINE__, hcq_mpi_declare_rank_lost(0, NULL), HCQ_INVALID_ARGUMENT, "this process");
  expect_error(__LINE__, hcq_mpi_declare_rank_lost(2, NULL), HCQ_OUT_OF_RANGE, "no rank 2");
  expect_error(__LINE__, hcq_mpi_rank_health(-1), HCQ_OUT_OF_RANGE, "no rank -1");
  OK(hcq_mpi_declare_rank_lost(1, "it stopped answering (mpi_test)"));
  EXPECT(hcq_mpi_peer_failed());
  expect_error(__LINE__, hcq_mpi_rank_health(1), HCQ_UNAVAILABLE,
               "rank 1 is lost: it stopped answering (mpi_test)");

  clock_gettime(CLOCK_MONOTONIC, &t0);
  /* Control calls with the lost rank fail at once, naming it. */
  int most = 0;
  expect_error(__LINE__, hcq_mpi_allreduce_max(1, &most), HCQ_UNAVAILABLE, "rank 1 is lost");
  expect_error(__LINE__, hcq_mpi_barrier(), HCQ_UNAVAILABLE, "rank 1 is lost");
  int32_t got[N];
  expect_error(__LINE__, hcq_mpi_fetch(bufs[1], 0, got, sizeof(got)), HCQ_UNAVAILABLE,
               "rank 1 is lost");
  /* Its remote device is lost; so is the local one whose queue holds (engines) or waits for (the
   * communication thread's queue) the transfer with it. */
  expect_error(__LINE__, hcq_device_health(d1), HCQ_DEVICE_LOST, "rank 1 is lost");
  OK(hcq_graph_destroy(g));
  for (int i = 0; i < 3; i++) hcq_buffer_release(bufs[i]);
  for (int i = 0; i < 2; i++) hcq_program_release(progs[i]);
  expect_error(__LINE__, hcq_device_synchronize(d0), HCQ_DEVICE_LOST, "rank 1");
  OK(hcq_device_close(d0));
  OK(hcq_device_close(d1));
  double teardown = seconds_since(&t0);
  printf("rank 0: control calls and teardown took %.3f s (wait timeout %.1f s)\n", teardown,
         timeout);
  EXPECT(teardown < timeout / 2);
  printf("mpi_test stopped: ok\n");
  fflush(stdout);
  kill((pid_t)pids[1], SIGKILL);
  _exit(0); /* a lost peer: MPI_Finalize could wait for it */
}

/* Rank 1 comes late to hcq_mpi_allreduce_max (past the wait timeout): every rank's error names rank
 * 1, rank 0's after the timeout and the others', told by rank 0, soon after. */
static void scenario_absent(void) {
  double timeout = wait_timeout_s();
  int most = 0;
  if (rank == 1) {
    struct timespec late = {(time_t)(timeout * 1.5),
                            (long)((timeout * 1.5 - (double)(time_t)(timeout * 1.5)) * 1e9)};
    nanosleep(&late, NULL);
    /* rank 0 gave up on it: no reply comes */
    hcq_status_destroy(hcq_mpi_allreduce_max(rank, &most));
    _exit(0);
  }
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  hcq_status_t st = hcq_mpi_allreduce_max(rank, &most);
  double s = seconds_since(&t0);
  printf("rank %d: %.2f s: %s\n", rank, s, st ? hcq_status_message(st) : "OK");
  fflush(stdout);
  expect_error(__LINE__, st, HCQ_TIMEOUT, "rank 1");
  EXPECT(s >= timeout - 0.1 && s <= timeout + 1.5);
  if (rank == 0) printf("mpi_test absent: ok\n");
  fflush(stdout);
  /* a rank that leaves without MPI_Finalize makes mpirun kill the others: on a loaded machine the
   * others would be killed before rank 0 has said its line, so they leave well after it */
  if (rank != 0) nanosleep(&(struct timespec){2, 0}, NULL);
  _exit(0);
}

/* Ranks started unbound on one machine (run_mpi_test.sh: --bind-to none) start their cores at
 * their own share (local rank r of n at core r * cores / n) and keep every core, so their CPU
 * engines are not all pinned to the first core; with more ranks than cores, the engine of local
 * rank r is on core r mod cores. */
static void scenario_layout(void) {
  hcq_device_t *d;
  OK(hcq_device_open("CPU:0", &d));
  int cores[64], mine = -1;
  size_t n = hcq_device_cores(d, cores, 64);
  EXPECT(n >= 1);
  mine = cores[0];
  int all[MAXR];
  MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT(lr != NULL);
  for (int r = 0; r < size && rank == 0; r++)
    for (int q = r + 1; q < size; q++)
      if (all[r] == all[q] && (size <= online || (r - q) % online != 0)) {
        fprintf(stderr, "mpi_test layout: ranks %d and %d both run their engine on core %d\n", r, q,
                all[r]);
        _exit(1);
      }
  if (size > online) EXPECT(mine == (int)(atol(lr) % online));
  EXPECT(n == (size_t)online); /* every core: the ones after its own go to its helpers */
  if (size <= online) EXPECT(mine == (int)(atol(lr) * online / size));
  OK(hcq_device_close(d));
}

/* Who runs a rank's queues while its host waits (docs/mpi.md): rank 1 sends 4 bytes to rank 0 after
 * a nap, rank 0's kernel then reads them. Rank 0's host, waiting for the replay, polls that receive
 * itself (passes counted by hcq__cpu_host_passes; the runner gives it a long HCQ_SPIN_NS, the
 * window in which a waiting host runs the queues), but never runs the kernel, which stays on the
 * engine thread; with HCQ_MPI_HOST_RUNS=0 the host makes no pass. Results are right either way. */
static pthread_t g_host;
static _Atomic int g_on_host, g_runs;
static void k_add_one(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {
  (void)vals, (void)l;
  int32_t *x = bufs[0];
  x[1] = x[0] + 1;
  g_on_host += pthread_equal(pthread_self(), g_host) != 0;
  g_runs++;
}

static void scenario_hostruns(void) {
  const char *env = getenv("HCQ_MPI_HOST_RUNS");
  bool engines_only = env && !strcmp(env, "0");
  g_host = pthread_self();
  hcq_device_t *d0, *d1;
  OK(hcq_device_open("0/CPU:0", &d0));
  OK(hcq_device_open("1/CPU:0", &d1));
  hcq_buffer_t *x0, *x1;
  OK(hcq_buffer_create(d0, 8, &x0));
  OK(hcq_buffer_create(d1, 4, &x1));
  hcq_program_t *p;
  OK(hcq_program_create_fn(d0, "add_one", k_add_one, &p));
  static const uint32_t out0[] = {0};
  hcq_exec_item_t items[2] = {{.kind = HCQ_ITEM_TRANSFER, .transfer = {x0, x1, 4}}};
  items[1].kind = HCQ_ITEM_KERNEL;
  items[1].kernel.program = p;
  items[1].kernel.bufs = &x0;
  items[1].kernel.nbufs = 1;
  items[1].kernel.outs = out0;
  items[1].kernel.nouts = 1;
  for (int j = 0; j < 3; j++) items[1].kernel.global[j] = items[1].kernel.local[j] = hcq_imm(1);
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 2, NULL, 0, NULL, 0, NULL, &g));
  enum { REPLAYS = 20 };
  for (int32_t i = 0; i < REPLAYS; i++) {
    if (rank == 1) {
      OK(hcq_buffer_copyin(x1, 0, &i, 4));
      nanosleep(&(struct timespec){0, 1000000L}, NULL); /* rank 0 is waiting by now */
    }
    OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
    if (rank == 0) {
      int32_t got[2];
      OK(hcq_buffer_copyout(x0, 0, got, 8));
      EXPECT(got[0] == i && got[1] == i + 1);
    }
    OK(hcq_mpi_barrier());
  }
  if (rank == 0) {
    uint64_t passes = hcq__cpu_host_passes(d0), handbacks = hcq__cpu_host_handbacks(d0);
    printf("mpi_test hostruns: %" PRIu64
           " passes of the waiting host over %d replays, %d kernel runs on it, %" PRIu64
           " hand-backs with the transfer in flight\n",
           passes, REPLAYS, (int)g_on_host, handbacks);
    EXPECT(g_runs == REPLAYS && g_on_host == 0);
    /* The host polls the receive in flight for HCQ_MPI_SPIN_NS, however short HCQ_SPIN_NS (100 us
     * in mpi_hostruns_remote_np2_shm, against rank 1's 1 ms): it never hands it back mid-flight. */
    if (engines_only)
      EXPECT(passes == 0);
    else
      EXPECT(passes >= REPLAYS / 2 && handbacks == 0);
  }
  OK(hcq_graph_destroy(g));
  hcq_program_release(p);
  hcq_buffer_release(x0);
  hcq_buffer_release(x1);
  OK(hcq_device_close(d0));
  OK(hcq_device_close(d1));
}

/* After replays, with nothing in flight, the communication thread sleeps: the process uses almost
 * no CPU over 300 ms (its bounded spin, HCQ_MPI_SPIN_NS, is for requests in flight only). */
static void scenario_idle(void) {
  /* Every rank builds the same graph: rank r's buffer to rank r+1's, for all r (a ring). */
  hcq_buffer_t *bufs[MAXR];
  hcq_device_t *devs[MAXR];
  for (int r = 0; r < size; r++) {
    char n[32];
    snprintf(n, sizeof(n), "%d/CPU:0", r);
    OK(hcq_device_open(n, &devs[r]));
    OK(hcq_buffer_create(devs[r], 4, &bufs[r]));
  }
  hcq_exec_item_t items[MAXR];
  for (int r = 0; r < size; r++)
    items[r] = (hcq_exec_item_t){.kind = HCQ_ITEM_TRANSFER,
                                 .transfer = {bufs[(r + 1) % size], bufs[r], 4}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, (size_t)size, NULL, 0, NULL, 0, NULL, &g));
  for (int i = 0; i < 50; i++) OK(hcq_graph_run(g, NULL, 0, NULL, 0, true, NULL));
  OK(hcq_mpi_barrier());
  struct timespec c0, c1, w = {0, 300000000L};
  nanosleep(&(struct timespec){0, 20000000L}, NULL); /* past any spin after the last replay */
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  nanosleep(&w, NULL);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  double ms = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
  printf("rank %d: %.2f ms CPU over 300 ms idle\n", rank, ms);
  if (ms > 30) {
    fprintf(stderr, "mpi_test idle: rank %d used %.2f ms of CPU while idle (expected < 30)\n", rank,
            ms);
    _exit(1);
  }
  OK(hcq_graph_destroy(g));
  for (int r = 0; r < size; r++) hcq_buffer_release(bufs[r]);
  for (int r = 0; r < size; r++) {
    OK(hcq_device_synchronize(devs[r]));
    OK(hcq_device_close(devs[r]));
  }
}

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 2 || size > MAXR) {
    if (rank == 0)
      fprintf(stderr,
              "usage: mpirun -np N (N <= %d) mpi_test "
              "eager|graph|mismatch|hang|kill|stopped|absent|idle|layout|hostruns|badspin|"
              "badcopies|badhostruns\n",
              MAXR);
    MPI_Finalize();
    return 2;
  }
  const char *s = argv[1];
  if (!strcmp(s, "badspin") || !strcmp(s, "badcopies") || !strcmp(s, "badhostruns")) {
    /* The runner sets HCQ_MPI_SPIN_NS (HCQ_MPI_COPIES, HCQ_MPI_HOST_RUNS) to something it does not
     * take. */
    const char *var = !strcmp(s, "badspin")     ? "HCQ_MPI_SPIN_NS"
                      : !strcmp(s, "badcopies") ? "HCQ_MPI_COPIES"
                                                : "HCQ_MPI_HOST_RUNS";
    hcq_status_t st = hcq_mpi_init(MPI_COMM_WORLD);
    EXPECT(st && hcq_status_code(st) == HCQ_INVALID_ARGUMENT &&
           strstr(hcq_status_message(st), var));
    EXPECT(!hcq_mpi_running());
    hcq_status_destroy(st);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("mpi_test %s: ok\n", s);
    MPI_Finalize();
    return 0;
  }
  OK(hcq_mpi_init(MPI_COMM_WORLD));
  EXPECT(hcq_mpi_rank() == rank && hcq_mpi_size() == size);
  /* The control-plane calls every scenario may lean on: a max over the ranks, a refused NULL. */
  int most = -1;
  OK(hcq_mpi_allreduce_max(rank * 10, &most));
  EXPECT(most == (size - 1) * 10);
  hcq_status_t refused = hcq_mpi_allreduce_max(rank, NULL);
  EXPECT(refused && hcq_status_code(refused) == HCQ_INVALID_ARGUMENT);
  hcq_status_destroy(refused);
  EXPECT(!hcq_mpi_peer_failed());
  if (!strcmp(s, "eager"))
    scenario_eager();
  else if (!strcmp(s, "graph"))
    scenario_graph();
  else if (!strcmp(s, "mismatch"))
    scenario_mismatch();
  else if (!strcmp(s, "hang"))
    scenario_fault(false);
  else if (!strcmp(s, "kill"))
    scenario_fault(true);
  else if (!strcmp(s, "stopped"))
    scenario_stopped();
  else if (!strcmp(s, "absent"))
    scenario_absent();
  else if (!strcmp(s, "idle"))
    scenario_idle();
  else if (!strcmp(s, "layout"))
    scenario_layout();
  else if (!strcmp(s, "hostruns"))
    scenario_hostruns();
  else
    die(__LINE__, "unknown scenario", NULL);
  OK(hcq_mpi_barrier());
  if (rank == 0 && strcmp(s, "hang")) printf("mpi_test %s: ok\n", s);
  OK(hcq_mpi_finalize());
  MPI_Finalize();
  return 0;
}
