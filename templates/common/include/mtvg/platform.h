/*
 * microtvm-gen runtime: the board port.
 *
 * Every board family implements these functions once (templates/common/platform/<family>/).
 * The runtime and the generated applications call nothing else that is board specific.
 *
 * Contract, for every function below:
 *  - single threaded: no function is called from an interrupt handler by the runtime;
 *  - no dynamic memory: a port keeps its state in static storage;
 *  - the link is a reliable byte stream from the runtime's point of view (a UART, a pipe);
 *    framing and checksums on top of it are the runtime's job, not the port's.
 */
#ifndef MTVG_PLATFORM_H_
#define MTVG_PLATFORM_H_

#include <stddef.h>
#include <stdint.h>

#include "mtvg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief Bring up clocks, the link and the timer. Called once, first thing in main(). */
void mtvg_platform_init(void);

/*!
 * \brief Read exactly n bytes from the host link into buf, blocking until they arrive.
 * \return MTVG_OK when n bytes were read; MTVG_LINK_CLOSED when the link is closed (end of
 *         input) before that.
 */
int mtvg_link_read(uint8_t* buf, size_t n);

/*!
 * \brief Write n bytes to the host link, blocking until they are handed to the hardware.
 * \return MTVG_OK on success; MTVG_LINK_CLOSED when the link is closed.
 */
int mtvg_link_write(const uint8_t* buf, size_t n);

/*! \brief Flush bytes buffered by mtvg_link_write (no-op where writes are unbuffered). */
void mtvg_link_flush(void);

/*!
 * \brief A free-running 64-bit tick counter, starting near 0 at mtvg_platform_init().
 * Monotonic; wraps only after centuries at the rates below.
 */
uint64_t mtvg_timer_ticks(void);

/*!
 * \brief Restart the timer's current tick at this instant, where one tick spans several
 * instructions of an emulated CPU (QEMU with -icount): a measurement that starts right
 * after this call then reads the same tick count on every run. mtvg_timer_ticks() stays
 * monotonic. A no-op on hardware and hosts, whose ticks are not quantised this way.
 */
void mtvg_timer_align(void);

/*! \brief Ticks per second of mtvg_timer_ticks() (the CPU clock on MCUs, 1e9 on hosts). */
uint64_t mtvg_timer_hz(void);

/*!
 * \brief End the program with an exit status the host can read
 * (process exit code on hosts, semihosting SYS_EXIT on QEMU, a reset loop on real boards).
 */
void mtvg_platform_exit(int status) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif

#endif /* MTVG_PLATFORM_H_ */
