"""The schema of the SQL stores as an ordered list of migrations, and the SQL they run.

The same migrations and statements serve SQLite and PostgreSQL (statements are written with
``?`` placeholders; the PostgreSQL driver turns them into psycopg's ``%s``). A migration is a
script of DDL statements or a flow (:mod:`obsmem.stores.flows`) when it moves data. Migrations
only ever append to the list; a released migration is never edited. SQLite counts applied
migrations in ``PRAGMA user_version``, PostgreSQL in the ``obsmem_schema`` table.
"""

from __future__ import annotations

__all__ = ["MIGRATION_SCRIPTS", "SCHEMA_VERSION", "statements"]


MIGRATION_SCRIPTS: list[str] = [
    # 1: threads, messages, records, chunks, observation groups
    """
        CREATE TABLE threads (
            id            TEXT PRIMARY KEY,
            resource_id   TEXT NOT NULL,
            title         TEXT,
            metadata      TEXT NOT NULL DEFAULT '{}',
            message_count BIGINT NOT NULL DEFAULT 0,
            created_at    TEXT NOT NULL,
            updated_at    TEXT NOT NULL
        );
        CREATE INDEX threads_by_resource ON threads (resource_id, created_at);

        CREATE TABLE messages (
            id          TEXT PRIMARY KEY,
            thread_id   TEXT NOT NULL REFERENCES threads (id),
            resource_id TEXT NOT NULL,
            seq         BIGINT NOT NULL,
            role        TEXT NOT NULL,
            parts       TEXT NOT NULL,
            metadata    TEXT NOT NULL DEFAULT '{}',
            created_at  TEXT NOT NULL,
            UNIQUE (thread_id, seq)
        );
        CREATE INDEX messages_by_resource ON messages (resource_id, created_at);

        CREATE TABLE om_records (
            id                      TEXT PRIMARY KEY,
            key                     TEXT NOT NULL,
            scope                   TEXT NOT NULL,
            thread_id               TEXT,
            resource_id             TEXT,
            generation              BIGINT NOT NULL,
            origin                  TEXT NOT NULL,
            version                 BIGINT NOT NULL,
            observations            TEXT NOT NULL,
            observation_tokens      BIGINT NOT NULL,
            cursor                  TEXT NOT NULL,
            buffered_reflection     TEXT,
            pending_message_tokens  BIGINT NOT NULL,
            last_buffered_at_tokens BIGINT NOT NULL,
            total_tokens_observed   BIGINT NOT NULL,
            superseded_by           TEXT,
            metadata                TEXT NOT NULL,
            created_at              TEXT NOT NULL,
            updated_at              TEXT NOT NULL,
            UNIQUE (key, generation)
        );
        CREATE UNIQUE INDEX om_records_one_head ON om_records (key) WHERE superseded_by IS NULL;

        CREATE TABLE om_chunks (
            key      TEXT NOT NULL,
            position BIGINT NOT NULL,
            id       TEXT NOT NULL,
            cycle_id TEXT NOT NULL,
            data     TEXT NOT NULL,
            PRIMARY KEY (key, position),
            UNIQUE (key, cycle_id)
        );

        CREATE TABLE observation_groups (
            id           TEXT PRIMARY KEY,
            key          TEXT NOT NULL,
            resource_id  TEXT,
            thread_id    TEXT,
            cycle_id     TEXT NOT NULL,
            start_id     TEXT NOT NULL,
            end_id       TEXT NOT NULL,
            observations TEXT NOT NULL,
            ranges       TEXT NOT NULL,
            created_at   TEXT NOT NULL,
            metadata     TEXT NOT NULL
        );
        CREATE INDEX observation_groups_by_resource
            ON observation_groups (resource_id, thread_id, created_at);
        CREATE INDEX observation_groups_by_key ON observation_groups (key);
        """,
    # 2: resource metadata (working memory in resource scope)
    """
        CREATE TABLE resources (
            id         TEXT PRIMARY KEY,
            metadata   TEXT NOT NULL DEFAULT '{}',
            updated_at TEXT NOT NULL
        )
        """,
    # 3: embeddings of observation groups (semantic recall)
    """
        CREATE TABLE group_embeddings (
            group_id    TEXT PRIMARY KEY,
            key         TEXT NOT NULL,
            resource_id TEXT,
            thread_id   TEXT,
            observed_at TEXT NOT NULL,
            model       TEXT NOT NULL,
            dims        BIGINT NOT NULL,
            vector      BYTEA NOT NULL
        );
        CREATE INDEX group_embeddings_by_resource ON group_embeddings (resource_id, model)
        """,
    # 4: buffered chunks move into their head record's row (one row is the whole head, read
    #    and written in one statement); the columns and the index nothing used are dropped
    #    (every append paid for that index). The data step is the flow ``flows.migration_4``;
    #    this script runs after it.
    """
        DROP TABLE om_chunks;
        DROP INDEX messages_by_resource;
        ALTER TABLE om_records DROP COLUMN pending_message_tokens;
        ALTER TABLE om_records DROP COLUMN last_buffered_at_tokens;
        ALTER TABLE om_records DROP COLUMN metadata
        """,
    # 5: the cycle ledger, newest first per key (``threads`` holds each thread id hex-encoded
    #    between bars, so a thread's cycles are found with LIKE the same way on both databases)
    """
        CREATE TABLE om_cycles (
            cycle_id      TEXT PRIMARY KEY,
            key           TEXT NOT NULL,
            resource_id   TEXT NOT NULL,
            thread_ids    TEXT NOT NULL,
            threads       TEXT NOT NULL,
            kind          TEXT NOT NULL,
            outcome       TEXT NOT NULL,
            error         TEXT,
            started_at    TEXT NOT NULL,
            duration_ms   DOUBLE PRECISION NOT NULL,
            model         TEXT,
            input_tokens  BIGINT,
            output_tokens BIGINT,
            cost_usd      DOUBLE PRECISION,
            ranges        TEXT NOT NULL,
            generation    BIGINT,
            operation     TEXT NOT NULL
        );
        CREATE INDEX om_cycles_by_key ON om_cycles (key, started_at)
        """,
    # 6: who asked for a manual cycle (a revision's ``by``)
    """
        ALTER TABLE om_cycles ADD COLUMN requested_by TEXT
        """,
    # 7: a thread's incarnation (new each time a thread id is created, so work begun before the
    #    thread was deleted cannot write into a thread created again under the same id); the
    #    ledger found by resource, for erasing a resource
    """
        ALTER TABLE threads ADD COLUMN incarnation TEXT NOT NULL DEFAULT '';
        CREATE INDEX om_cycles_by_resource ON om_cycles (resource_id)
        """,
    # 8: what a cycle's model calls were shown and answered (JSON), kept for the newest cycles
    #    of a key only; read on its own (``SELECT_CYCLE_DETAIL``), never with the ledger
    """
        ALTER TABLE om_cycles ADD COLUMN detail TEXT
        """,
    # 9: the job queue of ``background="queue"`` (PostgreSQL only, ``POSTGRES_SCRIPTS``)
    "",
]
"""Migration ``n`` (1-based) is ``MIGRATION_SCRIPTS[n - 1]``; ``DATA_STEPS`` names the flows that
run before a script, in the same transaction."""

