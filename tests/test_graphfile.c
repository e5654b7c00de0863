/* The hcq-graph/1 loader: contents, initial data, runs, the device map, and errors with JSON paths.
 */
#include <limits.h>
#include <math.h>
#include <sys/stat.h>
#include "test_util.h"

TestSuite(graphfile, .timeout = 120);

static hcq_graph_file_t *load(const char *text) {
  hcq_graph_file_t *gf = NULL;
  OK(hcq_graph_file_load_text(text, strlen(text), "t.json", ".", NULL, &gf));
  return gf;
}

static void load_fails(const char *text, hcq_status_code_t code, const char *fragment) {
  hcq_graph_file_t *gf = NULL;
  hcq_status_t st = hcq_graph_file_load_text(text, strlen(text), "t.json", ".", NULL, &gf);
  cr_assert_null(gf);
  test_expect_failure(st, code, fragment, (const char *[]){fragment, NULL});
}

static hcq_buffer_t *named(hcq_graph_file_t *gf, const char *name) {
  for (size_t i = 0; i < hcq_graph_file_buffer_count(gf); i++)
    if (!strcmp(hcq_graph_file_buffer_name(gf, i), name)) return hcq_graph_file_buffer(gf, i);
  cr_assert_fail("no buffer %s", name);
  return NULL;
}

#define HEAD "{\"format\": \"hcq-graph/1\", "
#define PROG                                                                                       \
  "\"programs\": {\"add1\": {\"c\": \"void add1(void *const *b, const int32_t *v, const "          \
  "hcq_launch_t *l) { "                                                                            \
  "int32_t *o = b[0]; const int32_t *a = b[1]; for (uint32_t t = 0; t < l->lsz[0]; t++) { size_t " \
  "i = "                                                                                           \
  "(size_t)l->gid[0] * l->lsz[0] + t; if (i < (size_t)v[0]) o[i] = a[i] + 1; } }\"}}, "

/* SplitMix64, written here independently from the library, for {"random": SEED}. */
static void splitmix_ref(uint64_t seed, uint8_t *out, size_t n) {
  uint64_t x = seed;
  for (size_t i = 0; i < n; i += 8) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z = z ^ (z >> 31);
    for (size_t k = 0; k < 8 && i + k < n; k++) out[i + k] = (uint8_t)(z >> (8 * k));
  }
}

Test(graphfile, initial_contents) {
  hcq_graph_file_t *gf =
      load(HEAD
           "\"buffers\": {"
           "\"z\": {\"device\": \"CPU:0\", \"bytes\": 10},"
           "\"i\": {\"device\": \"CPU:0\", \"bytes\": 18, \"init\": \"iota32\"},"
           "\"f\": {\"device\": \"CPU:0\", \"bytes\": 8, \"init\": {\"fill32\": -2}},"
           "\"g\": {\"device\": \"CPU:0\", \"bytes\": 8, \"init\": {\"fill32\": 4294967295}},"
           "\"r\": {\"device\": \"CPU:0\", \"bytes\": 2000003, \"init\": {\"random\": 7}},"
           "\"b\": {\"device\": \"CPU:0\", \"bytes\": 5, \"init\": {\"base64\": \"aGVsbG8=\"}}},"
           "\"items\": [{\"copy\": {\"dst\": \"z\", \"src\": \"b\"}}]}");
  uint8_t buf[32];
  OK(hcq_buffer_copyout(named(gf, "z"), 0, buf, 10));
  for (int k = 0; k < 10; k++) cr_assert_eq(buf[k], 0);
  OK(hcq_buffer_copyout(named(gf, "i"), 0, buf, 18));
  uint32_t w[5] = {0};
  memcpy(w, buf, 18);
  cr_assert_eq(w[0], 0);
  cr_assert_eq(w[3], 3);
  cr_assert_eq(w[4] & 0xffff, 4, "a partial last word keeps its low bytes");
  OK(hcq_buffer_copyout(named(gf, "f"), 0, w, 8));
  cr_assert_eq(w[0], 0xfffffffeu);
  cr_assert_eq(w[1], 0xfffffffeu);
  OK(hcq_buffer_copyout(named(gf, "g"), 0, w, 8));
  cr_assert_eq(w[1], 0xffffffffu);
  OK(hcq_buffer_copyout(named(gf, "b"), 0, buf, 5));
  cr_assert_arr_eq(buf, "hello", 5);
  size_t n = 2000003;
  uint8_t *got = malloc(n), *want = malloc(n);
  OK(hcq_buffer_copyout(named(gf, "r"), 0, got, n));
  splitmix_ref(7, want, n);
  cr_assert_arr_eq(got, want, n, "the random init must be SplitMix64 as documented, across chunks");
  hcq_graph_file_random_bytes(7, got, 16);
  cr_assert_arr_eq(got, want, 16);
  /* reset writes the initial contents again */
  OK(hcq_buffer_copyin(named(gf, "r"), 100, "xxxx", 4));
  OK(hcq_graph_file_reset(gf));
  OK(hcq_buffer_copyout(named(gf, "r"), 0, got, n));
  cr_assert_arr_eq(got, want, n);
  free(got);
  free(want);
  hcq_graph_file_destroy(gf);
}

