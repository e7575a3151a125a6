"""Archives from the wild that each taught the reader a rule (issue: trust).

micro-kws (MLF v6, flat metadata, names with ':'), the SNU graph archive with params
(TVM 0.18), the ESP32 CIFAR-10 USMP archive (TVM 0.14.dev) and letscope (TVM 0.13.dev,
Cortex-M DSP kernels): each runs on the host and in QEMU with the outputs its SOURCE.md
gives, or is refused with the reason.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from generator.boards import list_boards, load_board
from generator.cli import main
from generator.project.generate import generate
from generator.run import run_project
from tests.conftest import BOARDS, require_board_tools, shared_path

pytestmark = pytest.mark.slow


@pytest.fixture(params=BOARDS)
def board(request):
    require_board_tools(request.param)
    return request.param


def _archive(name: str):
    return shared_path("mlf", name, "model.tar")


def test_microkws_v6_yes_no(tmp_path, board):
    data = shared_path("mlf", "microkws-esp32c3-yesno-aot-v6-tvm0.9dev", "testdata")
    project = tmp_path / "p"
    generate(_archive("microkws-esp32c3-yesno-aot-v6-tvm0.9dev"), board, project)
    samples = [{"serving_default_input:0": np.fromfile(data / f"{w}_0a2b400e_nohash_0.raw",
                                                         dtype=np.int8).reshape(1, 1960)}
               for w in ("yes", "no")]
    report = run_project(project, samples)
    scores = [o["StatefulPartitionedCall_0"].reshape(-1).tolist() for o in report.outputs]
    assert scores == [[-128, -128, 127, -128], [-128, -128, -128, 127]]


def test_esp32_cifar10_usmp_frog(tmp_path, board):
    data = shared_path("mlf", "esp32-cifar10-aot-usmp-tvm0.14dev", "testdata")
    body = re.search(r"input_data\[\]\s*=\s*\{([^}]*)\}", (data / "input_data.h").read_text())
    x = np.array([float(v) for v in body.group(1).split(",") if v.strip()], dtype=np.float32)
    project = tmp_path / "p"
    generate(_archive("esp32-cifar10-aot-usmp-tvm0.14dev"), board, project)
    report = run_project(project, [{"input_1": x.reshape(1, 32, 32, 3)}])
    y = report.outputs[0]["output"].reshape(-1)
    assert int(np.argmax(y)) == 6
    assert abs(float(y[6]) - 0.999412) < 1e-4


# The SNU archive's tensors are 1.2 MB (two float inputs of 1x32x56x56, one output): in
# QEMU they cross the link at the UART's pace (27 CPU s on qemu-riscv32, 50 on the MPS2
# boards). The archive, not the board, is what this test is about: it runs on the host; the
# graph executor with parameters runs in QEMU with the magic-wand archive (test_graph.py).
SNU_BOARDS = ["host"]


@pytest.mark.parametrize("snu_board", SNU_BOARDS)
def test_snu_graph_with_params(tmp_path, snu_board):
    require_board_tools(snu_board)
    board = snu_board
    data = shared_path("mlf", "snu-conv-graph-syslib-params-tvm0.18", "testdata")
    project = tmp_path / "p"
    generate(_archive("snu-conv-graph-syslib-params-tvm0.18"), board, project)
    x1, x2 = np.load(data / "input_x1.npy"), np.load(data / "input_x2.npy")
    report = run_project(project, [{"x1": x1, "x2": x2}])
    y = report.outputs[0]["output"].reshape(1, 32, 56, 56)
    assert np.abs(y - np.load(data / "expected_output_numpy.npy")).max() < 1e-4


def test_letscope_needs_a_dsp_core(tmp_path, capsys):
    """TVM's Cortex-M DSP micro-kernels (<arm_acle.h>): refused on cores without DSP."""
    for name in BOARDS:
        assert main(["generate", str(_archive("letscope-dense3-aot-c-m7-tvm0.13dev")),
                     "--board", name, "-o", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert "DSP" in err and "arm_acle.h" in err and len(err.splitlines()) == 1
        assert not (tmp_path / name).exists()


DSP_QEMU_BOARDS = [b for b in list_boards()
                   if b.startswith("qemu-") and "dsp" in getattr(load_board(b), "features", ())]


@pytest.mark.skipif(not DSP_QEMU_BOARDS, reason="no QEMU board with the DSP extension yet")
@pytest.mark.parametrize("dsp_board", DSP_QEMU_BOARDS[:1])
def test_letscope_on_a_dsp_core(tmp_path, dsp_board):
    require_board_tools(dsp_board)
    project = tmp_path / "p"
    generate(_archive("letscope-dense3-aot-c-m7-tvm0.13dev"), dsp_board, project)
    x = np.array([[36, 42, 15, 38, 64]], dtype=np.int8)
    report = run_project(project, [{"serving_default_input_1:0": x}])
    assert report.outputs[0]["StatefulPartitionedCall_0"].reshape(-1).tolist() == [72]
