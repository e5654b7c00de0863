/* A seeded chaos loop (issue 7): good graphs over two devices mixed with kernels that fault
 * (isolation on), kernels that never return and queues waiting on signals nobody sets. Each failure
 * must be reported naming its culprit and bounded in time; the stuck device is declared lost,
 * closed and reopened; the good graphs keep giving eager-equal results throughout. Under
 * AddressSanitizer the run must end without leaks. HCQ_CHAOS_SEED picks another sequence. */
#include <inttypes.h>
#include <time.h>

#include "test_util.h"

TestSuite(chaos, .timeout = 120);

static const char *const k_kernels =
    "#include <unistd.h>\n"
    "void affine(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  int32_t *out = b[0]; const int32_t *in = b[1];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t i = (size_t)l->gid[0] * l->lsz[0] + t;\n"
    "    if (i < (size_t)v[2]) out[i] = in[i] * v[0] + v[1]; }\n"
    "}\n"
    "void boom(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)b; (void)v; (void)l; volatile int *p = (volatile int *)64; *p = 1;\n"
    "}\n"
    "void forever(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  (void)b; (void)v; (void)l; for (;;) usleep(2000);\n"
    "}\n";

#define NDEV 3
#define N 256

typedef struct {
  char name[16];
  hcq_device_t *dev;
  hcq_program_t *affine;
} slot_t;

static void slot_open(slot_t *s) {
  s->dev = test_open(s->name);
  s->affine = test_program(s->dev, "affine", k_kernels);
}

/* Closing a lost device succeeds even with objects alive; they are released after. */
static void slot_lose_and_reopen(slot_t *s, const char *why) {
  OK(hcq_device_declare_lost(s->dev, why));
  hcq_status_t st = hcq_device_health(s->dev);
  cr_assert_eq(hcq_status_code(st), HCQ_DEVICE_LOST);
  hcq_status_destroy(st);
  OK(hcq_device_close(s->dev));
  hcq_program_release(s->affine);
  slot_open(s);
}

static uint32_t next(uint32_t *seed) {
  *seed = *seed * 1664525u + 1013904223u;
  return *seed >> 8;
}

/* in (CPU a) -> affine -> mid (a) -> copy -> far (b) -> affine -> out (b), replayed with new inputs
 * and values; results checked against the same arithmetic on the host. */
static void good_graph(slot_t *a, slot_t *b, uint32_t *seed) {
  hcq_buffer_t *in = test_buffer_iota(a->dev, N, 1, (int32_t)(next(seed) % 100));
  hcq_buffer_t *in2 = test_buffer_iota(a->dev, N, 3, 1);
  hcq_buffer_t *mid = test_buffer(a->dev, N * 4), *far = test_buffer(b->dev, N * 4),
               *out = test_buffer(b->dev, N * 4);
  hcq_expr_t *m = NULL, *c = NULL;
  OK(hcq_var_create("m", -8, 8, &m));
  OK(hcq_var_create("c", -1000, 1000, &c));
  hcq_buffer_t *b0[] = {mid, in}, *b1[] = {out, far};
  hcq_operand_t v0[] = {hcq_sym(m), hcq_sym(c), hcq_imm(N)},
                v1[] = {hcq_imm(2), hcq_imm(-1), hcq_imm(N)};
  hcq_exec_item_t items[3] = {
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {a->affine,
                  b0,
                  2,
                  (uint32_t[]){0},
                  1,
                  v0,
                  3,
                  {hcq_imm(N / 64), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}},
      {.kind = HCQ_ITEM_TRANSFER, .transfer = {far, mid, N * 4}},
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {b->affine,
                  b1,
                  2,
                  (uint32_t[]){0},
                  1,
                  v1,
                  3,
                  {hcq_imm(N / 64), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}},
  };
  hcq_var_value_t vals[] = {{m, 1}, {c, 0}};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 3, &in, 1, vals, 2, NULL, &g));
  int32_t host_in[N], host_in2[N], got[N];
  test_read(in, host_in, sizeof(host_in));
  test_read(in2, host_in2, sizeof(host_in2));
  for (int r = 0; r < 3; r++) {
    vals[0].value = (int64_t)(next(seed) % 17) - 8;
    vals[1].value = (int64_t)(next(seed) % 2001) - 1000;
    bool swap = next(seed) & 1;
    OK(hcq_graph_run(g, swap ? &in2 : &in, 1, vals, 2, true, NULL));
    test_read(out, got, sizeof(got));
    for (int i = 0; i < N; i++) {
      int32_t x = (swap ? host_in2 : host_in)[i];
      int32_t want =
          (int32_t)(((uint32_t)x * (uint32_t)vals[0].value + (uint32_t)vals[1].value) * 2u - 1u);
      cr_assert_eq(got[i], want, "good graph on %s+%s, replay %d, element %d", a->name, b->name, r,
                   i);
    }
  }
  OK(hcq_graph_destroy(g));
  hcq_expr_release(m);
  hcq_expr_release(c);
  hcq_buffer_t *all[] = {in, in2, mid, far, out};
  for (int i = 0; i < 5; i++) hcq_buffer_release(all[i]);
}

