/*
 * vanilla: a mock NPU. This is the device side: a C model of a memory-mapped register block
 * that runs inside the firmware and does the math when the driver starts a command.
 *
 * The register block is a static instance (`VANILLA`), the firmware's stand-in for MMIO.
 * Every register is a 32-bit word; register N sits at byte offset 4·N (the table is in
 * README.md next to this file). Buffer addresses take two words (ADDR_x_LO, ADDR_x_HI), so
 * the map is the same on 32- and 64-bit hosts; on a 32-bit core ADDR_x_HI must be 0.
 *
 * Protocol: program CMD, the buffer addresses and sizes and the geometry registers, clear
 * STATUS, set CTRL.START, then call vanilla_device_clock() until STATUS has DONE or ERROR.
 * The first clock after START latches and checks the command (an error ends it at once);
 * VANILLA_COMMAND_CLOCKS clocks later the device computes the result and sets DONE.
 * CTRL.ABORT drops a command in flight without writing its output.
 */
#ifndef VANILLA_DEVICE_H_
#define VANILLA_DEVICE_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- build-time options ------------------------------------------------------------------ */

/*! \brief FAULT_AT at reset: the Nth command since reset fails (0 = never). */
#ifndef VANILLA_FAULT_AT
#define VANILLA_FAULT_AT 0
#endif

/*! \brief Clocks from START to DONE for a command that passes its checks (at least 1). */
#ifndef VANILLA_COMMAND_CLOCKS
#define VANILLA_COMMAND_CLOCKS 2
#endif

/* ---- limits the device checks (a geometry over one is ERR_LIMIT) ------------------------- */

#define VANILLA_MAX_CHANNELS 1024u     /*!< conv in_c and out_c */
#define VANILLA_MAX_DIM 1024u          /*!< conv in_h, in_w, out_h, out_w */
#define VANILLA_MAX_KERNEL 11u         /*!< k_h and k_w */
#define VANILLA_MAX_STRIDE 16u         /*!< stride_h and stride_w */
#define VANILLA_MAX_DILATION 16u       /*!< dilation_h and dilation_w */
#define VANILLA_MAX_PAD 64u            /*!< pad_top and pad_left (0 .. this) */
#define VANILLA_MAX_DENSE_DEPTH 65536u /*!< dense in_depth */
#define VANILLA_MAX_DENSE_UNITS 65536u /*!< dense units */
#define VANILLA_MAX_BATCHES 256u       /*!< dense batches */
#define VANILLA_MAX_BUFFER_BYTES (16u * 1024u * 1024u) /*!< any one buffer (the DMA window) */

/* ---- register values --------------------------------------------------------------------- */

#define VANILLA_ID_VALUE 0x56414E31u /*!< ID register: "VAN1" */

/* CMD */
#define VANILLA_CMD_CONV2D_F32 1u /*!< float32 conv2d, NCHW/OIHW, optional bias and ReLU */
#define VANILLA_CMD_CONV2D_S8 2u  /*!< int8 conv2d, NHWC/OHWI, TFLite requantization */
#define VANILLA_CMD_DENSE_S8 3u   /*!< int8 fully connected, TFLite requantization */

/* CTRL */
#define VANILLA_CTRL_START (1u << 0) /*!< set by the driver; cleared by the device when done */
#define VANILLA_CTRL_ABORT (1u << 1) /*!< drop the command in flight (cleared by the device) */

/* STATUS */
#define VANILLA_STATUS_DONE (1u << 0)
#define VANILLA_STATUS_BUSY (1u << 1)
#define VANILLA_STATUS_ERROR (1u << 2)
#define VANILLA_STATUS_CODE_SHIFT 8u
#define VANILLA_STATUS_CODE_MASK (0xFFu << VANILLA_STATUS_CODE_SHIFT)

/* FLAGS */
#define VANILLA_FLAGS_RELU (1u << 0) /*!< CONV2D_F32: max(x, 0) after the bias */

/* Error codes (STATUS.CODE). ERR_REG names the register at fault, ERR_INDEX/ERR_VALUE/
 * ERR_LO/ERR_HI give the details (see README.md). */
#define VANILLA_ERR_NONE 0u
#define VANILLA_ERR_UNKNOWN_COMMAND 1u /*!< ERR_VALUE = CMD */
#define VANILLA_ERR_NULL_ADDRESS 2u    /*!< ERR_REG = ADDR_x_LO of the null buffer */
#define VANILLA_ERR_SIZE_MISMATCH 3u   /*!< ERR_VALUE = SIZE_x, ERR_HI = bytes needed */
#define VANILLA_ERR_LIMIT 4u           /*!< ERR_VALUE outside [ERR_LO, ERR_HI] */
#define VANILLA_ERR_BAD_PARAM 5u       /*!< ERR_VALUE outside [ERR_LO, ERR_HI] */
#define VANILLA_ERR_BAD_REQUANT 6u     /*!< ERR_INDEX = channel, ERR_VALUE = shift/multiplier */
#define VANILLA_ERR_FAULT_INJECTED 7u  /*!< ERR_VALUE = the command's number since reset */
#define VANILLA_ERR_ADDRESS_RANGE 8u   /*!< ADDR_x_HI nonzero on a 32-bit core */
#define VANILLA_ERR_ALIGNMENT 9u       /*!< a 4-byte buffer at an odd address; ERR_VALUE = LO */
#define VANILLA_ERR_OVERLAP 10u        /*!< the output overlaps input ERR_INDEX (a register) */

