/*
 * microtvm-gen board port nrf52 (nRF52840): the facts its files and the shared layers share.
 * Register addresses and bit positions from Nordic's nRF52840 Product Specification.
 */
#ifndef MTVG_PORT_NRF52_H_
#define MTVG_PORT_NRF52_H_

#include <stdint.h>

#ifndef MTVG_CPU_HZ
#define MTVG_CPU_HZ 64000000u
#endif

/* cortex_m: the vector table (SysTick extends the cycle counter: cortex_m_dwt). */
#define MTVG_PORT_NUM_IRQS 48u /* external interrupt lines of the nRF52840 */
#define MTVG_PORT_UART_IRQ 2u  /* UARTE0_UART0 */
#define MTVG_PORT_SYSTICK_HANDLER mtvg_dwt_systick

#endif /* MTVG_PORT_NRF52_H_ */