static void faulting_kernel(slot_t *s) {
  hcq_program_t *p = test_program(s->dev, "boom", k_kernels);
  hcq_buffer_t *b = test_buffer(s->dev, 64);
  hcq_launch_desc_t ld = {p, &b, 1, NULL, 0, {1, 1, 1}, {1, 1, 1}, NULL, 0};
  OK(hcq_launch(&ld));
  FAILS(hcq_device_synchronize(s->dev), HCQ_DEVICE_LOST, s->name, "kernel boom", "SIGSEGV");
  FAILS(hcq_launch(&ld), HCQ_DEVICE_LOST, s->name);
  OK(hcq_device_close(s->dev));
  hcq_buffer_release(b);
  hcq_program_release(p);
  hcq_program_release(s->affine);
  slot_open(s);
}

static void kernel_never_returns(slot_t *s) {
  hcq_program_t *p = test_program(s->dev, "forever", k_kernels);
  hcq_buffer_t *b = test_buffer(s->dev, 64);
  hcq_launch_desc_t ld = {p, &b, 1, NULL, 0, {1, 1, 1}, {1, 1, 1}, NULL, 0};
  OK(hcq_launch(&ld));
  FAILS(hcq_device_synchronize(s->dev), HCQ_TIMEOUT, "hang report", s->name,
        "running exec kernel forever");
  hcq_buffer_release(b);
  hcq_program_release(p);
  slot_lose_and_reopen(s, "chaos: a kernel never returns");
}

static void wait_nobody_sets(slot_t *s, slot_t *other) {
  hcq_signal_t *never = NULL;
  OK(hcq_signal_create(other->dev, "nobody sets this", 0, &never));
  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COPY, &q));
  OK(hcq_queue_wait(q, hcq_imm((int64_t)hcq_signal_address(never)), hcq_imm(5)));
  OK(hcq_queue_submit(q, s->dev, NULL, 0));
  hcq_queue_destroy(q); /* the pending wait keeps what it needs */
  hcq_buffer_t *x = test_buffer(s->dev, 64), *y = test_buffer(s->dev, 64);
  /* Copy-queue work queues behind the stuck wait. */
  OK(hcq_transfer(y, x, 64));
  FAILS(hcq_device_synchronize(s->dev), HCQ_TIMEOUT,
        "copy queue: blocked at wait \"nobody sets this\" >= 5 (value 0)");
  hcq_buffer_release(x);
  hcq_buffer_release(y);
  slot_lose_and_reopen(s, "chaos: waits on a signal nobody sets");
  hcq_signal_destroy(never);
}

Test(chaos, seeded_faults_hangs_and_good_graphs) {
  setenv("HCQ_WAIT_TIMEOUT_MS", "600", 1);
  setenv("HCQ_CPU_ISOLATE", "1", 1);
  const char *env = getenv("HCQ_CHAOS_SEED");
  uint32_t seed = env ? (uint32_t)strtoul(env, NULL, 10) : 20261130u;
  cr_log_info("chaos seed %" PRIu32 " (HCQ_CHAOS_SEED)", seed);
  slot_t slots[NDEV];
  for (int i = 0; i < NDEV; i++) {
    snprintf(slots[i].name, sizeof(slots[i].name), "CPU:%d", 20 + i);
    slot_open(&slots[i]);
  }
  int counts[4] = {0}, stuck_threads = 0;
  for (int step = 0; step < 24; step++) {
    slot_t *a = &slots[next(&seed) % NDEV], *b = &slots[next(&seed) % NDEV];
    if (b == a) b = &slots[(a - slots + 1) % NDEV];
    int what = (int)(next(&seed) % 4);
    /* Each kernel that never returns keeps a sleeping thread for the rest of the process. */
    if (what == 2 && stuck_threads == 3) what = 0;
    counts[what]++;
    switch (what) {
      case 0: good_graph(a, b, &seed); break;
      case 1: faulting_kernel(a); break;
      case 2: kernel_never_returns(a), stuck_threads++; break;
      default: wait_nobody_sets(a, b); break;
    }
    /* The other devices stay usable whatever happened to this one. */
    for (int i = 0; i < NDEV; i++) {
      hcq_status_t st = hcq_device_health(slots[i].dev);
      cr_assert_null(st, "step %d: %s is unhealthy after a clean reopen: %s", step, slots[i].name,
                     hcq_status_message(st));
    }
  }
  cr_log_info("good graphs %d, faults %d, endless kernels %d, endless waits %d", counts[0],
              counts[1], counts[2], counts[3]);
  cr_assert(counts[0] && counts[1] && counts[3], "the seed exercises every kind of step");
  good_graph(&slots[0], &slots[1], &seed);
  for (int i = 0; i < NDEV; i++) {
    hcq_program_release(slots[i].affine);
    test_close(slots[i].dev);
  }
}
