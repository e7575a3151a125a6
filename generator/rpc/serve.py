"""`microtvm-gen serve`: start (or attach to) a host-driven device and bridge it to TCP.

SIGTERM, SIGINT and SIGHUP stop `serve` cleanly: the signal raises `Stopped` in the main
thread, and the device (QEMU or the firmware process) is stopped before `serve` returns.

With `accept_firmware`, the project is built as usual and then run from a private copy
that clients may give a new firmware (generator/rpc/firmware.py); the copy is removed
when serve ends.
"""

from __future__ import annotations

import contextlib
import ipaddress
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from generator import hints
from generator.device.links import link_of
from generator.errors import InputError, ProjectError
from generator.link.session import Link, SessionTimeouts
from generator.project.backends import board_of_project
from generator.project.record import load_project
from generator.project.sizing import HOST_DRIVEN
from generator.rpc.bridge import IDLE_TIMEOUT, Bridge, DeviceLink
from generator.rpc.firmware import FirmwareSlot
from generator.toolchain import BUILD_DIR, FIRMWARE

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stopped(Exception):
    """A stop signal arrived; the device has been stopped by the time the caller sees it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn the first stop signal into `Stopped` (later ones are ignored while cleaning up)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def handler(signum, frame) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Stopped(signum)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 9090
    key: str = "micro"
    tracker: tuple[str, int] | None = None
    sessions: int = 0  # 0: serve until interrupted
    serial_port: str | None = None
    baud: int = 115200
    reply_timeout: float = 60.0
    idle_timeout: float = IDLE_TIMEOUT  # seconds a client may stay silent; 0: forever
    accept_firmware: bool = False  # clients may load a new firmware (upload + load_module)


def host_driven_project(project_dir: Path) -> dict:
    project = load_project(project_dir)
    if project.get("project_type") != HOST_DRIVEN:
        raise ProjectError(f"{project_dir} is a standalone project; 'serve' needs a host-driven "
                           "one", hint=_host_driven_hint(project))
    return project


def _host_driven_hint(project: dict) -> str:
    """The step that gets a servable project from this one's archive: generating it again
    host-driven works only when the archive has a system library (project.json says; older
    records do not)."""
    callable_by_name = project.get("module", {}).get("system_library")
    if callable_by_name:
        return hints.serve_host_driven(project.get("archive", {}).get("name", "the archive"))
    if callable_by_name is False:
        return hints.serve_operator_style()
    return ("generate with '--project-type host-driven' (an archive with a system library) "
            "or export with '--style operator' first")


def started_by_serve(project: dict) -> bool:
    """Whether serve starts the project's device itself (QEMU or a host process), as
    opposed to a board that is flashed."""
    from generator.device.links import link_of

    return link_of(board_of_project(project)).runs_locally


def check_accept_firmware(options: ServeOptions, project: dict) -> None:
    """--accept-firmware needs a device serve starts itself from a firmware file."""
    if options.serial_port is not None:
        raise InputError("--accept-firmware cannot be used with --serial: serve cannot put a "
                         "new firmware on a board it only talks to")
    if not started_by_serve(project):
        raise InputError(f"--accept-firmware: board '{project.get('board')}' is flashed, not "
                         "started by serve (QEMU boards and 'host' only)")


def device_link(project_dir: Path, options: ServeOptions,
                on_log: Callable[[str], None], on_event: Callable[[str], None],
                progress: Callable[[str], None] | None = None,
                resources: contextlib.ExitStack | None = None,
                slots: list[FirmwareSlot] | None = None) -> DeviceLink:
    """How to reach the project's device: open the serial port given, or ask the project's
    Project API server to build the firmware and open its transport (the server, and with
    it the device, ends when `resources` closes). With `options.accept_firmware` the
    transport is that of a private copy of the built project (a FirmwareSlot, appended to
    `slots`; removed when `resources` closes)."""
    project = host_driven_project(project_dir)
    max_payload = project["host_driven"]["link_max_payload"]
    if options.accept_firmware:
        check_accept_firmware(options, project)
    if options.serial_port is not None:
        from generator.link.serial_link import SerialLink

        def open_link() -> Link:
            return SerialLink(options.serial_port, options.baud)
    else:
        from generator.project_api.client import ProjectClient

        stack = resources if resources is not None else contextlib.ExitStack()
        board = board_of_project(project)
        link_class = link_of(board)
        server = ProjectClient(project_dir)
        with contextlib.ExitStack() as build_only:
            # The device runs from the project itself, or from a copy made after the build;
            # a link serve opens itself needs the server for the build only.
            (build_only if options.accept_firmware or link_class.serve_in_process
             else stack).enter_context(server)
            if progress:
                progress("building through the project's Project API server")
            server.build({"verbose": progress is not None})
        firmware = project_dir / BUILD_DIR / FIRMWARE
        if options.accept_firmware:
            slot = FirmwareSlot.create(project_dir)
            stack.callback(slot.remove)  # after the copy's server (and device) ended
            firmware = slot.firmware
            if not link_class.serve_in_process:
                server = stack.enter_context(ProjectClient(slot.project))
            if slots is not None:
                slots.append(slot)

        if link_class.serve_in_process:  # the server built it; serve runs the device

            def open_link() -> Link:
                return link_class.open(board, firmware)
        else:
            servers = [server]

            def open_link() -> Link:
                """The device through the project's server; a server that ended (killed,
                crashed: its device with it) is started again first."""
                if not servers[-1].alive():
                    on_event(f"the Project API server of {servers[-1].directory.name} ended "
                             f"(exit status {servers[-1].proc.poll()}); starting it again")
                    servers.append(stack.enter_context(ProjectClient(servers[-1].directory)))
                return servers[-1].transport()
    timeouts = SessionTimeouts(reply=options.reply_timeout)
    return DeviceLink(open_link, timeouts, max_payload, on_log=on_log, on_event=on_event)


def _host_note(project_dir: Path) -> str:
    project = load_project(project_dir)
    if project.get("board") == "host":
        return (", and the 'host' board's firmware is a process on THIS machine, with the "
                "rights of the user running serve")
    return ""


def serve(project_dir: Path, options: ServeOptions,
          announce: Callable[[Bridge], None],
          on_log: Callable[[str], None] | None = None,
          on_event: Callable[[str], None] | None = None,
          progress: Callable[[str], None] | None = None) -> int:
    """Run the bridge until `options.sessions` clients were served; returns how many were.

    Raises Stopped after a stop signal, once the device is stopped."""
    def log(text: str) -> None:
        print(f"device: {text}", file=sys.stderr, flush=True)

    def event(text: str) -> None:
        print(f"serve: {text}", file=sys.stderr, flush=True)

    on_event = on_event or event
    with stop_on_signals(), contextlib.ExitStack() as resources:
        slots: list[FirmwareSlot] = []
        link = device_link(project_dir, options, on_log or log, on_event, progress, resources,
                           slots)
        registrar = None
        bridge = None
        try:
            bridge = Bridge(link, options.host, options.port, key=options.key,
                            on_event=on_event, idle_timeout=options.idle_timeout,
                            firmware_slot=slots[0] if slots else None)
            if not is_loopback(bridge.host):
                on_event(f"warning: listening on {bridge.host}:{bridge.port}, beyond this "
                         "machine; the RPC endpoint has no authentication: anyone who can "
                         "reach it can run the device's functions and read and write its "
                         "tensor memory")
                if slots:
                    on_event(f"warning: --accept-firmware: anyone who can reach "
                             f"{bridge.host}:{bridge.port} can also run a program of their "
                             "choice on the device" + _host_note(project_dir))
            link.ensure()  # start the device now: the first client should not wait for it
            if options.tracker is not None:
                from generator.rpc.tracker import TrackerRegistrar

                registrar = TrackerRegistrar(options.tracker[0], options.tracker[1],
                                             options.key, bridge.port, on_event=on_event)
                registrar.start()
            announce(bridge)
            bridge.serve(options.sessions,
                         on_session_start=registrar.session_started if registrar else None,
                         on_session_end=registrar.session_ended if registrar else None)
            return bridge.sessions_served
        except Stopped as exc:
            on_event(f"{exc}: stopping the device")
            raise
        finally:
            if registrar is not None:
                registrar.stop()
            if bridge is not None:
                bridge.close()
            else:
                link.close()
