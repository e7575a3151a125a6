"""The vanilla mock NPU (generator/accel/vanilla/driver): device model and driver in C,
built with the host gcc under ASan/UBSan around tests/c/vanilla_harness.c, checked against
numpy references (TFLite's integer arithmetic in int64, float32 conv in float64 and in the
documented float32 order); error paths end in the exact message mtvg_accel_message()
reports; random parameter registers stay inside the buffers; counters; the same cases on
Cortex-M3, Cortex-M4F and RV32 in QEMU; every driver file compiles with arm-none-eabi-gcc
-Werror; the register map of README.md is the header's."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from generator.boards import load_board
from generator.device.links import qemu_argv
from generator.export.fixedpoint import (
    PyArith,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
)
from tests.conftest import REPO, port_folder, require_board_tools

DRIVER = REPO / "generator" / "accel" / "vanilla" / "driver"
COMMON = REPO / "templates" / "common"
HARNESS = REPO / "tests" / "c" / "vanilla_harness.c"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-g"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer"]
DRIVER_SOURCES = sorted(DRIVER.glob("*.c"))
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

# register byte offsets (README.md) the tests poke or read
REG = {"CMD": 0x04, "STATUS": 0x0C, "FAULT_AT": 0x24, "SIZE_W": 0x60, "SIZE_MULT": 0x68}
STATUS_DONE, STATUS_BUSY, STATUS_ERROR = 1, 2, 4
OP_F32, OP_S8, OP_DENSE, RAW = 1, 2, 3, 0x100
SENTINEL = 0x5A


# ---- building and running the harness ---------------------------------------------------

def build_harness(out: Path, *defines: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    sources = [HARNESS, *DRIVER_SOURCES, COMMON / "src" / "accel.c"]
    subprocess.run(["gcc", *STRICT, *SANITIZE, *(f"-D{d}" for d in defines),
                    "-I", str(DRIVER), "-I", str(COMMON / "include"),
                    *map(str, sources), "-o", str(out)], check=True)
    return out


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    return build_harness(tmp_path_factory.mktemp("vanilla") / "harness")


@dataclass
class Buf:
    """A pointer argument: data bytes (None = NULL), or an alias of an earlier buffer."""
    data: bytes | None
    offset: int = 0
    alias_of: int | None = None


@dataclass
class Call:
    op: int
    params: list[int]
    bufs: list[Buf]
    overrides: list[tuple[int, int]] = field(default_factory=list)

    def encode(self) -> bytes:
        out = struct.pack("<ii", self.op, len(self.params))
        out += struct.pack(f"<{len(self.params)}i", *self.params)
        out += struct.pack("<i", len(self.bufs))
        for b in self.bufs:
            if b.alias_of is not None:
                out += struct.pack("<iii", 2, b.alias_of, b.offset)
            elif b.data is None:
                out += struct.pack("<iii", 0, 0, 0)
            else:
                out += struct.pack("<iii", 1, len(b.data), b.offset) + b.data
        out += struct.pack("<i", len(self.overrides))
        for offset, value in self.overrides:
            out += struct.pack("<ii", offset, value)
        return out


@dataclass
class Result:
    status: int
    message: str
    output: bytes
    regs: dict[str, int]


def run(harness: Path, calls: list[Call], tmp_path: Path) -> tuple[list[Result], dict]:
    cases, out = tmp_path / "cases.bin", tmp_path / "out.bin"
    cases.write_bytes(b"".join(c.encode() for c in calls))
    proc = subprocess.run([str(harness), str(cases), str(out)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return parse_output(out, calls)


def parse_output(out: Path, calls: list[Call]) -> tuple[list[Result], dict]:
    data, at = out.read_bytes(), 0

    def take(n: int) -> bytes:
        nonlocal at
        at += n
        return data[at - n:at]

    results = []
    for _ in calls:
        status, length = struct.unpack("<ii", take(8))
        message = take(length).decode()
        (out_len,) = struct.unpack("<i", take(4))
        output = take(out_len)
        names = ["STATUS", "ERR_REG", "ERR_INDEX", "ERR_VALUE", "ERR_LO", "ERR_HI", "CMD_SEQ",
                 "CNT_ERRORS"]
        regs = dict(zip(names, struct.unpack("<8I", take(32)), strict=True))
        results.append(Result(status, message, output, regs))
    (count,) = struct.unpack("<i", take(4))
    counters = {}
    for _ in range(count):
        (length,) = struct.unpack("<i", take(4))
        name = take(length).decode()
        counters[name] = struct.unpack("<Q", take(8))[0]
    assert at == len(data)
    return results, counters


# ---- references -------------------------------------------------------------------------

def wrap32(x: np.ndarray) -> np.ndarray:
    return (x + (1 << 31)) % (1 << 32) - (1 << 31)


def requantize(acc: np.ndarray, mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier in int64 numpy (fixedpoint.py's steps)."""
    x = acc.astype(np.int64)
    m, s = mult.astype(np.int64), shift.astype(np.int64)
    left, right = np.maximum(s, 0), np.maximum(-s, 0)
    x = wrap32(x << left)
    ab = x * m
    t = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    high = np.where(t >= 0, t >> 31, -((-t) >> 31))  # division truncating toward zero
    high = np.where((x == INT32_MIN) & (m == INT32_MIN), INT32_MAX, high)
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + ((high & mask) > threshold)


def taps(out: int, stride: int, pad: int, dil: int, k: int, extent: int):
    """Input coordinates [out, k] of each output's taps and whether each lies inside."""
    coords = np.arange(out)[:, None] * stride - pad + np.arange(k)[None, :] * dil
    return coords, (coords >= 0) & (coords < extent)


