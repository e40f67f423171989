"""The export format (``obsmem-export`` version 1): one JSON record a line, in pydantic models.

Each model is the JSON form of one stored thing, built from the stores' own JSON forms (messages'
``message_to_dict``, the codec's chunks, reflections and ranges), so the file says what the
database says and nothing is serialised a second way. ``docs/export-format.md`` describes every
record and field; a change that breaks a reader bumps :data:`VERSION`.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter

from ..messages import Message, message_from_dict, message_to_dict
from ..meta_keys import META_FAILURE
from ..records import CycleRecord, GroupEmbedding, ObservationGroup, OMRecord, Thread
from ..stores import codec
from ..stores.changes import ImportedResource

__all__ = [
    "FORMAT",
    "VERSION",
    "CycleRow",
    "EmbeddingRow",
    "ExportRecord",
    "GroupRow",
    "Header",
    "LogRow",
    "MessageRow",
    "ResourceRow",
    "ThreadRow",
    "parse_record",
]

FORMAT = "obsmem-export"
VERSION = 1
"""Bumped when a reader of the previous version would misread a file; added optional fields do
not bump it (readers ignore fields they do not know)."""


def _without_failure(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata as exported: the failure state stays behind (it is about this database's
    models and clock, and a new home starts without one)."""
    return {k: v for k, v in metadata.items() if k != META_FAILURE}


