"""`microtvm-gen report`: memory by region equals the ELF's sections byte for byte, the
layers' weights add up to the archive's constants, MACs are the layers' own arithmetic."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from generator.boards import load_board
from generator.cli import main
from generator.project.generate import generate
from generator.report.linkmap import FILL, read_map
from tests.conftest import REPO, archive, built_once, exported_once, require_board_tools

KWS = REPO / "tests" / "fixtures" / "models" / "mlperftiny_kws" / "kws_ref_model.tflite"
MNIST = REPO / "examples" / "mnist" / "mnist-8.onnx"
MODELS = {"kws": KWS, "mnist": MNIST}
BOARDS = ("qemu-mps2-an385", "host")


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, Path]:
    return {name: exported_once(tmp_path_factory, model) for name, model in MODELS.items()
            if model.is_file()}


@pytest.fixture(scope="module")
def built(archives, tmp_path_factory) -> dict[tuple[str, str], Path]:
    return {(name, board): built_once(tmp_path_factory, MODELS[name], board)
            for board in BOARDS for name in archives}


def _report(project: Path, capsys, *extra: str) -> dict:
    assert main(["report", str(project), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _case(built, name: str, board: str) -> Path:
    if (name, board) not in built:
        pytest.skip(f"{MODELS[name]} is not here")
    return built[(name, board)]


def _tool(board: str, name: str, project: Path) -> str:
    return subprocess.run([load_board(board).tool(name), *(["-A"] if name == "size" else
                                                          ["-h"]),
                           str(project / "build" / "firmware.elf")],
                          check=True, capture_output=True, text=True).stdout


def _allocated_sections(project: Path, board: str) -> dict[str, tuple[int, int, int]]:
    """section → (size as `size -A` prints it, run address, load address), for the sections
    `objdump -h` flags ALLOC (size -A lists the debug sections too)."""
    sizes = {}
    for line in _tool(board, "size", project).splitlines()[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            sizes[parts[0]] = int(parts[1])
    lines = _tool(board, "objdump", project).splitlines()
    out = {}
    for header, flags in zip(lines, lines[1:], strict=False):
        parts = header.split()
        if len(parts) == 7 and parts[0].isdigit() and "ALLOC" in flags:
            out[parts[1]] = (sizes[parts[1]], int(parts[3], 16), int(parts[4], 16))
    return out


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_regions_equal_the_elf_sections(built, capsys, name, board):
    """Each region's blocks add up to the sections `size -A` gives it, byte for byte (a
    section stored in flash and run from RAM, like .data, counts in both)."""
    project = _case(built, name, board)
    report = _report(project, capsys)
    sections = _allocated_sections(project, board)
    for region in report["regions"]:
        inside = {}
        for section, (size, vma, lma) in sections.items():
            for where, suffix in ((vma, ""), (lma, " (load image)")):
                if size and (suffix == "" or lma != vma) and (
                        region["size"] is None
                        or region["origin"] <= where < region["origin"] + region["size"]):
                    inside[section + suffix] = size
        assert region["sections"] == inside, region["name"]
        in_blocks = sum(b["bytes"] for b in region["blocks"] if b["category"] != "stack")
        assert in_blocks == sum(inside.values()), region["name"]
    if board != "host":
        ram = next(r for r in report["regions"] if r["name"] == "RAM")
        stack = [b["bytes"] for b in ram["blocks"] if b["category"] == "stack"]
        assert stack == [load_board(board).stack_bytes or 65536]
        flash = next(r for r in report["regions"] if r["name"] == "FLASH")
        assert flash["free"] == flash["size"] - flash["used"] > 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_layers_weights_add_up_to_the_constants(built, archives, capsys, name):
    project = _case(built, name, "qemu-mps2-an385")
    report = _report(project, capsys)
    assert main(["info", str(archives[name]), "--json"]) == 0
    module = json.loads(capsys.readouterr().out)["modules"][0]
    constants = module["constants_size_bytes"]
    assert sum(layer["weights_bytes"] for layer in report["layers"]) == constants
    assert report["totals"]["weights_bytes"] == constants
    flash = next(r for r in report["regions"] if r["name"] == "FLASH")
    weights = [b for b in flash["blocks"] if b["category"] == "weights"]
    assert sum(b["bytes"] for b in weights) == constants
    kernels = {b["label"]: b["bytes"] for b in flash["blocks"] if b["category"] == "kernel-code"}
    for layer in report["layers"]:
        assert layer["code_bytes"] == kernels[layer["kernel"]]


def _expected_macs(layer: dict) -> int:
    """Multiply-accumulates from the layer's shapes (the whole window at the borders)."""
    out = math.prod(layer["outputs"][0]["shape"])
    weights = [t for t in layer["inputs"] if t["kind"] == "constant"]
    ops = layer["operators"]
    if ops[0] == "conv2d":
        w = weights[0]["shape"]
        out_channels = w[0]
        return out * math.prod(w) // out_channels
    if ops[0] == "depthwise_conv2d":
        kh, kw, _ = weights[0]["shape"]
        return out * kh * kw
    if ops[0] in ("dense", "matmul"):
        w = weights[0]["shape"]
        in_features = w[1] if ops[0] == "dense" else w[0]
        return out * in_features
    return 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_macs_are_each_layers_arithmetic(built, capsys, name):
    report = _report(_case(built, name, "host"), capsys)
    for layer in report["layers"]:
        assert layer["macs"] == _expected_macs(layer), layer["kernel"]
    expected = {"kws": 2_656_768, "mnist": 786_560}[name]  # DS-CNN S; ONNX model zoo mnist-8
    assert report["totals"]["macs"] == expected


