#include "test_util.h"

#include <string.h>

Test(status, null_is_ok) {
  cr_assert_eq(hcq_status_code(NULL), HCQ_OK);
  cr_assert_str_eq(hcq_status_message(NULL), "");
  hcq_status_destroy(NULL);
}

Test(status, message_and_code) {
  hcq_status_t s = hcq_status_make(HCQ_TIMEOUT, "signal %s: wanted %d", "kickoff", 7);
  cr_assert_eq(hcq_status_code(s), HCQ_TIMEOUT);
  cr_assert_str_eq(hcq_status_message(s), "signal kickoff: wanted 7");
  hcq_status_destroy(s);
}

Test(status, annotate_prefixes_and_keeps_code) {
  hcq_status_t s = hcq_status_annotate(hcq_status_make(HCQ_NOT_FOUND, "no %s", "x"), "item %d", 3);
  cr_assert_eq(hcq_status_code(s), HCQ_NOT_FOUND);
  cr_assert_str_eq(hcq_status_message(s), "item 3: no x");
  hcq_status_destroy(s);
  cr_assert_null(hcq_status_annotate(NULL, "nothing"));
}

Test(status, ok_code_is_never_a_failure) {
  hcq_status_t s = hcq_status_make(HCQ_OK, "odd");
  cr_assert_neq(hcq_status_code(s), HCQ_OK);
  hcq_status_destroy(s);
}

Test(status, code_names) {
  cr_assert_str_eq(hcq_status_code_name(HCQ_OK), "OK");
  cr_assert_str_eq(hcq_status_code_name(HCQ_COMPILE_ERROR), "COMPILE_ERROR");
  cr_assert_str_eq(hcq_status_code_name(HCQ_TIMEOUT), "TIMEOUT");
  cr_assert_str_eq(hcq_status_code_name((hcq_status_code_t)999), "UNKNOWN");
  for (int c = 0; c < HCQ_STATUS_CODE_COUNT; c++)
    cr_assert_str_neq(hcq_status_code_name((hcq_status_code_t)c), "UNKNOWN");
}

Test(status, long_messages_are_kept_whole) {
  char big[5000];
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  hcq_status_t s = hcq_status_make(HCQ_COMPILE_ERROR, "%s", big);
  cr_assert_eq(strlen(hcq_status_message(s)), sizeof(big) - 1);
  hcq_status_destroy(s);
}
