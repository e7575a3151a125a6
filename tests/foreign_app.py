"""A firmware that is not ours, linking model libraries (`generate --format library`).

tests/fixtures/foreign_app/ holds its startup, linker script and I/O; `write_main` writes
its main.c for the models it links. On the host it builds with CMake through each
library's CMakeLists.txt (`add_subdirectory`); on qemu-mps2-an385 as an IDE would, with the
compiler alone and each library's `sources.txt`. tests/test_library.py and
benchmarks/library_size.py both use it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

APP = Path(__file__).resolve().parent / "fixtures" / "foreign_app"
AN385_CFLAGS = ["-mcpu=cortex-m3", "-mthumb", "-O2", "-ffunction-sections", "-fdata-sections"]
AN385_LDFLAGS = ["-mcpu=cortex-m3", "-mthumb", "-nostartfiles", "--specs=nano.specs",
                 "-Wl,--gc-sections"]
QEMU_AN385 = ["qemu-system-arm", "-machine", "mps2-an385", "-cpu", "cortex-m3",
              "-display", "none", "-monitor", "none", "-serial", "stdio",
              "-semihosting-config", "enable=on,target=native"]
RUN_TIMEOUT = 120


@dataclass
class LinkedModel:
    """A model library the app links, and the inputs main.c feeds it."""

    name: str
    library: Path
    inputs: list[np.ndarray]  # one per model input, in order
    input_fields: list[str]  # the public structs' members
    output_fields: list[str]
    output_bytes: list[int]

    @classmethod
    def of(cls, library, inputs: list[np.ndarray] | None = None,
           seed: int = 1) -> LinkedModel:
        """The model of a generate_library result; `inputs` default to random tensors of its
        input dtypes (seeded)."""
        module = library.module
        if inputs is None:
            rng = np.random.default_rng(seed)
            inputs = [random_tensor(t.dtype, t.effective_shape(), rng) for t in module.inputs]
        return cls(library.name, library.path, inputs, [t.c_name for t in module.inputs],
                   [t.c_name for t in module.outputs], [t.size_bytes for t in module.outputs])


def random_tensor(dtype: str, shape, rng: np.random.Generator) -> np.ndarray:
    """Values over the whole range of an integer dtype, or normal floats."""
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def write_main(path: Path, models: list[LinkedModel], shared: bool = False) -> None:
    """main.c: each model run once on its inputs; one line per output, '<model> <status>
    <hex>'. `shared`: then each model once more with <name>_run_with_workspace() in one
    buffer all share ('<model>@shared ...' lines)."""
    lines = ['#include <stdint.h>', '#include "app_io.h"']
    lines += [f'#include "{m.name}.h"' for m in models]
    if shared:
        size = "0u"
        for m in models:
            macro = f"{m.name.upper()}_WORKSPACE_BYTES"
            size = f"({macro} > {size} ? {macro} : {size})"
        lines.append(f"static uint8_t shared_workspace[{size}] __attribute__((aligned(16)));")
    for m in models:
        for i, x in enumerate(m.inputs):
            data = ", ".join(str(b) for b in x.tobytes())
            lines.append(f"static uint8_t {m.name}_in{i}[{x.nbytes}] "
                         f"__attribute__((aligned(16))) = {{{data}}};")
        for i, n in enumerate(m.output_bytes):
            lines.append(f"static uint8_t {m.name}_out{i}[{n}] __attribute__((aligned(16)));")
    lines += ["", "int main(void) {", "  int32_t status;"]
    for m in models:
        ins = ", ".join(f".{f} = {m.name}_in{i}" for i, f in enumerate(m.input_fields))
        outs = ", ".join(f".{f} = {m.name}_out{i}" for i, f in enumerate(m.output_fields))
        lines += [f"  struct {m.name}_inputs {m.name}_i = {{{ins}}};",
                  f"  struct {m.name}_outputs {m.name}_o = {{{outs}}};",
                  f"  status = {m.name}_run(&{m.name}_i, &{m.name}_o);"]
        lines += _print_outputs(m, m.name)
        if shared:
            lines += [f"  status = {m.name}_run_with_workspace(&{m.name}_i, &{m.name}_o, "
                      "shared_workspace, sizeof(shared_workspace));",
                      *_print_outputs(m, f"{m.name}@shared")]
    lines += ['  app_write("done\\n");', "  return 0;", "}", ""]
    path.write_text("\n".join(lines))


def _print_outputs(m: LinkedModel, label: str) -> list[str]:
    lines = []
    for i, n in enumerate(m.output_bytes):
        lines += [f'  app_write("{label} ");', '  app_write(status == 0 ? "0 " : "failed ");',
                  f"  app_write_hex({m.name}_out{i}, {n});", '  app_write("\\n");']
    return lines


def parse_outputs(text: str, models: list[LinkedModel]) -> dict[str, list[bytes]]:
    """The app's lines back into bytes per model and output; a failed run raises."""
    assert text.rstrip().endswith("done"), f"the app did not finish:\n{text}"
    found: dict[str, list[bytes]] = {label: [] for m in models
                                     for label in (m.name, f"{m.name}@shared")}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] in found:
            assert parts[1] == "0", f"{parts[0]}_run failed"
            found[parts[0]].append(bytes.fromhex(parts[2]))
    return found


