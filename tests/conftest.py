"""Shared test fixtures: where archives live, which boards this machine can run."""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import os
import shutil
import signal
import sys
import types
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MTVG_SHARED", REPO.parent / "shared"))
REPO_FIXTURES = REPO / "tests" / "fixtures" / "mlf"
YES_NO = REPO / "examples" / "yes_no"

# Archives under a permissive license are in the repo; the others stay in ../shared.
IN_REPO = {
    "guberti-yesno-aot-packed-v5": YES_NO / "model.tar",
    "hannah-magicwand-graph-c-tvm0.11dev": REPO_FIXTURES / "hannah-magicwand-graph-c-tvm0.11dev"
    / "model.tar",
    "staticrt-conv1d-graph-llvm-v5": REPO_FIXTURES / "staticrt-conv1d-graph-llvm-v5"
    / "archive.tar",
}
IN_SHARED = {
    "gromero-sine-aot-c-v5": "model.tar",
    "etiss-kws-aot-usmp-tvm0.16": "model.tar",
}
BOARDS = ["host", "qemu-mps2-an385"]
# The board lists below come from the board files, so a new board is tested without a change
# here. mnist-8, the largest of the heavier models, takes 37,544 B of static RAM
# (docs/boards.md); a board runs them when its RAM beside the stack holds that much.
HEAVY_MODEL_RAM_BYTES = 37_544


@cache
def _board_links() -> list[tuple]:
    """(board, its link class) of every board file."""
    from generator.boards import list_boards, load_board
    from generator.device.links import link_of

    return [(spec, link_of(spec)) for spec in map(load_board, list_boards())]


def ram_beside_stack(spec) -> float:
    """RAM a board leaves to the firmware's static data (the host: unbounded)."""
    if spec.ram_bytes is None:
        return float("inf")
    return spec.ram_bytes - (spec.stack_bytes or 0)


# Every board this machine runs (the host and the QEMU boards). Each runs a small int8 model
# (each QEMU board twice: its ticks must repeat), the graph archive and one host-driven call;
# the heavier models (mnist, kws) run on HEAVY_BOARDS: every board they fit, once per core
# and floating-point ABI (the models' code is the compiler's for those flags whatever the
# chip around the core: qemu-netduinoplus2's Cortex-M4F is qemu-mps2-an386's). Models that
# do not fit a board (the micro:bit's 16 KiB) are checked to be refused at `generate`.
ALL_BOARDS = [b.name for b, link in _board_links() if link.runs_locally]
QEMU_BOARDS = [b.name for b, _ in _board_links() if b.qemu is not None]


def _core(spec) -> tuple[str, ...]:
    """What the compiled models depend on: the core and float ABI flags (host: its name)."""
    kinds = ("-mcpu=", "-march=", "-mabi=", "-mfpu=", "-mfloat-abi=")
    flags = tuple(sorted(f for f in spec.cflags if f.startswith(kinds)))
    return flags or (spec.name,)


def _heavy_boards() -> list[str]:
    seen: set[tuple[str, ...]] = set()
    chosen = []
    for spec, link in _board_links():  # sorted by name: the first of a core runs them
        if link.runs_locally and ram_beside_stack(spec) >= HEAVY_MODEL_RAM_BYTES \
                and _core(spec) not in seen:
            seen.add(_core(spec))
            chosen.append(spec.name)
    return chosen


HEAVY_BOARDS = _heavy_boards()
# The physical boards: flashed, reached over their serial ports (built here, never run).
PHYSICAL_BOARDS = [b.name for b, link in _board_links() if link.needs_flash]


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or a skip that says why."""
    path = SHARED.joinpath("fixtures", *parts)
    if not path.exists():
        pytest.skip(f"needs {path}: ../shared is absent (fixtures without a permissive license "
                    "are not in the repo; set MTVG_SHARED to point at a copy)")
    return path


def archive(name: str) -> Path:
    if name in IN_REPO:
        return IN_REPO[name]
    return shared_path("mlf", name, IN_SHARED[name])


def require_board_tools(board: str) -> None:
    """Skip unless this machine has the board's compiler (and its QEMU)."""
    from generator.boards import load_board

    spec = load_board(board)
    for tool in (spec.tool("gcc"), *([spec.qemu.binary] if spec.qemu else [])):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/bootstrap.sh installs it as root)")


