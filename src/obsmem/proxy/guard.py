"""What a request must pass before the proxy reads, stores or forwards any of it, and how the
proxy answers one that does not (the README's "Who may reach it" and "Limits" list the answers).

:class:`Guard` (the ``Host``, the ``Origin``, the body's size before any of it is read) and
:func:`read_json` (a JSON object, nested at most ``--max-json-depth`` levels, tool-call arguments
included) run before memory sees the request, so a refused request stores nothing and goes
nowhere. Each refusal is a JSON error in OpenAI's shape and one WARNING line on the ``obsmem``
logger; anything else that goes wrong in a request is a 500 and one ERROR line, never a traceback.

A large request (more than :data:`~obsmem.messages.MUCH_DATA` bytes) is parsed and checked on a
worker thread, and :func:`off_loop` moves the proxy's other work on it there too, so megabytes
of one client's request never hold up the event loop that serves the others.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar, cast

import anyio.to_thread
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..asgi import ASGIApp, HTTPMiddleware, Message, Receive, Scope, Send, Sending
from ..hosts import host_allowed, host_name, origin_allowed
from ..messages import MUCH_DATA
from .config import MAX_JSON_DEPTH_CEILING, ProxyConfig
from .identity import Refused
from .upstream import one_line

__all__ = ["Guard", "Refused", "guarding", "off_loop", "read_json"]

log = logging.getLogger("obsmem")

T = TypeVar("T")

Path = tuple[str | int, ...]
"""Where a value sits in a request: keys and list indexes from the top."""

_large_request: ContextVar[bool] = ContextVar("obsmem_proxy_large_request", default=False)


def _size(value: int) -> str:
    return f"{value / (1024 * 1024):g} MiB ({value:,} bytes)"


def _too_large(limit: int) -> Refused:
    return Refused(
        413,
        "request_too_large",
        f"the request body is larger than {_size(limit)}, the limit of this obsmem proxy: send "
        "less (images as URLs rather than inline data), or start the proxy with a larger "
        "--max-request-bytes",
    )


def _too_deep(limit: int, where: str) -> Refused:
    return Refused(
        400,
        "json_too_deep",
        f"the request's JSON is nested deeper than {limit} levels ({where}), the limit of "
        "this obsmem proxy: send flatter data, or start the proxy with a larger "
        f"--max-json-depth (at most {MAX_JSON_DEPTH_CEILING})",
    )


class Guard(HTTPMiddleware):
    """ASGI middleware: the host, origin and size checks of every request, and one clear
    answer and one log line for whatever goes wrong in one (see the module doc)."""

    def __init__(self, app: ASGIApp, config: ProxyConfig) -> None:
        super().__init__(app)
        self.config = config

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        sending = Sending(send)
        what = f"{scope.get('method', '')} {scope.get('path', '')}"
        try:
            self._check_headers(scope)
            await self.app(scope, self._limited(receive), sending)
        except Refused as refused:
            log.warning("obsmem proxy: refused %s (%d): %s", what, refused.status, refused)
            if not sending.started:
                await refused.response()(scope, receive, send)
        except Exception as exc:  # one line, never a traceback: the request is over
            log.error("obsmem proxy: %s failed: %s", what, _where(exc))
            if not sending.started:
                error = {
                    "message": f"obsmem proxy failed to serve the request "
                    f"({type(exc).__name__}); the proxy's log says where",
                    "type": "server_error",
                    "code": 500,
                }
                await JSONResponse({"error": error}, status_code=500)(scope, receive, send)

    def _check_headers(self, scope: Scope) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host")
        if not host_allowed(host, self.config.allowed_hosts):
            raise Refused(
                421,
                "host_not_allowed",
                f"this obsmem proxy answers requests addressed to 127.0.0.1 or localhost, not "
                f"{host_name(host or '')[:80]!r} (a page of another site may be reaching it "
                "through DNS rebinding): use its loopback URL, or start it with --allow-host "
                "NAME for the name clients use",
            )
        origin = headers.get("origin")
        if origin is not None and not origin_allowed(origin, self.config.allowed_origins):
            raise Refused(
                403,
                "origin_not_allowed",
                f"this obsmem proxy does not answer requests from pages of {origin[:80]!r} "
                "(a browser sent it on that site's behalf): start it with --allow-origin "
                "ORIGIN for a web app that may use it",
            )
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.config.max_request_bytes:
            raise _too_large(self.config.max_request_bytes)

    def _limited(self, receive: Receive) -> Receive:
        """``receive`` that refuses the request as soon as its body passes the limit (a body
        sent without a ``Content-Length``, or longer than it said)."""
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.config.max_request_bytes:
                    raise _too_large(self.config.max_request_bytes)
            return message

        return limited


def guarding(config: ProxyConfig) -> Middleware:
    """The :class:`Guard` of a proxy with ``config``, for Starlette's middleware list."""
    return Middleware(Guard, config=config)


