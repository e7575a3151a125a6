"""The C runtime's ABI constants, read from its headers (templates/common/include/mtvg).

The headers are the spec: every limit, size, protocol byte and status code the Python side
shares with the C runtime is a `#define` there, and Python asks for it here by name
instead of keeping a copy. A name missing from the headers, or a value that is not an
integer constant expression, fails loudly at import of the module that needs it.

Values may be written as C integer constant expressions: decimal, hex, with u/l suffixes,
parentheses, + - * / % << >> & | ^ ~, and the names of other constants.
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from pathlib import Path

from generator.errors import AbiError
from generator.resources import templates_dir

# `#define NAME value`, where value may continue over backslash-newlines; function-like
# macros (a parenthesis right after the name) are not constants and are skipped.
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(?![\w(])((?:\\\n|.)*)$", re.M)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_INT_SUFFIX = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b")
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Mod: operator.mod, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
           ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}


def include_dir() -> Path:
    """The runtime's public headers."""
    return templates_dir() / "common" / "include" / "mtvg"


def parse_defines(text: str) -> dict[str, str]:
    """The object-like macros of a header: name -> value text (comments removed)."""
    found: dict[str, str] = {}
    for m in _DEFINE.finditer(text):
        value = _COMMENT.sub(" ", m.group(2).replace("\\\n", " ")).strip()
        found[m.group(1)] = value
    return found


@functools.cache
def _read(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise AbiError(f"cannot read the C header {path}: {exc.strerror}",
                       hint="reinstall microtvm-gen") from exc
    return parse_defines(text)


@functools.cache
def defines() -> dict[str, tuple[str, str]]:
    """Every constant of the runtime headers: name -> (header, value text)."""
    out: dict[str, tuple[str, str]] = {}
    for path in sorted(include_dir().glob("*.h")):
        for name, value in _read(path).items():
            out.setdefault(name, (path.name, value))
    return out


def evaluate(expr: str, lookup) -> int:
    """A C integer constant expression; names are resolved through lookup(name)."""
    try:
        tree = ast.parse(_INT_SUFFIX.sub(r"\1", expr), mode="eval")
    except SyntaxError as exc:
        raise AbiError(f"'{expr}' is not an integer constant expression") from exc

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            return lookup(node.id)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](walk(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) is ast.Div:
            a, b = walk(node.left), walk(node.right)
            return abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # C: toward zero
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](walk(node.left), walk(node.right))
        raise AbiError(f"'{expr}' is not an integer constant expression")

    return walk(tree.body)


def _resolve(name: str, table: dict[str, tuple[str, str]], where: str) -> int:
    if name not in table:
        raise AbiError(f"{where} does not define {name}",
                       hint="the generator and its C headers differ; reinstall microtvm-gen")
    header, value = table[name]
    try:
        return evaluate(value, lambda other: _resolve(other, table, where))
    except AbiError as exc:
        raise AbiError(f"{header}: {name}: {exc}") from exc


@functools.cache
def constant(name: str) -> int:
    """The value of the runtime header constant `name` (for example MTVG_LINK_MAX_PAYLOAD)."""
    return _resolve(name, defines(), f"the runtime headers ({include_dir()})")


def header_constant(path: Path, name: str) -> int:
    """A constant of another C header, such as an accelerator driver's, by the same rules
    (names in its value come from the same header)."""
    return _resolve(name, {n: (path.name, v) for n, v in _read(path).items()}, str(path))


def describe_status(code: int, names: tuple[str, ...]) -> str:
    """`code` with the first of the status.h `names` that has its value, e.g. '-7
    (MTVG_ACCEL_RUN_FAILED)'; the bare number when none has it."""
    for name in names:
        if constant(name) == code:
            return f"{code} ({name})"
    return str(code)
