/* A child process for tests/test_leaks.c: what it leaves alive at exit is what the at-exit leak
 * report (docs/errors.md, "Leak report") must list, or not list. Usage: leaks_child
 * leak|clean|lost.
 *   leak: a buffer "x", a program and a jit over two kernel items (the jit's graph and its kernargs
 *   are the library's, on the user's behalf), never released; the device stays open.
 *   clean: the same, all released and the device closed: nothing to report.
 *   lost:  a buffer "x" on a device declared lost, then closed (which succeeds): reported at close,
 *          and at exit as not listed (its device is closed). */
#include <hcq/hcq.h>
#include <stdio.h>
#include <string.h>

static void nothing(void *const *b, const int32_t *v, const hcq_launch_t *l) {
  (void)b, (void)v, (void)l;
}

static int fail(hcq_status_t st, const char *what) {
  fprintf(stderr, "leaks_child: %s: %s\n", what, hcq_status_message(st));
  hcq_status_destroy(st);
  return 1;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "leak";
  hcq_device_t *dev = NULL;
  hcq_status_t st = hcq_device_open("CPU:0", &dev);
  if (st) return fail(st, "open");
  hcq_buffer_t *x = NULL;
  if ((st = hcq_buffer_create(dev, 64, &x))) return fail(st, "buffer");
  hcq_buffer_set_label(x, "x");
  if (!strcmp(mode, "lost")) {
    if ((st = hcq_device_declare_lost(dev, "leaks_child declared it lost")))
      return fail(st, "declare lost");
    if ((st = hcq_device_close(dev))) return fail(st, "close of the lost device");
    return 0;
  }
  hcq_program_t *p = NULL;
  if ((st = hcq_program_create_fn(dev, "nothing", nothing, &p))) return fail(st, "program");
  hcq_operand_t one = hcq_imm(1);
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL,
                        .kernel = {p, &x, 1, NULL, 0, NULL, 0, {one, one, one}, {one, one, one}}};
  hcq_exec_item_t items[2] = {it, it};
  hcq_jit_t *jit = NULL;
  if ((st = hcq_jit_create(items, 2, NULL, 0, NULL, 0, NULL, &jit))) return fail(st, "jit");
  if ((st = hcq_jit_run(jit, NULL, 0, NULL, 0, true, NULL))) return fail(st, "jit run");
  if (!strcmp(mode, "clean")) {
    if ((st = hcq_jit_destroy(jit))) return fail(st, "jit destroy");
    hcq_program_release(p);
    hcq_buffer_release(x);
    if ((st = hcq_device_close(dev))) return fail(st, "close");
  }
  return 0;
}
