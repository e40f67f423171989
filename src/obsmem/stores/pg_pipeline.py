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
import select
from collections.abc import Callable
from typing import Any, TypeVar

from psycopg import errors as pg_errors
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import ConnStatus, ExecStatus, PipelineStatus, TransactionStatus

from .flows import Batch, Flow, NeedsWrite, Op, Rows

__all__ = ["drive", "may_be_closed", "ping"]

T = TypeVar("T")
_TEXT = PyFormat.TEXT
_COMMAND_OK, _TUPLES_OK, _FATAL, _SYNC = (
    ExecStatus.COMMAND_OK,
    ExecStatus.TUPLES_OK,
    ExecStatus.FATAL_ERROR,
    ExecStatus.PIPELINE_SYNC,
)
_IDLE = TransactionStatus.IDLE
_OK = ConnStatus.OK
_READABLE, _WRITABLE = 1, 2
_POLL = getattr(select, "poll", None)  # not on Windows: select() there


_STALE = frozenset({"26000", "42P05", "0A000"})
"""SQLSTATEs that say the connection's prepared statements are not what the driver holds: one
is gone (its session was reset, by a pooler or a ``DEALLOCATE``), one exists already, or a
schema change invalidated one's plan ("cached plan must not change result type")."""

MAX_PREPARED = 256
"""Most statements kept prepared on one connection: past that, the next round trip deallocates
them all first and prepares again what it uses (a server process keeps each one's plan)."""


class _Session:
    """What the driver keeps with one connection (as its ``_obsmem_session``: it goes with the
    connection): psycopg's adapters for its parameters and rows, and its prepared statements."""

    __slots__ = ("adapt", "names", "reset")

    def __init__(self, conn: Any) -> None:
        self.adapt = Transformer.from_context(conn)  # the connection's types and encoding
        self.names: set[bytes] = set()
        self.reset = False
        """Deallocate every statement at the start of the next transaction (the names are
        forgotten already)."""

    def forget(self) -> None:
        self.names.clear()
        self.reset = True


def _session(conn: Any) -> _Session:
    session: _Session | None = getattr(conn, "_obsmem_session", None)
    if session is None:
        session = _Session(conn)
        conn._obsmem_session = session
    return session


