"""``obsmem export`` and ``obsmem import``: memory to and from an ``obsmem-export`` file (JSON
Lines, ``docs/export-format.md``), and plain OpenAI chat transcripts in."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from ..errors import StoreError
from .arguments import Run, add_choice, add_db, one_of
from .common import open_store
from .errors import CannotStart

__all__ = ["add_export", "add_import"]


def add_export(parser: argparse.ArgumentParser) -> Run:
    """Export memory as obsmem-export JSON Lines (docs/export-format.md): threads, messages,
    every generation of the log with its buffered work, observation groups, embeddings and
    working memory; the failure state stays behind. The file is created with mode 0600 (it is as
    sensitive as the database) and never overwritten."""
    what = one_of(
        parser,
        thread="export this thread (with its thread-scope log)",
        resource="export this resource and all its threads",
    )
    what.add_argument("--all", action="store_true", help="export every resource")
    parser.add_argument("-o", "--output", help="the file to create (default: standard output)")
    parser.add_argument("--ledger", action="store_true", help="include the cycle ledger")
    add_db(parser)
    return _run_export


def add_import(parser: argparse.ArgumentParser) -> Run:
    """Import an obsmem-export file all or nothing: every line is checked before the first
    write, and the whole file is written in one transaction. Ids the store holds are refused
    unless --on-conflict says otherwise. An OpenAI chat transcript (a JSON list of messages, or
    one a line) becomes a thread; its memory builds on its first turn. A Mastra memory database
    (@mastra/libsql's SQLite file) brings its threads, messages and observation log."""
    parser.add_argument("file", help="the file to import")
    parser.add_argument(
        "--from",
        dest="source",
        choices=("obsmem", "openai", "mastra"),
        help="what the file is: an obsmem export, an OpenAI chat transcript, or a Mastra memory "
        "database (@mastra/libsql's SQLite file; default: told from the file)",
    )
    parser.add_argument("--thread", help="the thread a transcript becomes (--from openai)")
    parser.add_argument("--resource", help="the resource that thread belongs to")
    parser.add_argument("--dry-run", action="store_true", help="check everything, write nothing")
    add_choice(
        parser,
        "--on-conflict",
        ("refuse", "skip", "replace"),
        "ids the store holds already: refuse the import (default), skip them (keep what is "
        "stored) or replace them (erase what is stored first)",
    )
    parser.add_argument(
        "--resource-map",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="move resource OLD's memory to resource NEW (repeatable)",
    )
    add_db(parser)
    return _run_import


def _stderr_progress(label: str) -> Any:
    def progress(stage: str, done: int) -> None:
        print(f"obsmem: {label}: {done:,} records {stage}", file=sys.stderr, flush=True)

    return progress


def _run_export(args: argparse.Namespace, out: TextIO) -> int:
    return asyncio.run(_export(args, out))


async def _export(args: argparse.Namespace, out: TextIO) -> int:
    from ..memory import Memory
    from ..transfer import write_export

    memory = Memory(open_store(args.db, read_only=True))
    try:
        records = memory.export(
            thread=args.thread, resource=args.resource, all=args.all, ledger=args.ledger
        )
        progress = _stderr_progress("export")
        if args.output is None:
            await write_export(records, out, progress=lambda n: progress("written", n))
        else:
            count = await _export_to_file(records, args.output, progress)
            print(f"Exported {count:,} records to {args.output}.", file=sys.stderr)
        return 0
    except StoreError as exc:
        raise CannotStart(str(exc)) from exc
    finally:
        await memory.aclose()


async def _export_to_file(records: Any, output: str, progress: Any) -> int:
    """Write the export to a new private file; a failed export leaves no file behind (a file
    cut short would read as a smaller export)."""
    from ..transfer import open_private, write_export

    file = open_private(output)
    try:
        with file:
            return await write_export(records, file, progress=lambda n: progress("written", n))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(output)
        raise


def _resource_map(pairs: list[str]) -> dict[str, str]:
    mapped: dict[str, str] = {}
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise CannotStart(f"--resource-map {pair}: write it OLD=NEW (two resource ids)")
        mapped[old] = new
    return mapped


def _run_import(args: argparse.Namespace, out: TextIO) -> int:
    from ..transfer.transcripts import detect

    path = Path(args.file)
    if not path.is_file():
        raise CannotStart(f"no file {path}: give the path of an export file or a transcript")
    kind = args.source or detect(path)
    source: Any = path
    if kind == "openai":
        if not args.thread or not args.resource:
            raise CannotStart(
                f"{path} is a chat transcript: say which thread it becomes with --thread ID "
                "--resource ID"
            )
        from ..transfer.transcripts import transcript_records

        source = transcript_records(path, thread=args.thread, resource=args.resource)
    elif kind == "mastra":
        from ..transfer.mastra import read_mastra
        from ..transfer.mastra_records import mastra_records

        source = mastra_records(read_mastra(path), source=str(path))
    if kind != "openai" and (args.thread or args.resource):
        raise CannotStart("--thread and --resource name a transcript's thread (--from openai)")
    return asyncio.run(_import(args, source, _resource_map(args.resource_map), out))


async def _import(args: argparse.Namespace, source: Any, rmap: dict[str, str], out: TextIO) -> int:
    from ..memory import Memory

    memory = Memory(open_store(args.db))
    try:
        report = await memory.import_(
            source,
            dry_run=args.dry_run,
            on_conflict=args.on_conflict,
            resource_map=rmap,
            progress=_stderr_progress("import"),
        )
    finally:
        await memory.aclose()
    counts = ", ".join(f"{n:,} {kind}" for kind, n in sorted(report.counts.items()))
    verb = "Would import" if report.dry_run else "Imported"
    print(f"{verb} {counts or 'nothing'}.", file=out)
    for what, ids in (
        ("Skipped threads", report.skipped_threads),
        ("Replaced threads", report.replaced_threads),
        ("Replaced logs", report.replaced_keys),
    ):
        if ids:
            print(f"{what}: {', '.join(ids)}.", file=out)
    if report.dry_run:
        print("Nothing was written (--dry-run).", file=out)
    return 0
