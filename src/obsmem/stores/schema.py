"""The schema of the SQL stores as an ordered list of migration scripts, and the SQL they run.

The same scripts and statements serve SQLite and PostgreSQL (statements are written with ``?``
placeholders; :func:`pg` turns them into psycopg's ``%s``). Migrations only ever append to the
list; a released migration is never edited. SQLite counts applied migrations in
``PRAGMA user_version``, PostgreSQL in the ``obsmem_schema`` table.
"""

from __future__ import annotations

__all__ = ["MIGRATION_SCRIPTS", "SCHEMA_VERSION", "pg", "statements"]


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
]


def statements(script: str) -> list[str]:
    """The statements of a migration script, one by one."""
    return [s.strip() for s in script.split(";") if s.strip()]


def pg(statement: str) -> str:
    """A statement with psycopg placeholders."""
    return statement.replace("?", "%s")


SCHEMA_VERSION = len(MIGRATION_SCRIPTS)

RECORD_COLUMNS = (
    "id, key, scope, thread_id, resource_id, generation, origin, version, observations, "
    "observation_tokens, cursor, buffered_reflection, pending_message_tokens, "
    "last_buffered_at_tokens, total_tokens_observed, superseded_by, metadata, created_at, "
    "updated_at"
)
MESSAGE_COLUMNS = "id, thread_id, resource_id, seq, role, parts, metadata, created_at"
THREAD_COLUMNS = "id, resource_id, title, metadata, message_count, created_at, updated_at"
GROUP_COLUMNS = (
    "id, key, resource_id, thread_id, cycle_id, start_id, end_id, observations, ranges, "
    "created_at, metadata"
)

SELECT_THREAD = f"SELECT {THREAD_COLUMNS} FROM threads WHERE id = ?"
SELECT_THREADS_OF_RESOURCE = (
    f"SELECT {THREAD_COLUMNS} FROM threads WHERE resource_id = ? ORDER BY created_at, id"
)
SELECT_RESOURCE = "SELECT metadata FROM resources WHERE id = ?"
UPSERT_RESOURCE = (
    "INSERT INTO resources (id, metadata, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET metadata = excluded.metadata, updated_at = excluded.updated_at"
)
SELECT_RESOURCES = "SELECT DISTINCT resource_id FROM threads ORDER BY resource_id"
INSERT_THREAD = f"INSERT INTO threads ({THREAD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"
UPDATE_THREAD = "UPDATE threads SET title = ?, metadata = ?, updated_at = ? WHERE id = ?"
UPDATE_THREAD_COUNT = "UPDATE threads SET message_count = ?, updated_at = ? WHERE id = ?"

INSERT_MESSAGE = f"INSERT INTO messages ({MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
SELECT_MESSAGE_BY_ID = f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?"

SELECT_HEAD = f"SELECT {RECORD_COLUMNS} FROM om_records WHERE key = ? AND superseded_by IS NULL"
SELECT_RECORD = f"SELECT {RECORD_COLUMNS} FROM om_records WHERE id = ?"
SELECT_HISTORY = (
    f"SELECT {RECORD_COLUMNS} FROM om_records WHERE key = ? ORDER BY generation DESC "
    "LIMIT ? OFFSET ?"
)
INSERT_RECORD = (
    f"INSERT INTO om_records ({RECORD_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
UPDATE_RECORD = (
    "UPDATE om_records SET generation = ?, origin = ?, version = ?, observations = ?, "
    "observation_tokens = ?, cursor = ?, buffered_reflection = ?, pending_message_tokens = ?, "
    "last_buffered_at_tokens = ?, total_tokens_observed = ?, superseded_by = ?, metadata = ?, "
    "updated_at = ? WHERE id = ?"
)
SELECT_CHUNKS = "SELECT data FROM om_chunks WHERE key = ? ORDER BY position"
DELETE_CHUNKS = "DELETE FROM om_chunks WHERE key = ?"
INSERT_CHUNK = "INSERT INTO om_chunks (key, position, id, cycle_id, data) VALUES (?, ?, ?, ?, ?)"

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
DELETE_RECORDS = "DELETE FROM om_records WHERE key = ?"
DELETE_GROUPS = "DELETE FROM observation_groups WHERE key = ?"

EMBEDDING_COLUMNS = "group_id, key, resource_id, thread_id, observed_at, model, dims, vector"
INSERT_EMBEDDING = (
    f"INSERT INTO group_embeddings ({EMBEDDING_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (group_id) DO UPDATE SET model = excluded.model, dims = excluded.dims, "
    "vector = excluded.vector"
)
SELECT_EMBEDDINGS = (
    "SELECT group_id, thread_id, observed_at, vector FROM group_embeddings "
    "WHERE resource_id = ? AND model = ?"
)
DELETE_EMBEDDINGS = "DELETE FROM group_embeddings WHERE key = ?"
SELECT_GROUPS_BY_ID = (
    "SELECT {columns} FROM observation_groups WHERE resource_id = ? AND id IN ({marks})"
)
