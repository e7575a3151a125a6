"""Flash runners: one small class per tool that puts firmware on a physical board.

A runner declares what it can do (which image it writes, whether it can pick one of several
probes by serial number, whether that number is the one of the board's serial port) and
builds the exact command. The board file names its default runner and, in one
[flash.<runner>] table per runner, that runner's options:

    [flash]
    runner = "openocd"
    [flash.openocd]
    config = ["board/st_nucleo_f7.cfg"]     # -f files, in order
    commands = ["adapter speed 5000"]       # -c commands before programming (optional)
    [flash.pyocd]
    target = "stm32f746zgtx"
    [flash.picotool]                        # RP2040 in BOOTSEL mode over USB
    [flash.uf2]                             # copy a UF2 file to the BOOTSEL drive
    board_id = "RPI-RP2"
and, for the runners that write UF2 images, `uf2_family_id = 0xe48bff56` in [flash].
A Zephyr board (templates/zephyr/boards.json) gets the runner `west` (`west flash` with one of
the runners Zephyr configured for it); `--runner` then names that west runner.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from generator.boards import Board
from generator.build import build
from generator.device.links import link_of
from generator.device.serial_ports import connected_ports, find_board_port
from generator.device.uf2 import write_uf2
from generator.errors import BoardError, DeviceError, ToolchainError
from generator.project.backends import board_of_project
from generator.project.record import load_project
from generator.toolchain import BUILD_DIR, FIRMWARE

UF2_NAME = "firmware.uf2"
FLASH_LOG = "flash.log"
FLASH_TIMEOUT_SECONDS = 300  # a 2 MiB image at a slow SWD clock takes about a minute
# Where desktops mount USB drives; the UF2 runner looks for the board's drive there.
MOUNT_ROOTS = ("/media/*/*", "/media/*", "/run/media/*/*", "/mnt/*", "/Volumes/*")
UF2_INFO_FILE = "INFO_UF2.TXT"
# SEGGER's USB vendor id. A J-Link's USB serial number is its numeric serial zero-padded to
# 12 digits ("000683123456"); openocd and pyocd want the number itself (openocd reads a
# leading 0 as octal and refuses the rest).
SEGGER_VID = 0x1366


@dataclass
class FlashJob:
    board: Board
    elf: Path
    options: dict  # the board's [flash.<runner>] table
    serial_number: str | None = None
    mount: Path | None = None  # UF2 runner: the board's USB drive

    @property
    def uf2(self) -> Path:
        return self.elf.with_name(UF2_NAME)


@dataclass(frozen=True)
class FlashPlan:
    runner: str
    argv: list[str]
    image: Path  # the file the tool writes to the board

    def shell_text(self) -> str:
        return shlex.join(self.argv)


class Runner:
    name: ClassVar[str]
    tool: ClassVar[str]  # the program it runs (found on PATH)
    install_hint: ClassVar[str]
    image: ClassVar[str] = "elf"  # what it writes: "elf" or "uf2"
    supports_serial_number: ClassVar[bool] = True
    # True when the USB serial number of the board's serial port (its debug probe) is the
    # number this tool selects a probe by, so a connected board can be found automatically.
    probe_serial: ClassVar[bool] = True
    required_options: ClassVar[tuple[str, ...]] = ()

    def check(self, job: FlashJob) -> None:
        missing = [o for o in self.required_options if o not in job.options]
        if missing:
            raise BoardError(f"board '{job.board.name}': [flash.{self.name}] needs "
                             f"{', '.join(missing)}")
        if job.serial_number is not None and not self.supports_serial_number:
            raise BoardError(f"runner '{self.name}' cannot pick a board by serial number")

    def image_path(self, job: FlashJob) -> Path:
        return job.uf2 if self.image == "uf2" else job.elf

    def argv(self, job: FlashJob) -> list[str]:
        raise NotImplementedError

    def plan(self, job: FlashJob) -> FlashPlan:
        self.check(job)
        return FlashPlan(self.name, self.argv(job), self.image_path(job))

    def program(self) -> str:
        found = shutil.which(self.tool)
        if found is None:
            raise ToolchainError(f"runner '{self.name}' needs {self.tool}, which is not on PATH",
                                 hint=self.install_hint)
        return found

    def require_tool(self) -> None:
        self.program()

    def execute(self, job: FlashJob, plan: FlashPlan) -> None:
        """Run the plan: the tool named in argv[0], resolved on PATH now."""
        program = self.program()
        log = job.elf.with_name(FLASH_LOG)
        try:
            proc = subprocess.run([program, *plan.argv[1:]], capture_output=True, text=True,
                                  timeout=FLASH_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired as exc:
            raise DeviceError(f"{self.tool} did not finish within {FLASH_TIMEOUT_SECONDS} s")\
                from exc
        log.write_text(f"$ {plan.shell_text()}\n{proc.stdout}{proc.stderr}")
        if proc.returncode != 0:
            lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            last = lines[-1].strip() if lines else "no output"
            raise DeviceError(f"{self.tool} failed (exit {proc.returncode}): {last[:300]}; "
                              f"full output in {log}")


class OpenOcd(Runner):
    """OpenOCD (Debian's openocd): board or interface+target config files, then `program`."""

    name = "openocd"
    tool = "openocd"
    install_hint = "apt-get install openocd"
    required_options = ("config",)

    def argv(self, job):
        argv = [self.tool]
        for cfg in job.options["config"]:
            argv += ["-f", cfg]
        if job.serial_number:
            argv += ["-c", f"adapter serial {job.serial_number}"]
        for command in job.options.get("commands", ()):
            argv += ["-c", command]
        argv += ["-c", f"program {job.elf} verify reset exit"]
        return argv


class PyOcd(Runner):
    """pyOCD (PyPI's pyocd; the optional extra 'flash'): `pyocd flash --target TARGET`."""

    name = "pyocd"
    tool = "pyocd"
    install_hint = "pip install 'microtvm-gen[flash]' (or pip install pyocd)"
    required_options = ("target",)

    def argv(self, job):
        # --no-wait: without it pyocd waits forever for a probe that is not connected.
        argv = [self.tool, "flash", "--no-wait", "--target", job.options["target"]]
        if job.serial_number:
            argv += ["--uid", job.serial_number]
        return [*argv, str(job.elf)]


class Picotool(Runner):
    """picotool: loads the UF2 into an RP2040 in BOOTSEL mode, verifies it and starts it.

    Its --ser is the RP2040's own USB serial number (in BOOTSEL mode), not the debug
    probe's, so a board is never chosen for it from the serial port list."""

    name = "picotool"
    tool = "picotool"
    install_hint = "build picotool from Raspberry Pi's sources, or use --runner uf2"
    image = "uf2"
    probe_serial = False

    def argv(self, job):
        argv = [self.tool, "load", "--verify", "--execute", str(job.uf2)]
        if job.serial_number:
            argv += ["--ser", job.serial_number]
        return argv


class Uf2Copy(Runner):
    """Copies the UF2 file onto the board's USB drive (RP2040 BOOTSEL: 'RPI-RP2')."""

    name = "uf2"
    tool = "cp"
    install_hint = "coreutils"
    image = "uf2"
    supports_serial_number = False
    probe_serial = False
    required_options = ("board_id",)

    def require_tool(self) -> None:
        pass  # copies with Python

    def drive(self, job: FlashJob) -> Path | None:
        if job.mount is not None:
            return job.mount
        return find_uf2_drive(job.options["board_id"])

    def argv(self, job):
        drive = self.drive(job)
        target = drive / UF2_NAME if drive else Path(f"<{job.options['board_id']} drive>")
        return [self.tool, str(job.uf2), str(target)]

    def execute(self, job, plan):
        drive = self.drive(job)
        if drive is None or not drive.is_dir():
            raise DeviceError(f"no {job.options['board_id']} drive is mounted",
                              hint="hold BOOTSEL while plugging the board in, or give --mount")
        try:
            shutil.copyfile(job.uf2, drive / UF2_NAME)
            os.sync()
        except OSError as exc:
            raise DeviceError(f"cannot copy {job.uf2} to {drive}: {exc.strerror}") from exc


class West(Runner):
    """`west flash` on a Zephyr build (templates/zephyr): Zephyr's own runner for the board.

    Its options come from the Zephyr board table: `runner` (the default west runner) and
    `runners` (those the board's board.cmake offers); `--runner openocd` on a Zephyr board
    picks west's openocd. The build is ours already, so west does not rebuild."""

    name = "west"
    tool = "west"
    install_hint = "pip install 'microtvm-gen[zephyr]' (or pip install west); a west workspace"
    required_options = ("runner", "runners")
    # How each west runner picks a probe by serial number (none: the tool picks one itself).
    SERIAL_ARGS: ClassVar[dict[str, tuple[str, ...]]] = {
        "jlink": ("--dev-id", "{sn}"), "pyocd": ("--dev-id", "{sn}"),
        "nrfjprog": ("--dev-id", "{sn}"), "nrfutil": ("--dev-id", "{sn}"),
        "openocd": ("--cmd-pre-init", "adapter serial {sn}")}
    ZEPHYR_ELF = ("zephyr", "zephyr.elf")  # in the build directory

    def check(self, job: FlashJob) -> None:
        super().check(job)
        if job.options["runner"] not in job.options["runners"]:
            raise BoardError(f"Zephyr board '{job.board.name}' offers the west runners "
                             f"{', '.join(job.options['runners'])}, not "
                             f"'{job.options['runner']}'")

    def image_path(self, job: FlashJob) -> Path:
        return job.elf.parent.joinpath(*self.ZEPHYR_ELF)

    def argv(self, job):
        runner = job.options["runner"]
        argv = [self.tool, "flash", "-d", str(job.elf.parent), "--skip-rebuild",
                "--runner", runner]
        if job.serial_number:
            argv += [a.format(sn=job.serial_number) for a in self.SERIAL_ARGS.get(runner, ())]
        return argv


def find_uf2_drive(board_id: str) -> Path | None:
    """A mounted drive whose INFO_UF2.TXT names `board_id` (e.g. 'Board-ID: RPI-RP2')."""
    for pattern in MOUNT_ROOTS:
        for info in sorted(Path("/").glob(pattern.lstrip("/") + "/" + UF2_INFO_FILE)):
            try:
                if f"Board-ID: {board_id}" in info.read_text(errors="replace"):
                    return info.parent
            except OSError:
                continue
    return None


RUNNERS: dict[str, type[Runner]] = {r.name: r for r in (OpenOcd, PyOcd, Picotool, Uf2Copy,
                                                         West)}


def runner_for(board: Board, name: str | None) -> tuple[Runner, dict]:
    """The runner `name` (or the board's default) and the board's options for it. A board
    flashed through west (a Zephyr board) takes the name of one of west's runners."""
    assert board.flash is not None
    name = name or board.flash.runner
    west = board.flash.runners.get(West.name)
    if west is not None and name != West.name:
        return West(), {**west, "runner": name}
    if name not in RUNNERS:
        raise BoardError(f"unknown runner '{name}'; runners: {', '.join(RUNNERS)}")
    if name not in board.flash.runners:
        raise BoardError(f"board '{board.name}' cannot be flashed with '{name}' (no "
                         f"[flash.{name}] table); its runners: "
                         f"{', '.join(board.flash.runners)}")
    return RUNNERS[name](), board.flash.runners[name]


def prepare_image(runner: Runner, job: FlashJob) -> None:
    """Write what the runner reads besides the ELF (the UF2 image)."""
    if runner.image == "uf2":
        board = job.board
        if board.flash_origin is None or board.flash_bytes is None:
            raise BoardError(f"board '{board.name}' needs [memory] flash_origin and "
                             "flash_bytes for a UF2 image")
        family = board.flash.uf2_family_id if board.flash else None
        if family is None:
            raise BoardError(f"board '{board.name}': [flash] needs uf2_family_id for a UF2 image")
        write_uf2(job.elf, job.uf2, family, board.flash_origin, board.flash_bytes)


@dataclass(frozen=True)
class FlashResult:
    board: str
    runner: str | None
    argv: list[str]
    image: str | None
    serial_number: str | None
    port: str | None  # the board's serial port, when it was found
    dry_run: bool
    flashed: bool
    note: str = ""

    def to_json(self) -> dict:
        return {"board": self.board, "runner": self.runner, "command": self.argv,
                "image": self.image, "serial_number": self.serial_number, "port": self.port,
                "dry_run": self.dry_run, "flashed": self.flashed, "note": self.note}


def flash_project(project_dir: Path, runner_name: str | None = None,
                  serial_number: str | None = None, dry_run: bool = False,
                  mount: Path | None = None, progress=None) -> FlashResult:
    """Build if needed, then put the project's firmware on its board (or say what would run).

    Without --serial-number, a runner that selects probes by the serial port's USB serial
    number gets the one of the single connected board; none or several is a DeviceError
    (a dry run without a connected board prints the command without a serial number).
    """
    project_dir = project_dir.resolve()
    board = board_of_project(load_project(project_dir))
    if board.flash is None:
        link = link_of(board)
        how = "has no flash runner" if link.needs_flash else link.where
        return FlashResult(board.name, None, [], None, None, None, dry_run, False,
                           f"nothing to flash: board '{board.name}' {how}")
    runner, options = runner_for(board, runner_name)
    port, note = None, ""
    if serial_number is None and runner.probe_serial and board.usb is not None:
        try:
            found = find_board_port(board)
            serial_number, port = found.serial_number, found.device
        except DeviceError as exc:
            if not dry_run or len(_ports_of(board)) > 1:
                raise
            note = str(exc)
    elif serial_number is not None and runner.probe_serial and board.usb is not None:
        port = next((p.device for p in _ports_of(board) if p.serial_number == serial_number),
                    None)
    elf = project_dir / BUILD_DIR / FIRMWARE
    job = FlashJob(board, elf, options, probe_serial_number(board, runner, serial_number), mount)
    plan = runner.plan(job)
    if dry_run:
        return FlashResult(board.name, runner.name, plan.argv, str(plan.image), serial_number,
                           port, True, False, note)
    runner.require_tool()  # a missing tool fails before the build
    build(project_dir, progress=progress)
    prepare_image(runner, job)
    if progress:
        progress(f"flashing {board.name} with {runner.name}")
    runner.execute(job, plan)
    return FlashResult(board.name, runner.name, plan.argv, str(plan.image), serial_number, port,
                       False, True)


def probe_serial_number(board: Board, runner: Runner, serial: str | None) -> str | None:
    """The serial number as the tool names the probe (see SEGGER_VID)."""
    if serial is None or not runner.probe_serial or board.usb is None:
        return serial
    if board.usb.vid == SEGGER_VID and serial.isdigit():
        return serial.lstrip("0") or "0"
    return serial


def _ports_of(board: Board) -> list:
    return connected_ports([board])
