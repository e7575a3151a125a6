"""Finding a template's back-end by the name its template.json gives (backend.py).

A name is, first found wins:
1. a back-end that comes with microtvm-gen (BUILT_IN: one line per template);
2. an entry point in the group `microtvm_gen.templates` (an installed package's back-end);
3. `module:Class`, a class in an importable module (a template beside its own code).
A generated project records the name in project.json ("backend"), so its own Project API
server finds the same back-end to build it.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from generator.boards import Board
from generator.errors import ProjectError
from generator.project.backend import DEFAULT_BACKEND, TemplateBackend, backend_spec
from generator.project.crt import CrtBackend
from generator.project.zephyr import ZephyrBackend

BUILT_IN: dict[str, type[TemplateBackend]] = {
    CrtBackend.name: CrtBackend,
    ZephyrBackend.name: ZephyrBackend,
}
ENTRY_POINT_GROUP = "microtvm_gen.templates"


def backend_named(spec: str) -> TemplateBackend:
    """The back-end called `spec`, or a one-line error."""
    if spec in BUILT_IN:
        return BUILT_IN[spec]()
    from importlib import metadata  # only for back-ends that are not built in

    found = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == spec]
    module_name, _, attr = spec.partition(":")
    try:
        cls = found[0].load() if found else (
            getattr(importlib.import_module(module_name), attr) if attr else None)
    except (ImportError, AttributeError) as exc:
        raise ProjectError(f"template back-end '{spec}' does not load: "
                           f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
    if cls is None:
        raise ProjectError(f"unknown template back-end '{spec}' (built in: "
                           f"{', '.join(BUILT_IN)}; others: an entry point in "
                           f"'{ENTRY_POINT_GROUP}' or 'module:Class')")
    if not (isinstance(cls, type) and issubclass(cls, TemplateBackend)):
        raise ProjectError(f"template back-end '{spec}' is not a TemplateBackend subclass")
    return cls()


def template_backend(template: Path | None) -> TemplateBackend:
    """The back-end of a template folder (None: the CRT template)."""
    return backend_named(backend_spec(template))


def project_spec(project: dict) -> str:
    """The back-end a project.json names. Records written before back-ends were recorded
    carry the section of the built-in back-end that made them, or none (CRT)."""
    spec = project.get("backend")
    if isinstance(spec, str) and spec:
        return spec
    return next((name for name in BUILT_IN if name in project), DEFAULT_BACKEND)


def project_backend(project: dict) -> TemplateBackend:
    return backend_named(project_spec(project))


def board_of_project(project: dict) -> Board:
    """The board of a generated project, as its back-end knows it (a Zephyr board by its
    Zephyr name, a board file's board by its file)."""
    return project_backend(project).project_board(project)
