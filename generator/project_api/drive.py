"""How the CLI drives templates and projects: every step through the Project API server.

`generate` asks a template's server (templates/crt, or any `--template DIR` with a server)
to render the project; `build`, `flash`, `run` and `serve` ask the project's own server,
and get the device's link from its `open_transport`. A new template or board therefore
needs no change here.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from generator.build import BuildResult
from generator.elfsize import SizeReport
from generator.errors import ProjectError
from generator.project_api.client import ProjectClient, ProjectTransport
from generator.resources import templates_dir
from generator.toolchain import BUILD_DIR, BUILD_INFO

DEFAULT_TEMPLATE = "crt"


def template_dir(template: Path | None) -> Path:
    return template if template is not None else templates_dir() / DEFAULT_TEMPLATE


def generate_project(archive: Path, out_dir: Path, options: dict,
                     template: Path | None = None) -> dict:
    """Render a project with a template's server; returns the new project's project.json."""
    with ProjectClient(template_dir(template)) as server:
        info = server.server_info_query()
        if not info.get("is_template"):
            raise ProjectError(f"{server.directory} is a generated project, not a template")
        offered = {o.get("name") for o in info.get("project_options", [])}
        unknown = sorted(k for k, v in options.items() if v is not None and k not in offered)
        if unknown:
            raise ProjectError(f"the template at {server.directory} has no option "
                               f"{', '.join(unknown)}")
        server.generate_project(archive, out_dir, {k: v for k, v in options.items()
                                                   if k in offered})
    return json.loads((out_dir / "project.json").read_text())


def build_project(project_dir: Path, sanitize: bool | None = None,
                  verbose: bool = True) -> BuildResult:
    """Build through the project's server; the result is what the build recorded."""
    options: dict = {"verbose": verbose}
    if sanitize is not None:
        options["sanitize"] = sanitize
    with ProjectClient(project_dir) as server:
        server.build(options)
    return last_build(project_dir)


def last_build(project_dir: Path) -> BuildResult:
    path = project_dir / BUILD_DIR / BUILD_INFO
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ProjectError(f"{project_dir} has no record of a build ({path})") from exc
    size = {k: v for k, v in data["size"].items() if k in SizeReport.__dataclass_fields__}
    return BuildResult(project_dir.resolve(), Path(data["elf"]), SizeReport(**size),
                       data["sanitize"], data["arena_bytes"], data["workspace_size_bytes"],
                       data["executor"], data["storage_bytes_needed"],
                       data["storage_bytes_reserved"], data.get("model_pool_bytes", 0))


def flash_project(project_dir: Path, options: dict) -> None:
    with ProjectClient(project_dir) as server:
        server.flash(options)


@contextlib.contextmanager
def project_device(project_dir: Path, sanitize: bool | None = None,
                   options: dict | None = None) -> Iterator[ProjectTransport]:
    """Build if needed, then open the device's link through the project's server."""
    with ProjectClient(project_dir) as server:
        build_options: dict = {"verbose": False}
        if sanitize is not None:
            build_options["sanitize"] = sanitize
        server.build(build_options)
        with server.transport(options or {}) as link:
            yield link
