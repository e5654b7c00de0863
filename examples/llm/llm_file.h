/* Opening a model file without ever blocking: a FIFO, a device or a folder given as a model is
 * refused by name instead of hanging the loader on an open() or read() that never returns. */
#ifndef HCQ_LLM_FILE_H
#define HCQ_LLM_FILE_H

#include <hcq/hcq.h>
#include <stdint.h>

/* Opens path read-only. Only a regular file is accepted: anything else is INVALID_ARGUMENT naming
 * path and what it is ("a FIFO"); a missing file NOT_FOUND, an unreadable one INVALID_ARGUMENT (with the system's reason).
 * On success *out_fd is a blocking, close-on-exec descriptor and *out_size the file's size. */
HCQ_MUST_USE hcq_status_t llm_file_open(const char *path, int *out_fd, uint64_t *out_size);

#endif
