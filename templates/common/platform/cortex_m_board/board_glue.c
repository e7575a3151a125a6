/*
 * microtvm-gen Cortex-M ports for physical boards: the glue every such port shares, for the
 * ports whose port.toml names the cortex_m_board layer.
 *
 *   link   mtvg_link_read takes the bytes the port's UART interrupt (mtvg_port_uart_irq)
 *          moved into the receive ring; the port writes and flushes the UART itself.
 *   timer  a board's timer counts real time: there is no emulated tick to align to.
 *   exit   flush, store the status in mtvg_exit_status, stay in a loop (no semihosting:
 *          there is no host to exit to).
 *   faults every fault, and every interrupt but the port's UART line (MTVG_PORT_UART_IRQ in
 *          port.h), stores its exception number in mtvg_fault_exception and stays in a loop
 *          for a debugger.
 */
#include <stddef.h>
#include <stdint.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"

volatile int32_t mtvg_exit_status;
volatile uint32_t mtvg_fault_exception;
mtvg_rx_ring mtvg_cm_rx;

void mtvg_cm_fault(void) {
  mtvg_fault_exception = mtvg_cm_ipsr();
  mtvg_cm_park();
}

void mtvg_cm_irq(void) {
  if (mtvg_cm_ipsr() == MTVG_EXC_FIRST_IRQ + MTVG_PORT_UART_IRQ) {
    mtvg_port_uart_irq();
  } else {
    mtvg_cm_fault();
  }
}

int mtvg_link_read(uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    buf[i] = mtvg_ring_pop_wait(&mtvg_cm_rx);
  }
  return MTVG_OK;
}

void mtvg_timer_align(void) {}

void mtvg_platform_exit(int status) {
  mtvg_link_flush();
  mtvg_exit_status = status;
  mtvg_cm_park();
}
