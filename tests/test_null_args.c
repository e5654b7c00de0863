/* Every public function given NULL objects, NULL out-pointers and indices past the end: a clear
 * error (a status naming the problem) or a neutral value (0, NULL, ""), never a crash. Criterion
 * runs each test in its own process, so a crash fails the test that made it. */
#include "test_util.h"

#include <stdarg.h>

#include "hcq/vulkan.h"

/* A status that is a failure with code, freed. */
static void refused(hcq_status_t st, hcq_status_code_t code, const char *what) {
  cr_assert_not_null(st, "%s: accepted", what);
  cr_assert_eq(hcq_status_code(st), code, "%s: %s (%s)", what,
               hcq_status_code_name(hcq_status_code(st)), hcq_status_message(st));
  cr_assert_gt(strlen(hcq_status_message(st)), 0, "%s: no message", what);
  hcq_status_destroy(st);
}
#define REFUSED(call) refused((call), HCQ_INVALID_ARGUMENT, #call)

Test(null_args, status) {
  hcq_status_t s = hcq_status_make(HCQ_INTERNAL, NULL);
  cr_assert_eq(hcq_status_code(s), HCQ_INTERNAL);
  cr_assert_str_eq(hcq_status_message(s), "");
  hcq_status_destroy(s);
  s = hcq_status_annotate(hcq_status_make(HCQ_NOT_FOUND, "x"), NULL);
  cr_assert_eq(hcq_status_code(s), HCQ_NOT_FOUND);
  cr_assert_str_eq(hcq_status_message(s), "x");
  hcq_status_destroy(s);
}

static hcq_status_t make_v(hcq_status_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hcq_status_t s = hcq_status_makev(code, fmt, ap);
  va_end(ap);
  return s;
}

Test(null_args, status_makev_formats_like_make) {
  hcq_status_t s = make_v(HCQ_OUT_OF_RANGE, "%s = %d", "n", 7);
  cr_assert_eq(hcq_status_code(s), HCQ_OUT_OF_RANGE);
  cr_assert_str_eq(hcq_status_message(s), "n = 7");
  hcq_status_destroy(s);
  s = make_v(HCQ_OK, "odd");
  cr_assert_neq(hcq_status_code(s), HCQ_OK, "a status that is made is a failure");
  hcq_status_destroy(s);
}

Test(null_args, symbolic) {
  REFUSED(hcq_var_create(NULL, 0, 1, &(hcq_expr_t *){NULL}));
  REFUSED(hcq_var_create("n", 0, 1, NULL));
  cr_assert_null(hcq_expr_neg(NULL));
  cr_assert_null(hcq_expr_binary(HCQ_EXPR_ADD, NULL, NULL));
  cr_assert_null(hcq_expr_retain(NULL));
  hcq_expr_release(NULL);
  cr_assert_eq(hcq_expr_op(NULL), HCQ_EXPR_CONST);
  cr_assert_not(hcq_expr_is_const(NULL));
  cr_assert_eq(hcq_expr_const_value(NULL), 0);
  cr_assert_null(hcq_var_name(NULL));
  cr_assert_eq(hcq_var_min(NULL), 0);
  cr_assert_eq(hcq_var_max(NULL), 0);
  cr_assert_eq(hcq_expr_vars(NULL, NULL, 0), 0);
  char buf[8] = "x";
  hcq_expr_format(NULL, buf, sizeof(buf));
  cr_assert_eq(hcq_expr_format(NULL, NULL, 0), hcq_expr_format(NULL, buf, sizeof(buf)));
  REFUSED(hcq_expr_parse(NULL, NULL, 0, &(hcq_expr_t *){NULL}));
  REFUSED(hcq_expr_parse("1", NULL, 0, NULL));
  REFUSED(hcq_expr_eval(NULL, NULL, 0, &(int64_t){0}));
  REFUSED(hcq_var_check(NULL, 0));

  /* And the accessors on real expressions: op, retain/release balance. */
  hcq_expr_t *n = NULL;
  OK(hcq_var_create("n", 1, 10, &n));
  hcq_expr_t *two = hcq_expr_const(2), *sum = hcq_expr_binary(HCQ_EXPR_MUL, n, two);
  cr_assert_eq(hcq_expr_op(n), HCQ_EXPR_VAR);
  cr_assert_eq(hcq_expr_op(two), HCQ_EXPR_CONST);
  cr_assert_eq(hcq_expr_op(sum), HCQ_EXPR_MUL);
  cr_assert_eq(hcq_expr_retain(sum), sum);
  hcq_expr_release(sum); /* the retain's */
  int64_t v = 0;
  OK(hcq_expr_eval(sum, &(hcq_var_value_t){n, 4}, 1, &v));
  cr_assert_eq(v, 8, "still alive after one release of two");
  hcq_expr_release(sum);
  hcq_expr_release(two);
  hcq_expr_release(n);
}