Test(graphfile, items_views_inputs_and_runs) {
  hcq_graph_file_t *gf = load(
      HEAD
      "\"vars\": {\"n\": {\"min\": 1, \"max\": 64, \"value\": 8}, \"m\": {\"min\": 0, \"max\": 3}},"
      "\"buffers\": {"
      "\"v\": {\"view\": \"vv\", \"offset\": 4, \"bytes\": 8},"
      "\"vv\": {\"view\": \"a\", \"offset\": 8, \"bytes\": 32},"
      "\"a\": {\"device\": \"CPU:0\", \"bytes\": 256, \"init\": \"iota32\"},"
      "\"a2\": {\"device\": \"CPU:0\", \"bytes\": 256, \"init\": {\"fill32\": 5}},"
      "\"o\": {\"device\": \"CPU:0\", \"bytes\": 256},"
      "\"c\": {\"device\": \"CPU:1\", \"bytes\": 64}}," PROG
      "\"items\": ["
      "  {\"kernel\": \"add1\", \"bufs\": [\"o\", \"a\"], \"vals\": [\"n*2\"], \"global\": "
      "[\"(n+63)//64\"], \"local\": [64]},"
      "  {\"copy\": {\"dst\": \"c\", \"src\": \"o\"}},"
      "  {\"copy\": {\"dst\": \"v\", \"src\": \"c\", \"bytes\": 4}}],"
      "\"inputs\": [\"a\"],"
      "\"runs\": [{}, {\"inputs\": {\"a\": \"a2\"}, \"vars\": {\"n\": 64, \"m\": 3}}, {\"vars\": "
      "{\"m\": 1}}]}");
  cr_assert_eq(hcq_graph_file_item_count(gf), 3);
  cr_assert_eq(hcq_graph_file_buffer_count(gf), 6);
  cr_assert_eq(hcq_graph_file_device_count(gf), 2);
  hcq_buffer_t *v = named(gf, "v");
  cr_assert_eq(hcq_buffer_offset(v), 12, "a view of a view is a view of the base");
  cr_assert_eq(hcq_buffer_base(v), named(gf, "a"));
  const hcq_exec_item_t *items = hcq_graph_file_items(gf);
  cr_assert_eq(items[0].kind, HCQ_ITEM_KERNEL);
  cr_assert_eq(items[0].kernel.nouts, 2, "without outs every buffer counts as written");
  cr_assert_eq(items[0].kernel.outs[0], 0);
  cr_assert_eq(items[0].kernel.outs[1], 1);
  cr_assert_not_null(items[0].kernel.vals[0].sym);
  cr_assert_eq(items[1].transfer.bytes, 64, "a copy moves min(dst, src) bytes by default");
  cr_assert_eq(items[2].transfer.bytes, 4);
  cr_assert_eq(hcq_graph_file_var_count(gf), 2);
  const hcq_var_value_t *decl = hcq_graph_file_vars(gf);
  cr_assert_str_eq(hcq_var_name(decl[0].var), "n");
  cr_assert_eq(decl[0].value, 8);
  cr_assert_eq(decl[1].value, 0, "value defaults to min");
  cr_assert_eq(hcq_graph_file_run_count(gf), 3);
  hcq_buffer_t *const *ins;
  const hcq_var_value_t *vals;
  hcq_graph_file_run(gf, 1, &ins, &vals);
  cr_assert_eq(ins[0], named(gf, "a2"));
  cr_assert_eq(vals[0].value, 64);
  cr_assert_eq(vals[1].value, 3);
  hcq_graph_file_run(gf, 2, &ins, &vals);
  cr_assert_eq(ins[0], named(gf, "a"), "each run starts from the declared inputs");
  cr_assert_eq(vals[0].value, 8, "and from the declared values");
  cr_assert_eq(vals[1].value, 1);
  /* The items run: eagerly with run 1's values. */
  hcq_graph_file_run(gf, 0, &ins, &vals);
  for (size_t j = 0; j < 3; j++) OK(hcq_exec_item_run(&items[j], vals, 2));
  int32_t got[64];
  OK(hcq_buffer_copyout(named(gf, "o"), 0, got, sizeof(got)));
  for (int i = 0; i < 64; i++) cr_assert_eq(got[i], i < 16 ? i + 1 : 0);
  hcq_graph_file_destroy(gf);
}

/* null keeps the previous run's binding (double buffering): the first run's null is the declared
 * one. */
Test(graphfile, a_null_input_keeps_the_previous_runs_binding) {
  hcq_graph_file_t *gf = load(
      HEAD
      "\"buffers\": {"
      "\"x\": {\"device\": \"CPU:0\", \"bytes\": 64}, \"x2\": {\"device\": \"CPU:0\", \"bytes\": "
      "64},"
      "\"o\": {\"device\": \"CPU:0\", \"bytes\": 64}, \"o2\": {\"device\": \"CPU:0\", \"bytes\": "
      "64}},"
      "\"items\": [{\"copy\": {\"dst\": \"o\", \"src\": \"x\"}}],"
      "\"inputs\": [\"x\", \"o\"],"
      "\"runs\": [{\"inputs\": {\"x\": null}}, {\"inputs\": {\"o\": \"o2\"}},"
      "          {\"inputs\": {\"o\": null, \"x\": \"x2\"}}, {\"inputs\": {\"x\": null}}, {}]}");
  hcq_buffer_t *x = named(gf, "x"), *x2 = named(gf, "x2"), *o = named(gf, "o"),
               *o2 = named(gf, "o2");
  hcq_buffer_t *want[5][2] = {{x, o}, {x, o2}, {x2, o2}, {x2, o}, {x, o}};
  cr_assert_eq(hcq_graph_file_run_count(gf), 5);
  for (size_t r = 0; r < 5; r++) {
    hcq_buffer_t *const *ins;
    hcq_graph_file_run(gf, r, &ins, NULL);
    cr_expect(ins[0] == want[r][0] && ins[1] == want[r][1], "run %zu", r);
  }
  hcq_graph_file_destroy(gf);
}

Test(graphfile, device_map_and_skip_compile) {
  const char *text = HEAD
      "\"buffers\": {\"a\": {\"device\": \"CPU:1\", \"bytes\": 64}, \"b\": {\"device\": \"CPU:2\", "
      "\"bytes\": 64}},"
      "\"programs\": {\"k\": {\"c\": \"this is not C\"}},"
      "\"items\": [{\"kernel\": \"k\", \"bufs\": [\"a\"]}, {\"copy\": {\"dst\": \"b\", \"src\": "
      "\"a\"}}]}";
  hcq_graph_file_options_t opts = {.device_map = "CPU:1=CPU:0,CPU=CPU", .skip_compile = true};
  hcq_graph_file_t *gf = NULL;
  OK(hcq_graph_file_load_text(text, strlen(text), "m.json", ".", &opts, &gf));
  cr_assert_str_eq(hcq_device_name(hcq_buffer_device(named(gf, "a"))), "CPU:0");
  cr_assert_str_eq(hcq_device_name(hcq_buffer_device(named(gf, "b"))), "CPU:2");
  OK(hcq_exec_item_run(&hcq_graph_file_items(gf)[0], NULL, 0));
  hcq_graph_file_destroy(gf);
  /* Without skip_compile the same source is a compile error. */
  opts.skip_compile = false;
  hcq_status_t st = hcq_graph_file_load_text(text, strlen(text), "m.json", ".", &opts, &gf);
  test_expect_failure(st, HCQ_COMPILE_ERROR, "compile",
                      (const char *[]){"m.json: items[0].kernel", "error", NULL});
  hcq_graph_file_options_t bad = {.device_map = "CPU=CPU,garbage"};
  st = hcq_graph_file_load_text(text, strlen(text), "m.json", ".", &bad, &gf);
  test_expect_failure(st, HCQ_INVALID_ARGUMENT, "map",
                      (const char *[]){"device map entry \"garbage\" is not FROM=TO", NULL});
  bad.device_map = "CPU:1=";
  st = hcq_graph_file_load_text(text, strlen(text), "m.json", ".", &bad, &gf);
  test_expect_failure(st, HCQ_INVALID_ARGUMENT, "map", (const char *[]){"\"CPU:1=\"", NULL});
  /* "CPU" is CPU:0 for exact entries. */
  const char *plain = HEAD
      "\"buffers\": {\"a\": {\"device\": \"CPU\", \"bytes\": 64}}, \"items\": [{\"copy\": "
      "{\"dst\": \"a\", \"src\": \"a\"}}]}";
  hcq_graph_file_options_t exact = {.device_map = "CPU:0=CPU:3"};
  OK(hcq_graph_file_load_text(plain, strlen(plain), "p.json", ".", &exact, &gf));
  cr_assert_str_eq(hcq_device_name(hcq_buffer_device(named(gf, "a"))), "CPU:3");
  hcq_graph_file_destroy(gf);
  opts.max_total_bytes = 100;
  st = hcq_graph_file_load_text(text, strlen(text), "m.json", ".", &opts, &gf);
  test_expect_failure(st, HCQ_OUT_OF_RANGE, "limit",
                      (const char *[]){"buffers.b.bytes", "100 bytes allowed", NULL});
}

