"""On-device tuning: what `tune` wins per inference, and what it costs.

For each model and board: `tune` (its output directory is kept, so a rerun continues and
measures nothing twice), then the model exported untuned and with `--tuning-records`,
both run on the board on the same deterministic inputs. Printed: the tuning's wall time,
candidates measured, measurements per minute and firmware builds per trial; instructions
(QEMU boards under -icount; ns on the host board) per inference untuned and tuned, their
ratio, and whether the outputs are equal (int8 bit-exact, float within 1e-5). A second
table gives each task: its weight, the untuned and the best kernel time measured on the
device, and how many distinct candidates its search space gave.

Usage: python benchmarks/tuning.py [--model mnist|kws|PATH ...] [--board B ...]
       [--trials 500] [--batch 16] [--work DIR] [--number 1] [--repeat 1]
       [--docs | --check-docs]
Defaults: mnist-8 (float) and mlperftiny_kws (int8) from ../shared, qemu-mps2-an385,
500 trials each, 16 candidates per firmware, one timed call per candidate (QEMU's time is
virtual, so repeats measure the same thing). --docs runs the documented campaigns (mnist
on qemu-mps2-an385 and qemu-mps2-an386, kws on qemu-mps2-an385; about an hour) and writes
both tables of docs/tuning.md; --check-docs compares (wall-clock columns within 2x,
the search's results within 10%).
Run it from a clone with ../shared beside it and nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from docs_tables import (  # noqa: E402
    DocsTable,
    add_docs_options,
    publish,
    refuse_subset,
    within_factors,
)

from generator.export import export_model  # noqa: E402
from generator.export.tuning import TuningRecords  # noqa: E402
from generator.project.generate import generate  # noqa: E402
from generator.run import run_project  # noqa: E402
from generator.tune import tune_model  # noqa: E402
from generator.tune.log import TuneLog  # noqa: E402
from generator.tune.runner import EvaluatorConfig  # noqa: E402

SHARED_MODELS = REPO.parent / "shared" / "fixtures" / "models"
MODELS = {"mnist": SHARED_MODELS / "mnist-8" / "mnist-8.onnx",
          "kws": SHARED_MODELS / "mlperftiny_kws" / "kws_ref_model.tflite"}
SAMPLES = 3
FLOAT_TOLERANCE = 1e-5
DOCUMENTED = (("mnist", "qemu-mps2-an385"), ("mnist", "qemu-mps2-an386"),
              ("kws", "qemu-mps2-an385"))
DOC = REPO / "docs" / "tuning.md"
COMMAND = "python benchmarks/tuning.py --docs"
CAMPAIGNS = DocsTable(DOC, "tuning-campaigns", COMMAND)
TASKS = DocsTable(DOC, "tuning-tasks", COMMAND)
# What may differ between two runs of the same commit. Wall-clock columns: the machine's
# speed and load. The search: a kernel's time under -icount moves by a few instructions
# with the UART's interrupts, so the search may take another path (candidates measured,
# best times, the tuned model); the untuned model's count does not move.
CAMPAIGN_TOLERANCE = {2: 1.1, 3: 1.1, 4: 2.0, 5: 2.0, 7: 1.1, 8: 1.1}
TASK_TOLERANCE = {4: 1.1, 5: 1.01, 6: 1.1, 7: 1.1}


def inputs_for(result, count: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    samples = []
    for _ in range(count):
        sample = {}
        for t in result.inputs:
            dt = np.dtype(t.dtype)
            if dt.kind == "f":
                sample[t.name] = rng.random(t.shape).astype(dt)
            else:
                info = np.iinfo(dt)
                sample[t.name] = rng.integers(info.min, info.max + 1, t.shape, dtype=dt)
        samples.append(sample)
    return samples


def run(archive: Path, board: str, work: Path, samples) -> tuple[int, str, list]:
    project = work / f"proj-{archive.stem}-{board}"
    generate(archive, board, project, force=True)
    report = run_project(project, samples)
    return (int(statistics.median(t.count for t in report.timings)), report.timings[0].unit,
            report.outputs)


def equal(a: list[dict], b: list[dict]) -> bool:
    for x, y in zip(a, b, strict=True):
        for name in x:
            if x[name].dtype.kind == "f":
                if not np.allclose(x[name], y[name], rtol=FLOAT_TOLERANCE,
                                   atol=FLOAT_TOLERANCE):
                    return False
            elif not np.array_equal(x[name], y[name]):
                return False
    return True


def bench(name: str, model: Path, board: str, args, work: Path) -> dict:
    out = work / f"{name}-{board}"
    tuning_dir = out / "tuning"
    print(f"{name} on {board}: tuning ({args.trials} trials) ...", file=sys.stderr)
    start = time.monotonic()
    summary = tune_model(model, board, args.trials, tuning_dir, batch_size=args.batch,
                         config=EvaluatorConfig(number=args.number, repeat=args.repeat),
                         progress=lambda line: print(f"  {line}", file=sys.stderr))
    wall = time.monotonic() - start
    log = TuneLog.open(tuning_dir)
    print(f"{name} on {board}: exporting and running untuned and tuned ...", file=sys.stderr)
    untuned = export_model(model, out / "untuned.tar")
    tuned = export_model(model, out / "tuned.tar", tuning=TuningRecords.load(tuning_dir))
    samples = inputs_for(untuned, SAMPLES)
    base, unit, base_out = run(untuned.path, board, out, samples)
    fast, _, fast_out = run(tuned.path, board, out, samples)
    c = summary.counters
    measured_all = sum(1 for m in log.known.values() if m.device != "builder")
    return {
        "model": name, "board": board, "trials": args.trials,
        "measured": measured_all, "this_run_measured": c.measured, "builds": c.builds,
        "wall_s": round(wall, 1),
        "per_min": round(c.measured / (wall / 60), 1) if c.measured and wall else None,
        "builds_per_trial": round(c.builds / c.measured, 3) if c.measured else None,
        "untuned": base, "tuned": fast, "unit": unit,
        "speedup": round(base / fast, 3) if fast else None,
        "equal": equal(base_out, fast_out),
        "tuned_kernels": [k.kernel for k in tuned.tuned],
        "notes": tuned.notes,
        "float": any(np.dtype(t.dtype).kind == "f" for t in untuned.inputs),
        "tasks": [{"task": t.name, "weight": t.weight, "done": t.done,
                   "untuned_us": _us(t.reference_secs), "best_us": _us(t.best_secs),
                   "applied": any(k.task == t.name for k in tuned.tuned)}
                  for t in summary.tasks],
    }


def _us(secs: float | None) -> float | None:
    return None if secs is None else round(secs * 1e6, 3)


def campaign_lines(rows: list[dict]) -> list[str]:
    lines = ["| model | board | candidates measured | builds/trial | tuning wall s | "
             "measured/min | untuned | tuned | speed-up | outputs equal |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        kind = "float" if r["float"] else "int8"
        equal = ("yes (1e-5)" if r["float"] else "yes (bit-exact)") if r["equal"] else "**NO**"
        lines.append(f"| {r['model']} ({kind}) | {r['board']} | {r['measured']} | "
                     f"{r['builds_per_trial']} | {r['wall_s']:,.0f} | {r['per_min']} | "
                     f"{r['untuned']:,} {r['unit']} | {r['tuned']:,} | {r['speedup']:.2f}× | "
                     f"{equal} |")
    return lines


def task_lines(rows: list[dict]) -> list[str]:
    lines = ["| model | board | task | calls | candidates | untuned µs | best µs | ratio |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        for t in r["tasks"]:
            if t["untuned_us"] and t["best_us"]:
                ratio = f"{t['untuned_us'] / t['best_us']:.2f}"
                if not t["applied"]:
                    ratio += " (not applied)"
            else:
                ratio = "not tuned"
            lines.append(f"| {r['model']} | {r['board']} | {t['task']} | {t['weight']} | "
                         f"{t['done']} | {_number(t['untuned_us'])} | "
                         f"{_number(t['best_us'])} | {ratio} |")
    return lines


def _number(us: float | None) -> str:
    if us is None:
        return "–"
    return f"{us:,.1f}" if us >= 100 else f"{us:,.3g}"


def _commit_line() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                          capture_output=True).stdout.strip() or "unknown"
    return f"Measured at commit {head} ({time.strftime('%Y-%m-%d')})."


def _same_campaign_line(documented: str, fresh: str) -> bool:
    """Equal but for the commit line and the wall-clock columns (within 2x)."""
    if documented.startswith("Measured at") and fresh.startswith("Measured at"):
        return True
    return within_factors(CAMPAIGN_TOLERANCE)(documented, fresh)


def print_tables(rows: list[dict]) -> None:
    print("\n".join(campaign_lines(rows)))
    print()
    print("\n".join(task_lines(rows)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="mnist, kws or a model path")
    parser.add_argument("--board", action="append", help="board (default qemu-mps2-an385)")
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--number", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--work", type=Path, help="keep tuning and projects here (a rerun "
                                                  "continues the tuning)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    add_docs_options(parser, "docs/tuning.md's two tables")
    args = parser.parse_args()
    refuse_subset(parser, args, "model", "board", "trials", "batch", "number", "repeat")
    work = args.work or Path(tempfile.mkdtemp(prefix="mtvg-tuning-bench-"))
    documented = args.docs or args.check_docs
    runs = DOCUMENTED if documented else [
        (model, board) for board in args.board or ["qemu-mps2-an385"]
        for model in args.model or ["mnist", "kws"]]
    rows = []
    for model, board in runs:
        path = MODELS.get(model, Path(model))
        if not path.exists():
            if documented:
                parser.error(f"{path} is not there: the documented campaigns need ../shared")
            print(f"skipping {model}: {path} is not there", file=sys.stderr)
            continue
        name = model if model in MODELS else path.stem
        rows.append(bench(name, path, board, args, Path(work)))
    if documented:
        status = publish(CAMPAIGNS, [_commit_line(), "", *campaign_lines(rows)],
                         args.check_docs, _same_campaign_line)
        return publish(TASKS, task_lines(rows), args.check_docs,
                       within_factors(TASK_TOLERANCE)) or status
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print_tables(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
