"""Events of worker-run cycles, relayed to the serving processes by LISTEN/NOTIFY.

A worker publishes each event of its engine on the channel ``obsmem_events`` (one connection,
in order); every serving process in queue mode listens on it (one connection, opened at its
first turn) and emits what it hears on its own event bus, so ``memory.subscribe`` sees the
buffering, catch-up and reflection cycles that workers ran. PostgreSQL caps a notification at
8,000 bytes: an event past ``MAX_PAYLOAD`` goes without its long fields (the observations and
extracted values; ``truncated`` says so), which the store holds anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from dataclasses import fields
from datetime import datetime
from typing import Any, get_args

from ..events import Event, EventBus

__all__ = ["CHANNEL", "EventListener", "EventPublisher", "event_from_dict", "payload"]

log = logging.getLogger("obsmem")

CHANNEL = "obsmem_events"
MAX_PAYLOAD = 7_900
"""Bytes of JSON a notification may carry (PostgreSQL refuses 8,000 and more)."""

_TYPES: dict[str, type[Any]] = {cls.type: cls for cls in get_args(Event)}
"""Each event class by its ``type`` (every member of the ``Event`` union)."""


_LONG_FIELDS = ("observations", "extracted_values", "extraction_failures", "config")


def payload(event: Event) -> str | None:
    """The event as a notification's JSON (long fields left out past ``MAX_PAYLOAD``); None
    when even that is too long."""
    data = {**event.to_dict(), "origin": os.getpid()}
    text = json.dumps(data, default=str)
    if len(text.encode()) <= MAX_PAYLOAD:
        return text
    for name in _LONG_FIELDS:  # each has a default, so the event can be rebuilt without it
        data.pop(name, None)
    data["truncated"] = True
    text = json.dumps(data, default=str)
    return text if len(text.encode()) <= MAX_PAYLOAD else None


def event_from_dict(data: dict[str, Any]) -> Event | None:
    """The event ``data`` describes (None for a type this release does not know)."""
    cls = _TYPES.get(str(data.get("type")))
    if cls is None:
        return None
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        kind = str(f.type)
        if isinstance(value, str) and kind.startswith("datetime"):
            value = datetime.fromisoformat(value)
        elif isinstance(value, list) and kind.startswith("tuple"):
            value = tuple(value)
        values[f.name] = value
    try:
        return cls(**values)
    except TypeError:  # a field this release requires is missing: a neighbouring release's
        return None


class EventPublisher:
    """A worker's side: each event of its engine, notified in order on one connection."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._queue: asyncio.Queue[str] = asyncio.Queue(maxsize=10_000)
        self._task: asyncio.Task[None] | None = None

    def __call__(self, event: Event) -> None:
        text = payload(event)
        if text is None:
            return
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._send())
        with contextlib.suppress(asyncio.QueueFull):  # a stuck database: events are dropped
            self._queue.put_nowait(text)

    async def _send(self) -> None:
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as c:
                    while True:
                        text = await self._queue.get()
                        try:
                            await c.execute("SELECT pg_notify(%s, %s)", (CHANNEL, text))
                        finally:
                            self._queue.task_done()
            except psycopg.Error as exc:
                log.info("obsmem: events could not be relayed (%s); trying again", exc)
                await asyncio.sleep(1.0)

    async def aclose(self) -> None:
        """Send what is queued (within a few seconds), then stop."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), 5.0)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class EventListener:
    """A serving process's side: what workers notify, emitted on its own bus."""

    def __init__(self, dsn: str, bus: EventBus) -> None:
        self.dsn = dsn
        self.bus = bus
        self.listening = asyncio.Event()
        """Set once the LISTEN is in place (tests wait on it)."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self) -> None:
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as c:
                    await c.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    async for note in c.notifies():
                        self._emit(note.payload)
            except psycopg.Error as exc:
                self.listening.clear()
                log.info("obsmem: workers' events not heard (%s); listening again", exc)
                await asyncio.sleep(1.0)

    def _emit(self, text: str) -> None:
        try:
            data = json.loads(text)
        except ValueError:
            return
        if not isinstance(data, dict) or data.get("origin") == os.getpid():
            return
        event = event_from_dict(data)
        if event is not None:
            self.bus.emit(event)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
