"""Replaying a recorded conversation through observational memory.

``load_conversation(path)`` reads obsmem JSONL (one message dict per line), OpenAI chat messages
(JSONL or a JSON array), a LoCoMo conversation, or a LongMemEval entry. ``replay(...)`` feeds it
turn by turn (a turn is a user message and what follows it) through an engine, with the recorded
replies standing in for the actor, and measures what memory did: the context size at every turn,
each cycle's tokens in and out, model calls, tokens and cost.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .convert import from_openai_chat
from .engine import ObservationalMemory
from .errors import ObsmemError
from .events import BufferingEndEvent, Event, ObservationEndEvent
from .llm import ActivityListener, LLMRequest, LLMResult
from .messages import Message, TextPart, message_from_dict
from .records import OMRecord
from .textfiles import read_text
from .tokens import HeuristicEstimator

__all__ = ["ReplayError", "ReplayReport", "TurnPoint", "load_conversation", "replay", "turns_of"]

DEMO_CONVERSATION = Path(__file__).with_name("data") / "demo_conversation.jsonl"


class ReplayError(ObsmemError):
    """A conversation file that cannot be read; the message names the file and the line."""


# -- loading -------------------------------------------------------------------------------------


def load_conversation(path: str | Path, *, question: str | None = None) -> list[Message]:
    """The messages of a conversation file, in order, with timestamps."""
    file = Path(path)
    text = read_text(file, ReplayError, expected="give a JSONL or JSON conversation")
    stripped = text.lstrip()
    if not stripped:
        raise ReplayError(f"{file} is empty")
    if stripped[0] in "[{" and not _looks_like_jsonl(stripped):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ReplayError(f"{file}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
        return _from_document(file, data, question)
    return _from_jsonl(file, text)


def _looks_like_jsonl(text: str) -> bool:
    first = text.split("\n", 1)[0].strip()
    if not first.startswith("{"):
        return False
    try:
        json.loads(first)
    except json.JSONDecodeError:
        return False
    return "\n" in text.strip()


def _from_jsonl(file: Path, text: str) -> list[Message]:
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReplayError(f"{file}:{number}: not valid JSON ({exc.msg})") from exc
        if not isinstance(value, dict):
            raise ReplayError(f"{file}:{number}: expected a JSON object per line")
        rows.append((number, value))
    if all("parts" in row for _, row in rows):
        out: list[Message] = []
        for number, row in rows:
            try:
                out.append(message_from_dict(row))
            except (KeyError, ValueError, TypeError) as exc:
                raise ReplayError(f"{file}:{number}: not an obsmem message ({exc})") from exc
        return out
    return _from_chat(file, [row for _, row in rows], [n for n, _ in rows])


def _from_chat(
    file: Path, rows: Sequence[dict[str, Any]], line_numbers: Sequence[int] | None = None
) -> list[Message]:
    stamps = [_timestamp(r.get("created_at") or r.get("timestamp")) for r in rows]
    base = datetime.now(UTC) - timedelta(minutes=len(rows))
    clean = [{k: v for k, v in r.items() if k not in ("created_at", "timestamp")} for r in rows]
    try:
        messages = from_openai_chat(clean)
    except (KeyError, ValueError, TypeError) as exc:
        where = f"{file}" if line_numbers is None else f"{file} (lines {line_numbers[0]}-)"
        raise ReplayError(f"{where}: not OpenAI chat messages ({exc})") from exc
    # from_openai_chat may split or merge nothing: one message per row, in order.
    out: list[Message] = []
    for i, m in enumerate(messages):
        stamp = stamps[i] if i < len(stamps) else None
        out.append(_with_time(m, stamp or base + timedelta(minutes=i)))
    return out


def _with_time(message: Message, at: datetime) -> Message:
    from dataclasses import replace

    return replace(message, created_at=at)


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _from_document(file: Path, data: Any, question: str | None) -> list[Message]:
    if isinstance(data, dict) and "speaker_a" in data:
        return _from_locomo(data)
    if isinstance(data, dict) and "conversation" in data and "speaker_a" in data["conversation"]:
        return _from_locomo(data["conversation"])
    entries = data if isinstance(data, list) else [data]
    if entries and isinstance(entries[0], dict) and "haystack_sessions" in entries[0]:
        return _from_longmemeval(file, entries, question)
    if entries and isinstance(entries[0], dict) and "role" in entries[0]:
        return _from_chat(file, entries)
    raise ReplayError(
        f"{file}: not a conversation obsmem knows (obsmem JSONL, OpenAI chat messages, LoCoMo, "
        "or LongMemEval)"
    )


_LOCOMO_TIME = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m) on (\d{1,2}) (\w+),? (\d{4})", re.I)


def _locomo_time(text: str) -> datetime | None:
    m = _LOCOMO_TIME.search(text or "")
    if m is None:
        return None
    hour, minute, ampm, day, month, year = m.groups()
    stamp = datetime.strptime(
        f"{day} {month[:3]} {year} {hour}:{minute} {ampm}", "%d %b %Y %I:%M %p"
    )
    return stamp.replace(tzinfo=UTC)


def _from_locomo(conv: dict[str, Any]) -> list[Message]:
    speaker_a = conv.get("speaker_a")
    out: list[Message] = []
    n = 1
    while f"session_{n}" in conv:
        start = _locomo_time(str(conv.get(f"session_{n}_date_time", ""))) or datetime(
            2023, 1, 1, tzinfo=UTC
        ) + timedelta(days=n)
        for i, turn in enumerate(conv[f"session_{n}"]):
            role = "user" if turn.get("speaker") == speaker_a else "assistant"
            text = str(turn.get("text", ""))
            if turn.get("blip_caption"):
                text += f" [shares an image: {turn['blip_caption']}]"
            out.append(
                Message(
                    role=role,
                    parts=(TextPart(text=text),),
                    id=f"locomo-{turn.get('dia_id', f'{n}:{i}')}",
                    created_at=start + timedelta(seconds=30 * i),
                    metadata={"speaker": turn.get("speaker")},
                )
            )
        n += 1
    return out


def _from_longmemeval(
    file: Path, entries: Sequence[dict[str, Any]], question: str | None
) -> list[Message]:
    entry = entries[0]
    if question is not None:
        matches = [e for e in entries if e.get("question_id") == question]
        if not matches:
            raise ReplayError(f"{file}: no question {question!r}")
        entry = matches[0]
    out: list[Message] = []
    dates = entry.get("haystack_dates") or []
    for s, session in enumerate(entry["haystack_sessions"]):
        start = _longmemeval_time(dates[s] if s < len(dates) else None) or datetime(
            2023, 1, 1, tzinfo=UTC
        ) + timedelta(days=s)
        for i, turn in enumerate(session):
            role = "user" if turn.get("role") == "user" else "assistant"
            out.append(
                Message(
                    role=role,
                    parts=(TextPart(text=str(turn.get("content", ""))),),
                    created_at=start + timedelta(seconds=30 * i),
                )
            )
    return out


def _longmemeval_time(text: str | None) -> datetime | None:
    if not text:
        return None
    m = re.match(r"(\d{4})/(\d{2})/(\d{2}).*?(\d{2}):(\d{2})", text)
    if m is None:
        return None
    y, mo, d, h, mi = (int(g) for g in m.groups())
    return datetime(y, mo, d, h, mi, tzinfo=UTC)


def turns_of(messages: Sequence[Message]) -> Iterator[tuple[list[Message], list[Message]]]:
    """(input, reply) per turn: a user message (or a run of them) and what follows it."""
    inputs: list[Message] = []
    replies: list[Message] = []
    for message in messages:
        if message.role == "user" and replies:
            yield inputs, replies
            inputs, replies = [], []
        if message.role == "user" and not replies:
            inputs.append(message)
        else:
            replies.append(message)
    if inputs or replies:
        yield inputs, replies


# -- replaying -----------------------------------------------------------------------------------

_MARKS = {
    "data-om-observation-end": "observed",
    "data-om-activation": "activated",
    "data-om-observation-failed": "failed",
    "data-om-buffering-failed": "failed",
}


@dataclass(frozen=True, slots=True)
class TurnPoint:
    turn: int
    context_tokens: int
    """What the actor would be sent at this turn (memory messages and raw messages)."""
    raw_tokens: int
    log_tokens: int
    left_out: int = 0
    """Raw messages left out of the context at this turn (memory behind or failing)."""
    marks: tuple[str, ...] = ()
    """What memory did during the turn: ``observed``, ``activated``, ``reflected``, ``failed``."""


@dataclass(slots=True)
class ReplayReport:
    turns: int = 0
    messages: int = 0
    conversation_tokens: int = 0
    points: list[TurnPoint] = field(default_factory=list[TurnPoint])
    cycles: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    model_calls: int = 0
    model_input_tokens: int = 0
    model_output_tokens: int = 0
    usage_estimated: bool = False
    """Some calls' tokens are local estimates: their server reported no usage."""
    cost_usd: float | None = None
    generations: int = 0
    final_log: str = ""
    thresholds: dict[str, int | None] = field(default_factory=dict[str, int | None])
    failures: list[str] = field(default_factory=list[str])
    status: list[str] = field(default_factory=list[str])
    """Memory's state at the end, in words (``Memory.status``): models, stored failures."""
    healthy: bool = True

    @property
    def largest_context(self) -> int:
        return max((p.context_tokens for p in self.points), default=0)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["largest_context"] = self.largest_context
        out["compression"] = (
            round(self.conversation_tokens / self.largest_context, 2)
            if self.largest_context
            else None
        )
        return out


