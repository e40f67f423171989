"""What a worker does with one job: load the log's snapshot, ask the planner what background work
is due, and run it here, awaited, before the job ends.

The job decides nothing: it names a log (and the thread's incarnation when it was queued). The
planner decides from the store, as a turn would, the work that leaves the turn in queue mode:
buffering (what a turn or a reply would start, idle buffering included), a catch-up of a log that
is behind, and a background reflection. Activation and synchronous observation stay in the turn.
A job for work already done finds nothing due; a job run twice (its worker died) commits
nothing twice, because every commit is checked against the version it read and a range already
covered is a ``redundant`` cycle. A job for a thread deleted since it was queued reads nothing
and stores nothing (its load names the incarnation).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import planner
from ..cycles import load
from ..cycles.writes import reload
from ..errors import ConflictError
from ..snapshot import Snapshot, Subject
from ..stores import LoadRequest
from .jobs import JOB_VERSION, options_hash

if TYPE_CHECKING:
    from ..background import Background
    from ..cycles import Deps
    from ..outcomes import Outcomes
    from ..turn import Turns

__all__ = ["retry_delay", "run_job"]

log = logging.getLogger("obsmem")

MAX_PASSES = 20
"""Most times one job asks the planner again after its work: a cycle cut short (a lost race
with a turn's activation, a failure) leaves work due that no later turn may come to queue."""


async def run_job(
    deps: Deps,
    turns: Turns,
    background: Background,
    outcomes: Outcomes,
    args: Mapping[str, Any],
) -> tuple[str, ...]:
    """Run the background work ``args``' log needs now; what ran (``catch-up``, ``buffering``,
    ``reflection``), or ``("deleted",)`` / ``("skipped",)``."""
    subject = _subject(deps, args)
    if subject is None:
        return ("skipped",)
    incarnation = args.get("incarnation")
    try:
        snapshot = await load(
            deps,
            LoadRequest(
                subject=subject, incarnation=incarnation if isinstance(incarnation, str) else None
            ),
        )
        done: list[str] = []
        for _ in range(MAX_PASSES):
            ran = await _work(deps, turns, background, outcomes, snapshot)
            if not ran:
                break
            done += ran
            snapshot = await reload(deps, subject)
        return tuple(done)
    except ConflictError as exc:
        if exc.current is not None:
            raise
        log.info("obsmem: the queued work of %s is dropped: %s", subject.key, exc)
        return ("deleted",)


def _subject(deps: Deps, args: Mapping[str, Any]) -> Subject | None:
    """The job's subject; None (with a WARNING) for a job this worker cannot run."""
    version = args.get("v")
    scope = args.get("scope")
    if not isinstance(version, int) or version > JOB_VERSION:
        log.warning(
            "obsmem: a memory job of format %r is newer than this worker understands (%d); it "
            "is left undone. Fix: upgrade the workers (pip install -U obsmem) before the "
            "serving processes",
            version,
            JOB_VERSION,
        )
        return None
    if scope != deps.options.scope:
        log.warning(
            "obsmem: a memory job of %s was queued with scope %r, but this worker's scope is "
            "%r; it is left undone. Fix: run the worker with the serving processes' options "
            "(--app module:factory builds the same Memory)",
            args.get("key"),
            scope,
            deps.options.scope,
        )
        return None
    _check_options(deps, args.get("options"))
    return Subject(
        scope=deps.options.scope,
        thread_id=str(args["thread_id"]),
        resource_id=str(args["resource_id"]),
    )


_warned: set[tuple[str, str]] = set()


def _check_options(deps: Deps, queued_with: object) -> None:
    """A WARNING, once per pair of hashes, when the job was queued by a process configured
    otherwise: the worker runs it with its own options (its planner decides again)."""
    own = options_hash(deps.options)
    if not isinstance(queued_with, str) or queued_with == own or (queued_with, own) in _warned:
        return
    _warned.add((queued_with, own))
    log.warning(
        "obsmem: memory jobs are queued with options %s but this worker runs with %s; it runs "
        "them with its own. Fix: give the worker the serving processes' options (the same "
        "flags, or --app module:factory building the same Memory); during a rolling deploy "
        "this passes once both run the new release",
        queued_with,
        own,
    )


async def _work(
    deps: Deps, turns: Turns, background: Background, outcomes: Outcomes, snapshot: Snapshot
) -> tuple[str, ...]:
    done: list[str] = []
    subject = snapshot.subject
    windows = turns.windows(snapshot)
    signals = turns.signals(snapshot, None)
    plan = turns.observation_plan(snapshot, windows, signals, {}, None)
    if plan.catch_up:
        newest = (snapshot.main.unobserved[-1].seq or 0) if snapshot.main.unobserved else 0
        await background.catch_up(snapshot, {subject.thread_id: newest + 1})
        done.append("catch-up")
    else:
        decision = planner.plan_after_reply(
            deps.options,
            windows[0],
            observation_tokens=snapshot.record.observation_tokens,
            buffering_in_flight=False,
            observer_backoff=outcomes.state(subject.key).observer,
            now=deps.steady(),
        )
        if plan.start_buffering or decision is not None:
            await background.buffer_loop(snapshot, idle=decision == "idle")
            done.append("buffering")
    if done:
        snapshot = await reload(deps, subject)
        signals = turns.signals(snapshot, None)
    if turns.reflection_plan(snapshot, signals).start_buffering:
        await background.reflection_task(snapshot)
        done.append("reflection")
    return tuple(done)


def retry_delay(outcomes: Outcomes, key: str, now: float) -> float | None:
    """Seconds until a role backing off for the log ``key`` may be called again (None: none
    backs off): the worker queues the log's job again for then, so work a failure put off is
    done without waiting for the log's next turn."""
    state = outcomes.state(key)
    waits = [b.retry_at - now for b in (state.observer, state.reflector) if b is not None]
    waits = [w for w in waits if w > 0]
    return max(waits) if waits else None
