"""One-operator TFLite test cases and their check: the model built by tests/tflite_builder.py,
exported, compiled by gcc on the host (tests/c_runner.py) and compared byte for byte with
TFLite's reference kernels (BUILTIN_REF); float outputs within 1e-5 relative. A case whose
one 8-bit input takes `all_values` runs on each of its 256 values at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from generator.export.api import export_model
from tests.c_runner import CModel
from tests.tflite_builder import Tensor, op_model, random_input, reference

SAMPLES = 4
ALL = (1, 256)


@dataclass
class Case:
    id: str
    op: str
    inputs: list
    outputs: list
    options: dict = field(default_factory=dict)
    all_values: bool = False  # the one 8-bit input takes each of its 256 values
    op_resolver: str = "BUILTIN_REF"  # BUILTIN for operators with no reference kernel

    def model(self) -> bytes:
        return op_model(self.op, self.inputs, self.outputs, self.options or None)


def q8(shape, scale, zero, dtype="int8", data=None):
    return Tensor(tuple(shape), dtype, scale, zero, data=data)


def f32(shape, data=None):
    return Tensor(tuple(shape), "float32", data=data)


def case_inputs(case: Case, rng) -> list[list[np.ndarray]]:
    graph_inputs = [t for t in case.inputs if t is not None and t.data is None
                    and not t.is_variable]
    if case.all_values:
        t = graph_inputs[0]
        values = np.arange(256) - (0 if t.dtype == "uint8" else 128)
        return [[values.astype(t.np_dtype).reshape(t.shape)]]
    return [[random_input(rng, t) for t in graph_inputs] for _ in range(SAMPLES)]


def check_case(case: Case, tmp_path: Path, rtol: float = 1e-5) -> None:
    """Export the case's model, run its C on the host, compare with TFLite."""
    path = tmp_path / "model.tflite"
    path.write_bytes(case.model())
    result = export_model(path, tmp_path / "model.tar")
    if any(t.scale is not None for t in case.outputs):
        assert not result.quant.fallback, result.quant.fallback
    model = CModel(result, tmp_path)
    for xs in case_inputs(case, np.random.default_rng(1)):
        want = reference(case.model(), xs, case.op_resolver)
        got = model(*xs)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype,
                                                               w.shape)
            if w.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-6)
            else:
                diff = np.flatnonzero(g.reshape(-1) != w.reshape(-1))
                assert diff.size == 0, (f"{diff.size} of {w.size} differ, first at "
                                        f"{diff[0]}: got {g.reshape(-1)[diff[0]]}, "
                                        f"want {w.reshape(-1)[diff[0]]}")
