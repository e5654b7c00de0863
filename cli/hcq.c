/* The hcq command: see docs/cli.md. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f) { fputs(cli_help_text(NULL), f); }

int cli_fail(hcq_status_t st) {
  hcq_status_code_t code = hcq_status_code(st);
  if (cli_mpi_on())
    fprintf(stderr, "hcq (rank %d): %s\n", cli_mpi_rank(), hcq_status_message(st));
  else
    fprintf(stderr, "hcq: %s\n", hcq_status_message(st));
  fflush(stderr);
  cli_mpi_give_up(code, hcq_status_message(st));
  hcq_status_destroy(st);
  switch (code) {
    case HCQ_INVALID_ARGUMENT:
    case HCQ_NOT_FOUND:
    case HCQ_OUT_OF_RANGE: return HCQ_EXIT_BAD_INPUT;
    default: return HCQ_EXIT_RUNTIME;
  }
}

int cli_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "hcq: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  return HCQ_EXIT_BAD_INPUT;
}

bool cli_parse_uint(const char *s, unsigned long long lo, unsigned long long hi,
                    unsigned long long *out) {
  if (!s || !*s || *s == '-' || *s == '+') return false;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool cli_parse_device_kind(const char *s, hcq_device_kind_t *out) {
  for (int k = 0; s && k < HCQ_DEVICE_KIND_COUNT; k++) {
    const char *name = hcq_device_kind_name((hcq_device_kind_t)k);
    bool upper = !strcmp(s, name), lower = strlen(s) == strlen(name);
    for (size_t i = 0; lower && name[i]; i++) lower = s[i] == (char)(name[i] - 'A' + 'a');
    if (upper || lower) {
      *out = (hcq_device_kind_t)k;
      return true;
    }
  }
  return false;
}

hcq_status_t cli_sync_file(const hcq_graph_file_t *gf) {
  for (size_t i = 0; i < hcq_graph_file_device_count(gf); i++) {
    hcq_status_t st = hcq_device_synchronize(hcq_graph_file_device(gf, i));
    if (st) return st;
  }
  return NULL;
}

static int cmd_info(int argc, char **argv) {
  (void)argv;
  if (argc > 0) return cli_usage_error("info takes no arguments");
  hcq_device_info_t infos[8];
  size_t n = hcq_device_query(infos, 8);
  printf("hcq %d.%d.%d\n", HCQ_VERSION_MAJOR, HCQ_VERSION_MINOR, HCQ_VERSION_PATCH);
  if (cli_mpi_on()) printf("MPI    rank %d of %d\n", cli_mpi_rank(), cli_mpi_size());
  for (size_t i = 0; i < n && i < 8; i++)
    printf("%-6s %-9s %s\n", hcq_device_kind_name(infos[i].kind),
           infos[i].available ? "available" : "absent", infos[i].description);
  cli_info_memory();
  return HCQ_EXIT_OK;
}

static int cmd_help(int argc, char **argv) {
  if (argc > 1) return cli_usage_error("help takes at most one command");
  const char *text = cli_help_text(argc ? argv[0] : NULL);
  if (!text)
    return cli_usage_error(
        "no help for \"%s\": commands are info, run, bench, compile, demo, embed, generate, chat, "
        "serve, tokenize, inspect",
        argv[0]);
  fputs(text, stdout);
  return HCQ_EXIT_OK;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return HCQ_EXIT_BAD_INPUT;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help"))
    return cmd_help(argc - 2, argv + 2);
  if (!strcmp(cmd, "--version")) {
    printf("hcq %d.%d.%d\n", HCQ_VERSION_MAJOR, HCQ_VERSION_MINOR, HCQ_VERSION_PATCH);
    return HCQ_EXIT_OK;
  }
  /* hcq COMMAND ... --help: the command's help, whatever else the line holds. */
  const char *help = cli_help_text(cmd);
  if (help && cli_wants_help(argc - 2, argv + 2)) {
    fputs(help, stdout);
    return HCQ_EXIT_OK;
  }
  /* Offline: no devices, no MPI (hcq compile and hcq inspect open nothing). */
  if (!strcmp(cmd, "compile")) return cli_compile(argc - 2, argv + 2);
  if (!strcmp(cmd, "inspect")) return cli_inspect(argc - 2, argv + 2);
  int known = !strcmp(cmd, "info") || !strcmp(cmd, "run") || !strcmp(cmd, "bench") ||
              !strcmp(cmd, "demo") || !strcmp(cmd, "embed") || !strcmp(cmd, "generate") ||
              !strcmp(cmd, "tokenize") || !strcmp(cmd, "chat");
  /* hcq serve runs its own threads and signal handling, never under mpirun */
  if (!strcmp(cmd, "serve")) return cli_serve(argc - 2, argv + 2);
  if (known) {
    hcq_status_t st = cli_mpi_start();
    if (st) return cli_fail(st);
    int rc = !strcmp(cmd, "info")       ? cmd_info(argc - 2, argv + 2)
             : !strcmp(cmd, "run")      ? cli_run(argc - 2, argv + 2)
             : !strcmp(cmd, "bench")    ? cli_bench(argc - 2, argv + 2)
             : !strcmp(cmd, "demo")     ? cli_demo(argc - 2, argv + 2)
             : !strcmp(cmd, "embed")    ? cli_embed(argc - 2, argv + 2)
             : !strcmp(cmd, "generate") ? cli_generate(argc - 2, argv + 2)
             : !strcmp(cmd, "chat")     ? cli_chat(argc - 2, argv + 2)
                                        : cli_tokenize(argc - 2, argv + 2);
    return cli_mpi_finish(rc);
  }
  fprintf(stderr, "hcq: unknown command \"%s\"\n", cmd);
  usage(stderr);
  return HCQ_EXIT_BAD_INPUT;
}
