"""The runtime headers as the ABI spec: generator/abi.py reads them, and every list that
still has a second copy (the limits index, the docs' status table, the RPC codes of
rpc_server.c) is compared with its source here."""

from __future__ import annotations

import re

import pytest

from generator import RUNTIME_ABI_VERSION, abi
from generator.errors import AbiError
from generator.link import app_client, session
from generator.rpc import packets
from tests.conftest import REPO

INCLUDE = REPO / "templates" / "common" / "include" / "mtvg"
STATUS_H = (INCLUDE / "status.h").read_text()


def test_parse_defines_reads_object_like_macros_only():
    """Values over several lines, comments dropped, function-like macros skipped."""
    text = ("#define MTVG_A 16u /* sixteen */\n"
            "#ifndef MTVG_B\n#  define MTVG_B (MTVG_A - 3) // thirteen\n#endif\n"
            "#define MTVG_C \\\n  (MTVG_B * 2)\n"
            "#define MTVG_F(x) ((x) + 1)\n#define OTHER_D 5\n")
    found = abi.parse_defines(text)
    assert found == {"MTVG_A": "16u", "MTVG_B": "(MTVG_A - 3)", "MTVG_C": "(MTVG_B * 2)",
                     "OTHER_D": "5"}
    values: dict[str, int] = {}
    for name, text in found.items():  # in order: each refers only to earlier ones
        values[name] = abi.evaluate(text, values.__getitem__)
    assert values == {"MTVG_A": 16, "MTVG_B": 13, "MTVG_C": 26, "OTHER_D": 5}


@pytest.mark.parametrize("expr, value", [("(-7)", -7), ("0xFFu", 255), ("1UL << 4", 16),
                                         ("-7 / 2", -3), ("~0u & 0xF", 15)])
def test_evaluate_follows_c(expr, value):
    assert abi.evaluate(expr, lambda n: 0) == value


@pytest.mark.parametrize("expr", ["", "1.5", "\"text\"", "f(1)", "sizeof(int)"])
def test_evaluate_refuses_what_is_not_an_integer_constant(expr):
    with pytest.raises(AbiError):
        abi.evaluate(expr, lambda n: 0)


def test_a_missing_constant_fails_loudly(tmp_path):
    with pytest.raises(AbiError, match="MTVG_NO_SUCH_LIMIT"):
        abi.constant("MTVG_NO_SUCH_LIMIT")
    header = tmp_path / "driver.h"
    header.write_text("#define DRV_MAX (DRV_UNITS * 2)\n#define DRV_NAME \"drv\"\n")
    with pytest.raises(AbiError, match="DRV_UNITS"):
        abi.header_constant(header, "DRV_MAX")
    with pytest.raises(AbiError, match="DRV_NAME"):
        abi.header_constant(header, "DRV_NAME")
    with pytest.raises(AbiError, match="cannot read"):
        abi.header_constant(tmp_path / "absent.h", "DRV_MAX")


def test_values_python_reads():
    assert RUNTIME_ABI_VERSION == abi.constant("MTVG_RUNTIME_ABI_VERSION") >= 2
    assert abi.constant("MTVG_ACCEL_RUN_FAILED") == -7  # crosses the link: never renumbered
    assert abi.constant("MTVG_FRAME_DAMAGED") == -2
    assert abi.constant("MTVG_EXIT_SETUP_FAILED") == 3
    assert abi.constant("MTVG_SESSION_MAX_PACKET") == (
        abi.constant("MTVG_LINK_MAX_PAYLOAD") - abi.constant("MTVG_SESSION_HEADER_BYTES")
        - abi.constant("MTVG_SEQUENCED_EXTRA_BYTES"))
    assert session.HEADER.size == abi.constant("MTVG_SESSION_HEADER_BYTES")
    assert app_client.DEVICE_MAX_PAYLOAD == abi.constant("MTVG_LINK_MAX_PAYLOAD")


def test_describe_status_names_known_codes():
    names = ("MTVG_OK", "MTVG_FAILED", "MTVG_ACCEL_RUN_FAILED")
    assert abi.describe_status(-7, names) == "-7 (MTVG_ACCEL_RUN_FAILED)"
    assert abi.describe_status(-1, names) == "-1 (MTVG_FAILED)"
    assert abi.describe_status(2049, names) == "2049"


