"""The integer UNIDIRECTIONAL_SEQUENCE_LSTM (int8 activations and weights, int16 cell: "8x8→16")
as TensorFlow Lite Micro computes it (its `EvalLstm<int8_t, int8_t, int16_t, int32_t>`).

TFLite Micro is the reference here: its kernel differs from TFLite's (BUILTIN_REF's
`EvalInteger8x8_16Lstm` takes its scales from the operator's intermediate tensors and uses
gemmlowp's fixed-point sigmoid/tanh, TFLite Micro the interpolated 256-entry sigmoid table),
so a model can give different bytes in the two interpreters. TFLite Micro's arithmetic, per
time step and batch row, all gates in int16 at scale 2**-12 before their nonlinearity:

- each gate: two fully connected products, the input's (Σ w·(x − x_zp) + bias) and the
  hidden state's (Σ w·(h − h_zp), no bias), each requantized to 2**-12 by TFLite's
  two-rounding MultiplyByQuantizedMultiplier (multiplier from the float32 product of the
  scales) and saturated to int16, then added with int16 saturation;
- input, forget and output gates: the int16 logistic (input · 3, the sigmoid table
  interpolated; output at 2**-15); the cell gate: the fused activation, which must be TANH
  (the int16 tanh from the same table; the file format has no other activation TFLite
  Micro's kernel takes);
- cell: forget · cell rescaled by 2**-15 and input · cell gate rescaled by 2**-30 / cell
  scale, each saturated to int16, summed with saturation, clipped to ± cell_clip / scale
  (truncated) when the cell clip is positive;
- hidden state: tanh of the cell (its input rescaled by the cell scale's power of two) times
  the output gate, rescaled by 2**-30 / hidden scale, plus the hidden zero point, clamped to
  int8; it is the step's output and the next step's recurrent input.

State. TFLite Micro keeps the hidden and cell state in variable tensors between Invokes,
reset to the hidden zero point and 0. An exported model starts every run from that state
(TFLite Micro's first Invoke after allocating or resetting), as the float LSTM does
(`ops_sequence.py`); the kernel runs the whole sequence inside one call.

TFLite Micro's kernel takes only the plain LSTM: all eight weight matrices, four biases, no
peephole, projection or layer norm; the other variants are refused with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import tirx

from generator.export.fixedpoint import (
    TirArith,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
)
from generator.export.tflite.convert import (
    Context,
    NotMine,
    Unsupported,
    activation_name,
    converter,
)
from generator.export.tflite.model import TfOp, TfTensor
from generator.export.tflite.ops_int16 import (
    SIGMOID_TABLE,
    Kernel16,
    _sigmoid_element,
    _statement,
    checked_log2,
)

I32 = "int32"
I16_MIN, I16_MAX = -32768, 32767
GATE_SCALE = 2.0 ** -12  # the gates' int16 inputs to their nonlinearity (Q3.12)
ACTIVATED_SCALE = 2.0 ** -15  # the nonlinearities' int16 outputs (Q0.15)
GATES = ("input", "forget", "cell", "output")
# input indices of UNIDIRECTIONAL_SEQUENCE_LSTM
INPUT_WEIGHTS = (1, 2, 3, 4)
RECURRENT_WEIGHTS = (5, 6, 7, 8)
PEEPHOLE = (9, 10, 11)
BIASES = (12, 13, 14, 15)
PROJECTION = (16, 17)
HIDDEN_STATE, CELL_STATE = 18, 19
LAYER_NORM = (20, 21, 22, 23)


@dataclass(frozen=True)
class LstmInt8:
    """Everything TFLite Micro's integer LSTM computes from the tensors at Prepare."""

    batch: int
    steps: int
    depth: int
    cells: int
    time_major: bool
    input_zero: int
    hidden_zero: int
    w_input: np.ndarray  # [4·cells, depth] int8, gates in the order of GATES
    b_input: np.ndarray  # [4·cells] int32: bias − x_zp·Σ w
    w_recurrent: np.ndarray  # [4·cells, cells] int8
    b_recurrent: np.ndarray  # [4·cells] int32: −h_zp·Σ w
    input_scales: tuple[tuple[int, int], ...]  # per gate (multiplier, shift) to 2**-12
    recurrent_scales: tuple[tuple[int, int], ...]
    forget_mul: tuple[int, int]
    input_mul: tuple[int, int]
    hidden_mul: tuple[int, int]
    cell_clip: int | None  # the quantized clip (None: no clipping)
    tanh_input: tuple[int, int]  # the cell's tanh: input multiplier and right shift


