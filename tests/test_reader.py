"""The MLF reader on real archives TVM 0.8–0.16 wrote."""

from __future__ import annotations

import pytest

from generator.mlf import read_mlf
from generator.mlf.sources import parse_relay_main
from tests.conftest import archive


def test_sine_v5_c_interface_without_run_wrapper():
    m = read_mlf(archive("gromero-sine-aot-c-v5")).module()
    assert (m.executor, m.interface, m.entry) == ("aot", "c", "c-run-model")
    assert [(t.name, t.dtype, t.size_bytes, t.shape) for t in m.inputs] == [
        ("dense_4_input", "float32", 4, (1, 1))]
    assert [(t.name, t.dtype, t.size_bytes) for t in m.outputs] == [("output", "float32", 4)]
    assert m.workspace_size_bytes == 1184
    assert m.workspace_call_sites == 3
    assert len(m.params) == 6


def test_yesno_v5_packed():
    a = read_mlf(archive("guberti-yesno-aot-packed-v5"))
    m = a.module()
    assert a.version == 5
    assert (m.interface, m.entry) == ("packed", "packed")
    assert [(t.name, t.dtype, t.size_bytes) for t in m.inputs] == [("Reshape_1", "int8", 1960)]
    assert [(t.name, t.dtype, t.size_bytes) for t in m.outputs] == [("output", "int8", 4)]
    assert m.header is None


def test_kws_v7_usmp():
    a = read_mlf(archive("etiss-kws-aot-usmp-tvm0.16"))
    m = a.module()
    assert a.version == 7
    assert m.tvm_version == "0.16.0"
    assert (m.interface, m.entry) == ("c", "c")
    assert [(t.name, t.dtype, t.size_bytes, t.shape) for t in m.inputs] == [
        ("input_1", "int8", 490, (1, 49, 10, 1))]
    assert [(t.name, t.dtype, t.size_bytes) for t in m.outputs] == [("Identity", "int8", 12)]
    assert [(p.name, p.internal) for p in m.pools] == [("global_workspace", True)]
    assert m.workspace_call_sites == 0


def test_graph_archive_v7():
    m = read_mlf(archive("hannah-magicwand-graph-c-tvm0.11dev")).module()
    assert (m.executor, m.entry) == ("graph", "graph")
    assert [(t.name, t.shape) for t in m.inputs] == [("conv2d_input", (1, 128, 3, 1))]
    assert [(t.name, t.shape) for t in m.outputs] == [("Identity", (1, 4))]
    assert m.graph_json == "executor-config/graph/default.graph"
    assert len(m.params) == 8


def test_llvm_graph_archive_v5_objects():
    m = read_mlf(archive("staticrt-conv1d-graph-llvm-v5")).module()
    assert m.sources == []
    assert [(o.path, o.arch) for o in m.objects] == [("codegen/host/lib/default_lib0.o", "aarch64")]
    assert [(t.name, t.shape) for t in m.inputs] == [("input", (1, 16, 8))]
    assert m.graph_json == "executor-config/graph/graph.json"


def test_directory_and_tar_read_the_same(tmp_path):
    import tarfile

    src = archive("guberti-yesno-aot-packed-v5")
    with tarfile.open(src) as tar:
        tar.extractall(tmp_path, filter="data")
    from_dir = read_mlf(tmp_path).module()
    from_tar = read_mlf(src).module()
    assert from_dir == from_tar


@pytest.mark.parametrize("text,params,result", [
    ('def @main(%a: Tensor[(1, 2), float32], %"b:0": Tensor[(3), int8]) -> Tensor[(1, 4), int8] {\n'
     '  f(%a)\n}\n', [("a", (1, 2), "float32"), ("b:0", (3,), "int8")], ((1, 4), "int8")),
    ('def @main(%x: Tensor[(64), int8]) {\n  qnn.quantize(%x, out_dtype="int8") '
     '/* ty=Tensor[(64), int8] */\n}\n', [("x", (64,), "int8")], ((64,), "int8")),
])
def test_relay_signature(text, params, result):
    sig = parse_relay_main(text)
    assert [(p.name, p.shape, p.dtype) for p in sig.params] == params
    assert (sig.result.shape, sig.result.dtype) == result
