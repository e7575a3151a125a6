"""A model split into stages (generator/export/stages.py): the cuts balance the cost per
call, and the stages chained on the host compute the whole model's output, byte for byte."""

from __future__ import annotations

import numpy as np
import pytest

from generator.errors import ExportError
from generator.export.stages import balanced_cuts, export_stages
from generator.mlf.reader import load_mlf
from generator.project.generate import generate
from generator.run import run_project
from tests.conftest import REPO, built_once, require_board_tools

KWS = REPO / "tests" / "fixtures" / "models" / "mlperftiny_kws" / "kws_ref_model.tflite"


def test_cuts_balance_the_costliest_stage():
    assert balanced_cuts([5, 1, 1, 1, 5], 3, {1, 2, 3, 4}) == [1, 4]
    assert balanced_cuts([1, 1, 1, 1], 2, {1, 2, 3}) == [2]
    assert balanced_cuts([1, 1, 1, 1], 2, {1}) == [1]  # only where a stage may start
    assert balanced_cuts([7], 1, set()) == []
    for costs, stages, allowed in (([1, 1], 3, {1}), ([1, 1, 1], 3, {1})):
        with pytest.raises(ExportError):
            balanced_cuts(costs, stages, allowed)


def test_kws_in_three_stages_equals_the_whole_model(tmp_path_factory):
    require_board_tools("host")
    out = tmp_path_factory.mktemp("stages")
    stages = export_stages(KWS, out, 3)
    # by MACs: 976,000 / 1,096,000 / 584,770, the least possible largest stage
    assert [s.first_call for s in stages] == [0, 4, 7]
    assert [s.cost for s in stages] == [976_000, 1_096_000, 584_770]
    assert stages[0].inputs == ["input_1"] and stages[-1].outputs == ["Identity"]
    for before, after in zip(stages, stages[1:], strict=False):
        assert before.outputs == after.inputs and before.end_call == after.first_call
    sample = np.random.default_rng(3).integers(-128, 128, (1, 49, 10, 1), dtype=np.int8)
    values = {"input_1": sample}
    for stage in stages:
        module = load_mlf(stage.path)[0].module()
        assert module.plan is not None and module.plan.pool_bytes <= 16_000
        project = out / f"p{stage.index}"
        generate(stage.path, "host", project)
        values.update(run_project(project, [{k: values[k] for k in stage.inputs}]).outputs[0])
    whole = run_project(built_once(tmp_path_factory, KWS, "host"), [{"input_1": sample}])
    assert values["Identity"].tobytes() == whole.outputs[0]["Identity"].tobytes()
