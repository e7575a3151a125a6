"""Accelerator plugins: discovery, --target parsing, offloading, the vanilla mock NPU on the
host and in QEMU, a plugin written in the test, and every way a plugin can fail."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from generator.accel import registry
from generator.cli import main
from generator.errors import ExportError
from generator.mlf import read_mlf
from generator.project.generate import generate
from generator.run import run_project
from tests.conftest import REPO, require_board_tools, shared_path
from tests.test_cmsis_nn import cmsis_nn_tree

MNIST = REPO / "examples" / "mnist"
MODELS = REPO / "tests" / "fixtures" / "models"
KWS = MODELS / "mlperftiny_kws" / "kws_ref_model.tflite"
HELLO_FLOAT = MODELS / "hello_world" / "hello_world_float.tflite"
BOARDS = ["host", "qemu-mps2-an385"]

# A third plugin, as a vendor would write it: float ReLU on a "device" that is one C file.
RELU_PLUGIN = '''
from pathlib import Path
from generator.accel import Accelerator, Driver, Lowering, Param, Pattern, extern_kernel


class TinyRelu(Accelerator):
    name = "tinyrelu"
    description = "ReLU in a C driver (a test plugin)"

    def patterns(self, options):
        from tvm.relax import dpl
        x = dpl.wildcard()
        return [Pattern("relu", dpl.is_op("relax.nn.relu")(x), {"x": x}, ("x",),
                        check=lambda m: None if m.input_dtypes[0] == "float32" else "not f32")]

    def lower(self, match, options):
        n = 1
        for d in match.output_shape:
            n *= d
        params = [Param("x", match.input_shapes[0], "float32"),
                  Param("y", match.output_shape, "float32")]
        return Lowering(extern_kernel(self.name, "tinyrelu_run", params, ["x", "y", n]))

    def driver(self, options, board):
        return Driver(Path(__file__).parent, sources=("tinyrelu.c",), counters=None)


accelerator = TinyRelu
'''
RELU_C = r'''
#include <stdint.h>
#include "mtvg/accel.h"
int32_t tinyrelu_run(const float* x, float* y, int32_t n) {
  if (n <= 0) { mtvg_accel_error("tinyrelu", "empty tensor"); return 1; }
  for (int32_t i = 0; i < n; i++) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; }
  return 0;
}
'''


def write_relu_plugin(root: Path, body: str = RELU_PLUGIN) -> Path:
    pkg = root / "tinyrelu"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    (pkg / "tinyrelu.c").write_text(RELU_C)
    return root


def errors(stderr: str) -> list[str]:
    """stderr without the progress lines ('microtvm-gen: doing X')."""
    return [ln for ln in stderr.strip().splitlines() if not ln.startswith("microtvm-gen: ")]


def digit(d: int) -> np.ndarray:
    from PIL import Image

    img = Image.open(MNIST / f"digit-{d}.jpg").resize((28, 28))
    return np.asarray(img).astype("float32").reshape(1, 1, 28, 28)


def export(model: Path, dest: Path, *args: str) -> dict:
    out = dest.with_suffix(".json")
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["export", str(model), "-o", str(dest), "--json", *args])
    assert code == 0, buf.getvalue()
    out.write_text(buf.getvalue())
    return json.loads(buf.getvalue())


def run_on(archive: Path, board: str, samples: list[dict], tmp: Path, profile: bool = False):
    require_board_tools(board)
    project = tmp / f"proj-{board}"
    generate(archive, board, project, profile=profile)
    return run_project(project, samples, profile=profile)


# ---- discovery and --target ------------------------------------------------------------------

def test_built_in_plugins_are_listed(capsys):
    assert main(["accelerators", "--json"]) == 0
    found = {a["name"]: a for a in json.loads(capsys.readouterr().out)["accelerators"]}
    assert {"vanilla", "cmsis-nn"} <= set(found)
    assert found["vanilla"]["origin"].startswith("built-in")
    assert [o["name"] for o in found["vanilla"]["options"]] == ["fault_at"]


@pytest.mark.parametrize("target, options, message", [
    ("vanilla", [], "then 'c'"),
    ("c,vanilla,c", [], "then 'c'"),
    ("nosuch,c", [], "no accelerator plugin 'nosuch'"),
    ("vanilla,c", ["--target-vanilla-colour=red"], "has no option 'colour'"),
    ("vanilla,c", ["--target-vanilla-fault-at=two"], "not an integer"),
    ("vanilla,c", ["--target-vanilla-fault-at=-1"], "0 or more"),
    ("c", ["--target-vanilla-fault-at=1"], "no accelerator in --target takes it"),
])
def test_target_errors_are_one_line(target, options, message):
    with pytest.raises(ExportError, match=message):
        registry.select(target, [], options)


def test_target_options_reach_the_plugin():
    (s,) = registry.select("vanilla,c", [], ["--target-vanilla-fault-at=3"])
    assert s.name == "vanilla" and s.options == {"fault_at": 3}
    rest, opts = registry.split_target_options(
        ["export", "m.onnx", "--target-vanilla-fault-at", "3", "--target", "vanilla,c"])
    assert opts == ["--target-vanilla-fault-at=3"] and rest[-2:] == ["--target", "vanilla,c"]


def test_target_options_on_another_command_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["info", "x.tar", "--target-vanilla-fault-at=1"])
    assert exc.value.code == 2
    assert "only 'export'" in capsys.readouterr().err


# ---- vanilla: float mnist and int8 kws ----------

@pytest.mark.parametrize("board", BOARDS)
def test_mnist_conv_layers_on_vanilla(board, tmp_path):
    cpu = export(MNIST / "mnist-8.onnx", tmp_path / "cpu.tar")
    npu = export(MNIST / "mnist-8.onnx", tmp_path / "npu.tar", "--target", "vanilla,c")
    assert npu["accelerators"][0]["operators"] == {"conv2d_bias_relu": 2}
    assert npu["cpu_kernel_calls"] == cpu["calls"] - 2 == npu["calls"] - 2
    meta = json.loads(_member(tmp_path / "npu.tar", "metadata.json"))
    (use,) = meta["modules"]["default"]["accelerators"]
    macs = sum(op["macs"] for op in use["operators"])
    assert macs == 8 * 1 * 28 * 28 * 25 + 16 * 8 * 14 * 14 * 25  # mnist's two 5x5 convs
    samples = [{"Input3": digit(2)}, {"Input3": digit(9)}]
    want = run_on(tmp_path / "cpu.tar", board, samples, tmp_path / "cpu")
    got = run_on(tmp_path / "npu.tar", board, samples, tmp_path / "npu")
    for g, w in zip(got.outputs, want.outputs, strict=True):
        out = "Plus214_Output_0"
        scale = np.abs(w[out]).max()
        np.testing.assert_allclose(g[out], w[out], rtol=1e-5, atol=1e-5 * scale)
    assert [int(np.argmax(o["Plus214_Output_0"])) for o in got.outputs] == [2, 9]
    for counters in got.counters:
        assert counters["vanilla"]["commands"] == 2
        assert counters["vanilla"]["macs"] == macs


def _member(archive: Path, name: str) -> bytes:
    import tarfile

    with tarfile.open(archive) as tar:
        (member,) = [m for m in tar.getmembers() if m.name.removeprefix("./") == name]
        return tar.extractfile(member).read()


@pytest.mark.slow
def test_kws_on_vanilla_bit_exact_with_tflite_micro(tmp_path):
    from tests.test_export import _kws_inputs, tflm_outputs

    xs, expected = _kws_inputs()
    npu = export(KWS, tmp_path / "kws.tar", "--accelerator", "vanilla")
    assert npu["accelerators"][0]["operators"] == {"conv2d": 5, "dense": 1}
    report = run_on(tmp_path / "kws.tar", "qemu-mps2-an385",
                    [{"input_1": x} for x in xs], tmp_path, profile=True)
    got = [o["Identity"] for o in report.outputs]
    assert [g.tobytes() for g in got] == [w.tobytes() for w in tflm_outputs(KWS, xs)]
    assert [int(np.argmax(g)) for g in got] == expected
    assert all(c["vanilla"]["commands"] == 6 for c in report.counters)
    # run --profile times the accelerator's calls like the kernels (a profiled build)
    layers = json.loads((tmp_path / "proj-qemu-mps2-an385" / "model" / "metadata.json")
                        .read_text())["modules"]["default"]["layers"]
    on_npu = [i for i, la in enumerate(layers) if la["implementation"] == "accelerator:vanilla"]
    assert len(on_npu) == 6 and all(la["macs"] for la in (layers[i] for i in on_npu))
    for calls, timing in zip(report.profiles, report.timings, strict=True):
        assert len(calls) == len(layers) and all(calls[i] > 0 for i in on_npu)
        assert abs(sum(calls) - timing.count) <= 0.01 * timing.count


def test_driver_error_fails_the_run_with_its_message(tmp_path, capsys):
    export(MNIST / "mnist-8.onnx", tmp_path / "m.tar", "--target", "vanilla,c",
           "--target-vanilla-fault-at=2")
    require_board_tools("host")
    generate(tmp_path / "m.tar", "host", tmp_path / "p")
    np.save(tmp_path / "x.npy", digit(2))
    assert main(["run", str(tmp_path / "p"), "--input", f"Input3={tmp_path / 'x.npy'}"]) == 2
    err = errors(capsys.readouterr().err)
    assert len(err) == 1 and "vanilla: conv2d_f32: fault injected at command 2" in err[0], err
    assert "the model returned status -7 (MTVG_ACCEL_RUN_FAILED)" in err[0], err


# ---- a plugin written here ----------

@pytest.mark.parametrize("how", ["flag", "environment"])
def test_third_plugin_found_and_run(how, tmp_path, monkeypatch):
    plugins = write_relu_plugin(tmp_path / "plugins")
    args = ["--target", "tinyrelu,c"]
    if how == "flag":
        args += ["--accelerator-path", str(plugins)]
    else:
        monkeypatch.setenv(registry.PATH_ENV, str(plugins))
    info = export(MNIST / "mnist-8.onnx", tmp_path / "m.tar", *args)
    assert info["accelerators"][0]["operators"] == {"relu": 2}
    (found,) = [f for f in registry.discover([plugins])
                if f.name == "tinyrelu" and not f.shadowed_by]
    assert found.origin == str(plugins / "tinyrelu")
    if how == "flag":  # generate finds the plugin again through its own flag
        monkeypatch.setenv(registry.PATH_ENV, str(plugins))
    report = run_on(tmp_path / "m.tar", "host", [{"Input3": digit(2)}], tmp_path)
    assert int(np.argmax(report.outputs[0]["Plus214_Output_0"])) == 2


def test_two_accelerators_each_operator_to_the_first_taker(tmp_path, monkeypatch):
    plugins = write_relu_plugin(tmp_path / "plugins")
    monkeypatch.setenv(registry.PATH_ENV, str(plugins))
    info = export(MNIST / "mnist-8.onnx", tmp_path / "m.tar", "--target",
                  "tinyrelu,vanilla,c")
    taken = {a["name"]: a["operators"] for a in info["accelerators"]}
    # tinyrelu takes both ReLUs first; vanilla then takes the convolutions without them
    assert taken == {"tinyrelu": {"relu": 2}, "vanilla": {"conv2d_bias": 2}}
    report = run_on(tmp_path / "m.tar", "host", [{"Input3": digit(9)}], tmp_path)
    assert int(np.argmax(report.outputs[0]["Plus214_Output_0"])) == 9
    assert report.counters[0]["vanilla"]["commands"] == 2


def test_plugin_matching_nothing_leaves_the_model_on_the_cpu(tmp_path, capsys):
    assert main(["export", str(HELLO_FLOAT), "-o", str(tmp_path / "h.tar"),
                 "--target", "vanilla,c"]) == 0
    out = capsys.readouterr().out
    assert "vanilla: nothing matched" in out
    assert "matched no operator; the model runs on the CPU" in out
    (module,) = read_mlf(tmp_path / "h.tar").modules
    assert [(a.name, a.operators) for a in module.accelerators] == [("vanilla", 0)]
    report = run_on(tmp_path / "h.tar", "host", [{"serving_default_dense_input:0":
                                                   np.array([[1.0]], np.float32)}], tmp_path)
    assert report.counters == [{"vanilla": {"commands": 0, "macs": 0, "bytes_in": 0,
                                            "bytes_out": 0}}]


@pytest.mark.parametrize("body, message", [
    (RELU_PLUGIN.replace("def lower(self, match, options):",
                         "def lower(self, match, options):\n"
                         "        raise RuntimeError('boom')"),
     "accelerator 'tinyrelu' raised in lower(): RuntimeError: boom"),
    (RELU_PLUGIN.replace("from pathlib import Path", "import no_such_module_here"),
     "does not load: ModuleNotFoundError"),
    (RELU_PLUGIN.replace('Param("y", match.output_shape, "float32")',
                         'Param("y", (1,), "float32")'),
     "the kernel lowered for 'relu' takes"),
])
def test_plugin_that_fails_is_one_line_exit_2(body, message, tmp_path, capsys):
    plugins = write_relu_plugin(tmp_path / "plugins", textwrap.dedent(body))
    code = main(["export", str(MNIST / "mnist-8.onnx"), "-o", str(tmp_path / "m.tar"),
                 "--target", "tinyrelu,c", "--accelerator-path", str(plugins)])
    err = errors(capsys.readouterr().err)
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert "tinyrelu" in err[0]
    assert not (tmp_path / "m.tar").exists()


def test_broken_plugin_is_listed_with_its_error(tmp_path, capsys):
    plugins = write_relu_plugin(tmp_path / "plugins", "def broken(:\n")
    assert main(["accelerators", "--accelerator-path", str(plugins)]) == 2
    out = capsys.readouterr().out
    assert "tinyrelu" in out and "error: SyntaxError" in out
    assert "vanilla" in out  # the others still load


def test_board_the_plugin_does_not_support_is_refused(tmp_path, monkeypatch, capsys):
    body = RELU_PLUGIN.replace('description = "ReLU in a C driver (a test plugin)"',
                               'description = "host only"\n    boards = ("host",)')
    plugins = write_relu_plugin(tmp_path / "plugins", body)
    monkeypatch.setenv(registry.PATH_ENV, str(plugins))
    export(MNIST / "mnist-8.onnx", tmp_path / "m.tar", "--target", "tinyrelu,c")
    assert main(["generate", str(tmp_path / "m.tar"), "--board", "qemu-mps2-an385",
                 "-o", str(tmp_path / "p")]) == 2
    err = errors(capsys.readouterr().err)
    assert len(err) == 1 and "does not support board 'qemu-mps2-an385'" in err[0]
    assert not (tmp_path / "p").exists()


def test_archive_naming_an_unknown_accelerator_is_refused(tmp_path, capsys):
    export(MNIST / "mnist-8.onnx", tmp_path / "m.tar", "--target", "vanilla,c")
    meta = json.loads(_member(tmp_path / "m.tar", "metadata.json"))
    meta["modules"]["default"]["accelerators"][0]["name"] = "evil\nname"
    _rewrite_member(tmp_path / "m.tar", "metadata.json", json.dumps(meta).encode())
    assert main(["generate", str(tmp_path / "m.tar"), "--board", "host",
                 "-o", str(tmp_path / "p")]) == 2
    assert "no plugin name" in capsys.readouterr().err


def _rewrite_member(archive: Path, name: str, data: bytes) -> None:
    import io
    import tarfile

    with tarfile.open(archive) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None)
                   for m in tar.getmembers()]
    with tarfile.open(archive, "w") as tar:
        for m, content in members:
            if m.name.removeprefix("./") == name:
                content = data
                m.size = len(data)
            tar.addfile(m, io.BytesIO(content) if content is not None else None)


def test_shared_kws_fixture_present():
    assert shared_path("models", "mlperftiny_kws", "testdata_etiss").is_dir()


# ---- cmsis-nn ----------------------------------------------------------------------------------

HELLO_INT8 = MODELS / "hello_world" / "hello_world_int8.tflite"


# The host only: on the M3 CMSIS-NN runs the same portable C as on the host, and a QEMU
# project with the cmsis-nn driver runs in the micro_speech default test below (M4).
@pytest.mark.parametrize("board", ["host"])
def test_cmsis_nn_kws_and_hello_world_equal_tflite_micro(board, tmp_path, monkeypatch):
    from tests.test_export import _hello_inputs, _kws_inputs, tflm_outputs

    monkeypatch.setenv("CMSIS_NN_PATH", str(cmsis_nn_tree()))
    kws = tmp_path / "kws.tar"
    info = export(KWS, kws, "--target", "cmsis-nn,c")
    assert info["accelerators"][0]["operators"] == {
        "conv2d": 5, "depthwise_conv2d": 4, "dense": 1, "avg_pool2d": 1, "softmax": 1}
    assert info["cpu_kernel_calls"] == 0
    xs, expected = _kws_inputs()
    xs = xs if board == "host" else xs[:5]
    report = run_on(kws, board, [{"input_1": x} for x in xs], tmp_path / "kws")
    got = [o["Identity"].tobytes() for o in report.outputs]
    assert got == [w.tobytes() for w in tflm_outputs(KWS, xs)]
    assert all(c["cmsis-nn"]["conv2d_calls"] == 5 for c in report.counters)

    hello = tmp_path / "hello.tar"
    export(HELLO_INT8, hello, "--accelerator", "cmsis-nn")
    hx = _hello_inputs("int8")
    name = "serving_default_dense_input:0"
    report = run_on(hello, board, [{name: x} for x in hx], tmp_path / "hw")
    want = tflm_outputs(HELLO_INT8, hx)
    assert [next(iter(o.values())).tobytes() for o in report.outputs] == \
        [w.tobytes() for w in want]


def test_arm_dsp_kws_equals_tflite_micro_on_the_host_and_the_m4(tmp_path, monkeypatch):
    """Our DSP kernels (generator/accel/arm_dsp) take kws's convolutions, depthwise layers
    and dense layer by default on a DSP board without any CMSIS-NN tree; the same archive
    runs the portable C on the host (25 vectors) and the written-out DSP loops on the M4
    (5 vectors), byte-equal with TensorFlow Lite Micro."""
    from tests.test_export import _kws_inputs, tflm_outputs

    monkeypatch.delenv("CMSIS_NN_PATH", raising=False)
    info = export(KWS, tmp_path / "kws.tar", "--board", "qemu-mps2-an386")
    assert [(a["name"], a["operators"]) for a in info["accelerators"]] == [
        ("arm-dsp", {"conv2d": 5, "depthwise_conv2d": 4, "dense": 1})]
    xs, _ = _kws_inputs()
    want = [w.tobytes() for w in tflm_outputs(KWS, xs)]
    for board, count in (("host", len(xs)), ("qemu-mps2-an386", 5)):
        report = run_on(tmp_path / "kws.tar", board, [{"input_1": x} for x in xs[:count]],
                        tmp_path / board)
        assert [o["Identity"].tobytes() for o in report.outputs] == want[:count]
        assert all(c["arm-dsp"]["conv2d_calls"] == 6 for c in report.counters)


def test_cmsis_nn_without_a_path_is_refused_in_one_line(tmp_path, capsys):
    export(KWS, tmp_path / "kws.tar", "--target", "cmsis-nn,c")
    assert main(["generate", str(tmp_path / "kws.tar"), "--board", "host",
                 "-o", str(tmp_path / "p")]) == 2
    err = errors(capsys.readouterr().err)
    assert len(err) == 1 and "CMSIS_NN_PATH" in err[0] and "--cmsis-nn" in err[0], err
    assert not (tmp_path / "p").exists()
    # generate's --cmsis-nn names it
    assert main(["generate", str(tmp_path / "kws.tar"), "--board", "host",
                 "-o", str(tmp_path / "p"), "--cmsis-nn", str(cmsis_nn_tree())]) == 0


def test_vanilla_then_cmsis_nn_in_one_export(tmp_path, monkeypatch):
    from tests.test_export import _kws_inputs, tflm_outputs

    monkeypatch.setenv("CMSIS_NN_PATH", str(cmsis_nn_tree()))
    info = export(KWS, tmp_path / "kws.tar", "--target", "vanilla,cmsis-nn,c")
    taken = {a["name"]: a["operators"] for a in info["accelerators"]}
    assert taken == {"vanilla": {"conv2d": 5, "dense": 1},
                     "cmsis-nn": {"depthwise_conv2d": 4, "avg_pool2d": 1, "softmax": 1}}
    xs, _ = _kws_inputs()
    report = run_on(tmp_path / "kws.tar", "host", [{"input_1": x} for x in xs[:3]], tmp_path)
    assert [o["Identity"].tobytes() for o in report.outputs] == \
        [w.tobytes() for w in tflm_outputs(KWS, xs[:3])]
    assert report.counters[0]["vanilla"]["commands"] == 6
    assert report.counters[0]["cmsis-nn"]["depthwise_conv2d_calls"] == 4


def test_export_for_a_dsp_board_defaults_to_arm_dsp_then_cmsis_nn(tmp_path, monkeypatch,
                                                                   capsys):
    """On DSP boards our arm-dsp kernels come first (they need nothing from the user), then
    CMSIS-NN when a tree is known; on Helium boards arm-dsp takes only depthwise layers
    (hello_world has none)."""
    monkeypatch.delenv("CMSIS_NN_PATH", raising=False)
    assert main(["export", str(HELLO_INT8), "-o", str(tmp_path / "a.tar"),
                 "--board", "qemu-mps2-an386"]) == 0
    assert "cannot be used: set CMSIS_NN_PATH" in capsys.readouterr().out
    assert [a.name for a in read_mlf(tmp_path / "a.tar").modules[0].accelerators] == \
        ["arm-dsp"]
    monkeypatch.setenv("CMSIS_NN_PATH", str(cmsis_nn_tree()))
    for board, want in (("qemu-mps2-an386", ["arm-dsp"]), ("qemu-mps2-an385", []),
                        ("qemu-mps3-an547", ["cmsis-nn"])):
        out = tmp_path / f"{board}.tar"
        assert main(["export", str(HELLO_INT8), "-o", str(out), "--board", board]) == 0
        assert [a.name for a in read_mlf(out).modules[0].accelerators] == want
    # an explicit target wins over the board's default
    assert main(["export", str(HELLO_INT8), "-o", str(tmp_path / "c.tar"), "--board",
                 "qemu-mps2-an386", "--target", "c"]) == 0
    assert read_mlf(tmp_path / "c.tar").modules[0].accelerators == []


@pytest.mark.qemu
def test_dsp_default_runs_a_one_channel_depthwise_as_our_convolution(tmp_path, monkeypatch):
    """micro_speech's first layer (a 10x8 depthwise, stride 2, one input channel, channel
    multiplier 8): on a DSP core arm-dsp runs it as the convolution it is (CMSIS-NN v7
    would run it in portable C: 1,493,640 -> 997,520 instructions per inference on the M4);
    on the M55 CMSIS-NN takes it. Outputs TensorFlow Lite Micro's on the M4."""
    from tests.test_export import tflm_outputs

    require_board_tools("qemu-mps2-an386")
    monkeypatch.setenv("CMSIS_NN_PATH", str(cmsis_nn_tree()))
    model = MODELS / "corpus" / "tflm_micro_speech" / "micro_speech_quantized.tflite"
    m4 = export(model, tmp_path / "m4.tar", "--board", "qemu-mps2-an386")
    assert [(a["name"], a["operators"]) for a in m4["accelerators"]] == [
        ("arm-dsp", {"depthwise_conv2d": 1, "dense": 1}), ("cmsis-nn", {"softmax": 1})]
    m55 = export(model, tmp_path / "m55.tar", "--board", "qemu-mps3-an547")
    taken = {a["name"]: a["operators"] for a in m55["accelerators"]}
    assert taken == {"arm-dsp": {}, "cmsis-nn": {"depthwise_conv2d": 1, "dense": 1,
                                                 "softmax": 1}}
    explicit = export(model, tmp_path / "any.tar", "--target", "cmsis-nn,c")
    assert explicit["accelerators"][0]["operators"]["depthwise_conv2d"] == 1
    rng = np.random.default_rng(2)
    xs = [rng.integers(-128, 128, (1, 1960), dtype=np.int8) for _ in range(3)]
    name = m4["inputs"][0]["name"]
    report = run_on(tmp_path / "m4.tar", "qemu-mps2-an386", [{name: x} for x in xs], tmp_path)
    got = [next(iter(o.values())).tobytes() for o in report.outputs]
    assert got == [w.tobytes() for w in tflm_outputs(model, xs)]


def test_archive_for_another_driver_interface_is_refused(tmp_path, capsys):
    """An archive records the driver interface (Accelerator.abi) its calls were made for;
    a project with another driver would call it with the wrong arguments."""
    export(MNIST / "mnist-8.onnx", tmp_path / "m.tar", "--target", "vanilla,c")
    meta = json.loads(_member(tmp_path / "m.tar", "metadata.json"))
    entry = meta["modules"]["default"]["accelerators"][0]
    assert entry["abi"] == registry.find("vanilla").abi
    entry["abi"] = entry["abi"] + 1
    _rewrite_member(tmp_path / "m.tar", "metadata.json", json.dumps(meta).encode())
    assert main(["generate", str(tmp_path / "m.tar"), "--board", "host",
                 "-o", str(tmp_path / "p")]) == 2
    err = errors(capsys.readouterr().err)
    assert len(err) == 1 and "driver interface 2, this microtvm-gen's is 1" in err[0]
    assert not (tmp_path / "p").exists()
