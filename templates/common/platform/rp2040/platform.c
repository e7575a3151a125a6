/*
 * microtvm-gen board port rp2040 (Raspberry Pi Pico): mtvg/platform.h.
 *
 *   clock  the 12 MHz crystal oscillator (XOSC) drives clk_ref and, through it, clk_sys and
 *          clk_peri: 12 MHz, no PLL. (Reset leaves the ring oscillator, whose frequency
 *          varies from chip to chip: no use for a UART.)
 *   link   UART0 (PL011) on GP0 (TX) / GP1 (RX), 8N1 at MTVG_UART_BAUD, reception by
 *          interrupt into a ring (cortex_m_board). On a Pico these pins go to the Debug
 *          Probe's UART.
 *   timer  the 64-bit microsecond TIMER, ticking from clk_ref through the watchdog's tick
 *          generator (12 cycles per tick).
 *   exit   flush, store the status in mtvg_exit_status, stay in a loop (cortex_m_board).
 *
 * Register facts from the RP2040 datasheet (chapters 2.14-2.16 clocks/XOSC, 2.14 resets,
 * 2.19 GPIO, 4.2 UART, 4.6 TIMER, 4.7 watchdog). Each register block has atomic aliases:
 * +0x2000 sets bits, +0x3000 clears them.
 */
#include <stddef.h>
#include <stdint.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"

#ifndef MTVG_CPU_HZ
#define MTVG_CPU_HZ 12000000u /* XOSC on the Pico */
#endif
#ifndef MTVG_UART_BAUD
#define MTVG_UART_BAUD 115200u
#endif
#define MTVG_TIMER_HZ 1000000u
#define MTVG_XOSC_HZ 12000000u /* the Pico's crystal */
#define MTVG_XOSC_MHZ (MTVG_XOSC_HZ / 1000000u)
/* clk_sys runs from the crystal here; a faster clock needs the PLL set up in clock_init. */
typedef char mtvg_cpu_hz_check[(MTVG_CPU_HZ == MTVG_XOSC_HZ) ? 1 : -1];

#define REG_SET(addr) MTVG_REG32((addr) + 0x2000u)
#define REG_CLR(addr) MTVG_REG32((addr) + 0x3000u)

/* ---- RESETS --------------------------------------------------------------------------- */
#define RESETS_BASE 0x4000C000u
#define RESETS_RESET_DONE MTVG_REG32(RESETS_BASE + 0x08u)
#define RESET_IO_BANK0 (1u << 5)
#define RESET_PADS_BANK0 (1u << 8)
#define RESET_TIMER (1u << 21)
#define RESET_UART0 (1u << 22)

/* ---- XOSC, CLOCKS, WATCHDOG tick ------------------------------------------------------ */
#define XOSC_BASE 0x40024000u
#define XOSC_CTRL MTVG_REG32(XOSC_BASE + 0x00u)
#define XOSC_STATUS MTVG_REG32(XOSC_BASE + 0x04u)
#define XOSC_STARTUP MTVG_REG32(XOSC_BASE + 0x0Cu)
#define XOSC_CTRL_FREQ_RANGE_1_15MHZ 0xAA0u
#define XOSC_CTRL_ENABLE (0xFABu << 12)
#define XOSC_STATUS_STABLE (1u << 31)
/* Start-up delay in units of 256 crystal cycles: about 1 ms. */
#define XOSC_STARTUP_DELAY (((MTVG_XOSC_HZ / 1000u) + 255u) / 256u)

#define CLOCKS_BASE 0x40008000u
#define CLK_REF_CTRL MTVG_REG32(CLOCKS_BASE + 0x30u)
#define CLK_REF_SELECTED MTVG_REG32(CLOCKS_BASE + 0x38u)
#define CLK_SYS_CTRL MTVG_REG32(CLOCKS_BASE + 0x3Cu)
#define CLK_SYS_SELECTED MTVG_REG32(CLOCKS_BASE + 0x44u)
#define CLK_PERI_CTRL MTVG_REG32(CLOCKS_BASE + 0x48u)
#define CLK_REF_SRC_MASK 0x3u
#define CLK_REF_SRC_XOSC 0x2u
#define CLK_SYS_SRC_MASK 0x1u /* 0 = clk_ref */
#define CLK_PERI_ENABLE (1u << 11)
#define CLK_PERI_AUXSRC_MASK (0x7u << 5) /* 0 = clk_sys */

#define WATCHDOG_BASE 0x40058000u
#define WATCHDOG_TICK MTVG_REG32(WATCHDOG_BASE + 0x2Cu)
#define WATCHDOG_TICK_ENABLE (1u << 9)

/* ---- GPIO function select, UART0 (PL011), TIMER --------------------------------------- */
#define IO_BANK0_BASE 0x40014000u
#define GPIO_CTRL(n) MTVG_REG32(IO_BANK0_BASE + 0x04u + 8u * (n))
#define GPIO_FUNC_UART 2u
#define UART_TX_GPIO 0u
#define UART_RX_GPIO 1u

