"""Messages, parts and the observation log as plain data for the templates.

The templates escape everything (Jinja autoescape); this module only decides what is shown:
a part's label and text, where a long part is cut, which mark a message gets (observed,
buffered, unobserved), and which group of the log each message and recall range links to.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from urllib.parse import urlencode

from ..messages import FilePart, ImagePart, Message, Part
from ..observations import RECALL_RANGE
from ..records import MessageRange, ObservationGroup, OMRecord

__all__ = [
    "CUT_AT",
    "PER_PAGE",
    "GroupLink",
    "LogBlock",
    "MessageView",
    "PartView",
    "group_links",
    "log_blocks",
    "message_href",
    "message_views",
    "part_view",
]

CUT_AT = 2_000
"""A part longer than this many characters is shown cut, with the rest behind a <details>."""
PER_PAGE = 100
"""Messages per page of a thread."""

Mark = Literal["observed", "buffered", "unobserved"]


@dataclass(frozen=True, slots=True)
class PartView:
    """One part as shown: its kind, a label (a tool's name), its text, cut when long."""

    kind: str
    label: str
    text: str

    @property
    def cut(self) -> bool:
        """Whether the text is longer than ``CUT_AT``."""
        return len(self.text) > CUT_AT

    @property
    def head(self) -> str:
        """The first ``CUT_AT`` characters."""
        return self.text[:CUT_AT]


@dataclass(frozen=True, slots=True)
class GroupLink:
    """An observation group with where its messages are (page URL and anchor)."""

    group: ObservationGroup
    range: MessageRange | None
    href: str | None
    kind: str

    @property
    def anchor(self) -> str:
        """The group's element id on the thread page."""
        return f"g-{self.group.id}"

    @property
    def span(self) -> str:
        """The messages covered, as ``first-last``."""
        r = self.range
        return f"{r.first_seq}-{r.last_seq}" if r is not None else "?"


@dataclass(frozen=True, slots=True)
class MessageView:
    """One raw message as shown on a thread page."""

    message: Message
    seq: int
    mark: Mark
    parts: tuple[PartView, ...]
    group: GroupLink | None
    tokens: int

    @property
    def created_at(self) -> datetime:
        """When the message was written."""
        return self.message.created_at


@dataclass(frozen=True, slots=True)
class LogBlock:
    """A stretch of the log: the lines after one recall range line (or before the first)."""

    text: str
    group: GroupLink | None


def message_href(thread_id: str, seq: int, per_page: int = PER_PAGE) -> str:
    """The thread page that shows message ``seq``, with its anchor."""
    page = (seq - 1) // per_page + 1
    return f"/thread?{urlencode({'id': thread_id, 'page': page})}#m-{seq}"


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _attachment(part: ImagePart | FilePart) -> str:
    where = part.url or (f"{len(part.data)} bytes inline" if part.data is not None else "")
    return f"{part.media_type} {part.filename or ''} {where}".strip()


def part_view(part: Part) -> PartView:
    """What one part shows: text as written, a tool call's name and arguments, a result's
    content, an attachment's type and size."""
    match part.kind:
        case "text":
            return PartView("text", "", part.text)
        case "reasoning":
            return PartView("reasoning", "reasoning", part.text)
        case "tool-call":
            return PartView("tool-call", f"tool call {part.tool_name}", _json(part.args))
        case "tool-result":
            label = f"tool result {part.tool_name}" + (" (error)" if part.is_error else "")
            extra = "".join(f"\n[attachment {_attachment(a)}]" for a in part.attachments)
            return PartView("tool-result", label, _json(part.content) + extra)
        case "image" | "file":
            return PartView(part.kind, part.kind, _attachment(part))
        case "data":
            return PartView("data", f"data {part.name}", _json(part.data))


def group_links(
    groups: Sequence[ObservationGroup], thread_id: str, per_page: int = PER_PAGE
) -> list[GroupLink]:
    """Each group with the range of ``thread_id`` it covers and the link to its first
    message."""
    out: list[GroupLink] = []
    for g in groups:
        mine = next((r for r in g.ranges if r.thread_id == thread_id), None)
        href = message_href(thread_id, mine.first_seq, per_page) if mine else None
        out.append(GroupLink(g, mine, href, str(g.metadata.get("kind") or "observation")))
    return out


def _covering(links: Sequence[GroupLink], seq: int) -> GroupLink | None:
    """The newest observation group covering ``seq`` (a reflection's when none is left)."""
    best: GroupLink | None = None
    for link in links:
        r = link.range
        if r is None or not r.first_seq <= seq <= r.last_seq:
            continue
        if best is None or (link.kind == "observation") >= (best.kind == "observation"):
            best = link
    return best


def message_views(
    messages: Sequence[Message],
    record: OMRecord | None,
    links: Sequence[GroupLink],
    count: Any,
) -> list[MessageView]:
    """The messages of a page with their marks and the group each links back to."""
    thread_id = messages[0].thread_id if messages else None
    cursor = record.cursor.get(thread_id or "", 0) if record is not None else 0
    covered = record.covered_through(thread_id or "") if record is not None else 0
    out: list[MessageView] = []
    for m in messages:
        seq = m.seq or 0
        mark: Mark = "observed" if seq <= cursor else "buffered" if seq <= covered else "unobserved"
        out.append(
            MessageView(
                m,
                seq,
                mark,
                tuple(part_view(p) for p in m.parts),
                _covering(links, seq) if mark == "observed" else None,
                int(count(m)),
            )
        )
    return out


def log_blocks(log: str, links: Sequence[GroupLink]) -> list[LogBlock]:
    """The log cut at its ``[recall range FIRST:LAST]`` lines, each block with the group whose
    first and last message ids the range names."""
    by_ids = {(link.group.start_id, link.group.end_id): link for link in links}
    blocks: list[LogBlock] = []
    last = 0
    group: GroupLink | None = None
    for match in RECALL_RANGE.finditer(log):
        text = log[last : match.start()]
        if text.strip() or group is not None:
            blocks.append(LogBlock(text.strip("\n"), group))
        ids = match.group(0).strip()[len("[recall range ") : -1]
        start, _, end = ids.partition(":")
        group = by_ids.get((start, end))
        last = match.end()
    tail = log[last:]
    if tail.strip() or group is not None:
        blocks.append(LogBlock(tail.strip("\n"), group))
    return blocks