def _where(exc: BaseException) -> str:
    """``Type: message (at file:line)``, on one line: where the innermost frame was."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = ""
    if frames:
        last = frames[-1]
        at = f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno} in {last.name})"
    text = one_line(str(exc), header=False)
    return f"{type(exc).__name__}{': ' + text if text else ''}{at}"


async def off_loop(fn: Callable[..., T], *args: Any, heavy: bool = False) -> T:
    """``fn(*args)``, on a worker thread when it is ``heavy`` or the request being served is
    large (its CPU work would hold up every other request), else here."""
    if heavy or _large_request.get():
        return await anyio.to_thread.run_sync(fn, *args)
    return fn(*args)


async def read_json(request: Request, max_json_depth: int) -> tuple[bytes, dict[str, Any]]:
    """The request's body and its JSON object, checked (see the module doc)."""
    declared = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if declared and declared != "application/json" and not declared.endswith("+json"):
        raise Refused(
            415,
            "unsupported_media_type",
            f"the request body must be JSON: send it with Content-Type: application/json "
            f"(it came as {declared[:80]!r})",
        )
    raw = await request.body()
    _large_request.set(len(raw) > MUCH_DATA)
    return raw, await off_loop(_parsed, raw, max_json_depth)


def _parsed(raw: bytes, limit: int) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except RecursionError:
        raise _too_deep(limit, "in the request body") from None
    except ValueError as exc:
        raise Refused(
            400,
            "invalid_json",
            f"the request body is not valid JSON: {one_line(str(exc), 200, header=False)}",
        ) from None
    if not isinstance(body, dict):
        raise Refused(
            400, "invalid_json", f"the request body must be a JSON object, not {_kind(body)}"
        )
    _check_depth(cast(dict[str, Any], body), limit)
    return cast(dict[str, Any], body)


def _kind(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _check_depth(value: dict[str, Any] | list[Any], limit: int, where: Path = ()) -> None:
    """Refuse ``value`` when it, or a tool call's ``arguments`` in it (JSON in a string), nests
    more than ``limit`` levels (a walk with its own stack: no recursion to run out of)."""
    stack: list[tuple[Any, int, Path]] = [(value, 1, where)]
    while stack:
        node, depth, path = stack.pop()
        if depth > limit:
            raise _too_deep(limit, _path(path))
        items = (
            cast(dict[str, Any], node).items()
            if isinstance(node, dict)
            else enumerate(cast(list[Any], node))
        )
        for key, item in items:
            if isinstance(item, dict | list):
                stack.append((item, depth + 1, (*path, key)))
            elif key == "arguments" and isinstance(item, str):
                arguments = _json_in(item, limit, (*path, key))
                if arguments is not None:
                    _check_depth(arguments, limit, (*path, key))


def _json_in(text: str, limit: int, path: Path) -> dict[str, Any] | list[Any] | None:
    """The object or array a string holds as JSON, or None (the string is stored as it is)."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        parsed = json.loads(text)
    except RecursionError:
        raise _too_deep(limit, _path(path)) from None
    except ValueError:
        return None
    return cast(dict[str, Any] | list[Any], parsed) if isinstance(parsed, dict | list) else None


def _path(path: Path, shown: int = 8) -> str:
    """``messages[2].tool_calls[0].function.arguments``: the first ``shown`` steps of it."""
    out = ""
    for key in path[:shown]:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return "at " + out + ("..." if len(path) > shown else "") if out else "in the request body"