@dataclass
class Conv:
    in_h: int
    in_w: int
    in_c: int
    out_c: int
    k_h: int
    k_w: int
    stride: tuple[int, int]
    pad: tuple[int, int]  # top, left
    dil: tuple[int, int]
    pad_end: tuple[int, int] = (0, 0)  # bottom, right (only shapes the output)
    out: tuple[int, int] | None = None  # output height and width, when not from the padding

    @property
    def out_hw(self) -> tuple[int, int]:
        if self.out is not None:
            return self.out
        h = (self.in_h + self.pad[0] + self.pad_end[0] - self.dil[0] * (self.k_h - 1) - 1) \
            // self.stride[0] + 1
        w = (self.in_w + self.pad[1] + self.pad_end[1] - self.dil[1] * (self.k_w - 1) - 1) \
            // self.stride[1] + 1
        return h, w

    def geometry(self):
        oh, ow = self.out_hw
        ys, vy = taps(oh, self.stride[0], self.pad[0], self.dil[0], self.k_h, self.in_h)
        xs, vx = taps(ow, self.stride[1], self.pad[1], self.dil[1], self.k_w, self.in_w)
        return ys, vy, xs, vx

    def macs(self) -> int:
        _, vy, _, vx = self.geometry()
        return int(vy.sum()) * int(vx.sum()) * self.in_c * self.out_c


def conv_f32_ref(g: Conv, x, w, bias, relu: bool, dtype) -> np.ndarray:
    """NCHW conv: bias, then taps in (ic, kh, kw) order, accumulated in `dtype`."""
    oh, ow = g.out_hw
    ys, vy, xs, vx = g.geometry()
    acc = np.zeros((g.out_c, oh, ow), dtype)
    if bias is not None:
        acc += bias.astype(dtype)[:, None, None]
    for ic in range(g.in_c):
        for kh in range(g.k_h):
            for kw in range(g.k_w):
                valid = vy[:, kh][:, None] & vx[:, kw][None, :]
                patch = x[ic][np.clip(ys[:, kh], 0, g.in_h - 1)][:, np.clip(xs[:, kw], 0,
                                                                              g.in_w - 1)]
                prod = w[:, ic, kh, kw].astype(dtype)[:, None, None] * patch.astype(dtype)
                acc = acc + np.where(valid[None], prod, dtype(0))
    return np.maximum(acc, dtype(0)) if relu else acc


def conv_s8_ref(g: Conv, x, w, bias, mult, shift, in_zp, out_zp, act) -> np.ndarray:
    """NHWC int8 conv with TFLite's arithmetic: int64 sums, wrapped to int32, requantized."""
    oh, ow = g.out_hw
    ys, vy, xs, vx = g.geometry()
    acc = np.zeros((oh, ow, g.out_c), np.int64)
    if bias is not None:
        acc += bias.astype(np.int64)
    xc = x.astype(np.int64) - in_zp
    for kh in range(g.k_h):
        for kw in range(g.k_w):
            valid = vy[:, kh][:, None] & vx[:, kw][None, :]
            patch = xc[np.clip(ys[:, kh], 0, g.in_h - 1)][:, np.clip(xs[:, kw], 0, g.in_w - 1)]
            patch = patch * valid[..., None]
            acc += patch @ w[:, kh, kw, :].astype(np.int64).T
    out = requantize(wrap32(acc), mult, shift) + out_zp
    return np.clip(out, *act).astype(np.int8)


def dense_ref(x, w, bias, mult, shift, in_zp, out_zp, act) -> np.ndarray:
    acc = (x.astype(np.int64) - in_zp) @ w.astype(np.int64).T
    if bias is not None:
        acc += bias.astype(np.int64)
    return np.clip(requantize(wrap32(acc), mult, shift) + out_zp, *act).astype(np.int8)


def requant_params(rng, n: int, low: float = -4.5, high: float = -1.0):
    pairs = [quantize_multiplier(float(10 ** rng.uniform(low, high))) for _ in range(n)]
    return (np.array([m for m, _ in pairs], np.int32), np.array([s for _, s in pairs], np.int32))


def buf(a: np.ndarray | None) -> Buf:
    return Buf(None if a is None else np.ascontiguousarray(a).tobytes())


def out_buf(nbytes: int) -> Buf:
    return Buf(bytes([SENTINEL]) * nbytes)


def f32_call(g: Conv, x, w, bias, relu: bool) -> Call:
    oh, ow = g.out_hw
    params = [g.in_c, g.in_h, g.in_w, g.out_c, oh, ow, g.k_h, g.k_w, *g.stride, *g.pad, *g.dil,
              int(relu)]
    return Call(OP_F32, params, [buf(x), buf(w), buf(bias), out_buf(4 * g.out_c * oh * ow)])


def s8_call(g: Conv, x, w, bias, mult, shift, in_zp, out_zp, act, op=OP_S8) -> Call:
    oh, ow = g.out_hw
    params = [g.in_h, g.in_w, g.in_c, oh, ow, g.out_c, g.k_h, g.k_w, *g.stride, *g.pad, *g.dil,
              in_zp, out_zp, *act]
    return Call(op, params, [buf(x), buf(w), buf(bias), buf(mult), buf(shift),
                             out_buf(oh * ow * g.out_c)])


def dense_call(x, w, bias, mult, shift, in_zp, out_zp, act, op=OP_DENSE) -> Call:
    batches, depth = x.shape
    params = [batches, depth, w.shape[0], in_zp, out_zp, *act]
    return Call(op, params, [buf(x), buf(w), buf(bias), buf(mult), buf(shift),
                             out_buf(batches * w.shape[0])])


