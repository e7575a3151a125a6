/*
 * microtvm-gen board ports: an STM32 USART/LPUART (the "v2" block with ISR/ICR/RDR/TDR:
 * STM32F7, L4, L4+, G4, H7, ...) as the link, for the ports whose port.toml names the
 * st_usart layer. Register offsets and bits from ST's RM0385 (F7) and RM0432 (L4+).
 *
 * The port's port.h gives the instance and its pins:
 *   MTVG_ST_USART_BASE     the USART's (or LPUART's) register block
 *   MTVG_ST_USART_BRR      its BRR value for the baud rate (oversampling 16: f_ck / baud;
 *                          LPUART: 256 * f_ck / baud)
 *   MTVG_ST_USART_ICR_ALL  every clear flag its ICR has
 *   MTVG_ST_GPIO_BASE      the GPIO port of both pins
 *   MTVG_ST_UART_TX_PIN, MTVG_ST_UART_RX_PIN, MTVG_ST_UART_AF   the pins and their
 *                          alternate function
 *   MTVG_PORT_UART_IRQ     its interrupt line
 *
 * The port clocks the GPIO port and the USART (RCC), then calls mtvg_st_usart_init(). The
 * layer gives mtvg_port_uart_irq (into the cortex_m_board receive ring), mtvg_link_write and
 * mtvg_link_flush.
 */
#ifndef MTVG_ST_USART_H_
#define MTVG_ST_USART_H_

/* Pins to their alternate function (TX push-pull high speed, RX pulled up), then the USART
 * to 8N1 with the receive interrupt on; enables its NVIC line. */
void mtvg_st_usart_init(void);

#endif /* MTVG_ST_USART_H_ */
