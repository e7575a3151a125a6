/*
 * vanilla: the device model (see vanilla_device.h and README.md).
 *
 * On the first clock after CTRL.START the device latches the command: it checks the
 * command, the geometry against its limits, the buffer addresses and sizes and the
 * requantization arrays, and copies what it needs into an internal job. A command that
 * fails a check ends at once with STATUS.ERROR and a code; one that passes is BUSY for
 * VANILLA_COMMAND_CLOCKS clocks in all, and on the last one the device computes the result,
 * updates the counters and sets DONE. Nothing is written to the output before DONE.
 */
#include "vanilla_device.h"

#include <stddef.h>

#if VANILLA_COMMAND_CLOCKS < 1
#error "VANILLA_COMMAND_CLOCKS must be at least 1"
#endif

/* The register map of README.md, checked against the struct (C99: a negative array size). */
typedef char vanilla_check_regs_bytes[(sizeof(vanilla_regs_t) == VANILLA_REGS_BYTES) ? 1 : -1];
typedef char vanilla_check_addr_in[(offsetof(vanilla_regs_t, ADDR_IN_LO) == 0x2C) ? 1 : -1];
typedef char vanilla_check_size_in[(offsetof(vanilla_regs_t, SIZE_IN) == 0x5C) ? 1 : -1];
typedef char vanilla_check_cmd_seq[(offsetof(vanilla_regs_t, CMD_SEQ) == 0xC0) ? 1 : -1];

#define REG(field) ((uint32_t)offsetof(vanilla_regs_t, field))

/* The command kernels stay out of line: inlined into the clock function, their inner loops
 * lose their registers to the checks around them (about 2x slower on Cortex-M3). */
#if defined(__GNUC__)
#define VANILLA_NOINLINE __attribute__((noinline))
#else
#define VANILLA_NOINLINE
#endif

#define INT8_LOWEST (-128)
#define INT8_HIGHEST 127
#define SHIFT_LOWEST (-31) /* right shifts up to 31 (RoundingDivideByPOT's range) */
#define SHIFT_HIGHEST 31   /* left shifts up to 31 */

vanilla_regs_t vanilla_mmio = {.ID = VANILLA_ID_VALUE, .FAULT_AT = VANILLA_FAULT_AT};

/* ---- buffers --------------------------------------------------------------------------- */

enum { BUF_IN, BUF_W, BUF_BIAS, BUF_MULT, BUF_SHIFT, BUF_OUT, BUF_COUNT };

/* Register offsets of each buffer's address (low word; the high word follows) and size. */
static const uint32_t addr_reg[BUF_COUNT] = {REG(ADDR_IN_LO),   REG(ADDR_W_LO),
                                             REG(ADDR_BIAS_LO), REG(ADDR_MULT_LO),
                                             REG(ADDR_SHIFT_LO), REG(ADDR_OUT_LO)};
static const uint32_t size_reg[BUF_COUNT] = {REG(SIZE_IN),   REG(SIZE_W),     REG(SIZE_BIAS),
                                             REG(SIZE_MULT), REG(SIZE_SHIFT), REG(SIZE_OUT)};

/* The command latched on START. */
typedef struct {
  uint32_t cmd;
  uintptr_t addr[BUF_COUNT];
  uint32_t size[BUF_COUNT];
  int32_t in_c, in_h, in_w, out_c, out_h, out_w, k_h, k_w;
  int32_t stride_h, stride_w, pad_top, pad_left, dil_h, dil_w, batches;
  int32_t in_zp, out_zp, act_min, act_max;
  int relu;
} job_t;

static job_t job;
static uint32_t clocks_left;

static volatile uint32_t* reg_at(uint32_t offset) {
  return (volatile uint32_t*)((volatile unsigned char*)&vanilla_mmio + offset);
}

