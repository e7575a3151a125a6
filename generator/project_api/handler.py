"""Our Project API server: a template (generates projects) or a project (builds, flashes,
and carries the device's link).

The server script in every template folder and every generated project
(`microtvm_api_server.py`, one file: templates/common/project_api/) hands its own directory
to `serve_directory`. The directory is a
template when it holds no `project.json`. Methods run the same code as the CLI; the CLI
itself drives projects through this protocol (`generator.project_api.client`).
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

from generator.errors import MtgError, ProjectError
from generator.progress import progress
from generator.project.record import MODEL_COPY
from generator.project_api.protocol import (
    PROTOCOL_VERSION,
    IoTimeoutError,
    ProjectOption,
    ServerError,
    TransportClosedError,
    decode_data,
    encode_data,
    serve_lines,
)

PROJECT_FILE = "project.json"  # generator.project.record.PROJECT_FILE
MAX_READ_BYTES = 1 << 20  # one read_transport reply
DEFINITION_RE = re.compile(r"(?:-D)?([A-Za-z_][A-Za-z0-9_]*)(?:=([A-Za-z0-9_.+-]*))?")
GEN = ("generate_project",)


def project_options(boards: list[str]) -> list[ProjectOption]:
    """The options this server offers (TVM's standard ones, then ours)."""
    return [
        ProjectOption("board", "str", "the board to generate for (microtvm-gen boards)",
                      required=GEN, choices=tuple(boards)),
        ProjectOption("project_type", "str", "standalone: the firmware runs the model; "
                      "host-driven: an RPC server for 'serve' (default: host-driven for "
                      "operator-style archives, standalone otherwise)", optional=GEN,
                      choices=("standalone", "host-driven")),
        ProjectOption("verbose", "bool", "print build steps on stderr",
                      optional=("generate_project", "build"), default=False),
        ProjectOption("warning_as_error", "bool", "compile our runtime and the app with "
                      "-Werror (the archive's own code is always compiled quietly)",
                      optional=GEN, default=True),
        ProjectOption("compile_definitions", "str", "extra preprocessor definitions for the "
                      "firmware, space-separated NAME or NAME=VALUE (a leading -D is allowed)",
                      optional=GEN),
        ProjectOption("extra_files_tar", "str", "a tar whose regular files are added to the "
                      "generated project (plain names only; never overwrites a generated file)",
                      optional=GEN),
        ProjectOption("cmsis_path", "str", "CMSIS-NN source tree, for archives with cmsis-nn "
                      "BYOC partitions (default: $CMSIS_NN_PATH)", optional=GEN),
        ProjectOption("module", "str", "the module to use when the archive holds several",
                      optional=GEN),
        ProjectOption("place", "str", "memory regions of the board for the model: "
                      "ITEM=REGION pairs (activations, scratch, weights, code) separated by "
                      "',', or 'auto'", optional=GEN),
        ProjectOption("profile", "bool", "the firmware records the timer at each call of the "
                      "model's run function, for run --profile", optional=GEN, default=False),
        ProjectOption("force", "bool", "replace the contents of an existing non-empty project "
                      "directory", optional=GEN, default=False),
        ProjectOption("sanitize", "bool", "host board: build with AddressSanitizer and UBSan "
                      "(unset: keep the last build's setting)", optional=("build",)),
        ProjectOption("runner", "str", "flash runner to use instead of the board's default",
                      optional=("flash",)),
        ProjectOption("mount", "str", "uf2 runner: the board's USB drive (default: found by "
                      "its INFO_UF2.TXT)", optional=("flash",)),
        ProjectOption("serial_number", "str", "USB serial number of the board to flash or "
                      "talk to, when several are connected", optional=("flash", "open_transport")),
    ]


class ProjectServer:
    """Handles the Project API methods for one directory."""

    def __init__(self, server_dir: Path) -> None:
        self.dir = server_dir.resolve()
        self.device: Any = None
        self.pending = b""

    @property
    def is_template(self) -> bool:
        return not (self.dir / PROJECT_FILE).is_file()

    def __call__(self, method: str, params: dict) -> Any:
        return getattr(self, method)(**params)

    # ---- Methods -------------------------------------------------------------------------

    def server_info_query(self, tvm_version: object) -> dict:
        model = self.dir / MODEL_COPY
        return {"platform_name": self._platform_name(), "is_template": self.is_template,
                "model_library_format_path": "" if self.is_template or not model.is_file()
                else str(model),
                "project_options": [o.to_json() for o in self._offered()],
                "protocol_version": PROTOCOL_VERSION}

    def _platform_name(self) -> str:
        """What the template's template.json names, else its (or the project's) back-end's."""
        from generator.project.backend import template_info
        from generator.project.backends import project_backend, template_backend
        from generator.project.record import load_project

        if self.is_template:
            return str(template_info(self.dir).get(
                "platform_name", template_backend(self.dir).platform_name))
        return project_backend(load_project(self.dir)).platform_name

    def _offered(self) -> list[ProjectOption]:
        """A template offers its back-end's boards (and options); a project the board files'."""
        from generator.boards import list_boards
        from generator.project.backends import template_backend

        if not self.is_template:
            return project_options(list_boards())
        backend = template_backend(self.dir)
        return backend.project_options(self.dir,
                                       project_options(backend.board_names(self.dir)))

    def _board_options(self) -> tuple[str, ...]:
        """The options that name the board: 'board', and a template's aliases of it."""
        from generator.project.backends import template_backend

        aliases = template_backend(self.dir).board_aliases if self.is_template else ()
        return ("board", *aliases)

    def generate_project(self, model_library_format_path: object, standalone_crt_dir: object,
                         project_dir: object, options: object) -> None:
        """Render a project (standalone_crt_dir is ignored: we bring our own runtime)."""
        from generator.project.generate import generate

        if not self.is_template:
            raise ProjectError(f"{self.dir} is a generated project, not a template")
        opts = self._options(options, "generate_project")
        archive = Path(_text(model_library_format_path, "model_library_format_path"))
        dest = Path(_text(project_dir, "project_dir"))
        board = opts.get("board")
        for alias in self._board_options()[1:]:
            named = opts.get(alias)
            if named is not None and board is not None and named != board:
                raise ProjectError(f"options 'board' ({board}) and '{alias}' ({named}) differ")
            board = named if named is not None else board
        if not isinstance(board, str):
            raise ProjectError("generate_project needs the option 'board'")
        cmsis = opts.get("cmsis_path")
        generate(archive, board, dest, force=bool(opts.get("force")), template=self.dir,
                 module_name=opts.get("module"), project_type=opts.get("project_type"),
                 cmsis_nn=Path(cmsis) if cmsis else None,
                 extra_definitions=parse_definitions(opts.get("compile_definitions")),
                 werror=opts.get("warning_as_error") is not False,
                 extra_files_tar=Path(opts["extra_files_tar"])
                 if opts.get("extra_files_tar") else None,
                 place=opts.get("place"), profile=bool(opts.get("profile")))
        return None

    def build(self, options: dict) -> None:
        from generator.build import build

        self._require_project()
        opts = self._options(options, "build")
        build(self.dir, sanitize=opts.get("sanitize"),
              progress=progress if opts.get("verbose") else None)
        return None

    def flash(self, options: dict) -> None:
        from generator.device.flash import flash_project

        self._require_project()
        opts = self._options(options, "flash")
        result = flash_project(self.dir, runner_name=opts.get("runner"),
                               serial_number=opts.get("serial_number"),
                               mount=Path(opts["mount"]) if opts.get("mount") else None)
        if result.note:
            progress(result.note)
        return None

    def open_transport(self, options: object) -> dict:
        self._require_project()
        opts = self._options(options, "open_transport")
        self.close_transport()
        self.device = _open_link(self.dir, opts.get("serial_number"))
        return {"timeouts": {"session_start_retry_timeout_sec": 2.0,
                             "session_start_timeout_sec": 10.0,
                             "session_established_timeout_sec": 30.0}}

    def close_transport(self, hung: bool = False) -> None:
        device, self.device, self.pending = self.device, None, b""
        if device is not None:
            device.close(hung)
        return None

    def read_transport(self, n: object, timeout_sec: object) -> dict:
        if type(n) is not int or n <= 0:
            raise ValueError(f"n must be a positive integer, not {n!r}")
        deadline = _deadline(timeout_sec)
        device = self._device()
        while not self.pending:
            try:
                chunk = device.read(_left(deadline))
            except MtgError as exc:
                raise _closed(device, exc) from None
            if chunk:
                self.pending += chunk
            elif deadline is not None and _left(deadline) <= 0:
                raise IoTimeoutError(f"no data within {timeout_sec} s")
        data, self.pending = self.pending[:min(n, MAX_READ_BYTES)], \
            self.pending[min(n, MAX_READ_BYTES):]
        return {"data": encode_data(data)}

    def write_transport(self, data: object, timeout_sec: object) -> None:
        device = self._device()
        _deadline(timeout_sec)  # checked; writes to a pipe or port do not block for long
        try:
            device.write(decode_data(data))  # type: ignore[arg-type]
        except MtgError as exc:
            raise _closed(device, exc) from None
        return None

    # ---- Helpers -------------------------------------------------------------------------

    def _require_project(self) -> None:
        if self.is_template:
            raise ProjectError(f"{self.dir} is a template; generate a project from it first")

    def _device(self) -> Any:
        if self.device is None:
            raise TransportClosedError("the transport is not open (call open_transport)")
        return self.device

    def _options(self, options: object, method: str) -> dict:
        """Known options with values of their declared type (None for unset)."""
        if options is None:
            return {}
        if not isinstance(options, dict):
            raise ValueError("options must be an object")
        offered = {o.name: o for o in self._offered()}
        board_options = self._board_options()
        checked = {}
        for name, value in options.items():
            option = offered.get(name)
            if option is None:
                raise ProjectError(f"unknown project option '{name}' (offered: "
                                   f"{', '.join(sorted(offered))})")
            if value is None:
                continue
            kind = {"bool": bool, "int": int, "str": str}[option.type]
            if type(value) is not kind:
                raise ProjectError(f"project option '{name}' must be a {option.type}, not "
                                   f"{type(value).__name__}")
            # An unknown board gets the board registry's own message, with its hint.
            if option.choices and value not in option.choices \
                    and name not in board_options:
                raise ProjectError(f"project option '{name}' is {value!r}; choose one of "
                                   f"{', '.join(map(str, option.choices))}")
            checked[name] = value
        return checked


def parse_definitions(text: str | None) -> dict[str, str]:
    """`compile_definitions`: NAME or NAME=VALUE items, checked before they reach CMake."""
    out: dict[str, str] = {}
    for item in (text or "").split():
        m = DEFINITION_RE.fullmatch(item)
        if not m:
            raise ProjectError(f"compile definition {item!r} is not NAME or NAME=VALUE (letters, "
                               "digits, '_', '.', '+', '-')")
        out[m.group(1)] = m.group(2) if m.group(2) is not None else "1"
    return out


def _open_link(project_dir: Path, serial_number: str | None) -> Any:
    from generator.device.links import link_of
    from generator.project.record import load_record

    board = load_record(project_dir).board
    return link_of(board).open(board, project_dir / "build" / "firmware.elf", serial_number)


def _closed(device: Any, exc: Exception) -> TransportClosedError:
    closed = TransportClosedError(str(exc))
    proc = getattr(device, "proc", None)
    closed.exit_status = proc.poll() if proc is not None else None  # type: ignore[attr-defined]
    return closed


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


def _deadline(timeout_sec: object) -> float | None:
    import time

    if timeout_sec is None:
        return None
    if isinstance(timeout_sec, bool) or not isinstance(timeout_sec, (int, float)) \
            or timeout_sec < 0 or timeout_sec != timeout_sec:
        raise ValueError(f"timeout_sec must be null or a number of seconds, not {timeout_sec!r}")
    return time.monotonic() + float(timeout_sec)


def _left(deadline: float | None) -> float:
    import time

    return 1.0 if deadline is None else max(0.0, deadline - time.monotonic())




def describe_error(exc: Exception) -> dict:
    """Extra `data` of an error reply, for our own client: the tool's one-line error."""
    if isinstance(exc, MtgError):
        return {"mtvg_error": {"type": type(exc).__name__, "message": exc.one_line()}}
    if isinstance(exc, TransportClosedError):
        return {"mtvg_error": {"type": "DeviceError", "message": str(exc),
                               "exit_status": getattr(exc, "exit_status", None)}}
    if isinstance(exc, ServerError):
        return {"mtvg_error": {"type": "DeviceError", "message": str(exc)}}
    return {}


def serve_directory(server_dir: Path, argv: list[str] | None = None) -> int:
    """Entry point of a server script: `--read-fd R --write-fd W [--debug]`."""
    import argparse

    parser = argparse.ArgumentParser(description="microtvm-gen Project API server")
    parser.add_argument("--read-fd", type=int, required=True)
    parser.add_argument("--write-fd", type=int, required=True)
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    # Ctrl-C in a terminal reaches the whole process group; the client owns the session and
    # ends it (its end of the pipe closes), so the server does not stop halfway through a
    # reply with a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = ProjectServer(server_dir)
    reader = os.fdopen(args.read_fd, "rb")
    writer = os.fdopen(args.write_fd, "wb", buffering=0)
    try:
        serve_lines(reader, writer, server, describe_error)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client went away mid-reply: nothing left to answer
    finally:
        server.close_transport()
    return 0
