"""templates/zephyr: projects as Zephyr 4.x applications.

Rendering, the board table, the Project API server and the generated CMake / prj.conf text are
tested always (fast, no Zephyr tree). Builds and QEMU runs need a Zephyr tree: set
MTVG_TEST_ZEPHYR_BASE (and, outside a west workspace, MTVG_TEST_ZEPHYR_MODULES, and
MTVG_TEST_ZEPHYR_PYTHON for a python3 with Zephyr's requirements); docs/zephyr.md.
conftest.py removes ZEPHYR_BASE for every test, so these tests pass the tree explicitly.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from generator.cli import main
from generator.errors import BoardError, ProjectError, ToolchainError
from generator.project.generate import generate
from generator.project.zephyr import (
    effective_board,
    is_zephyr_template,
    load_board_table,
    toolchain_env,
)
from generator.project_api.client import ProjectClient
from generator.project_api.handler import ProjectServer
from generator.resources import templates_dir
from tests.conftest import REPO, YES_NO, archive, shared_path

TEMPLATE = templates_dir() / "zephyr"
SINE = "gromero-sine-aot-c-v5"
YES_NO_ARCHIVE = "guberti-yesno-aot-packed-v5"
KWS = "etiss-kws-aot-usmp-tvm0.16"
# Zephyr QEMU board -> the CRT board whose output must be the same bytes: one with the same
# floating point (AN521's CPU0 has no FPU in Zephyr: soft float like the Cortex-M3, while the
# CRT Cortex-M33 board, qemu-mps2-an505, uses its FPU and fuses multiply-adds).
QEMU_ZEPHYR_BOARDS = {"mps2/an385": "qemu-mps2-an385", "mps2/an521/cpu0": "qemu-mps2-an385",
                      "qemu_cortex_m3": "qemu-mps2-an385", "qemu_riscv32": "qemu-riscv32"}


class Physical(NamedTuple):
    hal: str  # the folder under modules/hal its build needs
    default: str  # its default west runner, and how that one picks probe SN1
    default_serial: list[str]
    other: str  # another west runner it offers
    other_serial: list[str]


OPENOCD_SN1 = ["--cmd-pre-init", "adapter serial SN1"]
PHYSICAL = {
    "nucleo_f746zg": Physical("stm32", "openocd", OPENOCD_SN1, "jlink", ["--dev-id", "SN1"]),
    "nucleo_l4r5zi": Physical("stm32", "openocd", OPENOCD_SN1, "stm32cubeprogrammer", []),
    "nrf5340dk/nrf5340/cpuapp": Physical("nordic", "nrfjprog", ["--dev-id", "SN1"], "jlink",
                                         ["--dev-id", "SN1"]),
}
ZEPHYR_BOARDS = sorted([*QEMU_ZEPHYR_BOARDS, *PHYSICAL])


# ---- Always: no Zephyr tree needed ----------------------------------------------------------


def test_board_table():
    table = load_board_table(TEMPLATE)
    assert sorted(table) == ZEPHYR_BOARDS
    an385 = table["mps2/an385"]
    assert (an385.qemu_machine, an385.qemu_cpu, an385.exit) == ("mps2-an385", "cortex-m3",
                                                                 "semihosting")
    m3 = effective_board(table["qemu_cortex_m3"])
    assert (m3.name, m3.platform, m3.ram_bytes, m3.flash_bytes, m3.linker_script) == (
        "qemu_cortex_m3", "zephyr", 65536, 262144, None)
    assert m3.qemu is not None and m3.qemu.machine == "lm3s6965evb" and m3.flash is None
    m33 = effective_board(table["mps2/an521/cpu0"])
    assert m33.qemu is not None and (m33.qemu.machine, m33.qemu.cpu) == ("mps2-an521",
                                                                         "cortex-m33")
    # No FPU, no DSP (Zephyr's CPU0): soft float although the stand-in (AN505) is hard float.
    assert m33.features == () and "-mfloat-abi=soft" in m33.cflags
    assert not any(f.startswith("-mfpu") for f in m33.cflags + m33.ldflags)
    rv = effective_board(table["qemu_riscv32"])  # RISC-V: QEMU virt without firmware (-bios)
    assert (rv.toolchain, rv.arch, rv.name) == ("riscv64-unknown-elf", "riscv", "qemu_riscv32")
    assert rv.qemu is not None and rv.qemu.binary == "qemu-system-riscv32"
    assert rv.qemu.args == ("-bios", "none", "-m", "256") and rv.qemu.icount_shift == 0
    assert is_zephyr_template(TEMPLATE) and not is_zephyr_template(templates_dir() / "crt")


@pytest.mark.parametrize("zboard", sorted(PHYSICAL))
def test_physical_board_entry(zboard):
    """A physical board: its link is the probe's serial port, `west flash` puts it on."""
    default, other = PHYSICAL[zboard].default, PHYSICAL[zboard].other
    board = effective_board(load_board_table(TEMPLATE)[zboard])
    assert (board.name, board.link, board.qemu, board.clock_hz) == (zboard, "serial", None,
                                                                      None)
    assert board.flash is not None and board.flash.runner == "west"
    west = board.flash.runners["west"]
    assert west["runner"] == default and other in west["runners"]
    assert board.usb is not None and board.usb.vid in (0x0483, 0x1366)
    assert "fpu" in board.features and board.arch == "arm"


