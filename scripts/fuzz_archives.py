#!/usr/bin/env python3
"""Mutation fuzzer over real MLF archives: `info` and `generate` must never crash.

Seeds are the fixture archives (tests/fixtures/mlf, examples/yes_no, ../shared/fixtures/mlf
when present) and archives `microtvm-gen export` writes (hello_world int8 and mnist-8, full
model and operator style; exported once into a cache directory). Each archive number N of a
run with --seed S is one mutation of one seed, derived from (S, N) alone, so a finding is
reproduced by its number. Workers (--jobs) run `info --json` and `info` through
generator.cli.main, and `generate` through the template's Project API method, in process and
in a sandbox (tests/fuzz/archive_runner.py; every 25th archive also runs the CLI's
`generate` with its server process), and classify every run. The parent kills and restarts
a worker that hangs, saves a reproducer of every non-ok finding under --findings, and prints
a table (--json: the summary as JSON). docs/fuzzing-archives.md has the details.

    python scripts/fuzz_archives.py --count 10000 --seed 1 --findings /tmp/fuzz-findings
    python scripts/fuzz_archives.py --replay /tmp/fuzz-findings/traceback/.../0000123.tar

Exit status: 0 when no run ended in traceback, hang, escape, memory or a dead worker; 1
otherwise; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import hashlib
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from multiprocessing.connection import wait
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.fuzz.archive_mutator import load_seed  # noqa: E402
from tests.fuzz.archive_runner import (  # noqa: E402
    FAILURES,
    GIB,
    OUTCOMES,
    ArchiveResult,
    Run,
    WorkerConfig,
    make_archive,
    worker_main,
)

DEFAULT_TIMEOUT = 20.0
KILL_GRACE = 10.0  # the parent kills a worker this long after its own alarm should have fired
EXPORTS = (  # (label, model path relative to the repo, export style)
    ("hello_world_int8", "tests/fixtures/models/hello_world/hello_world_int8.tflite",
     "full-model"),
    ("hello_world_int8-operator", "tests/fixtures/models/hello_world/hello_world_int8.tflite",
     "operator"),
    ("mnist-8", "examples/mnist/mnist-8.onnx", "full-model"),
    ("mnist-8-operator", "examples/mnist/mnist-8.onnx", "operator"),
)
SAVED_PER_CLASS = 3
# `generate` runs in process through the template server's method for every archive, and
# also through the CLI (which starts a server process) for every Nth archive.
CLI_GENERATE_EVERY = 25


# ---- seeds --------------------------------------------------------------------------------

def default_cache() -> Path:
    env = os.environ.get("MTVG_FUZZ_CACHE")
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "microtvm-gen" / "fuzz-seeds"


def shared_root() -> Path:
    return Path(os.environ.get("MTVG_SHARED", REPO.parent / "shared"))


def exported_seeds(cache: Path, log=print,
                   exports: tuple[tuple[str, str, str], ...] = EXPORTS) -> list[tuple[str, str]]:
    """Archives `microtvm-gen export` writes, exported once per model, style and exporter
    (every source file of generator/export: what the archive holds, not only its writer)."""
    writer = b"".join(p.read_bytes() for p in sorted((REPO / "generator" / "export")
                                                      .rglob("*.py")))
    out = []
    for label, model, style in exports:
        source = REPO / model
        if not source.is_file():
            continue
        key = hashlib.sha256(source.read_bytes() + style.encode() + writer).hexdigest()[:16]
        dest = cache / f"{label}-{key}.tar"
        if not dest.is_file():
            cache.mkdir(parents=True, exist_ok=True)
            log(f"exporting {model} ({style}) into {dest}")
            tmp = dest.with_suffix(".partial.tar")
            proc = subprocess.run(
                [sys.executable, "-m", "generator", "export", str(source), "-o", str(tmp),
                 "--style", style, "--force"],
                cwd=REPO, capture_output=True, text=True, timeout=900)
            if proc.returncode != 0:
                log(f"export of {model} failed, seed skipped: {proc.stderr.strip()[-300:]}")
                continue
            tmp.replace(dest)
        out.append((f"export:{label}", str(dest)))
    return out


def fixture_seeds(include_shared: bool = True) -> list[tuple[str, str]]:
    paths = sorted((REPO / "tests" / "fixtures" / "mlf").glob("*/*.tar"))
    paths.append(REPO / "examples" / "yes_no" / "model.tar")
    if include_shared:
        paths += sorted(shared_root().joinpath("fixtures", "mlf").glob("*/*.tar"))
    seen: set[str] = set()
    out = []
    for p in paths:
        if not p.is_file():
            continue
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        out.append((p.parent.name, str(p)))
    return out


def discover_seeds(include_shared: bool = True, export: bool = True,
                   cache: Path | None = None, log=print,
                   exports: tuple[tuple[str, str, str], ...] = EXPORTS
                   ) -> list[tuple[str, str]]:
    """The fixture archives, and (with `export`) the `exports` our exporter writes."""
    seeds = fixture_seeds(include_shared)
    if export:
        seeds += exported_seeds(cache or default_cache(), log, exports)
    return seeds


# ---- findings -----------------------------------------------------------------------------

@dataclass
class FindingClass:
    outcome: str
    signature: str
    count: int = 0
    kinds: collections.Counter = field(default_factory=collections.Counter)
    smallest: tuple[int, str] | None = None  # (size, reproducer path)
    detail: str = ""  # traceback of the smallest reproducer
    saved: int = 0
    example_index: int = -1


def _slug(text: str) -> str:
    digest = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:70].strip("_") + "-" + digest


class Findings:
    def __init__(self, root: Path | None) -> None:
        self.root = root
        self.classes: dict[str, FindingClass] = {}

    def add(self, result: ArchiveResult, master_seed: int) -> None:
        run = result.worst_run()
        if run is None:
            return
        cls = self.classes.setdefault(run.signature, FindingClass(run.outcome, run.signature))
        cls.count += 1
        cls.kinds.update(result.kinds)
        smaller = cls.smallest is None or result.size < cls.smallest[0]
        if cls.example_index < 0 or smaller:
            cls.example_index = result.index
            cls.detail = run.detail
        if self.root is None or result.data is None:
            return
        if cls.saved >= SAVED_PER_CLASS and not smaller:
            return
        folder = self.root / run.outcome / _slug(run.signature)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{result.index:07d}{result.suffix}"
        path.write_bytes(result.data)
        path.with_name(path.name + ".txt").write_text(_describe(result, run, master_seed),
                                                      errors="replace")
        cls.saved += 1
        if smaller:
            cls.smallest = (result.size, str(path))


def _describe(result: ArchiveResult, run: Run, master_seed: int) -> str:
    lines = [f"archive #{result.index} of --seed {master_seed}; seed archive {result.seed}",
             f"mutations: {', '.join(result.kinds)}", f"size: {result.size} bytes"]
    lines += [f"note: {n}" for n in result.notes]
    for r in result.runs:
        lines.append(f"run: microtvm-gen {r.command}: {r.outcome}, exit {r.exit_code}, "
                     f"{r.seconds:.2f} s, peak RSS {r.peak_rss >> 20} MiB")
    lines += ["", f"{run.outcome}: {run.signature}", "", run.detail]
    return "\n".join(lines) + "\n"


# ---- the campaign -------------------------------------------------------------------------

@dataclass
class Summary:
    master_seed: int
    count: int
    jobs: int
    seeds: list[str]
    commit: str
    seconds: float = 0.0
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    run_outcomes: collections.Counter = field(default_factory=collections.Counter)
    kinds: dict[str, collections.Counter] = field(default_factory=dict)
    slowest: list[tuple[float, int, str, str]] = field(default_factory=list)
    # Per command ("info --json", "generate host", ...): [runs, total seconds, slowest].
    commands: dict[str, list] = field(default_factory=dict)
    peak_rss: int = 0
    peak_rss_index: int = -1
    peak_reset_works: bool = True
    interrupted: bool = False
    findings: Findings = field(default_factory=lambda: Findings(None))

    def add(self, r: ArchiveResult) -> None:
        self.outcomes[r.outcome] += 1
        for run in r.runs:
            self.run_outcomes[run.outcome] += 1
            stats = self.commands.setdefault(run.command, [0, 0.0, 0.0])
            stats[0] += 1
            stats[1] += run.seconds
            stats[2] = max(stats[2], run.seconds)
        for k in set(r.kinds):
            self.kinds.setdefault(k, collections.Counter())[r.outcome] += 1
        self.slowest.append((r.seconds, r.index, "+".join(r.kinds), r.seed))
        self.slowest = sorted(self.slowest, reverse=True)[:10]
        if r.peak_rss > self.peak_rss:
            self.peak_rss, self.peak_rss_index = r.peak_rss, r.index

    @property
    def failures(self) -> int:
        return sum(self.outcomes[o] for o in FAILURES)

    def to_json(self) -> dict:
        return {
            "seed": self.master_seed, "count": self.count, "jobs": self.jobs,
            "commit": self.commit, "seconds": round(self.seconds, 1),
            "seed_archives": self.seeds,
            "outcomes": {o: self.outcomes[o] for o in OUTCOMES},
            "run_outcomes": {o: self.run_outcomes[o] for o in OUTCOMES},
            "kinds": {k: dict(c) for k, c in sorted(self.kinds.items())},
            "slowest": [{"seconds": round(s, 3), "index": i, "mutations": k, "seed": sd}
                        for s, i, k, sd in self.slowest],
            "commands": {c: {"runs": n, "seconds": round(t, 2), "slowest": round(m, 3)}
                         for c, (n, t, m) in sorted(self.commands.items())},
            "peak_rss_bytes": self.peak_rss, "peak_rss_index": self.peak_rss_index,
            "peak_rss_per_run": self.peak_reset_works,
            "classes": [{"outcome": c.outcome, "signature": c.signature, "count": c.count,
                         "kinds": dict(c.kinds.most_common(5)),
                         "reproducer": c.smallest[1] if c.smallest else None,
                         "example_index": c.example_index}
                        for c in self.sorted_classes()],
        }

    def sorted_classes(self) -> list[FindingClass]:
        return sorted(self.findings.classes.values(),
                      key=lambda c: (OUTCOMES.index(c.outcome), -c.count))


def git_commit() -> str:
    """HEAD, and whether generator/ or templates/ differ from it (with a digest of the
    difference, so a tree that changed during a run shows)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, timeout=30).stdout.strip()
        diff = subprocess.run(["git", "diff", "HEAD", "--", "generator", "templates"],
                              cwd=REPO, capture_output=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not diff:
        return head
    return f"{head} (+ uncommitted changes in generator/ or templates/, " \
           f"diff {hashlib.sha1(diff).hexdigest()[:8]})"


class _Slot:
    """One worker process and the archive it is working on."""

    def __init__(self, ctx, config: WorkerConfig, wid: int) -> None:
        self.wid = wid
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, config, wid), daemon=True)
        self.process.start()
        child.close()
        self.index: int | None = None
        self.started = 0.0
        self.ready = False

    def stop(self, kill: bool = False) -> None:
        if self.process.is_alive():
            if kill:
                self.process.kill()
            else:
                try:
                    self.conn.send(None)
                except OSError:
                    pass
            self.process.join(5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)
        self.conn.close()


