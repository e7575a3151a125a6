/*
 * microtvm-gen board port nrf52 (nRF52840 on an nRF52840 DK): mtvg/platform.h.
 *
 *   clock  the CPU runs at its fixed 64 MHz. The 64 MHz crystal-derived HFCLK (HFXO, from
 *          the DK's 32 MHz crystal) is started so that UARTE0's baud rate is accurate.
 *   link   UARTE0 on P0.06 (TXD) / P0.08 (RXD), 8N1 without flow control: the virtual COM
 *          port of the DK's J-Link OB. UARTE moves bytes by EasyDMA (RAM buffers only):
 *          reception is one-byte transfers chained by the ENDRX->STARTRX shortcut into two
 *          alternating buffers; the interrupt moves each byte into a ring (cortex_m_board).
 *   timer  DWT CYCCNT (CPU cycles) extended to 64 bits; SysTick wraps keep it up to date
 *          (cortex_m_dwt).
 *   exit   store the status in mtvg_exit_status, stay in a loop (cortex_m_board).
 *
 * Register facts from Nordic's nRF52840 Product Specification (v1.x): CLOCK, GPIO, UARTE.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dwt_timer.h"
#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"

/* The nRF52840's CPU clock is fixed. */
typedef char mtvg_cpu_hz_check[(MTVG_CPU_HZ == 64000000u) ? 1 : -1];

/* Bytes copied to RAM per EasyDMA transmission (EasyDMA cannot read flash). */
#define MTVG_TX_CHUNK 64u

/* ---- CLOCK, GPIO P0, UARTE0 ---------------------------------------------------------- */

#define CLOCK_BASE 0x40000000u
#define CLOCK_TASKS_HFCLKSTART MTVG_REG32(CLOCK_BASE + 0x000u)
#define CLOCK_EVENTS_HFCLKSTARTED MTVG_REG32(CLOCK_BASE + 0x100u)

#define P0_BASE 0x50000000u
#define P0_OUTSET MTVG_REG32(P0_BASE + 0x508u)
#define P0_DIRSET MTVG_REG32(P0_BASE + 0x518u)
#define P0_PIN_CNF(n) MTVG_REG32(P0_BASE + 0x700u + 4u * (n))
#define PIN_CNF_INPUT_CONNECTED 0x0u /* DIR input, input buffer connected, no pull */
#define UART_TX_PIN 6u
#define UART_RX_PIN 8u

#define UARTE0_BASE 0x40002000u
#define UARTE_TASKS_STARTRX MTVG_REG32(UARTE0_BASE + 0x000u)
#define UARTE_TASKS_STARTTX MTVG_REG32(UARTE0_BASE + 0x008u)
#define UARTE_EVENTS_ENDRX MTVG_REG32(UARTE0_BASE + 0x110u)
#define UARTE_EVENTS_ENDTX MTVG_REG32(UARTE0_BASE + 0x120u)
#define UARTE_EVENTS_ERROR MTVG_REG32(UARTE0_BASE + 0x124u)
#define UARTE_EVENTS_RXSTARTED MTVG_REG32(UARTE0_BASE + 0x14Cu)
#define UARTE_SHORTS MTVG_REG32(UARTE0_BASE + 0x200u)
#define UARTE_INTENSET MTVG_REG32(UARTE0_BASE + 0x304u)
#define UARTE_ERRORSRC MTVG_REG32(UARTE0_BASE + 0x480u)
#define UARTE_ENABLE MTVG_REG32(UARTE0_BASE + 0x500u)
#define UARTE_PSEL_RTS MTVG_REG32(UARTE0_BASE + 0x508u)
#define UARTE_PSEL_TXD MTVG_REG32(UARTE0_BASE + 0x50Cu)
#define UARTE_PSEL_CTS MTVG_REG32(UARTE0_BASE + 0x510u)
#define UARTE_PSEL_RXD MTVG_REG32(UARTE0_BASE + 0x514u)
#define UARTE_BAUDRATE MTVG_REG32(UARTE0_BASE + 0x524u)
#define UARTE_RXD_PTR MTVG_REG32(UARTE0_BASE + 0x534u)
#define UARTE_RXD_MAXCNT MTVG_REG32(UARTE0_BASE + 0x538u)
#define UARTE_TXD_PTR MTVG_REG32(UARTE0_BASE + 0x544u)
#define UARTE_TXD_MAXCNT MTVG_REG32(UARTE0_BASE + 0x548u)
#define UARTE_CONFIG MTVG_REG32(UARTE0_BASE + 0x56Cu)
#define UARTE_ENABLE_ON 8u
#define UARTE_PSEL_DISCONNECTED 0xFFFFFFFFu
#define UARTE_BAUDRATE_115200 0x01D7E000u
#define UARTE_SHORTS_ENDRX_STARTRX (1u << 5)
#define UARTE_INT_ENDRX (1u << 4)
#define UARTE_INT_ERROR (1u << 9)
#define UARTE_INT_RXSTARTED (1u << 19)
#define UARTE_ERRORSRC_ALL 0xFu /* overrun, parity, framing, break: write 1 to clear */

