/*
 * microtvm-gen board port for QEMU's `microbit` machine (Nordic nRF51822, Cortex-M0): the
 * facts its files and the shared layers share. Not part of the runtime interface (that is
 * mtvg/platform.h); the System Control Space is in mtvg/port_cortex_m.h.
 *
 * Register addresses and values from the nRF51 Series Reference Manual (UART, TIMER).
 */
#ifndef MTVG_NRF51_PORT_H_
#define MTVG_NRF51_PORT_H_

#include <stdint.h>

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

/* ---- The vector table (cortex_m) ------------------------------------------------------ */
/*
 * Every slot but the first two is fatal: reset masks interrupts for good (PRIMASK), and the
 * UART's interrupt only ends WFI. ARMv6-M's Cortex-M0 has no VTOR (the table is at 0).
 */
#define MTVG_PORT_NUM_IRQS 32u
#define MTVG_PORT_FAULT_HANDLER mtvg_nrf51_fault_entry
#define MTVG_PORT_IRQ_HANDLER mtvg_nrf51_fault_entry
#define MTVG_PORT_HAS_VTOR 0
#define MTVG_PORT_MASK_IRQS 1

/* Bytes of the private stack the fault reporter switches to (fault_report.h). */
#ifndef MTVG_FAULT_STACK_SIZE
#define MTVG_FAULT_STACK_SIZE 256
#endif

/* Every fatal exception's entry (exceptions.c). */
void mtvg_nrf51_fault_entry(void) __attribute__((naked, noreturn));

#endif /* MTVG_NRF51_PORT_H_ */
