/*
 * microtvm-gen board port for QEMU's Arm MPS2/MPS3 machines (CMSDK UART, SysTick, semihosting):
 * the facts its files and the shared layers share. Not part of the runtime interface (that
 * is mtvg/platform.h); the System Control Space is in mtvg/port_cortex_m.h.
 *
 * Addresses come from the FPGA images' application notes (AN385, AN386, AN500, AN505, AN547)
 * as QEMU models them.
 */
#ifndef MTVG_MPS2_PORT_H_
#define MTVG_MPS2_PORT_H_

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

/* Processor clock of the FPGA image as QEMU models it (the board file passes it too). */
#ifndef MTVG_CPU_HZ
#define MTVG_CPU_HZ MTVG_MPS2_DEFAULT_CPU_HZ
#endif

/* ---- The vector table (cortex_m) ------------------------------------------------------ */
/*
 * Every system exception but reset and SysTick is fatal: the qemu_m layer's exceptions.c
 * reports it on the semihosting console and ends QEMU with MTVG_FAULT_EXIT_BASE + its
 * number. SysTick counts the timer's wraps (qemu_m's systick_timer.c). External interrupts
 * go to one dispatcher (exceptions.c): UART0's lines wake the link, any other is fatal.
 */
#define MTVG_PORT_NUM_IRQS MTVG_MPS2_NUM_IRQS
#define MTVG_PORT_FAULT_HANDLER mtvg_qemu_m_fault_entry
#define MTVG_PORT_SYSTICK_HANDLER SysTick_Handler
#define MTVG_PORT_IRQ_HANDLER mtvg_qemu_m_irq
/* The UART's lines (qemu_m's dispatcher hands them to mtvg_port_uart_irq in platform.c). */
#define MTVG_PORT_UART_IRQ_A MTVG_MPS2_UART0_IRQ_A
#define MTVG_PORT_UART_IRQ_B MTVG_MPS2_UART0_IRQ_B

/* ---- Faults (fault_report) -------------------------------------------------------------- */

/* Bytes of the private stack the fault reporter switches to (fault_report.h). */
#ifndef MTVG_FAULT_STACK_SIZE
#define MTVG_FAULT_STACK_SIZE 512
#endif

#endif /* MTVG_MPS2_PORT_H_ */