def _wrap32(values: np.ndarray) -> np.ndarray:
    return ((values.astype(np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def _f32(x: float) -> float:
    return float(np.float32(x))


def _per_tensor(t: TfTensor, what: str) -> tuple[float, int]:
    if t.quant is None:
        raise Unsupported(f"int8 LSTM with unquantized {what}")
    if not t.quant.per_tensor:
        raise Unsupported(f"int8 LSTM with per-channel {what} (TFLite Micro's integer LSTM "
                          "takes one scale per tensor)")
    return t.quant.s, t.quant.z


def _fc_scale(input_scale: float, weight_scale: float) -> tuple[int, int]:
    """GetQuantizedConvolutionMultipler: the float32 product of the scales over 2**-12."""
    product = float(np.float32(np.float32(input_scale) * np.float32(weight_scale)))
    return quantize_multiplier(product / GATE_SCALE)


def _mul_scale(a: float, b: float, out: float) -> tuple[int, int]:
    """CreateInterGateMulParams: the scales' product in double over the output's."""
    return quantize_multiplier(_f32(a) * _f32(b) / _f32(out))


def _state(t: TfTensor | None, what: str, dtype: str) -> TfTensor:
    if t is None:
        raise Unsupported(f"the {what} is missing")
    if not t.variable:
        raise Unsupported(f"the {what} is not a variable tensor")
    if t.data is not None:
        raise Unsupported(f"the {what} has constant data (only the reset state is supported)")
    if t.dtype != dtype:
        raise Unsupported(f"{t.dtype} {what} (TFLite Micro's integer LSTM keeps it in {dtype})")
    return t


def lstm_params(ctx: Context, op: TfOp) -> LstmInt8:
    """The integer LSTM's shapes, folded biases and fixed-point scales, or Unsupported."""
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if len(op.inputs) not in (20, 24):
        raise Unsupported(f"LSTM with {len(op.inputs)} inputs")
    if out_t.dtype != "int8":
        raise Unsupported(f"int8 LSTM with a {out_t.dtype} output")
    variants = [("CIFG (no input gate)", (1, 5, 12)), ("peephole", PEEPHOLE),
                ("projection", PROJECTION), ("layer norm", LAYER_NORM)]
    for name, idx in variants:
        present = [ctx.arg(op, i) is not None for i in idx]
        if (name.startswith("CIFG") and not all(present)) or \
                (not name.startswith("CIFG") and any(present)):
            raise Unsupported(f"int8 LSTM with {name}: TFLite Micro's integer LSTM takes only "
                              "the plain LSTM")
    o = op.options
    if o is not None and hasattr(o, "DiagonalRecurrentTensors") \
            and o.DiagonalRecurrentTensors():
        raise Unsupported("LSTM with diagonal recurrent tensors")
    time_major = bool(o.TimeMajor()) if o is not None else False
    act = activation_name(o)
    if act != "TANH":
        raise Unsupported(f"int8 LSTM with cell activation {act} (TFLite Micro's integer LSTM "
                          "takes TANH)")
    h_t = _state(ctx.arg(op, HIDDEN_STATE), "output state", "int8")
    c_t = _state(ctx.arg(op, CELL_STATE), "cell state", "int16")
    if len(x_t.shape) != 3:
        raise Unsupported(f"LSTM input of shape {list(x_t.shape)}")
    steps, batch, depth = x_t.shape if time_major else (x_t.shape[1], x_t.shape[0],
                                                          x_t.shape[2])
    s_x, z_x = _per_tensor(x_t, "input")
    s_h, z_h = _per_tensor(h_t, "output state")
    s_c, z_c = _per_tensor(c_t, "cell state")
    if z_c != 0:
        raise Unsupported(f"int16 cell state with zero point {z_c}")
    w_in, w_rec, b_in, b_rec = [], [], [], []
    in_scales, rec_scales = [], []
    cells = None
    for g, gate in enumerate(GATES):
        wx_t = ctx.need(op, INPUT_WEIGHTS[g])
        wh_t = ctx.need(op, RECURRENT_WEIGHTS[g])
        b_t = ctx.need(op, BIASES[g])
        for t, what in ((wx_t, f"input-to-{gate} weights"),
                        (wh_t, f"recurrent-to-{gate} weights")):
            if t.dtype != "int8":
                raise Unsupported(f"int8 LSTM with {t.dtype} {what}")
            if _per_tensor(t, what)[1] != 0:
                raise Unsupported(f"int8 LSTM with {what} of nonzero zero point")
        if b_t.dtype != "int32":
            raise Unsupported(f"int8 LSTM with a {b_t.dtype} {gate} gate bias")
        wx = ctx.const(wx_t, f"the LSTM's input-to-{gate} weights").astype(np.int64)
        wh = ctx.const(wh_t, f"the LSTM's recurrent-to-{gate} weights").astype(np.int64)
        bias = ctx.const(b_t, f"the LSTM's {gate} gate bias").astype(np.int64).reshape(-1)
        cells = wx.shape[0] if cells is None else cells
        if wx.shape != (cells, depth) or wh.shape != (cells, cells) or bias.shape != (cells,):
            raise Unsupported("LSTM tensors of inconsistent shapes")
        w_in.append(wx)
        w_rec.append(wh)
        b_in.append(bias - z_x * wx.sum(axis=1))
        b_rec.append(-z_h * wh.sum(axis=1))
        in_scales.append(_fc_scale(s_x, wx_t.quant.s))
        rec_scales.append(_fc_scale(s_h, wh_t.quant.s))
    want = (steps, batch, cells) if time_major else (batch, steps, cells)
    if out_t.shape != want or int(np.prod(h_t.shape)) != batch * cells \
            or int(np.prod(c_t.shape)) != batch * cells:
        raise Unsupported("LSTM tensors of inconsistent shapes")
    _, power = checked_log2(s_c)  # TFLite Micro takes the rounded log2 as it is
    left = 12 + power  # tanh's input to 3·2**12 per unit: (15 + power) − 3
    tanh_input = (3, -left) if left < 0 else (3 << left, 0)
    if tanh_input[0] > 0xFFFF or tanh_input[1] > 30:
        raise Unsupported(f"cell state scale {s_c:g}: out of the int16 tanh's range")
    cell_clip = float(o.CellClip()) if o is not None else 0.0
    clip = int(min(max(cell_clip / _f32(s_c), -32768.0), 32767.0)) if cell_clip > 0 else None
    return LstmInt8(
        batch, steps, depth, cells, time_major, z_x, z_h,
        np.concatenate(w_in).astype(np.int8), _wrap32(np.concatenate(b_in)),
        np.concatenate(w_rec).astype(np.int8), _wrap32(np.concatenate(b_rec)),
        tuple(in_scales), tuple(rec_scales),
        _mul_scale(ACTIVATED_SCALE, s_c, s_c), _mul_scale(ACTIVATED_SCALE, ACTIVATED_SCALE, s_c),
        _mul_scale(ACTIVATED_SCALE, ACTIVATED_SCALE, s_h), clip, tanh_input)


@converter("UNIDIRECTIONAL_SEQUENCE_LSTM")
def sequence_lstm_int8(ctx: Context, op: TfOp) -> None:
    """The int8 LSTM (TFLite Micro's 8x8→16 kernel); any other passes to `ops_sequence`."""
    x_t = ctx.need(op, 0)
    cell = ctx.arg(op, CELL_STATE)
    if x_t.dtype != "int8" or x_t.quant is None:
        raise NotMine(f"{x_t.dtype} LSTM")
    if cell is not None and cell.dtype != "int16":
        raise Unsupported(f"int8 LSTM with a {cell.dtype} cell state (TFLite Micro's integer "
                          "LSTM keeps it in int16)")
    p = lstm_params(ctx, op)
    kernel = lstm_kernel(p)
    ctx.kernel("lstm_int8", kernel, [ctx.value(x_t)], ctx.out(op))


# ---- the kernel ----------------------------------------------------------------------------

def _loop(var, extent: int, body):
    return tirx.For(var, tirx.const(0, I32), tirx.const(extent, I32), tirx.ForKind.SERIAL, body)


def _seq(stmts: list):
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _sat16(value):
    return tirx.max(tirx.min(value, tirx.const(I16_MAX, I32)), tirx.const(I16_MIN, I32))


def lstm_kernel(p: LstmInt8) -> Kernel16:
    """The whole sequence as TIR statements: per batch row, the cell state reset to 0, then
    per time step the four gates (two dot products each, the recurrent one skipped at the
    first step, where the hidden state is its zero point), the cell update and the hidden
    state, written to the output, which the next step reads back as its recurrent input."""
    t = tirx
    n_cells, depth = p.cells, p.depth
    x_shape = (p.steps, p.batch, depth) if p.time_major else (p.batch, p.steps, depth)
    out_shape = (p.steps, p.batch, n_cells) if p.time_major else (p.batch, p.steps, n_cells)
    table = SIGMOID_TABLE
    sigmoid = _sigmoid_element(3, 0, tanh=False)
    gate_tanh = _sigmoid_element(3, 0, tanh=True)
    cell_tanh = _sigmoid_element(*p.tanh_input, tanh=True)

    def build(ar: TirArith, bufs, out):
        xb, wx, bx, wh, bh, tb = bufs
        b, s, n, c = (t.Var(v, I32) for v in ("b", "s", "n", "c"))
        acc = t.decl_buffer((2,), I32, "acc")
        gates = t.decl_buffer((4 * n_cells,), "int16", "gates")
        cell = t.decl_buffer((n_cells,), "int16", "cell")

        def at(buf, step, row, col):
            index = [step, row, col] if p.time_major else [row, step, col]
            return t.Cast(I32, t.BufferLoad(buf, index))

        def slot(i):
            return t.BufferLoad(acc, [t.const(i, I32)])

        def store(i, value):
            return t.BufferStore(acc, value, [t.const(i, I32)])

        def gate(g: int):
            n, k, j = (t.Var(f"{v}{g}", I32) for v in ("n", "k", "j"))
            row = n + g * n_cells
            input_dot = [
                store(0, t.BufferLoad(bx, [row])),
                _loop(k, depth, store(0, slot(0) + at(xb, s, b, k)
                                      * t.Cast(I32, t.BufferLoad(wx, [row, k])))),
            ]
            recurrent_dot = t.IfThenElse(s > 0, _seq([
                store(1, t.BufferLoad(bh, [row])),
                _loop(j, n_cells, store(1, slot(1) + at(out, s - 1, b, j)
                                        * t.Cast(I32, t.BufferLoad(wh, [row, j])))),
            ]), None)
            from_input = _sat16(multiply_by_quantized_multiplier(ar, slot(0), *p.input_scales[g]))
            from_hidden = _sat16(multiply_by_quantized_multiplier(ar, slot(1),
                                                                  *p.recurrent_scales[g]))
            total = ar.shared(_sat16(ar.shared(from_input) + ar.shared(from_hidden)))
            activation = gate_tanh if g == 2 else sigmoid
            value = activation(ar, [total], [tb])
            return _loop(n, n_cells, _seq([
                *input_dot, store(1, t.const(0, I32)), recurrent_dot,
                *ar.take_stores(), t.BufferStore(gates, value, [row])]))

        def gate_value(g: int):
            return ar.shared(t.Cast(I32, t.BufferLoad(gates, [n + g * n_cells])))

        # the cell and hidden state of one element
        i_g, f_g, c_g, o_g = (gate_value(g) for g in range(4))
        old = t.Cast(I32, t.BufferLoad(cell, [n]))
        kept = _sat16(multiply_by_quantized_multiplier(ar, f_g * old, *p.forget_mul))
        added = _sat16(multiply_by_quantized_multiplier(ar, i_g * c_g, *p.input_mul))
        new = _sat16(ar.shared(kept) + ar.shared(added))
        if p.cell_clip is not None:
            new = t.max(t.min(new, t.const(p.cell_clip, I32)), t.const(-p.cell_clip, I32))
        new = ar.shared(new)
        squashed = ar.shared(t.Cast(I32, cell_tanh(ar, [new], [tb])))
        hidden = multiply_by_quantized_multiplier(ar, squashed * o_g, *p.hidden_mul)
        hidden = t.max(t.min(hidden + p.hidden_zero, t.const(127, I32)), t.const(-128, I32))
        out_index = [s, b, n] if p.time_major else [b, s, n]
        update = _loop(n, n_cells, _seq([
            *ar.take_stores(),
            t.BufferStore(cell, t.Cast("int16", new), [n]),
            t.BufferStore(out, t.Cast("int8", hidden), out_index)]))

        step = _seq([gate(g) for g in range(4)] + [update])
        row = _seq([_loop(c, n_cells, t.BufferStore(cell, t.const(0, "int16"), [c])),
                    _loop(s, p.steps, step)])
        return _seq([t.AllocBuffer(acc), t.AllocBuffer(gates), t.AllocBuffer(cell),
                     _loop(b, p.batch, row)])

    inputs = [(x_shape, "int8"), (p.w_input.shape, "int8"), (p.b_input.shape, I32),
              (p.w_recurrent.shape, "int8"), (p.b_recurrent.shape, I32),
              (table.shape, str(table.dtype))]
    return _statement(inputs, out_shape, "int8", build, "lstm_int8",
                      [p.w_input, p.b_input, p.w_recurrent, p.b_recurrent, table],
                      ("weights", "bias", "weights", "bias", "table"))