def run_campaign(seeds: list[tuple[str, str]], count: int, master_seed: int = 0,
                 jobs: int = 2, timeout: float = DEFAULT_TIMEOUT,
                 findings_dir: Path | None = None, boards: tuple[str, ...] = (
                     "host", "qemu-mps2-an385"), memory_limit: int = GIB,
                 progress=None, start: int = 0, entry: str = "generator.cli:main",
                 kill_grace: float = KILL_GRACE,
                 cli_generate_every: int = CLI_GENERATE_EVERY,
                 checkpoint=None) -> Summary:
    """Fuzz archives number start .. start+count-1 and return the summary.

    `entry` is the function run on each archive (the tests replace it to check the
    classification); a worker still busy `kill_grace` seconds after its own alarm is killed.
    `checkpoint(summary)` is called about once a minute. KeyboardInterrupt (Ctrl-C, or
    SIGTERM in main) ends the run early with the archives done so far.
    """
    if not seeds:
        raise ValueError("no seed archives")
    summary = Summary(master_seed, count, jobs, [s[0] for s in seeds], git_commit())
    summary.findings = Findings(findings_dir)
    ctx = multiprocessing.get_context("spawn")
    tracker_was_running = _tracker_running()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mtvg-fuzz-") as sandbox:
        config = WorkerConfig(seeds=seeds, sandbox=sandbox, master_seed=master_seed,
                              boards=list(boards), timeout=timeout, memory_limit=memory_limit,
                              repo=str(REPO), entry=entry,
                              cli_generate_every=cli_generate_every)
        parent_seeds = None  # loaded only to rebuild an archive whose worker was killed
        pending = iter(range(start, start + count))
        done = 0
        slots = [_Slot(ctx, config, w) for w in range(max(1, jobs))]
        last_report = last_checkpoint = time.monotonic()
        try:
            while done < count:
                for slot in slots:
                    if slot.ready and slot.index is None:
                        nxt = next(pending, None)
                        if nxt is not None:
                            slot.index, slot.started = nxt, time.monotonic()
                            slot.conn.send(nxt)
                busy = [s for s in slots if s.index is not None or not s.ready]
                if not busy:
                    break
                for conn in wait([s.conn for s in busy], timeout=1.0):
                    slot = next(s for s in slots if s.conn is conn)
                    try:
                        kind, payload = conn.recv()
                    except (EOFError, OSError):
                        kind, payload = "died", None
                    if kind == "ready":
                        slot.ready = True
                        summary.peak_reset_works &= bool(payload)
                        continue
                    if kind == "error":
                        raise RuntimeError(f"a fuzz worker failed (not the code under "
                                           f"test):\n{payload}")
                    if kind == "result":
                        result: ArchiveResult = payload
                        slot.index = None
                        if result.restart:
                            slots[slots.index(slot)] = _restart(ctx, config, slot)
                    else:  # the worker died under an archive
                        if slot.index is None:
                            raise RuntimeError("a fuzz worker died while starting")
                        parent_seeds = parent_seeds or _load(seeds)
                        slot.process.join(5)  # for its exit code
                        result = _lost(parent_seeds, master_seed, slot, "crash",
                                       f"worker died (exit code {slot.process.exitcode})",
                                       time.monotonic() - slot.started)
                        slots[slots.index(slot)] = _restart(ctx, config, slot)
                    _record(summary, result, master_seed)
                    done += 1
                now = time.monotonic()
                for i, slot in enumerate(slots):
                    if slot.index is not None and now - slot.started > timeout + kill_grace:
                        parent_seeds = parent_seeds or _load(seeds)
                        result = _lost(parent_seeds, master_seed, slot, "hang",
                                       f"worker killed after {now - slot.started:.0f} s",
                                       now - slot.started)
                        slots[i] = _restart(ctx, config, slot, kill=True)
                        _record(summary, result, master_seed)
                        done += 1
                if progress and (now - last_report > 5 or done == count):
                    last_report = now
                    progress(_progress_line(summary, done, count, now - t0))
                if checkpoint and now - last_checkpoint > 60:
                    last_checkpoint = now
                    summary.count, summary.seconds = done, now - t0
                    checkpoint(summary)
        except KeyboardInterrupt:
            if progress:
                progress(f"interrupted after {done} archives")
            summary.interrupted = True
        finally:
            for slot in slots:
                slot.stop()
            if not tracker_was_running:
                _stop_tracker()
    summary.count = done
    summary.seconds = time.monotonic() - t0
    end_commit = git_commit()
    if end_commit != summary.commit:
        summary.commit = f"{summary.commit} at the start, {end_commit} at the end"
    return summary