/* A register's two's-complement value (defined for every uint32_t, unlike a plain cast). */
static int32_t as_s32(uint32_t v) {
  return v <= (uint32_t)INT32_MAX ? (int32_t)v : -(int32_t)(~v) - 1;
}

static void add64(volatile uint32_t* lo, volatile uint32_t* hi, uint64_t amount) {
  uint64_t total = (((uint64_t)*hi << 32) | *lo) + amount;
  *lo = (uint32_t)total;
  *hi = (uint32_t)(total >> 32);
}

/* Record an error's details; returns the code. */
static uint32_t fail(uint32_t code, uint32_t reg, uint32_t index, uint32_t value, int32_t lo,
                     uint32_t hi) {
  vanilla_mmio.ERR_REG = reg;
  vanilla_mmio.ERR_INDEX = index;
  vanilla_mmio.ERR_VALUE = value;
  vanilla_mmio.ERR_LO = (uint32_t)lo;
  vanilla_mmio.ERR_HI = hi;
  return code;
}

/* The register at `reg` as a signed value in [lo, hi], else `code`. */
static uint32_t check_range(uint32_t code, uint32_t reg, int32_t lo, int32_t hi, int32_t* out) {
  int32_t v = as_s32(*reg_at(reg));
  if (v < lo || v > hi) {
    return fail(code, reg, 0, (uint32_t)v, lo, (uint32_t)hi);
  }
  *out = v;
  return VANILLA_ERR_NONE;
}

/* ---- checks on START ------------------------------------------------------------------- */

/* A geometry register: where it goes in the job and its allowed range. */
typedef struct {
  uint32_t reg;
  int32_t lo, hi;
  int32_t* field;
} limit_t;

static uint32_t check_limits(const limit_t* limits, size_t count) {
  size_t i;
  for (i = 0; i < count; ++i) {
    uint32_t code = check_range(VANILLA_ERR_LIMIT, limits[i].reg, limits[i].lo, limits[i].hi,
                                limits[i].field);
    if (code != VANILLA_ERR_NONE) {
      return code;
    }
  }
  return VANILLA_ERR_NONE;
}

static const limit_t conv_limits[] = {
    {REG(IN_C), 1, VANILLA_MAX_CHANNELS, &job.in_c},
    {REG(IN_H), 1, VANILLA_MAX_DIM, &job.in_h},
    {REG(IN_W), 1, VANILLA_MAX_DIM, &job.in_w},
    {REG(OUT_C), 1, VANILLA_MAX_CHANNELS, &job.out_c},
    {REG(OUT_H), 1, VANILLA_MAX_DIM, &job.out_h},
    {REG(OUT_W), 1, VANILLA_MAX_DIM, &job.out_w},
    {REG(K_H), 1, VANILLA_MAX_KERNEL, &job.k_h},
    {REG(K_W), 1, VANILLA_MAX_KERNEL, &job.k_w},
    {REG(STRIDE_H), 1, VANILLA_MAX_STRIDE, &job.stride_h},
    {REG(STRIDE_W), 1, VANILLA_MAX_STRIDE, &job.stride_w},
    {REG(PAD_TOP), 0, VANILLA_MAX_PAD, &job.pad_top},
    {REG(PAD_LEFT), 0, VANILLA_MAX_PAD, &job.pad_left},
    {REG(DIL_H), 1, VANILLA_MAX_DILATION, &job.dil_h},
    {REG(DIL_W), 1, VANILLA_MAX_DILATION, &job.dil_w},
};

static const limit_t dense_limits[] = {
    {REG(IN_C), 1, VANILLA_MAX_DENSE_DEPTH, &job.in_c},
    {REG(OUT_C), 1, VANILLA_MAX_DENSE_UNITS, &job.out_c},
    {REG(BATCHES), 1, VANILLA_MAX_BATCHES, &job.batches},
};

