"""A model split into stages (generator/export/stages.py): the cuts balance the cost per
call. The stages chained compute the whole model's output, byte for byte: tests/test_pipeline.py
streams them in QEMU."""

from __future__ import annotations

import pytest

from generator.errors import ExportError
from generator.export.stages import balanced_cuts
from tests.conftest import REPO

KWS = REPO / "tests" / "fixtures" / "models" / "mlperftiny_kws" / "kws_ref_model.tflite"


def test_cuts_balance_the_costliest_stage():
    assert balanced_cuts([5, 1, 1, 1, 5], 3, {1, 2, 3, 4}) == [1, 4]
    assert balanced_cuts([1, 1, 1, 1], 2, {1, 2, 3}) == [2]
    assert balanced_cuts([1, 1, 1, 1], 2, {1}) == [1]  # only where a stage may start
    assert balanced_cuts([7], 1, set()) == []
    for costs, stages, allowed in (([1, 1], 3, {1}), ([1, 1, 1], 3, {1})):
        with pytest.raises(ExportError):
            balanced_cuts(costs, stages, allowed)