Test(null_args, devices_buffers_signals) {
  REFUSED(hcq_device_open(NULL, &(hcq_device_t *){NULL}));
  REFUSED(hcq_device_open("CPU:0", NULL));
  REFUSED(hcq_device_open_ex(NULL, NULL, &(hcq_device_t *){NULL}));
  OK(hcq_device_close(NULL));
  cr_assert_str_eq(hcq_device_name(NULL), "");
  cr_assert_eq(hcq_device_kind(NULL), HCQ_DEVICE_KIND_COUNT);
  cr_assert_not_null(hcq_device_kind_name((hcq_device_kind_t)99));
  cr_assert_eq(hcq_device_caps(NULL), 0);
  cr_assert_eq(hcq_device_cores(NULL, NULL, 0), 0);
  cr_assert_eq(hcq_device_thread_count(NULL), 0);
  REFUSED(hcq_device_synchronize(NULL));
  hcq_signal_t *sig = (hcq_signal_t *)1;
  uint64_t next = 1;
  hcq_device_timeline(NULL, &sig, &next);
  cr_assert_null(sig);
  cr_assert_eq(next, 0);
  REFUSED(hcq_device_declare_lost(NULL, "why"));
  REFUSED(hcq_device_health(NULL));
  cr_assert_eq(hcq_device_report(NULL, NULL, 0), 0);
  cr_assert_gt(hcq_device_query(NULL, 0), 0, "CPU is always there");
  REFUSED(hcq_device_memory_usage(NULL, &(hcq_memory_usage_t){0}));
  hcq_kernel_cache_usage(NULL, NULL, NULL);

  REFUSED(hcq_buffer_create(NULL, 64, &(hcq_buffer_t *){NULL}));
  REFUSED(hcq_buffer_view_create(NULL, 0, 4, &(hcq_buffer_t *){NULL}));
  cr_assert_null(hcq_buffer_retain(NULL));
  hcq_buffer_release(NULL);
  cr_assert_eq(hcq_buffer_address(NULL), 0);
  cr_assert_eq(hcq_buffer_size(NULL), 0);
  cr_assert_eq(hcq_buffer_offset(NULL), 0);
  cr_assert_null(hcq_buffer_base(NULL));
  cr_assert_null(hcq_buffer_device(NULL));
  cr_assert_not_null(hcq_buffer_label(NULL));
  hcq_buffer_set_label(NULL, "x");
  char byte = 0;
  REFUSED(hcq_buffer_copyin(NULL, 0, &byte, 1));
  REFUSED(hcq_buffer_copyout(NULL, 0, &byte, 1));
  REFUSED(hcq_transfer(NULL, NULL, 1));
  REFUSED(hcq_buffer_map(NULL, &(void *){NULL}));
  REFUSED(hcq_buffer_create_mapped(NULL, 64, &(hcq_buffer_t *){NULL}));
  REFUSED(hcq_buffer_wrap(NULL, &byte, 1, NULL, NULL, &(hcq_buffer_t *){NULL}));
  REFUSED(hcq_fence_create(NULL));
  REFUSED(hcq_fence_record(NULL, NULL, 0));
  REFUSED(hcq_fence_wait(NULL, 0));
  REFUSED(hcq_fence_poll(NULL, &(bool){false}));
  hcq_fence_destroy(NULL);
  cr_assert_eq(hcq_fence_device_count(NULL), 0);
  REFUSED(hcq_graph_submit(NULL, NULL, 0, NULL, 0, NULL));
  REFUSED(hcq_jit_submit(NULL, NULL, 0, NULL, 0, NULL));

  REFUSED(hcq_signal_create(NULL, "s", 0, &(hcq_signal_t *){NULL}));
  hcq_signal_destroy(NULL);
  cr_assert_eq(hcq_signal_value(NULL), 0);
  cr_assert_eq(hcq_signal_timestamp(NULL), 0);
  hcq_signal_set(NULL, 1);
  REFUSED(hcq_signal_wait(NULL, 1, 10));
  cr_assert_eq(hcq_signal_address(NULL), 0);
  cr_assert_not_null(hcq_signal_name(NULL));
  cr_assert_null(hcq_signal_device(NULL));

  /* On a real device: NULL out-pointers and a NULL buffer are refused, not written through. */
  hcq_device_t *d = test_open("CPU:0");
  REFUSED(hcq_buffer_create(d, 64, NULL));
  REFUSED(hcq_buffer_create_mapped(d, 64, NULL));
  REFUSED(hcq_buffer_wrap(d, &byte, 1, NULL, NULL, NULL));
  REFUSED(hcq_signal_create(d, "s", 0, NULL));
  REFUSED(hcq_device_memory_usage(d, NULL));
  hcq_buffer_t *b = test_buffer(d, 64);
  REFUSED(hcq_buffer_view_create(b, 0, 4, NULL));
  REFUSED(hcq_buffer_copyin(b, 0, NULL, 4));
  REFUSED(hcq_buffer_copyout(b, 0, NULL, 4));
  REFUSED(hcq_transfer(b, NULL, 4));
  REFUSED(hcq_transfer(NULL, b, 4));
  hcq_buffer_release(b);
  test_close(d);
}

