/*
 * microtvm-gen board port stm32f4 (STM32F405, Cortex-M4F, as QEMU's netduinoplus2 machine
 * models it): the facts its files and the shared layers share. Register addresses and bits
 * from ST's RM0090 (STM32F405/415, 407/417, 427/437, 429/439 reference manual).
 */
#ifndef MTVG_PORT_STM32F4_H_
#define MTVG_PORT_STM32F4_H_

#include <stdint.h>

/* The clock SysTick counts: QEMU's netduinoplus2 runs the core at 168 MHz (the board file
 * passes it). The chip itself leaves reset on its 16 MHz HSI; this port sets no PLL. */
#ifndef MTVG_CPU_HZ
#define MTVG_CPU_HZ 168000000u
#endif
#ifndef MTVG_UART_BAUD
#define MTVG_UART_BAUD 115200u
#endif
/* USART1's clock: PCLK2, which is the 16 MHz HSI after reset (QEMU ignores BRR). */
#define MTVG_UART_CLOCK_HZ 16000000u

/* cortex_m: the vector table; qemu_m: its handlers. */
#define MTVG_PORT_NUM_IRQS 82u /* external interrupt lines of the STM32F405 */
#define MTVG_PORT_FAULT_HANDLER mtvg_qemu_m_fault_entry
#define MTVG_PORT_SYSTICK_HANDLER SysTick_Handler
#define MTVG_PORT_IRQ_HANDLER mtvg_qemu_m_irq
#define MTVG_PORT_UART_IRQ_A 37u /* USART1 global interrupt */
#define MTVG_PORT_UART_IRQ_B 37u

/* fault_report: bytes of the private stack the fault reporter switches to. */
#ifndef MTVG_FAULT_STACK_SIZE
#define MTVG_FAULT_STACK_SIZE 512
#endif

#endif /* MTVG_PORT_STM32F4_H_ */