/* ---- the register block -------------------------------------------------------------------- */

/*! \brief The register block; field N is at byte offset 4·N. */
typedef struct {
  volatile uint32_t ID;        /*!< 0x00 R  VANILLA_ID_VALUE */
  volatile uint32_t CMD;       /*!< 0x04 RW VANILLA_CMD_* */
  volatile uint32_t CTRL;      /*!< 0x08 RW START, ABORT */
  volatile uint32_t STATUS;    /*!< 0x0C RW DONE, BUSY, ERROR, CODE; the driver writes 0 */
  volatile uint32_t ERR_REG;   /*!< 0x10 R  byte offset of the register at fault */
  volatile uint32_t ERR_INDEX; /*!< 0x14 R  channel or second register of the error */
  volatile uint32_t ERR_VALUE; /*!< 0x18 R  the offending value */
  volatile uint32_t ERR_LO;    /*!< 0x1C R  smallest allowed value (signed) */
  volatile uint32_t ERR_HI;    /*!< 0x20 R  largest allowed value, or bytes needed */
  volatile uint32_t FAULT_AT;  /*!< 0x24 RW fail the Nth command since reset (0 = never) */
  volatile uint32_t FLAGS;     /*!< 0x28 RW VANILLA_FLAGS_* */
  volatile uint32_t ADDR_IN_LO, ADDR_IN_HI;       /*!< 0x2C, 0x30 input */
  volatile uint32_t ADDR_W_LO, ADDR_W_HI;         /*!< 0x34, 0x38 weights */
  volatile uint32_t ADDR_BIAS_LO, ADDR_BIAS_HI;   /*!< 0x3C, 0x40 bias (0 = none) */
  volatile uint32_t ADDR_MULT_LO, ADDR_MULT_HI;   /*!< 0x44, 0x48 requant multipliers */
  volatile uint32_t ADDR_SHIFT_LO, ADDR_SHIFT_HI; /*!< 0x4C, 0x50 requant shifts */
  volatile uint32_t ADDR_OUT_LO, ADDR_OUT_HI;     /*!< 0x54, 0x58 output */
  volatile uint32_t SIZE_IN;    /*!< 0x5C bytes of each buffer; 0 for a buffer the */
  volatile uint32_t SIZE_W;     /*!< 0x60 command does not use (and for no bias) */
  volatile uint32_t SIZE_BIAS;  /*!< 0x64 */
  volatile uint32_t SIZE_MULT;  /*!< 0x68 */
  volatile uint32_t SIZE_SHIFT; /*!< 0x6C */
  volatile uint32_t SIZE_OUT;   /*!< 0x70 */
  volatile uint32_t IN_C;       /*!< 0x74 conv in_c; dense in_depth */
  volatile uint32_t IN_H;       /*!< 0x78 */
  volatile uint32_t IN_W;       /*!< 0x7C */
  volatile uint32_t OUT_C;      /*!< 0x80 conv out_c; dense units */
  volatile uint32_t OUT_H;      /*!< 0x84 */
  volatile uint32_t OUT_W;      /*!< 0x88 */
  volatile uint32_t K_H;        /*!< 0x8C */
  volatile uint32_t K_W;        /*!< 0x90 */
  volatile uint32_t STRIDE_H;   /*!< 0x94 */
  volatile uint32_t STRIDE_W;   /*!< 0x98 */
  volatile uint32_t PAD_TOP;    /*!< 0x9C */
  volatile uint32_t PAD_LEFT;   /*!< 0xA0 */
  volatile uint32_t DIL_H;      /*!< 0xA4 */
  volatile uint32_t DIL_W;      /*!< 0xA8 */
  volatile uint32_t BATCHES;    /*!< 0xAC dense batches */
  volatile uint32_t IN_ZP;      /*!< 0xB0 int8: input zero point (signed) */
  volatile uint32_t OUT_ZP;     /*!< 0xB4 int8: output zero point (signed) */
  volatile uint32_t ACT_MIN;    /*!< 0xB8 int8: output clamp (signed) */
  volatile uint32_t ACT_MAX;    /*!< 0xBC */
  volatile uint32_t CMD_SEQ;    /*!< 0xC0 R commands started since reset (FAULT_AT counts these) */
  volatile uint32_t CNT_COMMANDS;                     /*!< 0xC4 R commands completed */
  volatile uint32_t CNT_ERRORS;                       /*!< 0xC8 R commands that failed */
  volatile uint32_t CNT_MACS_LO, CNT_MACS_HI;         /*!< 0xCC, 0xD0 R */
  volatile uint32_t CNT_BYTES_IN_LO, CNT_BYTES_IN_HI; /*!< 0xD4, 0xD8 R */
  volatile uint32_t CNT_BYTES_OUT_LO, CNT_BYTES_OUT_HI; /*!< 0xDC, 0xE0 R */
} vanilla_regs_t;

/*! \brief Bytes of the register block (checked against the struct at compile time). */
#define VANILLA_REGS_BYTES 0xE4u

/*! \brief The device instance ("MMIO"). */
extern vanilla_regs_t vanilla_mmio;
#define VANILLA (&vanilla_mmio)

/*! \brief One clock of the device: picks up START, counts down, completes or fails. */
void vanilla_device_clock(void);

/*! \brief Power-on state: registers and counters cleared, FAULT_AT = VANILLA_FAULT_AT. */
void vanilla_device_reset(void);

#ifdef __cplusplus
}
#endif

#endif /* VANILLA_DEVICE_H_ */
