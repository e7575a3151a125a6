/*
 * vanilla: the driver. It writes a command's registers, sets CTRL.START, and polls STATUS,
 * calling vanilla_device_clock() (the device model's clock) between reads, at most
 * VANILLA_POLL_LIMIT times. A device error or a timeout becomes one message for
 * mtvg_accel_error() ("<function>: <reason>") and a nonzero return.
 */
#include "vanilla.h"

#include <stddef.h>

#include "vanilla_device.h"

#if VANILLA_POLL_LIMIT < 1
#error "VANILLA_POLL_LIMIT must be at least 1"
#endif

#define REG(field) ((uint32_t)offsetof(vanilla_regs_t, field))
#define REG_WORDS (VANILLA_REGS_BYTES / 4u)

/* Register names by word offset, for messages. */
static const char* const reg_names[REG_WORDS] = {
    "ID", "CMD", "CTRL", "STATUS", "ERR_REG", "ERR_INDEX", "ERR_VALUE", "ERR_LO", "ERR_HI",
    "FAULT_AT", "FLAGS", "ADDR_IN (input)", "ADDR_IN_HI", "ADDR_W (weights)", "ADDR_W_HI",
    "ADDR_BIAS (bias)", "ADDR_BIAS_HI", "ADDR_MULT (multiplier)", "ADDR_MULT_HI",
    "ADDR_SHIFT (shift)", "ADDR_SHIFT_HI", "ADDR_OUT (output)", "ADDR_OUT_HI", "SIZE_IN",
    "SIZE_W", "SIZE_BIAS", "SIZE_MULT", "SIZE_SHIFT", "SIZE_OUT", "IN_C", "IN_H", "IN_W",
    "OUT_C", "OUT_H", "OUT_W", "K_H", "K_W", "STRIDE_H", "STRIDE_W", "PAD_TOP", "PAD_LEFT",
    "DIL_H", "DIL_W", "BATCHES", "IN_ZP", "OUT_ZP", "ACT_MIN", "ACT_MAX", "CMD_SEQ",
    "CNT_COMMANDS", "CNT_ERRORS", "CNT_MACS_LO", "CNT_MACS_HI", "CNT_BYTES_IN_LO",
    "CNT_BYTES_IN_HI", "CNT_BYTES_OUT_LO", "CNT_BYTES_OUT_HI"};

/* ---- registers ------------------------------------------------------------------------- */

static void set_addr(volatile uint32_t* lo, volatile uint32_t* hi, const void* p) {
  uint64_t address = (uint64_t)(uintptr_t)p;
  *lo = (uint32_t)address;
  *hi = (uint32_t)(address >> 32);
}

/* a·b·c·d·unit bytes for the size registers; 0 for a nonpositive factor (the device rejects
 * the geometry first), saturated at UINT32_MAX (the device rejects that as over its limit). */
static uint32_t bytes_of(int32_t a, int32_t b, int32_t c, int32_t d, uint32_t unit) {
  int32_t factors[4];
  uint64_t total = unit;
  size_t i;
  factors[0] = a;
  factors[1] = b;
  factors[2] = c;
  factors[3] = d;
  for (i = 0; i < 4; ++i) {
    if (factors[i] <= 0) {
      return 0u;
    }
    total *= (uint64_t)factors[i];
    if (total > UINT32_MAX) {
      return UINT32_MAX;
    }
  }
  return (uint32_t)total;
}

/* Every register a command reads, so nothing of an earlier command is left over. */
static void clear_command_registers(void) {
  uint32_t offset;
  for (offset = REG(FLAGS); offset <= REG(ACT_MAX); offset += 4u) {
    *(volatile uint32_t*)((volatile unsigned char*)VANILLA + offset) = 0u;
  }
}