def random_conv(rng) -> Conv:
    while True:
        k_h, k_w = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        g = Conv(in_h=int(rng.integers(1, 10)), in_w=int(rng.integers(1, 10)),
                 in_c=int(rng.integers(1, 9)), out_c=int(rng.integers(1, 9)), k_h=k_h, k_w=k_w,
                 stride=(int(rng.integers(1, 4)), int(rng.integers(1, 4))),
                 pad=(int(rng.integers(0, 4)), int(rng.integers(0, 4))),
                 dil=(int(rng.integers(1, 3)), int(rng.integers(1, 3))),
                 pad_end=(int(rng.integers(0, 4)), int(rng.integers(0, 4))))
        if min(g.out_hw) >= 1:
            return g


# Shapes every run covers, besides the random ones.
FIXED_CONVS = [
    Conv(8, 8, 3, 4, 3, 3, (2, 2), (1, 1), (1, 1), (1, 1)),   # 3x3 stride 2, SAME-like
    Conv(9, 7, 2, 3, 3, 3, (1, 1), (2, 2), (2, 2), (2, 2)),   # dilation 2, padded
    Conv(5, 6, 4, 5, 1, 1, (1, 1), (0, 0), (1, 1)),           # 1x1
    Conv(12, 12, 2, 2, 11, 11, (1, 1), (5, 5), (1, 1), (5, 5)),  # the largest kernel
    Conv(4, 4, 1, 2, 3, 3, (2, 1), (3, 1), (1, 2), (3, 2)),   # pads larger than the kernel
]


# ---- results ------------------------------------------------------------------------------

def test_requant_reference_matches_fixedpoint():
    """The test's vectorized requantization is fixedpoint.py's, value for value."""
    rng = np.random.default_rng(7)
    acc = np.concatenate([rng.integers(INT32_MIN, INT32_MAX, 3000, endpoint=True),
                          [INT32_MIN, INT32_MAX, 0, -1, 1, 1 << 30, -(1 << 30)] * 9])
    mult = np.concatenate([rng.integers(1 << 30, 1 << 31, 3000), [0, (1 << 31) - 1, 1 << 30] * 21])
    shift = np.concatenate([rng.integers(-31, 32, 3000), list(range(-31, 32))])
    got = requantize(acc, mult, shift)
    ar = PyArith()
    want = [multiply_by_quantized_multiplier(ar, int(a), int(m), int(s))
            for a, m, s in zip(acc, mult, shift, strict=True)]
    assert got.tolist() == want


def f32_cases(rng) -> list[tuple]:
    cases = []
    for i, g in enumerate([*FIXED_CONVS, *(random_conv(rng) for _ in range(40))]):
        x = rng.standard_normal((g.in_c, g.in_h, g.in_w)).astype(np.float32)
        w = rng.standard_normal((g.out_c, g.in_c, g.k_h, g.k_w)).astype(np.float32)
        bias = None if i % 3 == 2 else rng.standard_normal(g.out_c).astype(np.float32)
        cases.append((g, x, w, bias, i % 2 == 1))
    return cases


def check_f32(cases: list[tuple], results: list[Result]) -> None:
    for (g, x, w, bias, relu), r in zip(cases, results, strict=True):
        assert (r.status, r.message, r.regs["STATUS"]) == (0, "", STATUS_DONE), g
        got = np.frombuffer(r.output, np.float32).reshape(g.out_c, *g.out_hw)
        exact = conv_f32_ref(g, x, w, bias, relu, np.float32)
        np.testing.assert_array_equal(got, exact, err_msg=str(g))  # the documented order
        want = conv_f32_ref(g, x, w, bias, relu, np.float64)
        scale = conv_f32_ref(g, np.abs(x), np.abs(w), None if bias is None else np.abs(bias),
                             False, np.float64)
        assert np.all(np.abs(got - want) <= 1e-5 * np.maximum(scale, 1e-30)), g
        if relu:
            assert got.min() >= 0


def test_conv2d_f32_matches_numpy(harness, tmp_path):
    cases = f32_cases(np.random.default_rng(1))
    results, counters = run(harness, [f32_call(*c) for c in cases], tmp_path)
    check_f32(cases, results)
    assert counters["commands"] == len(cases)
    assert counters["macs"] == sum(c[0].macs() for c in cases)
    assert counters["bytes_in"] == sum(x.nbytes + w.nbytes + (0 if bias is None else bias.nbytes)
                                       for _, x, w, bias, _ in cases)
    assert counters["bytes_out"] == sum(4 * g.out_c * g.out_hw[0] * g.out_hw[1]
                                        for g, *_ in cases)


ACT_RANGES = [(-128, 127), (-128, 127), (-20, 127), (-100, 50), (0, 0)]


def s8_cases(rng) -> list[tuple]:
    cases = []
    for i, g in enumerate([*FIXED_CONVS, *(random_conv(rng) for _ in range(60))]):
        x = rng.integers(-128, 128, (g.in_h, g.in_w, g.in_c)).astype(np.int8)
        w = rng.integers(-128, 128, (g.out_c, g.k_h, g.k_w, g.in_c)).astype(np.int8)
        bias = None if i % 4 == 3 else rng.integers(-20000, 20000, g.out_c).astype(np.int32)
        if i % 2:  # per channel
            mult, shift = requant_params(rng, g.out_c)
        else:  # per tensor: one value repeated
            m, s = requant_params(rng, 1)
            mult, shift = np.repeat(m, g.out_c), np.repeat(s, g.out_c)
        in_zp, out_zp = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
        act = ACT_RANGES[i % len(ACT_RANGES)]
        cases.append((g, x, w, bias, mult, shift, in_zp, out_zp, act))
    return cases


