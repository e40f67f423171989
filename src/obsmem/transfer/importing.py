"""Import: an export file (or records from another system) into a store, all or nothing.

Two passes over the file. The first validates every line (its record, and the file's order:
a thread before its messages, seqs 1, 2, ... up to the thread's count, one head per log key, a
group before its embedding) and collects the ids, holding ids only; a bad line is an error
naming its number, and nothing is written. Then the store says which ids it holds already
(refused unless ``on_conflict`` says skip or replace), and the second pass streams the records
into one store transaction (``Store.write_import``): a failure anywhere writes nothing.

Records that do not come from a file (a reader of another system, a transcript) are spooled to
a private temporary file first, so both passes read the same bytes and memory stays flat.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ValidationError

from ..errors import StoreError
from ..records import record_key
from ..stores import CoreStore, TransferStore
from ..stores.base import require
from ..stores.changes import ImportConflicts, Imported, ImportedResource, ImportWrite
from ..stores.codec import dumps
from .exporting import open_private
from .format import FORMAT, VERSION, DataRecord, Header, MessageRow, ThreadRow, parse_record

__all__ = ["ImportInputError", "ImportReport", "OnConflict", "import_records"]

OnConflict: TypeAlias = Literal["refuse", "skip", "replace"]
Source: TypeAlias = (
    str
    | Path
    | Iterable[Header | DataRecord | Mapping[str, Any]]
    | AsyncIterable[Header | DataRecord | Mapping[str, Any]]
)
"""An export file's path, or its records (models or their dicts), header first."""
PROGRESS_EVERY = 10_000
SHOWN = 5
"""Ids named in a conflict error, per kind."""


class ImportInputError(StoreError):
    """The input is not an import obsmem can write; the message names the line and the fix.
    Nothing was written."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportReport:
    """What an import wrote (or, with ``dry_run``, would write)."""

    counts: dict[str, int]
    """Records of the file per type (``thread``, ``message``, ``log``, ...)."""
    written: int
    """Items written (0 for a dry run)."""
    dry_run: bool
    skipped_threads: tuple[str, ...] = ()
    replaced_threads: tuple[str, ...] = ()
    replaced_keys: tuple[str, ...] = ()
    skipped_keys: tuple[str, ...] = ()
    skipped_resources: tuple[str, ...] = ()


@dataclass(slots=True)
class _Plan:
    """What the first pass found: the ids of the file, after the resource map."""

    header: Header | None = None
    counts: dict[str, int] = field(default_factory=dict[str, int])
    threads: dict[str, str] = field(default_factory=dict[str, str])
    """thread id -> its resource."""
    expected: dict[str, int] = field(default_factory=dict[str, int])
    """thread id -> its message count, as its record says."""
    last_seq: dict[str, int] = field(default_factory=dict[str, int])
    messages: set[str] = field(default_factory=set[str])
    records: set[str] = field(default_factory=set[str])
    heads: dict[str, int] = field(default_factory=dict[str, int])
    groups: set[str] = field(default_factory=set[str])
    resources: set[str] = field(default_factory=set[str])


def _mapped_id(value: str | None, resource_map: Mapping[str, str]) -> str | None:
    return None if value is None else resource_map.get(value, value)


def _mapped_key(key: str, resource_map: Mapping[str, str]) -> str:
    scope, _, rest = key.partition(":")
    if scope == "resource" and rest in resource_map:
        return record_key("resource", thread_id=None, resource_id=resource_map[rest])
    return key


def _map(item: Imported, resource_map: Mapping[str, str]) -> Imported:
    """``item`` moved to the resources ``resource_map`` names (its resource, and its key when
    that is a resource's log)."""
    if not resource_map:
        return item
    if isinstance(item, ImportedResource):
        return replace(item, id=resource_map.get(item.id, item.id))
    changes: dict[str, Any] = {"resource_id": _mapped_id(item.resource_id, resource_map)}
    key = getattr(item, "key", None)
    if isinstance(key, str):
        changes["key"] = _mapped_key(key, resource_map)
    return replace(item, **changes)  # type: ignore[arg-type]


def _short(error: Exception) -> str:
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}" if where else str(first["msg"])
    return str(error) or type(error).__name__


def _read(path: Path) -> Iterator[tuple[int, Header | DataRecord, Imported | None]]:
    """Each line's number, record and stored form (None for the header); a line that is not a
    valid record is an ImportInputError naming it."""
    try:
        lines = path.open("rb")
    except OSError as exc:
        raise ImportInputError(
            f"cannot read {path} ({exc.strerror}): give the path of an {FORMAT} file"
        ) from None
    with lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = parse_record(line)
                yield number, record, None if isinstance(record, Header) else record.domain()
            except (ValidationError, ValueError, KeyError, TypeError) as exc:
                hint = (
                    "is this an OpenAI transcript? import it with --from openai"
                    if number == 1
                    else "fix or remove the line"
                )
                raise ImportInputError(
                    f"{path}, line {number}: {_short(exc)}; {hint} (nothing was imported)"
                ) from None


