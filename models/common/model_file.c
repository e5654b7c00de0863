#include "model_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What a file is, in the words the graph-file loader uses for the same refusal. */
static const char *file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory (folder)";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

hcq_status_t hcq_model_open(const char *path, const char *what, int *out_fd, uint64_t *out_size) {
  *out_fd = -1;
  *out_size = 0;
  /* O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one forever. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    hcq_status_code_t code = err == ENOENT || err == ENOTDIR ? HCQ_NOT_FOUND : HCQ_INVALID_ARGUMENT;
    return hcq_status_make(code, "%s: cannot open the %s: %s", path, what, strerror(err));
  }
  struct stat sb;
  if (fstat(fd, &sb)) {
    int err = errno;
    close(fd);
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: cannot stat the %s: %s", path, what,
                           strerror(err));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: cannot read the %s: it is %s, not a regular file", path, what,
                           file_kind(sb.st_mode));
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *out_fd = fd;
  *out_size = (uint64_t)sb.st_size;
  return NULL;
}

hcq_status_t hcq_model_fopen(const char *path, const char *what, FILE **out, uint64_t *out_size) {
  *out = NULL;
  int fd;
  hcq_status_t st = hcq_model_open(path, what, &fd, out_size);
  if (st) return st;
  if (!(*out = fdopen(fd, "rb"))) {
    int err = errno;
    close(fd);
    return hcq_status_make(HCQ_OUT_OF_MEMORY, "%s: cannot open a stream on it: %s", path,
                           strerror(err));
  }
  return NULL;
}

hcq_status_t hcq_model_read(const char *path, const char *what, size_t max_bytes, char **out,
                            size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  int fd;
  uint64_t size;
  hcq_status_t st = hcq_model_open(path, what, &fd, &size);
  if (st) return st;
  if (size > max_bytes) {
    close(fd);
    return hcq_status_make(HCQ_INVALID_ARGUMENT,
                           "%s: %llu bytes, more than the %zu such a file may have", path,
                           (unsigned long long)size, max_bytes);
  }
  char *buf = malloc((size_t)size + 1);
  size_t n = 0;
  while (buf && n < size) {
    ssize_t r = read(fd, buf + n, (size_t)size - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  int err = errno;
  close(fd);
  if (!buf) return hcq_status_make(HCQ_OUT_OF_MEMORY, "out of memory reading %s", path);
  if (n != size) {
    free(buf);
    return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: cannot read it whole: %s", path,
                           n < size && err ? strerror(err) : "it changed");
  }
  buf[n] = 0;
  *out = buf;
  *out_len = n;
  return NULL;
}

hcq_status_t hcq_model_invalid(const char *what, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return hcq_status_make(HCQ_INVALID_ARGUMENT, "%s: %s", what, msg);
}
