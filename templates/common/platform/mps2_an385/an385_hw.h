/*
 * microtvm-gen board port for QEMU's mps2-an385 (Cortex-M3): private definitions shared
 * by startup.c and platform.c. Not part of the runtime interface (that is mtvg/platform.h).
 *
 * Register addresses come from the ARMv7-M Architecture Reference Manual (System Control
 * Space) and the ARM CMSDK APB UART technical reference; semihosting numbers from the ARM
 * semihosting specification.
 */
#ifndef MTVG_AN385_HW_H_
#define MTVG_AN385_HW_H_

#include <stdint.h>

/* ---- Memory-mapped register access ------------------------------------------------- */

#define MTVG_REG32(addr) (*(volatile uint32_t*)(uintptr_t)(addr))

/* ---- System Control Space (ARMv7-M) -------------------------------------------------- */

#define MTVG_SYST_CSR MTVG_REG32(0xE000E010u) /* SysTick control and status */
#define MTVG_SYST_RVR MTVG_REG32(0xE000E014u) /* SysTick reload value */
#define MTVG_SYST_CVR MTVG_REG32(0xE000E018u) /* SysTick current value */

#define MTVG_SYST_CSR_ENABLE (1u << 0)
#define MTVG_SYST_CSR_TICKINT (1u << 1)
#define MTVG_SYST_CSR_CLKSOURCE (1u << 2) /* 1 = processor clock */
#define MTVG_SYST_CSR_COUNTFLAG (1u << 16)

#define MTVG_SCB_ICSR MTVG_REG32(0xE000ED04u) /* interrupt control and state */
#define MTVG_SCB_VTOR MTVG_REG32(0xE000ED08u) /* vector table offset */
#define MTVG_SCB_CFSR MTVG_REG32(0xE000ED28u) /* configurable fault status */
#define MTVG_SCB_HFSR MTVG_REG32(0xE000ED2Cu) /* hard fault status */
#define MTVG_SCB_MMFAR MTVG_REG32(0xE000ED34u) /* memmanage fault address */
#define MTVG_SCB_BFAR MTVG_REG32(0xE000ED38u) /* bus fault address */

#define MTVG_SCB_ICSR_PENDSTSET (1u << 26) /* SysTick exception is pending */
#define MTVG_NVIC_ISER0 MTVG_REG32(0xE000E100u) /* interrupt set-enable, IRQ 0-31 */
#define MTVG_SCB_ICSR_PENDSTCLR (1u << 25) /* write 1: clear a pending SysTick */

/* Exception numbers (IPSR values) of the ARMv7-M system exceptions. */
#define MTVG_EXC_RESET 1u
#define MTVG_EXC_NMI 2u
#define MTVG_EXC_HARDFAULT 3u
#define MTVG_EXC_MEMMANAGE 4u
#define MTVG_EXC_BUSFAULT 5u
#define MTVG_EXC_USAGEFAULT 6u
#define MTVG_EXC_SVCALL 11u
#define MTVG_EXC_DEBUGMON 12u
#define MTVG_EXC_PENDSV 14u
#define MTVG_EXC_SYSTICK 15u
#define MTVG_EXC_FIRST_IRQ 16u

/* Number of external interrupt lines QEMU's mps2-an385 NVIC is configured with. */
#define MTVG_AN385_NUM_IRQS 32u

/* ---- ARM semihosting ----------------------------------------------------------------- */

#define MTVG_SH_SYS_WRITEC 0x03u        /* r1 -> one character */
#define MTVG_SH_SYS_WRITE0 0x04u        /* r1 -> NUL-terminated string */
#define MTVG_SH_SYS_EXIT 0x18u          /* r1 = reason code (AArch32) */
#define MTVG_SH_SYS_EXIT_EXTENDED 0x20u /* r1 -> {reason code, subcode} */

#define MTVG_SH_ADP_STOPPED_APPLICATION_EXIT 0x20026u
#define MTVG_SH_ADP_STOPPED_RUNTIME_ERROR_UNKNOWN 0x20023u

/*
 * Issue one semihosting request: operation in r0, parameter in r1, BKPT 0xAB (the Thumb
 * semihosting trap). Returns r0. Requires QEMU's -semihosting-config enable=on; without
 * it the BKPT raises a fault instead.
 */
static inline uint32_t mtvg_semihost(uint32_t op, uintptr_t arg) {
  register uint32_t r0 __asm__("r0") = op;
  register uintptr_t r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

/* Write a NUL-terminated string to the semihosting console (QEMU: its stderr). */
static inline void mtvg_semihost_puts(const char* s) {
  (void)mtvg_semihost(MTVG_SH_SYS_WRITE0, (uintptr_t)s);
}

/* ---- Cross-file entry points ------------------------------------------------------- */

/* SysTick exception handler (platform.c); placed in the vector table by startup.c. */
void SysTick_Handler(void);

/* UART0 receive interrupt: IRQ 0 on the AN385. Its handler (platform.c) only acknowledges
 * it; the interrupt exists to wake the CPU from WFI while the link waits for a byte. */
#define MTVG_AN385_UART0_RX_IRQ 0u
void Uart0Rx_Handler(void);

#endif /* MTVG_AN385_HW_H_ */
