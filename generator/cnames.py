"""C identifiers for names that come from models (tensor names are data, not code).

A model names its tensors as it likes: PyTorch writes `1`, `23`, `input.1`,
`onnx::Conv_5`; other tools write `serving_default_x:0`, unicode or very long names.
`c_identifiers` turns a model's list of names into C identifiers that are valid in C and
C++, unique (also after upper-casing: they become `TVMGEN_<MOD>_<NAME>_SIZE` macros),
bounded in length and deterministic; the original names stay in the archive's metadata.

The rule, step by step (docs/mlf.md):

1. every character outside [A-Za-z0-9_] becomes `_` (a valid name is kept as is, which
   is also TVM's own rule for valid names);
2. an empty name, one starting with a digit, or a reserved one (starting with `__` or `_`
   and a capital) gets the prefix `t_`;
3. a C or C++ keyword, or a standard macro or library name, gets the suffix `_`;
4. a name over MAX_C_NAME characters is cut, and ends with `_` and 8 hex digits of the
   SHA-256 of the original name;
5. names valid as they stand keep them; the others, in order, get the first of
   `<name>`, `<name>_2`, `<name>_3`, ... not yet taken (compared without case).
"""

from __future__ import annotations

import hashlib
import re

# C99 guarantees 63 significant initial characters in an internal identifier.
MAX_C_NAME = 63
PREFIX = "t_"
HASH_DIGITS = 8

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BAD_CHAR_RE = re.compile(r"[^A-Za-z0-9_]")

# C11/C23 and C++ keywords (the interface header is also included from C++).
C_KEYWORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic
    _Imaginary _Noreturn _Static_assert _Thread_local alignas alignof bool constexpr false
    nullptr static_assert thread_local true typeof typeof_unqual _BitInt _Decimal32
    _Decimal64 _Decimal128
    and and_eq asm bitand bitor catch char8_t char16_t char32_t class compl concept consteval
    constinit const_cast co_await co_return co_yield decltype delete dynamic_cast explicit
    export friend mutable namespace new noexcept not not_eq operator or or_eq private
    protected public reinterpret_cast requires static_cast template this throw try typeid
    typename using virtual wchar_t xor xor_eq
""".split())

# Macros and names of the headers the generated code includes (stdint.h, string.h,
# stddef.h, stdbool.h, assert.h, errno.h...): a member named like them would not compile.
C_RESERVED_NAMES = frozenset("""
    NULL EOF errno assert offsetof stdin stdout stderr memcpy memset memmove memcmp strlen
    main size_t ptrdiff_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
    intptr_t uintptr_t intmax_t uintmax_t
    INT8_MIN INT16_MIN INT32_MIN INT64_MIN INT8_MAX INT16_MAX INT32_MAX INT64_MAX UINT8_MAX
    UINT16_MAX UINT32_MAX UINT64_MAX INTPTR_MIN INTPTR_MAX UINTPTR_MAX INTMAX_MIN INTMAX_MAX
    UINTMAX_MAX PTRDIFF_MIN PTRDIFF_MAX SIZE_MAX WCHAR_MIN WCHAR_MAX WINT_MIN WINT_MAX
    SIG_ATOMIC_MIN SIG_ATOMIC_MAX INT8_C INT16_C INT32_C INT64_C UINT8_C UINT16_C UINT32_C
    UINT64_C INTMAX_C UINTMAX_C
""".split())


def is_c_identifier(name: str, max_len: int = MAX_C_NAME) -> bool:
    """Whether `name` is what c_identifiers could produce: a C identifier of at most
    max_len ASCII characters, neither reserved nor a keyword nor a standard name."""
    return (0 < len(name) <= max_len and _IDENT_RE.fullmatch(name) is not None
            and not _reserved(name) and name not in C_KEYWORDS
            and name not in C_RESERVED_NAMES)


def _reserved(name: str) -> bool:
    return name.startswith("__") or (len(name) > 1 and name[0] == "_" and name[1].isupper())


def _short_hash(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_DIGITS]


def _sanitized(name: str, max_len: int) -> str:
    """Steps 1 to 4 of the rule, for one name."""
    text = _BAD_CHAR_RE.sub("_", name)
    if not text or text[0].isdigit() or _reserved(text):
        text = PREFIX + text
    if text in C_KEYWORDS or text in C_RESERVED_NAMES:
        text += "_"
    if len(text) > max_len:
        text = f"{text[:max_len - HASH_DIGITS - 1]}_{_short_hash(name)}"
    return text


def _with_suffix(base: str, n: int, max_len: int) -> str:
    suffix = f"_{n}"
    return base[:max_len - len(suffix)] + suffix


def c_identifiers(names: list[str], max_len: int = MAX_C_NAME) -> list[str]:
    """One valid, unique C identifier per name, in order (see the module's docstring)."""
    if max_len < 2 * (HASH_DIGITS + 1) + len(PREFIX):
        raise ValueError(f"max_len {max_len} is too small for the naming rule")
    bases = [_sanitized(n, max_len) for n in names]
    out: list[str | None] = [None] * len(names)
    taken: set[str] = set()
    # First the names that need no change (so 'a_b' keeps its name even after 'a.b').
    for i, (name, base) in enumerate(zip(names, bases, strict=True)):
        if name == base and base.lower() not in taken:
            out[i] = base
            taken.add(base.lower())
    for i, base in enumerate(bases):
        if out[i] is not None:
            continue
        candidate, n = base, 1
        while candidate.lower() in taken:
            n += 1
            candidate = _with_suffix(base, n, max_len)
        out[i] = candidate
        taken.add(candidate.lower())
    return [c for c in out if c is not None]
