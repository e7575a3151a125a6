/*
 * microtvm-gen board port stm32f7 (STM32F746ZG on a NUCLEO-F746ZG): mtvg/platform.h.
 *
 *   clock  the reset default: HSI, 16 MHz, no PLL (SYSCLK = HCLK = PCLK1 = 16 MHz; flash
 *          needs no wait state at this speed); caches off.
 *   link   USART3 on PD8 (TX) / PD9 (RX), alternate function 7: the ST-LINK virtual COM
 *          port of the Nucleo-144. 8N1 at MTVG_UART_BAUD; reception by interrupt into a ring
 *          (the st_usart and cortex_m_board layers).
 *   timer  DWT CYCCNT (CPU cycles) extended to 64 bits; SysTick wraps keep it up to date
 *          (cortex_m_dwt).
 *   exit   flush, store the status in mtvg_exit_status, stay in a loop (cortex_m_board).
 *
 * Register facts from ST's RM0385 (STM32F75xxx and STM32F74xxx reference manual).
 */
#include <stdint.h>

#include "dwt_timer.h"
#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"
#include "st_usart.h"

/* The port leaves the clock tree at its reset state; another CPU clock needs RCC set-up here. */
typedef char mtvg_cpu_hz_check[(MTVG_CPU_HZ == MTVG_UART_CLOCK_HZ) ? 1 : -1];

/* ---- RCC ----------------------------------------------------------------------------- */

#define RCC_BASE 0x40023800u
#define RCC_AHB1ENR MTVG_REG32(RCC_BASE + 0x30u)
#define RCC_APB1ENR MTVG_REG32(RCC_BASE + 0x40u)
#define RCC_AHB1ENR_GPIODEN (1u << 3)
#define RCC_APB1ENR_USART3EN (1u << 18)

void mtvg_platform_init(void) {
  RCC_AHB1ENR |= RCC_AHB1ENR_GPIODEN;
  RCC_APB1ENR |= RCC_APB1ENR_USART3EN;
  (void)RCC_APB1ENR; /* the clock is on after this read-back */
  mtvg_st_usart_init();
  mtvg_dwt_start();
}
