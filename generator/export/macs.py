"""Multiply-accumulates of a kernel, counted in its TIR.

A multiply-accumulate is a store `acc[i] = acc[i] + (... * ...)` (either order of the
addition): each one counts as often as the loops around it run. Loops whose extent depends
on outer loops (the padding-aware windows of our int8 kernels) count their largest extent,
so a convolution counts its whole window at the borders too: the usual definition of a
layer's MACs (what model summaries and ST Edge AI print), not the multiplications the code
performs at the borders.
"""

from __future__ import annotations

# Expression fields that hold sub-expressions (TVM 0.27's PrimExpr node classes).
_EXPR_FIELDS = ("a", "b", "value", "condition", "true_value", "false_value")
# Statement fields that hold the statements nested in them.
_BODY_FIELDS = ("body", "block")


def kernel_macs(func) -> int:
    """The multiply-accumulates one call of the PrimFunc `func` performs."""
    import tvm.sym

    counter = _Counter(tvm.sym.Analyzer())
    counter.walk(func.body, 1)
    return counter.total


class _Counter:
    def __init__(self, analyzer) -> None:
        self.analyzer = analyzer
        self.total = 0

    def walk(self, stmt, trips: int) -> None:
        from tvm import tirx

        if stmt is None:
            return
        if isinstance(stmt, tirx.For):
            self.walk(stmt.body, trips * self._bind_loop(stmt))
        elif isinstance(stmt, tirx.BufferStore):
            if _is_accumulate(stmt):
                self.total += trips
        elif isinstance(stmt, tirx.SeqStmt):
            for item in stmt.seq:
                self.walk(item, trips)
        elif isinstance(stmt, tirx.IfThenElse):
            self.walk(stmt.then_case, trips)
            self.walk(stmt.else_case, trips)
        else:
            if hasattr(stmt, "var") and hasattr(stmt, "value"):  # Bind / LetStmt
                self.analyzer.bind(stmt.var, stmt.value)
            for name in _BODY_FIELDS:
                inner = getattr(stmt, name, None)
                if inner is not None:
                    self.walk(inner, trips)
                    break

    def _bind_loop(self, loop) -> int:
        """The loop's largest trip count; its variable's range is known inside it."""
        import tvm.sym

        extent = max(self.analyzer.const_int_bound(loop.extent).max_value, 0)
        low = self.analyzer.const_int_bound(loop.min)
        self.analyzer.update(loop.loop_var,
                             tvm.sym.ConstIntBound(low.min_value,
                                                   low.max_value + max(extent - 1, 0)),
                             override=True)
        return extent


def _is_accumulate(store) -> bool:
    value = store.value
    if type(value).__name__ != "Add":
        return False
    return ((_loads(value.a, store.buffer) and _has_multiply(value.b))
            or (_loads(value.b, store.buffer) and _has_multiply(value.a)))


def _loads(expr, buffer) -> bool:
    """Whether `expr` reads the buffer the store writes."""
    source = getattr(expr, "source", None)  # TensorLoad (TVM 0.27)
    if source is None:
        source = getattr(expr, "buffer", None)  # BufferLoad
    if source is None:
        return False
    return source.same_as(buffer) or source.same_as(buffer.data)


def _has_multiply(expr) -> bool:
    if type(expr).__name__ == "Mul":
        return True
    children = [getattr(expr, name, None) for name in _EXPR_FIELDS]
    children += list(getattr(expr, "args", None) or [])
    return any(c is not None and hasattr(c, "same_as") and _has_multiply(c)
               for c in children)
