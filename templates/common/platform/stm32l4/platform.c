/*
 * microtvm-gen board port stm32l4 (STM32L4R5ZI on a NUCLEO-L4R5ZI): mtvg/platform.h.
 *
 *   clock  HSI16: SYSCLK = HCLK = PCLK = 16 MHz, switched from the 4 MHz MSI of reset so
 *          that the UART's clock is the factory-trimmed oscillator; no PLL. At 16 MHz in
 *          voltage range 1 (the reset default) flash needs no wait state.
 *   link   LPUART1 on PG7 (TX) / PG8 (RX), alternate function 8: the ST-LINK virtual COM
 *          port of the Nucleo-144. Port G is supplied by VDDIO2, which must be declared
 *          valid (PWR_CR2.IOSV) before the pins work. Kernel clock HSI16; reception by
 *          interrupt into a ring.
 *   timer  DWT CYCCNT (CPU cycles) extended to 64 bits; SysTick wraps keep it up to date.
 *   exit   flush, store the status in mtvg_exit_status, stay in a loop.
 *
 * Register facts from ST's RM0432 (STM32L4+ Series reference manual).
 */
#include <stddef.h>
#include <stdint.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"

#ifndef MTVG_CPU_HZ
#define MTVG_CPU_HZ 16000000u /* HSI16 */
#endif
#ifndef MTVG_UART_BAUD
#define MTVG_UART_BAUD 115200u
#endif
#define MTVG_UART_CLOCK_HZ 16000000u /* LPUART1SEL = HSI16 */
/* SYSCLK is HSI16 here; another CPU clock needs the PLL (and flash wait states) set up. */
typedef char mtvg_cpu_hz_check[(MTVG_CPU_HZ == 16000000u) ? 1 : -1];

/* ---- RCC, PWR, GPIOG, LPUART1 -------------------------------------------------------- */

#define RCC_BASE 0x40021000u
#define RCC_CR MTVG_REG32(RCC_BASE + 0x00u)
#define RCC_CFGR MTVG_REG32(RCC_BASE + 0x08u)
#define RCC_AHB2ENR MTVG_REG32(RCC_BASE + 0x4Cu)
#define RCC_APB1ENR1 MTVG_REG32(RCC_BASE + 0x58u)
#define RCC_APB1ENR2 MTVG_REG32(RCC_BASE + 0x5Cu)
#define RCC_CCIPR MTVG_REG32(RCC_BASE + 0x88u)
#define RCC_CR_HSION (1u << 8)
#define RCC_CR_HSIRDY (1u << 10)
#define RCC_CFGR_SW_MASK 0x3u
#define RCC_CFGR_SW_HSI16 0x1u
#define RCC_CFGR_SWS_SHIFT 2u
#define RCC_AHB2ENR_GPIOGEN (1u << 6)
#define RCC_APB1ENR1_PWREN (1u << 28)
#define RCC_APB1ENR2_LPUART1EN (1u << 0)
#define RCC_CCIPR_LPUART1SEL_SHIFT 10u
#define RCC_CCIPR_LPUART1SEL_MASK (0x3u << RCC_CCIPR_LPUART1SEL_SHIFT)
#define RCC_CCIPR_LPUART1SEL_HSI16 (0x2u << RCC_CCIPR_LPUART1SEL_SHIFT)

#define PWR_BASE 0x40007000u
#define PWR_CR2 MTVG_REG32(PWR_BASE + 0x04u)
#define PWR_CR2_IOSV (1u << 9) /* VDDIO2 valid: port G usable */

#define GPIOG_BASE 0x48001800u
#define GPIOG_MODER MTVG_REG32(GPIOG_BASE + 0x00u)
#define GPIOG_OSPEEDR MTVG_REG32(GPIOG_BASE + 0x08u)
#define GPIOG_PUPDR MTVG_REG32(GPIOG_BASE + 0x0Cu)
#define GPIOG_AFRL MTVG_REG32(GPIOG_BASE + 0x20u)
#define GPIOG_AFRH MTVG_REG32(GPIOG_BASE + 0x24u)
#define UART_TX_PIN 7u
#define UART_RX_PIN 8u
#define GPIO_MODE_AF 2u
#define GPIO_SPEED_HIGH 2u
#define GPIO_PULL_UP 1u
#define GPIO_AF_LPUART1 8u

