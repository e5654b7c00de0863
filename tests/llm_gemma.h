/* Where the tests find Gemma 3 270M (Q4_K_M): $HCQ_GEMMA_GGUF, else the data folder's copy, which
 * the llm_gemma_fetch test puts there (hcq generate --model gemma-3-270m --fetch-model). A test
 * that needs it skips, saying so, when it is absent. Header-only. */
#ifndef HCQ_TESTS_LLM_GEMMA_H
#define HCQ_TESTS_LLM_GEMMA_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "llm.h"
#include "test_util.h"

static inline const char *llm_gemma_path(char *out, size_t size) {
  const char *env = getenv("HCQ_GEMMA_GGUF");
  if (env && *env) {
    snprintf(out, size, "%s", env);
  } else {
    char dir[4000];
    llm_data_dir(dir, sizeof(dir));
    snprintf(out, size, "%s/models/gemma-3-270m-q4_k_m.gguf", dir);
  }
  if (access(out, R_OK))
    cr_skip_test(
        "%s: absent (the llm_gemma_fetch test fetches it from PyPI; HCQ_GEMMA_GGUF names one)",
        out);
  return out;
}

#endif