static void set_conv_geometry(int32_t in_c, int32_t in_h, int32_t in_w, int32_t out_c,
                              int32_t out_h, int32_t out_w, int32_t k_h, int32_t k_w,
                              int32_t stride_h, int32_t stride_w, int32_t pad_top,
                              int32_t pad_left, int32_t dilation_h, int32_t dilation_w) {
  VANILLA->IN_C = (uint32_t)in_c;
  VANILLA->IN_H = (uint32_t)in_h;
  VANILLA->IN_W = (uint32_t)in_w;
  VANILLA->OUT_C = (uint32_t)out_c;
  VANILLA->OUT_H = (uint32_t)out_h;
  VANILLA->OUT_W = (uint32_t)out_w;
  VANILLA->K_H = (uint32_t)k_h;
  VANILLA->K_W = (uint32_t)k_w;
  VANILLA->STRIDE_H = (uint32_t)stride_h;
  VANILLA->STRIDE_W = (uint32_t)stride_w;
  VANILLA->PAD_TOP = (uint32_t)pad_top;
  VANILLA->PAD_LEFT = (uint32_t)pad_left;
  VANILLA->DIL_H = (uint32_t)dilation_h;
  VANILLA->DIL_W = (uint32_t)dilation_w;
}

static void set_requant(const int32_t* bias, const int32_t* multiplier, const int32_t* shift,
                        int32_t channels, int32_t input_zero_point, int32_t output_zero_point,
                        int32_t act_min, int32_t act_max) {
  uint32_t per_channel = bytes_of(channels, 1, 1, 1, (uint32_t)sizeof(int32_t));
  set_addr(&VANILLA->ADDR_BIAS_LO, &VANILLA->ADDR_BIAS_HI, bias);
  set_addr(&VANILLA->ADDR_MULT_LO, &VANILLA->ADDR_MULT_HI, multiplier);
  set_addr(&VANILLA->ADDR_SHIFT_LO, &VANILLA->ADDR_SHIFT_HI, shift);
  VANILLA->SIZE_BIAS = bias != NULL ? per_channel : 0u;
  VANILLA->SIZE_MULT = per_channel;
  VANILLA->SIZE_SHIFT = per_channel;
  VANILLA->IN_ZP = (uint32_t)input_zero_point;
  VANILLA->OUT_ZP = (uint32_t)output_zero_point;
  VANILLA->ACT_MIN = (uint32_t)act_min;
  VANILLA->ACT_MAX = (uint32_t)act_max;
}

void vanilla_program_conv2d_f32(const float* input, const float* weights, const float* bias,
                                float* output, int32_t in_c, int32_t in_h, int32_t in_w,
                                int32_t out_c, int32_t out_h, int32_t out_w, int32_t k_h,
                                int32_t k_w, int32_t stride_h, int32_t stride_w,
                                int32_t pad_top, int32_t pad_left, int32_t dilation_h,
                                int32_t dilation_w, int32_t relu) {
  uint32_t unit = (uint32_t)sizeof(float);
  clear_command_registers();
  VANILLA->CMD = VANILLA_CMD_CONV2D_F32;
  VANILLA->FLAGS = relu != 0 ? VANILLA_FLAGS_RELU : 0u;
  set_addr(&VANILLA->ADDR_IN_LO, &VANILLA->ADDR_IN_HI, input);
  set_addr(&VANILLA->ADDR_W_LO, &VANILLA->ADDR_W_HI, weights);
  set_addr(&VANILLA->ADDR_BIAS_LO, &VANILLA->ADDR_BIAS_HI, bias);
  set_addr(&VANILLA->ADDR_OUT_LO, &VANILLA->ADDR_OUT_HI, output);
  VANILLA->SIZE_IN = bytes_of(in_c, in_h, in_w, 1, unit);
  VANILLA->SIZE_W = bytes_of(out_c, in_c, k_h, k_w, unit);
  VANILLA->SIZE_BIAS = bias != NULL ? bytes_of(out_c, 1, 1, 1, unit) : 0u;
  VANILLA->SIZE_OUT = bytes_of(out_c, out_h, out_w, 1, unit);
  set_conv_geometry(in_c, in_h, in_w, out_c, out_h, out_w, k_h, k_w, stride_h, stride_w,
                    pad_top, pad_left, dilation_h, dilation_w);
}

