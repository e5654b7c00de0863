/* The llama2 decoder on hcq (examples/llama2), as `hcq demo` runs it: tokens/s of graph replays
 * and of eager launches, steps queued back to back, median over repetitions (bench/rows.h rows).
 *
 *   decoder_hcq [STEPS] [REPS]                        (defaults 256 and 5)
 */
#include <string.h>

#include "llama2.h"
#include "rows.h"

#define CHECK(call)                                                               \
  do {                                                                            \
    hcq_status_t st_ = (call);                                                    \
    if (st_) {                                                                    \
      fprintf(stderr, "decoder_hcq: %s: %s\n", #call, hcq_status_message(st_));  \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

static double decode(llama2_decoder_t *dec, bool graph, int steps, int reps, int32_t *tokens) {
  double rate[50];
  for (int r = 0; r <= reps; r++) {
    CHECK(llama2_decoder_reset(dec));
    CHECK(llama2_decoder_sync(dec));
    double t0 = bench_now_s();
    for (int p = 0; p < steps; p++) CHECK(graph ? llama2_decoder_step_graph(dec, p) : llama2_decoder_step_eager(dec, p));
    CHECK(llama2_decoder_sync(dec));
    if (r) rate[r - 1] = steps / (bench_now_s() - t0);
  }
  CHECK(llama2_decoder_tokens(dec, tokens, steps));
  return bench_median(rate, reps);
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 256, reps = argc > 2 ? atoi(argv[2]) : 5;
  if (reps < 1 || reps > 50 || steps < 1) return 2;
  const llama2_shape_t shapes[2] = {LLAMA2_SHAPE_SMALL, LLAMA2_SHAPE_15M};
  const char *names[2] = {"decoder small", "decoder 15m"};
  for (int s = 0; s < 2; s++) {
    llama2_checkpoint_t ck;
    CHECK(llama2_checkpoint_generate(shapes[s], 42, &ck));
    int n = steps < ck.config.seq_len ? steps : ck.config.seq_len;
    llama2_decoder_options_t opts = {1, 0, false};
    llama2_decoder_t *dec;
    CHECK(llama2_decoder_create(&ck, &opts, &dec));
    llama2_checkpoint_free(&ck);
    int32_t *eager_tokens = calloc((size_t)n, 4), *graph_tokens = calloc((size_t)n, 4);
    double eager = decode(dec, false, n, reps, eager_tokens);
    CHECK(llama2_decoder_capture(dec, 0));
    double graph = decode(dec, true, n, reps, graph_tokens);
    bool same = !memcmp(eager_tokens, graph_tokens, (size_t)n * 4);
    char note[160];
    snprintf(note, sizeof(note), "%zu kernels/token, one captured step replayed (%d steps)%s",
             llama2_decoder_kernels_per_step(dec), n, same ? "" : "; TOKENS DIFFER FROM EAGER");
    emit_row(names[s], "hcq graph replay", graph, "tok/s", note);
    snprintf(note, sizeof(note), "%zu launches/token, kernel by kernel (%d steps)", llama2_decoder_kernels_per_step(dec), n);
    emit_row(names[s], "hcq eager", eager, "tok/s", note);
    free(eager_tokens);
    free(graph_tokens);
    CHECK(llama2_decoder_destroy(dec));
  }
  return 0;
}
