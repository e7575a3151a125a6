/* microtvm-gen runtime: driver failure reporting for accelerator kernels (mtvg/accel.h). */
#include "mtvg/accel.h"

#include <stddef.h>

static int32_t failed_status;
static char message[MTVG_ACCEL_MESSAGE_BYTES];
static int have_message;

/* Append src to message at *at, always leaving a terminating NUL. */
static void append(size_t* at, const char* src) {
  while (src != NULL && *src != '\0' && *at + 1 < sizeof(message)) {
    message[(*at)++] = *src++;
  }
  message[*at] = '\0';
}

static void append_int(size_t* at, int32_t value) {
  char digits[12];
  size_t n = 0;
  uint32_t magnitude = value < 0 ? 0u - (uint32_t)value : (uint32_t)value;
  do {
    digits[n++] = (char)('0' + magnitude % 10u);
    magnitude /= 10u;
  } while (magnitude != 0u && n < sizeof(digits) - 1);
  if (value < 0) {
    append(at, "-");
  }
  while (n > 0) {
    char one[2] = {digits[--n], '\0'};
    append(at, one);
  }
}

int32_t mtvg_accel_check(int32_t status) {
  if (status == 0 || failed_status != 0) {
    return status;
  }
  failed_status = status;
  if (!have_message) {
    size_t at = 0;
    append(&at, "an accelerator driver failed with status ");
    append_int(&at, status);
    have_message = 1;
  }
  return status;
}

void mtvg_accel_error(const char* accelerator, const char* text) {
  if (failed_status != 0 || have_message) {
    return; /* the first failure's reason is the one reported */
  }
  size_t at = 0;
  append(&at, accelerator);
  append(&at, ": ");
  append(&at, text);
  have_message = 1;
}

int32_t mtvg_accel_failed(void) { return failed_status != 0; }

const char* mtvg_accel_message(void) { return failed_status != 0 ? message : ""; }

void mtvg_accel_clear(void) {
  failed_status = 0;
  have_message = 0;
  message[0] = '\0';
}
