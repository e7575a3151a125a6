/*
 * microtvm-gen board ports under QEMU: semihosting requests (the console, exit), for the
 * ports whose port.toml names the semihost layer. Operation numbers from the ARM
 * semihosting specification; RISC-V semihosting uses the same numbers, entered through a
 * fixed slli/ebreak/srai sequence (the RISC-V semihosting specification).
 *
 * Requires QEMU's -semihosting-config enable=on: without it the trap (BKPT 0xAB, EBREAK)
 * is a debug event, a fault.
 */
#ifndef MTVG_SEMIHOST_H_
#define MTVG_SEMIHOST_H_

#include <stdint.h>

#define MTVG_SH_SYS_WRITEC 0x03u        /* parameter -> one character */
#define MTVG_SH_SYS_WRITE0 0x04u        /* parameter -> NUL-terminated string */
#define MTVG_SH_SYS_EXIT 0x18u          /* parameter = reason code (32-bit targets) */
#define MTVG_SH_SYS_EXIT_EXTENDED 0x20u /* parameter -> {reason code, subcode} */

#define MTVG_SH_ADP_STOPPED_APPLICATION_EXIT 0x20026u
#define MTVG_SH_ADP_STOPPED_RUNTIME_ERROR_UNKNOWN 0x20023u

/* One semihosting request: operation and parameter in the first two argument registers,
 * then the trap; returns what the host left in the first. */
static inline uint32_t mtvg_semihost(uint32_t op, uintptr_t arg) {
#if defined(__riscv)
  register uint32_t a0 __asm__("a0") = op;
  register uintptr_t a1 __asm__("a1") = arg;
  /* Uncompressed and inside one 16-byte block, so the sequence never straddles a page. */
  __asm__ volatile(
      ".option push\n\t"
      ".balign 16\n\t" /* aligned while compressed nops may pad: relaxation can shift by 2 */
      ".option norvc\n\t"
      "slli zero, zero, 0x1f\n\t"
      "ebreak\n\t"
      "srai zero, zero, 7\n\t"
      ".option pop"
      : "+r"(a0)
      : "r"(a1)
      : "memory");
  return a0;
#elif defined(__arm__)
  register uint32_t r0 __asm__("r0") = op;
  register uintptr_t r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory"); /* the Thumb trap */
  return r0;
#else
#error "semihost.h: semihosting is spelled out for Arm (Thumb) and RISC-V"
#endif
}

/* Write a NUL-terminated string to the semihosting console (QEMU: its stderr). */
static inline void mtvg_semihost_puts(const char* s) {
  (void)mtvg_semihost(MTVG_SH_SYS_WRITE0, (uintptr_t)s);
}

#endif /* MTVG_SEMIHOST_H_ */
