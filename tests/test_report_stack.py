"""The stack bound (generator/report/stack/): the .su and prologue parsers on code GCC
compiles here for Thumb-2, RISC-V and x86-64; recursion, indirect calls and dynamic frames
make it unbounded; and on real firmwares (kws, mnist) the bound covers the stack a painted
run really used, within 2x: in QEMU (an385) and on the host.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from generator.errors import InputError
from generator.report.stack import (
    PROLOGUES,
    ElfImage,
    cortex_m_handlers,
    parse_disassembly,
    parse_su,
    read_su_files,
    run_objdump,
    stack_bound,
    su_frame_of,
)
from tests.conftest import REPO, built_once, require_board_tools

# ---- a small program with every case, compiled for each architecture ----------------------

SMALL_C = r"""
struct node { struct node *left, *right; };
typedef int (*op_fn)(int);

#if defined(__arm__) && defined(__ARM_FP)
#define CLOBBERED "r4", "r5", "r6", "r8", "s16", "s17", "d9"
#elif defined(__arm__)
#define CLOBBERED "r4", "r5", "r6", "r8"
#elif defined(__riscv)
#define CLOBBERED "s1", "s2", "s3"
#else
#define CLOBBERED "rbx", "r12", "r13"
#endif

int twice(int x) { return 2 * x; }
__attribute__((noinline)) int leaf(int x) { return x + 1; }
__attribute__((noinline)) int depth(const struct node *n) {
  if (!n) return 0;
  int a = depth(n->left), b = depth(n->right);
  return 1 + (a > b ? a : b);
}
__attribute__((noinline)) int apply(op_fn f, int x) { return f(x) + 1; }
__attribute__((noinline)) int big(int x) {
  volatile char buf[300];
  buf[x & 255] = 1;
  return buf[0] + leaf(x);
}
__attribute__((noinline)) int huge(int x) {
  volatile char buf[5000];
  buf[x & 4095] = 1;
  return buf[0] + leaf(x);
}
__attribute__((noinline)) int vla(int n) { volatile char buf[n]; buf[0] = 1; return buf[0]; }
__attribute__((noinline)) int saves(int x) {
  __asm__ volatile("" ::: CLOBBERED);
  return leaf(x) + x;
}
__attribute__((noinline)) int tail(int x) { return leaf(x * 3); }
int main(int argc, char **argv) {
  (void)argv;
  return apply(twice, argc) + big(argc) + huge(argc) + depth(0) + vla(argc) + saves(argc) +
         tail(argc);
}
"""

# arch: (compiler, flags, objdump)
TOOLCHAINS = {
    "cortex-m0": ("arm-none-eabi-gcc", ["-mcpu=cortex-m0", "-mthumb"], "arm-none-eabi-objdump"),
    "cortex-m3": ("arm-none-eabi-gcc", ["-mcpu=cortex-m3", "-mthumb"], "arm-none-eabi-objdump"),
    "cortex-m4f": ("arm-none-eabi-gcc", ["-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16",
                                         "-mfloat-abi=hard"], "arm-none-eabi-objdump"),
    "rv32imac": ("riscv64-unknown-elf-gcc", ["-march=rv32imac", "-mabi=ilp32"],
                 "riscv64-unknown-elf-objdump"),
    "x86-64": ("gcc", [], "objdump"),
}


def _tools(target: str) -> tuple[str, list[str], str]:
    cc, flags, objdump = TOOLCHAINS[target]
    for tool in (cc, objdump):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/bootstrap.sh installs it as root)")
    return cc, flags, objdump


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Callable[[str], tuple[Path, Path, str]]:
    """target -> (linked ELF, its .su file, objdump), compiled on first use."""
    built: dict[str, tuple[Path, Path, str]] = {}
    folder = tmp_path_factory.mktemp("small")
    (folder / "small.c").write_text(SMALL_C)

    def compile_for(target: str) -> tuple[Path, Path, str]:
        if target not in built:
            cc, flags, objdump = _tools(target)
            obj, elf = folder / f"{target}.o", folder / f"{target}.elf"
            subprocess.run([cc, *flags, "-O2", "-fstack-usage", "-c", str(folder / "small.c"),
                            "-o", str(obj)], check=True, cwd=folder)
            subprocess.run([cc, *flags, "-nostdlib", "-nostartfiles", "-Wl,-e,main", str(obj),
                            "-o", str(elf)], check=True, cwd=folder)
            built[target] = (elf, folder / f"{target}.su", objdump)
        return built[target]

    return compile_for


def test_su_lines_of_each_kind():
    """Lines as GCC writes them (the first and last from a generated project's build)."""
    text = ("../app/app.c:173:13:emit_counter\t72\tstatic\n"
            "small.c:12:31:vla\t16\tdynamic\n"
            "C:/x/y.c:3:1:pushes\t40\tdynamic,bounded\n"
            "../platform/semihost.h:25:24:mtvg_semihost.isra\t0\tstatic\n"
            "not a line\n")
    frames = parse_su(text)
    assert {n: (f.bytes, f.bounded) for n, f in frames.items()} == {
        "emit_counter": (72, True), "vla": (16, False), "pushes": (40, True),
        "mtvg_semihost.isra": (0, True)}
    # GCC writes a clone's name without the number its symbol has
    assert su_frame_of("mtvg_semihost.isra.0", frames) == frames["mtvg_semihost.isra"]
    assert su_frame_of("absent", frames) is None


def test_su_of_one_name_in_two_files_keeps_the_larger(tmp_path):
    (tmp_path / "a.su").write_text("a.c:1:1:put\t8\tstatic\n")
    (tmp_path / "b.su").write_text("b.c:1:1:put\t24\tstatic\n")
    frame = read_su_files([tmp_path / "a.su", tmp_path / "b.su", tmp_path / "missing.su"])["put"]
    assert (frame.bytes, frame.bounded) == (24, True)


@pytest.mark.parametrize("target", list(TOOLCHAINS))
def test_prologues_agree_with_gcc_stack_usage(small, target):
    """Every function's frame read from its code is the one GCC's -fstack-usage wrote; the
    variable-length array's is dynamic both ways."""
    elf, su_path, objdump = small(target)
    su = parse_su(su_path.read_text())
    image = ElfImage(elf)
    functions = {f.name: f for f in parse_disassembly(run_objdump(elf, objdump), image.arch)}
    assert set(su) <= set(functions)
    for name, frame in su.items():
        found = PROLOGUES[image.arch](functions[name])
        assert bool(found.dynamic) == (not frame.bounded), name
        if frame.bounded:
            assert found.bytes == frame.bytes, name
    assert su["saves"].bytes > su["leaf"].bytes  # the callee-saved registers are counted


@pytest.mark.parametrize("target", list(TOOLCHAINS))
def test_recursion_indirect_call_and_dynamic_frame_are_unbounded(small, target):
    elf, su, objdump = small(target)
    found = stack_bound(elf, objdump, [su], ["main"], [], 0, 4096)
    assert found.bound_bytes is None and found.reserved_bytes == 4096
    assert found.reason.startswith("unbounded: ") and "\n" not in found.reason
    assert "recursion: depth calls itself" in found.reason
    assert "apply makes an indirect call" in found.reason
    assert "vla has a dynamic frame" in found.reason
    assert found.path[0] == "main"
    # Without the .su file the prologues tell the same
    found = stack_bound(elf, objdump, [], ["main"], [], 0, None)
    assert found.bound_bytes is None and "vla moves sp at run time" in found.reason


@pytest.mark.parametrize("target", list(TOOLCHAINS))
def test_bounded_paths_calls_tail_calls_and_handlers(small, target):
    elf, su_path, objdump = small(target)
    su = parse_su(su_path.read_text())
    frame = {name: f.bytes for name, f in su.items()}
    found = stack_bound(elf, objdump, [su_path], ["big"], [], 32, None)
    assert (found.bound_bytes, found.path) == (frame["big"] + frame["leaf"], ["big", "leaf"])
    assert "1 B" not in found.reason and "2 functions from -fstack-usage" in found.reason
    found = stack_bound(elf, objdump, [su_path], ["tail"], [], 32, None)  # a branch to leaf
    assert (found.bound_bytes, found.path) == (frame["tail"] + frame["leaf"], ["tail", "leaf"])
    found = stack_bound(elf, objdump, [su_path], ["big", "tail"], ["saves", "leaf"], 32, 8192)
    assert found.bound_bytes == frame["big"] + frame["leaf"] + 32 + frame["saves"] + \
        frame["leaf"]
    assert found.path == ["big", "leaf", "saves", "leaf"]
    assert "handlers assumed not to nest" in found.reason
    assert found.to_json()["bound_bytes"] == found.bound_bytes


def test_missing_objdump_root_or_elf_is_one_line(small, tmp_path):
    elf, su, objdump = small("x86-64")
    with pytest.raises(InputError, match="not on PATH"):
        stack_bound(elf, "no-such-objdump", [su], ["main"], [], 0, None)
    if shutil.which("arm-none-eabi-objdump"):  # another architecture's objdump
        with pytest.raises(InputError, match="arm-none-eabi-objdump could not disassemble"):
            stack_bound(elf, "arm-none-eabi-objdump", [su], ["main"], [], 0, None)
    with pytest.raises(InputError, match="no function 'nowhere'"):
        stack_bound(elf, objdump, [su], ["nowhere"], [], 0, None)
    (tmp_path / "cut.elf").write_bytes(elf.read_bytes()[:80])
    with pytest.raises(InputError, match="cannot read"):
        stack_bound(tmp_path / "cut.elf", objdump, [su], ["main"], [], 0, None)
    (tmp_path / "text.elf").write_text("not an ELF")
    with pytest.raises(InputError, match="cannot read"):
        stack_bound(tmp_path / "text.elf", objdump, [su], ["main"], [], 0, None)
    with pytest.raises(InputError, match="cannot read"):
        stack_bound(tmp_path / "absent.elf", objdump, [su], ["main"], [], 0, None)


# ---- real firmwares: the bound against a painted run ---------------------------------------

MODELS = {"kws": REPO / "tests" / "fixtures" / "models" / "mlperftiny_kws" /
          "kws_ref_model.tflite",
          "mnist": REPO / "examples" / "mnist" / "mnist-8.onnx"}
LABELS = {"kws": "kws", "mnist": "mnist-8"}  # as docs/report.md's table names them
QEMU_BOARD = "qemu-mps2-an385"
PAINT = bytes([0xA5, 0x5A, 0xC3, 0x3C])  # a word no code writes by chance
MAX_RATIO = 2.0
REPORT_DOC = REPO / "docs" / "report.md"


def documented(firmware: str) -> tuple[int, int]:
    """(bound, used) of `firmware`'s row in docs/report.md's table, which these tests keep
    true: a change that moves a bound or a painted depth fails here until the table says
    the new numbers."""
    for line in REPORT_DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == firmware:
            return int(cells[1].removesuffix(" B")), int(cells[2].removesuffix(" B"))
    raise AssertionError(f"docs/report.md has no row for {firmware}")


def _project(tmp_path_factory, model: str, board: str) -> Path:
    return built_once(tmp_path_factory, MODELS[model], board)


def _sample(project: Path) -> list[bytes]:
    """One input per model input: mnist's digit 2, else fixed pseudo-random bytes."""
    specs = json.loads((project / "project.json").read_text())["module"]["inputs"]
    if specs[0]["name"] == "Input3":
        from PIL import Image

        image = Image.open(REPO / "examples" / "mnist" / "digit-2.jpg").resize((28, 28))
        return [np.asarray(image).astype("<f4").tobytes()]
    rng = np.random.default_rng(7)
    return [rng.integers(-128, 128, s["size_bytes"], dtype=np.int8).tobytes() for s in specs]


class Qmp:
    """QEMU's machine protocol on a Unix socket: enough to save guest memory to a file."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(30)
        self.sock.connect(str(path))
        self.stream = self.sock.makefile("rwb")
        json.loads(self.stream.readline())  # the greeting
        self.command("qmp_capabilities")

    def command(self, name: str, **arguments) -> dict:
        self.stream.write(json.dumps({"execute": name, "arguments": arguments}).encode()
                          + b"\n")
        self.stream.flush()
        while True:
            reply = json.loads(self.stream.readline())
            if "error" in reply:
                raise AssertionError(f"QMP {name}: {reply['error']}")
            if "return" in reply:
                return reply["return"]

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


def _painted_depth(dump: bytes) -> int:
    """Bytes of a painted stack that were written: from its top down to the lowest word that
    lost the paint."""
    untouched = 0
    while untouched < len(dump) and dump[untouched:untouched + len(PAINT)] == PAINT:
        untouched += len(PAINT)
    return len(dump) - untouched


def qemu_stack_use(project: Path, work: Path) -> int:
    """The deepest the stack went in a QEMU session with one inference: the stack region
    painted before the CPU starts (QEMU's loader device), read back before the firmware
    exits (QMP's pmemsave)."""
    from generator.boards import load_board
    from generator.device.links import qemu_argv
    from generator.device.runner import Device
    from generator.link.app_client import AppClient
    from generator.run import BOOT_TIMEOUT, REPLY_TIMEOUT

    elf = project / "build" / "firmware.elf"
    symbols = ElfImage(elf).symbols
    limit, top = symbols["__stack_limit__"], symbols["__stack_top__"]
    paint, dump, qmp_socket = work / "paint.bin", work / "stack.bin", work / "qmp.sock"
    paint.write_bytes(PAINT * ((top - limit) // len(PAINT)))
    argv = qemu_argv(load_board(QEMU_BOARD), elf) + [
        "-qmp", f"unix:{qmp_socket},server=on,wait=off",
        "-device", f"loader,file={paint},addr={limit:#x},force-raw=on"]
    outputs = json.loads((project / "project.json").read_text())["module"]["outputs"]
    with Device(argv, f"QEMU ({QEMU_BOARD})", stops_at_end_of_input=False) as device:
        client = AppClient(device, REPLY_TIMEOUT)
        client.hello(BOOT_TIMEOUT)
        for index, data in enumerate(_sample(project)):
            client.set_input(index, data)
        assert client.run().status == 0
        for index, spec in enumerate(outputs):
            client.get_output(index, spec["size_bytes"])
        qmp = Qmp(qmp_socket)
        try:
            qmp.command("pmemsave", val=limit, size=top - limit, filename=str(dump))
        finally:
            qmp.close()
        client.quit(0)
        assert device.wait(BOOT_TIMEOUT) == 0
    return _painted_depth(dump.read_bytes())


@pytest.mark.parametrize("model", list(MODELS))
def test_qemu_bound_covers_a_painted_run(tmp_path_factory, tmp_path, model):
    """The bound `report` gives (its roots, the vector table's handlers, the frame)."""
    from generator.report.report import project_report

    require_board_tools(QEMU_BOARD)
    project = _project(tmp_path_factory, model, QEMU_BOARD)
    assert "SysTick_Handler" in cortex_m_handlers(project / "build" / "firmware.elf")
    found = project_report(project).stack
    used = qemu_stack_use(project, tmp_path)
    print(f"{model} on {QEMU_BOARD}: bound {found.bound_bytes} B, painted run used {used} B; "
          f"path {' > '.join(found.path)}; {found.reason}")
    assert found.bound_bytes is not None, found.reason
    assert 0 < used <= found.bound_bytes <= MAX_RATIO * used
    assert (found.bound_bytes, used) == documented(f"{LABELS[model]}, {QEMU_BOARD}")
    assert found.path[:2] == ["Reset_Handler", "main"]
    # the constructors' loop and the accelerator counters' loop are the firmware's indirect
    # calls: resolved through their tables, and said so
    assert "Reset_Handler's blx r3 through __init_array_start" in found.reason
    assert "main's blx r3 through mtvg_model_accel_counters" in found.reason


HARNESS_C = r"""
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "tvmgen_default.h"

#define STACK_BYTES (1u << 20)
static unsigned char stack_area[STACK_BYTES] __attribute__((aligned(4096)));
static const unsigned char paint[4] = {PAINT_BYTES};
%(buffers)s
static uintptr_t sp_at_call;
static int32_t status;

/* The model's run on the painted stack; sp just before the call. */
static void* run_model(void* unused) {
  (void)unused;
  struct tvmgen_default_inputs inputs = {%(inputs)s};
  struct tvmgen_default_outputs outputs = {%(outputs)s};
  uintptr_t sp;
  __asm__ volatile("mov %%%%rsp, %%0" : "=r"(sp));
  sp_at_call = sp;
  status = tvmgen_default_run(&inputs, &outputs);
  return NULL;
}

int main(void) {
  pthread_attr_t attr;
  pthread_t thread;
  for (size_t i = 0; i < STACK_BYTES; i++) stack_area[i] = paint[i %% 4];
  if (pthread_attr_init(&attr) != 0 || pthread_attr_setstack(&attr, stack_area, STACK_BYTES)
      || pthread_create(&thread, &attr, run_model, NULL) != 0
      || pthread_join(thread, NULL) != 0) {
    return 2;
  }
  size_t low = 0;
  while (low < STACK_BYTES && memcmp(&stack_area[low], paint, 4) == 0) low += 4;
  printf("%%d %%lu\n", (int)status, (unsigned long)(sp_at_call - (uintptr_t)&stack_area[low]));
  return 0;
}
"""


def host_harness(project: Path, work: Path) -> tuple[Path, list[Path]]:
    """The model's C (as the project compiles it) and a harness that runs
    tvmgen_default_run once on a painted thread stack: (program, its .su files)."""
    module = json.loads((project / "project.json").read_text())["module"]
    buffers = [f"static unsigned char {kind}_{i}[{spec['size_bytes']}] "
               "__attribute__((aligned(16)));"
               for kind in ("input", "output") for i, spec in enumerate(module[kind + "s"])]
    harness = work / "harness.c"
    harness.write_text(HARNESS_C % {
        "buffers": "\n".join(buffers),
        "inputs": ", ".join(f".{s['c_name']} = input_{i}" for i, s in
                            enumerate(module["inputs"])),
        "outputs": ", ".join(f".{s['c_name']} = output_{i}" for i, s in
                             enumerate(module["outputs"]))})
    flags = ["-O2", "-g", "-fstack-usage", "-std=gnu99", "-w", "-fno-strict-aliasing",
             "-DPAINT_BYTES=" + ",".join(str(b) for b in PAINT),
             f"-I{project / 'model' / 'include'}",
             f"-I{project / 'third_party' / 'tvm-ffi' / 'include'}",
             f"-I{project / 'third_party' / 'tvm' / 'include'}"]
    objects = []
    for source in [*sorted((project / "model" / "src").glob("*.c")), harness]:
        obj = work / f"{source.stem}.o"
        subprocess.run(["gcc", *flags, "-c", str(source), "-o", str(obj)], check=True)
        objects.append(obj)
    program = work / "harness"
    subprocess.run(["gcc", *map(str, objects), "-o", str(program), "-lpthread"], check=True)
    return program, sorted(work.glob("*.su"))


@pytest.mark.parametrize("model", list(MODELS))
def test_host_bound_covers_a_painted_run(tmp_path_factory, tmp_path, model):
    require_board_tools("host")
    project = _project(tmp_path_factory, model, "host")
    program, su = host_harness(project, tmp_path)
    run = subprocess.run([str(program)], capture_output=True, text=True, check=True, timeout=60)
    status, used = map(int, run.stdout.split())
    assert status == 0
    found = stack_bound(program, "objdump", su, ["tvmgen_default_run"], [], 0, None)
    print(f"{model} on the host: bound {found.bound_bytes} B, painted run used {used} B; "
          f"path {' > '.join(found.path)}; {found.reason}")
    assert found.bound_bytes is not None, found.reason
    assert 0 < used <= found.bound_bytes <= MAX_RATIO * used
    assert (found.bound_bytes, used) == documented(f"{LABELS[model]}, host (the inference)")
    assert found.path[0] == "tvmgen_default_run"
    assert "-fstack-usage" in found.reason and "red zone" in found.reason
    # the whole program calls the C library, a shared library's code: no bound
    whole = stack_bound(program, "objdump", su, ["main"], [], 0, None)
    assert whole.bound_bytes is None and "a shared library's" in whole.reason
