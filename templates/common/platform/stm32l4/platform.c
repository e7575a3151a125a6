/*
 * microtvm-gen board port stm32l4 (STM32L4R5ZI on a NUCLEO-L4R5ZI): mtvg/platform.h.
 *
 *   clock  HSI16: SYSCLK = HCLK = PCLK = 16 MHz, switched from the 4 MHz MSI of reset so
 *          that the UART's clock is the factory-trimmed oscillator; no PLL. At 16 MHz in
 *          voltage range 1 (the reset default) flash needs no wait state.
 *   link   LPUART1 on PG7 (TX) / PG8 (RX), alternate function 8: the ST-LINK virtual COM
 *          port of the Nucleo-144. Port G is supplied by VDDIO2, which must be declared
 *          valid (PWR_CR2.IOSV) before the pins work. Kernel clock HSI16; reception by
 *          interrupt into a ring (the st_usart and cortex_m_board layers).
 *   timer  DWT CYCCNT (CPU cycles) extended to 64 bits; SysTick wraps keep it up to date
 *          (cortex_m_dwt).
 *   exit   flush, store the status in mtvg_exit_status, stay in a loop (cortex_m_board).
 *
 * Register facts from ST's RM0432 (STM32L4+ Series reference manual).
 */
#include <stdint.h>

#include "dwt_timer.h"
#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"
#include "st_usart.h"

/* SYSCLK is HSI16 here; another CPU clock needs the PLL (and flash wait states) set up. */
typedef char mtvg_cpu_hz_check[(MTVG_CPU_HZ == 16000000u) ? 1 : -1];
typedef char lpuart_brr_range_check[(MTVG_ST_USART_BRR >= 0x300u &&
                                     MTVG_ST_USART_BRR <= 0xFFFFFu)
                                        ? 1
                                        : -1];

/* ---- RCC, PWR ------------------------------------------------------------------------ */

#define RCC_BASE 0x40021000u
#define RCC_CR MTVG_REG32(RCC_BASE + 0x00u)
#define RCC_CFGR MTVG_REG32(RCC_BASE + 0x08u)
#define RCC_AHB2ENR MTVG_REG32(RCC_BASE + 0x4Cu)
#define RCC_APB1ENR1 MTVG_REG32(RCC_BASE + 0x58u)
#define RCC_APB1ENR2 MTVG_REG32(RCC_BASE + 0x5Cu)
#define RCC_CCIPR MTVG_REG32(RCC_BASE + 0x88u)
#define RCC_CR_HSION (1u << 8)
#define RCC_CR_HSIRDY (1u << 10)
#define RCC_CFGR_SW_MASK 0x3u
#define RCC_CFGR_SW_HSI16 0x1u
#define RCC_CFGR_SWS_SHIFT 2u
#define RCC_AHB2ENR_GPIOGEN (1u << 6)
#define RCC_APB1ENR1_PWREN (1u << 28)
#define RCC_APB1ENR2_LPUART1EN (1u << 0)
#define RCC_CCIPR_LPUART1SEL_SHIFT 10u
#define RCC_CCIPR_LPUART1SEL_MASK (0x3u << RCC_CCIPR_LPUART1SEL_SHIFT)
#define RCC_CCIPR_LPUART1SEL_HSI16 (0x2u << RCC_CCIPR_LPUART1SEL_SHIFT)

#define PWR_BASE 0x40007000u
#define PWR_CR2 MTVG_REG32(PWR_BASE + 0x04u)
#define PWR_CR2_IOSV (1u << 9) /* VDDIO2 valid: port G usable */

static void clock_init(void) {
  RCC_CR |= RCC_CR_HSION;
  while ((RCC_CR & RCC_CR_HSIRDY) == 0u) {
  }
  RCC_CFGR = (RCC_CFGR & ~RCC_CFGR_SW_MASK) | RCC_CFGR_SW_HSI16;
  while (((RCC_CFGR >> RCC_CFGR_SWS_SHIFT) & RCC_CFGR_SW_MASK) != RCC_CFGR_SW_HSI16) {
  }
}

/* Supplies and clocks port G and LPUART1 (kernel clock HSI16). */
static void uart_clocks_init(void) {
  RCC_APB1ENR1 |= RCC_APB1ENR1_PWREN;
  (void)RCC_APB1ENR1;
  PWR_CR2 |= PWR_CR2_IOSV;
  RCC_AHB2ENR |= RCC_AHB2ENR_GPIOGEN;
  RCC_CCIPR = (RCC_CCIPR & ~RCC_CCIPR_LPUART1SEL_MASK) | RCC_CCIPR_LPUART1SEL_HSI16;
  RCC_APB1ENR2 |= RCC_APB1ENR2_LPUART1EN;
  (void)RCC_APB1ENR2;
}

void mtvg_platform_init(void) {
  clock_init();
  uart_clocks_init();
  mtvg_st_usart_init();
  mtvg_dwt_start();
}
