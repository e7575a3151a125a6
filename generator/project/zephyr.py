"""Zephyr projects: the template's board table (boards.json), the build, and its back-end.

A template directory whose `template.json` names the back-end "zephyr" (`ZephyrBackend`)
renders a Zephyr 4.x application around the same runtime as the CRT template. Its
`boards.json` maps Zephyr board names (hardware model v2: `mps2/an385`, `nucleo_f746zg`) to
what the generator needs: a microtvm-gen board that stands in for compiler flags and the
archive checks, the memory sizes of the Zephyr board, its QEMU machine or (physical boards)
its debug probe's USB ids and `west flash` runners, stack size and how the firmware exits.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from generator.boards import Board, FlashSpec, QemuSpec, UsbSpec, load_board
from generator.errors import BoardError, ProjectError, ToolchainError
from generator.project.backend import (
    BuiltFirmware,
    TemplateBackend,
    TemplateBoard,
    backend_spec,
)
from generator.project_api.protocol import ProjectOption
from generator.toolchain import BUILD_DIR, FIRMWARE, configured_elsewhere, first_error

if TYPE_CHECKING:
    import jinja2  # render_extras' type; the renderer imports it

BOARDS_FILE = "boards.json"
TABLE_SCHEMA = 1
RENDERER = "zephyr"
PLATFORM = "zephyr"  # templates/common/platform/zephyr/
ZEPHYR_ELF = "zephyr/zephyr.elf"  # in the build directory
EXITS = ("semihosting", "reboot")
LINKS = ("qemu", "serial")  # QEMU's UART on stdio, or the board's USB serial port
WEST_RUNNER = "west"  # generator/device/flash.py: `west flash` with one of Zephyr's runners
ZEPHYR_BASE_HINT = ("set ZEPHYR_BASE to a Zephyr 4.x tree (and ZEPHYR_MODULES to its "
                    "modules/hal/cmsis and modules/lib/cmsis_6 outside a west workspace); "
                    "docs/zephyr.md")
BUILD_TIMEOUT = 1800
ARM_TOOLCHAIN = "arm-none-eabi"  # Zephyr's gnuarmemb variant; other GNU prefixes: cross-compile


@dataclass(frozen=True)
class ZephyrBoard:
    name: str  # the Zephyr board name, e.g. "mps2/an385"
    description: str
    stand_in: str  # microtvm-gen board with the same core (flags, arch, runner kind)
    runner: str
    flash_bytes: int
    ram_origin: int
    ram_bytes: int
    main_stack_bytes: int
    uart: str
    exit: str
    qemu_machine: str | None = None
    qemu_cpu: str | None = None
    qemu_args: tuple[str, ...] = ()  # more qemu-system-* arguments (RISC-V virt: -bios none)
    west_runner: str | None = None  # physical boards: the default `west flash --runner`
    west_runners: tuple[str, ...] = ()  # the runners the board's board.cmake offers
    usb_vid: int | None = None  # physical boards: the debug probe carrying the link
    usb_pids: tuple[int, ...] = ()
    # What the core offers as Zephyr configures it ("dsp", "fpu"); None: the stand-in's.
    # Without "fpu" the build is soft float (Zephyr's CONFIG_FPU=n), whatever the stand-in.
    features: tuple[str, ...] | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> ZephyrBoard:
        """The record in project.json (lists back to tuples; older projects lack fields)."""
        data = dict(data)
        for key in ("west_runners", "usb_pids", "qemu_args"):
            data[key] = tuple(data.get(key) or ())
        if data.get("features") is not None:
            data["features"] = tuple(data["features"])
        return cls(**data)


def is_zephyr_template(template_dir: Path | None) -> bool:
    return backend_spec(template_dir) == RENDERER


def load_board_table(template_dir: Path) -> dict[str, ZephyrBoard]:
    """boards.json: Zephyr board name -> ZephyrBoard, every entry checked."""
    path = template_dir / BOARDS_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ProjectError(f"{template_dir} is a Zephyr template without {BOARDS_FILE}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProjectError(f"{path} is not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != TABLE_SCHEMA:
        raise ProjectError(f"{path}: board table schema {data.get('schema')!r}; "
                           f"this tool reads schema {TABLE_SCHEMA}")
    table = {}
    for name, entry in sorted(data.get("boards", {}).items()):
        try:
            board = _table_entry(name, entry)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ProjectError(f"{path}: board '{name}': missing or invalid field {exc}") from None
        problem = _entry_problem(board)
        if problem:
            raise ProjectError(f"{path}: board '{name}' {problem}")
        table[name] = board
    return table


def _number(value: int | str) -> int:
    """A JSON number, or a string such as "0x0483" (USB ids read better in hex)."""
    return value if isinstance(value, int) else int(str(value), 0)


def _table_entry(name: str, entry: dict) -> ZephyrBoard:
    qemu = entry.get("qemu") or {}
    flash = entry.get("flash") or {}
    usb = entry.get("usb") or {}
    return ZephyrBoard(
        name=name, description=str(entry["description"]),
        stand_in=str(entry["stand_in"]), runner=str(entry["runner"]),
        flash_bytes=int(entry["flash_bytes"]), ram_origin=int(entry["ram_origin"]),
        ram_bytes=int(entry["ram_bytes"]),
        main_stack_bytes=int(entry["main_stack_bytes"]), uart=str(entry["uart"]),
        exit=str(entry["exit"]), qemu_machine=qemu.get("machine"), qemu_cpu=qemu.get("cpu"),
        qemu_args=tuple(str(a) for a in qemu.get("args", ())),
        west_runner=flash.get("west_runner"),
        west_runners=tuple(str(r) for r in flash.get("west_runners", ())),
        usb_vid=_number(usb["vid"]) if usb else None,
        usb_pids=tuple(_number(p) for p in usb.get("pid", ())),
        features=tuple(str(f) for f in entry["features"]) if "features" in entry else None)


def _entry_problem(board: ZephyrBoard) -> str | None:
    """What is wrong with a checked-in entry (None: nothing)."""
    if board.exit not in EXITS:
        return f"exit '{board.exit}' is not one of {', '.join(EXITS)}"
    if board.runner not in LINKS:
        return f"runner '{board.runner}' is not one of {', '.join(LINKS)}"
    if board.runner == "qemu" and not (board.qemu_machine and board.qemu_cpu):
        return "runs in QEMU but names no qemu machine"
    if board.runner == "serial":
        if board.west_runner is None or board.west_runner not in board.west_runners:
            return "needs flash.west_runner, one of flash.west_runners"
        if board.usb_vid is None or not board.usb_pids:
            return "needs usb.vid and usb.pid (its debug probe's serial port carries the link)"
    return None


def zephyr_board(template_dir: Path, name: str) -> ZephyrBoard:
    table = load_board_table(template_dir)
    if name not in table:
        raise BoardError(f"unknown Zephyr board '{name}'; this template knows: "
                         f"{', '.join(table)}", hint=f"add it to {template_dir / BOARDS_FILE}")
    return table[name]


def effective_board(zb: ZephyrBoard) -> Board:
    """The stand-in microtvm-gen board with the Zephyr board's name, memory, QEMU machine or
    probe and `west flash` runners, and port (messages name the Zephyr board)."""
    base = load_board(zb.stand_in)
    qemu, flash, usb = None, None, None
    if zb.runner == "qemu" and base.qemu is not None:
        qemu = dataclasses.replace(base.qemu, machine=zb.qemu_machine, cpu=zb.qemu_cpu,
                                   args=zb.qemu_args)
    elif zb.runner == "qemu":
        qemu = QemuSpec(binary="qemu-system-arm", machine=str(zb.qemu_machine),
                        cpu=str(zb.qemu_cpu), args=zb.qemu_args)
    else:
        flash = FlashSpec(WEST_RUNNER, runners={WEST_RUNNER: {
            "runner": zb.west_runner, "runners": list(zb.west_runners)}})
        usb = UsbSpec(int(zb.usb_vid or 0), zb.usb_pids)
    features, cflags, ldflags = base.features, base.cflags, base.ldflags
    if zb.features is not None:
        features = zb.features
        if "fpu" not in features:
            cflags, ldflags = _soft_float(cflags), _soft_float(ldflags)
    return dataclasses.replace(base, name=zb.name, description=zb.description,
                               features=features, cflags=cflags, ldflags=ldflags,
                               platform=PLATFORM, link=zb.runner, flash_bytes=zb.flash_bytes,
                               ram_origin=zb.ram_origin, ram_bytes=zb.ram_bytes,
                               stack_bytes=zb.main_stack_bytes, qemu=qemu, linker_script=None,
                               flash=flash, usb=usb, flash_origin=None, clock_hz=None)


def _soft_float(flags: tuple[str, ...]) -> tuple[str, ...]:
    """The stand-in's flags for the same core without its FPU (they pick libm's multilib)."""
    return tuple("-mfloat-abi=soft" if f.startswith("-mfloat-abi=") else f for f in flags
                 if not f.startswith("-mfpu="))


def project_board(project: dict) -> Board:
    """The board a generated Zephyr project runs on (for building, sizes and QEMU)."""
    return effective_board(ZephyrBoard.from_json(project["zephyr"]["board"]))


# ---- Building -----------------------------------------------------------------------------


def toolchain_env(env: dict[str, str], toolchain: str = ARM_TOOLCHAIN) -> dict[str, str]:
    """Zephyr SDK when the caller set one up, else the stand-in's GNU toolchain from PATH:
    gnuarmemb for arm-none-eabi, cross-compile (CROSS_COMPILE prefix) for any other."""
    out = dict(env)
    if out.get("ZEPHYR_TOOLCHAIN_VARIANT") or out.get("ZEPHYR_SDK_INSTALL_DIR"):
        return out
    gcc = shutil.which(f"{toolchain}-gcc", path=out.get("PATH"))
    if gcc is None:
        raise ToolchainError("no Zephyr toolchain: neither ZEPHYR_TOOLCHAIN_VARIANT / "
                             f"ZEPHYR_SDK_INSTALL_DIR is set nor {toolchain}-gcc on PATH",
                             hint=f"install the Zephyr SDK, or apt-get install gcc-{toolchain}")
    if toolchain == ARM_TOOLCHAIN:
        out["ZEPHYR_TOOLCHAIN_VARIANT"] = "gnuarmemb"
        out["GNUARMEMB_TOOLCHAIN_PATH"] = str(Path(gcc).resolve().parent.parent)
    else:
        out["ZEPHYR_TOOLCHAIN_VARIANT"] = "cross-compile"
        out["CROSS_COMPILE"] = str(Path(gcc).parent / f"{toolchain}-")
    return out


def in_west_workspace(zephyr_base: Path, env: dict[str, str]) -> bool:
    """True when `west` is on PATH and ZEPHYR_BASE lies in a west workspace."""
    west = shutil.which("west", path=env.get("PATH"))
    if west is None:
        return False
    probe = subprocess.run([west, "topdir"], cwd=zephyr_base, env=env, capture_output=True,
                           text=True, timeout=60)
    return probe.returncode == 0


ZEPHYR_PYTHON_ENV = "MICROTVM_GEN_ZEPHYR_PYTHON"


def zephyr_python(env: dict[str, str]) -> str:
    """The interpreter that runs Zephyr's build scripts: MICROTVM_GEN_ZEPHYR_PYTHON (e.g. the
    venv Zephyr's getting-started guide makes), else the one this tool runs in; never
    whichever `python3` comes first on PATH."""
    chosen = env.get(ZEPHYR_PYTHON_ENV)
    if not chosen:
        return sys.executable
    if not (Path(chosen).is_file() and os.access(chosen, os.X_OK)):
        raise ToolchainError(f"{ZEPHYR_PYTHON_ENV}={chosen} is not an executable Python",
                             hint=f"unset it to use {sys.executable}")
    return chosen


def build_commands(project_dir: Path, build_dir: Path, board: str, zephyr_base: Path,
                   env: dict[str, str]) -> list[list[str]]:
    """`west build` in a west workspace, else CMake + Ninja (configure only once), with
    Zephyr's scripts in `zephyr_python(env)` (Python3_EXECUTABLE)."""
    python = f"-DPython3_EXECUTABLE={zephyr_python(env)}"
    if in_west_workspace(zephyr_base, env):
        return [["west", "build", "-b", board, "-d", str(build_dir), str(project_dir), "--",
                 python]]
    commands = []
    if not (build_dir / "CMakeCache.txt").exists():
        commands.append(["cmake", "-G", "Ninja", "-S", str(project_dir), "-B", str(build_dir),
                         f"-DBOARD={board}", python])
    commands.append(["cmake", "--build", str(build_dir)])
    return commands


