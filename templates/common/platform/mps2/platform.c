/*
 * microtvm-gen board port for QEMU's Arm MPS2/MPS3 machines (AN385, AN386, AN500, AN505,
 * AN547): the link of mtvg/platform.h.
 *
 *   link   CMSDK APB UART0 (address per image, port.h), polled, with its receive
 *          interrupt waking WFI; QEMU connects it to -serial #0.
 *   timer, exit, faults, stdio   the qemu_m layer (SysTick, semihosting) and the semihost
 *          layer.
 */
#include <stddef.h>
#include <stdint.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"
#include "qemu_m.h"

/* ---- Configuration (override with -D) ------------------------------------------------ */

/* Nominal UART baud rate. QEMU does not pace output by it, but rejects divisors < 16. */
#ifndef MTVG_UART_BAUD
#define MTVG_UART_BAUD 115200u
#endif

/* ---- CMSDK APB UART0 ----------------------------------------------------------------- */

#define MTVG_UART0_BASE MTVG_MPS2_UART0_BASE
#define MTVG_UART_DATA MTVG_REG32(MTVG_UART0_BASE + 0x00u)
#define MTVG_UART_STATE MTVG_REG32(MTVG_UART0_BASE + 0x04u)
#define MTVG_UART_CTRL MTVG_REG32(MTVG_UART0_BASE + 0x08u)
#define MTVG_UART_INTSTATUS MTVG_REG32(MTVG_UART0_BASE + 0x0Cu)
#define MTVG_UART_BAUDDIV MTVG_REG32(MTVG_UART0_BASE + 0x10u)

#define MTVG_UART_STATE_TX_FULL (1u << 0)
#define MTVG_UART_STATE_RX_FULL (1u << 1)
#define MTVG_UART_STATE_TX_OVERRUN (1u << 2) /* write 1 to clear */
#define MTVG_UART_STATE_RX_OVERRUN (1u << 3) /* write 1 to clear */
#define MTVG_UART_CTRL_TX_EN (1u << 0)
#define MTVG_UART_CTRL_RX_EN (1u << 1)
#define MTVG_UART_CTRL_RX_INTEN (1u << 3)
#define MTVG_UART_INT_RX (1u << 1)
#define MTVG_UART_INT_ALL 0xFu /* TX, RX, TX overrun, RX overrun; write 1 to clear */
#define MTVG_UART_DATA_MASK 0xFFu
#define MTVG_UART_MIN_BAUDDIV 16u

#define MTVG_UART_BAUDDIV_VALUE                                             \
  ((MTVG_CPU_HZ / MTVG_UART_BAUD) < MTVG_UART_MIN_BAUDDIV ? MTVG_UART_MIN_BAUDDIV \
                                                          : (MTVG_CPU_HZ / MTVG_UART_BAUD))

/* ---- Link ---------------------------------------------------------------------------- */

static void uart_init(void) {
  MTVG_UART_CTRL = 0u;
  MTVG_UART_BAUDDIV = MTVG_UART_BAUDDIV_VALUE;
  MTVG_UART_STATE = MTVG_UART_STATE_TX_OVERRUN | MTVG_UART_STATE_RX_OVERRUN;
  MTVG_UART_INTSTATUS = MTVG_UART_INT_ALL;
  MTVG_UART_CTRL = MTVG_UART_CTRL_TX_EN | MTVG_UART_CTRL_RX_EN | MTVG_UART_CTRL_RX_INTEN;
  mtvg_nvic_enable(MTVG_MPS2_UART0_IRQ_A);
  mtvg_nvic_enable(MTVG_MPS2_UART0_IRQ_B);
}

void mtvg_port_uart_irq(void) { MTVG_UART_INTSTATUS = MTVG_UART_INT_RX; }

void mtvg_platform_init(void) {
  uart_init();
  mtvg_systick_start();
}

/* Blocks until n bytes arrived. A UART has no end of input, so this never returns -1. */
int mtvg_link_read(uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    /*
     * Sleep until a byte arrives instead of spinning: QEMU hands the UART one byte per main
     * loop turn, and a spinning CPU keeps its main loop waiting (about 15 KB/s instead of
     * MB/s). Interrupts are masked around the test, so a byte arriving between the test
     * and WFI leaves its interrupt pending, and WFI returns at once.
     */
    while ((MTVG_UART_STATE & MTVG_UART_STATE_RX_FULL) == 0u) {
      __asm__ volatile("cpsid i" ::: "memory");
      if ((MTVG_UART_STATE & MTVG_UART_STATE_RX_FULL) == 0u) {
        __asm__ volatile("wfi" ::: "memory");
      }
      __asm__ volatile("cpsie i" ::: "memory");
    }
    buf[i] = (uint8_t)(MTVG_UART_DATA & MTVG_UART_DATA_MASK);
  }
  return MTVG_OK;
}

int mtvg_link_write(const uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    while ((MTVG_UART_STATE & MTVG_UART_STATE_TX_FULL) != 0u) {
    }
    MTVG_UART_DATA = buf[i];
  }
  return MTVG_OK;
}

/*
 * Waits until the transmit holding register is empty. On QEMU that means the last byte
 * was handed to the character backend (QEMU keeps TX-full set while the host side is not
 * accepting data), so it is exact. The CMSDK UART has no "shifter empty" flag, so on real
 * silicon the final byte may still be on the wire when this returns.
 */
void mtvg_link_flush(void) {
  while ((MTVG_UART_STATE & MTVG_UART_STATE_TX_FULL) != 0u) {
  }
}