Test(graphfile, errors_give_the_json_path) {
  load_fails("{\"format\": \"hcq-graph/1\",\n  \"buffers\": {,}}", HCQ_INVALID_ARGUMENT,
             "t.json:2:15: string or");
  load_fails("{\"format\": \"hcq-graph/1\", \"buf", HCQ_INVALID_ARGUMENT, "t.json:1:");
  load_fails("[]", HCQ_INVALID_ARGUMENT, "must be a JSON object");
  load_fails("{}", HCQ_INVALID_ARGUMENT, "format: missing");
  load_fails("{\"format\": \"hcq-graph/2\"}", HCQ_INVALID_ARGUMENT,
             "format: must be \"hcq-graph/1\"");
  load_fails(HEAD "\"extra\": 1}", HCQ_INVALID_ARGUMENT, "t.json: extra: unknown field");
  /* A misspelt "kernel" is an unknown field, named, as a misspelt "init" is (not "an item has
   * exactly one of kernel and copy"); an item with neither and no stray field says the latter. */
  load_fails(HEAD
             "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 4}}, \"items\": "
             "[{\"kernal\": \"k\", \"bufs\": []}]}",
             HCQ_INVALID_ARGUMENT, "t.json: items[0].kernal: unknown field");
  load_fails(
      HEAD
      "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 4}}, \"items\": [{\"bufs\": []}]}",
      HCQ_INVALID_ARGUMENT, "items[0]: an item has exactly one of");
}

Test(graphfile, buffer_errors_give_the_json_path) {
  load_fails(HEAD "\"buffers\": {\"a\": {\"device\": \"GPU:0\", \"bytes\": 4}}, \"items\": []}",
             HCQ_NOT_FOUND, "t.json: buffers.a.device: unknown device \"GPU:0\"");
  load_fails(HEAD "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 0}}}", HCQ_OUT_OF_RANGE,
             "buffers.a.bytes: 0 is outside");
  load_fails(HEAD "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 4.5}}}",
             HCQ_INVALID_ARGUMENT,
             "buffers.a.bytes: must be an integer, not a number with a fraction");
  load_fails(HEAD
             "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 16}, \"v\": {\"view\": "
             "\"a\", \"offset\": 8, \"bytes\": 16}}}",
             HCQ_OUT_OF_RANGE, "buffers.v: view [8, 24) is outside its base \"a\" (16 bytes)");
  load_fails(HEAD
             "\"buffers\": {\"v\": {\"view\": \"w\", \"bytes\": 4}, \"w\": {\"view\": \"v\", "
             "\"bytes\": 4}}}",
             HCQ_INVALID_ARGUMENT, "buffers.v: views form a cycle of 2: v -> w -> v");
  load_fails(HEAD
             "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 8, \"init\": {\"random\": 1, "
             "\"fill32\": 2}}}}",
             HCQ_INVALID_ARGUMENT, "buffers.a.init: must have exactly one");
  load_fails(HEAD
             "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 8, \"init\": {\"base64\": "
             "\"aGVsbG8=\"}}}}",
             HCQ_INVALID_ARGUMENT, "buffers.a.init.base64: is not base64 of exactly 8 bytes");
  load_fails(HEAD "\"buffers\": {\"a/b\": {\"device\": \"CPU:0\", \"bytes\": 8}}}",
             HCQ_INVALID_ARGUMENT, "buffers.\"a/b\": buffer names use");
}

Test(graphfile, item_and_run_errors_give_the_json_path) {
  const char *base = HEAD
      "\"vars\": {\"n\": {\"min\": 1, \"max\": 10, \"value\": 5}},"
      "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 64}, \"b\": {\"device\": \"CPU:1\", "
      "\"bytes\": 32}}," PROG;
  char text[4096];
#define WITH(items_and_more) (snprintf(text, sizeof(text), "%s%s}", base, items_and_more), text)
  load_fails(WITH("\"items\": [{\"copy\": {\"dst\": \"a\", \"src\": \"a\"}}, {\"kernel\": "
                  "\"add1\", \"bufs\": [\"a\", \"q\"]}]"),
             HCQ_NOT_FOUND, "t.json: items[1].bufs[1]: unknown buffer \"q\"");
  load_fails(WITH("\"items\": [{\"kernel\": \"nope\", \"bufs\": [\"a\"]}]"), HCQ_NOT_FOUND,
             "items[0].kernel: unknown program \"nope\"");
  load_fails(WITH("\"items\": [{\"kernel\": \"add1\", \"bufs\": [\"a\", \"b\"]}]"),
             HCQ_INVALID_ARGUMENT,
             "items[0].bufs[1]: buffer \"b\" is on CPU:1 but the kernel runs on CPU:0");
  load_fails(WITH("\"items\": [{\"kernel\": \"add1\", \"bufs\": [\"a\"], \"vals\": [\"q+1\"]}]"),
             HCQ_NOT_FOUND, "items[0].vals[0]: expression \"q+1\": unknown variable \"q\"");
  load_fails(
      WITH("\"items\": [{\"kernel\": \"add1\", \"bufs\": [\"a\"], \"global\": [\"10//(n-5)\"]}]"),
      HCQ_OUT_OF_RANGE, "items[0].global[0]: division by zero");
  load_fails(WITH("\"items\": [{\"kernel\": \"add1\", \"bufs\": [\"a\"], \"outs\": [1]}]"),
             HCQ_OUT_OF_RANGE, "items[0].outs[0]: 1 is outside [0, 0]");
  load_fails(WITH("\"items\": [{\"kernel\": \"add1\"}]"), HCQ_INVALID_ARGUMENT,
             "items[0]: a kernel without buffers must name its device");
  load_fails(WITH("\"items\": [{\"copy\": {\"dst\": \"a\", \"src\": \"b\", \"bytes\": 64}}]"),
             HCQ_OUT_OF_RANGE, "items[0].copy.bytes: 64 is outside [0, 32]");
  load_fails(
      WITH("\"items\": [{\"copy\": {\"dst\": \"a\", \"src\": \"b\"}, \"kernel\": \"add1\"}]"),
      HCQ_INVALID_ARGUMENT, "items[0]: an item has exactly one");
  load_fails(
      WITH("\"items\": [{\"copy\": {\"dst\": \"a\", \"src\": \"b\"}}], \"inputs\": [\"a\", \"a\"]"),
      HCQ_INVALID_ARGUMENT, "inputs[1]: buffer \"a\" is listed twice");
  load_fails(WITH("\"items\": [{\"copy\": {\"dst\": \"a\", \"src\": \"b\"}}], \"inputs\": [\"a\"], "
                  "\"runs\": [{\"inputs\": {\"a\": \"b\"}}]"),
             HCQ_INVALID_ARGUMENT,
             "runs[0].inputs.a: buffer \"b\" has 32 bytes but input \"a\" has 64");
  load_fails(WITH("\"items\": [{\"copy\": {\"dst\": \"a\", \"src\": \"b\"}}], \"runs\": "
                  "[{\"vars\": {\"n\": 11}}]"),
             HCQ_OUT_OF_RANGE, "runs[0].vars.n: 11 is outside [1, 10]");
  load_fails(WITH("\"items\": [{\"copy\": {\"dst\": \"a\", \"src\": \"b\"}}], \"runs\": "
                  "[{\"vars\": {\"z\": 1}}]"),
             HCQ_NOT_FOUND, "runs[0].vars.z: unknown variable \"z\"");
  load_fails(WITH("\"items\": [{\"copy\": {\"dst\": \"a\", \"src\": \"b\"}}], \"runs\": "
                  "[{\"inputs\": {\"b\": \"a\"}}]"),
             HCQ_NOT_FOUND, "runs[0].inputs.b: \"b\" is not an input");
  load_fails(WITH("\"items\": [{\"kernel\": \"add1\", \"bufs\": [\"a\"], \"global\": [\"n-6\"]}]"),
             HCQ_OUT_OF_RANGE, "items[0].global[0]: evaluates to -1");
}

