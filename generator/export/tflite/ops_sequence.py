"""Sequence operators with state: SVDF and UNIDIRECTIONAL_SEQUENCE_LSTM.

State. Both operators read and update variable tensors (SVDF's activation memory, the LSTM's
output and cell state), which TFLite keeps between Invokes. An exported model runs once per
call and keeps nothing: every run starts from zero state, which is TFLite's state at the
first Invoke after allocating the tensors (or after `reset_all_variables`). So an exported
model equals TFLite's first Invoke, not a stream of Invokes; an LSTM still runs its whole
input sequence inside that one call. A state tensor with constant data is refused.

SVDF (TFLite's reference `EvalFloatSVDF` / `EvalIntegerSVDF`, and TFLite Micro's integer
SVDF with int8 time weights and state). With zero state only the newest memory column is
nonzero (an int8 state starts at its zero point, which the kernel subtracts), so each filter
contributes its feature activation times the last column of its time weights; the sums over
the memory's older columns are products with zero and add exact zeros.

UNIDIRECTIONAL_SEQUENCE_LSTM, float32 (TFLite's `LstmStepFloat`): the time loop unrolled
into Relax operators, with CIFG, peephole, layer norm, cell and projection clipping.
"""

from __future__ import annotations

import numpy as np

from generator.export import qkernels
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
    all_float,
    converter,
    float_activation,
)
from generator.export.tflite.model import TfOp, TfTensor


def _zero_state(t: TfTensor | None, what: str) -> None:
    """Check that a state input is a variable without data (read as zeros)."""
    if t is None:
        raise Unsupported(f"the {what} is missing")
    if not t.variable:
        raise Unsupported(f"the {what} is not a variable tensor")
    if t.data is not None:
        raise Unsupported(f"the {what} has constant data (only a zero initial state is "
                          "supported)")


# ---- SVDF ------------------------------------------------------------------------------------

@converter("SVDF")
def svdf(ctx: Context, op: TfOp) -> None:
    """SVDF of one time step from zero state: out = Σ_rank wt[:, -1] · (W_f x) + bias."""
    x_t, wf_t, wt_t, out_t = ctx.need(op, 0), ctx.need(op, 1), ctx.need(op, 2), ctx.out(op)
    b_t, state_t = ctx.arg(op, 3), ctx.arg(op, 4)
    _zero_state(state_t, "SVDF state")
    rank = int(op.options.Rank()) if op.options is not None else 0
    if len(x_t.shape) != 2 or len(wf_t.shape) != 2 or len(wt_t.shape) != 2:
        raise Unsupported("SVDF tensors of unexpected rank")
    batch, depth = x_t.shape
    filters, memory = wt_t.shape
    if rank <= 0 or wf_t.shape != (filters, depth) or filters % rank:
        raise Unsupported(f"SVDF rank {rank} with weights {list(wf_t.shape)}, "
                          f"{list(wt_t.shape)}")
    units = filters // rank
    if out_t.shape != (batch, units):
        raise Unsupported(f"SVDF output of shape {list(out_t.shape)}")
    act = activation_name(op.options)
    if all_float(x_t, wf_t, wt_t, b_t, out_t, state_t):
        return _svdf_float(ctx, x_t, wf_t, wt_t, b_t, out_t, rank, units, act)
    if x_t.dtype == "float32":
        raise Unsupported("hybrid SVDF (float input, quantized weights)")
    if x_t.dtype != "int8" or out_t.dtype != "int8":
        raise NotMine(f"SVDF from {x_t.dtype} to {out_t.dtype}")
    _svdf_int8(ctx, x_t, wf_t, wt_t, b_t, state_t, out_t, rank, units, memory, act)


def _svdf_float(ctx: Context, x_t, wf_t, wt_t, b_t, out_t, rank: int, units: int,
                act: str) -> None:
    from tvm import relax

    wf = ctx.const(wf_t, "the feature weights").astype(np.float32)
    last = ctx.const(wt_t, "the time weights")[:, -1].astype(np.float32)
    batch = x_t.shape[0]
    y = ctx.emit(relax.op.matmul(ctx.value(x_t), relax.const(np.ascontiguousarray(wf.T))))
    y = ctx.emit(relax.op.multiply(y, relax.const(last)))
    if rank > 1:
        y = ctx.emit(relax.op.reshape(y, (batch, units, rank)))
        y = ctx.emit(relax.op.sum(y, axis=[2]))
    if b_t is not None:
        y = ctx.emit(relax.op.add(y, ctx.value(b_t)))
    ctx.set(out_t, float_activation(ctx, y, act))


