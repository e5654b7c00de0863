/* Capture of a loop with a variable: the body of a loop is captured on its first iteration and
 * replayed for every later one with that iteration's value of `pos`. The launches use
 * hcq_launch_sym, whose operands may be expressions over variables: the capture records them as
 * expressions, so each replay computes them from its own value. (hcq_launch would record numbers,
 * and every replay would repeat the first iteration.)
 *
 *   cc capture_loop.c $(pkg-config --cflags --libs hcq) -o capture_loop && ./capture_loop
 */
#include <hcq/hcq.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                \
  do {                                                             \
    hcq_status_t st_ = (call);                                     \
    if (st_) {                                                     \
      fprintf(stderr, "%s: %s\n", #call, hcq_status_message(st_)); \
      hcq_status_destroy(st_);                                     \
      exit(1);                                                     \
    }                                                              \
  } while (0)

/* update: x[i] = x[i] * 5 + pos for i < n.   accumulate: y[i] += x[i] for i < n.   vals = {n, pos}
 */
static const char *const kSource =
    "void update(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {\n"
    "  uint32_t *x = bufs[0];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) {\n"
    "    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;\n"
    "    if (i < (size_t)vals[0]) x[i] = x[i] * 5 + (uint32_t)vals[1];\n"
    "  }\n"
    "}\n"
    "void accumulate(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {\n"
    "  uint32_t *y = bufs[0]; const uint32_t *x = bufs[1];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) {\n"
    "    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;\n"
    "    if (i < (size_t)vals[0]) y[i] += x[i];\n"
    "  }\n"
    "}\n";

enum { STEPS = 200, N = STEPS };

typedef struct model {
  hcq_program_t *update, *accumulate;
  hcq_buffer_t *x, *y;
  hcq_expr_t *pos, *len, *groups; /* the variable, pos + 1, (pos + 64) // 64 */
} model_t;

/* One iteration: the first pos + 1 elements of x and y change. at holds the value of pos. */
static hcq_status_t step(model_t *m, const hcq_var_value_t *at, size_t nat) {
  hcq_operand_t vals[] = {hcq_sym(m->len), hcq_sym(m->pos)}; /* n = pos + 1, and pos */
  hcq_launch_sym_desc_t update = {.program = m->update,
                                  .bufs = &m->x,
                                  .nbufs = 1,
                                  .vals = vals,
                                  .nvals = 2,
                                  .global = {hcq_sym(m->groups), hcq_imm(1), hcq_imm(1)},
                                  .local = {hcq_imm(64), hcq_imm(1), hcq_imm(1)}};
  hcq_status_t st = hcq_launch_sym(&update, at, nat);
  if (st) return st;

  hcq_buffer_t *xy[] = {m->y, m->x};
  static const uint32_t writes_first[] = {0}; /* y is written, x only read */
  hcq_launch_sym_desc_t accumulate = update;
  accumulate.program = m->accumulate;
  accumulate.bufs = xy, accumulate.nbufs = 2;
  accumulate.outs = writes_first, accumulate.nouts = 1;
  return hcq_launch_sym(&accumulate, at, nat);
}

int main(void) {
  hcq_device_t *dev;
  CHECK(hcq_device_open("CPU:0", &dev));
  model_t m;
  CHECK(hcq_program_create(dev, "update", kSource, &m.update));
  CHECK(hcq_program_create(dev, "accumulate", kSource, &m.accumulate));
  CHECK(hcq_buffer_create(dev, N * sizeof(uint32_t), &m.x)); /* buffers start as zeros */
  CHECK(hcq_buffer_create(dev, N * sizeof(uint32_t), &m.y));
  CHECK(hcq_var_create("pos", 0, STEPS - 1, &m.pos));
  CHECK(hcq_expr_parse("pos + 1", (const hcq_expr_t *[]){m.pos}, 1, &m.len));
  CHECK(hcq_expr_parse("(pos + 64) // 64", (const hcq_expr_t *[]){m.pos}, 1, &m.groups));

  hcq_jit_t *jit = NULL;
  for (int64_t p = 0; p < STEPS; p++) {
    hcq_var_value_t at[] = {{m.pos, p}};
    if (p == 0) {
      hcq_capture_t *cap;
      CHECK(hcq_capture_begin(&cap));
      CHECK(step(&m, at, 1)); /* runs, and is recorded with its expressions */
      CHECK(hcq_capture_end(cap, NULL, 0, at, 1, NULL, &jit));
      printf("%s", hcq_jit_report(jit)->text); /* what was graphed, and why anything was not */
    } else {
      /* the same launches, pos = p */
      CHECK(hcq_jit_run(jit, NULL, 0, at, 1, /*wait=*/false, NULL));
    }
  }

  /* The same loop on the host. */
  static uint32_t x[N], y[N], got[N];
  for (uint32_t p = 0; p < STEPS; p++)
    for (uint32_t i = 0; i <= p; i++) x[i] = x[i] * 5 + p, y[i] += x[i];
  CHECK(hcq_buffer_copyout(m.y, 0, got, sizeof(got))); /* waits for the replays */
  int bad = 0;
  for (int i = 0; i < N; i++) bad += got[i] != y[i];
  printf("capture_loop: %d iterations (1 captured, %d replayed), y[0] = %u, %s\n", STEPS, STEPS - 1,
         got[0], bad ? "WRONG" : "as expected");

  CHECK(hcq_jit_destroy(jit));
  hcq_expr_release(m.groups);
  hcq_expr_release(m.len);
  hcq_expr_release(m.pos);
  hcq_buffer_release(m.x);
  hcq_buffer_release(m.y);
  hcq_program_release(m.update);
  hcq_program_release(m.accumulate);
  CHECK(hcq_device_close(dev));
  return bad ? 1 : 0;
}
