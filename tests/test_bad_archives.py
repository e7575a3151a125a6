"""Bad archives: one clear line, exit code 2, nothing written anywhere.

Each bad archive is made here, one flaw each, from a good one.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from generator.cli import main
from tests.conftest import REPO, YES_NO

GOOD = YES_NO / "model.tar"


def _copy_with(dest: Path, extra: list[tuple[tarfile.TarInfo, bytes | None]],
               replace: dict[str, bytes] | None = None, drop: tuple[str, ...] = ()) -> Path:
    replace = replace or {}
    with tarfile.open(GOOD) as src, tarfile.open(dest, "w") as out:
        for member in src.getmembers():
            name = member.name.lstrip("./")
            if name in drop:
                continue
            if name in replace:
                data = replace[name]
                member.size = len(data)
                out.addfile(member, io.BytesIO(data))
            elif member.isfile():
                out.addfile(member, src.extractfile(member))
            else:
                out.addfile(member)
        for info, data in extra:
            out.addfile(info, io.BytesIO(data) if data is not None else None)
    return dest


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name: str, target: str, hard: bool = False) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = target
    return info, None


def _huge_member(dest: Path) -> Path:
    """A tar whose member header claims 2 GiB but whose data is a few bytes."""
    good = _copy_with(dest.with_suffix(".base.tar"), [])
    raw = bytearray(good.read_bytes().rstrip(b"\0"))
    raw += b"\0" * (-len(raw) % 512)
    header = tarfile.TarInfo("./codegen/host/src/huge.c")
    header.size = 2 * 1024**3
    raw += header.tobuf(format=tarfile.GNU_FORMAT) + b"int x;\n".ljust(512, b"\0")
    dest.write_bytes(bytes(raw) + b"\0" * 1024)
    good.unlink()
    return dest


def _metadata(**changes) -> bytes:
    with tarfile.open(GOOD) as tar:
        meta = json.load(tar.extractfile("./metadata.json"))
    meta.update(changes)
    return json.dumps(meta).encode()


BAD = {
    "not-a-tar": (lambda p: (p.write_bytes(b"this is not a tar archive\n" * 40), p)[1],
                  "not a tar archive"),
    "no-metadata": (lambda p: _copy_with(p, [], drop=("metadata.json",)), "no metadata.json"),
    "version-99": (lambda p: _copy_with(p, [], replace={"metadata.json": _metadata(version=99)}),
                   "version 99 is newer"),
    "bad-json": (lambda p: _copy_with(p, [], replace={"metadata.json": b"{nope"}),
                 "not valid JSON"),
    "dotdot": (lambda p: _copy_with(p, [_file("../evil", b"pwned")]), "climbs out"),
    "dotdot-deep": (lambda p: _copy_with(p, [_file("./codegen/../../evil", b"x")]), "climbs out"),
    "absolute": (lambda p: _copy_with(p, [_file("/tmp/evil", b"pwned")]), "absolute path"),
    "symlink": (lambda p: _copy_with(p, [_link("./codegen/host/src/link.c", "/etc/passwd")]),
                "is a link"),
    "hardlink": (lambda p: _copy_with(p, [_link("./codegen/host/src/h.c", "/etc/passwd", True)]),
                 "is a link"),
    "huge-member": (_huge_member, "claims 2147483648 bytes"),
}


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("flaw", sorted(BAD))
def test_bad_archive_is_refused_cleanly(flaw, tmp_path, capsys):
    make, message = BAD[flaw]
    bad = make(tmp_path / f"{flaw}.tar")
    before = _snapshot(tmp_path)
    out_dir = tmp_path / "project"
    code = main(["generate", str(bad), "--board", "host", "-o", str(out_dir)])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert message in err
    assert "Traceback" not in err
    assert not out_dir.exists()
    assert _snapshot(tmp_path) == before
    # `info` refuses the same archive the same way.
    assert main(["info", str(bad)]) == 2
    assert message in capsys.readouterr().err


def test_bad_archive_from_a_real_process(tmp_path):
    """The console entry point: no traceback, exit code 2, one line on stderr."""
    bad = BAD["dotdot"][0](tmp_path / "evil.tar")
    proc = subprocess.run([sys.executable, "-m", "generator", "generate", str(bad), "--board",
                           "host", "-o", str(tmp_path / "out")], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "climbs out" in proc.stderr
    assert not (tmp_path / "out").exists()
    assert not (tmp_path.parent / "evil").exists()


def test_missing_archive(tmp_path, capsys):
    assert main(["info", str(tmp_path / "nothing.tar")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_unknown_board(tmp_path, capsys):
    assert main(["generate", str(GOOD), "--board", "nope", "-o", str(tmp_path / "p")]) == 2
    assert "unknown board 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
