"""The `arm-dsp` accelerator's C kernels (generator/accel/arm_dsp/driver) against TFLite.

The driver is built with the host gcc under ASan/UBSan (its portable versions of SXTAB16,
SXTB16 and SMLAD) into a program that reads cases on stdin; every output is compared bit for
bit with the numpy reference of TFLite's kernels in tests/test_cmsis_nn_glue.py, on the same
random shapes (padding, stride 2, dilation, per-tensor and per-channel scales, left shifts),
with the weights packed by the plugin's own layout functions. The driver is also
cross-compiled with -Werror for the DSP cores; the QEMU boards run it end to end in
tests/test_accelerators.py.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from generator.accel.arm_dsp import conv_scratch, depthwise_scratch, layout
from tests.conftest import REPO
from tests.test_cmsis_nn_glue import (
    SANITIZE,
    STRICT,
    Conv,
    conv_cases,
    depthwise_cases,
    random_conv,
)

DRIVER = REPO / "generator" / "accel" / "arm_dsp" / "driver"
COMMON = REPO / "templates" / "common"

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "mtvg_arm_dsp.h"

/* Reads cases: op (0 conv2d, 1 depthwise, 2 Helium depthwise, 3 Helium 1x1), 20 scalars
 * (conv2d's order; depthwise skips out_c and weight_bits), five arrays (packed weights as
 * uint32, bias, multiplier, shift, narrow_params as int32; the 1x1 kernel's records in the
 * last) with their lengths, the input (int8) and the output length. Prints the status and
 * outputs. */
static int rd(long* v) { return scanf("%ld", v) == 1; }

int main(void) {
  long op, v, n;
  while (rd(&op)) {
    int32_t s[20];
    for (int i = 0; i < 20; ++i) { if (!rd(&v)) return 2; s[i] = (int32_t)v; }
    int32_t* arr[5];
    for (int a = 0; a < 5; ++a) {
      if (!rd(&n)) return 2;
      arr[a] = malloc((size_t)n * 4u);
      for (long i = 0; i < n; ++i) { if (!rd(&v)) return 2; arr[a][i] = (int32_t)v; }
    }
    if (!rd(&n)) return 2;
    int8_t* in = malloc((size_t)n);
    for (long i = 0; i < n; ++i) { if (!rd(&v)) return 2; in[i] = (int8_t)v; }
    if (!rd(&n)) return 2;
    int8_t* out = calloc((size_t)n, 1);
    mtvg_accel_clear();
    const uint32_t* w = (const uint32_t*)arr[0];
    int32_t st = op == 3
        ? mtvg_arm_dsp_pointwise_helium_s8(in, (const int8_t*)w, arr[4], out, s[3] * s[4], s[2],
                                           s[5], s[15], s[16], s[17], s[19])
        : op == 2
        ? mtvg_arm_dsp_depthwise_helium_s8(in, (const int8_t*)w, arr[1], arr[2], arr[3], arr[4],
                                           out, s[0], s[1], s[2], s[3], s[4], s[6], s[7], s[8],
                                           s[9], s[10], s[11], s[12], s[13], s[14], s[15], s[16],
                                           s[17], s[19])
        : op == 0
        ? mtvg_arm_dsp_conv2d_s8(in, w, arr[1], arr[2], arr[3], arr[4], out, s[0], s[1], s[2], s[3],
                                 s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12],
                                 s[13], s[14], s[15], s[16], s[17], s[18], s[19])
        : mtvg_arm_dsp_depthwise_conv2d_s8(in, w, out, s[0], s[1], s[2], s[3], s[4], s[6], s[7],
                                           s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15],
                                           s[16], s[17], s[19]);
    mtvg_accel_check(st);
    printf("%ld", (long)st);
    for (long i = 0; i < n; ++i) printf(" %d", out[i]);
    printf("|%s\n", mtvg_accel_message());
    free(out);
    free(in);
    for (int a = 0; a < 5; ++a) free(arr[a]);
  }
  return 0;
}
"""