class _Row(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    @classmethod
    def _copied(cls, source: object, **changed: Any) -> Any:
        """The row of ``source``: each field read from its attribute of the same name, except
        those ``changed`` gives."""
        names = [n for n in cls.model_fields if n != "type" and n not in changed]
        return cls(**{n: getattr(source, n) for n in names}, **changed)

    def _fields(self, *, without: tuple[str, ...] = (), **changed: Any) -> dict[str, Any]:
        """The row's fields by name (``type`` and ``without`` left out), ``changed`` applied:
        the keyword arguments of the stored record it becomes."""
        left = {"type", *without, *changed}
        return {n: getattr(self, n) for n in type(self).model_fields if n not in left} | changed


class Header(_Row):
    """The first line: what the file is and what it holds."""

    type: Literal["header"] = "header"
    format: Literal["obsmem-export"] = FORMAT
    version: int
    obsmem_version: str
    exported_at: AwareDatetime
    scope: dict[str, Any]
    """``{"thread": id}``, ``{"resource": id}`` or ``{"all": true}``; an import from another
    system says where from (``{"from": "mastra", "source": path}``)."""
    ledger: bool = False

    @classmethod
    def now(cls, scope: dict[str, Any], *, ledger: bool = False) -> Header:
        """The header of a file written now by this obsmem."""
        from .. import __version__
        from ..messages import utcnow

        return cls(
            version=VERSION,
            obsmem_version=__version__,
            exported_at=utcnow(),
            scope=scope,
            ledger=ledger,
        )


class ThreadRow(_Row):
    type: Literal["thread"] = "thread"
    id: str = Field(min_length=1)
    resource_id: str = Field(min_length=1)
    title: str | None = None
    metadata: dict[str, Any] = {}
    message_count: int = Field(ge=0)
    created_at: AwareDatetime
    updated_at: AwareDatetime

    @classmethod
    def of(cls, t: Thread) -> ThreadRow:
        return cls._copied(t, metadata=_without_failure(dict(t.metadata)))

    def domain(self) -> Thread:
        # created again here (see Thread.incarnation)
        return Thread(**self._fields(incarnation=uuid.uuid4().hex))


class MessageRow(_Row):
    """A message as ``messages.message_to_dict`` writes it (parts in their stored form)."""

    type: Literal["message"] = "message"
    id: str = Field(min_length=1)
    thread_id: str = Field(min_length=1)
    resource_id: str = Field(min_length=1)
    seq: int = Field(ge=1)
    role: str
    parts: list[dict[str, Any]]
    metadata: dict[str, Any] = {}
    created_at: str

    @classmethod
    def of(cls, m: Message) -> MessageRow:
        return cls.model_validate(message_to_dict(m))

    def domain(self) -> Message:
        return message_from_dict(self.model_dump())


class LogRow(_Row):
    """One generation of the log of a key (``head``: the newest, the one that changes)."""

    type: Literal["log"] = "log"
    id: str = Field(min_length=1)
    key: str = Field(min_length=1)
    scope: Literal["thread", "resource"]
    thread_id: str | None
    resource_id: str | None
    generation: int = Field(ge=0)
    head: bool
    origin: Literal["initial", "reflection", "revision"]
    version: int = Field(ge=1)
    observations: str
    observation_tokens: int = Field(ge=0)
    cursor: dict[str, int]
    chunks: list[dict[str, Any]] = []
    buffered_reflection: dict[str, Any] | None = None
    total_tokens_observed: int = Field(ge=0)
    superseded_by: str | None
    created_at: AwareDatetime
    updated_at: AwareDatetime

    @classmethod
    def of(cls, r: OMRecord) -> LogRow:
        return cls._copied(
            r,
            head=r.is_head,
            observation_tokens=int(r.observation_tokens),
            cursor=dict(r.cursor),
            chunks=[codec.chunk_to_dict(c) for c in r.chunks],
            buffered_reflection=codec.loads(codec.reflection_to_json(r.buffered_reflection)),
            total_tokens_observed=int(r.total_tokens_observed),
        )

    def domain(self) -> OMRecord:
        if self.head != (self.superseded_by is None):
            raise ValueError("head must be true exactly when superseded_by is null")
        reflection = self.buffered_reflection
        return OMRecord(
            **self._fields(
                without=("head",),
                chunks=tuple(codec.chunk_from_dict(c) for c in self.chunks),
                buffered_reflection=codec.reflection_from_json(
                    None if reflection is None else codec.dumps(reflection)
                ),
            )
        )


class GroupRow(_Row):
    """An observation group: one cycle's observations and the message ranges they came from."""

    type: Literal["group"] = "group"
    id: str = Field(min_length=1)
    key: str = Field(min_length=1)
    resource_id: str | None
    thread_id: str | None
    cycle_id: str
    start_id: str
    end_id: str
    observations: str
    ranges: list[tuple[str, int, int]]
    created_at: AwareDatetime
    metadata: dict[str, Any] = {}

    @classmethod
    def of(cls, g: ObservationGroup) -> GroupRow:
        ranges = [(t, a, b) for t, a, b in codec.ranges_to_json(g.ranges)]
        return cls._copied(g, ranges=ranges, metadata=dict(g.metadata))

    def domain(self) -> ObservationGroup:
        ranges = codec.group_ranges_from_json([list(r) for r in self.ranges])
        return ObservationGroup(**self._fields(ranges=ranges))


class EmbeddingRow(_Row):
    """A group's embedding: the unit vector (float32 values) and the model that made it."""

    type: Literal["embedding"] = "embedding"
    group_id: str = Field(min_length=1)
    key: str = Field(min_length=1)
    resource_id: str | None
    thread_id: str | None
    observed_at: AwareDatetime
    model: str = Field(min_length=1)
    vector: list[float] = Field(min_length=1)

    @classmethod
    def of(cls, e: GroupEmbedding) -> EmbeddingRow:
        return cls._copied(e, vector=list(e.vector))

    def domain(self) -> GroupEmbedding:
        return GroupEmbedding(**self._fields(vector=tuple(self.vector)))


class ResourceRow(_Row):
    """A resource's metadata: working memory (resource scope) and memory's other values."""

    type: Literal["resource"] = "resource"
    id: str = Field(min_length=1)
    metadata: dict[str, Any]

    @classmethod
    def of(cls, resource_id: str, metadata: dict[str, Any]) -> ResourceRow:
        return cls(id=resource_id, metadata=_without_failure(metadata))

    def domain(self) -> ImportedResource:
        return ImportedResource(id=self.id, metadata=self.metadata)


class CycleRow(_Row):
    """A cycle ledger row (``--ledger`` only), as ``CycleRecord.to_json`` writes it."""

    type: Literal["cycle"] = "cycle"
    cycle_id: str = Field(min_length=1)
    key: str = Field(min_length=1)
    resource_id: str
    thread_ids: list[str]
    kind: Literal["buffering", "observation", "activation", "reflection", "revision"]
    operation: str = ""
    outcome: Literal["committed", "redundant", "failed"]
    error: str | None = None
    started_at: AwareDatetime
    duration_ms: float
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    ranges: list[dict[str, Any]] = []
    generation: int | None = None
    by: str | None = None

    @classmethod
    def of(cls, c: CycleRecord) -> CycleRow:
        return cls.model_validate(c.to_json())

    def domain(self) -> CycleRecord:
        ranges = [[r["thread_id"], r["first_seq"], r["last_seq"]] for r in self.ranges]
        return CycleRecord(
            **self._fields(
                thread_ids=tuple(self.thread_ids), ranges=codec.group_ranges_from_json(ranges)
            )
        )


DataRecord: TypeAlias = (
    ThreadRow | MessageRow | LogRow | GroupRow | EmbeddingRow | ResourceRow | CycleRow
)
ExportRecord: TypeAlias = Annotated[Header | DataRecord, Field(discriminator="type")]
"""Any line of an export file."""

_RECORD: TypeAdapter[Header | DataRecord] = TypeAdapter(ExportRecord)


def parse_record(line: str | bytes) -> Header | DataRecord:
    """One line, validated (a pydantic ValidationError or ValueError says what is wrong)."""
    return _RECORD.validate_json(line)


def to_line(record: Header | DataRecord) -> str:
    """The record's line (compact JSON, no newline)."""
    return record.model_dump_json()
