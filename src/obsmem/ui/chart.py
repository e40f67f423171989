"""The sawtooth chart as inline SVG: context tokens per turn against the thresholds.

A turn the engine measured when it ran (:mod:`obsmem.sent`, stamped on its reply) is drawn as it
was sent: memory messages and the raw messages after any left out, against the thresholds in
force then. Other turns (stored before the measure existed, or whose reply was not recorded)
are replayed from stored data. Each message's tokens are estimated locally (the heuristic
counter); the cycle ledger says when the cursor moved (observations and activations, by the
ranges they covered), when the log was rewritten (reflections) and what failed. The log's size
after each cycle comes from the observation groups that cover the messages it observed, and
after a reflection from the reflection's group; without groups (retrieval off), from the
ledger's output tokens (half the log when nothing says). A cycle is placed at the turn it ran
in: by time when the messages were written live, and never before the last message it
covered.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

from ..messages import Message
from ..records import CycleRecord, ObservationGroup
from ..sent import sent_of

__all__ = ["ChartData", "Marker", "Point", "chart_data", "sawtooth_svg"]


@dataclass(frozen=True, slots=True)
class Point:
    """The context at one turn (a user message): raw and log tokens."""

    seq: int
    raw: int
    log: int
    left_out: int = 0
    """Raw messages the turn left out (memory behind or failing)."""
    sent: bool = False
    """Measured when the turn was sent (its stamp); otherwise estimated from stored data."""

    @property
    def context(self) -> int:
        """Raw plus log tokens."""
        return self.raw + self.log


@dataclass(frozen=True, slots=True)
class Marker:
    """A cycle drawn on the chart."""

    seq: int
    kind: str
    """``observation``, ``activation``, ``reflection`` or ``failure``."""
    title: str


@dataclass(frozen=True, slots=True)
class ChartData:
    """The points and markers of one thread's chart, with the thresholds."""

    points: tuple[Point, ...]
    markers: tuple[Marker, ...]
    message_tokens: int
    observation_tokens: int
    first_seq: int = 1
    notes: tuple[str, ...] = field(default=())
    stored_thresholds: bool = False
    """The thresholds are those in force at the newest measured turn, not the fallback."""


def _kind(c: CycleRecord) -> str | None:
    if c.outcome == "failed":
        return "failure"
    if c.outcome != "committed":
        return None
    if c.kind == "reflection" or c.operation == "reflection-activation":
        return "reflection"
    if c.kind in ("observation", "activation"):
        return c.kind
    return None


def _positions(
    messages: Sequence[Message], cycles: Sequence[CycleRecord], thread_id: str
) -> list[int]:
    """The seq each cycle (oldest first) is drawn at."""
    times = [m.created_at for m in messages]
    seqs = [m.seq or 0 for m in messages]
    live = bool(times) and bool(cycles) and times[0] <= cycles[0].started_at <= times[-1]
    out: list[int] = []
    last = seqs[0] if seqs else 0
    for c in cycles:
        covered = max((r.last_seq for r in c.ranges if r.thread_id == thread_id), default=0)
        at = seqs[bisect.bisect_right(times, c.started_at) - 1] if live else 0
        last = max(last, covered, at)
        out.append(last)
    return out


def _observed_between(
    groups: Sequence[ObservationGroup], thread_id: str, after: int, through: int
) -> list[ObservationGroup]:
    """The observation groups whose messages of ``thread_id`` end in ``after < seq <= through``
    (what a cursor move from ``after`` to ``through`` put into the log)."""
    return [
        g
        for g in groups
        if g.metadata.get("kind") != "reflection"
        and any(r.thread_id == thread_id and after < r.last_seq <= through for r in g.ranges)
    ]


