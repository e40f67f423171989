"""PostgresStore: the store for services with several workers.

psycopg 3 (async) with a connection pool; each flow runs as libpq pipelines, one network round
trip a statement or batch (:mod:`obsmem.stores.pg_pipeline`). Every store method is one flow
(:mod:`obsmem.stores.flows`, the same statements the SQLite store runs) inside one transaction
that locks the rows it changes first (``SELECT ... FOR UPDATE``: the thread when appending
messages or merging metadata, the record for every memory transition), re-reads them, checks
the version the caller read and applies the pure transition. Workers share nothing but the
database: a worker that loses a race sees the new version after the lock and gets a
ConflictError carrying the current head.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import MissingExtraError, StoreError
from ..messages import utcnow
from . import flows
from . import schema as sql
from .codec import dt_to_text
from .flows import Batch, Call, Flow, Op, Rows
from .sqlstore import SQLStore

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

__all__ = ["PostgresStore"]

BULK_SECONDS_PER_RECORD = 0.001
"""The time a bulk write (an import) is allowed per record, beyond ``call_timeout``."""

T = TypeVar("T")
log = logging.getLogger("obsmem")
_MIGRATION_LOCK = 0x6F62736D656D  # "obsmem": one process migrates at a time


def _pg(op: Op) -> str:
    return op.locking_sql().replace("?", "%s")


async def _execute(conn: Any, op: Op) -> Rows:
    if op.script:  # no parameters: the simple protocol, which takes several statements
        await conn.execute(op.sql)
        return []
    if op.many:
        async with conn.cursor() as cur:
            await cur.executemany(_pg(op), op.params)
        return []
    cur = await conn.execute(_pg(op), op.params)
    if cur.description is None:
        return []
    return [tuple(r) for r in await cur.fetchall()]


async def _drive_within(conn: Any, flow: Flow[T]) -> T:
    """Run ``flow`` on ``conn`` inside the caller's transaction, statement by statement (the
    migrations)."""
    try:
        item = next(flow)
        while True:
            if isinstance(item, Batch):
                item = flow.send([await _execute(conn, op) for op in item.ops])
            else:
                item = flow.send(await _execute(conn, item))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


@functools.cache
def _lifo_pool(base: type[AsyncConnectionPool[Any]]) -> type[AsyncConnectionPool[Any]]:
    """psycopg's pool, handing out the connection given back last first (it hands them out
    in turn): calls one after another then run on one connection whose server process is
    warm, about 0.1 ms a turn faster on loopback than taking turns between two, and the others
    stay idle until calls overlap (as SQLAlchemy's ``use_lifo``). It reorders the pool's idle
    deque after psycopg added a connection to it; a psycopg_pool without that deque keeps its
    own order (``test_postgres_pipeline.py`` checks which one runs)."""
    if not callable(getattr(base, "_add_to_pool", None)):
        return base

    class LifoPool(base):  # type: ignore[valid-type,misc]
        async def _add_to_pool(self, conn: Any) -> None:
            await super()._add_to_pool(conn)  # pyright: ignore[reportAttributeAccessIssue]
            idle = getattr(self, "_pool", None)  # no await since: nothing else ran
            if isinstance(idle, collections.deque) and len(idle) > 1 and idle[-1] is conn:
                idle.rotate(1)  # to the front, where the next getconn takes from

    return LifoPool


def _where(dsn: str) -> str:
    """``host:port/database`` of ``dsn`` for messages and logs: never its user or password,
    whichever form it is written in (a URL, or ``key=value`` words)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(dsn)
    except Exception:  # not a DSN psycopg reads: the call that uses it will say so
        return "?"
    host = str(info.get("host") or "localhost")
    port = f":{info['port']}" if info.get("port") else ""
    return f"{host}{port}/{info.get('dbname') or ''}"


class _PostgresDriver:
    def __init__(
        self,
        dsn: str,
        *,
        min_size: int,
        max_size: int,
        timeout: float,
        call_timeout: float,
        read_only: bool = False,
    ) -> None:
        try:
            from psycopg_pool import AsyncConnectionPool, PoolTimeout  # needs psycopg itself

            from . import pg_pipeline
        except ImportError as exc:
            raise MissingExtraError("PostgreSQL storage", "postgres", package="psycopg") from exc
        from psycopg import NotSupportedError, capabilities

        try:
            capabilities.has_pipeline(check=True)
        except NotSupportedError as exc:  # psycopg on a system libpq older than 14
            raise StoreError(
                f"PostgresStore sends each transaction as one pipeline, and {exc}; install "
                'psycopg with its own libpq: pip install "psycopg[binary]"'
            ) from exc
        self._drive = pg_pipeline.drive
        self._may_be_closed = pg_pipeline.may_be_closed
        self._ping = pg_pipeline.ping
        self.dsn = dsn
        self.timeout = timeout
        self.call_timeout = call_timeout
        self.name = f"PostgresStore({_where(dsn)!r})"
        self.read_only = read_only
        # Read-only: every transaction of every connection is READ ONLY (the server refuses
        # writes), and nothing is migrated or created.
        # Autocommit: the flows' transactions are delimited by ``pg_pipeline.drive``, in the same
        # round trips as their statements.
        # prepare_threshold=None: psycopg prepares nothing itself (the driver prepares its own
        # statements, and psycopg's ROLLBACK would deallocate them all).
        kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": None}
        if read_only:
            kwargs["options"] = "-c default_transaction_read_only=on"
        self._pool: AsyncConnectionPool[Any] = _lifo_pool(AsyncConnectionPool)(
            dsn, min_size=min_size, max_size=max_size, open=False, kwargs=kwargs
        )
        self._pool_timeout = PoolTimeout
        self._pool_opened = False
        self._ready = False
        self._ready_lock = asyncio.Lock()
        self._closed = False
        self._culling: asyncio.Future[None] | None = None
        self._closed_found = 0  # pooled connections found closed, for the culling's warning
        self.pgvector = False
        self.jobs = True

    async def _prepare(self) -> AsyncConnectionPool[Any]:
        """Open the pool and migrate, once; a failed attempt is tried again on the next call."""
        if self._closed:
            raise StoreError(f"{self.name} was closed")
        if self._ready:
            return self._pool
        async with self._ready_lock:
            if not self._ready:
                if not self._pool_opened:
                    await self._pool.open()
                    self._pool_opened = True
                async with self._connection() as conn, conn.transaction():
                    if self.read_only:
                        await _check_version(conn, self.name)
                    else:
                        await _migrate(conn, self.name)
                        self.pgvector = await _enable_pgvector(conn)
                self._ready = True
        return self._pool

    async def run(self, call: Call[T]) -> T:
        limit = self._timeout_for(call.records)
        try:
            await self._prepare()
            conn = await self._getconn()
            try:
                async with asyncio.timeout(limit):
                    return await self._drive(conn, call.make, write=call.write)
            finally:
                await self._pool.putconn(conn)
        except StoreError:
            raise
        except TimeoutError as exc:  # cut off: its connection was closed, the pool opens another
            raise StoreError(
                f"{self.name}: no answer from PostgreSQL within {limit:g} s (the "
                "server or the network stopped answering); the call was given up and its "
                "connection dropped, the next call opens another"
            ) from exc
        except Exception as exc:
            raise StoreError(f"PostgreSQL error on {self.name}: {exc}") from exc

    def _timeout_for(self, records: int) -> float:
        """``call_timeout``, plus a millisecond per record of a bulk write (an import of 100k
        messages takes about 17 s on loopback: the allowance is several times that)."""
        return self.call_timeout + records * BULK_SECONDS_PER_RECORD

    async def _getconn(self) -> Any:
        """A pooled connection within ``timeout`` seconds, or StoreError saying what to check.
        (Taken and given back by hand: the pool's context manager also runs psycopg's
        connection exit, a commit that cost a turn about 0.07 ms.)

        Never one the server closed while it sat in the pool (a restart ends them all): each is
        looked at before use without a round trip (``pg_pipeline.may_be_closed``: its socket
        has the server's farewell to read), and only one that may be closed is pinged; a closed
        one is given back (the pool opens another), the pool's other idle ones are checked at
        once, and the call takes another, with no pause in between. A connection that breaks
        after that look (the farewell not arrived yet, or a restart during the call) fails its
        call with StoreError, and the call is not run again: a batch that is a whole
        transaction may have been committed before the answer was lost."""
        deadline = time.monotonic() + self.timeout
        while True:
            conn = await self._take(deadline)
            if not self._may_be_closed(conn):
                return conn
            try:
                answered = await self._answers(conn, deadline)
            except BaseException:
                await self._pool.putconn(conn)
                raise
            if answered:
                return conn
            await self._pool.putconn(conn)  # closed: the pool replaces it
            if answered is False:
                await self._cull_closed(deadline)

    async def _take(self, deadline: float) -> Any:
        try:
            return await self._pool.getconn(timeout=deadline - time.monotonic())
        except self._pool_timeout as exc:
            raise StoreError(
                f"{self.name}: no connection to PostgreSQL within {self.timeout:g} s; is the "
                "server running and the DSN right (host, port, database, user, password)? "
                f"The next call tries again. ({exc})"
            ) from exc

    async def _answers(self, conn: Any, deadline: float) -> bool | None:
        """Ping ``conn`` within the time left to get a connection: True when it answered,
        False when it is closed (it is now), None when it gave no answer in time (closed too)."""
        try:
            async with asyncio.timeout(min(self.call_timeout, deadline - time.monotonic())):
                await self._ping(conn)
        except TimeoutError:
            answered = None
        except Exception:
            answered = False
        else:
            return True
        if not conn.closed:
            await conn.close()
        return answered

    async def _cull_closed(self, deadline: float) -> None:
        """A pooled connection turned out closed by the server: check the pool's other idle
        connections now (psycopg_pool's ``check``: the closed ones are replaced), once for the
        calls that found one meanwhile, and wait for it within the time left."""
        self._closed_found += 1
        if self._culling is None:
            self._culling = asyncio.ensure_future(self._cull())
        # A task: a call cancelled meanwhile leaves the check to finish (psycopg_pool's check
        # holds the idle connections while it runs).
        await asyncio.wait({self._culling}, timeout=max(0.0, deadline - time.monotonic()))

    async def _cull(self) -> None:
        lost = 0
        try:
            before = self._pool.get_stats().get("connections_lost", 0)
            await self._pool.check()
            lost = self._pool.get_stats().get("connections_lost", 0) - before
        except Exception:  # a psycopg_pool without check: they are replaced as calls meet them
            pass
        finally:
            self._culling = None
        found, self._closed_found = self._closed_found + max(0, lost), 0
        log.warning(
            "%s: PostgreSQL had closed %d pooled connection%s (a server restart?); found "
            "before use and replaced with new ones",
            self.name,
            found,
            "" if found == 1 else "s",
        )

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncGenerator[Any]:
        conn = await self._getconn()
        try:
            yield conn
        finally:
            await self._pool.putconn(conn)

    async def schema_version(self) -> int:
        def read(_: bool) -> Flow[int]:
            rows = yield Op("SELECT max(version) FROM obsmem_schema")
            return int(rows[0][0] or 0)

        return await self.run(Call(read, write=False))

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        culling = self._culling
        if culling is not None:
            await asyncio.wait({culling}, timeout=self.timeout)
            culling.cancel()  # not awaited: a check cut off may wait on its connection
        if self._pool_opened:
            await self._pool.close()


async def _migrate(conn: Any, name: str) -> None:
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS obsmem_schema (version INTEGER PRIMARY KEY, applied_at TEXT)"
    )
    row = await (await conn.execute("SELECT max(version) FROM obsmem_schema")).fetchone()
    version = int(row[0] or 0)
    if version > sql.SCHEMA_VERSION:
        raise StoreError(
            f"{name}: the database schema is version {version}, newer than this obsmem "
            f"understands ({sql.SCHEMA_VERSION}); upgrade obsmem (pip install -U obsmem)"
        )
    if version == sql.SCHEMA_VERSION:
        return
    new = await _drive_within(conn, flows.migrate(version, postgres=True))
    for number in range(version + 1, new + 1):
        await conn.execute(
            "INSERT INTO obsmem_schema (version, applied_at) VALUES (%s, %s)",
            (number, dt_to_text(utcnow())),
        )


