/*
 * microtvm-gen board ports for Cortex-M cores (QEMU's MPS2/MPS3 and micro:bit, the physical
 * boards): the parts every such port shares.
 *
 * Not part of the runtime interface (that is mtvg/platform.h): only the files of a Cortex-M
 * port and of the shared layers under templates/common/platform/ (cortex_m, cortex_m_board,
 * cortex_m_dwt, st_usart) include this header. Everything here is static inline, so each
 * port takes what it uses and nothing else is linked.
 *
 *   - System Control Space registers and exception numbers (ARMv6-M / ARMv7-M / ARMv8-M
 *     Architecture Reference Manuals);
 *   - reset-time memory set-up (.data copy, .bss zeroing, constructors) and FPU enable;
 *   - the vector table's slots;
 *   - the 32-bit DWT cycle counter extended to 64 bits (ARMv7-M only);
 *   - a bounded single-producer/single-consumer byte ring for interrupt-driven UART reception;
 *   - what a fault report reads: the stacked frame, the exception's name;
 *   - the end of a program on a board: flush, then stay in a loop (no semihosting).
 */
#ifndef MTVG_PORT_CORTEX_M_H_
#define MTVG_PORT_CORTEX_M_H_

#include <stddef.h>
#include <stdint.h>

#define MTVG_REG32(addr) (*(volatile uint32_t*)(uintptr_t)(addr))

/* ---- System Control Space ----------------------------------------------------------- */

#define MTVG_SYST_CSR MTVG_REG32(0xE000E010u) /* SysTick control and status */
#define MTVG_SYST_RVR MTVG_REG32(0xE000E014u) /* SysTick reload value */
#define MTVG_SYST_CVR MTVG_REG32(0xE000E018u) /* SysTick current value */
#define MTVG_SYST_CSR_ENABLE (1u << 0)
#define MTVG_SYST_CSR_TICKINT (1u << 1)
#define MTVG_SYST_CSR_CLKSOURCE (1u << 2) /* 1 = processor clock */
#define MTVG_SYST_RELOAD_MAX 0x00FFFFFFu   /* 24-bit counter */

#define MTVG_NVIC_ISER(n) MTVG_REG32(0xE000E100u + 4u * (n)) /* set-enable, IRQ 32n..32n+31 */
#define MTVG_NVIC_ICPR(n) MTVG_REG32(0xE000E280u + 4u * (n)) /* clear-pending, IRQ 32n.. */
#define MTVG_SCB_ICSR MTVG_REG32(0xE000ED04u)                /* interrupt control and state */
#define MTVG_SCB_ICSR_PENDSTCLR (1u << 25) /* write 1: clear a pending SysTick */
#define MTVG_SCB_ICSR_PENDSTSET (1u << 26) /* SysTick exception is pending */
#define MTVG_SCB_VTOR MTVG_REG32(0xE000ED08u)                /* vector table offset */
#define MTVG_SCB_CFSR MTVG_REG32(0xE000ED28u)  /* configurable fault status (ARMv7-M) */
#define MTVG_SCB_HFSR MTVG_REG32(0xE000ED2Cu)  /* hard fault status (ARMv7-M) */
#define MTVG_SCB_MMFAR MTVG_REG32(0xE000ED34u) /* memmanage fault address (ARMv7-M) */
#define MTVG_SCB_BFAR MTVG_REG32(0xE000ED38u)  /* bus fault address (ARMv7-M) */
#define MTVG_SCB_CPACR MTVG_REG32(0xE000ED88u) /* coprocessor access (ARMv7-M with FPU) */
#define MTVG_CPACR_CP10_CP11_FULL (0xFu << 20)

#define MTVG_DEMCR MTVG_REG32(0xE000EDFCu) /* debug exception and monitor control */
#define MTVG_DEMCR_TRCENA (1u << 24)
#define MTVG_DWT_CTRL MTVG_REG32(0xE0001000u)
#define MTVG_DWT_CYCCNT MTVG_REG32(0xE0001004u)
#define MTVG_DWT_LAR MTVG_REG32(0xE0001FB0u) /* lock access (Cortex-M7: must be unlocked) */
#define MTVG_DWT_CTRL_CYCCNTENA (1u << 0)
#define MTVG_DWT_LAR_KEY 0xC5ACCE55u