def check_s8(cases: list[tuple], results: list[Result]) -> None:
    spread = 0
    for c, r in zip(cases, results, strict=True):
        g = c[0]
        assert (r.status, r.message) == (0, ""), g
        got = np.frombuffer(r.output, np.int8).reshape(*g.out_hw, g.out_c)
        want = conv_s8_ref(*c)
        np.testing.assert_array_equal(got, want, err_msg=str(g))
        spread += len(np.unique(want))
    assert spread > 10 * len(cases)  # the outputs are not all clamped to one value


def test_conv2d_s8_matches_tflite_arithmetic(harness, tmp_path):
    cases = s8_cases(np.random.default_rng(2))
    results, counters = run(harness, [s8_call(*c) for c in cases], tmp_path)
    check_s8(cases, results)
    assert counters["commands"] == len(cases)
    assert counters["macs"] == sum(c[0].macs() for c in cases)
    assert counters["bytes_in"] == sum(
        c[1].nbytes + c[2].nbytes + (0 if c[3] is None else c[3].nbytes) + 8 * c[0].out_c
        for c in cases)
    assert counters["bytes_out"] == sum(len(r.output) for r in results)


def dense_cases(rng) -> list[tuple]:
    """Random dense layers, then extremes: every shift in [-31, 31], the largest multipliers,
    biases that overflow the int32 accumulator when shifted left."""
    cases = []
    for i in range(30):
        batches, depth, units = (int(v) for v in rng.integers(1, [4, 300, 40]))
        x = rng.integers(-128, 128, (batches, depth)).astype(np.int8)
        w = rng.integers(-128, 128, (units, depth)).astype(np.int8)
        bias = None if i % 5 == 4 else rng.integers(-50000, 50000, units).astype(np.int32)
        mult, shift = requant_params(rng, units)
        cases.append((x, w, bias, mult, shift, int(rng.integers(-128, 128)),
                      int(rng.integers(-128, 128)), ACT_RANGES[i % len(ACT_RANGES)]))
    units = 63
    x = rng.integers(-128, 128, (2, 5)).astype(np.int8)
    w = rng.integers(-128, 128, (units, 5)).astype(np.int8)
    bias = rng.integers(INT32_MIN, INT32_MAX, units, endpoint=True).astype(np.int32)
    shift = np.arange(-31, 32, dtype=np.int32)
    mult = rng.integers(0, 1 << 31, units).astype(np.int32)
    mult[:4] = [0, INT32_MAX, 1 << 30, 1]
    cases.append((x, w, bias, mult, shift, 0, 0, (-128, 127)))
    return cases


def check_dense(cases: list[tuple], results: list[Result]) -> None:
    for c, r in zip(cases, results, strict=True):
        assert (r.status, r.message) == (0, "")
        got = np.frombuffer(r.output, np.int8).reshape(c[0].shape[0], c[1].shape[0])
        np.testing.assert_array_equal(got, dense_ref(*c))


def test_dense_s8_matches_tflite_arithmetic(harness, tmp_path):
    cases = dense_cases(np.random.default_rng(3))
    results, counters = run(harness, [dense_call(*c) for c in cases], tmp_path)
    check_dense(cases, results)
    assert counters["commands"] == len(cases)
    assert counters["macs"] == sum(c[0].shape[0] * c[1].size for c in cases)
    assert counters["bytes_out"] == sum(len(r.output) for r in results)


def rounding_case(rng) -> tuple:
    """Accumulators chosen one by one (a dense layer of depth 1 whose bias is the sum):
    every tie of both roundings for small values, left shifts, and random multipliers with
    outputs inside int8, so each rounding step shows in the result."""
    accs, mults, shifts = [], [], []
    for shift in range(-6, 1):  # multiplier 2**30: srdhm halves, so odd sums are ties
        accs += range(-300, 301)
        mults += [1 << 30] * 601
        shifts += [shift] * 601
    for shift in range(1, 4):
        accs += range(-60, 61)
        mults += [1 << 30] * 121
        shifts += [shift] * 121
    for _ in range(4000):
        m, s = int(rng.integers(1 << 30, 1 << 31)), int(rng.integers(-14, 1))
        target = rng.uniform(-127, 127) * 2.0 ** (31 - s) / m
        accs.append(int(target) + int(rng.integers(-3, 4)))
        mults.append(m)
        shifts.append(s)
    units = len(accs)
    acc = np.array(accs, np.int64)
    case = (np.ones((1, 1), np.int8), np.ones((units, 1), np.int8), (acc - 1).astype(np.int32),
            np.array(mults, np.int32), np.array(shifts, np.int32), 0, 0, (-128, 127))
    want = dense_ref(*case)
    assert want[0].tolist() == np.clip(requantize(acc, case[3], case[4]), -128, 127).tolist()
    assert np.count_nonzero(np.abs(want.astype(int)) < 127) > units * 0.9  # few clamped
    return case


def test_requantization_rounding_in_c(harness, tmp_path):
    case = rounding_case(np.random.default_rng(9))
    results, _ = run(harness, [dense_call(*case)], tmp_path)
    check_dense([case], results)


# ---- errors -------------------------------------------------------------------------------

def small_s8(rng, **change):
    g = Conv(6, 6, 3, 4, 3, 3, (1, 1), (1, 1), (1, 1), (1, 1))
    x = rng.integers(-128, 128, (6, 6, 3)).astype(np.int8)
    w = rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
    bias = rng.integers(-1000, 1000, 4).astype(np.int32)
    mult, shift = requant_params(rng, 4)
    args = dict(g=g, x=x, w=w, bias=bias, mult=mult, shift=shift, in_zp=3, out_zp=-5,
                act=(-128, 127))
    args.update(change)
    return args