Test(graphfile, deep_nesting_and_a_missing_file_fail_cleanly) {
  /* Deep nesting is refused by the parser, not by the stack. */
  size_t depth = 100000;
  char *deep = malloc(depth + 1);
  memset(deep, '[', depth);
  deep[depth] = '\0';
  load_fails(deep, HCQ_INVALID_ARGUMENT, "t.json:1:");
  free(deep);
  hcq_graph_file_t *gf = NULL;
  test_expect_failure(hcq_graph_file_load("/nonexistent/g.json", NULL, &gf), HCQ_NOT_FOUND,
                      "missing file", (const char *[]){"/nonexistent/g.json", NULL});
}

/* Float inits: fill_f32 stores the float's bits in every word; uniform_f32 word i is
 * lo + (hi - lo) * (top 24 bits of SplitMix64 output i) / 2^24, computed in float. */
static float uniform_ref(uint64_t seed, uint64_t i, float lo, float hi) {
  uint8_t *z = malloc(8 * (size_t)(i + 1));
  splitmix_ref(seed, z, 8 * (size_t)(i + 1));
  uint64_t v = 0;
  for (int k = 0; k < 8; k++) v |= (uint64_t)z[8 * i + (uint64_t)k] << (8 * k);
  free(z);
  float x = lo + (hi - lo) * ((float)(v >> 40) * (1.0f / 16777216.0f));
  return x >= hi && lo < hi ? nextafterf(hi, lo)
                            : x; /* a value rounded up to hi becomes the float below */
}

Test(graphfile, float_inits) {
  hcq_graph_file_t *gf =
      load(HEAD
           "\"buffers\": {"
           "\"a\": {\"device\": \"CPU:0\", \"bytes\": 12, \"init\": {\"fill_f32\": -1.5}},"
           "\"b\": {\"device\": \"CPU:0\", \"bytes\": 8, \"init\": {\"fill_f32\": 3}},"
           "\"u\": {\"device\": \"CPU:0\", \"bytes\": 256, "
           "  \"init\": {\"uniform_f32\": {\"seed\": 9, \"lo\": -2, \"hi\": 0.5}}},"
           "\"c\": {\"device\": \"CPU:0\", \"bytes\": 6, \"init\": {\"fill_f32\": 1}}},"
           "\"items\": [{\"copy\": {\"dst\": \"b\", \"src\": \"b\"}}]}");
  float f[64];
  OK(hcq_buffer_copyout(named(gf, "a"), 0, f, 12));
  for (int i = 0; i < 3; i++) cr_assert_eq(f[i], -1.5f);
  OK(hcq_buffer_copyout(named(gf, "b"), 0, f, 8));
  cr_assert_eq(f[0], 3.0f);
  cr_assert_eq(f[1], 3.0f);
  OK(hcq_buffer_copyout(named(gf, "u"), 0, f, 256));
  float lo = 0, hi = -3;
  for (int i = 0; i < 64; i++) {
    cr_assert_eq(f[i], uniform_ref(9, (uint64_t)i, -2.0f, 0.5f), "word %d", i);
    cr_assert(f[i] >= -2.0f && f[i] < 0.5f);
    lo = f[i] < lo ? f[i] : lo, hi = f[i] > hi ? f[i] : hi;
  }
  cr_assert(lo < -1.5f && hi > 0.0f, "the values spread over the range (%g..%g)", (double)lo,
            (double)hi);
  uint8_t bytes[6], one[4];
  float x = 1.0f;
  memcpy(one, &x, 4);
  OK(hcq_buffer_copyout(named(gf, "c"), 0, bytes, 6));
  cr_assert_eq(memcmp(bytes, one, 4), 0);
  cr_assert_eq(memcmp(bytes + 4, one, 2), 0,
               "a partial last word holds the first bytes of the float");
  hcq_graph_file_destroy(gf);
}

Test(graphfile, float_init_errors) {
#define BUF(init)                                                                   \
  HEAD "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 8, \"init\": " init \
       "}}, \"items\": []}"
  load_fails(BUF("{\"fill_f32\": \"1.0\"}"), HCQ_INVALID_ARGUMENT,
             "buffers.a.init.fill_f32: must be a number");
  load_fails(BUF("{\"fill_f32\": 1e39}"), HCQ_OUT_OF_RANGE,
             "buffers.a.init.fill_f32: 1e+39 does not fit a 32-bit float");
  load_fails(BUF("{\"uniform_f32\": 3}"), HCQ_INVALID_ARGUMENT,
             "buffers.a.init.uniform_f32: must be an object");
  load_fails(BUF("{\"uniform_f32\": {\"seed\": 1, \"lo\": 0}}"), HCQ_INVALID_ARGUMENT,
             "buffers.a.init.uniform_f32: needs \"hi\"");
  load_fails(BUF("{\"uniform_f32\": {\"seed\": -1, \"lo\": 0, \"hi\": 1}}"), HCQ_OUT_OF_RANGE,
             "buffers.a.init.uniform_f32.seed: -1 is outside");
  load_fails(BUF("{\"uniform_f32\": {\"seed\": 1, \"lo\": 2, \"hi\": 1}}"), HCQ_INVALID_ARGUMENT,
             "buffers.a.init.uniform_f32.hi: 1 is below lo 2");
  load_fails(BUF("{\"uniform_f32\": {\"seed\": 1, \"lo\": 0, \"hi\": 1, \"mid\": 0}}"),
             HCQ_INVALID_ARGUMENT, "mid");
  load_fails(BUF("\"f32\""), HCQ_INVALID_ARGUMENT, "{\"fill_f32\": X}");
  /* Each end fits a float but hi - lo does not: the values were +inf (and NaN). */
  load_fails(BUF("{\"uniform_f32\": {\"seed\": 1, \"lo\": -3e38, \"hi\": 3e38}}"), HCQ_OUT_OF_RANGE,
             "buffers.a.init.uniform_f32: lo -3e+38, hi 3e+38: hi - lo overflows a float");
  load_fails(BUF("{\"uniform_f32\": {\"seed\": 1, \"lo\": -3.4028234e38, \"hi\": 1e32}}"),
             HCQ_OUT_OF_RANGE, "hi - lo overflows a float");
#undef BUF
}

