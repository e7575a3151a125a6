"""Export time with and without the TIR passes the plain kernels skip, and whether the C
differs (generator/export/lower.py, SKIPPED_PASSES).

For each model: the CPU seconds of `export_model` with TVM's whole default TIR pipeline and
with SKIPPED_PASSES disabled, and whether the archive's C files are byte-identical. Run it
after a TVM upgrade: a row that says "differs" means a skipped pass now changes kernels and
must be looked at before it stays skipped.

Usage: python benchmarks/export_passes.py [MODEL ...] [--json]
Without MODELs: every .tflite and .onnx under tests/fixtures/models (and ../shared's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.errors import MtgError  # noqa: E402
from generator.export import export_model, lower  # noqa: E402


def default_models() -> list[Path]:
    shared = Path(os.environ.get("MTVG_SHARED", REPO.parent / "shared"))
    roots = [REPO / "tests" / "fixtures" / "models", shared / "fixtures" / "models"]
    return sorted(p for root in roots if root.is_dir() for p in root.rglob("*")
                  if p.suffix in (".tflite", ".onnx"))


def c_digest(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        names = sorted(n for n in tar.getnames() if n.endswith(".c"))
        data = b"".join(tar.extractfile(n).read() for n in names)  # type: ignore[union-attr]
    return hashlib.sha256(data).hexdigest()


def timed_export(model: Path, dest: Path, skipped: tuple[str, ...]) -> tuple[float, str]:
    """CPU seconds of one export with `skipped` as lower.SKIPPED_PASSES, and its C digest."""
    saved = lower.SKIPPED_PASSES
    lower.SKIPPED_PASSES = skipped
    try:
        start = time.process_time()
        export_model(model, dest)
        return time.process_time() - start, c_digest(dest)
    finally:
        lower.SKIPPED_PASSES = saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--json", action="store_true", help="one JSON object per model")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "model.tar"
        for model in args.models or default_models():
            try:
                whole, whole_c = timed_export(model, dest, ())
                lean, lean_c = timed_export(model, dest, lower.SKIPPED_PASSES)
            except MtgError as exc:
                rows.append({"model": model.name, "error": exc.one_line()})
                continue
            rows.append({"model": model.name, "whole_s": round(whole, 2),
                         "lean_s": round(lean, 2), "same_c": whole_c == lean_c})
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"{'model':44} {'whole TIR pipeline s':>21} {'skipping s':>11}  C")
    for row in rows:
        if "error" in row:
            print(f"{row['model'][:44]:44} refused: {row['error']}")
            continue
        print(f"{row['model'][:44]:44} {row['whole_s']:21.2f} {row['lean_s']:11.2f}  "
              f"{'same' if row['same_c'] else 'DIFFERS'}")
    timed = [r for r in rows if "error" not in r]
    print(f"{'total':44} {sum(r['whole_s'] for r in timed):21.2f} "
          f"{sum(r['lean_s'] for r in timed):11.2f}  "
          f"{sum(not r['same_c'] for r in timed)} differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
