"""The arguments several commands share, and their types.

Every command's ``add(parser)`` builds its parser from these, so an option several commands take
(``--db``, the model, the thresholds, the address a server listens on) is spelled, typed and
explained once. Light on purpose: ``obsmem CMD --help`` imports it, and nothing here imports a
store, server or model module.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

__all__ = [
    "DB_HELP",
    "DEFAULT_DB",
    "Run",
    "add_choice",
    "add_db",
    "add_listening",
    "add_memory_options",
    "add_model",
    "add_thresholds",
    "at_least_one",
    "buffer_tokens",
    "one_of",
    "positive_tokens",
]

DEFAULT_DB = "obsmem.db"
DB_HELP = (
    f"SQLite file, or a PostgreSQL DSN (postgresql://user@host/db; needs obsmem[postgres]) "
    f"(default: {DEFAULT_DB})"
)
FROM_ENVIRONMENT = "from OBSMEM_MODEL or a provider key in the environment"
"""Where a model comes from when no flag names one (``pick_model``)."""

Run = Callable[[argparse.Namespace, TextIO], int]
"""What a command's ``add(parser)`` returns: the function that runs it, ``run(args, out)``,
whose result is the exit code."""


def add_db(parser: argparse.ArgumentParser, *, read_only: bool = False) -> None:
    """``--db``: the store the command opens (``read_only``: it is never written)."""
    parser.add_argument(
        "--db", default=DEFAULT_DB, help=DB_HELP + ("; opened read-only" if read_only else "")
    )


def one_of(parser: argparse.ArgumentParser, **flags: str) -> Any:
    """What the command acts on, exactly one of ``flags`` (``thread="erase this thread"``
    gives ``--thread`` with that help); the group, to add a choice that is not a value."""
    group = parser.add_mutually_exclusive_group(required=True)
    for flag, help in flags.items():
        group.add_argument(f"--{flag}", help=help)
    return group


def add_choice(
    parser: argparse.ArgumentParser, flag: str, choices: tuple[str, ...], help: str
) -> None:
    """An option that takes one of ``choices``, the first by default."""
    parser.add_argument(flag, choices=choices, default=choices[0], help=help)


def add_model(
    parser: argparse.ArgumentParser,
    what: str,
    *,
    flag: str = "--model",
    default: str = FROM_ENVIRONMENT,
) -> None:
    """A model flag: ``what`` it does, an example, and where it comes from when not given."""
    parser.add_argument(flag, help=f"{what}, e.g. openai/gpt-6.1-terra (default: {default})")


def add_thresholds(
    parser: argparse.ArgumentParser,
    message_tokens: int,
    observation_tokens: int,
    *,
    observe: str = "observe when unobserved messages reach this",
    reflect: str = "reflect when the log reaches this",
) -> None:
    """``--message-tokens`` and ``--observation-tokens``: when memory observes and reflects
    (or, with other words, what they stand for in the command)."""
    for flag, default, help in (
        ("--message-tokens", message_tokens, observe),
        ("--observation-tokens", observation_tokens, reflect),
    ):
        parser.add_argument(
            flag, type=positive_tokens, default=default, help=f"{help} (default {default:,})"
        )


def add_memory_options(
    parser: argparse.ArgumentParser,
    *,
    message_tokens: int = 30_000,
    observation_tokens: int = 40_000,
    model_default: str = FROM_ENVIRONMENT,
) -> None:
    """The options of the memory a command builds (read back by ``common.memory_options``)."""
    add_model(parser, "Observer and Reflector model", default=model_default)
    add_db(parser)
    add_thresholds(parser, message_tokens, observation_tokens)
    parser.add_argument(
        "--buffer-tokens",
        type=buffer_tokens,
        default="0.2",
        help="background buffering interval: a ratio, tokens, or 'off'",
    )


def add_listening(
    parser: argparse.ArgumentParser,
    *,
    port: int,
    token: str | None = None,
    token_default: str | None = None,
    when: str = "",
) -> None:
    """``--host`` and ``--port`` of a server command, and its ``--token`` when it takes one
    (``token`` is its help); ``when`` prefixes each help (``"HTTP: "``) for a command that
    serves other ways too."""
    parser.add_argument(
        "--host", default="127.0.0.1", help=f"{when}address to listen on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=port, help=f"{when}port (default {port}; 0 picks a free one)"
    )
    if token is not None:
        parser.add_argument("--token", default=token_default, help=when + token)


def at_least_one(text: str) -> int:
    """A count of things, at least 1 (``--limit``, ``--concurrency``)."""
    return _count(text, "")


def positive_tokens(text: str) -> int:
    """An option's number of tokens, at least 1."""
    return _count(text, " of tokens")


def _count(text: str, of: str) -> int:
    """A whole number of at least 1, written ``30000``, ``30,000`` or ``30_000``; anything else
    is an ArgumentTypeError, which argparse reports in one line."""
    try:
        value = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number{of}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number{of} of at least 1")
    return value


def buffer_tokens(text: str) -> str:
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
