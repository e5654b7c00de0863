/* The plain C reference's greedy tokens for bench/decoder_fast.c, in a file of its own so that it
 * is compiled with the project's flags (no -Ofast, no OpenMP) and stays the reference. */
#include "llama2_reference.h"

int decoder_ref_tokens(const llama2_checkpoint_t *ck, int n, int *out);

int decoder_ref_tokens(const llama2_checkpoint_t *ck, int n, int *out) {
  llama2_reference_t ref;
  if (ref_init(&ref, ck)) return -1;
  int token = 1;
  for (int p = 0; p < n; p++)
    out[p] = token = ref_argmax(ref_forward(&ref, token, p), ck->config.vocab_size);
  ref_free(&ref);
  return 0;
}
