"""Coverage of a corpus of public microcontroller models: does each one export, run and agree
with its oracle bit for bit?

For each model of benchmarks/corpus.toml that is present (the committed ones, plus the files
`--extra DIR` holds: corpus models matched by sha256 or file name, any other .tflite/.onnx by
its name):
- export it with generator.export.api.export_model (an ExportError is a row with its one-line
  reason; any other exception is a "crash: ..." row, a bug to report);
- build the archive's C for this machine (tests/c_runner.py's CModel) and run it on 3 random
  inputs (numpy default_rng(seed)); compare with TFLite's reference kernels (ai_edge_litert,
  OpResolverType.BUILTIN_REF) for .tflite, onnxruntime for .onnx: integer outputs bit-exact,
  float outputs within 1e-5 relative (to the output's largest magnitude);
- report integer or float (the export's quantization report), the planned activation pool
  against its lower bound (the graph's largest live set), and with --qemu the instructions
  one inference takes on qemu-mps2-an385 (QEMU -icount; median of the 3 inputs).

Each model runs in a child process with a time limit, so one that hangs or kills the
interpreter is a row too.

Usage: python benchmarks/coverage.py [--extra DIR ...] [--only NAME ...] [--qemu]
       [--timeout S] [--seed N] [--json] [--docs | --check-docs] [--from-json FILE]
(--from-json: no run; the rows of an earlier `--json` output, printed or written to the docs.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from docs_tables import DocsTable, add_docs_options, publish, refuse_subset

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "benchmarks" / "corpus.toml"
DOCS = REPO / "docs" / "coverage.md"
DOCS_TABLE = DocsTable(DOCS, "coverage", "python benchmarks/coverage.py --qemu --docs")
QEMU_BOARD = "qemu-mps2-an385"
SAMPLES = 3
FLOAT_RTOL = 1e-5
MODEL_SUFFIXES = (".tflite", ".onnx")


@dataclass
class Model:
    """A corpus entry with a file to run."""

    name: str
    path: Path
    task: str = ""
    source: str = ""  # owner/repo
    license: str = ""
    committed: bool = False


@dataclass
class Row:
    """One model's result."""

    name: str
    task: str = ""
    source: str = ""
    imported: bool = False
    kind: str = "-"  # "integer", "float", "mixed", "-"
    exact: bool = False
    max_diff: str = "-"  # integer: largest |ours - oracle|; float: relative
    oracle: str = "-"  # tflm | tflite-ref | onnxruntime
    pool: int | None = None
    lower_bound: int | None = None
    instructions: int | None = None
    seconds: float = 0.0
    reason: str = ""
    notes: list[str] = field(default_factory=list)


# ---- the corpus ---------------------------------------------------------------------------


def load_corpus(path: Path = CORPUS) -> list[dict]:
    """The [[model]] tables of corpus.toml."""
    with path.open("rb") as f:
        return tomllib.load(f)["model"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def present_models(entries: list[dict], extra: list[Path]) -> tuple[list[Model], list[dict]]:
    """The models with a file here (duplicates once), and the entries without one."""
    found: dict[str, Path] = {}
    for e in entries:
        if e.get("file") and (REPO / e["file"]).is_file():
            found[e["name"]] = REPO / e["file"]
    by_sha = {e["sha256"]: e["name"] for e in entries if e.get("sha256")}
    by_file = {Path(e["path"]).name: e["name"] for e in entries}
    loose: list[Model] = []
    for d in extra:
        for f in sorted(p for p in d.rglob("*") if p.suffix in MODEL_SUFFIXES and p.is_file()):
            name = by_sha.get(sha256(f)) or by_file.get(f.name)
            if name is None:
                loose.append(Model(f"{f.stem}", f, source=f"extra: {d}"))
            elif name not in found:
                found[name] = f
    models = []
    for e in entries:
        if e["name"] in found and not e.get("duplicate_of"):
            models.append(Model(e["name"], found[e["name"]], e.get("task", ""), e.get("repo", ""),
                                e.get("license", ""), bool(e.get("committed"))))
    missing = [e for e in entries if e["name"] not in found and not e.get("duplicate_of")]
    return models + loose, missing


# ---- one model (in a child process) -------------------------------------------------------


def random_inputs(specs, rng: np.random.Generator) -> list[np.ndarray]:
    """One random array per input: integers over their whole range, floats in [-1, 1)."""
    out = []
    for s in specs:
        dt = np.dtype(s.dtype)
        if dt.kind in "iu":
            info = np.iinfo(dt)
            lo, hi = (max(info.min, -(2 ** 15)), min(info.max, 2 ** 15 - 1))
            out.append(rng.integers(lo, hi, size=s.shape, endpoint=True).astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, size=s.shape).astype(dt))
        else:
            out.append(rng.uniform(-1.0, 1.0, size=s.shape).astype(dt))
    return out