/* The one outs rule (graph.h): a missing "outs" is every buffer, "outs": [] none. Dependencies
 * follow it, and a saved jit writes it back the same way. */
Test(graphfile, empty_outs_writes_nothing_and_round_trips) {
  hcq_graph_file_t *gf =
      load(HEAD
           "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 256, \"init\": \"iota32\"},"
           "\"o\": {\"device\": \"CPU:0\", \"bytes\": 256}, \"c\": {\"device\": \"CPU:0\", "
           "\"bytes\": 256},"
           "\"c2\": {\"device\": \"CPU:0\", \"bytes\": 256}}," PROG
           "\"vars\": {},"
           "\"items\": ["
           "  {\"kernel\": \"add1\", \"bufs\": [\"a\", \"o\"], \"outs\": [], \"vals\": [0]},"
           "  {\"copy\": {\"dst\": \"c\", \"src\": \"a\"}},"
           "  {\"kernel\": \"add1\", \"bufs\": [\"o\", \"a\"], \"vals\": [0]},"
           "  {\"copy\": {\"dst\": \"c2\", \"src\": \"o\"}}]}");
  const hcq_exec_item_t *items = hcq_graph_file_items(gf);
  cr_assert_not_null(items[0].kernel.outs, "\"outs\": [] is an outs array");
  cr_assert_eq(items[0].kernel.nouts, 0);
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(items, 4, NULL, 0, NULL, 0, NULL, &g));
  hcq_graph_item_schedule_t s;
  OK(hcq_graph_item_schedule(g, 1, &s));
  cr_assert_eq(s.ndeps, 0, "the copy reads a, which item 0 (\"outs\": []) does not write");
  OK(hcq_graph_item_schedule(g, 3, &s));
  cr_assert_eq(s.ndeps, 1, "the copy reads o, which item 2 (no \"outs\") writes");
  cr_assert_eq(s.deps[0], 2);
  OK(hcq_graph_destroy(g));

  /* Saved from a jit whose items say "nothing" (empty array) and "every buffer" (NULL). */
  hcq_exec_item_t mine[2] = {items[0], items[2]};
  mine[1].kernel.outs = NULL;
  mine[1].kernel.nouts = 0;
  hcq_jit_t *jit = NULL;
  OK(hcq_jit_create(mine, 2, NULL, 0, NULL, 0, NULL, &jit));
  cr_assert_not_null(hcq_jit_item(jit, 0)->kernel.outs,
                     "copying an item keeps an empty outs array");
  cr_assert_null(hcq_jit_item(jit, 1)->kernel.outs);
  const char *base = getenv("HCQ_TEST_TMP");
  char path[512];
  snprintf(path, sizeof(path), "%s/outs-%d.json", base && *base ? base : "/tmp", (int)getpid());
  OK(hcq_jit_save(jit, path));
  OK(hcq_jit_destroy(jit));
  hcq_graph_file_t *again = NULL;
  OK(hcq_graph_file_load(path, NULL, &again));
  unlink(path);
  const hcq_exec_item_t *back = hcq_graph_file_items(again);
  cr_assert_not_null(back[0].kernel.outs, "\"writes nothing\" is saved as \"outs\": []");
  cr_assert_eq(back[0].kernel.nouts, 0);
  cr_assert_eq(back[1].kernel.nouts, 2,
               "\"every buffer\" is saved without outs and loads as every buffer");
  hcq_graph_file_destroy(again);
  hcq_graph_file_destroy(gf);
}

/* Launch dims a file leaves out are 1; an explicit constant 0 is refused naming the item and the
 * dim (it would run nothing); a dim that evaluates to 0 for a run's variables launches nothing
 * then. */
Test(graphfile, zero_launch_dims) {
  const char *base = HEAD
      "\"vars\": {\"n\": {\"min\": 0, \"max\": 16, \"value\": 16}},"
      "\"buffers\": {\"o\": {\"device\": \"CPU:0\", \"bytes\": 64}, \"a\": {\"device\": \"CPU:0\", "
      "\"bytes\": 64, \"init\": \"iota32\"}}," PROG;
  char text[4096];
  load_fails(WITH("\"items\": [{\"kernel\": \"add1\", \"bufs\": [\"o\", \"a\"], \"vals\": [16], "
                  "\"global\": [16, 0]}]"),
             HCQ_INVALID_ARGUMENT,
             "t.json: items[0].global[1]: is 0 (launch dims must be >= 1; use 1 for unused dims)");
  load_fails(
      WITH("\"items\": [{\"copy\": {\"dst\": \"o\", \"src\": \"a\"}}, {\"kernel\": \"add1\", "
           "\"bufs\": [\"o\", \"a\"], \"vals\": [16], \"local\": [1, 1, \"2-2\"]}]"),
      HCQ_INVALID_ARGUMENT, "items[1].local[2]");
  hcq_graph_file_t *gf =
      load(WITH("\"items\": [{\"kernel\": \"add1\", \"bufs\": [\"o\", \"a\"], \"vals\": [\"n\"], "
                "\"global\": [\"n\"]}]"));
  const hcq_exec_item_t *it = hcq_graph_file_items(gf);
  for (int i = 0; i < 3; i++) {
    if (i) cr_assert_eq(it->kernel.global[i].value, 1, "global[%d] defaults to 1", i);
    cr_assert(!it->kernel.local[i].sym && it->kernel.local[i].value == 1, "local[%d] defaults to 1",
              i);
  }
  const hcq_expr_t *n = hcq_graph_file_vars(gf)[0].var;
  hcq_var_value_t zero = {n, 0}, all = {n, 16};
  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(hcq_graph_file_items(gf), 1, NULL, 0, &zero, 1, NULL, &g));
  int32_t got[16];
  OK(hcq_graph_run(g, NULL, 0, &zero, 1, true, NULL));
  test_read(named(gf, "o"), got, sizeof(got));
  for (int i = 0; i < 16; i++)
    cr_assert_eq(got[i], 0, "n = 0 launches nothing (o[%d] = %d)", i, got[i]);
  OK(hcq_graph_run(g, NULL, 0, &all, 1, true, NULL));
  test_read(named(gf, "o"), got, sizeof(got));
  for (int i = 0; i < 16; i++) cr_assert_eq(got[i], i + 1, "n = 16 runs (o[%d] = %d)", i, got[i]);
  OK(hcq_graph_destroy(g));
  hcq_graph_file_destroy(gf);
}

/* "nbufs"/"nvals" on a program declare what its kernel reads: an item passing other counts is bad
 * input naming the item, and the compiled program carries the declaration (eager runs check it). */