async def replay(
    om: ObservationalMemory,
    messages: Sequence[Message],
    *,
    thread_id: str = "replay",
    resource_id: str = "replay-user",
    progress: Callable[[int, int], None] | None = None,
    activity: ActivityListener | None = None,
) -> ReplayReport:
    """Feed ``messages`` through ``om`` turn by turn and report what memory did.

    ``progress(done, total)`` is told at the start (0) and after each turn; ``activity`` about
    every memory-model call as it happens (start, retries, end: what a turn waits on)."""
    estimator = HeuristicEstimator()
    report = ReplayReport(
        messages=len(messages),
        conversation_tokens=sum(estimator.count_message(m) for m in messages),
        thresholds={
            "message_tokens": om.options.observation.message_tokens,
            "block_after": om.options.observation.block_after,
            "observation_tokens": om.options.reflection.observation_tokens,
            "reflection_block_after": om.options.reflection.block_after,
        },
    )
    watcher = _Watcher(report=report, estimator=estimator)
    remove_listener = om.caller.add_listener(watcher.on_call)
    remove_activity = om.caller.add_activity_listener(activity) if activity else None
    unsubscribe = om.subscribe(watcher.on_event)
    turns = list(turns_of(messages))
    if progress is not None:
        progress(0, len(turns))
    try:
        for n, (inputs, replies) in enumerate(turns, 1):
            watcher.marks.clear()
            prepared = await om.prepare(thread_id, resource_id, inputs)
            report.points.append(_point(n, prepared.messages, prepared.record, estimator))
            if replies:
                await om.record(thread_id, resource_id, replies)
            await om.settle()
            report.points[-1] = replace(report.points[-1], marks=tuple(sorted(watcher.marks)))
            report.turns = n
            if progress is not None:
                progress(n, len(turns))
    finally:
        remove_listener()
        if remove_activity is not None:
            remove_activity()
        unsubscribe()
    health = await om.health(thread_id, resource_id)
    report.status = health.lines()
    report.healthy = health.state in ("healthy", "off")
    report.final_log = await om.observations(thread_id, resource_id)
    report.generations = len(await om.history(thread_id, resource_id))
    costs = watcher.costs
    report.cost_usd = round(sum(costs), 6) if costs else None
    return report


