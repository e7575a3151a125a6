/*
 * microtvm-gen Cortex-M ports: the DWT timer layer (dwt_timer.c) as a port calls it.
 */
#ifndef MTVG_DWT_TIMER_H_
#define MTVG_DWT_TIMER_H_

/* Starts the cycle counter and the SysTick interrupt that extends it (from platform init). */
void mtvg_dwt_start(void);

/* SysTick's vector table entry: port.h names it as MTVG_PORT_SYSTICK_HANDLER. */
void mtvg_dwt_systick(void);

#endif /* MTVG_DWT_TIMER_H_ */
