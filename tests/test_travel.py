"""Projects travel: a generated project, moved elsewhere, builds with CMake, Ninja and the
compiler alone (no Python, no TVM, no microtvm-gen on PATH) and runs the same model.

Each project is generated in one temporary folder and moved (`shutil.move`) to another;
the build runs in a subprocess whose PATH is a folder of symlinks to cmake, ninja and the
board's compiler tools only, with no PYTHONPATH. The firmware that build made is then run
by the normal machinery (`run_project`), which finds it up to date (its hash is unchanged).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from generator.build import build
from generator.export import export_model
from generator.project.generate import generate, tvm_include_dirs
from generator.project.tvm_headers import TVM_ROOTS
from generator.run import run_project
from generator.toolchain import BUILD_DIR, FIRMWARE, cmake_program, ninja_program
from tests.conftest import REPO, YES_NO, require_board_tools

HELLO_INT8 = REPO / "tests" / "fixtures" / "models" / "hello_world" / "hello_world_int8.tflite"
HELLO_IN, HELLO_OUT = "serving_default_dense_input:0", "StatefulPartitionedCall:0"
YES_NO_SCORES = [[-128, -127, 126, -127], [-128, -128, -128, 127]]
# Host builds need the C driver and binutils (ar: the CMSIS-NN static library); cross builds
# get every tool of the prefix.
HOST_TOOLS = ("gcc", "cc", "as", "ld", "ar", "ranlib")
APACHE_HEADER = b"Licensed to the Apache Software Foundation (ASF)"
BUILD_TIMEOUT = 600


def _real_program(path: str | None, name: str) -> Path:
    """An executable that is not a Python script (the symlink folder holds no Python)."""
    if path is None or Path(path).read_bytes()[:2] == b"#!":
        path = shutil.which(name, path="/usr/local/bin:/usr/bin:/bin")
    if path is None:
        pytest.skip(f"no {name} binary")
    return Path(path).resolve()


def tool_folder(folder: Path, board: str) -> Path:
    """A folder of symlinks to cmake, ninja and the board's compiler tools, nothing else."""
    from generator.boards import load_board

    require_board_tools(board)
    folder.mkdir()
    links = {"cmake": _real_program(cmake_program(), "cmake"),
             "ninja": _real_program(ninja_program(), "ninja")}
    spec = load_board(board)
    if spec.is_native:
        for name in HOST_TOOLS:
            found = shutil.which(name)
            assert found, f"{name} is not on PATH"
            links[name] = Path(found)
    else:
        gcc = Path(shutil.which(spec.tool("gcc")))
        for tool in sorted(gcc.parent.glob(f"{spec.toolchain}-*")):
            links[tool.name] = tool
    for name, target in links.items():
        (folder / name).symlink_to(target)
    for python in ("python", "python3", sys.executable):
        assert shutil.which(Path(python).name, path=str(folder)) is None
    return folder


