"""Whether a model refused a request because it does not fit the model's context window.

Every provider words it differently: OpenAI answers 400 with the code
``context_length_exceeded`` ("This model's maximum context length is N tokens"), Anthropic "prompt
is too long: N tokens > M maximum", llama.cpp's server ``exceed_context_size_error`` ("the request
exceeds the available context size", with ``n_prompt_tokens`` and ``n_ctx`` in the body), vLLM
"This model's maximum context length is N tokens" or "... is longer than the maximum model length
of N". :func:`context_overflow` reads an exception (and every exception it was raised from or
during) and says whether it is such a refusal, with the context window and the request's size
when the answer names them. Importing this module loads no model library.

The front doors use it to compact the thread once and retry the request (``Agent``, the
pydantic-ai capability, the ``create_agent`` middleware, the proxy; ``Door.compact_after``
compacts); :func:`fitting_thresholds` says which thresholds would fit the window.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

__all__ = [
    "ContextOverflow",
    "FittingThresholds",
    "context_overflow",
    "fit_advice",
    "fitting_thresholds",
    "is_context_overflow",
    "needed_tokens",
]

_PHRASES = (
    "context_length_exceeded",  # OpenAI's code
    "maximum context length",  # OpenAI, vLLM, OpenRouter, Groq
    "prompt is too long",  # Anthropic
    "exceed context limit",  # Anthropic: input and max_tokens together
    "exceed_context_size_error",  # llama.cpp's error type
    "exceeds the available context size",  # llama.cpp
    "available context size",  # llama.cpp, older wording
    "is longer than the model's context length",  # vLLM
    "is longer than the maximum model length",  # vLLM
    "exceeds the context window",  # OpenAI Responses
    "exceed context window",  # llama-cpp-python
    "exceeds model's maximum context length",  # vLLM
    "reduce the length of the messages",  # OpenAI-compatible servers
    "exceeds the maximum number of tokens allowed",  # Gemini
    "context window exceeds limit",
    "model_context_window_exceeded",
)
"""What an overflow answer says (lower case), wherever it says it."""

_STATUSES = frozenset({400, 413, 422, 500})
"""The HTTP statuses an overflow comes with (llama.cpp's older servers answered 500); an outage
(429, 502-504) never is one, whatever its text."""

_LIMIT = (
    re.compile(r"context size \((\d+) tokens?\)"),  # llama.cpp
    re.compile(r"maximum context length is (\d+)"),  # OpenAI, vLLM
    re.compile(r"> (\d+) maximum"),  # Anthropic: "208310 tokens > 200000 maximum"
    re.compile(r"exceed context limit: \d+ \+ \d+ > (\d+)"),  # Anthropic
    re.compile(r"maximum model length (?:of |is )?\(?(\d+)"),  # vLLM
    re.compile(r"maximum context length \((\d+)\)"),  # vLLM
    re.compile(r"context length \((\d+)\)"),
    re.compile(r"context window of (\d+)"),  # llama-cpp-python
    re.compile(r"n_ctx\D{0,4}(\d+)"),  # llama.cpp logs and messages: "n_ctx = 8192"
    re.compile(r"maximum number of tokens allowed \((\d+)\)"),  # Gemini
)
_REQUESTED = (
    re.compile(r"request \((\d+) tokens?\)"),  # llama.cpp
    re.compile(r"resulted in (\d+) tokens"),  # OpenAI
    re.compile(r"you requested (\d+) tokens"),  # vLLM
    re.compile(r"request has (\d+) input tokens"),  # vLLM
    re.compile(r"prompt is too long: (\d+) tokens"),  # Anthropic
    re.compile(r"prompt \(length (\d+)\)"),  # vLLM
    re.compile(r"prompt length of (\d+)"),  # vLLM
    re.compile(r"input length \((\d+)\)"),  # vLLM
    re.compile(r"requested tokens \((\d+)\)"),  # llama-cpp-python
    re.compile(r"input token count \((\d+)\)"),  # Gemini
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextOverflow:
    """A model's refusal of a request too long for its context window."""

    message: str
    """What the model's server said (its error text, or the exception's)."""
    limit: int | None = None
    """The model's context window in tokens, when the answer names it."""
    requested: int | None = None
    """The request's size in tokens, when the answer names it."""


def is_context_overflow(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it came from) is a model refusing a request that does
    not fit its context window."""
    return context_overflow(exc) is not None


def context_overflow(exc: BaseException) -> ContextOverflow | None:
    """The overflow ``exc`` reports (walking ``__cause__``, ``__context__`` and exception groups),
    or None when it is some other failure."""
    for error in _chain(exc):
        found = _overflow_of(error)
        if found is not None:
            return found
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo = [exc]
    while todo:
        error = todo.pop(0)
        if id(error) in seen:
            continue
        seen.add(id(error))
        yield error
        if isinstance(error, BaseExceptionGroup):
            todo.extend(cast(BaseExceptionGroup[BaseException], error).exceptions)
        for linked in (error.__cause__, error.__context__):
            if linked is not None:
                todo.append(linked)


def _overflow_of(error: BaseException) -> ContextOverflow | None:
    status = _status_of(error)
    if status is not None and status not in _STATUSES:
        return None
    body: object = getattr(error, "body", None)
    if body is None:
        body = _response_body(error)
    texts = list(_strings(body))
    numbers = dict(_numbers(body))
    texts.append(str(error))
    text = " | ".join(texts)
    lowered = text.lower()
    category = _category_says_overflow(error)
    if not category and not any(phrase in lowered for phrase in _PHRASES):
        return None
    limit = numbers.get("n_ctx") or numbers.get("max_model_len") or _first(_LIMIT, lowered)
    requested = numbers.get("n_prompt_tokens") or _first(_REQUESTED, lowered)
    return ContextOverflow(message=_message_of(body) or text, limit=limit, requested=requested)


def _status_of(error: BaseException) -> int | None:
    status: object = getattr(error, "status_code", None)
    if status is None:  # httpx.HTTPStatusError
        response: object = getattr(error, "response", None)
        status = getattr(response, "status_code", None)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def _response_body(error: BaseException) -> object:
    """The JSON (or text) of an HTTP error's response (``httpx.HTTPStatusError``), if it was
    read."""
    response: object = getattr(error, "response", None)
    if response is None:
        return None
    try:
        text: object = getattr(response, "text", None)
    except Exception:  # a streamed response not read: nothing to say
        return None
    if not isinstance(text, str) or not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _category_says_overflow(error: BaseException) -> bool:
    """pydantic-ai's own category for it (newer releases classify some overflows)."""
    try:
        from pydantic_ai import exceptions
    except ImportError:  # pragma: no cover - pydantic-ai is a dependency
        return False
    category: object = getattr(exceptions, "ModelContextWindowExceededError", None)
    return isinstance(category, type) and isinstance(error, category)


def _strings(value: object, depth: int = 0) -> Iterator[str]:
    if depth > 4:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield value.decode(errors="replace")
    elif isinstance(value, Mapping):
        for item in cast(Mapping[Any, Any], value).values():
            yield from _strings(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in cast(list[Any], value):
            yield from _strings(item, depth + 1)


def _numbers(value: object, depth: int = 0) -> Iterator[tuple[str, int]]:
    if depth > 4 or not isinstance(value, Mapping):
        return
    for key, item in cast(Mapping[Any, Any], value).items():
        if isinstance(item, int) and not isinstance(item, bool) and isinstance(key, str):
            yield key, item
        else:
            yield from _numbers(item, depth + 1)


def _message_of(body: object) -> str | None:
    """The error's own message in a JSON error body (``{"error": {"message": ...}}``)."""
    if not isinstance(body, Mapping):
        return None
    mapping = cast(Mapping[str, Any], body)
    message = mapping.get("message")
    if isinstance(message, str):
        return message
    return _message_of(mapping.get("error"))


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match is not None:
            return int(match.group(1))
    return None


# -- thresholds that fit a window ------------------------------------------------------------------

RESERVE_SHARE = 0.15
"""Share of a context window left for the instructions, memory's notes and the answer."""
MIN_RESERVE = 1_000


@dataclass(frozen=True, slots=True, kw_only=True)
class FittingThresholds:
    """Thresholds whose worst case fits a context window: raw messages up to ``block_after``
    (1.2 x ``message_tokens``) plus a log up to ``observation_tokens``, with room left for the
    instructions and the answer."""

    message_tokens: int
    """``observation.message_tokens`` (``--message-tokens``)."""
    observation_tokens: int
    """``reflection.observation_tokens`` (``--observation-tokens``)."""


def needed_tokens(message_tokens: int, observation_tokens: int, block_after: float = 1.2) -> int:
    """The most a context holds with these thresholds: raw messages up to ``block_after``
    times ``message_tokens`` plus an observation log up to ``observation_tokens``."""
    return int(message_tokens * block_after) + observation_tokens


def fitting_thresholds(context_window: int, block_after: float = 1.2) -> FittingThresholds:
    """Thresholds for an actor whose context window is ``context_window`` tokens: what is left
    after the reserve goes half to raw messages (at ``block_after``), 40% to the log."""
    usable = context_window - max(MIN_RESERVE, int(context_window * RESERVE_SHARE))
    usable = max(usable, context_window // 2)
    message_tokens = max(100, int(usable * 0.5 / block_after) // 100 * 100)
    observation_tokens = max(100, int(usable * 0.4) // 100 * 100)
    return FittingThresholds(message_tokens=message_tokens, observation_tokens=observation_tokens)


def fit_advice(context_window: int, *, message_tokens: int, observation_tokens: int) -> str | None:
    """What to change so the thresholds fit an actor whose context window is
    ``context_window`` tokens, or None when they fit already."""
    needed = needed_tokens(message_tokens, observation_tokens)
    fit = fitting_thresholds(context_window)
    if needed + max(MIN_RESERVE, int(context_window * RESERVE_SHARE)) <= context_window:
        return None
    return (
        f"memory's thresholds need up to {needed:,} tokens (1.2 x observation.message_tokens "
        f"{message_tokens:,} + an observation log up to reflection.observation_tokens "
        f"{observation_tokens:,}), more than the model's context of {context_window:,}: use "
        f"observation.message_tokens={fit.message_tokens} and "
        f"reflection.observation_tokens={fit.observation_tokens} "
        f"(--message-tokens {fit.message_tokens} --observation-tokens {fit.observation_tokens})"
    )
