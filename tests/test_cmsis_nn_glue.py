"""The `cmsis-nn` accelerator's C driver (generator/accel/cmsis_nn/driver) against TFLite.

The driver and CMSIS-NN's sources (the tree in ../shared/third_party; never copied into the
repo) are built with the host gcc under ASan/UBSan into a small program that reads cases on
stdin. Every wrapper's output is compared bit for bit with a numpy reference of TFLite's
reference kernels written here (int64 arithmetic as generator/export/fixedpoint.py does it),
on random shapes with padding, stride 2, dilation, depth multipliers and per-channel
requantization. The host runs CMSIS-NN's plain C; the driver and CMSIS-NN are also
cross-compiled for Cortex-M3, M4 (DSP), M7, M33 and M55 (MVE), the driver with -Werror.
The scratch-size bounds the driver's header documents are checked against CMSIS-NN's own
buffer-size functions for the plain, DSP and MVE builds.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from generator.accel.cmsis_nn import dense_kernel_sums
from generator.export.fixedpoint import (
    PyArith,
    exp_on_negative_values,
    multiply_by_quantized_multiplier,
    one_over_one_plus_x,
    quantize_multiplier,
    softmax_params,
)
from tests.conftest import REPO, SHARED

DRIVER = REPO / "generator" / "accel" / "cmsis_nn" / "driver"
COMMON = REPO / "templates" / "common"
CMSIS_NN = SHARED / "third_party" / "CMSIS-NN"
# The CMSIS-NN source directories the driver's kernels and their helpers live in (MVE's
# depthwise-as-conv path transposes the weights); projects build all of Source/*/*.c.
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer"]
BIG_SCRATCH = 65536

OPS = {"conv2d": 0, "depthwise": 1, "dense": 2, "avgpool": 3, "maxpool": 4, "add": 5,
       "softmax": 6, "sizes": 7, "counters": 8}

DISPATCH = r"""
#include <stdio.h>
#include "mtvg_cmsis_nn.h"
#include "arm_nnfunctions.h"

#define MAX_SCALARS 32
#define MAX_ARRAYS 6

/* One driver call: op (OPS in the test), its scalars, its arrays (NULL = none). */
static int32_t run_case(long op, const int32_t* s, const void* const* arr, int8_t* out) {
  const int8_t* i8 = arr[0];
  switch (op) {
    case 0:
    case 1:
      return (op == 0 ? mtvg_cmsis_nn_conv2d_s8 : mtvg_cmsis_nn_depthwise_conv2d_s8)(
          i8, arr[1], arr[2], arr[3], arr[4], out, s[0], s[1], s[2], s[3], s[4], s[5], s[6],
          s[7], s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15], s[16], s[17]);
    case 2:
      return mtvg_cmsis_nn_dense_s8(i8, arr[1], arr[2], arr[3], arr[4], arr[5], out, s[0], s[1],
                                    s[2], s[3], s[4], s[5], s[6]);
    case 3:
    case 4:
      return (op == 3 ? mtvg_cmsis_nn_avgpool_s8 : mtvg_cmsis_nn_maxpool_s8)(
          i8, out, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
          s[12]);
    case 5:
      return mtvg_cmsis_nn_add_s8(i8, arr[1], out, s[0], s[1], s[2], s[3], s[4], s[5], s[6],
                                  s[7], s[8], s[9], s[10], s[11], s[12]);
    case 6:
      return mtvg_cmsis_nn_softmax_s8(i8, out, s[0], s[1], s[2], s[3], s[4]);
    default:
      return -1;
  }
}
"""

HARNESS = DISPATCH + r"""
/* Reads cases (whitespace-separated integers) on stdin, runs one driver call per case and
 * prints "<status> <outputs...>|<message>" per case. Exact-size heap arrays let ASan see
 * any access outside a tensor. */
#include <stdlib.h>

static int read_int(long* v) { return scanf("%ld", v) == 1; }

static void emit(const char* accel, const char* name, uint64_t value) {
  printf("%s.%s=%llu ", accel, name, (unsigned long long)value);
}

/* CMSIS-NN's scratch needs for a conv geometry: conv, depthwise, dense, avgpool x
 * plain, dsp, mve builds. */
static void print_sizes(const int32_t* s) {
  const cmsis_nn_conv_params cp = {0, 0, {s[9], s[8]}, {s[11], s[10]}, {s[13], s[12]},
                                   {-128, 127}};
  const cmsis_nn_dw_conv_params dp = {0, 0, s[5] / s[2], {s[9], s[8]}, {s[11], s[10]},
                                      {s[13], s[12]}, {-128, 127}};
  const cmsis_nn_dims in = {1, s[0], s[1], s[2]}, outd = {1, s[3], s[4], s[5]};
  const cmsis_nn_dims cf = {s[5], s[6], s[7], s[2]}, df = {1, s[6], s[7], s[5]};
  const cmsis_nn_dims ff = {s[2], 1, 1, s[5]};
  printf("%ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld",
         (long)arm_convolve_wrapper_s8_get_buffer_size(&cp, &in, &cf, &outd),
         (long)arm_convolve_wrapper_s8_get_buffer_size_dsp(&cp, &in, &cf, &outd),
         (long)arm_convolve_wrapper_s8_get_buffer_size_mve(&cp, &in, &cf, &outd),
         (long)arm_depthwise_conv_wrapper_s8_get_buffer_size(&dp, &in, &df, &outd),
         (long)arm_depthwise_conv_wrapper_s8_get_buffer_size_dsp(&dp, &in, &df, &outd),
         (long)arm_depthwise_conv_wrapper_s8_get_buffer_size_mve(&dp, &in, &df, &outd),
         (long)arm_fully_connected_s8_get_buffer_size(&ff),
         (long)arm_fully_connected_s8_get_buffer_size_dsp(&ff),
         (long)arm_fully_connected_s8_get_buffer_size_mve(&ff),
         (long)arm_avgpool_s8_get_buffer_size(s[4], s[2]),
         (long)arm_avgpool_s8_get_buffer_size_dsp(s[4], s[2]),
         (long)arm_avgpool_s8_get_buffer_size_mve(s[4], s[2]));
}

