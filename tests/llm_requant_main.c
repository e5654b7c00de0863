/* llm_requant IN OUT RECIPE: tests/llm_requant.h as a command, for
 * scripts/llm-llamacpp-reference.py (llama.cpp's streams for the very files the tests write). */
#include <stdio.h>

#include "llm.h"
#include "llm_requant.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: llm_requant IN.gguf OUT.gguf RECIPE (a type name or Q4_K_M)\n");
    return 2;
  }
  hcq_status_t st = llm_requant(argv[1], argv[2], argv[3]);
  if (st) {
    fprintf(stderr, "llm_requant: %s\n", hcq_status_message(st));
    hcq_status_destroy(st);
    return 1;
  }
  return 0;
}