def _point(
    turn: int, context: Sequence[Message], record: OMRecord, estimator: HeuristicEstimator
) -> TurnPoint:
    """What the actor is sent at ``turn`` (before the turn's marks are known)."""
    raw = [m for m in context if not (m.metadata.get("obsmem") or {}).get("synthetic")]
    return TurnPoint(
        turn=turn,
        context_tokens=estimator.count_messages(context),
        raw_tokens=estimator.count_messages(raw),
        log_tokens=record.observation_tokens,
        left_out=sum(
            int((m.metadata.get("obsmem") or {}).get("count") or 0)
            for m in context
            if (m.metadata.get("obsmem") or {}).get("synthetic") == "left_out"
        ),
    )


@dataclass(slots=True, kw_only=True)
class _Watcher:
    """What a replay hears while it runs: each model call's tokens and cost, each cycle's end
    and failure (into ``report``), and what memory did during the current turn (``marks``)."""

    report: ReplayReport
    estimator: HeuristicEstimator
    costs: list[float] = field(default_factory=list[float])
    marks: set[str] = field(default_factory=set[str])

    def on_call(self, request: LLMRequest, result: LLMResult) -> None:
        report, estimator = self.report, self.estimator
        report.model_calls += 1
        if result.input_tokens or result.output_tokens:
            report.model_input_tokens += result.input_tokens
            report.model_output_tokens += result.output_tokens
        else:  # the server reported no usage (many local servers when streaming)
            sent = [request.system, *(u for u in request.user if isinstance(u, str))]
            report.model_input_tokens += sum(estimator.count_text(t) for t in sent)
            report.model_output_tokens += estimator.count_text(result.text)
            report.usage_estimated = True
        if result.cost_usd is not None:
            self.costs.append(result.cost_usd)

    def on_event(self, event: Event) -> None:
        if isinstance(event, ObservationEndEvent | BufferingEndEvent):
            if isinstance(event, ObservationEndEvent):
                tokens_in = event.tokens_observed
            else:
                tokens_in = event.tokens_buffered
            tokens_out = self.estimator.count_text(event.observations or "")
            self.report.cycles.append(
                {
                    "type": event.type.removeprefix("data-om-").removesuffix("-end"),
                    "operation": event.operation_type,
                    "cycle_id": event.cycle_id,
                    "tokens_in": tokens_in,
                    "tokens_out": tokens_out,
                    "ratio": round(tokens_in / tokens_out, 1) if tokens_out else None,
                }
            )
        elif event.type.endswith("-failed"):
            self.report.failures.append(f"{event.type}: {getattr(event, 'error', '')}")
        mark = _MARKS.get(event.type)
        if mark == "observed" and getattr(event, "operation_type", "") == "reflection":
            mark = "reflected"
        if mark is not None:
            self.marks.add(mark)