static uint32_t check_quant_params(void) {
  uint32_t code = check_range(VANILLA_ERR_BAD_PARAM, REG(IN_ZP), INT8_LOWEST, INT8_HIGHEST,
                              &job.in_zp);
  if (code == VANILLA_ERR_NONE) {
    code = check_range(VANILLA_ERR_BAD_PARAM, REG(OUT_ZP), INT8_LOWEST, INT8_HIGHEST,
                       &job.out_zp);
  }
  if (code == VANILLA_ERR_NONE) {
    code = check_range(VANILLA_ERR_BAD_PARAM, REG(ACT_MIN), INT8_LOWEST, INT8_HIGHEST,
                       &job.act_min);
  }
  if (code == VANILLA_ERR_NONE) {
    code = check_range(VANILLA_ERR_BAD_PARAM, REG(ACT_MAX), job.act_min, INT8_HIGHEST,
                       &job.act_max);
  }
  return code;
}

/* a·b·c·d·unit bytes, saturated at UINT32_MAX (factors are checked positive by then). */
static uint32_t bytes_of(int32_t a, int32_t b, int32_t c, int32_t d, uint32_t unit) {
  int32_t factors[4];
  uint64_t total = unit;
  size_t i;
  factors[0] = a;
  factors[1] = b;
  factors[2] = c;
  factors[3] = d;
  for (i = 0; i < 4; ++i) {
    total *= (uint64_t)factors[i];
    if (total > UINT32_MAX) {
      return UINT32_MAX;
    }
  }
  return (uint32_t)total;
}

/* The bytes each buffer must have for the latched geometry (0 = unused). */
static void needed_bytes(uint32_t need[BUF_COUNT]) {
  uint32_t unit = job.cmd == VANILLA_CMD_CONV2D_F32 ? (uint32_t)sizeof(float) : 1u;
  uint32_t per_channel = (uint32_t)sizeof(int32_t);
  if (job.cmd == VANILLA_CMD_DENSE_S8) {
    need[BUF_IN] = bytes_of(job.batches, job.in_c, 1, 1, 1u);
    need[BUF_W] = bytes_of(job.out_c, job.in_c, 1, 1, 1u);
    need[BUF_OUT] = bytes_of(job.batches, job.out_c, 1, 1, 1u);
  } else {
    need[BUF_IN] = bytes_of(job.in_c, job.in_h, job.in_w, 1, unit);
    need[BUF_W] = bytes_of(job.out_c, job.in_c, job.k_h, job.k_w, unit);
    need[BUF_OUT] = bytes_of(job.out_c, job.out_h, job.out_w, 1, unit);
  }
  need[BUF_BIAS] = bytes_of(job.out_c, 1, 1, 1, per_channel);
  need[BUF_MULT] = job.cmd == VANILLA_CMD_CONV2D_F32 ? 0u : need[BUF_BIAS];
  need[BUF_SHIFT] = need[BUF_MULT];
}