Test(graphfile, declared_program_argument_counts) {
  const char *prog =
      "\"programs\": {\"add1\": {\"nbufs\": 2, \"nvals\": 1, \"c\": \"void add1(void *const *b, "
      "const int32_t *v, "
      "const hcq_launch_t *l) { int32_t *o = b[0]; const int32_t *a = b[1]; for (uint32_t t = 0; t "
      "< l->lsz[0]; "
      "t++) { size_t i = (size_t)l->gid[0] * l->lsz[0] + t; if (i < (size_t)v[0]) o[i] = a[i] + 1; "
      "} }\"}}, ";
  char base[2048];
  snprintf(base, sizeof(base), "%s%s%s", HEAD,
           "\"buffers\": {\"o\": {\"device\": \"CPU:0\", \"bytes\": 64}, \"a\": {\"device\": "
           "\"CPU:0\", \"bytes\": 64}},",
           prog);
  char text[4096];
  load_fails(WITH("\"items\": [{\"copy\": {\"dst\": \"o\", \"src\": \"a\"}}, {\"kernel\": "
                  "\"add1\", \"bufs\": [\"o\"], \"vals\": [16]}]"),
             HCQ_INVALID_ARGUMENT,
             "t.json: items[1]: bufs and vals: kernel add1 takes 2 buffers and 1 value (as "
             "declared), but 1 buffer and 1 value are passed");
  load_fails(
      WITH("\"items\": [{\"kernel\": \"add1\", \"bufs\": [\"o\", \"a\"], \"vals\": [16, 2]}]"),
      HCQ_INVALID_ARGUMENT, "but 2 buffers and 2 values are passed");
  hcq_graph_file_t *gf =
      load(WITH("\"items\": [{\"kernel\": \"add1\", \"bufs\": [\"o\", \"a\"], \"vals\": [16]}]"));
  size_t nb = 0, nv = 0;
  cr_assert(hcq_program_args(hcq_graph_file_items(gf)[0].kernel.program, &nb, &nv) && nb == 2 &&
            nv == 1);
  hcq_graph_file_destroy(gf);
  const char *buffers =
      HEAD "\"buffers\": {\"o\": {\"device\": \"CPU:0\", \"bytes\": 64}}, \"items\": [], ";
  snprintf(text, sizeof(text), "%s\"programs\": {\"k\": {\"c\": \"\", \"nbufs\": 1}}}", buffers);
  load_fails(text, HCQ_INVALID_ARGUMENT,
             "programs.k: give both \"nbufs\" and \"nvals\", or neither");
  snprintf(text, sizeof(text),
           "%s\"programs\": {\"k\": {\"c\": \"\", \"nbufs\": 1, \"nvals\": 257}}}", buffers);
  load_fails(text, HCQ_OUT_OF_RANGE, "programs.k.nvals: 257 is outside [0, 256]");
}

/* lo <= x < hi for every word, as documented, also where lo + (hi - lo) * u rounds up to hi (it
 * did: [1, 1 + 2^-20) gave hi for u above 15/16, [1, 2) at the largest u), and at the widest
 * ranges a float allows. */
Test(graphfile, uniform_f32_stays_in_its_range) {
  const float ranges[][2] = {
      {1.0f, 1.0f + 0x1p-20f}, {1.0f, 2.0f},  {-1.7e38f, 1.7e38f}, {0.0f, 3.4e38f},
      {-3.4e38f, 0.0f},        {-1.0f, 1.0f}, {5.0f, 5.0f}};
  for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
    float lo = ranges[r][0], hi = ranges[r][1];
    char text[512];
    snprintf(text, sizeof(text),
             HEAD
             "\"buffers\": {\"u\": {\"device\": \"CPU:0\", \"bytes\": 1024, "
             "\"init\": {\"uniform_f32\": {\"seed\": 11, \"lo\": %.9g, \"hi\": %.9g}}}},"
             "\"items\": [{\"copy\": {\"dst\": \"u\", \"src\": \"u\", \"bytes\": 0}}]}",
             (double)lo, (double)hi);
    hcq_graph_file_t *gf = load(text);
    float f[256];
    OK(hcq_buffer_copyout(named(gf, "u"), 0, f, sizeof(f)));
    int at_top = 0;
    for (int i = 0; i < 256; i++) {
      cr_assert(isfinite(f[i]), "[%g, %g) word %d is %g", (double)lo, (double)hi, i, (double)f[i]);
      cr_assert(lo == hi ? f[i] == lo : f[i] >= lo && f[i] < hi, "[%.9g, %.9g) word %d is %.9g",
                (double)lo, (double)hi, i, (double)f[i]);
      cr_assert_eq(f[i], uniform_ref(11, (uint64_t)i, lo, hi), "word %d", i);
      at_top += lo < hi && f[i] == nextafterf(hi, lo);
    }
    if (r == 0) cr_assert_gt(at_top, 0, "[1, 1 + 2^-20) reaches the float below hi");
    hcq_graph_file_destroy(gf);
  }
}

/* Names are looked up through hash tables and view chains are walked without recursion: a file
 * with 100k buffers and a 100k-deep chain of views (declared from the far end, so every view
 * waits for the one after it) loads, and loads right. Before, loading was quadratic in the
 * number of buffers (100k did not finish in 40 s) and chains deeper than 64 were refused. */
