/*
 * microtvm-gen board port for QEMU's RISC-V `virt` machine: reset and trap entry.
 *
 * - _start (first in flash, where QEMU's -bios none boot jumps): global pointer, stack
 *   pointer and the trap vector, then mtvg_riscv_reset().
 * - mtvg_riscv_reset: copy .data and the thread-local template (.tdata), zero .bss and
 *   .tbss, point tp at the thread-local block (picolibc keeps errno there), run the
 *   constructors, call main() and hand its return value to mtvg_platform_exit().
 * - Every trap is fatal (the port never enables one): it is reported on the semihosting
 *   console and QEMU ends with status MTVG_FAULT_EXIT_BASE + the exception code (illegal
 *   instruction -> 130, load access fault -> 133), so a crashed program never hangs the host.
 */
#include <stddef.h>
#include <stdint.h>

#include "fault_report.h"
#include "mtvg/platform.h"
#include "port.h"
#include "semihost.h"

#define MTVG_FAULT_MSG_SIZE 160
#define MTVG_MCAUSE_CODE_MASK 0x3Fu
#define MTVG_MCAUSE_INTERRUPT (1u << 31)

/* Symbols defined by linker.ld. */
extern uint32_t __data_start__[];
extern uint32_t __data_end__[];
extern const uint32_t __data_load__[];
extern uint32_t __bss_start__[];
extern uint32_t __bss_end__[];
extern uint32_t __tdata_start__[];
extern uint32_t __tdata_end__[];
extern const uint32_t __tdata_load__[];
extern uint32_t __tbss_start__[];
extern uint32_t __tbss_end__[];

typedef void (*mtvg_init_fn)(void);
extern const mtvg_init_fn __preinit_array_start[];
extern const mtvg_init_fn __preinit_array_end[];
extern const mtvg_init_fn __init_array_start[];
extern const mtvg_init_fn __init_array_end[];

extern int main(void);

void _start(void) __attribute__((naked, noreturn, section(".text.start")));
void mtvg_riscv_reset(void) __attribute__((noreturn, used));
void mtvg_riscv_trap_entry(void) __attribute__((naked, noreturn, aligned(4)));
void mtvg_riscv_fault_report(uint32_t mcause, uint32_t mepc, uint32_t mtval)
    __attribute__((noreturn, used));

void _start(void) {
  __asm__ volatile(
      ".option push\n\t"
      ".option norelax\n\t"
      "la gp, __global_pointer$\n\t"
      ".option pop\n\t"
      "la sp, __stack_top__\n\t"
      "la t0, mtvg_riscv_trap_entry\n\t"
      ".option push\n\t"
      ".option arch, +zicsr\n\t"
      "csrw mtvec, t0\n\t"
      ".option pop\n\t"
      "j mtvg_riscv_reset\n\t");
}

static void copy_words(uint32_t* dst, uint32_t* end, const uint32_t* src) {
  for (; dst < end; ++dst, ++src) {
    *dst = *src;
  }
}

static void zero_words(uint32_t* dst, uint32_t* end) {
  for (; dst < end; ++dst) {
    *dst = 0u;
  }
}

static void run_init_array(const mtvg_init_fn* begin, const mtvg_init_fn* end) {
  for (const mtvg_init_fn* fn = begin; fn < end; ++fn) {
    (*fn)();
  }
}

void mtvg_riscv_reset(void) {
  copy_words(__data_start__, __data_end__, __data_load__);
  zero_words(__bss_start__, __bss_end__);
  copy_words(__tdata_start__, __tdata_end__, __tdata_load__);
  zero_words(__tbss_start__, __tbss_end__);
  /* RISC-V TLS (variant I, no TCB offset): tp points at the start of the block. */
  __asm__ volatile("mv tp, %0" ::"r"(__tdata_start__) : "memory");
  run_init_array(__preinit_array_start, __preinit_array_end);
  run_init_array(__init_array_start, __init_array_end);
  mtvg_platform_exit(main());
}

/* Switch to the fault stack, then report a0 = mcause, a1 = mepc, a2 = mtval. */
void mtvg_riscv_trap_entry(void) {
  __asm__ volatile(
      "la sp, " MTVG_FAULT_STACK_TOP_ASM "\n\t"
      ".option push\n\t"
      ".option arch, +zicsr\n\t"
      "csrr a0, mcause\n\t"
      "csrr a1, mepc\n\t"
      "csrr a2, mtval\n\t"
      ".option pop\n\t"
      "j mtvg_riscv_fault_report\n\t");
}

static const char* cause_name(uint32_t mcause) {
  if ((mcause & MTVG_MCAUSE_INTERRUPT) != 0u) {
    return "unexpected interrupt";
  }
  switch (mcause & MTVG_MCAUSE_CODE_MASK) {
    case 0u:
      return "instruction address misaligned";
    case 1u:
      return "instruction access fault";
    case 2u:
      return "illegal instruction";
    case 3u:
      return "breakpoint";
    case 4u:
      return "load address misaligned";
    case 5u:
      return "load access fault";
    case 6u:
      return "store address misaligned";
    case 7u:
      return "store access fault";
    case 11u:
      return "environment call";
    default:
      return "exception";
  }
}

void mtvg_riscv_fault_report(uint32_t mcause, uint32_t mepc, uint32_t mtval) {
  static char text[MTVG_FAULT_MSG_SIZE];
  mtvg_fault_msg msg = {text, sizeof(text), 0u};
  mtvg_fault_put(&msg, "mtvg: fatal trap (");
  mtvg_fault_put(&msg, cause_name(mcause));
  mtvg_fault_put(&msg, ")");
  mtvg_fault_hex(&msg, " mcause=", mcause);
  mtvg_fault_hex(&msg, " mepc=", mepc);
  mtvg_fault_hex(&msg, " mtval=", mtval);
  mtvg_fault_put(&msg, "\n");
  mtvg_semihost_puts(msg.text);
  mtvg_platform_exit(MTVG_FAULT_EXIT_BASE + (int)(mcause & MTVG_MCAUSE_CODE_MASK));
}
