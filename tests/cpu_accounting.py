"""Per-test CPU seconds, for sizing the suite (conftest.MEASURED) and finding what to speed up.

With MTVG_TEST_CPU_LOG=FILE set, every test appends one JSON line to FILE: its node id, the
CPU seconds of the test process (`self`) and of the processes it started and waited for
(`children`: gcc, QEMU, CLI runs, servers), its wall seconds, when it started and on which
xdist worker (the summary says how long each worker was busy and how long it idled at the
end). CPU seconds do not grow
when other jobs keep the machine busy, as wall seconds do; a module-scoped fixture's CPU
counts in the first test using it. `python -m tests.cpu_accounting FILE` prints the totals
by module and the tests that take most.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

LOG_ENV = "MTVG_TEST_CPU_LOG"


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    own, children = _cpu()
    began = time.time()
    start = time.monotonic()
    try:
        return (yield)
    finally:
        own_after, children_after = _cpu()
        line = {"id": item.nodeid, "self": round(own_after - own, 3),
                "children": round(children_after - children, 3),
                "wall": round(time.monotonic() - start, 3), "start": round(began, 3),
                "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
        with open(os.environ[LOG_ENV], "a") as log:
            log.write(json.dumps(line) + "\n")


def summary(path: Path, top: int = 30) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by_module: Counter[str] = Counter()
    for r in rows:
        by_module[r["id"].split("::")[0]] += r["self"] + r["children"]
    total = sum(by_module.values())
    lines = [f"{len(rows)} tests, {total:.0f} CPU s ({sum(r['self'] for r in rows):.0f} in "
             f"the test processes, {sum(r['children'] for r in rows):.0f} in their children)",
             "", "CPU s  module"]
    lines += [f"{s:6.0f}  {m}" for m, s in by_module.most_common(top)]
    lines += ["", "worker  span s  in tests s  idle at the end s"]
    workers: dict[str, list[dict]] = {}
    for r in rows:
        if "start" in r:
            workers.setdefault(r["worker"], []).append(r)
    if workers:
        first = min(r["start"] for rs in workers.values() for r in rs)
        last = max(r["start"] + r["wall"] for rs in workers.values() for r in rs)
        for name, rs in sorted(workers.items()):
            end = max(r["start"] + r["wall"] for r in rs)
            lines.append(f"{name:6}  {end - first:6.0f}  {sum(r['wall'] for r in rs):10.0f}  "
                         f"{last - end:17.0f}")
    lines += ["", "CPU s  wall s  test"]
    for r in sorted(rows, key=lambda r: -(r["self"] + r["children"]))[:top]:
        lines.append(f"{r['self'] + r['children']:6.0f}  {r['wall']:6.0f}  {r['id']}")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.cpu_accounting FILE")
    print(summary(Path(sys.argv[1])))
