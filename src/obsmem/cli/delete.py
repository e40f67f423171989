"""``obsmem delete``: erase a thread or a resource for good, after asking (unless ``--yes``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TextIO

from ..errors import StoreError
from ..memory import Memory
from ..stores.sqlstore import SQLStore
from .arguments import Run, add_db, one_of
from .common import db_label, open_store
from .errors import CannotStart

__all__ = ["add"]


def add(parser: argparse.ArgumentParser) -> Run:
    """Erase a thread, or a resource with all its threads, in one transaction: messages,
    observation logs (every generation), buffered work, observation groups and embeddings,
    extracted values, working memory, the cycle ledger and the failure state. Asks first unless
    --yes. Backups and copies made elsewhere are not touched."""
    one_of(parser, thread="erase this thread", resource="erase this resource and all its threads")
    parser.add_argument("--yes", action="store_true", help="erase without asking")
    add_db(parser)
    return _run


def _run(args: argparse.Namespace, out: TextIO) -> int:
    return asyncio.run(_delete(open_store(args.db, existing=True), args, out))


async def _delete(store: SQLStore, args: argparse.Namespace, out: TextIO) -> int:
    memory = Memory(store)
    try:
        what = await _describe(store, args)
        if not args.yes and not _confirmed(what, db_label(args.db), out):
            print("Nothing erased.", file=out)
            return 1
        if args.thread:
            thread = await store.get_thread(args.thread)
            resource = thread.resource_id if thread is not None else ""
            erased = await memory.delete_thread({"thread": args.thread, "resource": resource})
        else:
            erased = await memory.delete_resource(args.resource)
        print(f"Erased {what}.", file=out)
        if erased.remaining:
            print(
                "These lines of the resource's shared log belong to no thread and may still "
                "tell of it; revise them if they do:\n" + erased.remaining,
                file=out,
            )
        return 0
    except StoreError as exc:
        raise CannotStart(str(exc)) from exc
    finally:
        await memory.aclose()


async def _describe(store: SQLStore, args: argparse.Namespace) -> str:
    """What will be erased, in words; CannotStart naming the fix when it is not there."""
    if args.thread:
        thread = await store.get_thread(args.thread)
        if thread is None:
            raise CannotStart(
                f"no thread {args.thread!r} in {db_label(args.db)}: `obsmem inspect --db "
                f"{args.db}` lists the threads"
            )
        return (
            f"thread {thread.id!r} of resource {thread.resource_id!r} "
            f"({thread.message_count} messages)"
        )
    threads = await store.list_threads(args.resource)
    if not threads and not await store.get_resource(args.resource):
        raise CannotStart(
            f"no resource {args.resource!r} in {db_label(args.db)}: `obsmem inspect --db "
            f"{args.db}` lists the resources"
        )
    count = sum(t.message_count for t in threads)
    return f"resource {args.resource!r} ({len(threads)} threads, {count} messages)"


def _confirmed(what: str, db: str, out: TextIO) -> bool:
    print(f"Erase {what} from {db}, with everything memory learned from it?", file=out)
    print("This cannot be undone. Type 'yes' to erase: ", end="", file=out, flush=True)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("yes", "y")