DATA_STEPS: dict[int, str] = {4: "migration_4"}

POSTGRES_SCRIPTS: dict[int, str] = {9: "procrastinate-3.10.0.sql"}
"""Migrations PostgreSQL runs besides the shared script: a file of :mod:`obsmem.queue`, run
whole (its functions hold semicolons). Migration 9 creates procrastinate 3.10's tables,
functions and triggers, copied from its ``schema.sql``: obsmem's migrations own the queue's
schema, and procrastinate's own migrator never runs (the ``queue`` extra pins 3.10.x; a later
procrastinate version comes with a migration that applies its migration files)."""


def postgres_script(number: int) -> str | None:
    """The whole SQL text PostgreSQL runs for migration ``number`` besides the shared one."""
    name = POSTGRES_SCRIPTS.get(number)
    if name is None:
        return None
    from importlib.resources import files

    return files("obsmem.queue").joinpath(name).read_text(encoding="utf-8")


def statements(script: str) -> list[str]:
    """The statements of a migration script, one by one."""
    return [s.strip() for s in script.split(";") if s.strip()]


SCHEMA_VERSION = len(MIGRATION_SCRIPTS)

RECORD_COLUMNS = (
    "id, key, scope, thread_id, resource_id, generation, origin, version, observations, "
    "observation_tokens, cursor, chunks, buffered_reflection, total_tokens_observed, "
    "superseded_by, created_at, updated_at"
)
MESSAGE_COLUMNS = "id, thread_id, resource_id, seq, role, parts, metadata, created_at"
THREAD_COLUMNS = (
    "id, resource_id, title, metadata, message_count, created_at, updated_at, incarnation"
)
GROUP_COLUMNS = (
    "id, key, resource_id, thread_id, cycle_id, start_id, end_id, observations, ranges, "
    "created_at, metadata"
)