_MISSING_MODULE_RE = re.compile(r"No module named '([\w.]+)'")


def build_failure(lines: list[str], project_dir: Path, log: Path,
                  python: str = sys.executable) -> ToolchainError:
    """The one line a failed Zephyr build is reported with: a Python module missing from the
    build's interpreter is the cause wherever it appears (CMake's own error that follows it,
    e.g. "Error finding board", is only its consequence); else the log's first error."""
    missing = next((m.group(1) for m in map(_MISSING_MODULE_RE.search, lines) if m), None)
    if missing is not None:
        return ToolchainError(f"Zephyr build failed: Python module '{missing}' is missing from "
                              f"{python}, which runs Zephyr's build scripts "
                              f"(full log: {log})",
                              hint=f"{python} -m pip install -r "
                                   "$ZEPHYR_BASE/scripts/requirements-base.txt, or point "
                                   f"{ZEPHYR_PYTHON_ENV} at a Python that has them")
    return ToolchainError(f"Zephyr build failed: {first_error(lines, project_dir)} "
                          f"(full log: {log})")


def build_zephyr(project_dir: Path, project: dict, build_dir: Path, log: Path,
                 env: dict[str, str] | None = None, progress=None) -> Path:
    """Build the Zephyr application; returns the ELF (copied to the build dir's firmware.elf
    so that `run`, `serve` and the Project API open it like any project's)."""
    env = dict(os.environ if env is None else env)
    base = env.get("ZEPHYR_BASE")
    if not base:
        raise ToolchainError("a Zephyr project needs ZEPHYR_BASE", hint=ZEPHYR_BASE_HINT)
    zephyr_base = Path(base)
    if not (zephyr_base / "VERSION").is_file():
        raise ToolchainError(f"ZEPHYR_BASE ({base}) is not a Zephyr tree (no VERSION file)",
                             hint=ZEPHYR_BASE_HINT)
    env = toolchain_env(env, project_board(project).toolchain)
    if shutil.which("ninja", path=env.get("PATH")) is None:
        raise ToolchainError("Zephyr builds need ninja on PATH", hint="apt-get install ninja-build")
    board = project["zephyr"]["board"]["name"]
    build_dir.mkdir(parents=True, exist_ok=True)
    for cmd in build_commands(project_dir, build_dir, board, zephyr_base, env):
        if progress:
            progress(" ".join(cmd[:2]))
        with log.open("a") as out:
            proc = subprocess.run(cmd, cwd=project_dir, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT)
        if proc.returncode != 0:
            raise build_failure(log.read_text(errors="replace").splitlines(), project_dir, log,
                                zephyr_python(env))
    elf = build_dir / FIRMWARE
    shutil.copyfile(build_dir / ZEPHYR_ELF, elf)
    return elf


