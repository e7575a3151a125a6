/* microtvm-gen `cmsis-nn` driver: the shared int8 calling convention onto CMSIS-NN v7. */
#include "mtvg_cmsis_nn.h"

#include <stddef.h>

#include "arm_nnfunctions.h"
#include "arm_nnsupportfunctions.h"

#define INT8_LOWEST (-128)
#define INT8_HIGHEST 127
/* TFLite's quantized multipliers are non-negative and their shifts lie in [-31, 30]
 * (a left shift of 31 would overflow before the multiply). */
#define SHIFT_LOWEST (-31)
#define SHIFT_HIGHEST 30
/* arm_softmax_s8's input left shift. */
#define SOFTMAX_SHIFT_HIGHEST 31

/* The one scratch buffer; the union aligns it for the int32 sums and int16 columns
 * CMSIS-NN keeps there. */
static union {
  int64_t align;
  int8_t bytes[MTVG_CMSIS_NN_SCRATCH_BYTES];
} scratch;

enum op { OP_CONV2D, OP_DEPTHWISE, OP_DENSE, OP_AVGPOOL, OP_MAXPOOL, OP_ADD, OP_SOFTMAX, OP_COUNT };

static const char* const op_names[OP_COUNT] = {"conv2d", "depthwise_conv2d", "dense", "avgpool",
                                               "maxpool", "add", "softmax"};
static const char* const counter_names[OP_COUNT] = {
    "conv2d_calls", "depthwise_conv2d_calls", "dense_calls", "avgpool_calls",
    "maxpool_calls", "add_calls", "softmax_calls"};
static uint64_t calls[OP_COUNT];
static int32_t scratch_peak;

/* ---- failure messages (bounded, no printf) ---------------------------------------------- */

typedef struct {
  char text[MTVG_ACCEL_MESSAGE_BYTES];
  size_t length;
} message;

static void put_text(message* m, const char* s) {
  while (*s != '\0' && m->length + 1 < sizeof(m->text)) {
    m->text[m->length++] = *s++;
  }
  m->text[m->length] = '\0';
}

static void put_int(message* m, int32_t value) {
  char digits[12];
  size_t n = 0;
  uint32_t magnitude = value < 0 ? 0u - (uint32_t)value : (uint32_t)value;
  do {
    digits[n++] = (char)('0' + magnitude % 10u);
    magnitude /= 10u;
  } while (magnitude != 0u && n < sizeof(digits));
  if (value < 0) {
    put_text(m, "-");
  }
  while (n > 0) {
    char one[2] = {digits[--n], '\0'};
    put_text(m, one);
  }
}

static int32_t fail(enum op op, const char* reason, int32_t status) {
  message m = {{0}, 0};
  put_text(&m, op_names[op]);
  put_text(&m, ": ");
  put_text(&m, reason);
  mtvg_accel_error(MTVG_CMSIS_NN_NAME, m.text);
  return status;
}

static int32_t bad_argument(enum op op, const char* what) {
  return fail(op, what, MTVG_CMSIS_NN_EARG);
}

/* A CMSIS-NN status as the driver's: 0, or a message naming the function and status. */
static int32_t kernel_status(enum op op, const char* function, arm_cmsis_nn_status status) {
  if (status == ARM_CMSIS_NN_SUCCESS) {
    return 0;
  }
  message m = {{0}, 0};
  put_text(&m, op_names[op]);
  put_text(&m, ": ");
  put_text(&m, function);
  put_text(&m, " returned ");
  put_text(&m, status == ARM_CMSIS_NN_ARG_ERROR       ? "ARM_CMSIS_NN_ARG_ERROR"
               : status == ARM_CMSIS_NN_NO_IMPL_ERROR ? "ARM_CMSIS_NN_NO_IMPL_ERROR"
               : status == ARM_CMSIS_NN_FAILURE       ? "ARM_CMSIS_NN_FAILURE"
                                                       : "status");
  put_text(&m, " (");
  put_int(&m, (int32_t)status);
  put_text(&m, ")");
  mtvg_accel_error(MTVG_CMSIS_NN_NAME, m.text);
  return MTVG_CMSIS_NN_EKERNEL;
}

