/*
 * microtvm-gen board port for QEMU's RISC-V `virt` machine (RV32IMAC, machine mode):
 * implementation of mtvg/platform.h.
 *
 *   link   NS16550A UART0 (0x10000000), FIFOs on, polled; its receive interrupt, routed
 *          through the PLIC to hart 0's machine-mode context, only wakes WFI (mstatus.MIE
 *          stays 0, so no trap is ever taken). QEMU connects it to -serial #0.
 *   timer  the mcycle counter. Under QEMU's -icount it reads the virtual clock in ns, one
 *          per instruction at shift=0: MTVG_CPU_HZ = 1 GHz, and a tick is one instruction.
 *   exit   RISC-V semihosting SYS_EXIT / SYS_EXIT_EXTENDED (QEMU exits with the status;
 *          the semihost layer).
 */
#include <stddef.h>
#include <stdint.h>

#include "mtvg/platform.h"
#include "port.h"

/* mcycle's rate: QEMU's virtual clock at -icount shift=0 (the board file passes it too). */
#ifndef MTVG_CPU_HZ
#define MTVG_CPU_HZ 1000000000u
#endif

/* Divisor for the nominal rate; QEMU does not pace bytes by it. */
#define MTVG_UART_DIVISOR 1u
#define MTVG_BYTE_MASK 0xFFu

/* ---- Timer ------------------------------------------------------------------------------ */

static uint64_t s_cycle_base;

static uint64_t read_mcycle(void) {
  uint32_t hi;
  uint32_t lo;
  uint32_t again;
  do {
    MTVG_CSR_READ(mcycleh, hi);
    MTVG_CSR_READ(mcycle, lo);
    MTVG_CSR_READ(mcycleh, again);
  } while (hi != again); /* the low word wrapped between the reads */
  return ((uint64_t)hi << 32) | lo;
}

uint64_t mtvg_timer_ticks(void) { return read_mcycle() - s_cycle_base; }

/* mcycle counts single instructions under -icount: there is no coarser tick to align to. */
void mtvg_timer_align(void) {}

uint64_t mtvg_timer_hz(void) { return (uint64_t)MTVG_CPU_HZ; }

/* ---- Link ------------------------------------------------------------------------------- */

static void uart_init(void) {
  MTVG_UART_IER = 0u;
  MTVG_UART_LCR = MTVG_UART_LCR_DLAB;
  MTVG_UART_DLL = (uint8_t)(MTVG_UART_DIVISOR & MTVG_BYTE_MASK);
  MTVG_UART_DLM = (uint8_t)((MTVG_UART_DIVISOR >> 8) & MTVG_BYTE_MASK);
  MTVG_UART_LCR = MTVG_UART_LCR_8N1;
  MTVG_UART_FCR = MTVG_UART_FCR_ENABLE_AND_CLEAR;
  MTVG_UART_MCR = MTVG_UART_MCR_DTR_RTS_OUT2;
  MTVG_UART_IER = MTVG_UART_IER_RX_AVAILABLE;

  /* PLIC: the UART's source at priority 1, enabled for context 0, threshold 0. */
  MTVG_PLIC_PRIORITY(MTVG_UART_IRQ) = 1u;
  MTVG_PLIC_ENABLE_CTX0(MTVG_UART_IRQ) |= 1u << (MTVG_UART_IRQ % 32u);
  MTVG_PLIC_THRESHOLD_CTX0 = 0u;
  MTVG_CSR_SET(mie, MTVG_MIE_MEIE);
}

void mtvg_platform_init(void) {
  uart_init();
  s_cycle_base = read_mcycle();
}

/* Claim and complete whatever the PLIC holds, so the next byte raises a fresh request. */
static void plic_acknowledge(void) {
  uint32_t source = MTVG_PLIC_CLAIM_CTX0;
  if (source != 0u) {
    MTVG_PLIC_CLAIM_CTX0 = source;
  }
}

/*
 * Blocks until n bytes arrived. WFI resumes when an enabled interrupt is pending even with
 * mstatus.MIE = 0, and the UART holds its request while data is waiting, so a byte that
 * arrives between the test and the WFI does not get lost. A UART has no end of input: this
 * never returns -1.
 */
int mtvg_link_read(uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    while ((MTVG_UART_LSR & MTVG_UART_LSR_DATA_READY) == 0u) {
      plic_acknowledge();
      if ((MTVG_UART_LSR & MTVG_UART_LSR_DATA_READY) == 0u) {
        __asm__ volatile("wfi" ::: "memory");
      }
    }
    buf[i] = MTVG_UART_RBR;
  }
  return MTVG_OK;
}

int mtvg_link_write(const uint8_t* buf, size_t n) {
  size_t i = 0u;
  while (i < n) {
    while ((MTVG_UART_LSR & MTVG_UART_LSR_THR_EMPTY) == 0u) {
    }
    /* THRE with the FIFOs on: the whole transmit FIFO is free. */
    size_t end = (n - i > MTVG_UART_FIFO_BYTES) ? i + MTVG_UART_FIFO_BYTES : n;
    for (; i < end; ++i) {
      MTVG_UART_THR = buf[i];
    }
  }
  return MTVG_OK;
}

void mtvg_link_flush(void) {
  while ((MTVG_UART_LSR & MTVG_UART_LSR_TX_IDLE) == 0u) {
  }
}