void vanilla_program_conv2d_s8(const int8_t* input, const int8_t* weights, const int32_t* bias,
                               const int32_t* multiplier, const int32_t* shift, int8_t* output,
                               int32_t in_h, int32_t in_w, int32_t in_c, int32_t out_h,
                               int32_t out_w, int32_t out_c, int32_t k_h, int32_t k_w,
                               int32_t stride_h, int32_t stride_w, int32_t pad_top,
                               int32_t pad_left, int32_t dilation_h, int32_t dilation_w,
                               int32_t input_zero_point, int32_t output_zero_point,
                               int32_t act_min, int32_t act_max) {
  clear_command_registers();
  VANILLA->CMD = VANILLA_CMD_CONV2D_S8;
  set_addr(&VANILLA->ADDR_IN_LO, &VANILLA->ADDR_IN_HI, input);
  set_addr(&VANILLA->ADDR_W_LO, &VANILLA->ADDR_W_HI, weights);
  set_addr(&VANILLA->ADDR_OUT_LO, &VANILLA->ADDR_OUT_HI, output);
  VANILLA->SIZE_IN = bytes_of(in_h, in_w, in_c, 1, 1u);
  VANILLA->SIZE_W = bytes_of(out_c, k_h, k_w, in_c, 1u);
  VANILLA->SIZE_OUT = bytes_of(out_h, out_w, out_c, 1, 1u);
  set_conv_geometry(in_c, in_h, in_w, out_c, out_h, out_w, k_h, k_w, stride_h, stride_w,
                    pad_top, pad_left, dilation_h, dilation_w);
  set_requant(bias, multiplier, shift, out_c, input_zero_point, output_zero_point, act_min,
              act_max);
}

void vanilla_program_dense_s8(const int8_t* input, const int8_t* weights, const int32_t* bias,
                              const int32_t* multiplier, const int32_t* shift, int8_t* output,
                              int32_t batches, int32_t in_depth, int32_t units,
                              int32_t input_zero_point, int32_t output_zero_point,
                              int32_t act_min, int32_t act_max) {
  clear_command_registers();
  VANILLA->CMD = VANILLA_CMD_DENSE_S8;
  set_addr(&VANILLA->ADDR_IN_LO, &VANILLA->ADDR_IN_HI, input);
  set_addr(&VANILLA->ADDR_W_LO, &VANILLA->ADDR_W_HI, weights);
  set_addr(&VANILLA->ADDR_OUT_LO, &VANILLA->ADDR_OUT_HI, output);
  VANILLA->SIZE_IN = bytes_of(batches, in_depth, 1, 1, 1u);
  VANILLA->SIZE_W = bytes_of(units, in_depth, 1, 1, 1u);
  VANILLA->SIZE_OUT = bytes_of(batches, units, 1, 1, 1u);
  VANILLA->IN_C = (uint32_t)in_depth;
  VANILLA->OUT_C = (uint32_t)units;
  VANILLA->BATCHES = (uint32_t)batches;
  set_requant(bias, multiplier, shift, units, input_zero_point, output_zero_point, act_min,
              act_max);
}

/* ---- messages -------------------------------------------------------------------------- */

typedef struct {
  char text[MTVG_ACCEL_MESSAGE_BYTES];
  size_t at;
} message_t;

static void put(message_t* m, const char* s) {
  while (s != NULL && *s != '\0' && m->at + 1 < sizeof(m->text)) {
    m->text[m->at++] = *s++;
  }
  m->text[m->at] = '\0';
}

static void put_u32(message_t* m, uint32_t v) {
  char digits[11];
  size_t n = 0;
  do {
    digits[n++] = (char)('0' + v % 10u);
    v /= 10u;
  } while (v != 0u && n < sizeof(digits));
  while (n > 0) {
    char one[2];
    one[0] = digits[--n];
    one[1] = '\0';
    put(m, one);
  }
}

/* A register value read as two's complement. */
static void put_s32(message_t* m, uint32_t v) {
  if (v > (uint32_t)INT32_MAX) {
    put(m, "-");
    v = 0u - v;
  }
  put_u32(m, v);
}

static void put_hex(message_t* m, uint32_t v) {
  static const char hex[] = "0123456789abcdef";
  int nibble;
  put(m, "0x");
  for (nibble = 7; nibble >= 0; --nibble) {
    char one[2];
    one[0] = hex[(v >> (4 * nibble)) & 0xFu];
    one[1] = '\0';
    put(m, one);
  }
}