TFLM_ARENA_BYTES = 8 << 20  # enough for the corpus's largest activations


def oracle(path: Path, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], str]:
    """The model's outputs from the reference and the reference's name: TensorFlow Lite
    Micro's interpreter (what runs on microcontrollers), else TFLite's reference kernels
    (ai_edge_litert BUILTIN_REF: TFLM has no uint8 kernels and refuses some operators);
    onnxruntime for .onnx. The two TFLite references can differ in the last bit: this
    version of ai_edge_litert rounds int8 FULLY_CONNECTED's requantization once, TFLM twice
    (mlperf_ad01_int8: 1 output in 128 per layer)."""
    if path.suffix == ".onnx":
        import onnxruntime as ort

        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs, strict=True)}
        return [np.asarray(y) for y in sess.run(None, feed)], "onnxruntime"
    try:
        return tflm_outputs(path, inputs), "tflm"
    except Exception:  # an operator or dtype TFLM lacks: TFLite's reference kernels
        pass
    sys.path.insert(0, str(REPO))
    from tests.tflite_builder import reference

    return reference(path.read_bytes(), inputs), "tflite-ref"


def tflm_outputs(path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """TensorFlow Lite Micro's outputs (the tflite-micro wheel's interpreter)."""
    from tflite_micro.python.tflite_micro import runtime

    interp = runtime.Interpreter.from_file(str(path), arena_size=TFLM_ARENA_BYTES)
    for i, x in enumerate(inputs):
        interp.set_input(x, i)
    interp.invoke()
    return [np.array(interp.get_output(i)) for i in range(tflite_output_count(path))]


def tflite_output_count(path: Path) -> int:
    """How many outputs the model's first subgraph has."""
    import tflite

    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    return model.Subgraphs(0).OutputsLength()


def compare(ours: list[np.ndarray], ref: list[np.ndarray]) -> tuple[bool, str, str]:
    """(agrees, largest difference, why not) over all outputs."""
    if len(ours) != len(ref):
        return False, "-", f"{len(ours)} outputs, the oracle has {len(ref)}"
    exact, worst = True, 0.0
    integer = all(np.asarray(r).dtype.kind in "iub" for r in ref)
    for i, (a, r) in enumerate(zip(ours, ref, strict=True)):
        r = np.asarray(r)
        if a.size != r.size:
            return False, "-", f"output {i} has shape {a.shape}, the oracle {r.shape}"
        a = a.reshape(r.shape)
        if r.dtype.kind in "iub":
            d = float(np.max(np.abs(a.astype(np.int64) - r.astype(np.int64)), initial=0))
            exact &= d == 0
        else:
            scale = float(np.max(np.abs(r), initial=0.0)) or 1.0
            d = float(np.max(np.abs(a.astype(np.float64) - r), initial=0.0)) / scale
            exact &= d <= FLOAT_RTOL
        worst = max(worst, d)
    text = f"{int(worst)}" if integer else f"{worst:.1e}"
    why = "" if exact else (f"differs from the oracle by up to {text}"
                            + (" (int)" if integer else " (relative)"))
    return exact, text, why


def kind_of(result) -> str:
    q = result.quant
    if q.fallback and q.integer:
        return "mixed"
    if q.fallback:
        return "float (fallback)"
    if q.integer:
        return "integer"
    return "float"


def short_reason(text: str, path: Path) -> str:
    """An export error without the model's path and the pointer to the docs."""
    for prefix in (f"{path}: ", f"{path.name}: "):
        text = text.removeprefix(prefix)
    return re.sub(r" \(see docs/operators\.md[^)]*\)", "", text)


def first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def run_one(model: Model, seed: int, qemu: bool, work: Path) -> Row:
    """Export, build, run and compare one model."""
    sys.path.insert(0, str(REPO))
    from generator.errors import ExportError, MtgError
    from generator.export.api import export_model
    from tests.c_runner import CModel

    row = Row(model.name, model.task, model.source)
    start = time.monotonic()
    try:
        result = export_model(model.path, work / "model.tar")
    except ExportError as exc:
        row.reason = short_reason(exc.one_line(), model.path)
        return row
    except Exception as exc:  # a bug: the importer should raise ExportError
        row.reason = f"crash: {type(exc).__name__}: {first_line(exc)}"
        return row
    finally:
        row.seconds = time.monotonic() - start
    row.imported = True
    row.kind = kind_of(result)
    try:  # what export writes, generate must read
        from generator.project.generate import generate

        generate(result.path, "host", work / "generated")
    except MtgError as exc:
        row.reason = f"generate refuses the archive: {exc.one_line()}"
        return row
    row.pool, row.lower_bound = result.plan.pool_bytes, result.plan.lower_bound
    row.notes = list(result.notes)
    try:
        cmodel = CModel(result, work / "c")
    except subprocess.CalledProcessError as exc:
        row.reason = f"crash: the archive's C does not build ({first_line(exc)})"
        return row
    rng = np.random.default_rng(seed)
    samples = [random_inputs(result.inputs, rng) for _ in range(SAMPLES)]
    worst, diffs = True, []
    for x in samples:
        ours = cmodel(*x)
        try:
            ref, row.oracle = oracle(model.path, x)
        except Exception as exc:
            row.reason = f"no oracle: {type(exc).__name__}: {first_line(exc)}"
            return row
        ok, diff, why = compare(ours, ref)
        diffs.append(diff)
        if not ok:
            worst = False
            row.reason = row.reason or why
    row.exact = worst
    row.max_diff = max(diffs, key=lambda d: float(d) if d != "-" else -1.0)
    if qemu:
        try:
            row.instructions = qemu_instructions(result, samples, work)
        except MtgError as exc:
            row.notes.append(f"{QEMU_BOARD}: {exc.one_line()}")
        except Exception as exc:
            row.notes.append(f"{QEMU_BOARD}: crash: {type(exc).__name__}: {first_line(exc)}")
    return row


def qemu_instructions(result, samples: list[list[np.ndarray]], work: Path) -> int:
    """Median instructions of one inference on qemu-mps2-an385 (QEMU -icount)."""
    from generator.project.generate import generate
    from generator.run import run_project

    project = work / f"proj-{QEMU_BOARD}"
    generate(result.path, QEMU_BOARD, project)
    feeds = [{t.name: x for t, x in zip(result.inputs, s, strict=True)} for s in samples]
    report = run_project(project, feeds)
    return int(statistics.median(t.count for t in report.timings))


def child(args: argparse.Namespace) -> int:
    """--worker: run one model and print its row as JSON on the last line."""
    model = Model(args.name, Path(args.worker), args.task, args.source)
    with tempfile.TemporaryDirectory(prefix="coverage-") as tmp:
        row = run_one(model, args.seed, args.qemu, Path(tmp))
    print(json.dumps(asdict(row)))
    return 0


def run_in_child(model: Model, seed: int, qemu: bool, timeout: float) -> Row:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(model.path),
           "--name", model.name, "--task", model.task, "--source", model.source,
           "--seed", str(seed)] + (["--qemu"] if qemu else [])
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return Row(model.name, model.task, model.source, seconds=timeout,
                   reason=f"timeout: more than {timeout:.0f} s")
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and lines:
        try:
            return Row(**json.loads(lines[-1]))
        except (json.JSONDecodeError, TypeError):
            pass
    tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    return Row(model.name, model.task, model.source, seconds=time.monotonic() - start,
               reason=f"crash: exit status {proc.returncode}: {tail[:300]}")


