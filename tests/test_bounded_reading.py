"""Reading is bounded: bombs, bad checksums, forged headers, hostile JSON (issue: trust).

Each case is refused in one line with exit code 2, quickly and in little memory, and
`info --json` never prints a non-standard number.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import resource
import tarfile
import time
from pathlib import Path

import pytest

from generator.cli import main
from generator.mlf.archive import LIMIT_ENV
from generator.mlf.reader import read_mlf
from tests.conftest import YES_NO

GOOD = YES_NO / "model.tar"


def _refused(capsys, path: Path, fragment: str) -> None:
    assert main(["info", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert fragment in err, err


def _with_metadata(dest: Path, meta_text: str) -> Path:
    with tarfile.open(GOOD) as src, tarfile.open(dest, "w") as out:
        for member in src.getmembers():
            data = src.extractfile(member) if member.isfile() else None
            if member.name.removeprefix("./") == "metadata.json":
                blob = meta_text.encode()
                member.size = len(blob)
                data = io.BytesIO(blob)
            out.addfile(member, data)
    return dest


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress])
def test_compressed_archives_read(tmp_path, compress):
    path = tmp_path / "model.tar.x"
    path.write_bytes(compress(GOOD.read_bytes()))
    assert read_mlf(path).modules[0].inputs[0].name == "Reshape_1"


def _bomb(path: Path, members: int, member_bytes: int) -> Path:
    """A small .tar.gz of many members of zeros."""
    with gzip.open(path, "wb", compresslevel=9) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        for i in range(members):
            info = tarfile.TarInfo(f"./runtime/zeros{i}.bin")
            info.size = member_bytes
            tar.addfile(info, _Zeros(info.size))
    assert path.stat().st_size < 1024 * 1024
    return path


def test_decompression_bomb_is_refused_fast(tmp_path, capsys, monkeypatch):
    """Past the unpacked-size limit (here set to 64 MiB): refused, quickly and small."""
    monkeypatch.setenv(LIMIT_ENV, str(64 * 1024 * 1024))
    bomb = _bomb(tmp_path / "bomb.tar.gz", 8, 30 * 1024 * 1024)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    _refused(capsys, bomb, "unpacks to more than 67108864 bytes")
    assert time.monotonic() - start < 20
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 200 * 1024


def test_compression_ratio_bomb_is_refused(tmp_path, capsys):
    """Under the size limits, but 1,000 times its compressed size: a bomb all the same."""
    bomb = _bomb(tmp_path / "ratio.tar.gz", 3, 20 * 1024 * 1024)
    _refused(capsys, bomb, "times its")


def test_bad_limit_setting_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "lots")
    _refused(capsys, GOOD, LIMIT_ENV)


def test_gzip_with_bad_crc_is_refused(tmp_path, capsys):
    blob = bytearray(gzip.compress(GOOD.read_bytes()))
    blob[-8] ^= 0xFF  # the CRC32 of the trailer
    bad = tmp_path / "bad-crc.tar.gz"
    bad.write_bytes(bytes(blob))
    _refused(capsys, bad, "CRC")


def test_truncated_gzip_is_refused(tmp_path, capsys):
    blob = gzip.compress(GOOD.read_bytes())
    bad = tmp_path / "cut.tar.gz"
    bad.write_bytes(blob[: len(blob) // 2])
    _refused(capsys, bad, "damaged")


def test_forged_pax_header_size_is_refused(tmp_path, capsys):
    """A pax extended header that claims 8 GiB (tarfile would read it whole)."""
    raw = bytearray(GOOD.read_bytes())
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = 8 * 1024**3
    raw[0:0] = header.tobuf(format=tarfile.GNU_FORMAT)
    bad = tmp_path / "pax.tar"
    bad.write_bytes(bytes(raw))
    _refused(capsys, bad, "extended header claims")


def test_duplicate_member_is_refused(tmp_path, capsys):
    with tarfile.open(GOOD) as src, tarfile.open(tmp_path / "dup.tar", "w") as out:
        for member in src.getmembers():
            out.addfile(member, src.extractfile(member) if member.isfile() else None)
        meta = src.getmember("./metadata.json")
        out.addfile(meta, src.extractfile(meta))
    _refused(capsys, tmp_path / "dup.tar", "appears twice")


@pytest.mark.parametrize("text, fragment", [
    ("[" * 100_000 + "]" * 100_000, "nested 100000 levels"),
    ('{"version": 5, "x": NaN}', "not a JSON number"),
    ('{"version": 5, "x": 1e999}', "not a finite number"),
    ('{"version": ' + "9" * 5000 + "}", "5000 digits"),
])
def test_hostile_json_is_refused(tmp_path, capsys, text, fragment):
    _refused(capsys, _with_metadata(tmp_path / "m.tar", text), fragment)


def _meta(**main_changes) -> str:
    with tarfile.open(GOOD) as tar:
        meta = json.load(tar.extractfile("./metadata.json"))
    meta["memory"]["functions"]["main"][0].update(main_changes)
    return json.dumps(meta)


@pytest.mark.parametrize("change, fragment", [
    ({"workspace_size_bytes": -5}, "is not a size"),
    ({"workspace_size_bytes": "5"}, "is not a size"),
    ({"workspace_size_bytes": 1.5}, "is not a size"),
    ({"workspace_size_bytes": True}, "is not a size"),
    ({"workspace_size_bytes": 1 << 40}, "is not a size"),
    ({"inputs": []}, "is not an object"),
    ({"inputs": {"x": {"dtype": "int8", "size": [1]}}}, "is not a size"),
    ({"inputs": {"x": {"dtype": 8, "size": 1960}}}, "is not a string"),
    ({"inputs": {"x": {"dtype": "complex64", "size": 1960}}}, "unknown dtype"),
    ({"inputs": {"x": {"dtype": "int8", "size": 0}}}, "has 0 bytes"),
    ({"inputs": {"x": {"dtype": "int32", "size": 3}}}, "not a whole number"),
])
def test_metadata_schema(tmp_path, capsys, change, fragment):
    _refused(capsys, _with_metadata(tmp_path / "m.tar", _meta(**change)), fragment)


def test_info_json_is_strict_json(capsys):
    assert main(["info", str(GOOD), "--json"]) == 0
    json.loads(capsys.readouterr().out,
               parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


class _Zeros(io.RawIOBase):
    """A readable stream of n zero bytes (a bomb's member, without the memory)."""

    def __init__(self, n: int) -> None:
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = min(len(buf), self.left)
        buf[:n] = b"\0" * n
        self.left -= n
        return n


def _with_writer(dest: Path, writer: object) -> Path:
    with tarfile.open(GOOD) as tar:
        meta = json.load(tar.extractfile("./metadata.json"))
    meta["generator"] = writer
    return _with_metadata(dest, json.dumps(meta))


def test_the_writer_entry_is_read_and_checked(tmp_path, capsys):
    """MLF v8's `generator` entry says who wrote a module; its text is checked like the rest."""
    named = _with_writer(tmp_path / "w.tar", {"name": "some-tool", "version": "2.1",
                                              "tvm_version": "0.99", "source": "m.tflite"})
    assert main(["info", "--json", str(named)]) == 0
    assert json.loads(capsys.readouterr().out)["modules"][0]["written_by"] == "some-tool 2.1"
    _refused(capsys, _with_writer(tmp_path / "a.tar", 5), "'generator' is not an object")
    _refused(capsys, _with_writer(tmp_path / "b.tar", {"name": "x\u001b[2J"}),
             "holds control characters")
    _refused(capsys, _with_writer(tmp_path / "c.tar", {"version": "9" * 65}), "over the limit")