def _scale(t: TfTensor, what: str, zero_required: bool = True) -> float:
    if t.quant is None or not t.quant.per_tensor:
        raise Unsupported(f"the {what} must be quantized per tensor")
    if zero_required and t.quant.z != 0:
        raise Unsupported(f"the {what} has a nonzero zero point")
    return t.quant.s


def _effective_scale(a: float, b: float, c: float) -> float:
    """a·b/c as TFLite and TFLite Micro compute it: in float32, then widened to double."""
    return float(np.float32(np.float32(a) * np.float32(b)) / np.float32(c))


def _svdf_int8(ctx: Context, x_t, wf_t, wt_t, b_t, state_t, out_t, rank: int, units: int,
               memory: int, act: str) -> None:
    """TFLite's integer SVDF: int8 input and feature weights, int32 bias, and time weights
    and state both int16 (TFLite's EvalIntegerSVDF; state zero point 0) or both int8 (TFLite
    Micro only). The feature activation is requantized to the state's scale, saturated to
    the state type and stored with the state's zero point added (an int8 store wraps, as
    TFLite Micro's does); the time products of the state minus its zero point are summed in
    int32 and rescaled to int8. TFLite accepts only a fused RELU and does not apply it (the
    result is only clamped to int8); TFLite Micro applies no activation either, so the int8
    variant also takes NONE."""
    types = (wf_t.dtype, wt_t.dtype, state_t.dtype)
    if types not in (("int8", "int16", "int16"), ("int8", "int8", "int8")):
        raise Unsupported(f"int8 SVDF with {wf_t.dtype} feature weights, {wt_t.dtype} time "
                          f"weights and {state_t.dtype} state")
    state_bits = 8 if state_t.dtype == "int8" else 16
    if act != "RELU" and not (state_bits == 8 and act == "NONE"):
        taken = "RELU or NONE" if state_bits == 8 else "RELU only"
        raise Unsupported(f"int8 SVDF with fused {act} (TFLite's integer SVDF takes {taken})")
    if b_t is not None and b_t.dtype != "int32":
        raise Unsupported(f"int8 SVDF with a {b_t.dtype} bias")
    x, out = ctx.qinfo(x_t), ctx.qinfo(out_t)
    s_w = _scale(wf_t, "feature weights")
    s_t = _scale(wt_t, "time weights")
    # TFLite Micro starts an int8 state at its zero point and an int16 one at 0; only the
    # int8 state may have a nonzero zero point (the int16 kernels assume 0)
    s_state = _scale(state_t, "state", zero_required=state_bits == 16)
    zero_state = state_t.quant.z
    if not -128 <= zero_state <= 127:
        raise Unsupported(f"the SVDF state's zero point {zero_state} is outside int8")
    m1, sh1 = quantize_multiplier(_effective_scale(x.scale, s_w, s_state))
    m2, sh2 = quantize_multiplier(_effective_scale(s_state, s_t, out.scale))
    wf = ctx.const(wf_t, "the feature weights").astype(np.int64)
    offset = -x.zero * wf.sum(axis=1)  # Σ w·(x − zp) = Σ w·x − zp·Σ w (mod 2**32)
    offset = ((offset + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
    last = ctx.const(wt_t, "the time weights")[:, memory - 1].astype(np.int32)
    bias = (np.zeros(units, np.int32) if b_t is None
            else ctx.const(b_t, "the bias").reshape(-1).astype(np.int32))
    kernel = _svdf_kernel(x_t.shape[0], wf.astype(np.int8), offset, (m1, sh1), last, bias,
                          rank, (m2, sh2), out.zero, state_bits, zero_state)
    ctx.kernel("svdf", kernel, [ctx.value(x_t)], out_t)


class _SvdfKernel(qkernels.Kernel):
    def constant_roles(self) -> list[str]:
        """Feature weights, their zero-point offset, the time weights' last column, bias."""
        return ["weights", "bias", "weights", "bias"]


def _svdf_kernel(batch: int, wf: np.ndarray, offset: np.ndarray, scale1: tuple[int, int],
                 last: np.ndarray, bias: np.ndarray, rank: int, scale2: tuple[int, int],
                 zero_out: int, state_bits: int = 16, zero_state: int = 0) -> qkernels.Kernel:
    """The integer SVDF of one step from zero state as a tensor-expression kernel.

    With zero state every older memory column holds the state's zero point and contributes
    0, so the time product is the last column times (stored activation − zero point)."""
    from tvm import te, tirx

    filters, depth = wf.shape
    units = filters // rank
    ar = TirArith()
    state_min, state_max = -(1 << (state_bits - 1)), (1 << (state_bits - 1)) - 1
    x = te.placeholder((batch, depth), "int8", "x")
    w = te.placeholder((filters, depth), "int8", "w")
    off = te.placeholder((filters,), "int32", "offset")
    wl = te.placeholder((filters,), "int32", "time_last")
    b = te.placeholder((units,), "int32", "bias")
    k = te.reduce_axis((0, depth), "k")
    acc = te.compute((batch, filters), lambda i, f: te.sum(
        x[i, k].astype("int32") * w[f, k].astype("int32"), axis=k), name="acc")

    def activation(i, f):
        v = multiply_by_quantized_multiplier(ar, acc[i, f] + off[f], *scale1)
        v = tirx.max(tirx.min(v, tirx.const(state_max, "int32")),
                     tirx.const(state_min, "int32"))
        if zero_state == 0:
            return v
        # the state holds v + zero point stored in the state type (wrapping), read back
        # minus the zero point
        span = 1 << state_bits
        stored = ((v + tirx.const(zero_state - state_min, "int32"))
                  & tirx.const(span - 1, "int32")) + tirx.const(state_min, "int32")
        return stored - tirx.const(zero_state, "int32")

    state = te.compute((batch, filters), activation, name="state")
    r = te.reduce_axis((0, rank), "r")
    total = te.compute((batch, units), lambda i, u: te.sum(
        wl[u * rank + r] * state[i, u * rank + r], axis=r), name="total")
    out = te.compute((batch, units), lambda i, u: qkernels.clamp_int8(
        multiply_by_quantized_multiplier(ar, total[i, u] + b[u], *scale2) + zero_out,
        -128, 127), name="out")
    func = te.create_prim_func([x, w, off, wl, b, out]).without_attr("global_symbol")
    return _SvdfKernel(func, [wf, offset, last, bias])


# ---- UNIDIRECTIONAL_SEQUENCE_LSTM --------------------------------------------------------------

GATES = ("input", "forget", "cell", "output")


@converter("UNIDIRECTIONAL_SEQUENCE_LSTM")
def sequence_lstm(ctx: Context, op: TfOp) -> None:
    """A float32 LSTM over the whole sequence from zero state (see the module's doc)."""
    x_t, out_t = ctx.need(op, 0), ctx.out(op)
    if len(op.inputs) not in (20, 24):
        raise Unsupported(f"LSTM with {len(op.inputs)} inputs")
    h_t, c_t = ctx.arg(op, 18), ctx.arg(op, 19)
    _zero_state(h_t, "output state")
    _zero_state(c_t, "cell state")
    tensors = [ctx.arg(op, i) for i in range(len(op.inputs))]
    if not all_float(*tensors, out_t):
        if x_t.dtype == "float32":
            raise Unsupported("hybrid LSTM (float input, quantized weights)")
        raise NotMine(f"{x_t.dtype} LSTM (the integer LSTM is ops_lstm_int8's)")
    o = op.options
    if o is not None and hasattr(o, "DiagonalRecurrentTensors") \
            and o.DiagonalRecurrentTensors():
        raise Unsupported("LSTM with diagonal recurrent tensors")
    time_major = bool(o.TimeMajor()) if o is not None else False
    cell_clip = float(o.CellClip()) if o is not None else 0.0
    proj_clip = float(o.ProjClip()) if o is not None else 0.0
    act = activation_name(o)
    _LstmFloat(ctx, op, time_major, cell_clip, proj_clip, act).run()


class _LstmFloat:
    """TFLite's LstmStepFloat, one Relax subgraph per time step."""

    def __init__(self, ctx: Context, op: TfOp, time_major: bool, cell_clip: float,
                 proj_clip: float, act: str) -> None:
        self.ctx, self.op, self.act = ctx, op, act
        self.time_major = time_major
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        x_t = ctx.need(op, 0)
        if len(x_t.shape) != 3:
            raise Unsupported(f"LSTM input of shape {list(x_t.shape)}")
        if time_major:
            self.steps, self.batch, self.depth = x_t.shape
        else:
            self.batch, self.steps, self.depth = x_t.shape
        self.cifg = ctx.arg(op, 1) is None
        w_f = self._weights(2, "input-to-forget weights")
        self.cells = w_f.shape[0]
        self.w_in = [None if self.cifg else self._weights(1, "input-to-input weights")]
        self.w_in += [self._weights(i, f"input-to-{g} weights") for i, g in
                      ((2, "forget"), (3, "cell"), (4, "output"))]
        w_rf = self._weights(6, "recurrent-to-forget weights")
        self.outputs = w_rf.shape[1]
        self.w_rec = [None if self.cifg else self._weights(5, "recurrent-to-input weights")]
        self.w_rec += [self._weights(i, f"recurrent-to-{g} weights") for i, g in
                       ((6, "forget"), (7, "cell"), (8, "output"))]
        self.peep = [self._opt(9), self._opt(10), None, self._opt(11)]
        if self.cifg:
            self.peep[0] = None
        self.bias = [None if self.cifg else self._weights(12, "input gate bias")]
        self.bias += [self._weights(i, f"{g} gate bias") for i, g in
                      ((13, "forget"), (14, "cell"), (15, "output"))]
        self.proj_w = self._opt(16)
        self.proj_b = self._opt(17)
        self.norm = [self._opt(i) for i in (20, 21, 22, 23)] if len(op.inputs) == 24 \
            else [None] * 4
        self.layer_norm = self.norm[1] is not None
        if self.cifg:
            self.norm[0] = None
        self._check_shapes()

    def _opt(self, i: int) -> np.ndarray | None:
        t = self.ctx.arg(self.op, i)
        return None if t is None else self.ctx.const(t, f"LSTM input {i}").astype(np.float32)

    def _weights(self, i: int, what: str) -> np.ndarray:
        t = self.ctx.arg(self.op, i)
        if t is None:
            raise Unsupported(f"the LSTM's {what} are missing")
        return self.ctx.const(t, f"the LSTM's {what}").astype(np.float32)

    def _check_shapes(self) -> None:
        n, h, d = self.cells, self.outputs, self.depth
        gates = [g for g in range(4) if not (self.cifg and g == 0)]
        ok = all(self.w_in[g].shape == (n, d) and self.w_rec[g].shape == (n, h)
                 and self.bias[g].shape == (n,) for g in gates)
        ok &= all(p is None or p.shape == (n,) for p in self.peep)
        ok &= all(c is None or c.shape == (n,) for c in self.norm)
        if self.proj_w is None:
            ok &= h == n and self.proj_b is None
        else:
            ok &= self.proj_w.shape == (h, n)
            ok &= self.proj_b is None or self.proj_b.shape == (h,)
        out_t = self.ctx.out(self.op)
        want = (self.steps, self.batch, h) if self.time_major else (self.batch, self.steps, h)
        if not ok or out_t.shape != want:
            raise Unsupported("LSTM tensors of inconsistent shapes")
        if self.layer_norm and any(self.norm[g] is None for g in gates):
            raise Unsupported("layer norm coefficients for only some gates")
        if (self.peep[1] is None) != (self.peep[3] is None):
            raise Unsupported("peephole weights for only some gates")

    # ---- Relax helpers -----------------------------------------------------------------

    def emit(self, expr):
        return self.ctx.emit(expr)

    def const(self, a: np.ndarray):
        from tvm import relax

        return relax.const(np.ascontiguousarray(a, np.float32))

    def gates(self) -> list[int]:
        return [g for g in range(4) if not (self.cifg and g == 0)]

    def run(self) -> None:
        from tvm import relax

        ctx, r = self.ctx, relax.op
        gates = self.gates()
        n, b = self.cells, self.batch
        width = n * len(gates)
        # the input contributions of every step at once: [steps · batch, gates · cells]
        x = ctx.value(ctx.need(self.op, 0))
        rows = self.steps * self.batch
        x2 = self.emit(r.reshape(x, (rows, self.depth)))
        w_x = np.concatenate([self.w_in[g] for g in gates], axis=0)
        z_x = self.emit(r.matmul(x2, self.const(w_x.T)))
        if not self.layer_norm:  # TFLite starts each gate from its bias
            z_x = self.emit(r.add(z_x, self.const(np.concatenate([self.bias[g]
                                                                   for g in gates]))))
        lead = (self.steps, b) if self.time_major else (b, self.steps)
        z_x = self.emit(r.reshape(z_x, (*lead, width)))
        w_h = self.const(np.concatenate([self.w_rec[g] for g in gates], axis=0).T)
        h = c = None  # zero state: the first step's recurrent and peephole terms are 0
        results = []
        for step in range(self.steps):
            axis = 0 if self.time_major else 1
            z = self.emit(r.strided_slice(z_x, axes=[axis], begin=[step], end=[step + 1]))
            z = self.emit(r.reshape(z, (b, width)))
            if h is not None:
                z = self.emit(r.add(z, self.emit(r.matmul(h, w_h))))
            parts = self.emit(r.split(z, len(gates), axis=1)) if len(gates) > 1 else None
            pre = {}
            for k, g in enumerate(gates):
                pre[g] = self.emit(relax.TupleGetItem(parts, k))
            h, c = self.step(pre, c)
            results.append(h)
        self.finish(results)

    def _gate(self, g: int, z, c, sigmoid: bool):
        """Peephole, layer norm and bias, then the gate's nonlinearity."""
        from tvm import relax

        r = relax.op
        if c is not None and self.peep[g] is not None:
            z = self.emit(r.add(z, self.emit(r.multiply(c, self.const(self.peep[g])))))
        if self.layer_norm:
            z = self._normalize(z)
            z = self.emit(r.multiply(z, self.const(self.norm[g])))
            z = self.emit(r.add(z, self.const(self.bias[g])))
        if sigmoid:
            return self.emit(r.sigmoid(z))
        return float_activation(self.ctx, z, self.act)

    def _normalize(self, z):
        """TFLite's MeanStddevNormalization over each row (variance + 1e-8)."""
        from tvm import relax

        r = relax.op
        mean = self.emit(r.mean(z, axis=[1], keepdims=True))
        diff = self.emit(r.subtract(z, mean))
        var = self.emit(r.mean(self.emit(r.multiply(diff, diff)), axis=[1], keepdims=True))
        inv = self.emit(r.rsqrt(self.emit(r.add(var, relax.const(np.float32(1e-8))))))
        return self.emit(r.multiply(diff, inv))

    def step(self, pre: dict, c_prev):
        from tvm import relax

        r = relax.op
        forget = self._gate(1, pre[1], c_prev, True)
        if self.cifg:
            inp = self.emit(r.subtract(relax.const(np.float32(1.0)), forget))
        else:
            inp = self._gate(0, pre[0], c_prev, True)
        cell_in = self._gate(2, pre[2], None, False)
        c = self.emit(r.multiply(cell_in, inp))
        if c_prev is not None:
            c = self.emit(r.add(self.emit(r.multiply(forget, c_prev)), c))
        if self.cell_clip > 0:
            c = self.emit(r.clip(c, -self.cell_clip, self.cell_clip))
        out_gate = self._gate(3, pre[3], c, True)
        h = self.emit(r.multiply(out_gate, float_activation(self.ctx, c, self.act)))
        if self.proj_w is not None:
            h = self.emit(r.matmul(h, self.const(self.proj_w.T)))
            if self.proj_b is not None:
                h = self.emit(r.add(h, self.const(self.proj_b)))
            if self.proj_clip > 0:
                h = self.emit(r.clip(h, -self.proj_clip, self.proj_clip))
        return h, c

    def finish(self, results: list) -> None:
        from tvm import relax

        r = relax.op
        axis = 0 if self.time_major else 1
        parts = [self.emit(r.expand_dims(h, axis)) for h in results]
        out = parts[0] if len(parts) == 1 else self.emit(r.concat(parts, axis=axis))
        self.ctx.set(self.ctx.out(self.op), out)
