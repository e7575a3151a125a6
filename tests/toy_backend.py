"""A third template's back-end, written as a user outside microtvm-gen would write one.

test_template_backends.py copies templates/crt under another name with a template.json that
names `tests.toy_backend:ToyBackend`; nothing in generator/ knows of it. The toy template
offers only the boards that run as a host process, renders one file of its own (from
`toy.txt.j2` in its folder) and builds with the CRT template's CMake build.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jinja2

from generator.boards import Board, list_boards, load_board
from generator.errors import BoardError
from generator.project.backend import BuiltFirmware, TemplateBackend, TemplateBoard
from generator.project.crt import cmake_build

TOY_FILE = "toy.txt"


class ToyBackend(TemplateBackend):
    name = "toy"
    title = "Toy"
    platform_name = "toy"

    def board_names(self, template: Path) -> list[str]:
        return [b for b in list_boards() if load_board(b).is_native]

    def template_board(self, template: Path, name: str) -> TemplateBoard:
        if name not in self.board_names(template):
            raise BoardError(f"the toy template runs on the host only, not on '{name}'")
        return TemplateBoard(load_board(name), {"toy_greeting": "built by the toy template"},
                             {"toy": {"template": template.name}})

    def project_board(self, project: dict) -> Board:
        return load_board(project["board"])

    def render_extras(self, env: jinja2.Environment, context: dict,
                      board: Board) -> dict[str, bytes]:
        return {TOY_FILE: env.get_template(f"{TOY_FILE}.j2").render(context).encode()}

    def build(self, project_dir: Path, project: dict, board: Board, sanitize: bool | None,
              progress: Callable[[str], None] | None) -> BuiltFirmware:
        return cmake_build(project_dir, board, sanitize, progress)
