/*
 * microtvm-gen board ports: the STM32 USART/LPUART link (st_usart.h says what port.h gives).
 * Reception by interrupt into the cortex_m_board ring; transmission polled.
 */
#include <stddef.h>
#include <stdint.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"
#include "st_usart.h"

/* ---- GPIO (the same block on every STM32 series with AFRL/AFRH) ---------------------- */

#define GPIO_MODER MTVG_REG32(MTVG_ST_GPIO_BASE + 0x00u)
#define GPIO_OSPEEDR MTVG_REG32(MTVG_ST_GPIO_BASE + 0x08u)
#define GPIO_PUPDR MTVG_REG32(MTVG_ST_GPIO_BASE + 0x0Cu)
#define GPIO_AFR(pin) MTVG_REG32(MTVG_ST_GPIO_BASE + 0x20u + 4u * ((pin) / GPIO_AFR_PINS))
#define GPIO_AFR_PINS 8u /* pins per AFR register: AFRL 0-7, AFRH 8-15 */
#define GPIO_MODE_AF 2u
#define GPIO_SPEED_HIGH 2u
#define GPIO_PULL_UP 1u
#define GPIO_MODE_BITS 2u /* MODER, OSPEEDR, PUPDR: 2 bits a pin */
#define GPIO_AF_BITS 4u   /* AFRL, AFRH: 4 bits a pin */

/* ---- USART ------------------------------------------------------------------------- */

#define USART_CR1 MTVG_REG32(MTVG_ST_USART_BASE + 0x00u)
#define USART_CR3 MTVG_REG32(MTVG_ST_USART_BASE + 0x08u)
#define USART_BRR MTVG_REG32(MTVG_ST_USART_BASE + 0x0Cu)
#define USART_ISR MTVG_REG32(MTVG_ST_USART_BASE + 0x1Cu)
#define USART_ICR MTVG_REG32(MTVG_ST_USART_BASE + 0x20u)
#define USART_RDR MTVG_REG32(MTVG_ST_USART_BASE + 0x24u)
#define USART_TDR MTVG_REG32(MTVG_ST_USART_BASE + 0x28u)
#define USART_CR1_UE (1u << 0)
#define USART_CR1_RE (1u << 2)
#define USART_CR1_TE (1u << 3)
#define USART_CR1_RXNEIE (1u << 5)
#define USART_CR3_OVRDIS (1u << 12) /* an overrun drops bytes instead of stopping reception */
#define USART_ISR_ORE (1u << 3)
#define USART_ISR_RXNE (1u << 5)
#define USART_ISR_TC (1u << 6)
#define USART_ISR_TXE (1u << 7)
#define USART_DATA_MASK 0xFFu

static void set_field(volatile uint32_t* reg, uint32_t pin, uint32_t bits, uint32_t value) {
  uint32_t shift = pin * bits;
  uint32_t mask = ((1u << bits) - 1u) << shift;
  *reg = (*reg & ~mask) | (value << shift);
}

void mtvg_st_usart_init(void) {
  set_field(&GPIO_AFR(MTVG_ST_UART_TX_PIN), MTVG_ST_UART_TX_PIN % GPIO_AFR_PINS, GPIO_AF_BITS,
            MTVG_ST_UART_AF);
  set_field(&GPIO_AFR(MTVG_ST_UART_RX_PIN), MTVG_ST_UART_RX_PIN % GPIO_AFR_PINS, GPIO_AF_BITS,
            MTVG_ST_UART_AF);
  set_field(&GPIO_OSPEEDR, MTVG_ST_UART_TX_PIN, GPIO_MODE_BITS, GPIO_SPEED_HIGH);
  set_field(&GPIO_PUPDR, MTVG_ST_UART_RX_PIN, GPIO_MODE_BITS, GPIO_PULL_UP);
  set_field(&GPIO_MODER, MTVG_ST_UART_TX_PIN, GPIO_MODE_BITS, GPIO_MODE_AF);
  set_field(&GPIO_MODER, MTVG_ST_UART_RX_PIN, GPIO_MODE_BITS, GPIO_MODE_AF);

  USART_CR1 = 0u;
  USART_BRR = MTVG_ST_USART_BRR;
  USART_CR3 = USART_CR3_OVRDIS;
  USART_ICR = MTVG_ST_USART_ICR_ALL;
  USART_CR1 = USART_CR1_UE | USART_CR1_RE | USART_CR1_TE | USART_CR1_RXNEIE;
  mtvg_nvic_enable(MTVG_PORT_UART_IRQ);
}

void mtvg_port_uart_irq(void) {
  uint32_t isr = USART_ISR;
  if ((isr & USART_ISR_RXNE) != 0u) {
    mtvg_ring_push(&mtvg_cm_rx, (uint8_t)(USART_RDR & USART_DATA_MASK)); /* clears RXNE */
  }
  if ((isr & USART_ISR_ORE) != 0u) {
    USART_ICR = USART_ISR_ORE;
  }
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
