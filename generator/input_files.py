"""Input files a user names on the command line (`--input NAME=FILE`): parsed and read,
shared by `run` and `pipeline`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from generator.errors import InputError

if TYPE_CHECKING:
    import numpy as np


def parse_input_spec(text: str) -> tuple[str, Path]:
    name, sep, file = text.partition("=")
    if not sep or not name or not file:
        raise InputError(f"--input '{text}': expected NAME=FILE")
    return name, Path(file)


def load_input_file(path: Path, dtype: str) -> np.ndarray:
    import numpy as np  # not at import time: the CLI starts without it

    if not path.is_file():
        raise InputError(f"{path}: no such file")
    if path.suffix == ".npy":
        try:
            return np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise InputError(f"{path}: not a readable .npy file ({exc})") from exc
    raw = np.frombuffer(path.read_bytes(), dtype=np.dtype(dtype).newbyteorder("<"))
    return raw.astype(dtype)
