#!/usr/bin/env bash
# The whole test suite, from a fresh Debian/Ubuntu machine: install what is missing, lint,
# then run pytest (unit tests, C runtime under ASan/UBSan, end-to-end on host and QEMU).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$("$root/scripts/bootstrap.sh" | tail -n 1)"
cd "$root"
"$bin/ruff" check generator tests examples benchmarks
exec "$bin/python" -m pytest -q -rs "$@"
