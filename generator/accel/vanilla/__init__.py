"""`vanilla`: a mock NPU. Its device is a C model of a memory-mapped accelerator that runs
in the firmware (driver/README.md has the register map); it really computes, and counts
commands, multiply-accumulates and bytes moved.

It takes float32 conv2d (NCHW, with or without bias and ReLU) and int8 conv2d and dense.
"""

from __future__ import annotations

from pathlib import Path

from generator import abi
from generator.accel import (
    Accelerator,
    Driver,
    Lowering,
    Match,
    Option,
    Param,
    Pattern,
    extern_kernel,
    int8_op,
)
from generator.accel.tir import pair, with_check

DRIVER_DIR = Path(__file__).resolve().parent / "driver"
# The limits the device checks, from its header (driver/README.md describes them).
DEVICE_HEADER = DRIVER_DIR / "vanilla_device.h"
MAX_KERNEL = abi.header_constant(DEVICE_HEADER, "VANILLA_MAX_KERNEL")  # kernel side
MAX_CHANNELS = abi.header_constant(DEVICE_HEADER, "VANILLA_MAX_CHANNELS")  # in or out
MAX_SPATIAL = abi.header_constant(DEVICE_HEADER, "VANILLA_MAX_DIM")  # in or out height / width
# Strides and dilations are checked together, against the smaller limit.
MAX_STRIDE = min(abi.header_constant(DEVICE_HEADER, "VANILLA_MAX_STRIDE"),
                 abi.header_constant(DEVICE_HEADER, "VANILLA_MAX_DILATION"))
MAX_PAD = abi.header_constant(DEVICE_HEADER, "VANILLA_MAX_PAD")
MAX_DENSE_WIDTH = min(abi.header_constant(DEVICE_HEADER, "VANILLA_MAX_DENSE_DEPTH"),
                      abi.header_constant(DEVICE_HEADER, "VANILLA_MAX_DENSE_UNITS"))
MAX_BATCHES = abi.header_constant(DEVICE_HEADER, "VANILLA_MAX_BATCHES")


def _geometry_reason(sizes: tuple[int, ...], strides: tuple[int, ...],
                     pads: tuple[int, ...]) -> str | None:
    if max(sizes) > MAX_SPATIAL or max(strides) > MAX_STRIDE or max(pads) > MAX_PAD:
        return (f"sizes {sizes}, strides/dilations {strides} or padding {pads} beyond the "
                "device's limits")
    return None


