/*
 * microtvm-gen board port for QEMU's `microbit` machine (nRF51822, Cortex-M0): fatal
 * exceptions (the vector table and reset are the cortex_m layer's).
 *
 * Every exception but reset is fatal: reported on the semihosting console, then QEMU exits
 * with status MTVG_FAULT_EXIT_BASE + exception number (HardFault -> 131).
 */
#include <stddef.h>
#include <stdint.h>

#include "fault_report.h"
#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"
#include "semihost.h"

#define MTVG_FAULT_MSG_SIZE 128

void mtvg_nrf51_fault_report(const uint32_t* frame, uint32_t ipsr)
    __attribute__((noreturn, used));

/* r0 = the stacked frame (only MSP is used), r1 = IPSR; then the private stack. Thumb-1. */
void mtvg_nrf51_fault_entry(void) {
  __asm__ volatile(
      "mrs  r0, msp\n\t"
      "mrs  r1, ipsr\n\t"
      "ldr  r3, 1f\n\t"
      "mov  sp, r3\n\t"
      "ldr  r3, 2f\n\t"
      "bx   r3\n\t"
      ".balign 4\n"
      "1: .word " MTVG_FAULT_STACK_TOP_ASM "\n"
      "2: .word mtvg_nrf51_fault_report\n\t");
}

void mtvg_nrf51_fault_report(const uint32_t* frame, uint32_t ipsr) {
  static char text[MTVG_FAULT_MSG_SIZE];
  mtvg_fault_msg msg = {text, sizeof(text), 0u};
  uint32_t exc = ipsr & MTVG_IPSR_MASK;
  mtvg_fault_put(&msg, "mtvg: fatal exception (");
  mtvg_fault_put(&msg, mtvg_cm_exception_name(exc));
  mtvg_fault_put(&msg, ")");
  mtvg_fault_hex(&msg, " ipsr=", exc);
  if (mtvg_cm_frame_is_readable(frame)) {
    mtvg_fault_hex(&msg, " pc=", frame[MTVG_FRAME_PC]);
    mtvg_fault_hex(&msg, " lr=", frame[MTVG_FRAME_LR]);
    mtvg_fault_hex(&msg, " xpsr=", frame[MTVG_FRAME_XPSR]);
  } else {
    mtvg_fault_hex(&msg, " bad sp=", (uint32_t)(uintptr_t)frame);
  }
  mtvg_fault_put(&msg, "\n");
  mtvg_semihost_puts(msg.text);
  mtvg_platform_exit(MTVG_FAULT_EXIT_BASE + (int)exc);
}
