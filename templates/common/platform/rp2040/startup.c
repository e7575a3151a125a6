/*
 * microtvm-gen board port rp2040 (RP2040, Cortex-M0+): reset and exception entry.
 *
 * The boot ROM runs boot2 (the first 256 bytes of flash), which points VTOR at this vector
 * table (section .vectors, at 0x10000100), loads its initial SP and jumps to Reset_Handler.
 * One entry for every external interrupt hands UART0's to the port and treats any other as
 * a fault. A fault stores its exception number in mtvg_fault_exception and stays in a loop.
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
    MTVG_SYSTEM_VECTORS(Reset_Handler, fault_handler, fault_handler),
    MTVG_V32(irq_handler),
};
typedef char mtvg_vector_count_check[sizeof(mtvg_vectors) / sizeof(mtvg_vectors[0]) ==
                                             MTVG_NUM_SYSTEM_VECTORS + MTVG_PORT_NUM_IRQS
                                         ? 1
                                         : -1];

void Reset_Handler(void) {
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
