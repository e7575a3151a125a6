#!/usr/bin/env bash
# The main job, from a fresh Debian/Ubuntu machine: install what is missing, then export the
# bundled mnist-8.onnx with TVM 0.27 into an MLF archive, turn it into firmware for a
# Cortex-M3, run it in QEMU on the two digit images and print the digits it sees (2 and 9).
# The older main job (the yes/no archive from TVM 0.8) is: python examples/yes_no/demo.py
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$("$root/scripts/bootstrap.sh" | tail -n 1)"
unset PYTHONDONTWRITEBYTECODE  # the venv's packages are compiled on first import (bootstrap.sh)
exec "$bin/python" "$root/examples/mnist/demo.py" "$@"
