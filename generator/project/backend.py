"""What a template back-end is: the part of a template that is code (DESIGN D16).

A template is a folder (Jinja templates, the Project API server) and a back-end: a small
class that knows the template's boards, what it renders besides the files every project
has, and how its projects are built. The folder's `template.json` names the back-end
(`"backend": "zephyr"`); a folder without one is a CRT template. `backends.py` finds a
back-end by that name. Nothing outside a back-end asks which template a project came from.

Flashing and the device's link need no hook of their own: they follow the board a
back-end gives a project (`project_board`): its runner (a host process, QEMU, a serial
port) and its flash tools (`Board.flash`).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from generator.boards import Board
from generator.errors import ProjectError
from generator.project_api.protocol import ProjectOption
from generator.resources import templates_dir

if TYPE_CHECKING:
    import jinja2  # render_extras' type; the renderer imports it

TEMPLATE_FILE = "template.json"
DEFAULT_BACKEND = "crt"
# Where a template's own files fall back to: the CRT template's glue, apps and sources.
BASE_TEMPLATE = "crt"


@dataclass(frozen=True)
class TemplateBoard:
    """A board as a template names it: the board the checks, sizes and CRT templates see,
    plus what the template's own files and project.json say about it."""

    board: Board
    context: dict[str, Any] = field(default_factory=dict)  # names the templates use
    record: dict[str, Any] = field(default_factory=dict)  # sections of project.json


class BuiltFirmware(NamedTuple):
    elf: Path
    sanitize: bool  # built with AddressSanitizer and UBSan


class TemplateBackend(ABC):
    """The hooks a template provides. Subclass it, give the class attributes, and name the
    class in the template's template.json (built-in back-ends: one line in backends.py)."""

    name: ClassVar[str]  # what template.json's "backend" says
    title: ClassVar[str]  # for messages: "the Zephyr template ..."
    platform_name: ClassVar[str]  # what the Project API server reports
    # Other Project API options that name the board (besides 'board').
    board_aliases: ClassVar[tuple[str, ...]] = ()
    # Whether its projects build accelerator drivers (generator/project/accelerators.py).
    accelerator_drivers: ClassVar[bool] = True

    @abstractmethod
    def board_names(self, template: Path) -> list[str]:
        """The boards the template offers (the 'board' option's choices)."""

    @abstractmethod
    def template_board(self, template: Path, name: str) -> TemplateBoard:
        """The board a project is generated for, by the name the template knows it by."""

    @abstractmethod
    def project_board(self, project: dict) -> Board:
        """The board a generated project runs on, from its project.json."""

    @abstractmethod
    def render_extras(self, env: jinja2.Environment, context: dict,
                      board: Board) -> dict[str, bytes]:
        """Files of this template's projects besides those every project has."""

    @abstractmethod
    def build(self, project_dir: Path, project: dict, board: Board, sanitize: bool | None,
              progress: Callable[[str], None] | None) -> BuiltFirmware:
        """Build the firmware (build/firmware.elf); `sanitize=None`: as the last build."""

    def project_options(self, template: Path,
                        options: list[ProjectOption]) -> list[ProjectOption]:
        """The Project API options of the template's server (given: the standard ones)."""
        return options

    def search_path(self, template: Path) -> list[Path]:
        """Folders the template's files are looked up in: its own, then the CRT template's."""
        base = templates_dir() / BASE_TEMPLATE
        return [template] if template.resolve() == base.resolve() else [template, base]


def template_info(template_dir: Path | None) -> dict:
    """The template's template.json ({} for a template without one)."""
    if template_dir is None:
        return {}
    path = template_dir / TEMPLATE_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProjectError(f"{path} is not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ProjectError(f"{path}: expected a JSON object")
    return data


def backend_spec(template_dir: Path | None) -> str:
    """The back-end a template names ("renderer": the older spelling of "backend")."""
    info = template_info(template_dir)
    spec = info.get("backend", info.get("renderer", DEFAULT_BACKEND))
    if not isinstance(spec, str) or not spec:
        raise ProjectError(f"{template_dir}/{TEMPLATE_FILE}: 'backend' must be a name")
    return spec
