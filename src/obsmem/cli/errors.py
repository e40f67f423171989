"""What went wrong, in one line: the errors that end a command and the model checks."""

from __future__ import annotations

import os
import sqlite3
import sys

from ..errors import MissingExtraError, ModelError, ObsmemError
from ..llm import LLMRequest, ModelCaller

__all__ = [
    "CHECK_OUTPUT_TOKENS",
    "CHECK_TIMEOUT",
    "CannotStart",
    "check_model",
    "describe_error",
    "describe_failure",
    "first_line",
    "refuse_unusable_model",
    "sentence",
]


class CannotStart(ObsmemError):
    """The command cannot start; the message says what to change (exit 2)."""


CHECK_OUTPUT_TOKENS = 32
"""The start-up check's output cap: its one-word answer fits, and a model that rambles is cut off
there (sent as ``max_tokens``; a server that ignores it is hung up on past it)."""
CHECK_TIMEOUT = 30.0
"""Seconds the start-up check waits for its answer."""


async def check_model(
    model: str,
    *,
    in_doctor: bool = False,
    timeout: float = CHECK_TIMEOUT,  # noqa: ASYNC109
) -> str | None:
    """One tiny call, no retries, its answer capped at ``CHECK_OUTPUT_TOKENS``: None when the
    model answers (whatever it says: a model that rambles is cut off at the cap, and reachable),
    else what went wrong, in words, also when no answer came within ``timeout`` seconds
    (``in_doctor``: without the advice to run ``obsmem doctor``)."""
    try:
        await ModelCaller().call(
            LLMRequest(
                role="observer",
                model=model,
                system="Reply with the single word OK.",
                user=["ping"],
                timeout=timeout,
                retry_budget=0.0,
                operation="check",
                max_output_tokens=CHECK_OUTPUT_TOKENS,
            )
        )
    except MissingExtraError as exc:
        return str(exc)
    except ModelError as exc:
        if isinstance(exc.__cause__, TimeoutError):
            return _no_answer(model, exc, timeout, in_doctor=in_doctor)
        return describe_failure(model, exc, in_doctor=in_doctor)
    return None


def _no_answer(model: str, exc: ModelError, timeout: float, *, in_doctor: bool) -> str:
    url = _url_tried(model, exc)
    at = f" at {url}" if url else ""
    doctor = "" if in_doctor else f" `obsmem doctor --model {model}` checks it further."
    return _one_line(
        f"{model}{at} sent no answer within {timeout:g} s to a one-word check (its answer "
        f"capped at {CHECK_OUTPUT_TOKENS} tokens). Is the server busy with another request, "
        f"or still loading the model?{doctor}"
    )


def refuse_unusable_model(model: str | None) -> None:
    """CannotStart naming what stops ``--model`` from working, found without a network call (an
    unknown provider, a spec not understood, a missing key); nothing for no model or "auto"."""
    from ..models.providers import credentials_problem

    if model is None or model == "auto":
        return
    problem = credentials_problem(model)
    if problem is not None:
        raise CannotStart(f"--model {model}: {problem}")


def describe_failure(model: str, exc: BaseException, *, in_doctor: bool = False) -> str:
    """What a failed model call means for the user, in one line: a server that answered with an
    error is reported as such (it was reached, and refused), a server that could not be reached
    as such (with the URL tried), a missing key or an unknown provider as it is. Outside
    ``obsmem doctor`` (``in_doctor``), a reached or unreachable server gets the advice to run
    it."""
    status, said = _http_error(exc)
    url = _url_tried(model, exc)
    at = f" at {url}" if url else ""
    doctor = "" if in_doctor else f"; `obsmem doctor --model {model}` checks what it accepts"
    if status is not None:
        verdict = (
            "The server failed (an error on its side, not in the request); it may work again "
            "once it recovers"
            if status >= 500
            else "It was reached but refused the request"
        )
        return _one_line(
            f"the server for {model}{at} answered HTTP {status}: {sentence(said)}. "
            f"{verdict}{doctor}."
        )
    text = str(exc)
    if isinstance(exc, MissingExtraError) or any(
        words in text for words in ("needs an API key", "not understood", "unknown provider")
    ):
        return _one_line(text)
    if "timed out" in text:
        return _one_line(f"{model}{at} did not answer in time: {sentence(text)}{doctor}.")
    return _one_line(
        f"cannot reach {model}{at}: {_root_cause(exc)}. Is the server running, and the URL "
        f"right{'' if url else ' (OPENAI_BASE_URL for an OpenAI-compatible server)'}?"
        + (f" `obsmem doctor --model {model}` checks what it accepts." if doctor else "")
    )


