"""Wrong `*_SIZE` macros in the C interface header (issue 24).

TVM 0.11-era archives with USMP write nonsense size macros (tens of MB for a 640-byte
input) while metadata.json holds the true sizes. The reader trusts metadata when the
tensor's declaration (its Relay text, or v8 metadata's own shape) confirms it, keeps a note
that `info` shows, and refuses only when metadata and the declaration disagree. The test
archives are real ones edited in a temporary copy.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from generator.cli import main
from tests.conftest import shared_path
from tests.tflite_builder import ModelBuilder, Tensor

HEADER = "codegen/host/include/tvmgen_default.h"
ETISS = "etiss-kws-aot-usmp-tvm0.16"  # input_1 int8[1x49x10x1] = 490 B, output 12 B
NONSENSE = 33554432

Edit = Callable[[bytes], bytes | None]  # None: leave the file out


def _edited(src: Path, dest: Path, edits: dict[str, Edit]) -> Path:
    """A copy of the tar `src` with the files named in `edits` rewritten."""
    with tarfile.open(src) as tin, tarfile.open(dest, "w") as tout:
        for member in tin.getmembers():
            data = tin.extractfile(member).read() if member.isfile() else None
            key = member.name.removeprefix("./")
            if data is not None and key in edits:
                data = edits[key](data)
                if data is None:
                    continue
                member.size = len(data)
            tout.addfile(member, io.BytesIO(data) if data is not None else None)
    return dest


def _macro(name: str, value: int) -> Edit:
    def edit(data: bytes) -> bytes:
        text, n = re.subn(rf"(#define\s+{name}\s+)\d+", rf"\g<1>{value}", data.decode())
        assert n == 1, f"no {name} in the header"
        return text.encode()
    return edit


def _metadata_size(kind: str, name: str, size: int) -> Edit:
    def edit(data: bytes) -> bytes:
        meta = json.loads(data)
        modules = meta["modules"] if "modules" in meta else {"default": meta}
        for info in modules.values():
            info["memory"]["functions"]["main"][0][kind][name]["size"] = size
        return json.dumps(meta, indent=2).encode()
    return edit


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_nonsense_macros_are_overruled_by_metadata_and_relay(tmp_path, capsys):
    archive = _edited(shared_path("mlf", ETISS, "model.tar"), tmp_path / "edited.tar", {
        HEADER: lambda d: _macro("TVMGEN_DEFAULT_IDENTITY_SIZE", 1258291200)(
            _macro("TVMGEN_DEFAULT_INPUT_1_SIZE", NONSENSE)(d))})
    code, out, err = _run(capsys, "info", str(archive))
    assert code == 0, err
    assert (f"  note    header macro TVMGEN_DEFAULT_INPUT_1_SIZE says {NONSENSE} B; metadata "
            "and the Relay text say 490 B: using 490") in out
    # this Relay text has no type annotations: it cannot contradict the output's metadata
    assert ("  note    header macro TVMGEN_DEFAULT_IDENTITY_SIZE says 1258291200 B; metadata "
            "says 12 B (the Relay text does not declare its shape): using 12") in out
    assert "  input   input_1: int8[1x49x10x1], 490 B" in out

    code, out, _ = _run(capsys, "info", str(archive), "--json")
    module = json.loads(out)["modules"][0]
    assert code == 0 and len(module["notes"]) == 2
    assert module["inputs"][0]["size_bytes"] == 490
    assert module["inputs"][0]["shape"] == [1, 49, 10, 1]
    assert module["outputs"][0]["size_bytes"] == 12

    code, _, err = _run(capsys, "generate", str(archive), "--board", "host", "-o",
                        str(tmp_path / "project"))
    assert code == 0, err
    assert (tmp_path / "project").is_dir()


def test_metadata_contradicting_relay_is_refused_in_one_line(tmp_path, capsys):
    archive = _edited(shared_path("mlf", ETISS, "model.tar"), tmp_path / "edited.tar", {
        HEADER: _macro("TVMGEN_DEFAULT_INPUT_1_SIZE", NONSENSE),
        "metadata.json": _metadata_size("inputs", "input_1", 980)})
    for argv in (["info", str(archive)],
                 ["generate", str(archive), "--board", "host", "-o", str(tmp_path / "p")]):
        code, out, err = _run(capsys, *argv)
        assert code == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert "980 bytes in metadata.json" in err
        assert "the Relay text gives int8[1x49x10x1] = 490 bytes" in err
        assert str(NONSENSE) in err
    assert not (tmp_path / "p").exists()


def test_without_relay_text_a_disagreement_is_still_refused(tmp_path, capsys):
    """MLF v7 metadata has no shapes: with the Relay text gone nothing tells which is right."""
    archive = _edited(shared_path("mlf", ETISS, "model.tar"), tmp_path / "edited.tar", {
        HEADER: _macro("TVMGEN_DEFAULT_INPUT_1_SIZE", NONSENSE),
        "src/default.relay": lambda _: None})
    code, _, err = _run(capsys, "info", str(archive))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "490 bytes in metadata.json" in err and str(NONSENSE) in err
    assert "no Relay declaration" in err


def test_agreeing_macros_leave_no_note(capsys):
    code, out, _ = _run(capsys, "info", str(shared_path("mlf", ETISS, "model.tar")), "--json")
    assert code == 0 and json.loads(out)["modules"][0]["notes"] == []


# ---- MLF v8 (our exporter, no Relay text): metadata's own shape is the declaration ----------


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """A one-operator int8 model exported to MLF v8 (runs without ../shared)."""
    tmp = tmp_path_factory.mktemp("v8")
    m = ModelBuilder()
    q = {"scale": 0.05, "zero_point": -3}
    x = m.tensor(Tensor((1, 20), "int8", name="x", **q))
    y = m.tensor(Tensor((1, 20), "int8", name="y", **q))
    m.op("RELU", [x], [y])
    m.inputs(x)
    m.outputs(y)
    (tmp / "relu.tflite").write_bytes(m.build())
    assert main(["export", str(tmp / "relu.tflite"), "-o", str(tmp / "relu.tar")]) == 0
    return tmp / "relu.tar"


def test_v8_nonsense_macro_is_overruled_by_metadata_shape(exported, tmp_path, capsys):
    capsys.readouterr()
    archive = _edited(exported, tmp_path / "edited.tar",
                      {HEADER: _macro("TVMGEN_DEFAULT_X_SIZE", NONSENSE)})
    code, out, err = _run(capsys, "info", str(archive))
    assert code == 0, err
    assert (f"  note    header macro TVMGEN_DEFAULT_X_SIZE says {NONSENSE} B; metadata and its "
            "declared shape say 20 B: using 20") in out
    code, _, err = _run(capsys, "generate", str(archive), "--board", "host", "-o",
                        str(tmp_path / "project"))
    assert code == 0, err


def test_v8_metadata_contradicting_its_shape_is_refused(exported, tmp_path, capsys):
    capsys.readouterr()
    archive = _edited(exported, tmp_path / "edited.tar", {
        HEADER: _macro("TVMGEN_DEFAULT_X_SIZE", NONSENSE),
        "metadata.json": _metadata_size("inputs", "x", 40)})
    code, out, err = _run(capsys, "info", str(archive))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "40 bytes in metadata.json" in err
    assert "its declared shape gives int8[1x20] = 20 bytes" in err and str(NONSENSE) in err
