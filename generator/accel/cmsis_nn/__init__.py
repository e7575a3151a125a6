"""`cmsis-nn`: int8 operators through Arm's CMSIS-NN kernels, built from a CMSIS-NN source
tree the user names (`--target-cmsis-nn-path`, or `CMSIS_NN_PATH`; generate's `--cmsis-nn`).

The driver (driver/mtvg_cmsis_nn.c) fills CMSIS-NN's parameter structs and calls
arm_convolve_wrapper_s8, arm_depthwise_conv_wrapper_s8, arm_fully_connected_s8,
arm_avgpool_s8, arm_max_pool_s8, arm_elementwise_add_s8 and arm_softmax_s8. CMSIS-NN picks
its DSP or MVE code paths from the compiler's target (-mcpu), so the same plugin serves
every Cortex-M; on the host it builds CMSIS-NN's portable C.
"""

from __future__ import annotations

from math import prod
from pathlib import Path

import numpy as np

from generator import abi
from generator.accel import (
    Accelerator,
    Driver,
    ExternalSources,
    Lowering,
    Match,
    Option,
    Param,
    Pattern,
    extern_kernel,
    int8_op,
)
from generator.accel.tir import pair, with_check
from generator.accel.vanilla import valid_taps
from generator.errors import ProjectError
from generator.project.cmsis_nn_sources import needed_sources

DRIVER_DIR = Path(__file__).resolve().parent / "driver"
PATH_ENV = "CMSIS_NN_PATH"
MARKER = Path("Include") / "arm_nnfunctions.h"
SCRATCH_SLACK = 64
# The driver's limits, from its header (driver/mtvg_cmsis_nn.h says why each is what it is).
DRIVER_HEADER = DRIVER_DIR / "mtvg_cmsis_nn.h"
MAX_DIM = abi.header_constant(DRIVER_HEADER, "MTVG_CMSIS_NN_MAX_DIM")
MAX_SOFTMAX_ROW = abi.header_constant(DRIVER_HEADER, "MTVG_CMSIS_NN_MAX_SOFTMAX_ROW")
# left shift + input shift + 1 + output shift
MAX_ADD_SHIFT_BITS = abi.header_constant(DRIVER_HEADER, "MTVG_CMSIS_NN_MAX_ADD_SCALE_BITS")
# CMSIS-NN's MVE depthwise kernel may read up to 3 elements past the weights, bias,
# multiplier and shift arrays: they get this many zero elements at the end.
DEPTHWISE_OVERREAD = 4
MVE_DEPTHWISE_CHANNEL_BLOCK = 128  # more than CMSIS-NN's CH_IN_BLOCK_MVE


