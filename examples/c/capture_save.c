/* Saving a capture: the captured work is written as a graph file that the hcq command runs again,
 * checks (graph replay against eager execution) and times, without this program.
 *
 *   cc capture_save.c $(pkg-config --cflags --libs hcq) -o capture_save
 *   ./capture_save step.json && hcq run step.json --check && hcq bench step.json
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

/* y[i] = x[i] * a + y[i] for i < n; bufs = {y, x}, vals = {n, a}. */
static const char *const kAxpy =
    "void axpy(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {\n"
    "  uint32_t *y = bufs[0]; const uint32_t *x = bufs[1];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) {\n"
    "    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;\n"
    "    if (i < (size_t)vals[0]) y[i] = x[i] * (uint32_t)vals[1] + y[i];\n"
    "  }\n"
    "}\n";

enum { N = 1024, LAYERS = 8 };

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "step.json";
  hcq_device_t *dev;
  CHECK(hcq_device_open("CPU:0", &dev));
  hcq_program_t *axpy;
  CHECK(hcq_program_create(dev, "axpy", kAxpy, &axpy)); /* saved with its source */
  hcq_buffer_t *x, *y;
  CHECK(hcq_buffer_create(dev, N * sizeof(uint32_t), &x));
  CHECK(hcq_buffer_create(dev, N * sizeof(uint32_t), &y));
  static uint32_t host[N];
  for (uint32_t i = 0; i < N; i++) host[i] = i * 2654435761u;
  CHECK(hcq_buffer_copyin(x, 0, host, sizeof(host)));
  hcq_buffer_set_label(x, "x"); /* buffer names in the file */
  hcq_buffer_set_label(y, "y");

  hcq_expr_t *n, *groups;
  CHECK(hcq_var_create("n", 1, N, &n));
  CHECK(hcq_expr_parse("(n+127)//128", (const hcq_expr_t *[]){n}, 1, &groups));
  hcq_var_value_t at[] = {{n, N}};

  hcq_capture_t *cap;
  CHECK(hcq_capture_begin(&cap));
  for (int layer = 0; layer < LAYERS; layer++) {
    hcq_buffer_t *bufs[] = {layer % 2 ? x : y, layer % 2 ? y : x};
    static const uint32_t writes_first[] = {0};
    hcq_operand_t vals[] = {hcq_sym(n), hcq_imm(layer + 2)};
    hcq_launch_sym_desc_t l = {.program = axpy,
                               .bufs = bufs,
                               .nbufs = 2,
                               .vals = vals,
                               .nvals = 2,
                               .global = {hcq_sym(groups), hcq_imm(1), hcq_imm(1)},
                               .local = {hcq_imm(128), hcq_imm(1), hcq_imm(1)},
                               .outs = writes_first,
                               .nouts = 1};
    CHECK(hcq_launch_sym(&l, at, 1));
  }
  hcq_jit_t *jit;
  CHECK(hcq_capture_end(cap, &x, 1, at, 1, NULL, &jit)); /* x is the input a replay may swap */
  CHECK(hcq_jit_save(jit, path)); /* programs, buffers with their contents, items, n, inputs */
  printf("capture_save: %zu launches saved to %s; run them again with: hcq run %s --check\n",
         hcq_jit_item_count(jit), path, path);

  CHECK(hcq_jit_destroy(jit));
  hcq_expr_release(groups);
  hcq_expr_release(n);
  hcq_buffer_release(x);
  hcq_buffer_release(y);
  hcq_program_release(axpy);
  CHECK(hcq_device_close(dev));
  return 0;
}
