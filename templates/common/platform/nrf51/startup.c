/*
 * microtvm-gen board port for QEMU's `microbit` machine (nRF51822, Cortex-M0): reset and
 * exception entry.
 *
 * - The vector table (section .vectors, first in flash at 0: ARMv6-M has no VTOR here).
 * - Reset_Handler: mask interrupts for good (the port only uses the UART's to end WFI), copy
 *   .data, zero .bss, run the constructors, call main() and hand its return value to
 *   mtvg_platform_exit().
 * - Every other exception is fatal: reported on the semihosting console, then QEMU exits
 *   with status MTVG_FAULT_EXIT_BASE + exception number (HardFault -> 131).
 */
#include <stddef.h>
#include <stdint.h>

#include "mtvg/platform.h"
#include "nrf51_hw.h"

#ifndef MTVG_FAULT_EXIT_BASE
#define MTVG_FAULT_EXIT_BASE MTVG_EXIT_FAULT_BASE /* mtvg/status.h */
#endif

/* Private stack the fault reporter switches to, so a stack overflow can still be reported. */
#ifndef MTVG_FAULT_STACK_SIZE
#define MTVG_FAULT_STACK_SIZE 256
#endif

#define MTVG_FAULT_MSG_SIZE 128
#define MTVG_FRAME_WORDS 8u /* r0-r3, r12, lr, pc, xpsr */
#define MTVG_FRAME_LR 5u
#define MTVG_FRAME_PC 6u
#define MTVG_FRAME_XPSR 7u
#define MTVG_IPSR_MASK 0x3Fu
#define MTVG_NUM_VECTORS (16u + MTVG_NRF51_NUM_IRQS)

extern uint32_t __data_start__[];
extern uint32_t __data_end__[];
extern const uint32_t __data_load__[];
extern uint32_t __bss_start__[];
extern uint32_t __bss_end__[];
extern uint32_t __stack_top__[];
extern uint8_t __ram_start__[];
extern uint8_t __ram_end__[];

typedef void (*mtvg_init_fn)(void);
extern const mtvg_init_fn __preinit_array_start[];
extern const mtvg_init_fn __preinit_array_end[];
extern const mtvg_init_fn __init_array_start[];
extern const mtvg_init_fn __init_array_end[];

extern int main(void);

void Reset_Handler(void) __attribute__((noreturn));
void mtvg_nrf51_fault_entry(void) __attribute__((naked, noreturn));
void mtvg_nrf51_fault_report(const uint32_t* frame, uint32_t ipsr)
    __attribute__((noreturn, used));

typedef union {
  void* stack_top;
  void (*handler)(void);
} mtvg_vector;

/* The fault reporter's stack; its end is loaded by the assembly in mtvg_nrf51_fault_entry. */
uint8_t mtvg_nrf51_fault_stack[MTVG_FAULT_STACK_SIZE] __attribute__((aligned(8), used));
uint8_t* const mtvg_nrf51_fault_stack_top = mtvg_nrf51_fault_stack + MTVG_FAULT_STACK_SIZE;

#define MTVG_FATAL {.handler = mtvg_nrf51_fault_entry}
#define MTVG_FATAL4 MTVG_FATAL, MTVG_FATAL, MTVG_FATAL, MTVG_FATAL
#define MTVG_FATAL16 MTVG_FATAL4, MTVG_FATAL4, MTVG_FATAL4, MTVG_FATAL4

/* Every slot but the first two is fatal: no interrupt is ever taken (PRIMASK stays set). */
__attribute__((section(".vectors"), used)) const mtvg_vector mtvg_nrf51_vectors[MTVG_NUM_VECTORS] = {
    {.stack_top = __stack_top__},
    {.handler = Reset_Handler},
    MTVG_FATAL, MTVG_FATAL, MTVG_FATAL4, MTVG_FATAL4, MTVG_FATAL4, /* system exceptions 2-15 */
    MTVG_FATAL16, MTVG_FATAL16,                                     /* IRQ 0-31 */
};

static void run_init_array(const mtvg_init_fn* begin, const mtvg_init_fn* end) {
  for (const mtvg_init_fn* fn = begin; fn < end; ++fn) {
    (*fn)();
  }
}