Test(null_args, programs_and_launches) {
  REFUSED(hcq_program_create(NULL, "k", "void k(void){}", &(hcq_program_t *){NULL}));
  REFUSED(hcq_program_create_fn(NULL, "k", NULL, &(hcq_program_t *){NULL}));
  cr_assert_null(hcq_program_retain(NULL));
  hcq_program_release(NULL);
  cr_assert_not_null(hcq_program_name(NULL));
  cr_assert_null(hcq_program_device(NULL));
  cr_assert_null(hcq_program_source(NULL));
  REFUSED(hcq_program_declare_args(NULL, 1, 1));
  size_t nb = 9, nv = 9;
  cr_assert_not(hcq_program_args(NULL, &nb, &nv));
  cr_assert_not_null(hcq_cpu_prelude());
  cr_assert_not_null(hcq_vulkan_glsl_prelude());
  cr_assert(strstr(hcq_vulkan_glsl_prelude(), "#version") != NULL, "the prelude is GLSL: %s",
            hcq_vulkan_glsl_prelude());
  REFUSED(hcq_launch(NULL));
  REFUSED(hcq_program_create_spirv(NULL, "main", NULL, 0, &(hcq_program_t *){NULL}));

  hcq_device_t *d = test_open("CPU:0");
  REFUSED(hcq_program_create(d, NULL, test_kernels_source, &(hcq_program_t *){NULL}));
  REFUSED(hcq_program_create(d, "fill", NULL, &(hcq_program_t *){NULL}));
  REFUSED(hcq_program_create(d, "fill", test_kernels_source, NULL));
  REFUSED(hcq_program_create_fn(d, "k", NULL, &(hcq_program_t *){NULL}));
  hcq_program_t *p = test_program(d, "fill", test_kernels_source);
  cr_assert_eq(hcq_program_retain(p), p);
  hcq_program_release(p); /* the retain's: the program stays usable */
  cr_assert_str_eq(hcq_program_name(p), "fill");
  hcq_launch_desc_t l = {p, NULL, 1, NULL, 0, {1, 1, 1}, {1, 1, 1}, NULL, 0};
  REFUSED(hcq_launch(&l)); /* one buffer announced, none given */
  hcq_program_release(p);
  test_close(d);
}

