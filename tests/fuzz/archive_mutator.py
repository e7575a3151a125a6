"""Structure-aware mutations of MLF archives, for scripts/fuzz_archives.py.

A seed archive is parsed once into its tar members. `mutate(seed, rng)` applies one to three
mutations (member edits, metadata/graph JSON edits, params binary edits, C text edits, tar
header forgery, truncation, recompression, decompression bombs) and returns the archive's
bytes with the names of the mutations. Everything is derived from `rng`, so the same
(seed archive, random state) always gives the same bytes.
"""

from __future__ import annotations

import bz2
import copy
import gzip
import io
import json
import lzma
import random
import re
import struct
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

# Strings a member name, a JSON string or a C identifier may be replaced by or spliced with.
ODD_FRAGMENTS = ["\n", "\r\n", "\"", "'", "$", "${x}", "$(id)", ";", ")", "(", "#", "\\",
                 "\\n", "`", "é", "名前", "\u202e", "\x00", "\x7f", " ", "\t", "*/", "/*",
                 "//", "%s", "{{ x }}", "{% raw %}", "\ud800", "..", "/", "~"]
HUGE_DIGITS = 5000
DEEP_LEVELS = 100_000
LONG_STRING = 1 << 20
# Decompression bombs: a block of zeros compressed once per process and concatenated
# (gzip, bzip2 and xz readers all accept concatenated streams).
BOMB_BLOCK = 16 << 20


@dataclass
class Member:
    info: tarfile.TarInfo
    data: bytes | None  # None: not a regular file

    @property
    def name(self) -> str:
        return self.info.name


@dataclass
class Seed:
    """A parsed seed archive."""

    label: str
    members: list[Member]
    raw: bytes  # the seed file as it is (possibly compressed)

    def clone(self) -> list[Member]:
        return [Member(copy.copy(m.info), m.data) for m in self.members]


@dataclass
class Mutated:
    data: bytes
    kinds: list[str]
    suffix: str = ".tar"  # how the fuzzer names the file (.tar, .tar.gz, ...)
    notes: list[str] = field(default_factory=list)


def load_seed(label: str, raw: bytes) -> Seed:
    members = []
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tar:
        for info in tar:
            data = tar.extractfile(info).read() if info.isfile() else None
            members.append(Member(info, data))
            _SEED_BLOCKS[_key(info, data)] = _block(info, data)
    return Seed(label, members, raw)


# ---- serialization ------------------------------------------------------------------------

_NOT_WRITABLE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


# Serialized blocks (header + padded data) of the seeds' members, by everything that goes
# into them: an unchanged member is not serialized again.
_SEED_BLOCKS: dict[tuple, bytes] = {}


def _key(info: tarfile.TarInfo, data: bytes | None) -> tuple:
    return (info.name, info.type, info.linkname, info.mode, info.uid, info.gid, info.uname,
            info.gname, info.mtime, info.devmajor, info.devminor, data)


def _block(info: tarfile.TarInfo, data: bytes | None) -> bytes:
    cached = _SEED_BLOCKS.get(_key(info, data))
    if cached is not None:
        return cached
    info = copy.copy(info)
    # A lone surrogate cannot be written; the escaped byte 0xFF (not UTF-8) can.
    info.name = _NOT_WRITABLE.sub("\udcff", info.name)
    info.linkname = _NOT_WRITABLE.sub("\udcff", info.linkname)
    info.size = len(data) if data is not None else 0
    header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    body = data or b""
    return header + body + b"\0" * (-len(body) % tarfile.BLOCKSIZE)


def to_tar(members: list[Member]) -> bytes:
    """The members as a tar (pax format), as tarfile would write them."""
    out = b"".join(_block(m.info, m.data) for m in members) + b"\0" * (2 * tarfile.BLOCKSIZE)
    return out + b"\0" * (-len(out) % tarfile.RECORDSIZE)


def _short(name: str) -> str:
    """A member name without the leading './' TVM writes."""
    return name[2:] if name.startswith("./") else name