class _Stale(Exception):
    """The connection's prepared statements were not what the driver held (it has forgotten
    them now); the transaction that met it was rolled back whole, so its flow may run again."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@functools.lru_cache(maxsize=512)
def _named(statement: str, lock: bool, lock_of: str) -> tuple[bytes, bytes]:
    """A statement's prepared name, and its text (with its ``FOR UPDATE``) with numbered
    parameters."""
    statement = Op(statement, lock=lock, lock_of=lock_of).locking_sql()
    name = "obsmem_" + hashlib.blake2b(statement.encode(), digest_size=8).hexdigest()
    parts = statement.split("?")
    numbered = parts[0] + "".join(f"${i}{part}" for i, part in enumerate(parts[1:], start=1))
    return name.encode(), numbered.encode()


async def drive(conn: Any, make: Callable[[bool], Flow[T]], *, write: bool) -> T:
    """Run the flow ``make(write)`` in a transaction on ``conn``; when it raises
    :class:`~obsmem.stores.flows.NeedsWrite`, ``make(True)``. When the connection's prepared
    statements turn out not to be what the driver held (a pooler reset the session, a schema
    change invalidated a plan) before anything of the flow was committed, the flow runs once
    more with its statements prepared anew."""
    try:
        return await _drive_or_write(conn, make, write)
    except _Stale:
        pass
    try:
        return await _drive_or_write(conn, make, write)
    except _Stale as again:
        raise again.error from None


async def _drive_or_write(conn: Any, make: Callable[[bool], Flow[T]], write: bool) -> T:
    try:
        return await _drive(conn, make(write))
    except NeedsWrite:
        return await _drive(conn, make(True))


async def _drive(conn: Any, flow: Flow[T]) -> T:
    """Run ``flow`` in a transaction on ``conn`` (in autocommit mode: the transaction is
    delimited here). Each statement, or each batch, is one network round trip: a batch that
    ends the transaction and started it is a transaction by itself; otherwise BEGIN goes before
    the first and COMMIT after the one that ends it. A flow that goes on after such a batch
    starts a new transaction; one that ends without one sends its COMMIT alone; one that raises
    is rolled back."""
    in_transaction = committed = False
    try:
        item = next(flow)
        while True:
            ops = item.ops if isinstance(item, Batch) else (item,)
            ends = isinstance(item, Batch) and item.end
            results = await _send(
                conn, ops, begin=not in_transaction, end=_COMMIT if ends else None
            )
            in_transaction, committed = not ends, committed or ends
            item = flow.send(results if isinstance(item, Batch) else results[0])
    except StopIteration as done:
        if in_transaction:
            await _send(conn, (), begin=False, end=_COMMIT)
        return done.value  # type: ignore[no-any-return]
    except BaseException as exc:
        if not conn.closed and conn.pgconn.transaction_status != _IDLE:
            with contextlib.suppress(Exception):
                await _send(conn, (), begin=False, end=_ROLLBACK)
        if isinstance(exc, _Stale) and committed:  # part of the flow is in: not to run again
            raise exc.error from None
        raise


_COMMIT, _ROLLBACK = b"COMMIT", b"ROLLBACK"


async def _send(conn: Any, ops: tuple[Op, ...], *, begin: bool, end: bytes | None) -> list[Rows]:
    """Run ``ops`` in one network round trip; each op's rows.

    They go as one pipeline (libpq's pipeline mode, on the connection psycopg opened): each
    statement is prepared once per connection (its Parse goes ahead of its first use) and runs
    with its parameters bound by the server, so nothing is quoted into SQL text and the server
    plans it once. A batch that is the whole transaction (``begin``, and ``end`` is COMMIT)
    sends neither BEGIN nor COMMIT: everything up to a pipeline's sync is one transaction,
    committed at the sync, or rolled back whole when a statement (or the commit) fails.
    Otherwise BEGIN goes in front when asked and ``end`` (COMMIT or ROLLBACK) behind. A failed
    statement's error is raised once the pipeline is read to its end, so the connection is ready
    for the next one; one whose exchange was cut off (cancelled, or the server gone) is closed,
    and the pool replaces it."""
    session = _session(conn)
    adapt = session.adapt
    # Everything is dumped before anything is sent: a value psycopg refuses (a NUL in text)
    # fails the call with the connection untouched.
    statements: list[tuple[int, bytes, bytes, list[Any] | None]] = []
    for index, op in enumerate(ops):
        name, numbered = _named(op.sql, op.lock, op.lock_of)
        for row in op.params if op.many else (op.params,):
            params = list(adapt.dump_sequence(row, [_TEXT] * len(row))) if row else None
            statements.append((index, name, numbered, params))
    if begin and len(session.names) >= MAX_PREPARED:
        session.forget()
    whole = begin and end == _COMMIT
    pg = conn.pgconn
    # Per result: the op's index, the name of a statement being prepared (b"": DEALLOCATE ALL).
    expected: list[int | bytes | None] = []
    preparing: set[bytes] = set()
    pg.enter_pipeline_mode()
    try:
        if begin and session.reset:  # at a transaction's start, never inside a failed one
            pg.send_query_params(b"DEALLOCATE ALL", None)
            expected.append(b"")
        if begin and not whole:
            pg.send_query_params(b"BEGIN", None)
            expected.append(None)
        for index, name, numbered, params in statements:
            if name not in session.names and name not in preparing:
                pg.send_prepare(name, numbered)
                expected.append(name)
                preparing.add(name)
            pg.send_query_prepared(name, params)
            expected.append(index)
        if end is not None and not whole:
            pg.send_query_params(end, None)
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
        if error.sqlstate in _STALE:
            session.forget()
            raise _Stale(error)
        raise error
    return results


def may_be_closed(conn: Any) -> bool:
    """Whether the pooled ``conn`` may have been closed by the server, told without a round
    trip: an idle connection's socket has nothing to read unless the server sent something
    unasked, as a server ending the session does (its termination notice, then the end of the
    stream: a restart, an administrator, an idle timeout). Something else unasked (a notice)
    makes it a false alarm, which :func:`ping` clears."""
    pg = conn.pgconn
    if pg.status != _OK or pg.transaction_status != _IDLE:
        return True
    try:
        fd = pg.socket
        if _POLL is not None:
            poll = _POLL()
            poll.register(fd, select.POLLIN)
            return bool(poll.poll(0))  # readable, or hung up, or failed
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError, pg_errors.Error):  # no socket any more
        return True


async def ping(conn: Any) -> None:
    """One round trip that asks nothing (a pipeline's sync alone); raises unless ``conn`` is
    open, idle and answered. Cut off (a timeout), the connection is closed."""
    if conn.pgconn.status != _OK:
        raise pg_errors.OperationalError("the connection is closed")
    await _send(conn, (), begin=False, end=None)
    if conn.pgconn.transaction_status != _IDLE:
        raise pg_errors.OperationalError("the connection is not idle")


async def _flush(pg: Any) -> None:
    """Send what libpq holds; while the socket is full, read what the server already answers
    (a large pipeline would otherwise leave both ends waiting to write)."""
    while pg.flush():
        if await _ready(pg.socket, write=True) & _READABLE:
            pg.consume_input()


async def _read_pipeline(
    pg: Any,
    expected: list[int | bytes | None],
    count: int,
    session: _Session,
) -> tuple[list[Rows], pg_errors.Error | None]:
    """Read a pipeline's results to its sync: each op's rows, and the first error (a
    statement's, or the implicit commit's at the sync); the names it prepared are kept, and a
    DEALLOCATE ALL that ran is done with."""
    adapt = session.adapt
    results: list[Rows] = [[] for _ in range(count)]
    error: pg_errors.Error | None = None
    position = 0
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
        # Past the statements sent: the implicit transaction's commit failing at the sync (a
        # deferred constraint, a serialization failure).
        what = expected[position] if position < len(expected) else None
        position += 1
        if status == _FATAL:
            error = error or pg_errors.error_from_result(result, encoding=adapt.encoding)
        elif isinstance(what, bytes):
            if status == _COMMAND_OK and what:  # prepared: kept even when the transaction fails
                session.names.add(what)
            elif status == _COMMAND_OK:  # the DEALLOCATE ALL in front
                session.reset = False
        elif what is not None and status == _TUPLES_OK:
            adapt.set_pgresult(result)
            results[what].extend(adapt.load_rows(0, result.ntuples, tuple))
    adapt.set_pgresult(None)  # the session keeps no answer (a 5 MB one) past its round trip
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
