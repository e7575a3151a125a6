/*
 * microtvm-gen board port stm32l4 (STM32L4R5ZI, Cortex-M4F): the facts its files and the
 * shared layers share. Register addresses and bit positions from ST's RM0432 (STM32L4+
 * reference manual).
 */
#ifndef MTVG_PORT_STM32L4_H_
#define MTVG_PORT_STM32L4_H_

#include <stdint.h>

/* The CPU clock: the PLL at the chip's rated 120 MHz (the board file's clock_hz), or with
 * MTVG_RESET_CLOCK=1 the HSI16 this port switches to from the 4 MHz MSI of reset. */
#define MTVG_PLL_HZ 120000000u
#define MTVG_HSI_HZ 16000000u
#if defined(MTVG_RESET_CLOCK) && MTVG_RESET_CLOCK
#undef MTVG_CPU_HZ
#define MTVG_CPU_HZ MTVG_HSI_HZ
#endif
#ifndef MTVG_CPU_HZ
#define MTVG_CPU_HZ MTVG_PLL_HZ
#endif
#ifndef MTVG_UART_BAUD
#define MTVG_UART_BAUD 115200u
#endif
#define MTVG_UART_CLOCK_HZ 16000000u /* LPUART1SEL = HSI16 */

/* cortex_m: the vector table (SysTick extends the cycle counter: cortex_m_dwt). */
#define MTVG_PORT_NUM_IRQS 95u /* external interrupt lines of the STM32L4R5/L4S5 */
#define MTVG_PORT_UART_IRQ 70u /* LPUART1 global interrupt */
#define MTVG_PORT_SYSTICK_HANDLER mtvg_dwt_systick

/* st_usart: LPUART1 on PG7 (TX) / PG8 (RX), alternate function 8. */
#define MTVG_ST_USART_BASE 0x40008000u
#define MTVG_ST_USART_ICR_ALL 0x0012025Fu /* every clear flag LPUART's ICR has */
/* LPUART: BRR = 256 * f_ck / baud, rounded (valid range 0x300..0xFFFFF). */
#define MTVG_ST_USART_BRR \
  ((uint32_t)((256ull * MTVG_UART_CLOCK_HZ + MTVG_UART_BAUD / 2u) / MTVG_UART_BAUD))
#define MTVG_ST_GPIO_BASE 0x48001800u /* GPIOG */
#define MTVG_ST_UART_TX_PIN 7u
#define MTVG_ST_UART_RX_PIN 8u
#define MTVG_ST_UART_AF 8u

#endif /* MTVG_PORT_STM32L4_H_ */
