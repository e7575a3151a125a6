/*
 * microtvm-gen board port stm32f4 (STM32F405, as QEMU's netduinoplus2 machine models it):
 * the link of mtvg/platform.h.
 *
 *   link   USART1 (the "v1" block: SR, DR, BRR, CR1) on PA9 (TX) / PA10 (RX), alternate
 *          function 7, 8N1 at MTVG_UART_BAUD; QEMU connects it to -serial #0. Received
 *          bytes go from its interrupt into a ring (reading DR is what lowers the line).
 *   timer, exit, faults, stdio   the qemu_m layer (SysTick, semihosting) and the semihost
 *          layer.
 *
 * Register facts from ST's RM0090.
 */
#include <stddef.h>
#include <stdint.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"
#include "qemu_m.h"

/* ---- RCC and GPIOA ----------------------------------------------------------------------- */

#define RCC_BASE 0x40023800u
#define RCC_AHB1ENR MTVG_REG32(RCC_BASE + 0x30u)
#define RCC_APB2ENR MTVG_REG32(RCC_BASE + 0x44u)
#define RCC_AHB1ENR_GPIOAEN (1u << 0)
#define RCC_APB2ENR_USART1EN (1u << 4)

#define GPIOA_BASE 0x40020000u
#define GPIOA_MODER MTVG_REG32(GPIOA_BASE + 0x00u)
#define GPIOA_PUPDR MTVG_REG32(GPIOA_BASE + 0x0Cu)
#define GPIOA_AFRH MTVG_REG32(GPIOA_BASE + 0x24u)
#define UART_TX_PIN 9u
#define UART_RX_PIN 10u
#define GPIO_MODE_AF 2u
#define GPIO_PULL_UP 1u
#define GPIO_AF_USART1 7u

/* ---- USART1 --------------------------------------------------------------------------- */

#define USART1_BASE 0x40011000u
#define USART_SR MTVG_REG32(USART1_BASE + 0x00u)
#define USART_DR MTVG_REG32(USART1_BASE + 0x04u)
#define USART_BRR MTVG_REG32(USART1_BASE + 0x08u)
#define USART_CR1 MTVG_REG32(USART1_BASE + 0x0Cu)
#define USART_SR_ORE (1u << 3)
#define USART_SR_RXNE (1u << 5)
#define USART_SR_TC (1u << 6)
#define USART_SR_TXE (1u << 7)
#define USART_CR1_RE (1u << 2)
#define USART_CR1_TE (1u << 3)
#define USART_CR1_RXNEIE (1u << 5)
#define USART_CR1_UE (1u << 13)
#define USART_DATA_MASK 0xFFu
/* Oversampling by 16: BRR = f_ck / baud, rounded (mantissa and fraction in one value). */
#define USART_BRR_VALUE ((MTVG_UART_CLOCK_HZ + MTVG_UART_BAUD / 2u) / MTVG_UART_BAUD)

static mtvg_rx_ring rx;

static void set_field(volatile uint32_t* reg, uint32_t shift, uint32_t mask, uint32_t value) {
  *reg = (*reg & ~(mask << shift)) | (value << shift);
}

static void uart_init(void) {
  RCC_AHB1ENR |= RCC_AHB1ENR_GPIOAEN;
  RCC_APB2ENR |= RCC_APB2ENR_USART1EN;
  (void)RCC_APB2ENR; /* the clock is on after this read-back */
  set_field(&GPIOA_AFRH, (UART_TX_PIN - 8u) * 4u, 0xFu, GPIO_AF_USART1);
  set_field(&GPIOA_AFRH, (UART_RX_PIN - 8u) * 4u, 0xFu, GPIO_AF_USART1);
  set_field(&GPIOA_PUPDR, UART_RX_PIN * 2u, 3u, GPIO_PULL_UP);
  set_field(&GPIOA_MODER, UART_TX_PIN * 2u, 3u, GPIO_MODE_AF);
  set_field(&GPIOA_MODER, UART_RX_PIN * 2u, 3u, GPIO_MODE_AF);
  USART_CR1 = 0u;
  USART_BRR = USART_BRR_VALUE;
  USART_CR1 = USART_CR1_UE | USART_CR1_TE | USART_CR1_RE | USART_CR1_RXNEIE;
  mtvg_nvic_enable(MTVG_PORT_UART_IRQ_A);
}

/* Reading SR then DR takes the byte and clears RXNE and an overrun. */
void mtvg_port_uart_irq(void) {
  uint32_t sr = USART_SR;
  if ((sr & (USART_SR_RXNE | USART_SR_ORE)) != 0u) {
    uint8_t byte = (uint8_t)(USART_DR & USART_DATA_MASK);
    if ((sr & USART_SR_RXNE) != 0u) {
      mtvg_ring_push(&rx, byte);
    }
  }
}

void mtvg_platform_init(void) {
  uart_init();
  mtvg_systick_start();
}

/* Blocks until n bytes arrived (a UART has no end of input: never -1). */
int mtvg_link_read(uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    buf[i] = mtvg_ring_pop_wait(&rx);
  }
  return MTVG_OK;
}

int mtvg_link_write(const uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    while ((USART_SR & USART_SR_TXE) == 0u) {
    }
    USART_DR = buf[i];
  }
  return MTVG_OK;
}

/* Waits until the last byte has left the shift register (transmission complete). */
void mtvg_link_flush(void) {
  while ((USART_SR & USART_SR_TC) == 0u) {
  }
}
