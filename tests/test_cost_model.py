"""The tuner's cost model (generator/tune/cost_model.py): features from a schedule's decisions,
learning from measurements, and proposals that depend only on the seed and the results."""

from __future__ import annotations

import math

import numpy as np
import pytest

from generator.tune.cost_model import MIN_TRAINING, CostModel
from generator.tune.records import plain
from tests.test_tune import _task

pytest.importorskip("xgboost", reason="xgboost (the [test] extra) is the cost model")


def _traces(count: int, seed: int = 0) -> list[list]:
    from generator.tune.tuner import propose_candidates

    return [plain(s.trace.as_json(remove_postproc=True))
            for s in propose_candidates(_task(), count, seed=seed)]


def _inner_tile(trace: list) -> int:
    """The product of the innermost factor of every spatial tiling (4 levels): the block of
    outputs a candidate computes at once."""
    product = 1
    for _, decision in trace[1]:
        if isinstance(decision, list) and len(decision) == 4:
            product *= int(decision[-1])
    return product


def test_features_are_the_decisions_and_their_level_products():
    model = CostModel()
    (trace,) = _traces(1)
    row = model.features(trace)
    assert np.array_equal(row, CostModel().features(trace))  # no state: any order, any run
    tiles = [d for _, d in trace[1] if isinstance(d, list)]
    spatial = [t for t in tiles if len(t) == 4]
    assert spatial  # MultiLevelTiling's four spatial levels per loop
    innermost = sum(math.log2(t[-1]) for t in spatial)
    assert row[4] == pytest.approx(innermost)  # [space, 4 spatial levels, 2 reduction, ...]
    assert math.log2(tiles[0][0]) in row[7:].tolist()


def test_the_model_ranks_unseen_candidates_by_what_it_learned():
    """Trained on candidates whose 'speed-up' grows with their block of outputs, it ranks
    40 others in nearly that order (a failure counts as slowest)."""
    traces = _traces(80)
    speed = [math.log2(_inner_tile(t)) + 1.0 for t in traces]
    model = CostModel()
    assert not model.ready()
    for trace, s in zip(traces[:40], speed[:40], strict=True):
        model.add(trace, s)
    model.add(traces[0], None)
    assert model.ready() and model.trained_on == 40
    predicted = model.predict(traces[40:])
    wanted = np.array(speed[40:])
    ranks = np.argsort(np.argsort(predicted)), np.argsort(np.argsort(wanted))
    assert np.corrcoef(*ranks)[0, 1] > 0.7


def test_a_guided_proposer_proposes_the_same_batch_for_the_same_results_in_any_order():
    from generator.tune.space import tune_context
    from generator.tune.tuner import _Proposer, task_rng

    task = _task()
    traces = _traces(MIN_TRAINING + 4, seed=5)
    results = [(t, 1.0 + i / 10) for i, t in enumerate(traces)]

    def proposer(order):
        rng = task_rng(0, task)
        ctx = tune_context(task.mod, task.name, "replay-trace", int(rng.integers(1, 2**30)))
        p = _Proposer(task, ctx, rng)
        for trace, s in order:
            p.learn(trace, s)
        assert p.model.ready()
        return [s.trace.as_json(remove_postproc=True) for s in p.propose(4)]

    first = proposer(results)
    assert len(first) == 4
    assert [plain(t) for t in proposer(results[::-1])] == [plain(t) for t in first]
