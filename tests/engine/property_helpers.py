"""Pieces of the engine property tests: generated conversations, fault scripts, invariant checks.

A scenario is a list of :class:`TurnPlan` (drawn by hypothesis) that :class:`Actor` turns into
real messages: every text starts with a unique id token (``m17 ...``), so the scripted Observer's
log lines (``... said: m17 ...``) show which messages the log covers. :class:`InvariantChecker`
checks SPEC §4 invariants against the store after every step.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

from hypothesis import strategies as st

from obsmem.engine import PreparedContext
from obsmem.events import Event, HookContext, Hooks
from obsmem.messages import ImagePart, Message, TextPart, ToolCallPart, ToolResultPart
from obsmem.records import OMRecord
from obsmem.stores import Store
from obsmem.testing import Fault

from .helpers import T0, assert_no_gap_no_double, raw_messages, text_of

T = TypeVar("T")

FAULTS: tuple[Fault, ...] = ("error", "transient", "hang", "empty", "degenerate", "untagged")
Reply = Literal["text", "tools", "pending"]
"""The actor's reply: plain text; a tool call, its result and a text answer; or a tool call whose
result comes as the input of the next step (the usual agent loop)."""
After = Literal["none", "settle", "observe", "reflect"]

# A one-pixel PNG: enough for the estimator and the Observer's attachment handling.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
SAID = re.compile(r"said: (m\d+)\b")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one hypothesis example's coroutine on a fresh event loop."""
    return asyncio.run(coro)


# -- strategies ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnPlan:
    user_tokens: int
    image: bool
    reply: Reply
    reply_tokens: int
    after: After


def turn_plan(*, after: Sequence[After] = ("none",)) -> Any:
    """One turn; ``after`` is what may follow it (a settle, a manual observe or reflect)."""
    return st.builds(
        TurnPlan,
        user_tokens=st.integers(20, 1_500),
        image=st.sampled_from([False] * 9 + [True]),
        reply=st.sampled_from(["text", "text", "text", "tools", "pending"]),
        reply_tokens=st.integers(20, 1_500),
        after=st.sampled_from(list(after)),
    )


def turn_plans(*, after: Sequence[After], min_size: int = 5, max_size: int = 40) -> Any:
    """Conversations of ``min_size``..``max_size`` turns."""
    return st.lists(turn_plan(after=after), min_size=min_size, max_size=max_size)


def fault_scripts(max_size: int = 30) -> Any:
    """Per call index, the fault of that call (mostly none)."""
    return st.lists(st.sampled_from([None] * 5 + list(FAULTS)), max_size=max_size)


def fault_fn(script: Sequence[Fault | None]) -> Callable[[int], Fault | None]:
    def fault(n: int) -> Fault | None:
        return script[n] if n < len(script) else None

    return fault


# -- conversations -------------------------------------------------------------------------------


@dataclass
class MessageFactory:
    """Messages with unique id tokens and increasing timestamps (shared by all actors)."""

    seed: int
    now: datetime = T0
    counter: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def clock(self) -> datetime:
        return self.now

    def _tick(self, delta: timedelta) -> datetime:
        self.now += delta
        return self.now

    def _text(self, tokens: int) -> tuple[str, str]:
        self.counter += 1
        token = f"m{self.counter}"
        return token, f"{token} {text_of(max(1, tokens - 2), self.rng)}"

    def user(self, tokens: int, *, image: bool) -> Message:
        _, text = self._text(tokens)
        parts: list[Any] = [TextPart(text=text)]
        if image:
            parts.append(ImagePart(data=PNG, media_type="image/png", filename="shot.png"))
        return Message(role="user", parts=tuple(parts), created_at=self._tick(timedelta(minutes=5)))

    def assistant(self, tokens: int) -> Message:
        _, text = self._text(tokens)
        return Message.assistant(text, created_at=self._tick(timedelta(seconds=30)))

    def tool_call(self, *, deferred: bool = False) -> tuple[Message, str]:
        """A step with one tool call; ``deferred``: its result comes with the next turn's input
        (an approval pending across turns), so the call is marked as deliberately waiting."""
        self.counter += 1
        call_id = f"call-{self.counter}"
        meta = {"obsmem": {"deferred": True}} if deferred else {}
        part = ToolCallPart(
            tool_call_id=call_id, tool_name="lookup", args={"q": call_id}, metadata=meta
        )
        message = Message(
            role="assistant", parts=(part,), created_at=self._tick(timedelta(seconds=10))
        )
        return message, call_id

    def tool_result(self, call_id: str, tokens: int) -> Message:
        _, text = self._text(tokens)
        part = ToolResultPart(tool_call_id=call_id, tool_name="lookup", content=text)
        return Message(role="tool", parts=(part,), created_at=self._tick(timedelta(seconds=10)))


