"""``obsmem inspect``: what a store holds, for people (or ``--json`` for programs)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import textwrap
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TextIO

from ..context import ContextInput, build_context
from ..messages import Message, TextPart, message_to_dict, utcnow
from ..records import CYCLE_KINDS, CYCLE_OUTCOMES, CycleRecord, OMRecord, Thread, record_key
from ..sent import TurnSent, sent_of
from ..stores.reads import CycleQuery, thread_cycle, thread_cycles
from ..ui.render import part_view
from .arguments import Run, add_db
from .common import db_label, open_store

if TYPE_CHECKING:
    from ..stores.sqlstore import SQLStore

__all__ = ["add"]


def add(parser: argparse.ArgumentParser) -> Run:
    """Without --thread: every resource and thread with its memory status. With --thread: the
    observation log (as stored, or --as-actor as the agent sees it), its generations, buffered
    chunks and messages. With --thread and --cycles: the thread's memory cycles, newest first;
    with --cycle ID: what that cycle's model calls were shown and answered."""
    add_db(parser, read_only=True)
    parser.add_argument("--resource", help="only this resource")
    parser.add_argument("--thread", help="show this thread in detail")
    parser.add_argument("--messages", type=int, default=10, help="latest messages to show")
    parser.add_argument("--range", help="messages by position, e.g. 10:20 (inclusive)")
    parser.add_argument(
        "--as-actor",
        action="store_true",
        help="show the log as the agent sees it (relative dates, segments)",
    )
    parser.add_argument(
        "--cycles",
        action="store_true",
        help="with --thread: the cycle ledger (kind, outcome, timing, model, tokens, cost, "
        "messages covered, generation), newest first",
    )
    parser.add_argument(
        "--cycle",
        metavar="ID",
        help="with --thread: what this cycle's model calls were shown and answered (cycle ids: "
        "--cycles --json, or the ui)",
    )
    parser.add_argument(
        "--kind",
        action="append",
        choices=CYCLE_KINDS,
        help="with --cycles: only cycles of this kind (repeatable)",
    )
    parser.add_argument(
        "--outcome",
        action="append",
        choices=CYCLE_OUTCOMES,
        help="with --cycles: only cycles with this outcome (repeatable)",
    )
    parser.add_argument(
        "--limit", type=int, default=50, help="with --cycles: most cycles to show (default 50)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    return _run


def _run(args: argparse.Namespace, out: TextIO) -> int:
    if (args.cycles or args.kind or args.outcome or args.cycle) and not args.thread:
        print("obsmem: --cycles shows one thread's cycles; add --thread ID", file=sys.stderr)
        return 2
    if args.limit < 1:
        print(f"obsmem: --limit {args.limit} must be at least 1", file=sys.stderr)
        return 2
    # Read-only: a SQLite file opened mode=ro, PostgreSQL in READ ONLY transactions; a store
    # that is missing, not obsmem's or of another schema version is refused (exit 2).
    store = open_store(args.db, read_only=True)
    span: tuple[int, int] | None = None
    if args.range:
        try:
            first, last = (int(x) for x in args.range.split(":"))
        except ValueError:
            print(f"obsmem: --range {args.range!r} is not FIRST:LAST, e.g. 10:20", file=sys.stderr)
            return 2
        span = (first, last)
    return asyncio.run(_inspect(store, args, out, span))


async def _inspect(
    store: SQLStore, args: argparse.Namespace, out: TextIO, span: tuple[int, int] | None
) -> int:
    try:
        if args.cycle:
            return await _cycle(store, args, out)
        if args.thread and (args.cycles or args.kind or args.outcome):
            return await _cycles(store, args, out)
        if args.thread:
            return await _thread(store, args, out, span)
        return await _overview(store, args, out)
    finally:
        await store.aclose()


async def _overview(store: SQLStore, args: argparse.Namespace, out: TextIO) -> int:
    resources = [args.resource] if args.resource else await store.list_resources()
    data: dict[str, Any] = {
        "db": db_label(args.db),
        "schema_version": await store.schema_version(),
        "auto_model": _auto_model(),
        "resources": [],
    }
    for resource in resources:
        entry: dict[str, Any] = {"id": resource, "threads": []}
        for thread in await store.list_threads(resource):
            record = await store.get_record(
                record_key("thread", thread_id=thread.id, resource_id=resource)
            )
            entry["threads"].append(
                {
                    "id": thread.id,
                    "title": thread.title,
                    "messages": thread.message_count,
                    "memory": _record_summary(record, thread.id),
                    "failures": _failures(thread.metadata),
                }
            )
        shared = await store.get_record(
            record_key("resource", thread_id=None, resource_id=resource)
        )
        entry["resource_memory"] = _record_summary(shared, None)
        entry["failures"] = _failures(await store.get_resource(resource))
        data["resources"].append(entry)
    queue = await _queue(store)
    if queue is not None:
        data["queue"] = queue
    if args.json:
        print(json.dumps(data, indent=2, default=str), file=out)
        return 0
    print(f"{db_label(args.db)}  (schema version {data['schema_version']})", file=out)
    print(f"memory model here: {_auto_line()}", file=out)
    if queue is not None:
        print(queue["line"], file=out)
        for key, state in queue["logs"].items():
            print(f"  {key}: {state['line']}", file=out)
    if not resources:
        print("  no threads yet", file=out)
    for entry in data["resources"]:
        print(f"resource {entry['id']}", file=out)
        for t in entry["threads"]:
            title = f'  "{t["title"]}"' if t["title"] else ""
            print(f"  thread {t['id']}{title}  {t['messages']} messages", file=out)
            m = t["memory"]
            if m:
                print(
                    f"    memory: generation {m['generation']}, log {m['log_tokens']} tokens, "
                    f"observed through message {m['cursor']}, {m['chunks']} buffered chunks, "
                    f"{m['tokens_observed']} message tokens observed in all",
                    file=out,
                )
            for line in t["failures"]:
                print(f"    FAILING: {line}", file=out)
        m = entry["resource_memory"]
        if m:
            print(
                f"  resource memory: generation {m['generation']}, log {m['log_tokens']} tokens, "
                f"{m['chunks']} buffered chunks",
                file=out,
            )
        for line in entry["failures"]:
            print(f"  FAILING (resource memory): {line}", file=out)
    return 0


async def _queue(store: SQLStore) -> dict[str, Any] | None:
    """The job queue of a PostgreSQL database (``background="queue"``): in all and per log."""
    dsn = getattr(store, "queue_dsn", None)
    if not isinstance(dsn, str):
        return None
    from ..queue.status import queue_state, queue_states

    total = await queue_state(dsn)
    logs = await queue_states(dsn)
    return {
        **asdict(total),
        "line": total.line(),
        "logs": {key: {**asdict(state), "line": state.jobs_line()} for key, state in logs.items()},
    }


def _failures(metadata: Any) -> list[str]:
    """The failure states stored in a thread's or resource's metadata, one line each."""
    from ..failures import failures_in

    return [f.summary() for f in failures_in(metadata).values()]


def _auto_model() -> dict[str, Any]:
    """What ``model="auto"`` resolves to in this environment (without an actor), and why: with
    only ``OPENAI_BASE_URL``, the model that server serves (asked once, as a ``Memory`` asks at
    its first memory call)."""
    from ..models.environment import environment_choice

    choice = environment_choice(ask_server=True)
    return {"model": choice.model, "why": choice.why, "configured": choice.configured}


def _auto_line() -> str:
    auto = _auto_model()
    return f"'auto' is {auto['model']} ({auto['why']})"


def _record_summary(record: OMRecord | None, thread_id: str | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {
        "generation": record.generation,
        "log_tokens": record.observation_tokens,
        "cursor": record.cursor.get(thread_id, 0) if thread_id else dict(record.cursor),
        "chunks": len(record.chunks),
        "tokens_observed": record.total_tokens_observed,
    }


async def _thread(
    store: SQLStore, args: argparse.Namespace, out: TextIO, span: tuple[int, int] | None
) -> int:
    thread = await store.get_thread(args.thread)
    if thread is None:
        known = [t.id for r in await store.list_resources() for t in await store.list_threads(r)]
        hint = f" Known threads: {', '.join(known[:10])}" if known else " The store has none."
        print(f"obsmem: no thread {args.thread!r} in {db_label(args.db)}.{hint}", file=sys.stderr)
        return 2
    key = record_key("thread", thread_id=thread.id, resource_id=thread.resource_id)
    history = await store.history(key)
    if span is not None:
        messages = await store.list_messages(thread.id, after_seq=span[0] - 1, through_seq=span[1])
    else:
        messages = list(
            reversed(await store.list_messages(thread.id, limit=args.messages, newest_first=True))
        )
    head = history[0] if history else None
    log = head.observations if head else ""
    if args.as_actor and head is not None:
        shown = build_context(ContextInput(observations=log, now=utcnow(), tz=utcnow().tzinfo))  # type: ignore[arg-type]
        log = "\n\n".join(m.text for m in shown if m.role == "system")
    shown_thread = _ShownThread(thread=thread, history=history, log=log, messages=messages)
    if args.json:
        await _thread_json(store, shown_thread, out)
    else:
        await _thread_text(store, shown_thread, out, span=span, as_actor=args.as_actor)
    return 0


@dataclass(frozen=True, slots=True, kw_only=True)
class _ShownThread:
    """What ``obsmem inspect --thread`` shows of a thread: its log's generations (newest
    first), the log as shown, and the messages asked for."""

    thread: Thread
    history: list[OMRecord]
    log: str
    messages: list[Message]

    @property
    def head(self) -> OMRecord | None:
        return self.history[0] if self.history else None


async def _thread_json(store: SQLStore, shown: _ShownThread, out: TextIO) -> None:
    thread, head = shown.thread, shown.head
    data = {
        "thread": {
            "id": thread.id,
            "resource": thread.resource_id,
            "title": thread.title,
            "messages": thread.message_count,
            "metadata": dict(thread.metadata),
        },
        "failures": _failures(thread.metadata)
        + _failures(await store.get_resource(thread.resource_id)),
        "log": shown.log,
        "generations": [
            {
                "generation": r.generation,
                "origin": r.origin,
                "log_tokens": r.observation_tokens,
                "cursor": dict(r.cursor),
                "created_at": r.created_at.isoformat(),
            }
            for r in shown.history
        ],
        "chunks": [
            {
                "id": c.id,
                "message_tokens": c.message_tokens,
                "observation_tokens": c.token_count,
                "ranges": [[g.first_seq, g.last_seq] for g in c.ranges],
                "observations": c.observations,
            }
            for c in (head.chunks if head else ())
        ],
        "messages": [message_to_dict(m) for m in shown.messages],
        "last_turn": asdict(turn) if (turn := _newest_turn(shown.messages)) else None,
    }
    print(json.dumps(data, indent=2, default=str), file=out)


async def _thread_text(
    store: SQLStore,
    shown: _ShownThread,
    out: TextIO,
    *,
    span: tuple[int, int] | None,
    as_actor: bool,
) -> None:
    thread, head, history, messages = shown.thread, shown.head, shown.history, shown.messages
    title = f' "{thread.title}"' if thread.title else ""
    print(f"thread {thread.id}{title} of resource {thread.resource_id}", file=out)
    for line in _failures(thread.metadata) + _failures(
        await store.get_resource(thread.resource_id)
    ):
        print(f"FAILING: {line}", file=out)
    if head is not None:
        how = "as the agent sees it" if as_actor else "as stored"
        print(
            f"observation log ({how}; generation {head.generation}, {len(history)} "
            f"generations, {head.observation_tokens} tokens):",
            file=out,
        )
        print(shown.log or "  (empty)", file=out)
        for r in history[1:]:
            print(
                f"  generation {r.generation} ({r.origin}): {r.observation_tokens} tokens", file=out
            )
        for c in head.chunks:
            ranges = ", ".join(f"{g.first_seq}-{g.last_seq}" for g in c.ranges)
            print(
                f"buffered chunk {c.id}: messages {ranges}, {c.message_tokens} message tokens -> "
                f"{c.token_count} observation tokens",
                file=out,
            )
    else:
        print("no observation log yet", file=out)
    turn = _newest_turn(messages)
    if turn is not None:
        left = f", {turn.left_out} messages left out" if turn.left_out else ""
        print(
            f"turn at message {turn.at} sent {turn.sent:,} tokens ({turn.memory:,} of memory, "
            f"{turn.raw:,} raw{left}); thresholds in force: observe at {turn.message_tokens:,}, "
            f"reflect at {turn.observation_tokens:,}",
            file=out,
        )
    label = f"messages {span[0]}-{span[1]}" if span else f"latest {len(messages)}"
    print(f"{label} of {thread.message_count} messages:", file=out)
    for message in messages:
        kinds = ",".join(sorted({p.kind for p in message.parts} - {"text"}))
        extra = f" [{kinds}]" if kinds else ""
        head = f"  #{message.seq} {message.role}{extra}: {_cut(message.text, 100)}"
        print(head.rstrip(), file=out)
        for part in message.parts:
            if not isinstance(part, TextPart):
                view = part_view(part)
                print(f"      {view.label}: {_cut(view.text, PART_CUT_AT)}", file=out)


def _newest_turn(messages: list[Message]) -> TurnSent | None:
    """The newest turn measured when it was sent, among ``messages`` (:mod:`obsmem.sent`)."""
    return next((t for m in reversed(messages) if (t := sent_of(m)) is not None), None)


PART_CUT_AT = 300
"""A tool call's arguments, a tool result or another non-text part is shown on one line cut at
this many characters (``--json`` has all of it), so a long result does not bury the listing."""


def _cut(text: str, limit: int) -> str:
    """``text`` on one line (runs of whitespace as one space), cut at ``limit`` characters with
    how many were left out."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return f"{flat[:limit]}... ({len(flat) - limit:,} more characters)"


async def _cycles(store: SQLStore, args: argparse.Namespace, out: TextIO) -> int:
    """The thread's cycles: those of its own log and those of its resource's log that worked on
    it (the command cannot tell which scope the writer used), newest first."""
    thread = await store.get_thread(args.thread)
    if thread is None:
        print(f"obsmem: no thread {args.thread!r} in {db_label(args.db)}", file=sys.stderr)
        return 2
    query = CycleQuery(tuple(args.kind or ()), tuple(args.outcome or ()), limit=args.limit)
    rows = await thread_cycles(store, thread, query)
    if args.json:
        data = {
            "thread": thread.id,
            "resource": thread.resource_id,
            "cycles": [c.to_json() for c in rows],
        }
        print(json.dumps(data, indent=2), file=out)
        return 0
    filters = ", ".join([*(args.kind or ()), *(args.outcome or ())])
    which = f" ({filters})" if filters else ""
    print(
        f"cycles of thread {thread.id} of resource {thread.resource_id}{which}, newest first:",
        file=out,
    )
    if not rows:
        print("  none recorded", file=out)
        return 0
    table = [_CYCLE_HEADER, *(_cycle_cells(c, thread.id) for c in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(_CYCLE_HEADER))]
    for n, cells in enumerate(table):
        line = "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True))
        print(f"  {line.rstrip()}", file=out)
        if n and rows[n - 1].error:
            print(f"      error: {rows[n - 1].error}", file=out)
    return 0


async def _cycle(store: SQLStore, args: argparse.Namespace, out: TextIO) -> int:
    """One cycle of the thread: each model call's instructions, what it was shown, its answer."""
    thread = await store.get_thread(args.thread)
    cycle = await thread_cycle(store, thread, args.cycle) if thread else None
    if cycle is None:
        print(
            f"obsmem: no cycle {args.cycle!r} of thread {args.thread!r} in {db_label(args.db)}; "
            "list them with --cycles --json",
            file=sys.stderr,
        )
        return 2
    calls = await store.cycle_detail(cycle.cycle_id)
    if args.json:
        data = {**cycle.to_json(), "calls": [c.to_json() for c in calls]}
        print(json.dumps(data, indent=2), file=out)
        return 0
    print(f"cycle {cycle.cycle_id} ({cycle.operation or cycle.kind}, {cycle.outcome}):", file=out)
    if not calls:
        print("  no detail kept (no model call, or dropped: see cycle_detail)", file=out)
    for n, call in enumerate(calls, 1):
        print(f"  call {n}: {call.role} ({call.model})", file=out)
        for title, text in (("shown", call.shown), ("answer", call.answer)):
            print(f"    {title}:", file=out)
            print(textwrap.indent(text, "      ", lambda _: True).rstrip("\n"), file=out)
    return 0


_CYCLE_HEADER = (
    "started (UTC)",
    "kind",
    "operation",
    "outcome",
    "ms",
    "model",
    "tokens in/out",
    "cost $",
    "messages",
    "gen",
)


def _cycle_cells(c: CycleRecord, thread_id: str) -> tuple[str, ...]:
    tokens = "-" if c.input_tokens is None else f"{c.input_tokens:,}/{c.output_tokens or 0:,}"
    messages = ", ".join(
        f"{'' if r.thread_id == thread_id else r.thread_id + ':'}{r.first_seq}-{r.last_seq}"
        for r in c.ranges
    )
    return (
        c.started_at.strftime("%Y-%m-%d %H:%M:%S"),
        c.kind,
        c.operation or "-",
        c.outcome,
        f"{c.duration_ms:,.0f}",
        c.model or "-",
        tokens,
        "-" if c.cost_usd is None else f"{c.cost_usd:.6f}",
        messages or "-",
        "-" if c.generation is None else str(c.generation),
    )
