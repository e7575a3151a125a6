#!/usr/bin/env bash
# The test suite, from a fresh Debian/Ubuntu machine: install what is missing, lint, then run
# pytest (unit tests, C runtime under ASan/UBSan, end-to-end on host and QEMU) on every core.
#
#   scripts/test.sh             the whole suite (what CI runs)
#   scripts/test.sh --quick     the unit tier: no test marked qemu, slow, fuzz, wheel or zephyr
#   scripts/test.sh ARGS...     ARGS go to pytest, e.g. -k tune, tests/test_cli.py, -m qemu
#
# Tests run in MTVG_TEST_JOBS pytest-xdist workers (default: the number of cores, at most 4;
# 1 runs them in this process). A module's tests run on one worker, the modules that take
# longest start first (tests/conftest.py), and the 25 slowest tests are listed at the end.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
quick=0
args=()
for arg in "$@"; do
  if [[ $arg == --quick ]]; then quick=1; else args+=("$arg"); fi
done
bin="$("$root/scripts/bootstrap.sh" | tail -n 1)"
cd "$root"
"$bin/ruff" check generator tests examples benchmarks

# Python caches compiled modules (__pycache__, git-ignored) even where the environment says
# not to: the suite starts some 800 Python processes, and without the cache each compiles
# every module of ours it imports again (and pytest rewrites every test module again).
unset PYTHONDONTWRITEBYTECODE
jobs="${MTVG_TEST_JOBS:-$(nproc)}"
if [[ ! $jobs =~ ^[1-9][0-9]*$ ]]; then
  echo "test.sh: MTVG_TEST_JOBS must be a positive number, not '$jobs'" >&2
  exit 2
fi
if [[ -z ${MTVG_TEST_JOBS:-} && $jobs -gt 4 ]]; then jobs=4; fi
options=(-q -rfEs --durations=25)
if [[ $jobs -gt 1 ]]; then
  # loadfile: a module's tests run on one worker, so its module-scoped fixtures are made
  # once and tests sharing a cache on disk never race (loadgroup's xdist_group markers do not
  # take with pytest 9.2: xdist 3.8 renames node ids through a field pytest no longer
  # reads); --no-loadscope-reorder: modules start in the order conftest.py gives.
  options+=(-n "$jobs" --dist loadfile --no-loadscope-reorder)
fi
if [[ $quick == 1 ]]; then
  options+=(-m "not qemu and not slow and not fuzz and not wheel and not zephyr")
fi
exec "$bin/python" -m pytest "${options[@]}" ${args[@]+"${args[@]}"}
