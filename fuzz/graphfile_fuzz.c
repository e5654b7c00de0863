/* libFuzzer target: any bytes as a graph file. Loading must fail cleanly or produce objects that
 * batch, replay once and free without error reports from the sanitizers. Kernels are not compiled
 * (skip_compile: no-ops) and buffers are capped, so the fuzzer explores the loader, not cc. */
#include <hcq/hcq.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hcq_graph_file_options_t opts = {.skip_compile = true, .max_total_bytes = 1 << 22};
  hcq_graph_file_t *gf = NULL;
  /* {"file": ...} paths resolve against HCQ_FUZZ_BASE_DIR (make fuzz: examples/, so the seeds
   * load). */
  const char *base = getenv("HCQ_FUZZ_BASE_DIR");
  hcq_status_t st = hcq_graph_file_load_text((const char *)data, size, "fuzz.json",
                                             base ? base : ".", &opts, &gf);
  if (st) {
    hcq_status_destroy(st);
    return 0;
  }
  hcq_jit_t *jit = NULL;
  st = hcq_jit_create(hcq_graph_file_items(gf), hcq_graph_file_item_count(gf),
                      hcq_graph_file_inputs(gf), hcq_graph_file_input_count(gf),
                      hcq_graph_file_vars(gf), hcq_graph_file_var_count(gf), NULL, &jit);
  for (size_t r = 0; !st && r < hcq_graph_file_run_count(gf) && r < 4; r++) {
    hcq_buffer_t *const *inputs;
    const hcq_var_value_t *vals;
    hcq_graph_file_run(gf, r, &inputs, &vals);
    st = hcq_jit_run(jit, inputs, hcq_graph_file_input_count(gf), vals,
                     hcq_graph_file_var_count(gf), true, NULL);
  }
  hcq_status_destroy(st);
  if (jit) hcq_status_destroy(hcq_jit_destroy(jit));
  for (size_t i = 0; i < hcq_graph_file_device_count(gf); i++)
    hcq_status_destroy(hcq_device_synchronize(hcq_graph_file_device(gf, i)));
  hcq_graph_file_destroy(gf);
  return 0;
}
