/* Replays in flight, each with its own fence: replay i's output is read through a mapped buffer as
 * soon as replay i finished, while replay i + 1 already runs. The input is the application's own
 * memory, wrapped (zero-copy).
 *
 *   cc fences.c $(pkg-config --cflags --libs hcq) -o fences && ./fences
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

/* out[i] = in[i] * in[i] + step for i < n; bufs = {out, in}, vals = {n, step}. */
static const char *const kSquarePlus =
    "void square_plus(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {\n"
    "  int32_t *out = bufs[0];\n"
    "  const int32_t *in = bufs[1];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) {\n"
    "    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;\n"
    "    if (i < (size_t)vals[0]) out[i] = in[i] * in[i] + vals[1];\n"
    "  }\n"
    "}\n";

enum { N = 1024, STEPS = 16 };

/* The replay of step i wrote out: check it against the host. */
static int check(const int32_t *out, const int32_t *in, int step) {
  for (int i = 0; i < N; i++)
    if (out[i] != in[i] * in[i] + step) return 1;
  return 0;
}

int main(void) {
  hcq_device_t *dev;
  CHECK(hcq_device_open("CPU:0", &dev));
  hcq_program_t *prog;
  CHECK(hcq_program_create(dev, "square_plus", kSquarePlus, &prog));

  /* The input: the application's memory, which the device's kernels read in place. */
  int32_t *input = aligned_alloc(HCQ_WRAP_ALIGN, N * sizeof(int32_t));
  for (int i = 0; i < N; i++) input[i] = i - N / 2;
  hcq_buffer_t *in;
  CHECK(hcq_buffer_wrap(dev, input, N * sizeof(int32_t), NULL, NULL, &in));
  /* Two outputs the host reads in place, one per replay in flight. */
  hcq_buffer_t *out[2];
  int32_t *out_host[2];
  hcq_fence_t *done[2];
  for (int k = 0; k < 2; k++) {
    CHECK(hcq_buffer_create_mapped(dev, N * sizeof(int32_t), &out[k]));
    CHECK(hcq_buffer_map(out[k], (void **)&out_host[k]));
    CHECK(hcq_fence_create(&done[k]));
  }

  hcq_expr_t *step;
  CHECK(hcq_var_create("step", 0, STEPS, &step));
  hcq_operand_t vals[] = {hcq_imm(N), hcq_sym(step)};
  hcq_buffer_t *bufs[] = {out[0], in};
  hcq_exec_item_t item = {.kind = HCQ_ITEM_KERNEL,
                          .kernel = {prog,
                                     bufs,
                                     2,
                                     (const uint32_t[]){0},
                                     1,
                                     vals,
                                     2,
                                     {hcq_imm(N / 64), hcq_imm(1), hcq_imm(1)},
                                     {hcq_imm(64), hcq_imm(1), hcq_imm(1)}}};
  hcq_graph_t *graph;
  /* out[0]: input 0 */
  CHECK(hcq_graph_create(&item, 1, &out[0], 1, (hcq_var_value_t[]){{step, 0}}, 1, NULL, &graph));

  int bad = 0;
  for (int i = 0; i <= STEPS; i++) {
    if (i < STEPS) { /* replay i into out[i % 2]; its fence is done[i % 2] */
      hcq_var_value_t at = {step, i};
      CHECK(hcq_graph_submit(graph, &out[i % 2], 1, &at, 1, done[i % 2]));
    }
    if (i > 0) { /* replay i - 1 alone finished: read its output while replay i runs */
      CHECK(hcq_fence_wait(done[(i - 1) % 2], HCQ_TIMEOUT_DEFAULT));
      bad += check(out_host[(i - 1) % 2], input, i - 1);
    }
  }

  CHECK(hcq_graph_destroy(graph));
  hcq_expr_release(step);
  for (int k = 0; k < 2; k++) {
    hcq_fence_destroy(done[k]);
    hcq_buffer_release(out[k]);
  }
  hcq_buffer_release(in);
  hcq_program_release(prog);
  CHECK(hcq_device_synchronize(dev)); /* the input's last user is done: it may be freed */
  free(input);
  CHECK(hcq_device_close(dev));
  if (bad) {
    printf("%d of %d replays differ from the host's results\n", bad, STEPS);
    return 1;
  }
  printf("%d replays, two in flight, each read when its fence was reached: as expected\n", STEPS);
  return 0;
}
