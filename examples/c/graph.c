/* Building and replaying a graph: three exec items over two devices (a kernel, a transfer, a
 * kernel), built once and replayed with a new input buffer and new variable values.
 *
 *   cc graph.c $(pkg-config --cflags --libs hcq) -o graph && ./graph
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

/* y[i] = y[i] * a + b for i < n; bufs = {y}, vals = {n, a, b}. */
static const char *const kScale =
    "void scale(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {\n"
    "  uint32_t *y = bufs[0];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) {\n"
    "    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;\n"
    "    if (i < (size_t)vals[0]) y[i] = y[i] * (uint32_t)vals[1] + (uint32_t)vals[2];\n"
    "  }\n"
    "}\n";

enum { N = 4096 };

static uint32_t host[N];

static hcq_buffer_t *iota_buffer(hcq_device_t *dev, uint32_t start) {
  hcq_buffer_t *b;
  CHECK(hcq_buffer_create(dev, sizeof(host), &b));
  for (uint32_t i = 0; i < N; i++) host[i] = start + i;
  CHECK(hcq_buffer_copyin(b, 0, host, sizeof(host)));
  return b;
}

int main(void) {
  hcq_device_t *cpu0, *cpu1;
  CHECK(hcq_device_open("CPU:0", &cpu0));
  CHECK(hcq_device_open("CPU:1", &cpu1));
  hcq_program_t *scale0, *scale1;
  CHECK(hcq_program_create(cpu0, "scale", kScale, &scale0));
  CHECK(hcq_program_create(cpu1, "scale", kScale, &scale1));
  hcq_buffer_t *x = iota_buffer(cpu0, 0), *x2 = iota_buffer(cpu0, 100000),
               *y = iota_buffer(cpu1, 0);

  /* n (the element count) and b are variables; (n+255)//256 work-groups of 256 follow n. */
  hcq_expr_t *n, *b, *groups;
  CHECK(hcq_var_create("n", 1, N, &n));
  CHECK(hcq_var_create("b", -1000, 1000, &b));
  CHECK(hcq_expr_parse("(n+255)//256", (const hcq_expr_t *[]){n}, 1, &groups));

  static const uint32_t writes_first[] = {0};
  hcq_operand_t vals0[] = {hcq_sym(n), hcq_imm(2), hcq_sym(b)},
                vals1[] = {hcq_sym(n), hcq_imm(3), hcq_imm(1)};
  hcq_exec_item_t items[3] = {
      /* CPU:0 -> CPU:1 */
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {scale0,
                  &x,
                  1,
                  writes_first,
                  1,
                  vals0,
                  3,
                  {hcq_sym(groups), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(256), hcq_imm(1), hcq_imm(1)}}},
      {.kind = HCQ_ITEM_TRANSFER, .transfer = {y, x, sizeof(host)}},
      {.kind = HCQ_ITEM_KERNEL,
       .kernel = {scale1,
                  &y,
                  1,
                  writes_first,
                  1,
                  vals1,
                  3,
                  {hcq_sym(groups), hcq_imm(1), hcq_imm(1)},
                  {hcq_imm(256), hcq_imm(1), hcq_imm(1)}}},
  };
  hcq_var_value_t at_build[] = {{n, N}, {b, 0}};
  hcq_graph_t *graph;
  CHECK(hcq_graph_create(items, 3, &x, 1, at_build, 2, NULL, &graph)); /* x is the graph's input */

  /* Replay: x2 instead of x, n = 1000, b = 7. Dependencies (x before the copy, the copy before y)
   * come from the buffers each item uses. */
  hcq_var_value_t at[] = {{n, 1000}, {b, 7}};
  uint64_t ns = 0;
  CHECK(hcq_graph_run(graph, &x2, 1, at, 2, /*wait=*/true, &ns));
  CHECK(hcq_buffer_copyout(y, 0, host, sizeof(host)));

  int bad = 0;
  for (uint32_t i = 0; i < N; i++) {
    uint32_t scaled = i < 1000 ? (100000 + i) * 2 + 7 : 100000 + i; /* x2 after the first kernel */
    bad += host[i] != (i < 1000 ? scaled * 3 + 1 : scaled);
  }
  printf("graph: %zu items on %zu devices, replay took %.1f us, y[0] = %u, %s\n",
         hcq_graph_item_count(graph), hcq_graph_device_count(graph), ns / 1e3, host[0],
         bad ? "WRONG" : "as expected");

  CHECK(hcq_graph_destroy(graph));
  hcq_expr_release(groups);
  hcq_expr_release(b);
  hcq_expr_release(n);
  hcq_buffer_release(x);
  hcq_buffer_release(x2);
  hcq_buffer_release(y);
  hcq_program_release(scale0);
  hcq_program_release(scale1);
  CHECK(hcq_device_close(cpu1));
  CHECK(hcq_device_close(cpu0));
  return bad ? 1 : 0;
}