#define LPUART1_BASE 0x40008000u
#define USART_CR1 MTVG_REG32(LPUART1_BASE + 0x00u)
#define USART_CR3 MTVG_REG32(LPUART1_BASE + 0x08u)
#define USART_BRR MTVG_REG32(LPUART1_BASE + 0x0Cu)
#define USART_ISR MTVG_REG32(LPUART1_BASE + 0x1Cu)
#define USART_ICR MTVG_REG32(LPUART1_BASE + 0x20u)
#define USART_RDR MTVG_REG32(LPUART1_BASE + 0x24u)
#define USART_TDR MTVG_REG32(LPUART1_BASE + 0x28u)
#define USART_CR1_UE (1u << 0)
#define USART_CR1_RE (1u << 2)
#define USART_CR1_TE (1u << 3)
#define USART_CR1_RXNEIE (1u << 5)
#define USART_CR3_OVRDIS (1u << 12) /* an overrun drops bytes instead of stopping reception */
#define USART_ISR_ORE (1u << 3)
#define USART_ISR_RXNE (1u << 5)
#define USART_ISR_TC (1u << 6)
#define USART_ISR_TXE (1u << 7)
#define USART_ICR_ALL 0x0012025Fu /* every clear flag LPUART's ICR has */
#define USART_DATA_MASK 0xFFu

/* LPUART: BRR = 256 * f_ck / baud, rounded (valid range 0x300..0xFFFFF). */
#define LPUART_BRR_VALUE \
  ((uint32_t)((256ull * MTVG_UART_CLOCK_HZ + MTVG_UART_BAUD / 2u) / MTVG_UART_BAUD))
typedef char lpuart_brr_range_check[(LPUART_BRR_VALUE >= 0x300u && LPUART_BRR_VALUE <= 0xFFFFFu)
                                        ? 1
                                        : -1];

volatile int32_t mtvg_exit_status;
static mtvg_rx_ring s_rx;
static mtvg_cycles s_cycles;

static void set_field(volatile uint32_t* reg, uint32_t pin, uint32_t bits, uint32_t value) {
  uint32_t shift = pin * bits;
  uint32_t mask = ((1u << bits) - 1u) << shift;
  *reg = (*reg & ~mask) | (value << shift);
}

static void clock_init(void) {
  RCC_CR |= RCC_CR_HSION;
  while ((RCC_CR & RCC_CR_HSIRDY) == 0u) {
  }
  RCC_CFGR = (RCC_CFGR & ~RCC_CFGR_SW_MASK) | RCC_CFGR_SW_HSI16;
  while (((RCC_CFGR >> RCC_CFGR_SWS_SHIFT) & RCC_CFGR_SW_MASK) != RCC_CFGR_SW_HSI16) {
  }
}

static void uart_init(void) {
  RCC_APB1ENR1 |= RCC_APB1ENR1_PWREN;
  (void)RCC_APB1ENR1;
  PWR_CR2 |= PWR_CR2_IOSV;
  RCC_AHB2ENR |= RCC_AHB2ENR_GPIOGEN;
  RCC_CCIPR = (RCC_CCIPR & ~RCC_CCIPR_LPUART1SEL_MASK) | RCC_CCIPR_LPUART1SEL_HSI16;
  RCC_APB1ENR2 |= RCC_APB1ENR2_LPUART1EN;
  (void)RCC_APB1ENR2;

  set_field(&GPIOG_AFRL, UART_TX_PIN, 4u, GPIO_AF_LPUART1);
  set_field(&GPIOG_AFRH, UART_RX_PIN - 8u, 4u, GPIO_AF_LPUART1);
  set_field(&GPIOG_OSPEEDR, UART_TX_PIN, 2u, GPIO_SPEED_HIGH);
  set_field(&GPIOG_PUPDR, UART_RX_PIN, 2u, GPIO_PULL_UP);
  set_field(&GPIOG_MODER, UART_TX_PIN, 2u, GPIO_MODE_AF);
  set_field(&GPIOG_MODER, UART_RX_PIN, 2u, GPIO_MODE_AF);

  USART_CR1 = 0u;
  USART_BRR = LPUART_BRR_VALUE;
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
  clock_init();
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
