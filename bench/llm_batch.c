/* Aggregate decoding speed of hcq_llm_batch_* at 1, 4 and 8 sequences against one hcq_llm_generate
 * stream, on one model (argv[1]; default: SmolLM2) and device (argv[2]; default CPU). Each sequence
 * decodes NEW tokens after a short prompt (ignore_eos); the time counted is the steps after every
 * prompt is in, so it is decoding alone. Prints one line per batch size: median of RUNS runs. The
 * thread count is the CPU device's (HCQ_CPU_THREADS). */
#include <hcq/llm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { NEW = 64, RUNS = 5, MAX_SEQS = 8 };

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define CHECK(call)                                                \
  do {                                                             \
    hcq_status_t st_ = (call);                                     \
    if (st_) {                                                     \
      fprintf(stderr, "%s: %s\n", #call, hcq_status_message(st_)); \
      exit(1);                                                     \
    }                                                              \
  } while (0)

/* Decoding tokens a second of nseq sequences together. */
static double batch_rate(hcq_llm_t *llm, hcq_llm_batch_t *b, int nseq) {
  hcq_llm_generate_options_t o = {.max_tokens = NEW, .ignore_eos = true};
  for (int k = 0; k < nseq; k++) {
    char text[64];
    snprintf(text, sizeof(text), "Story %d: once upon a time", k);
    int32_t ids[64];
    size_t n;
    CHECK(hcq_llm_tokenize(llm, text, strlen(text), true, false, ids, 64, &n));
    int seq;
    CHECK(hcq_llm_batch_add(b, ids, n, &o, &seq));
  }
  hcq_llm_batch_event_t ev[MAX_SEQS];
  size_t nev, tokens = 0;
  CHECK(hcq_llm_batch_step(b, ev, MAX_SEQS, &nev)); /* the prompts, and every first token */
  double t0 = now_ms();
  while (hcq_llm_batch_active(b)) {
    CHECK(hcq_llm_batch_step(b, ev, MAX_SEQS, &nev));
    tokens += nev;
  }
  return tokens / ((now_ms() - t0) / 1e3);
}

static double generate_rate(hcq_llm_t *llm) {
  hcq_llm_generate_options_t o = {.max_tokens = NEW, .ignore_eos = true};
  hcq_llm_result_t r;
  CHECK(hcq_llm_generate_text(llm, "Story 0: once upon a time", &o, &r));
  double rate = (r.n - 1) / (r.decode_ms / 1e3);
  hcq_llm_result_free(&r);
  return rate;
}

int main(int argc, char **argv) {
  hcq_llm_t *llm;
  CHECK(hcq_llm_open(
      argc > 1 ? argv[1] : NULL,
      &(hcq_llm_options_t){.ctx = 256, .device = argc > 2 ? argv[2] : NULL, .no_download = true},
      &llm));
  hcq_llm_batch_t *b;
  CHECK(
      hcq_llm_batch_create(llm, &(hcq_llm_batch_options_t){.max_seqs = MAX_SEQS, .ctx = 128}, &b));
  double single[RUNS], rates[3][RUNS];
  int sizes[3] = {1, 4, 8};
  for (int r = 0; r < RUNS;
       r++) { /* interleaved, so that the machine's load falls on every row alike */
    single[r] = generate_rate(llm);
    for (int s = 0; s < 3; s++) rates[s][r] = batch_rate(llm, b, sizes[s]);
  }
  qsort(single, RUNS, sizeof(double), cmp_double);
  printf("hcq generate, one stream: %.0f tok/s (median of %d)\n", single[RUNS / 2], RUNS);
  for (int s = 0; s < 3; s++) {
    qsort(rates[s], RUNS, sizeof(double), cmp_double);
    printf(
        "hcq_llm_batch, %d sequences: %.0f tok/s aggregate (%.2fx one stream; runs %.0f .. %.0f)\n",
        sizes[s], rates[s][RUNS / 2], rates[s][RUNS / 2] / single[RUNS / 2], rates[s][0],
        rates[s][RUNS - 1]);
  }
  CHECK(hcq_llm_batch_destroy(b));
  CHECK(hcq_llm_close(llm));
  return 0;
}