void Reset_Handler(void) {
  __asm__ volatile("cpsid i" ::: "memory");
  const uint32_t* src = __data_load__;
  for (uint32_t* dst = __data_start__; dst < __data_end__; ++dst, ++src) {
    *dst = *src;
  }
  for (uint32_t* dst = __bss_start__; dst < __bss_end__; ++dst) {
    *dst = 0u;
  }
  run_init_array(__preinit_array_start, __preinit_array_end);
  run_init_array(__init_array_start, __init_array_end);
  mtvg_platform_exit(main());
}

/* r0 = the stacked frame (only MSP is used), r1 = IPSR; then the private stack. Thumb-1. */
void mtvg_nrf51_fault_entry(void) {
  __asm__ volatile(
      "mrs  r0, msp\n\t"
      "mrs  r1, ipsr\n\t"
      "ldr  r3, 1f\n\t"
      "ldr  r3, [r3]\n\t"
      "mov  sp, r3\n\t"
      "ldr  r3, 2f\n\t"
      "bx   r3\n\t"
      ".balign 4\n"
      "1: .word mtvg_nrf51_fault_stack_top\n"
      "2: .word mtvg_nrf51_fault_report\n\t");
}

static const char* exception_name(uint32_t exc) {
  switch (exc) {
    case MTVG_EXC_NMI:
      return "NMI";
    case MTVG_EXC_HARDFAULT:
      return "HardFault";
    case MTVG_EXC_SVCALL:
      return "SVCall";
    case MTVG_EXC_PENDSV:
      return "PendSV";
    case MTVG_EXC_SYSTICK:
      return "SysTick";
    default:
      return exc >= MTVG_EXC_FIRST_IRQ ? "unexpected IRQ" : "reserved exception";
  }
}

typedef struct {
  char text[MTVG_FAULT_MSG_SIZE];
  size_t len;
} mtvg_msg;

static void msg_put(mtvg_msg* m, const char* s) {
  while (*s != '\0' && m->len + 1u < sizeof(m->text)) {
    m->text[m->len++] = *s++;
  }
  m->text[m->len] = '\0';
}

static void msg_hex(mtvg_msg* m, const char* label, uint32_t value) {
  static const char kDigits[] = "0123456789abcdef";
  enum { kHexDigits = 8 };
  char buf[kHexDigits + 3];
  buf[0] = '0';
  buf[1] = 'x';
  for (int i = 0; i < kHexDigits; ++i) {
    buf[2 + i] = kDigits[(value >> (4 * (kHexDigits - 1 - i))) & 0xFu];
  }
  buf[2 + kHexDigits] = '\0';
  msg_put(m, label);
  msg_put(m, buf);
}

static int frame_is_readable(const uint32_t* frame) {
  uintptr_t addr = (uintptr_t)frame;
  return (addr & 3u) == 0u && addr >= (uintptr_t)__ram_start__ &&
         addr + MTVG_FRAME_WORDS * sizeof(uint32_t) <= (uintptr_t)__ram_end__;
}

void mtvg_nrf51_fault_report(const uint32_t* frame, uint32_t ipsr) {
  static mtvg_msg msg;
  uint32_t exc = ipsr & MTVG_IPSR_MASK;
  msg.len = 0u;
  msg_put(&msg, "mtvg: fatal exception (");
  msg_put(&msg, exception_name(exc));
  msg_put(&msg, ")");
  msg_hex(&msg, " ipsr=", exc);
  if (frame_is_readable(frame)) {
    msg_hex(&msg, " pc=", frame[MTVG_FRAME_PC]);
    msg_hex(&msg, " lr=", frame[MTVG_FRAME_LR]);
    msg_hex(&msg, " xpsr=", frame[MTVG_FRAME_XPSR]);
  } else {
    msg_hex(&msg, " bad sp=", (uint32_t)(uintptr_t)frame);
  }
  msg_put(&msg, "\n");
  mtvg_semihost_puts(msg.text);
  mtvg_platform_exit(MTVG_FAULT_EXIT_BASE + (int)exc);
}