def build(dest: Path, scratch_bytes: int, sanitize: bool = True) -> Path:
    """The harness with the driver's scratch buffer of `scratch_bytes` (the harness and
    accel.c compiled once per folder), under ASan/UBSan unless `sanitize` is False."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    flags = [*STRICT, f"-I{COMMON / 'include'}", f"-I{DRIVER}",
             *(["-O1", "-g", *SANITIZE] if sanitize else ["-O0"])]
    kind = "asan" if sanitize else "plain"
    common = [dest / f"harness-{kind}.o", dest / f"accel-{kind}.o"]
    if not all(o.exists() for o in common):
        (dest / "harness.c").write_text(HARNESS)
        for src, obj in zip((dest / "harness.c", COMMON / "src" / "accel.c"), common,
                            strict=True):
            subprocess.run(["gcc", *flags, "-c", str(src), "-o", str(obj)], check=True)
    exe = dest / f"harness-{kind}-{scratch_bytes}"
    subprocess.run(["gcc", *flags, f"-DMTVG_ARM_DSP_SCRATCH_BYTES={scratch_bytes}",
                    str(DRIVER / "mtvg_arm_dsp.c"), *map(str, common), "-o", str(exe)],
                   check=True)
    return exe


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    return build(tmp_path_factory.mktemp("arm_dsp"), 1 << 16)


def encode_pointwise(case: Conv, narrow: bool) -> str:
    """A 1x1 case for the Helium 1x1 kernel: TFLite's weights padded to whole words, the
    per-channel records (folded bias, multiplier, shift, zero point) as the plugin makes
    them."""
    call = case.call()
    out_c, depth = case.out_c, case.x.shape[2]
    rows = case.w.reshape(out_c, depth)
    file_bias = case.bias if case.bias is not None else np.zeros(out_c, np.int32)
    bias = layout.fold_input_offset(rows.T, file_bias, case.zp_in, depth)
    narrow = narrow and layout.narrow(case.w, file_bias, case.shift, False)
    records = np.stack([bias, case.mult, case.shift, np.full(out_c, case.zp_out)], axis=1)
    words = np.zeros(-(-rows.size // 4) * 4, np.int8)
    words[:rows.size] = rows.reshape(-1)
    arrays = [words.view(np.int32), *([np.zeros(0, np.int32)] * 3),
              records.astype(np.int32).reshape(-1)]
    parts = ["3", *map(str, call.scalars), "8", str(int(narrow))]
    for a in arrays:
        parts += [str(a.size), *map(str, a.tolist())]
    parts += [str(case.x.size), *map(str, case.x.reshape(-1).tolist()), str(call.out_len)]
    return " ".join(parts)


def encode(case: Conv, bits: int, narrow: bool, helium: bool = False) -> str:
    """The case as the harness reads it, its weights packed as the plugin packs them
    (`helium`: the Helium kernels', 8-bit weights padded to whole words; a 1x1 convolution
    goes to the Helium 1x1 kernel); `narrow` is used only where the plugin's bound allows
    it."""
    if helium and not case.depthwise:
        return encode_pointwise(case, narrow)
    call = case.call()
    out_c = case.out_c
    bias = case.bias if case.bias is not None else np.zeros(out_c, np.int32)
    if case.depthwise:
        taps = case.k_hw[0] * case.k_hw[1]
        bias = layout.fold_input_offset(case.w, bias, case.zp_in, taps)
        narrow = narrow and layout.narrow(case.w, bias, case.shift, True)
        packed, count = layout.depthwise_stream(case.w, bias, case.mult, case.shift,
                                                case.zp_out, narrow), out_c
        if helium:
            words = np.zeros(-(-case.w.size // 4) * 4, np.int8)
            words[:case.w.size] = case.w.reshape(-1)
            packed = words.view(np.uint32)
    else:
        packed, count = layout.conv_weights(case.w, bits), out_c + out_c % 2
        narrow = narrow and layout.narrow(case.w, bias, case.shift, False)
    channels = [layout.pad_channels(a.astype(np.int32), count)
                for a in (bias, case.mult, case.shift)]
    channels.append(layout.narrow_params(channels[1], channels[2], case.zp_out, narrow))
    if helium:
        channels = [a[layout.helium_order(count)] for a in channels]
    channels = [a.reshape(-1) for a in channels]
    arrays = [packed.view(np.int32), *channels]
    parts = ["2" if helium else "1" if case.depthwise else "0", *map(str, call.scalars),
             str(bits), str(int(narrow))]
    for a in arrays:
        parts += [str(a.size), *map(str, a.reshape(-1).tolist())]
    parts += [str(case.x.size), *map(str, case.x.reshape(-1).tolist()), str(call.out_len)]
    return " ".join(parts)


def run_cases(exe: Path, cases: list[Conv], bits: int = 16, narrow: bool = True,
              helium: bool = False) -> list[tuple[int, np.ndarray, str]]:
    text = "\n".join(encode(c, bits, narrow, helium) for c in cases) + "\n"
    proc = subprocess.run([str(exe)], input=text, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = []
    for line in proc.stdout.splitlines():
        values, _, message = line.partition("|")
        nums = [int(v) for v in values.split()]
        out.append((nums[0], np.array(nums[1:], dtype=np.int64), message))
    assert len(out) == len(cases)
    return out


def assert_bit_exact(exe: Path, cases: list[Conv], bits: int, narrow: bool,
                     helium: bool = False) -> None:
    for i, ((status, got, message), case) in enumerate(
            zip(run_cases(exe, cases, bits, narrow, helium), cases, strict=True)):
        want = case.reference()
        assert status == 0, f"case {i}: {message}"
        diff = np.flatnonzero(got != want)
        assert diff.size == 0, (f"case {i} ({case.x.shape} k{case.k_hw} s{case.stride} "
                                f"p{case.pad} d{case.dilation}): {diff.size} of {want.size} "
                                f"differ, first at {diff[0]}: {got[diff[0]]} vs {want[diff[0]]}")


def kws_like_cases(rng) -> list[Conv]:
    """The shapes kws and MobileNet-style models run: a 10x4 stride-2 first layer on one
    channel, 3x3 depthwise with pad 1 on 64 channels, 1x1 over 64, odd channel counts."""
    return [
        random_conv(rng, False, in_hw=(49, 10), in_c=1, k_hw=(10, 4), stride=(2, 2),
                    out_c=64),
        random_conv(rng, False, in_hw=(5, 5), in_c=64, k_hw=(1, 1), out_c=64),
        random_conv(rng, False, in_hw=(3, 5), in_c=12, k_hw=(1, 1), out_c=7),
        random_conv(rng, False, in_hw=(4, 3), in_c=6, k_hw=(1, 1), out_c=5),
        random_conv(rng, True, in_hw=(25, 5), in_c=64, k_hw=(3, 3)),
        random_conv(rng, True, in_hw=(6, 6), in_c=10, k_hw=(3, 3), stride=(2, 2)),
    ]


def written_out_cases(rng) -> list[Conv]:
    """The shapes the written-out loops take, each with the full int8 range and a clamped
    one: 3x3 depthwise layers of whole groups of four channels (stride 1 and 2, as
    MobileNet's), a 1x1 depthwise layer, convolutions of even channel counts over pixel
    pairs (the output stage in the loop)."""
    shapes = [
        dict(depthwise=True, in_hw=(7, 6), in_c=8, k_hw=(3, 3)),
        dict(depthwise=True, in_hw=(8, 8), in_c=16, k_hw=(3, 3), stride=(2, 2)),
        dict(depthwise=True, in_hw=(4, 5), in_c=12, k_hw=(1, 1)),
        dict(depthwise=False, in_hw=(5, 3), in_c=8, k_hw=(1, 1), out_c=16),
        dict(depthwise=False, in_hw=(6, 6), in_c=3, k_hw=(3, 3), stride=(2, 2), out_c=8),
    ]
    return [dataclasses.replace(random_conv(rng, **shape), act=act)
            for shape in shapes for act in ((-128, 127), (-20, 90))]


def test_layouts_place_each_weight_where_the_header_says():
    w = np.arange(3 * 1 * 1 * 5, dtype=np.int8).reshape(3, 1, 1, 5)  # out 3, K 5
    words = layout.conv_weights(w, 8)
    # K padded to 8 (two groups), out_c to 4 (two pairs): 2 pairs x 2 groups x 2 words
    assert words.size == 8
    as_bytes = words.view(np.int8).reshape(2, 2, 2, 4)  # pair, group, channel, k
    assert as_bytes[0, 0, 1].tolist() == [5, 6, 7, 8]  # channel 1, k 0..3
    assert as_bytes[0, 1, 0].tolist() == [4, 0, 0, 0]  # channel 0, k 4 then zeros
    assert as_bytes[1, 0, 1].tolist() == [0, 0, 0, 0]  # channel 3 does not exist
    halves = layout.conv_weights(w, 16).view(np.int16).reshape(2, 2, 2, 4)
    assert halves[0, 0, 1].tolist() == [5, 7, 6, 8]  # (k0, k2), (k1, k3)
    d = np.arange(3 * 3 * 6, dtype=np.int8).reshape(3, 3, 6)  # 9 taps, 6 channels
    halves = layout.depthwise_weights(d, 9)  # group, tap, halves
    assert halves[0, 4].tolist() == [d[1, 1, 0], d[1, 1, 2], d[1, 1, 1], d[1, 1, 3]]
    assert halves[1, 8].tolist() == [d[2, 2, 4], 0, d[2, 2, 5], 0]  # channels 6, 7: none
    bias = np.arange(6, dtype=np.int32) - 3
    mult = np.full(6, 1 << 30, np.int32)
    shift = np.array([-1, -2, -3, -4, -5, -6], np.int32)
    for narrow, scale in ((False, 1), (True, 2)):
        stream = layout.depthwise_stream(d, bias, mult, shift, -5, narrow)
        groups = stream.view(np.int32).reshape(2, 4 + 2 * 9 + 12)  # 16 + 2 taps words each
        assert groups[1, :4].tolist() == [scale * 1, scale * 2, 0, 0]  # channels 4, 5, pads
        tap4 = groups[0, 4 + 2 * 4:4 + 2 * 5].view(np.int16).tolist()
        assert tap4 == [scale * d[1, 1, i] for i in (0, 2, 1, 3)]
        records = groups[0, -12:].reshape(4, 3)
        e = 2  # channel 1's shift -2
        want = [1 << 30, (1 << (e - 1)) - 5 * (1 << e), e] if narrow else [1 << 30, -2, 0]
        assert records[1].tolist() == want


def test_narrow_bound_takes_bias_weights_and_shifts():
    w = np.full((2, 1, 1, 4), -128, np.int8)  # Σ|w| = 512 per channel: 130,560 at most
    shift = np.array([-1, -5], np.int32)
    assert layout.narrow(w, np.array([0, 0], np.int32), shift, False)
    assert not layout.narrow(w, np.array([0, (1 << 30) - 130_560], np.int32), shift, False)
    assert layout.narrow(w, np.array([0, (1 << 30) - 130_561], np.int32), shift, False)
    assert not layout.narrow(w, np.zeros(2, np.int32), np.array([-1, 0], np.int32), False)


@pytest.mark.parametrize(("bits", "narrow"), [(16, True), (8, True), (16, False)])
def test_conv2d_bit_exact(harness, bits, narrow):
    rng = np.random.default_rng(11)
    cases = conv_cases(rng) + [c for c in kws_like_cases(rng) if not c.depthwise]
    assert_bit_exact(harness, cases + [c for c in written_out_cases(rng) if not c.depthwise],
                     bits, narrow)


@pytest.mark.parametrize(("narrow", "helium"), [(True, False), (False, False), (True, True),
                                              (False, True)])
def test_depthwise_conv2d_bit_exact(harness, narrow, helium):
    rng = np.random.default_rng(12)
    cases = [c for c in depthwise_cases(rng) if c.out_c == c.x.shape[2]]
    assert len(cases) >= 10
    cases += [c for c in kws_like_cases(rng) if c.depthwise]
    assert_bit_exact(harness, cases + [c for c in written_out_cases(rng) if c.depthwise], 16,
                     narrow, helium)


def pointwise_cases(rng) -> list[Conv]:
    """1x1 convolutions for the Helium kernel: whole sixteens of input channels (its
    written-out loop) and tails, pixel counts from one to past a multiple of four."""
    shapes = [((5, 5), 64, 64), ((1, 1), 37, 9), ((1, 3), 64, 12), ((3, 5), 12, 7),
              ((4, 3), 6, 5), ((2, 2), 16, 3), ((7, 1), 48, 10), ((3, 3), 33, 4)]
    return [random_conv(rng, False, in_hw=hw, in_c=c, k_hw=(1, 1), out_c=o)
            for hw, c, o in shapes]


@pytest.mark.parametrize("narrow", [True, False])
def test_pointwise_helium_bit_exact(harness, narrow):
    """The Helium 1x1 kernel's portable C on the host (the Helium loops run in QEMU)."""
    rng = np.random.default_rng(14)
    assert_bit_exact(harness, pointwise_cases(rng), 8, narrow, helium=True)


def test_scratch_bounds_are_what_the_calls_take(tmp_path):
    """A harness with exactly the plugin's bound runs the case; one byte less fails with
    the scratch error (the words are rounded down, so less by a word). Built without the
    sanitizers: the size check is what is tested (the sanitized harness runs the rest)."""
    rng = np.random.default_rng(13)
    conv = random_conv(rng, False, in_hw=(6, 6), in_c=5, k_hw=(3, 3), out_c=3)
    dw = random_conv(rng, True, in_hw=(6, 6), in_c=6, k_hw=(3, 3))
    for case, need in ((conv, conv_scratch(45, 3)), (dw, depthwise_scratch(6, 9))):
        (status, _, _), = run_cases(build(tmp_path, need, sanitize=False), [case])
        assert status == 0
        (status, _, message), = run_cases(build(tmp_path, need - 4, sanitize=False), [case])
        assert status == 2 and "MTVG_ARM_DSP_SCRATCH_BYTES" in message


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m33", "cortex-m55"])
def test_driver_cross_compiles_with_dsp_instructions(tmp_path, cpu):
    """-Werror at -O2 with the written-out loops; at -O0 (the frame pointer kept) and with
    MTVG_ARM_DSP_PORTABLE=1 under -fno-omit-frame-pointer without them."""
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed")
    variants = {"O2": ["-O2"], "O0": ["-O0"],
                "portable": ["-O2", "-fno-omit-frame-pointer", "-DMTVG_ARM_DSP_PORTABLE=1"]}
    dumps = {}
    for name, flags in variants.items():
        obj = tmp_path / f"{name}.o"
        subprocess.run(["arm-none-eabi-gcc", *STRICT, "-Wundef", *flags, "-mthumb",
                        f"-mcpu={cpu}", f"-I{COMMON / 'include'}", "-c",
                        str(DRIVER / "mtvg_arm_dsp.c"), "-o", str(obj)], check=True)
        dumps[name] = subprocess.run(["arm-none-eabi-objdump", "-d", str(obj)],
                                     capture_output=True, text=True, check=True).stdout
    written_out = "{r8, r9, sl, fp}"  # the convolution loop's LDM of a group's pixel words
    # the 3x3 depthwise loop's LDM of a channel's output stage record; the byte-lane clamp
    depthwise_3x3, clamp = "r9!, {r4, r5, r6}", "ssub8"
    assert all(i in dumps["O2"] for i in ("smlad", "sxtab16", "sxtb16", written_out,
                                          depthwise_3x3, clamp))
    assert written_out not in dumps["portable"] and "smlad" in dumps["portable"]
    assert depthwise_3x3 not in dumps["portable"] and clamp not in dumps["portable"]


# ---- the written-out DSP loops, run in QEMU ------------------------------------------------

FIRMWARE_MAIN = r"""
#include <stdio.h>
#include <string.h>
#include "mtvg/platform.h"
#include "mtvg_arm_dsp.h"
#include "cases.h"

static int8_t out[CASE_OUT_MAX];

/* Runs every case, compares with TFLite's outputs computed by the test, prints one line a
 * case on semihosting. */
int main(void) {
  mtvg_platform_init();
  int failed = 0;
  for (int i = 0; i < CASE_COUNT; ++i) {
    const struct test_case* c = &cases[i];
    const int32_t* s = c->s;
    memset(out, 0, sizeof(out));
    mtvg_accel_clear();
    int32_t st = mtvg_accel_check(
        c->op == 3
            ? mtvg_arm_dsp_pointwise_helium_s8(c->x, (const int8_t*)c->w, c->ad, out, s[3] * s[4],
                                               s[2], s[5], s[15], s[16], s[17], s[19])
        : c->op == 2
            ? mtvg_arm_dsp_depthwise_helium_s8(c->x, (const int8_t*)c->w, c->b, c->m, c->sh, c->ad,
                                               out, s[0], s[1], s[2], s[3], s[4], s[6], s[7],
                                               s[8], s[9], s[10], s[11], s[12], s[13], s[14],
                                               s[15], s[16], s[17], s[19])
        : c->op == 0
            ? mtvg_arm_dsp_conv2d_s8(c->x, c->w, c->b, c->m, c->sh, c->ad, out, s[0], s[1], s[2],
                                     s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                                     s[12], s[13], s[14], s[15], s[16], s[17], s[18], s[19])
            : mtvg_arm_dsp_depthwise_conv2d_s8(c->x, c->w, out, s[0], s[1], s[2], s[3], s[4],
                                               s[6], s[7], s[8], s[9], s[10], s[11], s[12],
                                               s[13], s[14], s[15], s[16], s[17], s[19]));
    long differ = 0;
    for (long j = 0; j < c->out_len; ++j) {
      differ += out[j] != c->want[j];
    }
    printf("case %d status %ld differ %ld |%s\n", i, (long)st, differ, mtvg_accel_message());
    failed += st != 0 || differ != 0;
  }
  printf("done %d\n", failed);
  fflush(stdout);
  return failed != 0;
}
"""


def _values(a: np.ndarray) -> str:
    return ", ".join(map(str, a.reshape(-1).tolist()))


def embed(cases: list[tuple[Conv, int, bool, bool]]) -> str:
    """The cases, their packed arrays and TFLite's outputs as C constants (cases.h)."""
    lines = ["#include <stdint.h>",
             "struct test_case { int op; int32_t s[20]; const uint32_t* w; const int32_t* b; "
             "const int32_t* m; const int32_t* sh; const int32_t* ad; const int8_t* x; "
             "long out_len; const int8_t* want; };"]
    rows = []
    for i, (case, bits, narrow, helium) in enumerate(cases):
        fields = encode(case, bits, narrow, helium).split()
        op, scalars = int(fields[0]), fields[1:21]
        rest, arrays = fields[21:], []
        for _ in range(5):
            n = int(rest[0])
            arrays.append(rest[1:1 + n])
            rest = rest[1 + n:]
        x = rest[1:1 + int(rest[0])]
        words = np.array(arrays[0], dtype=np.int64).astype(np.int32).view(np.uint32)
        lines.append(f"static const uint32_t w{i}[] = {{{_values(words)}u}};"
                     .replace(", ", "u, "))
        for j, name in enumerate(("b", "m", "sh", "ad"), start=1):
            lines.append(f"static const int32_t {name}{i}[] = {{{', '.join(arrays[j])}}};")
        lines.append(f"static const int8_t x{i}[] = {{{', '.join(x)}}};")
        want = case.reference().astype(np.int8)
        lines.append(f"static const int8_t y{i}[] = {{{_values(want)}}};")
        rows.append(f"  {{{op}, {{{', '.join(scalars)}}}, w{i}, b{i}, m{i}, sh{i}, ad{i}, x{i}, "
                    f"{want.size}, y{i}}},")
    lines += ["static const struct test_case cases[] = {", *rows, "};",
              f"#define CASE_COUNT {len(cases)}",
              f"#define CASE_OUT_MAX {max(c[0].reference().size for c in cases)}"]
    return "\n".join(lines) + "\n"


@pytest.mark.qemu
@pytest.mark.parametrize("board_name", ["qemu-mps2-an386", "qemu-mps3-an547"])
def test_kernels_bit_exact_in_qemu(tmp_path, board_name):
    """The driver as the cores run it (the written-out LDRD/SMLAD loops, SMMULR, SSAT; on the
    M55 also the Helium depthwise and 1x1 kernels): the host tests' shapes with int16 and int8
    weights, both output stages, and one-pixel rows, against TFLite's references."""
    from generator.boards import load_board
    from tests.bare_firmware import build_and_run
    from tests.conftest import require_board_tools

    require_board_tools(board_name)
    board = load_board(board_name)
    rng = np.random.default_rng(21)
    convs = conv_cases(rng) + [c for c in kws_like_cases(rng) if not c.depthwise] + [
        random_conv(rng, False, in_hw=(1, 1), in_c=37, k_hw=(1, 1), out_c=9),  # a dense row
        random_conv(rng, False, in_hw=(1, 3), in_c=64, k_hw=(1, 1), out_c=12)]
    dws = [c for c in depthwise_cases(rng) if c.out_c == c.x.shape[2]] + \
        [c for c in kws_like_cases(rng) if c.depthwise]
    written = written_out_cases(rng)
    convs += [c for c in written if not c.depthwise]
    dws += [c for c in written if c.depthwise]
    cases = [(c, 16, True, False) for c in convs] + [(c, 8, True, False) for c in convs[:12]] + \
        [(c, 16, False, False) for c in convs[:12]] + [(c, 16, True, False) for c in dws] + \
        [(c, 16, False, False) for c in dws[:6] + written]
    if "mve" in board.features:
        cases += [(c, 16, True, True) for c in dws] + [(c, 16, False, True) for c in dws[:6]]
        ones = pointwise_cases(rng)
        cases += [(c, 8, True, True) for c in ones] + [(c, 8, False, True) for c in ones[:4]]
    (tmp_path / "cases.h").write_text(embed(cases))
    (tmp_path / "main.c").write_text(FIRMWARE_MAIN)
    scratch = max(conv_scratch(c.k_hw[0] * c.k_hw[1] * c.x.shape[2], c.out_c) for c in convs)
    scratch = max(scratch, *(depthwise_scratch(c.x.shape[2], c.k_hw[0] * c.k_hw[1])
                             for c in dws))
    proc = build_and_run(board_name, tmp_path,
                         [tmp_path / "main.c", DRIVER / "mtvg_arm_dsp.c",
                          COMMON / "src" / "accel.c"],
                         [f"-I{COMMON / 'include'}", f"-I{DRIVER}", f"-I{tmp_path}",
                          f"-DMTVG_ARM_DSP_SCRATCH_BYTES={scratch}"], timeout=600)
    results = [line for line in proc.stderr.splitlines() if line.startswith("case ")]
    assert len(results) == len(cases), proc.stderr[-3000:]
    wrong = [line for line in results if " status 0 differ 0 " not in line]
    assert not wrong, wrong[:5]
