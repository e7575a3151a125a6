/*
 * microtvm-gen runtime: what accelerator drivers and the generated code share.
 *
 * Generated kernels call a driver function through tir.call_extern; every driver function
 * returns int32_t: 0 on success, anything else on failure. The kernel passes that status
 * to mtvg_accel_check() (TIR cannot pass strings to C). A driver that fails first calls
 * mtvg_accel_error() with a message; the run function returns MTVG_ACCEL_RUN_FAILED
 * (mtvg/status.h) after the failing kernel, and the application reports
 * mtvg_accel_message() as the run's error.
 * A failed driver call therefore never produces a silent wrong output.
 *
 * Counters: a driver may export `void <name>(mtvg_accel_emit_fn emit)` (its plugin names
 * it); the application calls it after a run and reports each counter to the host.
 */
#ifndef MTVG_ACCEL_H_
#define MTVG_ACCEL_H_

#include <stdint.h>

#include "mtvg/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief Bytes kept of a driver's error message (longer messages are cut). */
#define MTVG_ACCEL_MESSAGE_BYTES 160

/*!
 * \brief Called by generated code after each driver call.
 * \param status what the driver returned.
 * \return status. A nonzero status is recorded (the first one since mtvg_accel_clear());
 *         without a message from the driver, the message gives the status.
 */
int32_t mtvg_accel_check(int32_t status);

/*! \brief Drivers: the reason for the failure they are about to return (copied, bounded). */
void mtvg_accel_error(const char* accelerator, const char* message);

/*! \brief Nonzero when a driver call failed since the last mtvg_accel_clear(). */
int32_t mtvg_accel_failed(void);

/*! \brief "<accelerator>: <message>" of the first failure, or "" when none failed. */
const char* mtvg_accel_message(void);

/*! \brief Forget failures (the run function calls it first). */
void mtvg_accel_clear(void);

/*! \brief How a driver reports one counter (e.g. "vanilla", "macs", 123456). */
typedef void (*mtvg_accel_emit_fn)(const char* accelerator, const char* counter,
                                   uint64_t value);

/*! \brief A driver's counter hook: calls emit once per counter. */
typedef void (*mtvg_accel_counters_fn)(mtvg_accel_emit_fn emit);

#ifdef __cplusplus
}
#endif

#endif /* MTVG_ACCEL_H_ */