def _align(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def conv_scratch(col: int) -> int:
    """At least what arm_convolve_wrapper_s8_get_buffer_size asks for a column of `col`
    int8 values on any core (DSP: two int16 columns; MVE: four padded columns)."""
    return 4 * _align(col, 16) + SCRATCH_SLACK


class CmsisNN(Accelerator):
    name = "cmsis-nn"
    description = "int8 operators through Arm CMSIS-NN (a source tree you name)"
    options = (
        Option("path", "path", None, "the CMSIS-NN source tree (Include/, Source/)",
               env=PATH_ENV),
        Option("core", "str", "any", "the core's SIMD: dsp (Cortex-M4/M7/M33) leaves to our "
               "kernels the layers CMSIS-NN runs in portable C there; export --board sets it",
               choices=("any", "dsp", "mve")),
    )
    # CMSIS-NN's SIMD (DSP, MVE) kernels beat our generic C there: benchmarks/accelerators.py
    default_on = ("dsp", "mve")

    def ready(self, options):
        raw = options.get("path")
        if not raw or not (Path(raw).expanduser() / MARKER).is_file():
            return f"set {PATH_ENV} (or --target-cmsis-nn-path) to a CMSIS-NN source tree"
        return None

    def board_options(self, board):
        if "mve" in board.features:
            return {"core": "mve"}
        return {"core": "dsp"} if "dsp" in board.features else {}

    def patterns(self, options):
        from tvm.relax import dpl

        x = dpl.wildcard()
        pool = dpl.is_op("relax.nn.max_pool2d")(x)

        def check_depthwise(m: Match) -> str | None:
            return self._check_conv(m) or (
                self._portable_depthwise(m) if options.get("core") == "dsp" else None)

        return [
            with_check(int8_op("conv2d"), self._check_conv),
            with_check(int8_op("depthwise_conv2d"), check_depthwise),
            int8_op("dense"),
            int8_op("avg_pool2d"),
            with_check(int8_op("add"), self._check_add),
            with_check(int8_op("softmax"), self._check_softmax),
            Pattern("max_pool2d", pool, {"x": x, "pool": pool}, ("x",),
                    check=self._check_max_pool),
        ]

    @staticmethod
    def _check_conv(m: Match) -> str | None:
        """What the driver's argument checks would refuse (projects build it with
        MTVG_CMSIS_NN_CHECK_ARGUMENTS=0, so the exporter refuses it here instead)."""
        op, p = m.op, m.op.params
        t = op.tensors
        dims = (*op.input_shapes[0], *op.output_shape, *t["weights"].shape, *p["strides"],
                *p["dilation"])
        if min(dims) < 1 or max(dims) > MAX_DIM or min(p["padding"]) < 0:
            return "a dimension outside CMSIS-NN's range"
        if not all(-128 <= v <= 127 for v in (p["input_zero_point"], p["output_zero_point"],
                                               p["act_min"], p["act_max"])) \
                or p["act_min"] > p["act_max"]:
            return "a zero point or activation range outside int8"
        if (t["multiplier"] < 0).any() or (t["shift"] < -31).any() or (t["shift"] > 30).any():
            return "a requantization multiplier or shift CMSIS-NN cannot take"
        if op.kind == "depthwise_conv2d" and op.output_shape[3] % op.input_shapes[0][3]:
            return "depthwise output channels not a multiple of the input channels"
        return None

    @staticmethod
    def _portable_depthwise(m: Match) -> str | None:
        """On a DSP core CMSIS-NN v7 runs a depthwise convolution with a channel multiplier
        above 1 in its portable C kernel (arm_depthwise_conv_s8), which our kernel beats
        (micro_speech's 10x8 first layer on the M4: docs/accelerators.md)."""
        op = m.op
        if op.output_shape[3] != op.input_shapes[0][3]:
            return "a channel multiplier above 1: CMSIS-NN's kernel for it is portable C " \
                   "on DSP cores, ours is faster"
        return None

    @staticmethod
    def _check_add(m: Match) -> str | None:
        a, b = m.op.input_shapes
        p = m.op.params
        if tuple(a) != tuple(b) or tuple(a) != tuple(m.op.output_shape):
            return "broadcasting add (arm_elementwise_add_s8 takes equal shapes)"
        if p["left_shift"] + max(*p["shifts"], 0) + 1 + max(p["output_shift"], 0) > \
                MAX_ADD_SHIFT_BITS:
            return "add shifts that would overflow int32 in CMSIS-NN"
        return None

    @staticmethod
    def _check_softmax(m: Match) -> str | None:
        if m.op.input_shapes[0][-1] > MAX_SOFTMAX_ROW:
            return (f"softmax rows over {MAX_SOFTMAX_ROW} elements (the sum's rounding shift "
                    "reaches 31 bits in CMSIS-NN's divide)")
        return None

    @staticmethod
    def _check_max_pool(m: Match) -> str | None:
        a = m.attrs("pool")
        if m.input_dtypes[0] != "int8" or str(a.layout) != "NHWC" or a.ceil_mode \
                or any(int(d) != 1 for d in a.dilation) or m.input_shapes[0][0] != 1:
            return "max pool that is not int8 NHWC batch 1 without dilation"
        return None

    def lower(self, m: Match, options) -> Lowering:
        if m.op is None:
            return self._max_pool(m)
        op = m.op
        kind = op.kind
        p = op.params
        if kind in ("conv2d", "depthwise_conv2d"):
            return self._conv(m, depthwise=kind == "depthwise_conv2d")
        if kind == "dense":
            t = op.tensors
            batches, k = op.input_shapes[0]
            units = op.output_shape[1]
            sums = dense_kernel_sums(t["weights"], t["bias"], p["input_zero_point"])
            params = _int8_params(op)
            params.insert(5, Param("kernel_sums", sums.shape, "int32"))
            func = extern_kernel(self.name, "mtvg_cmsis_nn_dense_s8", params, [
                "input", "weights", "bias", "multiplier", "shift", "kernel_sums", "output",
                batches, k, units, p["input_zero_point"], p["output_zero_point"],
                p["act_min"], p["act_max"]])
            return Lowering(func, [t["weights"], t["bias"], t["multiplier"], t["shift"], sums],
                            batches * k * units)
        if kind == "avg_pool2d":
            _, h, w, c = op.input_shapes[0]
            _, oh, ow, _ = op.output_shape
            (ph, pw), (sh, sw) = p["pool_size"], p["strides"]
            func = extern_kernel(self.name, "mtvg_cmsis_nn_avgpool_s8", _io(op), [
                "input", "output", h, w, c, oh, ow, ph, pw, sh, sw, p["padding"][0],
                p["padding"][1], p["act_min"], p["act_max"]])
            return Lowering(func, [], 0, 4 * c + SCRATCH_SLACK)
        if kind == "add":
            size = prod(op.output_shape)
            za, zb = p["input_zero_points"]
            params = [Param("a", op.input_shapes[0], "int8"),
                      Param("b", op.input_shapes[1], "int8"),
                      Param("output", op.output_shape, "int8")]
            func = extern_kernel(self.name, "mtvg_cmsis_nn_add_s8", params, [
                "a", "b", "output", size, -za, p["multipliers"][0], p["shifts"][0], -zb,
                p["multipliers"][1], p["shifts"][1], p["left_shift"], p["output_zero_point"],
                p["output_multiplier"], p["output_shift"], p["act_min"], p["act_max"]])
            return Lowering(func)
        if kind == "softmax":
            shape = op.input_shapes[0]
            func = extern_kernel(self.name, "mtvg_cmsis_nn_softmax_s8", _io(op), [
                "input", "output", prod(shape[:-1]), shape[-1], p["multiplier"], p["shift"],
                p["diff_min"]])
            return Lowering(func)
        raise ValueError(f"no lowering for {kind}")

    def _conv(self, m: Match, depthwise: bool) -> Lowering:
        op = m.op
        t, p = op.tensors, op.params
        _, h, w, c = op.input_shapes[0]
        _, oh, ow, o = op.output_shape
        kh, kw = t["weights"].shape[:2] if depthwise else t["weights"].shape[1:3]
        (sh, sw), (dh, dw) = p["strides"], p["dilation"]
        pt, pl = p["padding"][0], p["padding"][1]
        symbol = "mtvg_cmsis_nn_depthwise_conv2d_s8" if depthwise else "mtvg_cmsis_nn_conv2d_s8"
        consts = [t["weights"], t["bias"], t["multiplier"], t["shift"]]
        if depthwise:
            consts = [np.concatenate([c.reshape(-1), np.zeros(DEPTHWISE_OVERREAD, c.dtype)])
                      for c in consts]
        params = [Param("input", op.input_shapes[0], "int8"),
                  *(Param(n, c.shape, str(c.dtype)) for n, c in
                    zip(("weights", "bias", "multiplier", "shift"), consts, strict=True)),
                  Param("output", op.output_shape, "int8")]
        func = extern_kernel(self.name, symbol, params, [
            "input", "weights", "bias", "multiplier", "shift", "output", h, w, c, oh, ow, o,
            kh, kw, sh, sw, pt, pl, dh, dw, p["input_zero_point"], p["output_zero_point"],
            p["act_min"], p["act_max"]])
        taps = valid_taps(oh, h, kh, sh, pt, dh) * valid_taps(ow, w, kw, sw, pl, dw)
        if depthwise:
            macs = o * taps
            scratch = conv_scratch(kh * kw * max(c, MVE_DEPTHWISE_CHANNEL_BLOCK)) + o * kh * kw
        else:
            macs = o * c * taps
            scratch = conv_scratch(c * kh * kw)
        return Lowering(func, consts, macs, scratch)

    def _max_pool(self, m: Match) -> Lowering:
        a = m.attrs("pool")
        _, h, w, c = m.input_shapes[0]
        _, oh, ow, _ = m.output_shape
        (ph, pw), (sh, sw) = pair(a.pool_size), pair(a.strides)
        params = [Param("input", m.input_shapes[0], "int8"),
                  Param("output", m.output_shape, "int8")]
        func = extern_kernel(self.name, "mtvg_cmsis_nn_maxpool_s8", params, [
            "input", "output", h, w, c, oh, ow, ph, pw, sh, sw, int(a.padding[0]),
            int(a.padding[1]), -128, 127])
        return Lowering(func)

    def driver(self, options, board) -> Driver:
        raw = options.get("path")
        if not raw:
            raise ProjectError(f"the model calls CMSIS-NN; say where its source tree is with "
                               f"--cmsis-nn PATH (generate), --target-cmsis-nn-path (export) "
                               f"or {PATH_ENV}")
        from generator.project.libraries import cmsis_nn_root

        root = cmsis_nn_root(raw)
        return Driver(DRIVER_DIR, sources=("mtvg_cmsis_nn.c",), headers=("mtvg_cmsis_nn.h",),
                      external=(ExternalSources("cmsis-nn", root, driver_sources(root),
                                                ("Include",)),),
                      defines={"MTVG_CMSIS_NN_CHECK_ARGUMENTS": 0},
                      counters="mtvg_cmsis_nn_counters",
                      scratch_define="MTVG_CMSIS_NN_SCRATCH_BYTES")


def dense_kernel_sums(weights: np.ndarray, bias: np.ndarray, input_zero_point: int
                      ) -> np.ndarray:
    """Each unit's bias − input zero point · Σ of its weights, as int32 (wrapping like C):
    what arm_vector_sum_s8 computes for CMSIS-NN's MVE fully connected kernels."""
    sums = bias.astype(np.int64) - int(input_zero_point) * weights.astype(np.int64).sum(axis=1)
    return ((sums + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def _int8_params(op) -> list[Param]:
    t = op.tensors
    return [Param("input", op.input_shapes[0], "int8"),
            Param("weights", t["weights"].shape, "int8"),
            Param("bias", t["bias"].shape, "int32"),
            Param("multiplier", t["multiplier"].shape, "int32"),
            Param("shift", t["shift"].shape, "int32"),
            Param("output", op.output_shape, "int8")]


def _io(op) -> list[Param]:
    return [Param("input", op.input_shapes[0], "int8"),
            Param("output", op.output_shape, "int8")]




accelerator = CmsisNN


def driver_sources(root: Path) -> tuple[str, ...]:
    """The files of the CMSIS-NN tree `root` that the driver needs (project/cmsis_nn_sources.py)."""
    texts = [(DRIVER_DIR / name).read_text() for name in ("mtvg_cmsis_nn.c", "mtvg_cmsis_nn.h")]
    return tuple(needed_sources(root, texts))
