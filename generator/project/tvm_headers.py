"""TVM's C headers that an MLF v8 project's kernels include, copied into the project.

TVM 0.27's C codegen output includes TVM's own headers (`tvm/runtime/c_backend_api.h`,
`tvm/ffi/c_api.h`, ...). They are Apache-2.0 files shipped as data by the installed
`apache-tvm-ffi` and `apache-tvm` wheels. A project carries copies of exactly the headers
its kernels reach (a transitive scan of `#include` lines over the two include roots, in the
compiler's search order), unchanged, with the packages' license files, so it builds on a
machine without TVM.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import ProjectError

# Where the copies go in a project, one folder per package.
THIRD_PARTY = "third_party"
# The include roots, in the order the project's CMakeLists gives them to the compiler:
# (distribution, import package, folder in the project).
TVM_ROOTS = (("apache-tvm-ffi", "tvm_ffi", "tvm-ffi"), ("apache-tvm", "tvm", "tvm"))
# License texts a redistribution carries (Apache-2.0 §4), from each wheel's metadata.
LICENSE_NAMES = ("LICENSE", "NOTICE")
# Bounds on the scan (kernel sources come from an archive): TVM's C headers are a few
# dozen files, and a kernel includes a handful of names.
MAX_HEADERS = 200
MAX_LOOKUPS = 10_000
INCLUDE_RE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


@dataclass(frozen=True)
class IncludeRoot:
    distribution: str
    path: Path  # the package's include folder
    dest: str  # its copy in a project: third_party/<name>/include

    @property
    def dest_dir(self) -> str:
        return f"{self.dest}/include"


@dataclass
class TvmHeaders:
    """What a project gets: files (project path → bytes) and what project.json records."""

    files: dict[str, bytes] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    include_dirs: list[str] = field(default_factory=list)  # relative to the project

    def record(self) -> dict:
        headers = sorted(n for n in self.files if "/include/" in n)
        return {**self.versions, "files": headers,
                "licenses": sorted(n for n in self.files if n not in headers)}


def include_roots() -> list[IncludeRoot]:
    """The installed packages' include folders, or a one-line error naming the package."""
    roots = []
    for distribution, package, name in TVM_ROOTS:
        spec = importlib.util.find_spec(package)
        locations = list(spec.submodule_search_locations or []) if spec else []
        include = Path(locations[0]) / "include" if locations else None
        if include is None or not include.is_dir():
            raise ProjectError(f"MLF version 8 kernels need the C headers of the '{package}' "
                               "package, which is not installed",
                               hint="pip install apache-tvm==0.27.0.post1")
        roots.append(IncludeRoot(distribution, include.resolve(), f"{THIRD_PARTY}/{name}"))
    return roots


def _normalized(name: str) -> str | None:
    """An include name as a relative path inside a root, or None if it leaves the root."""
    path = posixpath.normpath(name)
    if path.startswith(("/", "../")) or path == "..":
        return None
    return path


class _Scan:
    """Resolves includes as the compiler does: a quoted name first in the including file's
    folder, then in each search folder in order; an angled name only in the folders.
    Folders are the project's own (`project_dirs`, files in `project`) and the TVM roots."""

    def __init__(self, project: dict[str, bytes], project_dirs: list[str],
                 roots: list[IncludeRoot]) -> None:
        self.project = project
        self.project_dirs = project_dirs
        self.roots = roots
        self.found: dict[str, bytes] = {}  # project path of a copy → bytes
        self.lookups = 0

    def _in_project(self, rel: str) -> tuple[str, bytes] | None:
        return (rel, self.project[rel]) if rel in self.project else None

    def _in_root(self, root: IncludeRoot, rel: str) -> tuple[str, bytes] | None:
        candidate = root.path / rel
        if not candidate.is_file() or not candidate.resolve().is_relative_to(root.path):
            return None
        return f"{root.dest_dir}/{rel}", candidate.read_bytes()

    def _locate(self, where: tuple[str, IncludeRoot | None], quoted: bool,
                name: str) -> tuple[tuple[str, IncludeRoot | None], str, bytes] | None:
        rel = _normalized(name)
        if rel is None:
            return None
        folder, root = where
        if quoted:
            local = _normalized(posixpath.join(folder, rel))
            hit = None
            if local is not None:
                hit = self._in_project(local) if root is None else self._in_root(root, local)
            if hit:
                return (posixpath.dirname(local), root), *hit
        for project_dir in self.project_dirs:
            hit = self._in_project(posixpath.join(project_dir, rel))
            if hit:
                return (posixpath.dirname(hit[0]), None), *hit
        for candidate in self.roots:
            hit = self._in_root(candidate, rel)
            if hit:
                return (posixpath.dirname(rel), candidate), *hit
        return None  # a system header (stdint.h), or one the compiler will report

    def run(self, sources: list[str]) -> None:
        todo = [((posixpath.dirname(s), None), self.project[s]) for s in sources]
        seen: set[str] = set(sources)
        while todo:
            where, text = todo.pop()
            for quote, name in set(INCLUDE_RE.findall(text)):
                self.lookups += 1
                if self.lookups > MAX_LOOKUPS:
                    raise ProjectError(f"the kernel sources include more than {MAX_LOOKUPS} "
                                       "header names; not TVM's C codegen output")
                hit = self._locate(where, quote == b'"', name.decode("ascii", "replace"))
                if hit is None or hit[1] in seen:
                    continue
                location, path, data = hit
                seen.add(path)
                if location[1] is not None:
                    self.found[path] = data
                    if len(self.found) > MAX_HEADERS:
                        raise ProjectError(f"the kernels include more than {MAX_HEADERS} of "
                                           "TVM's headers; is the TVM installation intact?")
                todo.append((location, data))


def _license_files(root: IncludeRoot) -> dict[str, bytes]:
    return dict(_installed_license_files(root))


@functools.lru_cache(maxsize=8)
def _installed_license_files(root: IncludeRoot) -> dict[str, bytes]:
    """Listing an installed TVM's files takes tens of milliseconds: once per process."""
    try:
        files = importlib.metadata.distribution(root.distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    out = {}
    for f in files:
        if ".dist-info/" in f.as_posix() and f.name in LICENSE_NAMES:
            located = Path(str(f.locate()))
            if located.is_file():
                out[f"{root.dest}/{f.name}"] = located.read_bytes()
    return out


def tvm_headers(project: dict[str, bytes], kernels: list[str],
                project_include_dirs: list[str]) -> TvmHeaders:
    """The TVM headers `kernels` (project paths in `project`) reach, with license files."""
    roots = include_roots()
    scan = _Scan(project, project_include_dirs, roots)
    scan.run(kernels)
    result = TvmHeaders(files=dict(sorted(scan.found.items())))
    for root in roots:
        try:
            result.versions[root.distribution] = importlib.metadata.version(root.distribution)
        except importlib.metadata.PackageNotFoundError:
            result.versions[root.distribution] = "unknown"
        if any(n.startswith(f"{root.dest_dir}/") for n in result.files):
            result.include_dirs.append(root.dest_dir)
            result.files.update(_license_files(root))
    return result
