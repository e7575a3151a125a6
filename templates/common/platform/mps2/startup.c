/*
 * microtvm-gen board port for QEMU's Arm MPS2/MPS3 machines: reset and exception entry.
 *
 * - The vector table (section .vectors, placed first in flash by linker.ld; the TrustZone
 *   images boot in the secure state with the secure VTOR pointing at that address).
 * - Reset_Handler: copy .data, zero .bss, run the .preinit_array/.init_array constructors,
 *   call main() and hand its return value to mtvg_platform_exit(). On cores with an FPU
 *   (and MVE) it first grants access to it: hard-float code uses it from the first call.
 * - External interrupts go to one dispatcher: UART0's lines wake the link, any other is fatal.
 * - Every other exception except SysTick is fatal: it is reported on the semihosting
 *   console and QEMU is ended with status MTVG_FAULT_EXIT_BASE + exception number
 *   (HardFault -> 131), so a crashed program never hangs the host.
 *
 * Written for the ARMv7-M/ARMv8-M mainline exception model; the image-specific numbers are
 * in mps2_hw.h.
 */
#include <stddef.h>
#include <stdint.h>

#include "mps2_hw.h"
#include "mtvg/platform.h"

/* Exit status of a fatal exception: this base plus the exception number (IPSR). */
#ifndef MTVG_FAULT_EXIT_BASE
#define MTVG_FAULT_EXIT_BASE MTVG_EXIT_FAULT_BASE /* mtvg/status.h */
#endif

/* Private stack the fault reporter switches to, so a stack overflow can still be reported. */
#ifndef MTVG_FAULT_STACK_SIZE
#define MTVG_FAULT_STACK_SIZE 512
#endif

/* Size of the text buffer the fault report is formatted into. */
#define MTVG_FAULT_MSG_SIZE 192

/* Words the core pushes on exception entry: r0-r3, r12, lr, pc, xpsr. */
#define MTVG_FRAME_WORDS 8u
#define MTVG_FRAME_LR 5u
#define MTVG_FRAME_PC 6u
#define MTVG_FRAME_XPSR 7u

#define MTVG_NUM_SYSTEM_VECTORS 16u /* initial SP + 15 system exception slots */
#define MTVG_NUM_VECTORS (MTVG_NUM_SYSTEM_VECTORS + MTVG_MPS2_NUM_IRQS)
#define MTVG_IPSR_MASK 0x1FFu

#define MTVG_STRINGIFY_(x) #x
#define MTVG_STRINGIFY(x) MTVG_STRINGIFY_(x)

/* Symbols defined by linker.ld. */
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
void mtvg_mps2_fault_entry(void) __attribute__((naked, noreturn));
void mtvg_mps2_fault_report(const uint32_t* frame, uint32_t ipsr, uint32_t exc_return)
    __attribute__((noreturn, used));
void mtvg_mps2_irq(void);

/* One vector table slot: the initial stack pointer or a handler address. */
typedef union {
  void* stack_top;
  void (*handler)(void);
} mtvg_vector;

/* Fault reporter stack; referenced by name from the assembly in mtvg_mps2_fault_entry. */
uint8_t mtvg_mps2_fault_stack[MTVG_FAULT_STACK_SIZE] __attribute__((aligned(8), used));

#define MTVG_FATAL {.handler = mtvg_mps2_fault_entry}
#define MTVG_IRQ {.handler = mtvg_mps2_irq}
#define MTVG_IRQ8 MTVG_IRQ, MTVG_IRQ, MTVG_IRQ, MTVG_IRQ, MTVG_IRQ, MTVG_IRQ, MTVG_IRQ, MTVG_IRQ
#define MTVG_IRQ32 MTVG_IRQ8, MTVG_IRQ8, MTVG_IRQ8, MTVG_IRQ8

