"""Instructions per inference of int8 models on the Cortex-M cores with SIMD, one table per
core: our generic C kernels, ours with CMSIS-NN, the default `export --board` picks (our
arm-dsp kernels, then CMSIS-NN), TensorFlow Lite Micro with CMSIS-NN, and the best published
cycle count where one exists.

- models: MLPerf Tiny's kws (tests/fixtures), TFLite Micro's micro_speech, and models of our
  own making in its other three models' shapes (tests/tiny_models.py: MobileNet-v1 0.25 at
  96x96, ResNet-8 at 32x32, the dense autoencoder);
- each configuration's archive runs on the board's QEMU under -icount: the median over the
  first 5 inputs (kws: its test vectors; the others: seeded random int8), and every output
  is checked byte for byte against the TFLite Micro Python interpreter (reference kernels);
- TFLite Micro + CMSIS-NN: measured with ../shared/tflm-cortexm (arm-none-eabi-gcc -O2, the
  same QEMU and inputs; TFLM_CMSIS_NN below says where each figure comes from);
- published: MLPerf Tiny v1.3 (2025) results, in cycles on silicon.

Usage: python benchmarks/cores.py [--boards qemu-mps2-an386,...] [--models kws,...]
       [--cmsis-nn PATH] [--json] [--from-json FILE] [--docs | --check-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from docs_tables import DocsTable, add_docs_options, publish  # noqa: E402

from benchmarks.accelerators import kws_vectors  # noqa: E402
from generator.accel import registry  # noqa: E402
from generator.boards import load_board  # noqa: E402
from generator.export import export_model  # noqa: E402
from generator.project.generate import generate  # noqa: E402
from generator.run import run_project  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "models"
BOARDS = {"qemu-mps2-an386": "Cortex-M4F (DSP)", "qemu-mps2-an505": "Cortex-M33 (DSP)",
          "qemu-mps3-an547": "Cortex-M55 (DSP, MVE)"}
CONFIGS = ("generic", "cmsis-nn", "default")
SAMPLES = 5

# TFLite Micro + CMSIS-NN: board → model → (instructions per inference, whole firmware's
# flash in bytes or None). kws: ../shared/docs/tflm-baseline.md (the median of its 25 test
# vectors). The others: built for this table with ../shared/tflm-cortexm's recipe (TFLite
# Micro 90b983c, CMSIS-NN 4ab83cc, CMSIS_6 5782d6f, arm-none-eabi-gcc 12.2 -O2, config
# m4_cmsis), run in QEMU mps2-an386 -icount shift=0 on the same 5 seeded inputs, outputs
# byte-equal with the Python interpreter's; flash from arm-none-eabi-size without the test
# vectors (the model array included). kws's flash was measured the same way.
TFLM_CMSIS_NN: dict[str, dict[str, tuple[int, int | None]]] = {
    "qemu-mps2-an386": {"kws": (7_700_760, 143_908), "mobilenet_v1_025": (24_100_600, 377_972),
                        "resnet8": (29_856_280, 176_512), "autoencoder": (582_600, 311_956)},
    "qemu-mps3-an547": {"kws": (1_816_750, None)},
}
# Best published cycle counts (MLPerf Tiny v1.3, 2025): board → model → (cycles, who).
PUBLISHED: dict[str, dict[str, tuple[int, str]]] = {
    "qemu-mps2-an386": {"kws": (5_210_000, "ST Edge AI 10.2, STM32L4R5")},
    "qemu-mps2-an505": {"kws": (4_640_000, "ST Edge AI, STM32U5")},
}


@dataclass(frozen=True)
class Model:
    name: str

    def path(self, work: Path) -> Path:
        if self.name == "kws":
            return FIXTURES / "mlperftiny_kws" / "kws_ref_model.tflite"
        if self.name == "micro_speech":
            return FIXTURES / "corpus" / "tflm_micro_speech" / "micro_speech_quantized.tflite"
        from tests.tiny_models import MODELS as BUILDERS

        path = work / f"{self.name}.tflite"
        if not path.exists():
            path.write_bytes(BUILDERS[self.name]())
        return path


MODELS = {m.name: m for m in (Model("kws"), Model("micro_speech"), Model("mobilenet_v1_025"),
                              Model("resnet8"), Model("autoencoder"))}


def inputs(model: str, path: Path) -> tuple[str, list[np.ndarray]]:
    """The model's input name and its SAMPLES inputs."""
    from generator.export.model_info import model_info

    tensor = model_info(path).inputs[0]
    if model == "kws":
        return tensor.name, kws_vectors()
    rng = np.random.default_rng(0)
    return tensor.name, [rng.integers(-128, 128, tuple(tensor.shape), dtype=np.int8)
                         for _ in range(SAMPLES)]


def reference(path: Path, xs: list[np.ndarray]) -> list[bytes]:
    """The TFLite Micro Python interpreter's outputs (reference kernels)."""
    from tests.test_export import tflm_outputs

    return [out.tobytes() for out in tflm_outputs(path, xs)]


