"""The ``obsmem`` command line.

``obsmem inspect`` shows what a store holds: resources, threads, message counts and, per thread,
the observation log with its generations and buffered chunks.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from .records import record_key
from .stores import SQLiteStore

__all__ = ["main"]

DEFAULT_DB = "obsmem.db"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="obsmem", description="Observational memory for LLM agents."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect", help="show threads, logs and messages in a store")
    inspect.add_argument("--db", default=DEFAULT_DB, help=f"SQLite file (default: {DEFAULT_DB})")
    inspect.add_argument("--resource", help="only this resource")
    inspect.add_argument("--thread", help="show this thread's log and latest messages")
    inspect.add_argument(
        "--messages", type=int, default=10, help="latest messages to show with --thread"
    )
    return parser


async def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    path = Path(args.db)
    store = SQLiteStore(path)
    try:
        print(f"{path}  (schema version {await store.schema_version()})", file=out)
        if args.thread:
            return await _show_thread(store, args.thread, args.messages, out)
        resources = [args.resource] if args.resource else await store.list_resources()
        if not resources:
            print("  no threads yet", file=out)
        for resource in resources:
            print(f"resource {resource}", file=out)
            for thread in await store.list_threads(resource):
                title = f'  "{thread.title}"' if thread.title else ""
                print(f"  thread {thread.id}{title}  {thread.message_count} messages", file=out)
                key = record_key("thread", thread_id=thread.id, resource_id=resource)
                record = await store.get_record(key)
                if record is not None:
                    print(
                        f"    memory: generation {record.generation}, "
                        f"log {record.observation_tokens} tokens, "
                        f"observed through message {record.cursor.get(thread.id, 0)}, "
                        f"{len(record.chunks)} buffered chunks",
                        file=out,
                    )
            record = await store.get_record(
                record_key("resource", thread_id=None, resource_id=resource)
            )
            if record is not None:
                print(
                    f"  resource memory: generation {record.generation}, "
                    f"log {record.observation_tokens} tokens, {len(record.chunks)} buffered chunks",
                    file=out,
                )
        return 0
    finally:
        await store.aclose()


async def _show_thread(store: SQLiteStore, thread_id: str, count: int, out: TextIO) -> int:
    thread = await store.get_thread(thread_id)
    if thread is None:
        print(f"No thread {thread_id!r} in this store.", file=sys.stderr)
        return 2
    print(f"thread {thread.id} of resource {thread.resource_id}", file=out)
    history = await store.history(record_key("thread", thread_id=thread.id, resource_id=None))
    if history:
        head = history[0]
        print(
            f"observation log (generation {head.generation}, {len(history)} generations, "
            f"{head.observation_tokens} tokens):",
            file=out,
        )
        print(head.observations or "  (empty)", file=out)
        for chunk in head.chunks:
            print(f"buffered chunk {chunk.id} ({chunk.message_tokens} message tokens)", file=out)
    else:
        print("no observation log yet", file=out)
    messages = await store.list_messages(thread.id, limit=count, newest_first=True)
    print(f"latest {len(messages)} of {thread.message_count} messages:", file=out)
    for message in reversed(messages):
        text = message.text.replace("\n", " ")
        if len(text) > 100:
            text = text[:97] + "..."
        kinds = ",".join(sorted({p.kind for p in message.parts} - {"text"}))
        extra = f" [{kinds}]" if kinds else ""
        print(f"  #{message.seq} {message.role}{extra}: {text}", file=out)
    return 0


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    stream = out if out is not None else sys.stdout
    if args.command == "inspect":
        if not Path(args.db).exists():
            print(
                f"No obsmem database at {args.db}. Pass --db PATH, or create one by using "
                "obsmem with Memory() in this directory.",
                file=sys.stderr,
            )
            return 2
        return asyncio.run(_inspect(args, stream))
    raise AssertionError(f"unhandled command {args.command}")  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
