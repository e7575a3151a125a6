/*
 * microtvm-gen board port for Zephyr 4.x applications (templates/zephyr/).
 *
 * Link: the UART chosen as zephyr,console (the console itself is disabled in prj.conf), read
 * through an interrupt-driven ring buffer and written with polled output. Timer: the
 * kernel's hardware cycle counter. Exit: semihosting SYS_EXIT_EXTENDED under QEMU
 * (MTVG_ZEPHYR_SEMIHOSTING_EXIT=1; Arm's BKPT 0xAB or RISC-V's marked EBREAK), otherwise a
 * cold reboot.
 */
#include <errno.h>

#include <zephyr/device.h>
#include <zephyr/devicetree.h>
#include <zephyr/drivers/uart.h>
#include <zephyr/irq.h>
#include <zephyr/kernel.h>
#include <zephyr/sys/reboot.h>
#include <zephyr/sys/ring_buffer.h>

#include "mtvg/platform.h"

/* Bytes the receive interrupt can buffer before it stops reading the UART. */
#ifndef MTVG_ZEPHYR_RX_BYTES
#define MTVG_ZEPHYR_RX_BYTES 1024
#endif
/* While the ring is empty the reader also polls the UART this often: a byte that arrived
 * before the receive interrupt was enabled raises no interrupt on some UARTs (QEMU's CMSDK
 * UART) and would stall the link. */
#ifndef MTVG_ZEPHYR_RX_POLL_MS
#define MTVG_ZEPHYR_RX_POLL_MS 5
#endif
#ifndef MTVG_ZEPHYR_SEMIHOSTING_EXIT
#define MTVG_ZEPHYR_SEMIHOSTING_EXIT 0
#endif

/* Semihosting: SYS_EXIT_EXTENDED with reason ADP_Stopped_ApplicationExit. */
#define SEMIHOSTING_SYS_EXIT_EXTENDED 0x20u
#define SEMIHOSTING_APPLICATION_EXIT 0x20026u

static const struct device* const link_uart = DEVICE_DT_GET(DT_CHOSEN(zephyr_console));

static uint8_t rx_storage[MTVG_ZEPHYR_RX_BYTES];
static struct ring_buf rx_ring;
static struct k_sem rx_ready;
static uint32_t timer_start;
static uint64_t timer_high;
static uint32_t timer_last;

static void link_isr(const struct device* dev, void* user_data) {
  (void)user_data;
  if (!uart_irq_update(dev)) {
    return;
  }
  while (uart_irq_rx_ready(dev)) {
    uint8_t* dest = NULL;
    uint32_t room = ring_buf_put_claim(&rx_ring, &dest, MTVG_ZEPHYR_RX_BYTES);
    if (room == 0u) {
      /* Full: leave the bytes in the UART until the reader drains the ring. */
      uart_irq_rx_disable(dev);
      break;
    }
    int got = uart_fifo_read(dev, dest, (int)room);
    (void)ring_buf_put_finish(&rx_ring, got > 0 ? (uint32_t)got : 0u);
    if (got <= 0) {
      break;
    }
    k_sem_give(&rx_ready);
  }
}

#ifdef CONFIG_MINIMAL_LIBC
/* The toolchain's libm (linked for kernels that call expf...) reports errors via __errno(). */
int* __errno(void);
int* __errno(void) { return &errno; }
#endif

void mtvg_platform_init(void) {
  ring_buf_init(&rx_ring, sizeof(rx_storage), rx_storage);
  k_sem_init(&rx_ready, 0, 1);
  if (device_is_ready(link_uart)) {
    (void)uart_irq_callback_user_data_set(link_uart, link_isr, NULL);
    uart_irq_rx_enable(link_uart);
  }
  timer_start = k_cycle_get_32();
  timer_last = timer_start;
  timer_high = 0;
}

/* Bytes the UART holds without having raised an interrupt, moved to the ring. With
 * interrupts locked, as the ISR would: uart_fifo_read also clears the UART's pending receive
 * interrupt (uart_poll_in does not on every driver, which leaves the interrupt asserted). */
static void link_poll_pending(void) {
  uint8_t c;
  unsigned int key = irq_lock();
  while (ring_buf_space_get(&rx_ring) > 0u && uart_fifo_read(link_uart, &c, 1) == 1) {
    (void)ring_buf_put(&rx_ring, &c, 1u);
  }
  irq_unlock(key);
}

int mtvg_link_read(uint8_t* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    unsigned int key = irq_lock();
    uint32_t chunk = ring_buf_get(&rx_ring, buf + got, (uint32_t)(n - got));
    irq_unlock(key);
    uart_irq_rx_enable(link_uart);
    if (chunk == 0u) {
      link_poll_pending();
      if (ring_buf_is_empty(&rx_ring)) {
        (void)k_sem_take(&rx_ready, K_MSEC(MTVG_ZEPHYR_RX_POLL_MS));
      }
    }
    got += chunk;
  }
  return MTVG_OK;
}

int mtvg_link_write(const uint8_t* buf, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uart_poll_out(link_uart, buf[i]);
  }
  return MTVG_OK;
}

void mtvg_link_flush(void) {}

uint64_t mtvg_timer_ticks(void) {
  /* The 32-bit cycle counter, widened: wraps are counted on every read. */
  uint32_t now = k_cycle_get_32();
  if (now < timer_last) {
    timer_high += (uint64_t)1 << 32;
  }
  timer_last = now;
  return (timer_high | now) - timer_start;
}

void mtvg_timer_align(void) {}

uint64_t mtvg_timer_hz(void) { return (uint64_t)sys_clock_hw_cycles_per_sec(); }

void mtvg_platform_exit(int status) {
#if MTVG_ZEPHYR_SEMIHOSTING_EXIT
  static uint32_t block[2];
  block[0] = SEMIHOSTING_APPLICATION_EXIT;
  block[1] = (uint32_t)status;
#if defined(__riscv)
  /* The EBREAK between these two no-op shifts, uncompressed, is a semihosting call. */
  register uintptr_t op __asm__("a0") = SEMIHOSTING_SYS_EXIT_EXTENDED;
  register uintptr_t arg __asm__("a1") = (uintptr_t)block;
  __asm__ volatile(".option push\n.option norvc\nslli x0, x0, 0x1f\nebreak\n"
                   "srai x0, x0, 7\n.option pop"
                   : "+r"(op) : "r"(arg) : "memory");
#else
  register uint32_t op __asm__("r0") = SEMIHOSTING_SYS_EXIT_EXTENDED;
  register uint32_t arg __asm__("r1") = (uint32_t)(uintptr_t)block;
  __asm__ volatile("bkpt 0xab" : "+r"(op) : "r"(arg) : "memory");
#endif
#else
  (void)status;
#endif
  sys_reboot(SYS_REBOOT_COLD);
  for (;;) {
    k_cpu_idle();
  }
}
