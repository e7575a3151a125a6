/*
 * microtvm-gen board ports under QEMU: the fault stack and the fault report's text
 * (fault_report.h).
 */
#include "fault_report.h"

#include <stddef.h>
#include <stdint.h>

#include "port.h"

#define MTVG_HEX_DIGITS 8u      /* of a 32-bit value */
#define MTVG_DEC_DIGITS 10u     /* of the largest 32-bit value */
#define MTVG_HEX_PREFIX_BYTES 2u /* "0x" */

/* Referenced by name from the port's fault entry (assembly): kept though C never reads it. */
uint8_t mtvg_fault_stack[MTVG_FAULT_STACK_SIZE]
    __attribute__((aligned(MTVG_FAULT_STACK_ALIGN), used));

/* Called, not inlined, by the other two: a report is cold code, its size is what counts. */
__attribute__((noinline)) void mtvg_fault_put(mtvg_fault_msg* m, const char* s) {
  while (*s != '\0' && m->len + 1u < m->size) {
    m->text[m->len++] = *s++;
  }
  m->text[m->len] = '\0';
}

void mtvg_fault_hex(mtvg_fault_msg* m, const char* label, uint32_t value) {
  static const char kDigits[] = "0123456789abcdef";
  char buf[MTVG_HEX_PREFIX_BYTES + MTVG_HEX_DIGITS + 1u];
  buf[0] = '0';
  buf[1] = 'x';
  for (uint32_t i = 0u; i < MTVG_HEX_DIGITS; ++i) {
    buf[MTVG_HEX_PREFIX_BYTES + i] = kDigits[(value >> (4u * (MTVG_HEX_DIGITS - 1u - i))) & 0xFu];
  }
  buf[MTVG_HEX_PREFIX_BYTES + MTVG_HEX_DIGITS] = '\0';
  mtvg_fault_put(m, label);
  mtvg_fault_put(m, buf);
}

void mtvg_fault_dec(mtvg_fault_msg* m, uint32_t value) {
  char buf[MTVG_DEC_DIGITS + 1u];
  size_t pos = MTVG_DEC_DIGITS;
  buf[pos] = '\0';
  do {
    buf[--pos] = (char)('0' + value % 10u);
    value /= 10u;
  } while (value != 0u && pos > 0u);
  mtvg_fault_put(m, &buf[pos]);
}
