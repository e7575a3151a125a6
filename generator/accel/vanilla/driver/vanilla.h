/*
 * vanilla: the driver API that generated kernels call (through tir.call_extern).
 *
 * Every entry point takes pointers and int32_t scalars and returns int32_t: 0 on success;
 * otherwise it has called mtvg_accel_error("vanilla", "<function>: <reason>") first and
 * returns a device error code (VANILLA_ERR_*, 1..255) or VANILLA_TIMEOUT / VANILLA_BUSY.
 * A failed call never writes its output.
 *
 * The int8 functions follow the shared convention of mtvg accelerators (TFLite semantics,
 * batch 1, NHWC, OHWI weights, int32 bias without the input zero point folded in, per
 * output channel multiplier and shift with positive = left). The float convolution is NCHW
 * with OIHW weights; bias may be NULL. See README.md for the device and its limits.
 */
#ifndef VANILLA_H_
#define VANILLA_H_

#include <stdint.h>

#include "mtvg/accel.h"

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief Device clocks the driver waits for DONE or ERROR before it gives up. */
#ifndef VANILLA_POLL_LIMIT
#define VANILLA_POLL_LIMIT 100000
#endif

/*! \brief Returned when the device did not finish within VANILLA_POLL_LIMIT clocks. */
#define VANILLA_TIMEOUT 256
/*! \brief Returned when the device was still busy with an earlier command. */
#define VANILLA_BUSY 257

/*!
 * \brief Float32 conv2d, batch 1: input [in_c, in_h, in_w], weights [out_c, in_c, k_h, k_w],
 *        bias [out_c] or NULL, output [out_c, out_h, out_w]; relu nonzero = max(x, 0).
 *        Per output: bias first, then the in-range taps in (ic, kh, kw) order, in float32.
 */
int32_t vanilla_conv2d_f32(const float* input, const float* weights, const float* bias,
                           float* output, int32_t in_c, int32_t in_h, int32_t in_w,
                           int32_t out_c, int32_t out_h, int32_t out_w, int32_t k_h, int32_t k_w,
                           int32_t stride_h, int32_t stride_w, int32_t pad_top,
                           int32_t pad_left, int32_t dilation_h, int32_t dilation_w,
                           int32_t relu);

/*! \brief Int8 conv2d (shared convention): input [in_h, in_w, in_c], weights OHWI. */
int32_t vanilla_conv2d_s8(const int8_t* input, const int8_t* weights, const int32_t* bias,
                          const int32_t* multiplier, const int32_t* shift, int8_t* output,
                          int32_t in_h, int32_t in_w, int32_t in_c, int32_t out_h, int32_t out_w,
                          int32_t out_c, int32_t k_h, int32_t k_w, int32_t stride_h,
                          int32_t stride_w, int32_t pad_top, int32_t pad_left,
                          int32_t dilation_h, int32_t dilation_w, int32_t input_zero_point,
                          int32_t output_zero_point, int32_t act_min, int32_t act_max);

/*! \brief Int8 fully connected (shared convention): weights [units, in_depth]. */
int32_t vanilla_dense_s8(const int8_t* input, const int8_t* weights, const int32_t* bias,
                         const int32_t* multiplier, const int32_t* shift, int8_t* output,
                         int32_t batches, int32_t in_depth, int32_t units,
                         int32_t input_zero_point, int32_t output_zero_point, int32_t act_min,
                         int32_t act_max);

/*!
 * \brief Counters since reset: emits "commands", "macs" (taps actually multiplied; padding
 *        taps are not), "bytes_in" (bytes of every buffer a command read) and "bytes_out".
 */
void vanilla_counters(mtvg_accel_emit_fn emit);

/* ---- the layer below: program a command, then run it ----------------------------------- */

/*! \brief Program the registers for a float conv2d (arguments as vanilla_conv2d_f32). */
void vanilla_program_conv2d_f32(const float* input, const float* weights, const float* bias,
                                float* output, int32_t in_c, int32_t in_h, int32_t in_w,
                                int32_t out_c, int32_t out_h, int32_t out_w, int32_t k_h,
                                int32_t k_w, int32_t stride_h, int32_t stride_w,
                                int32_t pad_top, int32_t pad_left, int32_t dilation_h,
                                int32_t dilation_w, int32_t relu);

/*! \brief Program the registers for an int8 conv2d (arguments as vanilla_conv2d_s8). */
void vanilla_program_conv2d_s8(const int8_t* input, const int8_t* weights, const int32_t* bias,
                               const int32_t* multiplier, const int32_t* shift, int8_t* output,
                               int32_t in_h, int32_t in_w, int32_t in_c, int32_t out_h,
                               int32_t out_w, int32_t out_c, int32_t k_h, int32_t k_w,
                               int32_t stride_h, int32_t stride_w, int32_t pad_top,
                               int32_t pad_left, int32_t dilation_h, int32_t dilation_w,
                               int32_t input_zero_point, int32_t output_zero_point,
                               int32_t act_min, int32_t act_max);

/*! \brief Program the registers for an int8 dense (arguments as vanilla_dense_s8). */
void vanilla_program_dense_s8(const int8_t* input, const int8_t* weights, const int32_t* bias,
                              const int32_t* multiplier, const int32_t* shift, int8_t* output,
                              int32_t batches, int32_t in_depth, int32_t units,
                              int32_t input_zero_point, int32_t output_zero_point,
                              int32_t act_min, int32_t act_max);

/*!
 * \brief Start the programmed command and poll until it ends (at most VANILLA_POLL_LIMIT
 *        clocks; a timeout aborts it). \p function names the caller in the error message.
 * \return 0, or the error code after mtvg_accel_error() was called.
 */
int32_t vanilla_execute(const char* function);

#ifdef __cplusplus
}
#endif

#endif /* VANILLA_H_ */
