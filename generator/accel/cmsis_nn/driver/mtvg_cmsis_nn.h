/*
 * microtvm-gen accelerator driver: the `cmsis-nn` plugin's glue to Arm's CMSIS-NN (v7).
 *
 * Generated kernels call these functions through tir.call_extern, so each one takes only
 * pointers and int32_t scalars and returns int32_t: 0 when the output is written, one of
 * the MTVG_CMSIS_NN_E* codes otherwise (after mtvg_accel_error("cmsis-nn", reason)).
 * Each fills CMSIS-NN's parameter and dimension structs and calls one CMSIS-NN kernel.
 *
 * Int8 arithmetic and layouts are TFLite's (batch 1, NHWC), as in the shared accelerator
 * calling convention: zero points as the model gives them (the glue negates the input
 * zero point into CMSIS-NN's input offset), per-channel multiplier/shift arrays (shift
 * positive = left), activation range [act_min, act_max] within [-128, 127].
 *
 * Scratch: one static buffer of MTVG_CMSIS_NN_SCRATCH_BYTES serves every call (the calls
 * run one after another). Each wrapper asks CMSIS-NN's *_get_buffer_size for its need on
 * the core it is compiled for and fails with MTVG_CMSIS_NN_ESCRATCH when the buffer is
 * smaller. Upper bounds of that need, for the plugin to size the buffer per model
 * (align_n(x) = x rounded up to a multiple of n; "DSP" = Cortex-M4/M7/M33, "MVE" = M55,
 * "plain" = M0/M3 and the host):
 *
 *   conv2d, K = k_h * k_w * in_c:
 *     plain, DSP: 4 * align_4(K)   (0 for 1x1 kernels with stride 1, no pad, dilation 1)
 *     MVE:        max(4 * align_16(K), (k_w + pad_left) * in_c)
 *   depthwise_conv2d, T = k_h * k_w:
 *     plain:      0
 *     DSP:        2 * in_c * T     (0 unless out_c == in_c and dilation 1;
 *                                   0 for 3x3 with pads <= 1)
 *     MVE:        496 * T          (out_c == in_c, dilation 1; 496 = 4 * CH_IN_BLOCK_MVE)
 *                 max(4 * align_16(T), k_w + pad_left) + T * out_c   (in_c == 1 < out_c)
 *   dense:        0                (MVE's per-unit kernel sums come with the call)
 *   avgpool:      DSP: 4 * c;      plain, MVE: 0
 *   maxpool, add, softmax: 0
 *
 * A bound for every core: the largest of the lines above. MTVG_CMSIS_NN_SCRATCH_BYTES of
 * at least the model's largest need makes every call's check pass.
 *
 * Where CMSIS-NN v7 is wrong, the driver avoids it: on MVE, arm_convolve_wrapper_s8 sends
 * 1xN kernels on one-row inputs to arm_convolve_1_x_n_s8, which computes wrong outputs (or
 * fails) for some right paddings (e.g. SAME with k_w 5 and stride 2); for those the driver
 * calls arm_convolve_s8 (its scratch is within the conv2d bound above). The MVE depthwise
 * wrapper runs one-input-channel layers as such convolutions; where that would reach those
 * cases the driver calls arm_depthwise_conv_s8 (no scratch).
 */
#ifndef MTVG_CMSIS_NN_H_
#define MTVG_CMSIS_NN_H_

#include <stdint.h>

#include "mtvg/accel.h"

