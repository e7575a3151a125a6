/*
 * microtvm-gen board port for QEMU's RISC-V `virt` machine (RV32, machine mode): the
 * facts its files and the shared layers share. Not part of the runtime interface (that is
 * mtvg/platform.h).
 *
 * Addresses are those of QEMU's virt machine (its device tree: NS16550A UART at 0x10000000
 * on PLIC source 10, PLIC at 0x0C000000, hart 0's machine-mode context 0); register layouts
 * from the NS16550A data sheet, the RISC-V privileged specification and the SiFive PLIC
 * specification. Semihosting is the semihost layer's (semihost.h).
 */
#ifndef MTVG_RISCV_PORT_H_
#define MTVG_RISCV_PORT_H_

#include <stdint.h>

#define MTVG_REG8(addr) (*(volatile uint8_t*)(uintptr_t)(addr))
#define MTVG_REG32(addr) (*(volatile uint32_t*)(uintptr_t)(addr))

/* ---- NS16550A UART0 (registers one byte apart) -------------------------------------- */

#define MTVG_UART0_BASE 0x10000000u
#define MTVG_UART_RBR MTVG_REG8(MTVG_UART0_BASE + 0u) /* receive buffer (read, DLAB=0) */
#define MTVG_UART_THR MTVG_REG8(MTVG_UART0_BASE + 0u) /* transmit holding (write, DLAB=0) */
#define MTVG_UART_DLL MTVG_REG8(MTVG_UART0_BASE + 0u) /* divisor low (DLAB=1) */
#define MTVG_UART_IER MTVG_REG8(MTVG_UART0_BASE + 1u) /* interrupt enable (DLAB=0) */
#define MTVG_UART_DLM MTVG_REG8(MTVG_UART0_BASE + 1u) /* divisor high (DLAB=1) */
#define MTVG_UART_FCR MTVG_REG8(MTVG_UART0_BASE + 2u) /* FIFO control (write) */
#define MTVG_UART_LCR MTVG_REG8(MTVG_UART0_BASE + 3u) /* line control */
#define MTVG_UART_MCR MTVG_REG8(MTVG_UART0_BASE + 4u) /* modem control */
#define MTVG_UART_LSR MTVG_REG8(MTVG_UART0_BASE + 5u) /* line status */

#define MTVG_UART_IER_RX_AVAILABLE 0x01u
#define MTVG_UART_FCR_ENABLE_AND_CLEAR 0xC7u /* FIFOs on, both cleared, RX trigger at 14 bytes */
#define MTVG_UART_LCR_DLAB 0x80u
#define MTVG_UART_LCR_8N1 0x03u
#define MTVG_UART_MCR_DTR_RTS_OUT2 0x0Bu
#define MTVG_UART_LSR_DATA_READY 0x01u
#define MTVG_UART_LSR_THR_EMPTY 0x20u
#define MTVG_UART_LSR_TX_IDLE 0x40u /* holding register and shifter empty */
#define MTVG_UART_FIFO_BYTES 16u      /* each FIFO's depth */
#define MTVG_UART_IRQ 10u           /* its PLIC source on virt */

/* ---- PLIC ----------------------------------------------------------------------------- */

#define MTVG_PLIC_BASE 0x0C000000u
#define MTVG_PLIC_PRIORITY(src) MTVG_REG32(MTVG_PLIC_BASE + 4u * (src))
#define MTVG_PLIC_ENABLE_CTX0(src) MTVG_REG32(MTVG_PLIC_BASE + 0x2000u + 4u * ((src) / 32u))
#define MTVG_PLIC_THRESHOLD_CTX0 MTVG_REG32(MTVG_PLIC_BASE + 0x200000u)
#define MTVG_PLIC_CLAIM_CTX0 MTVG_REG32(MTVG_PLIC_BASE + 0x200004u) /* read: claim, write: complete */

/* ---- Machine-mode CSRs ---------------------------------------------------------------- */

#define MTVG_MIE_MEIE (1u << 11) /* machine external interrupt enable */

/* csrr/csrw/csrs with the Zicsr extension switched on locally (the multilib is rv32imac). */
#define MTVG_CSR_READ(csr, out) \
  __asm__ volatile(".option push\n\t.option arch, +zicsr\n\tcsrr %0, " #csr "\n\t.option pop" \
                   : "=r"(out))
#define MTVG_CSR_SET(csr, bits) \
  __asm__ volatile(".option push\n\t.option arch, +zicsr\n\tcsrs " #csr ", %0\n\t.option pop" \
                   ::"r"(bits) : "memory")

/* ---- Faults (fault_report) -------------------------------------------------------------- */

/* Bytes of the private stack the trap reporter switches to (fault_report.h). */
#ifndef MTVG_FAULT_STACK_SIZE
#define MTVG_FAULT_STACK_SIZE 512
#endif

#endif /* MTVG_RISCV_PORT_H_ */
