"""generator/export/schedule.py on real fused kernels: every step applies without an error
(a failing schedule falls back to the unscheduled kernel silently at export, so a bug here
shows only as lost RAM) and the kernels keep no full-size intermediate."""

from __future__ import annotations

import pytest

from generator.export import schedule
from tests.conftest import REPO


@pytest.fixture(scope="module")
def mnist_kernels():
    from generator.export.frontend import import_model
    from generator.export.lower import fuse

    mod, _ = import_model(REPO / "tests" / "fixtures" / "models" / "corpus" / "mnist_8"
                          / "mnist-8.onnx", {})
    fused, _, _ = fuse(mod)
    return {gv.name_hint: f for gv, f in fused.functions.items()
            if gv.name_hint != "main" and hasattr(f, "params")}


def test_every_mnist_kernel_is_scheduled_without_an_error(mnist_kernels):
    from tvm import s_tir

    for name, func in mnist_kernels.items():
        sch = s_tir.Schedule(func)
        schedule._inline_injective(sch)
        schedule._epilogues_under_reductions(sch)  # raises on a bug, as export would hide
        schedule._init_before_reduction_loops(sch)
        assert schedule._written_elements(sch, schedule._blocks(sch)[-1]) is not None, name


def test_the_convolution_keeps_no_padded_copy_nor_full_result(mnist_kernels):
    conv = next(f for n, f in mnist_kernels.items() if n.startswith("fused_conv2d"))
    text = schedule.shrink_intermediates(conv).script()
    assert "pad_temp = T.alloc_buffer" not in text
    assert "conv2d_nchw_intermediate = T.alloc_buffer((T.int64(1)," not in text
