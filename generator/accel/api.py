"""The accelerator plugin interface: what a plugin declares and what it is handed.

A plugin is a subclass of `Accelerator` (one instance per export or project). It declares
1. the operators it takes: `patterns()` returns `Pattern`s (Relax dataflow patterns, tried in
   order, after the integer rewrite), each with an optional `check` that can refuse a match;
2. for each match, a lowering: `lower()` returns a `Lowering`, a TIR PrimFunc whose body
   calls the driver with `T.call_extern` (`extern_kernel()` builds the usual one);
3. its driver: `driver()` returns the C sources, include directories and defines a project
   needs (`Driver`), and the counters hook the application calls after a run;
4. its options (`Option`, typed, with help) and the boards it supports (`supports()`).

docs/accelerators.md is the tutorial; generator/accel/vanilla is the example.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

OPTION_TYPES = ("str", "int", "bool", "path")


@dataclass(frozen=True)
class Option:
    """One option of a plugin, given as `--target-<plugin>-<name>=VALUE`."""

    name: str
    type: str = "str"  # one of OPTION_TYPES
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] = ()
    env: str | None = None  # an environment variable that gives the value when unset


@dataclass(frozen=True)
class QuantizedOp:
    """An int8 operator as the integer rewrite found it (TFLite semantics, NHWC, batch 1
    for convolutions). `params` and `tensors` keys per kind are listed in
    docs/accelerators.md; `tensors` hold numpy arrays (weights, the model's own int32 bias,
    per-channel requantization multiplier and shift as int32)."""

    kind: str  # conv2d | depthwise_conv2d | dense | add | avg_pool2d | softmax | concatenation
    input_shapes: tuple[tuple[int, ...], ...]
    output_shape: tuple[int, ...]
    params: dict[str, Any]
    tensors: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Match:
    """One place a pattern matched: what a check hook and a lowering see.

    `inputs` are the activations the kernel reads (relax expressions, in order);
    `input_shapes`/`input_dtypes` describe them. `bound` maps each named sub-pattern of
    the `Pattern` to the matched Relax expression; `constants` maps names of matched
    constant sub-patterns to their values. For int8 operators `op` is the `QuantizedOp`.
    """

    pattern: str
    inputs: list[Any]
    input_shapes: list[tuple[int, ...]]
    input_dtypes: list[str]
    output_shape: tuple[int, ...]
    output_dtype: str
    bound: dict[str, Any] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    op: QuantizedOp | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def attrs(self, name: str) -> Any:
        """The Relax attributes of the call bound to sub-pattern `name`."""
        return self.bound[name].attrs


@dataclass(frozen=True)
class Pattern:
    """A named Relax dataflow pattern with its sub-patterns, and an optional check.

    `parts` names sub-patterns, so that checks and lowerings find what they matched
    (`Match.bound`, `Match.constants`); `inputs` names the parts that are the kernel's
    activation inputs, in order. `check(match)` returns None to take the match or a reason
    (one line) to refuse it. For int8 operators use `int8_op(kind)`: it matches the
    integer kernel the rewrite wrote, and `Match.op` describes it.
    """

    name: str
    pattern: Any  # tvm.relax.dpl.DFPattern
    parts: dict[str, Any] = field(default_factory=dict)  # name → sub-pattern
    inputs: tuple[str, ...] = ()
    int8_kind: str | None = None
    check: Callable[[Match], str | None] | None = None


@dataclass(frozen=True)
class Lowering:
    """A PrimFunc taking (activations..., constants..., output) and the constants."""

    func: Any  # tvm.tirx.PrimFunc
    constants: list[np.ndarray] = field(default_factory=list)
    macs: int = 0  # multiply-accumulates the call does (for reports)
    scratch_bytes: int = 0  # working memory the driver call needs (see Driver.scratch_define)


@dataclass(frozen=True)
class Driver:
    """What a project needs to call the accelerator.

    `directory`'s `sources` and `headers` (paths relative to it) are copied into the project
    under accel/<plugin>/; `include_dirs` (relative) are added to the include path.
    `external` names source trees the user owns (e.g. CMSIS-NN): compiled from where they
    are, never copied. `counters` is the driver's counter hook (mtvg/accel.h), if any.
    """

    directory: Path
    sources: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = (".",)
    defines: dict[str, str | int] = field(default_factory=dict)
    external: tuple[ExternalSources, ...] = ()
    counters: str | None = None
    # A define that receives the most scratch bytes any lowered call declared: the driver
    # sizes its own static scratch region with it (at least 1).
    scratch_define: str | None = None


@dataclass(frozen=True)
class ExternalSources:
    """A source tree outside the project: C files matched by `globs` under `root`."""

    name: str
    root: Path
    globs: tuple[str, ...]
    include_dirs: tuple[str, ...]


class Accelerator:
    """Base class of every plugin. Subclasses set the class attributes and override
    `patterns`, `lower` and `driver`; `supports` and `configure` have useful defaults."""

    name: str = ""
    description: str = ""
    options: tuple[Option, ...] = ()
    boards: tuple[str, ...] | None = None  # board names; None: every board
    board_features: tuple[str, ...] = ()  # features a board must have (e.g. "dsp")
    # `export --board B` without --target picks the plugin on boards with any of these
    # features, when `ready()` says it can be used with its default options.
    default_on: tuple[str, ...] = ()
    # The driver's call interface as the exported code uses it (the functions' arguments
    # and the constants' layouts). Raise it when they change: an archive records the
    # version it was exported for, and `generate` refuses another.
    abi: int = 1

    def configure(self, options: dict[str, Any]) -> None:
        """Check option values together (types are already checked); raise
        generator.errors.ExportError / ProjectError with one line to refuse."""

    def patterns(self, options: dict[str, Any]) -> list[Pattern]:
        raise NotImplementedError

    def lower(self, match: Match, options: dict[str, Any]) -> Lowering:
        raise NotImplementedError

    def driver(self, options: dict[str, Any], board: Any) -> Driver:
        raise NotImplementedError

    def ready(self, options: dict[str, Any]) -> str | None:
        """None when the plugin can be used with these options as a board's default;
        else what the user should set."""
        return None

    def board_options(self, board: Any) -> dict[str, str]:
        """Option values a board implies when the plugin is its default (`export --board`
        without --target), as `--target-<plugin>-<name>=VALUE` would give them; the user's
        own values win."""
        return {}

    def supports(self, board: Any) -> str | None:
        """None when the plugin can run on `board` (a generator.boards.Board), else why not."""
        if self.boards is not None and board.name not in self.boards:
            return f"it supports {', '.join(self.boards)}"
        missing = [f for f in self.board_features if f not in board.features]
        if missing:
            return f"the board lacks {', '.join(missing)}"
        return None
