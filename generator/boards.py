"""The board registry: one TOML file per board in boards/ (DESIGN D5)."""

from __future__ import annotations

import platform
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from generator.device.links import LINKS
from generator.errors import BoardError
from generator.resources import boards_dir

BOARD_SCHEMA = 1
LINK_KEY = "link"
OLD_LINK_KEY = "runner"  # what board files called the link before; still read


@dataclass(frozen=True)
class QemuSpec:
    binary: str
    machine: str
    cpu: str
    icount_shift: int | None = None
    args: tuple[str, ...] = ()  # further machine options, e.g. ("-bios", "none")


@dataclass(frozen=True)
class UsbSpec:
    """USB ids of the board's debug probe, whose serial port carries the link ([usb])."""

    vid: int
    pids: tuple[int, ...]

    def matches(self, vid: int | None, pid: int | None) -> bool:
        return vid == self.vid and pid in self.pids


@dataclass(frozen=True)
class FlashSpec:
    """How firmware gets onto a physical board ([flash]): the default runner and its options."""

    runner: str  # the default runner
    uf2_family_id: int | None = None  # for runners that write UF2 images (RP2040: 0xe48bff56)
    # runner name -> its options, from the [flash.<runner>] tables
    runners: dict[str, dict] = field(default_factory=dict, compare=False, hash=False)


# Speed classes of a board's memories, fastest first (automatic placement tries them in
# this order).
REGION_KINDS = ("tcm", "sram", "external", "flash")
REGION_NAME_RE = re.compile(r"[A-Z][A-Z0-9_]{0,15}")


@dataclass(frozen=True)
class MemoryRegion:
    """One memory of a board ([[regions]] in its board file)."""

    name: str  # upper-case, as the linker script's MEMORY names it
    origin: int
    size: int
    kind: str  # one of REGION_KINDS
    executable: bool = False  # code may run from it

    @property
    def end(self) -> int:
        return self.origin + self.size

    @property
    def writable(self) -> bool:
        return self.kind != "flash"


@dataclass(frozen=True)
class Board:
    name: str
    description: str
    platform: str  # folder under templates/common/platform/
    toolchain: str  # "native" or a GNU triplet prefix such as "arm-none-eabi"
    link: str  # how its firmware runs and is reached: a name in generator.device.links.LINKS
    arch: str  # ELF architecture the board executes (see mlf.sources.ELF_MACHINES)
    cflags: tuple[str, ...] = ()
    ldflags: tuple[str, ...] = ()
    libs: tuple[str, ...] = ()
    linker_script: str | None = None
    clock_hz: int | None = None
    flash_bytes: int | None = None
    ram_origin: int | None = None
    ram_bytes: int | None = None
    stack_bytes: int | None = None
    qemu: QemuSpec | None = None
    flash_origin: int | None = None
    # What the core offers generated code: "dsp" (Arm DSP extension, <arm_acle.h> SIMD
    # intrinsics), "fpu" (hardware floating point, hard-float ABI), "mve" (Helium).
    features: tuple[str, ...] = ()
    usb: UsbSpec | None = None
    flash: FlashSpec | None = None
    # Its memories by speed class (generate --place); empty: only FLASH and RAM.
    regions: tuple[MemoryRegion, ...] = ()
    source: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_native(self) -> bool:
        return self.toolchain == "native"

    def tool(self, name: str) -> str:
        """Name of a binutils/gcc tool of this board's toolchain ('gcc', 'size', ...)."""
        return name if self.is_native else f"{self.toolchain}-{name}"


def _strings(value, what: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"'{what}' must be a list of strings")
    return tuple(value)


def _qemu_spec(table: dict) -> QemuSpec:
    table = dict(table)
    table["args"] = _strings(table.get("args", ()), "qemu.args")
    return QemuSpec(**table)


def host_arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64", "armv7l": "arm"}.get(machine, machine)


def list_boards() -> list[str]:
    return sorted(p.stem for p in boards_dir().glob("*.toml"))


def load_board(name: str) -> Board:
    path = boards_dir() / f"{name}.toml"
    if not path.is_file():
        raise BoardError(f"unknown board '{name}'; known boards: {', '.join(list_boards())}")
    return parse_board(path)


