#!/usr/bin/env bash
# The main job, from a fresh Debian/Ubuntu machine: install what is missing, then turn the
# yes/no MLF archive shipped in examples/yes_no into firmware for a Cortex-M3, run it in
# QEMU on the two recorded samples and print what the model heard.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$("$root/scripts/bootstrap.sh" | tail -n 1)"
exec "$bin/python" "$root/examples/yes_no/demo.py" "$@"