int main(void) {
  long op;
  while (read_int(&op)) {
    long n, kind, len, v;
    int32_t s[MAX_SCALARS] = {0};
    void* arr[MAX_ARRAYS] = {0};
    if (!read_int(&n) || n > MAX_SCALARS) return 2;
    for (long i = 0; i < n; ++i) { if (!read_int(&v)) return 2; s[i] = (int32_t)v; }
    if (!read_int(&n) || n > MAX_ARRAYS) return 2;
    for (long a = 0; a < n; ++a) {
      if (!read_int(&kind) || !read_int(&len)) return 2;
      if (len == 0) continue; /* NULL */
      arr[a] = malloc((size_t)len * (kind == 8 ? 1u : 4u));
      for (long i = 0; i < len; ++i) {
        if (!read_int(&v)) return 2;
        if (kind == 8) ((int8_t*)arr[a])[i] = (int8_t)v; else ((int32_t*)arr[a])[i] = (int32_t)v;
      }
    }
    if (!read_int(&len)) return 2;
    int8_t* out = len > 0 ? calloc((size_t)len, 1) : NULL;
    mtvg_accel_clear();
    if (op == 7) {
      print_sizes(s);
    } else if (op == 8) {
      mtvg_cmsis_nn_counters(emit);
    } else {
      const void* in[MAX_ARRAYS] = {arr[0], arr[1], arr[2], arr[3], arr[4], arr[5]};
      int32_t st = run_case(op, s, in, out);
      mtvg_accel_check(st); /* as the generated kernel does */
      printf("%ld", (long)st);
      for (long i = 0; i < len; ++i) printf(" %d", out[i]);
      printf("|%s", mtvg_accel_message());
    }
    printf("\n");
    free(out);
    for (int a = 0; a < MAX_ARRAYS; ++a) free(arr[a]);
  }
  return 0;
}
"""


def cmsis_nn_tree() -> Path:
    if not (CMSIS_NN / "Include" / "arm_nnfunctions.h").is_file():
        pytest.skip(f"needs CMSIS-NN at {CMSIS_NN} (../shared is absent; set MTVG_SHARED)")
    return CMSIS_NN


def cmsis_sources(tree: Path) -> list[Path]:
    """The files a project with the cmsis-nn accelerator builds: what the driver needs."""
    from generator.accel.cmsis_nn import driver_sources

    return [tree / rel for rel in driver_sources(tree)]


def build_harness(dest: Path, scratch_bytes: int) -> Path:
    tree = cmsis_nn_tree()
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "harness.c").write_text(HARNESS)
    common = ["-O1", "-g", *SANITIZE, f"-I{tree / 'Include'}", f"-I{COMMON / 'include'}",
              f"-I{DRIVER}", f"-DMTVG_CMSIS_NN_SCRATCH_BYTES={scratch_bytes}"]
    lib = dest / "cmsis_nn.a"
    if not lib.exists():
        objs = []
        for src in cmsis_sources(tree):
            # CMSIS-NN's own code: its warnings are not ours, and it shifts negative values
            # left (arm_elementwise_add_s8), which GCC defines as multiplying by 2**n.
            obj = dest / f"{src.stem}.o"
            subprocess.run(["gcc", "-std=c99", "-w", *common, "-fno-sanitize=shift-base",
                            "-c", str(src), "-o", str(obj)], check=True)
            objs.append(str(obj))
        subprocess.run(["ar", "rcs", str(lib), *objs], check=True)
    exe = dest / f"harness_{scratch_bytes}"
    subprocess.run(["gcc", *STRICT, *common, str(dest / "harness.c"),
                    str(DRIVER / "mtvg_cmsis_nn.c"), str(COMMON / "src" / "accel.c"),
                    str(lib), "-o", str(exe)], check=True)
    return exe


@pytest.fixture(scope="module")
def harness_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cmsis_nn_glue")


@pytest.fixture(scope="module")
def harness(harness_dir) -> Path:
    return build_harness(harness_dir, BIG_SCRATCH)


@dataclass
class Call:
    """One driver call: the op, its int32 scalars, its arrays (int8 or int32; None = NULL)
    and its output size."""

    op: str
    scalars: list[int]
    arrays: list[np.ndarray | None]
    out_len: int

    def encode(self) -> str:
        parts = [str(OPS[self.op]), str(len(self.scalars)), *map(str, self.scalars),
                 str(len(self.arrays))]
        for a in self.arrays:
            if a is None:
                parts += ["8", "0"]
                continue
            parts += ["8" if a.dtype == np.int8 else "32", str(a.size)]
            parts += map(str, a.reshape(-1).tolist())
        parts.append(str(self.out_len))
        return " ".join(parts)


@dataclass
class Result:
    status: int
    output: np.ndarray
    message: str


def run(exe: Path, calls: list[Call]) -> list[Result]:
    text = "\n".join(c.encode() for c in calls) + "\n"
    proc = subprocess.run([str(exe)], input=text, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = []
    for line in proc.stdout.splitlines():
        values, _, message = line.partition("|")
        nums = [int(v) for v in values.split()]
        results.append(Result(nums[0], np.array(nums[1:], dtype=np.int64), message))
    assert len(results) == len(calls)
    return results


def raw_lines(exe: Path, calls: list[Call]) -> list[str]:
    text = "\n".join(c.encode() for c in calls) + "\n"
    proc = subprocess.run([str(exe)], input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.splitlines()


# ---- TFLite's reference arithmetic in numpy (int64, as fixedpoint.py) ----------------------

def _truncdiv_pow2(x: np.ndarray, bits: int) -> np.ndarray:
    q = np.abs(x) >> bits
    return np.where(x >= 0, q, -q)


def mbqm(x, multiplier, shift) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier, elementwise (multiplier/shift broadcast)."""
    x = np.asarray(x, dtype=np.int64)
    m = np.asarray(multiplier, dtype=np.int64)
    s = np.asarray(shift, dtype=np.int64)
    x = x * (np.int64(1) << np.maximum(s, 0))
    assert np.all((x >= -(1 << 31)) & (x < (1 << 31))), "left shift overflows int32"
    ab = x * m
    high = _truncdiv_pow2(ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30)), 31)
    right = np.maximum(-s, 0)
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (high < 0)
    return (high >> right) + ((high & mask) > threshold)


def _windows(x: np.ndarray, out_hw, k_hw, stride, pad, dilation, fill):
    """For each tap (i, j): the input values each output position sees ([out_h, out_w, c]),
    `fill` where the tap lies in the padding, and whether it lies inside the input."""
    in_h, in_w, c = x.shape
    out_h, out_w = out_hw
    span_h = (out_h - 1) * stride[0] + (k_hw[0] - 1) * dilation[0] + 1
    span_w = (out_w - 1) * stride[1] + (k_hw[1] - 1) * dilation[1] + 1
    rows, cols = max(span_h, pad[0] + in_h), max(span_w, pad[1] + in_w)
    padded = np.full((rows, cols, c), fill, dtype=np.int64)
    inside = np.zeros((rows, cols), dtype=bool)
    padded[pad[0]:pad[0] + in_h, pad[1]:pad[1] + in_w] = x
    inside[pad[0]:pad[0] + in_h, pad[1]:pad[1] + in_w] = True
    for i in range(k_hw[0]):
        for j in range(k_hw[1]):
            rs = slice(i * dilation[0], i * dilation[0] + (out_h - 1) * stride[0] + 1, stride[0])
            cs = slice(j * dilation[1], j * dilation[1] + (out_w - 1) * stride[1] + 1, stride[1])
            yield i, j, padded[rs, cs], inside[rs, cs]


