"""What the proxy keeps while it serves a request: what it knows of a thread's stored
messages (:class:`Seen`), what lining a request up found (:class:`LinedUp`), and one request's
memory work from the memory step to the stored answer (:class:`Step`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..integrations.door import Door
from ..memory import MemoryContext, ThreadRef
from .history import StoredEntry

__all__ = ["Again", "LinedUp", "Seen", "Step"]


@dataclass(slots=True)
class Seen:
    """What this process knows of a thread's stored messages: every one, by seq."""

    count: int = 0
    entries: list[StoredEntry] = field(default_factory=list[StoredEntry])


@dataclass(frozen=True, slots=True)
class LinedUp:
    """What lining a request up with its thread found, and the memory step's context."""

    context: MemoryContext
    after: str | None
    """The id of the last of the client's messages as stored (the answer follows it)."""
    taken: set[str]
    """Every id the thread has taken back."""
    tail: tuple[StoredEntry, ...]
    """The stored messages after the point the client's history stops matching."""
    again: bool
    """The client's history stops before ``tail`` with nothing new (a retry, a regenerate)."""
    door: Door
    """The step's door: the actor, and the current step's first seq (it stays raw in a
    compaction)."""
    meta: dict[str, Any]
    """The thread's metadata as read before."""


@dataclass(slots=True)
class Step:
    """One request's memory work, from the memory step to the stored answer."""

    door: Door
    """The step's door: it stores the answer and compacts after a refusal as too long."""
    after: str | None
    """The id of the stored message the answer follows."""
    taken_back: frozenset[str]
    asked_again: tuple[StoredEntry, ...] = ()
    """The client sent a history that stops before these stored messages (it asks again, or
    retries): they are taken back when the new answer differs, and kept when it is the same."""
    status: str = "on"

    @property
    def ref(self) -> ThreadRef:
        return self.door.ref


Again = Callable[["Step", httpx.Response], Awaitable[tuple[bytes, "Step"] | None]]
"""After an upstream refusal: the request to send once more, and its step (None: do not)."""
