"""Mutation fuzzing of real archives through the CLI (scripts/fuzz_archives.py).

600 mutated archives (fixed seed) of the in-repo fixtures and of archives `microtvm-gen
export` writes go through `info --json`, `info` and `generate`: none may end in a traceback,
a hang, a write outside the output directory, a dead worker, a peak RSS over 1 GiB, NaN in
JSON, a refusal of more than one line, or a refused generate's leftovers. The
classification itself is checked with entry points that misbehave on purpose.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, YES_NO
from tests.fuzz import archive_mutator as mutator
from tests.fuzz.archive_runner import FAILURES, GIB, make_archive

sys.path.insert(0, str(REPO / "scripts"))
import fuzz_archives  # noqa: E402

FUZZ_SEED = 20261124
FUZZ_COUNT = 160  # the suite's share; scripts/fuzz_archives.py runs campaigns of 100,000
YES_NO_SEED = [("yes_no", str(YES_NO / "model.tar"))]
# Our exporter's archives of hello_world (both styles): the suite's share of the exported
# seeds; the campaigns add mnist-8's (scripts/fuzz_archives.py EXPORTS).
SMALL_EXPORTS = tuple(e for e in fuzz_archives.EXPORTS if e[0].startswith("hello_world"))


# ---- the campaign ---------------------------------------------------------------------------

@pytest.mark.slow
def test_mutated_archives_end_ok_or_in_one_line(tmp_path):
    seeds = fuzz_archives.discover_seeds(include_shared=False, log=print, exports=SMALL_EXPORTS)
    assert any(label.startswith("export:") for label, _ in seeds), \
        "no archive from microtvm-gen export among the seeds"
    summary = fuzz_archives.run_campaign(seeds, FUZZ_COUNT, FUZZ_SEED, jobs=2,
                                         findings_dir=tmp_path / "findings")
    report = fuzz_archives.table(summary)
    print(report)
    # FAILURES, and the README's other promises: strict JSON, one line, nothing left behind.
    for outcome in (*FAILURES, "bad-json", "unclean", "leftover"):
        assert summary.outcomes[outcome] == 0, f"{outcome}:\n{report}"
    assert summary.peak_rss < GIB, report
    # Both paths are exercised: archives that still read and generate, and refusals.
    assert summary.outcomes["ok"] >= FUZZ_COUNT // 20, report
    assert summary.outcomes["refused"] >= FUZZ_COUNT // 2, report
    assert sum(summary.outcomes.values()) == FUZZ_COUNT


# ---- the mutator ------------------------------------------------------------------------------

def _seeds(export: bool = False):
    return [mutator.load_seed(label, Path(path).read_bytes())
            for label, path in fuzz_archives.discover_seeds(False, export, log=print,
                                                             exports=SMALL_EXPORTS)]


def test_archive_number_alone_determines_the_archive():
    seeds = _seeds()
    for index in (0, 7, 1234):
        first, again = make_archive(seeds, 5, index), make_archive(seeds, 5, index)
        assert first[1].data == again[1].data and first[1].kinds == again[1].kinds
    assert make_archive(seeds, 5, 1)[1].data != make_archive(seeds, 6, 1)[1].data


def test_every_structure_mutation_changes_some_seed():
    seeds = _seeds(export=True)
    for name, (_weight, apply) in mutator.STRUCTURE.items():
        if name.startswith("graph_"):
            candidates = [s for s in seeds if "graph" in s.label]
        else:
            candidates = seeds
        changed = False
        for k, seed in enumerate(candidates * 3):
            members = seed.clone()
            if apply(random.Random(f"{name}{k}"), members) and \
                    mutator.to_tar(members) != mutator.to_tar(seed.clone()):
                changed = True
                break
        assert changed, name


def test_stacked_mutations_never_break_the_mutator():
    seeds = _seeds(export=True)
    kinds = set()
    for index in range(300):
        _seed, mutated = make_archive(seeds, 11, index)
        assert mutated.data and mutated.kinds
        kinds.update(mutated.kinds)
    assert len(kinds) > len(mutator.KINDS) // 2


def test_json_mutations_write_what_json_dumps_cannot():
    rng = random.Random(3)
    text = json.dumps({"a": 1, "b": [2.5, {"c": 3}]})
    huge = mutator.mutate_json(rng, text, "hugeint")
    assert any(len(tok) >= 19 for tok in huge.replace("-", " ").replace(",", " ").split())
    deep = mutator.mutate_json(random.Random(1), text, "deep")
    assert deep.count("[") + deep.count("{") > 900
    nan = mutator.mutate_json(rng, text, "nan")
    assert any(tok in nan for tok in ("NaN", "Infinity", "1e400"))


def test_raw_mutations_forge_tar_headers():
    tar = mutator.to_tar(_seeds()[0].clone())
    forged = mutator.r_huge_size(random.Random(2), tar)
    assert forged != tar and len(forged) == len(tar)
    bombed, suffix, note = mutator.bomb(random.Random(4), _seeds()[0].clone())
    assert suffix.startswith(".tar.") and len(bombed) < 8 << 20 and "MiB of zeros" in note


def test_bomb_expands_as_described():
    data, suffix, note = mutator.bomb(random.Random(4), _seeds()[0].clone())
    count, size = int(note.split(" x ")[0]), int(note.split(" x ")[1].split(" ")[0])
    total = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for info in tar:
            total += info.size
    assert total >= count * size << 20


# ---- the classification -----------------------------------------------------------------------
# Entry points a worker calls instead of generator.cli.main (WorkerConfig.entry).

def raises(argv):
    raise KeyError("boom")


def writes_outside(argv):
    Path(os.environ["MTVG_FUZZ_TEST_OUTSIDE"]).write_text("escaped\n")
    return 0


def spins(argv):
    while True:
        pass


def blocks_the_alarm(argv):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(60)


def prints_nan(argv):
    print('{"workspace": NaN}')
    return 0


def refuses_in_two_lines(argv):
    print("microtvm-gen info: error: one\nand another", file=sys.stderr)
    return 2


def refuses_but_leaves_files(argv):
    if argv[0] != "generate":
        print("{}")
        return 0
    out = Path(argv[argv.index("-o") + 1])
    out.mkdir(parents=True)
    (out / "half.c").write_text("int x;\n")
    print("microtvm-gen generate: error: no", file=sys.stderr)
    return 2


def returns_three(argv):
    return 3


def dies(argv):
    os._exit(9)


def allocates(argv):
    if argv[:2] == ["info", "--json"]:
        block = bytearray(GIB + (64 << 20))
        block[::4096] = b"x" * len(block[::4096])
    print("{}")
    return 0


@pytest.mark.parametrize("entry, outcome, signature", [
    ("raises", "traceback", "KeyError at tests/test_fuzz_archives.py"),
    ("writes_outside", "escape", "escape: open for writing"),
    ("spins", "hang", "hang at tests/test_fuzz_archives.py"),
    ("blocks_the_alarm", "hang", "hang: worker killed"),
    ("prints_nan", "bad-json", "bad-json"),
    ("refuses_in_two_lines", "unclean", "unclean: exit 2 with 2 lines"),
    ("refuses_but_leaves_files", "leftover", "leftover"),
    ("returns_three", "traceback", "exit code 3"),
    ("dies", "crash", "crash: worker died (exit code 9)"),
    ("allocates", "memory", "memory"),
])
def test_misbehaviour_is_classified(entry, outcome, signature, tmp_path, monkeypatch):
    outside = tmp_path / "outside.txt"
    monkeypatch.setenv("MTVG_FUZZ_TEST_OUTSIDE", str(outside))
    summary = fuzz_archives.run_campaign(
        YES_NO_SEED, 1, 0, jobs=1, timeout=20 if entry == "allocates" else 2,
        findings_dir=tmp_path / "findings", entry=f"tests.test_fuzz_archives:{entry}",
        kill_grace=3)
    assert summary.outcomes[outcome] == 1, fuzz_archives.table(summary)
    (cls,) = summary.findings.classes.values()
    assert cls.signature.startswith(signature), cls.signature
    reproducer = Path(cls.smallest[1])
    assert reproducer.is_file() and Path(str(reproducer) + ".txt").is_file()
    if entry == "writes_outside":
        assert outside.read_text() == "escaped\n"


def test_replay_runs_the_cli_on_a_saved_archive(tmp_path):
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not a tar archive\n" * 40)
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "fuzz_archives.py"),
                           "--replay", str(YES_NO / "model.tar"), str(bad), "--boards", "host"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "model.tar: microtvm-gen info --json: ok" in proc.stdout
    assert "model.tar: microtvm-gen generate host: ok" in proc.stdout
    assert "model.tar: microtvm-gen cli generate host: ok" in proc.stdout
    assert "bad.tar: microtvm-gen info --json: refused" in proc.stdout