def _finish(acc, multiplier, shift, zp_out, act_min, act_max) -> np.ndarray:
    return np.clip(mbqm(acc, multiplier, shift) + zp_out, act_min, act_max)


@dataclass
class Conv:
    """A conv2d or depthwise case and its TFLite reference."""

    depthwise: bool
    x: np.ndarray  # [in_h, in_w, in_c] int8
    w: np.ndarray  # OHWI (conv) or [k_h, k_w, out_c] (depthwise), int8
    bias: np.ndarray | None
    mult: np.ndarray
    shift: np.ndarray
    out_hw: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int]
    dilation: tuple[int, int]
    zp_in: int
    zp_out: int
    act: tuple[int, int]

    @property
    def out_c(self) -> int:
        return self.w.shape[-1] if self.depthwise else self.w.shape[0]

    @property
    def k_hw(self) -> tuple[int, int]:
        return self.w.shape[0:2] if self.depthwise else self.w.shape[1:3]

    def call(self) -> Call:
        in_h, in_w, in_c = self.x.shape
        scalars = [in_h, in_w, in_c, *self.out_hw, self.out_c, *self.k_hw, *self.stride,
                   *self.pad, *self.dilation, self.zp_in, self.zp_out, *self.act]
        return Call("depthwise" if self.depthwise else "conv2d", scalars,
                    [self.x, self.w, self.bias, self.mult, self.shift],
                    self.out_hw[0] * self.out_hw[1] * self.out_c)

    def reference(self) -> np.ndarray:
        x = self.x.astype(np.int64) - self.zp_in  # taps in the padding add nothing
        acc = np.zeros((*self.out_hw, self.out_c), dtype=np.int64)
        multiplier = self.out_c // self.x.shape[2]
        for i, j, patch, _ in _windows(x, self.out_hw, self.k_hw, self.stride, self.pad,
                                       self.dilation, 0):
            if self.depthwise:
                acc += np.repeat(patch, multiplier, axis=2) * self.w[i, j].astype(np.int64)
            else:
                acc += patch @ self.w[:, i, j, :].astype(np.int64).T
        if self.bias is not None:
            acc += self.bias
        return _finish(acc, self.mult, self.shift, self.zp_out, *self.act).reshape(-1)