Test(graphfile, many_buffers_and_a_deep_view_chain) {
  enum { N = 100000, DEPTH = 100000 };
  size_t cap = (size_t)N * 80 + (size_t)DEPTH * 64 + (size_t)N * 10 + 4096, len = 0;
  char *text = malloc(cap);
  cr_assert_not_null(text);
#define ADD(...)                                                 \
  do {                                                           \
    len += (size_t)snprintf(text + len, cap - len, __VA_ARGS__); \
    cr_assert_lt(len, cap);                                      \
  } while (0)
  ADD(HEAD "\"buffers\": {");
  for (int i = 0; i < N; i++)
    ADD("\"b%d\": {\"device\": \"CPU:0\", \"bytes\": 4, \"init\": {\"fill32\": %d}},", i, i * 3);
  /* v0 = c[0, 8 + DEPTH), v_k = v_(k-1)[1, ...): v_k starts at byte k of c. */
  for (int k = DEPTH - 1; k > 0; k--)
    ADD("\"v%d\": {\"view\": \"v%d\", \"offset\": 1, \"bytes\": %d},", k, k - 1, 8 + DEPTH - k);
  ADD("\"v0\": {\"view\": \"c\", \"bytes\": %d},", 8 + DEPTH);
  ADD("\"c\": {\"device\": \"CPU:0\", \"bytes\": %d, \"init\": \"iota32\"}},", 8 + DEPTH);
  ADD("\"items\": [{\"copy\": {\"dst\": \"b%d\", \"src\": \"v%d\"}}], \"inputs\": [", N - 1,
      DEPTH - 1);
  for (int i = 0; i < N; i++) ADD("%s\"b%d\"", i ? ", " : "", i);
  ADD("], \"runs\": [{\"inputs\": {\"b%d\": \"b0\"}}]}", N / 2);
#undef ADD
  hcq_graph_file_options_t opts = {.skip_compile = true};
  hcq_graph_file_t *gf = NULL;
  OK(hcq_graph_file_load_text(text, len, "big.json", ".", &opts, &gf));
  free(text);
  cr_assert_eq(hcq_graph_file_buffer_count(gf), (size_t)N + 1 + DEPTH);
  cr_assert_eq(hcq_graph_file_input_count(gf), (size_t)N);
  /* Base buffers in file order, then the views from the base outward. */
  const size_t probes[] = {0, 1, 4242, N / 2, N - 1};
  for (size_t p = 0; p < sizeof(probes) / sizeof(probes[0]); p++) {
    char name[16];
    snprintf(name, sizeof(name), "b%zu", probes[p]);
    cr_assert_str_eq(hcq_graph_file_buffer_name(gf, probes[p]), name);
    uint32_t w;
    OK(hcq_buffer_copyout(hcq_graph_file_buffer(gf, probes[p]), 0, &w, 4));
    cr_assert_eq(w, probes[p] * 3, "b%zu", probes[p]);
    cr_assert_eq(hcq_graph_file_inputs(gf)[probes[p]], hcq_graph_file_buffer(gf, probes[p]));
  }
  hcq_buffer_t *c = named(gf, "c");
  cr_assert_str_eq(hcq_graph_file_buffer_name(gf, N), "c");
  for (size_t k = 0; k < DEPTH; k += 997) {
    char name[16];
    snprintf(name, sizeof(name), "v%zu", k);
    cr_assert_str_eq(hcq_graph_file_buffer_name(gf, N + 1 + k), name);
    hcq_buffer_t *v = hcq_graph_file_buffer(gf, N + 1 + k);
    cr_assert_eq(hcq_buffer_base(v), c);
    cr_assert_eq(hcq_buffer_offset(v), k, "v%zu", k);
    cr_assert_eq(hcq_buffer_size(v), 8 + DEPTH - k, "v%zu", k);
  }
  hcq_buffer_t *last = hcq_graph_file_buffer(gf, N + DEPTH);
  cr_assert_eq(hcq_buffer_offset(last), DEPTH - 1);
  uint8_t got[9], want[9];
  OK(hcq_buffer_copyout(last, 0, got, 9));
  for (size_t i = 0; i < 9; i++) {
    size_t at = DEPTH - 1 + i;
    want[i] = (uint8_t)((at / 4) >> (8 * (at % 4)));
  }
  cr_assert_arr_eq(got, want, 9, "the last view shows c from byte DEPTH - 1");
  hcq_buffer_t *const *ins;
  hcq_graph_file_run(gf, 0, &ins, NULL);
  cr_assert_eq(ins[N / 2], hcq_graph_file_buffer(gf, 0), "the run's swap finds its input by name");
  cr_assert_eq(ins[N / 2 + 1], hcq_graph_file_buffer(gf, N / 2 + 1));
  hcq_graph_file_destroy(gf);
}

/* A fresh folder under HCQ_TEST_TMP (or /tmp) for files a test makes. */
static void temp_dir(char *dir, size_t size) {
  const char *base = getenv("HCQ_TEST_TMP");
  base = base && *base ? base : "/tmp";
  mkdir(base, 0755);
  snprintf(dir, size, "%s/graphfile-XXXXXX", base);
  cr_assert_not_null(mkdtemp(dir), "mkdtemp %s", dir);
}