async def _check_version(conn: Any, name: str) -> None:
    """StoreError unless the database holds this version's schema (read-only: nothing is
    migrated)."""
    found = await (await conn.execute("SELECT to_regclass('obsmem_schema')")).fetchone()
    version = 0
    if found[0] is not None:
        row = await (await conn.execute("SELECT max(version) FROM obsmem_schema")).fetchone()
        version = int(row[0] or 0)
    if version == sql.SCHEMA_VERSION:
        return
    if version == 0:
        raise StoreError(f"{name}: not an obsmem database (it has no obsmem schema)")
    raise StoreError(
        f"{name}: the database schema is version {version}, "
        + (
            f"newer than this obsmem understands ({sql.SCHEMA_VERSION}); upgrade obsmem"
            if version > sql.SCHEMA_VERSION
            else f"older than this obsmem's ({sql.SCHEMA_VERSION}); open it once for writing "
            "(any obsmem command that stores) to upgrade it"
        )
    )


async def _enable_pgvector(conn: Any) -> bool:
    """Use pgvector when the server has it (and we may create it); client-side scoring if not."""
    cur = await conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    if await cur.fetchone() is None:
        return False
    try:
        async with conn.transaction():  # a savepoint: a refusal leaves the outer work intact
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            await conn.execute(sql.CREATE_VECTOR_TABLE)
    except Exception:
        return False
    return True


