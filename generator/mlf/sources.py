"""What the archive's generated C says about itself.

TVM ≤0.18 writes little of the ABI into metadata.json; the rest is in the C interface
header and the C sources. These readers extract only declarations, with regular
expressions over comment-free text: enough for the shapes TVM's code generators emit.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from generator.errors import MlfError
from generator.mlf.dtypes import ShapedTensor, dtype_bits
from generator.mlf.model import c_identifier

_FUNC_DEF_RE = re.compile(
    r"(?:^|[;}\n])\s*(?:TVM_DLL\s+|static\s+|inline\s+)*(?:int32_t|int)\s+(\w+)\s*\(([^()]*)\)\s*\{",
    re.M,
)
_STRUCT_RE = re.compile(r"struct\s+(\w+)\s*\{([^}]*)\}", re.S)
_DEFINE_RE = re.compile(r"#define\s+(\w+)\s+(\d{1,18})\b")
_POOL_STATIC_RE = re.compile(
    r"static\s+(?:const\s+)?(?:struct\s+)?(?:uint8_t\s+)?(?:__attribute__\s*\(\(.*?\)\)\s*)?"
    r"(\w+)\s*\[(\d{1,18})\]\s*;"
)

# Calls our runtime does not provide: code containing them cannot run on the device.
UNSUPPORTED_CALLS = ("TVMBackendGetFuncFromEnv", "TVMFuncCall", "TVMBackendParallelLaunch",
                     "TVMBackendRunOnce", "TVMBackendAnyListSetPackedArg")


_TARGET_LINE_RE = re.compile(r"^//\s*tvm target:\s*(\S*)", re.M)
# TVM 0.27 (MLF v8 exports) writes the target as JSON: its "kind" is the code generator.
_TARGET_JSON_KIND_RE = re.compile(r'^\{"kind"\s*:\s*"([^"]*)"')
_SYSTEM_INCLUDE_RE = re.compile(r"^\s*#\s*include\s*<([^>\n]{1,200})>", re.M)
# A file name the tool copies into a project: it reaches CMake and C text, so only these.
SAFE_FILE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")


@dataclass(frozen=True)
class SourceTraits:
    target: str  # first word of the `// tvm target:` line ("c" when absent)
    includes: tuple[str, ...]
    uses_dsp: bool


def source_traits(text: str) -> SourceTraits:
    """Which code generator wrote a source file, and the system headers it needs."""
    m = _TARGET_LINE_RE.search(text[:4096])
    target = (m.group(1) or "c") if m else "c"
    kind = _TARGET_JSON_KIND_RE.match(target)
    if kind:
        target = kind.group(1) or "c"
    includes = tuple(dict.fromkeys(_SYSTEM_INCLUDE_RE.findall(text)))
    return SourceTraits(target, includes, "arm_acle.h" in includes)


def strip_comments(text: str) -> str:
    """The text without C comments, in one linear pass (a regex with a lazy `.*?` takes
    quadratic time on many unterminated `/*`)."""
    out: list[str] = []
    i, n = 0, len(text)
    next_block, next_line = text.find("/*"), text.find("//")
    while i < n:
        if 0 <= next_block < i:
            next_block = text.find("/*", i)
        if 0 <= next_line < i:
            next_line = text.find("//", i)
        starts = [p for p in (next_block, next_line) if p >= 0]
        if not starts:
            out.append(text[i:])
            break
        start = min(starts)
        out.append(text[i:start])
        if start == next_block:
            end = text.find("*/", start + 2)
            if end < 0:
                break
            out.append(" ")
            i = end + 2
        else:
            end = text.find("\n", start + 2)
            if end < 0:
                break
            out.append(" ")
            i = end
    return "".join(out)


@dataclass(frozen=True)
class FunctionDef:
    name: str
    params: tuple[str, ...]


def function_definitions(c_text: str) -> dict[str, FunctionDef]:
    """Top-level functions returning int32_t/int that the text defines (not just declares)."""
    found: dict[str, FunctionDef] = {}
    for m in _FUNC_DEF_RE.finditer(strip_comments(c_text)):
        parts = (p.strip() for p in m.group(2).split(","))
        params = tuple(p for p in parts if p and p != "void")
        found[m.group(1)] = FunctionDef(m.group(1), params)
    return found


def count_calls(c_text: str, symbols: tuple[str, ...]) -> dict[str, int]:
    """How often the text calls each of `symbols` (comments aside): comments are stripped
    once, and a symbol the text does not hold at all costs one substring search."""
    clean = strip_comments(c_text)
    return {s: len(re.findall(rf"\b{re.escape(s)}\s*\(", clean)) if s in clean else 0
            for s in symbols}


@dataclass
class InterfaceHeader:
    """The C interface header `tvmgen_<mod>.h`."""

    inputs: list[str]  # struct member names, in order
    outputs: list[str]
    workspace_pools: list[str]
    devices: list[str]
    sizes: dict[str, int]  # every numeric #define
    io_in_pools: bool

    def io_size(self, mod: str, member: str) -> int | None:
        return self.sizes.get(self.io_size_macro(mod, member))

    @staticmethod
    def io_size_macro(mod: str, member: str) -> str:
        """The name of a struct member's size macro (`TVMGEN_<MOD>_<MEMBER>_SIZE`)."""
        return f"TVMGEN_{mod.upper()}_{c_identifier(member).upper()}_SIZE"

    def pool_size(self, mod: str, pool: str) -> int | None:
        name = f"TVMGEN_{mod.upper()}_{c_identifier(pool).upper()}_WORKSPACE_POOL_SIZE"
        return self.sizes.get(name)


