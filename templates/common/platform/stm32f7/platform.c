/*
 * microtvm-gen board port stm32f7 (STM32F746ZG on a NUCLEO-F746ZG): mtvg/platform.h.
 *
 *   clock  216 MHz, the chip's rated speed (MTVG_CPU_HZ, the board file's clock_hz): the
 *          PLL from the HSI (16 MHz / M 8 * N 216 / P 2; Q 9 gives 48 MHz), voltage scale 1
 *          with over-drive, 7 flash wait states with the ART accelerator and prefetch,
 *          APB1 at /4 (54 MHz) and APB2 at /2 (108 MHz), then the L1 instruction and data
 *          caches on. Built with MTVG_RESET_CLOCK=1 it stays on the reset clock instead
 *          (HSI, 16 MHz, no PLL, no wait state, caches off).
 *   link   USART3 on PD8 (TX) / PD9 (RX), alternate function 7: the ST-LINK virtual COM
 *          port of the Nucleo-144. Kernel clock HSI (RCC_DCKCFGR2.USART3SEL), so the baud
 *          rate does not follow the CPU clock. 8N1 at MTVG_UART_BAUD; reception by
 *          interrupt into a ring (the st_usart and cortex_m_board layers).
 *   timer  DWT CYCCNT (CPU cycles) extended to 64 bits; SysTick wraps keep it up to date
 *          (cortex_m_dwt).
 *   exit   flush, store the status in mtvg_exit_status, stay in a loop (cortex_m_board).
 *
 * Register facts from ST's RM0385 (STM32F75xxx and STM32F74xxx reference manual) and the
 * datasheet's wait-state table; cache maintenance from the Cortex-M7 Technical Reference
 * Manual (L1 data cache: 4 ways, 32-byte lines).
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

/* ---- RCC, PWR, FLASH ----------------------------------------------------------------- */

#define RCC_BASE 0x40023800u
#define RCC_CR MTVG_REG32(RCC_BASE + 0x00u)
#define RCC_PLLCFGR MTVG_REG32(RCC_BASE + 0x04u)
#define RCC_CFGR MTVG_REG32(RCC_BASE + 0x08u)
#define RCC_AHB1ENR MTVG_REG32(RCC_BASE + 0x30u)
#define RCC_APB1ENR MTVG_REG32(RCC_BASE + 0x40u)
#define RCC_DCKCFGR2 MTVG_REG32(RCC_BASE + 0x90u)
#define RCC_CR_HSION (1u << 0)
#define RCC_CR_HSIRDY (1u << 1)
#define RCC_CR_PLLON (1u << 24)
#define RCC_CR_PLLRDY (1u << 25)
/* PLLCFGR: PLLM[5:0], PLLN[14:6], PLLP[17:16] (0 = /2), PLLSRC bit 22 (0 = HSI), PLLQ[27:24] */
#define PLL_M 8u
#define PLL_N 216u
#define PLL_P_DIV2 0u
#define PLL_Q 9u
#define RCC_PLLCFGR_VALUE \
  (PLL_M | (PLL_N << 6) | (PLL_P_DIV2 << 16) | (PLL_Q << 24)) /* PLLSRC = HSI */
#define RCC_CFGR_SW_MASK 0x3u
#define RCC_CFGR_SW_PLL 0x2u
#define RCC_CFGR_SWS_SHIFT 2u
#define RCC_CFGR_PPRE1_DIV4 (0x5u << 10)
#define RCC_CFGR_PPRE2_DIV2 (0x4u << 13)
#define RCC_CFGR_PPRE_MASK ((0x7u << 10) | (0x7u << 13))
#define RCC_AHB1ENR_GPIODEN (1u << 3)
#define RCC_APB1ENR_USART3EN (1u << 18)
#define RCC_APB1ENR_PWREN (1u << 28)
#define RCC_DCKCFGR2_USART3SEL_MASK (0x3u << 4)
#define RCC_DCKCFGR2_USART3SEL_HSI (0x2u << 4)

#define PWR_BASE 0x40007000u
#define PWR_CR1 MTVG_REG32(PWR_BASE + 0x00u)
#define PWR_CSR1 MTVG_REG32(PWR_BASE + 0x04u)
#define PWR_CR1_VOS_SCALE1 (0x3u << 14)
#define PWR_CR1_ODEN (1u << 16)
#define PWR_CR1_ODSWEN (1u << 17)
#define PWR_CSR1_ODRDY (1u << 16)
#define PWR_CSR1_ODSWRDY (1u << 17)

#define FLASH_ACR MTVG_REG32(0x40023C00u)
#define FLASH_ACR_LATENCY_MASK 0xFu
#define FLASH_ACR_LATENCY_216MHZ 7u /* 2.7-3.6 V: 7 wait states above 210 MHz */
#define FLASH_ACR_PRFTEN (1u << 8)
#define FLASH_ACR_ARTEN (1u << 9)