# ---- the report ---------------------------------------------------------------------------


def status(row: Row) -> str:
    if row.exact:
        return "bit-exact" if row.kind != "float" else "equal (1e-5)"
    if row.imported and row.reason.startswith("differs"):
        return "differs"
    return "no"


def summary(rows: list[Row]) -> dict:
    n = len(rows)
    exact = sum(r.exact for r in rows)
    return {
        "models": n,
        "equal": exact,
        "percent": round(100.0 * exact / n, 1) if n else 0.0,
        "imported": sum(r.imported for r in rows),
        "differs": sum(r.imported and not r.exact and r.reason.startswith("differs")
                       for r in rows),
        "export_errors": sum(not r.imported and not r.reason.startswith(("crash", "timeout"))
                             for r in rows),
        "crashes": sum(r.reason.startswith(("crash", "timeout")) for r in rows),
    }


def summary_line(s: dict) -> str:
    return (f"{s['models']} models, {s['equal']} equal to the oracle ({s['percent']} %), "
            f"{s['imported']} imported, {s['differs']} differ, "
            f"{s['export_errors']} export errors, {s['crashes']} crashes")


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[Row], qemu: bool) -> str:
    head = ["model", "task", "imported", "int/float", "equal", "oracle", "max diff",
            "activations (pool / bound)"]
    if qemu:
        head.append(f"instructions ({QEMU_BOARD})")
    head.append("reason")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        act = (f"{r.pool:,} / {r.lower_bound:,}" if r.pool is not None else "-")
        cells = [r.name, r.task, "yes" if r.imported else "no", r.kind, status(r), r.oracle,
                 r.max_diff, act]
        if qemu:
            cells.append(f"{r.instructions:,}" if r.instructions else "-")
        reason = r.reason or "; ".join(n for n in r.notes if n.startswith(QEMU_BOARD))
        cells.append(reason)
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines)


