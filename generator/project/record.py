"""project.json: the record a generated project carries of what it was made from.

The renderer writes it (`new_record`); `build`, `run`, `flash`, `serve` and the project's
Project API server read it (`load_project`, or `load_record` for the record with the
template back-end that made the project and the board it runs on). Its `schema` changes
when a reader could misread an older record.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from generator import RUNTIME_ABI_VERSION, __version__, hints
from generator.boards import Board
from generator.errors import ProjectError
from generator.mlf.model import MlfArchive, ModuleInfo, TensorInfo
from generator.project.backend import TemplateBackend
from generator.project.backends import project_backend
from generator.project.sizing import (
    HOST_DRIVEN,
    arena_bytes_for,
    host_driven_payload,
    rpc_pool_bytes,
)

PROJECT_FILE = "project.json"
MODEL_COPY = "model.tar"  # the copy of the archive a generated project keeps
PROJECT_SCHEMA = 1


class CountedAccelerator(Protocol):
    """What the record keeps of an accelerator a project builds."""

    name: str
    counters: str | None


@dataclass(frozen=True)
class ProjectRecord:
    """A generated project's project.json, with its template's back-end and its board."""

    directory: Path
    data: dict
    backend: TemplateBackend
    board: Board


def new_record(backend: str, board: Board, archive: MlfArchive, archive_name: str,
               module: ModuleInfo, project_type: str,
               accelerators: Sequence[CountedAccelerator], tvm_headers: dict | None = None,
               sections: dict | None = None) -> dict:
    """The record of a project rendered from `module` for `board` by the template back-end
    `backend` (the name its template.json gives); `sections`: what that back-end adds."""
    project = {
        "schema": PROJECT_SCHEMA,
        "backend": backend,
        "generator_version": __version__,
        "runtime_abi": RUNTIME_ABI_VERSION,
        "project_type": project_type,
        "board": board.name,
        "archive": {"name": archive_name, "sha256": archive.sha256,
                    "mlf_version": archive.version},
        "module": {
            "name": module.name,
            "executor": module.executor,
            "entry": module.entry,
            # Functions callable by name (host-driven projects need them), from the archive.
            "system_library": module.registry is not None,
            "inputs": [tensor_json(t) for t in module.inputs],
            "outputs": [tensor_json(t) for t in module.outputs],
            "workspace_size_bytes": module.workspace_size_bytes,
            "arena_bytes": arena_bytes_for(module),
            "pools": [{"name": p.name, "size_bytes": p.size_bytes, "internal": p.internal}
                      for p in module.pools],
            "storage_bytes": module.graph.storage_bytes if module.graph else 0,
        },
        "accelerators": [{"name": a.name, "counters": a.counters} for a in accelerators],
    }
    if project_type == HOST_DRIVEN:
        project["host_driven"] = {"link_max_payload": host_driven_payload(board),
                                  "tensor_pool_bytes": rpc_pool_bytes(board),
                                  "functions": list(module.registry or [])}
    if tvm_headers is not None:
        project["tvm_headers"] = tvm_headers
    project.update(sections or {})
    return project


def record_bytes(project: dict) -> bytes:
    """project.json's text: sorted keys, so equal records are equal bytes."""
    return (json.dumps(project, indent=2, sort_keys=True) + "\n").encode()


def tensor_json(t: TensorInfo) -> dict:
    return {"name": t.name, "c_name": t.c_name, "dtype": t.dtype,
            "shape": list(t.effective_shape()), "size_bytes": t.size_bytes}


def load_project(project_dir: Path) -> dict:
    """project.json of a generated project, its schema checked."""
    path = project_dir / PROJECT_FILE
    if not path.is_file():
        raise ProjectError(f"{project_dir} is not a microtvm-gen project (no {PROJECT_FILE})",
                           hint=hints.generate_first())
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ProjectError(f"{path} is not valid JSON ({exc.msg})") from exc
    if data.get("schema") != PROJECT_SCHEMA:
        raise ProjectError(f"{path}: project schema {data.get('schema')!r}; regenerate the project")
    return data


def load_record(project_dir: Path) -> ProjectRecord:
    """A generated project's record, its back-end found and its board looked up."""
    data = load_project(project_dir)
    backend = project_backend(data)
    return ProjectRecord(project_dir, data, backend, backend.project_board(data))
