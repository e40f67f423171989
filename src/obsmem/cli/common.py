"""Options and helpers shared by the commands.

What ends a command and how it is told is in :mod:`obsmem.cli.errors`; opening ``--db`` is
:mod:`obsmem.cli.stores`. Their names are handed on here, where every command finds them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import sys
import time
import warnings
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ..errors import ObsmemError
from ..llm import CallActivity
from ..models import HOW_TO_PROVIDE_A_MODEL, model_from_environment, resolve_model
from ..models.environment import LOCAL_PLACEHOLDER, environment_choice, resolve_auto
from .errors import CannotStart, check_model, describe_error, describe_failure
from .stores import db_label, is_postgres_dsn, open_store

__all__ = [
    "CannotStart",
    "Progress",
    "check_model",
    "check_output_path",
    "db_label",
    "describe_error",
    "describe_failure",
    "is_postgres_dsn",
    "listen",
    "memory_options",
    "open_store",
    "pick_model",
]


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


def memory_options(args: argparse.Namespace, model: str | None) -> dict[str, Any]:
    """The observational-memory options the flags of ``add_memory_options`` give; ``model``
    observes and reflects (None: the caller chooses it later)."""
    buffer: float | bool = (
        False
        if str(args.buffer_tokens).lower() in ("off", "false", "0")
        else float(args.buffer_tokens)
    )
    named = {"model": model} if model is not None else {}
    return {
        "observation": {**named, "messageTokens": args.message_tokens, "bufferTokens": buffer},
        "reflection": {**named, "observationTokens": args.observation_tokens},
    }


def listen(host: str, port: int, *, backlog: int = 2048) -> tuple[socket.socket, str]:
    """A TCP socket listening on ``host:port`` for a server command, and where clients reach it,
    ``http://HOST:PORT`` (``host`` as given, the bound address for ``""``, an IPv6 address
    in brackets, and the port the socket has: ``0`` picks a free one); or CannotStart naming
    the fix: a port out of range, an address in use or not this machine's. ``IPPROTO_TCP``
    is named so asyncio sets ``TCP_NODELAY`` on its connections (without it each response
    waits ~40 ms on the client's delayed ACK)."""
    if not 0 <= port <= 65_535:
        raise CannotStart(f"--port {port}: give a port from 1 to 65535 (0 picks a free one)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(backlog)  # connections wait in the backlog until the server takes them
    except OSError as exc:
        sock.close()
        raise CannotStart(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; give another --port (0 "
            "picks a free one) or --host"
        ) from exc
    shown, port = host or sock.getsockname()[0], sock.getsockname()[1]  # "" is every address
    return sock, f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


def pick_model(args: argparse.Namespace, option: str = "model") -> str | None:
    """The model from ``--model`` (or the ``option`` given) or the environment; None (after
    saying how to configure one) when there is none."""
    given = getattr(args, option, None)
    model = given or model_from_environment()
    if model is None:
        print(f"obsmem: {HOW_TO_PROVIDE_A_MODEL}", file=sys.stderr)
        return None
    if not given:
        model = served_in_place_of_auto("obsmem") or model
    say_deprecation(model)
    return model


def say_deprecation(model: str) -> None:
    """A model its provider retires, said once, in one line. pydantic-ai warns on each request
    to one, and shows it again whenever the warning filters change, which pydantic does at each
    agent it builds (a chat turn builds one); once said here, that warning is turned off."""
    try:
        deprecation = resolve_model(model).profile.get("deprecation")
    except ObsmemError:  # no key, no SDK: the model check that follows says what to do
        return
    if deprecation is None:
        return
    from pydantic_ai.exceptions import DeprecatedModelWarning

    when = f", retiring on {deprecation.retirement_date}" if deprecation.retirement_date else ""
    instead = f"; it recommends {deprecation.replacement}" if deprecation.replacement else ""
    print(
        f"obsmem: {model} is deprecated by its provider{when}{instead} ({deprecation.source_url})",
        file=sys.stderr,
    )
    warnings.filterwarnings("ignore", category=DeprecatedModelWarning)


def served_in_place_of_auto(command: str) -> str | None:
    """With only ``OPENAI_BASE_URL`` (``"auto"`` would name the placeholder ``openai/local``,
    which vLLM and Ollama refuse), the model that server serves, said on stderr; None
    otherwise. One request to the server, before a command starts."""
    if resolve_auto(None).model != LOCAL_PLACEHOLDER:
        return None
    served = environment_choice(ask_server=True).model
    if served == LOCAL_PLACEHOLDER:
        return None
    print(
        f"{command}: using {served}, the model the server at OPENAI_BASE_URL serves "
        "(OBSMEM_MODEL chooses another)",
        file=sys.stderr,
    )
    return served


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