/* Point ctx at the scratch buffer after checking it holds `need` bytes. */
static int32_t take_scratch(enum op op, int32_t need, cmsis_nn_context* ctx) {
  ctx->buf = scratch.bytes;
  ctx->size = (int32_t)sizeof(scratch.bytes);
  if (need < 0) {
    return bad_argument(op, "CMSIS-NN reported a negative scratch size");
  }
  if (need > scratch_peak) {
    scratch_peak = need;
  }
  if (need > ctx->size) {
    message m = {{0}, 0};
    put_text(&m, op_names[op]);
    put_text(&m, ": scratch buffer of ");
    put_int(&m, need);
    put_text(&m, " bytes needed, ");
    put_int(&m, ctx->size);
    put_text(&m, " available; build with -DMTVG_CMSIS_NN_SCRATCH_BYTES=");
    put_int(&m, need);
    mtvg_accel_error(MTVG_CMSIS_NN_NAME, m.text);
    return MTVG_CMSIS_NN_ESCRATCH;
  }
  calls[op]++;
  return 0;
}

/* ---- argument checks --------------------------------------------------------------------- */

static int in_range(int32_t value, int32_t lowest, int32_t highest) {
  return value >= lowest && value <= highest;
}

static int is_dim(int32_t value) { return in_range(value, 1, MTVG_CMSIS_NN_MAX_DIM); }

/* a * b * c * d <= MTVG_CMSIS_NN_MAX_ELEMENTS for positive factors (no overflow on the way). */
static int fits(int32_t a, int32_t b, int32_t c, int32_t d) {
  const int32_t factors[4] = {a, b, c, d};
  int64_t product = 1;
  for (int i = 0; i < 4; ++i) {
    if (factors[i] < 1) {
      return 0;
    }
    product *= factors[i];
    if (product > (int64_t)MTVG_CMSIS_NN_MAX_ELEMENTS) {
      return 0;
    }
  }
  return 1;
}

static int activation_ok(int32_t act_min, int32_t act_max) {
  return in_range(act_min, INT8_LOWEST, INT8_HIGHEST) &&
         in_range(act_max, act_min, INT8_HIGHEST);
}

static int requant_ok(int32_t multiplier, int32_t shift) {
  return multiplier >= 0 && in_range(shift, SHIFT_LOWEST, SHIFT_HIGHEST);
}

/*
 * One spatial axis of a window operator: the output size must be the one TFLite derives
 * from the input, the (dilated) window, the stride and the leading padding. The padding
 * after the input that this implies lies in [1 - stride, extent - 1] (VALID may leave up to
 * stride - 1 input rows unused; no window lies wholly in padding), and so does the leading
 * padding's upper end. CMSIS-NN's fast paths rely on this (a 1x1 convolution writes as
 * many outputs as there are inputs).
 */
static int axis_ok(int32_t in, int32_t out, int32_t window, int32_t stride, int32_t dilation,
                   int32_t pad) {
  if (!is_dim(in) || !is_dim(out) || !is_dim(window) || !is_dim(stride) || !is_dim(dilation) ||
      !in_range(pad, 0, MTVG_CMSIS_NN_MAX_DIM)) {
    return 0;
  }
  int64_t extent = (int64_t)(window - 1) * dilation + 1;
  int64_t pad_after = (int64_t)(out - 1) * stride + extent - in - pad;
  return pad <= extent - 1 && pad_after <= extent - 1 && pad_after > -(int64_t)stride;
}

static int per_channel_ok(const int32_t* multiplier, const int32_t* shift, int32_t count) {
  for (int32_t i = 0; i < count; ++i) {
    if (!requant_ok(multiplier[i], shift[i])) {
      return 0;
    }
  }
  return 1;
}

