/*
 * microtvm-gen Cortex-M ports: the timer of mtvg/platform.h from the DWT cycle counter
 * (ARMv7-M), for the ports whose port.toml names the cortex_m_dwt layer.
 *
 * CYCCNT counts CPU cycles (MTVG_CPU_HZ of them a second: port.h's default, or the board
 * file's clock) in 32 bits; mtvg_cycles_read extends it to 64. SysTick interrupts every
 * 2^24 cycles keep the extension up to date, so port.h names mtvg_dwt_systick as
 * MTVG_PORT_SYSTICK_HANDLER, and the port's mtvg_platform_init calls mtvg_dwt_start.
 */
#include <stdint.h>

#include "mtvg/platform.h"
#include "mtvg/port_cortex_m.h"
#include "dwt_timer.h"
#include "port.h"

static mtvg_cycles s_cycles;

void mtvg_dwt_start(void) { mtvg_cycles_start(&s_cycles); }

void mtvg_dwt_systick(void) { (void)mtvg_cycles_read(&s_cycles); }

uint64_t mtvg_timer_ticks(void) { return mtvg_cycles_read(&s_cycles); }

uint64_t mtvg_timer_hz(void) { return (uint64_t)MTVG_CPU_HZ; }