/* Every external interrupt line enters the dispatcher; the table covers 32 or 96 lines. */
#if MTVG_MPS2_NUM_IRQS == 32u
#define MTVG_IRQ_VECTORS MTVG_IRQ32
#elif MTVG_MPS2_NUM_IRQS == 96u
#define MTVG_IRQ_VECTORS MTVG_IRQ32, MTVG_IRQ32, MTVG_IRQ32
#else
#error "MTVG_MPS2_NUM_IRQS: the vector table is spelled out for 32 or 96 lines"
#endif

__attribute__((section(".vectors"), used)) const mtvg_vector mtvg_mps2_vectors[MTVG_NUM_VECTORS] = {
    [0] = {.stack_top = __stack_top__},
    [MTVG_EXC_RESET] = {.handler = Reset_Handler},
    [MTVG_EXC_NMI] = MTVG_FATAL,
    [MTVG_EXC_HARDFAULT] = MTVG_FATAL,
    [MTVG_EXC_MEMMANAGE] = MTVG_FATAL,
    [MTVG_EXC_BUSFAULT] = MTVG_FATAL,
    [MTVG_EXC_USAGEFAULT] = MTVG_FATAL,
    [7] = MTVG_FATAL, /* reserved slots 7-10 */
    [8] = MTVG_FATAL,
    [9] = MTVG_FATAL,
    [10] = MTVG_FATAL,
    [MTVG_EXC_SVCALL] = MTVG_FATAL,
    [MTVG_EXC_DEBUGMON] = MTVG_FATAL,
    [13] = MTVG_FATAL, /* reserved */
    [MTVG_EXC_PENDSV] = MTVG_FATAL,
    [MTVG_EXC_SYSTICK] = {.handler = SysTick_Handler},
    MTVG_IRQ_VECTORS,
};

static void run_init_array(const mtvg_init_fn* begin, const mtvg_init_fn* end) {
  for (const mtvg_init_fn* fn = begin; fn < end; ++fn) {
    (*fn)();
  }
}

void Reset_Handler(void) {
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
  /* Hard-float code may use the FPU (and MVE) anywhere after this: enable it first. */
  MTVG_SCB_CPACR |= MTVG_SCB_CPACR_CP10_CP11_FULL;
  __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
  /* QEMU starts with VTOR at the table already; set it anyway so the table may move. */
  MTVG_SCB_VTOR = (uint32_t)(uintptr_t)mtvg_mps2_vectors;

  const uint32_t* src = __data_load__;
  for (uint32_t* dst = __data_start__; dst < __data_end__; ++dst, ++src) {
    *dst = *src;
  }
  for (uint32_t* dst = __bss_start__; dst < __bss_end__; ++dst) {
    *dst = 0u;
  }

  /* C++/constructor support without newlib's __libc_init_array (which needs crti's _init). */
  run_init_array(__preinit_array_start, __preinit_array_end);
  run_init_array(__init_array_start, __init_array_end);

  mtvg_platform_exit(main());
}

/*
 * Common entry of every fatal exception. Naked and stack-free until it has switched to
 * the private fault stack: r0 = the stacked exception frame (MSP or PSP, chosen by
 * EXC_RETURN bit 2), r1 = IPSR (exception number), r2 = EXC_RETURN.
 */
void mtvg_mps2_fault_entry(void) {
  __asm__ volatile(
      "tst   lr, #4\n\t"
      "ite   eq\n\t"
      "mrseq r0, msp\n\t"
      "mrsne r0, psp\n\t"
      "mrs   r1, ipsr\n\t"
      "mov   r2, lr\n\t"
      "movw  r3, #:lower16:(mtvg_mps2_fault_stack + " MTVG_STRINGIFY(MTVG_FAULT_STACK_SIZE) ")\n\t"
      "movt  r3, #:upper16:(mtvg_mps2_fault_stack + " MTVG_STRINGIFY(MTVG_FAULT_STACK_SIZE) ")\n\t"
      "msr   msp, r3\n\t"
      "b     mtvg_mps2_fault_report\n\t");
}

/*
 * External interrupts: UART0's lines are the link's wake-up (see mtvg_link_read); any other
 * line was never enabled, so it is reported as fatal like an unexpected exception.
 */
