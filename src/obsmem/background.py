"""An engine's background work: asyncio tasks named by kind and log (``obs:<key>``,
``catch-up:<key>``, ``refl:<key>``; one of each at a time), and what they run: buffering
chunks while the planner says another is due, a catch-up (a few at a time per engine), and a
background reflection. Each reports its outcome (:class:`~obsmem.outcomes.Outcomes`); a task
ends after its cycle and is forgotten when done.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

from . import cycles, planner
from .cycles import Deps, Failure, Outcome
from .cycles.common import main_window
from .cycles.writes import current, reload
from .errors import StoreError
from .outcomes import Outcomes
from .snapshot import Snapshot

__all__ = ["Background", "abandoned", "describe_work"]

log = logging.getLogger("obsmem")


class Background:
    """The engine's background tasks by name, and the loops they run."""

    def __init__(
        self, deps: Deps, outcomes: Outcomes, *, catch_up_concurrency: int, queued: bool = False
    ) -> None:
        self._deps = deps
        self.queued = queued
        """``background="queue"``: the work is a job the turn's load queued (a worker runs it),
        so nothing is spawned here."""
        self._outcomes = outcomes
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.closed = False
        """Set when the engine closes: no task starts after it, and a buffering loop stops."""
        self._catch_up_slots = asyncio.Semaphore(catch_up_concurrency)

    def running(self, name: str) -> bool:
        task = self.tasks.get(name)
        return task is not None and not task.done()

    def spawn(self, name: str, work: Coroutine[Any, Any, None]) -> None:
        if self.running(name) or self.closed or self.queued:
            work.close()
            return
        task = asyncio.get_running_loop().create_task(work, name=f"obsmem {name}")
        self.tasks[name] = task

        def done(t: asyncio.Task[None]) -> None:
            if self.tasks.get(name) is t:
                del self.tasks[name]
            error = None if t.cancelled() else t.exception()
            if isinstance(error, StoreError):  # the store's failure, not a bug: no traceback
                log.warning(
                    "obsmem: background memory work %s stopped: the store failed: %s. Fix: "
                    "check the store; the work starts again at a later turn once it answers",
                    name,
                    error,
                )
            elif error is not None:
                log.error("obsmem background task %s failed", name, exc_info=error)

        task.add_done_callback(done)

    async def buffer_loop(self, snapshot: Snapshot, *, idle: bool = False) -> None:
        """Buffer chunks while the planner says another is due, starting from ``snapshot`` (or
        a fresh one when it is older than a commit of this engine: a cycle that ended while
        the turn that started this one was loading)."""
        deps = self._deps
        fresh = await current(deps, snapshot)
        if fresh is None:
            return
        snapshot = fresh
        while not self.closed:
            batch = planner.chunk_slice(
                deps.options,
                main_window(deps, snapshot),
                observation_tokens=snapshot.record.observation_tokens,
                idle=idle,
            )
            if batch is None:
                return
            outcome = await cycles.buffer_chunk(deps, snapshot, batch)
            after = outcome.snapshot if isinstance(outcome, Outcome) else None
            await self._outcomes.observer(after or snapshot, *Outcomes.ended(outcome))
            if isinstance(outcome, Failure) or outcome.snapshot is None:
                return
            snapshot = outcome.snapshot
            idle = False
            if not planner.buffering_due(
                deps.options,
                main_window(deps, snapshot),
                observation_tokens=snapshot.record.observation_tokens,
            ):
                return

    async def catch_up(self, snapshot: Snapshot, step_from: dict[str, int]) -> None:
        """A background catch-up (see :func:`obsmem.cycles.catch_up`), at most
        ``CATCH_UP_CONCURRENCY`` at a time per engine so a fleet of old threads waking up at once
        does not flood the Observer."""
        async with self._catch_up_slots:
            snapshot = await reload(self._deps, snapshot.subject)
            result = await cycles.catch_up(self._deps, snapshot, step_from=step_from)
        await self._outcomes.observer(result.snapshot, result.error, store=result.store)
        await self._outcomes.threads(result)

    async def reflection_task(self, snapshot: Snapshot) -> None:
        """A background reflection of ``snapshot``'s log (read afresh when it is older than a
        commit of this engine, as :meth:`buffer_loop` does)."""
        fresh = await current(self._deps, snapshot)
        if fresh is None:
            return
        outcome = await cycles.buffer_reflection(self._deps, fresh)
        if outcome is not None:
            after = outcome.snapshot if isinstance(outcome, Outcome) else None
            await self._outcomes.reflector(after or fresh, *Outcomes.ended(outcome))


_KINDS = (
    ("catch-up", "catch-up", "catch-ups"),
    ("obs", "buffering cycle", "buffering cycles"),
    ("refl", "reflection", "reflections"),
)
"""Each kind of background task: its name's prefix, and what one and several are called."""


def abandoned(who: str, names: Sequence[str], *, next_step: str = "turn") -> str:
    """What ``who`` (``obsmem proxy``) says when it abandons the background work ``names``."""
    return (
        f"{who}: memory work abandoned ({describe_work(names)}); it resumes at the next start, "
        f"at each thread's next {next_step}"
    )


def describe_work(names: Sequence[str]) -> str:
    """Background work by its task names, counted by kind: ``1 catch-up, 2 buffering cycles``."""
    parts: list[str] = []
    for prefix, one, many in _KINDS:
        count = sum(1 for n in names if n.startswith(f"{prefix}:"))
        if count:
            parts.append(f"{count} {one if count == 1 else many}")
    return ", ".join(parts)