/* What conv2d and depthwise_conv2d check alike; returns a reason or NULL. */
static const char* conv_arguments(const int8_t* input, const int8_t* weights,
                                  const int32_t* multiplier, const int32_t* shift,
                                  const int8_t* output, int32_t in_h, int32_t in_w, int32_t in_c,
                                  int32_t out_h, int32_t out_w, int32_t out_c, int32_t k_h,
                                  int32_t k_w, int32_t stride_h, int32_t stride_w,
                                  int32_t pad_top, int32_t pad_left, int32_t dilation_h,
                                  int32_t dilation_w, int32_t input_zero_point,
                                  int32_t output_zero_point, int32_t act_min, int32_t act_max) {
#if !MTVG_CMSIS_NN_CHECK_ARGUMENTS
  /* Generated code: the exporter checked every value it passes (generator/accel/cmsis_nn). */
  if (input != NULL && weights != NULL && multiplier != NULL && shift != NULL &&
      output != NULL) {
    return NULL;
  }
#endif
  if (input == NULL || weights == NULL || multiplier == NULL || shift == NULL || output == NULL) {
    return "a NULL tensor";
  }
  if (!is_dim(in_c) || !is_dim(out_c) || !fits(in_h, in_w, in_c, 1) ||
      !fits(out_h, out_w, out_c, 1) || !fits(out_c, k_h, k_w, in_c)) {
    return "a dimension out of range";
  }
  if (!axis_ok(in_h, out_h, k_h, stride_h, dilation_h, pad_top) ||
      !axis_ok(in_w, out_w, k_w, stride_w, dilation_w, pad_left)) {
    return "the output size does not follow from input, kernel, stride, dilation and padding";
  }
  if (!in_range(input_zero_point, INT8_LOWEST, INT8_HIGHEST) ||
      !in_range(output_zero_point, INT8_LOWEST, INT8_HIGHEST)) {
    return "a zero point outside [-128, 127]";
  }
  if (!activation_ok(act_min, act_max)) {
    return "an activation range outside [-128, 127]";
  }
  if (!per_channel_ok(multiplier, shift, out_c)) {
    return "a negative multiplier or a shift outside [-31, 30]";
  }
  return NULL;
}

/* ---- operators ----------------------------------------------------------------------------- */

#if defined(ARM_MATH_MVEI)
/* Whether arm_convolve_wrapper_s8 hands this convolution to arm_convolve_1_x_n_s8 (its test,
 * kept in step with CMSIS-NN v7's wrapper). */
static int wrapper_picks_1xn(const cmsis_nn_conv_params* params, const cmsis_nn_dims* input_dims,
                             const cmsis_nn_dims* filter_dims) {
  const int one_by_one = params->padding.w == 0 && params->padding.h == 0 &&
                         filter_dims->w == 1 && filter_dims->h == 1 &&
                         params->dilation.w == 1 && params->dilation.h == 1;
  return !one_by_one && input_dims->h == 1 && params->dilation.w == 1 && filter_dims->h == 1 &&
         (params->stride.w * input_dims->c) % 4 == 0;
}

static int32_t larger(int32_t a, int32_t b) { return a > b ? a : b; }

/*
 * CMSIS-NN v7's MVE arm_convolve_1_x_n_s8 builds the windows that reach past the input's
 * right edge from k_w - 1 input columns followed by padding. That is right only when those
 * windows' input part starts exactly k_w - 1 columns before the edge; otherwise (e.g. SAME
 * padding with k_w 5 and stride 2, or VALID padding leaving a column unused) it reads past
 * the input and some outputs are wrong. It also returns ARM_CMSIS_NN_FAILURE for padding
 * that is not split as TFLite's SAME splits it. This follows its own arithmetic to tell
 * whether it is right for a geometry; where not, the driver calls arm_convolve_s8.
 */
