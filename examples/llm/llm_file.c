#include "llm_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

hcq_status_t llm_file_open(const char *path, int *out_fd, uint64_t *out_size) {
  *out_fd = -1;
  *out_size = 0;
  /* O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one forever. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    hcq_status_code_t code = err == ENOENT || err == ENOTDIR ? HCQ_NOT_FOUND : HCQ_INVALID_ARGUMENT;
    return hcq_status_make(code, "%s: cannot open it: %s", path, strerror(err));
  }
  struct stat sb;
  if (fstat(fd, &sb)) {
    int err = errno;
    close(fd);
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: cannot stat it: %s", path, strerror(err));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s is %s, not a model file", path, file_kind(sb.st_mode));
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *out_fd = fd;
  *out_size = (uint64_t)sb.st_size;
  return NULL;
}
