/* Pieces of the hcq command shared between its files. */
#ifndef HCQ_CLI_H
#define HCQ_CLI_H

#include <hcq/hcq.h>
#include <stdbool.h>

/* Exit codes (docs/cli.md). */
enum {
  HCQ_EXIT_OK = 0,
  HCQ_EXIT_CHECK_MISMATCH = 1,
  HCQ_EXIT_BAD_INPUT = 2,
  HCQ_EXIT_RUNTIME = 3,
};

/* Prints "hcq: message" and returns the exit code for the failure: 2 for bad input, 3 for the
 * machine failing (compile errors, timeouts, devices). Frees st. */
int cli_fail(hcq_status_t st);
/* Prints "hcq: " + message to stderr and returns HCQ_EXIT_BAD_INPUT. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parses a whole non-negative decimal integer in [lo, hi]. */
bool cli_parse_uint(const char *s, unsigned long long lo, unsigned long long hi, unsigned long long *out);

/* Synchronizes every device of a loaded file. */
hcq_status_t cli_sync_file(const hcq_graph_file_t *gf);

/* The help text of command (NULL: of hcq itself), or NULL for an unknown command (cli/help.c). */
const char *cli_help_text(const char *command);
/* Whether the arguments ask for help (-h or --help anywhere). */
bool cli_wants_help(int argc, char **argv);

int cli_run(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_demo(int argc, char **argv);

#endif
