"""`tune` through a stock RPC tracker: two `serve --accept-firmware` devices under one key,
each batch's firmware uploaded to the device that measures it; a device killed mid-way."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from tests.conftest import _processes, host_driven_project, require_board_tools
from tests.test_serve_firmware import servers_under_tracker
from tests.test_tune import _log, _task

BOARD = "qemu-mps2-an385"
KEY = "tunetest"


def _descendant(root: int, word: str) -> int | None:
    table = _processes()
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, cmd) in table.items():
            if ppid == parent:
                if word in cmd:
                    return pid
                frontier.append(pid)
    return None


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_two_devices_under_one_key_share_the_batches_and_one_dies(operators_archive, tmp_path):
    """Both devices measure (the log names each); the QEMU of one is killed after the first
    round, later its serve is stopped: tuning finishes on the other, every candidate has a
    result, none is measured twice, and nothing is left running."""
    from generator.tune import tune_tasks
    from generator.tune.session import TrackerDevices

    require_board_tools(BOARD)
    project = host_driven_project(operators_archive, BOARD, tmp_path / "project")
    out = tmp_path / "tuning"
    events: list[str] = []
    with servers_under_tracker(project, tmp_path, KEY, 2, "--timeout", "20") as (port, served):
        def saboteur() -> None:
            """After the first round: kill device 0's QEMU; after the next: stop serve 0."""
            log = out / "log.jsonl"
            lines = lambda: len(log.read_text().splitlines()) if log.exists() else 0  # noqa
            _wait(lambda: lines() >= 8, 600, "the first round")
            # the next round's firmware may still be loading (its QEMU not started): wait
            qemu: list[int] = []

            def device_0_runs() -> bool:
                qemu[:] = [pid for pid in [_descendant(served[0].proc.pid, "qemu-system")]
                           if pid]
                return bool(qemu)

            _wait(device_0_runs, 120, "device 0's QEMU in the second round")
            os.kill(qemu[0], signal.SIGKILL)
            events.append("killed qemu")
            _wait(lambda: lines() >= 16, 600, "the second round")
            served[0].stop()
            events.append("stopped serve 0")

        watcher = threading.Thread(target=saboteur, daemon=True)
        watcher.start()
        summary = tune_tasks([_task()], BOARD, 24, out, batch_size=4,
                             devices=TrackerDevices(("127.0.0.1", port), KEY,
                                                    request_timeout=60),
                             parallel=2, progress=events.append)
        watcher.join(timeout=60)
    assert "killed qemu" in events and "stopped serve 0" in events, events
    log = _log(out)
    devices = {e["device"] for e in log}
    assert {f"127.0.0.1:{s.port}" for s in served} <= devices, devices
    measured = [e["candidate"] for e in log if not e.get("cached")]
    assert len(measured) == len(set(measured)) == 24
    assert summary.tasks[0].done == 24
    timed = [e for e in log if "run_secs" in e]
    assert len(timed) >= 20, [e.get("error") for e in log]
    last = [e["device"] for e in log[16:]]
    assert set(last) == {f"127.0.0.1:{served[1].port}"}, last
    for s in served:
        assert "loaded; device restarted" in s.events()
    assert json.dumps(log).count("did not come back") <= 8
    assert any("did not come back" in line for line in events)  # one line when it died
    assert len((out / "records.jsonl").read_text().splitlines()) == len(timed)
