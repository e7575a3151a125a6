"""The archive fuzzer's documented campaign: run it, and print or write its two tables.

`scripts/fuzz_archives.py --seed 100 --count 100000 --jobs 2` (every seed, ../shared's
included: 13 archives), then one row of outcomes and one row per command, as
docs/fuzzing-archives.md shows them. About 90 minutes on this 2-core machine with nothing
else running; run it from a clone with ../shared beside it.

Usage: python benchmarks/fuzz_campaign.py [--count N] [--jobs N] [--findings DIR] [--json]
       [--docs | --check-docs] [--from-json FILE]
(--from-json: no run; the summary an earlier run printed with --json. --check-docs: counts
must be equal, times within 3x, the commit may differ.)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from docs_tables import (  # noqa: E402
    DocsTable,
    add_docs_options,
    cells,
    publish,
    refuse_subset,
    within_factor,
)

SEED = 100
COUNT = 100_000
DOC = REPO / "docs" / "fuzzing-archives.md"
COMMAND = "python benchmarks/fuzz_campaign.py --docs"
CAMPAIGN = DocsTable(DOC, "fuzz-campaign", COMMAND)
COMMANDS = DocsTable(DOC, "fuzz-commands", COMMAND)
FAILURE_COLUMNS = ("escape", "crash", "memory", "bad-json", "leftover", "unclean")
COMMAND_LABELS = {  # the summary's command names, as the table says them
    "info --json": "`info --json`",
    "info": "`info`",
    "generate host": "`generate` in process, host",
    "generate qemu-mps2-an385": "`generate` in process, qemu-mps2-an385",
    "cli generate host": "`generate` through the CLI's server process, host",
    "cli generate qemu-mps2-an385": "`generate` through the CLI's server process, "
                                    "qemu-mps2-an385",
}
COMMIT_COLUMN = 2
TIME_COLUMNS = {9, 10, 11}  # slowest archive, peak RSS, wall time
TIME_FACTOR = 3.0  # a shared machine's times vary; the counts may not


def run_campaign(count: int, jobs: int, findings: Path) -> dict:
    """The fuzzer's --json summary (its progress lines go to stderr as it runs)."""
    argv = [sys.executable, str(REPO / "scripts" / "fuzz_archives.py"), "--seed", str(SEED),
            "--count", str(count), "--jobs", str(jobs), "--findings", str(findings), "--json"]
    done = subprocess.run(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
    if not done.stdout.strip():
        sys.exit(f"fuzz_campaign: the fuzzer printed no summary (exit {done.returncode})")
    return json.loads(done.stdout)


def campaign_lines(summary: dict) -> list[str]:
    o = summary["outcomes"]
    others = sum(o[k] for k in FAILURE_COLUMNS)
    slowest = summary["slowest"][0]["seconds"] if summary["slowest"] else 0.0
    hours, rest = divmod(int(summary["seconds"]), 3600)
    return ["| archives | seed | commit | seed archives | ok | refused | traceback | hang | "
            "escape, crash, memory, bad-json, leftover, unclean | slowest | peak RSS | "
            "wall |",
            "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {summary['count']:,} | {summary['seed']} | {summary['commit']} | "
            f"{len(summary['seed_archives'])} | {o['ok']:,} | {o['refused']:,} | "
            f"{_bold_zero(o['traceback'])} | {_bold_zero(o['hang'])} | {others} | "
            f"{slowest:.2f} s | {summary['peak_rss_bytes'] >> 20} MiB | "
            f"{hours} h {rest // 60:02d} min |"]


def command_lines(summary: dict) -> list[str]:
    lines = ["| command | runs | mean s | slowest s |", "|---|---:|---:|---:|"]
    for name, label in COMMAND_LABELS.items():
        c = summary["commands"].get(name)
        if c:
            lines.append(f"| {label} | {c['runs']:,} | {c['seconds'] / c['runs']:.3f} | "
                         f"{c['slowest']:.2f} |")
    return lines


def _bold_zero(n: int) -> str:
    return "**0**" if n == 0 else f"{n:,}"


def _same_campaign_line(documented: str, fresh: str) -> bool:
    """Counts equal, times within TIME_FACTOR, any commit."""
    def without_commit(line: str) -> str:
        row = cells(line)
        if len(row) > COMMIT_COLUMN:
            row[COMMIT_COLUMN] = ""
        return "| " + " | ".join(row) + " |"

    return within_factor(TIME_FACTOR, TIME_COLUMNS)(without_commit(documented),
                                                    without_commit(fresh))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--findings", type=Path, help="reproducers and REPORT.md here "
                                                      "(default: a new temporary directory)")
    parser.add_argument("--from-json", type=Path, metavar="FILE",
                        help="report an earlier run's --json summary instead of running")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_docs_options(parser, "docs/fuzzing-archives.md's two campaign tables")
    args = parser.parse_args()
    refuse_subset(parser, args, "count")
    if args.from_json:
        try:
            summary = json.loads(args.from_json.read_text())
        except (OSError, ValueError) as exc:
            parser.error(f"cannot read {args.from_json}: {exc}")
        if (args.docs or args.check_docs) and \
                (summary.get("count"), summary.get("seed")) != (COUNT, SEED):
            parser.error(f"{args.from_json} is not the documented campaign "
                         f"(--seed {SEED} --count {COUNT})")
    else:
        findings = args.findings or Path(tempfile.mkdtemp(prefix="mtvg-fuzz-campaign-"))
        summary = run_campaign(args.count, args.jobs, findings)
        print(f"fuzz_campaign: findings in {findings}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    elif args.docs or args.check_docs:
        status = publish(CAMPAIGN, campaign_lines(summary), args.check_docs,
                         _same_campaign_line)
        return publish(COMMANDS, command_lines(summary), args.check_docs,
                       within_factor(TIME_FACTOR, {2, 3})) or status
    else:
        print("\n".join(campaign_lines(summary) + [""] + command_lines(summary)))
    failed = sum(summary["outcomes"][k] for k in ("traceback", "hang", *FAILURE_COLUMNS))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
