"""Instructions per inference of int8 models on our own kernels and through accelerator
plugins (cmsis-nn, vanilla), on the host (callgrind) and on QEMU boards (-icount).

- host: callgrind `Ir` inside `tvmgen_default_run` of the archive's C, the plugin drivers and
  (for cmsis-nn) CMSIS-NN's portable C, built with gcc -O2, averaged over 10 runs on one
  deterministic input;
- QEMU boards: the generated project's `run`, median instructions over the first 5 kws test
  vectors (hello_world: 5 inputs), exactly as `microtvm-gen run` reports them;
- TFLite Micro figures (QEMU, arm-none-eabi-gcc -O2) from ../shared/docs/tflm-baseline.md.

Usage: python benchmarks/accelerators.py [--boards host,qemu-mps2-an386] [--models kws]
       [--cmsis-nn PATH] [--json]
CMSIS-NN comes from --cmsis-nn, CMSIS_NN_PATH or ../shared/third_party/CMSIS-NN.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from docs_tables import DocsTable, add_docs_options, publish  # noqa: E402

from benchmarks.quantized import RUNS, callgrind_ir, deterministic_input  # noqa: E402
from generator.accel import registry  # noqa: E402
from generator.export import export_model  # noqa: E402
from generator.project.generate import TVM_CODE_CFLAGS, generate, tvm_include_dirs  # noqa: E402
from generator.run import run_project  # noqa: E402

MODELS = REPO / "tests" / "fixtures" / "models"
MODEL_FILES = {
    "kws": (MODELS / "mlperftiny_kws" / "kws_ref_model.tflite", "input_1"),
    "hello_world_int8": (MODELS / "hello_world" / "hello_world_int8.tflite",
                         "serving_default_dense_input:0"),
}
CONFIGS = {"ours": None, "cmsis-nn": "cmsis-nn,c", "vanilla": "vanilla,c"}
BOARDS = ["host", "qemu-mps2-an385", "qemu-mps2-an386", "qemu-mps2-an500", "qemu-mps3-an547"]
CORES = {"host": "x86-64", "qemu-mps2-an385": "M3", "qemu-mps2-an386": "M4F, DSP",
         "qemu-mps2-an500": "M7, DSP", "qemu-mps3-an547": "M55, MVE"}
# TFLite Micro, instructions per kws inference (tflm-baseline.md): board → (kernels, count)
TFLM_KWS = {"qemu-mps2-an385": ("reference", 42_069_040),
            "qemu-mps2-an386": ("CMSIS-NN", 7_700_760),
            "qemu-mps3-an547": ("CMSIS-NN", 1_816_750)}
SAMPLES = 5


def kws_vectors() -> list[np.ndarray]:
    data = REPO.parent / "shared" / "fixtures" / "models" / "mlperftiny_kws" / "testdata_etiss"
    files = sorted(data.glob("input_*.int8.bin"))[:SAMPLES]
    if not files:
        return [deterministic_input((1, 49, 10, 1)) for _ in range(SAMPLES)]
    return [np.fromfile(f, dtype=np.int8).reshape(1, 49, 10, 1) for f in files]


def hello_vectors() -> list[np.ndarray]:
    return [np.array([[v]], np.int8) for v in (-128, -64, 0, 64, 127)]


def host_ir(archive: Path, work: Path, x: np.ndarray, out_bytes: int) -> int:
    """callgrind Ir per run of the archive's C plus the drivers its accelerators name."""
    from generator.boards import load_board
    from generator.mlf import read_mlf
    from generator.project.accelerators import project_accelerators

    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    (module,) = read_mlf(archive).modules
    sources: list[str] = []
    flags: list[str] = [f"-I{REPO / 'templates' / 'common' / 'include'}"]
    for build in project_accelerators(module, load_board("host"), str(archive)):
        for rel, data in build.files.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(data)
        sources += [str(work / s) for s in build.sources]
        flags += [f"-I{work / d}" for d in build.include_dirs]
        flags += [f"-D{k}={v}" for k, v in build.defines.items()]
        for ext in build.external:
            for pattern in ext.globs:
                sources += sorted(str(p) for p in Path(ext.root).glob(pattern))
            flags += [f"-I{ext.root}/{d}" for d in ext.include_dirs]
    if sources:
        sources.append(str(REPO / "templates" / "common" / "src" / "accel.c"))
    code = work / "codegen" / "host"
    values = ", ".join(str(int(v)) for v in x.reshape(-1))
    (work / "main.c").write_text(f"""#include <stdint.h>
#include <stdio.h>
#include "tvmgen_default.h"
static int8_t input[{x.size}] __attribute__((aligned(16))) = {{{values}}};
static int8_t output[{out_bytes}] __attribute__((aligned(16)));
int main(void) {{
  struct tvmgen_default_inputs in = {{input}};
  struct tvmgen_default_outputs out = {{output}};
  for (int i = 0; i < {RUNS}; ++i) if (tvmgen_default_run(&in, &out) != 0) return 1;
  printf("%d\\n", output[0]);
  return 0;
}}
""")
    exe = work / "main"
    tvm = [f"-I{d}" for d in tvm_include_dirs()]
    subprocess.run(["gcc", "-O2", "-g", "-w", *TVM_CODE_CFLAGS, *tvm, *flags,
                    f"-I{code / 'include'}", *map(str, sorted((code / "src").glob("*.c"))),
                    *sources, str(work / "main.c"), "-o", str(exe), "-lm"], check=True)
    return callgrind_ir([str(exe)], "tvmgen_default_run", work) // RUNS