def _check(plan: _Plan, number: int, record: Header | DataRecord, item: Imported | None) -> None:
    """The file's order and ids, one record at a time; a ValueError says what is wrong."""
    if plan.header is None:
        if not isinstance(record, Header):
            raise ValueError(f"the first line must be the {FORMAT} header")
        if record.version > VERSION:
            raise ValueError(
                f"the file is {FORMAT} version {record.version}, newer than this obsmem reads "
                f"({VERSION}); upgrade obsmem (pip install -U obsmem)"
            )
        plan.header = record
        return
    if isinstance(record, Header):
        raise ValueError("a second header; concatenated exports are imported one by one")
    plan.counts[record.type] = plan.counts.get(record.type, 0) + 1
    if isinstance(record, ThreadRow):
        _unique(plan.threads, record.id, "thread")
        plan.threads[record.id] = record.resource_id
        plan.expected[record.id] = record.message_count
        plan.last_seq[record.id] = 0
    elif isinstance(record, MessageRow):
        _check_message(plan, record)
    else:
        _check_memory(plan, item)


def _unique(seen: Iterable[str], value: str, what: str) -> None:
    if value in seen:
        raise ValueError(f"{what} {value!r} appears twice")


def _check_message(plan: _Plan, m: MessageRow) -> None:
    if m.thread_id not in plan.threads:
        raise ValueError(f"message {m.id!r} comes before its thread {m.thread_id!r}")
    if m.resource_id != plan.threads[m.thread_id]:
        raise ValueError(f"message {m.id!r} names another resource than its thread")
    if m.seq != plan.last_seq[m.thread_id] + 1:
        raise ValueError(
            f"message {m.id!r} has seq {m.seq}, expected {plan.last_seq[m.thread_id] + 1} "
            "(a thread's messages come in seq order, 1, 2, ...)"
        )
    _unique(plan.messages, m.id, "message")
    plan.messages.add(m.id)
    plan.last_seq[m.thread_id] = m.seq


def _check_memory(plan: _Plan, item: Imported | None) -> None:
    from ..records import GroupEmbedding, ObservationGroup, OMRecord

    if isinstance(item, OMRecord):
        _unique(plan.records, item.id, "log record")
        plan.records.add(item.id)
        plan.heads[item.key] = plan.heads.get(item.key, 0) + item.is_head
    elif isinstance(item, ObservationGroup):
        _unique(plan.groups, item.id, "observation group")
        plan.groups.add(item.id)
    elif isinstance(item, GroupEmbedding) and item.group_id not in plan.groups:
        raise ValueError(f"the embedding of group {item.group_id!r} comes before its group")
    elif isinstance(item, ImportedResource):
        _unique(plan.resources, item.id, "resource")
        plan.resources.add(item.id)


def _finish(plan: _Plan, path: Path) -> None:
    if plan.header is None:
        raise ImportInputError(f"{path} is empty: give an {FORMAT} file (obsmem export)")
    for thread_id, count in plan.expected.items():
        if plan.last_seq[thread_id] != count:
            raise ImportInputError(
                f"{path}: thread {thread_id!r} says {count} messages and the file holds "
                f"{plan.last_seq[thread_id]}; the file was cut short or edited: export it "
                "again (nothing was imported)"
            )
    for key, heads in plan.heads.items():
        if heads != 1:
            raise ImportInputError(
                f"{path}: the log {key!r} has {heads} head generations, not one; export it "
                "again (nothing was imported)"
            )


def _validate(path: Path, resource_map: Mapping[str, str], progress: Progress | None) -> _Plan:
    plan = _Plan()
    for count, (number, record, item) in enumerate(_read(path), start=1):
        try:
            _check(plan, number, record, item)
        except ValueError as exc:
            raise ImportInputError(f"{path}, line {number}: {exc} (nothing was imported)") from None
        if progress is not None and count % PROGRESS_EVERY == 0:
            progress("validated", count)
    _finish(plan, path)
    unknown = set(resource_map) - set(plan.threads.values()) - plan.resources
    unknown -= {k.partition(":")[2] for k in plan.heads if k.startswith("resource:")}
    if unknown:
        raise ImportInputError(
            f"--resource-map names {sorted(unknown)}, which the file does not hold; give the "
            "file's own resource ids (nothing was imported)"
        )
    return plan


