/* hcq compile: a kernel source to the precompiled form a device kind loads (hcq_binary_compile),
 * written to a file, with no device opened: offline builds are the point. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "model_file.h"

/* Writes the bytes whole under a temporary name beside path, then renames it into place, so a
 * failed or interrupted compile never leaves a partial kernel where a loader would take it. */
static int write_out(const char *path, const void *bytes, size_t size) {
  size_t n = strlen(path) + 32;
  char *tmp = malloc(n);
  if (!tmp) return cli_usage_error("out of memory");
  snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    fprintf(stderr, "hcq: --out %s: cannot create %s: %s\n", path, tmp, strerror(e));
    free(tmp);
    return HCQ_EXIT_BAD_INPUT;
  }
  const char *p = bytes;
  size_t left = size;
  int e = 0;
  while (left && !e) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      e = w < 0 ? errno : EIO;
    else
      p += w, left -= (size_t)w;
  }
  if (close(fd) && !e) e = errno;
  if (!e && rename(tmp, path)) e = errno;
  if (e) {
    unlink(tmp);
    fprintf(stderr, "hcq: --out %s: cannot write it: %s\n", path, strerror(e));
    free(tmp);
    return HCQ_EXIT_RUNTIME;
  }
  free(tmp);
  return HCQ_EXIT_OK;
}

int cli_compile(int argc, char **argv) {
  const char *device = NULL, *out = NULL, *source = NULL, *entry = NULL, *arch = NULL,
             *format = NULL;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char **slot = !strcmp(a, "--device")   ? &device
                        : !strcmp(a, "--out")    ? &out
                        : !strcmp(a, "--entry")  ? &entry
                        : !strcmp(a, "--arch")   ? &arch
                        : !strcmp(a, "--format") ? &format
                                                 : NULL;
    if (slot) {
      if (i + 1 >= argc) return cli_usage_error("compile: %s needs a value", a);
      if (*slot) return cli_usage_error("compile: %s is given twice", a);
      *slot = argv[++i];
    } else if (a[0] == '-' && a[1]) {
      return cli_usage_error("compile: unknown option \"%s\" (see hcq compile --help)", a);
    } else if (source) {
      return cli_usage_error("compile: one SOURCE file only (\"%s\" and \"%s\" given)", source, a);
    } else {
      source = a;
    }
  }
  if (!device) return cli_usage_error("compile: --device KIND is required (VULKAN, CUDA or METAL)");
  if (!out) return cli_usage_error("compile: --out FILE is required");
  if (!source) return cli_usage_error("compile: give the kernel's SOURCE file");
  hcq_device_kind_t kind;
  if (!cli_parse_device_kind(device, &kind))
    return cli_usage_error(
        "compile: --device \"%s\" is not a device kind (CPU, CUDA, METAL, VULKAN)", device);
  hcq_binary_format_t fmt = HCQ_BINARY_NONE;
  if (format && !hcq_binary_format_parse(format, &fmt))
    return cli_usage_error(
        "compile: --format \"%s\" is not a format (spirv, ptx, cubin, fatbin, metallib)", format);
  /* The entry defaults to the file's name without folders and extension (kernels/add.glsl: add). */
  char guessed[64] = "";
  if (!entry) {
    const char *base = strrchr(source, '/') ? strrchr(source, '/') + 1 : source;
    size_t len = strcspn(base, ".");
    if (len >= sizeof(guessed))
      return cli_usage_error(
          "compile: the file name \"%s\" is too long to name the kernel: give --entry", base);
    memcpy(guessed, base, len);
    guessed[len] = '\0';
    entry = guessed;
  }
  char *text = NULL;
  size_t len = 0;
  hcq_status_t st = hcq_model_read(source, "kernel source", 64u << 20, &text, &len);
  if (st) return cli_fail(st);
  if (strlen(text) != len) {
    free(text);
    return cli_usage_error("compile: %s: a kernel source must not contain NUL bytes", source);
  }
  void *bytes = NULL;
  size_t size = 0;
  st = hcq_binary_compile(kind, fmt, arch, entry, text, &bytes, &size);
  free(text);
  if (st) return cli_fail(hcq_status_annotate(st, "%s", source));
  int rc = write_out(out, bytes, size);
  hcq_binary_free(bytes);
  return rc;
}