static int mve_1xn_is_right(int32_t in_w, int32_t out_w, int32_t k_w, int32_t stride_w,
                            int32_t pad_left) {
  const int32_t total = (out_w - 1) * stride_w + k_w - in_w;
  const int32_t asym = total % 2;
  if (pad_left * 2 + asym != total || in_w < k_w) {
    return 0;
  }
  const int32_t right =
      pad_left + asym != 0 ? larger(1, (pad_left + asym + stride_w - 1) / stride_w) : 0;
  const int32_t left = pad_left != 0 ? larger(1, (pad_left + stride_w - 1) / stride_w) : 0;
  const int32_t middle = larger(out_w - (right + left), 0);
  if (left + middle + right != out_w) {
    return 1; /* it calls arm_convolve_s8 itself */
  }
  const int32_t inside = in_w - (stride_w * (left + middle) - pad_left);
  return right == 0 ? inside >= k_w - 1 : inside == k_w - 1;
}
#endif

/* Whether to call arm_convolve_s8 rather than the wrapper (see mve_1xn_is_right). */
static int conv_needs_generic(const cmsis_nn_conv_params* params, const cmsis_nn_dims* input_dims,
                              const cmsis_nn_dims* filter_dims, const cmsis_nn_dims* output_dims) {
#if defined(ARM_MATH_MVEI)
  return wrapper_picks_1xn(params, input_dims, filter_dims) &&
         !mve_1xn_is_right(input_dims->w, output_dims->w, filter_dims->w, params->stride.w,
                           params->padding.w);
#else
  (void)params;
  (void)input_dims;
  (void)filter_dims;
  (void)output_dims;
  return 0;
#endif
}

/* Whether to call arm_depthwise_conv_s8 rather than the wrapper: on MVE the wrapper runs a
 * depthwise convolution of one input channel as a convolution, which may reach the
 * arm_convolve_1_x_n_s8 geometries mve_1xn_is_right rejects. */
static int depthwise_needs_generic(const cmsis_nn_dw_conv_params* params,
                                   const cmsis_nn_dims* input_dims,
                                   const cmsis_nn_dims* filter_dims,
                                   const cmsis_nn_dims* output_dims) {
#if defined(ARM_MATH_MVEI)
  if (input_dims->c != 1 ||
      output_dims->c <= CONVERT_DW_CONV_WITH_ONE_INPUT_CH_AND_OUTPUT_CH_ABOVE_THRESHOLD) {
    return 0;
  }
  const cmsis_nn_conv_params conv = {params->input_offset, params->output_offset,
                                     params->stride,       params->padding,
                                     params->dilation,     params->activation};
  const cmsis_nn_dims conv_filter = {filter_dims->c, filter_dims->h, filter_dims->w,
                                     filter_dims->n};
  return conv_needs_generic(&conv, input_dims, &conv_filter, output_dims);
#else
  (void)params;
  (void)input_dims;
  (void)filter_dims;
  (void)output_dims;
  return 0;
#endif
}

