"""Links (generator/device/links.py): each board file names one; its class says what it can do.

The board key is `link`; board files written before say `runner` and still load the same.
A new link is one class in LINKS: the board registry and `boards --json` take it as it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator.boards import list_boards, load_board, parse_board
from generator.cli import main
from generator.device.links import LINKS, HostProcess, Link, link_of, open_device
from generator.errors import BoardError, DeviceError
from generator.resources import ROOT_ENV, boards_dir
from generator.rpc.serve import started_by_serve


def _board_file(tmp_path: Path, board: str, old: str, new: str) -> Path:
    """The checked-in file of `board` with `old` replaced by `new`, under the same name."""
    text = (boards_dir() / f"{board}.toml").read_text()
    assert old in text
    path = tmp_path / f"{board}.toml"
    path.write_text(text.replace(old, new))
    return path


def test_every_board_names_a_link_that_says_what_it_can_do():
    links = {name: load_board(name).link for name in list_boards()}
    # qemu-socket has no board file of its own: tests/test_handshake.py writes one.
    assert set(links.values()) == set(LINKS) - {"qemu-socket"} == {"process", "qemu", "serial"}
    capabilities = {name: (c.runs_locally, c.needs_flash, c.emulated, c.stops_at_end_of_input)
                    for name, c in LINKS.items()}
    assert capabilities == {"process": (True, False, False, True),
                            "qemu": (True, False, True, False),
                            "qemu-socket": (True, False, True, False),
                            "serial": (False, True, False, False)}
    assert link_of(load_board("qemu-mps2-an385")).icount_shift(load_board("qemu-mps2-an385")) \
        == 0
    assert link_of(load_board("host")).icount_shift(load_board("host")) is None


def test_the_old_runner_key_still_loads_the_same_board(tmp_path):
    for name, link in (("host", "process"), ("qemu-mps2-an385", "qemu"), ("rpi-pico", "serial")):
        old = parse_board(_board_file(tmp_path, name, f'link = "{link}"',
                                      f'runner = "{link}"'))
        assert old == load_board(name) and old.link == link
    both = _board_file(tmp_path, "host", 'link = "process"',
                       'link = "process"\nrunner = "process"')
    assert parse_board(both) == load_board("host")


@pytest.mark.parametrize("old, new, message", [
    ('link = "process"', 'link = "process"\nrunner = "qemu"',
     r"'runner' is the old name of 'link'; give 'link' only"),
    ('link = "process"', 'link = "jtag"',
     r"link 'jtag' is not one of process, qemu, qemu-socket, serial"),
    ('link = "process"', "", r"missing or malformed field \('link'\)"),
], ids=["old-and-new-differ", "unknown", "missing"])
def test_a_wrong_link_is_refused(tmp_path, old, new, message):
    with pytest.raises(BoardError, match=message):
        parse_board(_board_file(tmp_path, "host", old, new))


def test_a_qemu_link_needs_its_table(tmp_path):
    path = _board_file(tmp_path, "qemu-mps2-an385", "[qemu]", "[not_qemu]")
    with pytest.raises(BoardError, match=r"link 'qemu' needs a \[qemu\] table"):
        parse_board(path)


def test_boards_json_gives_the_link_under_both_keys(capsys):
    assert main(["boards", "--json"]) == 0
    boards = json.loads(capsys.readouterr().out)["boards"]
    assert {b["name"]: b["link"] for b in boards} == {n: load_board(n).link
                                                      for n in list_boards()}
    assert all(b["runner"] == b["link"] for b in boards)


def test_only_a_local_link_is_started_here(tmp_path):
    elf = tmp_path / "firmware.elf"
    with pytest.raises(DeviceError, match="does not exist; build the project first"):
        open_device(load_board("host"), elf)
    elf.write_bytes(b"\x7fELF")
    with pytest.raises(DeviceError, match="board 'rpi-pico' has no runner this tool can start"):
        open_device(load_board("rpi-pico"), elf)
    assert started_by_serve({"board": "qemu-mps2-an385"})
    assert not started_by_serve({"board": "nucleo-f746zg"})


class Simulator(HostProcess):
    """A link this file adds: a simulator started like a host process (the test's own)."""

    name = "simulator"
    where = "runs in a simulator"
    emulated = True


def test_a_new_link_class_is_all_a_new_link_needs(tmp_path, monkeypatch, capsys):
    root = tmp_path / "root"
    (root / "boards").mkdir(parents=True)
    (root / "boards" / "host.toml").write_text(
        (boards_dir() / "host.toml").read_text().replace('link = "process"',
                                                         'link = "simulator"'))
    monkeypatch.setenv(ROOT_ENV, str(root))
    with pytest.raises(BoardError, match="link 'simulator' is not one of"):
        load_board("host")
    monkeypatch.setitem(LINKS, Simulator.name, Simulator)
    board = load_board("host")
    link = link_of(board)
    assert isinstance(link, Link) and (link.runs_locally, link.emulated) == (True, True)
    assert started_by_serve({"board": "host"})
    assert main(["boards", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["boards"][0]["link"] == "simulator"
