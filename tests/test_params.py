"""The params codec against real params files and malformed ones."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from generator.errors import MlfError
from generator.mlf.archive import read_archive
from generator.mlf.params import LIST_MAGIC, Param, load_params, save_params
from tests.conftest import archive

EMPTY = struct.pack("<QQQQ", LIST_MAGIC, 0, 0, 0)


def test_empty_dict_is_32_bytes():
    assert save_params([]) == EMPTY
    assert load_params(EMPTY) == []


def test_round_trip():
    params = [Param("p0", "float32", (2, 3), np.arange(6, dtype="<f4").tobytes()),
              Param("bias", "int32", (4,), np.array([1, -2, 3, -4], dtype="<i4").tobytes()),
              Param("w", "int8", (), b"\x80")]
    decoded = load_params(save_params(params))
    assert decoded == params
    assert decoded[0].as_numpy().tolist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize("name", ["hannah-magicwand-graph-c-tvm0.11dev",
                                  "guberti-yesno-aot-packed-v5"])
def test_real_params_files_round_trip_byte_for_byte(name):
    files = read_archive(archive(name))
    blob = files.data["parameters/default.params"]
    params = load_params(blob)
    assert params, "expected non-empty params"
    assert save_params(params) == blob


@pytest.mark.parametrize("blob,message", [
    (b"", "truncated"),
    (struct.pack("<QQQ", 0x1234, 0, 0), "not a TVM params file"),
    (struct.pack("<QQQ", LIST_MAGIC, 0, 1) + struct.pack("<Q", 2) + b"p0"
     + struct.pack("<Q", 2), "1 names but 2 tensors"),
    (save_params([Param("p", "int8", (4,), b"\x00" * 4)])[:-1], "truncated"),
    (struct.pack("<QQQ", LIST_MAGIC, 0, 1) + struct.pack("<Q", 1 << 40), "parameter name of"),
])
def test_malformed_params(blob, message):
    with pytest.raises(MlfError, match=message):
        load_params(blob)
