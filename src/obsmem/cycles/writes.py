"""A cycle's writes: the commit loop (a change checked against the version it read, tried again
after a lost race) and the small loads, with the cycle ledger's rows riding on them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..errors import ConflictError, ObsmemError, StoreError
from ..records import CycleRecord, MessageRange, ObservationGroup, OMRecord
from ..snapshot import Snapshot, Subject
from ..stores import (
    Change,
    Commit,
    CommitResult,
    LoadRequest,
    ResourcePatch,
    StartGeneration,
    ThreadPatch,
)
from .common import Deps, new_cycle_id

log = logging.getLogger("obsmem")


COMMIT_ATTEMPTS = 20


@dataclass(frozen=True, slots=True, kw_only=True)
class Write:
    """What one cycle commits: a change of the head and what comes with it."""

    change: Change
    groups: Sequence[ObservationGroup] = ()
    threads: Sequence[ThreadPatch] = ()
    resource: ResourcePatch | None = None
    ranges: tuple[MessageRange, ...] = ()
    """The messages the cycle covered, for its ledger row (when they depend on the head)."""


async def commit(
    deps: Deps,
    subject: Subject,
    head: OMRecord,
    decide: Callable[[OMRecord], Write | None],
    *,
    seen: Snapshot,
    cycle_id: str | None = None,
    ranges: Sequence[MessageRange] = (),
) -> CommitResult | None:
    """Commit ``decide(head)`` against the head the cycle read, and read the snapshot after it.

    A lost race carries the current head; the cycle decides again from it (``decide`` returns
    None when its work became redundant, which drops it). None when dropped, when the memory
    was cleared meanwhile, or when a thread of ``seen`` (the snapshot the cycle decided from)
    was deleted meanwhile: the commit checks their incarnations, so nothing comes back. The
    ledger row of cycle ``cycle_id`` (covering ``ranges``, or the write's own) goes with the
    commit; a dropped cycle's row is written on its own.
    """
    for _ in range(COMMIT_ATTEMPTS):
        write = decide(head)
        if write is None:
            if cycle_id is not None:
                await _record_redundant(deps, subject, cycle_id, ranges)
            return None
        rows = deps.ledger.take(subject.key)
        row = (
            None
            if cycle_id is None
            else deps.ledger.row(
                cycle_id,
                outcome="committed",
                ranges=write.ranges or ranges,
                generation=head.generation
                + (1 if isinstance(write.change, StartGeneration) else 0),
            )
        )
        if row is not None:
            rows.append(row)
        try:
            result = await deps.store.commit(
                Commit(
                    key=subject.key,
                    record_id=head.id,
                    expected_version=head.version,
                    change=write.change,
                    groups=write.groups,
                    threads=write.threads,
                    resource=write.resource,
                    reload=subject,
                    held=deps.cached.messages(subject),
                    resource_metadata=deps.reads_resource,
                    cycles=rows,
                    keep_cycles=deps.ledger.keep,
                    incarnations=tuple((s.id, s.thread.incarnation) for s in seen.threads),
                    keep_detail=deps.ledger.keep_detail,
                )
            )
        except ConflictError as exc:
            _queue_again(deps, rows, row)
            if not isinstance(exc.current, OMRecord):
                return None  # the memory was cleared, or a thread deleted, meanwhile
            head = exc.current
            continue
        except BaseException:
            _queue_again(deps, rows, row)
            raise
        deps.heads.committed(result.record)
        if result.snapshot is not None:
            deps.cached.remember(result.snapshot)
        return result
    raise StoreError(f"memory work on {subject.key} kept losing races; giving up for this step")


async def commit_activation(
    deps: Deps,
    snapshot: Snapshot,
    decide: Callable[[OMRecord], Write | None],
    *,
    id_prefix: str,
    operation: str,
    thread_ids: Sequence[str],
) -> CommitResult | None:
    """Commit an activation (buffered work swapped into the log) as a cycle of its own: its
    ledger row, naming ``operation`` and the threads it touches, rides on the commit."""
    cycle_id = new_cycle_id(id_prefix)
    deps.ledger.start(
        cycle_id,
        subject=snapshot.subject,
        kind="activation",
        operation=operation,
        now=deps.now(),
        thread_ids=thread_ids,
    )
    try:
        return await commit(
            deps, snapshot.subject, snapshot.record, decide, seen=snapshot, cycle_id=cycle_id
        )
    finally:
        deps.ledger.close(cycle_id)


def _queue_again(deps: Deps, rows: Sequence[CycleRecord], own: CycleRecord | None) -> None:
    """Rows taken for a write that did not happen wait for the next one (not the cycle's own:
    it is built again)."""
    for waiting in rows:
        if waiting is not own:
            deps.ledger.queue(waiting)


async def _record_redundant(
    deps: Deps, subject: Subject, cycle_id: str, ranges: Sequence[MessageRange]
) -> None:
    """A cycle whose work another worker did first: its row, in a small write of its own."""
    row = deps.ledger.row(cycle_id, outcome="redundant", ranges=ranges)
    if row is None:
        return
    deps.ledger.queue(row)
    await flush_ledger(deps, subject)


async def flush_ledger(deps: Deps, subject: Subject) -> None:
    """Write the rows waiting for ``subject``'s key now (a small write; a store that cannot take
    it is logged, and the rows wait for the next write)."""
    rows = deps.ledger.take(subject.key)
    if not rows:
        return
    try:
        await load(deps, expecting(deps, LoadRequest(subject=subject, cycles=rows)))
    except ConflictError:
        pass  # the thread was deleted: its cycles go with it
    except ObsmemError as exc:
        for row in rows:
            deps.ledger.queue(row)
        log.warning("obsmem: could not record cycles of %s: %s", subject.key, exc)


async def load(deps: Deps, request: LoadRequest) -> Snapshot:
    """A snapshot, reading only the messages not cached from before (and caching them after).
    A load that writes anyway carries the ledger rows waiting for its key."""
    rows: list[CycleRecord] = []
    if request.append or request.patches or request.resource_patch or request.cycles:
        rows = deps.ledger.take(request.subject.key)
    held = request.held or deps.cached.messages(request.subject)
    request = replace(
        request,
        held=held,
        held_incarnations=deps.cached.incarnations(held),
        resource_metadata=deps.reads_resource,
        cycles=(*request.cycles, *rows),
        keep_cycles=deps.ledger.keep,
        keep_detail=deps.ledger.keep_detail,
    )
    try:
        snapshot = await deps.store.load(request)
    except BaseException:
        for row in rows:
            deps.ledger.queue(row)
        raise
    return deps.cached.remember(snapshot)


async def reload(deps: Deps, subject: Subject) -> Snapshot:
    """A fresh snapshot (when a dropped commit brought none); a ConflictError without a
    current head when the thread was deleted meanwhile."""
    snapshot = await load(deps, expecting(deps, LoadRequest(subject=subject)))
    deps.heads.read(snapshot.record)
    return snapshot


async def current(deps: Deps, snapshot: Snapshot) -> Snapshot | None:
    """``snapshot``, or a fresh one when this engine has committed a newer head of its log
    since it was read (:class:`~.common.KnownHeads`): background work starts from it, so it
    never does again what a cycle that ended meanwhile did. None when the thread was deleted
    meanwhile: there is nothing left to do."""
    if not deps.heads.behind(snapshot):
        return snapshot
    try:
        return await reload(deps, snapshot.subject)
    except ConflictError as exc:
        if exc.current is not None:
            raise
        return None


def expecting(deps: Deps, request: LoadRequest) -> LoadRequest:
    """``request`` for work begun on its thread: it names the thread's incarnation as this
    engine last read it, so it creates and stores nothing once the thread was deleted."""
    incarnation = deps.cached.incarnation(request.subject.thread_id)
    return request if incarnation is None else replace(request, incarnation=incarnation)
