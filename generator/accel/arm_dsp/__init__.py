"""`arm-dsp`: our own int8 kernels for cores with the Arm DSP extension (Cortex-M4, M7, M33,
M55): conv2d, depthwise conv2d and dense, in C with <arm_acle.h> and the hot loops written
out in inline assembly (driver/mtvg_arm_dsp.c; driver/mtvg_arm_dsp.h is the layout spec).

Export re-lays the weights out for the kernels (layout.py): a convolution widens two
pixels' columns to 16 bits once (the input offset added in the same instruction) and runs
two pixels by two output channels per four LDRD and eight SMLAD; a depthwise convolution
reads one stream per group of four channels (biases with the input offset folded in, int16
weight pairs per tap, output stage records) and does a tap of four channels per SMLABB/SMLATT
quartet. Under the short output stage both run it inside their written-out loops. On
Helium cores (`core=mve`, which the board sets) the plugin takes depthwise layers of 16 or
more channels and 1x1 convolutions / dense layers of four or more pixels or rows, with
Helium kernels. Outputs are byte-equal with TFLite
Micro's reference kernels. The host builds the same C with portable versions of the
instructions (the tests); `export --board B` picks the plugin by default on DSP boards,
ahead of CMSIS-NN (benchmarks/cores.py measures both).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from generator import abi
from generator.accel import (
    Accelerator,
    Driver,
    Lowering,
    Match,
    Option,
    Param,
    QuantizedOp,
    extern_kernel,
    int8_op,
    with_check,
)
from generator.accel.arm_dsp import layout
from generator.accel.vanilla import valid_taps

DRIVER_DIR = Path(__file__).resolve().parent / "driver"
DRIVER_HEADER = DRIVER_DIR / "mtvg_arm_dsp.h"
MAX_DIM = abi.header_constant(DRIVER_HEADER, "MTVG_ARM_DSP_MAX_DIM")
MAX_TAPS = abi.header_constant(DRIVER_HEADER, "MTVG_ARM_DSP_MAX_TAPS")
SHIFT_RANGE = (-31, 30)
# On Helium our depthwise kernel runs whole blocks of 16 channels (benchmarks/cores.py).
HELIUM_MIN_CHANNELS = 16
# ... and 1x1 convolutions of at least four pixels (four rows by one channel per step).
HELIUM_MIN_PIXELS = 4


def conv_scratch(depth: int, out_c: int) -> int:
    """Scratch bytes of a conv2d whose kernel holds `depth` values per output (the header's
    bound: two pixels' int8 columns, their widened words and their int32 sums)."""
    return 6 * ((depth + 7) // 8 * 8) + 8 * (out_c + out_c % 2)


def depthwise_scratch(channels: int, taps: int) -> int:
    """Scratch bytes of a depthwise convolution: the pixel's sums, the tap pointers (8 bytes
    each: room for 64-bit hosts) and a padding row."""
    return 5 * ((channels + 3) // 4 * 4) + 8 * taps


class ArmDsp(Accelerator):
    name = "arm-dsp"
    description = "our int8 conv2d, depthwise and dense kernels for Arm DSP cores (SMLAD)"
    options = (
        Option("weights", "str", "int16", "conv2d weights in flash as int16 (twice the "
               "flash of int8, no widening in the inner loop) or int8; export reports the "
               "flash", choices=("int16", "int8")),
        Option("core", "str", "dsp", "mve (Cortex-M55): Helium kernels for depthwise "
               "layers and 1x1 convolutions / dense layers (CMSIS-NN's MVE kernels take the "
               "others); export --board sets it", choices=("dsp", "mve")),
    )
    default_on = ("dsp",)
    # 2: the DSP depthwise kernel takes one stream (weights, biases, output stage records)
    abi = 2

    def board_options(self, board):
        return {"core": "mve"} if "mve" in board.features else {}

    def supports(self, board) -> str | None:
        if "dsp" in board.features or board.is_native:
            return None
        return "the board's core lacks the Arm DSP extension"

    def patterns(self, options):
        if options.get("core") == "mve":
            return [with_check(int8_op("depthwise_conv2d"), self._check_helium),
                    with_check(int8_op("conv2d"), self._check_pointwise),
                    with_check(int8_op("dense"), self._check_pointwise)]
        return [with_check(int8_op("conv2d"), self._check),
                with_check(int8_op("depthwise_conv2d"), self._check),
                with_check(int8_op("dense"), self._check)]

    def _check_helium(self, m: Match) -> str | None:
        if m.op.output_shape[3] != m.op.input_shapes[0][3]:
            return "on Helium: a channel multiplier above 1 (CMSIS-NN's MVE kernels take it)"
        if m.op.output_shape[3] < HELIUM_MIN_CHANNELS:
            return (f"on Helium: fewer than {HELIUM_MIN_CHANNELS} channels (CMSIS-NN's MVE "
                    "kernel is faster there: 0.90 M against 1.22 M instructions on "
                    "mobilenet_v1_025's first depthwise layer)")
        return self._check(m)

    def _check_pointwise(self, m: Match) -> str | None:
        op = _as_conv(m.op)
        p = op.params
        if op.tensors["weights"].shape[1:3] != (1, 1) or tuple(p["strides"]) != (1, 1) \
                or any(p["padding"]):
            return "on Helium: not a 1x1 convolution of stride 1 without padding (CMSIS-NN's " \
                "MVE kernels take it)"
        pixels = op.output_shape[1] * op.output_shape[2]
        if pixels < HELIUM_MIN_PIXELS:
            return (f"on Helium: fewer than {HELIUM_MIN_PIXELS} pixels or rows (our kernel "
                    "computes four at once; CMSIS-NN's MVE kernel takes it: the autoencoder's "
                    "dense layers 0.19 M against 0.26 M instructions)")
        if pixels > MAX_DIM:
            return "more pixels than the driver takes"
        return self._check(m)

    @staticmethod
    def _check(m: Match) -> str | None:
        op = _as_conv(m.op)
        p, t = op.params, op.tensors
        dims = (*op.input_shapes[0][1:], *op.output_shape[1:], *p["strides"], *p["dilation"],
                *t["weights"].shape)
        if op.input_shapes[0][0] != 1 or min(dims) < 1 or max(dims) > MAX_DIM \
                or min(p["padding"]) < 0 or max(p["padding"]) > MAX_DIM:
            return "a dimension outside the driver's range"
        if (t["multiplier"] < 0).any() or (t["shift"] < SHIFT_RANGE[0]).any() \
                or (t["shift"] > SHIFT_RANGE[1]).any():
            return "a requantization multiplier or shift outside TFLite's range"
        if not all(-128 <= v <= 127 for v in (p["input_zero_point"], p["output_zero_point"],
                                               p["act_min"], p["act_max"])):
            return "a zero point or activation range outside int8"
        if op.kind == "depthwise_conv2d":
            if op.output_shape[3] != op.input_shapes[0][3]:
                return "a channel multiplier above 1 on more than one input channel"
            if t["weights"].size // op.output_shape[3] > MAX_TAPS:
                return f"a depthwise kernel of more than {MAX_TAPS} taps"
        elif t["weights"][0].size > MAX_DIM:
            return "a kernel of more values per output than the driver takes"
        return None

    def lower(self, m: Match, options) -> Lowering:
        op = _as_conv(m.op)
        t, p = op.tensors, op.params
        depthwise = op.kind == "depthwise_conv2d"
        _, h, w, c = op.input_shapes[0]
        _, oh, ow, o = op.output_shape
        taps = t["weights"].size // (o if depthwise else o * c)
        kh, kw = (t["weights"].shape[:2] if depthwise else t["weights"].shape[1:3])
        if kh * kw != taps:
            raise ValueError(f"weights of shape {t['weights'].shape} for {kh}x{kw} taps")
        (sh, sw), (dh, dw) = p["strides"], p["dilation"]
        pt, pl = p["padding"][0], p["padding"][1]
        bits = 16 if options.get("weights", "int16") == "int16" else 8
        helium = depthwise and options.get("core") == "mve"
        narrow = layout.narrow(t["weights"], t["bias"], t["shift"], depthwise)
        if not depthwise and options.get("core") == "mve":
            return self._lower_pointwise(m, op, narrow)
        packed, channels = _constants(op, taps, bits, helium, narrow)
        consts = [packed, *channels.values()]
        params = [Param("input", m.op.input_shapes[0], "int8"),
                  *(Param(n, v.shape, str(v.dtype)) for n, v in
                    zip(("weights", *channels), consts, strict=True)),
                  Param("output", m.op.output_shape, "int8")]
        geometry = [h, w, c, oh, ow] + ([] if depthwise else [o]) + [
            kh, kw, sh, sw, pt, pl, dh, dw, p["input_zero_point"], p["output_zero_point"],
            p["act_min"], p["act_max"]] + ([int(narrow)] if depthwise else [bits, int(narrow)])
        symbol = ("mtvg_arm_dsp_depthwise_helium_s8" if helium else
                  "mtvg_arm_dsp_depthwise_conv2d_s8" if depthwise else "mtvg_arm_dsp_conv2d_s8")
        func = extern_kernel(self.name, symbol, params, [
            *(param.name for param in params[:-1]), "output", *geometry])
        in_taps = valid_taps(oh, h, kh, sh, pt, dh) * valid_taps(ow, w, kw, sw, pl, dw)
        macs = o * in_taps * (1 if depthwise else c)
        scratch = depthwise_scratch(c, taps) if depthwise else conv_scratch(kh * kw * c, o)
        return Lowering(func, consts, macs, scratch)

    def _lower_pointwise(self, m: Match, op: QuantizedOp, narrow: bool) -> Lowering:
        """A 1x1 convolution (or dense layer) on Helium: mtvg_arm_dsp_pointwise_helium_s8."""
        t, p = op.tensors, op.params
        _, oh, ow, out_c = op.output_shape
        depth = op.input_shapes[0][3]
        rows = t["weights"].reshape(out_c, depth).astype(np.int8)
        bias = layout.fold_input_offset(rows.T, t["bias"], p["input_zero_point"], depth)
        records = np.stack([bias, t["multiplier"], t["shift"], np.full(
            out_c, p["output_zero_point"])], axis=1).astype(np.int32)
        consts = [rows, records]
        params = [Param("input", m.op.input_shapes[0], "int8"),
                  Param("weights", rows.shape, "int8"), Param("records", records.shape, "int32"),
                  Param("output", m.op.output_shape, "int8")]
        func = extern_kernel(self.name, "mtvg_arm_dsp_pointwise_helium_s8", params, [
            "input", "weights", "records", "output", oh * ow, depth, out_c,
            p["output_zero_point"], p["act_min"], p["act_max"], int(narrow)])
        return Lowering(func, consts, oh * ow * out_c * depth, 0)

    def driver(self, options, board) -> Driver:
        return Driver(DRIVER_DIR, sources=("mtvg_arm_dsp.c",), headers=("mtvg_arm_dsp.h",),
                      counters="mtvg_arm_dsp_counters",
                      scratch_define="MTVG_ARM_DSP_SCRATCH_BYTES")


def _constants(op: QuantizedOp, taps: int, bits: int, helium: bool, narrow: bool
               ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The kernel's weights as the driver reads them, and its per-channel arrays (bias,
    multiplier, shift, the short output stage's records) padded, folded and ordered as
    mtvg_arm_dsp.h says (none for the DSP depthwise kernel: its stream holds them)."""
    t, p = op.tensors, op.params
    depthwise = op.kind == "depthwise_conv2d"
    count = op.output_shape[3] + (0 if depthwise else op.output_shape[3] % 2)
    bias = t["bias"]
    if depthwise:
        bias = layout.fold_input_offset(t["weights"], bias, p["input_zero_point"], taps)
        if not helium:
            return layout.depthwise_stream(t["weights"], bias, t["multiplier"], t["shift"],
                                           p["output_zero_point"], narrow), {}
        packed = t["weights"].reshape(taps, -1).astype(np.int8)
    else:
        packed = layout.conv_weights(t["weights"], bits)
    channels = {"bias": bias, "multiplier": t["multiplier"], "shift": t["shift"]}
    channels = {n: layout.pad_channels(v, count).astype(np.int32) for n, v in channels.items()}
    channels["narrow_params"] = layout.narrow_params(
        channels["multiplier"], channels["shift"], p["output_zero_point"], narrow)
    if helium:
        order = layout.helium_order(count)
        channels = {n: v[order] for n, v in channels.items()}
    return packed, channels


def _as_conv(op: QuantizedOp) -> QuantizedOp:
    """A dense layer as the 1x1 convolution it is (its batch rows as the pixels of one
    row), and a depthwise convolution of one input channel as the convolution it is (its
    channel multiplier the output channels): the driver's conv2d runs them."""
    if op.kind == "depthwise_conv2d" and op.input_shapes[0][3] == 1 \
            and op.output_shape[3] > 1:
        weights = op.tensors["weights"]
        kh, kw = weights.shape[:2]
        return QuantizedOp("conv2d", op.input_shapes, op.output_shape, op.params, {
            **op.tensors, "weights": weights.reshape(kh, kw, -1).transpose(2, 0, 1)[..., None]})
    if op.kind != "dense":
        return op
    batches, depth = op.input_shapes[0]
    units = op.output_shape[1]
    weights = op.tensors["weights"]
    return QuantizedOp(
        "conv2d", ((1, 1, batches, depth),), (1, 1, batches, units),
        {**op.params, "strides": (1, 1), "dilation": (1, 1), "padding": (0, 0, 0, 0)},
        {**op.tensors, "weights": weights.reshape(units, 1, 1, depth)})


accelerator = ArmDsp
