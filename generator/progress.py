"""Progress lines (`microtvm-gen: <what is happening>`) of long commands.

They go to stdout, with a command's text results, so that an error is the only line on
stderr; when stdout carries JSON (`--json`) they go to stderr. The CLI chooses per command
(`use_stream`); the choice reaches child processes through the environment, so the Project
API server's build lines ("configuring", "compiling") land on the same stream. Without a
choice (the library used from Python, a TVM client driving the server) they go to stderr.
"""

from __future__ import annotations

import os
import sys

STREAM_ENV = "MICROTVM_GEN_PROGRESS"
STREAMS = ("stdout", "stderr")


def use_stream(name: str) -> None:
    """Send progress lines (here and in child processes started from now) to `name`."""
    if name not in STREAMS:
        raise ValueError(f"progress stream must be one of {STREAMS}")
    os.environ[STREAM_ENV] = name


def progress(message: str) -> None:
    stream = sys.stdout if os.environ.get(STREAM_ENV) == "stdout" else sys.stderr
    print(f"microtvm-gen: {message}", file=stream, flush=True)
