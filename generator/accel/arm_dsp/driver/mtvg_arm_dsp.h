/*
 * microtvm-gen accelerator driver: the `arm-dsp` plugin, our own int8 convolutions (dense
 * layers are 1x1 convolutions) for cores with the Arm DSP extension (Cortex-M4, M7, M33,
 * M55: SXTAB16, SXTB16, SMLAD, SMMULR through <arm_acle.h>, the hot loops in inline
 * assembly) and a depthwise kernel for Helium (M55). Elsewhere (the host) the same code runs
 * on portable C versions of those instructions, bit for bit the same.
 *
 * Generated kernels call these functions through tir.call_extern: pointers and int32_t
 * scalars in, int32_t out (0 when the output is written, MTVG_ARM_DSP_E* otherwise, after
 * mtvg_accel_error("arm-dsp", reason)). Arithmetic and layouts are TFLite's (batch 1, NHWC,
 * per-channel multiplier and shift, shift positive = left, double rounding as TFLite's
 * MultiplyByQuantizedMultiplier), so outputs are byte-equal with TFLite Micro's reference
 * kernels. Zero points are the model's. conv2d adds the input offset (-input_zero_point) to
 * every input value as it is widened to 16 bits and reads the zero point for padding, so its
 * bias is the model's; the depthwise kernels widen inputs as they are and take a bias with
 * the offset folded in (their functions below say how).
 *
 * Weights come re-laid out by the exporter (generator/accel/arm_dsp/layout.py), packed four
 * int8 or two int16 per uint32_t, little-endian:
 *
 *   conv2d: K = k_h * k_w * in_c in TFLite's (k_h, k_w, in_c) order, padded with zeros to
 *     K8 = align_8(K) (an even number of groups of four); output channels padded to an even
 *     count. For each pair of output channels (o, o + 1), for each group of four k (k0..k3):
 *       weight_bits 8:  one word of o's four int8 weights, then one of o + 1's;
 *       weight_bits 16: o's (k0, k2) and (k1, k3) as int16 pairs (low half first), then
 *                       o + 1's: twice the flash, no widening in the inner loop.
 *     bias, multiplier and shift are padded to the even count too.
 *   depthwise_conv2d (channel multiplier 1): a stream of groups of four channels (c0..c3;
 *     channels padded to C4 = align_4(c) with zeros), 16 + 2 * k_h * k_w words each: the
 *     four biases (int32, the input offset folded in: see the function), per tap in
 *     (k_h, k_w) order two words of int16 pairs, (c0, c2) and (c1, c3), then per channel a
 *     record of three int32: (multiplier, addend, e) for the short output stage, (multiplier,
 *     shift, 0) for the general one. Under the short stage the biases and weights are
 *     doubled, so the sums arrive doubled for SMMULR. One pointer walks a pixel's whole
 *     stream.
 *
 * Output stage: `narrow` 1 when the exporter has shown that every channel's shift lies in
 * [-22, -1] and every accumulator, doubled, fits int32_t; `narrow_params` then holds per
 * channel four int32: the multiplier, 2^(e-1) + output_zero_point * 2^e (e = -shift), e,
 * 0, and the stage is SMMULR of 2 acc and one rounding shift, (h + addend - (h < 0)) >> e,
 * which equals TFLite's rounding divide plus the zero point (the depthwise stream holds the
 * same three values per channel). `narrow` 0 takes the general form (64-bit product, any
 * shift; `narrow_params` unread but present).
 *
 * Scratch: one static buffer of MTVG_ARM_DSP_SCRATCH_BYTES serves every call (calls run one
 * after another); the exporter sizes it from the largest need (bytes):
 *   conv2d:           6 * K8 + 8 * align_2(out_c)   (two pixels' int8 columns, their
 *                     widened int16 words, their int32 sums)
 *   depthwise_conv2d: 5 * C4 + k_h * k_w * sizeof(void*)   (the pixel's int32 sums, its tap
 *                     pointers, a row of input zero points for taps outside the input)
 */
#ifndef MTVG_ARM_DSP_H_
#define MTVG_ARM_DSP_H_

#include <stdint.h>

#include "mtvg/accel.h"

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief The name failures and counters are reported under. */
#define MTVG_ARM_DSP_NAME "arm-dsp"

#ifndef MTVG_ARM_DSP_SCRATCH_BYTES
/*! \brief Bytes of the one scratch buffer (the project sets it from the model's needs). */
#define MTVG_ARM_DSP_SCRATCH_BYTES 4096
#endif

#ifndef MTVG_ARM_DSP_PORTABLE
/*! \brief 1: the C versions of the loops the driver otherwise writes out in assembly on DSP
 * cores. Those take fourteen registers, so the frame pointer must be free: unoptimized
 * builds (-O0) get the C versions by themselves; an optimized build that keeps the frame
 * pointer (-fno-omit-frame-pointer) must set this to 1. */
#define MTVG_ARM_DSP_PORTABLE 0
#endif

/*! \brief Largest dimension, stride, padding or dilation a call takes (index products of
 * these stay within int32_t for the tensors a microcontroller holds). */
