"""The tool's own exception types.

Every error a user can cause (bad archive, unknown board, missing toolchain, failed build)
is one of these. The CLI turns them into a single line on stderr and exit code 2; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations


class MtgError(Exception):
    """Base class: a problem with the user's input or environment, not a bug."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def one_line(self) -> str:
        text = str(self)
        if self.hint:
            text = f"{text} (hint: {self.hint})"
        return " ".join(text.split())


class MlfError(MtgError):
    """The archive is not a Model Library Format archive this tool can read."""


class UnsupportedModelError(MtgError):
    """The archive is valid but cannot be turned into firmware for this board."""


class BoardError(MtgError):
    """Unknown board or a malformed board description."""


class ProjectError(MtgError):
    """A project directory is missing, incomplete or would be overwritten."""


class ToolchainError(MtgError):
    """A compiler, CMake or emulator is missing or failed."""


class DeviceError(MtgError):
    """The device misbehaved: it did not answer, answered garbage, or reported an error."""


class InputError(MtgError):
    """A user-supplied input tensor does not fit the model."""


class ExportError(MtgError):
    """The model cannot be imported or lowered by TVM into our archive format."""


class AbiError(MtgError):
    """The C runtime's headers lack a constant the generator needs (a broken install)."""