def test_board_table_errors(tmp_path):
    shutil.copytree(TEMPLATE, tmp_path / "t")
    table = json.loads((tmp_path / "t" / "boards.json").read_text())
    table["boards"]["mps2/an385"]["exit"] = "halt"
    (tmp_path / "t" / "boards.json").write_text(json.dumps(table))
    with pytest.raises(ProjectError, match=r"board 'mps2/an385' exit 'halt' is not one of"):
        load_board_table(tmp_path / "t")
    table["boards"]["mps2/an385"]["exit"] = "reboot"
    table["boards"]["nucleo_f746zg"]["flash"]["west_runner"] = "stlink"
    (tmp_path / "t" / "boards.json").write_text(json.dumps(table))
    with pytest.raises(ProjectError, match=r"board 'nucleo_f746zg' needs flash.west_runner, "
                       r"one of flash.west_runners"):
        load_board_table(tmp_path / "t")
    del table["boards"]["nucleo_f746zg"]["flash"]
    del table["boards"]["mps2/an385"]["ram_bytes"]
    (tmp_path / "t" / "boards.json").write_text(json.dumps(table))
    with pytest.raises(ProjectError, match=r"missing or invalid field 'ram_bytes'"):
        load_board_table(tmp_path / "t")


@pytest.mark.parametrize("zboard", ZEPHYR_BOARDS)
def test_render_standalone(tmp_path, zboard):
    table = load_board_table(TEMPLATE)
    out = tmp_path / "p"
    generate(archive(SINE), zboard, out, template=TEMPLATE)
    cmake = (out / "CMakeLists.txt").read_text()
    assert "find_package(Zephyr REQUIRED HINTS $ENV{ZEPHYR_BASE})" in cmake
    assert f"  set(BOARD {zboard})" in cmake
    assert "target_sources(app PRIVATE" in cmake
    assert "${CMAKE_CURRENT_SOURCE_DIR}/platform/platform.c" in cmake
    assert "${CMAKE_CURRENT_SOURCE_DIR}/app/app.c" in cmake
    semihosting = int(table[zboard].exit == "semihosting")
    assert f"MTVG_ZEPHYR_SEMIHOSTING_EXIT={semihosting}" in cmake
    conf = (out / "prj.conf").read_text().splitlines()
    stack = table[zboard].main_stack_bytes
    for line in ("CONFIG_UART_INTERRUPT_DRIVEN=y", "CONFIG_UART_CONSOLE=n", "CONFIG_PRINTK=n",
                 "CONFIG_MINIMAL_LIBC=y", f"CONFIG_MAIN_STACK_SIZE={stack}"):
        assert line in conf
    # Hard float where the stand-in's flags (and so the libm multilib) are hard float.
    hard = "-mfloat-abi=hard" in cmake
    assert hard == ("CONFIG_FPU=y" in conf) == ("fpu" in effective_board(table[zboard]).features)
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert [f for f in files if f.startswith("platform/")] == ["platform/mtvg_libm.h",
                                                               "platform/platform.c"]
    assert "-include ${CMAKE_CURRENT_SOURCE_DIR}/platform/mtvg_libm.h" in cmake
    # RISC-V: libm and libgcc from the stand-in's multilib (-march/-mabi).
    riscv = zboard == "qemu_riscv32"
    assert ("-march=rv32imac -mabi=ilp32 -print-file-name=libm.a" in cmake) == riscv
    assert ("-march=rv32imac -mabi=ilp32 -print-libgcc-file-name" in cmake) == riscv
    assert "cmake/toolchain.cmake" not in files
    assert (out / "platform/platform.c").read_bytes() == (
        templates_dir() / "common/platform/zephyr/platform.c").read_bytes()
    project = json.loads((out / "project.json").read_text())
    assert project["zephyr"]["board"]["name"] == zboard
    assert project["zephyr"]["platform_name"] == "zephyr"
    # The same inputs give the same bytes.
    generate(archive(SINE), zboard, tmp_path / "q", template=TEMPLATE)
    assert all((out / f).read_bytes() == (tmp_path / "q" / f).read_bytes() for f in files)