def port_folder(platform: str, out: Path) -> Path:
    """out/platform holding a board port's files as a generated project's platform/ does: the
    port's own and those of the shared layers its port.toml names, side by side."""
    from generator.project.placement import linker_files
    from generator.project.ports import port_files

    folder = out / "platform"
    folder.mkdir(parents=True, exist_ok=True)
    for name, src in port_files(REPO / "templates" / "common" / "platform" / platform).items():
        shutil.copyfile(src, folder / name)
    for name, text in linker_files(None).items():  # what the linker scripts include
        (folder / name).write_bytes(text)
    return folder


def pytest_configure(config: pytest.Config) -> None:
    """MTVG_TEST_CPU_LOG=FILE: each test's CPU seconds into FILE (tests/cpu_accounting.py)."""
    if os.environ.get("MTVG_TEST_CPU_LOG"):
        from tests import cpu_accounting

        config.pluginmanager.register(cpu_accounting, "mtvg-cpu-accounting")


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch):
    """Tests never see a user's Zephyr tree or a relocated data folder."""
    monkeypatch.delenv("ZEPHYR_BASE", raising=False)
    monkeypatch.delenv("MICROTVM_GEN_ROOT", raising=False)
    monkeypatch.delenv("MICROTVM_GEN_ACCELERATOR_PATH", raising=False)
    monkeypatch.delenv("MICROTVM_GEN_PROGRESS", raising=False)  # main() sets it per command