def board_instructions(archive: Path, board: str, work: Path, samples: list[dict]) -> int:
    project = work / f"proj-{board}"
    generate(archive, board, project)
    report = run_project(project, samples)
    return int(statistics.median(t.count for t in report.timings))


def measure(models: list[str], boards: list[str], work: Path,
            configs: tuple[str, ...] = tuple(CONFIGS)) -> list[dict]:
    rows = []
    for model in models:
        path, input_name = MODEL_FILES[model]
        xs = kws_vectors() if model == "kws" else hello_vectors()
        samples = [{input_name: x} for x in xs]
        for config in configs:
            target = CONFIGS[config]
            archive = work / f"{model}-{config}.tar"
            selected = registry.select(target, [], []) if target else []
            result = export_model(path, archive, accelerators=selected)
            taken = sum(len(v) for v in (result.offload.by_accelerator().values()))
            for board in boards:
                sub = work / f"{model}-{config}-{board}"
                sub.mkdir()
                print(f"measuring {model} {config} on {board}", file=sys.stderr, flush=True)
                if board == "host":
                    count = host_ir(archive, sub, xs[0], result.outputs[0].size_bytes)
                else:
                    count = board_instructions(archive, board, sub, samples)
                tflm = TFLM_KWS.get(board) if model == "kws" else None
                rows.append({"model": model, "config": config, "board": board,
                             "core": CORES.get(board, "?"), "instructions": count,
                             "offloaded_kinds": taken,
                             "tflm": {"kernels": tflm[0], "instructions": tflm[1]}
                             if tflm else None})
    return rows


def print_table(rows: list[dict]) -> None:
    print("| model | board (core) | ours | cmsis-nn | vanilla | TFLM (kernels) |")
    print("|---|---|---|---|---|---|")
    keys = sorted({(r["model"], r["board"]) for r in rows},
                  key=lambda k: (k[0], BOARDS.index(k[1]) if k[1] in BOARDS else 99))
    for model, board in keys:
        by = {r["config"]: r for r in rows if r["model"] == model and r["board"] == board}
        tflm = next((r["tflm"] for r in by.values() if r["tflm"]), None)
        unit = "Ir" if board == "host" else "instr"

        def cell(config: str, by=by, unit=unit) -> str:
            r = by.get(config)
            return f"{r['instructions']:,} {unit}" if r else "—"

        tflm_text = f"{tflm['instructions']:,} ({tflm['kernels']})" if tflm else "—"
        print(f"| {model} | {board} ({CORES.get(board, '?')}) | {cell('ours')} | "
              f"{cell('cmsis-nn')} | {cell('vanilla')} | {tflm_text} |")


DOCS_TABLE = DocsTable(REPO / "docs" / "quantization.md", "kws-on-every-core",
                       "python benchmarks/accelerators.py --docs")
DOCS_CONFIGS = ("ours", "cmsis-nn")


def docs_lines(rows: list[dict]) -> list[str]:
    """docs/quantization.md's kws table: our generic C, CMSIS-NN through the plugin, and
    TFLite Micro's figures, per board."""
    lines = ["| board (core) | ours (generic C) | ours + CMSIS-NN | TFLite Micro |",
             "|---|---|---|---|"]
    for board in BOARDS:
        by = {r["config"]: r for r in rows if r["model"] == "kws" and r["board"] == board}
        if not by:
            continue
        cmsis = f"{by['cmsis-nn']['instructions']:,}"
        if board in ("host", "qemu-mps2-an385"):
            cmsis += " (portable C)"  # no DSP or MVE: CMSIS-NN's plain C paths
        tflm = TFLM_KWS.get(board)
        lines.append(f"| {board} ({CORES[board]}){', Ir' if board == 'host' else ''} | "
                     f"{by['ours']['instructions']:,} | {cmsis} | "
                     + (f"{tflm[1]:,} ({tflm[0]} kernels) |" if tflm else "not measured |"))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boards", default=",".join(BOARDS))
    parser.add_argument("--models", default=",".join(MODEL_FILES))
    parser.add_argument("--cmsis-nn", type=Path, help="a CMSIS-NN source tree")
    parser.add_argument("--json", action="store_true")
    add_docs_options(parser, "the kws table in docs/quantization.md (every board)")
    args = parser.parse_args()
    if args.docs or args.check_docs:
        args.models, args.boards = "kws", ",".join(BOARDS)
    boards = [b for b in args.boards.split(",") if b]
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODEL_FILES]
    if unknown:
        parser.error(f"unknown model {unknown[0]} (models: {', '.join(MODEL_FILES)})")
    tree = args.cmsis_nn or os.environ.get("CMSIS_NN_PATH") or \
        REPO.parent / "shared" / "third_party" / "CMSIS-NN"
    os.environ["CMSIS_NN_PATH"] = str(Path(tree).resolve())
    with tempfile.TemporaryDirectory(prefix="mtvg-accel-bench-") as tmp:
        rows = measure(models, boards, Path(tmp),
                       DOCS_CONFIGS if args.docs or args.check_docs else tuple(CONFIGS))
    if args.docs or args.check_docs:
        return publish(DOCS_TABLE, docs_lines(rows), args.check_docs)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