/* ---- Cortex-M7 L1 caches ---------------------------------------------------------------- */

#define SCB_CCR MTVG_REG32(0xE000ED14u)
#define SCB_CCSIDR MTVG_REG32(0xE000ED80u)
#define SCB_CSSELR MTVG_REG32(0xE000ED84u)
#define SCB_ICIALLU MTVG_REG32(0xE000EF50u)
#define SCB_DCISW MTVG_REG32(0xE000EF60u)
#define SCB_CCR_DC (1u << 16)
#define SCB_CCR_IC (1u << 17)
#define CCSIDR_SETS(x) ((((x) >> 13) & 0x7FFFu) + 1u)
#define CCSIDR_WAYS(x) ((((x) >> 3) & 0x3FFu) + 1u)
#define DCISW_WAY_SHIFT 30u /* 4 ways */
#define DCISW_SET_SHIFT 5u  /* 32-byte lines */

#if MTVG_CPU_HZ == MTVG_PLL_HZ
static void barrier(void) { __asm__ volatile("dsb\n\tisb" ::: "memory"); }

static void caches_on(void) {
  SCB_ICIALLU = 0u; /* invalidate the whole instruction cache */
  barrier();
  SCB_CCR |= SCB_CCR_IC;
  barrier();
  SCB_CSSELR = 0u; /* level 1 data cache */
  barrier();
  uint32_t ccsidr = SCB_CCSIDR;
  for (uint32_t set = 0u; set < CCSIDR_SETS(ccsidr); ++set) {
    for (uint32_t way = 0u; way < CCSIDR_WAYS(ccsidr); ++way) {
      SCB_DCISW = (way << DCISW_WAY_SHIFT) | (set << DCISW_SET_SHIFT);
    }
  }
  barrier();
  SCB_CCR |= SCB_CCR_DC;
  barrier();
}

/* HSI -> PLL at 216 MHz with over-drive and 7 wait states (RM0385, "Entering Over-drive
 * mode" and the reset and clock control chapter). */
static void clock_init(void) {
  RCC_CR |= RCC_CR_HSION;
  while ((RCC_CR & RCC_CR_HSIRDY) == 0u) {
  }
  RCC_APB1ENR |= RCC_APB1ENR_PWREN;
  (void)RCC_APB1ENR;
  PWR_CR1 |= PWR_CR1_VOS_SCALE1; /* the reset value: scale 1 */
  RCC_PLLCFGR = RCC_PLLCFGR_VALUE;
  RCC_CR |= RCC_CR_PLLON;
  PWR_CR1 |= PWR_CR1_ODEN;
  while ((PWR_CSR1 & PWR_CSR1_ODRDY) == 0u) {
  }
  PWR_CR1 |= PWR_CR1_ODSWEN;
  while ((PWR_CSR1 & PWR_CSR1_ODSWRDY) == 0u) {
  }
  FLASH_ACR = (FLASH_ACR & ~FLASH_ACR_LATENCY_MASK) | FLASH_ACR_LATENCY_216MHZ |
              FLASH_ACR_PRFTEN | FLASH_ACR_ARTEN;
  while ((FLASH_ACR & FLASH_ACR_LATENCY_MASK) != FLASH_ACR_LATENCY_216MHZ) {
  }
  RCC_CFGR = (RCC_CFGR & ~RCC_CFGR_PPRE_MASK) | RCC_CFGR_PPRE1_DIV4 | RCC_CFGR_PPRE2_DIV2;
  while ((RCC_CR & RCC_CR_PLLRDY) == 0u) {
  }
  RCC_CFGR = (RCC_CFGR & ~RCC_CFGR_SW_MASK) | RCC_CFGR_SW_PLL;
  while (((RCC_CFGR >> RCC_CFGR_SWS_SHIFT) & RCC_CFGR_SW_MASK) != RCC_CFGR_SW_PLL) {
  }
  caches_on();
}
#endif

void mtvg_platform_init(void) {
#if MTVG_CPU_HZ == MTVG_PLL_HZ
  clock_init();
#endif
  RCC_AHB1ENR |= RCC_AHB1ENR_GPIODEN;
  RCC_DCKCFGR2 = (RCC_DCKCFGR2 & ~RCC_DCKCFGR2_USART3SEL_MASK) | RCC_DCKCFGR2_USART3SEL_HSI;
  RCC_APB1ENR |= RCC_APB1ENR_USART3EN;
  (void)RCC_APB1ENR; /* the clock is on after this read-back */
  mtvg_st_usart_init();
  mtvg_dwt_start();
}
