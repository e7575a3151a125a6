/*
 * microtvm-gen Cortex-M ports for QEMU machines (the qemu_m layer): the timer of
 * mtvg/platform.h on SysTick, for the ports whose port.toml names this layer.
 *
 *   timer  SysTick on the processor clock (MTVG_CPU_HZ, from the port's port.h or the board
 *          file), 24-bit down-counter extended to 64 bits by counting its wrap interrupts.
 *          The port calls mtvg_systick_start() from mtvg_platform_init().
 */
#include <stdint.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "port.h"
#include "qemu_m.h"

/* ---- SysTick ------------------------------------------------------------------------- */

#define MTVG_SYSTICK_PERIOD_BITS 24u /* ticks per period = MTVG_SYST_RELOAD_MAX + 1 = 2^24 */
#define MTVG_SYSTICK_PERIOD_MASK ((1u << MTVG_SYSTICK_PERIOD_BITS) - 1u)

/* Number of SysTick periods completed; written only by SysTick_Handler (and by
 * mtvg_timer_align while SysTick is stopped). */
static volatile uint64_t s_systick_wraps;
/* Ticks counted before the last mtvg_timer_align(). */
static uint64_t s_tick_base;

void SysTick_Handler(void) { s_systick_wraps = s_systick_wraps + 1u; }

void mtvg_systick_start(void) {
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

