"""TensorFlow Lite Micro's arena for a .tflite model, for `export`'s memory line.

TFLite Micro's Python interpreter (the `tflite_micro` package, when installed) builds the
model with its recording allocator and prints what it placed; it prints from C++, so it
runs in a child process, which also keeps a model it cannot load from touching ours. The
figures are the x86-64 build's (its pointers are 8 bytes: on a 32-bit core the arena's
tail is a little smaller); the head is where its activations live.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TIMEOUT = 60.0  # seconds: a model TFLite Micro chokes on must not hold export up


@dataclass(frozen=True)
class TflmArena:
    total: int  # bytes of the whole arena
    head: int  # bytes of its head: the activations (its inputs and outputs included)


def tflm_arena(model: Path) -> TflmArena | None:
    """TFLite Micro's arena for `model`, or None (not a .tflite file, no `tflite_micro`,
    or a model it does not load)."""
    if model.suffix.lower() != ".tflite" or importlib.util.find_spec("tflite_micro") is None:
        return None
    code = ("import sys\n"
            "from tflite_micro.python.tflite_micro import runtime\n"
            "runtime.Interpreter.from_file(sys.argv[1]).print_allocations()\n")
    try:
        out = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True,
                             text=True, timeout=TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout + out.stderr
    total = re.search(r"Arena allocation total (\d+) bytes", text)
    head = re.search(r"Arena allocation head (\d+) bytes", text)
    if out.returncode != 0 or total is None or head is None:
        return None
    return TflmArena(int(total.group(1)), int(head.group(1)))
