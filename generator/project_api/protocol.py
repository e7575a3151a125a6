"""The Project API wire protocol, version 1, as TVM 0.18's client speaks it.

JSON-RPC 2.0, one object per line (UTF-8), strictly request then reply, over two pipes.
This module is the server side's mechanics: request validation with the error codes and
messages TVM's client expects, the ServerError classes it re-raises by name, ProjectOption
objects with every key, and base85 transport data. It uses only the standard library.
"""

from __future__ import annotations

import base64
import enum
import json
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

PROTOCOL_VERSION = 1
JSONRPC_VERSION = "2.0"
METHOD_NAME_RE = re.compile(r"^[a-zA-Z0-9_]+$")
MAX_LINE_BYTES = 64 * 1024 * 1024  # a request line (base85 transport data included)


class ErrorCode(enum.IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    SERVER_ERROR = -32000


class ServerError(Exception):
    """A handler error the client re-raises by class name (`message` = the class name)."""


class TransportClosedError(ServerError):
    """The device closed its end of the transport."""


class IoTimeoutError(ServerError):
    """A transport read or write did not finish before its deadline."""


class UnsupportedTVMVersionError(ServerError):
    """The client's TVM version is one this server cannot work with."""


SERVER_ERRORS = {cls.__name__: cls for cls in
                 (ServerError, TransportClosedError, IoTimeoutError, UnsupportedTVMVersionError)}


class RequestError(Exception):
    """A request that fails validation: answered with `code` and `message`."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ProjectOption:
    """An option a server offers; to_json() always carries every key."""

    name: str
    type: str  # "bool" | "int" | "str"
    help: str
    required: tuple[str, ...] | None = None
    optional: tuple[str, ...] | None = None
    choices: tuple | None = None
    default: Any = None

    def __post_init__(self) -> None:
        if not self.required and not self.optional:
            raise ValueError(f"option {self.name}: required or optional must name a method")

    def to_json(self) -> dict:
        return {"name": self.name, "choices": list(self.choices) if self.choices else None,
                "default": self.default, "type": self.type,
                "required": list(self.required) if self.required else None,
                "optional": list(self.optional) if self.optional else None,
                "help": self.help}


# Declared parameters of each method, and which are type-checked (TVM checks that build,
# flash and close_transport get an object for `options`; the others are passed as they are).
METHODS: dict[str, dict[str, type | None]] = {
    "server_info_query": {"tvm_version": None},
    "generate_project": {"model_library_format_path": None, "standalone_crt_dir": None,
                         "project_dir": None, "options": None},
    "build": {"options": dict},
    "flash": {"options": dict},
    "open_transport": {"options": None},
    "close_transport": {},
    "read_transport": {"n": None, "timeout_sec": None},
    "write_transport": {"data": None, "timeout_sec": None},
}
# Parameters a method may be given beyond TVM's (TVM's client never sends them): our own
# client tells close_transport that the device hung, so it is not given time to end.
OPTIONAL: dict[str, dict[str, type]] = {"close_transport": {"hung": bool}}


def encode_data(data: bytes) -> str:
    return base64.b85encode(data).decode("ascii")


def decode_data(text: str) -> bytes:
    if not isinstance(text, str):
        raise ValueError("transport data must be a base85 string")
    return base64.b85decode(text.encode("ascii"))


def validate_request(request: object) -> tuple[Any, str, dict]:
    """(id, method, params) of a valid request, or RequestError."""
    if not isinstance(request, dict):
        raise RequestError(ErrorCode.INVALID_REQUEST,
                           f"request: want dict; got {type(request).__name__}")
    if request.get("jsonrpc") != JSONRPC_VERSION:
        raise RequestError(ErrorCode.INVALID_REQUEST,
                           f'request["jsonrpc"]: want "{JSONRPC_VERSION}"; got '
                           f"{request.get('jsonrpc')!r}")
    request_id = request.get("id")
    if "id" not in request or not (request_id is None or isinstance(request_id, (str, int, float))
                                   and not isinstance(request_id, bool)):
        raise RequestError(ErrorCode.INVALID_REQUEST,
                           'request["id"]: want a string, a number or null')
    method = request.get("method")
    if not isinstance(method, str) or not METHOD_NAME_RE.match(method):
        raise RequestError(ErrorCode.INVALID_REQUEST,
                           f'request["method"]: want a string matching {METHOD_NAME_RE.pattern}')
    params = request.get("params")
    if not isinstance(params, dict):
        raise RequestError(ErrorCode.INVALID_REQUEST,
                           f'request["params"]: want dict; got {type(params).__name__}')
    declared = METHODS.get(method)
    if declared is None:
        raise RequestError(ErrorCode.METHOD_NOT_FOUND, f"{method}: no such method")
    optional = OPTIONAL.get(method, {})
    missing = [p for p in declared if p not in params]
    extra = [p for p in params if p not in declared and p not in optional]
    if missing or extra:
        raise RequestError(ErrorCode.INVALID_PARAMS,
                           f"{method}: missing params {missing}; extra params {extra}")
    for name, kind in {**declared, **optional}.items():
        if name in params and kind is not None and not isinstance(params[name], kind):
            raise RequestError(ErrorCode.INVALID_PARAMS,
                               f"{method}: parameter {name}: want {kind.__name__}, got "
                               f"{type(params[name]).__name__}")
    return request_id, method, params


Handler = Callable[[str, dict], Any]


def _error_reply(request_id: Any, code: int, message: str, data: Any = None) -> dict:
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id,
            "error": {"code": int(code), "message": message, "data": data}}


def handle_line(line: bytes, handler: Handler, describe_error: Callable[[Exception], dict]
                ) -> dict | None:
    """The reply to one request line, or None when the line is not JSON (the server stops)."""
    try:
        request = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    request_id = request.get("id") if isinstance(request, dict) else None
    try:
        request_id, method, params = validate_request(request)
    except RequestError as exc:
        ok_id = request_id if isinstance(request_id, (str, int, float, type(None))) else None
        return _error_reply(ok_id, exc.code, str(exc))
    try:
        result = handler(method, params)
    except Exception as exc:  # every handler failure is a reply, never a dead server
        message = (type(exc).__name__ if isinstance(exc, ServerError)
                   else f"calling method {method}")
        data = {"traceback": _traceback_text(exc), **describe_error(exc)}
        return _error_reply(request_id, ErrorCode.SERVER_ERROR, message, data)
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "result": result}


def _traceback_text(exc: Exception) -> str:
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
    if len(frames) > 1:  # mark the first server frame, as TVM's server does
        frames[1] = frames[1].rstrip("\n") + "  # <--- Outermost server-side stack frame\n"
    return "".join(frames)


def serve_lines(reader: BinaryIO, writer: BinaryIO, handler: Handler,
                describe_error: Callable[[Exception], dict]) -> None:
    """Answer requests until end of input or a line that is not JSON."""
    while True:
        line = reader.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES:
            return
        reply = handle_line(line, handler, describe_error)
        if reply is None:
            return
        writer.write(json.dumps(reply).encode("utf-8") + b"\n")
        writer.flush()
