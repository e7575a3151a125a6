/*
 * microtvm-gen board port for QEMU's Arm MPS2/MPS3 machines (AN385, AN386, AN500, AN505,
 * AN547): implementation of mtvg/platform.h plus the newlib system-call stubs.
 *
 *   link   CMSDK APB UART0 (address per image, mps2_hw.h), polled, with its receive
 *          interrupt waking WFI; QEMU connects it to -serial #0.
 *   timer  SysTick on the processor clock, 24-bit down-counter extended to 64 bits by
 *          counting its wrap interrupts.
 *   exit   ARM semihosting SYS_EXIT / SYS_EXIT_EXTENDED, which QEMU turns into its own
 *          process exit status (the semihost layer).
 *   stdio  printf() and friends go to the semihosting console (QEMU prints it on its
 *          stderr), never to the UART: the UART carries the binary host protocol.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"
#include "semihost.h"

/* ---- Configuration (override with -D) ------------------------------------------------ */

/* Processor clock of the FPGA image as QEMU models it (the board file passes it too). */
#ifndef MTVG_CPU_HZ
#define MTVG_CPU_HZ MTVG_MPS2_DEFAULT_CPU_HZ
#endif

/* Nominal UART baud rate. QEMU does not pace output by it, but rejects divisors < 16. */
#ifndef MTVG_UART_BAUD
#define MTVG_UART_BAUD 115200u
#endif

/* ---- CMSDK APB UART0 ----------------------------------------------------------------- */

#define MTVG_UART0_BASE MTVG_MPS2_UART0_BASE
#define MTVG_UART_DATA MTVG_REG32(MTVG_UART0_BASE + 0x00u)
#define MTVG_UART_STATE MTVG_REG32(MTVG_UART0_BASE + 0x04u)
#define MTVG_UART_CTRL MTVG_REG32(MTVG_UART0_BASE + 0x08u)
#define MTVG_UART_INTSTATUS MTVG_REG32(MTVG_UART0_BASE + 0x0Cu)
#define MTVG_UART_BAUDDIV MTVG_REG32(MTVG_UART0_BASE + 0x10u)

#define MTVG_UART_STATE_TX_FULL (1u << 0)
#define MTVG_UART_STATE_RX_FULL (1u << 1)
#define MTVG_UART_STATE_TX_OVERRUN (1u << 2) /* write 1 to clear */
#define MTVG_UART_STATE_RX_OVERRUN (1u << 3) /* write 1 to clear */
#define MTVG_UART_CTRL_TX_EN (1u << 0)
#define MTVG_UART_CTRL_RX_EN (1u << 1)
#define MTVG_UART_CTRL_RX_INTEN (1u << 3)
#define MTVG_UART_INT_RX (1u << 1)
#define MTVG_UART_INT_ALL 0xFu /* TX, RX, TX overrun, RX overrun; write 1 to clear */
#define MTVG_UART_DATA_MASK 0xFFu
#define MTVG_UART_MIN_BAUDDIV 16u

#define MTVG_UART_BAUDDIV_VALUE                                             \
  ((MTVG_CPU_HZ / MTVG_UART_BAUD) < MTVG_UART_MIN_BAUDDIV ? MTVG_UART_MIN_BAUDDIV \
                                                          : (MTVG_CPU_HZ / MTVG_UART_BAUD))

/* ---- SysTick ------------------------------------------------------------------------- */

#define MTVG_SYSTICK_PERIOD_BITS 24u /* ticks per period = MTVG_SYST_RELOAD_MAX + 1 = 2^24 */
#define MTVG_SYSTICK_PERIOD_MASK ((1u << MTVG_SYSTICK_PERIOD_BITS) - 1u)

/* Number of SysTick periods completed; written only by SysTick_Handler (and by
 * mtvg_timer_align while SysTick is stopped). */
static volatile uint64_t s_systick_wraps;
/* Ticks counted before the last mtvg_timer_align(). */
static uint64_t s_tick_base;

void SysTick_Handler(void) { s_systick_wraps = s_systick_wraps + 1u; }

static void timer_init(void) {
  MTVG_SYST_CSR = 0u;
  s_systick_wraps = 0u;
  MTVG_SYST_RVR = MTVG_SYST_RELOAD_MAX;
  MTVG_SYST_CVR = 0u; /* any write clears the counter and COUNTFLAG */
  MTVG_SYST_CSR = MTVG_SYST_CSR_CLKSOURCE | MTVG_SYST_CSR_TICKINT | MTVG_SYST_CSR_ENABLE;
}

