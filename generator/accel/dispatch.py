"""Offloading: each accelerator's patterns, in order, replace matched operators of `main`
with calls to the plugin's lowered kernels; what no accelerator takes stays on the CPU."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from generator.accel.api import Accelerator, Lowering, Match, Pattern
from generator.accel.tir import ACCELERATOR_ATTR, QOP_ATTR
from generator.errors import ExportError


@dataclass(frozen=True)
class Offloaded:
    accelerator: str
    pattern: str
    kernel: str
    macs: int
    scratch_bytes: int = 0


@dataclass
class OffloadReport:
    """Which operators went to which accelerator, and which matches were refused."""

    offloaded: list[Offloaded] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)  # accel, pattern, why
    unmatched: list[str] = field(default_factory=list)  # accelerators that took nothing

    def macs_of(self, kernel: str) -> int | None:
        """The MACs the plugin's lowering declared for one of its kernels."""
        return next((o.macs for o in self.offloaded if o.kernel == kernel), None)

    def by_accelerator(self) -> dict[str, Counter]:
        out: dict[str, Counter] = {}
        for o in self.offloaded:
            out.setdefault(o.accelerator, Counter())[o.pattern] += 1
        return out


@dataclass(frozen=True)
class Selected:
    """An accelerator chosen for an export, with its checked option values."""

    plugin: Accelerator
    options: dict[str, Any]
    origin: str = ""

    @property
    def name(self) -> str:
        return self.plugin.name


class _Offloader:
    def __init__(self, mod, ops: dict, report: OffloadReport) -> None:
        self.mod = mod
        self.ops = ops  # int8 kernel name → QuantizedOp
        self.report = report
        self.builder = None  # relax.BlockBuilder over mod: adds the lowered kernels
        self.counter = 0
        self.failure: BaseException | None = None

    def run(self, selected: Selected) -> None:
        from tvm import relax
        from tvm.relax import dpl

        plugin = selected.plugin
        patterns = call_plugin(plugin, "patterns", plugin.patterns, selected.options)
        if not isinstance(patterns, list | tuple) or \
                not all(isinstance(p, Pattern) for p in patterns):
            raise ExportError(f"accelerator '{plugin.name}': patterns() must return a list "
                              "of generator.accel.Pattern")
        before = len(self.report.offloaded)
        for pattern in patterns:
            self.builder = relax.BlockBuilder(self.mod)
            main = self.mod["main"]
            values = _bound_values(main)

            def rewriter(orig, matchings, pattern=pattern, values=values):
                if self.failure is not None:
                    return orig
                try:
                    return self._rewrite(selected, pattern, orig, matchings, values)
                except BaseException as exc:  # re-raised below, outside TVM's callback
                    self.failure = exc
                    return orig

            new_main = dpl.rewrite_call(pattern.pattern, rewriter, main)
            if self.failure is not None:
                failure, self.failure = self.failure, None
                if isinstance(failure, ExportError):
                    raise failure
                raise ExportError(f"accelerator '{plugin.name}' failed on pattern "
                                  f"'{pattern.name}': {type(failure).__name__}: "
                                  f"{one_line(failure)}") from failure
            self.mod = self.builder.get()
            self.mod["main"] = new_main
            self.mod = relax.transform.DeadCodeElimination()(self.mod)
        if len(self.report.offloaded) == before:
            self.report.unmatched.append(plugin.name)

    def _rewrite(self, selected: Selected, pattern: Pattern, orig, matchings, values):
        from tvm import relax

        match = self._match(selected, pattern, orig, matchings, values)
        if match is None:
            return orig
        plugin = selected.plugin
        if pattern.check is not None:
            reason = call_plugin(plugin, "check", pattern.check, match)
            if reason:
                self.report.refused.append((plugin.name, pattern.name, str(reason)))
                return orig
        lowering = call_plugin(plugin, "lower", plugin.lower, match, selected.options)
        if not isinstance(lowering, Lowering):
            raise ExportError(f"accelerator '{plugin.name}': lower() must return a "
                              "generator.accel.Lowering")
        func = lowering.func.with_attr(ACCELERATOR_ATTR, plugin.name)
        _check_signature(plugin.name, pattern.name, func, match, lowering)
        name = f"{_c_name(plugin.name)}_{_c_name(pattern.name)}{self.counter}"
        self.counter += 1
        gv = self.builder.add_func(func, name)
        args = [*match.inputs, *(relax.const(np.ascontiguousarray(c))
                                  for c in lowering.constants)]
        self.report.offloaded.append(Offloaded(plugin.name, pattern.name, name,
                                               int(lowering.macs),
                                               int(lowering.scratch_bytes)))
        return relax.call_tir(gv, args, relax.TensorType(match.output_shape,
                                                         match.output_dtype))

    def _match(self, selected: Selected, pattern: Pattern, orig, matchings, values):
        """The Match a plugin sees, or None when this is not the operator it names."""
        from tvm.ir.expr import GenericConst

        bound = {name: matchings[p] for name, p in pattern.parts.items() if p in matchings}
        if not hasattr(getattr(orig, "ty", None), "shape"):
            return None  # a call with a scratch output (--memory small): ours to run
        out_shape, out_dtype = _tensor_type(orig)
        if pattern.int8_kind is not None:
            if not hasattr(orig, "args"):  # a variable bound to the kernel's call
                return None
            callee = orig.args[0]
            op = self.ops.get(getattr(callee, "name_hint", None))
            if op is None or op.kind != pattern.int8_kind:
                return None
            n = len(op.input_shapes)
            inputs = list(orig.args[1].fields[:n])
            return Match(pattern.name, inputs, [tuple(s) for s in op.input_shapes],
                         ["int8"] * n, out_shape, out_dtype, bound, {}, op, selected.options)
        # Sub-expressions other than the root must not be used elsewhere: their values
        # would be lost (or computed twice) once the root is replaced.
        for expr in bound.values():
            if expr.same_as(orig) or isinstance(expr, GenericConst):
                continue
            var = values.get(expr)
            if var is not None and values.uses[var] > 1:
                return None
        inputs = [bound[n] for n in pattern.inputs if n in bound]
        if len(inputs) != len(pattern.inputs):
            return None
        constants = {n: e.value.numpy() for n, e in bound.items()
                     if isinstance(e, GenericConst)}
        types = [_tensor_type(e) for e in inputs]
        return Match(pattern.name, inputs, [s for s, _ in types], [d for _, d in types],
                     out_shape, out_dtype,
                     bound, constants, None, selected.options)