def small_dense(rng, **change):
    x = rng.integers(-128, 128, (2, 16)).astype(np.int8)
    w = rng.integers(-128, 128, (8, 16)).astype(np.int8)
    mult, shift = requant_params(rng, 8)
    args = dict(x=x, w=w, bias=rng.integers(-1000, 1000, 8).astype(np.int32), mult=mult,
                shift=shift, in_zp=-1, out_zp=2, act=(-128, 127))
    args.update(change)
    return args


def with_params(call: Call, **by_index: int) -> Call:
    for index, value in by_index.items():
        call.params[int(index[1:])] = value
    return call


def error_cases(rng) -> dict[str, tuple[Call, int, str | re.Pattern]]:
    """One good call, then calls that fail: name -> (call, status, message)."""
    ok = s8_call(**small_s8(rng))
    null_in = s8_call(**small_s8(rng))
    null_in.bufs[0] = Buf(None)
    null_mult = dense_call(**small_dense(rng))
    null_mult.bufs[3] = Buf(None)
    size = s8_call(**small_s8(rng), op=OP_S8 | RAW)
    size.overrides = [(REG["SIZE_W"], 100)]
    size_over = s8_call(**small_s8(rng), op=OP_S8 | RAW)
    size_over.overrides = [(REG["SIZE_W"], 200)]
    unused = with_params(f32_call(Conv(4, 4, 1, 1, 1, 1, (1, 1), (0, 0), (1, 1)),
                                  np.ones((1, 4, 4), np.float32), np.ones((1, 1, 1, 1), np.float32),
                                  None, False), p0=1)
    unused.op |= RAW
    unused.overrides = [(REG["SIZE_MULT"], 4)]
    big_c = with_params(s8_call(**small_s8(rng)), p2=2048)      # in_c
    kernel = with_params(s8_call(**small_s8(rng)), p6=12)       # k_h
    stride = with_params(s8_call(**small_s8(rng)), p9=0)        # stride_w
    negative = with_params(s8_call(**small_s8(rng)), p10=-1)    # pad_top
    huge = with_params(f32_call(Conv(4, 4, 1, 1, 1, 1, (1, 1), (0, 0), (1, 1)),
                                np.ones((1, 4, 4), np.float32), np.ones((1, 1, 1, 1), np.float32),
                                None, False), p0=64, p1=1024, p2=1024)
    zp = s8_call(**small_s8(rng, in_zp=200))
    act = s8_call(**small_s8(rng, act=(10, -10)))
    shift = small_s8(rng)
    shift["shift"] = shift["shift"].copy()
    shift["shift"][1] = 40
    bad_shift = s8_call(**shift)
    mult = small_dense(rng)
    mult["mult"] = mult["mult"].copy()
    mult["mult"][5] = -3
    bad_mult = dense_call(**mult)
    unknown = s8_call(**small_s8(rng), op=OP_S8 | RAW)
    unknown.overrides = [(REG["CMD"], 9)]
    misaligned = s8_call(**small_s8(rng))
    misaligned.bufs[2].offset = 2
    overlap = dense_call(**small_dense(rng))
    overlap.bufs[5] = Buf(None, offset=8, alias_of=0)
    batches = with_params(dense_call(**small_dense(rng)), p0=0)
    depth = with_params(dense_call(**small_dense(rng)), p1=65537)
    return {
        "ok": (ok, 0, ""),
        "null input": (null_in, 2, "vanilla: conv2d_s8: null address in ADDR_IN (input)"),
        "null multiplier": (null_mult, 2,
                            "vanilla: dense_s8: null address in ADDR_MULT (multiplier)"),
        "size": (size, 3, "vanilla: raw: SIZE_W is 100 bytes, the geometry needs 108"),
        "size over": (size_over, 3, "vanilla: raw: SIZE_W is 200 bytes, the geometry needs 108"),
        "unused buffer": (unused, 3, "vanilla: raw: SIZE_MULT is 4 bytes, for a buffer the command "
                                   "does not use"),
        "channels": (big_c, 4, "vanilla: conv2d_s8: over the device's limits: "
                               "IN_C = 2048 is outside [1, 1024]"),
        "kernel": (kernel, 4, "vanilla: conv2d_s8: over the device's limits: "
                              "K_H = 12 is outside [1, 11]"),
        "stride": (stride, 4, "vanilla: conv2d_s8: over the device's limits: "
                              "STRIDE_W = 0 is outside [1, 16]"),
        "negative pad": (negative, 4, "vanilla: conv2d_s8: over the device's limits: "
                                      "PAD_TOP = -1 is outside [0, 64]"),
        "buffer limit": (huge, 4, "vanilla: conv2d_f32: SIZE_IN would be 268435456 bytes, "
                                  "over the device's limit of 16777216"),
        "zero point": (zp, 5, "vanilla: conv2d_s8: bad parameter: "
                              "IN_ZP = 200 is outside [-128, 127]"),
        "act range": (act, 5, "vanilla: conv2d_s8: bad parameter: "
                              "ACT_MAX = -10 is outside [10, 127]"),
        "shift": (bad_shift, 6, "vanilla: conv2d_s8: bad requantization: "
                                "shift[1] = 40 is outside [-31, 31]"),
        "multiplier": (bad_mult, 6, "vanilla: dense_s8: bad requantization: "
                                    "multiplier[5] = -3 is outside [0, 2147483647]"),
        "unknown": (unknown, 1, "vanilla: raw: unknown command 9"),
        "alignment": (misaligned, 9, re.compile(
            r"vanilla: conv2d_s8: ADDR_BIAS \(bias\) = 0x[0-9a-f]{8} is not 4-byte aligned")),
        "overlap": (overlap, 10, "vanilla: dense_s8: the output overlaps ADDR_IN (input)"),
        "batches": (batches, 4, "vanilla: dense_s8: over the device's limits: "
                                "BATCHES = 0 is outside [1, 256]"),
        "depth": (depth, 4, "vanilla: dense_s8: over the device's limits: "
                            "IN_C = 65537 is outside [1, 65536]"),
        "ok again": (s8_call(**small_s8(rng)), 0, ""),
    }