def selection(config: str, board: str) -> tuple[list, str | None]:
    """The accelerators of a configuration and the board passed to export (defaults)."""
    if config == "generic":
        return [], None
    if config == "cmsis-nn":
        core = "mve" if "mve" in load_board(board).features else "dsp"
        return registry.select("cmsis-nn,c", [], [f"--target-cmsis-nn-core={core}"]), None
    selected, notes = registry.board_defaults(load_board(board), [])
    if notes:
        raise SystemExit(f"cores.py: {notes[0]}")
    return selected, board


def measure(models: list[str], boards: list[str], work: Path) -> list[dict]:
    rows = []
    for name in models:
        model = MODELS[name]
        path = model.path(work)
        input_name, xs = inputs(name, path)
        want = reference(path, xs)
        for board in boards:
            for config in CONFIGS:
                print(f"measuring {name} {config} on {board}", file=sys.stderr, flush=True)
                selected, export_board = selection(config, board)
                archive = work / f"{name}-{config}-{board}.tar"
                result = export_model(path, archive, accelerators=selected)
                taken = {a: sum(v.values()) for a, v in
                         result.offload.by_accelerator().items()}
                macs = sum(o.macs for o in result.offload.offloaded)
                project = work / f"p-{name}-{config}-{board}"
                generate(archive, board, project)
                report = run_project(project, [{input_name: x} for x in xs])
                got = [next(iter(o.values())).tobytes() for o in report.outputs]
                if got != want:
                    raise SystemExit(f"cores.py: {name} {config} on {board}: outputs differ "
                                     "from TFLite Micro's")
                rows.append({"model": name, "board": board, "config": config,
                             "instructions": int(statistics.median(
                                 t.count for t in report.timings)),
                             "flash_bytes": report.flash_bytes, "accelerators": taken,
                             "accelerator_macs": macs,
                             "default_board": export_board})
    return rows


def _ratio(a: int, b: int | None) -> str:
    return f"{a / b:.2f}×" if b else "–"


def table_lines(rows: list[dict], board: str) -> list[str]:
    """One core's table."""
    lines = ["| model | MACs (accelerated) | ours, generic C | ours + CMSIS-NN | default (arm-dsp, "
             "CMSIS-NN) | TFLite Micro + CMSIS-NN | default / TFLM | best published "
             "(cycles) | flash B: default / TFLM |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    for name in MODELS:
        by = {r["config"]: r for r in rows if r["model"] == name and r["board"] == board}
        if not by:
            continue
        tflm, tflm_flash = TFLM_CMSIS_NN.get(board, {}).get(name, (None, None))
        published = PUBLISHED.get(board, {}).get(name)
        best = f"{published[0] / 1e6:.2f} M ({published[1]})" if published else "–"
        default = by["default"]["instructions"]
        flash = f"{by['default']['flash_bytes']:,}" + (f" / {tflm_flash:,}" if tflm_flash
                                                        else "")
        lines.append(
            f"| {name} | {by['default']['accelerator_macs'] / 1e6:.2f} M | "
            f"{by['generic']['instructions']:,} | "
            f"{by['cmsis-nn']['instructions']:,} | **{default:,}** | "
            f"{f'{tflm:,}' if tflm else 'not measured'} | {_ratio(default, tflm)} | {best} | "
            f"{flash} |")
    return lines


DOCS_TABLES = {board: DocsTable(REPO / "docs" / "quantization.md", name,
                                "python benchmarks/cores.py --docs")
               for board, name in (("qemu-mps2-an386", "cores-qemu-mps2-an386"),
                                   ("qemu-mps2-an505", "cores-qemu-mps2-an505"),
                                   ("qemu-mps3-an547", "cores-qemu-mps3-an547"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boards", default=",".join(BOARDS))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--cmsis-nn", type=Path, help="a CMSIS-NN source tree")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--from-json", type=Path, metavar="FILE",
                        help="take the rows a --json run printed instead of measuring")
    add_docs_options(parser, "the per-core tables in docs/quantization.md")
    args = parser.parse_args()
    if args.docs or args.check_docs:
        args.models, args.boards = ",".join(MODELS), ",".join(BOARDS)
    boards = [b for b in args.boards.split(",") if b]
    models = [m for m in args.models.split(",") if m]
    for what, names, known in (("model", models, MODELS), ("board", boards, BOARDS)):
        unknown = [n for n in names if n not in known]
        if unknown:
            parser.error(f"unknown {what} {unknown[0]} ({what}s: {', '.join(known)})")
    tree = args.cmsis_nn or os.environ.get("CMSIS_NN_PATH") or \
        REPO.parent / "shared" / "third_party" / "CMSIS-NN"
    os.environ["CMSIS_NN_PATH"] = str(Path(tree).resolve())
    if args.from_json:
        rows = json.loads(args.from_json.read_text())
        boards = [b for b in BOARDS if any(r["board"] == b for r in rows)]
    else:
        with tempfile.TemporaryDirectory(prefix="mtvg-cores-bench-") as tmp:
            rows = measure(models, boards, Path(tmp))
    if args.docs or args.check_docs:
        status = 0
        for board in boards:
            status |= publish(DOCS_TABLES[board], table_lines(rows, board), args.check_docs)
        return status
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for board in boards:
            print(f"\n{board} ({BOARDS[board]})")
            print("\n".join(table_lines(rows, board)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