/*
 * SysTick counts DOWN: ... 2, 1, 0, RELOAD, RELOAD-1, ... The exception is raised (and
 * COUNTFLAG set) on the 1 -> 0 step, so the 0 state is the first tick of a new period and
 * the position inside the current period is (2^24 - CVR) mod 2^24:
 *     CVR = 0 -> 0,  CVR = RELOAD -> 1,  ...,  CVR = 1 -> RELOAD.
 *     ticks = wraps * 2^24 + ((2^24 - CVR) mod 2^24)
 * Right after enabling, CVR reads 0 until its first reload, which also reads as tick 0.
 *
 * Races handled:
 *  - the wrap interrupt running while we sample: the wrap count is read before and after
 *    and the sample is retried if it changed (the handler is the only writer, so this also
 *    covers a torn read of the 64-bit counter);
 *  - the 1 -> 0 step having happened but its interrupt not yet taken (interrupts masked,
 *    or exception latency): ICSR.PENDSTSET is then set; CVR is re-read (now certainly in
 *    the new period) and the pending wrap is counted here.
 * SYST_CSR.COUNTFLAG carries the same "wrapped" bit, but reading SYST_CSR clears it, so
 * using it here would be a destructive read; PENDSTSET is side-effect free.
 * Correct as long as interrupts are never masked for a whole period (2^24 cycles, ~0.67 s
 * at 25 MHz). QEMU behaves the same way (it holds CVR at 1 until its timer callback
 * raises the exception, then shows 0 for one tick).
 */
uint64_t mtvg_timer_ticks(void) {
  uint64_t before;
  uint64_t wraps;
  uint32_t current;
  do {
    before = s_systick_wraps;
    current = MTVG_SYST_CVR;
    wraps = before;
    if ((MTVG_SCB_ICSR & MTVG_SCB_ICSR_PENDSTSET) != 0u) {
      current = MTVG_SYST_CVR;
      wraps += 1u;
    }
  } while (s_systick_wraps != before);
  uint32_t position = (0u - current) & MTVG_SYSTICK_PERIOD_MASK;
  return s_tick_base + (wraps << MTVG_SYSTICK_PERIOD_BITS) + (uint64_t)position;
}

/*
 * QEMU derives SysTick from virtual time: with -icount shift=0 one instruction is 1 ns and
 * one tick is 1e9 / MTVG_CPU_HZ ns (40 at 25 MHz), so where an instruction falls inside a tick depends on how long the
 * device polled the UART before, which depends on the host. Stopping SysTick and starting
 * it again restarts the tick at this instruction; the counter goes on from here (the tick
 * in progress counts as a whole one).
 */
void mtvg_timer_align(void) {
  uint64_t now = mtvg_timer_ticks();
  MTVG_SYST_CSR = 0u;
  MTVG_SCB_ICSR = MTVG_SCB_ICSR_PENDSTCLR;
  s_systick_wraps = 0u;
  s_tick_base = now + 1u;
  MTVG_SYST_CVR = 0u;
  MTVG_SYST_CSR = MTVG_SYST_CSR_CLKSOURCE | MTVG_SYST_CSR_TICKINT | MTVG_SYST_CSR_ENABLE;
}

uint64_t mtvg_timer_hz(void) { return (uint64_t)MTVG_CPU_HZ; }

/* ---- Link ---------------------------------------------------------------------------- */

static void uart_init(void) {
  MTVG_UART_CTRL = 0u;
  MTVG_UART_BAUDDIV = MTVG_UART_BAUDDIV_VALUE;
  MTVG_UART_STATE = MTVG_UART_STATE_TX_OVERRUN | MTVG_UART_STATE_RX_OVERRUN;
  MTVG_UART_INTSTATUS = MTVG_UART_INT_ALL;
  MTVG_UART_CTRL = MTVG_UART_CTRL_TX_EN | MTVG_UART_CTRL_RX_EN | MTVG_UART_CTRL_RX_INTEN;
  mtvg_nvic_enable(MTVG_MPS2_UART0_IRQ_A);
  mtvg_nvic_enable(MTVG_MPS2_UART0_IRQ_B);
}

void mtvg_mps2_uart0_irq(void) { MTVG_UART_INTSTATUS = MTVG_UART_INT_RX; }

void mtvg_platform_init(void) {
  uart_init();
  timer_init();
}

/* Blocks until n bytes arrived. A UART has no end of input, so this never returns -1. */
int mtvg_link_read(uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    /*
     * Sleep until a byte arrives instead of spinning: QEMU hands the UART one byte per main
     * loop turn, and a spinning CPU keeps its main loop waiting (about 15 KB/s instead of
     * MB/s). Interrupts are masked around the test, so a byte arriving between the test
     * and WFI leaves its interrupt pending, and WFI returns at once.
     */
    while ((MTVG_UART_STATE & MTVG_UART_STATE_RX_FULL) == 0u) {
      __asm__ volatile("cpsid i" ::: "memory");
      if ((MTVG_UART_STATE & MTVG_UART_STATE_RX_FULL) == 0u) {
        __asm__ volatile("wfi" ::: "memory");
      }
      __asm__ volatile("cpsie i" ::: "memory");
    }
    buf[i] = (uint8_t)(MTVG_UART_DATA & MTVG_UART_DATA_MASK);
  }
  return MTVG_OK;
}