def _tracker_running() -> bool:
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    return getattr(tracker, "_fd", None) is not None


def _stop_tracker() -> None:
    """Stop the resource tracker process the spawned workers made the parent start (else it
    lives as long as the parent, e.g. a whole test session)."""
    stop = getattr(getattr(resource_tracker, "_resource_tracker", None), "_stop", None)
    if stop is not None:
        stop()


def _load(seeds):
    return [load_seed(label, Path(path).read_bytes()) for label, path in seeds]


def _restart(ctx, config, slot: _Slot, kill: bool = False) -> _Slot:
    slot.stop(kill=kill)
    return _Slot(ctx, config, slot.wid)


def _lost(seeds, master_seed: int, slot: _Slot, outcome: str, why: str,
          seconds: float) -> ArchiveResult:
    """The result of an archive whose worker had to be killed or died: rebuilt here."""
    seed, mutated = make_archive(seeds, master_seed, slot.index)
    run = Run("(worker)", outcome, None, seconds, 0, f"{outcome}: {why}", why)
    return ArchiveResult(slot.index, seed.label, mutated.kinds, mutated.suffix,
                         len(mutated.data), outcome, seconds, 0, [run], list(mutated.notes),
                         mutated.data)


def _record(summary: Summary, result: ArchiveResult, master_seed: int) -> None:
    summary.add(result)
    summary.findings.add(result, master_seed)


