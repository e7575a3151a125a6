"""Names from an archive never become commands: hostile member and archive names.

Each name carries CMake text that would create a canary file if it ever reached the
generated CMakeLists.txt unescaped. Members whose names would be copied into the project
are refused in one line; other names (the archive's own file name, members the tool does
not copy) are built harmlessly. After every build the canary must not exist.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from generator.build import build
from generator.cli import main
from generator.project.generate import generate
from tests.conftest import BOARDS, YES_NO, require_board_tools

GOOD = YES_NO / "model.tar"
SOURCE = "codegen/host/src/default_lib1.c"


CANARY = "mtvg_canary"


def _payload(tail: str) -> str:
    """CMake text that creates the canary file (in CMake's working directory)."""
    return f"x\n)\nexecute_process(COMMAND touch {CANARY})\n#{tail}"


def _no_canary(root: Path) -> bool:
    return not any(p.name == CANARY for p in root.rglob("*"))


HOSTILE_PARTS = ["\n", '"', "$", ";", ")", "#", "\\", "é", "${X}", "`id`", "'", " "]


def _rewrite(dest: Path, rename: dict[str, str] | None = None,
             extra: dict[str, bytes] | None = None,
             replace: dict[str, bytes] | None = None) -> Path:
    rename, replace = rename or {}, replace or {}
    with tarfile.open(GOOD) as src, tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as out:
        for member in src.getmembers():
            name = member.name.removeprefix("./")
            if name in rename:
                member.name = rename[name]
            data = src.extractfile(member) if member.isfile() else None
            if name in replace:
                member.size = len(replace[name])
                data = io.BytesIO(replace[name])
            out.addfile(member, data)
        for name, blob in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            out.addfile(info, io.BytesIO(blob))
    return dest


@pytest.mark.parametrize("part", HOSTILE_PARTS)
def test_hostile_source_name_is_refused(tmp_path, capsys, part):
    name = f"codegen/host/src/default_lib1{part}{_payload('')}.c"
    bad = _rewrite(tmp_path / "bad.tar", rename={SOURCE: name})
    out = tmp_path / "project"
    assert main(["generate", str(bad), "--board", "host", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "refusing the archive" in err, err
    assert not out.exists() and _no_canary(tmp_path)


@pytest.mark.parametrize("board", BOARDS)
def test_hostile_archive_file_name_builds_harmlessly(tmp_path, board):
    require_board_tools(board)
    folder = tmp_path / "in"
    folder.mkdir()
    hostile = folder / f"model{_payload(chr(233) + '$;#`')}.tar"
    hostile.write_bytes(GOOD.read_bytes())
    project = tmp_path / "project"
    generate(hostile, board, project)
    cmake = (project / "CMakeLists.txt").read_text()
    assert all(line.startswith("#") for line in cmake.splitlines() if "execute_process" in line)
    build(project)
    assert (project / "build" / "firmware.elf").is_file()
    assert _no_canary(tmp_path)


def test_hostile_names_of_members_not_copied_are_harmless(tmp_path):
    extra = {f"runtime/evil{part}{_payload('')}.h": b"#error never compiled\n"
             for part in HOSTILE_PARTS}
    archive = _rewrite(tmp_path / "extra.tar", extra=extra)
    project = tmp_path / "project"
    generate(archive, "host", project)
    assert not any("evil" in p.name for p in project.rglob("*"))
    build(project)
    assert _no_canary(tmp_path)


def test_hostile_tensor_name_reaches_c_only_as_an_escaped_literal(tmp_path):
    """A tensor name with C punctuation stays inside a string literal of the glue code."""
    with tarfile.open(GOOD) as tar:
        meta = json.load(tar.extractfile("./metadata.json"))
    evil = f'in"); system("touch {CANARY}"); //'
    meta["memory"]["functions"]["main"][0]["inputs"] = {evil: {"dtype": "int8", "size": 1960}}
    archive = _rewrite(tmp_path / "names.tar", replace={"metadata.json": json.dumps(meta).encode()})
    project = tmp_path / "project"
    generate(archive, "host", project)
    glue = (project / "app" / "model_glue.c").read_text()
    assert "system(" in glue and '\\"' in glue  # only inside an escaped literal
    build(project)
    assert _no_canary(tmp_path)


def test_control_characters_in_metadata_names_are_refused(tmp_path, capsys):
    with tarfile.open(GOOD) as tar:
        meta = json.load(tar.extractfile("./metadata.json"))
    meta["memory"]["functions"]["main"][0]["inputs"] = {"a\nb": {"dtype": "int8", "size": 4}}
    archive = _rewrite(tmp_path / "ctl.tar", replace={"metadata.json": json.dumps(meta).encode()})
    assert main(["info", str(archive)]) == 2
    assert "control characters" in capsys.readouterr().err
