/* The machine's load for benchmark reports (host_load.h). */
#include <stdlib.h>
#include <unistd.h>

#include "cli/host_load.h"

cli_host_load_t cli_host_load_read(void) {
  cli_host_load_t l = {0, sysconf(_SC_NPROCESSORS_ONLN), false};
  double avg[1];
  if (getloadavg(avg, 1) == 1) l.load1 = avg[0], l.known = true;
  if (l.cpus < 1) l.cpus = 1;
  return l;
}

bool cli_host_load_describe(cli_host_load_t l, char *out, size_t size) {
  if (!l.known) {
    snprintf(out, size, "load average unknown (this system gives none); %ld CPUs", l.cpus);
    return false;
  }
  /* The load average counts this process's own busy threads too; more than one per CPU means
   * threads waited for a core, which is what makes timings unrepresentative. */
  bool busy = l.load1 > (double)l.cpus;
  if (busy)
    snprintf(out, size,
             "the machine was busy: load %.1f on %ld CPU%s; timings are not representative",
             l.load1, l.cpus, l.cpus == 1 ? "" : "s");
  else
    snprintf(out, size, "load average %.2f (1 minute) on %ld CPU%s", l.load1, l.cpus,
             l.cpus == 1 ? "" : "s");
  return busy;
}

void cli_host_load_print(FILE *f) {
  char line[160];
  cli_host_load_describe(cli_host_load_read(), line, sizeof(line));
  fprintf(f, "  %s\n", line);
}

void cli_host_load_print_json(FILE *f) {
  cli_host_load_t l = cli_host_load_read();
  char line[160];
  bool busy = cli_host_load_describe(l, line, sizeof(line));
  if (l.known)
    fprintf(f, ", \"load_average\": %.2f", l.load1);
  else
    fprintf(f, ", \"load_average\": null");
  fprintf(f, ", \"cpus\": %ld, \"busy\": %s", l.cpus, busy ? "true" : "false");
}