/* Vector table layout: initial SP, 15 system exceptions, then the external interrupts. */
#define MTVG_NUM_SYSTEM_VECTORS 16u
/* Exception numbers (IPSR values); 16 + n is external interrupt n. */
#define MTVG_EXC_RESET 1u
#define MTVG_EXC_NMI 2u
#define MTVG_EXC_HARDFAULT 3u
#define MTVG_EXC_MEMMANAGE 4u  /* ARMv7-M and later */
#define MTVG_EXC_BUSFAULT 5u   /* ARMv7-M and later */
#define MTVG_EXC_USAGEFAULT 6u /* ARMv7-M and later */
#define MTVG_EXC_SVCALL 11u
#define MTVG_EXC_DEBUGMON 12u /* ARMv7-M and later */
#define MTVG_EXC_PENDSV 14u
#define MTVG_EXC_SYSTICK 15u
#define MTVG_EXC_FIRST_IRQ MTVG_NUM_SYSTEM_VECTORS
#define MTVG_IPSR_MASK 0x1FFu /* the exception number field (ARMv6-M reads bits 6-8 as 0) */

/* ---- Interrupt masking -------------------------------------------------------------- */

static inline uint32_t mtvg_irq_save(void) {
  uint32_t primask;
  __asm__ volatile("mrs %0, primask\n\tcpsid i" : "=r"(primask)::"memory");
  return primask;
}

static inline void mtvg_irq_restore(uint32_t primask) {
  __asm__ volatile("msr primask, %0" ::"r"(primask) : "memory");
}

static inline void mtvg_nvic_enable(uint32_t irq) { MTVG_NVIC_ISER(irq / 32u) = 1u << (irq % 32u); }

/* ---- Reset -------------------------------------------------------------------------- */

/* Symbols every port's linker.ld defines. */
extern uint32_t __data_start__[];
extern uint32_t __data_end__[];
extern const uint32_t __data_load__[];
extern uint32_t __bss_start__[];
extern uint32_t __bss_end__[];
extern uint32_t __stack_top__[];
extern uint8_t __ram_start__[]; /* defined by the linker scripts of ports that report faults */
extern uint8_t __ram_end__[];

/* Memory placed outside .data and .bss (generate --place, mtvg_placement.ld): a copy table
 * of {load address, start, bytes} and a zero table of {start, bytes}; linker scripts
 * without placement define both empty. Walked only when MTVG_PLACED_MEMORY is 1. */
#ifndef MTVG_PLACED_MEMORY
#define MTVG_PLACED_MEMORY 0
#endif
extern const uint32_t __mtvg_copy_table_start__[];
extern const uint32_t __mtvg_copy_table_end__[];
extern const uint32_t __mtvg_zero_table_start__[];
extern const uint32_t __mtvg_zero_table_end__[];

typedef void (*mtvg_init_fn)(void);
extern const mtvg_init_fn __preinit_array_start[];
extern const mtvg_init_fn __preinit_array_end[];
extern const mtvg_init_fn __init_array_start[];
extern const mtvg_init_fn __init_array_end[];

/* Copy .data from flash, zero .bss, copy and zero placed memory, run the constructors (no
 * crt0, no _init needed). */
static inline void mtvg_cm_init_memory(void) {
  const uint32_t* src = __data_load__;
  for (uint32_t* dst = __data_start__; dst < __data_end__; ++dst, ++src) {
    *dst = *src;
  }
  for (uint32_t* dst = __bss_start__; dst < __bss_end__; ++dst) {
    *dst = 0u;
  }
#if MTVG_PLACED_MEMORY /* generate --place: the generated CMakeLists.txt defines it */
  for (const uint32_t* e = __mtvg_copy_table_start__; e + 3 <= __mtvg_copy_table_end__; e += 3) {
    const uint8_t* from = (const uint8_t*)(uintptr_t)e[0];
    uint8_t* to = (uint8_t*)(uintptr_t)e[1];
    for (uint32_t i = 0; i < e[2]; ++i) {
      to[i] = from[i];
    }
  }
  for (const uint32_t* e = __mtvg_zero_table_start__; e + 2 <= __mtvg_zero_table_end__; e += 2) {
    uint8_t* to = (uint8_t*)(uintptr_t)e[0];
    for (uint32_t i = 0; i < e[1]; ++i) {
      to[i] = 0u;
    }
  }
#endif
  for (const mtvg_init_fn* fn = __preinit_array_start; fn < __preinit_array_end; ++fn) {
    (*fn)();
  }
  for (const mtvg_init_fn* fn = __init_array_start; fn < __init_array_end; ++fn) {
    (*fn)();
  }
}

