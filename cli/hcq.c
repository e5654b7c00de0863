/* The hcq command: see docs/cli.md (and ../shared/CLI.md, the contract it implements). */
#include <hcq/hcq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: hcq <command> [args]\n"
          "commands:\n"
          "  info                 list this machine's devices and what each supports\n"
          "  demo                 run the showcase workload\n");
}

static int cmd_info(void) {
  hcq_device_info_t infos[8];
  size_t n = hcq_device_query(infos, 8);
  printf("hcq %d.%d.%d\n", HCQ_VERSION_MAJOR, HCQ_VERSION_MINOR, HCQ_VERSION_PATCH);
  for (size_t i = 0; i < n && i < 8; i++)
    printf("%-5s %-9s %s\n", hcq_device_kind_name(infos[i].kind), infos[i].available ? "available" : "absent",
           infos[i].description);
  return HCQ_EXIT_OK;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return HCQ_EXIT_BAD_INPUT;
  }
  if (!strcmp(argv[1], "info")) return cmd_info();
  if (!strcmp(argv[1], "demo")) return hcq_cli_demo(argc - 2, argv + 2);
  if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return HCQ_EXIT_OK;
  }
  fprintf(stderr, "hcq: unknown command \"%s\"\n", argv[1]);
  usage(stderr);
  return HCQ_EXIT_BAD_INPUT;
}