def parse_interface_header(text: str, mod: str) -> InterfaceHeader:
    clean = strip_comments(text)
    structs = {m.group(1): _struct_members(m.group(2)) for m in _STRUCT_RE.finditer(clean)}
    prefix = f"tvmgen_{mod}_"
    return InterfaceHeader(
        inputs=structs.get(prefix + "inputs", []),
        outputs=structs.get(prefix + "outputs", []),
        workspace_pools=structs.get(prefix + "workspace_pools", []),
        devices=structs.get(prefix + "devices", []),
        sizes={m.group(1): int(m.group(2)) for m in _DEFINE_RE.finditer(clean)},
        io_in_pools=f"{prefix}map_inputs" in clean,
    )


def _struct_members(body: str) -> list[str]:
    members = []
    for decl in body.split(";"):
        decl = decl.strip()
        if decl:
            members.append(re.split(r"[\s*]+", decl)[-1])
    return members


def internal_pools(c_text: str) -> dict[str, int]:
    """USMP pools the generated code declares itself (`static uint8_t global_workspace[N];`)."""
    pools: dict[str, int] = {}
    clean = strip_comments(c_text)
    for m in _POOL_STATIC_RE.finditer(clean):
        name = m.group(1)
        if "workspace" in name or "pool" in name:
            pools[name] = int(m.group(2))
    return pools


# ---- Relay text (src/<mod>.relay, src/relay.txt) -----------------------------------------

_RELAY_PARAM_RE = re.compile(
    r'%(?:"([^"]+)"|([\w.:]+?))\s*:\s*Tensor\[\(([^)]*)\),\s*((?:u?int|float|bfloat|bool)\d{0,3})\]'
)
_RELAY_TY_RE = re.compile(r"ty=Tensor\[\(([^)]*)\),\s*((?:u?int|float|bfloat|bool)\d{0,3})\]")
_RELAY_DTYPE_RE = re.compile(r'(?:out_)?dtype="(\w+)"')


@dataclass
class RelaySignature:
    params: list[ShapedTensor]
    result: ShapedTensor | None  # from a `-> Tensor[...]` or a `ty=` annotation, when present
    result_dtype_hint: str | None  # from the last expression's out_dtype/dtype, when present
    uniform_dtype: str | None = None  # the one dtype of every parameter, when no op casts


