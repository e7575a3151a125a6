"""`microtvm-gen serve`: start (or attach to) a host-driven device and bridge it to TCP."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from generator.boards import load_board
from generator.device.runner import open_device
from generator.errors import ProjectError
from generator.link.session import Link, SessionTimeouts
from generator.project.generate import HOST_DRIVEN, load_project
from generator.rpc.bridge import Bridge, DeviceLink


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


def host_driven_project(project_dir: Path) -> dict:
    project = load_project(project_dir)
    if project.get("project_type") != HOST_DRIVEN:
        raise ProjectError(f"{project_dir} is a standalone project; 'serve' needs a host-driven "
                           "one", hint="generate with '--project-type host-driven'")
    return project


def device_link(project_dir: Path, options: ServeOptions,
                on_log: Callable[[str], None], on_event: Callable[[str], None],
                progress: Callable[[str], None] | None = None) -> DeviceLink:
    """How to reach the project's device: start its firmware, or open its serial port."""
    project = host_driven_project(project_dir)
    max_payload = project["host_driven"]["link_max_payload"]
    if options.serial_port is not None:
        from generator.link.serial_link import SerialLink

        def open_link() -> Link:
            return SerialLink(options.serial_port, options.baud)
    else:
        from generator.build import build

        board = load_board(project["board"])
        elf = build(project_dir, progress=progress).elf

        def open_link() -> Link:
            return open_device(board, elf)
    timeouts = SessionTimeouts(reply=options.reply_timeout)
    return DeviceLink(open_link, timeouts, max_payload, on_log=on_log, on_event=on_event)


def serve(project_dir: Path, options: ServeOptions,
          announce: Callable[[Bridge], None],
          on_log: Callable[[str], None] | None = None,
          on_event: Callable[[str], None] | None = None,
          progress: Callable[[str], None] | None = None) -> int:
    """Run the bridge until `options.sessions` clients were served; returns how many were."""
    def log(text: str) -> None:
        print(f"device: {text}", file=sys.stderr, flush=True)

    def event(text: str) -> None:
        print(f"serve: {text}", file=sys.stderr, flush=True)

    link = device_link(project_dir, options, on_log or log, on_event or event, progress)
    bridge = Bridge(link, options.host, options.port, key=options.key,
                    on_event=on_event or event)
    registrar = None
    try:
        link.ensure()  # start the device now: the first client should not wait for it
        if options.tracker is not None:
            from generator.rpc.tracker import TrackerRegistrar

            registrar = TrackerRegistrar(options.tracker[0], options.tracker[1], options.key,
                                         bridge.port, on_event=on_event or event)
            registrar.start()
        announce(bridge)
        bridge.serve(options.sessions,
                     on_session_start=registrar.session_started if registrar else None,
                     on_session_end=registrar.session_ended if registrar else None)
        return bridge.sessions_served
    finally:
        if registrar is not None:
            registrar.stop()
        bridge.close()