def children(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is pid."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def serve_device_pid(serve_pid: int) -> int:
    """The device of a running `serve`: serve → its project's Project API server → QEMU, or
    (links serve opens itself, the host board's) serve → the firmware process."""
    def is_server(pid: int) -> bool:
        return b"microtvm_api_server" in Path(f"/proc/{pid}/cmdline").read_bytes()

    (pid,) = [device for child in children(serve_pid)
              for device in (children(child) if is_server(child) else [child])]
    return pid


def serve_server_pid(serve_pid: int) -> int:
    """The project's Project API server of a running `serve`."""
    (pid,) = [child for child in children(serve_pid)
              if b"microtvm_api_server" in Path(f"/proc/{child}/cmdline").read_bytes()]
    return pid


def _processes() -> dict[int, tuple[int, str]]:
    """Live processes (not zombies): pid -> (parent pid, command line)."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            state, ppid = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if state != "Z":
            found[int(proc.name)] = (int(ppid), cmdline.strip())
    return found


# Helpers Python itself keeps until the interpreter exits (not started by a test).
INTERPRETER_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def leaked_processes(root: int, basetemp: Path) -> dict[int, str]:
    """Descendants of `root`, and processes whose command line points into `basetemp`
    (QEMU, firmware, serve that outlived their parent)."""
    table = {pid: (ppid, cmd) for pid, (ppid, cmd) in _processes().items()
             if not any(helper in cmd for helper in INTERPRETER_HELPERS)}
    marker = f"{basetemp}/"
    leaked = {pid: cmd for pid, (_, cmd) in table.items() if marker in cmd and pid != root}
    frontier = [root, *leaked]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, cmd) in table.items():
            if ppid == parent:
                leaked[pid] = cmd
                frontier.append(pid)
    return leaked


@pytest.fixture(scope="session", autouse=True)
def _no_leaked_processes(tmp_path_factory):
    """The suite fails if a process a test started is still alive at its end (then killed).
    Under pytest-xdist each worker checks at its own end: its own descendants, and processes
    under its own basetemp (.../popen-gwN), not the other workers'."""
    yield
    if not Path("/proc/self/stat").exists():
        return
    leaked = leaked_processes(os.getpid(), tmp_path_factory.getbasetemp())
    for pid in leaked:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if leaked:
        pytest.fail("processes outlived the tests that started them: " + "; ".join(
            f"{pid}: {cmd[:160]}" for pid, cmd in sorted(leaked.items())), pytrace=False)


# ---- Host-driven mode ----------------------------------------------------------------------


def host_driven_operators():
    """The operators host-driven tests call: elementwise add, dense, conv2d (TE)."""
    from tvm import te, topi

    a = te.placeholder((256,), name="a")
    b = te.placeholder((256,), name="b")
    add = te.compute((256,), lambda i: a[i] + b[i], name="add")
    x = te.placeholder((4, 64), name="x")
    w = te.placeholder((32, 64), name="w")
    dense = topi.nn.dense(x, w)
    d = te.placeholder((1, 3, 16, 16), name="d")
    k = te.placeholder((8, 3, 3, 3), name="k")
    conv = topi.nn.conv2d_nchw(d, k, stride=1, padding=1, dilation=1)
    return {"vadd": [a, b, add], "dense": [x, w, dense], "conv2d": [d, k, conv]}


@pytest.fixture(scope="session")
def operators_archive(tmp_path_factory) -> Path:
    """An operator-style archive of host_driven_operators() (module 'ops')."""
    from generator.export.operators import export_operators

    dest = tmp_path_factory.mktemp("ops") / "ops.tar"
    export_operators(host_driven_operators(), dest, module="ops")
    return dest


def exported_once(tmp_path_factory, model: Path) -> Path:
    """`model` exported with the defaults once for the whole run: the xdist workers share
    the archive (a lock file keeps a second worker waiting while the first exports)."""
    from generator.export import export_model

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, above each worker's own
    folder = base / "once"
    folder.mkdir(exist_ok=True)
    key = f"{model.stem}-{hashlib.sha256(str(model.resolve()).encode()).hexdigest()[:8]}"
    dest = folder / f"{key}.tar"
    with open(folder / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not dest.exists():
            export_model(model, folder / f"{key}.partial.tar")
            (folder / f"{key}.partial.tar").rename(dest)
    return dest


def built_once(tmp_path_factory, model: Path, board: str) -> Path:
    """`model` (exported once) generated and built for `board` once for the whole run, shared
    by the xdist workers. Tests that share it only read it (report, run a copy of the ELF)."""
    from generator.build import build
    from generator.project.generate import generate

    require_board_tools(board)
    archive = exported_once(tmp_path_factory, model)
    folder = archive.parent
    project = folder / f"{archive.stem}-{board}"
    with open(folder / f"{archive.stem}-{board}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / f"{archive.stem}-{board}.built"
        if not done.exists():
            generate(archive, board, project, force=True)
            build(project)
            done.touch()
    return project


def host_driven_project(archive_path: Path, board: str, out: Path, sanitize: bool = False) -> Path:
    """Generate and build a host-driven project; returns its directory."""
    from generator.build import build
    from generator.project.generate import generate

    require_board_tools(board)
    generate(archive_path, board, out, project_type="host-driven")
    build(out, sanitize=sanitize)
    return out



# ---- Tiers: markers by rule, and the order tests start in -----------------------------------
#
# Every test gets its tier markers here, from what it is parametrised over, which fixtures it
# uses and what its code (and the fixtures' and test helpers' code it calls) names, so a new
# test is tiered without anyone remembering to mark it:
#   qemu    parametrised over a QEMU board (a board file with a [qemu] section, or a Zephyr
#           board run in QEMU with a Zephyr tree); a test parametrised over no board gets it
#           if its code names a QEMU board (a string, or a module constant holding one or a
#           list / dict of them)
#   tvm     imports tvm, or calls the exporter / tuner (generator.export, generator.tune,
#           generator.rpc.connect, the CLI's `export` and `tune`)
#   fuzz    runs a fuzzer: a test_fuzz* module's harness runs and its slow campaign
#   wheel   test_wheel*: builds and installs the wheel
#   zephyr  needs a Zephyr tree (the zephyr_tree fixture)
#   slow    as written in the tests, and the tests MEASURED (below) to take long
# scripts/test.sh --quick runs the tests none of qemu, slow, fuzz, wheel, zephyr marks.
# The modules whose tests take longest start first (MEASURED).

# Names whose use means TVM runs in the test's process (or in a CLI it starts).
TVM_MODULES = ("tvm", "generator.export", "generator.tune")
TVM_OBJECTS = {("generator.rpc", "connect")}
TVM_COMMANDS = {"export", "tune"}


def qemu_boards() -> frozenset[str]:
    """The board files that run in QEMU."""
    return frozenset(QEMU_BOARDS)


@cache
def _zephyr_boards() -> dict[str, bool]:
    """templates/zephyr's boards: name -> runs in QEMU."""
    from generator.project.zephyr import effective_board, load_board_table
    from generator.resources import templates_dir

    table = load_board_table(templates_dir() / "zephyr")
    return {name: effective_board(zb).qemu is not None for name, zb in table.items()}


def zephyr_qemu_boards() -> frozenset[str]:
    return frozenset(name for name, qemu in _zephyr_boards().items() if qemu)


@cache
def all_boards() -> frozenset[str]:
    """Every board name a test may be parametrised over: board files and Zephyr boards."""
    from generator.boards import list_boards

    return frozenset([*list_boards(), *_zephyr_boards()])


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _is_test_code(obj: object) -> bool:
    return isinstance(obj, types.FunctionType) and obj.__module__.split(".")[0] == "tests"


def _reached(funcs: list[Callable]) -> tuple[set[str], set[str], list[object]]:
    """The names, string constants and the objects those names are bound to, of `funcs` and
    of every function of tests/ they call (through globals or a local `from tests.x import`)."""
    names: set[str] = set()
    strings: set[str] = set()
    objects: list[object] = []
    seen: set[types.CodeType] = set()
    todo = [inspect.unwrap(f) for f in funcs if isinstance(inspect.unwrap(f), types.FunctionType)]
    while todo:
        func = todo.pop()
        if func.__code__ in seen:
            continue
        seen.add(func.__code__)
        own: set[str] = set()
        for code in _code_objects(func.__code__):
            own.update(code.co_names)
            strings.update(c for c in code.co_consts if isinstance(c, str))
        names |= own
        spaces = [func.__globals__, *(vars(sys.modules[n]) for n in own
                                      if n.startswith("tests.") and n in sys.modules)]
        for name in own:
            for space in spaces:
                if name in space:
                    obj = space[name]
                    objects.append(obj)
                    if _is_test_code(obj):
                        todo.append(obj)
    return names, strings, objects


def _uses_tvm(names: set[str], strings: set[str], objects: list[object]) -> bool:
    def tvm_module(module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in TVM_MODULES)

    if any(tvm_module(n) for n in names) or strings & TVM_COMMANDS:
        return True
    for obj in objects:
        module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(
            obj, "__module__", None)
        if isinstance(module, str) and (tvm_module(module) or (
                module, getattr(obj, "__name__", "")) in TVM_OBJECTS):
            return True
    return False


def _param_values(item: pytest.Item) -> list[object]:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return []
    values: list[object] = []
    for value in callspec.params.values():
        values.extend(value if isinstance(value, (tuple, list)) else [value])
    return values


def _fixture_defs(item: pytest.Item) -> list[pytest.FixtureDef]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return [defs[-1] for name in item.fixturenames
            if (defs := info.name2fixturedefs.get(name))]


def tier_markers(item: pytest.Item) -> set[str]:
    """The tier markers the rules above give `item`."""
    module = item.path.stem
    fixtures = set(item.fixturenames)
    values = [v for v in _param_values(item) if isinstance(v, str)]
    func = getattr(item, "function", None)
    funcs = [func] if func is not None else []
    funcs += [d.func for d in _fixture_defs(item) if _is_test_code(inspect.unwrap(d.func))]
    names, strings, objects = _reached(funcs)
    board_strings = set(strings)
    for obj in objects:  # module constants: a board, or a list / dict of boards
        if isinstance(obj, str):
            board_strings.add(obj)
        elif isinstance(obj, (list, tuple, set, frozenset, dict)):
            board_strings.update(v for v in [*obj, *(obj.values() if isinstance(obj, dict)
                                                     else ())] if isinstance(v, str))

    found = set()
    if any(v in all_boards() for v in values):  # parametrised over boards: the board decides
        if any(v in qemu_boards() for v in values) or (
                "zephyr_tree" in fixtures and any(v in zephyr_qemu_boards() for v in values)):
            found.add("qemu")
    elif board_strings & qemu_boards():
        found.add("qemu")
    if _uses_tvm(names, strings, objects):
        found.add("tvm")
    if module.startswith("test_fuzz") and ("harnesses" in fixtures
                                           or item.get_closest_marker("slow")):
        found.add("fuzz")
    if module.startswith("test_wheel"):
        found.add("wheel")
    if "zephyr_tree" in fixtures:
        found.add("zephyr")
    return found


# What the longest tests take: CPU seconds (the test's process and the processes it waited
# for) by test function (the most of its parameters; a module-scoped fixture's making counts
# in the first test using it), from MTVG_TEST_CPU_LOG (tests/cpu_accounting.py) over the
# whole suite on a 2-core machine; CPU seconds do not grow when the machine is busy, as wall
# seconds do. Tests from SLOW_SECONDS on are `slow` (out of --quick), and so are the tests
# using a fixture of SLOW_FIXTURES (there the time is the fixture's). The suite starts the
# longest modules first (their tests' sum), so its last minutes are not one worker running a
# long module while the other idles. Tests not listed count by their markers
# (expected_seconds).
MEASURED: dict[str, float] = {
    "test_fuzz_archives.py::test_mutated_archives_end_ok_or_in_one_line": 175,
    "test_tuning_records.py::test_tuned_archives_compute_what_untuned_ones_do": 72,
    "test_tune.py::test_ctrl_c_then_rerun_continues_without_measuring_again": 60,
    "test_real_archives.py::test_snu_graph_with_params": 47,
    "test_tune_tracker.py::test_two_devices_under_one_key_share_the_batches_and_one_dies": 45,
    "test_wheel.py::test_installed_wheel_exports_generates_builds_and_runs": 43,
    "test_pipeline.py::test_pes_from_a_stock_tracker": 35,
    "test_tuning_records.py::test_cli_tunes_the_int8_hello_world": 40,
    "test_tune.py::test_tune_on_qemu_mps2_an385_stopped_and_rerun_ends_with_the_same_best": 34,
    "test_accelerators.py::test_cmsis_nn_kws_and_hello_world_equal_tflite_micro": 29,
    "test_cmsis_nn_glue.py::test_cmsis_nn_kernels_bit_exact_in_qemu": 24,
    "test_profile.py::test_calls_equal_time_evaluator_through_serve": 20,
    "test_corpus.py::test_what_export_writes_generate_reads": 20,
    "test_tune.py::test_a_candidate_that_hangs_is_failed_after_the_reply_timeout": 20,
    "test_cmsis_nn_glue.py::test_conv2d_bit_exact": 17,
    "test_pipeline.py::test_killed_pe_stops_the_stream_and_resume_finishes_it": 11,
    "test_pipeline.py::test_a_middle_pe_with_the_vanilla_accelerator": 9,
    "test_pipeline.py::test_a_hung_pe_stops_the_stream_after_the_timeout": 6,
    "test_tflite_ops_svdf_int8_state.py::test_keyword_scrambled_model": 17,
    "test_fuzz.py::test_fuzz_briefly": 16,
    "test_cmsis_nn.py::test_cmsis_nn_partition_builds_and_runs": 15,
    "test_travel.py::test_cmsis_nn_tree_named_again_after_a_move": 15,
    "test_tflite_ops_int16_more.py::test_corpus_model_equals_tflm": 14,
    "test_accelerators.py::test_vanilla_then_cmsis_nn_in_one_export": 14,
    "test_resnet_int8.py::test_resnet_int8_is_integer_and_bit_exact_on_the_host": 13,
    "test_tuning_records.py::test_records_are_applied_and_the_archive_says_which": 11,
    "test_tuning_records.py::test_a_tuned_kernel_with_local_buffers_runs_in_the_arena": 10,
    "test_tune.py::test_tune_measures_checks_and_resumes": 10,
    "test_accelerators.py::test_export_for_a_dsp_board_defaults_to_arm_dsp_then_cmsis_nn": 10,
    "test_accelerators.py::test_dsp_default_runs_a_one_channel_depthwise_as_our_convolution":
        10,
    "test_arm_dsp.py::test_kernels_bit_exact_in_qemu": 10,
    "test_host_driven.py::test_stock_client_calls_three_operators": 9,
    "test_export.py::test_kws_bit_identical_to_tflite_micro": 9,
    "test_cmsis_nn_glue.py::test_driver_cross_compiles_and_links": 9,
    "test_build_errors.py::test_run_keeps_the_sanitizer_of_the_last_build": 9,
    "test_tune.py::test_a_candidate_that_crashes_the_device_fails_and_the_next_runs_on_a_fresh_one":
        9,
    "test_serve_firmware.py::test_qemu_board_takes_a_new_firmware": 8,
    "test_accelerators.py::test_kws_on_vanilla_bit_exact_with_tflite_micro": 8,
    "test_fuzz.py::test_seed_corpus_replays_cleanly": 8,
    "test_host_driven.py::test_one_call_on_every_qemu_board": 8,
    "test_serve_firmware.py::test_upload_and_load_module_replace_the_firmware": 7,
    "test_accelerators.py::test_mnist_conv_layers_on_vanilla": 7,
    "test_serve_firmware.py::test_two_devices_through_a_stock_tracker": 7,
    "test_template_backends.py::test_a_third_template_generates_builds_and_runs_on_the_host": 6,
    "test_host_driven.py::test_two_sessions_through_a_stock_tracker": 6,
    "test_travel.py::test_moved_project_builds_without_python_and_runs": 6,
    "test_serve_trust.py::test_upload_after_a_download_is_not_slower": 6,
    "test_importer_boards.py::test_importer_model_equals_tflite_on_the_board": 6,
    "test_end_to_end.py::test_kws_usmp_25_vectors": 6,
    "test_model_names.py::test_generate_and_run_by_either_name": 5,
    "test_export.py::test_mnist_digits_match_tvm_llvm": 5,
    "test_export.py::test_hello_world_matches_tflite_micro": 5,
    "test_real_archives.py::test_esp32_cifar10_usmp_frog": 5,
    "test_physical_boards.py::test_host_driven_project_builds": 5,
    "test_serve_trust.py::test_stale_handle_after_a_restart_gets_an_error": 5,
    "test_profile.py::test_calls_add_up_to_the_inference": 6,
    "test_report_stack.py::test_qemu_bound_covers_a_painted_run": 5,
}
SLOW_SECONDS = 20.0
SLOW_FIXTURES = {"test_tuning_records.py::tuned_int8", "test_tuning_records.py::tuned_float",
                 "test_tuning_records.py::tuned_conv"}


def _function_id(item: pytest.Item) -> str:
    """test_x.py::test_y: the node id's path under tests/, without parameters or group."""
    return item.nodeid.split("@")[0].split("[")[0].removeprefix("tests/")


def measured_slow(item: pytest.Item) -> bool:
    fixtures = {f"{inspect.unwrap(d.func).__module__.rsplit('.', 1)[-1]}.py::{d.argname}"
                for d in _fixture_defs(item)}
    return MEASURED.get(_function_id(item), 0.0) >= SLOW_SECONDS or bool(fixtures
                                                                         & SLOW_FIXTURES)


def expected_seconds(item: pytest.Item) -> float:
    known = MEASURED.get(_function_id(item))
    if known is not None:
        return known
    marks = {m.name for m in item.iter_markers()}
    return 10.0 if "slow" in marks else 5.0 if "qemu" in marks else 2.0 if "tvm" in marks \
        else 0.5


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):
    for item in items:
        found = tier_markers(item) | ({"slow"} if measured_slow(item) else set())
        for name in sorted(found - {m.name for m in item.iter_markers()}):
            item.add_marker(name)
    result = yield
    # After pytest's own ordering (which keeps the tests of a module-scoped fixture
    # together): the modules whose tests take longest first, each module's tests together
    # (scripts/test.sh gives each module to one worker: --dist loadfile).
    modules: dict[Path, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    ordered = sorted(modules.values(), key=lambda tests: -sum(map(expected_seconds, tests)))
    items[:] = [item for tests in ordered for item in tests]
    return result