@dataclass
class Actor:
    """One agent loop on a thread: turns plans into the input and the reply of a step."""

    factory: MessageFactory
    pending_call: str | None = None

    def inputs(self, plan: TurnPlan) -> list[Message]:
        if self.pending_call is not None:
            call_id, self.pending_call = self.pending_call, None
            return [self.factory.tool_result(call_id, plan.user_tokens)]
        return [self.factory.user(plan.user_tokens, image=plan.image)]

    def outputs(self, plan: TurnPlan) -> list[Message]:
        f = self.factory
        if plan.reply == "text":
            return [f.assistant(plan.reply_tokens)]
        if plan.reply == "pending":
            call, call_id = f.tool_call(deferred=True)
            self.pending_call = call_id
            return [call]
        call, call_id = f.tool_call()
        return [call, f.tool_result(call_id, plan.reply_tokens // 2), f.assistant(40)]


# -- failed reflections --------------------------------------------------------------------------


@dataclass
class ReflectionWatch:
    """Hooks that snapshot the log when a synchronous reflection starts and when it ends."""

    store: Store
    key: str
    started: dict[str, str] = field(default_factory=dict[str, str])
    failed: list[tuple[str, str, str]] = field(default_factory=list[tuple[str, str, str]])
    """(cycle id, log at start, log at the failed end)."""

    async def _log(self) -> str:
        record = await self.store.get_record(self.key)
        return "" if record is None else record.observations

    async def on_start(self, ctx: HookContext) -> None:
        if ctx.trigger != "async-buffer":
            self.started[ctx.cycle_id] = await self._log()

    async def on_end(self, ctx: HookContext) -> None:
        if ctx.error is not None and ctx.cycle_id in self.started:
            self.failed.append((ctx.cycle_id, self.started[ctx.cycle_id], await self._log()))

    def hooks(self) -> Hooks:
        return Hooks(on_reflection_start=self.on_start, on_reflection_end=self.on_end)


# -- invariants ----------------------------------------------------------------------------------


def said_counts(log: str) -> Counter[str]:
    """How often each message id token appears as the subject of a log line."""
    return Counter(SAID.findall(log))


def id_token(message: Message) -> str | None:
    """The ``m<n>`` token a message's text (or tool result) starts with, if any."""
    for part in message.parts:
        text = part.text if isinstance(part, TextPart) else None
        if isinstance(part, ToolResultPart) and isinstance(part.content, str):
            text = part.content
        if text and (m := re.match(r"m\d+\b", text)):
            return m.group(0)
    return None


def orphan_results(messages: Iterable[Message]) -> list[str]:
    """Tool results whose call is not earlier among ``messages``."""
    calls: set[str] = set()
    orphans: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                calls.add(part.tool_call_id)
            elif isinstance(part, ToolResultPart) and part.tool_call_id not in calls:
                orphans.append(part.tool_call_id)
    return orphans


def tool_ids(messages: Iterable[Message], kind: type[ToolCallPart | ToolResultPart]) -> set[str]:
    return {p.tool_call_id for m in messages for p in m.parts if isinstance(p, kind)}


@dataclass
class InvariantChecker:
    """SPEC §4 invariants, checked against the store after each step of a scenario."""

    store: Store
    key: str
    thread_id: str
    sent: list[list[str]] = field(default_factory=list[list[str]])
    """Per actor, the ids of the messages it passed to prepare/record, in order."""
    cursor: int = 0
    log_seen: bool = False
    generations: set[str] = field(default_factory=set[str])
    events: list[Event] = field(default_factory=list[Event])
    watches: list[ReflectionWatch] = field(default_factory=list[ReflectionWatch])
    checked_failures: int = 0

    def actor(self) -> int:
        self.sent.append([])
        return len(self.sent) - 1

    def sent_messages(self, actor: int, messages: Sequence[Message]) -> None:
        self.sent[actor].extend(m.id for m in messages)

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    async def head(self) -> OMRecord:
        record = await self.store.get_record(self.key)
        assert record is not None, "the record disappeared"
        return record

    # 1 ---------------------------------------------------------------------------------------

    async def check_no_message_lost(self) -> list[Message]:
        """Every message given to prepare/record is stored exactly once, in order."""
        stored = await self.store.list_messages(self.thread_id)
        ids = [m.id for m in stored]
        assert [m.seq for m in stored] == list(range(1, len(stored) + 1)), "seq gaps"
        assert len(ids) == len(set(ids)), (
            f"a message is stored twice: {Counter(ids).most_common(3)}"
        )
        assert sorted(ids) == sorted(i for s in self.sent for i in s), "stored != sent"
        position = {mid: i for i, mid in enumerate(ids)}
        for sent in self.sent:
            assert [position[i] for i in sent] == sorted(position[i] for i in sent), (
                "an actor's messages are stored out of order"
            )
        return stored

    # 2 ---------------------------------------------------------------------------------------

    async def check_context(self, prepared: PreparedContext, *, concurrent: bool) -> None:
        """The raw messages the actor sees are exactly the stored ones after the cursor (but the
        oldest ones a left-out note stands for).

        With another engine on the thread, messages it appends after this prepare read its record
        may follow, so the raw messages must be a prefix of the stored ones after the cursor.
        """
        record = prepared.record if concurrent else await self.head()
        if not concurrent:
            assert dict(record.cursor) == dict(prepared.record.cursor), (
                "prepare returned a record other than the stored head"
            )
        stored = await self.store.list_messages(self.thread_id)
        cursor = record.cursor.get(self.thread_id, 0)
        after = [m.id for m in stored if (m.seq or 0) > cursor]
        raw = [m.id for m in raw_messages(prepared.messages)]
        # The oldest may be left out (while observation catches up), a note standing for them.
        notes = [m for m in prepared.messages if m.id == "obsmem-left-out"]
        after = after[notes[0].metadata["obsmem"]["count"] :] if notes else after
        if concurrent:
            # (The other engine may already have observed this step's input: it is history to it.)
            assert raw == after[: len(raw)], "raw messages are not the ones right after the cursor"
        else:
            assert raw == after, (
                f"raw messages {raw} are not the stored messages after cursor {cursor}: {after}"
            )
        # 6: the context never starts a tool pair in the middle.
        assert not orphan_results(raw_messages(prepared.messages)), "tool result without its call"

    async def check_log_coverage(self, *, exact: bool) -> None:
        """No message is both raw and in the log, nor in the log twice; with ``exact`` (no
        reflection has dropped lines) every observed message with text is in the log once."""
        record = await self.head()
        stored = await self.store.list_messages(self.thread_id)
        cursor = record.cursor.get(self.thread_id, 0)
        counts = said_counts(record.observations)
        twice = {t: n for t, n in counts.items() if n > 1}
        assert not twice, f"messages observed twice: {twice}"
        for m in stored:
            token = id_token(m)
            if token is None:
                continue
            if (m.seq or 0) > cursor:
                assert counts[token] == 0, f"{token} (seq {m.seq}) is raw and in the log"
            elif exact:
                assert counts[token] == 1, f"{token} (seq {m.seq}) is neither raw nor in the log"

    # 3, 4, 5, 6 ----------------------------------------------------------------------------------

    async def check_record(self) -> OMRecord:
        record = await self.head()
        cursor = record.cursor.get(self.thread_id, 0)
        # 3: the cursor never moves backwards, within and across generations.
        assert cursor >= self.cursor, f"cursor moved backwards: {self.cursor} -> {cursor}"
        self.cursor = cursor
        history = await self.store.history(self.key)
        assert history[0].id == record.id, "the head is not the newest generation"
        assert record.is_head
        for newer, older in itertools.pairwise(history):
            assert older.superseded_by is not None, f"retired generation {older.id} is a head"
            assert newer.generation > older.generation
            assert newer.cursor.get(self.thread_id, 0) >= older.cursor.get(self.thread_id, 0), (
                "a newer generation's cursor is behind an older one's"
            )
            # 5: a reflection never starts a generation with an empty log.
            assert newer.observations.strip(), f"generation {newer.generation} has an empty log"
        # 4: chunks continue right after the cursor; none covers observed messages.
        await assert_no_gap_no_double(self.store, self.key, [self.thread_id])
        for chunk in record.chunks:
            for r in chunk.ranges:
                assert r.first_seq > cursor, f"chunk {chunk.id} covers observed messages"
        # 5: once there is a log it never becomes empty.
        has_log = bool(record.observations.strip())
        assert has_log or not self.log_seen, "the observation log was emptied"
        self.log_seen = has_log
        self.generations.add(record.id)
        # 6: tool calls and their results are on the same side of the cursor.
        stored = await self.store.list_messages(self.thread_id)
        observed = [m for m in stored if (m.seq or 0) <= cursor]
        raw = [m for m in stored if (m.seq or 0) > cursor]
        split = tool_ids(observed, ToolCallPart) & tool_ids(raw, ToolResultPart)
        assert not split, f"tool calls observed but their results raw: {split}"
        dangling = tool_ids(observed, ToolCallPart) - tool_ids(observed, ToolResultPart)
        assert not dangling, f"tool calls observed before their results exist: {dangling}"
        assert not orphan_results(raw), "raw messages start with a tool result"
        return record

    def check_failed_reflections(self, *, current_log: str | None, concurrent: bool) -> None:
        """5: a failed synchronous reflection leaves the log as it was when it started (and, when
        it was the step's last work, as the step left it). With another engine on the thread the
        log may change meanwhile through that engine's work, but never to empty."""
        failed_events = [
            e
            for e in self.events
            if e.type == "data-om-observation-failed"
            and getattr(e, "operation_type", None) == "reflection"
        ]
        failures = [f for w in self.watches for f in w.failed]
        assert len(failures) == len(failed_events), "a failed reflection went unreported"
        for cycle_id, before, after in failures[self.checked_failures :]:
            if concurrent:
                assert after.strip() or not before.strip(), f"{cycle_id} emptied the log"
                continue
            assert after == before, f"failed reflection {cycle_id} changed the log"
            if current_log is not None:
                assert current_log == before, f"the log changed after failed reflection {cycle_id}"
        self.checked_failures = len(failures)
