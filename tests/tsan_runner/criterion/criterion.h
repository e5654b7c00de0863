/* A minimal stand-in for the part of Criterion's API the hcq suites use, for ThreadSanitizer builds
 * only: Criterion's runner cannot start under TSan (Snaipe/Criterion#274, its inheritable arena
 * needs address ranges TSan reserves). Same macros, same semantics for passing tests: each test
 * runs in its own forked process with its suite's and its own init/fini and a timeout. */
#ifndef HCQ_TSAN_CRITERION_H
#define HCQ_TSAN_CRITERION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

struct shim_options {
  void (*init)(void);
  void (*fini)(void);
  double timeout;
  bool disabled;
};

struct shim_test {
  const char *suite, *name;
  void (*fn)(void);
  struct shim_options opts;
  struct shim_test *next;
};

struct shim_suite {
  const char *name;
  struct shim_options opts;
  struct shim_suite *next;
};

void shim_register_test(struct shim_test *t);
void shim_register_suite(struct shim_suite *s);
/* fmt may be "" (the macros pass "" when the test gave no message), so no format attribute. */
void shim_check(bool ok, const char *file, int line, const char *expr, const char *fmt, ...);
void shim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void shim_skip(const char *fmt, ...);

#define Test(suite, name, ...)                                          \
  static void suite##_##name##_impl(void);                              \
  static struct shim_test suite##_##name##_desc = {                     \
      #suite, #name, suite##_##name##_impl, {__VA_ARGS__}, NULL};       \
  __attribute__((constructor)) static void suite##_##name##_reg(void) { \
    shim_register_test(&suite##_##name##_desc);                         \
  }                                                                     \
  static void suite##_##name##_impl(void)

#define TestSuite(suite, ...)                                                  \
  static struct shim_suite suite##_suite_desc = {#suite, {__VA_ARGS__}, NULL}; \
  __attribute__((constructor)) static void suite##_suite_reg(void) {           \
    shim_register_suite(&suite##_suite_desc);                                  \
  }

#define cr_assert(cond, ...) shim_check(!!(cond), __FILE__, __LINE__, #cond, "" __VA_ARGS__)
#define cr_assert_not(cond, ...) \
  shim_check(!(cond), __FILE__, __LINE__, "!(" #cond ")", "" __VA_ARGS__)
#define cr_assert_eq(a, b, ...) \
  shim_check((a) == (b), __FILE__, __LINE__, #a " == " #b, "" __VA_ARGS__)
#define cr_assert_neq(a, b, ...) \
  shim_check((a) != (b), __FILE__, __LINE__, #a " != " #b, "" __VA_ARGS__)
#define cr_assert_lt(a, b, ...) \
  shim_check((a) < (b), __FILE__, __LINE__, #a " < " #b, "" __VA_ARGS__)
#define cr_assert_leq(a, b, ...) \
  shim_check((a) <= (b), __FILE__, __LINE__, #a " <= " #b, "" __VA_ARGS__)
#define cr_assert_gt(a, b, ...) \
  shim_check((a) > (b), __FILE__, __LINE__, #a " > " #b, "" __VA_ARGS__)
#define cr_assert_geq(a, b, ...) \
  shim_check((a) >= (b), __FILE__, __LINE__, #a " >= " #b, "" __VA_ARGS__)
#define cr_assert_null(p, ...) \
  shim_check((p) == NULL, __FILE__, __LINE__, #p " == NULL", "" __VA_ARGS__)
#define cr_assert_not_null(p, ...) \
  shim_check((p) != NULL, __FILE__, __LINE__, #p " != NULL", "" __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) \
  shim_check(strcmp((a), (b)) == 0, __FILE__, __LINE__, #a " equals " #b, "" __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) \
  shim_check(strcmp((a), (b)) != 0, __FILE__, __LINE__, #a " differs from " #b, "" __VA_ARGS__)
#define cr_assert_arr_eq(a, b, size, ...)                                                          \
  shim_check(memcmp((a), (b), (size)) == 0, __FILE__, __LINE__, #a "[0..size] == " #b "[0..size]", \
             "" __VA_ARGS__)
#define cr_assert_fail(...) shim_check(false, __FILE__, __LINE__, "failure", "" __VA_ARGS__)
/* Criterion's cr_expect* go on after a failure; here they stop the test as cr_assert* do (the suite
 * fails either way, and one failure is what a ThreadSanitizer run needs to report). */
#define cr_expect cr_assert
#define cr_expect_not cr_assert_not
#define cr_expect_eq cr_assert_eq
#define cr_expect_neq cr_assert_neq
#define cr_expect_lt cr_assert_lt
#define cr_expect_leq cr_assert_leq
#define cr_expect_gt cr_assert_gt
#define cr_expect_geq cr_assert_geq
#define cr_expect_null cr_assert_null
#define cr_expect_not_null cr_assert_not_null
#define cr_expect_str_eq cr_assert_str_eq
#define cr_expect_str_neq cr_assert_str_neq
#define cr_log_error(...) shim_log(__VA_ARGS__)
#define cr_log_info(...) shim_log(__VA_ARGS__)
#define cr_skip_test(...) shim_skip("" __VA_ARGS__)

#endif
