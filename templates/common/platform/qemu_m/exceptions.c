/*
 * microtvm-gen Cortex-M ports for QEMU machines (the qemu_m layer): fatal exceptions and the
 * external interrupt dispatcher (the vector table and reset are the cortex_m layer's).
 *
 * - External interrupts go to one dispatcher: the UART's lines (MTVG_PORT_UART_IRQ_A and _B
 *   in the port's port.h) wake the link, any other is fatal.
 * - Every other exception except SysTick is fatal: it is reported on the semihosting
 *   console and QEMU is ended with status MTVG_FAULT_EXIT_BASE + exception number
 *   (HardFault -> 131), so a crashed program never hangs the host.
 *
 * Written for the ARMv7-M/ARMv8-M mainline exception model.
 */
#include <stddef.h>
#include <stdint.h>

#include "fault_report.h"
#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"
#include "qemu_m.h"
#include "semihost.h"

/* Size of the text buffer the fault report is formatted into. */
#define MTVG_FAULT_MSG_SIZE 192

void mtvg_qemu_m_fault_report(const uint32_t* frame, uint32_t ipsr, uint32_t exc_return)
    __attribute__((noreturn, used));

/*
 * Common entry of every fatal exception. Naked and stack-free until it has switched to
 * the private fault stack: r0 = the stacked exception frame (MSP or PSP, chosen by
 * EXC_RETURN bit 2), r1 = IPSR (exception number), r2 = EXC_RETURN.
 */
void mtvg_qemu_m_fault_entry(void) {
  __asm__ volatile(
      "tst   lr, #4\n\t"
      "ite   eq\n\t"
      "mrseq r0, msp\n\t"
      "mrsne r0, psp\n\t"
      "mrs   r1, ipsr\n\t"
      "mov   r2, lr\n\t"
      "movw  r3, #:lower16:" MTVG_FAULT_STACK_TOP_ASM "\n\t"
      "movt  r3, #:upper16:" MTVG_FAULT_STACK_TOP_ASM "\n\t"
      "msr   msp, r3\n\t"
      "b     mtvg_qemu_m_fault_report\n\t");
}

/*
 * External interrupts: the UART's lines are the link's wake-up (see mtvg_link_read); any other
 * line was never enabled, so it is reported as fatal like an unexpected exception.
 */
void mtvg_qemu_m_irq(void) {
  uint32_t ipsr = mtvg_cm_ipsr();
  uint32_t irq = (ipsr & MTVG_IPSR_MASK) - MTVG_EXC_FIRST_IRQ;
  if (irq == MTVG_PORT_UART_IRQ_A || irq == MTVG_PORT_UART_IRQ_B) {
    mtvg_port_uart_irq();
    return;
  }
  mtvg_qemu_m_fault_report(NULL, ipsr, 0u);
}

void mtvg_qemu_m_fault_report(const uint32_t* frame, uint32_t ipsr, uint32_t exc_return) {
  static char text[MTVG_FAULT_MSG_SIZE];
  mtvg_fault_msg msg = {text, sizeof(text), 0u};
  uint32_t exc = ipsr & MTVG_IPSR_MASK;

  mtvg_fault_put(&msg, "mtvg: fatal exception ");
  mtvg_fault_dec(&msg, exc);
  mtvg_fault_put(&msg, " (");
  mtvg_fault_put(&msg, mtvg_cm_exception_name(exc));
  mtvg_fault_put(&msg, ")");
  if (frame == NULL) {
    /* an unexpected interrupt, reported by the dispatcher: no frame to show */
  } else if (mtvg_cm_frame_is_readable(frame)) {
    mtvg_fault_hex(&msg, " pc=", frame[MTVG_FRAME_PC]);
    mtvg_fault_hex(&msg, " lr=", frame[MTVG_FRAME_LR]);
    mtvg_fault_hex(&msg, " xpsr=", frame[MTVG_FRAME_XPSR]);
  } else {
    mtvg_fault_hex(&msg, " bad sp=", (uint32_t)(uintptr_t)frame);
  }
  mtvg_fault_hex(&msg, " exc_return=", exc_return);
  mtvg_fault_hex(&msg, " cfsr=", MTVG_SCB_CFSR);
  mtvg_fault_hex(&msg, " hfsr=", MTVG_SCB_HFSR);
  mtvg_fault_hex(&msg, " mmfar=", MTVG_SCB_MMFAR);
  mtvg_fault_hex(&msg, " bfar=", MTVG_SCB_BFAR);
  mtvg_fault_put(&msg, "\n");
  mtvg_semihost_puts(msg.text);

  mtvg_platform_exit(MTVG_FAULT_EXIT_BASE + (int)exc);
}