static void write_text(const char *dir, const char *name, const char *text) {
  char path[600];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

static void load_dir_fails(const char *dir, const char *text, hcq_status_code_t code,
                           const char **fragments) {
  hcq_graph_file_t *gf = NULL;
  hcq_status_t st = hcq_graph_file_load_text(text, strlen(text), "t.json", dir, NULL, &gf);
  cr_assert_null(gf);
  test_expect_failure(st, code, fragments[0], fragments);
}

/* Only regular files are read: a FIFO as the graph file or as a {"file": ...} source used to block
 * forever in open() (the timeout turns a regression into a failure, not a hang). */
Test(graphfile, non_regular_files_are_refused_without_blocking, .timeout = 20) {
  char dir[512], fifo[600], path[700];
  temp_dir(dir, sizeof(dir));
  snprintf(fifo, sizeof(fifo), "%s/pipe", dir);
  cr_assert_eq(mkfifo(fifo, 0600), 0, "mkfifo %s", fifo);
  mkdir(strcat(strcpy(path, dir), "/folder"), 0755);
  hcq_graph_file_t *gf = NULL;
  test_expect_failure(
      hcq_graph_file_load(fifo, NULL, &gf), HCQ_INVALID_ARGUMENT, "a FIFO as the graph file",
      (const char *[]){
          fifo, "cannot read graph file: it is a FIFO (named pipe), not a regular file", NULL});
  cr_assert_null(gf);
  test_expect_failure(
      hcq_graph_file_load("/dev/zero", NULL, &gf), HCQ_INVALID_ARGUMENT, "a character device",
      (const char *[]){"/dev/zero: cannot read graph file: it is a character device", NULL});
  test_expect_failure(hcq_graph_file_load(path, NULL, &gf), HCQ_INVALID_ARGUMENT, "a directory",
                      (const char *[]){"folder: cannot read graph file: it is a directory", NULL});
  const char *src_fmt = HEAD
      "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 8}},"
      "\"programs\": {\"k\": {\"c\": {\"file\": \"%s\"}}}, \"items\": [{\"kernel\": \"k\", "
      "\"bufs\": [\"a\"]}]}";
  const char *data_fmt = HEAD
      "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 8, \"init\": {\"file\": \"%s\"}}},"
      "\"items\": [{\"copy\": {\"dst\": \"a\", \"src\": \"a\"}}]}";
  const char *cases[][2] = {
      {"pipe", "is a FIFO (named pipe), not a regular file"},
      {"/dev/zero", "\"/dev/zero\" is a character device, not a regular file"},
      {"folder", "folder\" is a directory, not a regular file"}};
  char text[1024];
  for (size_t i = 0; i < 3; i++) {
    snprintf(text, sizeof(text), src_fmt, cases[i][0]);
    load_dir_fails(dir, text, HCQ_INVALID_ARGUMENT,
                   (const char *[]){"t.json: programs.k.c.file: ", cases[i][1], NULL});
    snprintf(text, sizeof(text), data_fmt, cases[i][0]);
    load_dir_fails(dir, text, HCQ_INVALID_ARGUMENT,
                   (const char *[]){"t.json: buffers.a.init.file: ", cases[i][1], NULL});
  }
  /* A regular file through a symlink still loads. */
  write_text(dir, "data.bin", "12345678");
  snprintf(path, sizeof(path), "%s/link.bin", dir);
  cr_assert_eq(symlink("data.bin", path), 0);
  snprintf(text, sizeof(text), data_fmt, "link.bin");
  OK(hcq_graph_file_load_text(text, strlen(text), "t.json", dir, NULL, &gf));
  uint8_t got[8];
  OK(hcq_buffer_copyout(named(gf, "a"), 0, got, 8));
  cr_assert_arr_eq(got, "12345678", 8);
  hcq_graph_file_destroy(gf);
}

/* A path longer than PATH_MAX is an error naming it. It used to be cut to PATH_MAX - 1 bytes,
 * which here names another file that exists (data.bin, not data.bin.missing), and that file was
 * read. */
Test(graphfile, paths_longer_than_path_max_are_errors) {
  char dir[512];
  temp_dir(dir, sizeof(dir));
  write_text(dir, "data.bin", "abcdefgh");
  size_t dir_len = strlen(dir), keep = PATH_MAX - 1; /* what a cut path kept */
  size_t pad = keep - dir_len - 1 - strlen("data.bin");
  char *rel = malloc(pad + 64), *text = malloc(pad + 1024);
  size_t n = 0;
  if (pad % 2)
    rel[n++] = '.', rel[n++] = '/', rel[n++] = '/', pad -= 3; /* ".//" fixes the parity */
  for (; pad; pad -= 2) rel[n++] = '.', rel[n++] = '/';
  strcpy(rel + n, "data.bin.missing");
  cr_assert_eq(dir_len + 1 + strlen(rel) - strlen(".missing"), keep);
  sprintf(
      text,
      HEAD
      "\"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 8, \"init\": {\"file\": \"%s\"}}},"
      "\"items\": [{\"copy\": {\"dst\": \"a\", \"src\": \"a\"}}]}",
      rel);
  char length[128];
  snprintf(length, sizeof(length), "is too long: %zu bytes with the graph file's folder",
           dir_len + 1 + strlen(rel));
  load_dir_fails(
      dir, text, HCQ_INVALID_ARGUMENT,
      (const char *[]){"t.json: buffers.a.init.file: path \"./", length, "PATH_MAX", NULL});
  free(rel);
  free(text);
}

/* Flat expressions longer than the expression tree's limit say so (they reported "out of memory",
 * which the hcq command turned into exit 3, a runtime failure). */
Test(graphfile, too_long_expressions_give_their_length_and_the_limit) {
  size_t terms = 5000;
  char *expr = malloc(terms * 2 + 1), *text = malloc(terms * 2 + 1024);
  for (size_t i = 0; i < terms; i++) expr[2 * i] = 'n', expr[2 * i + 1] = '+';
  expr[2 * terms - 1] = '\0';
  const char *fmt = HEAD
      "\"vars\": {\"n\": {\"min\": 0, \"max\": 0}}, \"buffers\": {\"a\": {\"device\": \"CPU:0\", "
      "\"bytes\": 64}}," PROG
      "\"items\": [{\"kernel\": \"add1\", \"bufs\": [\"a\", \"a\"], \"vals\": [\"%s\"]}]}";
  sprintf(text, fmt, expr);
  load_fails(text, HCQ_INVALID_ARGUMENT, "items[0].vals[0]: expression \"n+n+n+");
  load_fails(text, HCQ_INVALID_ARGUMENT,
             "is too long: 5000 terms in a row make it 5000 levels deep, the limit is 1000");
  expr[2 * 1001 - 1] = '\0';
  sprintf(text, fmt, expr);
  load_fails(text, HCQ_INVALID_ARGUMENT, "1001 terms in a row");
  /* At the limit it loads; grouped in parentheses (10 x 500), the 5000 terms load too. */
  expr[2 * 1000 - 1] = '\0';
  sprintf(text, fmt, expr);
  hcq_graph_file_t *gf = load(text);
  hcq_graph_file_destroy(gf);
  char *grouped = malloc(terms * 3 + 64);
  size_t n = 0;
  for (size_t g = 0; g < 10; g++) {
    n += (size_t)sprintf(grouped + n, "%s(", g ? "+" : "");
    memcpy(grouped + n, expr, 2 * 500 - 1);
    n += 2 * 500 - 1;
    grouped[n++] = ')';
  }
  grouped[n] = '\0';
  text = realloc(text, n + 1024);
  sprintf(text, fmt, grouped);
  gf = load(text);
  hcq_graph_file_destroy(gf);
  /* Products and min/max argument lists are chains too. */
  hcq_expr_t *n_var = NULL, *e = NULL;
  OK(hcq_var_create("n", 0, 0, &n_var));
  const hcq_expr_t *vars[] = {n_var};
  for (size_t i = 0; i < terms; i++) expr[2 * i] = 'n', expr[2 * i + 1] = '*';
  expr[2 * terms - 1] = '\0';
  FAILS(hcq_expr_parse(expr, vars, 1, &e), HCQ_INVALID_ARGUMENT, "5000 factors in a row",
        "the limit is 1000");
  n = (size_t)sprintf(grouped, "max(");
  for (size_t i = 0; i < 3000; i++) n += (size_t)sprintf(grouped + n, "%sn", i ? "," : "");
  strcpy(grouped + n, ")");
  FAILS(hcq_expr_parse(grouped, vars, 1, &e), HCQ_INVALID_ARGUMENT,
        "3000 min/max arguments in a row");
  cr_assert_null(e);
  hcq_expr_release(n_var);
  free(grouped);
  free(expr);
  free(text);
}

/* hcq_jit_save writes an expression whole: it was cut at 1023 bytes, so a long one came back as
 * another expression or a syntax error. */
Test(graphfile, saved_expressions_are_whole) {
  size_t terms = 900; /* "n+n+...": 1799 bytes, under the 1000-level limit */
  char *expr = malloc(terms * 2), *text = malloc(terms * 2 + 2048);
  for (size_t i = 0; i < terms; i++) expr[2 * i] = 'n', expr[2 * i + 1] = '+';
  expr[2 * terms - 1] = '\0';
  sprintf(text,
          HEAD
          "\"vars\": {\"n\": {\"min\": 0, \"max\": 1, \"value\": 1}}, \"buffers\": {\"a\": "
          "{\"device\": \"CPU:0\", \"bytes\": 64}}," PROG
          "\"items\": [{\"kernel\": \"add1\", \"bufs\": [\"a\", \"a\"], \"vals\": [\"%s\"]}]}",
          expr);
  hcq_graph_file_t *gf = load(text);
  hcq_jit_t *jit = NULL;
  OK(hcq_jit_create(hcq_graph_file_items(gf), hcq_graph_file_item_count(gf), NULL, 0,
                    hcq_graph_file_vars(gf), hcq_graph_file_var_count(gf), NULL, &jit));
  char dir[512], path[600];
  temp_dir(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/saved.json", dir);
  OK(hcq_jit_save(jit, path));
  hcq_graph_file_t *back = NULL;
  OK(hcq_graph_file_load(path, NULL, &back));
  const hcq_operand_t *was = &hcq_graph_file_items(gf)[0].kernel.vals[0],
                      *is = &hcq_graph_file_items(back)[0].kernel.vals[0];
  cr_assert_not_null(is->sym);
  char a[4096], b[4096];
  cr_assert_gt(hcq_expr_format(was->sym, a, sizeof(a)), 1024);
  hcq_expr_format(is->sym, b, sizeof(b));
  cr_assert_str_eq(b, a);
  int64_t x;
  OK(hcq_expr_eval(is->sym, hcq_graph_file_vars(back), 1, &x));
  cr_assert_eq(x, (int64_t)terms);
  OK(hcq_jit_destroy(jit));
  hcq_graph_file_destroy(back);
  hcq_graph_file_destroy(gf);
  free(expr);
  free(text);
}
