/*
 * microtvm-gen board port for QEMU's `microbit` machine (Nordic nRF51822, Cortex-M0): private
 * definitions shared by startup.c and platform.c. Not part of the runtime interface (that is
 * mtvg/platform.h).
 *
 * Register addresses and values from the nRF51 Series Reference Manual (UART, TIMER) and the
 * ARMv6-M Architecture Reference Manual (NVIC); semihosting numbers from the ARM semihosting
 * specification.
 */
#ifndef MTVG_NRF51_HW_H_
#define MTVG_NRF51_HW_H_

#include <stdint.h>

#define MTVG_REG32(addr) (*(volatile uint32_t*)(uintptr_t)(addr))

/* ---- UART0 -------------------------------------------------------------------------- */

#define MTVG_UART0_BASE 0x40002000u
#define MTVG_UART_TASKS_STARTRX MTVG_REG32(MTVG_UART0_BASE + 0x000u)
#define MTVG_UART_TASKS_STARTTX MTVG_REG32(MTVG_UART0_BASE + 0x008u)
#define MTVG_UART_EVENTS_RXDRDY MTVG_REG32(MTVG_UART0_BASE + 0x108u)
#define MTVG_UART_EVENTS_TXDRDY MTVG_REG32(MTVG_UART0_BASE + 0x11Cu)
#define MTVG_UART_INTENSET MTVG_REG32(MTVG_UART0_BASE + 0x304u)
#define MTVG_UART_ENABLE MTVG_REG32(MTVG_UART0_BASE + 0x500u)
#define MTVG_UART_PSELTXD MTVG_REG32(MTVG_UART0_BASE + 0x50Cu)
#define MTVG_UART_PSELRXD MTVG_REG32(MTVG_UART0_BASE + 0x514u)
#define MTVG_UART_RXD MTVG_REG32(MTVG_UART0_BASE + 0x518u)
#define MTVG_UART_TXD MTVG_REG32(MTVG_UART0_BASE + 0x51Cu)
#define MTVG_UART_BAUDRATE MTVG_REG32(MTVG_UART0_BASE + 0x524u)

#define MTVG_UART_ENABLE_ON 4u
#define MTVG_UART_BAUD_115200 0x01D7E000u
#define MTVG_UART_INTEN_RXDRDY (1u << 2)
#define MTVG_UART_PIN_TX 24u /* micro:bit edge connector USB bridge: P0.24 TX, P0.25 RX */
#define MTVG_UART_PIN_RX 25u
#define MTVG_UART0_IRQ 2u

/* ---- TIMER0 ------------------------------------------------------------------------- */

#define MTVG_TIMER0_BASE 0x40008000u
#define MTVG_TIMER_TASKS_START MTVG_REG32(MTVG_TIMER0_BASE + 0x000u)
#define MTVG_TIMER_TASKS_STOP MTVG_REG32(MTVG_TIMER0_BASE + 0x004u)
#define MTVG_TIMER_TASKS_CLEAR MTVG_REG32(MTVG_TIMER0_BASE + 0x00Cu)
#define MTVG_TIMER_TASKS_CAPTURE0 MTVG_REG32(MTVG_TIMER0_BASE + 0x040u)
#define MTVG_TIMER_MODE MTVG_REG32(MTVG_TIMER0_BASE + 0x504u)
#define MTVG_TIMER_BITMODE MTVG_REG32(MTVG_TIMER0_BASE + 0x508u)
#define MTVG_TIMER_PRESCALER MTVG_REG32(MTVG_TIMER0_BASE + 0x510u)
#define MTVG_TIMER_CC0 MTVG_REG32(MTVG_TIMER0_BASE + 0x540u)

#define MTVG_TRIGGER 1u
#define MTVG_TIMER_MODE_TIMER 0u
#define MTVG_TIMER_BITMODE_32 3u
#define MTVG_TIMER_HZ 16000000u /* 16 MHz base clock, prescaler 0 */

/* ---- NVIC and SCB (ARMv6-M) --------------------------------------------------------- */

#define MTVG_NVIC_ISER MTVG_REG32(0xE000E100u) /* set-enable, IRQ 0-31 */
#define MTVG_NVIC_ICPR MTVG_REG32(0xE000E280u) /* clear-pending, IRQ 0-31 */

#define MTVG_EXC_NMI 2u
#define MTVG_EXC_HARDFAULT 3u
#define MTVG_EXC_SVCALL 11u
#define MTVG_EXC_PENDSV 14u
#define MTVG_EXC_SYSTICK 15u
#define MTVG_EXC_FIRST_IRQ 16u
#define MTVG_NRF51_NUM_IRQS 32u

/* ---- ARM semihosting ---------------------------------------------------------------- */

#define MTVG_SH_SYS_WRITE0 0x04u
#define MTVG_SH_SYS_EXIT 0x18u
#define MTVG_SH_SYS_EXIT_EXTENDED 0x20u
#define MTVG_SH_ADP_STOPPED_APPLICATION_EXIT 0x20026u
#define MTVG_SH_ADP_STOPPED_RUNTIME_ERROR_UNKNOWN 0x20023u

/* One semihosting request (BKPT 0xAB, op in r0, parameter in r1); returns r0. */
static inline uint32_t mtvg_semihost(uint32_t op, uintptr_t arg) {
  register uint32_t r0 __asm__("r0") = op;
  register uintptr_t r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

static inline void mtvg_semihost_puts(const char* s) {
  (void)mtvg_semihost(MTVG_SH_SYS_WRITE0, (uintptr_t)s);
}

#endif /* MTVG_NRF51_HW_H_ */