static uint32_t check_buffers(void) {
  uint32_t need[BUF_COUNT];
  int b;
  needed_bytes(need);
  for (b = 0; b < BUF_COUNT; ++b) {
    uint32_t lo = *reg_at(addr_reg[b]);
    uint32_t hi = *reg_at(addr_reg[b] + 4u);
    uint32_t size = *reg_at(size_reg[b]);
    uint32_t align = (b == BUF_IN || b == BUF_W || b == BUF_OUT) && job.cmd != VANILLA_CMD_CONV2D_F32
                         ? 1u
                         : 4u;
    uint64_t address = ((uint64_t)hi << 32) | lo;
    job.addr[b] = 0;
    job.size[b] = 0;
    if (need[b] > VANILLA_MAX_BUFFER_BYTES) {
      return fail(VANILLA_ERR_LIMIT, size_reg[b], 0, need[b], 0, VANILLA_MAX_BUFFER_BYTES);
    }
    if (need[b] == 0u || (b == BUF_BIAS && address == 0u && size == 0u)) {
      if (size != 0u) { /* a buffer the command does not use */
        return fail(VANILLA_ERR_SIZE_MISMATCH, size_reg[b], 0, size, 0, 0u);
      }
      continue;
    }
    if (sizeof(uintptr_t) < sizeof(uint64_t) && hi != 0u) {
      return fail(VANILLA_ERR_ADDRESS_RANGE, addr_reg[b] + 4u, 0, hi, 0, 0u);
    }
    if (address == 0u) {
      return fail(VANILLA_ERR_NULL_ADDRESS, addr_reg[b], 0, 0u, 0, 0u);
    }
    if (size != need[b]) {
      return fail(VANILLA_ERR_SIZE_MISMATCH, size_reg[b], 0, size, 0, need[b]);
    }
    if (lo % align != 0u) {
      return fail(VANILLA_ERR_ALIGNMENT, addr_reg[b], 0, lo, 0, align);
    }
    job.addr[b] = (uintptr_t)address;
    job.size[b] = size;
  }
  for (b = 0; b < BUF_OUT; ++b) {
    uintptr_t out = job.addr[BUF_OUT];
    if (job.addr[b] != 0u && job.addr[b] < out + job.size[BUF_OUT] &&
        out < job.addr[b] + job.size[b]) {
      return fail(VANILLA_ERR_OVERLAP, addr_reg[BUF_OUT], addr_reg[b], 0u, 0, 0u);
    }
  }
  return VANILLA_ERR_NONE;
}

static uint32_t check_requant(void) {
  const int32_t* mult = (const int32_t*)job.addr[BUF_MULT];
  const int32_t* shift = (const int32_t*)job.addr[BUF_SHIFT];
  int32_t c;
  for (c = 0; c < job.out_c; ++c) {
    if (mult[c] < 0) {
      return fail(VANILLA_ERR_BAD_REQUANT, REG(ADDR_MULT_LO), (uint32_t)c, (uint32_t)mult[c], 0,
                  (uint32_t)INT32_MAX);
    }
    if (shift[c] < SHIFT_LOWEST || shift[c] > SHIFT_HIGHEST) {
      return fail(VANILLA_ERR_BAD_REQUANT, REG(ADDR_SHIFT_LO), (uint32_t)c, (uint32_t)shift[c],
                  SHIFT_LOWEST, (uint32_t)SHIFT_HIGHEST);
    }
  }
  return VANILLA_ERR_NONE;
}

/* Latch and check the programmed command. */
static uint32_t latch(void) {
  uint32_t code = fail(VANILLA_ERR_NONE, 0u, 0u, 0u, 0, 0u); /* no stale error details */
  vanilla_mmio.CMD_SEQ += 1u;
  if (vanilla_mmio.FAULT_AT != 0u && vanilla_mmio.CMD_SEQ == vanilla_mmio.FAULT_AT) {
    return fail(VANILLA_ERR_FAULT_INJECTED, REG(FAULT_AT), 0, vanilla_mmio.CMD_SEQ, 0, 0u);
  }
  job.cmd = vanilla_mmio.CMD;
  job.relu = (vanilla_mmio.FLAGS & VANILLA_FLAGS_RELU) != 0u;
  switch (job.cmd) {
    case VANILLA_CMD_CONV2D_F32:
      code = check_limits(conv_limits, sizeof(conv_limits) / sizeof(conv_limits[0]));
      break;
    case VANILLA_CMD_CONV2D_S8:
      code = check_limits(conv_limits, sizeof(conv_limits) / sizeof(conv_limits[0]));
      if (code == VANILLA_ERR_NONE) {
        code = check_quant_params();
      }
      break;
    case VANILLA_CMD_DENSE_S8:
      code = check_limits(dense_limits, sizeof(dense_limits) / sizeof(dense_limits[0]));
      if (code == VANILLA_ERR_NONE) {
        code = check_quant_params();
      }
      break;
    default:
      return fail(VANILLA_ERR_UNKNOWN_COMMAND, REG(CMD), 0, job.cmd, 0, 0u);
  }
  if (code == VANILLA_ERR_NONE) {
    code = check_buffers();
  }
  if (code == VANILLA_ERR_NONE && job.cmd != VANILLA_CMD_CONV2D_F32) {
    code = check_requant();
  }
  return code;
}

