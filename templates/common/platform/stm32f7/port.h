/*
 * microtvm-gen board port stm32f7 (STM32F746ZG): the facts startup.c and platform.c share.
 * Register addresses and bit positions from ST's RM0385 (STM32F75xxx/74xxx reference manual).
 */
#ifndef MTVG_PORT_STM32F7_H_
#define MTVG_PORT_STM32F7_H_

#include <stdint.h>

#define MTVG_PORT_NUM_IRQS 98u /* external interrupt lines of the STM32F74x/75x */
#define MTVG_PORT_UART_IRQ 39u /* USART3 global interrupt */

void mtvg_port_uart_irq(void);
void mtvg_port_systick(void);

#endif /* MTVG_PORT_STM32F7_H_ */
