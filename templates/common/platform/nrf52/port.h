/*
 * microtvm-gen board port nrf52 (nRF52840): the facts startup.c and platform.c share.
 * Register addresses and bit positions from Nordic's nRF52840 Product Specification.
 */
#ifndef MTVG_PORT_NRF52_H_
#define MTVG_PORT_NRF52_H_

#include <stdint.h>

#define MTVG_PORT_NUM_IRQS 48u /* external interrupt lines of the nRF52840 */
#define MTVG_PORT_UART_IRQ 2u  /* UARTE0_UART0 */

void mtvg_port_uart_irq(void);
void mtvg_port_systick(void);

#endif /* MTVG_PORT_NRF52_H_ */
