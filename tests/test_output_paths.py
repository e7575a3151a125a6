"""Every output path a command takes is checked before any work: a file where a directory
goes (or the other way round), a path under a file, an unwritable directory, the input
itself. One line on stderr, exit 2, nothing written, no build, no device (issue: no
surprises)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from generator.cli import main
from generator.project.generate import generate
from tests.conftest import REPO, YES_NO

ARCHIVE = YES_NO / "model.tar"
MODEL = REPO / "tests" / "fixtures" / "models" / "hello_world" / "hello_world_int8.tflite"


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*")}


@pytest.fixture
def unwritable(tmp_path) -> Path:
    """A directory this process cannot create anything in."""
    if os.geteuid() == 0:  # root writes anywhere but on read-only file systems
        if os.access("/proc/sys", os.W_OK):
            pytest.skip("no read-only directory to try as root")
        yield Path("/proc/sys")
        return
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    yield folder
    folder.chmod(0o700)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A host project, generated but not built."""
    out = tmp_path_factory.mktemp("paths") / "proj"
    generate(ARCHIVE, "host", out)
    return out


# (command, option, what it writes): each command with an output path.
COMMANDS = {
    "export": lambda out, project: ["export", str(MODEL), "-o", str(out)],
    "generate": lambda out, project: ["generate", str(ARCHIVE), "--board", "host",
                                      "-o", str(out)],
    "tune": lambda out, project: ["tune", str(MODEL), "--board", "host", "--trials", "1",
                                  "-o", str(out)],
    "run": lambda out, project: ["run", str(project), "--output-dir", str(out)],
}
WRITES_A_FILE = {"export"}


@pytest.mark.parametrize("case", ["wrong kind", "under a file", "unwritable", "the input"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_output_path_is_one_line_before_any_work(command, case, tmp_path, project,
                                                        unwritable, capsys):
    work = tmp_path / "work"
    work.mkdir()
    (work / "afile").write_text("x")
    (work / "adir").mkdir()
    out = {"wrong kind": work / ("adir" if command in WRITES_A_FILE else "afile"),
           "under a file": work / "afile" / "out",
           "unwritable": unwritable / "mtvg-out",
           "the input": MODEL if command in ("export", "tune") else
           (ARCHIVE if command == "generate" else None)}[case]
    if out is None:
        pytest.skip(f"{command} writes beside no input file")
    before, project_before = _snapshot(work), _snapshot(project)
    assert main(COMMANDS[command](out, project)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"microtvm-gen {command}: error: "), err
    assert str(out) in err[0], err
    assert _snapshot(work) == before
    assert _snapshot(project) == project_before  # not built, not run
    assert not (unwritable / "mtvg-out").exists()
