/*
 * microtvm-gen board port rp2040 (Raspberry Pi Pico): the facts startup.c and platform.c
 * share. Register addresses and bit positions from the RP2040 datasheet.
 */
#ifndef MTVG_PORT_RP2040_H_
#define MTVG_PORT_RP2040_H_

#include <stdint.h>

#define MTVG_PORT_NUM_IRQS 32u /* NVIC slots of the Cortex-M0+ (the RP2040 wires 26) */
#define MTVG_PORT_UART_IRQ 20u /* UART0_IRQ */

void mtvg_port_uart_irq(void);

#endif /* MTVG_PORT_RP2040_H_ */