# ---- The back-end ---------------------------------------------------------------------------

GENERATE = ("generate_project",)


class ZephyrBackend(TemplateBackend):
    """Zephyr boards from the template's boards.json; prj.conf; Zephyr's own build."""

    name = RENDERER
    title = "Zephyr"
    platform_name = PLATFORM
    board_aliases = ("zephyr_board",)
    accelerator_drivers = False

    def board_names(self, template: Path) -> list[str]:
        return list(load_board_table(template))

    def project_options(self, template: Path,
                        options: list[ProjectOption]) -> list[ProjectOption]:
        """A Zephyr template names Zephyr boards (its boards.json), also as 'zephyr_board'."""
        names = self.board_names(template)
        options = list(options)
        options[0] = ProjectOption("board", "str", "the Zephyr board (this template's "
                                   "boards.json); 'zephyr_board' names it too",
                                   optional=GENERATE, choices=tuple(names))
        options.insert(1, ProjectOption("zephyr_board", "str", "the Zephyr board, e.g. "
                                        "mps2/an385 (hardware model v2 names)",
                                        optional=GENERATE, choices=tuple(names)))
        return options

    def template_board(self, template: Path, name: str) -> TemplateBoard:
        zb = zephyr_board(template, name)
        return TemplateBoard(effective_board(zb), {"zephyr": zb},
                             {"zephyr": {"board": zb.to_json(), "platform_name": PLATFORM}})

    def project_board(self, project: dict) -> Board:
        return project_board(project)

    def render_extras(self, env: jinja2.Environment, context: dict,
                      board: Board) -> dict[str, bytes]:
        return {"prj.conf": env.get_template("prj.conf.j2").render(context).encode()}

    def build(self, project_dir: Path, project: dict, board: Board, sanitize: bool | None,
              progress: Callable[[str], None] | None) -> BuiltFirmware:
        """`west build`, or CMake + Ninja with ZEPHYR_BASE."""
        if sanitize:
            raise ToolchainError("--sanitize needs a host build; Zephyr projects are firmware")
        build_dir = project_dir / BUILD_DIR
        if configured_elsewhere(project_dir):
            shutil.rmtree(build_dir)
        build_dir.mkdir(exist_ok=True)
        log = build_dir / "build.log"
        log.write_text("")
        return BuiltFirmware(build_zephyr(project_dir, project, build_dir, log,
                                          progress=progress), False)
