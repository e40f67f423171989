"""Transient-error retries: which errors are worth retrying, and the backoff loop.

pydantic-ai's and httpx's exception classes are looked up only when they are already loaded: an
exception raised by either library cannot exist before that library was imported.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Literal, TypeAlias, TypeVar

from obsmem.errors import ModelError
from obsmem.redaction import redact

__all__ = ["RetryListener", "call_with_retry", "describe_exception", "is_transient", "last_error"]

T = TypeVar("T")

RetryListener: TypeAlias = Callable[[int, BaseException, float], None]
"""Told before each pause: the number of the attempt to come (2 for the first retry), the
error that is retried, and the seconds until that attempt."""

_TRANSIENT_STATUS = frozenset({408, 425, 429})
_TRANSIENT_NAMES = frozenset({"APIConnectionError", "APITimeoutError", "ServiceUnavailableError"})


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _status_code(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return status
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return status
    return None


def _pydantic_ai_kind(
    exc: BaseException,
) -> Literal["refused", "transient", "http", "api"] | None:
    """Which of pydantic-ai's model errors ``exc`` is; None when it is none of them."""
    if "pydantic_ai.exceptions" not in sys.modules:
        return None
    from pydantic_ai.exceptions import (
        ModelAPIError,
        ModelConnectionError,
        ModelHTTPError,
        ModelQuotaExceededError,
        ModelRateLimitError,
        ModelRequestRejectedError,
        ModelRequestTimeout,
        ModelServerError,
        ModelUnavailableError,
    )

    if isinstance(exc, ModelQuotaExceededError | ModelRequestRejectedError):
        return "refused"
    if isinstance(
        exc,
        ModelRateLimitError
        | ModelUnavailableError
        | ModelServerError
        | ModelConnectionError
        | ModelRequestTimeout,
    ):
        return "transient"
    if isinstance(exc, ModelHTTPError):
        return "http"
    if isinstance(exc, ModelAPIError):
        return "api"
    return None


def _is_httpx_transport_error(exc: BaseException) -> bool:
    for name in ("httpx", "httpx2"):
        module = sys.modules.get(name)
        transport_error: object = getattr(module, "TransportError", None)
        if isinstance(transport_error, type) and isinstance(exc, transport_error):
            return True
    return False


_REQUEST_SHAPE_ERRORS = (
    "template",
    "jinja",
    "can only concatenate",
    "roles must alternate",
    "system message must",
    "unsupported parameter",
)
"""Words of a 500 that is a local server refusing the request's shape (llama.cpp answers a chat
template error with a 500): sending it again cannot help."""


def _refuses_shape(exc: BaseException, status: int) -> bool:
    text = str(exc).lower()
    return status == 500 and any(words in text for words in _REQUEST_SHAPE_ERRORS)


def _classify(exc: BaseException) -> bool | None:
    """True transient, False definitely not, None: look further down the cause chain."""
    if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
        return False
    kind = _pydantic_ai_kind(exc)
    if kind == "refused":
        return False
    status = _status_code(exc)
    if status is not None and _refuses_shape(exc, status):
        return False
    if kind == "transient":
        return True
    if status is not None and (kind == "http" or 400 <= status < 600):
        return status in _TRANSIENT_STATUS or 500 <= status < 600
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    if _is_httpx_transport_error(exc) or type(exc).__name__ in _TRANSIENT_NAMES:
        return True
    if kind is not None:
        return False
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the call that raised ``exc`` may succeed.

    Network and timeout errors, and HTTP 408/425/429/5xx, anywhere in the ``__cause__`` /
    ``__context__`` chain (the first error in the chain that says either way decides).
    Cancellation is never transient.
    """
    for link in _chain(exc):
        verdict = _classify(link)
        if verdict is not None:
            return verdict
    return False


def _server_message(exc: BaseException) -> str:
    """The message of a server's error answer (``{"message": ...}`` or ``{"error": {"message":
    ...}}``), else the exception's own text."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner: object = body.get("error", body)  # pyright: ignore[reportUnknownMemberType]
        message: object = (
            inner.get("message")  # pyright: ignore[reportUnknownMemberType]
            if isinstance(inner, dict)
            else inner
        )
        if message:
            return str(message)  # pyright: ignore[reportUnknownArgumentType]
    elif isinstance(body, str | bytes) and body:
        return body.decode(errors="replace") if isinstance(body, bytes) else body
    return str(exc)


