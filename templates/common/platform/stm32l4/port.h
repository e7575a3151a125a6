/*
 * microtvm-gen board port stm32l4 (STM32L4R5ZI): the facts startup.c and platform.c share.
 * Register addresses and bit positions from ST's RM0432 (STM32L4+ reference manual).
 */
#ifndef MTVG_PORT_STM32L4_H_
#define MTVG_PORT_STM32L4_H_

#include <stdint.h>

#define MTVG_PORT_NUM_IRQS 95u /* external interrupt lines of the STM32L4R5/L4S5 */
#define MTVG_PORT_UART_IRQ 70u /* LPUART1 global interrupt */

void mtvg_port_uart_irq(void);
void mtvg_port_systick(void);

#endif /* MTVG_PORT_STM32L4_H_ */
