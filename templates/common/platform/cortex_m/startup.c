/*
 * microtvm-gen Cortex-M ports: reset and the vector table, for every port whose port.toml
 * names the cortex_m layer. The port's port.h sizes and fills the table:
 *
 *   MTVG_PORT_NUM_IRQS         external interrupt slots (required, at most MTVG_CM_MAX_IRQS)
 *   MTVG_PORT_FAULT_HANDLER    the system exception slots but reset and SysTick
 *                              (default mtvg_cm_fault, in cortex_m_board)
 *   MTVG_PORT_SYSTICK_HANDLER  SysTick's slot (default: the fault handler)
 *   MTVG_PORT_IRQ_HANDLER      every external interrupt slot (default mtvg_cm_irq, in
 *                              cortex_m_board)
 *   MTVG_PORT_HAS_VTOR         0 on a core without VTOR (optional on ARMv6-M); default 1
 *   MTVG_PORT_MASK_IRQS        1: reset sets PRIMASK for good (the port's interrupts only end
 *                              WFI); default 0
 *
 * The table (section .vectors, which the port's linker.ld places where the core or the boot
 * ROM looks for it): initial SP, Reset_Handler, the 14 other system slots, then one slot per
 * external interrupt. Reset_Handler: the FPU (and MVE) on where the code is built for one,
 * VTOR at the table, .data, .bss and constructors, then main()'s status to
 * mtvg_platform_exit().
 */
#include <stdint.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"

/* The largest table the slot macros below spell out. */
#define MTVG_CM_MAX_IRQS 255u

#ifndef MTVG_PORT_NUM_IRQS
#error "port.h: MTVG_PORT_NUM_IRQS (the core's external interrupt slots) is missing"
#endif
#ifndef MTVG_PORT_FAULT_HANDLER
#define MTVG_PORT_FAULT_HANDLER mtvg_cm_fault
#endif
#ifndef MTVG_PORT_SYSTICK_HANDLER
#define MTVG_PORT_SYSTICK_HANDLER MTVG_PORT_FAULT_HANDLER
#endif
#ifndef MTVG_PORT_IRQ_HANDLER
#define MTVG_PORT_IRQ_HANDLER mtvg_cm_irq
#endif
#ifndef MTVG_PORT_HAS_VTOR
#define MTVG_PORT_HAS_VTOR 1
#endif
#ifndef MTVG_PORT_MASK_IRQS
#define MTVG_PORT_MASK_IRQS 0
#endif
typedef char mtvg_num_irqs_check[(MTVG_PORT_NUM_IRQS <= MTVG_CM_MAX_IRQS) ? 1 : -1];

extern int main(void);
void Reset_Handler(void) __attribute__((noreturn));
void MTVG_PORT_FAULT_HANDLER(void);
void MTVG_PORT_SYSTICK_HANDLER(void);
void MTVG_PORT_IRQ_HANDLER(void);

/* The external interrupt slots, MTVG_PORT_NUM_IRQS of them, in blocks of powers of two. */
__attribute__((section(".vectors"), used)) const mtvg_vector mtvg_vectors[] = {
    MTVG_SYSTEM_VECTORS(Reset_Handler, MTVG_PORT_FAULT_HANDLER, MTVG_PORT_SYSTICK_HANDLER),
#if (MTVG_PORT_NUM_IRQS & 128u) != 0u
    MTVG_V128(MTVG_PORT_IRQ_HANDLER),
#endif
#if (MTVG_PORT_NUM_IRQS & 64u) != 0u
    MTVG_V64(MTVG_PORT_IRQ_HANDLER),
#endif
#if (MTVG_PORT_NUM_IRQS & 32u) != 0u
    MTVG_V32(MTVG_PORT_IRQ_HANDLER),
#endif
#if (MTVG_PORT_NUM_IRQS & 16u) != 0u
    MTVG_V16(MTVG_PORT_IRQ_HANDLER),
#endif
#if (MTVG_PORT_NUM_IRQS & 8u) != 0u
    MTVG_V8(MTVG_PORT_IRQ_HANDLER),
#endif
#if (MTVG_PORT_NUM_IRQS & 4u) != 0u
    MTVG_V4(MTVG_PORT_IRQ_HANDLER),
#endif
#if (MTVG_PORT_NUM_IRQS & 2u) != 0u
    MTVG_V2(MTVG_PORT_IRQ_HANDLER),
#endif
#if (MTVG_PORT_NUM_IRQS & 1u) != 0u
    MTVG_V1(MTVG_PORT_IRQ_HANDLER),
#endif
};
typedef char mtvg_vector_count_check[sizeof(mtvg_vectors) / sizeof(mtvg_vectors[0]) ==
                                             MTVG_NUM_SYSTEM_VECTORS + MTVG_PORT_NUM_IRQS
                                         ? 1
                                         : -1];

void Reset_Handler(void) {
#if MTVG_PORT_MASK_IRQS
  __asm__ volatile("cpsid i" ::: "memory");
#endif
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
  mtvg_cm_enable_fpu(); /* before the first floating-point instruction, even in memset */
#endif
#if MTVG_PORT_HAS_VTOR
  MTVG_SCB_VTOR = (uint32_t)(uintptr_t)mtvg_vectors;
#endif
  mtvg_cm_init_memory();
  mtvg_platform_exit(main());
}
