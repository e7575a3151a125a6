"""A model over several processing elements (generator/pipeline/): throughput, latency and
the balance of the stages for 1, 2 and 4 PEs, measured against the plan's predictions.

kws (MLPerf Tiny) on qemu-mps2-an385 PEs, every PE its own QEMU under -icount, the host
relaying each stage's outputs to the next (`microtvm-gen pipeline`). Costs come from a
`run --profile` of the whole model on one PE. QEMU counts every instruction each PE executes
while the stream flows (QMP `query-replay`), its link's byte handling included and its
sleep in WFI excluded: per input, that is the PE's whole work. The pipeline's period is its
slowest PE's; throughput is one PE's instructions per input (the whole model and its link)
over the period, times the replicas. These are instructions, not cycles, on PEs that run in
lockstep only on paper: wait states, the UART's real speed (a byte takes 87 us at 115,200
baud, far longer than the instructions that handle it) and the host's relaying time are not
in them.

Every configuration's outputs are checked byte-equal with one PE's. A memory row splits
MLPerf Tiny's VWW over PEs whose RAM cannot hold it whole.

Usage: python benchmarks/pipeline.py [--inputs N] [--docs | --check-docs]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from docs_tables import DocsTable, add_docs_options, publish, refuse_subset, within_factor

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from generator.boards import load_board  # noqa: E402
from generator.export import export_model  # noqa: E402
from generator.export.stages import split_model  # noqa: E402
from generator.pipeline import layout  # noqa: E402
from generator.pipeline.plan import (  # noqa: E402
    LINK_COST,
    call_costs,
    plan_pipeline,
    processing_element,
)
from generator.pipeline.planning import Request, make_plan  # noqa: E402
from generator.pipeline.stream import run_stream  # noqa: E402
from generator.project.generate import generate  # noqa: E402
from generator.report.profile import call_times, save_profile  # noqa: E402
from generator.run import run_project  # noqa: E402

BOARD = "qemu-mps2-an385"
KWS = REPO / "tests" / "fixtures" / "models" / "mlperftiny_kws" / "kws_ref_model.tflite"
VWW = REPO / "tests" / "fixtures" / "models" / "corpus" / "mlperf_vww_int8" / "vww_96_int8.tflite"
SHARED_KWS_VECTORS = ("mlf", "etiss-kws-aot-usmp-tvm0.16", "testdata")
# (PEs, depth, layers split in rows): depth x replicas = PEs
CONFIGS = [(1, 1, False), (2, 2, False), (2, 2, True), (3, 3, True), (4, 4, False),
           (4, 4, True), (4, 2, True)]
# VWW on PEs with this much RAM (the board's 64 KiB stack included): too little for the whole
# model's 82,946 B of buffers, enough for two stages'.
VWW_PE_RAM = 140_000
TABLES = {"throughput": DocsTable(REPO / "docs" / "pipeline.md", "pipeline-kws",
                                  "python benchmarks/pipeline.py --docs"),
          "memory": DocsTable(REPO / "docs" / "pipeline.md", "pipeline-vww",
                              "python benchmarks/pipeline.py --docs"),
          "link": DocsTable(REPO / "docs" / "pipeline.md", "pipeline-link",
                            "python benchmarks/pipeline.py --docs")}


def kws_inputs(count: int) -> np.ndarray:
    """The 25 MLPerf Tiny vectors when ../shared has them, else seeded random inputs."""
    import re

    from tests.conftest import SHARED

    data = SHARED.joinpath("fixtures", *SHARED_KWS_VECTORS)
    if data.is_dir():
        text = (data / "aww_input_data.cc").read_text()
        arrays = re.findall(r"aww_input_data_(\d+)\[\]\s*=\s*\{([^}]*)\}", text)
        x = np.array([[int(v, 16) for v in re.findall(r"0x[0-9a-fA-F]+", body)]
                      for _, body in sorted(arrays)], dtype=np.uint8).view(np.int8)
        return x.reshape(-1, 1, 49, 10, 1)[:count]
    return np.random.default_rng(25).integers(-128, 128, (count, 1, 49, 10, 1), np.int8)


def profiled_costs(work: Path, model: Path, x: np.ndarray) -> Path:
    """A --profile run of the whole model on one PE: the plan's costs."""
    archive = work / f"{model.stem}.tar"
    export_model(model, archive)
    project = work / f"{model.stem}-profiled"
    generate(archive, BOARD, project, profile=True)
    report = run_project(project, [{"input_1": x[0]}], profile=True)
    save_profile(project, report.timings[0].unit,
                 call_times(project, "default", report.profiles[0]))
    return project


def stream(work: Path, name: str, splits, plan, x: np.ndarray) -> tuple:
    """`x` (samples of the model's one input) through the pipeline `plan`."""
    root = work / name
    layout.create(splits, plan, root, force=True)
    record, stages = layout.load(root)
    report = run_stream(root, {stages[0].inputs[0].name: x}, resume=False, timeout=120)
    return report, record