def test_text_report_and_pictures(built, tmp_path, capsys):
    project = _case(built, "kws", "qemu-mps2-an385")
    html, svg = tmp_path / "out" / "kws.html", tmp_path / "out" / "kws.svg"
    assert main(["report", str(project), "--html", str(html), "--svg", str(svg)]) == 0
    text = capsys.readouterr().out
    assert "weights" in text and "q_conv2d" in text and "2,656,768 MACs" in text
    for path in (html, svg, tmp_path / "out" / "kws.layers.svg"):
        assert path.is_file() and f"wrote {path}" in text
    assert "q_depthwise_conv2d" in html.read_text()


def test_refusals_are_one_line(built, tmp_path, capsys):
    project = _case(built, "kws", "qemu-mps2-an385")
    unbuilt = tmp_path / "unbuilt"
    generate(project / "model.tar", "qemu-mps2-an385", unbuilt)
    broken = tmp_path / "broken"
    shutil.copytree(project, broken, symlinks=True)
    (broken / "build" / "firmware.elf").write_bytes(b"\x7fELF" + b"\0" * 20)
    cases = [
        (["report", str(broken)], "not a readable ELF file"),
        (["report", str(unbuilt)], "not built yet"),
        (["report", str(tmp_path / "nothing")], "nothing"),
        (["report", str(project), "--html", str(project / "report.html")], "inside the input"),
        (["report", str(project), "--svg", str(tmp_path)], "a directory is there"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err
    assert not (project / "report.html").exists()


def test_link_map_pieces(tmp_path):
    """A map as GNU ld writes it: long names on their own line, fill, a load address."""
    text = "\n".join([
        "Archive member included to satisfy reference by file (symbol)", "",
        "Linker script and memory map", "",
        "LOAD a.o",
        "                0x00010000                        STACK = 0x10000",
        ".text           0x00000000       0x30",
        " *(.text .text.*)",
        " .text          0x00000000       0x10 a.o",
        "                0x00000000                main",
        " .text.a_very_long_function_name_that_wraps",
        "                0x00000010       0x1c /usr/lib/libc.a(lib_a-memcpy.o)",
        " *fill*         0x0000002c        0x4 ",
        "",
        ".a_long_output_section_name",
        "                0x20000000        0x8 load address 0x00000030",
        " .data          0x20000000        0x8 b.o",
        "OUTPUT(firmware.elf elf32-littlearm)",
    ])
    path = tmp_path / "x.map"
    path.write_text(text)
    text_section, data = read_map(path)
    assert (text_section.name, text_section.addr, text_section.size) == (".text", 0, 0x30)
    assert [(p.name, p.size, p.source) for p in text_section.pieces] == [
        (".text", 0x10, "a.o"),
        (".text.a_very_long_function_name_that_wraps", 0x1c,
         "/usr/lib/libc.a(lib_a-memcpy.o)"),
        (FILL, 4, FILL)]
    assert (data.name, data.addr, data.load_addr) == (".a_long_output_section_name",
                                                      0x20000000, 0x30)
    (tmp_path / "y.map").write_text("not a map")
    from generator.errors import InputError
    with pytest.raises(InputError, match="not a GNU ld map"):
        read_map(tmp_path / "y.map")


def test_kernel_operators_are_read_from_names():
    from generator.export.opnames import kernel_operators

    assert kernel_operators("fused_conv2d1_add1_relu1") == ["conv2d", "add", "relu"]
    assert kernel_operators("fused_max_pool2d_relu") == ["max_pool2d", "relu"]
    assert kernel_operators("q_depthwise_conv2d") == ["depthwise_conv2d"]
    assert kernel_operators("max_pool2d1") == ["max_pool2d"]
    assert kernel_operators("our_own7") == ["our_own"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_info_memory_before_generate(built, archives, capsys, name):
    """The archive's own numbers equal what the linked firmware holds; the code is left to
    the link, and said so."""
    estimate = json.loads(_cli(capsys, ["info", "--memory", str(archives[name]), "--board",
                                        "qemu-mps2-an385", "--json"]))
    linked = _report(_case(built, name, "qemu-mps2-an385"), capsys)
    assert estimate["estimate"] is True and linked["estimate"] is False

    def blocks(report, category):
        return sum(b["bytes"] for r in report["regions"] for b in r["blocks"]
                   if b["category"] == category)

    for category in ("weights", "activations", "io", "stack"):
        assert blocks(estimate, category) == blocks(linked, category), category
    strip = ("code_bytes", "profile")
    assert [{k: v for k, v in la.items() if k not in strip} for la in estimate["layers"]] == \
        [{k: v for k, v in la.items() if k not in strip} for la in linked["layers"]]
    assert any("known after the link" in note for note in estimate["notes"])


def test_info_memory_refusals(archives, capsys):
    kws = str(archives["kws"])
    for argv, words in ((["info", "--memory", kws], "--memory and --board go together"),
                        (["info", kws, "--board", "host"], "--memory and --board go together"),
                        (["info", "--memory", str(KWS), "--board", "host"], "export it first"),
                        (["info", "--memory", kws, "--board", "nosuch"], "unknown board")):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err


def _cli(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def test_hostile_layer_records_are_one_line(tmp_path):
    """metadata.json is the archive's: every field the report takes is checked."""
    from generator.errors import InputError
    from generator.report.layers import layers_of

    good = {"kernel": "k", "operators": ["conv2d"], "macs": 1, "weights_bytes": 0,
            "implementation": "ours", "args": [{"role": "input", "kind": "input",
                                                "shape": [1], "dtype": "int8", "bytes": 1,
                                                "ref": "x"}]}
    assert layers_of({"layers": [good]}, "default")[0].inputs[0].where == "x"
    bad = [{**good, "kernel": "\x1b[2Jk"}, {**good, "macs": -1}, {**good, "macs": True},
           {**good, "operators": "conv2d"}, {**good, "args": [{**good["args"][0], "kind": "x"}]},
           {**good, "args": [{**good["args"][0], "shape": ["1"]}]}, "not an object",
           {**good, "kernel": "k" * 300}]
    for record in bad:
        with pytest.raises(InputError):
            layers_of({"layers": [record]}, "default")
    with pytest.raises(InputError):
        layers_of({"layers": {}}, "default")


def test_library_report(built, archives, tmp_path, capsys):
    """A --format library output, compiled for the board's core: the same kernel code and
    weights the board's firmware holds, the layers, and the refusals."""
    from generator.project.library import generate_library

    lib = tmp_path / "kws-lib"
    generate_library(archives["kws"], lib)
    assert (lib / "model" / "metadata.json").is_file()
    report = _report(lib, capsys, "--board", "qemu-mps2-an385")
    firmware = _report(_case(built, "kws", "qemu-mps2-an385"), capsys)
    assert report["estimate"] is True

    def kernels(r):
        return {b["label"]: b["bytes"] for region in r["regions"] for b in region["blocks"]
                if b["category"] == "kernel-code"}

    assert kernels(report) == kernels(firmware)
    flash = next(r for r in report["regions"] if r["name"] == "FLASH")
    assert sum(b["bytes"] for b in flash["blocks"] if b["category"] == "weights") == \
        firmware["totals"]["weights_bytes"]
    assert [la["code_bytes"] for la in report["layers"]] == \
        [la["code_bytes"] for la in firmware["layers"]]
    for argv, words in ((["report", str(lib)], "name the board"),
                        (["report", str(_case(built, "kws", "host")), "--board", "host"],
                         "--board is for library outputs")):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0], err


def test_graph_executor_project(tmp_path, capsys):
    """An archive TVM 0.11 wrote for the graph executor: its parameters are weights, its
    storage and arena activations, before and after the link alike; no layers recorded."""
    from generator.project.generate import generate

    require_board_tools("qemu-mps2-an385")
    magic_wand = archive("hannah-magicwand-graph-c-tvm0.11dev")
    project = tmp_path / "graph"
    generate(magic_wand, "qemu-mps2-an385", project)
    assert main(["build", str(project)]) == 0
    capsys.readouterr()
    report = _report(project, capsys)
    estimate = json.loads(_cli(capsys, ["info", "--memory", str(magic_wand), "--board",
                                        "qemu-mps2-an385", "--json"]))

    def labelled(r, label):
        return [b["bytes"] for region in r["regions"] for b in region["blocks"]
                if b["label"] == label]

    assert labelled(report, "graph storage") == labelled(estimate, "graph storage") != []
    (params,) = labelled(report, "graph parameters")
    assert params >= estimate["totals"]["flash"]  # the .params blob: tensors and their header
    assert report["layers"] == [] and any("no layers" in n for n in report["notes"])
    assert report["stack"]["bound_bytes"] is None  # the executor calls kernels by pointer
