"""``obsmem revise``: correct a thread's observation log by hand (``Memory.revise``).

The command cannot know which scope the writer used, so it revises the log that exists: the
thread's own (thread scope) or its resource's (resource scope); ``--scope`` chooses when both do.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..errors import ConfigError
from ..records import Scope, Thread, record_key
from .arguments import Run, add_db
from .common import db_label
from .errors import CannotStart
from .stores import open_store

if TYPE_CHECKING:
    from ..stores.sqlstore import SQLStore

__all__ = ["add"]


def add(parser: argparse.ArgumentParser) -> Run:
    """Write a new generation of the thread's observation log with lines replaced or removed
    (each named by its whole text, as obsmem inspect shows it), or the whole log from a file.
    The agent sees it from its next turn; the cycle ledger records it as a revision, with --by."""
    add_db(parser)
    parser.add_argument("--thread", required=True, help="the thread whose log to correct")
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument(
        "--replace", nargs=2, metavar=("OLD", "NEW"), help="replace the line OLD with NEW"
    )
    how.add_argument(
        "--remove", action="append", metavar="LINE", help="remove this line (repeatable)"
    )
    how.add_argument("--text-file", metavar="PATH", help="the whole new log, from this file")
    parser.add_argument(
        "--scope",
        choices=("thread", "resource"),
        help="the log to revise when the thread has its own and its resource's",
    )
    parser.add_argument(
        "--by",
        default="obsmem revise",
        help="who asks, for the cycle ledger (default: %(default)s)",
    )
    return _run


def _run(args: argparse.Namespace, out: TextIO) -> int:
    text = Path(args.text_file).read_text(encoding="utf-8") if args.text_file else None
    store = open_store(args.db, existing=True)
    return asyncio.run(_revise(store, args, text, out))


async def _revise(store: SQLStore, args: argparse.Namespace, text: str | None, out: TextIO) -> int:
    from ..memory import Memory  # the engine loads only when the command runs

    try:
        thread = await store.get_thread(args.thread)
        if thread is None:
            raise CannotStart(f"no thread {args.thread!r} in {db_label(args.db)}")
        scope = args.scope or await _scope_of(store, thread)
    except BaseException:
        await store.aclose()
        raise
    async with Memory(store, observational_memory={"scope": scope}) as memory:
        try:
            head = await memory.revise(
                {"thread": thread.id, "resource": thread.resource_id},
                replace=dict([args.replace]) if args.replace else None,
                remove=args.remove,
                text=text,
                by=args.by,
            )
        except ConfigError as exc:
            raise CannotStart(str(exc)) from None
    if head is None:
        raise CannotStart(f"the log of thread {thread.id!r} was cleared meanwhile")
    print(f"revised {head.key}: generation {head.generation}", file=out)
    return 0


async def _scope_of(store: SQLStore, thread: Thread) -> Scope:
    """The scope of the log that covers ``thread``: the one that exists."""
    found: list[Scope] = [
        scope
        for scope in ("thread", "resource")
        if await store.get_record(
            record_key(scope, thread_id=thread.id, resource_id=thread.resource_id)
        )
        is not None
    ]
    if len(found) == 1:
        return found[0]
    if not found:
        raise CannotStart(f"thread {thread.id!r} has no observation log yet: nothing to revise")
    raise CannotStart(
        f"thread {thread.id!r} has a log of its own and its resource's: choose one with --scope"
    )
