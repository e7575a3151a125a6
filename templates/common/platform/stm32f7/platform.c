/*
 * microtvm-gen board port stm32f7 (STM32F746ZG on a NUCLEO-F746ZG): mtvg/platform.h.
 *
 *   clock  the reset default: HSI, 16 MHz, no PLL (SYSCLK = HCLK = PCLK1 = 16 MHz; flash
 *          needs no wait state at this speed); caches off.
 *   link   USART3 on PD8 (TX) / PD9 (RX), alternate function 7: the ST-LINK virtual COM
 *          port of the Nucleo-144. 8N1 at MTVG_UART_BAUD; reception by interrupt into a ring.
 *   timer  DWT CYCCNT (CPU cycles) extended to 64 bits; SysTick wraps keep it up to date.
 *   exit   flush, store the status in mtvg_exit_status, stay in a loop.
 *
 * Register facts from ST's RM0385 (STM32F75xxx and STM32F74xxx reference manual).
 */
#include <stddef.h>
#include <stdint.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"

#ifndef MTVG_CPU_HZ
#define MTVG_CPU_HZ 16000000u /* HSI after reset */
#endif
#ifndef MTVG_UART_BAUD
#define MTVG_UART_BAUD 115200u
#endif
/* USART3's kernel clock: PCLK1 (RCC_DCKCFGR2.USART3SEL = 00 after reset), APB1 prescaler 1. */
#define MTVG_UART_CLOCK_HZ 16000000u
/* The port leaves the clock tree at its reset state; another CPU clock needs RCC set-up here. */
typedef char mtvg_cpu_hz_check[(MTVG_CPU_HZ == MTVG_UART_CLOCK_HZ) ? 1 : -1];

/* ---- RCC, GPIOD, USART3 -------------------------------------------------------------- */

#define RCC_BASE 0x40023800u
#define RCC_AHB1ENR MTVG_REG32(RCC_BASE + 0x30u)
#define RCC_APB1ENR MTVG_REG32(RCC_BASE + 0x40u)
#define RCC_AHB1ENR_GPIODEN (1u << 3)
#define RCC_APB1ENR_USART3EN (1u << 18)

#define GPIOD_BASE 0x40020C00u
#define GPIOD_MODER MTVG_REG32(GPIOD_BASE + 0x00u)
#define GPIOD_OSPEEDR MTVG_REG32(GPIOD_BASE + 0x08u)
#define GPIOD_PUPDR MTVG_REG32(GPIOD_BASE + 0x0Cu)
#define GPIOD_AFRH MTVG_REG32(GPIOD_BASE + 0x24u)
#define UART_TX_PIN 8u
#define UART_RX_PIN 9u
#define GPIO_MODE_AF 2u
#define GPIO_SPEED_HIGH 2u
#define GPIO_PULL_UP 1u
#define GPIO_AF_USART3 7u

#define USART3_BASE 0x40004800u
#define USART_CR1 MTVG_REG32(USART3_BASE + 0x00u)
#define USART_CR3 MTVG_REG32(USART3_BASE + 0x08u)
#define USART_BRR MTVG_REG32(USART3_BASE + 0x0Cu)
#define USART_ISR MTVG_REG32(USART3_BASE + 0x1Cu)
#define USART_ICR MTVG_REG32(USART3_BASE + 0x20u)
#define USART_RDR MTVG_REG32(USART3_BASE + 0x24u)
#define USART_TDR MTVG_REG32(USART3_BASE + 0x28u)
#define USART_CR1_UE (1u << 0)
#define USART_CR1_RE (1u << 2)
#define USART_CR1_TE (1u << 3)
#define USART_CR1_RXNEIE (1u << 5)
#define USART_CR3_OVRDIS (1u << 12) /* an overrun drops bytes instead of stopping reception */
#define USART_ISR_ORE (1u << 3)
#define USART_ISR_RXNE (1u << 5)
#define USART_ISR_TC (1u << 6)
#define USART_ISR_TXE (1u << 7)
#define USART_ICR_ALL 0x00121B5Fu /* every clear flag of ICR */
#define USART_DATA_MASK 0xFFu

/* Oversampling by 16: BRR = f_ck / baud, rounded. */
#define USART_BRR_VALUE ((MTVG_UART_CLOCK_HZ + MTVG_UART_BAUD / 2u) / MTVG_UART_BAUD)

volatile int32_t mtvg_exit_status;
static mtvg_rx_ring s_rx;
static mtvg_cycles s_cycles;

static void set_field(volatile uint32_t* reg, uint32_t pin, uint32_t bits, uint32_t value) {
  uint32_t shift = pin * bits;
  uint32_t mask = ((1u << bits) - 1u) << shift;
  *reg = (*reg & ~mask) | (value << shift);
}

static void uart_init(void) {
  RCC_AHB1ENR |= RCC_AHB1ENR_GPIODEN;
  RCC_APB1ENR |= RCC_APB1ENR_USART3EN;
  (void)RCC_APB1ENR; /* the clock is on after this read-back */

  set_field(&GPIOD_AFRH, UART_TX_PIN - 8u, 4u, GPIO_AF_USART3);
  set_field(&GPIOD_AFRH, UART_RX_PIN - 8u, 4u, GPIO_AF_USART3);
  set_field(&GPIOD_OSPEEDR, UART_TX_PIN, 2u, GPIO_SPEED_HIGH);
  set_field(&GPIOD_PUPDR, UART_RX_PIN, 2u, GPIO_PULL_UP);
  set_field(&GPIOD_MODER, UART_TX_PIN, 2u, GPIO_MODE_AF);
  set_field(&GPIOD_MODER, UART_RX_PIN, 2u, GPIO_MODE_AF);

  USART_CR1 = 0u;
  USART_BRR = USART_BRR_VALUE;
  USART_CR3 = USART_CR3_OVRDIS;
  USART_ICR = USART_ICR_ALL;
  USART_CR1 = USART_CR1_UE | USART_CR1_RE | USART_CR1_TE | USART_CR1_RXNEIE;
  mtvg_nvic_enable(MTVG_PORT_UART_IRQ);
}

void mtvg_port_uart_irq(void) {
  uint32_t isr = USART_ISR;
  if ((isr & USART_ISR_RXNE) != 0u) {
    mtvg_ring_push(&s_rx, (uint8_t)(USART_RDR & USART_DATA_MASK)); /* reading clears RXNE */
  }
  if ((isr & USART_ISR_ORE) != 0u) {
    USART_ICR = USART_ISR_ORE;
  }
}

void mtvg_port_systick(void) { (void)mtvg_cycles_read(&s_cycles); }

void mtvg_platform_init(void) {
  uart_init();
  mtvg_cycles_start(&s_cycles);
}

int mtvg_link_read(uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    buf[i] = mtvg_ring_pop_wait(&s_rx);
  }
  return MTVG_OK;
}

int mtvg_link_write(const uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    while ((USART_ISR & USART_ISR_TXE) == 0u) {
    }
    USART_TDR = buf[i];
  }
  return MTVG_OK;
}

/* Waits until the last byte has left the shift register (transmission complete). */
void mtvg_link_flush(void) {
  while ((USART_ISR & USART_ISR_TC) == 0u) {
  }
}

uint64_t mtvg_timer_ticks(void) { return mtvg_cycles_read(&s_cycles); }

void mtvg_timer_align(void) {}

uint64_t mtvg_timer_hz(void) { return (uint64_t)MTVG_CPU_HZ; }

void mtvg_platform_exit(int status) {
  mtvg_link_flush();
  mtvg_exit_status = status;
  mtvg_cm_park();
}
