/* The load the machine was under while a benchmark ran (hcq generate --bench, hcq demo): timings
 * taken beside other busy processes say little about hcq, and the table should say so. */
#ifndef HCQ_CLI_HOST_LOAD_H
#define HCQ_CLI_HOST_LOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct cli_host_load {
  double load1; /* the 1-minute load average (runnable and uninterruptible tasks, all processes) */
  long cpus;    /* CPUs online */
  bool known;   /* false where the system gives no load average */
} cli_host_load_t;

/* The machine's load now. */
cli_host_load_t cli_host_load_read(void);
/* The report's line for l ("load average 0.42 (1 minute) on 2 CPUs", and when the load exceeds the
 * CPUs the warning that the timings are not representative), without a trailing newline, into out.
 * True when the machine was busy. */
bool cli_host_load_describe(cli_host_load_t l, char *out, size_t size);
/* Reads the load and prints its line, indented, with a newline, to f. */
void cli_host_load_print(FILE *f);
/* Reads the load and prints it as JSON members, each after ", ": "load_average" (null where
 * unknown), "cpus" and "busy" (the load exceeded the CPUs), for a --json object. */
void cli_host_load_print_json(FILE *f);

#endif
