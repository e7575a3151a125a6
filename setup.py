"""What pyproject.toml cannot say: the top-level templates/ and boards/ folders go into
wheels as the package data folders generator/_templates and generator/_boards.

The repository keeps its layout; setuptools maps the two folders into the package at build
time (package_dir). generator/resources.py finds the installed copies, and falls back to
the source tree (editable installs, a checkout).
"""

from setuptools import find_namespace_packages, setup

DATA_PACKAGES = {"generator._templates": "templates", "generator._boards": "boards"}
# Every kind of file the templates and board files are made of (a template holds its
# Project API server, a shell launcher, Jinja templates, C, headers, linker scripts, ...).
DATA_FILES = ["**/*.py", "**/*.sh", "**/*.j2", "**/*.c", "**/*.h", "**/*.ld", "**/*.S",
              "**/*.toml", "**/*.json", "**/*.cmake", "**/*.md"]


def data_packages() -> list[str]:
    """The two data packages and every folder under them (setuptools warns about a folder
    it would ship that is not a listed package)."""
    return [name + sub for name, folder in DATA_PACKAGES.items()
            for sub in ["", *("." + p for p in find_namespace_packages(
                where=folder, exclude=["__pycache__", "*.__pycache__"]))]]


setup(
    # Namespace discovery, as pyproject's packages.find did: generator/project has no
    # __init__.py.
    packages=[*find_namespace_packages(include=["generator", "generator.*"],
                                       exclude=["*.__pycache__", *DATA_PACKAGES]),
              *data_packages()],
    package_dir=DATA_PACKAGES,
    # Accelerator plugins carry their drivers' C next to their Python.
    package_data={**{name: DATA_FILES for name in DATA_PACKAGES},
                  "generator.accel": ["*/driver/*.c", "*/driver/*.h", "*/driver/*.md"]},
    exclude_package_data={name: ["**/__pycache__/*", "**/*.pyc"] for name in DATA_PACKAGES},
)