Progress: TypeAlias = Callable[[str, int], None]
"""Called with the pass (``validated``, ``written``) and the records done, every
:data:`PROGRESS_EVERY` records."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Decision:
    """What of the import is left out, and what stored is replaced, for its conflicts."""

    skip_threads: frozenset[str] = frozenset()
    skip_keys: frozenset[str] = frozenset()
    skip_resources: frozenset[str] = frozenset()
    replace_threads: tuple[str, ...] = ()
    replace_keys: tuple[str, ...] = ()


def _named(values: Iterable[str]) -> str:
    listed = sorted(values)
    more = f" and {len(listed) - SHOWN} more" if len(listed) > SHOWN else ""
    return ", ".join(repr(v) for v in listed[:SHOWN]) + more


def _decide(conflicts: ImportConflicts, on_conflict: OnConflict) -> _Decision:
    if on_conflict == "refuse" and not conflicts.empty:
        found = [
            f"{what} {_named(ids)}"
            for what, ids in (
                ("threads", conflicts.threads),
                ("logs", conflicts.keys),
                ("resources", conflicts.resources),
                ("messages", [m for m, _ in conflicts.messages]),
            )
            if ids
        ]
        raise StoreError(
            f"the store holds these already: {'; '.join(found)}. Nothing was imported; choose "
            "--on-conflict skip (keep what is stored) or --on-conflict replace (erase it and "
            "import the file's), or move the import with --resource-map OLD=NEW"
        )
    threads = frozenset(conflicts.threads)
    elsewhere = [m for m, thread in conflicts.messages if thread not in threads]
    if elsewhere:
        raise StoreError(
            f"messages {_named(elsewhere)} are stored in threads the file does not hold; "
            "message ids are unique across a store, so neither skip nor replace can import "
            "them: delete those threads first (obsmem delete --thread ID). Nothing was imported"
        )
    if on_conflict == "skip":
        thread_keys = {record_key("thread", thread_id=t, resource_id=None) for t in threads}
        return _Decision(
            skip_threads=threads,
            skip_keys=frozenset(conflicts.keys) | thread_keys,
            skip_resources=frozenset(conflicts.resources),
        )
    return _Decision(replace_threads=conflicts.threads, replace_keys=conflicts.keys)


def _kept(item: Imported, decision: _Decision) -> bool:
    from ..messages import Message
    from ..records import Thread

    if isinstance(item, Thread):
        return item.id not in decision.skip_threads
    if isinstance(item, Message):
        return item.thread_id not in decision.skip_threads
    if isinstance(item, ImportedResource):
        return item.id not in decision.skip_resources
    return item.key not in decision.skip_keys


def _items(
    path: Path,
    resource_map: Mapping[str, str],
    decision: _Decision,
    progress: Progress | None,
) -> Iterator[Imported]:
    """The second pass: the file's items as they are stored, in its order."""
    for count, (_, _, item) in enumerate(_read(path), start=1):
        if progress is not None and count % PROGRESS_EVERY == 0:
            progress("written", count)
        if item is None:
            continue
        item = _map(item, resource_map)
        if _kept(item, decision):
            yield item


@contextlib.asynccontextmanager
async def _as_file(source: Source) -> AsyncGenerator[Path]:
    """The path of ``source``'s lines: its own path, or a private temporary file its records
    were spooled to (deleted afterwards)."""
    if isinstance(source, str | Path):
        yield Path(source)
        return
    directory = tempfile.mkdtemp(prefix="obsmem-import-")  # 0700
    path = Path(directory) / "records.jsonl"
    try:
        with open_private(str(path)) as out:
            if isinstance(source, AsyncIterable):
                async for record in source:
                    out.write(_line(record) + "\n")
            else:
                for record in source:
                    out.write(_line(record) + "\n")
        yield path
    finally:
        path.unlink(missing_ok=True)
        os.rmdir(directory)


def _line(record: Header | DataRecord | Mapping[str, Any]) -> str:
    if isinstance(record, BaseModel):
        return record.model_dump_json()
    return dumps(dict(record))


async def import_records(
    store: CoreStore,
    source: Source,
    *,
    dry_run: bool = False,
    on_conflict: OnConflict = "refuse",
    resource_map: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Validate all of ``source``, then write it in one transaction (nothing when
    ``dry_run``). ImportInputError for a bad line, StoreError for ids the store holds (unless
    ``on_conflict`` skips or replaces them); either way nothing is written."""
    if on_conflict not in ("refuse", "skip", "replace"):
        raise ImportInputError(f"on_conflict={on_conflict!r}: use 'refuse', 'skip' or 'replace'")
    target = require(store, TransferStore, "import")
    rmap = dict(resource_map or {})
    async with _as_file(source) as path:
        plan = await asyncio.to_thread(_validate, path, rmap, progress)
        conflicts = await target.find_import_conflicts(
            threads=sorted(plan.threads),
            keys=sorted({_mapped_key(k, rmap) for k in plan.heads}),
            resources=sorted({rmap.get(r, r) for r in plan.resources}),
            messages=plan.messages,
        )
        decision = _decide(conflicts, on_conflict)
        written = 0
        if not dry_run:
            written = await target.write_import(
                ImportWrite(
                    items=lambda: _items(path, rmap, decision, progress),
                    replace_threads=decision.replace_threads,
                    replace_keys=decision.replace_keys,
                    records=sum(plan.counts.values()),
                )
            )
    return ImportReport(
        counts=plan.counts,
        written=written,
        dry_run=dry_run,
        skipped_threads=tuple(sorted(decision.skip_threads)),
        replaced_threads=decision.replace_threads,
        replaced_keys=decision.replace_keys,
        skipped_keys=tuple(sorted(decision.skip_keys)),
        skipped_resources=tuple(sorted(decision.skip_resources)),
    )
