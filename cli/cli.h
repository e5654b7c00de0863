/* Pieces of the hcq command shared between its files. */
#ifndef HCQ_CLI_H
#define HCQ_CLI_H

/* Exit codes (CLI.md). */
enum {
  HCQ_EXIT_OK = 0,
  HCQ_EXIT_CHECK_MISMATCH = 1,
  HCQ_EXIT_BAD_INPUT = 2,
  HCQ_EXIT_RUNTIME = 3,
};

int hcq_cli_demo(int argc, char **argv);

#endif
