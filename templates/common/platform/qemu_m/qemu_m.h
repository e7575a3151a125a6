/*
 * microtvm-gen Cortex-M ports for QEMU machines: the qemu_m layer, for the ports whose
 * port.toml names it (mps2, stm32f4). Together with the cortex_m, semihost and fault_report
 * layers it gives a port all of mtvg/platform.h but the link:
 *
 *   systick_timer.c    the timer: SysTick on MTVG_CPU_HZ, extended to 64 bits, aligned to
 *                      the instruction under -icount (mtvg_timer_*, SysTick_Handler)
 *   exceptions.c       every fatal exception reported on the semihosting console, QEMU
 *                      ended with MTVG_FAULT_EXIT_BASE + its number; one dispatcher for
 *                      the external interrupts
 *   newlib_semihost.c  newlib's system calls: stdio on the semihosting console, _sbrk
 *   linker.ld          FLASH and RAM from MTVG_FLASH_ORIGIN/_SIZE, MTVG_RAM_ORIGIN/_SIZE
 *
 * The port's port.h gives MTVG_CPU_HZ, MTVG_PORT_UART_IRQ_A and _B (the UART's interrupt
 * lines: the same number twice when it has one), and the cortex_m table's entries:
 *   MTVG_PORT_FAULT_HANDLER mtvg_qemu_m_fault_entry, MTVG_PORT_SYSTICK_HANDLER
 *   SysTick_Handler, MTVG_PORT_IRQ_HANDLER mtvg_qemu_m_irq.
 * The port's platform.c gives the link (mtvg_link_read, _write, _flush), mtvg_port_uart_irq
 * (acknowledges the UART's interrupt, which only wakes WFI) and mtvg_platform_init, which
 * calls mtvg_systick_start().
 */
#ifndef MTVG_QEMU_M_H_
#define MTVG_QEMU_M_H_

/* Start SysTick: the timer counts from here (systick_timer.c). */
void mtvg_systick_start(void);

/* SysTick's exception: one more wrap of the 24-bit counter (systick_timer.c). */
void SysTick_Handler(void);

/* Every fatal exception's entry (exceptions.c). */
void mtvg_qemu_m_fault_entry(void) __attribute__((naked, noreturn));

/* Every external interrupt's entry (exceptions.c). */
void mtvg_qemu_m_irq(void);

/* The port's UART interrupt (its platform.c), called by the dispatcher. */
void mtvg_port_uart_irq(void);

#endif /* MTVG_QEMU_M_H_ */
