/* Loading a kernel built offline: `hcq compile` turns the GLSL kernel axpb into SPIR-V, and this
 * program loads that file with hcq_program_create_binary (no compiler at run time) and runs it on
 * the first Vulkan device, twice, checking y[i] = x[i] * a + w[i] + b against the host.
 *
 *   hcq compile --device VULKAN --out axpb.spv examples/kernels/axpb.glsl
 *   cc precompiled.c $(pkg-config --cflags --libs hcq) -o precompiled && ./precompiled axpb.spv
 *
 * Exits 0 when the results are as expected, 1 when they are not or a call fails, 2 for a bad
 * command line or file, 77 when this machine has no Vulkan device (it says so). */
#include <errno.h>
#include <fcntl.h>
#include <hcq/hcq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK(call)                                                \
  do {                                                             \
    hcq_status_t st_ = (call);                                     \
    if (st_) {                                                     \
      fprintf(stderr, "%s: %s\n", #call, hcq_status_message(st_)); \
      hcq_status_destroy(st_);                                     \
      exit(1);                                                     \
    }                                                              \
  } while (0)

enum { N = 4096 };

/* The whole file; a FIFO or a device is refused by type rather than read (which could block). */
static void *read_file(const char *path, size_t *size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) || !S_ISREG(sb.st_mode) || sb.st_size <= 0) {
    fprintf(stderr, "precompiled: %s: %s\n", path,
            fd < 0 ? strerror(errno) : "not a non-empty regular file");
    exit(2);
  }
  char *data = malloc((size_t)sb.st_size);
  size_t got = 0;
  while (data && got < (size_t)sb.st_size) {
    ssize_t n = read(fd, data + got, (size_t)sb.st_size - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fd);
  if (!data || got != (size_t)sb.st_size) {
    fprintf(stderr, "precompiled: cannot read %s\n", path);
    exit(2);
  }
  *size = got;
  return data;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr,
            "usage: precompiled KERNEL.spv (from: hcq compile --device VULKAN --out axpb.spv "
            "axpb.glsl)\n");
    return 2;
  }
  size_t size;
  void *spirv = read_file(argv[1], &size);
  hcq_device_t *dev;
  hcq_status_t st = hcq_device_open("VULKAN:0", &dev);
  if (st) {
    printf("precompiled: no Vulkan device here, nothing run (%s)\n", hcq_status_message(st));
    hcq_status_destroy(st);
    free(spirv);
    return 77;
  }
  hcq_program_t *axpb;
  CHECK(hcq_program_create_binary(dev, HCQ_BINARY_SPIRV, spirv, size, "axpb", &axpb));
  free(spirv); /* the program keeps its own copy */

  static uint32_t x[N], w[N], y[N];
  for (uint32_t i = 0; i < N; i++) x[i] = i, w[i] = 1000 * i;
  hcq_buffer_t *bufs[3]; /* y, x, w: the kernel's buffer arguments */
  for (int b = 0; b < 3; b++) CHECK(hcq_buffer_create(dev, sizeof(y), &bufs[b]));
  CHECK(hcq_buffer_copyin(bufs[1], 0, x, sizeof(x)));
  CHECK(hcq_buffer_copyin(bufs[2], 0, w, sizeof(w)));

  int bad = 0;
  const int32_t runs[2][3] = {{N, 3, 7}, {N, -2, 100}}; /* n, a, b */
  for (int r = 0; r < 2; r++) {
    hcq_launch_desc_t launch = {.program = axpb,
                                .bufs = bufs,
                                .nbufs = 3,
                                .vals = runs[r],
                                .nvals = 3,
                                .global = {N / 64, 1, 1},
                                .local = {64, 1, 1}};
    CHECK(hcq_launch(&launch));
    CHECK(hcq_buffer_copyout(bufs[0], 0, y, sizeof(y)));
    for (uint32_t i = 0; i < N; i++)
      bad += y[i] != x[i] * (uint32_t)runs[r][1] + w[i] + (uint32_t)runs[r][2];
  }
  printf("precompiled: %s loaded from %zu bytes of SPIR-V on %s, y[1] = %u, %s\n",
         hcq_program_name(axpb), size, hcq_device_name(dev), y[1], bad ? "WRONG" : "as expected");

  for (int b = 0; b < 3; b++) hcq_buffer_release(bufs[b]);
  hcq_program_release(axpb);
  CHECK(hcq_device_close(dev));
  return bad ? 1 : 0;
}
