/* Eager launches: open a device, compile a kernel, copy data in, launch it, copy the result out;
 * then how much memory the device has.
 *
 *   cc eager.c $(pkg-config --cflags --libs hcq) -o eager && ./eager
 */
#include <hcq/hcq.h>
#include <stdio.h>
#include <stdlib.h>

/* Every hcq call returns a status: NULL is success, anything else carries a message to free. */
#define CHECK(call)                                                \
  do {                                                             \
    hcq_status_t st_ = (call);                                     \
    if (st_) {                                                     \
      fprintf(stderr, "%s: %s\n", #call, hcq_status_message(st_)); \
      hcq_status_destroy(st_);                                     \
      exit(1);                                                     \
    }                                                              \
  } while (0)

/* A CPU kernel (ABI in hcq/program.h): called once per work-group, it loops over its own threads.
 * y[i] = y[i] * a + b for i < n; bufs = {y}, vals = {n, a, b}. */
static const char *const kScale =
    "void scale(void *const *bufs, const int32_t *vals, const hcq_launch_t *l) {\n"
    "  uint32_t *y = bufs[0];\n"
    "  for (uint32_t t = 0; t < l->lsz[0]; t++) {\n"
    "    size_t i = (size_t)l->gid[0] * l->lsz[0] + t;\n"
    "    if (i < (size_t)vals[0]) y[i] = y[i] * (uint32_t)vals[1] + (uint32_t)vals[2];\n"
    "  }\n"
    "}\n";

enum { N = 1000 };

int main(void) {
  hcq_device_t *dev;
  CHECK(hcq_device_open("CPU:0", &dev));
  hcq_program_t *prog;
  CHECK(hcq_program_create(dev, "scale", kScale, &prog)); /* compiled once, then cached on disk */
  hcq_buffer_t *y;
  CHECK(hcq_buffer_create(dev, N * sizeof(uint32_t), &y));

  static uint32_t host[N];
  for (uint32_t i = 0; i < N; i++) host[i] = i;
  CHECK(hcq_buffer_copyin(y, 0, host, sizeof(host)));

  int32_t vals[] = {N, 3, 1}; /* n, a, b */
  hcq_launch_desc_t launch = {.program = prog,
                              .bufs = &y,
                              .nbufs = 1,
                              .vals = vals,
                              .nvals = 3,
                              .global = {(N + 63) / 64, 1, 1},
                              .local = {64, 1, 1}};
  CHECK(hcq_launch(&launch)); /* returns once queued; runs after earlier work on the device */
  CHECK(hcq_launch(&launch));
  CHECK(hcq_buffer_copyout(y, 0, host, sizeof(host))); /* waits for the launches */

  int bad = 0;
  for (uint32_t i = 0; i < N; i++) bad += host[i] != (i * 3 + 1) * 3 + 1;
  printf("eager: y[999] = %u, %s\n", host[N - 1], bad ? "WRONG" : "as expected");

  hcq_device_memory_t mem;
  CHECK(hcq_device_memory(dev, &mem)); /* UNAVAILABLE where the backend cannot tell */
  printf("%s: %llu of %llu bytes available (%s)\n", hcq_device_name(dev),
         (unsigned long long)mem.available, (unsigned long long)mem.total, mem.source);

  hcq_buffer_release(y);
  hcq_program_release(prog);
  CHECK(hcq_device_close(dev));
  return bad ? 1 : 0;
}
