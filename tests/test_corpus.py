"""The corpus of public microcontroller models (benchmarks/corpus.toml,
tests/fixtures/models/corpus/): every committed model has its provenance recorded, and a few
small ones export and run on this machine bit-exact with TFLite's reference kernels."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

from tests.tflite_builder import litert_missing

REPO = Path(__file__).resolve().parent.parent
CORPUS_DIR = REPO / "tests" / "fixtures" / "models" / "corpus"
CORPUS_TOML = REPO / "benchmarks" / "corpus.toml"
# Small int8 models that are bit-exact today (benchmarks/coverage.py's table).
BIT_EXACT = ["tflm_micro_speech", "tflm_micro_speech_unalign", "tflm_hello_world_legacy",
             "tflm_simple_add"]


def _coverage():
    """benchmarks/coverage.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("coverage_bench",
                                                  REPO / "benchmarks" / "coverage.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _entries() -> list[dict]:
    with CORPUS_TOML.open("rb") as f:
        return tomllib.load(f)["model"]


@pytest.mark.parametrize("folder", sorted(p.name for p in CORPUS_DIR.iterdir() if p.is_dir()))
def test_folder_has_source_md(folder: str) -> None:
    """Each committed model's folder names its origin repository, commit and license."""
    source = CORPUS_DIR / folder / "SOURCE.md"
    assert source.is_file(), f"{folder}: no SOURCE.md"
    text = source.read_text()
    assert re.search(r"\*\*Origin:\*\* https://github\.com/[\w.-]+/[\w.-]+", text), folder
    assert re.search(r"\*\*Commit:\*\* [0-9a-f]{40}\b", text), folder
    assert re.search(r"\*\*License:\*\* (Apache-2\.0|MIT|BSD|CC0|CC-BY)", text), folder
    models = [p for p in (CORPUS_DIR / folder).iterdir() if p.suffix in (".tflite", ".onnx")]
    assert models, f"{folder}: no model file"


def test_corpus_toml_matches_the_files() -> None:
    """Every committed entry's file is there with its recorded size and sha256, every corpus
    folder is listed, and the committed total stays under 8 MB."""
    entries = _entries()
    assert len(entries) >= 40
    listed = set()
    total = 0
    for e in entries:
        for key in ("name", "repo", "commit", "path", "license", "task"):
            assert e.get(key), f"{e.get('name')}: no {key}"
        assert re.fullmatch(r"[0-9a-f]{40}", e["commit"]), e["name"]
        if not e.get("committed"):
            continue
        path = REPO / e["file"]
        data = path.read_bytes()
        assert len(data) == e["size"], e["name"]
        assert hashlib.sha256(data).hexdigest() == e["sha256"], e["name"]
        if path.is_relative_to(CORPUS_DIR):
            listed.add(path.relative_to(CORPUS_DIR).parts[0])
            total += len(data)
    assert listed == {p.name for p in CORPUS_DIR.iterdir() if p.is_dir()}
    assert total < 8_000_000


@pytest.mark.slow
@pytest.mark.parametrize("name", BIT_EXACT)
def test_bit_exact_with_reference_kernels(name: str, tmp_path: Path) -> None:
    """Exported, built with gcc and run on 3 random inputs: equal to BUILTIN_REF bit by bit."""
    if why := litert_missing():
        pytest.skip(why)
    coverage = _coverage()
    entry = next(e for e in _entries() if e["name"] == name)
    model = coverage.Model(name, REPO / entry["file"], entry["task"], entry["repo"])
    row = coverage.run_one(model, seed=0, qemu=False, work=tmp_path)
    assert row.imported, row.reason
    assert row.kind == "integer"
    assert row.exact, row.reason
    assert row.pool >= row.lower_bound


SAMPLE_BYTES = 30_000  # the suite's sample; benchmarks/coverage.py checks every model


def _small_models() -> list[Path]:
    return sorted(p for d in CORPUS_DIR.iterdir() if d.is_dir() for p in d.iterdir()
                  if p.suffix in (".tflite", ".onnx") and p.stat().st_size < SAMPLE_BYTES)


@pytest.mark.slow
@pytest.mark.parametrize("model", _small_models(), ids=lambda p: p.parent.name)
def test_what_export_writes_generate_reads(model: Path, tmp_path: Path) -> None:
    """Each small corpus model either exports or is refused in one line; an archive export
    writes is always one generate takes (for the host board and a Cortex-M3 board).
    benchmarks/coverage.py does the same for every model of the corpus."""
    from generator.errors import ExportError
    from generator.export.api import export_model
    from generator.project.generate import generate

    try:
        result = export_model(model, tmp_path / "model.tar")
    except ExportError as exc:
        line = exc.one_line()
        assert "\n" not in line and "Traceback" not in line
        assert not (tmp_path / "model.tar").exists()
        return
    for board in ("host", "qemu-mps2-an385"):
        try:
            generate(result.path, board, tmp_path / board)
        except Exception as exc:
            # a model too large for the board is refused with the numbers; nothing else
            assert "RAM" in str(exc) or "flash" in str(exc), f"{board}: {exc}"