Test(null_args, queues) {
  REFUSED(hcq_queue_create(HCQ_QUEUE_COMPUTE, NULL));
  REFUSED(hcq_queue_create((hcq_queue_kind_t)7, &(hcq_queue_t *){NULL}));
  hcq_queue_destroy(NULL);
  cr_assert_eq(hcq_queue_kind(NULL), HCQ_QUEUE_COMPUTE);
  cr_assert_eq(hcq_queue_size(NULL), 0);
  cr_assert_eq(hcq_queue_patch_count(NULL), 0);
  cr_assert_eq(hcq_queue_symbol_count(NULL), 0);
  cr_assert_eq(hcq_queue_word(NULL, 0), 0);
  hcq_operand_t one = hcq_imm(1), dims[3] = {one, one, one};
  REFUSED(hcq_queue_wait(NULL, one, one));
  REFUSED(hcq_queue_signal(NULL, one, one));
  REFUSED(hcq_queue_timestamp(NULL, one));
  REFUSED(hcq_queue_memory_barrier(NULL));
  REFUSED(hcq_queue_exec(NULL, NULL, one, 0, dims, dims));
  REFUSED(hcq_queue_copy(NULL, one, one, one));
  REFUSED(hcq_queue_kernargs(NULL, NULL, 0, NULL, 0, NULL, 0));
  REFUSED(hcq_queue_bind(NULL, NULL));
  REFUSED(hcq_queue_submit(NULL, NULL, NULL, 0));

  hcq_queue_t *q = NULL;
  OK(hcq_queue_create(HCQ_QUEUE_COPY, &q));
  cr_assert_eq(hcq_queue_kind(q), HCQ_QUEUE_COPY);
  cr_assert_eq(hcq_queue_word(q, 12345), 0, "past the end");
  REFUSED(hcq_queue_exec(q, NULL, one, 0, dims, dims));
  REFUSED(hcq_queue_exec(q, NULL, one, 0, NULL, NULL));
  REFUSED(hcq_queue_kernargs(q, NULL, 0, NULL, 0, NULL, 0));
  REFUSED(hcq_queue_bind(q, NULL));
  REFUSED(hcq_queue_submit(q, NULL, NULL, 0));
  hcq_queue_destroy(q);
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &q));
  cr_assert_eq(hcq_queue_kind(q), HCQ_QUEUE_COMPUTE);
  hcq_queue_destroy(q);
}

Test(null_args, graphs_and_jits) {
  hcq_exec_item_t item = {0};
  REFUSED(hcq_exec_item_run(NULL, NULL, 0));
  REFUSED(hcq_exec_item_run(&item, NULL, 0));
  REFUSED(hcq_graph_create(NULL, 1, NULL, 0, NULL, 0, NULL, &(hcq_graph_t *){NULL}));
  REFUSED(hcq_graph_create(&item, 1, NULL, 0, NULL, 0, NULL, NULL));
  REFUSED(hcq_graph_run(NULL, NULL, 0, NULL, 0, true, NULL));
  OK(hcq_graph_destroy(NULL));
  cr_assert_eq(hcq_graph_item_count(NULL), 0);
  cr_assert_eq(hcq_graph_var_count(NULL), 0);
  cr_assert_null(hcq_graph_var(NULL, 0));
  cr_assert_eq(hcq_graph_device_count(NULL), 0);
  cr_assert_null(hcq_graph_device(NULL, 0));
  cr_assert_not_null(hcq_graph_kind(NULL));
  hcq_graph_stats_t gs;
  memset(&gs, 0xff, sizeof(gs));
  hcq_graph_stats(NULL, &gs);
  hcq_graph_stats(NULL, NULL);
  REFUSED(hcq_graph_item_schedule(NULL, 0, &(hcq_graph_item_schedule_t){0}));
  cr_assert_null(hcq_graph_queue(NULL, 0));
  REFUSED(hcq_graph_profile(NULL, &(const hcq_profile_event_t *){NULL}));
  REFUSED(hcq_graph_write_dot(NULL, 1, "/tmp/x.dot"));

  REFUSED(hcq_capture_begin(NULL));
  REFUSED(hcq_capture_end(NULL, NULL, 0, NULL, 0, NULL, &(hcq_jit_t *){NULL}));
  hcq_capture_abort(NULL);
  cr_assert_eq(hcq_capture_item_count(NULL), 0);
  REFUSED(hcq_jit_create(NULL, 1, NULL, 0, NULL, 0, NULL, &(hcq_jit_t *){NULL}));
  REFUSED(hcq_jit_run(NULL, NULL, 0, NULL, 0, true, NULL));
  OK(hcq_jit_destroy(NULL));
  cr_assert_null(hcq_jit_report(NULL));
  cr_assert_eq(hcq_jit_item_count(NULL), 0);
  cr_assert_null(hcq_jit_item(NULL, 0));
  cr_assert_eq(hcq_jit_input_count(NULL), 0);
  cr_assert_null(hcq_jit_input(NULL, 0));
  cr_assert_eq(hcq_jit_var_count(NULL), 0);
  cr_assert_null(hcq_jit_var(NULL, 0));
  cr_assert_eq(hcq_jit_var_value(NULL, 0), 0);
  cr_assert_eq(hcq_jit_graph_count(NULL), 0);
  cr_assert_null(hcq_jit_graph(NULL, 0));
  REFUSED(hcq_jit_save(NULL, "/tmp/x.json"));
  REFUSED(hcq_launch_sym(NULL, NULL, 0));
}