@dataclass(slots=True)
class _Replay:
    """The thread as the chart replays it: the cursor, the log's size, the raw messages."""

    thread_id: str
    groups: Sequence[ObservationGroup]
    buffered: Sequence[CycleRecord]
    count: Callable[[str], int]
    cursor: int = 0
    log: int = 0
    raw: list[tuple[int, int]] = field(default_factory=list[tuple[int, int]])

    def _ends_in(self, c: CycleRecord, through: int) -> bool:
        return any(
            r.thread_id == self.thread_id and self.cursor < r.last_seq <= through for r in c.ranges
        )

    def observed(self, c: CycleRecord, kind: str) -> None:
        """The cursor moved to the end of ``c``'s ranges; the log grew by what covers them
        (the groups; without groups, the Observer's output tokens from the ledger)."""
        mine = [r.last_seq for r in c.ranges if r.thread_id == self.thread_id]
        moved = max([self.cursor, *mine])
        added = _observed_between(self.groups, self.thread_id, self.cursor, moved)
        if added:
            self.log += sum(self.count(g.observations) for g in added)
        elif kind == "observation":
            self.log += c.output_tokens or 0
        else:
            self.log += sum(b.output_tokens or 0 for b in self.buffered if self._ends_in(b, moved))
        self.cursor = moved
        self.raw = [(s, t) for s, t in self.raw if s > moved]

    def reflected(self, c: CycleRecord) -> None:
        """The log is what the reflection wrote: its group, its output tokens, or (neither
        known) half."""
        written = [
            g
            for g in self.groups
            if g.cycle_id == c.cycle_id and g.metadata.get("kind") == "reflection"
        ]
        if written:
            self.log = self.count(written[-1].observations)
        else:
            self.log = c.output_tokens or self.log // 2


def chart_data(
    messages: Sequence[Message],
    cycles: Sequence[CycleRecord],
    groups: Sequence[ObservationGroup],
    *,
    thread_id: str,
    tokens: Callable[[Message], int],
    count_text: Callable[[str], int],
    message_tokens: int,
    observation_tokens: int,
) -> ChartData:
    """Replay the stored thread: ``messages`` oldest first, ``cycles`` in any order, and the
    observation groups of the thread."""
    ordered = sorted(cycles, key=lambda c: (c.started_at, c.cycle_id))
    at = _positions(messages, ordered, thread_id)
    buffered = [
        c for c in ordered if c.operation == "buffered-observation" and c.outcome == "committed"
    ]
    state = _Replay(thread_id, groups, buffered, count_text)
    events = sorted(zip(at, range(len(ordered)), strict=True))
    points: list[Point] = []
    markers: list[Marker] = []
    n = 0
    turns = {t.at: t for t in (sent_of(m) for m in messages) if t is not None}
    for m in messages:
        seq = m.seq or 0
        state.raw.append((seq, tokens(m)))
        while n < len(events) and events[n][0] <= seq:
            c = ordered[events[n][1]]
            kind = _kind(c)
            if kind in ("observation", "activation"):
                state.observed(c, kind or "")
            elif kind == "reflection":
                state.reflected(c)
            if kind is not None:
                title = f"{c.operation or c.kind} {c.outcome} at {c.started_at:%H:%M:%S}"
                markers.append(Marker(seq, kind, title + (f": {c.error}" if c.error else "")))
            n += 1
        if seq in turns:
            t = turns[seq]
            points.append(Point(seq, t.raw, t.memory, t.left_out, sent=True))
        elif m.role == "user" or (m is messages[-1] and not turns):
            points.append(Point(seq, sum(t for _, t in state.raw), state.log))
    first = (messages[0].seq or 1) if messages else 1
    newest = turns[max(turns)] if turns else None
    if newest is not None:
        message_tokens, observation_tokens = newest.message_tokens, newest.observation_tokens
    return ChartData(
        tuple(points),
        tuple(markers),
        message_tokens,
        observation_tokens,
        first,
        stored_thresholds=newest is not None,
    )


_W, _H = 960, 320
_L, _R, _T, _B = 64, 16, 16, 40
_COLORS = {
    "observation": "#2f7d32",
    "activation": "#1565c0",
    "reflection": "#8e24aa",
    "failure": "#c62828",
    "left-out": "#ef6c00",
}


