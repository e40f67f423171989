"""Options and helpers shared by the commands."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ..errors import MissingExtraError, ModelError
from ..llm import LLMRequest, ModelCaller
from ..models import HOW_TO_PROVIDE_A_MODEL, model_from_environment

__all__ = [
    "DEFAULT_DB",
    "Progress",
    "add_memory_options",
    "check_model",
    "check_output_path",
    "describe_failure",
    "memory_options",
    "pick_model",
]

DEFAULT_DB = "obsmem.db"


def add_memory_options(
    parser: argparse.ArgumentParser, *, message_tokens: int, observation_tokens: int
) -> None:
    parser.add_argument(
        "--model",
        help="Observer and Reflector model, e.g. openai/gpt-5-mini "
        "(default: from OBSMEM_MODEL or a provider key in the environment)",
    )
    parser.add_argument("--db", default=DEFAULT_DB, help=f"SQLite file (default: {DEFAULT_DB})")
    parser.add_argument(
        "--message-tokens",
        type=_positive_int,
        default=message_tokens,
        help=f"observe when unobserved messages reach this (default {message_tokens:,})",
    )
    parser.add_argument(
        "--observation-tokens",
        type=_positive_int,
        default=observation_tokens,
        help=f"reflect when the log reaches this (default {observation_tokens:,})",
    )
    parser.add_argument(
        "--buffer-tokens",
        type=_buffer_tokens,
        default="0.2",
        help="background buffering interval: a ratio, tokens, or 'off'",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of tokens") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of tokens above 0")
    return value


def _buffer_tokens(text: str) -> str:
    """A ratio of the threshold (0.2), a token count (6000) or 'off'."""
    if text.lower() in ("off", "false", "0"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a ratio of the threshold (0.2), a token count (6000) or 'off'"
        ) from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a ratio or a token count above 0")
    return text


def check_output_path(path: str | None, what: str) -> str | None:
    """A message when ``path`` cannot be written (checked before long work), else None."""
    if path is None:
        return None
    target = Path(path)
    parent = target.parent if str(target.parent) else Path()
    if target.is_dir():
        return f"{what} {path} is a directory: give a file name"
    if not parent.is_dir():
        return f"cannot write {what} {path}: the folder {parent} does not exist"
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        return f"cannot write {what} {path}: permission denied"
    return None


def memory_options(args: argparse.Namespace, model: str) -> dict[str, Any]:
    buffer: float | bool = (
        False
        if str(args.buffer_tokens).lower() in ("off", "false", "0")
        else float(args.buffer_tokens)
    )
    return {
        "observation": {
            "model": model,
            "messageTokens": args.message_tokens,
            "bufferTokens": buffer,
        },
        "reflection": {"model": model, "observationTokens": args.observation_tokens},
    }


def pick_model(args: argparse.Namespace) -> str | None:
    """The model from --model or the environment; None (after saying how) when there is none."""
    model = args.model or model_from_environment()
    if model is None:
        print(f"obsmem: {HOW_TO_PROVIDE_A_MODEL}", file=sys.stderr)
    return model


async def check_model(model: str) -> str | None:
    """One tiny call, no retries: what went wrong, in words, when the model cannot serve."""
    try:
        await ModelCaller().call(
            LLMRequest(
                role="observer",
                model=model,
                system="Reply with the single word OK.",
                user=["ping"],
                timeout=30.0,
                retry_budget=0.0,
                operation="check",
            )
        )
    except MissingExtraError as exc:
        return str(exc)
    except ModelError as exc:
        return describe_failure(model, exc)
    return None


def describe_failure(model: str, exc: BaseException) -> str:
    """What a failed model call means for the user: a server that answered with an error is
    reported as such (it was reached, and refused), a server that could not be reached as such,
    a missing key or provider with how to configure one."""
    status, said = _http_error(exc)
    doctor = f"`obsmem doctor --model {model}` checks what it accepts"
    if status is not None:
        return (
            f"the server for {model} answered HTTP {status}: {said}. It was reached but refused "
            f"the request; {doctor}."
        )
    text = str(exc)
    if "needs an API key" in text or "not understood" in text or "unknown provider" in text:
        return f"{text}\n{HOW_TO_PROVIDE_A_MODEL}"
    if "timed out" in text:
        return f"{model} did not answer in time: {text}; {doctor}."
    return f"cannot reach {model}: {text}. Is the server running, and the URL right? {doctor}."


def _http_error(exc: BaseException) -> tuple[int | None, str]:
    """The HTTP status and message of the server's answer in ``exc``'s chain, if there was one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        status = getattr(current, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            body = getattr(current, "body", None)
            message = body.get("message") if isinstance(body, dict) else None
            return status, str(message or body or current)
        current = current.__cause__ or current.__context__
    return None, ""


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self._last = -1

    def __call__(self, done: int, total: int) -> None:
        width = 30
        filled = width * done // max(1, total)
        bar = "#" * filled + "." * (width - filled)
        elapsed = time.monotonic() - self.started
        line = f"{self.label} [{bar}] {done}/{total} turns  {elapsed:5.1f}s"
        if self.tty:
            self.stream.write("\r" + line)
            if done == total:
                self.stream.write("\n")
        else:
            step = max(1, total // 10)
            if done == total or done // step != self._last:
                self.stream.write(line + "\n")
                self._last = done // step
        self.stream.flush()


def db_path(args: argparse.Namespace) -> Path:
    return Path(args.db)