SELECT_THREAD = f"SELECT {THREAD_COLUMNS} FROM threads WHERE id = ?"
SELECT_THREAD_AND_HEAD = (
    "SELECT "
    + ", ".join(f"t.{c.strip()}" for c in THREAD_COLUMNS.split(","))
    + ", "
    + ", ".join(f"r.{c.strip()}" for c in RECORD_COLUMNS.split(","))
    + " FROM threads t LEFT JOIN om_records r ON r.key = ? AND r.superseded_by IS NULL"
    " WHERE t.id = ?"
)
"""A thread and the head record of a key, in one statement (the record's columns are NULL when
the key has no head yet)."""
HEAVY_RECORD_COLUMNS = ("observations", "chunks", "buffered_reflection")
SELECT_THREAD_AND_KNOWN_HEAD = (
    "SELECT "
    + ", ".join(f"t.{c.strip()}" for c in THREAD_COLUMNS.split(","))
    + ", "
    + ", ".join(
        f"CASE WHEN r.id = ? AND r.version = ? THEN NULL ELSE r.{c} END"
        if c in HEAVY_RECORD_COLUMNS
        else f"r.{c}"
        for c in (c.strip() for c in RECORD_COLUMNS.split(","))
    )
    + " FROM threads t LEFT JOIN om_records r ON r.key = ? AND r.superseded_by IS NULL"
    " WHERE t.id = ?"
)
"""As ``SELECT_THREAD_AND_HEAD``, but the head's long columns are NULL when it is the record
(id, version) the caller already holds (parameters: that id and version once per long column,
then the key and the thread)."""
SELECT_THREADS_OF_RESOURCE = (
    f"SELECT {THREAD_COLUMNS} FROM threads WHERE resource_id = ? ORDER BY created_at, id"
)
SELECT_INCARNATIONS = "SELECT id, incarnation FROM threads WHERE id IN ({marks})"
SELECT_THREAD_COUNTS = "SELECT id, message_count FROM threads WHERE id IN ({marks})"
SELECT_RESOURCES = "SELECT DISTINCT resource_id FROM threads ORDER BY resource_id"
INSERT_THREAD = (
    f"INSERT INTO threads ({THREAD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO NOTHING"
)
UPDATE_THREAD = "UPDATE threads SET title = ?, metadata = ?, updated_at = ? WHERE id = ?"
UPDATE_THREAD_COUNT = "UPDATE threads SET message_count = ?, updated_at = ? WHERE id = ?"

SELECT_RESOURCE = "SELECT metadata FROM resources WHERE id = ?"


def insert_messages_at_end(n: int) -> str:
    """``n`` messages numbered on from the thread's count, in one statement; the parameters:
    per message its id, its number in the batch (1..n), role, parts, metadata and created_at,
    then the thread's id, resource and incarnation (NULL: any), the key of the head record and
    the batch's ids. It stores nothing unless the thread is the resource's (and of that
    incarnation), the key has a head, and none of the ids is stored yet, so a turn can send it
    with the reads it depends on (``load_flow.load``)."""
    rows = ", ".join("(?, CAST(? AS BIGINT), ?, ?, ?, ?)" for _ in range(n))
    ids = ", ".join("?" for _ in range(n))
    return (
        f"INSERT INTO messages ({MESSAGE_COLUMNS}) "
        "SELECT v.column1, t.id, t.resource_id, t.message_count + v.column2, v.column3, "
        f"v.column4, v.column5, v.column6 FROM (VALUES {rows}) AS v, threads t "
        "WHERE t.id = ? AND t.resource_id = ? "
        "AND t.incarnation = COALESCE(CAST(? AS TEXT), t.incarnation) "
        "AND EXISTS (SELECT 1 FROM om_records r WHERE r.key = ? AND r.superseded_by IS NULL) "
        f"AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.id IN ({ids}))"
    )


