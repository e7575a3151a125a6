"""Shared test fixtures: where archives live, which boards this machine can run."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MTVG_SHARED", REPO.parent / "shared"))
REPO_FIXTURES = REPO / "tests" / "fixtures" / "mlf"
YES_NO = REPO / "examples" / "yes_no"

# Archives under a permissive license are in the repo; the others stay in ../shared.
IN_REPO = {
    "guberti-yesno-aot-packed-v5": YES_NO / "model.tar",
    "hannah-magicwand-graph-c-tvm0.11dev": REPO_FIXTURES / "hannah-magicwand-graph-c-tvm0.11dev"
    / "model.tar",
    "staticrt-conv1d-graph-llvm-v5": REPO_FIXTURES / "staticrt-conv1d-graph-llvm-v5"
    / "archive.tar",
}
IN_SHARED = {
    "gromero-sine-aot-c-v5": "model.tar",
    "etiss-kws-aot-usmp-tvm0.16": "model.tar",
}
BOARDS = ["host", "qemu-mps2-an385"]
# Every QEMU board. Each runs a small int8 model (twice: its ticks must repeat), the graph
# archive and one host-driven call; the heavier models (mnist, kws) run on HEAVY_BOARDS:
# every board they fit. Models that do not fit a board (the micro:bit's 16 KiB) are
# checked to be refused at `generate`.
QEMU_BOARDS = ["qemu-mps2-an385", "qemu-mps2-an386", "qemu-mps2-an500", "qemu-mps2-an505",
               "qemu-mps3-an547", "qemu-microbit", "qemu-riscv32"]
ALL_BOARDS = ["host", *QEMU_BOARDS]
HEAVY_BOARDS = ["host", *(b for b in QEMU_BOARDS if b != "qemu-microbit")]


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or a skip that says why."""
    path = SHARED.joinpath("fixtures", *parts)
    if not path.exists():
        pytest.skip(f"needs {path}: ../shared is absent (fixtures without a permissive license "
                    "are not in the repo; set MTVG_SHARED to point at a copy)")
    return path


def archive(name: str) -> Path:
    if name in IN_REPO:
        return IN_REPO[name]
    return shared_path("mlf", name, IN_SHARED[name])


def require_board_tools(board: str) -> None:
    """Skip unless this machine has the board's compiler (and its QEMU)."""
    from generator.boards import load_board

    spec = load_board(board)
    for tool in (spec.tool("gcc"), *([spec.qemu.binary] if spec.qemu else [])):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/bootstrap.sh installs it as root)")


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch):
    """Tests never see a user's Zephyr tree or a relocated data folder."""
    monkeypatch.delenv("ZEPHYR_BASE", raising=False)
    monkeypatch.delenv("MICROTVM_GEN_ROOT", raising=False)
    monkeypatch.delenv("MICROTVM_GEN_ACCELERATOR_PATH", raising=False)


def children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is pid."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def serve_device_pid(serve_pid: int) -> int:
    """The device of a running `serve`: serve → its project's Project API server → the
    firmware process or QEMU."""
    (pid,) = [device for server in children(serve_pid) for device in children(server)]
    return pid


def _processes() -> dict[int, tuple[int, str]]:
    """Live processes (not zombies): pid -> (parent pid, command line)."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            state, ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if state != "Z":
            found[int(proc.name)] = (int(ppid), cmdline.strip())
    return found


# Helpers Python itself keeps until the interpreter exits (not started by a test).
INTERPRETER_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def leaked_processes(root: int, basetemp: Path) -> dict[int, str]:
    """Descendants of `root`, and processes whose command line points into `basetemp`
    (QEMU, firmware, serve that outlived their parent)."""
    table = {pid: (ppid, cmd) for pid, (ppid, cmd) in _processes().items()
             if not any(helper in cmd for helper in INTERPRETER_HELPERS)}
    marker = f"{basetemp}/"
    leaked = {pid: cmd for pid, (_, cmd) in table.items() if marker in cmd and pid != root}
    frontier = [root, *leaked]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, cmd) in table.items():
            if ppid == parent:
                leaked[pid] = cmd
                frontier.append(pid)
    return leaked


@pytest.fixture(scope="session", autouse=True)
def _no_leaked_processes(tmp_path_factory):
    """The suite fails if a process a test started is still alive at its end (then killed)."""
    yield
    if not Path("/proc/self/stat").exists():
        return
    leaked = leaked_processes(os.getpid(), tmp_path_factory.getbasetemp())
    for pid in leaked:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if leaked:
        pytest.fail("processes outlived the tests that started them: " + "; ".join(
            f"{pid}: {cmd[:160]}" for pid, cmd in sorted(leaked.items())), pytrace=False)


# ---- Host-driven mode ----------------------------------------------------------------------


def host_driven_operators():
    """The operators host-driven tests call: elementwise add, dense, conv2d (TE)."""
    from tvm import te, topi

    a = te.placeholder((256,), name="a")
    b = te.placeholder((256,), name="b")
    add = te.compute((256,), lambda i: a[i] + b[i], name="add")
    x = te.placeholder((4, 64), name="x")
    w = te.placeholder((32, 64), name="w")
    dense = topi.nn.dense(x, w)
    d = te.placeholder((1, 3, 16, 16), name="d")
    k = te.placeholder((8, 3, 3, 3), name="k")
    conv = topi.nn.conv2d_nchw(d, k, stride=1, padding=1, dilation=1)
    return {"vadd": [a, b, add], "dense": [x, w, dense], "conv2d": [d, k, conv]}


@pytest.fixture(scope="session")
def operators_archive(tmp_path_factory) -> Path:
    """An operator-style archive of host_driven_operators() (module 'ops')."""
    from generator.export.operators import export_operators

    dest = tmp_path_factory.mktemp("ops") / "ops.tar"
    export_operators(host_driven_operators(), dest, module="ops")
    return dest


def host_driven_project(archive_path: Path, board: str, out: Path, sanitize: bool = False) -> Path:
    """Generate and build a host-driven project; returns its directory."""
    from generator.build import build
    from generator.project.generate import generate

    require_board_tools(board)
    generate(archive_path, board, out, project_type="host-driven")
    build(out, sanitize=sanitize)
    return out