#define UART0_BASE 0x40034000u
#define UART_DR MTVG_REG32(UART0_BASE + 0x00u)
#define UART_FR MTVG_REG32(UART0_BASE + 0x18u)
#define UART_IBRD MTVG_REG32(UART0_BASE + 0x24u)
#define UART_FBRD MTVG_REG32(UART0_BASE + 0x28u)
#define UART_LCR_H MTVG_REG32(UART0_BASE + 0x2Cu)
#define UART_CR MTVG_REG32(UART0_BASE + 0x30u)
#define UART_IFLS MTVG_REG32(UART0_BASE + 0x34u)
#define UART_IMSC MTVG_REG32(UART0_BASE + 0x38u)
#define UART_ICR MTVG_REG32(UART0_BASE + 0x44u)
#define UART_FR_BUSY (1u << 3)
#define UART_FR_RXFE (1u << 4)
#define UART_FR_TXFF (1u << 5)
#define UART_LCR_H_FEN (1u << 4)
#define UART_LCR_H_WLEN_8 (3u << 5)
#define UART_CR_UARTEN (1u << 0)
#define UART_CR_TXE (1u << 8)
#define UART_CR_RXE (1u << 9)
#define UART_IMSC_RXIM (1u << 4)
#define UART_IMSC_RTIM (1u << 6) /* receive timeout: bytes wait in the FIFO below its level */
#define UART_ICR_ALL 0x7FFu
#define UART_DATA_MASK 0xFFu
/* Baud divisor in 1/64ths: clk_peri / (16 * baud), rounded. */
#define UART_DIVISOR_64 ((8u * MTVG_CPU_HZ / MTVG_UART_BAUD + 1u) / 2u)

#define TIMER_BASE 0x40054000u
#define TIMER_TIMERAWH MTVG_REG32(TIMER_BASE + 0x24u)
#define TIMER_TIMERAWL MTVG_REG32(TIMER_BASE + 0x28u)

static void unreset(uint32_t blocks) {
  REG_CLR(RESETS_BASE) = blocks;
  while ((RESETS_RESET_DONE & blocks) != blocks) {
  }
}

static void clock_init(void) {
  XOSC_CTRL = XOSC_CTRL_FREQ_RANGE_1_15MHZ;
  XOSC_STARTUP = XOSC_STARTUP_DELAY;
  REG_SET(XOSC_BASE) = XOSC_CTRL_ENABLE;
  while ((XOSC_STATUS & XOSC_STATUS_STABLE) == 0u) {
  }
  /* clk_sys already runs from clk_ref (its reset source); move clk_ref to the crystal. */
  CLK_SYS_CTRL &= ~CLK_SYS_SRC_MASK;
  while (CLK_SYS_SELECTED != 1u) {
  }
  CLK_REF_CTRL = (CLK_REF_CTRL & ~CLK_REF_SRC_MASK) | CLK_REF_SRC_XOSC;
  while (CLK_REF_SELECTED != (1u << CLK_REF_SRC_XOSC)) {
  }
  CLK_PERI_CTRL = CLK_PERI_ENABLE; /* AUXSRC 0: clk_sys */
  WATCHDOG_TICK = WATCHDOG_TICK_ENABLE | MTVG_XOSC_MHZ;
}

static void uart_init(void) {
  unreset(RESET_IO_BANK0 | RESET_PADS_BANK0 | RESET_UART0 | RESET_TIMER);
  UART_CR = 0u;
  UART_IBRD = UART_DIVISOR_64 >> 6;
  UART_FBRD = UART_DIVISOR_64 & 0x3Fu;
  UART_LCR_H = UART_LCR_H_WLEN_8 | UART_LCR_H_FEN; /* also latches IBRD/FBRD */
  UART_IFLS = 0u;                                 /* interrupt at 1/8 full (4 bytes) */
  UART_ICR = UART_ICR_ALL;
  UART_IMSC = UART_IMSC_RXIM | UART_IMSC_RTIM;
  UART_CR = UART_CR_UARTEN | UART_CR_TXE | UART_CR_RXE;
  GPIO_CTRL(UART_TX_GPIO) = GPIO_FUNC_UART;
  GPIO_CTRL(UART_RX_GPIO) = GPIO_FUNC_UART;
  mtvg_nvic_enable(MTVG_PORT_UART_IRQ);
}

void mtvg_port_uart_irq(void) {
  while ((UART_FR & UART_FR_RXFE) == 0u) {
    mtvg_ring_push(&mtvg_cm_rx, (uint8_t)(UART_DR & UART_DATA_MASK));
  }
}

void mtvg_platform_init(void) {
  clock_init();
  uart_init();
}

int mtvg_link_write(const uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    while ((UART_FR & UART_FR_TXFF) != 0u) {
    }
    UART_DR = buf[i];
  }
  return MTVG_OK;
}

/* Waits until the transmit FIFO is empty and the last byte has left the shifter. */
void mtvg_link_flush(void) {
  while ((UART_FR & UART_FR_BUSY) != 0u) {
  }
}

/* The raw (unlatched) halves: reread the high word until it is stable around the low one. */
uint64_t mtvg_timer_ticks(void) {
  uint32_t high;
  uint32_t low;
  do {
    high = TIMER_TIMERAWH;
    low = TIMER_TIMERAWL;
  } while (TIMER_TIMERAWH != high);
  return ((uint64_t)high << 32) | (uint64_t)low;
}

uint64_t mtvg_timer_hz(void) { return (uint64_t)MTVG_TIMER_HZ; }