def docs_lines(rows: list[Row], line: str, qemu: bool, extra: bool) -> list[str]:
    """docs/coverage.md's block: the command, the summary line and the table."""
    command = ("python benchmarks/coverage.py" + " --extra DIR" * extra
               + (" --qemu" if qemu else ""))
    return [f"`{command}`", "", line, "", *markdown(rows, qemu).splitlines()]


def run_all(args: argparse.Namespace, parser: argparse.ArgumentParser
            ) -> tuple[list[Row], list[dict]]:
    """Every model present (or those --only names), one child process each."""
    models, missing = present_models(load_corpus(), args.extra)
    if args.only:
        models = [m for m in models if m.name in args.only]
        unknown = set(args.only) - {m.name for m in models}
        if unknown:
            parser.error(f"no such model here: {', '.join(sorted(unknown))}")
    rows = []
    for i, m in enumerate(models, 1):
        print(f"[{i}/{len(models)}] {m.name} ...", file=sys.stderr, flush=True)
        row = run_in_child(m, args.seed, args.qemu, args.timeout)
        print(f"    {status(row)} {row.reason}", file=sys.stderr, flush=True)
        rows.append(row)
    return rows, missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", action="append", type=Path, default=[], metavar="DIR",
                        help="a directory of further models (searched recursively)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="only these models (repeatable)")
    parser.add_argument("--qemu", action="store_true",
                        help=f"also count instructions on {QEMU_BOARD}")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds a model may take (default 900)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    add_docs_options(parser, "the table in docs/coverage.md")
    parser.add_argument("--from-json", type=Path, metavar="FILE",
                        help="report the rows of an earlier --json output instead of running")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    parser.add_argument("--task", default="", help=argparse.SUPPRESS)
    parser.add_argument("--source", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return child(args)
    refuse_subset(parser, args, "only")
    for d in args.extra:
        if not d.is_dir():
            parser.error(f"{d}: not a directory")
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        tasks = {e["name"]: e.get("task", "") for e in load_corpus()}
        rows = [Row(**{**r, "task": tasks.get(r["name"], r["task"])}) for r in saved["rows"]]
        names = set(saved.get("not_present", []))
        missing = [e for e in load_corpus() if e["name"] in names]
        args.qemu = args.qemu or any(r.instructions for r in rows)
    else:
        rows, missing = run_all(args, parser)
    s = summary(rows)
    line = summary_line(s)
    if args.json:
        print(json.dumps({"summary": s, "rows": [asdict(r) for r in rows],
                          "not_present": [e["name"] for e in missing]}, indent=1))
    else:
        print(markdown(rows, args.qemu))
        print()
        print(line)
        if missing:
            print(f"not present ({len(missing)}; see benchmarks/corpus.toml, --extra DIR): "
                  + ", ".join(e["name"] for e in missing))
    if args.docs or args.check_docs:
        return publish(DOCS_TABLE, docs_lines(rows, line, args.qemu, bool(args.extra)),
                       args.check_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
