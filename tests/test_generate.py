"""Project generation: refusing to overwrite, --force, determinism, unbuildable archives."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.cli import main
from tests.conftest import BOARDS, YES_NO, archive

GOOD = YES_NO / "model.tar"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_refuses_non_empty_directory_without_force(tmp_path, capsys):
    out = tmp_path / "proj"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["generate", str(GOOD), "--board", "host", "-o", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert _tree(out) == {"keep.txt": b"mine"}
    assert main(["generate", str(GOOD), "--board", "host", "-o", str(out), "--force"]) == 0
    assert not (out / "keep.txt").exists()
    assert (out / "project.json").is_file()


def test_empty_existing_directory_is_fine(tmp_path):
    out = tmp_path / "proj"
    out.mkdir()
    assert main(["generate", str(GOOD), "--board", "host", "-o", str(out)]) == 0


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("name", ["guberti-yesno-aot-packed-v5",
                                  "hannah-magicwand-graph-c-tvm0.11dev"])
def test_same_inputs_give_byte_identical_projects(tmp_path, board, name):
    a, b = tmp_path / "a", tmp_path / "nested" / "b"
    assert main(["generate", str(archive(name)), "--board", board, "-o", str(a)]) == 0
    assert main(["generate", str(archive(name)), "--board", board, "-o", str(b)]) == 0
    assert _tree(a) == _tree(b)
    assert "project.json" in _tree(a)


def test_failed_force_keeps_the_old_project(tmp_path, capsys):
    out = tmp_path / "proj"
    assert main(["generate", str(GOOD), "--board", "host", "-o", str(out)]) == 0
    before = _tree(out)
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"garbage" * 100)
    assert main(["generate", str(bad), "--board", "host", "-o", str(out), "--force"]) == 2
    assert _tree(out) == before


@pytest.mark.parametrize("board", BOARDS)
def test_llvm_aarch64_archive_is_refused_with_reason(tmp_path, capsys, board):
    out = tmp_path / "proj"
    code = main(["generate", str(archive("staticrt-conv1d-graph-llvm-v5")), "--board", board,
                 "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "aarch64" in err and "default_lib0.o" in err
    assert not out.exists()
