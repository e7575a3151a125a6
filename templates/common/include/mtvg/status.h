/*
 * microtvm-gen runtime: every status the runtime, the link, the generated glue and the
 * applications return, and the exit statuses of the applications.
 *
 * Return codes are int / int32_t; 0 is success. The runtime owns -1 ... -255, in ranges:
 *
 *   0              MTVG_OK
 *   -1             generic failure            MTVG_FAILED (alias MTVG_LINK_CLOSED)
 *   -2 ... -6      link and framing           MTVG_FRAME_*
 *   -7 ... -15     the model's run function   MTVG_ACCEL_RUN_FAILED
 *   -16 ... -255   reserved for the runtime: a new code takes the next free value of the
 *                  range it belongs to, or opens a range here; no value is ever reused
 *
 * Everything else belongs to code the runtime does not write, and the runtime passes it on
 * unchanged:
 *   > 0            TVM's CRT error codes ((category << 8) | code,
 *                  tvm/runtime/crt/error_codes.h) that generated kernels may return; an
 *                  accelerator driver's own statuses (mtvg/accel.h), which reach
 *                  mtvg_accel_check() but never the run function's caller
 *   <= -256        TVM's CRT system errors (kTvmErrorSystemErrorMask set)
 *
 * Codes that go over the host link (the model's run status in the 'D' reply, the exit
 * status) keep their values forever; generator/abi.py reads them from this file, and
 * docs/runtime.md has the same table (tests/test_abi.py compares them).
 */
#ifndef MTVG_STATUS_H_
#define MTVG_STATUS_H_

/* ---- Return codes -------------------------------------------------------------------- */

/*! \brief Success. */
#define MTVG_OK 0

/*!
 * \brief The call failed. Runtime, graph-executor and model functions (and generated
 * operators, by TVM's convention) say why with TVMAPISetLastError(); link functions return
 * it when the link closed or a payload was too large.
 */
#define MTVG_FAILED (-1)

/*! \brief What link functions return when the link closed: the same value as MTVG_FAILED. */
#define MTVG_LINK_CLOSED MTVG_FAILED

/*!
 * \brief mtvg_frame_receive_checked(): a damaged frame (bad CRC, escape or length) or a run
 * of junk between frames was dropped.
 */
#define MTVG_FRAME_DAMAGED (-2)

/*!
 * \brief Inside framing.c only: an invalid escape or an oversize length in a frame. The
 * frame is dropped; the caller sees MTVG_FRAME_DAMAGED.
 */
#define MTVG_FRAME_INVALID (-3)

/*!
 * \brief Inside framing.c only: a start marker (FF FD) in the middle of a frame. The frame
 * is dropped and the next one starts there; the caller sees MTVG_FRAME_DAMAGED.
 */
#define MTVG_FRAME_RESTART (-4)

/*!
 * \brief The model's run function, after an accelerator driver failed (mtvg/accel.h):
 * mtvg_accel_message() says why.
 */
#define MTVG_ACCEL_RUN_FAILED (-7)

/* The ranges above, first and last value of each (first >= last: codes count down). */
#define MTVG_STATUS_LINK_FIRST (-2)
#define MTVG_STATUS_LINK_LAST (-6)
#define MTVG_STATUS_RUN_FIRST (-7)
#define MTVG_STATUS_RUN_LAST (-15)
#define MTVG_STATUS_RESERVED_FIRST (-16)
#define MTVG_STATUS_RESERVED_LAST (-255)

/* ---- Exit statuses of the applications (templates/crt/src) ----------------------------- */

/*! \brief The host closed the link or asked the application to quit with status 0. */
#define MTVG_EXIT_OK 0

/*! \brief The model could not be set up; its reason went to the host as an 'E' message. */
#define MTVG_EXIT_SETUP_FAILED 3

/*!
 * \brief A fatal exception on a bare-metal port: the status is this base plus the exception
 * number (the ports' MTVG_FAULT_EXIT_BASE; 128 + n, as a shell reports signal n).
 */
#define MTVG_EXIT_FAULT_BASE 128

/* ---- Each code lies in its range ------------------------------------------------------- */

/*! \brief A compile-time check, in C99 headers that C++ may include too. */
#ifdef __cplusplus
#define MTVG_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define MTVG_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#define MTVG_STATUS_IN(code, range) \
  ((code) <= MTVG_STATUS_##range##_FIRST && (code) >= MTVG_STATUS_##range##_LAST)

MTVG_STATIC_ASSERT(MTVG_STATUS_IN(MTVG_FRAME_DAMAGED, LINK), "MTVG_FRAME_DAMAGED: link range");
MTVG_STATIC_ASSERT(MTVG_STATUS_IN(MTVG_FRAME_INVALID, LINK), "MTVG_FRAME_INVALID: link range");
MTVG_STATIC_ASSERT(MTVG_STATUS_IN(MTVG_FRAME_RESTART, LINK), "MTVG_FRAME_RESTART: link range");
MTVG_STATIC_ASSERT(MTVG_STATUS_IN(MTVG_ACCEL_RUN_FAILED, RUN), "MTVG_ACCEL_RUN_FAILED: run range");
MTVG_STATIC_ASSERT(MTVG_STATUS_LINK_LAST - 1 == MTVG_STATUS_RUN_FIRST &&
                       MTVG_STATUS_RUN_LAST - 1 == MTVG_STATUS_RESERVED_FIRST,
                   "the ranges follow each other");

#endif /* MTVG_STATUS_H_ */