/* ---- TFLite's requantization (int32 in, int64 intermediates, no undefined behaviour) ---- */

static int32_t shift_right_arith(int32_t x, int32_t e) {
  return x >= 0 ? (int32_t)((uint32_t)x >> e) : -1 - (int32_t)((uint32_t)(-1 - x) >> e);
}

/* Saturating rounding doubling high multiply. */
static int32_t srdhm(int32_t a, int32_t b) {
  int64_t ab;
  int64_t nudge;
  if (a == INT32_MIN && b == INT32_MIN) {
    return INT32_MAX;
  }
  ab = (int64_t)a * (int64_t)b;
  nudge = ab >= 0 ? ((int64_t)1 << 30) : 1 - ((int64_t)1 << 30);
  return (int32_t)((ab + nudge) / ((int64_t)1 << 31)); /* C99 division truncates */
}

/* Rounding divide by 2**e (e in [0, 31]), ties away from zero. */
static int32_t rounding_divide_by_pot(int32_t x, int32_t e) {
  uint32_t mask = e == 0 ? 0u : 0xFFFFFFFFu >> (32 - e);
  uint32_t remainder = (uint32_t)x & mask;
  uint32_t threshold = (mask >> 1) + (x < 0 ? 1u : 0u);
  return shift_right_arith(x, e) + (remainder > threshold ? 1 : 0);
}

static int32_t multiply_by_quantized_multiplier(int32_t x, int32_t multiplier, int32_t shift) {
  int32_t left = shift > 0 ? shift : 0;
  int32_t right = shift > 0 ? 0 : -shift;
  int32_t shifted = as_s32((uint32_t)x << left); /* wraps like TFLite's int32 multiply */
  return rounding_divide_by_pot(srdhm(shifted, multiplier), right);
}

static int8_t requantize(uint32_t acc, int32_t c) {
  const int32_t* mult = (const int32_t*)job.addr[BUF_MULT];
  const int32_t* shift = (const int32_t*)job.addr[BUF_SHIFT];
  int64_t v = (int64_t)multiply_by_quantized_multiplier(as_s32(acc), mult[c], shift[c]) +
              job.out_zp;
  if (v < job.act_min) {
    v = job.act_min;
  }
  if (v > job.act_max) {
    v = job.act_max;
  }
  return (int8_t)v;
}

/* The first in-range kernel tap and one past the last for an output coordinate. */
static void tap_range(int32_t origin, int32_t dilation, int32_t kernel, int32_t extent,
                      int32_t* first, int32_t* end) {
  int32_t k = 0;
  while (k < kernel && origin + k * dilation < 0) {
    ++k;
  }
  *first = k;
  while (k < kernel && origin + k * dilation < extent) {
    ++k;
  }
  *end = k;
}

/* ---- the commands ---------------------------------------------------------------------- */