def sentence(text: str) -> str:
    """``text`` without its closing full stops (the caller adds its own)."""
    return text.strip().rstrip(".").strip()


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _chain(exc: BaseException) -> list[BaseException]:
    seen: set[int] = set()
    links: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        links.append(current)
        current = current.__cause__ or current.__context__
    return links


def _root_cause(exc: BaseException) -> str:
    """The deepest error in ``exc``'s chain that says something (a refused connection, a name
    that does not resolve), as ``Type: message``."""
    for link in reversed(_chain(exc)):
        text = sentence(str(link))
        if text:
            return f"{type(link).__name__}: {text}" if link is not exc else text
    return type(exc).__name__


def _url_tried(model: str, exc: BaseException) -> str | None:
    """The URL the failed call went to: the request of an HTTP error in the chain, else
    ``OPENAI_BASE_URL`` for an ``openai/`` model."""
    for link in _chain(exc):
        try:
            request = getattr(link, "request", None)
        except RuntimeError:  # httpx: an error raised without its request
            request = None
        url = getattr(request, "url", None)
        if url is not None and str(url):
            return str(url)
    base = os.environ.get("OPENAI_BASE_URL", "").strip()
    if base and model.split(":", 1)[0].split("/", 1)[0] == "openai":
        return base
    return None


def _http_error(exc: BaseException) -> tuple[int | None, str]:
    """The HTTP status and message of the server's answer in ``exc``'s chain, if there was one."""
    for current in _chain(exc):
        status = getattr(current, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            body = getattr(current, "body", None)
            message = body.get("message") if isinstance(body, dict) else None
            return status, str(message or body or current)
    return None, ""


_OPTIONAL_MODULES = {
    "matplotlib": "cli",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "numpy": "vector",
    "tokenizers": "vector",
    "safetensors": "vector",
    "tiktoken": "tiktoken",
    "openai": "openai",
    "anthropic": "anthropic",
    "google": "google",
    "agents": "openai-agents",
    "langgraph": "langgraph",
    "langchain": "langgraph",
    "langchain_core": "langgraph",
    "mem0": "bench",
    "faiss": "bench",
}
"""Optional packages by import name, and the extra that installs each."""


def describe_error(exc: BaseException, model: str | None = None) -> tuple[int, str] | None:
    """The exit code and the one line (without ``obsmem: ``) for an error that ended a command:
    2 when it could not start (CannotStart, a missing extra), 1 when the work failed (obsmem's
    own errors, a model, server or store error from the libraries underneath, a file that
    cannot be read or written). None for anything else (a bug: let it show)."""
    if isinstance(exc, BaseExceptionGroup):  # a task group's: the first error that is known
        for inner in exc.exceptions:  # pyright: ignore[reportUnknownVariableType]
            if (known := describe_error(inner, model)) is not None:
                return known
        return None
    if isinstance(exc, CannotStart | MissingExtraError):
        return 2, _one_line(str(exc))
    if isinstance(exc, ImportError):
        package = (exc.name or "").split(".")[0]
        extra = _OPTIONAL_MODULES.get(package)
        if extra is None:
            return None
        return 2, str(MissingExtraError("this command", extra, package=package))
    if isinstance(exc, ObsmemError):
        return 1, _one_line(str(exc))
    if _is_model_error(exc):
        return 1, describe_failure(model or "the model", exc)
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        return 1, _one_line(f"cannot use{where}: {exc.strerror or exc}")
    if _is_store_error(exc):
        return 1, _one_line(f"store error: {type(exc).__name__}: {sentence(str(exc))}")
    return None


def _loaded(module: str, *names: str) -> tuple[type[BaseException], ...]:
    """The exception classes ``names`` of ``module`` when it is already imported (an exception
    of a library that was never imported cannot have been raised)."""
    found = sys.modules.get(module)
    classes = [getattr(found, name, None) for name in names]
    return tuple(c for c in classes if isinstance(c, type) and issubclass(c, BaseException))


def _is_model_error(exc: BaseException) -> bool:
    kinds = (
        _loaded("pydantic_ai.exceptions", "AgentRunError", "UserError")
        + _loaded("httpx", "HTTPError", "InvalidURL")
        + _loaded("httpx2", "HTTPError", "InvalidURL")
        + _loaded("openai", "OpenAIError")
        + _loaded("anthropic", "AnthropicError")
    )
    return bool(kinds) and isinstance(exc, kinds)


def _is_store_error(exc: BaseException) -> bool:
    kinds = (sqlite3.Error, *_loaded("psycopg", "Error"), *_loaded("psycopg_pool", "PoolTimeout"))
    return isinstance(exc, kinds)


def first_line(exc: BaseException) -> str:
    return sentence((str(exc).strip().splitlines() or [type(exc).__name__])[0])