class PostgresStore(SQLStore):
    """Threads, messages and memory state in PostgreSQL.

    ``PostgresStore("postgresql://user@host/db")``; the schema is created on first use. Needs
    ``pip install "obsmem[postgres]"``.
    """

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
        call_timeout: float = 60.0,
        read_only: bool = False,
    ) -> None:
        """``timeout``: seconds to wait for a connection before a call fails with
        StoreError (the pool keeps trying to connect in the background). ``call_timeout``:
        seconds a call waits for PostgreSQL's answer before it fails with StoreError and drops
        its connection (a server or network that stopped answering without closing it).
        ``read_only``: every transaction is READ ONLY and the schema is checked, never created
        or migrated."""
        self.dsn = dsn
        self.read_only = read_only
        if not call_timeout > 0:
            raise ValueError(
                f"PostgresStore(call_timeout={call_timeout!r}): give the seconds a call may wait "
                "for PostgreSQL's answer, a number above 0 (default 60)"
            )
        self._pg = _PostgresDriver(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            call_timeout=call_timeout,
            read_only=read_only,
        )
        super().__init__(self._pg)

    def __repr__(self) -> str:
        return self._pg.name

    @property
    def queue_dsn(self) -> str:
        """Where ``background="queue"`` keeps its jobs: this database (its tables are created
        by obsmem's migrations)."""
        return self.dsn

    @property
    def uses_pgvector(self) -> bool:
        """True once the store found the pgvector extension: search then ranks in SQL."""
        return self._pg.pgvector