def describe_exception(exc: BaseException) -> str:
    """``exc`` in a few words for a person: ``HTTP 500: <the server's message>`` for an error
    answer from a server (the first in the cause chain), else ``Type: message``; secrets the
    message echoes are redacted (``obsmem.redaction``)."""
    for link in _chain(exc):
        status = _status_code(link)
        if status is not None:
            return _squash(f"HTTP {status}: {_server_message(link)}")
    text = str(exc).strip()
    return _squash(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _squash(text: str, limit: int = 300) -> str:
    """One redacted line of at most ``limit`` characters, without a closing full stop."""
    line = " ".join(redact(text).split()).rstrip(".")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def last_error(exc: BaseException) -> BaseException | None:
    """The error a timed-out or cancelled call met last, if it met one: the first link of
    ``exc``'s cause chain that is neither a timeout nor a cancellation. ``call_with_retry``
    keeps it there (as the cancellation's ``__context__``) when a deadline ends its retries."""
    for link in _chain(exc):
        if not isinstance(link, TimeoutError | asyncio.CancelledError):
            return link
    return None


async def call_with_retry(
    fn: Callable[[], Awaitable[T]],
    *,
    max_total: float = 60.0,
    base_delay: float = 1.0,
    max_delay: float = 20.0,
    jitter: float = 0.2,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    rand: Callable[[], float] = random.random,
    what: str = "the model call",
    on_retry: RetryListener | None = None,
) -> T:
    """Await ``fn()``, retrying transient errors with exponential backoff until ``max_total`` s.

    Delays are ``base_delay * 2**n`` capped at ``max_delay``, times ``1 ± jitter``, at least the
    provider's ``retry_after``, and never past the deadline. Non-transient errors propagate
    unchanged; when time runs out the last error is raised wrapped in ``ModelError``.
    ``on_retry`` is told before each pause (see ``RetryListener``). When the call is cancelled
    (an outer deadline) after an error, the cancellation carries that error as its
    ``__context__``, so whoever reports the timeout can name it (``last_error``).
    """
    if max_total < 0 or base_delay < 0 or max_delay < 0 or not 0 <= jitter < 1:
        raise ValueError(
            "call_with_retry needs max_total, base_delay and max_delay >= 0 and 0 <= jitter < 1"
        )
    start = clock()
    deadline = start + max_total
    attempts = 0
    last: BaseException | None = None
    while True:
        attempts += 1
        try:
            return await fn()
        except asyncio.CancelledError as cancelled:
            if last is not None and cancelled.__context__ is None:
                cancelled.__context__ = last  # the deadline's report names the last error
            raise
        except Exception as exc:
            if not is_transient(exc):
                raise
            remaining = deadline - clock()
            if remaining <= 0:
                elapsed = clock() - start
                tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
                raise ModelError(
                    f"{what} gave up after {tries} in {elapsed:.1f} s "
                    + (
                        "(a transient error; retries are off)"
                        if max_total == 0
                        else f"(transient errors, retried for up to {max_total:g} s)"
                    )
                    + f"; last error: {describe_exception(exc)}. "
                    "Check the provider's status and retry later."
                ) from exc
            delay = min(max_delay, base_delay * 2 ** (attempts - 1))
            delay *= 1 + jitter * (2 * rand() - 1)
            retry_after = getattr(exc, "retry_after", None)
            if isinstance(retry_after, int | float) and retry_after > delay:
                delay = float(retry_after)
            last = exc
            delay = min(delay, remaining)
            if on_retry is not None:
                on_retry(attempts + 1, exc, delay)
            await sleep(delay)