class _Values(dict):
    """Binding value → variable, and how often each variable is used."""

    uses: Counter


def _bound_values(main) -> _Values:
    from tvm import relax

    values = _Values()
    values.uses = Counter()
    for block in main.body.blocks:
        for b in block.bindings:
            if isinstance(b, relax.VarBinding):
                values[b.value] = b.var
            for v in relax.analysis.free_vars(b.value):
                values.uses[v] += 1
    for v in relax.analysis.free_vars(main.body.body):
        values.uses[v] += 1
    return values


def _tensor_type(expr) -> tuple[tuple[int, ...], str]:
    ty = expr.ty
    return tuple(int(d) for d in ty.shape), str(ty.dtype)


def _check_signature(accel: str, pattern: str, func, match: Match,
                     lowering: Lowering) -> None:
    """The lowered kernel takes the inputs, the constants, then the output."""
    want = [(tuple(s), d) for s, d in zip(match.input_shapes, match.input_dtypes,
                                          strict=True)]
    want += [(tuple(c.shape), str(c.dtype)) for c in lowering.constants]
    want.append((tuple(match.output_shape), match.output_dtype))
    have = [(tuple(int(d) for d in p.shape), str(p.dtype)) for p in func.params]
    if have != want:
        raise ExportError(f"accelerator '{accel}': the kernel lowered for '{pattern}' takes "
                          f"{have}; the call passes {want} (inputs, constants, output)")


def call_plugin(plugin: Accelerator, what: str, fn, *args):
    try:
        return fn(*args)
    except ExportError:
        raise
    except Exception as exc:
        raise ExportError(f"accelerator '{plugin.name}' raised in {what}(): "
                          f"{type(exc).__name__}: {one_line(exc)}") from exc


def one_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _c_name(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)


def offload(mod, ops: dict, selected: list[Selected]) -> tuple[object, OffloadReport]:
    """Apply each selected accelerator in order; each operator goes to the first taker."""
    report = OffloadReport()
    if not selected:
        return mod, report
    offloader = _Offloader(mod, ops, report)
    for s in selected:
        offloader.run(s)
    return merge_identical_kernels(offloader.mod), report


def merge_identical_kernels(mod):
    """Drop the attribute that kept int8 kernels apart and call one copy of equal ones."""
    import tvm_ffi
    from tvm import relax, tirx
    from tvm.relax.expr_functor import PyExprMutator, mutator

    canonical: dict = {}
    keep: list = []
    for gv, func in list(mod.functions.items()):
        if not isinstance(func, tirx.PrimFunc) or func.attrs is None \
                or QOP_ATTR not in func.attrs:
            continue
        plain = func.without_attr(QOP_ATTR)
        mod[gv] = plain
        for other_gv, other in keep:
            if tvm_ffi.structural_equal(plain, other):
                canonical[gv] = other_gv
                break
        else:
            keep.append((gv, plain))
    if not canonical:
        return mod

    @mutator
    class Redirect(PyExprMutator):
        def visit_call_(self, op):
            call = super().visit_call_(op)
            if getattr(call.op, "name", None) == "relax.call_tir" and call.args[0] in canonical:
                return relax.call_tir(canonical[call.args[0]], call.args[1], call.ty)
            return call

    mod["main"] = Redirect(mod).visit_expr(mod["main"])
    return relax.transform.DeadCodeElimination()(mod)
