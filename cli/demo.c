/* hcq demo: a decode-style loop (many small kernels per step over two devices, a variable that
 * changes every step) captured once and replayed as graphs, against the same work run eagerly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

#define TRY(call)                \
  do {                           \
    hcq_status_t st_ = (call);   \
    if (st_) return st_;         \
  } while (0)

enum { N = 256, LAYERS0 = 48, LAYERS1 = 16, ITEMS = LAYERS0 + LAYERS1 + 2, STEPS = 300 };

static const char *k_source =
    "void layer(void *const *b, const int32_t *v, const hcq_launch_t *l) {\n"
    "  uint32_t *x = b[0]; const uint32_t *w = b[1];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) {\n"
    "    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;\n"
    "    x[i] = x[i] * (uint32_t)v[0] + w[i] + (uint32_t)v[1];\n"
    "  }\n"
    "}\n";

typedef struct side {
  hcq_buffer_t *x0, *w0, *x1, *w1;
  hcq_buffer_t *bufs[4][2];
  hcq_exec_item_t items[ITEMS];
} side_t;

static const uint32_t k_outs[1] = {0};

/* One step: LAYERS0 layers on CPU:0, to CPU:1, LAYERS1 layers there, back. */
static void make_items(side_t *s, hcq_program_t *p0, hcq_program_t *p1, const hcq_operand_t *vals) {
  hcq_buffer_t *pairs[2][2] = {{s->x0, s->w0}, {s->x1, s->w1}};
  memcpy(s->bufs[0], pairs[0], sizeof(pairs[0]));
  memcpy(s->bufs[1], pairs[1], sizeof(pairs[1]));
  size_t j = 0;
  for (int d = 0; d < 2; d++) {
    int layers = d ? LAYERS1 : LAYERS0;
    for (int k = 0; k < layers; k++) {
      hcq_kernel_item_t it = {d ? p1 : p0, s->bufs[d], 2, k_outs, 1, vals, 2,
                              {hcq_imm(N / 64), hcq_imm(1), hcq_imm(1)}, {hcq_imm(64), hcq_imm(1), hcq_imm(1)}};
      s->items[j].kind = HCQ_ITEM_KERNEL;
      s->items[j++].kernel = it;
    }
    s->items[j].kind = HCQ_ITEM_TRANSFER;
    s->items[j++].transfer = (hcq_transfer_item_t){d ? s->x0 : s->x1, d ? s->x1 : s->x0, N * 4};
  }
}

static hcq_status_t make_side(side_t *s, hcq_device_t *d0, hcq_device_t *d1) {
  memset(s, 0, sizeof(*s));
  uint32_t host[N];
  TRY(hcq_buffer_create(d0, N * 4, &s->x0));
  TRY(hcq_buffer_create(d0, N * 4, &s->w0));
  TRY(hcq_buffer_create(d1, N * 4, &s->x1));
  TRY(hcq_buffer_create(d1, N * 4, &s->w1));
  for (int i = 0; i < N; i++) host[i] = (uint32_t)i * 2654435761u;
  TRY(hcq_buffer_copyin(s->w0, 0, host, sizeof(host)));
  for (int i = 0; i < N; i++) host[i] = (uint32_t)i ^ 0x5bd1e995u;
  TRY(hcq_buffer_copyin(s->w1, 0, host, sizeof(host)));
  return NULL;
}