COUNT_APPENDED = (
    "UPDATE threads SET message_count = message_count + ?, updated_at = ? WHERE id = ? "
    "AND EXISTS (SELECT 1 FROM messages m WHERE m.id = ? AND m.thread_id = threads.id "
    "AND m.seq = threads.message_count + ?) RETURNING message_count"
)
"""The count after :func:`insert_messages_at_end` (parameters: n, updated_at, the thread's id,
the batch's last id, n): it changes the thread, and returns a row, only when that statement
stored the batch (its last message is then the one numbered count + n)."""

INSERT_RESOURCE = (
    "INSERT INTO resources (id, metadata, updated_at) VALUES (?, '{}', ?) "
    "ON CONFLICT (id) DO NOTHING"
)
UPDATE_RESOURCE = "UPDATE resources SET metadata = ?, updated_at = ? WHERE id = ?"

INSERT_MESSAGE = f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
SELECT_MESSAGES_BY_ID = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id IN ({{marks}})"
SELECT_MESSAGES_AFTER = (
    f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE thread_id = ? AND seq > ? ORDER BY seq"
)
SELECT_MESSAGES_BEFORE_APPENDED = (
    f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE thread_id = ? AND seq > ? "
    "AND seq <= (SELECT message_count FROM threads WHERE id = ?) - ? ORDER BY seq"
)
"""The messages after a seq, but not the last ``n`` (just appended; parameters: the thread, the
seq, the thread again, n)."""
SELECT_MESSAGES_BETWEEN = (
    f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE thread_id = ? AND seq > ? AND seq <= ? "
    "ORDER BY seq"
)
SELECT_LAST_REPLY = (
    "SELECT created_at FROM messages WHERE thread_id = ? AND role = 'assistant' "
    "ORDER BY seq DESC LIMIT 1"
)