def test_render_host_driven_and_graph(tmp_path, operators_archive):
    generate(operators_archive, "mps2/an385", tmp_path / "hd", template=TEMPLATE)
    cmake = (tmp_path / "hd" / "CMakeLists.txt").read_text()
    assert "app/rpc_main.c" in cmake and "runtime/src/rpc_server.c" in cmake
    assert "  MTVG_LINK_MAX_PAYLOAD=4096" in cmake and "  MTVG_RPC_POOL_BYTES=1048576" in cmake
    generate(operators_archive, "qemu_cortex_m3", tmp_path / "m3", template=TEMPLATE)
    m3 = (tmp_path / "m3" / "CMakeLists.txt").read_text()
    assert "  MTVG_RPC_POOL_BYTES=16384" in m3  # a quarter of the board's 64 KiB
    graph = archive("hannah-magicwand-graph-c-tvm0.11dev")
    generate(graph, "mps2/an385", tmp_path / "g", template=TEMPLATE)
    assert "runtime/src/graph.c" in (tmp_path / "g" / "CMakeLists.txt").read_text()


def test_project_api_server(tmp_path):
    with ProjectClient(TEMPLATE) as server:
        info = server.server_info_query()
        assert info["platform_name"] == "zephyr" and info["is_template"]
        options = {o["name"]: o for o in info["project_options"]}
        assert options["zephyr_board"]["choices"] == ZEPHYR_BOARDS
        assert options["board"]["choices"] == ZEPHYR_BOARDS
        server.generate_project(archive(SINE), tmp_path / "p", {"zephyr_board": "qemu_cortex_m3"})
    # In process (the same handler the scripts run): a project, the CRT template.
    info = ProjectServer(tmp_path / "p").server_info_query(None)
    assert info["platform_name"] == "zephyr" and not info["is_template"]
    assert (tmp_path / "p" / "microtvm_api_server.py").read_bytes() == (
        TEMPLATE / "microtvm_api_server.py").read_bytes()
    assert ProjectServer(templates_dir() / "crt").server_info_query(None)["platform_name"] == "crt"


