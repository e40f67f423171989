"""What an engine does after each cycle of the Observer or Reflector: the back-off per log, the
failure state stored with the log (and, in resource scope, with a thread that failed alone),
a WARNING once per cause and once when it heals, and the ``failure_policy="raise"`` check.

The only in-process state is :class:`LogState` per log (bounded; never the source of truth:
the stored failure state is shared by every worker) and which causes were logged.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from . import cycles, planner, views
from .cycles import Deps, Failure, Outcome, SyncObservation
from .cycles.common import main_window
from .errors import ConflictError, MemoryUnavailableError, ObsmemError
from .failures import FailureState, Role, cause_of, failures_in, next_failure
from .meta_keys import META_FAILURE
from .planner import Backoff
from .snapshot import Snapshot, Subject
from .stores import LoadRequest, ResourcePatch, ThreadPatch

__all__ = ["LogState", "Outcomes"]

log = logging.getLogger("obsmem")


@dataclass(frozen=True, slots=True, kw_only=True)
class LogState:
    """What this engine remembers about one log between steps: failures and suppression."""

    observer: Backoff | None = None
    reflector: Backoff | None = None
    suppressed_reflection_at: int | None = None
    observer_failure: FailureState | None = None
    """The failure state this engine last stored for the role (newer than a stale snapshot's)."""
    reflector_failure: FailureState | None = None

    @property
    def empty(self) -> bool:
        return (
            self.observer is None
            and self.reflector is None
            and self.suppressed_reflection_at is None
            and self.observer_failure is None
            and self.reflector_failure is None
        )


class Outcomes:
    """One engine's memory of how its logs fare: :class:`LogState` per log (at most
    ``remember``, the least recently used go first) and the causes already logged."""

    def __init__(self, deps: Deps, *, remember: int) -> None:
        self._deps = deps
        self.remember = remember
        self.logs: OrderedDict[str, LogState] = OrderedDict()
        self.warned: OrderedDict[tuple[str, str], str] = OrderedDict()
        """(log key or "*", role) -> the cause last logged, so each cause is logged once."""

    # -- back-off --------------------------------------------------------------------------------

    def state(self, key: str) -> LogState:
        return self.logs.get(key) or LogState()

    def update(self, key: str, **changes: Any) -> None:
        state = replace(self.state(key), **changes)
        if state.empty:
            self.logs.pop(key, None)
            return
        self.logs[key] = state
        self.logs.move_to_end(key)
        while len(self.logs) > self.remember:
            self.logs.popitem(last=False)

    def forget(self, key: str) -> None:
        self.logs.pop(key, None)

    def backoff(self, previous: Backoff | None, error: str) -> Backoff:
        return planner.backoff_after(
            previous, now=self._deps.steady(), error=error, spread=random.random()
        )

    def retry_time(self, backoff: Backoff | None) -> datetime | None:
        """When ``backoff`` ends, on the wall clock (for the stored failure state and people)."""
        if backoff is None:
            return None
        return self._deps.now() + timedelta(seconds=backoff.retry_at - self._deps.steady())

    def model_label(self, role: Role) -> str:
        return views.model_label(self._deps.memory_model(role))

    # -- after a cycle ---------------------------------------------------------------------------

    @staticmethod
    def ended(outcome: Outcome | Failure | None) -> tuple[str | None, bool]:
        """A cycle's error (None when it succeeded) and whether it is the store's."""
        if isinstance(outcome, Failure):
            return outcome.error, outcome.store
        return None, False

    async def observer(self, snapshot: Snapshot, error: str | None, store: bool = False) -> None:
        await self.outcome("observer", snapshot, error, store=store)

    async def reflector(self, snapshot: Snapshot, error: str | None, store: bool = False) -> None:
        await self.outcome("reflector", snapshot, error, store=store)

    async def outcome(
        self, role: Role, snapshot: Snapshot, error: str | None, *, store: bool = False
    ) -> None:
        """After a cycle of ``role``: the back-off, and the failure state stored with the log
        (with a WARNING once per cause, and once when it heals). A failure of the store
        (``store``) is the store's, not the role's: a WARNING that says so, no back-off and no
        failure state of the role (the store could not take it anyway)."""
        key = snapshot.subject.key
        if store and error is not None:
            self.warn_once(
                (key, "store"),
                error,
                f"obsmem: memory for {key}: the store failed during {role} work, so its "
                f"result was not saved (the {role.capitalize()} is not at fault): "
                f"{error.rstrip('. ')}. Fix: check the store named above; memory work resumes "
                "by itself once it answers",
            )
            return
        if self.warned.pop((key, "store"), None) is not None:
            log.warning("obsmem: memory for %s works again: the store answered", key)
        state = self.state(key)
        previous: Backoff | None = getattr(state, role)
        remembered: FailureState | None = getattr(state, f"{role}_failure")
        stored = self._stored_failures(snapshot).get(role)
        if error is None:
            if previous is None and remembered is None and stored is None:
                return
            self.update(key, **{role: None, f"{role}_failure": None})
            if self.warned.pop((key, role), None) is not None or stored is not None:
                log.warning(
                    "obsmem: memory for %s works again: the %s answered (%s)",
                    key,
                    role.capitalize(),
                    self.model_label(role),
                )
            if stored is not None:
                await self._write_failure(snapshot.subject, role, None)
            return
        backoff = self.backoff(previous, error)
        newest = max(
            (s for s in (stored, remembered) if s is not None),
            key=lambda s: s.last_at,
            default=None,
        )
        failure = next_failure(
            newest,
            role=role,
            error=error,
            model=self.model_label(role),
            now=self._deps.now(),
            next_retry_at=self.retry_time(backoff),
            left_out=self._left_out(snapshot),
        )
        self.update(key, **{role: backoff, f"{role}_failure": failure})
        self.warn_once((key, role), error, f"obsmem: memory for {key}: {failure.summary()}")
        await self._write_failure(snapshot.subject, role, failure)

    async def threads(self, result: SyncObservation) -> None:
        """Resource scope: the failure state of each thread that failed (or healed) alone,
        stored on the thread itself, so the log's other threads carry on."""
        snapshot = result.snapshot
        if snapshot.subject.scope != "resource":
            return
        for thread_id in set(result.advanced):
            where = (f"thread:{thread_id}", "observer")
            if self.warned.pop(where, None) is not None:
                log.warning(
                    "obsmem: thread %s of %s is observed again", thread_id, snapshot.subject.key
                )
            await self._write_thread_failure(snapshot, thread_id, None)
        for thread_id, error in result.thread_errors.items():
            state = snapshot.thread(thread_id)
            stored = failures_in(state.thread.metadata if state else None).get("observer")
            backoff = self._deps.thread_backoff.get(thread_id)
            failure = next_failure(
                stored,
                role="observer",
                error=error,
                model=self.model_label("observer"),
                now=self._deps.now(),
                next_retry_at=self.retry_time(backoff),
                left_out=0,
                thread_id=thread_id,
            )
            self.warn_once(
                (f"thread:{thread_id}", "observer"),
                error,
                f"obsmem: memory for {snapshot.subject.key}: {failure.summary()}",
            )
            await self._write_thread_failure(snapshot, thread_id, failure)

    async def _write_thread_failure(
        self, snapshot: Snapshot, thread_id: str, failure: FailureState | None
    ) -> None:
        state = snapshot.thread(thread_id)
        if failure is None and (state is None or not failures_in(state.thread.metadata)):
            return
        value = failure.to_json() if failure is not None else None
        patch = ThreadPatch(thread_id=thread_id, set=(((META_FAILURE, "observer"), value),))
        request = LoadRequest(subject=snapshot.subject, patches=[patch])
        try:
            await cycles.load(self._deps, cycles.expecting(self._deps, request))
        except ConflictError:
            return  # the thread was deleted: its failure state went with it
        except ObsmemError as exc:
            log.warning("obsmem: could not store the failure state of %s: %s", thread_id, exc)

    def warn_once(self, where: tuple[str, str], error: str, message: str) -> None:
        cause = cause_of(error)
        if self.warned.get(where) == cause:
            return
        self.warned[where] = cause
        self.warned.move_to_end(where)
        while len(self.warned) > self.remember:
            self.warned.popitem(last=False)
        log.warning("%s", message)

    async def _write_failure(
        self, subject: Subject, role: Role, failure: FailureState | None
    ) -> None:
        """Store (or, with None, clear) the log's failure state for ``role``: one small write,
        only when the state changes. A store that cannot take it is logged, never raised."""
        value = failure.to_json() if failure is not None else None
        path = ((META_FAILURE, role), value)
        request = (
            LoadRequest(
                subject=subject,
                resource_patch=ResourcePatch(resource_id=subject.resource_id, set=(path,)),
            )
            if subject.scope == "resource"
            else LoadRequest(
                subject=subject, patches=[ThreadPatch(thread_id=subject.thread_id, set=(path,))]
            )
        )
        try:
            await cycles.load(self._deps, cycles.expecting(self._deps, request))
        except ConflictError:
            return  # the thread was deleted: its failure state went with it
        except ObsmemError as exc:
            log.warning("obsmem: could not store the failure state of %s: %s", subject.key, exc)

    # -- reading the failure state ---------------------------------------------------------------

    def _stored_failures(self, snapshot: Snapshot) -> dict[Role, FailureState]:
        meta = (
            snapshot.resource_metadata
            if snapshot.subject.scope == "resource"
            else snapshot.thread_metadata
        )
        return failures_in(meta)

    def failures(self, snapshot: Snapshot) -> list[FailureState]:
        """The log's failure states in ``snapshot`` (and, in resource scope, its threads')."""
        found = list(self._stored_failures(snapshot).values())
        if snapshot.subject.scope == "resource":
            for thread in snapshot.threads:
                found += [
                    f
                    for f in failures_in(thread.thread.metadata).values()
                    if f.thread_id is not None
                ]
        return found

    def _left_out(self, snapshot: Snapshot) -> int:
        return views.left_out_count(snapshot, self._deps.options, main_window(self._deps, snapshot))

    def raise_if_failing(self, snapshot: Snapshot) -> None:
        """``failure_policy="raise"``: a turn whose log is failing raises, naming the cause."""
        state = self.state(snapshot.subject.key)
        # A role whose back-off has passed was just tried again (maybe in the background):
        # only one still waiting out its back-off fails the turn. This engine's own back-off
        # is timed on the monotonic clock; another worker's only by the retry time it stored.
        if state.observer_failure is not None or state.reflector_failure is not None:
            steady = self._deps.steady()
            failing = [
                failure
                for failure, backoff in (
                    (state.observer_failure, state.observer),
                    (state.reflector_failure, state.reflector),
                )
                if failure is not None and not planner.may_retry(backoff, steady)
            ]
        else:
            now = self._deps.now()
            failing = [
                f
                for f in self.failures(snapshot)
                if f.next_retry_at is None or not planner.retry_time_passed(f.next_retry_at, now)
            ]
        if failing:
            summary = " ".join(f.summary() for f in failing)
            raise MemoryUnavailableError(
                f"observational memory is failing for {snapshot.subject.key}: {summary} "
                "(the turn's input was stored; failure_policy='warn' lets turns go on)"
            )
