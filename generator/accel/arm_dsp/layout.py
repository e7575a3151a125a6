"""The `arm-dsp` driver's weight layouts (driver/mtvg_arm_dsp.h describes them), built at
export so the kernels read each weight word once per use with no reordering; and the bound
that lets a call take the one-instruction multiply of its output stage.

Every packed array is uint32 words of four int8 or two int16 values, little-endian."""

from __future__ import annotations

import numpy as np

from generator.export.fixedpoint import NARROW_ACC_BOUND, NARROW_SHIFTS

# Within a group of four k, the order the widened halves take them in: (k0, k2), (k1, k3).
HALVES_ORDER = (0, 2, 1, 3)


def _words(values: np.ndarray, dtype: str) -> np.ndarray:
    """`values` (int8 or int16, C order) reinterpreted as little-endian uint32 words."""
    packed = np.ascontiguousarray(values.astype(dtype)).view("<u4")
    return packed.reshape(-1).astype(np.uint32)


def pad_channels(values: np.ndarray, count: int) -> np.ndarray:
    """A per-output-channel array (bias, multiplier, shift) padded with zeros to `count`."""
    out = np.zeros(count, dtype=values.dtype)
    out[:values.size] = values.reshape(-1)
    return out


def conv_weights(weights: np.ndarray, bits: int = 8) -> np.ndarray:
    """TFLite conv2d weights (out_c, k_h, k_w, in_c) as pairs of output channels: per group
    of four k, channel o's weights then o + 1's, as four int8 (bits 8) or as two int16 pairs
    in HALVES_ORDER (bits 16)."""
    out_c = weights.shape[0]
    depth = int(np.prod(weights.shape[1:]))
    groups = (depth + 7) // 8 * 2  # an even count: the inner loop takes two per turn
    padded = np.zeros((out_c + out_c % 2, 4 * groups), dtype=np.int8)
    padded[:out_c, :depth] = weights.reshape(out_c, depth)
    pairs = padded.reshape(-1, 2, groups, 4).transpose(0, 2, 1, 3)
    if bits == 16:
        return _words(pairs[..., list(HALVES_ORDER)], "int16")
    return _words(pairs, "int8")


def depthwise_weights(weights: np.ndarray, taps: int) -> np.ndarray:
    """Depthwise weights (k_h, k_w, c) as int16: per group of four channels, per tap, the
    pairs (c0, c2) and (c1, c3). Shape (groups, taps, 4)."""
    channels = weights.size // taps
    groups = (channels + 3) // 4
    padded = np.zeros((taps, 4 * groups), dtype=np.int16)
    padded[:, :channels] = weights.reshape(taps, channels)
    return padded.reshape(taps, groups, 4).transpose(1, 0, 2)[..., list(HALVES_ORDER)]


def depthwise_stream(weights: np.ndarray, bias: np.ndarray, multiplier: np.ndarray,
                     shift: np.ndarray, zero_point: int, narrow_stage: bool) -> np.ndarray:
    """The depthwise kernel's one array (mtvg_arm_dsp.h): per group of four channels the
    biases (`bias` with the input offset folded in), the weights' int16 pairs per tap, and
    per channel the output stage's record, (multiplier, addend, e) for the short stage,
    (multiplier, shift, 0) otherwise; the short stage's biases and weights doubled."""
    taps = weights.size // bias.size
    laid = depthwise_weights(weights, taps).astype(np.int32)
    groups = laid.shape[0]
    count = 4 * groups
    scale = 2 if narrow_stage else 1
    biases = pad_channels(bias.astype(np.int64), count) * scale
    if narrow_stage:
        records = narrow_params(pad_channels(multiplier, count), pad_channels(shift, count),
                                zero_point, True)[:, :3]
    else:
        records = np.stack([pad_channels(multiplier, count), pad_channels(shift, count),
                            np.zeros(count, np.int64)], axis=1)
    halves = _words((laid * scale).astype(np.int16), "int16").reshape(groups, 2 * taps)
    wrapped = (biases % (1 << 32)).astype(np.uint32).reshape(groups, 4)
    recs = (records.astype(np.int64) % (1 << 32)).astype(np.uint32).reshape(groups, 12)
    return np.concatenate([wrapped, halves, recs], axis=1).reshape(-1)


def narrow(weights: np.ndarray, bias: np.ndarray, shift: np.ndarray, depthwise: bool) -> bool:
    """Whether the layer's output stage can take the short path (mtvg_arm_dsp.h): every
    channel's shift in NARROW_SHIFTS and every accumulator, doubled, within int32:
    |bias| + 255 · Σ|w| per output channel (inputs plus offset lie in [-255, 255]) below
    2^30."""
    if (shift < NARROW_SHIFTS[0]).any() or (shift > NARROW_SHIFTS[1]).any():
        return False
    w = np.abs(weights.astype(np.int64))
    per_channel = w.reshape(-1, w.shape[-1]).sum(axis=0) if depthwise \
        else w.reshape(w.shape[0], -1).sum(axis=1)
    bound = np.abs(bias.astype(np.int64)) + 255 * per_channel
    return bool((bound < NARROW_ACC_BOUND).all())


def narrow_params(multiplier: np.ndarray, shift: np.ndarray, zero_point: int,
                  narrow_stage: bool) -> np.ndarray:
    """The short output stage's record per channel (mtvg_arm_dsp.h): multiplier, addend
    2^(e-1) + zero_point · 2^e, e = -shift, 0; zeros when the layer takes the general
    stage. Shape (channels, 4), int32."""
    out = np.zeros((shift.size, 4), np.int32)
    if narrow_stage:
        e = np.maximum(-shift.astype(np.int64), 1)  # padding channels (shift 0): never stored
        out[:, 0] = multiplier
        out[:, 1] = (np.int64(1) << (e - 1)) + int(zero_point) * (np.int64(1) << e)
        out[:, 2] = e
    return out


def fold_input_offset(weights: np.ndarray, bias: np.ndarray, input_zero_point: int,
                      taps: int) -> np.ndarray:
    """A depthwise layer's bias plus (-input zero point) times each channel's weight sum over
    all taps (wrapping int32 as C does): the depthwise kernels widen the inputs as they are,
    and padding taps, which read the zero point, then add nothing."""
    flat = weights.reshape(taps, -1).astype(np.int64)
    folded = bias.astype(np.int64) - int(input_zero_point) * flat.sum(axis=0)
    return ((folded + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def helium_order(channels: int) -> np.ndarray:
    """Where the Helium depthwise kernel reads each channel's bias, multiplier and shift
    (mtvg_arm_dsp.c helium_index): per whole block of sixteen, per half of eight, the even
    channels then the odd ones; the last partial block in order. Returns, for each position,
    the channel it holds."""
    order = np.arange(channels)
    for base in range(0, channels - channels % 16, 16):
        block = []
        for half in (0, 8):
            block += [base + half + i for i in (0, 2, 4, 6, 1, 3, 5, 7)]
        order[base:base + 16] = block
    return order

