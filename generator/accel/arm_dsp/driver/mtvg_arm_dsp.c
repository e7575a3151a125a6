/* microtvm-gen `arm-dsp` driver: int8 convolutions on the Arm DSP extension's SIMD. */
#include "mtvg_arm_dsp.h"

#include <stddef.h>
#include <string.h>

#define INT8_LOWEST (-128)
#define INT8_HIGHEST 127
/* TFLite's quantized multipliers are non-negative and their shifts lie in [-31, 30]. */
#define SHIFT_LOWEST (-31)
#define SHIFT_HIGHEST 30

/* ---- the DSP instructions, or portable C with the same results ---------------------------- */

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>
/* Each 16-bit half of a plus the sign-extended byte 0 (low) or byte 2 (high) of x. */
static inline uint32_t sxtab16(uint32_t a, uint32_t x) {
  return (uint32_t)__sxtab16((int16x2_t)a, (int8x4_t)x);
}
/* Bytes 0 and 2 of x, sign-extended into the two 16-bit halves. */
static inline uint32_t sxtb16(uint32_t x) { return (uint32_t)__sxtb16((int8x4_t)x); }
/* acc + low(a) * low(b) + high(a) * high(b), halves signed. */
static inline int32_t smlad(uint32_t a, uint32_t b, int32_t acc) {
  return __smlad((int16x2_t)a, (int16x2_t)b, acc);
}
/* acc + low(a) * low(b); acc + high(a) * high(b). */
static inline int32_t smlabb(uint32_t a, uint32_t b, int32_t acc) {
  return __smlabb((int32_t)a, (int32_t)b, acc);
}
static inline int32_t smlatt(uint32_t a, uint32_t b, int32_t acc) {
  return __smlatt((int32_t)a, (int32_t)b, acc);
}
/* The high word of a * b + 2^31 (SMMULR). */
static inline int32_t smmulr(int32_t a, int32_t b) {
  int32_t r;
  __asm__("smmulr %0, %1, %2" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
/* x clamped to [-128, 127] (SSAT). */
static inline int8_t saturate_int8(int32_t x) { return (int8_t)__ssat(x, 8); }
/* Bytes 1 and 3 (x rotated right by 8 first): one instruction, which the compiler does not
 * always find for __sxtb16 of a rotate. */
static inline uint32_t sxtb16_ror8(uint32_t x) {
  uint32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
  return r;
}
static inline uint32_t sxtab16_ror8(uint32_t a, uint32_t x) {
  uint32_t r;
  __asm__("sxtab16 %0, %1, %2, ror #8" : "=r"(r) : "r"(a), "r"(x));
  return r;
}
#else
static inline int32_t low16(uint32_t x) { return (int32_t)((x & 0xFFFFu) ^ 0x8000u) - 0x8000; }
static inline int32_t high16(uint32_t x) { return (int32_t)((x >> 16) ^ 0x8000u) - 0x8000; }
static inline int32_t byte_at(uint32_t x, int n) {
  return (int32_t)(((x >> (8 * n)) & 0xFFu) ^ 0x80u) - 0x80;
}
static inline uint32_t halves(int32_t low, int32_t high) {
  return ((uint32_t)low & 0xFFFFu) | ((uint32_t)high << 16);
}
static inline uint32_t sxtab16(uint32_t a, uint32_t x) {
  return halves(low16(a) + byte_at(x, 0), high16(a) + byte_at(x, 2));
}
static inline uint32_t sxtb16(uint32_t x) { return halves(byte_at(x, 0), byte_at(x, 2)); }
static inline int32_t smlad(uint32_t a, uint32_t b, int32_t acc) {
  uint32_t sum = (uint32_t)acc + (uint32_t)(low16(a) * low16(b)) +
                 (uint32_t)(high16(a) * high16(b));
  return (int32_t)sum;
}
static inline int32_t smlabb(uint32_t a, uint32_t b, int32_t acc) {
  return (int32_t)((uint32_t)acc + (uint32_t)(low16(a) * low16(b)));
}
static inline int32_t smlatt(uint32_t a, uint32_t b, int32_t acc) {
  return (int32_t)((uint32_t)acc + (uint32_t)(high16(a) * high16(b)));
}
static inline int32_t smmulr(int32_t a, int32_t b) {
  return (int32_t)(((int64_t)a * b + ((int64_t)1 << 31)) >> 32);
}
static inline int8_t saturate_int8(int32_t x) {
  return (int8_t)(x < -128 ? -128 : (x > 127 ? 127 : x));
}
static inline uint32_t ror8(uint32_t x) { return (x >> 8) | (x << 24); }
static inline uint32_t sxtb16_ror8(uint32_t x) { return sxtb16(ror8(x)); }
static inline uint32_t sxtab16_ror8(uint32_t a, uint32_t x) { return sxtab16(a, ror8(x)); }
#endif

/* The hot loops written out in assembly: on DSP cores, when optimizing (they take fourteen
 * registers, so the frame pointer must be free: -O0 and -fno-omit-frame-pointer keep it),
 * unless MTVG_ARM_DSP_PORTABLE asks for the C versions. */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && defined(__OPTIMIZE__) && \
    !MTVG_ARM_DSP_PORTABLE
#define MTVG_ARM_DSP_ASM 1
#else
#define MTVG_ARM_DSP_ASM 0
#endif

/* Four bytes from any address (one LDR on the cores this driver is for). */
static inline uint32_t load32(const int8_t* p) {
  uint32_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

/* ---- TFLite's requantization ------------------------------------------------------------- */

/* The output stage of every kernel: TFLite's MultiplyByQuantizedMultiplier (double
 * rounding), the output zero point, the activation clamp. */
typedef struct {
  int32_t zero_point, act_min, act_max;
  /* 1: the short output stage (mtvg_arm_dsp.h: `narrow`). */
  int32_t narrow;
} output_stage;

/* Round-half-away-from-zero division by 2^exponent, exponent in [0, 31] (TFLite's
 * RoundingDivideByPOT). */
static inline int32_t divide_by_pot(int32_t x, int32_t exponent) {
  const uint32_t mask = (1u << exponent) - 1u;
  const uint32_t threshold = (mask >> 1) + ((uint32_t)x >> 31);
  return (x >> exponent) + (((uint32_t)x & mask) > threshold ? 1 : 0);
}

/* The general output stage, for any accumulator and shift. multiplier >= 0 (the exporter
 * checks it): the saturating case of the rounding doubling high multiply (both operands
 * INT32_MIN) cannot occur, and its rounding of a * b / 2^31 is half up. */
static inline int8_t requantize(int32_t acc, int32_t multiplier, int32_t shift,
                                const output_stage* o) {
  const int32_t left = shift > 0 ? shift : 0;
  const int32_t x = (int32_t)((uint32_t)acc << left);
  const int32_t high = (int32_t)(((int64_t)x * multiplier + ((int64_t)1 << 30)) >> 31);
  int32_t q = (shift < 0 ? divide_by_pot(high, -shift) : high) + o->zero_point;
  q = q < o->act_min ? o->act_min : q;
  q = q > o->act_max ? o->act_max : q;
  return (int8_t)q;
}

/* The short output stage (`narrow`): SMMULR of 2 acc, then one rounding shift by
 * e = -shift with addend 2^(e-1) + zero_point * 2^e, which the exporter has shown fits:
 * ((h + addend - (h < 0)) >> e) is TFLite's rounding divide plus the zero point. `p`: the
 * channel's record in narrow_params (multiplier, addend, e, 0). */
static inline int32_t narrow_stage(int32_t acc, const int32_t* p) {
  const int32_t high = smmulr((int32_t)((uint32_t)acc << 1), p[0]);
  return (high + p[1] + (high >> 31)) >> p[2];
}

static inline int8_t clamp_int8(int32_t q, int32_t low, int32_t high) {
  q = q < low ? low : q;
  return (int8_t)(q > high ? high : q);
}

/* A row of `count` accumulators (one per output channel) through the output stage: channel
 * i's at acc[(i / 2) * step + i % 2] (step 2: one after another; 4: two pixels' pairs
 * interleaved). The stage's choice is made once per row, so the loop keeps its constants in
 * registers. */
static void requantize_row(const int32_t* acc, int32_t step, const int32_t* multiplier,
                           const int32_t* shift, const int32_t* narrow_params, int32_t count,
                           const output_stage* stage, int8_t* out) {
  const int32_t act_min = stage->act_min;
  const int32_t act_max = stage->act_max;
  if (!stage->narrow) {
    for (int32_t i = 0; i < count; ++i) {
      out[i] = requantize(acc[(i / 2) * step + i % 2], multiplier[i], shift[i], stage);
    }
    return;
  }
  const int32_t* p = narrow_params;
  int32_t i = 0;
  if (act_min == INT8_LOWEST && act_max == INT8_HIGHEST) {
    for (; i + 1 < count; i += 2, acc += step, p += 8) {
      out[i] = saturate_int8(narrow_stage(acc[0], p));
      out[i + 1] = saturate_int8(narrow_stage(acc[1], p + 4));
    }
  } else {
    for (; i + 1 < count; i += 2, acc += step, p += 8) {
      out[i] = clamp_int8(narrow_stage(acc[0], p), act_min, act_max);
      out[i + 1] = clamp_int8(narrow_stage(acc[1], p + 4), act_min, act_max);
    }
  }
  if (i < count) {
    out[i] = clamp_int8(narrow_stage(acc[0], p), act_min, act_max);
  }
}

/* ---- scratch, counters, failures ------------------------------------------------------- */

static union {
  uint64_t align;
  uint32_t words[(MTVG_ARM_DSP_SCRATCH_BYTES + 3) / 4];
} scratch;

static uint64_t conv2d_calls;
static uint64_t depthwise_calls;
static uint32_t scratch_peak;

static int32_t fail(int32_t code, const char* reason) {
  mtvg_accel_error(MTVG_ARM_DSP_NAME, reason);
  return code;
}

static int32_t take_scratch(uint32_t need) {
  if (need > scratch_peak) {
    scratch_peak = need;
  }
  if (need > sizeof(scratch.words)) {
    return fail(MTVG_ARM_DSP_ESCRATCH, "scratch buffer smaller than the call needs "
                                       "(MTVG_ARM_DSP_SCRATCH_BYTES)");
  }
  return 0;
}

/* An int8 value in every byte of a word (the activation bounds the SIMD clamps read). */
static inline uint32_t byte_lanes(int32_t v) { return 0x01010101u * (uint8_t)v; }

/* v in [lowest, MTVG_ARM_DSP_MAX_DIM]: one compare, no branch (calls check many). */
static inline int within_dim(int32_t v, int32_t lowest) {
  return (uint32_t)v - (uint32_t)lowest <= (uint32_t)(MTVG_ARM_DSP_MAX_DIM - lowest);
}

static int dims_ok(const int32_t* dims, size_t n, int32_t lowest) {
  for (size_t i = 0; i < n; ++i) {
    if (dims[i] < lowest || dims[i] > MTVG_ARM_DSP_MAX_DIM) {
      return 0;
    }
  }
  return 1;
}

static int quant_ok(int32_t input_zero_point, int32_t output_zero_point, int32_t act_min,
                    int32_t act_max) {
  return input_zero_point >= INT8_LOWEST && input_zero_point <= INT8_HIGHEST &&
         output_zero_point >= INT8_LOWEST && output_zero_point <= INT8_HIGHEST &&
         act_min >= INT8_LOWEST && act_max <= INT8_HIGHEST && act_min <= act_max;
}

static int channels_ok(const int32_t* multiplier, const int32_t* shift, int32_t channels) {
  for (int32_t i = 0; i < channels; ++i) {
    if (multiplier[i] < 0 || shift[i] < SHIFT_LOWEST || shift[i] > SHIFT_HIGHEST) {
      return 0;
    }
  }
  return 1;
}

/* The input offset (-zero point) in both 16-bit halves. */
static uint32_t offset_pair(int32_t input_zero_point) {
  uint32_t half = (uint32_t)(-input_zero_point) & 0xFFFFu;
  return half | (half << 16);
}

/* ---- conv2d --------------------------------------------------------------------------- */

typedef struct {
  int32_t in_h, in_w, in_c, k_h, k_w, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w;
  int8_t zero_point;
} conv_geometry;

static void fill_bytes(int8_t* dst, int8_t value, int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    dst[i] = value;
  }
}

/* n bytes, a word at a time while four remain (the cores here load and store unaligned
 * words; memcpy of a variable count would be a call). */
static void copy_bytes(int8_t* dst, const int8_t* src, int32_t n) {
  int32_t i = 0;
  for (; i + 4 <= n; i += 4) {
    uint32_t word;
    memcpy(&word, src + i, sizeof(word));
    memcpy(dst + i, &word, sizeof(word));
  }
  for (; i < n; ++i) {
    dst[i] = src[i];
  }
}

/* The column of output pixel (oy, ox): its k_h * k_w * in_c input values, the input zero
 * point where a tap falls outside the input, then zero points up to `padded` bytes. */
static void im2col(const int8_t* input, const conv_geometry* g, int32_t oy, int32_t ox,
                   int8_t* column, int32_t padded) {
  int8_t* c = column;
  int32_t row_bytes = g->k_w * g->in_c;
  for (int32_t ky = 0; ky < g->k_h; ++ky) {
    int32_t iy = oy * g->stride_h - g->pad_top + ky * g->dil_h;
    if (iy < 0 || iy >= g->in_h) {
      fill_bytes(c, g->zero_point, row_bytes);
      c += row_bytes;
      continue;
    }
    const int8_t* row = input + (size_t)iy * (size_t)g->in_w * (size_t)g->in_c;
    int32_t ix0 = ox * g->stride_w - g->pad_left;
    if (g->dil_w == 1 && ix0 >= 0 && ix0 + g->k_w <= g->in_w) {
      copy_bytes(c, row + (size_t)ix0 * (size_t)g->in_c, row_bytes);
      c += row_bytes;
      continue;
    }
    for (int32_t kx = 0; kx < g->k_w; ++kx) {
      int32_t ix = ix0 + kx * g->dil_w;
      if (ix < 0 || ix >= g->in_w) {
        fill_bytes(c, g->zero_point, g->in_c);
      } else {
        copy_bytes(c, row + (size_t)ix * (size_t)g->in_c, g->in_c);
      }
      c += g->in_c;
    }
  }
  fill_bytes(c, g->zero_point, padded - (int32_t)(c - column));
}

/* Two columns widened to 16 bits with the input offset added: per group of four values,
 * [c0: k0, k2] [c0: k1, k3] [c1: k0, k2] [c1: k1, k3], the order the packed weights'
 * halves take them in. */
static void widen_pair(const int8_t* c0, const int8_t* c1, int32_t groups, uint32_t offset,
                       uint32_t* out) {
  for (int32_t i = 0; i < groups; ++i) {
    uint32_t a = load32(c0 + 4 * i);
    uint32_t b = load32(c1 + 4 * i);
    out[0] = sxtab16(offset, a);
    out[1] = sxtab16_ror8(offset, a);
    out[2] = sxtab16(offset, b);
    out[3] = sxtab16_ror8(offset, b);
    out += 4;
  }
}

/* Two pixels times two output channels over `groups` groups of four k: the accumulators
 * acc[0] (pixel 0, channel o), acc[1] (0, o + 1), acc[2] (1, o), acc[3] (1, o + 1).
 * int8 weights: one word per channel and group, widened here. */
static inline void dot_2x2_w8(const uint32_t* x, const uint32_t* w, int32_t groups,
                              int32_t* acc) {
  int32_t a00 = acc[0], a01 = acc[1], a10 = acc[2], a11 = acc[3];
  const uint32_t* const end = w + 2 * groups;
  while (w != end) {
    const uint32_t x0a = x[0], x0b = x[1], x1a = x[2], x1b = x[3];
    const uint32_t w0 = w[0], w1 = w[1];
    x += 4;
    w += 2;
    uint32_t wa = sxtb16(w0);
    uint32_t wb = sxtb16_ror8(w0);
    a00 = smlad(x0a, wa, a00);
    a10 = smlad(x1a, wa, a10);
    a00 = smlad(x0b, wb, a00);
    a10 = smlad(x1b, wb, a10);
    wa = sxtb16(w1);
    wb = sxtb16_ror8(w1);
    a01 = smlad(x0a, wa, a01);
    a11 = smlad(x1a, wa, a11);
    a01 = smlad(x0b, wb, a01);
    a11 = smlad(x1b, wb, a11);
  }
  acc[0] = a00;
  acc[1] = a01;
  acc[2] = a10;
  acc[3] = a11;
}

/* The same with int16 weights, already in the halves' order: two words per channel. */
static inline void dot_2x2_w16(const uint32_t* x, const uint32_t* w, int32_t groups,
                               int32_t* acc) {
  int32_t a00 = acc[0], a01 = acc[1], a10 = acc[2], a11 = acc[3];
  const uint32_t* const end = w + 4 * groups;
  while (w != end) {
    const uint32_t x0a = x[0], x0b = x[1], x1a = x[2], x1b = x[3];
    x += 4;
    uint32_t wa = w[0], wb = w[1];
    a00 = smlad(x0a, wa, a00);
    a10 = smlad(x1a, wa, a10);
    a00 = smlad(x0b, wb, a00);
    a10 = smlad(x1b, wb, a10);
    wa = w[2];
    wb = w[3];
    w += 4;
    a01 = smlad(x0a, wa, a01);
    a11 = smlad(x1a, wa, a11);
    a01 = smlad(x0b, wb, a01);
    a11 = smlad(x1b, wb, a11);
  }
  acc[0] = a00;
  acc[1] = a01;
  acc[2] = a10;
  acc[3] = a11;
}

/* What the written-out row loops keep in memory (fourteen registers are taken): the widened
 * columns, the next bias pair, where the next sums go, the end of the weights. The assembly
 * reads the fields at offsets 0, 4, 8, 12. */
typedef struct {
  const uint32_t* x;
  const int32_t* bias;
  int32_t* sums;
  const uint32_t* weights_end;
} rows_state;

#if MTVG_ARM_DSP_ASM
/* One group of four k for two pixels by two channels: one LDM of the pixels' words (r8..r11),
 * two LDRD of the channels' weights, eight SMLAD. */
#define MTVG_ARM_DSP_GROUP_2X2                       \
  "ldmia %[xp]!, {r8, r9, r10, r11}\n\t"             \
  "ldrd %[wa], %[wb], [%[w]], #16\n\t"               \
  "smlad %[a00], %[x0a], %[wa], %[a00]\n\t"          \
  "smlad %[a10], %[x1a], %[wa], %[a10]\n\t"          \
  "smlad %[a00], %[x0b], %[wb], %[a00]\n\t"          \
  "smlad %[a10], %[x1b], %[wb], %[a10]\n\t"          \
  "ldrd %[wa], %[wb], [%[w], #-8]\n\t"               \
  "smlad %[a01], %[x0a], %[wa], %[a01]\n\t"          \
  "smlad %[a11], %[x1a], %[wa], %[a11]\n\t"          \
  "smlad %[a01], %[x0b], %[wb], %[a01]\n\t"          \
  "smlad %[a11], %[x1b], %[wb], %[a11]\n\t"
/* A pair of channels' sums for two pixels: the biases (the state's field at offset 4, a
 * pointer moved on by two), then every group of four k, two per loop turn. */
#define MTVG_ARM_DSP_PAIR_SUMS                        \
  "0:\n\t"                                            \
  "ldr %[x0a], [%[state], #4]\n\t"                    \
  "ldrd %[a00], %[a01], [%[x0a]], #8\n\t"             \
  "str %[x0a], [%[state], #4]\n\t"                    \
  "mov %[a10], %[a00]\n\t"                            \
  "mov %[a11], %[a01]\n\t"                            \
  "ldr %[xp], [%[state]]\n\t"                         \
  "1:\n\t"                                            \
  MTVG_ARM_DSP_GROUP_2X2                              \
  MTVG_ARM_DSP_GROUP_2X2                              \
  "cmp %[xp], %[x_end]\n\t"                           \
  "bne 1b\n\t"
/* What those loops take: the locals (the four pixel words of a group in ascending
 * registers, so one LDM loads them) and the asm operands naming them. */
#define MTVG_ARM_DSP_ROWS_LOCALS(x, weights, groups) \
  const uint32_t* const x_end = (x) + 4 * (groups);  \
  const uint32_t* w = (weights);                     \
  const uint32_t* xp;                                \
  int32_t a00, a01, a10, a11;                        \
  uint32_t wa, wb;                                   \
  register uint32_t x0a __asm__("r8");               \
  register uint32_t x0b __asm__("r9");               \
  register uint32_t x1a __asm__("r10");              \
  register uint32_t x1b __asm__("r11")
#define MTVG_ARM_DSP_ROWS_OPERANDS                                                        \
  [a00] "=&r"(a00), [a01] "=&r"(a01), [a10] "=&r"(a10), [a11] "=&r"(a11), [xp] "=&r"(xp), \
      [w] "+r"(w), [x0a] "=&r"(x0a), [x0b] "=&r"(x0b), [x1a] "=&r"(x1a), [x1b] "=&r"(x1b), \
      [wa] "=&r"(wa), [wb] "=&r"(wb)                                                      \
      : [x_end] "r"(x_end), [state] "r"(&state)                                           \
      : "cc", "memory"
#endif

/* Every pair of output channels for two pixels: `sums` receives per pair [pixel 0: o, o + 1,
 * pixel 1: o, o + 1], each the channel's bias plus its dot product with the pixel's widened
 * column (`groups` groups of four k, an even count). */
static void dot_rows(const uint32_t* x, int32_t groups, const uint32_t* weights,
                     int32_t weight_bits, const int32_t* bias, int32_t pairs, int32_t* sums) {
#if MTVG_ARM_DSP_ASM
  if (weight_bits == 16) {
    /* Written out: per group of four k one LDM (the pixels' words), two LDRD (the
     * channels' weights) and eight SMLAD, two groups per loop turn; per pair of channels
     * the bias loads, the sums' stores and the loop's state (kept in `state`, since the
     * inner loop takes fourteen registers). */
    rows_state state = {x, bias, sums, weights + (size_t)pairs * 4u * (size_t)groups};
    MTVG_ARM_DSP_ROWS_LOCALS(x, weights, groups);
    __asm__ volatile(
        MTVG_ARM_DSP_PAIR_SUMS
        "ldr %[x0a], [%[state], #8]\n\t"
        "strd %[a00], %[a01], [%[x0a]], #8\n\t"
        "strd %[a10], %[a11], [%[x0a]], #8\n\t"
        "str %[x0a], [%[state], #8]\n\t"
        "ldr %[x0a], [%[state], #12]\n\t"
        "cmp %[w], %[x0a]\n\t"
        "bne 0b\n\t"
        : MTVG_ARM_DSP_ROWS_OPERANDS);
    return;
  }
#endif
  const int32_t pair_words = (weight_bits / 4) * groups;
  for (int32_t j = 0; j < pairs; ++j, weights += pair_words, sums += 4) {
    int32_t acc[4] = {bias[2 * j], bias[2 * j + 1], bias[2 * j], bias[2 * j + 1]};
    if (weight_bits == 16) {
      dot_2x2_w16(x, weights, groups, acc);
    } else {
      dot_2x2_w8(x, weights, groups, acc);
    }
    sums[0] = acc[0];
    sums[1] = acc[1];
    sums[2] = acc[2];
    sums[3] = acc[3];
  }
}

#if MTVG_ARM_DSP_ASM
/* Pieces the written-out loops share, their registers named by the caller (plain names or
 * %[operand]s). The short output stage of a sum already doubled, in register a: SMMULR by
 * the multiplier m, the negative fix-up through tmp, the rounding shift by e (the addend
 * holds 2^(e-1) + zero_point * 2^e), saturation to int8. */
#define MTVG_ARM_DSP_SHORT_STAGE(a, m, addend, e, tmp) \
  "smmulr " a ", " a ", " m "\n\t"                      \
  "add " tmp ", " addend ", " a ", asr #31\n\t"         \
  "add " a ", " a ", " tmp "\n\t"                       \
  "asr " a ", " a ", " e "\n\t"                         \
  "ssat " a ", #8, " a "\n\t"
/* The bytes of v clamped lane by lane to those of lo and hi (t taken: SSUB8 sets the lanes'
 * GE flags, SEL picks by them). */
#define MTVG_ARM_DSP_CLAMP_BYTES(v, lo, hi, t) \
  "ssub8 " t ", " v ", " lo "\n\t"              \
  "sel " v ", " v ", " lo "\n\t"                \
  "ssub8 " t ", " hi ", " v "\n\t"              \
  "sel " v ", " v ", " hi "\n\t"
/* One depthwise tap of four channels, its input word in x: (c0, c2) widened into t, (c1, c3)
 * into x, the tap's two weight words loaded from w (moved on), four multiply-accumulates
 * into a0..a3. */
#define MTVG_ARM_DSP_DW_TAP(x, t, w0, w1, w, a0, a1, a2, a3) \
  "sxtb16 " t ", " x "\n\t"                                   \
  "sxtb16 " x ", " x ", ror #8\n\t"                           \
  "ldrd " w0 ", " w1 ", [" w "], #8\n\t"                      \
  "smlabb " a0 ", " t ", " w0 ", " a0 "\n\t"                  \
  "smlatt " a2 ", " t ", " w0 ", " a2 "\n\t"                  \
  "smlabb " a1 ", " x ", " w1 ", " a1 "\n\t"                  \
  "smlatt " a3 ", " x ", " w1 ", " a3 "\n\t"
#endif

#if MTVG_ARM_DSP_ASM
/* What the written-out rows with the output stage keep in memory: rows_state's fields, the
 * next channel's short-stage record, where each pixel's next two outputs go, the activation
 * range's bounds in every byte. The assembly reads the fields at offsets 0..32. */
typedef struct {
  const uint32_t* x;
  const int32_t* bias;
  const int32_t* record;
  const uint32_t* weights_end;
  int8_t* out0;
  int8_t* out1;
  uint32_t low4, high4;
} staged_state;

/* The short output stage of the sum in operand a (doubled first), with the channel's record
 * in r8 (the multiplier), r9 (the addend) and r10 (e); r11 is taken. */
#define MTVG_ARM_DSP_STAGE(a)      \
  "lsl %[" a "], %[" a "], #1\n\t" \
  MTVG_ARM_DSP_SHORT_STAGE("%[" a "]", "r8", "r9", "r10", "r11")
/* Two pixels' two bytes (in the low halves of a00 and a10) clamped to the activation
 * range. */
#define MTVG_ARM_DSP_CLAMP2                                   \
  "ldrd r8, r9, [%[state], #24]\n\t"                          \
  MTVG_ARM_DSP_CLAMP_BYTES("%[a00]", "r8", "r9", "r10")       \
  MTVG_ARM_DSP_CLAMP_BYTES("%[a10]", "r8", "r9", "r10")
/* dot_rows' loop with the short output stage fused: per pair of channels, after the groups,
 * the four sums through their channels' records, two bytes stored per pixel. */
#define MTVG_ARM_DSP_ROWS_STAGED(clamp)               \
  MTVG_ARM_DSP_PAIR_SUMS                              \
  "ldr %[xp], [%[state], #8]\n\t"                     \
  "ldmia %[xp]!, {r8, r9, r10, r11}\n\t"              \
  MTVG_ARM_DSP_STAGE("a00")                           \
  MTVG_ARM_DSP_STAGE("a10")                           \
  "ldmia %[xp]!, {r8, r9, r10, r11}\n\t"              \
  MTVG_ARM_DSP_STAGE("a01")                           \
  MTVG_ARM_DSP_STAGE("a11")                           \
  "str %[xp], [%[state], #8]\n\t"                     \
  "bfi %[a00], %[a01], #8, #8\n\t"                    \
  "bfi %[a10], %[a11], #8, #8\n\t"                    \
  clamp                                               \
  "ldrd %[wa], %[wb], [%[state], #16]\n\t"            \
  "strh %[a00], [%[wa]], #2\n\t"                      \
  "strh %[a10], [%[wb]], #2\n\t"                      \
  "strd %[wa], %[wb], [%[state], #16]\n\t"            \
  "ldr %[x0a], [%[state], #12]\n\t"                   \
  "cmp %[w], %[x0a]\n\t"                              \
  "bne 0b\n\t"

/* Two pixels' outputs, every channel (an even count, int16 weights, the short stage): as
 * dot_rows then requantize_row twice, with the stage in the loop and no sums in memory. */
static void dot_rows_staged(const uint32_t* x, int32_t groups, const uint32_t* weights,
                            const int32_t* bias, const int32_t* narrow_params, int32_t pairs,
                            const output_stage* stage, int8_t* out0, int8_t* out1) {
  staged_state state = {x,    bias, narrow_params, weights + (size_t)pairs * 4u * (size_t)groups,
                        out0, out1, byte_lanes(stage->act_min), byte_lanes(stage->act_max)};
  MTVG_ARM_DSP_ROWS_LOCALS(x, weights, groups);
  if (stage->act_min == INT8_LOWEST && stage->act_max == INT8_HIGHEST) {
    __asm__ volatile(MTVG_ARM_DSP_ROWS_STAGED("") : MTVG_ARM_DSP_ROWS_OPERANDS);
  } else {
    __asm__ volatile(MTVG_ARM_DSP_ROWS_STAGED(MTVG_ARM_DSP_CLAMP2) : MTVG_ARM_DSP_ROWS_OPERANDS);
  }
}
#undef MTVG_ARM_DSP_ROWS_STAGED
#undef MTVG_ARM_DSP_CLAMP2
#undef MTVG_ARM_DSP_STAGE
#endif

/* One pixel (the first of the widened pair) times every pair of output channels: `sums`
 * receives [o, o + 1] per pair. For the last pixel of an odd count and for dense layers
 * of one row. */
static void dot_rows_1px(const uint32_t* x, int32_t groups, const uint32_t* weights,
                         int32_t weight_bits, const int32_t* bias, int32_t pairs,
                         int32_t* sums) {
#if MTVG_ARM_DSP_ASM
  if (weight_bits == 16) {
    rows_state state = {x, bias, sums, weights + (size_t)pairs * 4u * (size_t)groups};
    const uint32_t* const x_end = x + 4 * groups;
    const uint32_t* w = weights;
    const uint32_t* xp;
    int32_t a0, a1;
    uint32_t x0a, x0b, wa, wb;
#define MTVG_ARM_DSP_GROUP_1X2                       \
  "ldrd %[x0a], %[x0b], [%[xp]], #16\n\t"            \
  "ldrd %[wa], %[wb], [%[w]], #16\n\t"               \
  "smlad %[a0], %[x0a], %[wa], %[a0]\n\t"            \
  "smlad %[a0], %[x0b], %[wb], %[a0]\n\t"            \
  "ldrd %[wa], %[wb], [%[w], #-8]\n\t"               \
  "smlad %[a1], %[x0a], %[wa], %[a1]\n\t"            \
  "smlad %[a1], %[x0b], %[wb], %[a1]\n\t"
    __asm__ volatile(
        "0:\n\t"
        "ldr %[x0a], [%[state], #4]\n\t"
        "ldrd %[a0], %[a1], [%[x0a]], #8\n\t"
        "str %[x0a], [%[state], #4]\n\t"
        "ldr %[xp], [%[state]]\n\t"
        "1:\n\t"
        MTVG_ARM_DSP_GROUP_1X2
        MTVG_ARM_DSP_GROUP_1X2
        "cmp %[xp], %[x_end]\n\t"
        "bne 1b\n\t"
        "ldr %[x0a], [%[state], #8]\n\t"
        "strd %[a0], %[a1], [%[x0a]], #8\n\t"
        "str %[x0a], [%[state], #8]\n\t"
        "ldr %[x0a], [%[state], #12]\n\t"
        "cmp %[w], %[x0a]\n\t"
        "bne 0b\n\t"
        : [a0] "=&r"(a0), [a1] "=&r"(a1), [xp] "=&r"(xp), [w] "+r"(w), [x0a] "=&r"(x0a),
          [x0b] "=&r"(x0b), [wa] "=&r"(wa), [wb] "=&r"(wb)
        : [x_end] "r"(x_end), [state] "r"(&state)
        : "cc", "memory");
#undef MTVG_ARM_DSP_GROUP_1X2
    return;
  }
#endif
  const int32_t pair_words = (weight_bits / 4) * groups;
  for (int32_t j = 0; j < pairs; ++j, weights += pair_words, sums += 2) {
    int32_t a0 = bias[2 * j], a1 = bias[2 * j + 1];
    const uint32_t* w = weights;
    for (int32_t i = 0; i < groups; ++i) {
      const uint32_t xa = x[4 * i], xb = x[4 * i + 1];
      uint32_t w0a, w0b, w1a, w1b;
      if (weight_bits == 16) {
        w0a = w[0];
        w0b = w[1];
        w1a = w[2];
        w1b = w[3];
        w += 4;
      } else {
        w0a = sxtb16(w[0]);
        w0b = sxtb16_ror8(w[0]);
        w1a = sxtb16(w[1]);
        w1b = sxtb16_ror8(w[1]);
        w += 2;
      }
      a0 = smlad(xb, w0b, smlad(xa, w0a, a0));
      a1 = smlad(xb, w1b, smlad(xa, w1a, a1));
    }
    sums[0] = a0;
    sums[1] = a1;
  }
}

int32_t mtvg_arm_dsp_conv2d_s8(const int8_t* input, const uint32_t* weights,
                               const int32_t* bias, const int32_t* multiplier,
                               const int32_t* shift, const int32_t* narrow_params,
                               int8_t* output, int32_t in_h, int32_t in_w, int32_t in_c,
                               int32_t out_h, int32_t out_w, int32_t out_c, int32_t k_h,
                               int32_t k_w, int32_t stride_h, int32_t stride_w,
                               int32_t pad_top, int32_t pad_left, int32_t dilation_h,
                               int32_t dilation_w, int32_t input_zero_point,
                               int32_t output_zero_point, int32_t act_min, int32_t act_max,
                               int32_t weight_bits, int32_t narrow) {
  ++conv2d_calls;
  const int dims = within_dim(in_h, 1) & within_dim(in_w, 1) & within_dim(in_c, 1) &
                   within_dim(out_h, 1) & within_dim(out_w, 1) & within_dim(out_c, 1) &
                   within_dim(k_h, 1) & within_dim(k_w, 1) & within_dim(stride_h, 1) &
                   within_dim(stride_w, 1) & within_dim(dilation_h, 1) &
                   within_dim(dilation_w, 1) & within_dim(pad_top, 0) & within_dim(pad_left, 0);
  if (input == NULL || weights == NULL || bias == NULL || multiplier == NULL || shift == NULL ||
      narrow_params == NULL || output == NULL || !dims ||
      (weight_bits != 8 && weight_bits != 16) ||
      !quant_ok(input_zero_point, output_zero_point, act_min, act_max) ||
      !channels_ok(multiplier, shift, out_c)) {
    return fail(MTVG_ARM_DSP_EARGUMENT, "conv2d: an argument outside the driver's limits");
  }
  if ((int64_t)k_h * k_w * in_c > MTVG_ARM_DSP_MAX_DIM) {
    return fail(MTVG_ARM_DSP_EARGUMENT, "conv2d: a kernel of more than MTVG_ARM_DSP_MAX_DIM "
                                        "values per output");
  }
  const int32_t depth = k_h * k_w * in_c;
  const int32_t groups = (depth + 7) / 8 * 2; /* an even count of groups of four k */
  const int32_t padded = 4 * groups;
  const int32_t even_c = out_c + out_c % 2;
  int32_t status = take_scratch(6u * (uint32_t)padded + 8u * (uint32_t)even_c);
  if (status != 0) {
    return status;
  }
  uint32_t* widened = scratch.words;                   /* 4 * padded bytes */
  int32_t* sums = (int32_t*)(scratch.words + padded);  /* 2 * even_c int32: both pixels */
  int8_t* columns = (int8_t*)(sums + 2 * even_c);      /* 2 * padded bytes */
  const conv_geometry g = {in_h, in_w, in_c, k_h, k_w, stride_h, stride_w,
                           pad_top, pad_left, dilation_h, dilation_w, (int8_t)input_zero_point};
  const output_stage stage = {output_zero_point, act_min, act_max, narrow};
  /* A 1x1 kernel without padding over whole groups reads its column in place. */
  const int in_place = k_h == 1 && k_w == 1 && pad_top == 0 && pad_left == 0 && in_c % 8 == 0;
  const uint32_t offset = offset_pair(input_zero_point);
  const int32_t pixels = out_h * out_w;
#if MTVG_ARM_DSP_ASM
  /* Pairs of pixels with the output stage in the loop: int16 weights, the short stage, and
   * an even channel count (each pair of channels stores two bytes a pixel). */
  const int staged = weight_bits == 16 && narrow && out_c % 2 == 0;
#endif
  for (int32_t p = 0; p < pixels; p += 2) {
    const int32_t q = p + 1 < pixels ? p + 1 : p;
    const int32_t pix[2] = {p, q};
    const int8_t* col[2];
    for (int n = 0; n < 2; ++n) {
      const int32_t oy = pix[n] / out_w;
      const int32_t ox = pix[n] % out_w;
      if (in_place) {
        col[n] = input + ((size_t)oy * (size_t)stride_h * (size_t)in_w +
                          (size_t)ox * (size_t)stride_w) * (size_t)in_c;
      } else {
        col[n] = columns + n * padded;
        im2col(input, &g, oy, ox, columns + n * padded, padded);
      }
    }
    widen_pair(col[0], col[1], groups, offset, widened);
#if MTVG_ARM_DSP_ASM
    if (staged && q != p) {
      dot_rows_staged(widened, groups, weights, bias, narrow_params, even_c / 2, &stage,
                      output + (size_t)p * (size_t)out_c, output + (size_t)q * (size_t)out_c);
      continue;
    }
#endif
    if (q == p) {
      dot_rows_1px(widened, groups, weights, weight_bits, bias, even_c / 2, sums);
      requantize_row(sums, 2, multiplier, shift, narrow_params, out_c, &stage,
                     output + (size_t)p * (size_t)out_c);
      continue;
    }
    dot_rows(widened, groups, weights, weight_bits, bias, even_c / 2, sums);
    requantize_row(sums, 4, multiplier, shift, narrow_params, out_c, &stage,
                   output + (size_t)p * (size_t)out_c);
    requantize_row(sums + 2, 4, multiplier, shift, narrow_params, out_c, &stage,
                   output + (size_t)q * (size_t)out_c);
  }
  return 0;
}

/* ---- what both depthwise kernels share ------------------------------------------------ */

/* A depthwise call's geometry and its scratch: the pixel's sums (one per channel, padded to
 * a multiple of four), its tap pointers, a row of input zero points for taps outside. */
typedef struct {
  const int8_t* input;
  int32_t in_h, in_w, c, k_h, k_w, stride_h, stride_w, pad_top, pad_left, dil_h, dil_w;
  int32_t* sums;
  const int8_t** tap;
  int8_t* pad_row;
} depthwise_frame;

/* Checks a depthwise call's arguments and lays its scratch out (`pointers_ok`: no NULL;
 * `channels_valid`: every channel's output stage constants within their ranges). */
static int32_t depthwise_begin(depthwise_frame* f, int pointers_ok, int channels_valid,
                               int32_t out_h, int32_t out_w, int32_t input_zero_point,
                               int32_t output_zero_point, int32_t act_min, int32_t act_max) {
  ++depthwise_calls;
  const int32_t sizes[] = {f->in_h, f->in_w, f->c, out_h, out_w, f->k_h, f->k_w,
                           f->stride_h, f->stride_w, f->dil_h, f->dil_w};
  const int32_t pads[] = {f->pad_top, f->pad_left};
  if (!pointers_ok || !dims_ok(sizes, sizeof(sizes) / sizeof(sizes[0]), 1) ||
      !dims_ok(pads, 2, 0) || (int64_t)f->k_h * f->k_w > MTVG_ARM_DSP_MAX_TAPS ||
      !quant_ok(input_zero_point, output_zero_point, act_min, act_max) || !channels_valid) {
    return fail(MTVG_ARM_DSP_EARGUMENT,
                "depthwise_conv2d: an argument outside the driver's limits");
  }
  const int32_t padded_c = (f->c + 3) / 4 * 4;
  const uint32_t table_bytes = (uint32_t)(f->k_h * f->k_w) * (uint32_t)sizeof(const int8_t*);
  int32_t status = take_scratch(4u * (uint32_t)padded_c + table_bytes + (uint32_t)padded_c);
  if (status != 0) {
    return status;
  }
  f->sums = (int32_t*)scratch.words;
  f->tap = (const int8_t**)(void*)(scratch.words + padded_c);
  f->pad_row = (int8_t*)(scratch.words + padded_c) + table_bytes;
  fill_bytes(f->pad_row, (int8_t)input_zero_point, padded_c);
  return 0;
}

/* Whether output pixel (oy, ox)'s window lies inside the input. */
static inline int window_inside(const depthwise_frame* f, int32_t oy, int32_t ox) {
  const int32_t y0 = oy * f->stride_h - f->pad_top, x0 = ox * f->stride_w - f->pad_left;
  return y0 >= 0 && y0 + (f->k_h - 1) * f->dil_h < f->in_h && x0 >= 0 &&
         x0 + (f->k_w - 1) * f->dil_w < f->in_w;
}

/* Output pixel (oy, ox)'s tap pointers into `table`: its input pixel, or the zero point
 * row. */
static inline void fill_taps(const depthwise_frame* f, int32_t oy, int32_t ox,
                             const int8_t** table) {
  for (int32_t ky = 0; ky < f->k_h; ++ky) {
    const int32_t iy = oy * f->stride_h - f->pad_top + ky * f->dil_h;
    for (int32_t kx = 0; kx < f->k_w; ++kx) {
      const int32_t ix = ox * f->stride_w - f->pad_left + kx * f->dil_w;
      *table++ = (iy < 0 || iy >= f->in_h || ix < 0 || ix >= f->in_w)
                     ? f->pad_row
                     : f->input + ((size_t)iy * (size_t)f->in_w + (size_t)ix) * (size_t)f->c;
    }
  }
}

/* Output pixel (oy, ox)'s tap pointers in the frame's table. A pixel whose window lies
 * inside the input, after one that did, moves every pointer by the stride; others are
 * built tap by tap. `inside` carries whether the last pixel's window lay inside (0 at the
 * start of a row). The frame is read into locals first (the table's stores could alias
 * it). */
static inline void depthwise_taps(const depthwise_frame* frame, int32_t oy, int32_t ox,
                                  int* inside) {
  const depthwise_frame f = *frame;
  const int now = window_inside(&f, oy, ox);
  const int moved = now && *inside;
  *inside = now;
  if (moved) {
    const size_t step = (size_t)f.stride_w * (size_t)f.c;
    for (int32_t t = 0; t < f.k_h * f.k_w; ++t) {
      f.tap[t] += step;
    }
    return;
  }
  fill_taps(&f, oy, ox, f.tap);
}

/* ---- depthwise_conv2d ------------------------------------------------------------------- */

/* fill_taps kept out of the DSP kernel's pixel loop (inlined there, it costs that loop
 * registers: mobilenet_v1_025 on the M4 took 9,600 instructions more). */
__attribute__((noinline)) static void dw_fill_taps(const depthwise_frame* f, int32_t oy,
                                                   int32_t ox, const int8_t** table) {
  fill_taps(f, oy, ox, table);
}

/* The stream's words per group of four channels (mtvg_arm_dsp.h): the biases, two weight
 * words per tap, the channels' records. */
#define DW_RECORD_WORDS 3
static inline size_t dw_group_words(int32_t taps) {
  return 4u + 2u * (size_t)taps + 4u * DW_RECORD_WORDS;
}

/* Every channel's record within its stage's ranges: the short stage's e in
 * [1, 22], the general stage's shift in TFLite's range, multipliers non-negative. */
static int dw_records_ok(const uint32_t* stream, int32_t taps, int32_t c, int32_t narrow) {
  const size_t group = dw_group_words(taps);
  for (int32_t ch = 0; ch < c; ++ch) {
    const int32_t* r =
        (const int32_t*)(stream + (size_t)(ch / 4) * group + 4u + 2u * (size_t)taps) +
        DW_RECORD_WORDS * (ch % 4);
    const int ok = narrow ? r[2] >= 1 && r[2] <= 22 : r[1] >= SHIFT_LOWEST && r[1] <= SHIFT_HIGHEST;
    if (r[0] < 0 || !ok) {
      return 0;
    }
  }
  return 1;
}

/* The sums of the group of four channels whose stream words start at `s`, at byte `at` of
 * each tap (the pixel's offset from the tap pointers plus the group's first channel).
 * `lanes` < 4 for a last group short of four: its bytes are read one by one (the pixel's
 * channels end there). Per tap: two SXTB16, one LDRD of the weights, four SMLABB/SMLATT. */
static void dw_group_sums(const int8_t* const* tap, int32_t taps, size_t at, const uint32_t* s,
                          int32_t lanes, int32_t* sums) {
  int32_t a0 = (int32_t)s[0], a1 = (int32_t)s[1], a2 = (int32_t)s[2], a3 = (int32_t)s[3];
  const uint32_t* w = s + 4;
  for (int32_t t = 0; t < taps; ++t, w += 2) {
    uint32_t x = 0;
    if (lanes == 4) {
      x = load32(tap[t] + at);
    } else {
      for (int32_t l = 0; l < lanes; ++l) {
        x |= (uint32_t)(uint8_t)tap[t][at + (size_t)l] << (8 * l);
      }
    }
    const uint32_t x02 = sxtb16(x), x13 = sxtb16_ror8(x);
    a0 = smlabb(x02, w[0], a0);
    a2 = smlatt(x02, w[0], a2);
    a1 = smlabb(x13, w[1], a1);
    a3 = smlatt(x13, w[1], a3);
  }
  sums[0] = a0;
  sums[1] = a1;
  sums[2] = a2;
  sums[3] = a3;
}

/* `lanes` sums of one group through their records' output stage (the short stage's sums
 * are doubled: the stream's weights and biases are). */
static void dw_group_stage(const int32_t* sums, const int32_t* records, int32_t lanes,
                           const output_stage* stage, int8_t* out) {
  for (int32_t l = 0; l < lanes; ++l, records += DW_RECORD_WORDS) {
    if (stage->narrow) {
      const int32_t high = smmulr(sums[l], records[0]);
      out[l] = clamp_int8((high + records[1] + (high >> 31)) >> records[2], stage->act_min,
                          stage->act_max);
    } else {
      out[l] = requantize(sums[l], records[0], records[1], stage);
    }
  }
}

#if MTVG_ARM_DSP_ASM
/* What the written-out 3x3 pixel reads: its nine tap pointers (byte offsets 0..32) and the
 * activation range's bounds in every byte (36, 40). */
typedef struct {
  const int8_t* tap[9];
  uint32_t low4, high4;
} dw3x3_table;

/* One tap of four channels, its input word in register x: (c0, c2) widened into r8, (c1,
 * c3) into x, the tap's weight pairs into r4, r5, four multiply-accumulates into r0..r3. */
#define DW_TAP(x) MTVG_ARM_DSP_DW_TAP(x, "r8", "r4", "r5", "r9", "r0", "r1", "r2", "r3")
/* Two taps: their pointers (table offset `at`), their input words at the pixel's offset. */
#define DW_TAP_PAIR(at)              \
  "ldrd r6, r7, [r11, #" at "]\n\t"  \
  "ldr r6, [r6, r10]\n\t"            \
  "ldr r7, [r7, r10]\n\t"            \
  DW_TAP("r6") DW_TAP("r7")
/* The short output stage of the doubled sum in register a: the channel's record (multiplier,
 * addend, e) into r4..r6, SMMULR, the negative fix-up, the rounding shift, saturation. */
#define DW_STAGE(a)             \
  "ldmia r9!, {r4, r5, r6}\n\t" \
  MTVG_ARM_DSP_SHORT_STAGE(a, "r4", "r5", "r6", "r5")
/* The four packed bytes in r0 clamped to the activation range, four lanes at once. */
#define DW_CLAMP                \
  "ldrd r1, r2, [r11, #36]\n\t" \
  MTVG_ARM_DSP_CLAMP_BYTES("r0", "r1", "r2", "r3")
/* Every group of four channels of one pixel: the biases (LDM), nine taps, the stage, four
 * bytes stored with one STR. r9 the stream, r10 the pixel's offset plus the channel, r11
 * the table, r12 the output less the pixel's offset, lr where r10 ends. */
#define DW_PIXEL_3X3(clamp)                                               \
  "0:\n\t"                                                                \
  "ldmia r9!, {r0, r1, r2, r3}\n\t"                                       \
  DW_TAP_PAIR("0") DW_TAP_PAIR("8") DW_TAP_PAIR("16") DW_TAP_PAIR("24")   \
  "ldr r6, [r11, #32]\n\t"                                                \
  "ldr r6, [r6, r10]\n\t"                                                 \
  DW_TAP("r6")                                                            \
  DW_STAGE("r0") DW_STAGE("r1") DW_STAGE("r2") DW_STAGE("r3")             \
  "bfi r0, r1, #8, #8\n\t"                                                \
  "bfi r0, r2, #16, #8\n\t"                                               \
  "bfi r0, r3, #24, #8\n\t"                                               \
  clamp                                                                   \
  "str r0, [r12, r10]\n\t"                                                \
  "add r10, r10, #4\n\t"                                                  \
  "cmp r10, lr\n\t"                                                       \
  "bne 0b\n\t"

/* One pixel of a 3x3 layer under the short stage, channels a multiple of four: each input
 * byte at table->tap[t] + delta + channel; outputs at out. */
static void dw_pixel_3x3(const dw3x3_table* table, size_t delta, int32_t c,
                         const uint32_t* stream, int8_t* out, int clamp) {
  register const uint32_t* w __asm__("r9") = stream;
  register size_t at __asm__("r10") = delta;
  register const dw3x3_table* tb __asm__("r11") = table;
  register uintptr_t ob __asm__("r12") = (uintptr_t)out - (uintptr_t)delta;
  register size_t end __asm__("lr") = delta + (size_t)c;
  if (clamp) {
    __asm__ volatile(DW_PIXEL_3X3(DW_CLAMP)
                     : "+r"(w), "+r"(at)
                     : "r"(tb), "r"(ob), "r"(end)
                     : "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "cc", "memory");
  } else {
    __asm__ volatile(DW_PIXEL_3X3("")
                     : "+r"(w), "+r"(at)
                     : "r"(tb), "r"(ob), "r"(end)
                     : "r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "cc", "memory");
  }
}
#undef DW_PIXEL_3X3
#undef DW_CLAMP
#undef DW_STAGE
#undef DW_TAP_PAIR
#undef DW_TAP

/* The sums of the first `full` groups of one pixel (any tap count, either stage) into
 * `sums`: per group two LDRD of the biases, two taps per inner turn with one LDRD of their
 * pointers, the records skipped. */
static void dw_groups_asm(const int8_t* const* tap, int32_t taps, size_t at,
                          const uint32_t* w, int32_t full, int32_t* sums) {
  struct {
    const int8_t* const* tap;
    int32_t odd;
    int32_t* sums;
    size_t end;
  } state = {tap, taps % 2, sums, at + 4u * (size_t)full};
  const int8_t* const* const pairs_end = tap + 2 * (taps / 2);
  const int8_t* const* tp;
  const int8_t* p0;
  const int8_t* p1;
  int32_t a0, a1, a2, a3;
  uint32_t t, w0, w1;
#define DW_TAP(x)                                                                 \
  MTVG_ARM_DSP_DW_TAP("%[" x "]", "%[t]", "%[w0]", "%[w1]", "%[w]", "%[a0]", "%[a1]", \
                      "%[a2]", "%[a3]")
  __asm__ volatile(
      "0:\n\t"
      "ldrd %[a0], %[a1], [%[w]], #8\n\t"
      "ldrd %[a2], %[a3], [%[w]], #8\n\t"
      "ldr %[tp], [%[state]]\n\t"
      "cmp %[tp], %[pairs_end]\n\t"
      "beq 3f\n\t"
      "1:\n\t"
      "ldrd %[p0], %[p1], [%[tp]], #8\n\t"
      "ldr %[p0], [%[p0], %[at]]\n\t"
      "ldr %[p1], [%[p1], %[at]]\n\t"
      DW_TAP("p0")
      DW_TAP("p1")
      "cmp %[tp], %[pairs_end]\n\t"
      "bne 1b\n\t"
      "3:\n\t"
      "ldr %[t], [%[state], #4]\n\t"
      "cmp %[t], #0\n\t"
      "beq 2f\n\t"
      "ldr %[p0], [%[tp]]\n\t"
      "ldr %[p0], [%[p0], %[at]]\n\t"
      DW_TAP("p0")
      "2:\n\t"
      "add %[w], %[w], #48\n\t"
      "ldr %[t], [%[state], #8]\n\t"
      "strd %[a0], %[a1], [%[t]], #8\n\t"
      "strd %[a2], %[a3], [%[t]], #8\n\t"
      "str %[t], [%[state], #8]\n\t"
      "add %[at], %[at], #4\n\t"
      "ldr %[t], [%[state], #12]\n\t"
      "cmp %[at], %[t]\n\t"
      "bne 0b\n\t"
      : [a0] "=&r"(a0), [a1] "=&r"(a1), [a2] "=&r"(a2), [a3] "=&r"(a3), [tp] "=&r"(tp),
        [w] "+r"(w), [at] "+r"(at), [p0] "=&r"(p0), [p1] "=&r"(p1), [t] "=&r"(t),
        [w0] "=&r"(w0), [w1] "=&r"(w1)
      : [pairs_end] "r"(pairs_end), [state] "r"(&state)
      : "cc", "memory");
#undef DW_TAP
}
#endif

int32_t mtvg_arm_dsp_depthwise_conv2d_s8(
    const int8_t* input, const uint32_t* stream, int8_t* output, int32_t in_h, int32_t in_w,
    int32_t c, int32_t out_h, int32_t out_w, int32_t k_h, int32_t k_w, int32_t stride_h,
    int32_t stride_w, int32_t pad_top, int32_t pad_left, int32_t dilation_h,
    int32_t dilation_w, int32_t input_zero_point, int32_t output_zero_point, int32_t act_min,
    int32_t act_max, int32_t narrow) {
  depthwise_frame f = {input,    in_h,     in_w,       c,          k_h,  k_w,  stride_h,
                       stride_w, pad_top,  pad_left,   dilation_h, dilation_w, NULL, NULL,
                       NULL};
  const int pointers_ok = input && stream && output;
  const int in_range = c >= 1 && c <= MTVG_ARM_DSP_MAX_DIM && k_h >= 1 && k_w >= 1 &&
                       (int64_t)k_h * k_w <= MTVG_ARM_DSP_MAX_TAPS && (narrow == 0 || narrow == 1);
  const int32_t status = depthwise_begin(
      &f, pointers_ok, in_range && pointers_ok && dw_records_ok(stream, k_h * k_w, c, narrow),
      out_h, out_w, input_zero_point, output_zero_point, act_min, act_max);
  if (status != 0) {
    return status;
  }
  const int32_t taps = k_h * k_w;
  const size_t group = dw_group_words(taps);
  const output_stage stage = {output_zero_point, act_min, act_max, narrow};
  const int32_t full = c / 4;
  const size_t step = (size_t)stride_w * (size_t)c;
#if MTVG_ARM_DSP_ASM
  dw3x3_table table3;
  const int written_out = taps == 9 && narrow && c % 4 == 0;
  const int clamp = act_min != INT8_LOWEST || act_max != INT8_HIGHEST;
  const int8_t** const tap = written_out ? table3.tap : f.tap;
  table3.low4 = byte_lanes(act_min);
  table3.high4 = byte_lanes(act_max);
#else
  const int8_t** const tap = f.tap;
#endif
  for (int32_t oy = 0; oy < out_h; ++oy) {
    int run = 0;
    size_t delta = 0;
    for (int32_t ox = 0; ox < out_w; ++ox) {
      /* Along a run of windows inside the input the tap pointers stay the run's first
       * pixel's and the pixel's offset `delta` grows by the stride. */
      const int inside = window_inside(&f, oy, ox);
      if (inside && run) {
        delta += step;
      } else {
        dw_fill_taps(&f, oy, ox, tap);
        delta = 0;
      }
      run = inside;
      int8_t* out = output + ((size_t)oy * (size_t)out_w + (size_t)ox) * (size_t)c;
#if MTVG_ARM_DSP_ASM
      if (written_out) {
        dw_pixel_3x3(&table3, delta, c, stream, out, clamp);
        continue;
      }
      if (full > 0) {
        dw_groups_asm(tap, taps, delta, stream, full, f.sums);
      }
#else
      for (int32_t g = 0; g < full; ++g) {
        dw_group_sums(tap, taps, delta + 4u * (size_t)g, stream + (size_t)g * group, 4,
                      f.sums + 4 * g);
      }
#endif
      for (int32_t g = 0; g < full; ++g) {
        dw_group_stage(f.sums + 4 * g,
                       (const int32_t*)(stream + (size_t)g * group + 4u + 2u * (size_t)taps),
                       4, &stage, out + 4 * g);
      }
      if (4 * full < c) {
        const uint32_t* s = stream + (size_t)full * group;
        int32_t sums[4];
        dw_group_sums(tap, taps, delta + 4u * (size_t)full, s, c - 4 * full, sums);
        dw_group_stage(sums, (const int32_t*)(s + 4u + 2u * (size_t)taps), c - 4 * full,
                       &stage, out + 4 * full);
      }
    }
  }
  return 0;
}

/* ---- depthwise_conv2d on Helium ---------------------------------------------------------- */

#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#include <arm_mve.h>
#define MTVG_ARM_DSP_MVE 1
#endif

/* Where channel `ch`'s bias, multiplier and shift are in the Helium kernel's arrays: in
 * each whole block of sixteen channels the even ones first, then the odd ones, per half of
 * eight (the lanes VMULLB and VMULLT give), the last partial block in order. */
static inline int32_t helium_index(int32_t ch, int32_t c) {
  const int32_t base = ch & ~15;
  if (base + 16 > c) {
    return ch;
  }
  const int32_t i = ch & 15;
  return base + (i & 8) + ((i & 1) ? 4 : 0) + ((i & 7) >> 1);
}

#ifdef MTVG_ARM_DSP_MVE
/* The short output stage in four lanes: VQRDMULH is the rounding doubling high multiply;
 * adding -1 to negative values before VRSHL's round-half-up shift makes it TFLite's
 * round-half-away-from-zero divide (shifts in [-22, -1]). */
static inline int32x4_t helium_stage(int32x4_t acc, const int32_t* multiplier,
                                     const int32_t* shift, const output_stage* stage) {
  int32x4_t h = vqrdmulhq_s32(acc, vldrwq_s32(multiplier));
  h = vaddq_s32(h, vshrq_n_s32(h, 31));
  h = vrshlq_s32(h, vldrwq_s32(shift));
  h = vaddq_n_s32(h, stage->zero_point);
  h = vmaxq_s32(h, vdupq_n_s32(stage->act_min));
  return vminq_s32(h, vdupq_n_s32(stage->act_max));
}

/* Sixteen channels of one pixel over every tap: two loads of eight int8 as int16 lanes
 * (input, weights) per half, VMULLB/VMULLT for the even and odd lanes' products, a VADD
 * each. The weights are TFLite's (tap, channel) int8; the bias holds the input offset times
 * each channel's weight sum, so padding taps (reading the zero point) add nothing. */
static void helium_block16(const int8_t* const* tap, int32_t taps, const int8_t* w,
                           int32_t c, int32_t ch, const int32_t* bias,
                           const int32_t* multiplier, const int32_t* shift,
                           const output_stage* stage, int8_t* out) {
  int32x4_t e0 = vldrwq_s32(bias), o0 = vldrwq_s32(bias + 4);
  int32x4_t e1 = vldrwq_s32(bias + 8), o1 = vldrwq_s32(bias + 12);
  for (int32_t t = 0; t < taps; ++t, w += c) {
    const int8_t* x = tap[t] + ch;
    int16x8_t xv = vldrbq_s16(x), wv = vldrbq_s16(w);
    e0 = vaddq_s32(e0, vmullbq_int_s16(xv, wv));
    o0 = vaddq_s32(o0, vmulltq_int_s16(xv, wv));
    xv = vldrbq_s16(x + 8);
    wv = vldrbq_s16(w + 8);
    e1 = vaddq_s32(e1, vmullbq_int_s16(xv, wv));
    o1 = vaddq_s32(o1, vmulltq_int_s16(xv, wv));
  }
  const uint32x4_t even = vidupq_n_u32(0, 2);  /* byte offsets 0, 2, 4, 6 */
  const uint32x4_t odd = vaddq_n_u32(even, 1);
  if (stage->narrow) {
    vstrbq_scatter_offset_s32(out, even, helium_stage(e0, multiplier, shift, stage));
    vstrbq_scatter_offset_s32(out, odd, helium_stage(o0, multiplier + 4, shift + 4, stage));
    vstrbq_scatter_offset_s32(out + 8, even,
                              helium_stage(e1, multiplier + 8, shift + 8, stage));
    vstrbq_scatter_offset_s32(out + 8, odd,
                              helium_stage(o1, multiplier + 12, shift + 12, stage));
    return;
  }
  int32_t sums[16];
  vstrwq_s32(sums, e0);
  vstrwq_s32(sums + 4, o0);
  vstrwq_s32(sums + 8, e1);
  vstrwq_s32(sums + 12, o1);
  for (int32_t i = 0; i < 16; ++i) {
    const int32_t at = (i & 8) + ((i & 1) ? 4 : 0) + ((i & 7) >> 1);
    out[i] = requantize(sums[at], multiplier[at], shift[at], stage);
  }
}

/* The last channels (fewer than sixteen), in order, four int32 lanes per vector under a
 * tail predicate. */
static void helium_tail(const int8_t* const* tap, int32_t taps, const int8_t* w, int32_t c,
                        int32_t ch, int32_t lanes, const int32_t* bias,
                        const int32_t* multiplier, const int32_t* shift,
                        const output_stage* stage, int8_t* out) {
  for (int32_t v = 0; v < lanes; v += 4) {
    const mve_pred16_t p = vctp32q((uint32_t)(lanes - v));
    int32x4_t acc = vldrwq_z_s32(bias + v, p);
    const int8_t* wt = w + v;
    for (int32_t t = 0; t < taps; ++t, wt += c) {
      acc = vaddq_s32(acc, vmulq_s32(vldrbq_z_s32(tap[t] + ch + v, p), vldrbq_z_s32(wt, p)));
    }
    if (stage->narrow) {
      int32x4_t h = vqrdmulhq_s32(acc, vldrwq_z_s32(multiplier + v, p));
      h = vaddq_s32(h, vshrq_n_s32(h, 31));
      h = vrshlq_s32(h, vldrwq_z_s32(shift + v, p));
      h = vaddq_n_s32(h, stage->zero_point);
      h = vmaxq_s32(h, vdupq_n_s32(stage->act_min));
      h = vminq_s32(h, vdupq_n_s32(stage->act_max));
      vstrbq_p_s32(out + v, h, p);
    } else {
      int32_t sums[4];
      vstrwq_s32(sums, acc);
      for (int32_t i = 0; i < 4 && v + i < lanes; ++i) {
        out[v + i] = requantize(sums[i], multiplier[v + i], shift[v + i], stage);
      }
    }
  }
}
#endif

int32_t mtvg_arm_dsp_depthwise_helium_s8(
    const int8_t* input, const int8_t* weights, const int32_t* bias, const int32_t* multiplier,
    const int32_t* shift, const int32_t* narrow_params, int8_t* output, int32_t in_h,
    int32_t in_w, int32_t c, int32_t out_h, int32_t out_w, int32_t k_h, int32_t k_w,
    int32_t stride_h, int32_t stride_w, int32_t pad_top, int32_t pad_left, int32_t dilation_h,
    int32_t dilation_w, int32_t input_zero_point, int32_t output_zero_point, int32_t act_min,
    int32_t act_max, int32_t narrow) {
  depthwise_frame f = {input,    in_h,     in_w,       c,          k_h,  k_w,  stride_h,
                       stride_w, pad_top,  pad_left,   dilation_h, dilation_w, NULL, NULL,
                       NULL};
  const int pointers_ok =
      input && weights && bias && multiplier && shift && narrow_params && output;
  const int32_t status = depthwise_begin(
      &f, pointers_ok,
      pointers_ok && c >= 1 && c <= MTVG_ARM_DSP_MAX_DIM && channels_ok(multiplier, shift, c),
      out_h, out_w, input_zero_point, output_zero_point, act_min, act_max);
  if (status != 0) {
    return status;
  }
  const int32_t taps = k_h * k_w;
  int32_t* sums = f.sums;
  const int8_t* const* tap = f.tap;
  const output_stage stage = {output_zero_point, act_min, act_max, narrow};
  for (int32_t oy = 0; oy < out_h; ++oy) {
    int inside = 0;
    for (int32_t ox = 0; ox < out_w; ++ox) {
      depthwise_taps(&f, oy, ox, &inside);
      int8_t* out = output + ((size_t)oy * (size_t)out_w + (size_t)ox) * (size_t)c;
#ifdef MTVG_ARM_DSP_MVE
      (void)sums;
      (void)narrow_params;
      int32_t ch = 0;
      for (; ch + 16 <= c; ch += 16) {
        helium_block16(tap, taps, weights + ch, c, ch, bias + ch, multiplier + ch, shift + ch,
                       &stage, out + ch);
      }
      if (ch < c) {
        helium_tail(tap, taps, weights + ch, c, ch, c - ch, bias + ch, multiplier + ch,
                    shift + ch, &stage, out + ch);
      }
#else
      /* Elsewhere: the same sums in plain C (padding taps read the zero point, which the
       * folded bias cancels), each channel's constants where helium_index puts them. */
      for (int32_t ch = 0; ch < c; ++ch) {
        const int32_t at = helium_index(ch, c);
        uint32_t acc = (uint32_t)bias[at];
        for (int32_t k = 0; k < taps; ++k) {
          acc += (uint32_t)((int32_t)tap[k][ch] * (int32_t)weights[(size_t)k * (size_t)c + ch]);
        }
        const int32_t mult = multiplier[at], sh = shift[at];
        out[ch] = stage.narrow
                      ? clamp_int8(narrow_stage((int32_t)acc, narrow_params + 4 * at), act_min,
                                   act_max)
                      : requantize((int32_t)acc, mult, sh, &stage);
      }
      (void)sums;
#endif
    }
  }
  return 0;
}

/* ---- 1x1 conv2d and dense on Helium ----------------------------------------------------- */

/* Every channel's record (bias, multiplier, shift, zero point) within TFLite's ranges, the
 * zero point the same throughout (the written-out loop reads it from the records). */
static int records_ok(const int32_t* records, int32_t channels) {
  for (int32_t c = 0; c < channels; ++c) {
    const int32_t* r = records + 4 * c;
    if (r[1] < 0 || r[2] < -31 || r[2] > 30 || r[3] != records[3]) {
      return 0;
    }
  }
  return 1;
}

#if defined(MTVG_ARM_DSP_MVE) && MTVG_ARM_DSP_ASM
/* The inner products of four rows (%[x0] .. %[x3]) with one channel's weights (%[w]) over
 * %[n] steps of sixteen input channels, in a low-overhead loop: one load of the weights and
 * one of each row per step (the pointers moving on), four VMLADAVA into %[a0] .. %[a3]
 * (even registers: "Te"); q0-q3 and lr are taken. */
#define HELIUM_DOT4_LOOP                   \
  "wls lr, %[n], 2f\n"                     \
  "1:\n"                                   \
  "vldrb.8 q0, [%[w]], #16\n"              \
  "vldrb.8 q1, [%[x0]], #16\n"             \
  "vmladava.s8 %[a0], q1, q0\n"            \
  "vldrb.8 q2, [%[x1]], #16\n"             \
  "vmladava.s8 %[a1], q2, q0\n"            \
  "vldrb.8 q3, [%[x2]], #16\n"             \
  "vmladava.s8 %[a2], q3, q0\n"            \
  "vldrb.8 q1, [%[x3]], #16\n"             \
  "vmladava.s8 %[a3], q1, q0\n"            \
  "le lr, 1b\n"                            \
  "2:\n"
#endif

#ifdef MTVG_ARM_DSP_MVE
/* Four input rows' (x, x + step, x + 2 step, x + 3 step) inner products with one channel's
 * weights `w`, each starting at `bias`, one lane per row: sixteen input channels per step,
 * one VMLADAVA of sixteen products per row, the last step under a tail predicate. */
static inline int32x4_t helium_dot4(const int8_t* x, int32_t step, const int8_t* w,
                                    int32_t in_c, int32_t bias) {
  int32_t a0 = bias, a1 = bias, a2 = bias, a3 = bias;
  const int8_t *x0 = x, *x1 = x + step, *x2 = x1 + step, *x3 = x2 + step;
  const int32_t whole = in_c / 16;
#if MTVG_ARM_DSP_ASM
  __asm__ volatile(
      HELIUM_DOT4_LOOP
      : [a0] "+Te"(a0), [a1] "+Te"(a1), [a2] "+Te"(a2), [a3] "+Te"(a3), [x0] "+r"(x0),
        [x1] "+r"(x1), [x2] "+r"(x2), [x3] "+r"(x3), [w] "+r"(w)
      : [n] "r"(whole)
      : "lr", "memory", "d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7");
#else
  for (int32_t k = 0; k < whole; ++k, w += 16, x0 += 16, x1 += 16, x2 += 16, x3 += 16) {
    const int8x16_t wv = vldrbq_s8(w);
    a0 = vmladavaq_s8(a0, vldrbq_s8(x0), wv);
    a1 = vmladavaq_s8(a1, vldrbq_s8(x1), wv);
    a2 = vmladavaq_s8(a2, vldrbq_s8(x2), wv);
    a3 = vmladavaq_s8(a3, vldrbq_s8(x3), wv);
  }
#endif
  if (in_c % 16) {
    const mve_pred16_t p = vctp8q((uint32_t)(in_c % 16));
    const int8x16_t wv = vldrbq_z_s8(w, p);
    a0 = vmladavaq_s8(a0, vldrbq_z_s8(x0, p), wv);
    a1 = vmladavaq_s8(a1, vldrbq_z_s8(x1, p), wv);
    a2 = vmladavaq_s8(a2, vldrbq_z_s8(x2, p), wv);
    a3 = vmladavaq_s8(a3, vldrbq_z_s8(x3, p), wv);
  }
  int32x4_t acc = vdupq_n_s32(a0);
  acc = vsetq_lane_s32(a1, acc, 1);
  acc = vsetq_lane_s32(a2, acc, 2);
  return vsetq_lane_s32(a3, acc, 3);
}

#if MTVG_ARM_DSP_ASM
/* Four full rows by every output channel, written out: per channel the inner products
 * (in_c a multiple of 16), then the short output stage on the four sums (VQRDMULH, the
 * negative-value fix-up, VRSHL, the zero point, the clamp) and one scatter store of the
 * four bytes. `records`: per channel (bias, multiplier, shift, zero point); `frame`: the
 * store offsets, act_min x4, act_max x4 and out_c. The sums go into q4 one lane at a time
 * (d8[0] .. d9[1]; the two-lane VMOV's lane order is read differently by assemblers and
 * emulators). Fourteen registers: the frame pointer must be free, as for the DSP loops. */
__attribute__((noinline)) static void pointwise_rows4(const int8_t* x, int32_t in_c,
                                                     const int8_t* w, const int32_t* records,
                                                     const int32_t* frame, int8_t* out) {
  const int8_t *x0 = x, *x1 = x + in_c, *x2 = x1 + in_c, *x3 = x2 + in_c;
  int32_t a0, a1, a2, a3;
  const int32_t whole = in_c / 16;
  __asm__ volatile(
      "vldrw.32 q5, [%[f]]\n"
      "vldrw.32 q6, [%[f], #16]\n"
      "vldrw.32 q7, [%[f], #32]\n"
      "ldr %[f], [%[f], #48]\n"
      "3:\n"
      "ldr %[a0], [%[r]], #16\n"
      "mov %[a1], %[a0]\n"
      "mov %[a2], %[a0]\n"
      "mov %[a3], %[a0]\n"
      HELIUM_DOT4_LOOP
      "vmov.32 d8[0], %[a0]\n"
      "vmov.32 d8[1], %[a1]\n"
      "vmov.32 d9[0], %[a2]\n"
      "vmov.32 d9[1], %[a3]\n"
      "ldrd %[a0], %[a1], [%[r], #-12]\n"
      "ldr %[a2], [%[r], #-4]\n"
      "vqrdmulh.s32 q4, q4, %[a0]\n"
      "vshr.s32 q0, q4, #31\n"
      "vadd.i32 q4, q4, q0\n"
      "vrshl.s32 q4, %[a1]\n"
      "vadd.i32 q4, q4, %[a2]\n"
      "vmax.s32 q4, q4, q6\n"
      "vmin.s32 q4, q4, q7\n"
      "vstrb.32 q4, [%[o], q5]\n"
      "add %[o], %[o], #1\n"
      "sub %[x0], %[x0], %[n], lsl #4\n"
      "sub %[x1], %[x1], %[n], lsl #4\n"
      "sub %[x2], %[x2], %[n], lsl #4\n"
      "sub %[x3], %[x3], %[n], lsl #4\n"
      "subs %[f], %[f], #1\n"
      "bne 3b\n"
      : [a0] "=&Te"(a0), [a1] "=&Te"(a1), [a2] "=&Te"(a2), [a3] "=&Te"(a3), [x0] "+r"(x0),
        [x1] "+r"(x1), [x2] "+r"(x2), [x3] "+r"(x3), [w] "+r"(w), [r] "+r"(records),
        [o] "+r"(out), [f] "+r"(frame)
      : [n] "r"(whole)
      : "lr", "cc", "memory", "d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9",
        "d10", "d11", "d12", "d13", "d14", "d15");
}
#endif

/* One channel's sums of `rows` pixels (lanes) through the output stage, stored `out_c`
 * bytes apart. */
static inline void helium_store_rows(int32x4_t acc, int32_t multiplier, int32_t shift,
                                     const output_stage* stage, uint32x4_t offsets,
                                     int32_t rows, int32_t out_c, int8_t* out) {
  if (stage->narrow) {
    int32x4_t h = vqrdmulhq_n_s32(acc, multiplier);
    h = vaddq_s32(h, vshrq_n_s32(h, 31));
    h = vrshlq_n_s32(h, shift);
    h = vaddq_n_s32(h, stage->zero_point);
    h = vmaxq_s32(h, vdupq_n_s32(stage->act_min));
    h = vminq_s32(h, vdupq_n_s32(stage->act_max));
    vstrbq_scatter_offset_p_s32(out, offsets, h, vctp32q((uint32_t)rows));
    return;
  }
  int32_t sums[4];
  vstrwq_s32(sums, acc);
  for (int32_t i = 0; i < rows; ++i) {
    out[(size_t)i * (size_t)out_c] = requantize(sums[i], multiplier, shift, stage);
  }
}
#endif

int32_t mtvg_arm_dsp_pointwise_helium_s8(const int8_t* input, const int8_t* weights,
                                         const int32_t* records, int8_t* output,
                                         int32_t pixels, int32_t in_c, int32_t out_c,
                                         int32_t output_zero_point, int32_t act_min,
                                         int32_t act_max, int32_t narrow) {
  ++conv2d_calls;
  const int32_t sizes[] = {pixels, in_c, out_c};
  if (!input || !weights || !records || !output || !dims_ok(sizes, 3, 1) ||
      !quant_ok(0, output_zero_point, act_min, act_max) || !records_ok(records, out_c)) {
    return fail(MTVG_ARM_DSP_EARGUMENT,
                "pointwise conv2d: an argument outside the driver's limits");
  }
  const output_stage stage = {output_zero_point, act_min, act_max, narrow};
#ifdef MTVG_ARM_DSP_MVE
  /* Four pixels by one channel per call; the last pixels one at a time (all four lanes
   * reading the same row, one stored). */
  const uint32x4_t offsets = vmulq_n_u32(vidupq_n_u32(0, 1), (uint32_t)out_c);
  int32_t px = 0;
#if MTVG_ARM_DSP_ASM
  if (narrow && in_c % 16 == 0) {
    /* {offsets, act_min x4, act_max x4, out_c}: what the loop below loads first. */
    int32_t frame[13];
    vstrwq_s32(frame, vreinterpretq_s32_u32(offsets));
    vstrwq_s32(frame + 4, vdupq_n_s32(act_min));
    vstrwq_s32(frame + 8, vdupq_n_s32(act_max));
    frame[12] = out_c;
    for (; px + 4 <= pixels; px += 4) {
      pointwise_rows4(input + (size_t)px * (size_t)in_c, in_c, weights, records, frame,
                      output + (size_t)px * (size_t)out_c);
    }
  }
#endif
  for (; px < pixels; px += 4) {
    const int32_t rows = pixels - px < 4 ? 1 : 4;
    const int32_t step = rows == 4 ? in_c : 0;
    const int8_t* x = input + (size_t)px * (size_t)in_c;
    int8_t* out = output + (size_t)px * (size_t)out_c;
    const int8_t* w = weights;
    for (int32_t ch = 0; ch < out_c; ++ch, w += in_c) {
      const int32_t* r = records + 4 * ch;
      helium_store_rows(helium_dot4(x, step, w, in_c, r[0]), r[1], r[2], &stage, offsets, rows,
                        out_c, out + ch);
    }
    px -= 4 - rows;  /* a single row moves on by one */
  }
#else
  /* Elsewhere: the same sums in plain C, and the general output stage (the short one gives
   * the same results). */
  for (int32_t px = 0; px < pixels; ++px) {
    const int8_t* x = input + (size_t)px * (size_t)in_c;
    for (int32_t ch = 0; ch < out_c; ++ch) {
      const int8_t* w = weights + (size_t)ch * (size_t)in_c;
      const int32_t* r = records + 4 * ch;
      uint32_t acc = (uint32_t)r[0];
      for (int32_t k = 0; k < in_c; ++k) {
        acc += (uint32_t)((int32_t)x[k] * (int32_t)w[k]);
      }
      output[(size_t)px * (size_t)out_c + (size_t)ch] =
          requantize((int32_t)acc, r[1], r[2], &stage);
    }
  }
#endif
  return 0;
}

void mtvg_arm_dsp_counters(mtvg_accel_emit_fn emit) {
  emit(MTVG_ARM_DSP_NAME, "conv2d_calls", conv2d_calls);
  emit(MTVG_ARM_DSP_NAME, "depthwise_conv2d_calls", depthwise_calls);
  emit(MTVG_ARM_DSP_NAME, "scratch_bytes", (uint64_t)sizeof(scratch.words));
  emit(MTVG_ARM_DSP_NAME, "scratch_peak_bytes", (uint64_t)scratch_peak);
}