int mtvg_link_write(const uint8_t* buf, size_t n) {
  for (size_t i = 0u; i < n; ++i) {
    while ((MTVG_UART_STATE & MTVG_UART_STATE_TX_FULL) != 0u) {
    }
    MTVG_UART_DATA = buf[i];
  }
  return MTVG_OK;
}

/*
 * Waits until the transmit holding register is empty. On QEMU that means the last byte
 * was handed to the character backend (QEMU keeps TX-full set while the host side is not
 * accepting data), so it is exact. The CMSDK UART has no "shifter empty" flag, so on real
 * silicon the final byte may still be on the wire when this returns.
 */
void mtvg_link_flush(void) {
  while ((MTVG_UART_STATE & MTVG_UART_STATE_TX_FULL) != 0u) {
  }
}

/* ---- newlib system calls -------------------------------------------------------------- */
/*
 * Just enough for stdio (printf) and malloc; _exit is the semihost layer's. No rdimon/nosys
 * specs needed.
 * fd 0/1/2 are "terminals": reads return end of file, writes go to the semihosting
 * console through SYS_WRITE0 (in chunks; NUL bytes through SYS_WRITEC).
 */

#define MTVG_STDIN_FD 0
#define MTVG_STDERR_FD 2
#define MTVG_CONSOLE_CHUNK 128u

int _close(int fd);
int _fstat(int fd, struct stat* st);
int _getpid(void);
int _isatty(int fd);
int _kill(int pid, int sig);
off_t _lseek(int fd, off_t offset, int whence);
int _read(int fd, void* buf, size_t len);
void* _sbrk(ptrdiff_t increment);
int _write(int fd, const void* buf, size_t len);

extern uint8_t __heap_start__[];
extern uint8_t __heap_end__[];

static int is_console(int fd) { return fd >= MTVG_STDIN_FD && fd <= MTVG_STDERR_FD; }

void* _sbrk(ptrdiff_t increment) {
  static uint8_t* s_break = NULL;
  if (s_break == NULL) {
    s_break = __heap_start__;
  }
  size_t room_up = (size_t)(__heap_end__ - s_break);
  size_t room_down = (size_t)(s_break - __heap_start__);
  if ((increment > 0 && (size_t)increment > room_up) ||
      (increment < 0 && (size_t)(-increment) > room_down)) {
    errno = ENOMEM;
    return (void*)-1;
  }
  uint8_t* previous = s_break;
  s_break += increment;
  return previous;
}

int _write(int fd, const void* buf, size_t len) {
  static char chunk[MTVG_CONSOLE_CHUNK + 1u];
  if (!is_console(fd) || fd == MTVG_STDIN_FD) {
    errno = EBADF;
    return -1;
  }
  const char* bytes = (const char*)buf;
  size_t used = 0u;
  for (size_t i = 0u; i < len; ++i) {
    if (bytes[i] != '\0') {
      chunk[used++] = bytes[i];
    }
    if (used == MTVG_CONSOLE_CHUNK || bytes[i] == '\0' || i + 1u == len) {
      chunk[used] = '\0';
      if (used != 0u) {
        mtvg_semihost_puts(chunk);
      }
      used = 0u;
    }
    if (bytes[i] == '\0') {
      (void)mtvg_semihost(MTVG_SH_SYS_WRITEC, (uintptr_t)&bytes[i]);
    }
  }
  return (int)len;
}

int _read(int fd, void* buf, size_t len) {
  (void)buf;
  (void)len;
  if (!is_console(fd)) {
    errno = EBADF;
    return -1;
  }
  return 0; /* end of file */
}

int _close(int fd) {
  if (!is_console(fd)) {
    errno = EBADF;
    return -1;
  }
  return 0;
}

off_t _lseek(int fd, off_t offset, int whence) {
  (void)offset;
  (void)whence;
  errno = is_console(fd) ? ESPIPE : EBADF;
  return (off_t)-1;
}

int _fstat(int fd, struct stat* st) {
  if (!is_console(fd)) {
    errno = EBADF;
    return -1;
  }
  memset(st, 0, sizeof(*st));
  st->st_mode = S_IFCHR; /* character device: newlib line-buffers it */
  return 0;
}

int _isatty(int fd) {
  if (!is_console(fd)) {
    errno = EBADF;
    return 0;
  }
  return 1;
}

int _getpid(void) { return 1; }

int _kill(int pid, int sig) {
  (void)pid;
  (void)sig;
  errno = EINVAL;
  return -1;
}