/* Grant full access to the FPU (CP10/CP11) before any floating-point instruction runs. */
static inline void mtvg_cm_enable_fpu(void) {
  MTVG_SCB_CPACR |= MTVG_CPACR_CP10_CP11_FULL;
  __asm__ volatile("dsb\n\tisb" ::: "memory");
}

/* ---- 64-bit cycle counter (ARMv7-M DWT) ----------------------------------------------- */

/*
 * DWT CYCCNT counts processor cycles in 32 bits. mtvg_cycles_read() extends it to 64 bits by
 * counting wraps, which it sees as long as it runs once per 2^32 cycles: the ports call it
 * from a periodic SysTick interrupt (every 2^24 cycles), so the caller never has to.
 */
typedef struct {
  uint32_t high; /* wraps seen */
  uint32_t last; /* CYCCNT at the previous read */
} mtvg_cycles;

static inline void mtvg_cycles_start(mtvg_cycles* c) {
  MTVG_DEMCR |= MTVG_DEMCR_TRCENA;
  MTVG_DWT_LAR = MTVG_DWT_LAR_KEY;
  MTVG_DWT_CYCCNT = 0u;
  MTVG_DWT_CTRL |= MTVG_DWT_CTRL_CYCCNTENA;
  c->high = 0u;
  c->last = 0u;
  MTVG_SYST_CSR = 0u;
  MTVG_SYST_RVR = MTVG_SYST_RELOAD_MAX;
  MTVG_SYST_CVR = 0u;
  MTVG_SYST_CSR = MTVG_SYST_CSR_CLKSOURCE | MTVG_SYST_CSR_TICKINT | MTVG_SYST_CSR_ENABLE;
}

static inline uint64_t mtvg_cycles_read(mtvg_cycles* c) {
  uint32_t primask = mtvg_irq_save();
  uint32_t now = MTVG_DWT_CYCCNT;
  if (now < c->last) {
    c->high += 1u;
  }
  c->last = now;
  uint64_t ticks = ((uint64_t)c->high << 32) | (uint64_t)now;
  mtvg_irq_restore(primask);
  return ticks;
}

/* ---- Receive ring --------------------------------------------------------------------- */

/* Bytes a UART may receive ahead of mtvg_link_read(): a power of two. */
#ifndef MTVG_RX_RING_BYTES
#define MTVG_RX_RING_BYTES 512u
#endif
typedef char mtvg_rx_ring_size_check[(MTVG_RX_RING_BYTES & (MTVG_RX_RING_BYTES - 1u)) == 0u ? 1
                                                                                            : -1];

/* Written by the UART interrupt (head) and read by the main program (tail) only. */
typedef struct {
  uint8_t data[MTVG_RX_RING_BYTES];
  volatile uint32_t head;
  volatile uint32_t tail;
  volatile uint32_t dropped; /* bytes lost because the ring was full */
} mtvg_rx_ring;

static inline void mtvg_ring_push(mtvg_rx_ring* r, uint8_t byte) {
  uint32_t head = r->head;
  if (head - r->tail >= MTVG_RX_RING_BYTES) {
    r->dropped += 1u;
    return;
  }
  r->data[head & (MTVG_RX_RING_BYTES - 1u)] = byte;
  r->head = head + 1u;
}

