/*
 * microtvm-gen board port stm32f7 (STM32F746ZG, Cortex-M7): the facts its files and the
 * shared layers share. Register addresses and bit positions from ST's RM0385
 * (STM32F75xxx/74xxx reference manual).
 */
#ifndef MTVG_PORT_STM32F7_H_
#define MTVG_PORT_STM32F7_H_

#include <stdint.h>

/* The CPU clock: the PLL at the chip's rated 216 MHz (the board file's clock_hz), or with
 * MTVG_RESET_CLOCK=1 the HSI of reset, 16 MHz. */
#define MTVG_PLL_HZ 216000000u
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
/* USART3's kernel clock: the HSI (platform.c sets RCC_DCKCFGR2.USART3SEL), whatever the CPU
 * clock. */
#define MTVG_UART_CLOCK_HZ MTVG_HSI_HZ

/* cortex_m: the vector table (SysTick extends the cycle counter: cortex_m_dwt). */
#define MTVG_PORT_NUM_IRQS 98u /* external interrupt lines of the STM32F74x/75x */
#define MTVG_PORT_UART_IRQ 39u /* USART3 global interrupt */
#define MTVG_PORT_SYSTICK_HANDLER mtvg_dwt_systick

/* st_usart: USART3 on PD8 (TX) / PD9 (RX), alternate function 7. */
#define MTVG_ST_USART_BASE 0x40004800u
#define MTVG_ST_USART_ICR_ALL 0x00121B5Fu /* every clear flag of ICR */
/* Oversampling by 16: BRR = f_ck / baud, rounded. */
#define MTVG_ST_USART_BRR ((MTVG_UART_CLOCK_HZ + MTVG_UART_BAUD / 2u) / MTVG_UART_BAUD)
#define MTVG_ST_GPIO_BASE 0x40020C00u /* GPIOD */
#define MTVG_ST_UART_TX_PIN 8u
#define MTVG_ST_UART_RX_PIN 9u
#define MTVG_ST_UART_AF 7u

#endif /* MTVG_PORT_STM32F7_H_ */