# ---- status.h ---------------------------------------------------------------------------


def _return_codes() -> dict[str, str]:
    """status.h's return codes (not the ranges, exit statuses or helpers): name -> value."""
    return {name: value for name, value in abi.parse_defines(STATUS_H).items()
            if value and not name.startswith(("MTVG_STATUS_", "MTVG_EXIT_", "MTVG_STATIC_"))}


def test_return_codes_are_distinct_except_declared_aliases():
    codes = _return_codes()
    aliases = {name: value for name, value in codes.items() if value in codes}
    assert aliases == {"MTVG_LINK_CLOSED": "MTVG_FAILED"}
    values = [abi.constant(name) for name in codes if name not in aliases]
    assert len(values) == len(set(values))
    # Each in the runtime's own span; status.h asserts the range of each in C.
    assert all(abi.constant("MTVG_STATUS_RESERVED_LAST") <= v <= 0 for v in values)


def test_docs_table_lists_every_return_code():
    docs = (REPO / "docs" / "runtime.md").read_text()
    table = docs.split("### Return codes", 1)[1].split("\n\n", 2)[1]
    rows = re.findall(r"^\| (-?\d+) \| `(MTVG_\w+)`", table, re.M)
    codes = _return_codes()
    listed = {name: int(value) for value, name in rows}
    assert listed == {name: abi.constant(name) for name in codes if codes[name] not in codes}
    for alias, target in ((a, t) for a, t in codes.items() if t in codes):
        assert f"alias `{alias}`" in table and f"`{target}`" in table


# ---- the limits index in runtime.h ---------------------------------------------------------


def _index() -> dict[str, tuple[str, bool]]:
    """runtime.h's index: name -> (header, may a build override it)."""
    text = (INCLUDE / "runtime.h").read_text()
    rows = re.findall(r"^ \*   (\w+\.h) +(MTVG_\w+) +(-D)?", text, re.M)
    assert rows, "runtime.h has no limits index"
    return {name: (header, bool(flag)) for header, name, flag in rows}


def test_limits_index_matches_the_headers():
    index = _index()
    texts = {p.name: p.read_text() for p in INCLUDE.glob("*.h")}
    for name, (header, overridable) in index.items():
        assert name in abi.parse_defines(texts[header]), f"{header} does not define {name}"
        assert (f"#ifndef {name}\n" in texts[header]) == overridable, name
    for header, text in texts.items():
        for name in abi.parse_defines(text):
            limit = f"#ifndef {name}\n" in text or "_MAX_" in name or name.endswith("_ALIGN")
            if limit and not name.endswith("_H_"):
                assert index.get(name, (None,))[0] == header, f"index lacks {header}: {name}"


# ---- copies outside the headers ------------------------------------------------------------


def test_rpc_codes_match_the_device_server():
    """TVM's RPC codes and type indices: rpc_server.c and generator/rpc/packets.py."""
    source = (REPO / "templates" / "common" / "src" / "rpc_server.c").read_text()
    c_codes = {m[0]: int(m[1]) for m in re.findall(r"^#define RPC_(\w+) (\d+)$", source, re.M)}
    c_types = {m[0]: int(m[1]) for m in re.findall(r"^#define (T_\w+) (\d+)$", source, re.M)}
    py_codes = {name: getattr(packets, name) for name in c_codes if hasattr(packets, name)}
    py_types = {name: getattr(packets, name) for name in c_types if hasattr(packets, name)}
    assert len(py_codes) >= 13 and len(py_types) >= 12
    assert py_codes == {name: c_codes[name] for name in py_codes}
    assert py_types == {name: c_types[name] for name in py_types}
    assert re.search(r'^#define PROTOCOL_VERSION "(.*)"$', source, re.M)[1].encode() == \
        packets.PROTOCOL_VERSION


def test_app_commands_match_the_application():
    source = (REPO / "templates" / "crt" / "src" / "app.c").read_text()
    c_cmds = {m[0]: m[1].encode() for m in re.findall(r"^#define (CMD_\w+) '(.)'$", source, re.M)}
    py_cmds = {name: value for name, value in vars(app_client).items() if name.startswith("CMD_")}
    assert len(c_cmds) == 14 and py_cmds == c_cmds
