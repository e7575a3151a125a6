/*
 * microtvm-gen board port rp2040 (Raspberry Pi Pico): the facts its files and the shared
 * layers share. Register addresses and bit positions from the RP2040 datasheet.
 */
#ifndef MTVG_PORT_RP2040_H_
#define MTVG_PORT_RP2040_H_

#include <stdint.h>

/* cortex_m: the vector table. The boot ROM runs boot2 (the first 256 bytes of flash), which
 * points VTOR at the table (at 0x10000100), loads its initial SP and jumps to Reset_Handler;
 * Reset_Handler sets VTOR again. SysTick is not used: its slot is a fault. */
#define MTVG_PORT_NUM_IRQS 32u /* NVIC slots of the Cortex-M0+ (the RP2040 wires 26) */
#define MTVG_PORT_UART_IRQ 20u /* UART0_IRQ */

#endif /* MTVG_PORT_RP2040_H_ */