def test_cli_generate_with_template(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["generate", str(archive(SINE)), "--board", "mps2/an385", "--template",
                 str(TEMPLATE), "--option", "zephyr_board=mps2/an385", "-o", str(out)]) == 0
    assert json.loads((out / "project.json").read_text())["zephyr"]["board"]["name"] == \
        "mps2/an385"


def test_server_option_errors(tmp_path):
    server = ProjectServer(TEMPLATE)
    with pytest.raises(ProjectError, match=r"options 'board' \(qemu-mps2-an385\) and "
                       r"'zephyr_board' \(mps2/an385\) differ"):
        server.generate_project(str(archive(SINE)), None, str(tmp_path / "p"),
                                {"board": "qemu-mps2-an385", "zephyr_board": "mps2/an385"})
    with pytest.raises(BoardError, match=r"unknown Zephyr board 'nrf52840dk/nrf52840'; this "
                       r"template knows: " + ", ".join(ZEPHYR_BOARDS)):
        server.generate_project(str(archive(SINE)), None, str(tmp_path / "p"),
                                {"board": "nrf52840dk/nrf52840"})
    assert not (tmp_path / "p").exists()


def test_unknown_board_direct(tmp_path):
    with pytest.raises(BoardError, match="unknown Zephyr board 'qemu-mps2-an385'"):
        generate(archive(SINE), "qemu-mps2-an385", tmp_path / "p", template=TEMPLATE)


