/* Opening the files the models load (checkpoints, tokenizers, safetensors, vocabularies, JSON
 * configs, GGUF; and hcq compile's kernel sources) without ever blocking: a FIFO, a device or a
 * folder given as a model file is refused by name instead of hanging the loader on an open() or
 * read() that never returns. */
#ifndef HCQ_MODELS_FILE_H
#define HCQ_MODELS_FILE_H

#include <hcq/hcq.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Opens path read-only; what names the file in messages ("checkpoint"). Only a regular file is
 * accepted: anything else is INVALID_ARGUMENT, "PATH: cannot read the WHAT: it is a FIFO (named
 * pipe), not a regular file" (the graph-file loader's words); a missing file NOT_FOUND, an
 * unreadable one INVALID_ARGUMENT, both "PATH: cannot open the WHAT: REASON". On success *out_fd is
 * a blocking, close-on-exec descriptor and *out_size the file's size. */
HCQ_MUST_USE hcq_status_t hcq_model_open(const char *path, const char *what, int *out_fd,
                                         uint64_t *out_size);
/* The same as a stdio stream ("rb"). */
HCQ_MUST_USE hcq_status_t hcq_model_fopen(const char *path, const char *what, FILE **out,
                                          uint64_t *out_size);
/* The whole file, NUL-terminated (malloc'd; *out_len bytes before the NUL), at most max_bytes. */
HCQ_MUST_USE hcq_status_t hcq_model_read(const char *path, const char *what, size_t max_bytes,
                                         char **out, size_t *out_len);
/* INVALID_ARGUMENT, "WHAT: MESSAGE": what a reader returns for a file whose contents are not what
 * the format says (a bad header, a tensor of the wrong shape); WHAT is usually the file's path. */
HCQ_MUST_USE hcq_status_t hcq_model_invalid(const char *what, const char *fmt, ...)
    HCQ_PRINTF(2, 3);

#endif