def _scale(data: ChartData) -> tuple[Callable[[int], float], Callable[[int], float], int]:
    last = max([p.seq for p in data.points] + [m.seq for m in data.markers] + [data.first_seq])
    top = max([p.context for p in data.points] + [data.message_tokens, data.observation_tokens, 1])
    top = int(top * 1.1)
    span = max(1, last - data.first_seq)

    def x(seq: int) -> float:
        return _L + (seq - data.first_seq) / span * (_W - _L - _R)

    def y(tokens: int) -> float:
        return _T + (1 - tokens / top) * (_H - _T - _B)

    return x, y, top


def _polyline(points: list[tuple[float, float]], color: str, width: float, label: str) -> str:
    coords = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
    return (
        f'<polyline class="series" data-series="{escape(label)}" points="{coords}" fill="none" '
        f'stroke="{color}" stroke-width="{width}"/>'
    )


def _threshold(y: float, label: str, color: str) -> str:
    return (
        f'<line x1="{_L}" x2="{_W - _R}" y1="{y:.1f}" y2="{y:.1f}" stroke="{color}" '
        f'stroke-dasharray="6 4"/><text x="{_W - _R - 4}" y="{y - 4:.1f}" text-anchor="end" '
        f'class="label" fill="{color}">{escape(label)}</text>'
    )


def sawtooth_svg(data: ChartData) -> str:
    """The chart as an ``<svg>`` element (every text escaped)."""
    x, y, top = _scale(data)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" role="img" '
        f'class="sawtooth" aria-label="context tokens per turn">',
        f'<rect x="{_L}" y="{_T}" width="{_W - _L - _R}" height="{_H - _T - _B}" fill="#fafafa" '
        'stroke="#ddd"/>',
    ]
    for frac in (0.25, 0.5, 0.75, 1.0):
        value = int(top * frac)
        parts.append(
            f'<text x="{_L - 6}" y="{y(value) + 4:.1f}" text-anchor="end" class="label">'
            f"{value:,}</text>"
        )
    parts.append(_threshold(y(data.message_tokens), "observe at (raw)", "#ef6c00"))
    parts.append(_threshold(y(data.observation_tokens), "reflect at (log)", "#6a1b9a"))
    if data.points:
        parts.append(_polyline([(x(p.seq), y(p.log)) for p in data.points], "#66bb6a", 1.5, "log"))
        parts.append(_polyline([(x(p.seq), y(p.raw)) for p in data.points], "#42a5f5", 1.5, "raw"))
        parts.append(
            _polyline([(x(p.seq), y(p.context)) for p in data.points], "#263238", 2, "context")
        )
    for m in data.markers:
        color = _COLORS[m.kind]
        parts.append(
            f'<g class="marker marker-{m.kind}"><title>{escape(m.title)}</title>'
            f'<line x1="{x(m.seq):.1f}" x2="{x(m.seq):.1f}" y1="{_T}" y2="{_H - _B}" '
            f'stroke="{color}" stroke-opacity="0.35"/>'
            f'<circle cx="{x(m.seq):.1f}" cy="{_H - _B + 8}" r="4" fill="{color}"/></g>'
        )
    for p in data.points:
        if p.left_out:
            parts.append(
                f'<g class="marker marker-left-out"><title>{p.left_out:,} messages left out at '
                f'message {p.seq}</title><circle cx="{x(p.seq):.1f}" cy="{y(p.context):.1f}" '
                f'r="3.5" fill="{_COLORS["left-out"]}"/></g>'
            )
    last = data.points[-1].seq if data.points else data.first_seq
    parts.append(
        f'<text x="{_L}" y="{_H - 8}" class="label">message {data.first_seq}</text>'
        f'<text x="{_W - _R}" y="{_H - 8}" text-anchor="end" class="label">message {last}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)