/* acc = bias, then + input·weight over (ic, kh, kw) in that order, in float32. */
static VANILLA_NOINLINE uint64_t run_conv2d_f32(void) {
  const int32_t dil_w = job.dil_w;
  const float* in = (const float*)job.addr[BUF_IN];
  const float* w = (const float*)job.addr[BUF_W];
  const float* bias = (const float*)job.addr[BUF_BIAS];
  float* out = (float*)job.addr[BUF_OUT];
  uint64_t macs = 0;
  int32_t oc, oy, ox, ic, kh, kw;
  for (oc = 0; oc < job.out_c; ++oc) {
    for (oy = 0; oy < job.out_h; ++oy) {
      int32_t y0 = oy * job.stride_h - job.pad_top;
      int32_t kh0, kh1;
      tap_range(y0, job.dil_h, job.k_h, job.in_h, &kh0, &kh1);
      for (ox = 0; ox < job.out_w; ++ox) {
        int32_t x0 = ox * job.stride_w - job.pad_left;
        int32_t kw0, kw1;
        float acc = bias != NULL ? bias[oc] : 0.0f;
        tap_range(x0, job.dil_w, job.k_w, job.in_w, &kw0, &kw1);
        for (ic = 0; ic < job.in_c; ++ic) {
          for (kh = kh0; kh < kh1; ++kh) {
            const float* row = in + ((size_t)ic * job.in_h + (size_t)(y0 + kh * job.dil_h)) *
                                        (size_t)job.in_w;
            const float* taps = w + (((size_t)oc * job.in_c + ic) * job.k_h + kh) * job.k_w;
            for (kw = kw0; kw < kw1; ++kw) {
              float product = row[x0 + kw * dil_w] * taps[kw];
              acc += product;
            }
          }
        }
        macs += (uint64_t)job.in_c * (uint64_t)(kh1 - kh0) * (uint64_t)(kw1 - kw0);
        if (job.relu && acc < 0.0f) {
          acc = 0.0f;
        }
        out[((size_t)oc * job.out_h + oy) * job.out_w + ox] = acc;
      }
    }
  }
  return macs;
}

static VANILLA_NOINLINE uint64_t run_conv2d_s8(void) {
  const int32_t in_c = job.in_c; /* locals: the int8 output stores may alias job */
  const int32_t in_zp = job.in_zp;
  const int8_t* in = (const int8_t*)job.addr[BUF_IN];
  const int8_t* w = (const int8_t*)job.addr[BUF_W];
  const int32_t* bias = (const int32_t*)job.addr[BUF_BIAS];
  int8_t* out = (int8_t*)job.addr[BUF_OUT];
  uint64_t macs = 0;
  int32_t oc, oy, ox, ic, kh, kw;
  for (oy = 0; oy < job.out_h; ++oy) {
    int32_t y0 = oy * job.stride_h - job.pad_top;
    int32_t kh0, kh1;
    tap_range(y0, job.dil_h, job.k_h, job.in_h, &kh0, &kh1);
    for (ox = 0; ox < job.out_w; ++ox) {
      int32_t x0 = ox * job.stride_w - job.pad_left;
      int32_t kw0, kw1;
      tap_range(x0, job.dil_w, job.k_w, job.in_w, &kw0, &kw1);
      for (oc = 0; oc < job.out_c; ++oc) {
        uint32_t acc = bias != NULL ? (uint32_t)bias[oc] : 0u; /* int32 sums that wrap */
        for (kh = kh0; kh < kh1; ++kh) {
          int32_t y = y0 + kh * job.dil_h;
          for (kw = kw0; kw < kw1; ++kw) {
            const int8_t* pixel =
                in + ((size_t)y * job.in_w + (size_t)(x0 + kw * job.dil_w)) * job.in_c;
            const int8_t* taps = w + (((size_t)oc * job.k_h + kh) * job.k_w + kw) * job.in_c;
            for (ic = 0; ic < in_c; ++ic) {
              acc += (uint32_t)((pixel[ic] - in_zp) * taps[ic]);
            }
          }
        }
        macs += (uint64_t)job.in_c * (uint64_t)(kh1 - kh0) * (uint64_t)(kw1 - kw0);
        out[((size_t)oy * job.out_w + ox) * job.out_c + oc] = requantize(acc, oc);
      }
    }
  }
  return macs;
}

