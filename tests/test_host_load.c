/* The load line of benchmark reports (cli/host_load.c; issue 45, item 5): the load average and
 * CPUs as read, and the warning exactly when the load exceeded the CPUs. */
#include <string.h>

#include "cli/host_load.h"
#include "test_util.h"

TestSuite(host_load);

Test(host_load, a_load_above_the_cpus_warns) {
  char line[160];
  cr_assert(cli_host_load_describe((cli_host_load_t){3.24, 2, true}, line, sizeof(line)));
  cr_assert_str_eq(line,
                   "the machine was busy: load 3.2 on 2 CPUs; timings are not representative");
  cr_assert(!cli_host_load_describe((cli_host_load_t){0.42, 2, true}, line, sizeof(line)));
  cr_assert_str_eq(line, "load average 0.42 (1 minute) on 2 CPUs");
  /* Exactly one runnable thread per CPU is not busy; a hundredth more is. */
  cr_assert(!cli_host_load_describe((cli_host_load_t){2.0, 2, true}, line, sizeof(line)));
  cr_assert(cli_host_load_describe((cli_host_load_t){1.01, 1, true}, line, sizeof(line)));
  cr_assert_str_eq(line, "the machine was busy: load 1.0 on 1 CPU; timings are not representative");
  cr_assert(!cli_host_load_describe((cli_host_load_t){0, 4, false}, line, sizeof(line)));
  cr_assert_str_eq(line, "load average unknown (this system gives none); 4 CPUs");
  /* A short buffer is cut, never overrun. */
  char tiny[8];
  cli_host_load_describe((cli_host_load_t){3.24, 2, true}, tiny, sizeof(tiny));
  cr_assert_str_eq(tiny, "the mac");
}

Test(host_load, the_reading_is_this_machines) {
  cli_host_load_t l = cli_host_load_read();
  cr_assert_geq(l.cpus, 1);
  cr_assert(l.known, "Linux gives a load average");
  cr_assert_geq(l.load1, 0.0);
}