def axis(rng, in_size: int, k: int, stride: int, dilation: int, same: bool) -> tuple[int, int]:
    """TFLite's output size and leading padding for SAME or VALID."""
    extent = (k - 1) * dilation + 1
    if same:
        out = -(-in_size // stride)
        return out, max((out - 1) * stride + extent - in_size, 0) // 2
    return (in_size - extent) // stride + 1, 0


def requant(rng, channels: int, per_channel: bool, low: float = 2e-4, high: float = 0.02):
    scales = rng.uniform(low, high, channels if per_channel else 1)
    pairs = [quantize_multiplier(float(s)) for s in scales]
    mult = np.array([p[0] for p in pairs], dtype=np.int32)
    shift = np.array([p[1] for p in pairs], dtype=np.int32)
    if not per_channel:
        mult, shift = np.repeat(mult, channels), np.repeat(shift, channels)
    return mult, shift


ACTIVATIONS = [(-128, 127), (-128, 127), (-20, 127), (-128, 40), (-5, 90)]


def random_conv(rng, depthwise: bool, *, in_hw, in_c, k_hw, stride=(1, 1), dilation=(1, 1),
                same=True, multiplier=1, out_c=None, per_channel=True, bias=True,
                scale=(2e-4, 0.02)) -> Conv:
    (oh, pt), (ow, pl) = (axis(rng, n, k, s, d, same) for n, k, s, d in
                          zip(in_hw, k_hw, stride, dilation, strict=True))
    out_c = in_c * multiplier if depthwise else (out_c or int(rng.integers(1, 9)))
    w_shape = (*k_hw, out_c) if depthwise else (out_c, *k_hw, in_c)
    mult, shift = requant(rng, out_c, per_channel, *scale)
    return Conv(
        depthwise, rng.integers(-128, 128, (*in_hw, in_c), dtype=np.int8),
        rng.integers(-127, 128, w_shape, dtype=np.int8),
        rng.integers(-3000, 3000, out_c, dtype=np.int32) if bias else None, mult, shift,
        (oh, ow), stride, (pt, pl), dilation, int(rng.integers(-128, 128)),
        int(rng.integers(-128, 128)), ACTIVATIONS[int(rng.integers(len(ACTIVATIONS)))])


def conv_cases(rng) -> list[Conv]:
    """Each CMSIS-NN conv path (1x1 fast, 1x1 strided, 1xN, general im2col) and random
    shapes with SAME/VALID padding, stride 2, dilation, per-tensor and per-channel scales."""
    cases = [
        random_conv(rng, False, in_hw=(5, 6), in_c=8, k_hw=(1, 1)),  # 1x1 fast
        random_conv(rng, False, in_hw=(7, 6), in_c=3, k_hw=(1, 1), stride=(2, 2), same=False),
        random_conv(rng, False, in_hw=(1, 12), in_c=4, k_hw=(1, 3)),  # 1xN
        random_conv(rng, False, in_hw=(1, 11), in_c=2, k_hw=(1, 5), stride=(1, 2)),
        random_conv(rng, False, in_hw=(6, 6), in_c=5, k_hw=(3, 3), per_channel=False),
        random_conv(rng, False, in_hw=(7, 9), in_c=3, k_hw=(3, 3), dilation=(2, 2)),
        random_conv(rng, False, in_hw=(9, 7), in_c=2, k_hw=(3, 2), dilation=(2, 1),
                    stride=(2, 1), same=False),
        random_conv(rng, False, in_hw=(5, 5), in_c=4, k_hw=(3, 3), bias=False),
        # scales above one: a left shift before the multiply
        random_conv(rng, False, in_hw=(4, 4), in_c=1, k_hw=(2, 2), scale=(1.0, 3.5)),
    ]
    for _ in range(16):
        k = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        dil = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        same = bool(rng.integers(2))
        in_hw = tuple(int(rng.integers(max(1, (kk - 1) * d + 1), 11))
                      for kk, d in zip(k, dil, strict=True))
        cases.append(random_conv(rng, False, in_hw=in_hw, in_c=int(rng.integers(1, 9)),
                                 k_hw=k, stride=stride, dilation=dil, same=same,
                                 per_channel=bool(rng.integers(4))))
    return cases


def depthwise_cases(rng) -> list[Conv]:
    """Each CMSIS-NN depthwise path (3x3 with pads <= 1, the optimized multiplier-1 kernel,
    the generic kernel, the multiplier-4 kernel) and random shapes."""
    cases = [
        random_conv(rng, True, in_hw=(6, 7), in_c=5, k_hw=(3, 3)),  # 3x3, pad 1
        random_conv(rng, True, in_hw=(8, 8), in_c=6, k_hw=(3, 3), stride=(2, 2)),
        random_conv(rng, True, in_hw=(7, 6), in_c=7, k_hw=(5, 5)),  # opt
        random_conv(rng, True, in_hw=(6, 6), in_c=3, k_hw=(3, 3), multiplier=2),
        random_conv(rng, True, in_hw=(7, 7), in_c=2, k_hw=(3, 3), multiplier=2, stride=(2, 2)),
        random_conv(rng, True, in_hw=(5, 6), in_c=2, k_hw=(3, 3), multiplier=4),  # mult 4
        random_conv(rng, True, in_hw=(9, 9), in_c=3, k_hw=(3, 3), dilation=(2, 2)),
        random_conv(rng, True, in_hw=(9, 8), in_c=2, k_hw=(3, 2), dilation=(2, 3),
                    multiplier=2, same=False),
        random_conv(rng, True, in_hw=(5, 5), in_c=1, k_hw=(3, 3), multiplier=8),
        random_conv(rng, True, in_hw=(6, 5), in_c=4, k_hw=(2, 2), per_channel=False),
    ]
    for _ in range(16):
        k = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        dil = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        in_hw = tuple(int(rng.integers(max(1, (kk - 1) * d + 1), 11))
                      for kk, d in zip(k, dil, strict=True))
        cases.append(random_conv(rng, True, in_hw=in_hw, in_c=int(rng.integers(1, 9)),
                                 k_hw=k, stride=stride, dilation=dil,
                                 same=bool(rng.integers(2)),
                                 multiplier=int(rng.choice([1, 1, 2, 3, 4]))))
    return cases


def assert_matches(results: list[Result], cases, expected: list[np.ndarray]) -> None:
    for i, (res, case, want) in enumerate(zip(results, cases, expected, strict=True)):
        assert res.status == 0, f"case {i}: {res.message}"
        diff = np.flatnonzero(res.output != want)
        assert diff.size == 0, (f"case {i} ({case}): {diff.size} of {want.size} outputs differ, "
                                f"first at {diff[0]}: {res.output[diff[0]]} vs {want[diff[0]]}")


def test_reference_requantization_is_fixedpoints():
    """The numpy requantization equals fixedpoint.py's (the exporter's arithmetic)."""
    rng = np.random.default_rng(1)
    acc = rng.integers(-(1 << 22), 1 << 22, 4000)
    pairs = [quantize_multiplier(float(s)) for s in rng.uniform(1e-5, 1.9, 4000)]
    mult = np.array([p[0] for p in pairs])
    shift = np.array([p[1] for p in pairs])
    want = [multiply_by_quantized_multiplier(PyArith(), int(a), int(m), int(s))
            for a, m, s in zip(acc, mult, shift, strict=True)]
    assert mbqm(acc, mult, shift).tolist() == want


def test_conv2d_bit_exact(harness):
    cases = conv_cases(np.random.default_rng(11))
    assert_matches(run(harness, [c.call() for c in cases]), cases,
                   [c.reference() for c in cases])


def test_depthwise_conv2d_bit_exact(harness):
    cases = depthwise_cases(np.random.default_rng(12))
    assert_matches(run(harness, [c.call() for c in cases]), cases,
                   [c.reference() for c in cases])


def dense_case(rng, batches: int, in_depth: int, units: int, per_channel: bool):
    x = rng.integers(-128, 128, (batches, in_depth), dtype=np.int8)
    w = rng.integers(-127, 128, (units, in_depth), dtype=np.int8)
    b = rng.integers(-5000, 5000, units, dtype=np.int32)
    mult, shift = requant(rng, units, per_channel, 1e-4, 0.01)
    zp_in, zp_out = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
    act = ACTIVATIONS[int(rng.integers(len(ACTIVATIONS)))]
    acc = (x.astype(np.int64) - zp_in) @ w.astype(np.int64).T + b
    want = _finish(acc, mult, shift, zp_out, *act).reshape(-1)
    # the kernel sums as the plugin computes them at export (the MVE kernels read them)
    sums = dense_kernel_sums(w, b, zp_in)
    call = Call("dense", [batches, in_depth, units, zp_in, zp_out, *act],
                [x, w, b, mult, shift, sums], batches * units)
    return call, want


def test_dense_per_tensor_and_per_channel_bit_exact(harness):
    rng = np.random.default_rng(13)
    shapes = [(1, 16, 4, False), (1, 16, 4, True), (3, 37, 10, False), (2, 5, 33, True),
              (1, 1, 1, False), (1, 130, 7, True), (4, 64, 12, False)]
    shapes += [(int(rng.integers(1, 4)), int(rng.integers(1, 80)), int(rng.integers(1, 40)),
                bool(rng.integers(2))) for _ in range(10)]
    cases = [dense_case(rng, *s) for s in shapes]
    calls = [c for c, _ in cases]
    assert_matches(run(harness, calls), calls, [w for _, w in cases])


def pool_case(rng, kind: str, in_hw, c: int, pool, stride, same: bool):
    (oh, pt), (ow, pl) = (axis(rng, n, k, s, 1, same) for n, k, s in
                          zip(in_hw, pool, stride, strict=True))
    x = rng.integers(-128, 128, (*in_hw, c), dtype=np.int8)
    act = ACTIVATIONS[int(rng.integers(len(ACTIVATIONS)))]
    total = np.zeros((oh, ow, c), dtype=np.int64)
    count = np.zeros((oh, ow, 1), dtype=np.int64)
    best = np.full((oh, ow, c), -(1 << 20), dtype=np.int64)
    for _, _, patch, inside in _windows(x.astype(np.int64), (oh, ow), pool, stride, (pt, pl),
                                        (1, 1), 0):
        total += patch
        count += inside[..., None]
        best = np.where(inside[..., None], np.maximum(best, patch), best)
    if kind == "avgpool":
        half = count // 2  # TFLite: (acc ± count/2) / count, truncating
        value = np.where(total > 0, total + half, total - half)
        value = np.sign(value) * (np.abs(value) // count)
    else:
        value = best
    want = np.clip(value, *act).reshape(-1)
    call = Call(kind, [*in_hw, c, oh, ow, *pool, *stride, pt, pl, *act], [x], oh * ow * c)
    return call, want


@pytest.mark.parametrize("kind", ["avgpool", "maxpool"])
def test_pooling_bit_exact(harness, kind):
    rng = np.random.default_rng(14 if kind == "avgpool" else 15)
    shapes = [((8, 8), 3, (2, 2), (2, 2), False), ((7, 7), 4, (3, 3), (2, 2), True),
              ((5, 6), 2, (3, 3), (1, 1), True), ((6, 5), 5, (4, 2), (2, 1), True),
              ((9, 9), 16, (3, 3), (2, 2), True), ((4, 4), 1, (4, 4), (1, 1), False)]
    for _ in range(12):
        pool = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        shapes.append(((int(rng.integers(pool[0], 10)), int(rng.integers(pool[1], 10))),
                       int(rng.integers(1, 20)), pool,
                       (int(rng.integers(1, 3)), int(rng.integers(1, 3))),
                       bool(rng.integers(2))))
    cases = [pool_case(rng, kind, *s) for s in shapes]
    calls = [c for c, _ in cases]
    assert_matches(run(harness, calls), calls, [w for _, w in cases])


def add_case(rng, size: int):
    """TFLite's int8 ADD parameters for random scales (left shift 20, as TFLite's Prepare)."""
    s1, s2, s_out = rng.uniform(0.01, 0.2, 3)
    twice_max = 2 * max(s1, s2)
    left_shift = 20
    m1, sh1 = quantize_multiplier(s1 / twice_max)
    m2, sh2 = quantize_multiplier(s2 / twice_max)
    mo, sho = quantize_multiplier(twice_max / ((1 << left_shift) * s_out))
    zp1, zp2, zp_out = (int(v) for v in rng.integers(-128, 128, 3))
    act = ACTIVATIONS[int(rng.integers(len(ACTIVATIONS)))]
    a = rng.integers(-128, 128, size, dtype=np.int8)
    b = rng.integers(-128, 128, size, dtype=np.int8)
    sa = mbqm((a.astype(np.int64) - zp1) << left_shift, m1, sh1)
    sb = mbqm((b.astype(np.int64) - zp2) << left_shift, m2, sh2)
    want = np.clip(mbqm(sa + sb, mo, sho) + zp_out, *act)
    call = Call("add", [size, -zp1, m1, sh1, -zp2, m2, sh2, left_shift, zp_out, mo, sho, *act],
                [a, b], size)
    return call, want


def test_add_bit_exact(harness):
    rng = np.random.default_rng(16)
    cases = [add_case(rng, n) for n in [1, 3, 4, 7, 64, 257, *rng.integers(1, 300, 8)]]
    calls = [c for c, _ in cases]
    assert_matches(run(harness, calls), calls, [w for _, w in cases])


def softmax_reference(x: np.ndarray, mult: int, shift: int, diff_min: int) -> np.ndarray:
    """TFLite's int8 softmax (output scale 1/256, zero point -128) with fixedpoint.py's
    fixed-point exp and reciprocal, one row at a time."""
    ar = PyArith()
    out = np.empty(x.shape, dtype=np.int64)
    for r, row in enumerate(x.astype(np.int64)):
        diffs = [int(v) - int(row.max()) for v in row]
        exps = [exp_on_negative_values(ar, ar.srdhm(d * (1 << shift), mult)) for d in diffs]
        total = sum(ar.rdbp(e, 12) for e, d in zip(exps, diffs, strict=True) if d >= diff_min)
        headroom = 32 - total.bit_length()
        scale = one_over_one_plus_x(ar, (total << headroom) - (1 << 31))
        over = 12 - headroom
        for c, (e, d) in enumerate(zip(exps, diffs, strict=True)):
            value = ar.rdbp(ar.srdhm(scale, e), over + 31 - 8) - 128
            out[r, c] = min(max(value, -128), 127) if d >= diff_min else -128
    return out.reshape(-1)


def test_softmax_bit_exact(harness):
    rng = np.random.default_rng(17)
    calls, expected = [], []
    for rows, size, scale in [(1, 10, 0.1), (3, 7, 0.05), (2, 33, 0.25), (4, 1, 0.1),
                              (1, 200, 0.02), (2, 16, 0.9), (5, 12, 0.0039)]:
        x = rng.integers(-128, 128, (rows, size), dtype=np.int8)
        mult, shift, diff_min = softmax_params(scale)
        calls.append(Call("softmax", [rows, size, mult, shift, diff_min], [x], rows * size))
        expected.append(softmax_reference(x, mult, shift, diff_min))
    # the longest row the driver takes, all equal: the sum of exponentials at its largest
    x = np.full((1, 255), 17, dtype=np.int8)
    mult, shift, diff_min = softmax_params(0.1)
    calls.append(Call("softmax", [1, 255, mult, shift, diff_min], [x], 255))
    expected.append(softmax_reference(x, mult, shift, diff_min))
    assert_matches(run(harness, calls), calls, expected)


def test_bad_arguments_fail_with_a_message(harness):
    rng = np.random.default_rng(18)
    good = random_conv(rng, False, in_hw=(5, 5), in_c=2, k_hw=(3, 3))
    calls, wants = [], []

    def bad(case: Call, changes: dict[int, int], want: str):
        scalars = list(case.scalars)
        for index, value in changes.items():
            scalars[index] = value
        calls.append(Call(case.op, scalars, case.arrays, case.out_len))
        wants.append(want)

    conv = good.call()
    bad(conv, {3: 2}, "conv2d: the output size does not follow")  # out_h 5 -> 2
    bad(conv, {8: 0}, "conv2d: the output size does not follow")  # stride 0
    bad(conv, {10: 3}, "conv2d: the output size does not follow")  # pad_top 3 > k_h - 1
    bad(conv, {14: 128}, "conv2d: a zero point outside [-128, 127]")
    bad(conv, {16: 50, 17: 10}, "conv2d: an activation range")  # act_min > act_max
    bad(conv, {2: 0}, "conv2d: a dimension out of range")  # in_c 0
    dw = random_conv(rng, True, in_hw=(5, 5), in_c=3, k_hw=(3, 3), multiplier=2).call()
    bad(dw, {2: 4}, "depthwise_conv2d: out_c is not a multiple of in_c")  # 6 / 4
    dense, _ = dense_case(rng, 1, 8, 4, True)
    dense.arrays[4] = np.array([-3, 31, -3, -3], dtype=np.int32)
    calls.append(dense)
    wants.append("dense: a negative multiplier or a shift outside [-31, 30]")
    calls.append(Call("softmax", [1, 4, 1 << 30, 32, -10],
                      [np.zeros(4, dtype=np.int8)], 4))
    wants.append("softmax: a negative multiplier or diff_min, or a shift outside [0, 31]")
    calls.append(Call("add", [0, 0, 1 << 30, -1, 0, 1 << 30, -1, 20, 0, 1 << 30, -1, -128, 127],
                      [np.zeros(1, dtype=np.int8)] * 2, 1))
    wants.append("add: an empty tensor")
    calls.append(Call("add", [1, 0, 1 << 30, -1, 0, 1 << 30, 0, 23, 0, 1 << 30, -1, -128, 127],
                      [np.zeros(1, dtype=np.int8)] * 2, 1))
    wants.append("add: left shifts that would overflow int32")
    calls.append(Call("softmax", [1, 256, 1 << 30, 20, -10],
                      [np.zeros(256, dtype=np.int8)], 256))
    wants.append("softmax: a dimension out of range")
    results = run(harness, calls)
    for res, want in zip(results, wants, strict=True):
        assert res.status == 1, res.message  # MTVG_CMSIS_NN_EARG
        assert res.message.startswith("cmsis-nn: " + want), res.message


def test_small_scratch_fails_with_the_needed_size(harness_dir):
    """A call needing more scratch than MTVG_CMSIS_NN_SCRATCH_BYTES fails, names both sizes,
    and writes nothing; calls needing less still run."""
    exe = build_harness(harness_dir, 64)
    rng = np.random.default_rng(19)
    big = random_conv(rng, False, in_hw=(5, 5), in_c=8, k_hw=(3, 3))  # 4 * 72 = 288 bytes
    small = random_conv(rng, False, in_hw=(5, 5), in_c=1, k_hw=(3, 3))  # 4 * 12 = 48 bytes
    one = random_conv(rng, False, in_hw=(4, 4), in_c=16, k_hw=(1, 1))  # 0 bytes
    res = run(exe, [big.call(), small.call(), one.call()])
    assert res[0].status == 2  # MTVG_CMSIS_NN_ESCRATCH
    assert res[0].message == ("cmsis-nn: conv2d: scratch buffer of 288 bytes needed, 64 "
                              "available; build with -DMTVG_CMSIS_NN_SCRATCH_BYTES=288")
    assert not res[0].output.any()
    assert_matches(res[1:], [small, one], [small.reference(), one.reference()])
    counters = raw_lines(exe, [big.call(), small.call(), Call("counters", [], [], 0)])[-1]
    assert "cmsis-nn.conv2d_calls=1 " in counters  # the refused call never ran
    assert "cmsis-nn.scratch_bytes=64 " in counters
    assert "cmsis-nn.scratch_peak_bytes=288 " in counters


# ---- the scratch bounds the header documents ---------------------------------------------

def _align(x: int, n: int) -> int:
    return -(-x // n) * n


def scratch_bound(op: str, core: str, *, in_c: int, out_c: int, k_h: int, k_w: int,
                  out_w: int, pad_left: int, dilation: tuple[int, int] = (1, 1),
                  pad_top: int = 0, stride: tuple[int, int] = (1, 1)) -> int:
    """Bytes of scratch an op needs at most on `core` ("plain": M0/M3/host, "dsp":
    M4/M7/M33, "mve": M55): the formulas of mtvg_cmsis_nn.h."""
    del out_w, pad_top, stride  # the bounds do not depend on them
    if op == "conv2d":
        k = k_h * k_w * in_c
        if core == "mve":
            return max(4 * _align(k, 16), (k_w + pad_left) * in_c)
        return 4 * _align(k, 4)
    if op == "depthwise":
        taps = k_h * k_w
        if core == "plain":
            return 0
        if core == "dsp":
            return 2 * in_c * taps
        to_conv = max(4 * _align(taps, 16), k_w + pad_left) + taps * out_c
        return max(496 * taps, to_conv if in_c == 1 < out_c else 0)
    if op == "dense":  # MVE's kernel sums come from the export, not the scratch
        return 0
    if op == "avgpool":
        return 4 * in_c if core == "dsp" else 0
    return 0


def test_scratch_bounds_cover_cmsis_nn_needs(harness):
    """CMSIS-NN's buffer-size functions for the plain, DSP and MVE builds (callable on the
    host) never exceed the bounds in mtvg_cmsis_nn.h, on many shapes; on the plain build
    the conv bound is exact outside the 1x1 kernels."""
    rng = np.random.default_rng(20)
    shapes = []
    for _ in range(300):
        k = (int(rng.choice([1, 1, 2, 3, 5, 7])), int(rng.choice([1, 1, 2, 3, 5, 7])))
        stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        dil = (int(rng.choice([1, 1, 2])), int(rng.choice([1, 1, 2])))
        in_hw = (int(rng.choice([1, 1, 4, 9, 16])), int(rng.integers(max(1, k[1] * dil[1]), 20)))
        in_hw = (max(in_hw[0], (k[0] - 1) * dil[0] + 1), in_hw[1])
        in_c = int(rng.choice([1, 1, 2, 3, 4, 8, 13, 32]))
        mult = int(rng.choice([1, 1, 2, 4, 8, 16]))
        same = bool(rng.integers(2))
        (oh, pt), (ow, pl) = (axis(rng, n, kk, s, d, same) for n, kk, s, d in
                              zip(in_hw, k, stride, dil, strict=True))
        shapes.append((in_hw, in_c, in_c * mult, k, stride, (pt, pl), dil, (oh, ow)))
    calls = [Call("sizes", [*in_hw, in_c, *out_hw, out_c, *k, *stride, *pad, *dil], [], 0)
             for in_hw, in_c, out_c, k, stride, pad, dil, out_hw in shapes]
    lines = raw_lines(harness, calls)
    for (_in_hw, in_c, out_c, k, stride, pad, dil, out_hw), line in zip(shapes, lines,
                                                                       strict=True):
        sizes = dict(zip([f"{op}_{core}" for op in ("conv2d", "depthwise", "dense", "avgpool")
                          for core in ("plain", "dsp", "mve")], map(int, line.split()),
                         strict=True))
        geometry = dict(in_c=in_c, out_c=out_c, k_h=k[0], k_w=k[1], out_w=out_hw[1],
                        pad_left=pad[1], pad_top=pad[0], stride=stride, dilation=dil)
        # dense on MVE wants its kernel sums in the buffer: the driver passes the export's
        assert sizes.pop("dense_mve") == 4 * out_c
        for name, need in sizes.items():
            op, core = name.rsplit("_", 1)
            bound = scratch_bound(op, core, **geometry)
            assert need <= bound, (name, need, bound, geometry)
        if k != (1, 1):
            assert sizes["conv2d_plain"] == scratch_bound("conv2d", "plain", **geometry)


# ---- cross-compiling for Cortex-M ---------------------------------------------------------

CORES = {
    "cortex-m0plus": ["-mcpu=cortex-m0plus", "-mfloat-abi=soft"],
    "cortex-m3": ["-mcpu=cortex-m3", "-mfloat-abi=soft"],
    "cortex-m4": ["-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"],
    "cortex-m7": ["-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard"],
    "cortex-m33": ["-mcpu=cortex-m33", "-mfloat-abi=soft"],
    "cortex-m55": ["-mcpu=cortex-m55", "-mfloat-abi=hard"],
}
LINK_CHECK = r"""
#include "mtvg_cmsis_nn.h"
static void emit(const char* a, const char* n, uint64_t v) { (void)a; (void)n; (void)v; }
static int8_t x[64], y[64];
static int32_t b[4], m[4], s[4];
int main(void) {
  int32_t st = mtvg_cmsis_nn_conv2d_s8(x, x, b, m, s, y, 4, 4, 1, 4, 4, 1, 1, 1, 1, 1, 0, 0,
                                       1, 1, 0, 0, -128, 127);
  st |= mtvg_cmsis_nn_depthwise_conv2d_s8(x, x, b, m, s, y, 4, 4, 1, 4, 4, 1, 1, 1, 1, 1, 0, 0,
                                          1, 1, 0, 0, -128, 127);
  st |= mtvg_cmsis_nn_dense_s8(x, x, b, m, s, b, y, 1, 4, 4, 0, 0, -128, 127);
  st |= mtvg_cmsis_nn_avgpool_s8(x, y, 4, 4, 1, 2, 2, 2, 2, 2, 2, 0, 0, -128, 127);
  st |= mtvg_cmsis_nn_maxpool_s8(x, y, 4, 4, 1, 2, 2, 2, 2, 2, 2, 0, 0, -128, 127);
  st |= mtvg_cmsis_nn_add_s8(x, x, y, 4, 0, 1, 0, 0, 1, 0, 20, 0, 1, 0, -128, 127);
  st |= mtvg_cmsis_nn_softmax_s8(x, y, 1, 4, 1 << 30, 1, -10);
  mtvg_cmsis_nn_counters(emit);
  return (int)st;
}
"""


# The QEMU tests below build the driver with STRICT for M3, M4, M7, M33 and M55 and link it
# against CMSIS-NN; this test covers the cores no QEMU board here has (suite time).
@pytest.mark.parametrize("core", [c for c in CORES if c == "cortex-m0plus"])
def test_driver_cross_compiles_and_links(tmp_path, core):
    """The driver builds with -Werror for each core (plain C on M0+/M3, DSP on M4/M7/M33, MVE
    on M55) and links against CMSIS-NN's sources built as the project builds them (-O2,
    warnings off)."""
    tree = cmsis_nn_tree()
    cc = "arm-none-eabi-gcc"
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed")
    flags = ["-mthumb", *CORES[core], "-O2", f"-I{tree / 'Include'}", f"-I{COMMON / 'include'}",
             f"-I{DRIVER}", "-ffunction-sections", "-fdata-sections"]
    objs = []
    for src in [DRIVER / "mtvg_cmsis_nn.c", COMMON / "src" / "accel.c"]:
        obj = tmp_path / f"{src.stem}.o"
        subprocess.run([cc, *STRICT, *flags, "-c", str(src), "-o", str(obj)], check=True)
        objs.append(str(obj))
    (tmp_path / "main.c").write_text(LINK_CHECK)
    subprocess.run([cc, *STRICT, *flags, "-c", str(tmp_path / "main.c"), "-o",
                    str(tmp_path / "main.o")], check=True)
    lib_objs = []
    for src in cmsis_sources(tree):
        obj = tmp_path / f"cmsis_{src.stem}.o"
        subprocess.run([cc, "-w", *flags, "-c", str(src), "-o", str(obj)], check=True)
        lib_objs.append(str(obj))
    subprocess.run(["arm-none-eabi-ar", "rcs", str(tmp_path / "libcmsis_nn.a"), *lib_objs],
                   check=True)
    elf = tmp_path / "check.elf"
    subprocess.run([cc, "-mthumb", *CORES[core], "--specs=nosys.specs", "-Wl,--gc-sections",
                    str(tmp_path / "main.o"), *objs, str(tmp_path / "libcmsis_nn.a"), "-o",
                    str(elf)], check=True)
    symbols = subprocess.run(["arm-none-eabi-nm", str(elf)], capture_output=True, text=True,
                             check=True).stdout
    for name in ["arm_convolve_wrapper_s8", "arm_depthwise_conv_wrapper_s8",
                 "arm_fully_connected_s8", "arm_avgpool_s8", "arm_max_pool_s8",
                 "arm_elementwise_add_s8", "arm_softmax_s8"]:
        assert f" {name}\n" in symbols
    # the MVE kernels' dense kernel sums come from the export: no call computes them
    assert " arm_vector_sum_s8\n" not in symbols


# ---- the DSP and MVE kernels, run in QEMU --------------------------------------------------

# One board per CMSIS-NN code path: plain C (M3), DSP (M4), MVE (M55). The M7 and M33 take
# the same DSP C as the M4 (left out for suite time); their projects run end to end in
# test_export.py and test_end_to_end.py.
QEMU_CORES = {"qemu-mps2-an385": "plain", "qemu-mps2-an386": "dsp", "qemu-mps3-an547": "mve"}

FIRMWARE_MAIN = DISPATCH + r"""
#include <string.h>
#include "mtvg/platform.h"
#include "cases.h"

static int8_t out[CASE_OUT_MAX];

static void emit(const char* accel, const char* name, uint64_t value) {
  printf("counter %s.%s %lu\n", accel, name, (unsigned long)value);
}

/* Runs every case, compares with TFLite's outputs computed by the test, prints one line a
 * case (status, outputs that differ, largest difference, timer ticks) on semihosting. */
int main(void) {
  mtvg_platform_init();
  int failed = 0;
  for (int i = 0; i < CASE_COUNT; ++i) {
    const struct test_case* c = &cases[i];
    memset(out, 0, sizeof(out));
    mtvg_accel_clear();
    uint64_t start = mtvg_timer_ticks();
    int32_t st = mtvg_accel_check(run_case(c->op, c->scalars, c->arrays, out));
    uint64_t ticks = mtvg_timer_ticks() - start;
    long differ = 0, worst = 0;
    for (long j = 0; j < c->out_len; ++j) {
      long d = (long)out[j] - (long)c->want[j];
      d = d < 0 ? -d : d;
      differ += d != 0;
      worst = d > worst ? d : worst;
    }
    printf("case %d status %ld differ %ld worst %ld ticks %lu |%s\n", i, (long)st, differ, worst,
           (unsigned long)ticks, mtvg_accel_message());
    failed += st != 0 || differ != 0;
  }
  mtvg_cmsis_nn_counters(emit);
  printf("done %d\n", failed);
  fflush(stdout);
  return failed != 0;
}
"""


def _c_values(a: np.ndarray) -> str:
    return ", ".join(map(str, a.reshape(-1).tolist()))


def embed_cases(calls: list[Call], expected: list[np.ndarray]) -> str:
    """The cases as C constants for the firmware (cases.h)."""
    lines = ["#include <stdint.h>", "struct test_case { long op; const int32_t* scalars; "
             "const void* arrays[MAX_ARRAYS]; long out_len; const int8_t* want; };"]
    rows = []
    for i, (call, want) in enumerate(zip(calls, expected, strict=True)):
        lines.append(f"static const int32_t s{i}[] = {{{_c_values(np.array(call.scalars))}}};")
        names = []
        for j, a in enumerate(call.arrays):
            if a is None or a.size == 0:
                names.append("NULL")
                continue
            ctype = "int8_t" if a.dtype == np.int8 else "int32_t"
            lines.append(f"static const {ctype} a{i}_{j}[] = {{{_c_values(a)}}};")
            names.append(f"a{i}_{j}")
        lines.append(f"static const int8_t w{i}[] = {{{_c_values(want.astype(np.int8))}}};")
        rows.append(f"  {{{OPS[call.op]}, s{i}, {{{', '.join(names)}}}, {call.out_len}, w{i}}},")
    lines += ["static const struct test_case cases[] = {", *rows, "};",
              f"#define CASE_COUNT {len(calls)}",
              f"#define CASE_OUT_MAX {max(c.out_len for c in calls)}"]
    return "\n".join(lines) + "\n"


def call_bound(call: Call, core: str) -> int:
    """scratch_bound for one call."""
    s = call.scalars
    if call.op in ("conv2d", "depthwise"):
        return scratch_bound(call.op, core, in_c=s[2], out_c=s[5], k_h=s[6], k_w=s[7],
                             out_w=s[4], pad_left=s[11])
    if call.op == "dense":
        return scratch_bound("dense", core, in_c=s[1], out_c=s[2], k_h=1, k_w=1, out_w=1,
                             pad_left=0)
    if call.op == "avgpool":
        return scratch_bound("avgpool", core, in_c=s[2], out_c=s[2], k_h=s[5], k_w=s[6],
                             out_w=s[4], pad_left=s[10])
    return 0


def one_by_n_cases(rng) -> list[Conv]:
    """1xN kernels on one-row inputs (CMSIS-NN's arm_convolve_1_x_n_s8 on MVE): every width,
    kernel, stride and padding of a small grid, and a padding TFLite's SAME would not split
    so (all before the input: pad_left 0, two columns after)."""
    cases = []
    for in_w in range(7, 13):
        for k in range(2, 6):
            for stride in (1, 2, 3):
                for same in (True, False):
                    cases.append(random_conv(rng, False, in_hw=(1, in_w), in_c=2 if stride == 2
                                             else 4, k_hw=(1, k), stride=(1, stride),
                                             same=same, out_c=3))
    odd = random_conv(rng, False, in_hw=(1, 8), in_c=4, k_hw=(1, 3), out_c=3)
    odd.out_hw, odd.pad = (1, 8), (0, 0)
    return [*cases, odd]


def firmware_cases() -> tuple[list[Call], list[np.ndarray]]:
    """The host tests' cases, plus shapes that reach the MVE kernels' block loops."""
    rng = np.random.default_rng(30)
    convs = [*conv_cases(rng), *depthwise_cases(rng),
             random_conv(rng, False, in_hw=(5, 5), in_c=19, k_hw=(3, 3), out_c=6),
             random_conv(rng, True, in_hw=(3, 4), in_c=130, k_hw=(3, 3)),
             random_conv(rng, True, in_hw=(6, 6), in_c=1, k_hw=(3, 3), multiplier=3),
             # one input channel: MVE runs these as convolutions (the 1xN kernel at stride 4)
             random_conv(rng, True, in_hw=(1, 13), in_c=1, k_hw=(1, 5), stride=(1, 4),
                         multiplier=4),
             random_conv(rng, True, in_hw=(1, 13), in_c=1, k_hw=(1, 5), stride=(1, 4),
                         multiplier=3, same=False),
             random_conv(rng, True, in_hw=(1, 14), in_c=1, k_hw=(1, 3), stride=(1, 4),
                         multiplier=2)]
    convs += one_by_n_cases(rng)
    calls = [c.call() for c in convs]
    expected = [c.reference() for c in convs]
    others = [dense_case(rng, 1, 16, 4, False), dense_case(rng, 2, 37, 10, True),
              dense_case(rng, 1, 130, 7, True), dense_case(rng, 3, 64, 12, False),
              pool_case(rng, "avgpool", (7, 7), 4, (3, 3), (2, 2), True),
              pool_case(rng, "avgpool", (9, 9), 20, (3, 3), (1, 1), True),
              pool_case(rng, "maxpool", (8, 8), 3, (2, 2), (2, 2), False),
              pool_case(rng, "maxpool", (7, 6), 17, (3, 2), (2, 1), True),
              add_case(rng, 7), add_case(rng, 64), add_case(rng, 257)]
    for call, want in others:
        calls.append(call)
        expected.append(want)
    for rows, size, scale in [(3, 7, 0.05), (2, 33, 0.25), (1, 200, 0.02), (1, 255, 0.1)]:
        x = rng.integers(-128, 128, (rows, size), dtype=np.int8)
        if size == 255:
            x[:] = 17  # the largest sum of exponentials the driver takes
        mult, shift, diff_min = softmax_params(scale)
        calls.append(Call("softmax", [rows, size, mult, shift, diff_min], [x], rows * size))
        expected.append(softmax_reference(x, mult, shift, diff_min))
    return calls, expected


@pytest.mark.slow
@pytest.mark.qemu
@pytest.mark.parametrize("board_name", list(QEMU_CORES))
def test_cmsis_nn_kernels_bit_exact_in_qemu(tmp_path, board_name):
    """The driver with CMSIS-NN's DSP (M4/M7/M33) and MVE (M55) kernels, in QEMU, against
    the same TFLite references; the scratch buffer is exactly the largest bound of the
    header's formulas for the core, so a bound too small would fail a call."""
    from tests.bare_firmware import build_and_run
    from tests.conftest import require_board_tools

    tree = cmsis_nn_tree()
    require_board_tools(board_name)
    core = QEMU_CORES[board_name]
    calls, expected = firmware_cases()
    scratch = max(4, *(call_bound(c, core) for c in calls))
    (tmp_path / "cases.h").write_text(embed_cases(calls, expected))
    (tmp_path / "main.c").write_text(FIRMWARE_MAIN)
    proc = build_and_run(
        board_name, tmp_path,
        [tmp_path / "main.c", DRIVER / "mtvg_cmsis_nn.c", COMMON / "src" / "accel.c"],
        [f"-I{tree / 'Include'}", f"-I{COMMON / 'include'}", f"-I{DRIVER}", f"-I{tmp_path}",
         f"-DMTVG_CMSIS_NN_SCRATCH_BYTES={scratch}"], cmsis_sources(tree))
    lines = proc.stderr.splitlines()
    results = [line.split() for line in lines if line.startswith("case ")]
    assert len(results) == len(calls), proc.stderr[-3000:]
    wrong = [f"{call.op} {call.scalars}: {' '.join(fields)}"
             for fields, call in zip(results, calls, strict=True)
             if int(fields[3]) != 0 or int(fields[5]) != 0]
    assert not wrong, "\n".join(wrong)
    assert f"counter cmsis-nn.scratch_bytes {scratch}" in lines
    assert proc.returncode == 0 and "done 0" in lines