#ifdef __cplusplus
extern "C" {
#endif

/*!
 * \brief 1: conv2d and depthwise_conv2d check every argument on every call (shapes,
 * zero points, ranges, and each channel's multiplier and shift: a loop over the
 * channels); 0: only that no pointer is NULL. Generated projects set 0: the exporter
 * (generator/accel/cmsis_nn) refuses, at export, any value these checks would refuse,
 * and the geometry comes from TVM's shape inference. The other operators always check.
 */
#ifndef MTVG_CMSIS_NN_CHECK_ARGUMENTS
#define MTVG_CMSIS_NN_CHECK_ARGUMENTS 1
#endif

#ifndef MTVG_CMSIS_NN_SCRATCH_BYTES
/*! \brief Bytes of the one scratch buffer (the project sets it from the model's needs). */
#define MTVG_CMSIS_NN_SCRATCH_BYTES 4096
#endif

/*! \brief The name failures and counters are reported under. */
#define MTVG_CMSIS_NN_NAME "cmsis-nn"

/*! \brief Largest dimension, stride, padding or dilation (CMSIS-NN keeps some in uint16_t). */
#define MTVG_CMSIS_NN_MAX_DIM 65535

/*! \brief Largest element count of one tensor (CMSIS-NN indexes with int32_t). */
#define MTVG_CMSIS_NN_MAX_ELEMENTS 0x7fffffffL

/*! \brief add: the largest left_shift + max(input shift, 0) + 1 + max(out_shift, 0), the bits an
 *  input offset by its zero point (|x| <= 255) may be scaled up by on its way to the output
 *  without overflowing int32 (255 * 2**23 < 2**31; TFLite's own parameters use 21). */
#define MTVG_CMSIS_NN_MAX_ADD_SCALE_BITS 23

/*! \brief softmax: the longest row. Each exponential is at most 2**19 in TFLite's Q12.19
 *  accumulator. Once a row's sum reaches 2**27 (possible from 256 elements on) the last
 *  rounding shift is by 31 bits, where CMSIS-NN's arm_nn_divide_by_power_of_two overflows
 *  int (1 << 31); from 2**28 (512 elements) by 32 or more, undefined in C for TFLite's
 *  reference as well (Arm cores then give -127 where the exact arithmetic gives -128).
 *  Longer rows are refused. */
#define MTVG_CMSIS_NN_MAX_SOFTMAX_ROW 255

/* Status codes besides 0 (success). */
#define MTVG_CMSIS_NN_EARG 1     /*!< an argument out of range (a shape, zero point, ...) */
#define MTVG_CMSIS_NN_ESCRATCH 2 /*!< the scratch buffer is smaller than the call needs */
#define MTVG_CMSIS_NN_EKERNEL 3  /*!< a CMSIS-NN function returned an error status */

/*! \brief TFLite CONV_2D (weights OHWI [out_c, k_h, k_w, in_c]) via arm_convolve_wrapper_s8. */
int32_t mtvg_cmsis_nn_conv2d_s8(const int8_t* input, const int8_t* weights, const int32_t* bias,
                                const int32_t* multiplier, const int32_t* shift, int8_t* output,
                                int32_t in_h, int32_t in_w, int32_t in_c, int32_t out_h,
                                int32_t out_w, int32_t out_c, int32_t k_h, int32_t k_w,
                                int32_t stride_h, int32_t stride_w, int32_t pad_top,
                                int32_t pad_left, int32_t dilation_h, int32_t dilation_w,
                                int32_t input_zero_point, int32_t output_zero_point,
                                int32_t act_min, int32_t act_max);

/*! \brief TFLite DEPTHWISE_CONV_2D (weights [k_h, k_w, out_c], out_c = in_c * multiplier)
 *  via arm_depthwise_conv_wrapper_s8. */
int32_t mtvg_cmsis_nn_depthwise_conv2d_s8(
    const int8_t* input, const int8_t* weights, const int32_t* bias, const int32_t* multiplier,
    const int32_t* shift, int8_t* output, int32_t in_h, int32_t in_w, int32_t in_c,
    int32_t out_h, int32_t out_w, int32_t out_c, int32_t k_h, int32_t k_w, int32_t stride_h,
    int32_t stride_w, int32_t pad_top, int32_t pad_left, int32_t dilation_h,
    int32_t dilation_w, int32_t input_zero_point, int32_t output_zero_point, int32_t act_min,
    int32_t act_max);

/*! \brief TFLite FULLY_CONNECTED (weights [units, in_depth], requantization per unit):
 *  arm_fully_connected_s8 when every unit has the same multiplier and shift, else
 *  arm_fully_connected_per_channel_s8. `kernel_sums[u]` = bias[u] − input_zero_point ·
 *  Σ_k weights[u][k] (int32, wrapping), what CMSIS-NN's MVE kernels read from their buffer
 *  (arm_vector_sum_s8's result, which TFLite Micro computes when it prepares the layer):
 *  computed once at export, so no call computes it again; the DSP and plain kernels ignore
 *  it. */
int32_t mtvg_cmsis_nn_dense_s8(const int8_t* input, const int8_t* weights, const int32_t* bias,
                               const int32_t* multiplier, const int32_t* shift,
                               const int32_t* kernel_sums, int8_t* output, int32_t batches,
                               int32_t in_depth, int32_t units, int32_t input_zero_point,
                               int32_t output_zero_point, int32_t act_min, int32_t act_max);

/*! \brief TFLite AVERAGE_POOL_2D ([in_h, in_w, c] -> [out_h, out_w, c]; input and output share
 *  their quantization) via arm_avgpool_s8. */
int32_t mtvg_cmsis_nn_avgpool_s8(const int8_t* input, int8_t* output, int32_t in_h, int32_t in_w,
                                 int32_t c, int32_t out_h, int32_t out_w, int32_t pool_h,
                                 int32_t pool_w, int32_t stride_h, int32_t stride_w,
                                 int32_t pad_top, int32_t pad_left, int32_t act_min,
                                 int32_t act_max);

/*! \brief TFLite MAX_POOL_2D (arguments as mtvg_cmsis_nn_avgpool_s8) via arm_max_pool_s8. */
int32_t mtvg_cmsis_nn_maxpool_s8(const int8_t* input, int8_t* output, int32_t in_h, int32_t in_w,
                                 int32_t c, int32_t out_h, int32_t out_w, int32_t pool_h,
                                 int32_t pool_w, int32_t stride_h, int32_t stride_w,
                                 int32_t pad_top, int32_t pad_left, int32_t act_min,
                                 int32_t act_max);

/*! \brief TFLite ADD of two same-shape tensors of `size` elements via arm_elementwise_add_s8.
 *  Arguments as TFLite's int8 add computes them: a_offset, b_offset are added to the inputs
 *  (the negated zero points), out_offset to the output (its zero point); the multipliers and
 *  shifts (positive = left) rescale each input, shifted left by left_shift, and the sum. */
int32_t mtvg_cmsis_nn_add_s8(const int8_t* a, const int8_t* b, int8_t* out, int32_t size,
                             int32_t a_offset, int32_t a_mult, int32_t a_shift,
                             int32_t b_offset, int32_t b_mult, int32_t b_shift,
                             int32_t left_shift, int32_t out_offset, int32_t out_mult,
                             int32_t out_shift, int32_t act_min, int32_t act_max);

/*! \brief TFLite SOFTMAX over rows of row_size elements (output scale 1/256, zero point -128)
 *  via arm_softmax_s8. mult, shift (left, 0..31) and diff_min are TFLite's input
 *  multiplier, input left shift and diff_min. */
int32_t mtvg_cmsis_nn_softmax_s8(const int8_t* input, int8_t* output, int32_t rows,
                                 int32_t row_size, int32_t mult, int32_t shift,
                                 int32_t diff_min);

/*! \brief Counters since start-up: calls per operator and the largest scratch need seen. */
void mtvg_cmsis_nn_counters(mtvg_accel_emit_fn emit);

#ifdef __cplusplus
}
#endif

#endif /* MTVG_CMSIS_NN_H_ */
