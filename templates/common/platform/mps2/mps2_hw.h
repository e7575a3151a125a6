/*
 * microtvm-gen board port for QEMU's Arm MPS2/MPS3 machines (CMSDK UART, SysTick, semihosting):
 * private definitions shared by startup.c and platform.c. Not part of the runtime interface
 * (that is mtvg/platform.h).
 *
 * Register addresses come from the ARMv7-M/ARMv8-M Architecture Reference Manuals (System
 * Control Space), the ARM CMSDK APB UART technical reference and the FPGA images' application
 * notes (AN385, AN386, AN500, AN505, AN547) as QEMU models them; semihosting numbers from the
 * ARM semihosting specification.
 */
#ifndef MTVG_MPS2_HW_H_
#define MTVG_MPS2_HW_H_

#include <stdint.h>

/* ---- The FPGA image ------------------------------------------------------------------ */
/*
 * The board file selects the image with -DMTVG_MPS2_IMAGE=<application note number>. Per
 * image: UART0's base address (the secure alias on the TrustZone images, which QEMU boots in
 * the secure state), the two NVIC lines of UART0's receive and transmit interrupts (QEMU
 * versions disagree on which of the two is which; the port only enables receive interrupts
 * in the UART and takes either line), the number of external interrupt lines the table
 * covers (a multiple of 32), and the clock QEMU gives the CPU (SysTick counts it).
 */
#ifndef MTVG_MPS2_IMAGE
#define MTVG_MPS2_IMAGE 385
#endif

#if MTVG_MPS2_IMAGE == 385 || MTVG_MPS2_IMAGE == 386 || MTVG_MPS2_IMAGE == 500
/* MPS2 AN385 (Cortex-M3), AN386 (Cortex-M4), AN500 (Cortex-M7): APB UART0. */
#define MTVG_MPS2_UART0_BASE 0x40004000u
#define MTVG_MPS2_UART0_IRQ_A 0u
#define MTVG_MPS2_UART0_IRQ_B 1u
#define MTVG_MPS2_NUM_IRQS 32u
#define MTVG_MPS2_DEFAULT_CPU_HZ 25000000u
#elif MTVG_MPS2_IMAGE == 505
/* MPS2 AN505 (Cortex-M33, IoT Kit): UART0 at 0x40200000, secure alias 0x50200000. */
#define MTVG_MPS2_UART0_BASE 0x50200000u
#define MTVG_MPS2_UART0_IRQ_A 32u
#define MTVG_MPS2_UART0_IRQ_B 33u
#define MTVG_MPS2_NUM_IRQS 96u /* 92 lines, table rounded up */
#define MTVG_MPS2_DEFAULT_CPU_HZ 20000000u
#elif MTVG_MPS2_IMAGE == 547
/* MPS3 AN547 (Cortex-M55, SSE-300): UART0 at 0x49303000, secure alias 0x59303000. */
#define MTVG_MPS2_UART0_BASE 0x59303000u
#define MTVG_MPS2_UART0_IRQ_A 33u
#define MTVG_MPS2_UART0_IRQ_B 34u
#define MTVG_MPS2_NUM_IRQS 96u
#define MTVG_MPS2_DEFAULT_CPU_HZ 32000000u
#else
#error "MTVG_MPS2_IMAGE: this port knows the images 385, 386, 500, 505 and 547"
#endif

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
#define MTVG_NVIC_ISER_BASE 0xE000E100u /* interrupt set-enable, 32 IRQs per register */
#define MTVG_NVIC_ISER(irq) MTVG_REG32(MTVG_NVIC_ISER_BASE + 4u * ((irq) / 32u))
#define MTVG_NVIC_BIT(irq) (1u << ((irq) % 32u))
#define MTVG_SCB_CPACR MTVG_REG32(0xE000ED88u) /* coprocessor access control */
#define MTVG_SCB_CPACR_CP10_CP11_FULL (0xFu << 20) /* FPU (and MVE) full access */
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

/* UART0 interrupt (platform.c): only acknowledges it; the interrupt exists to wake the CPU
 * from WFI while the link waits for a byte. Called by the IRQ dispatcher in startup.c. */
void mtvg_mps2_uart0_irq(void);

#endif /* MTVG_MPS2_HW_H_ */