/* The accessors of a real graph and jit, in range and one past the end. */
Test(null_args, graph_and_jit_accessors) {
  hcq_device_t *d = test_open("CPU:0");
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(d, 64, 1, 0), *y = test_buffer_iota(d, 64, 1, 0);
  hcq_expr_t *n = NULL;
  OK(hcq_var_create("n", 1, 64, &n));
  hcq_expr_t *seven = hcq_expr_const(7), *eight = hcq_expr_const(8),
             *plus = hcq_expr_binary(HCQ_EXPR_ADD, n, seven);
  hcq_expr_t *groups = hcq_expr_binary(HCQ_EXPR_FLOORDIV, plus, eight);
  hcq_operand_t vals[3] = {hcq_imm(3), hcq_imm(1), hcq_sym(n)};
  hcq_exec_item_t it = {.kind = HCQ_ITEM_KERNEL};
  it.kernel = (hcq_kernel_item_t){p,
                                  &x,
                                  1,
                                  NULL,
                                  0,
                                  vals,
                                  3,
                                  {hcq_sym(groups), hcq_imm(1), hcq_imm(1)},
                                  {hcq_imm(8), hcq_imm(1), hcq_imm(1)}};
  hcq_var_value_t v = {n, 64};

  hcq_graph_t *g = NULL;
  OK(hcq_graph_create(&it, 1, &x, 1, &v, 1, NULL, &g));
  cr_assert_eq(hcq_graph_item_count(g), 1);
  cr_assert_eq(hcq_graph_var_count(g), 1);
  cr_assert_str_eq(hcq_var_name(hcq_graph_var(g, 0)), "n");
  cr_assert_null(hcq_graph_var(g, 1));
  cr_assert_null(hcq_graph_device(g, 1));
  cr_assert_null(hcq_graph_queue(g, 999));
  REFUSED(hcq_graph_run(g, &y, 2, &v, 1, true, NULL)); /* two inputs for one */
  OK(hcq_graph_destroy(g));

  hcq_jit_t *j = NULL;
  hcq_exec_item_t two[2] = {it, it}; /* one item alone is run eagerly, two make a batch graph */
  OK(hcq_jit_create(two, 2, &x, 1, &v, 1, NULL, &j));
  cr_assert_eq(hcq_jit_input_count(j), 1);
  cr_assert_eq(hcq_jit_input(j, 0), x);
  cr_assert_null(hcq_jit_input(j, 1));
  cr_assert_eq(hcq_jit_graph_count(j), 1);
  cr_assert_not_null(hcq_jit_graph(j, 0));
  cr_assert_null(hcq_jit_graph(j, hcq_jit_graph_count(j)));
  cr_assert_null(hcq_jit_item(j, 2));
  cr_assert_null(hcq_jit_var(j, 1));
  OK(hcq_jit_run(j, &y, 1, &(hcq_var_value_t){n, 9}, 1, true, NULL));
  cr_assert_eq(hcq_jit_var_value(j, 0), 9);
  int32_t got[64];
  test_read(y, got, sizeof(got));
  for (int i = 0; i < 64; i++) cr_assert_eq(got[i], i < 9 ? 9 * i + 4 : i, "y[%d] = %d", i, got[i]);
  OK(hcq_jit_destroy(j));

  hcq_expr_release(groups);
  hcq_expr_release(plus);
  hcq_expr_release(eight);
  hcq_expr_release(seven);
  hcq_expr_release(n);
  hcq_buffer_release(x);
  hcq_buffer_release(y);
  hcq_program_release(p);
  test_close(d);
}