def _progress_line(s: Summary, done: int, count: int, seconds: float) -> str:
    rate = done / seconds if seconds else 0.0
    counts = ", ".join(f"{o} {s.outcomes[o]}" for o in OUTCOMES if s.outcomes[o])
    return f"[{done}/{count}] {rate:.1f} archives/s; {counts}"


# ---- output -------------------------------------------------------------------------------

def table(summary: Summary) -> str:
    lines = [f"{summary.count} archives{' (interrupted)' if summary.interrupted else ''}, "
             f"--seed {summary.master_seed}, {summary.jobs} workers, "
             f"{summary.seconds:.0f} s, commit {summary.commit}",
             f"seed archives: {', '.join(summary.seeds)}", "", "outcome     archives  runs"]
    for o in OUTCOMES:
        lines.append(f"{o:11s} {summary.outcomes[o]:8d}  {summary.run_outcomes[o]:4d}")
    shown = [o for o in OUTCOMES if any(c[o] for c in summary.kinds.values())]
    lines += ["", f"{'mutation':24s}" + "".join(f"{o:>10s}" for o in shown)]
    for kind, counter in sorted(summary.kinds.items()):
        lines.append(f"{kind:24s}" + "".join(f"{counter[o]:10d}" for o in shown))
    lines += ["", "command                  runs   mean s  slowest s"]
    for command, (n, total, slowest) in sorted(summary.commands.items()):
        lines.append(f"{command:24s} {n:5d} {total / n:8.3f} {slowest:10.2f}")
    lines += ["", "slowest archives:"]
    for sec, idx, kinds, seed in summary.slowest:
        lines.append(f"  {sec:7.2f} s  #{idx}  {kinds}  ({seed})")
    per_run = "per run" if summary.peak_reset_works else "per worker (no per-run reset)"
    lines.append(f"peak RSS ({per_run}): {summary.peak_rss / (1 << 20):.0f} MiB "
                 f"(archive #{summary.peak_rss_index})")
    if summary.findings.classes:
        lines += ["", "findings (outcome, class, archives):"]
        for c in summary.sorted_classes():
            where = c.smallest[1] if c.smallest else f"archive #{c.example_index}"
            lines.append(f"  {c.outcome:9s} {c.count:6d}  {c.signature}  [{where}]")
    return "\n".join(lines)