int32_t mtvg_cmsis_nn_conv2d_s8(const int8_t* input, const int8_t* weights, const int32_t* bias,
                                const int32_t* multiplier, const int32_t* shift, int8_t* output,
                                int32_t in_h, int32_t in_w, int32_t in_c, int32_t out_h,
                                int32_t out_w, int32_t out_c, int32_t k_h, int32_t k_w,
                                int32_t stride_h, int32_t stride_w, int32_t pad_top,
                                int32_t pad_left, int32_t dilation_h, int32_t dilation_w,
                                int32_t input_zero_point, int32_t output_zero_point,
                                int32_t act_min, int32_t act_max) {
  const char* bad = conv_arguments(input, weights, multiplier, shift, output, in_h, in_w, in_c,
                                   out_h, out_w, out_c, k_h, k_w, stride_h, stride_w, pad_top,
                                   pad_left, dilation_h, dilation_w, input_zero_point,
                                   output_zero_point, act_min, act_max);
  if (bad != NULL) {
    return bad_argument(OP_CONV2D, bad);
  }
  const cmsis_nn_conv_params params = {
      -input_zero_point, output_zero_point, {stride_w, stride_h}, {pad_left, pad_top},
      {dilation_w, dilation_h}, {act_min, act_max}};
  /* CMSIS-NN does not write through these; its struct has no const. */
  const cmsis_nn_per_channel_quant_params quant = {(int32_t*)multiplier, (int32_t*)shift};
  const cmsis_nn_dims input_dims = {1, in_h, in_w, in_c};
  const cmsis_nn_dims filter_dims = {out_c, k_h, k_w, in_c};
  const cmsis_nn_dims bias_dims = {1, 1, 1, out_c};
  const cmsis_nn_dims output_dims = {1, out_h, out_w, out_c};
  cmsis_nn_context ctx;
  const int generic = conv_needs_generic(&params, &input_dims, &filter_dims, &output_dims);
  int32_t status = take_scratch(
      OP_CONV2D,
      generic ? arm_convolve_s8_get_buffer_size(&input_dims, &filter_dims)
              : arm_convolve_wrapper_s8_get_buffer_size(&params, &input_dims, &filter_dims,
                                                        &output_dims),
      &ctx);
  if (status != 0) {
    return status;
  }
  if (generic) {
    return kernel_status(OP_CONV2D, "arm_convolve_s8",
                         arm_convolve_s8(&ctx, &params, &quant, &input_dims, input, &filter_dims,
                                         weights, &bias_dims, bias, NULL, &output_dims, output));
  }
  return kernel_status(OP_CONV2D, "arm_convolve_wrapper_s8",
                       arm_convolve_wrapper_s8(&ctx, &params, &quant, &input_dims, input,
                                               &filter_dims, weights, &bias_dims, bias,
                                               &output_dims, output));
}

int32_t mtvg_cmsis_nn_depthwise_conv2d_s8(
    const int8_t* input, const int8_t* weights, const int32_t* bias, const int32_t* multiplier,
    const int32_t* shift, int8_t* output, int32_t in_h, int32_t in_w, int32_t in_c,
    int32_t out_h, int32_t out_w, int32_t out_c, int32_t k_h, int32_t k_w, int32_t stride_h,
    int32_t stride_w, int32_t pad_top, int32_t pad_left, int32_t dilation_h,
    int32_t dilation_w, int32_t input_zero_point, int32_t output_zero_point, int32_t act_min,
    int32_t act_max) {
  const char* bad = conv_arguments(input, weights, multiplier, shift, output, in_h, in_w, in_c,
                                   out_h, out_w, out_c, k_h, k_w, stride_h, stride_w, pad_top,
                                   pad_left, dilation_h, dilation_w, input_zero_point,
                                   output_zero_point, act_min, act_max);
  if (bad == NULL && out_c % in_c != 0) {
    bad = "out_c is not a multiple of in_c";
  }
  if (bad != NULL) {
    return bad_argument(OP_DEPTHWISE, bad);
  }
  const cmsis_nn_dw_conv_params params = {
      -input_zero_point, output_zero_point, out_c / in_c, {stride_w, stride_h},
      {pad_left, pad_top}, {dilation_w, dilation_h}, {act_min, act_max}};
  const cmsis_nn_per_channel_quant_params quant = {(int32_t*)multiplier, (int32_t*)shift};
  const cmsis_nn_dims input_dims = {1, in_h, in_w, in_c};
  const cmsis_nn_dims filter_dims = {1, k_h, k_w, out_c};
  const cmsis_nn_dims bias_dims = {1, 1, 1, out_c};
  const cmsis_nn_dims output_dims = {1, out_h, out_w, out_c};
  cmsis_nn_context ctx;
  const int generic = depthwise_needs_generic(&params, &input_dims, &filter_dims, &output_dims);
  int32_t status = take_scratch(OP_DEPTHWISE,
                                generic ? 0
                                        : arm_depthwise_conv_wrapper_s8_get_buffer_size(
                                              &params, &input_dims, &filter_dims, &output_dims),
                                &ctx);
  if (status != 0) {
    return status;
  }
  if (generic) {
    return kernel_status(OP_DEPTHWISE, "arm_depthwise_conv_s8",
                         arm_depthwise_conv_s8(&ctx, &params, &quant, &input_dims, input,
                                               &filter_dims, weights, &bias_dims, bias,
                                               &output_dims, output));
  }
  return kernel_status(OP_DEPTHWISE, "arm_depthwise_conv_wrapper_s8",
                       arm_depthwise_conv_wrapper_s8(&ctx, &params, &quant, &input_dims, input,
                                                     &filter_dims, weights, &bias_dims, bias,
                                                     &output_dims, output));
}