Test(null_args, graph_files_and_traces) {
  REFUSED(hcq_graph_file_load(NULL, NULL, &(hcq_graph_file_t *){NULL}));
  REFUSED(hcq_graph_file_load_text(NULL, 0, "t", NULL, NULL, &(hcq_graph_file_t *){NULL}));
  REFUSED(hcq_graph_file_load_text("{}", 2, "t", NULL, NULL, NULL));
  hcq_graph_file_destroy(NULL);
  REFUSED(hcq_graph_file_reset(NULL));
  cr_assert_eq(hcq_graph_file_item_count(NULL), 0);
  cr_assert_null(hcq_graph_file_items(NULL));
  cr_assert_eq(hcq_graph_file_input_count(NULL), 0);
  cr_assert_null(hcq_graph_file_inputs(NULL));
  cr_assert_eq(hcq_graph_file_var_count(NULL), 0);
  cr_assert_null(hcq_graph_file_vars(NULL));
  cr_assert_eq(hcq_graph_file_buffer_count(NULL), 0);
  cr_assert_null(hcq_graph_file_buffer_name(NULL, 0));
  cr_assert_null(hcq_graph_file_buffer(NULL, 0));
  cr_assert_eq(hcq_graph_file_device_count(NULL), 0);
  cr_assert_null(hcq_graph_file_device(NULL, 0));
  cr_assert_eq(hcq_graph_file_run_count(NULL), 0);
  hcq_buffer_t *const *ins = (hcq_buffer_t *const *)1;
  const hcq_var_value_t *vs = (const hcq_var_value_t *)1;
  hcq_graph_file_run(NULL, 0, &ins, &vs);
  cr_assert_null(ins);
  cr_assert_null(vs);
  hcq_graph_file_run(NULL, 0, NULL, NULL);
  hcq_graph_file_random_bytes(1, NULL, 0);

  /* A loaded file's devices: in range and past the end. */
  const char *text =
      "{\"format\": \"hcq-graph/1\", \"buffers\": {\"a\": {\"device\": \"CPU:0\", \"bytes\": 64},"
      " \"b\": {\"device\": \"CPU:1\", \"bytes\": 64}}, \"items\": [{\"copy\": {\"dst\": \"b\", "
      "\"src\": \"a\"}}]}";
  hcq_graph_file_t *f = NULL;
  OK(hcq_graph_file_load_text(text, strlen(text), "t.json", NULL, NULL, &f));
  cr_assert_eq(hcq_graph_file_device_count(f), 2);
  cr_assert_str_eq(hcq_device_name(hcq_graph_file_device(f, 0)), "CPU:0");
  cr_assert_str_eq(hcq_device_name(hcq_graph_file_device(f, 1)), "CPU:1");
  cr_assert_null(hcq_graph_file_device(f, 2));
  cr_assert_null(hcq_graph_file_buffer(f, 2));
  cr_assert_null(hcq_graph_file_buffer_name(f, 2));
  hcq_graph_file_destroy(f);

  cr_assert_not(hcq_trace_active());
  hcq_trace_pause(true);
  hcq_trace_pause(false);
  hcq_trace_stop();
  hcq_trace_stats(NULL);
  REFUSED(hcq_trace_write(NULL));
  REFUSED(hcq_trace_write_svg(NULL));
}

/* What the calls that take variable values run on: a kernel item (it, and twice in two), a graph
 * and a JIT of two made with the good value, a symbolic launch and a queue. */
typedef struct value_takers {
  hcq_device_t *d;
  hcq_exec_item_t it, two[2];
  hcq_graph_t *g;
  hcq_jit_t *j;
  hcq_launch_sym_desc_t ls;
  hcq_queue_t *q;
  hcq_var_value_t good;
} value_takers_t;

/* Every call that takes values refuses bad (two of them) naming why, and makes nothing. */
static void values_refused_by_every_call(value_takers_t *t, const hcq_var_value_t *bad,
                                         const char *why) {
  hcq_graph_t *g2 = NULL;
  hcq_jit_t *j2 = NULL;
  FAILS(hcq_graph_create(t->two, 2, NULL, 0, bad, 2, NULL, &g2), HCQ_INVALID_ARGUMENT, "graph",
        why);
  cr_assert_null(g2);
  FAILS(hcq_graph_run(t->g, NULL, 0, bad, 2, true, NULL), HCQ_INVALID_ARGUMENT, "replay", why);
  FAILS(hcq_jit_create(t->two, 2, NULL, 0, bad, 2, NULL, &j2), HCQ_INVALID_ARGUMENT, "jit", why);
  cr_assert_null(j2);
  FAILS(hcq_jit_run(t->j, NULL, 0, bad, 2, true, NULL), HCQ_INVALID_ARGUMENT, why);
  FAILS(hcq_exec_item_run(&t->it, bad, 2), HCQ_INVALID_ARGUMENT, "hcq_exec_item_run", why);
  FAILS(hcq_launch_sym(&t->ls, bad, 2), HCQ_INVALID_ARGUMENT, why);
  FAILS(hcq_queue_submit(t->q, t->d, bad, 2), HCQ_INVALID_ARGUMENT, "submit", why);
  hcq_capture_t *c = NULL;
  OK(hcq_capture_begin(&c));
  OK(hcq_launch_sym(&t->ls, &t->good, 1));
  OK(hcq_launch_sym(&t->ls, &t->good, 1));
  FAILS(hcq_capture_end(c, NULL, 0, bad, 2, NULL, &j2), HCQ_INVALID_ARGUMENT, "hcq_capture_end",
        why);
  cr_assert_null(j2);
}