SELECT_HEAD = f"SELECT {RECORD_COLUMNS} FROM om_records WHERE key = ? AND superseded_by IS NULL"
SELECT_RECORD = f"SELECT {RECORD_COLUMNS} FROM om_records WHERE id = ?"
SELECT_HISTORY = (
    f"SELECT {RECORD_COLUMNS} FROM om_records WHERE key = ? ORDER BY generation DESC "
    "LIMIT ? OFFSET ?"
)
INSERT_RECORD = (
    f"INSERT INTO om_records ({RECORD_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
UPDATE_RECORD = (
    "UPDATE om_records SET generation = ?, origin = ?, version = ?, observations = ?, "
    "observation_tokens = ?, cursor = ?, chunks = ?, buffered_reflection = ?, "
    "total_tokens_observed = ?, superseded_by = ?, updated_at = ? WHERE id = ?"
)
DELETE_RECORDS = "DELETE FROM om_records WHERE key = ?"

INSERT_GROUP = (
    f"INSERT INTO observation_groups ({GROUP_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_GROUPS = (
    f"SELECT {GROUP_COLUMNS} FROM observation_groups WHERE resource_id = ? ORDER BY created_at, id"
)
SELECT_GROUPS_OF_THREAD = (
    f"SELECT {GROUP_COLUMNS} FROM observation_groups WHERE resource_id = ? AND thread_id = ? "
    "ORDER BY created_at, id"
)
SELECT_GROUPS_BY_ID = (
    f"SELECT {GROUP_COLUMNS} FROM observation_groups WHERE resource_id = ? AND id IN ({{marks}})"
)
DELETE_GROUPS = "DELETE FROM observation_groups WHERE key = ?"

EMBEDDING_COLUMNS = "group_id, key, resource_id, thread_id, observed_at, model, dims, vector"
INSERT_EMBEDDING = (
    f"INSERT INTO group_embeddings ({EMBEDDING_COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, ?, ? "
    "WHERE EXISTS (SELECT 1 FROM observation_groups g WHERE g.id = ?) "
    "ON CONFLICT (group_id) DO UPDATE SET model = excluded.model, dims = excluded.dims, "
    "vector = excluded.vector"
)
"""Only for a group still stored (parameters: the row, then the group's id again)."""
SELECT_EMBEDDINGS = (
    "SELECT group_id, thread_id, observed_at, vector FROM group_embeddings "
    "WHERE resource_id = ? AND model = ?"
)
DELETE_EMBEDDINGS = "DELETE FROM group_embeddings WHERE key = ?"

# pgvector (PostgreSQL with the extension only)
CREATE_VECTOR_TABLE = (
    "CREATE TABLE IF NOT EXISTS group_vectors "
    "(group_id TEXT PRIMARY KEY, embedding vector NOT NULL)"
)
UPSERT_VECTOR = (
    "INSERT INTO group_vectors (group_id, embedding) SELECT ?, ?::vector "
    "WHERE EXISTS (SELECT 1 FROM group_embeddings e WHERE e.group_id = ?) "
    "ON CONFLICT (group_id) DO UPDATE SET embedding = excluded.embedding"
)
DELETE_VECTORS = (
    "DELETE FROM group_vectors WHERE group_id IN "
    "(SELECT group_id FROM group_embeddings WHERE key = ?)"
)
SEARCH_VECTORS = (
    "SELECT e.group_id, 1 - (v.embedding <=> ?::vector) FROM group_embeddings e "
    "JOIN group_vectors v ON v.group_id = e.group_id "
    "WHERE e.resource_id = ? AND e.model = ? AND e.dims = ?"
)

# the cycle ledger
CYCLE_COLUMNS = (
    "cycle_id, key, resource_id, thread_ids, threads, kind, outcome, error, started_at, "
    "duration_ms, model, input_tokens, output_tokens, cost_usd, ranges, generation, operation, "
    "requested_by"
)
INSERT_CYCLE = (
    f"INSERT INTO om_cycles ({CYCLE_COLUMNS}, detail) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (cycle_id) DO NOTHING"
)
PRUNE_CYCLES = (
    "DELETE FROM om_cycles WHERE key = ? AND started_at < (SELECT started_at FROM om_cycles "
    "WHERE key = ? ORDER BY started_at DESC LIMIT 1 OFFSET ?)"
)
"""Keep the newest ``n`` rows of a key (parameters: key, key, n - 1); rows that started at the
same instant as the ``n``-th are kept with it."""
PRUNE_CYCLE_DETAIL = (
    "UPDATE om_cycles SET detail = NULL WHERE key = ? AND detail IS NOT NULL AND started_at < "
    "(SELECT started_at FROM om_cycles WHERE key = ? ORDER BY started_at DESC LIMIT 1 OFFSET ?)"
)
"""Keep the detail of the newest ``n`` rows of a key (parameters as for ``PRUNE_CYCLES``)."""
DROP_CYCLE_DETAIL = "UPDATE om_cycles SET detail = NULL WHERE key = ? AND detail IS NOT NULL"
SELECT_CYCLE_DETAIL = "SELECT detail FROM om_cycles WHERE cycle_id = ?"
DELETE_ALL_CYCLES = "DELETE FROM om_cycles WHERE key = ?"
SELECT_CYCLES = f"SELECT {CYCLE_COLUMNS} FROM om_cycles WHERE key = ?"
"""Filters (``AND ...``), ``ORDER BY started_at DESC, cycle_id DESC`` and ``LIMIT`` follow."""

# migration 4's data step
SELECT_OLD_CHUNKS = "SELECT key, data FROM om_chunks ORDER BY key, position"
ADD_CHUNKS_COLUMN = "ALTER TABLE om_records ADD COLUMN chunks TEXT NOT NULL DEFAULT '[]'"
SET_HEAD_CHUNKS = "UPDATE om_records SET chunks = ? WHERE key = ? AND superseded_by IS NULL"

# an owner's delete (``erase_flow``)
DELETE_MESSAGES_OF_THREAD = "DELETE FROM messages WHERE thread_id = ?"
DELETE_THREAD = "DELETE FROM threads WHERE id = ?"
DELETE_VECTORS_OF_THREAD = (
    "DELETE FROM group_vectors WHERE group_id IN "
    "(SELECT group_id FROM group_embeddings WHERE thread_id = ?)"
)
DELETE_EMBEDDINGS_OF_THREAD = "DELETE FROM group_embeddings WHERE thread_id = ?"
DELETE_GROUPS_OF_THREAD = "DELETE FROM observation_groups WHERE thread_id = ?"
DELETE_CYCLES_OF_THREAD = "DELETE FROM om_cycles WHERE key = ? AND threads LIKE ?"
SELECT_GENERATIONS = f"SELECT {RECORD_COLUMNS} FROM om_records WHERE key = ? ORDER BY generation"
DELETE_MESSAGES_OF_RESOURCE = (
    "DELETE FROM messages WHERE thread_id IN (SELECT id FROM threads WHERE resource_id = ?)"
)
DELETE_THREADS_OF_RESOURCE = "DELETE FROM threads WHERE resource_id = ?"
DELETE_RECORDS_OF_RESOURCE = "DELETE FROM om_records WHERE resource_id = ?"
DELETE_VECTORS_OF_RESOURCE = (
    "DELETE FROM group_vectors WHERE group_id IN "
    "(SELECT group_id FROM group_embeddings WHERE resource_id = ?)"
)
DELETE_EMBEDDINGS_OF_RESOURCE = "DELETE FROM group_embeddings WHERE resource_id = ?"
DELETE_GROUPS_OF_RESOURCE = "DELETE FROM observation_groups WHERE resource_id = ?"
DELETE_CYCLES_OF_RESOURCE = "DELETE FROM om_cycles WHERE resource_id = ?"
DELETE_RESOURCE = "DELETE FROM resources WHERE id = ?"
DELETE_VECTORS_BY_ID = "DELETE FROM group_vectors WHERE group_id IN ({marks})"
DELETE_EMBEDDINGS_BY_ID = "DELETE FROM group_embeddings WHERE group_id IN ({marks})"
DELETE_GROUPS_BY_ID = "DELETE FROM observation_groups WHERE id IN ({marks})"

# an import (``import_flow``): plain inserts, so an id stored meanwhile fails the whole import
SELECT_THREAD_IDS = "SELECT id FROM threads WHERE id IN ({marks})"
SELECT_HEAD_KEYS = "SELECT key FROM om_records WHERE superseded_by IS NULL AND key IN ({marks})"
SELECT_RESOURCES_WITH_METADATA = (
    "SELECT id FROM resources WHERE metadata <> '{{}}' AND id IN ({marks})"
)
SELECT_MESSAGE_THREADS = "SELECT id, thread_id FROM messages WHERE id IN ({marks})"
IMPORT_THREAD = f"INSERT INTO threads ({THREAD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
IMPORT_RECORD = (
    f"INSERT INTO om_records ({RECORD_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_EMBEDDINGS_OF_KEY = (
    f"SELECT {EMBEDDING_COLUMNS} FROM group_embeddings WHERE key = ? ORDER BY group_id"
)

ENQUEUE_JOB = (
    "INSERT INTO procrastinate_jobs (queue_name, task_name, lock, queueing_lock, args) "
    "SELECT ?, ?, ?, ?, CAST(? AS jsonb) || jsonb_build_object('incarnation', t.incarnation) "
    "FROM threads t WHERE t.id = ? "
    "ON CONFLICT (queueing_lock) WHERE status = 'todo' DO NOTHING"
)
"""A procrastinate job, unless one with the same queueing lock already waits (the table's
partial unique index), carrying the thread's incarnation as the transaction sees it."""

_NOT_RUNNING = "status <> 'doing'"
DELETE_JOBS_OF_THREAD = (
    f"DELETE FROM procrastinate_jobs WHERE args->>'thread_id' = ? AND {_NOT_RUNNING}"
)
"""A deleted thread's queued and finished jobs (a running one is its worker's; it stores
nothing, since its load names the incarnation it was queued for)."""
DELETE_JOBS_OF_RESOURCE = (
    f"DELETE FROM procrastinate_jobs WHERE args->>'resource_id' = ? AND {_NOT_RUNNING}"
)
