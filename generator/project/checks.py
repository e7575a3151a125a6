"""Whether a board can run an archive's code at all (memory is fit.py's question)."""

from __future__ import annotations

from collections.abc import Callable

from generator import hints
from generator.boards import Board, list_boards, load_board
from generator.errors import UnsupportedModelError
from generator.mlf.model import ModuleInfo
from generator.project.sizing import HOST_DRIVEN, STANDALONE

# The other boards a hint may name, (name, Board) each: the template's own (a Zephyr
# template names Zephyr boards); by default the board files.
OtherBoards = Callable[[], list[tuple[str, Board]]]


def board_files() -> list[tuple[str, Board]]:
    return [(name, load_board(name)) for name in list_boards()]


def check_buildable(module: ModuleInfo, board: Board, origin: str,
                    project_type: str = STANDALONE, others: OtherBoards = board_files) -> None:
    """Refuse, with one clear reason, an archive this board cannot run."""
    if project_type == HOST_DRIVEN and module.registry is None:
        raise UnsupportedModelError(
            f"{origin}: host-driven projects call functions by name through the archive's "
            "system library, and this archive has none",
            hint=hints.operator_style())
    if module.executor == "operator" and project_type != HOST_DRIVEN:
        raise UnsupportedModelError(
            f"{origin}: operator-style archives are for host-driven mode (each operator called "
            "by name with tensors from the host); they hold no model to run as firmware",
            hint=hints.host_driven())
    foreign = [o for o in module.objects if o.arch != board.arch]
    if foreign:
        arches = ", ".join(sorted({o.arch for o in foreign}))
        paths = ", ".join(o.path for o in foreign)
        what = "holds only compiled objects" if not module.sources else "holds compiled objects"
        raise UnsupportedModelError(
            f"{origin}: cannot build for board '{board.name}': the archive {what} for "
            f"{arches} ({paths}) and the board runs {board.arch} code",
            hint="export the model with a C target ('c -keys=cpu') so the archive carries sources")
    if not module.sources and not module.objects:
        raise UnsupportedModelError(f"{origin}: the archive has no code (no codegen/host/src "
                                    "or codegen/host/lib files)")
    if project_type == STANDALONE and module.graph is not None and module.graph.problems:
        raise UnsupportedModelError(f"{origin}: cannot run this graph: {module.graph.problems[0]}")
    if any(s.language != "c" for s in module.sources):
        raise UnsupportedModelError(f"{origin}: C++ model sources are not supported yet")
    dsp = [s.path.rsplit("/", 1)[-1] for s in module.sources if s.uses_dsp]
    if dsp and "dsp" not in getattr(board, "features", ()):
        raise UnsupportedModelError(
            f"{origin}: the model's kernels ({', '.join(dsp)}) use Arm DSP intrinsics "
            f"(<arm_acle.h>, TVM's Cortex-M micro-kernels), and board '{board.name}' has no "
            "DSP extension",
            hint=hints.dsp_board(name for name, b in others() if "dsp" in b.features))
    if module.unsupported_calls:
        raise UnsupportedModelError(
            f"{origin}: the model's code calls {', '.join(module.unsupported_calls)}, "
            "which needs a full TVM runtime on the device; not supported")