/* Three launch_sym captures ran twice each (6), plus one replay of the two-item graph (2): 8 times
 * x = x * 2 + 1 over the first 8 elements (the 8x8 grid's mul_add skips indices >= n = 64: all). */
static void check_x_went_through_the_good_runs_only(hcq_buffer_t *x) {
  int32_t got[64];
  test_read(x, got, sizeof(got));
  for (int i = 0; i < 64; i++) {
    int32_t want = i;
    for (int k = 0; k < 8; k++) want = want * 2 + 1;
    cr_assert_eq(got[i], want, "x[%d] = %d, expected %d", i, got[i], want);
  }
}

/* A variable value names a variable: NULL, an expression that is not a variable, or one variable
 * given twice is refused by every call that takes values, naming the value. */
Test(null_args, variable_values_name_one_variable_each) {
  value_takers_t t = {.d = test_open("CPU:0")};
  hcq_device_t *d = t.d;
  hcq_program_t *p = test_program(d, "mul_add", test_kernels_source);
  hcq_buffer_t *x = test_buffer_iota(d, 64, 1, 0);
  hcq_expr_t *n = NULL;
  OK(hcq_var_create("n", 1, 64, &n));
  hcq_expr_t *two_c = hcq_expr_const(2), *twice = hcq_expr_binary(HCQ_EXPR_MUL, n, two_c);
  hcq_operand_t vals[3] = {hcq_imm(2), hcq_imm(1), hcq_sym(n)};
  t.it = (hcq_exec_item_t){.kind = HCQ_ITEM_KERNEL};
  t.it.kernel = (hcq_kernel_item_t){p,
                                    &x,
                                    1,
                                    NULL,
                                    0,
                                    vals,
                                    3,
                                    {hcq_imm(8), hcq_imm(1), hcq_imm(1)},
                                    {hcq_imm(8), hcq_imm(1), hcq_imm(1)}};
  t.two[0] = t.two[1] = t.it;
  t.good = (hcq_var_value_t){n, 64};
  const hcq_var_value_t bad[3][2] = {{t.good, {NULL, 3}}, {t.good, {twice, 3}}, {t.good, {n, 5}}};
  const char *why[3] = {"value 1 names no variable",
                        "value 1 is for an expression that is not a variable",
                        "variable n has two values (values 0 and 1)"};
  OK(hcq_graph_create(t.two, 2, NULL, 0, &t.good, 1, NULL, &t.g));
  OK(hcq_jit_create(t.two, 2, NULL, 0, &t.good, 1, NULL, &t.j));
  t.ls = (hcq_launch_sym_desc_t){p,
                                 &x,
                                 1,
                                 vals,
                                 3,
                                 {hcq_imm(8), hcq_imm(1), hcq_imm(1)},
                                 {hcq_imm(8), hcq_imm(1), hcq_imm(1)},
                                 NULL,
                                 0};
  OK(hcq_queue_create(HCQ_QUEUE_COMPUTE, &t.q));
  for (int b = 0; b < 3; b++) values_refused_by_every_call(&t, bad[b], why[b]);
  /* Nothing of the refused calls ran: x went through the good replays only. */
  OK(hcq_graph_run(t.g, NULL, 0, &t.good, 1, true, NULL));
  OK(hcq_device_synchronize(d));
  check_x_went_through_the_good_runs_only(x);
  hcq_queue_destroy(t.q);
  OK(hcq_jit_destroy(t.j));
  OK(hcq_graph_destroy(t.g));
  hcq_expr_release(twice);
  hcq_expr_release(two_c);
  hcq_expr_release(n);
  hcq_buffer_release(x);
  hcq_program_release(p);
  test_close(d);
}
