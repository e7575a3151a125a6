"""The command line surface: help for every command, --json output, version agreement."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from generator import RUNTIME_ABI_VERSION, __version__
from generator.cli import COMMANDS, main
from tests.conftest import QEMU_BOARDS, REPO, YES_NO


@pytest.mark.parametrize("name", [c.name for c in COMMANDS])
def test_every_command_has_help(name, capsys):
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "commands" in capsys.readouterr().err


def test_info_json(capsys):
    assert main(["info", str(YES_NO / "model.tar"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["version"] == 5
    assert data["modules"][0]["inputs"][0]["name"] == "Reshape_1"


def test_boards_json(capsys):
    assert main(["boards", "--json"]) == 0
    names = [b["name"] for b in json.loads(capsys.readouterr().out)["boards"]]
    assert names == sorted(names)
    assert {"host", *QEMU_BOARDS, "nucleo-f746zg", "nucleo-l4r5zi", "nrf52840dk",
            "rpi-pico"} <= set(names)


def test_python_dash_m_matches_console_version():
    out = subprocess.run([sys.executable, "-m", "generator", "--version"], capture_output=True,
                         text=True, cwd=REPO, check=True).stdout
    assert out.strip() == f"microtvm-gen {__version__}"


def test_versions_agree():
    """The package, pyproject.toml and the C runtime's ABI macro say the same thing."""
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) == __version__
    header = (REPO / "templates/common/include/mtvg/runtime.h").read_text()
    abi = re.search(r"#define MTVG_RUNTIME_ABI_VERSION (\d+)", header).group(1)
    assert int(abi) == RUNTIME_ABI_VERSION


def test_bad_input_file_is_one_line(tmp_path, capsys):
    project = tmp_path / "p"
    assert main(["generate", str(YES_NO / "model.tar"), "--board", "host", "-o",
                 str(project)]) == 0
    capsys.readouterr()
    bad = tmp_path / "x.npy"
    import numpy as np

    np.save(bad, np.zeros((1, 1960), dtype=np.float32))
    assert main(["run", str(project), "--input", f"Reshape_1={bad}"]) == 2
    err = capsys.readouterr().err
    assert "must be int8, got float32" in err and len(err.strip().splitlines()) == 1
    assert main(["run", str(project), "--input", f"nope={bad}"]) == 2
    assert "no input 'nope'" in capsys.readouterr().err
    assert main(["run", str(tmp_path), "--input", f"x={bad}"]) == 2
    assert "not a microtvm-gen project" in capsys.readouterr().err


def test_several_samples_in_one_file_point_at_batch_and_batch_runs_them(tmp_path, capsys):
    """A stacked .npy or a raw file of several samples without --batch: one line whose hint
    is --batch; following it runs each sample (a raw file is cut into samples)."""
    import numpy as np

    project = tmp_path / "p"
    assert main(["generate", str(YES_NO / "model.tar"), "--board", "host", "-o",
                 str(project)]) == 0
    yes = np.fromfile(YES_NO / "yes_0a2b400e_nohash_0.raw", dtype=np.int8)
    no = np.fromfile(YES_NO / "no_0a2b400e_nohash_0.raw", dtype=np.int8)
    stacked, raw = tmp_path / "three.npy", tmp_path / "three.raw"
    np.save(stacked, np.stack([yes, no, yes]).reshape(3, 1, 1960))
    np.concatenate([yes, no, yes]).tofile(raw)
    capsys.readouterr()
    for path in (stacked, raw):
        argv = ["run", str(project), "--input", f"Reshape_1={path}", "--json"]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "holds 3 of them" in err and "hint: add --batch" in err
        assert len(err.strip().splitlines()) == 1
        assert main([*argv, "--batch"]) == 0
        samples = json.loads(capsys.readouterr().out)["samples"]
        scores = [list(s["outputs"].values())[0] for s in samples]
        assert len(scores) == 3 and scores[0] == scores[2] != scores[1]
    # A batch of one is still a batch: its outputs are stacked along a first axis.
    one = tmp_path / "one.npy"
    np.save(one, yes.reshape(1, 1, 1960))
    assert main(["run", str(project), "--input", f"Reshape_1={one}", "--batch",
                 "--output-dir", str(tmp_path / "out1")]) == 0
    assert np.load(tmp_path / "out1" / "output.npy").shape == (1, 4)  # the output is [4]
    odd = tmp_path / "odd.raw"
    odd.write_bytes(raw.read_bytes() + b"\x00")
    assert main(["run", str(project), "--input", f"Reshape_1={odd}", "--batch"]) == 2
    assert "not a whole number of samples of 1960 bytes" in capsys.readouterr().err


