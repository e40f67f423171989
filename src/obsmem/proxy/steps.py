"""What the proxy keeps while it serves: what it knows of each thread's stored messages
(:class:`Seen`, :class:`Threads`), and one request's memory work from the memory step to the
stored answer (:class:`Step`).

A request of a thread this process served before trusts its copy unread: the memory step's load
checks it (``LoadRequest.expect``) and stores nothing when another process changed the thread,
and the request reads the thread and lines up again. A plain turn is then 2 store calls
(``docs/inspector-and-proxy.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections import OrderedDict
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ..failures import failures_in
from ..integrations.door import Door
from ..memory import Memory, ThreadRef
from ..messages import Message
from ..meta_keys import META_FAILURE, META_RETRACTED, META_RETRACTED_THROUGH
from ..records import ThreadCopy
from .guard import off_loop
from .history import StoredEntry, stored_entries
from .upstream import one_line

__all__ = ["LINED_UP", "LINE_UP_ATTEMPTS", "MAX_CACHED_THREADS", "Seen", "Step", "Threads"]

MAX_CACHED_THREADS = 1024
"""Threads whose stored messages' fingerprints one proxy process keeps between requests."""
LINE_UP_ATTEMPTS = 5
"""Times a request lines up with its thread, each ending in a step whose load checks the copy
lined up with (or in an edit's take-back), before it goes on as it last read the thread."""
LINED_UP = (META_RETRACTED, META_RETRACTED_THROUGH, META_FAILURE)
"""The thread metadata a request lines up with (what is shown, the failure state)."""


@dataclass(slots=True)
class Seen:
    """What this process knows of a thread: every stored message (by seq), and the metadata it
    lines up with, as last read and followed since."""

    incarnation: str = ""
    count: int = 0
    entries: list[StoredEntry] = field(default_factory=list[StoredEntry])
    marks: dict[str, Any] = field(default_factory=lambda: dict.fromkeys(LINED_UP))
    """The values of the :data:`LINED_UP` keys, as read (None: absent)."""
    erased: bool = False
    """The thread id was erased (it has a tombstone, ``Memory.erased_at``): its client may
    still hold the erased conversation and resend it, and none of that is stored again."""
    told: bool = False
    """This process said that it did not store an erased conversation the client resent."""
    read_first: bool = False
    """The copy is not to be trusted unread: its check was refused (another writer is at work
    on the thread: so it stays while each read finds another write), this process took
    messages back, or what it stored did not follow on."""

    @property
    def retracted(self) -> Mapping[str, Any]:
        """The thread's taken-back ids (read only: the copy's own value)."""
        gone = self.marks[META_RETRACTED]
        return cast(dict[str, Any], gone) if isinstance(gone, dict) else {}

    @property
    def status(self) -> str:
        """The ``X-Obsmem-Memory`` value its failure state gives."""
        state = next(iter(failures_in({META_FAILURE: self.marks[META_FAILURE]}).values()), None)
        return one_line(f"failing; {state.role}: {state.error}") if state else "on"

    def as_copy(self) -> ThreadCopy:
        """The copy the memory step's load checks (incarnation "": no thread was found)."""
        count, marks = self.count, self.marks
        return ThreadCopy(incarnation=self.incarnation, message_count=count, metadata=marks)

    def shown(self) -> list[StoredEntry]:
        """The stored messages that are still shown."""
        through, gone = self.marks[META_RETRACTED_THROUGH], self.retracted
        through = through if isinstance(through, int) else 0
        return [e for e in self.entries if e.seq > through and not gone.get(e.id)]

    def follow(self, stored: Sequence[StoredEntry]) -> bool:
        """What this process just stored: added when it follows on. False on a gap, or another
        message at a seq it knows: another writer came between."""
        for entry in stored:
            if entry.seq == self.count + 1:
                self.entries.append(entry)
                self.count = entry.seq
            elif entry.seq > self.count or entry not in reversed(self.entries):
                return False
        return True


class Threads:
    """What this process knows of the threads it serves (the least recently used forgotten
    first), and a lock per thread in use, so one request of a thread at a time lines it up."""

    def __init__(self) -> None:
        self._seen: OrderedDict[str, Seen] = OrderedDict()
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        """Per thread in use: its lock and how many requests hold or wait for it."""

    @contextlib.asynccontextmanager
    async def lock(self, thread_id: str) -> AsyncGenerator[None]:
        lock, users = self._locks.setdefault(thread_id, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                self._locks.pop(thread_id, None)

    def unread(self, thread_id: str) -> Seen | None:
        """What this process knows of the thread, to trust without reading it; None: read it."""
        seen = self._seen.get(thread_id)
        if seen is None or seen.read_first:
            return None
        self._seen.move_to_end(thread_id)
        return seen

    def distrust(self, thread_id: str) -> None:
        """The next request of the thread reads it first (:attr:`Seen.read_first`)."""
        if (seen := self._seen.get(thread_id)) is not None:
            seen.read_first = True

    async def known(self, memory: Memory, ref: ThreadRef) -> Seen:
        """What this process knows of the thread, read again: its metadata, and the messages
        it has not seen (all of them when the thread was cleared or deleted and made again). A
        thread it knew nothing of (or made again): whether its id was erased too (one read
        more, on such a request only)."""
        thread_id = ref.thread
        seen = self._seen.pop(thread_id, None)
        thread = await memory.thread(thread_id)
        # Another writer since this process's last request: read first until one finds none.
        contended = seen is not None and not seen.as_copy().matches(thread)
        if seen is None or thread is None or seen.incarnation != thread.incarnation:
            erased = await memory.erased_at(ref) is not None
            seen = Seen(incarnation=thread.incarnation if thread else "", erased=erased)
        elif thread.message_count < seen.count:  # cleared and started again
            seen = Seen(incarnation=thread.incarnation, erased=seen.erased)
        seen.read_first = contended
        if thread is not None:
            if thread.message_count > seen.count:
                fresh = await memory.messages(thread_id, after_seq=seen.count)
                heavy = len(fresh) > 1_000
                seen.entries.extend(await off_loop(stored_entries, fresh, heavy=heavy))
                seen.count = max([seen.count, *(m.seq or 0 for m in fresh)])
            seen.marks = {key: copy.deepcopy(thread.metadata.get(key)) for key in LINED_UP}
        self._seen[thread_id] = seen
        while len(self._seen) > MAX_CACHED_THREADS:
            self._seen.popitem(last=False)
        return seen

    async def saw(self, thread_id: str, stored: Sequence[Message], incarnation: str = "") -> bool:
        """What this process just stored in the thread (of ``incarnation``, when the step says
        it): whether it followed on from what this process knew (:meth:`Seen.follow`); when it
        did not, the next request reads the thread first."""
        seen = self._seen.get(thread_id)
        if seen is None:
            return True
        entries = await off_loop(stored_entries, stored)
        if not seen.incarnation:  # the thread this process's step made
            seen.incarnation = incarnation
        if incarnation not in ("", seen.incarnation) or not seen.follow(entries):
            seen.read_first = True
            return False
        return True


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