def _files(members: list[Member], pattern: str = "") -> list[int]:
    return [i for i, m in enumerate(members)
            if m.data is not None and re.search(pattern, _short(m.name))]


def _pick(rng: random.Random, items: list):
    return items[rng.randrange(len(items))] if items else None


def _odd_text(rng: random.Random, base: str = "") -> str:
    parts = [base] if base else []
    for _ in range(rng.randint(1, 4)):
        parts.insert(rng.randint(0, len(parts)), rng.choice(ODD_FRAGMENTS))
    return "".join(parts)


# ---- byte-level edits ---------------------------------------------------------------------

def edit_bytes(rng: random.Random, data: bytes, edits: int | None = None) -> bytes:
    """Flip bits, overwrite, insert, delete or duplicate a few byte ranges."""
    buf = bytearray(data)
    for _ in range(edits or rng.randint(1, 8)):
        op = rng.randrange(6)
        pos = rng.randint(0, len(buf))
        if op == 0 and buf:
            pos = min(pos, len(buf) - 1)
            buf[pos] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            pos = min(pos, len(buf) - 1)
            buf[pos] = rng.choice([0, 0xFF, 0x7F, 0x80, ord('"'), ord("\\"), ord("{"),
                                   ord("["), ord("9"), ord("-"), rng.randrange(256)])
        elif op == 2:
            buf[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == 3:
            del buf[pos:pos + rng.randint(1, 64)]
        elif op == 4 and buf:
            start = rng.randrange(len(buf))
            chunk = buf[start:start + rng.randint(1, 256)]
            buf[pos:pos] = chunk
        else:
            token = rng.choice([b"NaN", b"Infinity", b"-1", b"1e400", b"null", b"\"\"",
                                b"[]", b"{}", b"\\", b"\xff\xfe", b"\x00"])
            buf[pos:pos] = token
    return bytes(buf)


# ---- member-level mutations ---------------------------------------------------------------

def m_member_bytes(rng, members):
    i = _pick(rng, _files(members)) if rng.random() < 0.2 else \
        _pick(rng, _files(members, r"^(metadata\.json|codegen/|parameters/|src/|executor-config/)"))
    if i is None:
        return False
    members[i].data = edit_bytes(rng, members[i].data)
    return True


def m_member_rename(rng, members):
    i = _pick(rng, [j for j, m in enumerate(members) if _short(m.name) not in ("", ".")])
    if i is None:
        return False
    name = members[i].name
    choices = [
        name.replace("default", rng.choice(["Default", "other", "default2", "d"])),
        re.sub(r"\.(\w+)$", rng.choice([".cc", ".cpp", ".h", ".o", ".txt", ""]), name),
        name.replace("codegen/host/", rng.choice(["codegen/", "codegen/host/src/lib/", ""])),
        _short(name) + rng.choice(["~", ".orig", "/x"]),
        name.upper(),
        rng.choice([m.name for m in members]),  # collides with another member
    ]
    members[i].info.name = rng.choice(choices)
    return True


def m_member_duplicate(rng, members):
    i = _pick(rng, _files(members))
    if i is None:
        return False
    dup = Member(copy.copy(members[i].info), members[i].data)
    if rng.random() < 0.5:
        dup.data = edit_bytes(rng, dup.data or b"")
    if rng.random() < 0.3:  # same file under './name' and 'name'
        short = _short(dup.info.name)
        dup.info.name = short if dup.info.name.startswith("./") else "./" + short
    members.insert(rng.randint(0, len(members)), dup)
    return True


def m_member_remove(rng, members):
    for _ in range(rng.randint(1, 3)):
        i = _pick(rng, list(range(len(members))))
        if i is None:
            return False
        del members[i]
    return True


def m_member_odd_name(rng, members):
    i = _pick(rng, _files(members))
    if i is None:
        return False
    name = members[i].name
    head, _, tail = name.rpartition("/")
    stem, dot, ext = tail.partition(".")
    where = rng.randrange(3)
    if where == 0:
        tail = _odd_text(rng, stem) + dot + ext
    elif where == 1:
        head = head + "/" + _odd_text(rng) if head else _odd_text(rng)
    else:
        tail = tail + _odd_text(rng)
    new = (head + "/" if head else "") + tail
    if rng.random() < 0.5:
        members[i].info.name = new
    else:  # an extra member under the odd name
        members.append(Member(copy.copy(members[i].info), members[i].data))
        members[-1].info.name = new
    return True


def m_member_path(rng, members):
    i = _pick(rng, _files(members))
    if i is None:
        return False
    short = _short(members[i].name)
    members[i].info.name = rng.choice([
        "/" + short, "../" + short, "./../" + short, "codegen/../../" + short,
        "C:" + short, "C:\\" + short.replace("/", "\\"), short.replace("/", "\\"),
        ".//" + short, "./" + short + "/", "././" + short, short.replace("/", "//")])
    return True


def m_member_type(rng, members):
    i = _pick(rng, _files(members))
    if i is None:
        return False
    info = members[i].info
    kind = rng.choice([tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE, tarfile.FIFOTYPE,
                       tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.CONTTYPE, b"Z"])
    info.type = kind
    if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        info.linkname = rng.choice(["/etc/passwd", "../../x", "metadata.json",
                                    _short(members[0].name), "/tmp"])
    if kind not in (tarfile.CONTTYPE, b"Z"):
        members[i].data = None
    return True


def m_member_many(rng, members):
    count = rng.choice([300, 3000, 3000, 20001])
    base = rng.choice(["runtime/x", "codegen/host/src/default_lib", "src/f"])
    for k in range(count):
        info = tarfile.TarInfo(f"{base}{k}.c")
        members.append(Member(info, b"" if rng.random() < 0.9 else b"int x;\n"))
    return True


# ---- JSON mutations (metadata.json, the graph JSON) ---------------------------------------

class _Raw:
    """A placeholder for JSON text json.dumps cannot write (5,000-digit ints, deep nesting)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _nodes(value, path=()):
    """Every (path, value) of a JSON document; path items are keys or indices."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nodes(v, path + (i,))


def _set(doc, path, value):
    if not path:
        return value
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    parent[path[-1]] = value
    return doc


def _dumps(doc) -> str:
    raws: list[str] = []

    def encode(value):
        if isinstance(value, _Raw):
            raws.append(value.text)
            return f"@@RAW{len(raws) - 1}@@"
        if isinstance(value, dict):
            return {k: encode(v) for k, v in value.items()}
        if isinstance(value, list):
            return [encode(v) for v in value]
        return value

    text = json.dumps(encode(doc), allow_nan=True)
    return re.sub(r'"@@RAW(\d+)@@"', lambda m: raws[int(m.group(1))], text)


def _wrong_type(rng, old):
    options = ["", "x", "12", "-1", "NaN", [], {}, [1, 2], {"a": 1}, None, True, False, 0,
               -1, 1.5, 2 ** 63, -(2 ** 63) - 1, 2 ** 64, [[[]]], [None], [""], {"": None}]
    value = rng.choice(options)
    if type(value) is type(old) and value == old:
        value = None
    return value


def _numeric(rng, kind: str):
    if kind == "nan":
        return _Raw(rng.choice(["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]))
    if kind == "hugeint":
        digits = "9" * rng.choice([HUGE_DIGITS, 4301, 400, 41, 40, 39, 20, 19])
        return _Raw(rng.choice(["", "-"]) + digits)
    if kind == "boundary":
        return rng.choice([0, 1, 255, 256, 65535, 65536, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1,
                           2 ** 32, 2 ** 63 - 1, 2 ** 63, 1 << 30, (1 << 30) + 1, 0.0, 1.0])
    return rng.choice([-1, -2 ** 31, -2 ** 63, -0.5, -(10 ** 18)])


def _deep(rng):
    levels = rng.choice([DEEP_LEVELS, DEEP_LEVELS, 2000, 990, 65, 64, 63, 30])
    if rng.random() < 0.5:
        return _Raw("[" * levels + "]" * levels)
    return _Raw('{"a":' * levels + "1" + "}" * levels)


def mutate_json(rng: random.Random, text: str, op: str) -> str | None:
    """Apply one JSON mutation (op: one of JSON_OPS); None when the text is not JSON."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # already mutated past reading
        return None
    for _ in range(rng.randint(1, 3)):
        nodes = [(p, v) for p, v in _nodes(doc) if not isinstance(v, _Raw)]
        numbers = [p for p, v in nodes if isinstance(v, int | float) and not isinstance(v, bool)]
        strings = [p for p, v in nodes if isinstance(v, str)]
        dicts = [p for p, v in nodes if isinstance(v, dict) and v]
        if op == "key" and dicts:
            path = rng.choice(dicts)
            target = doc
            for p in path:
                target = target[p]
            key = rng.choice(list(target))
            value = target.pop(key)
            if rng.random() < 0.6:
                target[_odd_text(rng, key) if rng.random() < 0.7 else ""] = value
            continue
        pool = {"nan": numbers, "hugeint": numbers, "negative": numbers, "boundary": numbers,
                "longstr": strings, "oddstr": strings}.get(op) or [p for p, _ in nodes]
        path = rng.choice(pool)
        old = doc
        for p in path:
            old = old[p]
        if op == "type":
            new = _wrong_type(rng, old)
        elif op in ("nan", "hugeint", "negative", "boundary"):
            new = _numeric(rng, op)
        elif op == "deep":
            new = _deep(rng)
        elif op == "longstr":
            new = rng.choice(["x", "é", "\\", "9"]) * rng.choice([LONG_STRING, 5000, 1025])
        else:
            new = _odd_text(rng, old if isinstance(old, str) else "")
        doc = _set(doc, path, new)
        if not path:
            break
    return _dumps(doc)


JSON_OPS = ("type", "nan", "hugeint", "negative", "boundary", "deep", "longstr", "oddstr",
            "key")


def _json_mutation(target_re: str, op: str) -> Callable:
    def apply(rng, members):
        i = _pick(rng, _files(members, target_re))
        if i is None:
            return False
        text = members[i].data.decode("utf-8", "replace")
        out = mutate_json(rng, text, op)
        if out is None:
            return False
        members[i].data = out.encode("utf-8", "surrogatepass")
        return True
    return apply


# ---- params binary ------------------------------------------------------------------------

_PARAMS_RE = r"^parameters/.*\.params$"


def m_params(rng, members):
    i = _pick(rng, _files(members, _PARAMS_RE))
    if i is None:
        return False
    blob = bytearray(members[i].data)
    if len(blob) < 24:
        return False
    huge = rng.choice([2 ** 64 - 1, 2 ** 63, 2 ** 32, 10 ** 12, 1 << 40, 0, 1])
    op = rng.randrange(6)
    if op == 0:  # name count
        struct.pack_into("<Q", blob, 16, huge)
    else:
        # Walk to the tensors: names, tensor count, then the first tensor's header.
        pos, (count,) = 24, struct.unpack_from("<Q", blob, 16)
        try:
            for _ in range(min(count, 10000)):
                (length,) = struct.unpack_from("<Q", blob, pos)
                if op == 1 and rng.random() < 0.3:
                    struct.pack_into("<Q", blob, pos, huge)
                    break
                pos += 8 + length
            tensors_at = pos
            if op == 2:
                struct.pack_into("<Q", blob, tensors_at, huge)
            pos = tensors_at + 8
            # tensor: magic u64, reserved u64, dev i32 x2, ndim i32, code u8, bits u8, lanes u16
            skip = rng.randrange(max(1, min(count, 8)))
            for _ in range(skip):
                (ndim,) = struct.unpack_from("<i", blob, pos + 24)
                (nbytes,) = struct.unpack_from("<q", blob, pos + 32 + 8 * ndim)
                pos += 32 + 8 * ndim + 8 + nbytes
            (ndim,) = struct.unpack_from("<i", blob, pos + 24)
            if op == 3:  # shape
                if ndim > 0 and rng.random() < 0.7:
                    struct.pack_into("<q", blob, pos + 32 + 8 * rng.randrange(ndim),
                                     rng.choice([2 ** 62, 2 ** 63 - 1, -1, 10 ** 9, 2 ** 31]))
                else:
                    struct.pack_into("<i", blob, pos + 24,
                                     rng.choice([-1, 2 ** 31 - 1, 33, 1000, 100000]))
            elif op == 4:  # declared byte size
                struct.pack_into("<q", blob, pos + 32 + 8 * ndim,
                                 rng.choice([2 ** 63 - 1, -1, -(2 ** 63), 10 ** 12]))
            else:  # dtype
                struct.pack_into("<BBH", blob, pos + 28, rng.choice([0, 1, 2, 3, 4, 255]),
                                 rng.choice([0, 1, 7, 255, 64]), rng.choice([0, 1, 4, 65535]))
        except (struct.error, OverflowError):  # an earlier mutation broke the layout
            struct.pack_into("<Q", blob, 16, huge)
    members[i].data = bytes(blob)
    return True


# ---- C text: header, sources, Relay text --------------------------------------------------

def _edit_text(members, i, fn) -> bool:
    text = members[i].data.decode("utf-8", "surrogateescape")
    new = fn(text)
    if new is None or new == text:
        return False
    try:
        members[i].data = new.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        members[i].data = _NOT_WRITABLE.sub("\udcff", new).encode("utf-8", "surrogateescape")
    return True


def m_header(rng, members):
    i = _pick(rng, _files(members, r"^codegen/host/include/.*\.h$"))
    if i is None:
        return False

    def fn(text):
        op = rng.randrange(4)
        if op == 0:  # struct member identifiers
            return re.sub(r"(\w+)(\s*;)", lambda m: (_odd_text(rng, m.group(1))
                          if rng.random() < 0.5 else m.group(1)) + m.group(2), text)
        if op == 1:  # sizes
            return re.sub(r"(#define\s+\w+\s+)(\d+)", lambda m: m.group(1) + rng.choice(
                ["9" * HUGE_DIGITS, "0", "-1", "18446744073709551616", "1e9", "0x10"]), text)
        if op == 2:  # the struct names
            return text.replace("struct tvmgen_", rng.choice(["struct  tvmgen_",
                                                               "struct tvmgen_x", "struct "]))
        return re.sub(r"(\w+)", lambda m: _odd_text(rng, m.group(1))
                      if rng.random() < 0.05 else m.group(1), text)
    return _edit_text(members, i, fn)


_BAD_ESCAPES = ["\\x", "\\xZZ", "\\", "\\u12", "\\777", "\\8", "\\x1234567890",
                "\\0", "\\\n", "\\q", "\\U0001F600", '\\"', "\\x-1"]


def m_source(rng, members):
    i = _pick(rng, _files(members, r"^codegen/host/src/.*\.(c|cc|cpp)$"))
    if i is None:
        return False

    def fn(text):
        op = rng.randrange(5)
        if op == 0:  # registry strings with bad escapes
            strings = list(re.finditer(r'"((?:[^"\\\n]|\\.)*)"', text))
            if not strings:
                return None
            m = rng.choice(strings)
            body = m.group(1)
            pos = rng.randint(0, len(body))
            body = body[:pos] + rng.choice(_BAD_ESCAPES) + body[pos:]
            if rng.random() < 0.3:
                body = body.rstrip("\\") + "\\"
            return text[:m.start(1)] + body + text[m.end(1):]
        if op == 1:  # '// tvm target:' lines
            line = "// tvm target: " + rng.choice([
                "c -keys=arm_cpu -mcpu=cortex-m7", _odd_text(rng, "c"), "x" * 100000,
                "llvm -mtriple=aarch64-linux-gnu", "", "c -mcpu=$(rm -rf /)"])
            return line + "\n" + text if rng.random() < 0.5 else \
                re.sub(r"// tvm target:[^\n]*", lambda _m: line, text)  # literal text
        if op == 2:  # function names and identifiers
            return re.sub(r"\b(tvmgen_\w+|TVMSystemLibEntryPoint|TVMFuncRegistry)\b",
                          lambda m: _odd_text(rng, m.group(1)) if rng.random() < 0.3
                          else m.group(1), text)
        if op == 3:  # array sizes of static pools
            return re.sub(r"\[(\d+)\]", lambda m: "[" + rng.choice(
                ["9" * HUGE_DIGITS, "0", "-1", "4294967296", m.group(1)]) + "]", text)
        # unbalanced braces/comments at a random point
        pos = rng.randint(0, len(text))
        return text[:pos] + rng.choice(["/*", "{", "}", "\"", "(", "#if 0\n"]) + text[pos:]
    return _edit_text(members, i, fn)


def m_relay(rng, members):
    i = _pick(rng, _files(members, r"^src/.*\.(relay|txt)$"))
    if i is None:
        return False

    def fn(text):
        return re.sub(r"Tensor\[\(([^)]*)\), (\w+)\]", lambda m: (
            f"Tensor[({rng.choice(['9' * HUGE_DIGITS, '-1', '0', '', '1, -5', m.group(1)])}), "
            f"{rng.choice(['int8', 'float32', 'int0', 'float9999', 'x', m.group(2)])}]")
            if rng.random() < 0.5 else m.group(0), text)
    return _edit_text(members, i, fn)


# ---- raw tar edits ------------------------------------------------------------------------

def _header_offsets(tar: bytes) -> list[int]:
    """Offsets of the member headers of an uncompressed tar."""
    out, pos = [], 0
    while pos + 512 <= len(tar):
        block = tar[pos:pos + 512]
        if block == b"\0" * 512:
            break
        out.append(pos)
        try:
            size = int(block[124:136].strip(b"\0 ") or b"0", 8)
        except ValueError:
            break
        pos += 512 + (size + 511) // 512 * 512
    return out


def _fix_checksum(buf: bytearray, off: int) -> None:
    buf[off + 148:off + 156] = b" " * 8
    chk = sum(buf[off:off + 512])
    buf[off + 148:off + 156] = b"%06o\0 " % chk


def r_huge_size(rng, tar: bytes) -> bytes:
    buf = bytearray(tar)
    offs = _header_offsets(tar)
    if not offs:
        return tar
    off = rng.choice(offs)
    choice = rng.randrange(4)
    if choice == 0:
        field_ = b"77777777777\0"  # 8 GiB - 1, octal
    elif choice == 1:  # base-256: 2**63 - 1
        field_ = b"\x80" + b"\0" * 3 + (2 ** 63 - 1).to_bytes(8, "big")
    elif choice == 2:  # base-256 negative
        field_ = b"\xff" * 12
    else:
        field_ = b"%011o\0" % rng.choice([300 << 20, 1 << 30, 2 ** 33 - 1])
    buf[off + 124:off + 136] = field_
    if rng.random() < 0.9:
        _fix_checksum(buf, off)
    return bytes(buf)


def r_header_field(rng, tar: bytes) -> bytes:
    buf = bytearray(tar)
    offs = _header_offsets(tar)
    if not offs:
        return tar
    off = rng.choice(offs)
    field_ = rng.choice([(0, 100), (100, 8), (108, 8), (116, 8), (136, 12), (156, 1),
                         (157, 100), (257, 8), (345, 155)])
    start, length = field_
    if rng.random() < 0.5:
        buf[off + start:off + start + length] = edit_bytes(
            rng, bytes(buf[off + start:off + start + length]), 3)[:length].ljust(length, b"\0")
    else:
        buf[off + start:off + start + length] = rng.randbytes(length)
    if rng.random() < 0.8:
        _fix_checksum(buf, off)
    return bytes(buf)


def r_truncate(rng, tar: bytes) -> bytes:
    cut = rng.choice([rng.randint(0, len(tar)), rng.randint(0, 1024),
                      len(tar) - rng.randint(1, 2048), (rng.randint(0, len(tar)) // 512) * 512])
    return tar[:max(0, cut)]


def r_flip(rng, tar: bytes) -> bytes:
    return edit_bytes(rng, tar, rng.randint(1, 32))


# ---- compression ----------------------------------------------------------------------------

# Fast settings: the reader sees the same formats; the fuzzer spends its time reading.
_COMPRESSORS = {
    ".tar.gz": lambda b: gzip.compress(b, compresslevel=1, mtime=0),
    ".tar.bz2": lambda b: bz2.compress(b, 1),
    ".tar.xz": lambda b: lzma.compress(b, preset=0),
}
_BOMB_COMPRESSORS = {
    ".tar.gz": lambda b: gzip.compress(b, mtime=0),
    ".tar.bz2": bz2.compress,
    ".tar.xz": lzma.compress,
}
_BOMB_BLOCKS: dict[str, bytes] = {}


def _bomb_block(suffix: str) -> bytes:
    if suffix not in _BOMB_BLOCKS:
        _BOMB_BLOCKS[suffix] = _BOMB_COMPRESSORS[suffix](bytes(BOMB_BLOCK))
    return _BOMB_BLOCKS[suffix]


def bomb(rng, members: list[Member]) -> tuple[bytes, str, str]:
    """A compressed archive whose members (or padding) decompress to hundreds of MB.

    Returns (bytes, suffix, description).
    """
    suffix = rng.choice([".tar.gz", ".tar.gz", ".tar.bz2", ".tar.xz"])
    compress = _COMPRESSORS[suffix]
    where = rng.choice(["codegen/host/src/default_lib9.c", "runtime/big.bin",
                        "parameters/default.params", "metadata.json", "src/default.relay",
                        "codegen/host/include/tvmgen_default.h"])
    blocks_per_member = rng.choice([4, 8, 15, 16, 64])  # x 16 MiB
    count = rng.choice([1, 1, 2, 5, 70])
    parts = []
    prefix = to_tar(members).rstrip(b"\0")
    prefix += b"\0" * (-len(prefix) % 512)
    parts.append(compress(prefix))
    for k in range(count):
        info = tarfile.TarInfo(where if k == 0 else f"{where}.{k}")
        info.size = blocks_per_member * BOMB_BLOCK
        parts.append(compress(info.tobuf(format=tarfile.GNU_FORMAT)))
        parts.extend([_bomb_block(suffix)] * blocks_per_member)
    parts.append(compress(b"\0" * 1024))
    data = b"".join(parts)
    total = count * blocks_per_member * BOMB_BLOCK
    return data, suffix, (f"{count} x {blocks_per_member * 16} MiB of zeros in {where} "
                          f"({suffix}, {total >> 20} MiB unpacked from {len(data)} bytes)")


def compress_variant(rng, tar: bytes, kind: str) -> tuple[bytes, str]:
    if kind == "recompress":
        suffix = rng.choice(list(_COMPRESSORS))
        return _COMPRESSORS[suffix](tar), suffix
    if kind == "gzip_bad_crc":
        data = bytearray(_COMPRESSORS[".tar.gz"](tar))
        pos = len(data) - 8 + rng.randrange(8)  # CRC32 or ISIZE
        data[pos] ^= 1 << rng.randrange(8)
        return bytes(data), ".tar.gz"
    if kind == "compressed_truncate":
        suffix = rng.choice(list(_COMPRESSORS))
        data = _COMPRESSORS[suffix](tar)
        return data[:rng.randint(0, len(data) - 1)], suffix
    # compressed_flip: a byte flip inside the compressed stream
    suffix = rng.choice(list(_COMPRESSORS))
    data = bytearray(_COMPRESSORS[suffix](tar))
    pos = rng.randrange(10, max(11, len(data)))
    if pos < len(data):
        data[pos] ^= 1 << rng.randrange(8)
    return bytes(data), suffix


def zlib_trailing_garbage(rng, tar: bytes) -> tuple[bytes, str]:
    """A valid gzip stream followed by garbage (another 'member' that is not gzip)."""
    return _COMPRESSORS[".tar.gz"](tar) + rng.randbytes(rng.randint(1, 64)) + \
        zlib.compress(b"x"), ".tar.gz"


# ---- the mutation table ---------------------------------------------------------------------

STRUCTURE: dict[str, tuple[float, Callable]] = {
    "member_bytes": (8, m_member_bytes),
    "member_rename": (3, m_member_rename),
    "member_duplicate": (2, m_member_duplicate),
    "member_remove": (2, m_member_remove),
    "member_odd_name": (4, m_member_odd_name),
    "member_path": (1.5, m_member_path),
    "member_type": (1.5, m_member_type),
    "member_many": (0.15, m_member_many),
    "params": (4, m_params),
    "header": (3, m_header),
    "source": (5, m_source),
    "relay": (1.5, m_relay),
}
for _op in JSON_OPS:
    STRUCTURE[f"metadata_{_op}"] = (3 if _op in ("type", "nan", "hugeint") else 2,
                                    _json_mutation(r"^metadata\.json$", _op))
    STRUCTURE[f"graph_{_op}"] = (1.5, _json_mutation(
        r"^executor-config/graph/.*\.(graph|json)$", _op))

RAW: dict[str, tuple[float, Callable]] = {
    "tar_truncate": (3, r_truncate),
    "tar_flip": (3, r_flip),
    "tar_huge_size": (2, r_huge_size),
    "tar_header_field": (2, r_header_field),
}
COMPRESSION: dict[str, float] = {
    "recompress": 3, "gzip_bad_crc": 1.5, "compressed_truncate": 1.5, "compressed_flip": 1.5,
    "gzip_trailing_garbage": 0.5, "bomb": 0.4,
}
KINDS = [*STRUCTURE, *RAW, *COMPRESSION]


def _weighted(rng: random.Random, table: dict) -> str:
    names = list(table)
    weights = [v[0] if isinstance(v, tuple) else v for v in table.values()]
    return rng.choices(names, weights)[0]


def mutate(seed: Seed, rng: random.Random) -> Mutated:
    """One mutated archive: structure mutations, then maybe a raw or compression one."""
    members = seed.clone()
    kinds: list[str] = []
    stage = rng.random()
    structural = rng.choice([1, 1, 1, 2, 3]) if stage < 0.75 else rng.choice([0, 0, 1])
    for _ in range(structural):
        for _attempt in range(5):
            name = _weighted(rng, STRUCTURE)
            if STRUCTURE[name][1](rng, members):
                kinds.append(name)
                break
    if stage >= 0.75 and rng.random() < 0.5:
        name = _weighted(rng, COMPRESSION)
        kinds.append(name)
        if name == "bomb":
            data, suffix, note = bomb(rng, members)
            return Mutated(data, kinds, suffix, [note])
        tar = to_tar(members)
        if name == "gzip_trailing_garbage":
            data, suffix = zlib_trailing_garbage(rng, tar)
        else:
            data, suffix = compress_variant(rng, tar, name)
        return Mutated(data, kinds, suffix)
    tar = to_tar(members)
    if stage >= 0.75 or not kinds:
        name = _weighted(rng, RAW)
        kinds.append(name)
        tar = RAW[name][1](rng, tar)
    return Mutated(tar, kinds)
