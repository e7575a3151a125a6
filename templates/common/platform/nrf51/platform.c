/*
 * microtvm-gen board port for QEMU's `microbit` machine (nRF51822, Cortex-M0, 16 KiB RAM):
 * implementation of mtvg/platform.h.
 *
 *   link   UART0, polled. Interrupts stay masked (PRIMASK) for the whole program: the
 *          UART's RXDRDY interrupt is enabled only so that WFI wakes when a byte arrives.
 *   timer  TIMER0, 32 bits at 16 MHz, read through its capture task and extended to 64 bits
 *          in software (each read notices a wrap; reads must come less than 2^32 ticks,
 *          about 268 s, apart, which every measured run does). The nRF51's Cortex-M0 has no
 *          SysTick.
 *   exit   ARM semihosting SYS_EXIT / SYS_EXIT_EXTENDED (the semihost layer).
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"

#ifndef MTVG_CPU_HZ
#define MTVG_CPU_HZ MTVG_TIMER_HZ
#endif

#define MTVG_BYTE_MASK 0xFFu
#define MTVG_COUNTER_PERIOD (1ull << 32)

/* ---- Timer ---------------------------------------------------------------------------- */

static uint64_t s_tick_base; /* ticks counted before the last clear of TIMER0 */
static uint64_t s_wraps;     /* 2^32 periods since that clear */
static uint32_t s_last;      /* the counter at the previous read */

static uint32_t timer_capture(void) {
  MTVG_TIMER_TASKS_CAPTURE0 = MTVG_TRIGGER;
  return MTVG_TIMER_CC0;
}

static void timer_init(void) {
  MTVG_TIMER_TASKS_STOP = MTVG_TRIGGER;
  MTVG_TIMER_MODE = MTVG_TIMER_MODE_TIMER;
  MTVG_TIMER_BITMODE = MTVG_TIMER_BITMODE_32;
  MTVG_TIMER_PRESCALER = 0u;
  MTVG_TIMER_TASKS_CLEAR = MTVG_TRIGGER;
  MTVG_TIMER_TASKS_START = MTVG_TRIGGER;
}

uint64_t mtvg_timer_ticks(void) {
  uint32_t now = timer_capture();
  if (now < s_last) {
    s_wraps += MTVG_COUNTER_PERIOD;
  }
  s_last = now;
  return s_tick_base + s_wraps + (uint64_t)now;
}

/*
 * One tick is 62.5 instructions under -icount shift=0. TIMER0's CLEAR task restarts the
 * tick at this instruction (QEMU restarts its count from the clear); the ticks counted so
 * far, the one in progress included, carry over.
 */
void mtvg_timer_align(void) {
  uint64_t now = mtvg_timer_ticks();
  MTVG_TIMER_TASKS_CLEAR = MTVG_TRIGGER;
  s_tick_base = now + 1u;
  s_wraps = 0u;
  s_last = 0u;
}

uint64_t mtvg_timer_hz(void) { return (uint64_t)MTVG_CPU_HZ; }

/* ---- Link ----------------------------------------------------------------------------- */

static void uart_init(void) {
  MTVG_UART_PSELTXD = MTVG_UART_PIN_TX;
  MTVG_UART_PSELRXD = MTVG_UART_PIN_RX;
  MTVG_UART_BAUDRATE = MTVG_UART_BAUD_115200;
  MTVG_UART_ENABLE = MTVG_UART_ENABLE_ON;
  MTVG_UART_EVENTS_RXDRDY = 0u;
  MTVG_UART_EVENTS_TXDRDY = 0u;
  MTVG_UART_INTENSET = MTVG_UART_INTEN_RXDRDY;
  mtvg_nvic_enable(MTVG_UART0_IRQ);
  MTVG_UART_TASKS_STARTRX = MTVG_TRIGGER;
  MTVG_UART_TASKS_STARTTX = MTVG_TRIGGER;
}

void mtvg_platform_init(void) {
  uart_init();
  timer_init();
}

/*
 * Blocks until n bytes arrived. With PRIMASK set the pending UART interrupt is never taken,
 * but it still ends WFI; its pending bit is cleared after each wake. RXDRDY is cleared before
 * RXD is read, as the reference manual asks (QEMU raises it again while its FIFO holds more).
 */
int mtvg_link_read(uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    while (MTVG_UART_EVENTS_RXDRDY == 0u) {
      __asm__ volatile("wfi" ::: "memory");
      MTVG_NVIC_ICPR(MTVG_UART0_IRQ / 32u) = 1u << (MTVG_UART0_IRQ % 32u);
    }
    MTVG_UART_EVENTS_RXDRDY = 0u;
    buf[i] = (uint8_t)(MTVG_UART_RXD & MTVG_BYTE_MASK);
  }
  return MTVG_OK;
}

int mtvg_link_write(const uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    MTVG_UART_EVENTS_TXDRDY = 0u;
    MTVG_UART_TXD = buf[i];
    while (MTVG_UART_EVENTS_TXDRDY == 0u) {
    }
  }
  return MTVG_OK;
}

/* Every write waits for TXDRDY: nothing is buffered here. */
void mtvg_link_flush(void) {}

/* ---- C library hooks ------------------------------------------------------------------ */
/* No heap in 16 KiB: newlib's malloc (never called by the runtime) always fails. _exit is
 * the semihost layer's. */

void* _sbrk(ptrdiff_t increment);

void* _sbrk(ptrdiff_t increment) {
  (void)increment;
  errno = ENOMEM;
  return (void*)-1;
}