def valid_taps(out: int, size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """Sum over output positions of the kernel taps that fall inside the input (one axis)."""
    return sum(1 for o in range(out) for k in range(kernel)
               if 0 <= o * stride - pad + k * dilation < size)


class Vanilla(Accelerator):
    name = "vanilla"
    description = "mock NPU: a C model of a memory-mapped device (conv2d f32/int8, dense int8)"
    options = (
        Option("fault_at", "int", 0, "make the device's Nth command fail (0: never); "
                                     "for testing error paths"),
    )

    def configure(self, options):
        if options["fault_at"] < 0:
            from generator.errors import ExportError

            raise ExportError("--target-vanilla-fault-at must be 0 or more")

    def patterns(self, options):
        from tvm.relax import dpl

        data, weight, bias = dpl.wildcard(), dpl.is_const(), dpl.is_const()
        conv = dpl.is_op("relax.nn.conv2d")(data, weight)
        biased = dpl.is_op("relax.add")(conv, bias)
        parts = {"data": data, "weight": weight, "conv": conv}
        with_bias = {**parts, "bias": bias, "add": biased}
        return [
            Pattern("conv2d_bias_relu", dpl.is_op("relax.nn.relu")(biased), with_bias,
                    ("data",), check=self._check_float_conv),
            Pattern("conv2d_bias", biased, with_bias, ("data",), check=self._check_float_conv),
            Pattern("conv2d", conv, parts, ("data",), check=self._check_float_conv),
            with_check(int8_op("conv2d"), self._check_int8_conv),
            with_check(int8_op("dense"), self._check_int8_dense),
        ]

    # ---- checks: what the device cannot do is refused, and stays on the CPU --------------

    @staticmethod
    def _check_float_conv(m: Match) -> str | None:
        a = m.attrs("conv")
        if m.input_dtypes[0] != "float32" or m.output_dtype != "float32":
            return "not float32"
        if str(a.data_layout) != "NCHW" or str(a.kernel_layout) != "OIHW" \
                or str(a.out_layout or "NCHW") != "NCHW":
            return f"layout {a.data_layout}/{a.kernel_layout} (the device takes NCHW/OIHW)"
        if int(a.groups) != 1:
            return "grouped convolution"
        n, c, _, _ = m.input_shapes[0]
        o, _, kh, kw = m.constants["weight"].shape
        if n != 1:
            return "batch other than 1"
        if max(kh, kw) > MAX_KERNEL or max(c, o) > MAX_CHANNELS:
            return f"kernel {kh}x{kw} or {c}->{o} channels beyond the device's limits"
        if "bias" in m.constants and m.constants["bias"].size != o:
            return "bias is not one value per output channel"
        return _geometry_reason((*m.input_shapes[0][2:], *m.output_shape[2:]),
                                (*pair(a.strides), *pair(a.dilation)),
                                tuple(int(p) for p in a.padding))

    @staticmethod
    def _check_int8_conv(m: Match) -> str | None:
        op = m.op
        _, h, w, c = op.input_shapes[0]
        o, kh, kw, _ = op.tensors["weights"].shape
        if op.input_shapes[0][0] != 1:
            return "batch other than 1"
        if max(kh, kw) > MAX_KERNEL or max(c, o) > MAX_CHANNELS:
            return f"kernel {kh}x{kw} or {c}->{o} channels beyond the device's limits"
        p = op.params
        return _geometry_reason((h, w, *op.output_shape[1:3]), (*p["strides"], *p["dilation"]),
                                tuple(p["padding"]))

    @staticmethod
    def _check_int8_dense(m: Match) -> str | None:
        batches, k = m.op.input_shapes[0]
        units = m.op.output_shape[1]
        if max(k, units) > MAX_DENSE_WIDTH or batches > MAX_BATCHES:
            return (f"dense wider than {MAX_DENSE_WIDTH} or more than {MAX_BATCHES} batches "
                    "(the device's limits)")
        return None

    # ---- lowering: a PrimFunc that programs the device through the driver ---------------

    def lower(self, m: Match, options) -> Lowering:
        if m.op is not None:
            return self._lower_int8(m)
        a = m.attrs("conv")
        weights = m.constants["weight"]
        o, c, kh, kw = weights.shape
        _, _, h, w = m.input_shapes[0]
        _, _, oh, ow = m.output_shape
        bias = m.constants.get("bias")
        bias = (bias.reshape(o) if bias is not None else weights[:, 0, 0, 0] * 0).astype(
            "float32")
        (sh, sw), (dh, dw) = pair(a.strides), pair(a.dilation)
        pt, pl = int(a.padding[0]), int(a.padding[1])
        relu = 1 if m.pattern == "conv2d_bias_relu" else 0
        params = [Param("input", m.input_shapes[0], "float32"),
                  Param("weights", weights.shape, "float32"), Param("bias", (o,), "float32"),
                  Param("output", m.output_shape, "float32")]
        func = extern_kernel(self.name, "vanilla_conv2d_f32", params, [
            "input", "weights", "bias", "output", c, h, w, o, oh, ow, kh, kw, sh, sw, pt, pl,
            dh, dw, relu])
        macs = o * c * valid_taps(oh, h, kh, sh, pt, dh) * valid_taps(ow, w, kw, sw, pl, dw)
        return Lowering(func, [weights.astype("float32"), bias], macs)

    def _lower_int8(self, m: Match) -> Lowering:
        op = m.op
        t, p = op.tensors, op.params
        consts = [t["weights"], t["bias"], t["multiplier"], t["shift"]]
        params = [Param("input", op.input_shapes[0], "int8"),
                  Param("weights", t["weights"].shape, "int8"),
                  Param("bias", t["bias"].shape, "int32"),
                  Param("multiplier", t["multiplier"].shape, "int32"),
                  Param("shift", t["shift"].shape, "int32"),
                  Param("output", op.output_shape, "int8")]
        tail = [p["input_zero_point"], p["output_zero_point"], p["act_min"], p["act_max"]]
        if op.kind == "dense":
            batches, k = op.input_shapes[0]
            units = op.output_shape[1]
            func = extern_kernel(self.name, "vanilla_dense_s8", params, [
                "input", "weights", "bias", "multiplier", "shift", "output", batches, k, units,
                *tail])
            return Lowering(func, consts, batches * k * units)
        _, h, w, c = op.input_shapes[0]
        _, oh, ow, o = op.output_shape
        _, kh, kw, _ = t["weights"].shape
        (sh, sw), (dh, dw) = p["strides"], p["dilation"]
        pt, pl = p["padding"][0], p["padding"][1]
        func = extern_kernel(self.name, "vanilla_conv2d_s8", params, [
            "input", "weights", "bias", "multiplier", "shift", "output", h, w, c, oh, ow, o,
            kh, kw, sh, sw, pt, pl, dh, dw, *tail])
        macs = o * c * valid_taps(oh, h, kh, sh, pt, dh) * valid_taps(ow, w, kw, sw, pl, dw)
        return Lowering(func, consts, macs)

    def driver(self, options, board) -> Driver:
        defines = {"VANILLA_FAULT_AT": options["fault_at"]} if options["fault_at"] else {}
        return Driver(DRIVER_DIR, sources=("vanilla_driver.c", "vanilla_device.c"),
                      headers=("vanilla.h", "vanilla_device.h"), defines=defines,
                      counters="vanilla_counters")




accelerator = Vanilla
