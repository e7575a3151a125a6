"""RAM per model and memory preset: the lifetime bound, our plans, what they cost, TFLite Micro.

For each model, exported with `--memory fast`, `--memory small` and `--memory small
--reuse-input` ("reuse": activations also take the input buffer once it is read):
- the lifetime lower bound (the most bytes of tensors live at once when every kernel writes
  its own output) and each plan's activation pool; the kernels' scratch (their stack arrays,
  the largest kernel's); the I/O buffers;
- instructions per inference on qemu-mps2-an385 (QEMU -icount, median of 3 inputs) for each
  preset, and the small plan's cost against the fast one;
- TensorFlow Lite Micro's arena for the same model (its Python interpreter's recording
  allocator on x86-64: the whole arena, and its "head", where its activations live; the
  AN385's 32-bit pointers make the tail a little smaller there);
- every plan's outputs must be equal on the same inputs (the run refuses to print otherwise).

It also draws kws's buffer timelines (docs/memory/kws-fast.svg, kws-small.svg): a column per
call, a bar per tensor at its pool offset while it lives.

Usage: python benchmarks/memory.py [--models kws,vww,...] [--docs | --check-docs]
(--docs writes docs/memory.md's table and the pictures; --check-docs compares.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from docs_tables import DocsTable, add_docs_options, publish, refuse_subset  # noqa: E402
from tuning import inputs_for  # noqa: E402

from generator.export import export_model  # noqa: E402
from generator.export.api import ExportResult, ram_needed  # noqa: E402
from generator.export.tflm_arena import tflm_arena  # noqa: E402
from generator.project.generate import generate  # noqa: E402
from generator.report import pictures  # noqa: E402
from generator.run import run_project  # noqa: E402

MODELS: dict[str, Path | None] = {
    "kws": REPO / "tests/fixtures/models/mlperftiny_kws/kws_ref_model.tflite",
    "vww": REPO / "tests/fixtures/models/corpus/mlperf_vww_int8/vww_96_int8.tflite",
    "resnet8": REPO / "tests/fixtures/models/corpus/mlperf_ic_resnet_int8/"
                      "pretrainedResnet_quant.tflite",
    "ad01": REPO / "tests/fixtures/models/corpus/mlperf_ad01_int8/ad01_int8.tflite",
    "mobilenetv2-style": None,  # tests/memory_models.py writes it
}
BOARD = "qemu-mps2-an385"
SAMPLES = 3
PRESETS = ("fast", "small")
PLANS = {"fast": ("fast", False), "small": ("small", False), "reuse": ("small", True)}
DOCS_TABLE = DocsTable(REPO / "docs" / "memory.md", "memory-presets",
                       "python benchmarks/memory.py --docs")
PICTURES = REPO / "docs" / "memory"


def measure(name: str, model: Path, work: Path) -> dict:
    row: dict = {"model": name}
    outputs = {}
    for preset, (memory, reuse) in PLANS.items():
        result = export_model(model, work / f"{name}-{preset}.tar", memory=memory,
                              reuse_input=reuse)
        project = work / f"{name}-{preset}"
        generate(result.path, BOARD, project)
        report = run_project(project, inputs_for(result, SAMPLES))
        outputs[preset] = [{k: v.tobytes() for k, v in o.items()} for o in report.outputs]
        row[preset] = {"result": result, "pool": result.plan.pool_bytes,
                       "scratch": result.scratch_bytes, "ram": ram_needed(result),
                       "in_input": result.in_input_bytes,
                       "instructions": int(statistics.median(t.count for t in report.timings))}
        row["bound"] = result.lifetime_bound
        row["io"] = sum(t.size_bytes for t in [*result.inputs, *result.outputs])
    for preset in PLANS:
        if outputs[preset] != outputs["fast"]:
            raise SystemExit(f"{name}: the {preset} plan's outputs differ from the fast plan's")
    arena = tflm_arena(model)
    if arena is None:
        raise SystemExit(f"{name}: TFLite Micro's interpreter gave no arena (pip install "
                         "the [test] extra)")
    row["tflm"] = (arena.total, arena.head)
    return row


def table_lines(rows: list[dict]) -> list[str]:
    lines = ["| model | lifetime bound | fast: pool + scratch | small: pool + scratch | "
             "small / bound | reuse: pool + scratch (in input) | reuse / bound | "
             "calls over their input | I/O | instructions fast | instructions small | "
             "instructions reuse | TFLite Micro arena (head) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        fast, small, reuse = r["fast"], r["small"], r["reuse"]

        def cost(plan: dict, base: int = fast["instructions"]) -> str:
            return f"{plan['instructions']:,} ({plan['instructions'] / base:.3f}x)"

        lines.append(
            f"| {r['model']} | {r['bound']:,} | {fast['pool']:,} + {fast['scratch']:,} | "
            f"{small['pool']:,} + {small['scratch']:,} | "
            f"{small['pool'] / r['bound']:.2f} | "
            f"{reuse['pool']:,} + {reuse['scratch']:,} ({reuse['in_input']:,}) | "
            f"{reuse['pool'] / r['bound']:.2f} | {small['result'].over_inputs} | "
            f"{r['io']:,} | {fast['instructions']:,} | {cost(small)} | {cost(reuse)} | "
            f"{r['tflm'][0]:,} ({r['tflm'][1]:,}) |")
    return lines


def pool_bars(archive: Path) -> list[tuple[int, int, int, int]]:
    """(offset, bytes, first call, last call) of every pool tensor, from the archive's
    layers: written by one call, read until its last reader (a tensor written over its
    input shares that input's offset)."""
    with tarfile.open(archive) as tar:
        meta = json.load(tar.extractfile("./metadata.json"))
    layers = next(iter(meta["modules"].values()))["layers"]
    bars: list[list[int]] = []
    for step, layer in enumerate(layers):
        for arg in layer["args"]:
            if arg["kind"] != "activation" or not arg["ref"].startswith("pool+"):
                continue
            offset = int(arg["ref"][len("pool+"):])
            if arg["role"] == "output":
                bars.append([offset, arg["bytes"], step, step])
                continue
            for bar in reversed(bars):
                if bar[0] == offset and bar[1] == arg["bytes"] and bar[2] < step:
                    bar[3] = step
                    break
    return [tuple(b) for b in bars]


def timeline_svg(result: ExportResult, label: str) -> str:
    """The pool over the calls: a bar per tensor at its offset, from the call that writes
    it to the last that reads it (hover titles give its bytes); tensors written over their
    input overlap it at the call that does it. Drawn with the report's SVG pieces."""
    bars = pool_bars(result.path)
    steps = len(result.cpu_calls) or max((b[3] for b in bars), default=0) + 1
    pool = max(result.lifetime_bound, result.plan.pool_bytes, 1)
    width, height, left, top, bottom = 640, 300, 70, 30, 40
    x_scale = (width - left - 10) / steps
    y_scale = (height - top - bottom) / pool
    colours = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1"]
    body = [pictures.title(label), pictures.text(left, 18, pictures.esc(label), font_size=13)]
    for i, (offset, size, first, last) in enumerate(bars):
        body.append("<g>" + pictures.title(
            f"{size:,} B at offset {offset:,}, written by call {first + 1}, last read by "
            f"call {last + 1}") + pictures.rect(
            left + first * x_scale + 2, top + offset * y_scale, (last - first + 1) * x_scale - 4,
            max(size * y_scale, 1.0), colours[i % len(colours)], fill_opacity="0.6",
            stroke="#333", stroke_width="0.5") + "</g>")

    def line(x1: float, y1: float, x2: float, y2: float, **more: object) -> str:
        return f"<line{pictures.attributes(x1=x1, y1=y1, x2=x2, y2=y2, **more)}/>"

    base = top + pool * y_scale
    used = top + result.plan.pool_bytes * y_scale
    body += [line(left, top, left, base, stroke="#000"),
             line(left, base, width - 10, base, stroke="#000"),
             line(left, used, width - 10, used, stroke="#c00", stroke_dasharray="4 3"),
             pictures.text(left - 6, used + 4, f"{result.plan.pool_bytes:,} B",
                           text_anchor="end", fill="#c00"),
             pictures.text(left - 6, top + 4, "0", text_anchor="end"),
             pictures.text((left + width) / 2, height - 8,
                           f"kernel calls 1 to {steps}; pool offset downwards",
                           text_anchor="middle")]
    if result.lifetime_bound > result.plan.pool_bytes:
        body.append(pictures.text(left - 6, base + 4, f"{result.lifetime_bound:,} B",
                                  text_anchor="end"))
    return pictures.svg_document(width, height, body, label)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    add_docs_options(parser, "docs/memory.md's table and pictures")
    args = parser.parse_args()
    refuse_subset(parser, args, "models")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            print(f"{name}: exporting, building and running each plan ...", file=sys.stderr)
            model = MODELS[name]
            if model is None:
                from tests.memory_models import mobilenet_v2_style

                model = Path(tmp) / "mobilenetv2_style.tflite"
                model.write_bytes(mobilenet_v2_style())
            rows.append(measure(name, model, Path(tmp)))
        kws = next((r for r in rows if r["model"] == "kws"), None)
        pictures = {f"kws-{p}.svg": timeline_svg(kws[p]["result"], f"kws, --memory {p}")
                    for p in PRESETS} if kws else {}
    lines = table_lines(rows)
    if args.check_docs:
        stale = [name for name, svg in pictures.items()
                 if not (PICTURES / name).is_file() or (PICTURES / name).read_text() != svg]
        for name in stale:
            print(f"docs/memory/{name} is stale: {DOCS_TABLE.command}")
        return max(publish(DOCS_TABLE, lines, True), 1 if stale else 0)
    if args.docs:
        PICTURES.mkdir(exist_ok=True)
        for name, svg in pictures.items():
            (PICTURES / name).write_text(svg)
        return publish(DOCS_TABLE, lines, False)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
