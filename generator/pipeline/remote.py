"""Stages on PEs a stock TVM RPC tracker hands out: `microtvm-gen serve --accept-firmware
--tracker HOST:PORT --key K` devices, anywhere (the tracker is the cluster manager; `tune
--tracker` allocates its devices the same way).

A `serve` endpoint calls functions; it does not run a model. So such a stage runs
host-driven: its kernels are an operator-style archive (one callable per kernel) built into
a host-driven firmware, which the coordinator uploads to the server the tracker named
(`remote.upload` + `remote.load_module`). The stage's weights and activations are tensors
on that device, made once per session; for each input the coordinator writes the stage's
inputs, calls its kernels in order, and reads its outputs. Each kernel call is a round trip
over the server's link, so this mode is for reaching PEs, not for speed: the stage's own
time is not counted (its PE is not this machine's QEMU).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from generator.boards import Board
from generator.errors import DeviceError, MtgError
from generator.export.lower import Program
from generator.export.stages import ModelSplit
from generator.pipeline.coordinator import Pe
from generator.run import TensorSpec

OPERATORS_ARCHIVE = "stage{index}-operators.tar"
OPERATORS_PROJECT = "stage{index}-host-driven"


def fused_kernels(split: ModelSplit):
    """The model's fused module (its kernels as PrimFuncs, named as the program calls
    them), lowered the way `split` was (the same row splits)."""
    return _fused(split.model, tuple(sorted(split.rows.items())))


@functools.lru_cache(maxsize=4)
def _fused(model: Path, rows: tuple[tuple[int, int], ...]):
    from generator.export import frontend
    from generator.export.api import with_c_input_names
    from generator.export.lower import fuse
    from generator.export.rowsplit import row_splits

    with row_splits(dict(rows)):
        mod, _ = frontend.import_model(model, {})
        fused, _, _ = fuse(with_c_input_names(mod))
    return fused


def write_stage_operators(split: ModelSplit, first: int, end: int, dest: Path) -> None:
    """Stage [first, end)'s kernels as an operator-style archive (host-driven firmware)."""
    from generator.export.operators import export_operators

    fused = fused_kernels(split)
    names = sorted(set(split.kernels(first, end)))
    missing = [n for n in names if n not in [gv.name_hint for gv in fused.functions]]
    if missing:
        raise MtgError(f"kernel '{missing[0]}' is not in the model's fused module; this "
                       "stage cannot run host-driven")
    result = export_operators({n: fused[n] for n in names}, dest)
    exported = {op.name for op in result.operators}
    if not set(names) <= exported:
        raise MtgError(f"the stage's kernels were exported as {sorted(exported)}, not "
                       f"{names}; this stage cannot run host-driven")


# Tensors the device holds beside the stage's own (the session's scratch).
SPARE_ALLOCS = 8


def device_definitions(split: ModelSplit, first: int, end: int) -> dict[str, str]:
    """The host-driven firmware's limits for the stage: a tensor for each of its weights
    and activations (MTVG_RPC_MAX_ALLOCS, 32 by default, is less than a stage may hold)."""
    sub, _, _ = split.stage_program(first, end)
    tensors = {sub.root(t) for call in sub.calls for t in call.args}
    return {"MTVG_RPC_MAX_ALLOCS": str(max(32, len(tensors) + SPARE_ALLOCS))}


@dataclass
class RemoteStage:
    """A stage that runs host-driven: its program and its host-driven project."""

    index: int
    project_dir: Path
    board: Board
    program: Program  # the stage's calls, its tensors (constants with their data)
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]

    @property
    def pe_name(self) -> str:
        return self.board.name

    @classmethod
    def of(cls, split: ModelSplit, index: int, first: int, end: int, project_dir: Path,
           board: Board) -> RemoteStage:
        sub, ins, outs = split.stage_program(first, end)

        def specs(ids: list[int], names: list[str]) -> list[TensorSpec]:
            out = []
            for tid, name in zip(ids, names, strict=True):
                t = sub.tensors[sub.root(tid)]
                out.append(TensorSpec(name, t.dtype, t.shape, t.nbytes))
            return out

        return cls(index, project_dir, board, sub, specs(sub.inputs, ins),
                   specs(sub.outputs, outs))


class RemotePe(Pe):
    """One PE from the tracker: a server running the stage's host-driven firmware."""

    def __init__(self, number: int, stage: RemoteStage, replica: int, tracker: tuple[str, int],
                 key: str, timeout: float) -> None:
        super().__init__(number, stage, replica)
        self.tracker = tracker
        self.key = key
        self.timeout = timeout
        self.session = None
        self.tensors: dict[int, object] = {}

    @property
    def name(self) -> str:
        where = f", {self.session.name}" if self.session is not None and self.session.name \
            else ""
        return f"PE {self.number} (stage {self.stage.index}, {self.stage.pe_name}{where})"

    def start(self) -> None:
        from generator.tune.session import RemoteSession

        self.session = RemoteSession(self.tracker, self.key, self.timeout)
        self.session.open(self.stage.project_dir)
        self.stats.board = f"{self.stage.pe_name} at {self.session.name}"

    def connect(self) -> None:
        """The stage's tensors on the device: weights with their data, the rest zeroed."""
        import tvm

        program = self.stage.program
        dev = self.session.remote.cpu(0)
        try:
            for call in program.calls:
                for tid in call.args:
                    root = program.root(tid)
                    if root not in self.tensors:
                        t = program.tensors[root]
                        data = t.data if t.kind == "constant" and t.data is not None \
                            else np.zeros(t.shape, t.dtype)
                        self.tensors[root] = tvm.runtime.tensor(np.ascontiguousarray(data),
                                                                dev)
                    if tid != root and tid not in self.tensors:  # a reshape: the same bytes
                        self.tensors[tid] = self.tensors[root]._create_view(
                            program.tensors[tid].shape)
        except Exception as exc:  # noqa: BLE001 -- RPC errors are TVM's, of any type
            raise DeviceError(f"cannot place the stage's tensors on the device: "
                              f"{str(exc).strip().splitlines()[-1]}") from None

    def _tensor(self, tid: int):
        return self.tensors[tid] if tid in self.tensors \
            else self.tensors[self.stage.program.root(tid)]

    def work(self, values: dict[str, np.ndarray], index: int) -> dict[str, np.ndarray]:
        program = self.stage.program
        try:
            for tid, spec in zip(program.inputs, self.stage.inputs, strict=True):
                array = np.ascontiguousarray(values[spec.name]).reshape(spec.shape)
                self._tensor(tid).copyfrom(array.astype(spec.dtype, copy=False))
                self.stats.received_bytes += spec.size_bytes
            lib = self.session.remote.system_lib()
            for call in program.calls:
                lib[call.kernel](*[self._tensor(t) for t in call.args])
            out = dict(values)
            for tid, spec in zip(program.outputs, self.stage.outputs, strict=True):
                out[spec.name] = self._tensor(tid).numpy().reshape(spec.shape)
                self.stats.sent_bytes += spec.size_bytes
        except MtgError:
            raise
        except Exception as exc:  # noqa: BLE001 -- RPC errors are TVM's, of any type
            raise DeviceError(str(exc).strip().splitlines()[-1] if str(exc).strip()
                              else type(exc).__name__) from None
        self.stats.inputs += 1
        return out

    def finish(self) -> None:
        self.close()

    def terminate(self) -> None:
        """A remote PE cannot be signalled: its session is dropped (the server goes on)."""
        self.close()

    def close(self) -> None:
        self.tensors.clear()
        if self.session is not None:
            self.session.close()