int32_t mtvg_cmsis_nn_dense_s8(const int8_t* input, const int8_t* weights, const int32_t* bias,
                               const int32_t* multiplier, const int32_t* shift,
                               const int32_t* kernel_sums, int8_t* output, int32_t batches,
                               int32_t in_depth, int32_t units, int32_t input_zero_point,
                               int32_t output_zero_point, int32_t act_min, int32_t act_max) {
  if (input == NULL || weights == NULL || multiplier == NULL || shift == NULL ||
      kernel_sums == NULL || output == NULL) {
    return bad_argument(OP_DENSE, "a NULL tensor");
  }
  if (!is_dim(batches) || !is_dim(in_depth) || !is_dim(units) ||
      !fits(batches, in_depth, 1, 1) || !fits(units, in_depth, 1, 1) ||
      !fits(batches, units, 1, 1)) {
    return bad_argument(OP_DENSE, "a dimension out of range");
  }
  if (!in_range(input_zero_point, INT8_LOWEST, INT8_HIGHEST) ||
      !in_range(output_zero_point, INT8_LOWEST, INT8_HIGHEST)) {
    return bad_argument(OP_DENSE, "a zero point outside [-128, 127]");
  }
  if (!activation_ok(act_min, act_max)) {
    return bad_argument(OP_DENSE, "an activation range outside [-128, 127]");
  }
  if (!per_channel_ok(multiplier, shift, units)) {
    return bad_argument(OP_DENSE, "a negative multiplier or a shift outside [-31, 30]");
  }
  int per_tensor = 1;
  for (int32_t u = 1; u < units; ++u) {
    per_tensor = per_tensor && multiplier[u] == multiplier[0] && shift[u] == shift[0];
  }
  const cmsis_nn_fc_params params = {-input_zero_point, 0, output_zero_point, {act_min, act_max}};
  const cmsis_nn_dims input_dims = {batches, 1, 1, in_depth};
  const cmsis_nn_dims filter_dims = {in_depth, 1, 1, units};
  const cmsis_nn_dims bias_dims = {1, 1, 1, units};
  const cmsis_nn_dims output_dims = {batches, 1, 1, units};
  cmsis_nn_context ctx;
  int32_t status = take_scratch(OP_DENSE, 0, &ctx);
  if (status != 0) {
    return status;
  }
  /* Where CMSIS-NN wants a buffer (MVE) it only reads each unit's kernel sum from it: the
   * export's, in flash. */
  ctx.buf = (void*)kernel_sums;
  ctx.size = arm_fully_connected_s8_get_buffer_size(&filter_dims);
  if (per_tensor) {
    const cmsis_nn_per_tensor_quant_params quant = {multiplier[0], shift[0]};
    return kernel_status(OP_DENSE, "arm_fully_connected_s8",
                         arm_fully_connected_s8(&ctx, &params, &quant, &input_dims, input,
                                                &filter_dims, weights, &bias_dims, bias,
                                                &output_dims, output));
  }
  const cmsis_nn_per_channel_quant_params quant = {(int32_t*)multiplier, (int32_t*)shift};
  return kernel_status(OP_DENSE, "arm_fully_connected_per_channel_s8",
                       arm_fully_connected_per_channel_s8(&ctx, &params, &quant, &input_dims,
                                                          input, &filter_dims, weights,
                                                          &bias_dims, bias, &output_dims,
                                                          output));
}

