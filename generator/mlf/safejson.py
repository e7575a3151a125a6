"""JSON from untrusted files, with bounds: size, nesting depth, strict numbers.

Python's `json` recurses once per nesting level (a deeply nested document raises
RecursionError), accepts NaN and Infinity, and turns a 5,000-digit number into a
ValueError about Python's integer-string limit. `load_bounded` measures the depth with a
loop first, refuses the non-standard constants, and turns every failure into an MlfError.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate

from generator.errors import MlfError

MAX_JSON_BYTES = 64 * 1024 * 1024  # graph JSON of a large model is a few MB
MAX_JSON_DEPTH = 64  # real metadata nests 6 levels, graph JSON 4
MAX_NUMBER_DIGITS = 40  # more than any size or shape in a real archive


# A string literal, its escapes included ("unrolled": no alternation per character).
_STRING_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET_RE = re.compile(r"[^\[\]{}]+")
_STEP = [0] * 256  # byte → +1 opens, -1 closes (only brackets are left to map)
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def nesting_depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings (no recursion; the running sum is
    taken by C iterators, not a Python loop per bracket)."""
    brackets = _NOT_BRACKET_RE.sub("", _STRING_RE.sub("", text)).encode("ascii")
    return max(0, max(accumulate(map(_STEP.__getitem__, brackets)), default=0))


def _no_constant(name: str):
    raise ValueError(f"'{name}' is not a JSON number")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise ValueError(f"a number with {len(text)} digits")
    return int(text)


def _bounded_float(text: str) -> float:
    if len(text) > MAX_NUMBER_DIGITS * 2:
        raise ValueError(f"a number written with {len(text)} characters")
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"'{text}' is not a finite number")
    return value


def load_bounded(text: str, where: str, max_bytes: int = MAX_JSON_BYTES,
                 max_depth: int = MAX_JSON_DEPTH) -> object:
    """Parse JSON text from an archive, or raise MlfError naming `where`."""
    if len(text) > max_bytes:
        raise MlfError(f"{where}: {len(text)} bytes of JSON, over the limit of {max_bytes}")
    depth = nesting_depth(text)
    if depth > max_depth:
        raise MlfError(f"{where}: JSON nested {depth} levels deep, over the limit of "
                       f"{max_depth}")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_int=_bounded_int,
                           parse_float=_bounded_float)
        # A lone UTF-16 surrogate escape (\\ud800) makes a str that no UTF-8 file can hold:
        # a name with one would fail much later, when a project is written.
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return value
    except UnicodeEncodeError as exc:
        raise MlfError(f"{where}: a string holds a lone UTF-16 surrogate escape") from exc
    except json.JSONDecodeError as exc:
        raise MlfError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    except (ValueError, RecursionError) as exc:
        raise MlfError(f"{where}: not valid JSON ({exc})") from exc