void mtvg_mps2_irq(void) {
  uint32_t ipsr;
  __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
  uint32_t irq = (ipsr & MTVG_IPSR_MASK) - MTVG_EXC_FIRST_IRQ;
  if (irq == MTVG_MPS2_UART0_IRQ_A || irq == MTVG_MPS2_UART0_IRQ_B) {
    mtvg_mps2_uart0_irq();
    return;
  }
  mtvg_mps2_fault_report(NULL, ipsr, 0u);
}

static const char* exception_name(uint32_t exc) {
  switch (exc) {
    case MTVG_EXC_NMI:
      return "NMI";
    case MTVG_EXC_HARDFAULT:
      return "HardFault";
    case MTVG_EXC_MEMMANAGE:
      return "MemManage";
    case MTVG_EXC_BUSFAULT:
      return "BusFault";
    case MTVG_EXC_USAGEFAULT:
      return "UsageFault";
    case MTVG_EXC_SVCALL:
      return "SVCall";
    case MTVG_EXC_DEBUGMON:
      return "DebugMonitor";
    case MTVG_EXC_PENDSV:
      return "PendSV";
    default:
      return exc >= MTVG_EXC_FIRST_IRQ ? "unexpected IRQ" : "reserved exception";
  }
}

/* Tiny bounded string builder for the report (no printf: the C library may be the culprit). */
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
  char buf[kHexDigits + 4];
  buf[0] = '0';
  buf[1] = 'x';
  for (int i = 0; i < kHexDigits; ++i) {
    buf[2 + i] = kDigits[(value >> (4 * (kHexDigits - 1 - i))) & 0xFu];
  }
  buf[2 + kHexDigits] = '\0';
  msg_put(m, label);
  msg_put(m, buf);
}

static void msg_dec(mtvg_msg* m, uint32_t value) {
  enum { kMaxDigits = 10 };
  char buf[kMaxDigits + 1];
  size_t pos = kMaxDigits;
  buf[pos] = '\0';
  do {
    buf[--pos] = (char)('0' + value % 10u);
    value /= 10u;
  } while (value != 0u && pos > 0u);
  msg_put(m, &buf[pos]);
}

static int frame_is_readable(const uint32_t* frame) {
  uintptr_t addr = (uintptr_t)frame;
  return (addr & 3u) == 0u && addr >= (uintptr_t)__ram_start__ &&
         addr + MTVG_FRAME_WORDS * sizeof(uint32_t) <= (uintptr_t)__ram_end__;
}

void mtvg_mps2_fault_report(const uint32_t* frame, uint32_t ipsr, uint32_t exc_return) {
  static mtvg_msg msg;
  uint32_t exc = ipsr & MTVG_IPSR_MASK;

  msg.len = 0u;
  msg_put(&msg, "mtvg: fatal exception ");
  msg_dec(&msg, exc);
  msg_put(&msg, " (");
  msg_put(&msg, exception_name(exc));
  msg_put(&msg, ")");
  if (frame == NULL) {
    /* an unexpected interrupt, reported by the dispatcher: no frame to show */
  } else if (frame_is_readable(frame)) {
    msg_hex(&msg, " pc=", frame[MTVG_FRAME_PC]);
    msg_hex(&msg, " lr=", frame[MTVG_FRAME_LR]);
    msg_hex(&msg, " xpsr=", frame[MTVG_FRAME_XPSR]);
  } else {
    msg_hex(&msg, " bad sp=", (uint32_t)(uintptr_t)frame);
  }
  msg_hex(&msg, " exc_return=", exc_return);
  msg_hex(&msg, " cfsr=", MTVG_SCB_CFSR);
  msg_hex(&msg, " hfsr=", MTVG_SCB_HFSR);
  msg_hex(&msg, " mmfar=", MTVG_SCB_MMFAR);
  msg_hex(&msg, " bfar=", MTVG_SCB_BFAR);
  msg_put(&msg, "\n");
  mtvg_semihost_puts(msg.text);

  mtvg_platform_exit(MTVG_FAULT_EXIT_BASE + (int)exc);
}