/* What both pools check; returns a reason or NULL. */
static const char* pool_arguments(const int8_t* input, const int8_t* output, int32_t in_h,
                                  int32_t in_w, int32_t c, int32_t out_h, int32_t out_w,
                                  int32_t pool_h, int32_t pool_w, int32_t stride_h,
                                  int32_t stride_w, int32_t pad_top, int32_t pad_left,
                                  int32_t act_min, int32_t act_max) {
  if (input == NULL || output == NULL) {
    return "a NULL tensor";
  }
  if (!is_dim(c) || !fits(in_h, in_w, c, 1) || !fits(out_h, out_w, c, 1)) {
    return "a dimension out of range";
  }
  if (!axis_ok(in_h, out_h, pool_h, stride_h, 1, pad_top) ||
      !axis_ok(in_w, out_w, pool_w, stride_w, 1, pad_left)) {
    return "the output size does not follow from input, window, stride and padding";
  }
  if (!activation_ok(act_min, act_max)) {
    return "an activation range outside [-128, 127]";
  }
  return NULL;
}

int32_t mtvg_cmsis_nn_avgpool_s8(const int8_t* input, int8_t* output, int32_t in_h, int32_t in_w,
                                 int32_t c, int32_t out_h, int32_t out_w, int32_t pool_h,
                                 int32_t pool_w, int32_t stride_h, int32_t stride_w,
                                 int32_t pad_top, int32_t pad_left, int32_t act_min,
                                 int32_t act_max) {
  const char* bad = pool_arguments(input, output, in_h, in_w, c, out_h, out_w, pool_h, pool_w,
                                   stride_h, stride_w, pad_top, pad_left, act_min, act_max);
  if (bad != NULL) {
    return bad_argument(OP_AVGPOOL, bad);
  }
  const cmsis_nn_pool_params params = {{stride_w, stride_h}, {pad_left, pad_top},
                                       {act_min, act_max}};
  const cmsis_nn_dims input_dims = {1, in_h, in_w, c};
  const cmsis_nn_dims filter_dims = {1, pool_h, pool_w, 1};
  const cmsis_nn_dims output_dims = {1, out_h, out_w, c};
  cmsis_nn_context ctx;
  int32_t status = take_scratch(OP_AVGPOOL, arm_avgpool_s8_get_buffer_size(out_w, c), &ctx);
  if (status != 0) {
    return status;
  }
  return kernel_status(OP_AVGPOOL, "arm_avgpool_s8",
                       arm_avgpool_s8(&ctx, &params, &input_dims, input, &filter_dims,
                                      &output_dims, output));
}

int32_t mtvg_cmsis_nn_maxpool_s8(const int8_t* input, int8_t* output, int32_t in_h, int32_t in_w,
                                 int32_t c, int32_t out_h, int32_t out_w, int32_t pool_h,
                                 int32_t pool_w, int32_t stride_h, int32_t stride_w,
                                 int32_t pad_top, int32_t pad_left, int32_t act_min,
                                 int32_t act_max) {
  const char* bad = pool_arguments(input, output, in_h, in_w, c, out_h, out_w, pool_h, pool_w,
                                   stride_h, stride_w, pad_top, pad_left, act_min, act_max);
  if (bad == NULL && input == output) {
    bad = "the output overlaps the input";
  }
  if (bad != NULL) {
    return bad_argument(OP_MAXPOOL, bad);
  }
  const cmsis_nn_pool_params params = {{stride_w, stride_h}, {pad_left, pad_top},
                                       {act_min, act_max}};
  const cmsis_nn_dims input_dims = {1, in_h, in_w, c};
  const cmsis_nn_dims filter_dims = {1, pool_h, pool_w, 1};
  const cmsis_nn_dims output_dims = {1, out_h, out_w, c};
  cmsis_nn_context ctx;
  int32_t status = take_scratch(OP_MAXPOOL, 0, &ctx);
  if (status != 0) {
    return status;
  }
  return kernel_status(OP_MAXPOOL, "arm_max_pool_s8",
                       arm_max_pool_s8(&ctx, &params, &input_dims, input, &filter_dims,
                                       &output_dims, output));
}