#ifndef MTVG_UARTE_BAUDRATE
#define MTVG_UARTE_BAUDRATE UARTE_BAUDRATE_115200
#endif

static volatile uint8_t s_rx_dma[2]; /* EasyDMA targets of the chained one-byte receptions */
static uint32_t s_rx_filling;        /* which of them the current reception fills */
static uint8_t s_tx_dma[MTVG_TX_CHUNK];

static void clock_init(void) {
  CLOCK_EVENTS_HFCLKSTARTED = 0u;
  CLOCK_TASKS_HFCLKSTART = 1u;
  while (CLOCK_EVENTS_HFCLKSTARTED == 0u) {
  }
}

static void uart_init(void) {
  P0_OUTSET = 1u << UART_TX_PIN; /* idle high before the UARTE takes the pin */
  P0_DIRSET = 1u << UART_TX_PIN;
  P0_PIN_CNF(UART_RX_PIN) = PIN_CNF_INPUT_CONNECTED;

  UARTE_ENABLE = 0u;
  UARTE_PSEL_TXD = UART_TX_PIN; /* port 0, bit 31 clear = connected */
  UARTE_PSEL_RXD = UART_RX_PIN;
  UARTE_PSEL_RTS = UARTE_PSEL_DISCONNECTED;
  UARTE_PSEL_CTS = UARTE_PSEL_DISCONNECTED;
  UARTE_BAUDRATE = MTVG_UARTE_BAUDRATE;
  UARTE_CONFIG = 0u; /* no flow control, no parity, one stop bit */
  UARTE_ENABLE = UARTE_ENABLE_ON;

  s_rx_filling = 0u;
  UARTE_RXD_PTR = (uint32_t)(uintptr_t)&s_rx_dma[0];
  UARTE_RXD_MAXCNT = 1u;
  UARTE_SHORTS = UARTE_SHORTS_ENDRX_STARTRX;
  UARTE_EVENTS_ENDRX = 0u;
  UARTE_EVENTS_RXSTARTED = 0u;
  UARTE_EVENTS_ERROR = 0u;
  UARTE_INTENSET = UARTE_INT_ENDRX | UARTE_INT_RXSTARTED | UARTE_INT_ERROR;
  mtvg_nvic_enable(MTVG_PORT_UART_IRQ);
  UARTE_TASKS_STARTRX = 1u;
}

/*
 * ENDRX: the reception into s_rx_dma[s_rx_filling] is complete (the shortcut has already
 * started the next one, into the other buffer). RXSTARTED: a reception has begun and
 * RXD.PTR may name the buffer for the one after it. ENDRX is handled first, so when both
 * are pending the pointer set afterwards is the buffer just emptied.
 */
void mtvg_port_uart_irq(void) {
  if (UARTE_EVENTS_ENDRX != 0u) {
    UARTE_EVENTS_ENDRX = 0u;
    mtvg_ring_push(&mtvg_cm_rx, s_rx_dma[s_rx_filling]);
    s_rx_filling ^= 1u;
  }
  if (UARTE_EVENTS_RXSTARTED != 0u) {
    UARTE_EVENTS_RXSTARTED = 0u;
    UARTE_RXD_PTR = (uint32_t)(uintptr_t)&s_rx_dma[s_rx_filling ^ 1u];
  }
  if (UARTE_EVENTS_ERROR != 0u) {
    UARTE_EVENTS_ERROR = 0u;
    UARTE_ERRORSRC = UARTE_ERRORSRC_ALL;
  }
}

void mtvg_platform_init(void) {
  clock_init();
  uart_init();
  mtvg_dwt_start();
}

int mtvg_link_write(const uint8_t* buf, size_t n) {
  while (n > 0u) {
    size_t chunk = n < MTVG_TX_CHUNK ? n : MTVG_TX_CHUNK;
    memcpy(s_tx_dma, buf, chunk);
    UARTE_TXD_PTR = (uint32_t)(uintptr_t)s_tx_dma;
    UARTE_TXD_MAXCNT = (uint32_t)chunk;
    UARTE_EVENTS_ENDTX = 0u;
    UARTE_TASKS_STARTTX = 1u;
    while (UARTE_EVENTS_ENDTX == 0u) {
    }
    buf += chunk;
    n -= chunk;
  }
  return MTVG_OK;
}

/* mtvg_link_write returns once EasyDMA has handed over its last byte: nothing is buffered. */
void mtvg_link_flush(void) {}
