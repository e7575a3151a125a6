/*
 * microtvm-gen board port nrf52 (nRF52840, Cortex-M4F): reset and exception entry.
 *
 * The vector table (section .vectors, first in flash at 0x00000000): initial SP,
 * Reset_Handler, SysTick (extends the cycle counter), and one entry for every external
 * interrupt that hands UARTE0's to the port and treats any other as a fault. A fault stores
 * its exception number in mtvg_fault_exception and stays in a loop for a debugger.
 */
#include <stdint.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"

volatile uint32_t mtvg_fault_exception;

extern int main(void);
void Reset_Handler(void) __attribute__((noreturn));
static void fault_handler(void);
static void irq_handler(void);

__attribute__((section(".vectors"), used)) const mtvg_vector mtvg_vectors[] = {
    MTVG_SYSTEM_VECTORS(Reset_Handler, fault_handler, mtvg_port_systick),
    MTVG_V32(irq_handler), MTVG_V16(irq_handler), /* 48 IRQs */
};
typedef char mtvg_vector_count_check[sizeof(mtvg_vectors) / sizeof(mtvg_vectors[0]) ==
                                             MTVG_NUM_SYSTEM_VECTORS + MTVG_PORT_NUM_IRQS
                                         ? 1
                                         : -1];

void Reset_Handler(void) {
  mtvg_cm_enable_fpu(); /* before the first floating-point instruction, even in memset */
  MTVG_SCB_VTOR = (uint32_t)(uintptr_t)mtvg_vectors;
  mtvg_cm_init_memory();
  mtvg_platform_exit(main());
}

static void fault_handler(void) {
  mtvg_fault_exception = mtvg_cm_ipsr();
  mtvg_cm_park();
}

static void irq_handler(void) {
  if (mtvg_cm_ipsr() == MTVG_NUM_SYSTEM_VECTORS + MTVG_PORT_UART_IRQ) {
    mtvg_port_uart_irq();
  } else {
    fault_handler();
  }
}