def check_errors(cases: dict, results: list[Result]) -> None:
    for (name, (call, code, message)), r in zip(cases.items(), results, strict=True):
        assert r.status == code, (name, r)
        if isinstance(message, str):
            assert r.message == message, name
        else:
            assert message.fullmatch(r.message), (name, r.message)
        if code:
            assert r.regs["STATUS"] == STATUS_ERROR | code << 8, name
            if call.bufs[-1].data is not None:
                assert r.output == call.bufs[-1].data, f"{name}: the output was written"


def test_errors_reach_the_message_and_leave_the_output_alone(harness, tmp_path):
    rng = np.random.default_rng(4)
    calls = error_cases(rng)
    results, counters = run(harness, [c for c, _, _ in calls.values()], tmp_path)
    check_errors(calls, results)
    assert results[-1].regs["CNT_ERRORS"] == len(calls) - 2
    assert results[-1].regs["CMD_SEQ"] == len(calls)
    assert [results[-1].regs[r] for r in ("ERR_REG", "ERR_INDEX", "ERR_VALUE", "ERR_LO",
                                          "ERR_HI")] == [0] * 5  # nothing left of the errors
    assert counters["commands"] == 2  # failed commands count nothing
    assert counters["macs"] == 2 * small_s8(rng)["g"].macs()


# registers a driver would program from the geometry, with their valid ranges
PARAM_REGS = {"STRIDE_H": (0x94, 1, 16), "STRIDE_W": (0x98, 1, 16), "PAD_TOP": (0x9C, 0, 64),
              "PAD_LEFT": (0xA0, 0, 64), "DIL_H": (0xA4, 1, 16), "DIL_W": (0xA8, 1, 16),
              "IN_ZP": (0xB0, -128, 127), "OUT_ZP": (0xB4, -128, 127),
              "ACT_MIN": (0xB8, -128, 127), "ACT_MAX": (0xBC, -128, 127)}


def test_any_parameter_value_stays_inside_the_buffers(harness, tmp_path):
    """One geometry or int8 parameter register rewritten with a random value, in range or
    not (the sizes stay valid): the device either refuses it with the right code or computes
    the layer those registers describe, never touching memory outside its buffers (ASan)."""
    rng = np.random.default_rng(12)
    cases = []
    for _ in range(150):
        g = random_conv(rng)
        name = str(rng.choice(list(PARAM_REGS)))
        offset, lo, hi = PARAM_REGS[name]
        value = int(rng.integers(lo - 3, hi + 4))
        x = rng.integers(-128, 128, (g.in_h, g.in_w, g.in_c)).astype(np.int8)
        w = rng.integers(-128, 128, (g.out_c, g.k_h, g.k_w, g.in_c)).astype(np.int8)
        mult, shift = requant_params(rng, g.out_c)
        params = dict(g=g, x=x, w=w, bias=rng.integers(-999, 999, g.out_c).astype(np.int32),
                      mult=mult, shift=shift, in_zp=int(rng.integers(-128, 128)),
                      out_zp=int(rng.integers(-128, 128)), act=(-60, 60))
        call = s8_call(**params, op=OP_S8 | RAW)
        call.overrides = [(offset, value)]
        new = dict(params)
        new["g"] = Conv(g.in_h, g.in_w, g.in_c, g.out_c, g.k_h, g.k_w, g.stride, g.pad, g.dil,
                        out=g.out_hw)
        field_of = {"STRIDE": "stride", "PAD": "pad", "DIL": "dil"}
        if name.split("_")[0] in field_of:
            attr = field_of[name.split("_")[0]]
            pair = list(getattr(new["g"], attr))
            pair[0 if name.endswith(("_H", "_TOP")) else 1] = value
            setattr(new["g"], attr, tuple(pair))
        elif name == "IN_ZP":
            new["in_zp"] = value
        elif name == "OUT_ZP":
            new["out_zp"] = value
        else:
            new["act"] = (value, 60) if name == "ACT_MIN" else (-60, value)
        valid = lo <= value <= hi and new["act"][0] <= new["act"][1]
        code = 0 if valid else (4 if name.split("_")[0] in field_of else 5)
        cases.append((call, new, code))
    results, _ = run(harness, [c for c, _, _ in cases], tmp_path)
    codes = set()
    for (call, new, code), r in zip(cases, results, strict=True):
        assert r.status == code, (new["g"], r.message)
        codes.add(code)
        if code:
            assert r.output == call.bufs[-1].data
        else:
            got = np.frombuffer(r.output, np.int8).reshape(*new["g"].out_hw, new["g"].out_c)
            np.testing.assert_array_equal(got, conv_s8_ref(**new))
    assert codes == {0, 4, 5}