static const char* reg_name(uint32_t offset) {
  return offset % 4u == 0u && offset / 4u < REG_WORDS ? reg_names[offset / 4u] : "?";
}

/* " <REG> = <value> is outside [<lo>, <hi>]" */
static void put_range(message_t* m, const char* name, uint32_t value, uint32_t lo,
                      uint32_t hi) {
  put(m, name);
  put(m, " = ");
  put_s32(m, value);
  put(m, " is outside [");
  put_s32(m, lo);
  put(m, ", ");
  put_s32(m, hi);
  put(m, "]");
}

/* The device's error registers as one sentence. */
static void describe(message_t* m, uint32_t code) {
  uint32_t reg = VANILLA->ERR_REG;
  uint32_t value = VANILLA->ERR_VALUE;
  switch (code) {
    case VANILLA_ERR_UNKNOWN_COMMAND:
      put(m, "unknown command ");
      put_u32(m, value);
      break;
    case VANILLA_ERR_NULL_ADDRESS:
      put(m, "null address in ");
      put(m, reg_name(reg));
      break;
    case VANILLA_ERR_SIZE_MISMATCH:
      put(m, reg_name(reg));
      put(m, " is ");
      put_u32(m, value);
      if (VANILLA->ERR_HI == 0u) {
        put(m, " bytes, for a buffer the command does not use");
      } else {
        put(m, " bytes, the geometry needs ");
        put_u32(m, VANILLA->ERR_HI);
      }
      break;
    case VANILLA_ERR_LIMIT:
      if (reg >= REG(SIZE_IN) && reg <= REG(SIZE_OUT)) {
        put(m, reg_name(reg));
        put(m, value == UINT32_MAX ? " would be at least " : " would be ");
        put_u32(m, value);
        put(m, " bytes, over the device's limit of ");
        put_u32(m, VANILLA->ERR_HI);
      } else {
        put(m, "over the device's limits: ");
        put_range(m, reg_name(reg), value, VANILLA->ERR_LO, VANILLA->ERR_HI);
      }
      break;
    case VANILLA_ERR_BAD_PARAM:
      put(m, "bad parameter: ");
      put_range(m, reg_name(reg), value, VANILLA->ERR_LO, VANILLA->ERR_HI);
      break;
    case VANILLA_ERR_BAD_REQUANT:
      put(m, "bad requantization: ");
      put(m, reg == REG(ADDR_SHIFT_LO) ? "shift[" : "multiplier[");
      put_u32(m, VANILLA->ERR_INDEX);
      put(m, "]");
      put_range(m, "", value, VANILLA->ERR_LO, VANILLA->ERR_HI);
      break;
    case VANILLA_ERR_FAULT_INJECTED:
      put(m, "fault injected at command ");
      put_u32(m, value);
      break;
    case VANILLA_ERR_ADDRESS_RANGE:
      put(m, reg_name(reg));
      put(m, " is ");
      put_hex(m, value);
      put(m, ", not addressable on this core");
      break;
    case VANILLA_ERR_ALIGNMENT:
      put(m, reg_name(reg));
      put(m, " = ");
      put_hex(m, value);
      put(m, " is not ");
      put_u32(m, VANILLA->ERR_HI);
      put(m, "-byte aligned");
      break;
    case VANILLA_ERR_OVERLAP:
      put(m, "the output overlaps ");
      put(m, reg_name(VANILLA->ERR_INDEX));
      break;
    default:
      put(m, "device error ");
      put_u32(m, code);
      break;
  }
}

static int32_t report(const char* function, uint32_t code, int32_t status) {
  message_t m;
  m.at = 0;
  m.text[0] = '\0';
  put(&m, function);
  put(&m, ": ");
  if (status == VANILLA_TIMEOUT) {
    put(&m, "no DONE after ");
    put_u32(&m, (uint32_t)VANILLA_POLL_LIMIT);
    put(&m, " clocks (timeout; the command was aborted)");
  } else if (status == VANILLA_BUSY) {
    put(&m, "the device is busy with an earlier command");
  } else {
    describe(&m, code);
  }
  mtvg_accel_error("vanilla", m.text);
  return status;
}

/* ---- running a command ----------------------------------------------------------------- */

