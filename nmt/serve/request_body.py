"""Reading a request: its body as JSON within bounds, then its shape with strict types. Anything wrong is an
ApiError, which the app answers as ``{"error": "...", "status": "error"}`` with a 4xx status naming the problem.

The contract, the same on every route: JSON types are taken as they are, never converted (``"beam": "5"``,
``"beam": true``, ``"id": "100"`` and ``"attention": "yes"`` are refused; an integer is accepted where a number
is asked for); an unknown field is refused naming it (OpenNMT-py's own items hold only ``src`` and ``id``; its
``ref``, a target prefix, is not supported here); a body nested deeper than ``MAX_JSON_DEPTH`` or holding
``NaN`` / ``Infinity`` is not read."""

from __future__ import annotations

import json
from typing import Any, NoReturn, Sequence

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter, ValidationError

from nmt.bounded_read import json_depth

# A request is 2 levels deep ([{"src": ...}], {"text": [...]}); the limit leaves room and keeps json.loads, which
# recurses once per level, far from Python's recursion limit (100,000 nested brackets raised RecursionError).
MAX_JSON_DEPTH = 32


class ApiError(Exception):
    """A request the server refuses: its HTTP status and a one-line reason."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The JSON error answer. A message quoting the request (a field's name) may hold a lone surrogate, which
    UTF-8 cannot write: it is shown escaped."""
    shown = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"error": shown, "status": "error"}, status_code=status, headers=headers)


def nesting_depth(body: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``body`` nest (``nmt.bounded_read.json_depth``); a body of
    fewer brackets than the limit is not scanned."""
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return 0
    return json_depth(body)


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


async def read_json(request: Request, limit: int) -> Any:
    """The request body as JSON: at most ``limit`` bytes, UTF-8, valid JSON, at most ``MAX_JSON_DEPTH`` deep;
    else an ApiError saying which."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body of {declared} bytes; at most {limit} are accepted (--max-body-bytes)")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"request body over {limit} bytes (--max-body-bytes); send fewer sentences")
    if not body.strip():
        raise ApiError(400, "empty request body; send JSON, e.g. [{\"src\": \"A sentence.\", \"id\": 100}]")
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"request body is not UTF-8 (byte {e.start}); encode the JSON as UTF-8") from None
    depth = nesting_depth(bytes(body))
    if depth > MAX_JSON_DEPTH:
        raise ApiError(400, f"request body nests arrays and objects {depth} levels deep; a request needs 2, at "
                            f"most {MAX_JSON_DEPTH} are read")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise ApiError(400, f"request body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except (ValueError, RecursionError) as e:  # NaN / Infinity, a number of thousands of digits
        reason = str(e).split(";")[0] if str(e) else type(e).__name__
        raise ApiError(400, f"request body is not valid JSON: {reason}") from None


_JSON_TYPES = {str: "a string", bool: "a boolean", int: "an integer", float: "a number", list: "an array",
               dict: "an object", type(None): "null"}


async def read_request(request: Request, shape: TypeAdapter, limit: int, fields: Sequence[str]) -> Any:
    """The body read as JSON (``read_json``) and validated against ``shape`` (strict types, no unknown field);
    the first problem, with where it is (``[0].src``), is a 400. ``fields`` names the request's fields, for the
    message refusing an unknown one."""
    try:
        return shape.validate_python(await read_json(request, limit))
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".") or "body"
        if first["type"] == "extra_forbidden":
            raise ApiError(400, f"{where}: unknown field; the fields are {', '.join(fields)}") from None
        got = _JSON_TYPES.get(type(first.get("input")))
        message = first["msg"] + (f", not {got}" if first["type"].endswith("_type") and got else "")
        raise ApiError(400, f"{where}: {message}") from None
