/* The hcq tool run from a test (HCQ_CLI, set by ctest): its standard output and exit status, or
 * its JSON. For the LLM suites that check the CLI against the library (test_llm,
 * test_llm_chat_cli). */
#ifndef HCQ_TESTS_LLM_CLI_UTIL_H
#define HCQ_TESTS_LLM_CLI_UTIL_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "llm_test_util.h"

static inline const char *cli_path(void) {
  const char *cli = getenv("HCQ_CLI");
  if (!cli || !*cli) cr_skip_test("HCQ_CLI is not set (ctest sets it)");
  return cli;
}

/* hcq ARGS (a shell fragment) with input on standard input (NULL: none); standard output into *out
 * (malloc'd, at most 1 MiB), standard error dropped; the exit status. */
static inline int run_cli_with(const char *input, const char *args, char **out) {
  char cmd[4 * PATH_MAX + 1024], in[PATH_MAX], path[PATH_MAX];
  tmp_path(in, sizeof(in), "cli_in");
  tmp_path(path, sizeof(path), "cli_out");
  FILE *f = fopen(in, "wb");
  cr_assert(f);
  fputs(input ? input : "", f);
  fclose(f);
  snprintf(cmd, sizeof(cmd), "'%s' %s < '%s' > '%s' 2> /dev/null", cli_path(), args, in, path);
  int rc = system(cmd);
  f = fopen(path, "rb");
  cr_assert(f);
  *out = calloc(1, 1 << 20);
  size_t n = fread(*out, 1, (1 << 20) - 1, f);
  (*out)[n] = 0;
  fclose(f);
  unlink(path), unlink(in);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* hcq ARGS, which must exit 0 and print JSON: the parsed object (json_decref it). */
static inline json_t *run_json(const char *args) {
  char *out;
  int rc = run_cli_with(NULL, args, &out);
  cr_assert_eq(rc, 0, "hcq %s: exit %d, output %.300s", args, rc, out);
  json_error_t err;
  json_t *j = json_loads(out, 0, &err);
  cr_assert(j, "hcq %s: not JSON (%s): %.300s", args, err.text, out);
  free(out);
  return j;
}

#endif
