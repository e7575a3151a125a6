/*
 * microtvm-gen board port stm32l4 (STM32L4R5ZI on a NUCLEO-L4R5ZI): mtvg/platform.h.
 *
 *   clock  120 MHz, the chip's rated speed (MTVG_CPU_HZ, the board file's clock_hz): HSI16
 *          (switched on from the 4 MHz MSI of reset) into the PLL (M 1, N 15: VCO 240 MHz,
 *          R 2), voltage range 1 in boost mode, 5 flash wait states, the switch through
 *          an AHB prescaler of 2 for at least 1 us as RM0432 asks above 80 MHz. Built with
 *          MTVG_RESET_CLOCK=1: SYSCLK = HSI16 = 16 MHz, no PLL, no wait state.
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

/* The two clocks this port sets up (port.h picks one). */
typedef char mtvg_cpu_hz_check[(MTVG_CPU_HZ == MTVG_PLL_HZ || MTVG_CPU_HZ == MTVG_HSI_HZ) ? 1
                                                                                          : -1];
typedef char lpuart_brr_range_check[(MTVG_ST_USART_BRR >= 0x300u &&
                                     MTVG_ST_USART_BRR <= 0xFFFFFu)
                                        ? 1
                                        : -1];

/* ---- RCC, PWR ------------------------------------------------------------------------ */

#define RCC_BASE 0x40021000u
#define RCC_CR MTVG_REG32(RCC_BASE + 0x00u)
#define RCC_CFGR MTVG_REG32(RCC_BASE + 0x08u)
#define RCC_PLLCFGR MTVG_REG32(RCC_BASE + 0x0Cu)
#define RCC_AHB2ENR MTVG_REG32(RCC_BASE + 0x4Cu)
#define RCC_APB1ENR1 MTVG_REG32(RCC_BASE + 0x58u)
#define RCC_APB1ENR2 MTVG_REG32(RCC_BASE + 0x5Cu)
#define RCC_CCIPR MTVG_REG32(RCC_BASE + 0x88u)
#define RCC_CR_HSION (1u << 8)
#define RCC_CR_HSIRDY (1u << 10)
#define RCC_CR_PLLON (1u << 24)
#define RCC_CR_PLLRDY (1u << 25)
/* PLLCFGR: PLLSRC[1:0] (2 = HSI16), PLLM[7:4] (M - 1), PLLN[14:8], PLLREN bit 24,
 * PLLR[26:25] (0 = /2). */
#define RCC_PLLCFGR_VALUE (0x2u | (0u << 4) | (15u << 8) | (1u << 24) | (0u << 25))
#define RCC_CFGR_SW_PLL 0x3u
#define RCC_CFGR_HPRE_MASK (0xFu << 4)
#define RCC_CFGR_HPRE_DIV2 (0x8u << 4)
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
#define PWR_CR5 MTVG_REG32(PWR_BASE + 0x80u)
#define PWR_CR5_R1MODE (1u << 8) /* 1: range 1 normal, 0: range 1 boost (above 80 MHz) */

#define FLASH_ACR MTVG_REG32(0x40022000u)
#define FLASH_ACR_LATENCY_MASK 0xFu
#define FLASH_ACR_LATENCY_120MHZ 5u /* range 1 boost: 5 wait states up to 120 MHz */

/* More than 1 us at 60 MHz (the AHB clock while the prescaler is 2): a few cycles a turn. */
#define AHB_SETTLE_LOOPS 200u

static void switch_to(uint32_t source) {
  RCC_CFGR = (RCC_CFGR & ~RCC_CFGR_SW_MASK) | source;
  while (((RCC_CFGR >> RCC_CFGR_SWS_SHIFT) & RCC_CFGR_SW_MASK) != source) {
  }
}

static void clock_init(void) {
  RCC_CR |= RCC_CR_HSION;
  while ((RCC_CR & RCC_CR_HSIRDY) == 0u) {
  }
  switch_to(RCC_CFGR_SW_HSI16);
#if MTVG_CPU_HZ == MTVG_PLL_HZ
  /* RM0432, "Range 1 boost mode" and the clock switch above 80 MHz. */
  RCC_PLLCFGR = RCC_PLLCFGR_VALUE;
  RCC_CR |= RCC_CR_PLLON;
  PWR_CR5 &= ~PWR_CR5_R1MODE;
  FLASH_ACR = (FLASH_ACR & ~FLASH_ACR_LATENCY_MASK) | FLASH_ACR_LATENCY_120MHZ;
  while ((FLASH_ACR & FLASH_ACR_LATENCY_MASK) != FLASH_ACR_LATENCY_120MHZ) {
  }
  while ((RCC_CR & RCC_CR_PLLRDY) == 0u) {
  }
  RCC_CFGR = (RCC_CFGR & ~RCC_CFGR_HPRE_MASK) | RCC_CFGR_HPRE_DIV2;
  switch_to(RCC_CFGR_SW_PLL);
  for (volatile uint32_t i = 0u; i < AHB_SETTLE_LOOPS; ++i) {
  }
  RCC_CFGR &= ~RCC_CFGR_HPRE_MASK;
#endif
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
  uart_clocks_init(); /* PWR's clock too, which the boost mode needs */
  clock_init();
  mtvg_st_usart_init();
  mtvg_dwt_start();
}