def throughput_rows(work: Path, count: int) -> tuple[list[str], list[str]]:
    x = kws_inputs(count)
    profile = profiled_costs(work, KWS, x)
    pe = processing_element(load_board(BOARD))
    rows, link_rows = [], []
    single = reference = None
    measured_link: dict[tuple[int, int], float] = {}
    for pes, depth, split_layers in CONFIGS:
        splits, plan = make_plan(Request(KWS, [pe], pes, depth, profile,
                                         split_layers=split_layers))
        report, record = stream(work, f"kws-{pes}-{depth}-{split_layers}", splits, plan, x)
        outs = [o[0].tobytes() for o in report.outputs]
        if reference is None:
            reference, single = outs, report.period
        assert outs == reference, f"{pes} PEs, depth {depth}: outputs differ from one PE's"
        stage_times = [pe_.per_input for pe_ in report.pes if pe_.replica == 0]
        for pe_, stage in zip(report.pes, record["stages"], strict=False):
            link = pe_.per_input - pe_.run_count / pe_.inputs
            measured_link[stage["input_bytes"], stage["output_bytes"]] = link
        balance = min(stage_times) / max(stage_times)
        speedup = plan.replicas * single / report.period
        layers = ", ".join(f"#{k} at row {v}" for k, v in sorted(plan.row_splits.items())) \
            or "-"
        rows.append(f"| {pes} | {depth} x {plan.replicas} | {layers} | "
                    + " / ".join(f"{t:,.0f}" for t in stage_times)
                    + f" | {balance:.2f} | {report.period:,.0f} | {report.latency:,.0f} | "
                    f"**{speedup:.2f}** | {plan.period:,.0f} | {plan.speedup:.2f} |")
    for (rx, tx), link in sorted(measured_link.items()):
        link_rows.append(f"| {rx:,} | {tx:,} | {link:,.0f} | {LINK_COST.of(rx, tx):,.0f} |")
    return rows, link_rows


def memory_rows(work: Path) -> list[str]:
    """VWW over PEs of VWW_PE_RAM bytes: refused whole, split in as few stages as fit."""
    split = split_model(VWW)
    costs, unit = call_costs(split, None)
    board = load_board(BOARD)
    small = processing_element(board, ram=VWW_PE_RAM)
    whole = split.need(0, split.calls)
    depth = next(d for d in range(1, split.calls + 1) if _fits(split, costs, unit, small, d))
    plan = plan_pipeline(split, costs, unit, [small], depth)
    x = np.random.default_rng(7).integers(-128, 128, (2, 1, 96, 96, 3), np.int8)
    report, record = stream(work, "vww-small", lambda pe: split, plan, x)
    big = plan_pipeline(split, costs, unit, [processing_element(board)], 1)
    one, _ = stream(work, "vww-one", lambda pe: split, big, x)
    assert [o[0].tobytes() for o in report.outputs] == [o[0].tobytes() for o in one.outputs]
    rows = [f"| whole model | {whole.ram:,} | - | - | does not fit "
            f"({small.stage_ram:,} B for buffers) |"]
    for s in record["stages"]:
        first, end = s["calls"]
        rows.append(f"| stage {s['index']} (calls {first}-{end - 1}) | {s['ram_bytes']:,} | "
                    f"{s['firmware_ram_bytes']:,} | {s['firmware_flash_bytes']:,} | "
                    f"fits {VWW_PE_RAM:,} B, bit-exact |")
    return rows


def _fits(split, costs, unit, pe, depth) -> bool:
    from generator.errors import ExportError

    try:
        plan_pipeline(split, costs, unit, [pe], depth)
        return True
    except ExportError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=25, help="kws inputs streamed (25)")
    add_docs_options(parser, "docs/pipeline.md's tables")
    args = parser.parse_args()
    refuse_subset(parser, args, "inputs")
    with tempfile.TemporaryDirectory(prefix="mtvg-bench-pipeline-") as tmp:
        work = Path(tmp)
        rows, link_rows = throughput_rows(work, args.inputs)
        memory = memory_rows(work)
    head = ("| PEs | depth x replicas | layers split (pointwise #, row) | instructions per "
            "input, by stage | balance | period | latency | throughput (x one PE) | "
            "predicted period | predicted throughput |")
    tables = {
        "throughput": [head, "|" + "---|" * 10, *rows],
        "link": ["| bytes in | bytes out | measured link instructions per input | model |",
                 "|---|---|---|---|", *link_rows],
        "memory": ["| part | buffers (plan) | firmware RAM (ELF + stack) | firmware flash | "
                   "on a PE of that RAM |", "|---|---|---|---|---|", *memory],
    }
    if not (args.docs or args.check_docs):
        for lines in tables.values():
            print("\n".join(lines) + "\n")
        return 0
    status = 0
    for name, lines in tables.items():
        # QEMU's counts move by a few hundred instructions between runs (how often the
        # firmware wakes from WFI before a byte is there); sizes do not move
        same = str.__eq__ if name == "memory" else within_factor(1.01)
        status |= publish(TABLES[name], lines, args.check_docs, same)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