def parse_relay_main(text: str) -> RelaySignature | None:
    """The signature of `@main`, or None when the text has none."""
    start = text.find("def @main(")
    if start < 0:
        return None
    depth = 0
    end = start + len("def @main")
    for i in range(end, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                end = i
                break
    header = text[start:end + 1]
    params = [ShapedTensor(m.group(1) or m.group(2), _dims(m.group(3)), m.group(4))
              for m in _RELAY_PARAM_RE.finditer(header) if _known_dtype(m.group(4))]
    tail_line = text[end:text.find("{", end)] if "{" in text[end:] else ""
    result = None
    arrow = re.search(r"->\s*Tensor\[\(([^)]*)\),\s*((?:u?int|float|bfloat|bool)\d{0,3})\]",
                      tail_line)
    if arrow and _known_dtype(arrow.group(2)):
        result = ShapedTensor("output", _dims(arrow.group(1)), arrow.group(2))
    body = text[end:]
    last_expr = _last_expression(body)
    hint = None
    if last_expr:
        ty = _RELAY_TY_RE.search(last_expr)
        if ty and result is None and _known_dtype(ty.group(2)):
            result = ShapedTensor("output", _dims(ty.group(1)), ty.group(2))
        dt = _RELAY_DTYPE_RE.search(last_expr)
        if dt:
            hint = dt.group(1)
    dtypes = {p.dtype for p in params}
    uniform = dtypes.pop() if len(dtypes) == 1 and not _RELAY_DTYPE_RE.search(body) else None
    return RelaySignature(params, result, hint, uniform)


def _known_dtype(dtype: str) -> bool:
    try:
        dtype_bits(dtype)
    except ValueError:
        return False
    return True


def _last_expression(body: str) -> str | None:
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    # The body ends with the result expression, then "}" (and possibly metadata sections).
    for i, line in enumerate(lines):
        if line == "}" and i > 0:
            return lines[i - 1]
    return None


def _dims(text: str) -> tuple[int, ...]:
    dims = []
    for part in text.split(","):
        m = re.match(r"\s*(-?\d+)", part)
        if m:
            if len(m.group(1)) > 18:
                raise MlfError(f"a Relay shape dimension with {len(m.group(1))} digits")
            dims.append(int(m.group(1)))
    return tuple(dims)


# ---- ELF objects -------------------------------------------------------------------------

ELF_MACHINES = {3: "x86", 8: "mips", 20: "powerpc", 40: "arm", 62: "x86_64", 183: "aarch64",
                243: "riscv", 94: "xtensa"}


def elf_arch(blob: bytes) -> str:
    """Architecture of an ELF object from its header's e_machine field."""
    if len(blob) < 20 or blob[:4] != b"\x7fELF":
        return "unknown"
    endian = "<" if blob[5] == 1 else ">"
    (machine,) = struct.unpack_from(endian + "H", blob, 18)
    return ELF_MACHINES.get(machine, f"elf-machine-{machine}")


_REGISTRY_RE = re.compile(
    r"TVMFuncRegistry\s+\w+\s*=\s*\{\s*((?:\"(?:[^\"\\\n]|\\.)*\"\s*)+),", re.S)
_STRING_RE = re.compile(r"\"((?:[^\"\\\n]|\\.)*)\"")
_SIMPLE_ESCAPES = {"n": 10, "t": 9, "r": 13, "0": 0, "a": 7, "b": 8, "f": 12, "v": 11,
                   "\\": 92, "'": 39, '"': 34, "?": 63}


def c_string_bytes(literal_body: str) -> bytes:
    """The bytes of a C string literal's body (escapes decoded, no terminating NUL).

    A malformed escape (a trailing backslash, `\\x` without hex digits) raises MlfError.
    """
    out = bytearray()
    i = 0
    while i < len(literal_body):
        c = literal_body[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        if i + 1 >= len(literal_body):
            raise MlfError("a C string literal ends in a lone backslash")
        nxt = literal_body[i + 1]
        if nxt in "01234567":
            j = i + 1
            while j < min(i + 4, len(literal_body)) and literal_body[j] in "01234567":
                j += 1
            out.append(int(literal_body[i + 1:j], 8) & 0xFF)
            i = j
        elif nxt == "x":
            j = i + 2
            while j < len(literal_body) and literal_body[j] in "0123456789abcdefABCDEF":
                j += 1
            if j == i + 2:
                raise MlfError("a C string literal has a \\x escape without hex digits")
            out.append(int(literal_body[i + 2:j], 16) & 0xFF)
            i = j
        else:
            out.append(_SIMPLE_ESCAPES.get(nxt, ord(nxt) & 0xFF))
            i += 2
    return bytes(out)


_C_NAME_RE = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


def system_library_functions(c_text: str) -> list[str] | None:
    """Names in the archive's system-library registry, or None if it has no registry.

    TVM's `TVMFuncRegistry` names blob is the function count, then each name and its NUL.
    TVM 0.8 wrote the count as one byte, later versions as a little-endian u16: the layout
    whose count matches that many C-identifier names is the one used.
    """
    m = _REGISTRY_RE.search(c_text)
    if not m or "TVMSystemLibEntryPoint" not in c_text:
        return None
    try:
        blob = b"".join(c_string_bytes(s) for s in _STRING_RE.findall(m.group(1)))
    except MlfError as exc:
        raise MlfError(f"the system-library registry is malformed: {exc}") from None
    for width in (2, 1):
        if len(blob) < width:
            continue
        count = int.from_bytes(blob[:width], "little")
        names = blob[width:].split(b"\0")
        if len(names) > count and all(_C_NAME_RE.fullmatch(n) for n in names[:count]):
            return [n.decode("ascii") for n in names[:count]]
    if blob in (b"", b"\0", b"\0\0"):
        return []
    raise MlfError("the system-library registry's names are not a count followed by that many "
                   "C identifiers")