/* Blocks until a byte is there; sleeps (WFI) between interrupts. */
static inline uint8_t mtvg_ring_pop_wait(mtvg_rx_ring* r) {
  for (;;) {
    /* Masked around the test: a byte arriving before WFI leaves its interrupt pending,
     * and WFI returns at once. */
    __asm__ volatile("cpsid i" ::: "memory");
    if (r->head != r->tail) {
      __asm__ volatile("cpsie i" ::: "memory");
      break;
    }
    __asm__ volatile("wfi" ::: "memory");
    __asm__ volatile("cpsie i" ::: "memory");
  }
  uint32_t tail = r->tail;
  uint8_t byte = r->data[tail & (MTVG_RX_RING_BYTES - 1u)];
  r->tail = tail + 1u;
  return byte;
}

/* ---- Vector table --------------------------------------------------------------------- */

/* One vector table slot: the initial stack pointer or a handler address. */
typedef union {
  void* stack_top;
  void (*handler)(void);
} mtvg_vector;

#define MTVG_V1(h) {.handler = (h)}
#define MTVG_V2(h) MTVG_V1(h), MTVG_V1(h)
#define MTVG_V4(h) MTVG_V2(h), MTVG_V2(h)
#define MTVG_V8(h) MTVG_V4(h), MTVG_V4(h)
#define MTVG_V16(h) MTVG_V8(h), MTVG_V8(h)
#define MTVG_V32(h) MTVG_V16(h), MTVG_V16(h)
#define MTVG_V64(h) MTVG_V32(h), MTVG_V32(h)
#define MTVG_V128(h) MTVG_V64(h), MTVG_V64(h)

/*
 * The 16 system slots: initial SP, reset, then NMI, HardFault, MemManage, BusFault,
 * UsageFault, four reserved, SVCall, DebugMonitor, reserved, PendSV (13 slots, all `fault`
 * here), and SysTick. A port appends its external interrupt slots and checks the count.
 */
#define MTVG_SYSTEM_VECTORS(reset, fault, systick) \
  {.stack_top = __stack_top__}, MTVG_V1(reset), MTVG_V8(fault), MTVG_V4(fault), \
      MTVG_V1(fault), MTVG_V1(systick)

/* The exception being handled (IPSR): 16 + n for external interrupt n. */
static inline uint32_t mtvg_cm_ipsr(void) {
  uint32_t ipsr;
  __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
  return ipsr;
}

/* ---- Fault reports ------------------------------------------------------------------- */

/* Words the core pushes on exception entry: r0-r3, r12, lr, pc, xpsr. */
#define MTVG_FRAME_WORDS 8u
#define MTVG_FRAME_LR 5u
#define MTVG_FRAME_PC 6u
#define MTVG_FRAME_XPSR 7u

/* Whether a stacked exception frame lies whole in RAM (a bad SP must not fault again). */
static inline int mtvg_cm_frame_is_readable(const uint32_t* frame) {
  uintptr_t addr = (uintptr_t)frame;
  return (addr & 3u) == 0u && addr >= (uintptr_t)__ram_start__ &&
         addr + MTVG_FRAME_WORDS * sizeof(uint32_t) <= (uintptr_t)__ram_end__;
}

static inline const char* mtvg_cm_exception_name(uint32_t exc) {
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
    case MTVG_EXC_SYSTICK:
      return "SysTick";
    default:
      return exc >= MTVG_EXC_FIRST_IRQ ? "unexpected IRQ" : "reserved exception";
  }
}

/* ---- A physical board's glue (templates/common/platform/cortex_m_board) --------------- */

/* Bytes the port's UART interrupt received, for mtvg_link_read. */
extern mtvg_rx_ring mtvg_cm_rx;

/* The port's UART interrupt: moves received bytes into mtvg_cm_rx. */
void mtvg_port_uart_irq(void);

/* Vector table entries: every fault (stores its number, parks) and every external
 * interrupt (the port's UART line goes to mtvg_port_uart_irq, any other is a fault). */
void mtvg_cm_fault(void);
void mtvg_cm_irq(void);

/* Where a stopped program left its status and a fault its exception number, for a debugger. */
extern volatile int32_t mtvg_exit_status;
extern volatile uint32_t mtvg_fault_exception;

/* A real board has no host to exit to: the program stays here (a debugger can look). */
static inline void mtvg_cm_park(void) __attribute__((noreturn));
static inline void mtvg_cm_park(void) {
  for (;;) {
    __asm__ volatile("nop");
  }
}

#endif /* MTVG_PORT_CORTEX_M_H_ */