def test_fault_register_fails_the_nth_command(harness, tmp_path):
    """FAULT_AT written at run time: the command with that number fails, later ones run."""
    rng = np.random.default_rng(5)
    args = small_dense(rng)
    first = dense_call(**args, op=OP_DENSE | RAW)
    first.overrides = [(REG["FAULT_AT"], 2)]
    calls = [first, dense_call(**args), dense_call(**args)]
    results, counters = run(harness, calls, tmp_path)
    want = dense_ref(**args).tobytes()
    assert [r.status for r in results] == [0, 7, 0]
    assert results[1].message == "vanilla: dense_s8: fault injected at command 2"
    assert results[0].output == results[2].output == want
    assert results[1].output == calls[1].bufs[-1].data
    assert counters["commands"] == 2 and counters["macs"] == 2 * args["x"].size * 8


def test_fault_at_build_define(tmp_path):
    """-DVANILLA_FAULT_AT=2: a firmware whose second driver call fails with the message."""
    exe = build_harness(tmp_path / "harness_fault", "VANILLA_FAULT_AT=2")
    rng = np.random.default_rng(6)
    s8 = small_s8(rng)
    dense = small_dense(rng)
    calls = [s8_call(**s8), dense_call(**dense), s8_call(**s8)]
    results, counters = run(exe, calls, tmp_path)
    assert [r.status for r in results] == [0, 7, 0]
    assert [r.message for r in results] == ["", "vanilla: dense_s8: fault injected at command 2",
                                            ""]
    assert results[1].regs["ERR_VALUE"] == 2
    assert results[1].output == bytes([SENTINEL]) * 16
    assert results[0].output == results[2].output == conv_s8_ref(**s8).tobytes()
    assert counters == {"commands": 2, "macs": 2 * s8["g"].macs(),
                        "bytes_in": 2 * (6 * 6 * 3 + 4 * 27 + 3 * 16),
                        "bytes_out": 2 * 6 * 6 * 4}


def test_timeout_and_busy(tmp_path):
    """A device slower than the poll limit: the driver gives up, aborts, and says so; a
    device still BUSY refuses a new command."""
    exe = build_harness(tmp_path / "harness_slow", "VANILLA_COMMAND_CLOCKS=50",
                        "VANILLA_POLL_LIMIT=10")
    g = Conv(3, 3, 1, 1, 1, 1, (1, 1), (0, 0), (1, 1))
    x, w = np.ones((1, 3, 3), np.float32), np.ones((1, 1, 1, 1), np.float32)
    busy = f32_call(g, x, w, None, False)
    busy.op |= RAW
    busy.overrides = [(REG["STATUS"], STATUS_BUSY)]
    calls = [f32_call(g, x, w, None, False), busy]
    results, counters = run(exe, calls, tmp_path)
    assert results[0].status == 256
    assert results[0].message == ("vanilla: conv2d_f32: no DONE after 10 clocks "
                                  "(timeout; the command was aborted)")
    assert results[0].output == calls[0].bufs[-1].data
    assert results[1].status == 257
    assert results[1].message == "vanilla: raw: the device is busy with an earlier command"
    assert counters["commands"] == 0


def test_slow_device_within_the_poll_limit(tmp_path):
    """Many clocks per command, still under the limit: correct output, one command each."""
    exe = build_harness(tmp_path / "harness_slow_ok", "VANILLA_COMMAND_CLOCKS=50",
                        "VANILLA_POLL_LIMIT=60")
    rng = np.random.default_rng(8)
    args = small_dense(rng)
    results, counters = run(exe, [dense_call(**args)] * 3, tmp_path)
    assert all(r.output == dense_ref(**args).tobytes() for r in results)
    assert counters["commands"] == 3


# ---- cross compilation ------------------------------------------------------------------

ARM_CPUS = {
    "cortex-m3": ["-mcpu=cortex-m3", "-mthumb"],
    "cortex-m4": ["-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard", "-mthumb"],
}


@pytest.mark.parametrize("cpu", sorted(ARM_CPUS))
def test_driver_compiles_for_cortex_m(tmp_path, cpu):
    """-Werror for the board's core, and the objects need nothing from libc (no malloc)."""
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed")
    undefined: set[str] = set()
    defined: set[str] = set()
    for opt in ["-O0", "-Os", "-O2"]:
        for defines in [[], ["-DVANILLA_FAULT_AT=2", "-DVANILLA_POLL_LIMIT=10"]]:
            for src in DRIVER_SOURCES:
                obj = tmp_path / f"{src.stem}{opt}{len(defines)}.o"
                subprocess.run(["arm-none-eabi-gcc", *ARM_CPUS[cpu], "-std=c99", "-Wall",
                                "-Wextra", "-Werror", opt, *defines, "-I", str(DRIVER),
                                "-I", str(COMMON / "include"), "-c", str(src), "-o", str(obj)],
                               check=True)
                nm = subprocess.run(["arm-none-eabi-nm", str(obj)], capture_output=True,
                                    text=True, check=True).stdout.split("\n")
                undefined |= {ln.split()[-1] for ln in nm if re.match(r"\s+U ", ln)}
                defined |= {ln.split()[-1] for ln in nm if re.match(r"[0-9a-f]+ [TDBR] ", ln)}
    libgcc = {s for s in undefined if s.startswith("__aeabi_")}  # soft-float and 64-bit helpers
    assert undefined - libgcc - defined == {"mtvg_accel_error"}
    assert {"vanilla_conv2d_f32", "vanilla_conv2d_s8", "vanilla_dense_s8", "vanilla_counters",
            "vanilla_device_clock", "vanilla_mmio"} <= defined


# ---- on the boards' cores in QEMU -----------------------------------------------------------

