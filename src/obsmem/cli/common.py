"""Options and helpers shared by the commands."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import MissingExtraError, ModelError, ObsmemError
from ..llm import CallActivity, LLMRequest, ModelCaller
from ..models import HOW_TO_PROVIDE_A_MODEL, model_from_environment

if TYPE_CHECKING:
    from ..stores.sqlstore import SQLStore

__all__ = [
    "DB_HELP",
    "DEFAULT_DB",
    "CannotStart",
    "Progress",
    "add_memory_options",
    "check_model",
    "check_output_path",
    "db_label",
    "describe_error",
    "describe_failure",
    "is_postgres_dsn",
    "memory_options",
    "open_store",
    "pick_model",
]

DEFAULT_DB = "obsmem.db"
DB_HELP = (
    f"SQLite file, or a PostgreSQL DSN (postgresql://user@host/db; needs obsmem[postgres]) "
    f"(default: {DEFAULT_DB})"
)


class CannotStart(ObsmemError):
    """The command cannot start; the message says what to change (exit 2)."""


def add_memory_options(
    parser: argparse.ArgumentParser, *, message_tokens: int, observation_tokens: int
) -> None:
    parser.add_argument(
        "--model",
        help="Observer and Reflector model, e.g. openai/gpt-5-mini "
        "(default: from OBSMEM_MODEL or a provider key in the environment)",
    )
    parser.add_argument("--db", default=DEFAULT_DB, help=DB_HELP)
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


def pick_model(args: argparse.Namespace, option: str = "model") -> str | None:
    """The model from ``--model`` (or the ``option`` given) or the environment; None (after
    saying how to configure one) when there is none."""
    model = getattr(args, option, None) or model_from_environment()
    if model is None:
        print(f"obsmem: {HOW_TO_PROVIDE_A_MODEL}", file=sys.stderr)
    return model


async def check_model(model: str, *, in_doctor: bool = False) -> str | None:
    """One tiny call, no retries: what went wrong, in words, when the model cannot serve
    (``in_doctor``: without the advice to run ``obsmem doctor``)."""
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
        return describe_failure(model, exc, in_doctor=in_doctor)
    return None


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
        return _one_line(
            f"the server for {model}{at} answered HTTP {status}: {_sentence(said)}. It was "
            f"reached but refused the request{doctor}."
        )
    text = str(exc)
    if isinstance(exc, MissingExtraError) or any(
        words in text for words in ("needs an API key", "not understood", "unknown provider")
    ):
        return _one_line(text)
    if "timed out" in text:
        return _one_line(f"{model}{at} did not answer in time: {_sentence(text)}{doctor}.")
    return _one_line(
        f"cannot reach {model}{at}: {_root_cause(exc)}. Is the server running, and the URL "
        f"right{'' if url else ' (OPENAI_BASE_URL for an OpenAI-compatible server)'}?"
        + (f" `obsmem doctor --model {model}` checks what it accepts." if doctor else "")
    )


def _sentence(text: str) -> str:
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
        text = _sentence(str(link))
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


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal).

    While a turn waits on a memory-model call, it says on what: feed it the caller's activity
    (:meth:`activity`, a ``ModelCaller`` activity listener) and run it :meth:`ticking`. On a
    terminal the line then redraws every ``TICK`` seconds with the time spent waiting and the
    reason (``Observer call to m: retry 2 in 2.0 s after HTTP 500: <the server's message>``).
    As plain lines, it writes one whenever the reason becomes a retry, and one when a wait has
    lasted ``QUIET_WAIT`` seconds with nothing else written.
    """

    TICK = 0.2
    """Seconds between redraws on a terminal."""
    QUIET_WAIT = 10.0
    """Seconds of waiting on one reason before a plain line says so."""
    SPINNER = "|/-\\"

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.started = time.monotonic()
        self._last = -1
        self._done = 0
        self._total = 0
        self._frame = 0
        self._waits: dict[int, _Wait] = {}
        """Calls in flight by ``call_id``."""
        self.last_retry: str | None = None
        """The last retry's reason (the error it retried), for a final report."""

    def __call__(self, done: int, total: int) -> None:
        self._done, self._total = done, total
        if self.tty:
            self._draw()
            if done == total:
                self.stream.write("\n")
        else:
            step = max(1, total // 10)
            if done == total or done // step != self._last:
                self.stream.write(self._bar() + "\n")
                self._last = done // step
        self.stream.flush()

    def activity(self, event: CallActivity) -> None:
        """Be told what a memory-model call does (``ModelCaller.add_activity_listener``)."""
        now = time.monotonic()
        if event.kind == "end":
            self._waits.pop(event.call_id, None)
        else:
            reason = event.describe()
            wait = self._waits.get(event.call_id)
            since = wait.since if wait is not None else now
            self._waits[event.call_id] = _Wait(reason, since, changed=now)
            if event.kind == "retry":
                self.last_retry = reason
                if not self.tty:
                    self._line(now, self._waits[event.call_id])
        if self.tty:
            self._draw()
            self.stream.flush()

    def tick(self) -> None:
        """Redraw (a terminal) or say that a wait goes on (plain lines)."""
        now = time.monotonic()
        wait = self._current()
        if self.tty:
            self._frame += 1
            self._draw()
            self.stream.flush()
        elif wait is not None and not wait.reported and now - wait.changed >= self.QUIET_WAIT:
            self._line(now, wait)

    @contextlib.asynccontextmanager
    async def ticking(self) -> AsyncGenerator[Progress]:
        """``async with progress.ticking():`` redraws the line while the block runs, and leaves
        the terminal on a fresh line however the block ends."""

        async def tick_forever() -> None:
            while True:
                await asyncio.sleep(self.TICK if self.tty else 1.0)
                self.tick()

        task = asyncio.create_task(tick_forever())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if self.tty and (self._total == 0 or self._done < self._total):
                self.stream.write("\n")
                self.stream.flush()

    def _bar(self) -> str:
        width = 30
        filled = width * self._done // max(1, self._total)
        bar = "#" * filled + "." * (width - filled)
        elapsed = time.monotonic() - self.started
        total = str(self._total) if self._total else "?"
        return f"{self.label} [{bar}] {self._done}/{total} turns  {elapsed:5.1f}s"

    def _current(self) -> _Wait | None:
        """The wait to show: the one that changed last."""
        return max(self._waits.values(), key=lambda w: w.changed, default=None)

    def _draw(self) -> None:
        line = self._bar()
        wait = self._current()
        if wait is not None and self._done < max(1, self._total):
            spin = self.SPINNER[self._frame % len(self.SPINNER)]
            line += f"  {spin} waiting {time.monotonic() - wait.since:4.0f}s on {wait.reason}"
        columns = shutil.get_terminal_size(fallback=(100, 24)).columns
        if len(line) >= columns:
            line = line[: max(10, columns - 2)] + "…"
        self.stream.write("\r" + line + "\x1b[K")

    def _line(self, now: float, wait: _Wait) -> None:
        self.stream.write(f"{self._bar()}  waiting {now - wait.since:.0f}s on {wait.reason}\n")
        self.stream.flush()
        wait.reported = True


@dataclass(slots=True)
class _Wait:
    """A memory-model call in flight, as ``Progress`` shows it."""

    reason: str
    since: float
    """When the call started."""
    changed: float
    """When the reason last changed."""
    reported: bool = False
    """A plain line said this reason already."""


_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_dsn(db: str) -> bool:
    """Whether ``--db`` names a PostgreSQL database (a ``postgresql://`` or ``postgres://``
    DSN) rather than a SQLite file."""
    return db.strip().lower().startswith(_POSTGRES_SCHEMES)


def db_label(db: str) -> str:
    """``--db`` as it may be shown: a DSN without its password."""
    if not is_postgres_dsn(db) or "@" not in db:
        return db
    scheme, _, rest = db.partition("://")
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}@{host}" if user else f"{scheme}://{host}"