def build_alone(project: Path, tools: Path, *extra: str,
                env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The two commands of the project's README, with only `tools` on PATH."""
    env = {"PATH": str(tools), "HOME": str(tools), "LC_ALL": "C", **(env_extra or {})}
    assert "PYTHONPATH" not in env
    log = []
    for argv in ([str(tools / "cmake"), "-G", "Ninja", "-S", str(project), "-B",
                  str(project / BUILD_DIR), *extra],
                 [str(tools / "ninja"), "-C", str(project / BUILD_DIR)]):
        proc = subprocess.run(argv, cwd=tools, env=env, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT)
        log.append(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            return subprocess.CompletedProcess(argv, proc.returncode, "".join(log), "")
    return subprocess.CompletedProcess(argv, 0, "".join(log), "")


def generated_files(project: Path) -> list[Path]:
    return [p for p in project.rglob("*")
            if p.is_file() and BUILD_DIR not in p.relative_to(project).parts]


def assert_nothing_points_back(project: Path, *places: Path) -> None:
    """No generated file (text or binary) names a folder of this machine."""
    needles = [str(p).encode() for p in places] + [b"site-packages", sys.prefix.encode()]
    for path in generated_files(project):
        data = path.read_bytes()
        for needle in needles:
            assert needle not in data, f"{path.relative_to(project)} contains {needle!r}"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def hello_v8(tmp_path_factory) -> Path:
    return export_model(HELLO_INT8, tmp_path_factory.mktemp("export") / "hello.tar").path


def hello_inputs() -> list[np.ndarray]:
    return [np.array([[v]], dtype=np.int8) for v in range(-128, 128, 17)]


def tflm_outputs(xs: list[np.ndarray]) -> list[np.ndarray]:
    runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime",
                                  reason="pip install tflite-micro (the test extra)")
    interp = runtime.Interpreter.from_file(str(HELLO_INT8))
    outs = []
    for x in xs:
        interp.set_input(x, 0)
        interp.invoke()
        outs.append(np.array(interp.get_output(0)))
    return outs


def _generate_and_move(archive: Path, board: str, tmp_path: Path, **options) -> tuple[Path, Path]:
    made = tmp_path / "made"
    generate(archive, board, made / "proj", **options)
    moved = tmp_path / "elsewhere" / "moved-proj"
    moved.parent.mkdir()
    shutil.move(made / "proj", moved)
    assert not (made / "proj").exists()
    return made, moved


@pytest.mark.slow
@pytest.mark.parametrize("board", ["host", "qemu-mps2-an385"])
@pytest.mark.parametrize("model", ["v8-hello-world-int8", "v5-yes-no"])
def test_moved_project_builds_without_python_and_runs(model, board, tmp_path, hello_v8):
    tools = tool_folder(tmp_path / "tools", board)
    archive = hello_v8 if model.startswith("v8") else YES_NO / "model.tar"
    made, moved = _generate_and_move(archive, board, tmp_path)

    readme = (moved / "README.md").read_text()
    assert "cmake -G Ninja -S . -B build" in readme and "ninja -C build" in readme
    assert_nothing_points_back(moved, made, tmp_path, REPO, archive.parent)
    project = json.loads((moved / "project.json").read_text())
    if model.startswith("v8"):
        headers = project["tvm_headers"]
        assert headers["apache-tvm"] == importlib.metadata.version("apache-tvm")
        assert headers["apache-tvm-ffi"] == importlib.metadata.version("apache-tvm-ffi")
        assert headers["files"] and len(headers["files"]) == len(set(headers["files"]))
        assert not (moved / "CMakeLists.txt").read_text().count("MTVG_TVM_INCLUDE_DIRS")
    else:
        assert "tvm_headers" not in project and not (moved / "third_party").exists()

    result = build_alone(moved, tools)
    assert result.returncode == 0, result.stdout[-3000:]
    elf = moved / BUILD_DIR / FIRMWARE
    before = sha256(elf)

    if model.startswith("v8"):
        xs = hello_inputs()
        report = run_project(moved, [{HELLO_IN: x} for x in xs])
        got = [o[HELLO_OUT] for o in report.outputs]
        want = tflm_outputs(xs)
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want]
    else:
        samples = [{"Reshape_1": np.fromfile(YES_NO / f"{w}_0a2b400e_nohash_0.raw",
                                             dtype=np.int8).reshape(1, 1960)}
                   for w in ("yes", "no")]
        report = run_project(moved, samples)
        assert [o["output"].reshape(-1).tolist() for o in report.outputs] == YES_NO_SCORES
    assert sha256(elf) == before  # the firmware the Python-free build made is what ran


def test_copied_headers_are_the_installed_files(hello_v8, tmp_path):
    """Only what the kernels reach, byte for byte (license headers untouched), with the
    packages' license files; the project's include folders are relative."""
    project = tmp_path / "p"
    generate(hello_v8, "host", project)
    record = json.loads((project / "project.json").read_text())["tvm_headers"]
    installed = [Path(d) for d in tvm_include_dirs()]
    names = set()
    for rel in record["files"]:
        folder, _, name = rel.partition("/include/")
        index = [f"third_party/{dest}" for _, _, dest in TVM_ROOTS].index(folder)
        original = installed[index] / name
        data = (project / rel).read_bytes()
        assert data == original.read_bytes()
        # TVM's own headers carry the ASF header; DLPack's (also Apache-2.0) its own notice.
        assert APACHE_HEADER in data[:2000] or (name == "dlpack/dlpack.h"
                                                 and b"Copyright" in data[:200])
        names.add(name)
    # TVM 0.27's kernels include these; each pulls in the next.
    assert {"tvm/runtime/c_backend_api.h", "tvm/runtime/base.h", "tvm/ffi/c_api.h",
            "dlpack/dlpack.h"} <= names
    everything = {p.relative_to(d).as_posix() for d in installed for p in d.rglob("*.h")}
    assert len(names) < len(everything)  # not the whole include trees
    for rel in record["licenses"]:
        text = (project / rel).read_bytes()
        assert (b"Apache License" if rel.endswith("LICENSE") else b"Apache") in text[:200]
    assert {"third_party/tvm/LICENSE", "third_party/tvm-ffi/LICENSE"} <= set(record["licenses"])
    cmake = (project / "CMakeLists.txt").read_text()
    assert "${CMAKE_CURRENT_SOURCE_DIR}/third_party/tvm-ffi/include" in cmake
    assert "${CMAKE_CURRENT_SOURCE_DIR}/third_party/tvm/include" in cmake
    tree = {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()}
    assert {n for n in tree if n.startswith("third_party/")} == \
        set(record["files"]) | set(record["licenses"])


@pytest.mark.slow
def test_project_moved_after_a_build_builds_again(tmp_path):
    """A built project moved elsewhere: `build` remakes the build folder CMake would refuse."""
    require_board_tools("host")
    project = tmp_path / "a" / "proj"
    generate(YES_NO / "model.tar", "host", project)
    build(project)
    moved = tmp_path / "b"
    shutil.move(project, moved)
    result = build(moved)
    assert result.elf == moved.resolve() / BUILD_DIR / FIRMWARE and result.elf.is_file()
    cache = (moved / BUILD_DIR / "CMakeCache.txt").read_text()
    assert str(tmp_path / "a") not in cache