def write_report(summary: Summary, path: Path, argv: list[str],
                 notes: Path | None = None) -> None:
    """REPORT.md: the table, then each distinct crash class with its smallest reproducer,
    then the text of `notes` (read again at each write) if given."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Archive fuzzing report ({now})", "",
             f"Command: `python scripts/fuzz_archives.py {' '.join(argv)}`  ",
             f"Commit: {summary.commit}", "", "```", table(summary), "```", "",
             "## Distinct failure classes", ""]
    if not summary.findings.classes:
        lines.append("None: every run ended ok or in a clean one-line refusal.")
    else:
        lines += ["| outcome | class (exception at file:line) | archives | mutation kinds | "
                  "smallest reproducer |", "|---|---|---|---|---|"]
        for c in summary.sorted_classes():
            kinds = ", ".join(f"{k} ({n})" for k, n in c.kinds.most_common(3))
            repro = f"`{c.smallest[1]}` ({c.smallest[0]} B)" if c.smallest else \
                f"archive #{c.example_index}"
            lines.append(f"| {c.outcome} | `{c.signature}` | {c.count} | {kinds} | {repro} |")
        for c in summary.sorted_classes():
            tail = "\n".join(c.detail.strip().splitlines()[-8:])
            lines += ["", f"### {c.outcome}: {c.signature}", "", "```", tail, "```"]
    if notes is not None and notes.is_file():
        lines += ["", "## Notes", "", notes.read_text(errors="replace").strip()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", errors="replace")


def replay(paths: list[Path], boards: list[str]) -> int:
    """Run the fuzzer's commands on saved archives in this process and print each outcome."""
    from tests.fuzz.archive_runner import Worker

    status = 0
    paths = [p.resolve() for p in paths]  # the worker changes directory
    with tempfile.TemporaryDirectory(prefix="mtvg-replay-") as sandbox:
        worker = Worker(WorkerConfig(seeds=[], sandbox=sandbox, master_seed=0,
                                     boards=boards, repo=str(REPO)), 0)
        for path in paths:
            for board in boards:
                for run in worker.run_file(path, board):
                    print(f"{path}: microtvm-gen {run.command}: {run.outcome} "
                          f"(exit {run.exit_code}, {run.seconds:.2f} s, "
                          f"{run.peak_rss >> 20} MiB)")
                    if run.outcome not in ("ok", "refused"):
                        print(run.detail)
                        status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--count", type=int, default=1000, help="archives to try (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    parser.add_argument("--start", type=int, default=0,
                        help="first archive number (to resume or split a run)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds per archive before it counts as a hang (default 20)")
    parser.add_argument("--memory-limit-mb", type=int, default=1024,
                        help="peak RSS of one run above this is a finding (default 1024)")
    parser.add_argument("--boards", default="host,qemu-mps2-an385",
                        help="boards for generate, one per archive in turn")
    parser.add_argument("--cli-generate-every", type=int, default=CLI_GENERATE_EVERY,
                        metavar="N", help="also run generate through the CLI (a Project API "
                        f"server process) for every Nth archive (default {CLI_GENERATE_EVERY}; "
                        "0: never)")
    parser.add_argument("--findings", type=Path,
                        help="save a reproducer (+ .txt with the traceback) of every non-ok "
                             "class here, and REPORT.md")
    parser.add_argument("--report", type=Path, help="write the markdown report here "
                        "(default: FINDINGS/REPORT.md)")
    parser.add_argument("--notes", type=Path,
                        help="a markdown file appended to the report (read at each rewrite)")
    parser.add_argument("--no-shared", action="store_true", help="skip ../shared fixtures")
    parser.add_argument("--no-export", action="store_true",
                        help="skip the archives microtvm-gen export writes")
    parser.add_argument("--cache", type=Path, help="where exported seed archives are kept "
                        "(default $MTVG_FUZZ_CACHE or ~/.cache/microtvm-gen/fuzz-seeds)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--replay", type=Path, nargs="+", metavar="ARCHIVE",
                        help="run the commands on these archives and print what happens")
    args = parser.parse_args(argv)
    boards = [b for b in args.boards.split(",") if b]
    if args.replay:
        return replay(args.replay, boards)
    if args.count < 1 or args.jobs < 1 or args.timeout <= 0:
        parser.error("--count and --jobs must be >= 1 and --timeout > 0")

    def log(message: str) -> None:
        print(f"fuzz_archives: {message}", file=sys.stderr, flush=True)

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    seeds = discover_seeds(not args.no_shared, not args.no_export, args.cache, log)
    log(f"{len(seeds)} seed archives: {', '.join(s[0] for s in seeds)}")
    report = args.report or (args.findings / "REPORT.md" if args.findings else None)
    argv_text = sys.argv[1:] if argv is None else argv
    summary = run_campaign(seeds, args.count, args.seed, args.jobs, args.timeout,
                           args.findings, tuple(boards), args.memory_limit_mb << 20, log,
                           args.start, cli_generate_every=args.cli_generate_every,
                           checkpoint=(lambda s: write_report(s, report, argv_text,
                                                              args.notes))
                           if report else None)
    if report:
        write_report(summary, report, argv_text, args.notes)
        log(f"report: {report}")
    if args.json:
        print(json.dumps(summary.to_json(), indent=2, sort_keys=True))
    else:
        print(table(summary))
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