def open_store(db: str, *, read_only: bool = False) -> SQLStore:
    """The store ``--db`` names, checked before anything is written: a SQLite file (created
    when the path is new or the file empty) or a PostgreSQL DSN. CannotStart (one line: the
    problem and the fix) for a file or database that is not obsmem's, a file that is not SQLite,
    a bad DSN or an unreachable server; MissingExtraError without psycopg. ``read_only``
    (inspect): the store must already hold this version's schema, and it is never written."""
    if is_postgres_dsn(db):
        _check_postgres(db, read_only=read_only)
        from ..stores import PostgresStore

        return PostgresStore(db, read_only=read_only)
    if "://" in db:
        raise CannotStart(
            f"--db {db}: give a SQLite file path (obsmem.db) or a PostgreSQL DSN "
            "(postgresql://user@host/dbname)"
        )
    _check_sqlite(db, read_only=read_only)
    from ..stores import SQLiteStore

    return SQLiteStore(db, read_only=read_only)


_SQLITE_HEADER = b"SQLite format 3\x00"
_OBSMEM_TABLES = frozenset({"threads", "messages", "om_records"})
_ANOTHER_PATH = "give another path with --db (a new file is made there)"


def _check_sqlite(path: str, *, read_only: bool) -> None:
    if path == ":memory:":
        return
    file = Path(path)
    if file.is_dir():
        raise CannotStart(f"--db {path} is a folder: give the path of a SQLite file")
    if not file.exists():
        if read_only:
            raise CannotStart(
                f"No obsmem database at {path}. Pass --db PATH, or create one by using obsmem "
                "with Memory() in this directory (or run `obsmem demo`)."
            )
        return
    try:
        with file.open("rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise CannotStart(f"cannot read --db {path}: {exc.strerror or exc}") from exc
    if not header:
        if read_only:
            raise CannotStart(
                f"{path}: not an obsmem database (the file is empty); pass --db with the path "
                "of one"
            )
        return
    if header != _SQLITE_HEADER:
        raise CannotStart(
            f"{path} is not a SQLite database (so not an obsmem one): {_ANOTHER_PATH}"
        )
    version, tables = _sqlite_schema(file)
    if not tables and version == 0:  # a SQLite file with nothing in it
        if read_only:
            raise CannotStart(
                f"{path}: not an obsmem database (it has no tables); pass --db with the path of one"
            )
        return
    if version == 0 or not set(tables) >= _OBSMEM_TABLES:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise CannotStart(
            f"{path} is a SQLite database but not an obsmem one (its tables: {shown or 'none'}); "
            f"obsmem will not add its tables to it: {_ANOTHER_PATH}"
        )
    _check_version(path, version, read_only=read_only)


def _sqlite_schema(file: Path) -> tuple[int, list[str]]:
    """``PRAGMA user_version`` and the table names of a SQLite file, read without changing it."""
    try:
        conn = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            rows = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise CannotStart(
            f"{file} cannot be read as a SQLite database ({exc}): {_ANOTHER_PATH}"
        ) from exc
    return version, [str(row[0]) for row in rows]


def _check_version(where: str, version: int, *, read_only: bool) -> None:
    from ..stores.schema import SCHEMA_VERSION

    if version > SCHEMA_VERSION:
        raise CannotStart(
            f"{where}: the obsmem schema there is version {version}, newer than this obsmem "
            f"understands ({SCHEMA_VERSION}): upgrade obsmem (pip install -U obsmem)"
        )
    if read_only and version < SCHEMA_VERSION:
        raise CannotStart(
            f"{where}: the obsmem schema there is version {version}, older than this obsmem's "
            f"({SCHEMA_VERSION}); any obsmem command that stores (obsmem chat, replay, demo) "
            "upgrades it"
        )


def _check_postgres(dsn: str, *, read_only: bool) -> None:
    """Connect once (autocommit, reads only) and look at what the database holds."""
    import importlib.util

    try:
        import psycopg

        if importlib.util.find_spec("psycopg_pool") is None:  # the store's pool
            raise ImportError("psycopg_pool")
    except ImportError as exc:
        raise MissingExtraError(
            "PostgreSQL storage (--db postgresql://...)", "postgres", package="psycopg"
        ) from exc
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise CannotStart(
            f"--db: not a valid PostgreSQL DSN ({_sentence(str(exc))}); write it as "
            "postgresql://user:password@host:5432/dbname"
        ) from exc
    where = (
        f"PostgreSQL database {info.get('dbname') or info.get('user') or '(default)'} on "
        f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}"
    )
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT to_regclass('obsmem_schema') IS NOT NULL, count(*) FROM pg_tables "
                "WHERE schemaname = current_schema()"
            ).fetchone()
            ours, count = (bool(row[0]), int(row[1])) if row else (False, 0)
            version, tables = 0, list[str]()
            if ours:
                found = conn.execute("SELECT max(version) FROM obsmem_schema").fetchone()
                version = int(found[0] or 0) if found else 0
            elif count:
                tables = [
                    str(r[0])
                    for r in conn.execute(
                        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                        "ORDER BY tablename LIMIT 6"
                    ).fetchall()
                ]
    except psycopg.Error as exc:
        raise CannotStart(
            f"cannot connect to {where}: {_first_line(exc)}. Is the server "
            "running, and the DSN right (host, port, database, user, password)?"
        ) from exc
    if tables:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise CannotStart(
            f"{where} has tables but no obsmem schema (its tables: {shown}); obsmem will not "
            "add its tables to it: give another database in --db (an empty one, or one obsmem "
            "made)"
        )
    if read_only and not ours:
        raise CannotStart(
            f"{where}: not an obsmem database (it has no obsmem schema); pass --db with the "
            "DSN of one"
        )
    _check_version(where, version, read_only=read_only and ours)


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
        return 1, _one_line(f"store error: {type(exc).__name__}: {_sentence(str(exc))}")
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


def _first_line(exc: BaseException) -> str:
    return _sentence((str(exc).strip().splitlines() or [type(exc).__name__])[0])