static void free_side(side_t *s) {
  hcq_buffer_release(s->x0);
  hcq_buffer_release(s->w0);
  hcq_buffer_release(s->x1);
  hcq_buffer_release(s->w1);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static hcq_status_t demo(hcq_device_t *d0, hcq_device_t *d1, hcq_program_t *p0, hcq_program_t *p1, hcq_expr_t *pos,
                         side_t *eager, side_t *replayed, int *mismatch) {
  hcq_operand_t vals[2] = {hcq_imm(3), hcq_sym(pos)};
  make_items(eager, p0, p1, vals);
  make_items(replayed, p0, p1, vals);

  /* Step 0 of the replayed side runs under capture: it executes and is recorded. */
  hcq_capture_t *cap;
  hcq_jit_t *jit = NULL;
  TRY(hcq_capture_begin(&cap));
  hcq_var_value_t v0 = {pos, 0};
  for (size_t j = 0; j < ITEMS; j++) {
    hcq_status_t st = hcq_exec_item_run(&replayed->items[j], &v0, 1);
    if (st) {
      hcq_capture_abort(cap);
      return st;
    }
  }
  TRY(hcq_capture_end(cap, NULL, 0, &v0, 1, NULL, &jit));
  for (size_t j = 0; j < ITEMS; j++) TRY(hcq_exec_item_run(&eager->items[j], &v0, 1));

  double te = 0, tg = 0, he = 0, hg = 0;
  hcq_status_t st = NULL;
  for (int step = 1; step < STEPS && !st; step++) {
    hcq_var_value_t v = {pos, step};
    double t0 = now_us();
    for (size_t j = 0; j < ITEMS && !st; j++) st = hcq_exec_item_run(&eager->items[j], &v, 1);
    double t1 = now_us();
    if (!st) st = hcq_device_synchronize(d0);
    double t2 = now_us();
    if (!st) st = hcq_jit_run(jit, NULL, 0, &v, 1, false, NULL);
    double t3 = now_us();
    if (!st) st = hcq_device_synchronize(d0);
    double t4 = now_us();
    he += t1 - t0, te += t2 - t0;
    hg += t3 - t2, tg += t4 - t2;
  }
  uint32_t a[N], b[N];
  if (!st) st = hcq_buffer_copyout(eager->x0, 0, a, sizeof(a));
  if (!st) st = hcq_buffer_copyout(replayed->x0, 0, b, sizeof(b));
  if (!st) {
    *mismatch = memcmp(a, b, sizeof(a)) != 0;
    printf("hcq demo: a decode-style step of %d small kernels and 2 transfers over CPU:0 and CPU:1,\n"
           "          with a step variable in every kernel, %d steps\n\n",
           LAYERS0 + LAYERS1, STEPS - 1);
    printf("capture report:\n%s\n", hcq_jit_report(jit)->text);
    int n = STEPS - 1;
    printf("                      host time per step   step to completion\n");
    printf("  eager               %11.1f us       %11.1f us\n", he / n, te / n);
    printf("  graph replay        %11.1f us       %11.1f us\n", hg / n, tg / n);
    printf("  graph / eager       %11.2f x        %11.2f x\n", hg > 0 ? he / hg : 0.0, tg > 0 ? te / tg : 0.0);
    printf("  (host time: what the calling thread spends submitting; the rest of a step is the devices\n"
           "   working and handing off to each other, which graph replay does not change)\n");
    printf("  result: %s\n", *mismatch ? "MISMATCH between replay and eager" : "replay matches eager execution byte for byte");
  }
  hcq_status_t dst = hcq_jit_destroy(jit);
  if (!st) st = dst;
  else hcq_status_free(dst);
  (void)d1;
  return st;
}

int cli_demo(int argc, char **argv) {
  (void)argv;
  if (argc > 0) return cli_usage_error("demo takes no arguments");
  hcq_device_t *d0 = NULL, *d1 = NULL;
  hcq_program_t *p0 = NULL, *p1 = NULL;
  hcq_expr_t *pos = NULL;
  side_t eager = {0}, replayed = {0};
  int mismatch = 0;
  hcq_status_t st = hcq_device_open("CPU:0", &d0);
  if (!st) st = hcq_device_open("CPU:1", &d1);
  if (!st) st = hcq_program_create(d0, "layer", k_source, &p0);
  if (!st) st = hcq_program_create(d1, "layer", k_source, &p1);
  if (!st) st = hcq_var_create("pos", 0, 1 << 20, &pos);
  if (!st) st = make_side(&eager, d0, d1);
  if (!st) st = make_side(&replayed, d0, d1);
  if (!st) st = demo(d0, d1, p0, p1, pos, &eager, &replayed, &mismatch);
  if (d0) hcq_status_free(hcq_device_synchronize(d0));
  if (d1) hcq_status_free(hcq_device_synchronize(d1));
  free_side(&eager);
  free_side(&replayed);
  hcq_expr_release(pos);
  hcq_program_release(p0);
  hcq_program_release(p1);
  if (d1) hcq_status_free(hcq_device_close(d1));
  if (d0) hcq_status_free(hcq_device_close(d0));
  if (st) return cli_fail(st);
  return mismatch ? HCQ_EXIT_CHECK_MISMATCH : HCQ_EXIT_OK;
}
