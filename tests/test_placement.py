"""generate --place: the model's activations, scratch, weights and code in the board's memory
regions (issue 28). The request and its refusals; the linker text; on qemu-mps3-an547 the
ELF's addresses and a run that gives the same bytes as without placement; the
NUCLEO-F746ZG's RAM window giving up the DTCM."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from generator.boards import load_board
from generator.build import build
from generator.cli import main
from generator.errors import ProjectError
from generator.mlf.reader import load_mlf
from generator.project.generate import generate
from generator.project.placement import linker_files, parse_request, place
from generator.run import run_project
from tests.conftest import REPO, SHARED, exported_once, require_board_tools

KWS = REPO / "tests" / "fixtures" / "models" / "mlperftiny_kws" / "kws_ref_model.tflite"
AN547 = "qemu-mps3-an547"
CMSIS_NN = SHARED / "third_party" / "CMSIS-NN"


@pytest.fixture(scope="module")
def kws(tmp_path_factory) -> Path:
    """kws exported for the generic C kernels (whatever CMSIS_NN_PATH says)."""
    return exported_once(tmp_path_factory, KWS)


def _module(archive: Path):
    return load_mlf(archive)[0].module()


def test_the_request():
    assert parse_request(None) is None and parse_request("auto") == "auto"
    assert parse_request("activations=dtcm, weights=DDR") == {"activations": "DTCM",
                                                              "weights": "DDR"}
    for bad in ("activations", "stack=DTCM", "activations=DTCM,activations=SRAM",
                "activations="):
        with pytest.raises(ProjectError, match="--place"):
            parse_request(bad)


def test_refusals_name_the_numbers(kws):
    module = _module(kws)
    f746 = load_board("nucleo-f746zg")
    cases = [
        ({"weights": "ITCM_RAM"}, "weights 27,248 B do not fit ITCM_RAM (16,384 B at 0x00000000)"),
        ({"activations": "FLASH"}, "activations cannot go in FLASH: it is flash, read-only"),
        ({"code": "DTCM"}, "code cannot go in DTCM: the board file does not mark it executable"),
        ({"activations": "SRAM1"}, "SRAM1 lies inside the RAM window of board 'nucleo-f746zg'"),
        ({"activations": "QSPI"}, "board 'nucleo-f746zg' has no memory region QSPI"),
    ]
    for request, message in cases:
        with pytest.raises(ProjectError, match=message.replace("(", r"\(").replace(")", r"\)")):
            place(request, f746, module)
    with pytest.raises(ProjectError, match="lists no memory regions"):
        place({"activations": "DTCM"}, load_board("qemu-mps2-an385"), module)


def test_auto_puts_hot_and_small_first(kws):
    module = _module(kws)
    an547 = place("auto", load_board(AN547), module)
    assert an547 is not None
    # Activations leave the SRAM window for the DTCM; the weights stay in the ITCM, as fast.
    assert {i: r.name for i, r in an547.regions.items()} == {"activations": "DTCM"}
    f746 = place("auto", load_board("nucleo-f746zg"), module)
    assert f746 is not None
    assert {i: r.name for i, r in f746.regions.items()} == {"activations": "ITCM_RAM",
                                                            "weights": "DTCM"}
    # The DTCM is taken from the start of the RAM window.
    assert (f746.board.ram_origin, f746.board.ram_bytes) == (0x20010000, 256 * 1024)


def test_linker_text(kws):
    placement = place({"activations": "DTCM", "weights": "DDR"}, load_board(AN547),
                      _module(kws))
    files = {k: v.decode() for k, v in linker_files(placement).items()}
    assert "MTVG_DTCM (rw) : ORIGIN = 0x30000000, LENGTH = 0x80000" in files["mtvg_regions.ld"]
    text = files["mtvg_placement.ld"]
    assert ".mtvg_activations (NOLOAD) : ALIGN(16) { *(.bss.tvmgen_*_workspace_pool)" in text
    assert "} > MTVG_DDR AT> FLASH" in text  # weights: stored in flash, copied at reset
    assert "LONG(LOADADDR(.mtvg_weights)) LONG(ADDR(.mtvg_weights))" in text
    empty = linker_files(None)
    assert all(b"no memory placed" in v for v in empty.values())


def _symbols(elf: Path) -> dict[str, int]:
    done = subprocess.run(["arm-none-eabi-nm", str(elf)], check=True, capture_output=True,
                          text=True)
    return {p[2]: int(p[0], 16) for p in map(str.split, done.stdout.splitlines()) if len(p) == 3}


def _inside(address: int, name: str, board: str = AN547) -> bool:
    region = next(r for r in load_board(board).regions if r.name == name)
    return region.origin <= address < region.end


def _kws_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(28)
    return [rng.integers(-128, 128, size=(1, 49, 10, 1), dtype=np.int8) for _ in range(2)]


def _kws_outputs(project: Path) -> list[bytes]:
    report = run_project(project, [{"input_1": x} for x in _kws_inputs()])
    return [np.asarray(o["Identity"]).tobytes() for o in report.outputs]


@pytest.fixture(scope="module")
def unplaced() -> list[bytes]:
    """What kws gives without placement on every board: TFLite Micro's reference kernels'
    bytes (tests/test_export.py checks every board against them, the AN547 included)."""
    from tests.test_export import tflm_outputs

    return [np.asarray(o).tobytes() for o in tflm_outputs(KWS, _kws_inputs())]


def test_an547_activations_dtcm_weights_ddr_scratch_sram(kws, unplaced, tmp_path, monkeypatch):
    """As asked: the ELF's symbols sit in the regions named, the run's bytes are those of the
    same model without placement. With CMSIS-NN, whose driver has a scratch
    buffer, when a CMSIS-NN tree is at hand (../shared); else with our kernels alone."""
    require_board_tools(AN547)
    archive, kernels = kws, "c"
    if (CMSIS_NN / "Include" / "arm_nnfunctions.h").is_file():
        monkeypatch.setenv("CMSIS_NN_PATH", str(CMSIS_NN))
        assert main(["export", str(KWS), "-o", str(tmp_path / "kws-nn.tar"), "--board", AN547,
                     "--accelerator", "cmsis-nn"]) == 0
        archive, kernels = tmp_path / "kws-nn.tar", "cmsis-nn"
    project = tmp_path / "p"
    generate(archive, AN547, project, place="activations=DTCM,weights=DDR,scratch=SRAM")
    record = json.loads((project / "project.json").read_text())["placement"]
    assert {k: v["region"] for k, v in record.items()} == {
        "activations": "DTCM", "weights": "DDR", "scratch": "SRAM"}
    symbols = _symbols(build(project).elf)
    assert _inside(symbols["tvmgen_default_workspace_pool"], "DTCM")
    consts = [a for s, a in symbols.items() if s.startswith("tvmgen_default_const_")]
    assert consts and all(_inside(a, "DDR") for a in consts)
    if kernels == "cmsis-nn":
        assert _inside(symbols["scratch"], "SRAM")  # the CMSIS-NN driver's buffer
    else:
        assert "scratch" not in symbols
    assert _kws_outputs(project) == unplaced


def test_f746_gives_up_its_dtcm(kws, tmp_path):
    """Activations in the DTCM at the start of the NUCLEO-F746ZG's RAM window: the window
    starts after it, the pool sits in it (a build; no board needed)."""
    require_board_tools("nucleo-f746zg")
    project = tmp_path / "p"
    generate(kws, "nucleo-f746zg", project, place="activations=DTCM")
    symbols = _symbols(build(project).elf)
    assert _inside(symbols["tvmgen_default_workspace_pool"], "DTCM", "nucleo-f746zg")
    assert symbols["__data_start__"] == 0x20010000  # .data, .bss and the stack follow


def test_cli_refusal_is_one_line(kws, tmp_path, capsys):
    assert main(["generate", str(kws), "--board", "nucleo-f746zg", "-o", str(tmp_path / "p"),
                 "--place", "weights=ITCM_RAM"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "do not fit ITCM_RAM (16,384 B at 0x00000000)" in err[0]
    assert not (tmp_path / "p").exists()
