"""Project types and the memory a project reserves: the workspace arena and, for host-driven
projects, the link's frame payload and the tensor pool.

The renderer writes these numbers into the firmware, the fit check (fit.py) counts them and
project.json records them.
"""

from __future__ import annotations

from generator import abi
from generator.boards import Board
from generator.errors import ProjectError
from generator.mlf.model import ModuleInfo

WORKSPACE_ALIGN = abi.constant("MTVG_WORKSPACE_ALIGN")
MIN_LIVE_BLOCKS = abi.constant("MTVG_WORKSPACE_MAX_LIVE")  # the default

STANDALONE = "standalone"
HOST_DRIVEN = "host-driven"
PROJECT_TYPES = (STANDALONE, HOST_DRIVEN)
# Host-driven link: frame payload limit (MTVG_LINK_MAX_PAYLOAD) and the tensor pool.
HOST_DRIVEN_MAX_PAYLOAD = 4096
HOST_DRIVEN_POOL_MAX = 1 << 20
HOST_DRIVEN_POOL_RAM_SHARE = 4  # at most a quarter of the board's RAM
# Small boards get smaller frames: each frame buffer takes at most 1/16 of the RAM (16 KiB: 1 KiB).
HOST_DRIVEN_MIN_PAYLOAD = 1024
HOST_DRIVEN_PAYLOAD_RAM_SHARE = 16


def resolve_project_type(module: ModuleInfo, project_type: str | None) -> str:
    """The project type asked for, or the one the archive implies (operators: host-driven)."""
    if project_type is None:
        return HOST_DRIVEN if module.executor == "operator" else STANDALONE
    if project_type not in PROJECT_TYPES:
        raise ProjectError(f"unknown project type '{project_type}' "
                           f"(choose {' or '.join(PROJECT_TYPES)})")
    return project_type


def arena_bytes_for(module: ModuleInfo) -> int:
    """Bytes to reserve for TVMBackendAllocWorkspace.

    TVM's workspace size plus one alignment pad per allocation site: the number of
    simultaneously live blocks never exceeds the number of call sites. For TVM's AOT that
    size is main's workspace_size_bytes; the graph executor and our AOT (MLF v8, whose
    main's figure is its activation pool) run one operator at a time, each freeing what it
    took, so it is the largest operator's workspace.
    """
    if module.workspace_call_sites == 0:
        return 0
    size = module.workspace_size_bytes
    if (module.executor == "graph" or module.abi is not None) \
            and module.operator_workspace_bytes is not None:
        size = module.operator_workspace_bytes
    return size + module.workspace_call_sites * WORKSPACE_ALIGN


def host_driven_payload(board: Board) -> int:
    """Frame payload limit of a host-driven project: 4 KiB, less on boards with little RAM."""
    if not board.ram_bytes:
        return HOST_DRIVEN_MAX_PAYLOAD
    return max(HOST_DRIVEN_MIN_PAYLOAD,
               min(HOST_DRIVEN_MAX_PAYLOAD, board.ram_bytes // HOST_DRIVEN_PAYLOAD_RAM_SHARE))


def rpc_pool_bytes(board: Board) -> int:
    """Tensor memory of a host-driven project: a quarter of the RAM, at most 1 MiB."""
    ram = board.ram_bytes if board.ram_bytes else HOST_DRIVEN_POOL_MAX
    return min(HOST_DRIVEN_POOL_MAX, ram // HOST_DRIVEN_POOL_RAM_SHARE)
