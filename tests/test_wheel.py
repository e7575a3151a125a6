"""A wheel that works: built from the repository, installed (not editable) into a fresh
virtualenv, it exports mnist-8, generates, builds and runs the digit 2 in QEMU from a
folder outside the repository.

How the venv gets its dependencies: the wheel goes into a fresh `python -m venv` with
`--no-deps`, and a `.pth` file puts the suite's own site-packages after the venv's (a
directory named in a `.pth` is searched, but its own `.pth` files are not run, so the
editable install's path hook stays out and `generator` can only come from the wheel). `pip
check` then proves the wheel's declared dependencies are met by what it sees. Installing
them from the package index instead (TVM, ONNX, NumPy, CMake, ...) took 42 s here and
proves only that pip can download. The wheel is built from a copy of the working tree, so
the build leaves nothing (build/, *.egg-info) in the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, require_board_tools

MNIST = REPO / "examples" / "mnist"
BOARD = "qemu-mps2-an385"
STEP_TIMEOUT = 600
PURELIB = "import sysconfig; print(sysconfig.get_path('purelib'))"
# What a copy of the working tree leaves out (environments, caches, build outputs).
NOT_COPIED = (".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
              ".pytest_cache", ".ruff_cache", ".benchmarks", "out")
# Files the Project API needs from the crt template (being a .py and a .sh, the ones most
# easily dropped by package-data globs).
PROJECT_API_FILES = ("crt/microtvm_api_server.py", "crt/launch_microtvm_api_server.sh")


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: int = STEP_TIMEOUT) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{argv} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def data_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def clean_environment(venv: Path) -> dict[str, str]:
    """The caller's environment without anything that points at the repository."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "MICROTVM_GEN_ROOT", "MICROTVM_GEN_PYTHON",
                        "PYTHONHOME")}
    path = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and not Path(p).resolve().is_relative_to(REPO)]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    return env


def digit_2() -> np.ndarray:
    """examples/mnist/demo.py's preprocessing: 28x28 grey pixels 0..255 as float32."""
    from PIL import Image

    img = Image.open(MNIST / "digit-2.jpg").convert("L").resize((28, 28))
    return np.asarray(img).astype("float32").reshape(1, 1, 28, 28)


@pytest.mark.slow
def test_installed_wheel_exports_generates_builds_and_runs(tmp_path):
    require_board_tools(BOARD)
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_COPIED))
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-w", str(dist)],
        tmp_path, dict(os.environ))
    wheels = list(dist.glob("microtvm_gen-*.whl"))
    assert len(wheels) == 1

    # The wheel holds templates/ and boards/ whole, as package data, and no tests.
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    for folder, package in (("templates", "generator/_templates"),
                            ("boards", "generator/_boards")):
        expected = {f"{package}/{name}" for name in data_files(REPO / folder)}
        assert expected and expected <= names, sorted(expected - names)[:10]
    assert {f"generator/_templates/{n}" for n in PROJECT_API_FILES} <= names
    assert "generator/project/generate.py" in names and "generator/project_api/client.py" in names
    assert not any(n.startswith(("tests/", "examples/", "templates/", "boards/")) for n in names)

    venv = tmp_path / "venv"
    # As bootstrap.sh does: a bare venv (venv's own pip setup byte-compiles all of pip, 8 s),
    # and this pip installs into it (--python). --no-compile: modules are compiled as they
    # are first imported.
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, dict(os.environ))
    python = venv / "bin" / "python"
    env = clean_environment(venv)
    venv_site = Path(run([str(python), "-c", PURELIB], tmp_path, env).strip())
    (venv_site / "zz_suite_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile",
         "--no-deps", str(wheels[0])], tmp_path, env)
    run([sys.executable, "-m", "pip", "--python", str(python), "check"], tmp_path, env)
    shutil.rmtree(source)  # nothing may need the tree the wheel came from

    work = tmp_path / "work"
    work.mkdir()
    where = json.loads(run([str(python), "-c", "import json, generator, generator.resources as r;"
                            "print(json.dumps([generator.__file__, str(r.templates_dir()),"
                            " str(r.boards_dir())]))"], work, env))
    site = venv.resolve()
    for path in where:
        assert Path(path).resolve().is_relative_to(site), where
        assert not Path(path).resolve().is_relative_to(REPO), where

    np.save(work / "digit2.npy", digit_2())
    cli = str(venv / "bin" / "microtvm-gen")
    run([cli, "export", str(MNIST / "mnist-8.onnx"), "--input-shape", "Input3=1,1,28,28",
         "-o", "mnist.tar"], work, env)
    run([cli, "generate", "mnist.tar", "--board", BOARD, "-o", "proj"], work, env)
    assert (work / "proj" / "README.md").is_file()
    assert (work / "proj" / "third_party" / "tvm" / "include").is_dir()
    run([cli, "build", "proj"], work, env)
    printed = run([cli, "run", "proj", "--input", "Input3=digit2.npy"], work, env)
    report = json.loads(run([cli, "run", "proj", "--input", "Input3=digit2.npy", "--json"],
                            work, env))
    scores = np.asarray(report["samples"][0]["outputs"]["Plus214_Output_0"]).reshape(-1)
    assert int(np.argmax(scores)) == 2
    assert "Plus214_Output_0" in printed
    # report: the installed package's report modules (stack analysis, pictures) at work
    shown = json.loads(run([cli, "report", "proj", "--json", "--html", "proj.html"], work, env))
    assert shown["totals"]["macs"] == 786_560 and (work / "proj.html").is_file()


def test_data_folders_installed_copy_source_tree_and_override(tmp_path, monkeypatch):
    """resources: the installed copies when present, else the source tree (checkout,
    editable install); MICROTVM_GEN_ROOT over both."""
    from generator import resources

    package = tmp_path / "site-packages" / "generator"
    installed = {"templates": package / "_templates", "boards": package / "_boards"}
    monkeypatch.setattr(resources, "INSTALLED", installed)  # not there: the source tree
    assert resources.templates_dir() == resources.PACKAGE_DIR.parent / "templates"
    assert resources.boards_dir() == resources.PACKAGE_DIR.parent / "boards"
    for folder in installed.values():
        folder.mkdir(parents=True)
    assert resources.templates_dir() == installed["templates"]
    assert resources.boards_dir() == installed["boards"]
    monkeypatch.setenv(resources.ROOT_ENV, str(tmp_path / "root"))
    assert resources.templates_dir() == tmp_path / "root" / "templates"
    assert resources.boards_dir() == tmp_path / "root" / "boards"
