"""Every hint that sends the user to a step of this tool, in one place.

A hint is the "(hint: ...)" part of a one-line error. Each one here names a step that
succeeds for the input that raised it: tests/test_hints.py takes each failing input, follows
the hint to the letter and checks the step works. Hints that point outside the tool (install
a package, a toolchain) stay beside their errors; they name a package, not a step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# The catalogue: a key per hint (tests/test_hints.py has a test for each key).
CATALOGUE = ("batch", "operator-style", "host-driven", "dsp-board", "generate-first",
             "input-shape", "fixed-shape", "serve-host-driven", "serve-operator-style",
             "bigger-board", "profile-project")


def batch() -> str:
    """run: an input file holds several samples, and --batch is missing."""
    return "add --batch to run each of them"


def operator_style() -> str:
    """generate --project-type host-driven: the archive has no system library."""
    return "export the model with '--style operator'"


def host_driven() -> str:
    """generate: an operator-style archive asked for as a standalone project."""
    return "generate with '--project-type host-driven', or export the whole model"


def dsp_board(boards: Iterable[str]) -> str:
    """generate: kernels with Arm DSP intrinsics, on a board without the extension."""
    names = sorted(boards)
    if not names:
        return "choose a board with the Arm DSP extension (Cortex-M4, M7, M33, M55)"
    return f"choose a board with the Arm DSP extension: {', '.join(names)}"


def generate_first() -> str:
    """build, run, serve, flash: the directory is not a generated project."""
    return "run 'microtvm-gen generate' first"


def input_shape_option(name: str, dims: Sequence[int | None]) -> str:
    """The --input-shape option for an input: its fixed sizes, and D<i> where it is open."""
    spec = ",".join(str(d) if d else f"D{i}" for i, d in enumerate(dims)) or "D0,D1,..."
    return f"--input-shape {name}={spec}"


def input_shape(name: str, dims: Sequence[int | None]) -> str:
    """export: an input has dynamic dimensions (None); the known ones are filled in."""
    unknown = [f"D{i}" for i, d in enumerate(dims) if not d]
    what = f" ({', '.join(unknown)}: the size you deploy with)" if unknown and dims else ""
    return f"give it with {input_shape_option(name, dims)}{what}"


def fixed_shape(name: str) -> str:
    """export: --input-shape disagrees with a shape the model fixes."""
    return f"leave out --input-shape {name}"


def serve_host_driven(archive: str) -> str:
    """serve: a standalone project whose archive has a system library."""
    return f"generate {archive} again with '--project-type host-driven'"


def serve_operator_style() -> str:
    """serve: a standalone project whose archive has no system library."""
    return ("'run' runs a standalone project; to serve it, export the model with "
            "'--style operator' and generate that archive with '--project-type host-driven'")


def bigger_board(boards: Iterable[str]) -> str:
    """generate: the firmware cannot fit the board's memory; `boards` are those it fits."""
    names = sorted(boards)
    if not names:
        return "a smaller model: it fits none of the boards"
    return f"choose a board it fits: {', '.join(names)}"


def profile_project(project_dir, board: str, built_in_template: bool = True) -> str:
    """run --profile: the project was generated without --profile (from another template:
    the command the user ran, which names it, with --profile)."""
    if not built_in_template:
        return "generate it again as you did, with --profile added"
    return (f"generate it again with --profile: microtvm-gen generate {project_dir}/model.tar "
            f"--board {board} -o {project_dir} --force --profile")