int32_t mtvg_cmsis_nn_add_s8(const int8_t* a, const int8_t* b, int8_t* out, int32_t size,
                             int32_t a_offset, int32_t a_mult, int32_t a_shift,
                             int32_t b_offset, int32_t b_mult, int32_t b_shift,
                             int32_t left_shift, int32_t out_offset, int32_t out_mult,
                             int32_t out_shift, int32_t act_min, int32_t act_max) {
  if (a == NULL || b == NULL || out == NULL) {
    return bad_argument(OP_ADD, "a NULL tensor");
  }
  if (size < 1) {
    return bad_argument(OP_ADD, "an empty tensor");
  }
  /* CMSIS-NN's ranges: input offsets (negated zero points) in [-127, 128]. */
  if (!in_range(a_offset, -INT8_HIGHEST, -INT8_LOWEST) ||
      !in_range(b_offset, -INT8_HIGHEST, -INT8_LOWEST) ||
      !in_range(out_offset, INT8_LOWEST, INT8_HIGHEST)) {
    return bad_argument(OP_ADD, "an offset outside the int8 zero points' range");
  }
  if (!requant_ok(a_mult, a_shift) || !requant_ok(b_mult, b_shift) ||
      !requant_ok(out_mult, out_shift) || left_shift < 0) {
    return bad_argument(OP_ADD, "a negative multiplier or a shift out of range");
  }
  const int32_t input_up = a_shift > b_shift ? a_shift : b_shift;
  if ((int64_t)left_shift + (input_up > 0 ? input_up : 0) + 1 + (out_shift > 0 ? out_shift : 0) >
      MTVG_CMSIS_NN_MAX_ADD_SCALE_BITS) {
    return bad_argument(OP_ADD, "left shifts that would overflow int32");
  }
  if (!activation_ok(act_min, act_max)) {
    return bad_argument(OP_ADD, "an activation range outside [-128, 127]");
  }
  cmsis_nn_context ctx;
  int32_t status = take_scratch(OP_ADD, 0, &ctx);
  if (status != 0) {
    return status;
  }
  return kernel_status(OP_ADD, "arm_elementwise_add_s8",
                       arm_elementwise_add_s8(a, b, a_offset, a_mult, a_shift, b_offset, b_mult,
                                              b_shift, left_shift, out, out_offset, out_mult,
                                              out_shift, act_min, act_max, size));
}

int32_t mtvg_cmsis_nn_softmax_s8(const int8_t* input, int8_t* output, int32_t rows,
                                 int32_t row_size, int32_t mult, int32_t shift,
                                 int32_t diff_min) {
  if (input == NULL || output == NULL) {
    return bad_argument(OP_SOFTMAX, "a NULL tensor");
  }
  if (rows < 1 || !in_range(row_size, 1, MTVG_CMSIS_NN_MAX_SOFTMAX_ROW) ||
      !fits(rows, row_size, 1, 1)) {
    return bad_argument(OP_SOFTMAX, "a dimension out of range");
  }
  if (mult < 0 || !in_range(shift, 0, SOFTMAX_SHIFT_HIGHEST) || diff_min > 0) {
    return bad_argument(OP_SOFTMAX, "a negative multiplier or diff_min, or a shift outside "
                                    "[0, 31]");
  }
  cmsis_nn_context ctx;
  int32_t status = take_scratch(OP_SOFTMAX, 0, &ctx);
  if (status != 0) {
    return status;
  }
  arm_softmax_s8(input, rows, row_size, mult, shift, diff_min, output);
  return 0;
}

void mtvg_cmsis_nn_counters(mtvg_accel_emit_fn emit) {
  for (int i = 0; i < OP_COUNT; ++i) {
    emit(MTVG_CMSIS_NN_NAME, counter_names[i], calls[i]);
  }
  emit(MTVG_CMSIS_NN_NAME, "scratch_bytes", (uint64_t)sizeof(scratch.bytes));
  emit(MTVG_CMSIS_NN_NAME, "scratch_peak_bytes", (uint64_t)scratch_peak);
}
