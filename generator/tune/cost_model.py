"""A cost model that ranks a task's candidates before they are built: gradient-boosted trees
(xgboost) over each schedule's decisions, trained on the candidates measured so far.

TVM's own model cannot run here: its feature extractor (`PerStoreFeature`) writes IR as
JSON, which crashes TVM 0.27.0.post1 (records.py). A candidate of a task is its design
space's instructions with sampled decisions (tile factors, the unroll step), so the
decisions themselves describe it, as AutoTVM's knob features did: each tile factor as
log2, the categorical choices as they are, and per tiling level the product of the factors
of every spatial loop (the block of outputs kept in registers is one of them) and of every
reduction loop. Targets are log(untuned / candidate time) — how much faster — and a
candidate that failed is taken as slower than every one measured.

Deterministic: one thread, exact trees, a fixed seed; the same measurements train the same
model, so a resumed search proposes what an uninterrupted one did.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np

MIN_TRAINING = 8  # measured candidates before the model is consulted
FEATURES = 64  # decision values kept per candidate (a design space has far fewer)
SPATIAL_LEVELS = 4  # MultiLevelTiling "SSRSRS": four spatial tiles per loop, two reduction
REDUCTION_LEVELS = 2
SPACE_IDS = 1 << 20  # a design space's id: its instructions' kinds, hashed (exact in float32)
FAILED_MARGIN = 0.5  # a failed candidate: this much (log) below the slowest measured
BOOST_ROUNDS = 60
BOOST_PARAMS = {"max_depth": 4, "eta": 0.2, "subsample": 1.0, "min_child_weight": 1,
                "objective": "reg:squarederror", "tree_method": "exact", "nthread": 1,
                "seed": 0, "verbosity": 0}


def available() -> bool:
    """Whether xgboost is installed (else the search stays unguided)."""
    try:
        import xgboost  # noqa: F401
    except ImportError:
        return False
    return True


def _log2(value) -> float:
    return math.log2(max(int(value), 1))


@dataclass
class CostModel:
    """Candidates' traces (plain JSON, as records.py keeps them) → predicted speed-up."""

    rows: list[np.ndarray] = field(default_factory=list)
    speedups: list[float | None] = field(default_factory=list)  # None: the candidate failed
    booster: object = None

    def features(self, trace_json: list) -> np.ndarray:
        insts, decisions = trace_json[0], trace_json[1]
        space = zlib.crc32(" ".join(str(inst[0]) for inst in insts).encode()) % SPACE_IDS
        values: list[float] = []
        spatial = [0.0] * SPATIAL_LEVELS
        reduction = [0.0] * REDUCTION_LEVELS
        for _, decision in sorted(decisions, key=lambda d: int(d[0])):
            if isinstance(decision, list):
                factors = [_log2(f) for f in decision]
                values += factors
                levels = spatial if len(factors) == SPATIAL_LEVELS else \
                    reduction if len(factors) == REDUCTION_LEVELS else None
                if levels is not None:
                    for level, f in enumerate(factors):
                        levels[level] += f
            else:
                values.append(float(decision))
        values = (values + [0.0] * FEATURES)[:FEATURES]
        return np.array([float(space), *spatial, *reduction, *values], np.float32)

    def add(self, trace_json: list, speedup: float | None) -> None:
        """One measured candidate (speed-up over the untuned kernel, None: it failed)."""
        self.rows.append(self.features(trace_json))
        self.speedups.append(speedup)
        self.booster = None

    @property
    def trained_on(self) -> int:
        return sum(s is not None for s in self.speedups)

    def ready(self) -> bool:
        return self.trained_on >= MIN_TRAINING and available()

    def _fit(self) -> None:
        import xgboost

        measured = [math.log(s) for s in self.speedups if s is not None]
        floor = min(measured) - FAILED_MARGIN
        targets = [floor if s is None else math.log(s) for s in self.speedups]
        # in a canonical order: a resumed run learns its results in another order
        order = sorted(range(len(self.rows)),
                       key=lambda i: (self.rows[i].tobytes(), targets[i]))
        data = xgboost.DMatrix(np.stack([self.rows[i] for i in order]),
                               label=np.array([targets[i] for i in order], np.float32))
        self.booster = xgboost.train(BOOST_PARAMS, data, num_boost_round=BOOST_ROUNDS)

    def predict(self, traces: list[list]) -> np.ndarray:
        """Predicted log speed-up of each trace (higher is faster)."""
        import xgboost

        if self.booster is None:
            self._fit()
        rows = np.stack([self.features(t) for t in traces])
        return self.booster.predict(xgboost.DMatrix(rows))
