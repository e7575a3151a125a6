"""Board ports and the shared layers their port.toml names (generator/project/ports.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.boards import list_boards, load_board
from generator.errors import ProjectError
from generator.project.generate import generate
from generator.project.ports import port_files, port_layers
from tests.conftest import REPO, YES_NO

PLATFORM = REPO / "templates" / "common" / "platform"


def _ports() -> set[str]:
    """The folders boards name (and the Zephyr template's)."""
    return {load_board(b).platform for b in list_boards()} | {"zephyr"}


def test_every_port_resolves_and_every_layer_is_used():
    ports = _ports()
    used: set[str] = set()
    for port in sorted(ports):
        files = port_files(PLATFORM / port)
        assert files, port
        used.update(port_layers(PLATFORM / port))
    layers = {p.name for p in PLATFORM.iterdir() if p.is_dir()} - ports
    assert layers == used  # a folder is a port or a layer some port names, never stale
    assert not layers & ports


def test_every_cortex_m_port_takes_startup_from_the_cortex_m_layer():
    for board in list_boards():
        spec = load_board(board)
        if spec.arch != "arm" or spec.is_native:
            continue
        files = port_files(PLATFORM / spec.platform)
        assert files["startup.c"] == PLATFORM / "cortex_m" / "startup.c", board
        assert files["port.h"] == PLATFORM / spec.platform / "port.h", board


def test_ports_without_port_toml_are_their_folder_alone():
    for port in ("posix", "zephyr"):
        assert port_layers(PLATFORM / port) == []
        assert {p.parent for p in port_files(PLATFORM / port).values()} == {PLATFORM / port}


def _tree(tmp_path: Path, toml: str | None, layer_files: dict[str, str]) -> Path:
    port = tmp_path / "chip"
    port.mkdir()
    (port / "platform.c").write_text("/* port */\n")
    if toml is not None:
        (port / "port.toml").write_text(toml)
    (tmp_path / "shared").mkdir()
    for name, text in layer_files.items():
        (tmp_path / "shared" / name).write_text(text)
    return port


def test_layer_files_sit_beside_the_ports(tmp_path):
    port = _tree(tmp_path, 'layers = ["shared"]\n', {"startup.c": "", "notes.txt": ""})
    files = port_files(port)
    assert list(files) == ["platform.c", "startup.c"]  # sorted; .txt is not copied
    assert files["startup.c"] == tmp_path / "shared" / "startup.c"


@pytest.mark.parametrize("toml, layer_files, message", [
    ('layers = ["nowhere"]\n', {}, "layer 'nowhere' has no folder"),
    ('layers = ["shared"]\n', {"platform.c": ""}, "platform.c is both"),
    ('layers = ["shared", "shared"]\n', {}, "named twice"),
    ('layers = ["../shared"]\n', {}, "is not a layer folder name"),
    ('layers = ["chip"]\n', {}, "is not a layer folder name"),
    ('layers = "shared"\n', {}, "is a list of folder names"),
    ('layer = ["shared"]\n', {}, "unknown keys layer"),
    ("layers = [\n", {}, "port.toml"),
])
def test_bad_port_toml_is_a_project_error(tmp_path, toml, layer_files, message):
    port = _tree(tmp_path, toml, layer_files)
    with pytest.raises(ProjectError, match=message):
        port_files(port)


def test_generated_project_holds_the_port_and_its_layers(tmp_path):
    project = tmp_path / "p"
    generate(YES_NO / "model.tar", "nucleo-f746zg", project)
    expected = port_files(PLATFORM / "stm32f7")
    held = sorted(p.name for p in (project / "platform").iterdir())
    # ... and the two files its linker script includes (generate --place fills them).
    assert held == sorted([*expected, "mtvg_placement.ld", "mtvg_regions.ld"])
    for name, src in expected.items():
        assert (project / "platform" / name).read_bytes() == src.read_bytes()
    cmake = (project / "CMakeLists.txt").read_text()
    for name in ("st_usart.c", "dwt_timer.c", "board_glue.c", "startup.c", "platform.c"):
        assert f"${{CMAKE_CURRENT_SOURCE_DIR}}/platform/{name}" in cmake
