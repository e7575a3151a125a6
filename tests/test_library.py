"""generate --format library: the model for the user's own firmware (issue 28).

Two exported int8 models (kws and hello_world) as two libraries, linked into one
application that is not ours (tests/foreign_app.py: its own startup, linker script, UART
and main) on the host (CMake, add_subdirectory) and on qemu-mps2-an385 (the compiler and
sources.txt, as an IDE does): both bit-exact with `run` on our own project for the same
board, and no global symbol shared between the two. Then the library's files, older
archives (the runtime's workspace), and what it refuses.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from generator.cli import main
from generator.errors import UnsupportedModelError
from generator.export import export_model
from generator.project.generate import generate
from generator.project.library import LIBRARY_FILE, generate_library
from generator.run import run_project
from tests.conftest import REPO, require_board_tools, shared_path
from tests.foreign_app import (
    LinkedModel,
    build_an385,
    build_host,
    build_zephyr,
    compile_library_an385,
    parse_outputs,
    run_an385,
    run_host,
    run_qemu_until_done,
)
from tests.test_json_schemas import validate
from tests.test_zephyr import zephyr_tree  # noqa: F401 (the fixture)

MODELS = REPO / "tests" / "fixtures" / "models"
# (module name, model file): each exported with its own --module, as two models in one
# firmware must be.
EXPORTS = {"kws": MODELS / "mlperftiny_kws" / "kws_ref_model.tflite",
           "hello": MODELS / "hello_world" / "hello_world_int8.tflite"}


@pytest.fixture(scope="module")
def libraries(tmp_path_factory) -> dict[str, tuple[Path, LinkedModel]]:
    """Each model exported, its library generated, and random int8 inputs for it."""
    root = tmp_path_factory.mktemp("library")
    out = {}
    for seed, (name, model) in enumerate(EXPORTS.items(), start=28):
        archive = export_model(model, root / f"{name}.tar", module=name).path
        out[name] = (archive, LinkedModel.of(generate_library(archive, root / f"lib-{name}"),
                                             seed=seed))
    return out


_ours_cache: dict[tuple[str, str], list[bytes]] = {}


def _ours(archive: Path, board: str, model: LinkedModel, work: Path) -> list[bytes]:
    """The same inputs through `run` on our own project for the board (once per module)."""
    key = (str(archive), board)
    if key not in _ours_cache:
        _ours_cache[key] = _run_ours(archive, board, model, work)
    return _ours_cache[key]


def _run_ours(archive: Path, board: str, model: LinkedModel, work: Path) -> list[bytes]:
    project = work / f"project-{model.name}-{board}"
    generate(archive, board, project)
    record = json.loads((project / "project.json").read_text())["module"]
    sample = {t["name"]: x for t, x in zip(record["inputs"], model.inputs, strict=True)}
    report = run_project(project, [sample])
    return [np.asarray(report.outputs[0][t["name"]]).tobytes() for t in record["outputs"]]


def _global_symbols(nm: str, files: list[Path]) -> set[str]:
    done = subprocess.run([nm, "-g", "--defined-only", *map(str, files)], check=True,
                          capture_output=True, text=True)
    return {line.split()[-1] for line in done.stdout.splitlines()
            if len(line.split()) == 3}


@pytest.mark.parametrize("board", ["host", "qemu-mps2-an385"])
def test_two_libraries_in_a_foreign_firmware(board, libraries, tmp_path):
    require_board_tools(board)
    models = [linked for _, linked in libraries.values()]
    if board == "host":
        text = run_host(build_host(models, tmp_path / "app", shared=True))
        symbols = {m.name: _global_symbols("nm", [tmp_path / "app" / "build" / m.name /
                                                  f"lib{m.name}.a"]) for m in models}
    else:
        text = run_an385(build_an385(models, tmp_path / "app", shared=True))
        symbols = {m.name: _global_symbols("arm-none-eabi-nm", sorted(
            (tmp_path / "app" / f"obj-{m.name}").glob("*.o"))) for m in models}
    got = parse_outputs(text, models)
    for archive, model in libraries.values():
        want = _ours(archive, board, model, tmp_path)
        assert got[model.name] == want, model.name
        # Again in one workspace the application gives both models (<name>_run_with_workspace).
        assert got[f"{model.name}@shared"] == want, model.name
    # No runtime in either (exported models without workspace): nothing shared, and every
    # global symbol carries its module's name.
    assert not symbols["kws"] & symbols["hello"]
    for name, found in symbols.items():
        assert found and all(s.startswith((f"{name}_", f"tvmgen_{name}_")) for s in found), \
            sorted(found)


def test_share_workspace_gives_both_models_one_buffer(libraries, tmp_path):
    """generate --share-workspace: both libraries' <name>_run work in the one common symbol
    mtvg_shared_workspace, which the link sizes for the larger model; outputs unchanged."""
    require_board_tools("host")
    models = []
    for name, (archive, linked) in libraries.items():
        lib = generate_library(archive, tmp_path / f"shared-{name}", share_workspace=True)
        assert json.loads((lib.path / LIBRARY_FILE).read_text())["shared_workspace"]
        models.append(LinkedModel.of(lib, linked.inputs))
    app = build_host(models, tmp_path / "app")
    got = parse_outputs(run_host(app), models)
    for archive, model in libraries.values():
        assert got[model.name] == _ours(archive, "host", model, tmp_path)
    done = subprocess.run(["nm", "-S", str(app)], check=True, capture_output=True, text=True)
    sizes = [int(p[1], 16) for p in map(str.split, done.stdout.splitlines())
             if len(p) == 4 and p[3] == "mtvg_shared_workspace"]
    assert sizes == [max(_workspace(m.library) for m in models)] == [16000]  # kws's


def _workspace(library: Path) -> int:
    return json.loads((library / LIBRARY_FILE).read_text())["workspace_bytes"]


def test_the_library_folder(libraries):
    """One public header, the model's C, build files for CMake, Make and IDEs; nothing of a
    firmware (no main, startup, platform or Project API server)."""
    lib = libraries["kws"][1].library
    files = sorted(p.relative_to(lib).as_posix() for p in lib.rglob("*") if p.is_file())
    assert {"include/kws.h", "src/kws.c", "CMakeLists.txt", "sources.txt", "kws.mk",
            "README.md", LIBRARY_FILE, "model/include/tvmgen_kws.h"} <= set(files)
    assert not [f for f in files if f.startswith(("app/", "platform/", "runtime/"))
                or "microtvm_api_server" in f or f == "model.tar"]
    header = (lib / "include" / "kws.h").read_text()
    for line in ("#define KWS_INPUT_0_BYTES 490u", "#define KWS_OUTPUT_0_BYTES 12u",
                 "#define KWS_STATIC_BYTES 0u", "#define KWS_WORKSPACE_BYTES 16000u",
                 "int32_t kws_run(const struct kws_inputs* inputs,",
                 "int32_t kws_run_with_workspace(const struct kws_inputs* inputs,"):
        assert line in header
    assert "main(" not in (lib / "src" / "kws.c").read_text()
    # TVM 0.27's one unprefixed symbol is renamed in the kernels' file.
    assert (lib / "model" / "src" / "kws_lib0.c").read_text().startswith(
        "#define __tvm_ffi__library_ctx tvmgen_kws_library_ctx\n")
    listed = (lib / "sources.txt").read_text()
    for name in re.findall(r"^(?:src|model)/\S+\.c$", listed, re.M):
        assert (lib / name).is_file()
    record = json.loads((lib / LIBRARY_FILE).read_text())
    assert record["format"] == "library" and record["runtime_sources"] == []
    assert record["module"]["inputs"][0]["size_bytes"] == 490


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_makefile_fragment_builds_the_library(libraries, tmp_path):
    """A Makefile project: include <name>.mk, compile its sources with its flags."""
    lib = libraries["hello"][1].library
    (tmp_path / "Makefile").write_text(
        f"include {lib}/hello.mk\n"
        "OBJS := $(patsubst %.c,%.o,$(notdir $(HELLO_SOURCES)))\n"
        "vpath %.c $(sort $(dir $(HELLO_SOURCES)))\n"
        "libhello.a: $(OBJS)\n\tar rcs $@ $^\n"
        "%.o: %.c\n\t$(CC) -O2 $(HELLO_CPPFLAGS) $(HELLO_CFLAGS) -c $< -o $@\n")
    subprocess.run(["make", "-C", str(tmp_path)], check=True, capture_output=True)
    assert "hello_run" in _global_symbols("nm", [tmp_path / "libhello.a"])


def test_generate_format_library_cli(libraries, tmp_path, capsys):
    archive = libraries["hello"][0]
    assert main(["generate", str(archive), "--format", "library", "-o", str(tmp_path / "l"),
                 "--board", "qemu-mps2-an385", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    validate("generate --format library", report)
    assert report["name"] == "hello" and report["runtime_sources"] == []
    assert "include/hello.h" in report["files"]
    # A project needs a board; a library takes no project options.
    assert main(["generate", str(archive), "-o", str(tmp_path / "p")]) == 2
    assert "--board is required for a project" in capsys.readouterr().err
    assert main(["generate", str(archive), "--format", "library", "-o", str(tmp_path / "q"),
                 "--project-type", "standalone"]) == 2
    assert "--project-type is for projects" in capsys.readouterr().err
    assert not (tmp_path / "p").exists() and not (tmp_path / "q").exists()


def test_the_zephyr_module_files(libraries, tmp_path):
    """--format zephyr-module: the library plus zephyr/module.yml, Kconfig and a CMakeLists
    that compiles the same files when CONFIG_MTVG_MODEL_<NAME> is set."""
    lib = generate_library(libraries["kws"][0], tmp_path / "kws", fmt="zephyr-module").path
    module = (lib / "zephyr" / "module.yml").read_text()
    assert "name: mtvg-model-kws" in module
    assert "  cmake: zephyr\n" in module and "  kconfig: zephyr/Kconfig\n" in module
    assert "config MTVG_MODEL_KWS\n\tbool " in (lib / "zephyr" / "Kconfig").read_text()
    cmake = (lib / "zephyr" / "CMakeLists.txt").read_text()
    assert cmake.count("if(CONFIG_MTVG_MODEL_KWS)") == 1
    listed = re.findall(r"\$\{MTVG_KWS_ROOT\}/(\S+?\.c)\b", cmake)
    assert "src/kws.c" in listed and all((lib / f).is_file() for f in listed)
    assert json.loads((lib / LIBRARY_FILE).read_text())["format"] == "zephyr-module"
    # The plain library has none of it.
    assert not (libraries["kws"][1].library / "zephyr").exists()


def test_zephyr_hello_world_runs_the_models(libraries, zephyr_tree, tmp_path):  # noqa: F811
    """Zephyr's own samples/hello_world, its main.c replaced by one that runs both models,
    with the two Zephyr modules added: on qemu_cortex_m3, the outputs of `run` on our
    project for qemu-mps2-an385 (also a Cortex-M3)."""
    import os

    models = [LinkedModel.of(generate_library(archive, tmp_path / f"zm-{name}",
                                              fmt="zephyr-module"), linked.inputs)
              for name, (archive, linked) in libraries.items()]
    elf = build_zephyr(models, tmp_path / "zephyr-app", zephyr_tree, "qemu_cortex_m3",
                       dict(os.environ))
    text = run_qemu_until_done(["qemu-system-arm", "-machine", "lm3s6965evb", "-cpu",
                                "cortex-m3", "-nographic", "-kernel", str(elf)])
    got = parse_outputs(text, models)
    for archive, model in libraries.values():
        assert got[model.name] == _ours(archive, "qemu-mps2-an385", model, tmp_path)


def test_refusals_leave_nothing(libraries, tmp_path):
    graph = REPO / "tests" / "fixtures" / "mlf" / "hannah-magicwand-graph-c-tvm0.11dev"
    with pytest.raises(UnsupportedModelError, match="runs under the graph executor"):
        generate_library(graph / "model.tar", tmp_path / "g")
    with pytest.raises(UnsupportedModelError, match="cannot fit board 'qemu-microbit'"):
        generate_library(libraries["kws"][0], tmp_path / "m", "qemu-microbit")
    assert not list(tmp_path.iterdir())


# ---- archives TVM 0.8-0.18 wrote: the runtime's workspace, shared per firmware ----------

OLD_AOT = ["gromero-sine-aot-c-v5", "guberti-yesno-aot-packed-v5"]


@pytest.mark.parametrize("fixture", OLD_AOT)
def test_an_older_archive_as_a_library(fixture, tmp_path):
    """TVM 0.x AOT code (C and packed interfaces) allocates from our runtime's workspace:
    the library carries it once, and both entries give `run`'s outputs on the host."""
    archive = shared_path("mlf", fixture) / "model.tar"
    lib = generate_library(archive, tmp_path / "lib")
    assert lib.runtime_sources == ["runtime/src/workspace.c"]
    model = LinkedModel.of(lib, seed=7)
    assert lib.workspace_bytes > 0  # the runtime's arena: static, or the caller's
    got = parse_outputs(run_host(build_host([model], tmp_path / "app", shared=True)), [model])
    want = _ours(archive, "host", model, tmp_path)
    assert got[lib.name] == got[f"{lib.name}@shared"] == want


def test_an385_objects_compile_warning_free_wrapper(libraries, tmp_path):
    """The wrapper is our code: it compiles with -Wall -Wextra -Werror for the M3."""
    require_board_tools("qemu-mps2-an385")
    lib = libraries["kws"][1].library
    subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m3", "-mthumb", "-std=c99", "-Wall",
                    "-Wextra", "-Werror", "-pedantic", f"-I{lib / 'include'}",
                    f"-I{lib / 'model' / 'include'}", "-c", str(lib / "src" / "kws.c"),
                    "-o", str(tmp_path / "kws.o")], check=True, capture_output=True)
    assert compile_library_an385(lib, tmp_path / "objs")