@pytest.mark.slow
def test_cmsis_nn_tree_named_again_after_a_move(tmp_path):
    """A cmsis-nn project keeps the generation's CMSIS-NN path, and -DCMSIS_NN_PATH or the
    CMSIS_NN_PATH environment variable names another tree when that one is gone."""
    from tests.test_cmsis_nn import N_IN, _reference, cmsis_nn_tree, write_cmsis_nn_archive

    tools = tool_folder(tmp_path / "tools", "host")
    tree = tmp_path / "cmsis-a"
    shutil.copytree(cmsis_nn_tree(), tree)
    archive = write_cmsis_nn_archive(tmp_path / "fc.tar")
    _, moved = _generate_and_move(archive, "host", tmp_path, cmsis_nn=tree)
    assert str(tree) in (moved / "CMakeLists.txt").read_text()
    other = tmp_path / "cmsis-b"
    shutil.move(tree, other)

    refused = build_alone(moved, tools)
    said = " ".join(refused.stdout.split())  # CMake wraps its messages
    assert refused.returncode != 0 and "is not a CMSIS-NN source tree" in said
    assert "-DCMSIS_NN_PATH=" in said
    shutil.rmtree(moved / BUILD_DIR)
    by_env = subprocess.run([str(tools / "cmake"), "-G", "Ninja", "-S", str(moved), "-B",
                             str(tmp_path / "env-build")], capture_output=True, text=True,
                            env={"PATH": str(tools), "CMSIS_NN_PATH": str(other)})
    assert by_env.returncode == 0, by_env.stdout + by_env.stderr
    assert f"CMSIS_NN_PATH:PATH={other}" in (tmp_path / "env-build" / "CMakeCache.txt").read_text()

    built = build_alone(moved, tools, f"-DCMSIS_NN_PATH={other}")
    assert built.returncode == 0, built.stdout[-3000:]
    rng = np.random.default_rng(3)
    samples = [rng.integers(-128, 128, size=(1, N_IN), dtype=np.int8) for _ in range(3)]
    report = run_project(moved, [{"x": s} for s in samples])
    for sample, out in zip(samples, report.outputs, strict=True):
        assert out["y"].reshape(-1).tolist() == _reference(sample.reshape(-1))


def test_include_scan_follows_the_compilers_search_order(tmp_path):
    """Quoted names first beside the including file, then the folders in order (the first
    root wins); angled names only in the folders; names that leave a root, system headers
    and include cycles end the scan quietly."""
    from generator.project.tvm_headers import IncludeRoot, _Scan

    def root(name: str, files: dict[str, str]) -> IncludeRoot:
        for rel, text in files.items():
            (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / rel).write_text(text)
        return IncludeRoot(name, (tmp_path / name).resolve(), f"third_party/{name}")

    (tmp_path / "secret.h").write_text("/* outside every root */\n")
    first = root("first", {"a/top.h": '#include "near.h"\n#include <b/shared.h>\n',
                           "a/near.h": '#include "top.h"\n#include "../../secret.h"\n',
                           "b/shared.h": "/* first's */\n", "near.h": "/* not beside */\n"})
    second = root("second", {"b/shared.h": "/* second's */\n", "only.h": "#include <stdint.h>\n",
                             "a/near.h": "/* shadowed */\n"})
    project = {"model/src/k_lib0.c": b'#include "a/top.h"\n  #  include <only.h>\n'
                                     b'#include "k.h"\n#include <near.h>\n',
               "model/include/k.h": b'#include "b/shared.h"\n'}
    scan = _Scan(project, ["model/include"], [first, second])
    scan.run(["model/src/k_lib0.c"])
    assert sorted(scan.found) == ["third_party/first/include/a/near.h",
                                  "third_party/first/include/a/top.h",
                                  "third_party/first/include/b/shared.h",
                                  "third_party/first/include/near.h",
                                  "third_party/second/include/only.h"]
    assert scan.found["third_party/first/include/b/shared.h"] == b"/* first's */\n"


def test_include_scan_is_bounded(tmp_path):
    """Kernel sources come from an archive: a flood of include names is refused in one line."""
    from generator.errors import ProjectError
    from generator.project.tvm_headers import MAX_LOOKUPS, IncludeRoot, _Scan

    flood = "".join(f"#include <n{i}.h>\n" for i in range(MAX_LOOKUPS + 1)).encode()
    (tmp_path / "inc").mkdir()
    scan = _Scan({"model/src/k_lib0.c": flood}, ["model/include"],
                 [IncludeRoot("x", tmp_path / "inc", "third_party/x")])
    with pytest.raises(ProjectError, match="more than 10000 header names"):
        scan.run(["model/src/k_lib0.c"])
