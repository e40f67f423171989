"""How the PostgreSQL driver runs a flow: each statement or batch as one libpq pipeline.

Imported by :class:`~obsmem.stores.postgres.PostgresStore` when one is made (it needs psycopg,
the ``postgres`` extra). A flow's transaction is delimited here on a connection in autocommit
mode, so that BEGIN and COMMIT travel with the statements: a plain turn's load is one network
round trip (``tests/engine/test_wire_round_trips.py`` counts them on the wire).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import weakref
from dataclasses import dataclass
from typing import Any, TypeVar

from psycopg import abc
from psycopg import errors as pg_errors
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import ExecStatus, PipelineStatus

from .flows import Batch, Flow, Op, Rows

__all__ = ["drive"]

T = TypeVar("T")
_TEXT = PyFormat.TEXT
_COMMAND_OK, _TUPLES_OK, _FATAL, _SYNC = (
    ExecStatus.COMMAND_OK,
    ExecStatus.TUPLES_OK,
    ExecStatus.FATAL_ERROR,
    ExecStatus.PIPELINE_SYNC,
)
_READABLE, _WRITABLE = 1, 2


@dataclass(slots=True)
class _Session:
    """What the driver keeps per connection: the names of the statements prepared on it, and
    psycopg's adapters for its parameters and rows (the connection's own types and encoding)."""

    prepared: set[bytes]
    adapt: abc.Transformer


_SESSIONS: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()


def _session(conn: Any) -> _Session:
    session = _SESSIONS.get(conn)
    if session is None:
        session = _SESSIONS[conn] = _Session(set(), Transformer.from_context(conn))
    return session


@functools.lru_cache(maxsize=512)
def _named(statement: str) -> tuple[bytes, bytes]:
    """A statement's prepared name, and its text with numbered parameters."""
    name = "obsmem_" + hashlib.blake2b(statement.encode(), digest_size=8).hexdigest()
    parts = statement.split("?")
    numbered = parts[0] + "".join(f"${i}{part}" for i, part in enumerate(parts[1:], start=1))
    return name.encode(), numbered.encode()


async def _send(conn: Any, ops: tuple[Op, ...], *, begin: bool, commit: bool) -> list[Rows]:
    """Run ``ops`` in one network round trip; each op's rows.

    They go as one pipeline (libpq's pipeline mode, on the connection psycopg opened): each
    statement is prepared once per connection (its Parse goes ahead of its first use) and runs
    with its parameters bound by the server, so nothing is quoted into SQL text and the server
    plans it once. A batch that is the whole transaction (``begin`` and ``commit``) sends neither
    BEGIN nor COMMIT: everything up to a pipeline's sync is one transaction, committed at the
    sync, or rolled back whole when a statement fails. Otherwise BEGIN goes in front when asked
    and COMMIT behind. A failed statement's error is raised once the pipeline is read to its
    end, so the connection is ready for the ROLLBACK; one whose exchange was cut off (cancelled,
    or the server gone) is closed, and the pool replaces it."""
    pg = conn.pgconn
    session = _session(conn)
    dump = session.adapt.dump_sequence
    expected: list[int | bytes | None] = []  # per result: the op's index, a name being prepared
    preparing: set[bytes] = set()
    whole = begin and commit
    pg.enter_pipeline_mode()
    try:
        if begin and not whole:
            pg.send_query_params(b"BEGIN", None)
            expected.append(None)
        for index, op in enumerate(ops):
            name, numbered = _named(op.locking_sql())
            if name not in session.prepared and name not in preparing:
                pg.send_prepare(name, numbered)
                expected.append(name)
                preparing.add(name)
            for row in op.params if op.many else (op.params,):
                pg.send_query_prepared(name, dump(row, [_TEXT] * len(row)) if row else None)
                expected.append(index)
        if commit and not whole:
            pg.send_query_params(b"COMMIT", None)
            expected.append(None)
        pg.pipeline_sync()
        await _flush(pg)
        results, error = await _read_pipeline(pg, expected, len(ops), session)
        pg.exit_pipeline_mode()
    except BaseException:
        if pg.pipeline_status != PipelineStatus.OFF:  # cut off mid-exchange: not to be used again
            pg.finish()
        raise
    if error is not None:
        raise error
    return results


async def _flush(pg: Any) -> None:
    """Send what libpq holds; while the socket is full, read what the server already answers
    (a large pipeline would otherwise leave both ends waiting to write)."""
    while pg.flush():
        if await _ready(pg.socket, write=True) & _READABLE:
            pg.consume_input()


async def _read_pipeline(
    pg: Any, expected: list[int | bytes | None], count: int, session: _Session
) -> tuple[list[Rows], Exception | None]:
    """Read a pipeline's results to its sync: each op's rows, and the first failed statement's
    error; the names it prepared are kept."""
    results: list[Rows] = [[] for _ in range(count)]
    error: Exception | None = None
    position = 0
    adapt = session.adapt
    ended = False  # the last result read ended a statement's results
    while True:
        while pg.is_busy():
            await _ready(pg.socket, write=False)
            pg.consume_input()
        result = pg.get_result()
        if result is None:  # the end of one statement's results
            if ended:  # nothing more will come, yet no sync came: the connection broke
                raise pg_errors.OperationalError(
                    "the connection ended in the middle of a pipeline: "
                    + pg.get_error_message(adapt.encoding)
                )
            ended = True
            continue
        ended = False
        status = result.status
        if status == _SYNC:
            break
        what = expected[position]
        position += 1
        if status == _FATAL:
            error = error or pg_errors.error_from_result(result, encoding=adapt.encoding)
        elif isinstance(what, bytes):
            if status == _COMMAND_OK:  # kept even when the transaction fails: not transactional
                session.prepared.add(what)
        elif what is not None and status == _TUPLES_OK:
            adapt.set_pgresult(result)
            results[what].extend(adapt.load_rows(0, result.ntuples, tuple))
    return results, error


async def _ready(fd: int, *, write: bool) -> int:
    """Wait until ``fd`` is readable (or, with ``write``, readable or writable); which it is."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()

    def wake(state: int) -> None:
        if not future.done():
            future.set_result(state)

    loop.add_reader(fd, wake, _READABLE)
    if write:
        loop.add_writer(fd, wake, _WRITABLE)
    try:
        return await future
    finally:
        loop.remove_reader(fd)
        if write:
            loop.remove_writer(fd)


async def drive(conn: Any, flow: Flow[T]) -> T:
    """Run ``flow`` in a transaction on ``conn`` (in autocommit mode: the transaction is
    delimited here). Each statement, or each batch, is one network round trip: a batch that
    ends the transaction and started it is a transaction by itself; otherwise BEGIN goes before
    the first and COMMIT after the one that ends it. A flow that goes on after such a batch
    starts a new transaction; one that ends without one sends its COMMIT alone; one that raises
    is rolled back."""
    in_transaction = False
    try:
        item = next(flow)
        while True:
            ops = item.ops if isinstance(item, Batch) else (item,)
            ends = isinstance(item, Batch) and item.end
            results = await _send(conn, ops, begin=not in_transaction, commit=ends)
            in_transaction = not ends
            item = flow.send(results if isinstance(item, Batch) else results[0])
    except StopIteration as done:
        if in_transaction:
            await _send(conn, (), begin=False, commit=True)
        return done.value  # type: ignore[no-any-return]
    except BaseException:
        if not conn.closed:
            with contextlib.suppress(Exception):
                await conn.rollback()  # nothing when the transaction is already over
        raise
