/* Running a helper program and making folders, for the example models that fetch their files
 * (examples/minilm, examples/llm). */
#ifndef HCQ_EXAMPLES_SPAWN_H
#define HCQ_EXAMPLES_SPAWN_H

#include <stdio.h>

/* Runs argv (argv[0] looked up in PATH) with its standard output and error on log's descriptor and
 * waits for it: its exit status, or -1 when it could not run or was killed. */
int hcq_example_run(char *const *argv, FILE *log);
/* Creates path and the folders above it (mode 0755); 0, or -1 with errno. */
int hcq_example_mkdirs(const char *path);

#endif
