"""Template back-ends (generator/project/backend.py): a third template is one back-end
module, one folder and one line in its template.json, and nothing in generator/ changes.

The toy template is templates/crt copied under another name with a file of its own and a
template.json naming `tests.toy_backend:ToyBackend`. It is driven the way a user drives any
template: the CLI asks its Project API server to generate, the project's own server builds
and runs it. Its projects run the model on the host and give the CRT template's outputs.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from generator.cli import main
from generator.errors import ProjectError
from generator.project.backends import BUILT_IN, backend_named, project_spec, template_backend
from generator.project.generate import generate
from generator.project.record import load_record
from generator.project_api.client import ProjectClient
from generator.resources import templates_dir
from generator.run import run_project
from tests.conftest import REPO, YES_NO, require_board_tools
from tests.toy_backend import TOY_FILE, ToyBackend

TOY_SPEC = "tests.toy_backend:ToyBackend"
BOARD = "host"
SAMPLES = [{"Reshape_1": np.fromfile(YES_NO / f"{w}_0a2b400e_nohash_0.raw",
                                     dtype=np.int8).reshape(1, 1960)} for w in ("yes", "no")]


@pytest.fixture
def toy_template(tmp_path, monkeypatch) -> Path:
    """templates/crt under another name, with the toy back-end; its servers (separate
    processes) import the back-end from this checkout."""
    toy = tmp_path / "toy"
    shutil.copytree(templates_dir() / "crt", toy)
    (toy / "template.json").write_text(json.dumps(
        {"schema": 1, "platform_name": "toy", "backend": TOY_SPEC}))
    (toy / f"{TOY_FILE}.j2").write_text("{{ module.name }} on {{ board.name }}: "
                                        "{{ toy_greeting }}\n")
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), *([path] if path else [])]))
    return toy


def _files(project: Path) -> dict[str, bytes]:
    return {p.relative_to(project).as_posix(): p.read_bytes()
            for p in sorted(project.rglob("*")) if p.is_file() and "build" not in p.parts}


def test_a_third_template_generates_builds_and_runs_on_the_host(tmp_path, toy_template):
    require_board_tools(BOARD)
    model = YES_NO / "model.tar"
    toy, crt = tmp_path / "toy-project", tmp_path / "crt-project"
    assert main(["generate", str(model), "--board", BOARD, "--template", str(toy_template),
                 "-o", str(toy)]) == 0
    generate(model, BOARD, crt)

    # The same project as the CRT template's, plus the toy's own file and its record.
    toy_files, crt_files = _files(toy), _files(crt)
    assert set(toy_files) == set(crt_files) | {TOY_FILE}
    assert toy_files[TOY_FILE] == b"default on host: built by the toy template\n"
    assert [n for n in crt_files if toy_files[n] != crt_files[n]] == ["project.json"]
    toy_record = json.loads(toy_files["project.json"])
    crt_record = json.loads(crt_files["project.json"])
    assert (toy_record.pop("backend"), crt_record.pop("backend")) == (TOY_SPEC, "crt")
    assert toy_record.pop("toy") == {"template": "toy"}
    assert toy_record == crt_record

    # The project's own server finds the toy back-end again: its platform, its build.
    with ProjectClient(toy) as server:
        assert server.server_info_query()["platform_name"] == "toy"
    record = load_record(toy)
    assert isinstance(record.backend, ToyBackend) and record.board.name == BOARD
    toy_report = run_project(toy, SAMPLES)
    crt_report = run_project(crt, SAMPLES)
    toy_scores = [o["output"].reshape(-1).tolist() for o in toy_report.outputs]
    assert toy_scores == [o["output"].reshape(-1).tolist() for o in crt_report.outputs]
    assert toy_scores == [[-128, -127, 126, -127], [-128, -128, -128, 127]]


def test_the_toy_template_server_offers_its_own_boards(toy_template, tmp_path, capsys):
    with ProjectClient(toy_template) as server:
        info = server.server_info_query()
    assert info["platform_name"] == "toy" and info["is_template"]
    board = next(o for o in info["project_options"] if o["name"] == "board")
    assert board["choices"] == ToyBackend().board_names(toy_template) == [BOARD]
    assert main(["generate", str(YES_NO / "model.tar"), "--board", "nucleo-f746zg",
                 "--template", str(toy_template), "-o", str(tmp_path / "p")]) != 0
    assert "the toy template runs on the host only" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_back_ends_are_found_by_name_and_refused_in_one_line(tmp_path):
    assert set(BUILT_IN) == {"crt", "zephyr"}  # the toy is registered by its template.json
    assert template_backend(None).name == template_backend(templates_dir() / "crt").name == "crt"
    assert template_backend(templates_dir() / "zephyr").name == "zephyr"
    assert isinstance(backend_named(TOY_SPEC), ToyBackend)
    # A record without "backend" (written before back-ends were recorded): its section.
    assert project_spec({"board": "host"}) == "crt"
    assert project_spec({"board": "mps2/an385", "zephyr": {}}) == "zephyr"
    assert project_spec({"backend": TOY_SPEC, "board": BOARD}) == TOY_SPEC
    refusals = {
        "no-such-backend": "unknown template back-end 'no-such-backend'",
        "tests.no_such_module:Backend": "template back-end 'tests.no_such_module:Backend' "
                                        "does not load: ModuleNotFoundError",
        "tests.toy_backend:Missing": "does not load: AttributeError",
        "tests.toy_backend:TOY_FILE": "is not a TemplateBackend subclass",
    }
    for spec, message in refusals.items():
        with pytest.raises(ProjectError, match=message) as info:
            backend_named(spec)
        assert "\n" not in info.value.one_line()
    (tmp_path / "template.json").write_text('{"backend": 7}')
    with pytest.raises(ProjectError, match="'backend' must be a name"):
        template_backend(tmp_path)
