"""Seeds of CMake's compiler checks (generator/cmake_seed.py): a seeded first configure
gives the very build a probing one gives, a seed never costs a build, and seeds are kept
apart by toolchain."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from generator import cmake_seed
from generator.build import build
from generator.project.generate import generate
from generator.toolchain import BUILD_DIR, ninja_program
from tests.conftest import BOARDS, YES_NO, require_board_tools

YES_NO_TAR = YES_NO / "model.tar"


@pytest.fixture
def seeds(tmp_path, monkeypatch) -> Path:
    """An empty seed folder of this test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(cmake_seed.SEEDS_ENV, raising=False)
    return cmake_seed.seed_root()


def _commands(project: Path) -> list[str]:
    """Every command of the project's build, as Ninja would run them."""
    ninja = ninja_program()
    assert ninja is not None
    out = subprocess.run([ninja, "-C", str(project / BUILD_DIR), "-t", "commands"],
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def _rebuild(project: Path) -> str:
    """A build from a fresh build directory; its log."""
    subprocess.run(["rm", "-rf", str(project / BUILD_DIR)], check=True)
    build(project)
    return (project / BUILD_DIR / "build.log").read_text()


def test_a_seeded_configure_builds_what_a_probing_one_builds(tmp_path, seeds):
    for board in BOARDS:
        require_board_tools(board)
        project = tmp_path / board
        generate(YES_NO_TAR, board, project)
        probing_log = _rebuild(project)
        assert "compiler identification" in probing_log
        probed = _commands(project)
        firmware = (project / BUILD_DIR / "firmware.elf").read_bytes()

        seeded_log = _rebuild(project)
        assert "compiler identification" not in seeded_log  # no probe ran
        assert cmake_seed.INITIALIZED in seeded_log
        assert _commands(project) == probed
        assert (project / BUILD_DIR / "firmware.elf").read_bytes() == firmware
    # One seed per toolchain, and no project's own path stays in one.
    assert len(list(seeds.iterdir())) == len(BOARDS)
    for seed in seeds.iterdir():
        for f in seed.iterdir():
            assert str(tmp_path) not in f.read_text()


def test_a_broken_seed_costs_a_retry_not_the_build_and_seeds_can_be_off(tmp_path, seeds,
                                                                        monkeypatch):
    project = tmp_path / "p"
    generate(YES_NO_TAR, "host", project)
    _rebuild(project)
    (seed,) = seeds.iterdir()
    (seed / "CMakeCCompiler.cmake").write_text('message(FATAL_ERROR "a broken seed")\n')
    log = _rebuild(project)
    assert "a broken seed" not in log and "compiler identification" in log
    assert (project / BUILD_DIR / "firmware.elf").is_file()
    # The broken seed is gone; the plain configure left a good one in its place.
    assert "FATAL_ERROR" not in (seed / "CMakeCCompiler.cmake").read_text()

    monkeypatch.setenv(cmake_seed.SEEDS_ENV, "0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "other-cache"))
    assert "compiler identification" in _rebuild(project)
    assert not (tmp_path / "other-cache" / "microtvm-gen").exists()