def build_for_board(board: str, cases: bytes, out: Path) -> Path:
    """The harness with its cases compiled in, for a QEMU board (its port, flags, memory)."""
    spec = load_board(board)
    (out / "vanilla_cases.h").write_text(
        "static const unsigned char vanilla_cases[] = {"
        + ",".join(str(v) for v in cases) + "};\n"
        "static const size_t vanilla_cases_bytes = sizeof(vanilla_cases);\n")
    port = port_folder(spec.platform, out)
    sources = [HARNESS, *DRIVER_SOURCES, COMMON / "src" / "accel.c", *sorted(port.glob("*.c"))]
    objects = []
    for src in sources:
        objects.append(out / f"{src.stem}.o")
        subprocess.run([spec.tool("gcc"), *spec.cflags, "-O2", "-std=c99", "-Wall", "-Wextra",
                        "-Werror", "-DVANILLA_HARNESS_EMBEDDED", "-I", str(out), "-I", str(DRIVER),
                        "-I", str(COMMON / "include"), "-c", str(src), "-o", str(objects[-1])],
                       check=True)
    memory = {"MTVG_FLASH_ORIGIN": spec.flash_origin, "MTVG_FLASH_SIZE": spec.flash_bytes,
              "MTVG_RAM_ORIGIN": spec.ram_origin, "MTVG_RAM_SIZE": spec.ram_bytes,
              "MTVG_STACK_SIZE": spec.stack_bytes}
    elf = out / "harness.elf"
    subprocess.run([spec.tool("gcc"), *map(str, objects), "-T", str(port / spec.linker_script),
                    f"-L{port}",
                    *(f"-Wl,--defsym={k}={v}" for k, v in memory.items() if v is not None),
                    *spec.ldflags, *(f"-l{lib}" for lib in spec.libs), "-o", str(elf)],
                   check=True)
    return elf


def run_in_qemu(board: str, calls: list[Call], tmp_path: Path) -> tuple[list[Result], dict]:
    elf = build_for_board(board, b"".join(c.encode() for c in calls), tmp_path)
    proc = subprocess.run(qemu_argv(load_board(board), elf), capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=300)
    console = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0 and "END" in console.splitlines(), \
        console[-2000:] + proc.stderr.decode(errors="replace")
    data = bytes.fromhex("".join(line[2:] for line in console.splitlines()
                                 if line.startswith("H ")))
    out = tmp_path / "qemu_out.bin"
    out.write_bytes(data)
    return parse_output(out, calls)


@pytest.mark.qemu
@pytest.mark.parametrize("board", ["qemu-mps2-an385", "qemu-mps2-an386", "qemu-riscv32"])
def test_on_32_bit_cores_in_qemu(board, harness, tmp_path):
    """The same cases on Cortex-M3 (soft float), Cortex-M4F and RV32IMAC: 32-bit addresses
    (ADDR_x_HI = 0), the cores' own float and 64-bit arithmetic. Results, messages and
    counters equal the references and the host's."""
    require_board_tools(board)
    rng = np.random.default_rng(11)
    f32, s8, dense = f32_cases(rng), s8_cases(rng), dense_cases(rng)
    dense.append(rounding_case(rng))
    errors = error_cases(rng)
    calls = [*(f32_call(*c) for c in f32), *(s8_call(*c) for c in s8),
             *(dense_call(*c) for c in dense), *(c for c, _, _ in errors.values())]
    results, counters = run_in_qemu(board, calls, tmp_path)
    check_f32(f32, results[:len(f32)])
    check_s8(s8, results[len(f32):len(f32) + len(s8)])
    check_dense(dense, results[len(f32) + len(s8):len(f32) + len(s8) + len(dense)])
    check_errors(errors, results[-len(errors):])
    (tmp_path / "host").mkdir()
    _, host_counters = run(harness, calls, tmp_path / "host")
    assert counters == host_counters
    assert counters["commands"] == len(f32) + len(s8) + len(dense) + 2


def test_register_map_in_readme_is_the_header():
    """Offsets in vanilla_device.h (field order, 4 bytes each), its comments, README.md's
    table and the offsets these tests use all agree."""
    header = (DRIVER / "vanilla_device.h").read_text()
    body = header[header.index("typedef struct {"):header.index("} vanilla_regs_t;")]
    names = [n.strip() for line in re.findall(r"volatile uint32_t ([^;]+);", body)
             for n in line.split(",")]
    offsets = {name: 4 * i for i, name in enumerate(names)}
    assert 4 * len(names) == int(re.search(r"VANILLA_REGS_BYTES (0x[0-9A-F]+)u", header)[1], 16)
    commented = re.findall(r"volatile uint32_t ([A-Z_]+)[^;]*; */\*!< (0x[0-9A-F]{2})", body)
    assert len(commented) > 40
    for name, offset in commented:
        assert offsets[name] == int(offset, 16), name
    covered = set()
    for line in (DRIVER / "README.md").read_text().splitlines():
        if not line.startswith("| 0x"):
            continue
        offset_cell, name_cell = (c.strip() for c in line.split("|")[1:3])
        if " / _" in name_cell:  # "ADDR_IN_LO / _HI"
            low = name_cell.split(" / ")[0]
            row_names = [low, low.removesuffix("_LO") + "_HI"]
        else:
            row_names = [n.strip() for n in name_cell.split(",")]
        if "–" in offset_cell:  # "0x5C–0x70"
            first, last = (int(v, 16) for v in offset_cell.split("–"))
            row_offsets = list(range(first, last + 4, 4))
        else:
            row_offsets = [int(v, 16) for v in re.findall(r"0x[0-9A-F]{2}", offset_cell)]
        assert [offsets[n] for n in row_names] == row_offsets, line
        covered |= set(row_names)
    assert covered == set(names)  # every register is in the table
    for name, offset in {**REG, **{k: v[0] for k, v in PARAM_REGS.items()}}.items():
        assert offsets[name] == offset, name