static VANILLA_NOINLINE uint64_t run_dense_s8(void) {
  const int32_t in_c = job.in_c; /* locals: the int8 output stores may alias job */
  const int32_t in_zp = job.in_zp;
  const int8_t* in = (const int8_t*)job.addr[BUF_IN];
  const int8_t* w = (const int8_t*)job.addr[BUF_W];
  const int32_t* bias = (const int32_t*)job.addr[BUF_BIAS];
  int8_t* out = (int8_t*)job.addr[BUF_OUT];
  int32_t b, u, d;
  for (b = 0; b < job.batches; ++b) {
    const int8_t* row = in + (size_t)b * job.in_c;
    for (u = 0; u < job.out_c; ++u) {
      const int8_t* taps = w + (size_t)u * job.in_c;
      uint32_t acc = bias != NULL ? (uint32_t)bias[u] : 0u;
      for (d = 0; d < in_c; ++d) {
        acc += (uint32_t)((row[d] - in_zp) * taps[d]);
      }
      out[(size_t)b * job.out_c + u] = requantize(acc, u);
    }
  }
  return (uint64_t)job.batches * (uint64_t)job.out_c * (uint64_t)job.in_c;
}

/* Compute the latched command and count it. */
static void complete(void) {
  uint64_t macs;
  uint64_t read = 0;
  int b;
  switch (job.cmd) {
    case VANILLA_CMD_CONV2D_F32:
      macs = run_conv2d_f32();
      break;
    case VANILLA_CMD_CONV2D_S8:
      macs = run_conv2d_s8();
      break;
    default: /* latch() let only the three commands through */
      macs = run_dense_s8();
      break;
  }
  for (b = 0; b < BUF_OUT; ++b) {
    read += job.size[b];
  }
  vanilla_mmio.CNT_COMMANDS += 1u;
  add64(&vanilla_mmio.CNT_MACS_LO, &vanilla_mmio.CNT_MACS_HI, macs);
  add64(&vanilla_mmio.CNT_BYTES_IN_LO, &vanilla_mmio.CNT_BYTES_IN_HI, read);
  add64(&vanilla_mmio.CNT_BYTES_OUT_LO, &vanilla_mmio.CNT_BYTES_OUT_HI, job.size[BUF_OUT]);
  vanilla_mmio.STATUS = VANILLA_STATUS_DONE;
}

/* ---- the clock ------------------------------------------------------------------------- */

void vanilla_device_clock(void) {
  vanilla_mmio.ID = VANILLA_ID_VALUE; /* read-only */
  if ((vanilla_mmio.CTRL & VANILLA_CTRL_ABORT) != 0u) {
    vanilla_mmio.CTRL = 0u;
    vanilla_mmio.STATUS &= ~VANILLA_STATUS_BUSY;
    clocks_left = 0u;
    return;
  }
  if ((vanilla_mmio.STATUS & VANILLA_STATUS_BUSY) != 0u) {
    if (--clocks_left == 0u) {
      complete();
    }
    return;
  }
  if ((vanilla_mmio.CTRL & VANILLA_CTRL_START) != 0u) {
    uint32_t code;
    vanilla_mmio.CTRL &= ~VANILLA_CTRL_START;
    vanilla_mmio.STATUS = 0u;
    code = latch();
    if (code != VANILLA_ERR_NONE) {
      vanilla_mmio.CNT_ERRORS += 1u;
      vanilla_mmio.STATUS = VANILLA_STATUS_ERROR | (code << VANILLA_STATUS_CODE_SHIFT);
      return;
    }
    vanilla_mmio.STATUS = VANILLA_STATUS_BUSY;
    clocks_left = VANILLA_COMMAND_CLOCKS - 1u;
    if (clocks_left == 0u) {
      complete();
    }
  }
}

void vanilla_device_reset(void) {
  uint32_t offset;
  for (offset = 0; offset < VANILLA_REGS_BYTES; offset += 4u) {
    *reg_at(offset) = 0u;
  }
  vanilla_mmio.ID = VANILLA_ID_VALUE;
  vanilla_mmio.FAULT_AT = VANILLA_FAULT_AT;
  clocks_left = 0u;
}