def test_run_time_units_follow_the_board():
    """-icount boards count instructions (1 per 2**shift virtual ns), the host ns, a real
    board's CPU-clock timer cycles."""
    from dataclasses import replace

    from generator.boards import load_board
    from generator.run import timing

    qemu = load_board("qemu-mps2-an385")
    assert qemu.qemu.icount_shift == 0 and qemu.clock_hz == 25_000_000
    t = timing(qemu, 638_617, 25_000_000)
    assert (t.unit, t.count, t.seconds) == ("instructions", 25_544_680, None)
    assert t.to_json()["instructions"] == 25_544_680 and t.to_json()["ticks"] == 638_617
    shifted = replace(qemu, qemu=replace(qemu.qemu, icount_shift=2))
    assert timing(shifted, 1000, 25_000_000).count == 10_000  # 1 instruction per 4 ns
    assert timing(qemu, 1000, 32_000_000).count == 31_250  # a 32 MHz timer
    host = timing(load_board("host"), 1500, 10**9)
    assert (host.unit, host.count, host.seconds) == ("ns", 1500, 1.5e-6)
    real = replace(qemu, link="serial", qemu=None)
    assert timing(real, 1000, 25_000_000).unit == "cycles"
    assert timing(real, 1000, 1_000_000).unit == "ticks"  # a timer off the CPU clock
    no_icount = replace(qemu, qemu=replace(qemu.qemu, icount_shift=None))
    assert timing(no_icount, 1000, 25_000_000).unit == "ticks"


def test_build_says_where_an_exported_models_activations_live(tmp_path, capsys):
    """An exported model keeps its activations in a static pool of its own code: `build`
    says so (it said "workspace arena 0 B reserved for 32 B the archive says it needs")."""
    model = REPO / "tests" / "fixtures" / "models" / "hello_world" / "hello_world_int8.tflite"
    archive, project = tmp_path / "m.tar", tmp_path / "p"
    assert main(["export", str(model), "-o", str(archive)]) == 0
    assert main(["generate", str(archive), "--board", "host", "-o", str(project)]) == 0
    pool = sum(p["size_bytes"] for p in
               json.loads((project / "project.json").read_text())["module"]["pools"])
    capsys.readouterr()
    assert main(["build", str(project)]) == 0
    out = capsys.readouterr().out
    assert f"activations {pool} B in the model code's own static pool" in out
    assert "arena 0 B reserved" not in out
    assert main(["build", str(project), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model_pool_bytes"] == pool


@pytest.mark.parametrize("board", ["host", "qemu-mps2-an385"])
def test_ctrl_c_during_run_is_one_line_and_exit_130(tmp_path, board):
    """Ctrl-C in a terminal signals the whole process group: `run --batch` (and its Project
    API server, and the firmware) stop with exit 130 and one line; no traceback from the
    server child, no process left; the samples finished before it were printed as each
    finished, and their outputs are written."""
    import os
    import signal
    import time

    import numpy as np

    from tests.conftest import leaked_processes, require_board_tools

    require_board_tools(board)
    project = tmp_path / "p"
    assert main(["generate", str(YES_NO / "model.tar"), "--board", board, "-o",
                 str(project)]) == 0
    assert main(["build", str(project)]) == 0
    one = np.fromfile(YES_NO / "yes_0a2b400e_nohash_0.raw", dtype=np.int8).reshape(1, 1960)
    many = tmp_path / "many.npy"
    np.save(many, np.repeat(one[None], 2000, axis=0))
    out = tmp_path / "outputs"
    proc = subprocess.Popen([sys.executable, "-m", "generator", "run", str(project), "--batch",
                             "--input", f"Reshape_1={many}", "--output-dir", str(out)],
                            cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    for line in proc.stdout:
        if line.startswith("[1] run time"):  # two samples finished
            break
    os.killpg(proc.pid, signal.SIGINT)
    printed = proc.stdout.read()
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130
    assert "Traceback" not in rest, rest
    last = rest.strip().splitlines()[-1]
    assert last.startswith("microtvm-gen: interrupted after "), rest
    done = int(last.split("after ")[1].split(" of ")[0])
    assert 2 <= done < 2000
    assert printed.count("run time") == done - 2  # [0] and [1] were read above
    saved = np.load(out / "output.npy")
    assert saved.shape[0] == done
    assert (saved == saved[0]).all()  # the same input every time: the same scores
    deadline = time.monotonic() + 5
    while leaked_processes(os.getpid(), tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leaked_processes(os.getpid(), tmp_path)


def test_ctrl_c_during_build_is_one_line_and_exit_130(tmp_path):
    """Ctrl-C while the compiler runs (ccache off, so it does run): the compilers stop with
    their process group, the Project API server child says nothing, the CLI one line, exit
    130; no process left; the next build finishes the job."""
    import os
    import signal
    import time

    from tests.conftest import leaked_processes, require_board_tools

    board = "qemu-mps2-an385"
    require_board_tools(board)
    project = tmp_path / "p"
    assert main(["generate", str(YES_NO / "model.tar"), "--board", board, "-o",
                 str(project)]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "generator", "build", str(project)],
                            cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env={**os.environ, "CCACHE_DISABLE": "1"})
    assert proc.stderr is not None and proc.stdout is not None
    for line in proc.stdout:  # progress, from the Project API server child too
        if "compiling" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    err = proc.stderr.read()
    assert "Traceback" not in err and err.strip().splitlines() == ["microtvm-gen: interrupted"]
    assert "built" not in proc.stdout.read()
    deadline = time.monotonic() + 5
    while leaked_processes(os.getpid(), tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not leaked_processes(os.getpid(), tmp_path)
    assert main(["build", str(project)]) == 0