def test_messages_name_the_zephyr_board(tmp_path, capsys):
    """Not the stand-in: the fit check, `flash` and project.json name the Zephyr board."""
    cifar = shared_path("mlf", "esp32-cifar10-aot-usmp-tvm0.14dev", "model.tar")
    assert main(["generate", str(cifar), "--board", "qemu_cortex_m3", "--template",
                 str(TEMPLATE), "-o", str(tmp_path / "big")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot fit board 'qemu_cortex_m3'" in err and "qemu-mps2-an385" not in err
    assert len(err.splitlines()) == 1
    generate(archive(SINE), "mps2/an385", tmp_path / "q", template=TEMPLATE)
    assert json.loads((tmp_path / "q/project.json").read_text())["board"] == "mps2/an385"
    assert main(["flash", str(tmp_path / "q"), "--dry-run"]) == 0
    assert capsys.readouterr().out == "nothing to flash: board 'mps2/an385' runs in QEMU\n"


@pytest.mark.parametrize("zboard", sorted(PHYSICAL))
def test_flash_dry_run_shows_west_flash(tmp_path, capsys, zboard):
    spec = PHYSICAL[zboard]
    project = tmp_path / "p"
    generate(archive(SINE), zboard, project, template=TEMPLATE)
    build_dir = str(project.resolve() / "build")
    west = ["west", "flash", "-d", build_dir, "--skip-rebuild", "--runner"]
    assert main(["flash", str(project), "--dry-run"]) == 0
    out = capsys.readouterr()
    assert out.out == shlex.join([*west, spec.default]) + "\n"
    assert zboard in out.err or out.err == ""  # "no <board> is connected": its Zephyr name
    assert main(["flash", str(project), "--dry-run", "--serial-number", "SN1"]) == 0
    assert capsys.readouterr().out == shlex.join([*west, spec.default,
                                                  *spec.default_serial]) + "\n"
    # Another of the board's west runners (stm32cubeprogrammer picks its probe itself).
    assert main(["flash", str(project), "--dry-run", "--json", "--runner", spec.other,
                 "--serial-number", "SN1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["command"] == [*west, spec.other, *spec.other_serial]
    assert (report["board"], report["runner"], report["flashed"]) == (zboard, "west", False)
    assert report["image"] == f"{build_dir}/zephyr/zephyr.elf"
    # A runner the board does not offer: one line, exit 2, naming the Zephyr board.
    assert main(["flash", str(project), "--dry-run", "--runner", "picotool"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"Zephyr board '{zboard}' offers the west runners "
                        f"{', '.join(load_board_table(TEMPLATE)[zboard].west_runners)}, "
                        "not 'picotool'") and len(err.splitlines()) == 1


def test_build_without_zephyr_base_says_what_to_set(tmp_path):
    from generator.build import build

    generate(archive(SINE), "mps2/an385", tmp_path / "p", template=TEMPLATE)
    with pytest.raises(ToolchainError, match="a Zephyr project needs ZEPHYR_BASE") as exc:
        build(tmp_path / "p")
    assert "MODULES" in (exc.value.hint or "")


def test_toolchain_choice(tmp_path):
    sdk = toolchain_env({"PATH": "", "ZEPHYR_SDK_INSTALL_DIR": "/opt/sdk"})
    assert "ZEPHYR_TOOLCHAIN_VARIANT" not in sdk
    with pytest.raises(ToolchainError, match="no Zephyr toolchain"):
        toolchain_env({"PATH": str(tmp_path)})
    with pytest.raises(ToolchainError, match="nor riscv64-unknown-elf-gcc on PATH") as exc:
        toolchain_env({"PATH": str(tmp_path)}, "riscv64-unknown-elf")
    assert exc.value.hint is not None and "gcc-riscv64-unknown-elf" in exc.value.hint
    gcc = shutil.which("arm-none-eabi-gcc")
    if gcc:
        env = toolchain_env({"PATH": os.path.dirname(gcc)})
        assert env["ZEPHYR_TOOLCHAIN_VARIANT"] == "gnuarmemb"
        assert Path(env["GNUARMEMB_TOOLCHAIN_PATH"], "bin", "arm-none-eabi-gcc").exists()
    gcc = shutil.which("riscv64-unknown-elf-gcc")
    if gcc:  # any other GNU prefix: Zephyr's cross-compile variant
        env = toolchain_env({"PATH": os.path.dirname(gcc)}, "riscv64-unknown-elf")
        assert env["ZEPHYR_TOOLCHAIN_VARIANT"] == "cross-compile"
        assert Path(env["CROSS_COMPILE"] + "gcc").exists()


# ---- With a Zephyr tree: build in Zephyr, run in QEMU, compare with the CRT template --------


@pytest.fixture
def zephyr_tree(monkeypatch):
    base = os.environ.get("MTVG_TEST_ZEPHYR_BASE")
    if not base:
        pytest.skip("set MTVG_TEST_ZEPHYR_BASE to a Zephyr 4.x tree to build and run Zephyr "
                    "projects (docs/zephyr.md)")
    monkeypatch.setenv("ZEPHYR_BASE", base)
    modules = os.environ.get("MTVG_TEST_ZEPHYR_MODULES")
    if modules:
        monkeypatch.setenv("ZEPHYR_MODULES", modules)
    python = os.environ.get("MTVG_TEST_ZEPHYR_PYTHON")
    if python:  # its west on PATH, and its interpreter for Zephyr's build scripts
        monkeypatch.setenv("PATH", f"{Path(python).parent}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("MICROTVM_GEN_ZEPHYR_PYTHON", python)
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm", "ninja"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    return Path(base)


def _require_tools(zboard: str) -> None:
    """Skip unless the board's compiler and QEMU are installed (RISC-V: not always)."""
    board = effective_board(load_board_table(TEMPLATE)[zboard])
    for tool in (f"{board.toolchain}-gcc", board.qemu.binary if board.qemu else None):
        if tool and shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


def _use_hal(monkeypatch, tree: Path, hal: str) -> None:
    """Skip unless the workspace has modules/hal/<hal>; add it to ZEPHYR_MODULES if set."""
    path = tree.parent / "modules" / "hal" / hal
    if not path.is_dir():
        pytest.skip(f"the Zephyr workspace has no {path} (hal_{hal}; docs/zephyr.md)")
    modules = os.environ.get("ZEPHYR_MODULES")
    if modules:
        monkeypatch.setenv("ZEPHYR_MODULES", f"{modules};{path}")


def _outputs(project: Path, samples: list[dict[str, np.ndarray]]) -> list[bytes]:
    from generator.run import run_project

    report = run_project(project, samples)
    return [b"".join(np.ascontiguousarray(v).tobytes() for _, v in sorted(o.items()))
            for o in report.outputs]


def _same_as_crt(tmp_path: Path, model: Path, zboard: str, crt_board: str,
                 samples: list[dict[str, np.ndarray]]) -> list[bytes]:
    _require_tools(zboard)
    generate(model, zboard, tmp_path / "zephyr", template=TEMPLATE)
    generate(model, crt_board, tmp_path / "crt")
    zephyr = _outputs(tmp_path / "zephyr", samples)
    assert zephyr == _outputs(tmp_path / "crt", samples)
    return zephyr


@pytest.mark.parametrize("zboard", sorted(PHYSICAL))
def test_physical_board_builds(tmp_path, zephyr_tree, monkeypatch, zboard):
    """Built, not flashed (no hardware here): yes/no, whose softmax links the hard-float libm."""
    from generator.build import build

    _use_hal(monkeypatch, zephyr_tree, PHYSICAL[zboard].hal)
    project = tmp_path / "p"
    generate(archive(YES_NO_ARCHIVE), zboard, project, template=TEMPLATE)
    result = build(project)
    entry = load_board_table(TEMPLATE)[zboard]
    assert 40000 < result.size.flash < entry.flash_bytes
    assert result.size.ram < entry.ram_bytes
    config = (project / "build/zephyr/.config").read_text().splitlines()
    assert f'CONFIG_BOARD="{zboard.split("/")[0]}"' in config and "CONFIG_FPU=y" in config
    target = next(line for line in config if line.startswith("CONFIG_BOARD_TARGET="))
    assert target.split("=", 1)[1].strip('"').startswith(zboard)  # nucleo_f746zg/stm32f746xx
    # The board table's west runners are the ones Zephyr's board.cmake configured.
    runners = (project / "build/zephyr/runners.yaml").read_text()
    offered = runners.split("runners:\n", 1)[1].split("\n\n", 1)[0].split()
    assert set(entry.west_runners) <= {r for r in offered if r != "-"}


def test_flash_runs_west_flash(tmp_path, zephyr_tree, monkeypatch, capsys):
    """No board here: the real `west flash` starts openocd with the probe's serial number,
    openocd finds no probe, and `flash` says so in one line (exit 2), the log in the build."""
    for tool in ("west", "openocd"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    _use_hal(monkeypatch, zephyr_tree, "stm32")
    project = tmp_path / "p"
    generate(archive(SINE), "nucleo_f746zg", project, template=TEMPLATE)
    assert main(["flash", str(project), "--serial-number", "SN1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "west failed (exit 1)" in err[0], err
    log = (project / "build/flash.log").read_text()
    assert log.startswith("$ west flash -d ") and "using runner openocd" in log
    assert "-c 'adapter serial SN1'" in log and "build/zephyr/zephyr.hex" in log


@pytest.mark.parametrize("zboard", sorted(QEMU_ZEPHYR_BOARDS))
def test_sine_same_bytes_as_crt(tmp_path, zephyr_tree, zboard):
    samples = [{"dense_4_input": np.array([[x]], np.float32)} for x in (0.5, 1.25)]
    out = _same_as_crt(tmp_path, archive(SINE), zboard, QEMU_ZEPHYR_BOARDS[zboard], samples)
    values = [np.frombuffer(b, np.float32)[0] for b in out]
    assert abs(values[0] - np.sin(0.5)) < 0.1 and abs(values[1] - np.sin(1.25)) < 0.1
    build = json.loads((tmp_path / "zephyr/build/build.json").read_text())
    assert build["size"]["flash"] > 0


# The models beyond sine: on the Cortex-M3, the Cortex-M33 and the RISC-V QEMU boards; those
# whose softmax calls expf not on RISC-V (Debian's RISC-V toolchain has a libm only in
# picolibc, which Zephyr's minimal libc cannot link: docs/zephyr.md).
MODEL_BOARDS = ["mps2/an385", "mps2/an521/cpu0", "qemu_riscv32"]
LIBM_MODEL_BOARDS = ["mps2/an385", "mps2/an521/cpu0"]


@pytest.mark.parametrize("zboard", LIBM_MODEL_BOARDS)
def test_yes_no_same_bytes_as_crt(tmp_path, zephyr_tree, zboard):
    samples = [{"Reshape_1": np.fromfile(YES_NO / f"{w}_0a2b400e_nohash_0.raw",
                                         dtype=np.int8).reshape(1, 1960)} for w in ("yes", "no")]
    out = _same_as_crt(tmp_path, archive(YES_NO_ARCHIVE), zboard, QEMU_ZEPHYR_BOARDS[zboard],
                       samples)
    scores = [np.frombuffer(b, np.int8).tolist() for b in out]
    assert scores == [[-128, -127, 126, -127], [-128, -128, -128, 127]]


@pytest.mark.parametrize("zboard", LIBM_MODEL_BOARDS)
def test_kws_same_bytes_as_crt(tmp_path, zephyr_tree, zboard):
    """micro-kws (TVM 0.16, USMP): the first samples and the two where the archive's own code
    disagrees with the reference labels (tests/test_end_to_end.py), byte for byte."""
    from tests.test_end_to_end import KWS_ARCHIVE_DIVERGES, _kws_vectors

    x, _ = _kws_vectors()
    picked = [0, 1, *sorted(KWS_ARCHIVE_DIVERGES)]
    out = _same_as_crt(tmp_path, archive(KWS), zboard, QEMU_ZEPHYR_BOARDS[zboard],
                       [{"input_1": x[i]} for i in picked])
    for i, raw in zip(picked, out, strict=True):
        if i in KWS_ARCHIVE_DIVERGES:
            assert np.frombuffer(raw, np.int8).tolist() == KWS_ARCHIVE_DIVERGES[i]


@pytest.mark.parametrize("zboard", MODEL_BOARDS)
def test_exported_int8_model_same_bytes_as_crt(tmp_path, zephyr_tree, zboard):
    from generator.export.api import export_model
    from tests.tflite_models import (
        QTensor,
        conv2d_model,
        conv_output_size,
        random_input,
        random_weights_and_bias,
    )

    rng = np.random.default_rng(7)
    inp = QTensor((1, 9, 8, 3), 0.05, 4)
    weights, bias = random_weights_and_bias(rng, (5, 3, 3, 3), inp.scales[0])
    out = QTensor((1, conv_output_size(9, 3, 1, "SAME"), conv_output_size(8, 3, 1, "SAME"), 5),
                  0.1, -3)
    (tmp_path / "conv.tflite").write_bytes(conv2d_model(inp, weights, bias, out, (1, 1), "SAME",
                                                        "RELU", (1, 1)))
    export_model(tmp_path / "conv.tflite", tmp_path / "conv.tar")
    generate(tmp_path / "conv.tar", zboard, tmp_path / "peek", template=TEMPLATE)
    spec = json.loads((tmp_path / "peek/project.json").read_text())["module"]["inputs"][0]
    samples = [{spec["name"]: random_input(rng, inp).reshape(spec["shape"])}]
    result = _same_as_crt(tmp_path, tmp_path / "conv.tar", zboard, QEMU_ZEPHYR_BOARDS[zboard],
                          samples)
    assert len(result[0]) == 9 * 8 * 5


@pytest.mark.parametrize("zboard", MODEL_BOARDS)
def test_host_driven_stock_client(tmp_path, zephyr_tree, operators_archive, zboard):
    """Stock tvm.rpc: calls, then time_evaluator (3 repeats of 10 vadd runs)."""
    from generator.build import build
    from generator.rpc import connect
    from tests.test_host_driven import check_operators, time_vadd

    project = tmp_path / "hd"
    generate(operators_archive, zboard, project, template=TEMPLATE)
    build(project)
    remote = connect(project)
    check_operators(remote, np.random.default_rng(3))
    times = time_vadd(remote)
    assert len(times) == 3 and all(t > 0 for t in times)


def test_zephyr_builds_use_this_python_and_name_a_missing_module(tmp_path):
    """Zephyr's scripts run in the tool's own interpreter (not `python3` from PATH), and a
    module missing there is the error, not CMake's "Error finding board" that follows it."""
    import sys

    from generator.project.zephyr import build_commands, build_failure

    env = {"PATH": str(tmp_path)}  # no west: plain CMake
    configure = build_commands(tmp_path / "p", tmp_path / "b", "nucleo_f746zg", tmp_path, env)[0]
    assert f"-DPython3_EXECUTABLE={sys.executable}" in configure
    log = ["-- Zephyr version: 4.1.0", "Traceback (most recent call last):",
           "ModuleNotFoundError: No module named 'pykwalify'",
           "CMake Error at cmake/modules/boards.cmake:196 (message):",
           "  Error finding board: nucleo_f746zg"]
    error = build_failure(log, tmp_path / "p", tmp_path / "build.log")
    assert "Python module 'pykwalify' is missing from " + sys.executable in error.one_line()
    assert f"{sys.executable} -m pip install" in (error.hint or "")
    plain = build_failure(log[3:], tmp_path / "p", tmp_path / "build.log")
    assert "Error finding board" in plain.one_line()
    # A Python of the user's choosing (Zephyr's own venv), named in the error too.
    chosen = {**env, "MICROTVM_GEN_ZEPHYR_PYTHON": sys.executable}
    assert f"-DPython3_EXECUTABLE={sys.executable}" in build_commands(
        tmp_path / "p", tmp_path / "b", "nucleo_f746zg", tmp_path, chosen)[0]
    other = build_failure(log, tmp_path / "p", tmp_path / "build.log", "/opt/zephyr/python3")
    assert "missing from /opt/zephyr/python3" in other.one_line()
    with pytest.raises(ToolchainError):
        build_commands(tmp_path / "p", tmp_path / "b", "nucleo_f746zg", tmp_path,
                       {**env, "MICROTVM_GEN_ZEPHYR_PYTHON": str(tmp_path / "nope")})


@pytest.mark.parametrize("zboard", MODEL_BOARDS[:1])
def test_profiled_run(tmp_path, zephyr_tree, zboard):
    """generate --profile and run --profile on a Zephyr board: the app and the marks are the
    CRT template's; the calls add up to the inference."""
    from generator.export.api import export_model
    from generator.run import run_project

    _require_tools(zboard)
    model = REPO / "tests" / "fixtures" / "models" / "hello_world" / "hello_world_int8.tflite"
    export_model(model, tmp_path / "hello.tar")
    generate(tmp_path / "hello.tar", zboard, tmp_path / "p", template=TEMPLATE, profile=True)
    spec = json.loads((tmp_path / "p/project.json").read_text())["module"]["inputs"][0]
    report = run_project(tmp_path / "p", [{spec["name"]: np.zeros(spec["shape"], np.int8)}],
                         profile=True)
    (calls,), (whole,) = report.profiles, report.timings
    assert len(calls) == 3 and all(c > 0 for c in calls)
    # hello_world is 3,000 instructions: the run function's code outside the marks and the
    # timer's 40-instruction ticks weigh more than 1 % here (kws: tests/test_profile.py)
    assert 0 <= whole.count - sum(calls) <= max(0.01 * whole.count, 4 * 40)