int32_t vanilla_execute(const char* function) {
  uint32_t status = VANILLA->STATUS;
  int32_t polls;
  if ((status & VANILLA_STATUS_BUSY) != 0u) {
    return report(function, 0u, VANILLA_BUSY);
  }
  VANILLA->STATUS = 0u;
  VANILLA->CTRL = VANILLA_CTRL_START;
  for (polls = 0; polls < VANILLA_POLL_LIMIT; ++polls) {
    vanilla_device_clock();
    status = VANILLA->STATUS;
    if ((status & (VANILLA_STATUS_DONE | VANILLA_STATUS_ERROR)) != 0u) {
      break;
    }
  }
  if ((status & VANILLA_STATUS_ERROR) != 0u) {
    uint32_t code = (status & VANILLA_STATUS_CODE_MASK) >> VANILLA_STATUS_CODE_SHIFT;
    return report(function, code, (int32_t)code);
  }
  if ((status & VANILLA_STATUS_DONE) == 0u) {
    VANILLA->CTRL = VANILLA_CTRL_ABORT;
    vanilla_device_clock();
    return report(function, 0u, VANILLA_TIMEOUT);
  }
  return 0;
}

int32_t vanilla_conv2d_f32(const float* input, const float* weights, const float* bias,
                           float* output, int32_t in_c, int32_t in_h, int32_t in_w,
                           int32_t out_c, int32_t out_h, int32_t out_w, int32_t k_h, int32_t k_w,
                           int32_t stride_h, int32_t stride_w, int32_t pad_top,
                           int32_t pad_left, int32_t dilation_h, int32_t dilation_w,
                           int32_t relu) {
  vanilla_program_conv2d_f32(input, weights, bias, output, in_c, in_h, in_w, out_c, out_h, out_w,
                             k_h, k_w, stride_h, stride_w, pad_top, pad_left, dilation_h,
                             dilation_w, relu);
  return vanilla_execute("conv2d_f32");
}

int32_t vanilla_conv2d_s8(const int8_t* input, const int8_t* weights, const int32_t* bias,
                          const int32_t* multiplier, const int32_t* shift, int8_t* output,
                          int32_t in_h, int32_t in_w, int32_t in_c, int32_t out_h, int32_t out_w,
                          int32_t out_c, int32_t k_h, int32_t k_w, int32_t stride_h,
                          int32_t stride_w, int32_t pad_top, int32_t pad_left,
                          int32_t dilation_h, int32_t dilation_w, int32_t input_zero_point,
                          int32_t output_zero_point, int32_t act_min, int32_t act_max) {
  vanilla_program_conv2d_s8(input, weights, bias, multiplier, shift, output, in_h, in_w, in_c,
                            out_h, out_w, out_c, k_h, k_w, stride_h, stride_w, pad_top, pad_left,
                            dilation_h, dilation_w, input_zero_point, output_zero_point, act_min,
                            act_max);
  return vanilla_execute("conv2d_s8");
}

int32_t vanilla_dense_s8(const int8_t* input, const int8_t* weights, const int32_t* bias,
                         const int32_t* multiplier, const int32_t* shift, int8_t* output,
                         int32_t batches, int32_t in_depth, int32_t units,
                         int32_t input_zero_point, int32_t output_zero_point, int32_t act_min,
                         int32_t act_max) {
  vanilla_program_dense_s8(input, weights, bias, multiplier, shift, output, batches, in_depth,
                           units, input_zero_point, output_zero_point, act_min, act_max);
  return vanilla_execute("dense_s8");
}

static uint64_t pair(uint32_t lo, uint32_t hi) { return ((uint64_t)hi << 32) | lo; }

void vanilla_counters(mtvg_accel_emit_fn emit) {
  emit("vanilla", "commands", VANILLA->CNT_COMMANDS);
  emit("vanilla", "macs", pair(VANILLA->CNT_MACS_LO, VANILLA->CNT_MACS_HI));
  emit("vanilla", "bytes_in", pair(VANILLA->CNT_BYTES_IN_LO, VANILLA->CNT_BYTES_IN_HI));
  emit("vanilla", "bytes_out", pair(VANILLA->CNT_BYTES_OUT_LO, VANILLA->CNT_BYTES_OUT_HI));
}
