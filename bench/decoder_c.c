/* The llama2 decoder in plain C (tests/llama2_reference.h): one running sum per output row, in
 * order. Built twice: as is (the plain sequential decoder) and with -fopenmp, where the rows of
 * each matrix product and the attention heads become `omp parallel for` (the OpenMP decoder).
 * Decodes the generated models of `hcq demo` from BOS and prints tokens/s rows (bench/rows.h).
 *
 *   decoder_c [STEPS] [REPS]                          (defaults 256 and 3)
 */
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "llama2_reference.h"
#include "rows.h"

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 256, reps = argc > 2 ? atoi(argv[2]) : 3;
  if (reps < 1 || reps > 50 || steps < 1) return 2;
#ifdef _OPENMP
  const char *who = "C decoder, OpenMP parallel for";
  char note[128];
  snprintf(note, sizeof(note), "%d threads, per matrix product and over heads",
           omp_get_max_threads());
#else
  const char *who = "C decoder, plain sequential";
  const char *note = "one thread; one running sum per row";
#endif
  const llama2_shape_t shapes[2] = {LLAMA2_SHAPE_SMALL, LLAMA2_SHAPE_15M};
  const char *names[2] = {"decoder small", "decoder 15m"};
  for (int s = 0; s < 2; s++) {
    llama2_checkpoint_t ck;
    hcq_status_t st = llama2_checkpoint_generate(shapes[s], 42, &ck);
    if (st) {
      fprintf(stderr, "%s\n", hcq_status_message(st));
      return 1;
    }
    int n = steps < ck.config.seq_len ? steps : ck.config.seq_len;
    llama2_reference_t ref;
    if (ref_init(&ref, &ck)) return 1;
    double rate[50];
    int first_tokens = 0;
    for (int r = 0; r <= reps; r++) { /* run 0 warms up */
      double t0 = bench_now_s();
      int token = 1;
      for (int p = 0; p < n; p++)
        token = ref_argmax(ref_forward(&ref, token, p), ck.config.vocab_size);
      if (r == 0)
        first_tokens = token;
      else
        rate[r - 1] = n / (bench_now_s() - t0);
      if (token != first_tokens) fprintf(stderr, "decoder_c: runs disagree\n");
    }
    char full[256];
    snprintf(full, sizeof(full), "%s (%d steps)", note, n);
    emit_row(names[s], who, bench_median(rate, reps), "tok/s", full);
    ref_free(&ref);
    llama2_checkpoint_free(&ck);
  }
  return 0;
}
