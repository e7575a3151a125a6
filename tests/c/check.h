/*
 * The C unit tests' one assertion: CHECK(cond) counts a pass or prints the failing line
 * (with the runtime's last error) and counts a failure. CHECK_REPORT() ends main().
 */
#ifndef MTVG_TESTS_CHECK_H_
#define MTVG_TESTS_CHECK_H_

#include <stdio.h>

#include "tvm/runtime/c_runtime_api.h"

static int passed;
static int failed;

#define CHECK(cond)                                                   \
  do {                                                                \
    if (cond) {                                                       \
      passed++;                                                       \
    } else {                                                          \
      failed++;                                                       \
      printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);          \
      printf("     last error: %s\n", TVMGetLastError());             \
    }                                                                 \
  } while (0)

/* Print the tally (tests/test_*_c.py look for "N passed, 0 failed") and give the status. */
#define CHECK_REPORT() (printf("%d passed, %d failed\n", passed, failed), failed == 0 ? 0 : 1)

#endif /* MTVG_TESTS_CHECK_H_ */