def _tool(name: str) -> str:
    """A build tool from the suite's own environment (cmake, ninja from PyPI), else PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else (shutil.which(name) or name)


def build_host(models: list[LinkedModel], work: Path, shared: bool = False) -> Path:
    """The app on the host, each library added with add_subdirectory."""
    work.mkdir(parents=True, exist_ok=True)
    write_main(work / "main.c", models, shared)
    subdirs = "\n".join(f'add_subdirectory("{m.library}" {m.name})' for m in models)
    (work / "CMakeLists.txt").write_text(f"""cmake_minimum_required(VERSION 3.13)
project(foreign_app C)
{subdirs}
add_executable(app main.c "{APP}/host_io.c")
target_include_directories(app PRIVATE "{APP}")
target_compile_options(app PRIVATE -Wall -Wextra -Werror)
target_link_libraries(app PRIVATE {" ".join(m.name for m in models)} m)
""")
    build = work / "build"
    subprocess.run([_tool("cmake"), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}",
                    "-S", str(work), "-B", str(build)], check=True, capture_output=True)
    subprocess.run([_tool("ninja"), "-C", str(build)], check=True, capture_output=True)
    return build / "app"


def library_files(library: Path) -> dict[str, list[str]]:
    """sources.txt's sections: '[sources]' → its lines, and so on."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in (library / "sources.txt").read_text().splitlines():
        if line.startswith("["):
            current = line[1:line.index("]")]
            sections[current] = []
        elif line and not line.startswith("#") and current is not None:
            sections[current].append(line)
    return sections


def compile_library_an385(library: Path, objects: Path) -> list[Path]:
    """One library's objects, compiled as an IDE project would from sources.txt."""
    files = library_files(library)
    objects.mkdir(parents=True, exist_ok=True)
    flags = [*AN385_CFLAGS, *(f"-I{library / d}" for d in files["include directories"]),
             *(f"-D{d}" for d in files.get("defines", [])),
             *files["flags for the files under model/"][0].split()]
    out = []
    for src in files["sources"] + files.get("runtime sources", []):
        obj = objects / (src.replace("/", "_") + ".o")
        subprocess.run(["arm-none-eabi-gcc", *flags, "-c", str(library / src), "-o", str(obj)],
                       check=True, capture_output=True, text=True)
        out.append(obj)
    return out


def build_an385(models: list[LinkedModel], work: Path, objects: list[Path] | None = None,
                shared: bool = False) -> Path:
    """The app for qemu-mps2-an385: its startup, linker script and UART, and the libraries'
    objects (or `objects` in their place: a stub for a flash baseline)."""
    work.mkdir(parents=True, exist_ok=True)
    write_main(work / "main.c", models, shared)
    if objects is None:
        objects = []
        for m in models:
            objects += compile_library_an385(m.library, work / f"obj-{m.name}")
    includes = [f"-I{APP}", *(f"-I{m.library / 'include'}" for m in models)]
    app_sources = [work / "main.c", APP / "an385_startup.c", APP / "an385_io.c"]
    elf = work / "app.elf"
    subprocess.run(["arm-none-eabi-gcc", *AN385_CFLAGS, "-Wall", "-Wextra", "-Werror",
                    *includes, *map(str, app_sources), *map(str, objects),
                    *AN385_LDFLAGS, f"-T{APP / 'an385.ld'}", "-lm", "-o", str(elf)],
                   check=True, capture_output=True, text=True)
    return elf


def run_an385(elf: Path) -> str:
    done = subprocess.run([*QEMU_AN385, "-kernel", str(elf)], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)
    assert done.returncode == 0, f"QEMU exit {done.returncode}: {done.stdout}{done.stderr}"
    return done.stdout


def run_host(app: Path) -> str:
    done = subprocess.run([str(app)], capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def build_zephyr(models: list[LinkedModel], work: Path, zephyr_base: Path, board: str,
                 env: dict[str, str]) -> Path:
    """Zephyr's own samples/hello_world with its main.c replaced by ours and the model
    libraries added as Zephyr modules (ZEPHYR_EXTRA_MODULES, CONFIG_MTVG_MODEL_<NAME>=y)."""
    from generator.project.zephyr import toolchain_env, zephyr_python

    app = work / "hello_world"
    shutil.copytree(zephyr_base / "samples" / "hello_world", app)
    write_main(app / "src" / "main.c", models)
    for name in ("zephyr_io.c", "app_io.h"):
        shutil.copy(APP / name, app / "src" / name)
    with (app / "CMakeLists.txt").open("a") as f:
        f.write("target_sources(app PRIVATE src/zephyr_io.c)\n")
    with (app / "prj.conf").open("a") as f:
        f.write("".join(f"CONFIG_MTVG_MODEL_{m.name.upper()}=y\n" for m in models))
    env = toolchain_env(env)
    build = work / "build"
    modules = ";".join(str(m.library) for m in models)
    for command in (["cmake", "-G", "Ninja", "-S", str(app), "-B", str(build),
                     f"-DBOARD={board}", f"-DZEPHYR_EXTRA_MODULES={modules}",
                     f"-DPython3_EXECUTABLE={zephyr_python(env)}"],
                    ["cmake", "--build", str(build)]):
        done = subprocess.run([_tool(command[0]), *command[1:]], env=env, capture_output=True,
                              text=True)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return build / "zephyr" / "zephyr.elf"


def run_qemu_until_done(command: list[str], timeout: float = RUN_TIMEOUT) -> str:
    """Run a QEMU that never exits by itself until the app prints 'done'; then stop it."""
    import select
    import time

    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    text = b""
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        while b"done" not in text and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                chunk = proc.stdout.read1(4096)  # type: ignore[attr-defined]
                if not chunk:
                    break
                text += chunk
    finally:
        proc.kill()
        proc.wait()
    return text.decode(errors="replace").replace("\r\n", "\n")