#define MTVG_ARM_DSP_MAX_DIM 32767

/*! \brief Largest number of taps (k_h * k_w) of a depthwise kernel. */
#define MTVG_ARM_DSP_MAX_TAPS 1024

/*! \brief Failure codes. */
#define MTVG_ARM_DSP_EARGUMENT 1 /* a NULL pointer or a value outside the limits above */
#define MTVG_ARM_DSP_ESCRATCH 2  /* the scratch buffer is smaller than the call needs */

/*!
 * \brief conv2d, int8 NHWC, any kernel size, stride, padding and dilation.
 * \param weights packed as the header says; bias, multiplier, shift: align_2(out_c) each,
 *        narrow_params: 4 * align_2(out_c).
 */
int32_t mtvg_arm_dsp_conv2d_s8(const int8_t* input, const uint32_t* weights,
                               const int32_t* bias, const int32_t* multiplier,
                               const int32_t* shift, const int32_t* narrow_params,
                               int8_t* output, int32_t in_h, int32_t in_w, int32_t in_c,
                               int32_t out_h, int32_t out_w, int32_t out_c, int32_t k_h,
                               int32_t k_w, int32_t stride_h, int32_t stride_w,
                               int32_t pad_top, int32_t pad_left, int32_t dilation_h,
                               int32_t dilation_w, int32_t input_zero_point,
                               int32_t output_zero_point, int32_t act_min, int32_t act_max,
                               int32_t weight_bits, int32_t narrow);

/*!
 * \brief depthwise_conv2d with channel multiplier 1 (out_c == in_c == c), int8 NHWC.
 * \param stream weights, biases and output stage records as the header says; each bias the
 *        model's plus (-input_zero_point) times the sum of the channel's weights over all
 *        taps (wrapping int32): the inputs are widened as they are, and padding taps read
 *        the input zero point. 3x3 layers under the short stage with c a multiple of four run
 *        written out: nine taps and the stage per group of four channels, one store.
 */
int32_t mtvg_arm_dsp_depthwise_conv2d_s8(
    const int8_t* input, const uint32_t* stream, int8_t* output, int32_t in_h, int32_t in_w,
    int32_t c, int32_t out_h, int32_t out_w, int32_t k_h, int32_t k_w, int32_t stride_h,
    int32_t stride_w, int32_t pad_top, int32_t pad_left, int32_t dilation_h,
    int32_t dilation_w, int32_t input_zero_point, int32_t output_zero_point, int32_t act_min,
    int32_t act_max, int32_t narrow);

/*!
 * \brief depthwise_conv2d with channel multiplier 1 for Helium (Cortex-M55: four int32 lanes
 * per vector, sixteen channels per step; plain C elsewhere, with the same results).
 * \param weights TFLite's own (k_h, k_w, c) int8 layout.
 * \param bias the model's bias plus (-input_zero_point) times the sum of the channel's
 *        weights over all taps (wrapping int32): padding taps read the input zero point.
 * Scratch: as depthwise_conv2d.
 */
int32_t mtvg_arm_dsp_depthwise_helium_s8(
    const int8_t* input, const int8_t* weights, const int32_t* bias, const int32_t* multiplier,
    const int32_t* shift, const int32_t* narrow_params, int8_t* output, int32_t in_h, int32_t in_w,
    int32_t c, int32_t out_h, int32_t out_w, int32_t k_h, int32_t k_w, int32_t stride_h,
    int32_t stride_w, int32_t pad_top, int32_t pad_left, int32_t dilation_h, int32_t dilation_w,
    int32_t input_zero_point, int32_t output_zero_point, int32_t act_min, int32_t act_max,
    int32_t narrow);

/*!
 * \brief conv2d with a 1x1 kernel, stride 1 and no padding, or dense (its rows as the
 * pixels), int8, for Helium (Cortex-M55: four pixels by one channel per step, one VMLADAVA
 * of sixteen products per pixel; plain C elsewhere, with the same results). No scratch.
 * \param weights TFLite's own [out_c][in_c] int8.
 * \param records per channel four int32: the model's bias plus (-input_zero_point) times
 *        the channel's weight sum (wrapping int32), the multiplier, the shift and
 *        output_zero_point (the written-out loop reads a channel's constants with one
 *        pointer).
 * \param pixels out_h * out_w (or the dense layer's rows).
 * \param narrow 1: the short output stage, as the depthwise kernels' (`narrow` above).
 */
int32_t mtvg_arm_dsp_pointwise_helium_s8(const int8_t* input, const int8_t* weights,
                                         const int32_t* records, int8_t* output,
                                         int32_t pixels, int32_t in_c, int32_t out_c,
                                         int32_t output_zero_point, int32_t act_min,
                                         int32_t act_max, int32_t narrow);

/*! \brief Counters (mtvg/accel.h): calls per operator, scratch size and peak. */
void mtvg_arm_dsp_counters(mtvg_accel_emit_fn emit);

#ifdef __cplusplus
}
#endif

#endif /* MTVG_ARM_DSP_H_ */