def parse_board(path: Path) -> Board:
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BoardError(f"{path}: not valid TOML ({exc})") from exc
    schema = data.get("schema")
    if schema != BOARD_SCHEMA:
        raise BoardError(f"{path}: board schema {schema!r}; this tool reads schema {BOARD_SCHEMA}")
    try:
        memory = data.get("memory", {})
        qemu = data.get("qemu")
        board = Board(
            name=str(data["name"]),
            description=str(data["description"]),
            platform=str(data["platform"]),
            toolchain=str(data["toolchain"]),
            link=_link_name(path, data),
            arch=str(data.get("arch") or host_arch()),
            cflags=tuple(data.get("cflags", ())),
            ldflags=tuple(data.get("ldflags", ())),
            libs=tuple(data.get("libs", ())),
            linker_script=data.get("linker_script"),
            clock_hz=data.get("clock_hz"),
            flash_bytes=memory.get("flash_bytes"),
            ram_origin=memory.get("ram_origin"),
            ram_bytes=memory.get("ram_bytes"),
            stack_bytes=memory.get("stack_bytes"),
            qemu=_qemu_spec(qemu) if qemu else None,
            flash_origin=memory.get("flash_origin"),
            features=_strings(data.get("features", ()), "features"),
            usb=_parse_usb(path, data.get("usb")),
            flash=_parse_flash(path, data.get("flash")),
            regions=_parse_regions(path, data.get("regions", [])),
            source=data,
        )
    except (KeyError, TypeError) as exc:
        raise BoardError(f"{path}: missing or malformed field ({exc})") from exc
    if board.name != path.stem:
        raise BoardError(f"{path}: name '{board.name}' differs from the file name")
    if board.link not in LINKS:
        raise BoardError(f"{path}: link '{board.link}' is not one of {', '.join(LINKS)}")
    problem = LINKS[board.link]().problem(board)
    if problem:
        raise BoardError(f"{path}: {problem}")
    return board


def _parse_regions(path: Path, entries: list) -> tuple[MemoryRegion, ...]:
    """[[regions]] name, origin, size, kind, executable: distinct names, no overlaps."""
    if not isinstance(entries, list):
        raise BoardError(f"{path}: 'regions' must be an array of tables ([[regions]])")
    regions = []
    for entry in entries:
        region = MemoryRegion(name=str(entry["name"]), origin=int(entry["origin"]),
                              size=int(entry["size"]), kind=str(entry["kind"]),
                              executable=bool(entry.get("executable", False)))
        if not REGION_NAME_RE.fullmatch(region.name) or region.kind not in REGION_KINDS \
                or region.size <= 0 or region.origin < 0 or region.end > 1 << 32:
            raise BoardError(f"{path}: region {region.name!r}: a name of capitals, digits and "
                             f"'_', a kind of {', '.join(REGION_KINDS)}, and an origin and "
                             "size inside the 32-bit address space")
        clash = next((r for r in regions if r.name == region.name
                      or (r.origin < region.end and region.origin < r.end)), None)
        if clash is not None:
            raise BoardError(f"{path}: regions {clash.name} and {region.name} overlap or share "
                             "a name")
        regions.append(region)
    return tuple(regions)


def _link_name(path: Path, data: dict) -> str:
    """`link`, or the older `runner` with the same meaning (board files written before)."""
    if LINK_KEY in data and OLD_LINK_KEY in data and data[LINK_KEY] != data[OLD_LINK_KEY]:
        raise BoardError(f"{path}: '{OLD_LINK_KEY}' is the old name of '{LINK_KEY}'; give "
                         f"'{LINK_KEY}' only")
    return str(data[OLD_LINK_KEY] if LINK_KEY not in data and OLD_LINK_KEY in data
               else data[LINK_KEY])


def _parse_usb(path: Path, table: dict | None) -> UsbSpec | None:
    """[usb] vid = 0x0483, pid = 0x374b or a list of them."""
    if table is None:
        return None
    pids = table["pid"] if isinstance(table["pid"], list) else [table["pid"]]
    if not isinstance(table["vid"], int) or not all(isinstance(p, int) for p in pids):
        raise BoardError(f"{path}: [usb] vid and pid must be integers")
    return UsbSpec(vid=table["vid"], pids=tuple(pids))


def _parse_flash(path: Path, table: dict | None) -> FlashSpec | None:
    """[flash] runner = the default, and one [flash.<runner>] table per runner it can use."""
    if table is None:
        return None
    runners = {k: dict(v) for k, v in table.items() if isinstance(v, dict)}
    family = table.get("uf2_family_id")
    spec = FlashSpec(runner=str(table["runner"]),
                     uf2_family_id=int(family) if family is not None else None, runners=runners)
    if spec.runner not in runners:
        raise BoardError(f"{path}: [flash] runner '{spec.runner}' has no [flash.{spec.runner}] "
                         "table")
    return spec
