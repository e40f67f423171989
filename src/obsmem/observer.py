"""The Observer: render new messages as a transcript, ask the model for observations, parse.

:func:`render_transcript` writes messages in the transcript form the Observer's prompt explains: a
``Dec 4 2025:`` header per date, ``User (2:30 PM): …`` lines with the time only when it changed,
tool calls, capped tool results, reasoning, and numbered placeholders for images and files (the
attachments themselves are returned so they can be sent along as model inputs).
:func:`observe` makes the Observer call and retries once on empty or degenerate output.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any, Required, TypedDict, Unpack, cast

from obsmem.answers import ParsedOutput, parse_output
from obsmem.errors import ObserverOutputError
from obsmem.llm import LLMRequest, LLMResult, ModelCaller
from obsmem.messages import (
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    holds_much,
)
from obsmem.models import ModelSpec
from obsmem.models.streaming import REPEATING
from obsmem.neutral import QUOTED, neutral_block, neutral_line, neutral_log
from obsmem.observations import truncate_observations
from obsmem.prompts import observer_system_prompt
from obsmem.tokens import TokenEstimator

__all__ = [
    "ObserverExchange",
    "ObserverInput",
    "observe",
    "observe_exchange",
    "observer_user_message",
    "render_multi_thread_transcript",
    "render_transcript",
]

AttachmentFilter = Callable[[str], bool]
"""Called with an attachment's media type; True sends the attachment to the model."""

_ROLE_LABELS = {"user": "User", "assistant": "Assistant", "tool": "Tool"}
DEFAULT_PART_CAP = 5_000
"""The most tokens of one part the Observer sees, unless ``observation.max_part_tokens`` says
otherwise."""


def observer_output_cap(input_tokens: int) -> int:
    """Most tokens an Observer answer may take: half of what it observes, and never under
    2,000 (the hints, a title, extracted values). Observations compress dense chat 3-6x and
    tool output far more, so a legitimate answer stays well inside; a model that never stops
    costs at most half its input."""
    return max(2_000, input_tokens // 2)


def _allow_all(media_type: str) -> bool:
    return True


def _to_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _clock(at: datetime) -> str:
    hour = at.hour % 12 or 12
    return f"{hour}:{at.minute:02d} {'AM' if at.hour < 12 else 'PM'}"


def _day_header(day: date) -> str:
    return f"{day.strftime('%b')} {day.day} {day.year}:"


_INTERRUPTED = "[interrupted: no result was recorded]"


class _Renderer:
    """Transcript state shared across threads: attachment numbers and tool calls already seen."""

    def __init__(
        self, *, tz: tzinfo, estimator: TokenEstimator, cap: int, allow: AttachmentFilter
    ) -> None:
        self.tz = tz
        self.estimator = estimator
        self.cap = cap
        self.allow = allow
        self.attachments: list[ImagePart | FilePart] = []
        self._number = 0
        self._seen_calls: set[str] = set()
        self._answered: set[str] = set()

    def render(self, messages: Sequence[Message]) -> str:
        self._answered = {
            p.tool_call_id for m in messages for p in m.parts if isinstance(p, ToolResultPart)
        }
        out: list[str] = []
        last_day: date | None = None
        last_time: str | None = None
        for message in messages:
            gap = _temporal_gap(message)
            if gap is not None:
                out.append(gap)
                continue
            if message.role == "system":
                continue
            local = message.created_at.astimezone(self.tz)
            day, clock = local.date(), _clock(local)
            time = f" ({clock})" if (clock != last_time or day != last_day) else ""
            lines = self._message_lines(message, time, f" ({clock})")
            if not lines:
                continue
            if day != last_day:
                if out:
                    out.append("")
                out.append(_day_header(day))
                last_day = day
            last_time = clock
            out.extend(lines)
        return "\n".join(out)

    def _message_lines(self, message: Message, time: str, clock: str) -> list[str]:
        label = _ROLE_LABELS[message.role]
        lines: list[str] = []
        open_line = False  # the last line emitted continues the "Role: ..." line
        for index, part in enumerate(message.parts):
            piece: str | None = None
            match part:
                case TextPart():
                    piece = self._body(part.text, message, index)
                case ReasoningPart():
                    open_line = False
                    lines.append(f"Reasoning: {self._body(part.text, message, index)}")
                case ImagePart() | FilePart():
                    piece = self._attachment(part)
                case ToolCallPart():
                    open_line = False
                    if part.tool_call_id in self._seen_calls:
                        continue
                    self._seen_calls.add(part.tool_call_id)
                    args = part.args if isinstance(part.args, str) else _to_json(part.args)
                    name = neutral_line(part.tool_name)
                    lines.append(f"Tool Call {name}{clock}: {self._body(args, message, index)}")
                    if part.tool_call_id not in self._answered:
                        # Observed without a result: the run ended first (it will get none).
                        lines.append(f"Tool Result {name}: {_INTERRUPTED}")
                case ToolResultPart():
                    open_line = False
                    lines.append(self._result(part, message, index))
                    lines.extend(self._attachment(a) for a in part.attachments)
                case _:  # DataPart: stored, never shown to a model
                    continue
            if piece is None:
                continue
            if open_line and isinstance(part, TextPart):  # more text: quoted like its lines
                lines.append(f"{QUOTED}{piece}".rstrip())
            elif open_line:
                lines.append(piece)
            else:
                lines.append(f"{label}{time}: {piece}")
                time = ""
                open_line = True
        return lines

    def _attachment(self, part: ImagePart | FilePart) -> str:
        self._number += 1
        if self.allow(part.media_type):
            self.attachments.append(part)
        if isinstance(part, ImagePart):
            return f"Image: [Image #{self._number}: {neutral_line(part.filename or 'image')}]"
        return f"File: [File #{self._number}: {neutral_line(part.filename or 'file')}]"

    def _result(self, part: ToolResultPart, message: Message, index: int) -> str:
        content = part.content
        text = content if isinstance(content, str) else _to_json(content)
        kind = "Tool Error" if part.is_error else "Tool Result"
        return f"{kind} {neutral_line(part.tool_name)}: {self._body(text, message, index)}"

    def _body(self, text: str, message: Message, index: int) -> str:
        """A part's text as the transcript shows it: neutral (:mod:`obsmem.neutral`: no tag,
        every line after the first quoted), and capped. Neutralising changes no offsets, so the
        cap's recall marker still points into the stored text."""
        return neutral_block(self._cap(text, message, index))

    def _cap(self, text: str, message: Message, index: int) -> str:
        """``text`` when it fits the cap; else its head and tail (two thirds and one third of
        the cap) around a marker that says how much is left out and how recall fetches it."""
        tokens = self.estimator.count_text(text)
        if tokens <= self.cap:
            return text
        keep = int(len(text) * self.cap / tokens) if tokens else 0
        head = keep * 2 // 3
        tail = keep - head
        left_out = len(text) - head - tail
        marker = (
            f'… [{left_out:,} characters left out here: recall cursor="{message.id}" '
            f'part_index={index} char_offset={head} detail="high" reads them] …'
        )
        kept_tail = text[len(text) - tail :] if tail else ""
        return " ".join(x for x in (text[:head].rstrip(), marker, kept_tail.lstrip()) if x)


def _temporal_gap(message: Message) -> str | None:
    meta = message.metadata.get("obsmem")
    if isinstance(meta, dict):
        gap = cast(dict[str, Any], meta).get("temporal_gap")
        if isinstance(gap, str):
            return gap
    return None


def render_transcript(
    messages: Sequence[Message],
    *,
    tz: tzinfo,
    estimator: TokenEstimator,
    part_cap: int = DEFAULT_PART_CAP,
    attachment_filter: AttachmentFilter = _allow_all,
) -> tuple[str, list[ImagePart | FilePart]]:
    """The transcript of ``messages`` and the attachments to send with it.

    Every image or file gets a numbered placeholder; only attachments whose media type passes
    ``attachment_filter`` are returned. A part (text, tool arguments, tool result, reasoning)
    over ``part_cap`` tokens shows its head and tail around a marker naming the recall request
    that reads the rest; the stored message stays whole. System messages and data parts are
    left out.
    """
    renderer = _Renderer(tz=tz, estimator=estimator, cap=part_cap, allow=attachment_filter)
    return renderer.render(messages), renderer.attachments


def render_multi_thread_transcript(
    threads: Sequence[tuple[str, Sequence[Message]]],
    *,
    tz: tzinfo,
    estimator: TokenEstimator,
    part_cap: int = DEFAULT_PART_CAP,
    attachment_filter: AttachmentFilter = _allow_all,
) -> tuple[str, list[ImagePart | FilePart]]:
    """Like :func:`render_transcript`, one ``<thread id="…">`` block per thread.

    Attachment numbers run across all threads; date and time headers restart in each block.
    """
    renderer = _Renderer(tz=tz, estimator=estimator, cap=part_cap, allow=attachment_filter)
    return _thread_blocks(renderer, threads), renderer.attachments


def _thread_blocks(renderer: _Renderer, threads: Sequence[tuple[str, Sequence[Message]]]) -> str:
    return "\n\n".join(
        f'<thread id="{shown_thread_id(thread_id)}">\n{renderer.render(messages)}\n</thread>'
        for thread_id, messages in threads
    )


def shown_thread_id(thread_id: str) -> str:
    """A thread id as the Observer is shown it (and answers with it): on one line, with no
    tag or quote mark, so an id a client chose cannot close its own block."""
    return neutral_line(thread_id)


# ---------------------------------------------------------------------------------------------
# the Observer call
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ObserverInput:
    """What one Observer call sees."""

    messages: Sequence[Message] = ()
    """Thread scope: the new messages to observe."""
    threads: Sequence[tuple[str, Sequence[Message]]] = ()
    """Resource scope: ``(thread_id, messages)`` per thread; when set, ``messages`` is ignored."""
    previous_observations: str = ""
    """The whole current log; :func:`observe` truncates it to ``previous_observer_tokens``."""
    previous_observer_tokens: int | None = 2000
    """Budget for the previous log shown: ``None`` shows all of it, ``0`` none."""
    prior_current_task: str | None = None
    prior_suggested_response: str | None = None
    prior_thread_title: str | None = None
    ask_thread_title: bool = False
    continuation_hints: bool = True
    """Ask for ``<current-task>`` and ``<suggested-response>``."""
    instruction: str | None = None
    extra_sections: Sequence[tuple[str, str]] = ()
    """``(slug, description)`` of inline extractor sections to ask for."""
    prior_values: Mapping[str, Any] = field(default_factory=dict[str, Any])
    """Earlier extractor values by slug, shown as continuity hints."""
    tz: tzinfo = UTC
    part_cap: int = DEFAULT_PART_CAP
    """The most tokens shown of any single part (``observation.max_part_tokens``)."""

    @property
    def shown(self) -> Sequence[Message]:
        """Every message the call shows, of one thread or of all ``threads`` in order."""
        return [m for _, ms in self.threads for m in ms] if self.threads else self.messages


def observer_user_message(inp: ObserverInput, transcript: str, estimator: TokenEstimator) -> str:
    """The text of the Observer's user message: previous log, prior hints, task, transcript."""
    parts: list[str] = []
    previous = truncate_observations(
        inp.previous_observations, inp.previous_observer_tokens, estimator.count_text
    ).strip()
    if previous := neutral_log(previous):
        parts.append(
            "## Previous Observations\n\n"
            f"{previous}\n\n---\n\n"
            "Do not repeat these observations. Your new observations will be appended after them."
        )
    prior: list[str] = []
    for label, value in (
        ("current-task", inp.prior_current_task),
        ("suggested-response", inp.prior_suggested_response),
        ("thread-title", inp.prior_thread_title),
    ):
        if value:
            prior.append(f"- prior {label}: {neutral_block(value)}")
    for slug, value in inp.prior_values.items():
        shown = value if isinstance(value, str) else _to_json(value)
        prior.append(f"<{slug}>{neutral_block(shown)}</{slug}>")
    if prior:
        parts.append(
            "## Prior Thread Metadata\n\n"
            + "\n".join(prior)
            + "\n\nUse these only as continuity hints; update them from the new messages."
        )
    task = "## Your Task\n\nExtract new observations from the messages below. Do not repeat "
    task += "anything already in the previous observations."
    if not inp.continuation_hints:
        task += " Output <observations> every time."
    parts.append(task)
    zone = _zone(inp)
    parts.append(f"## New Message History to Observe\n\n{zone}\n\n{transcript}")
    return "\n\n".join(parts)


def _zone(inp: ObserverInput) -> str:
    """The time zone the transcript's times are in, named, with its offset at the newest
    message: "tomorrow" said at 23:30 local time is the next local day, not the next UTC day."""
    messages = inp.shown
    at = max((m.created_at for m in messages), default=datetime.now(UTC)).astimezone(inp.tz)
    offset = at.utcoffset() or timedelta(0)
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    hours, rest = divmod(abs(minutes), 60)
    name = getattr(inp.tz, "key", None) or at.tzname() or "UTC"
    utc = f"UTC{sign}{hours:02d}:{rest:02d}"
    label = name if name in (utc, "UTC") else f"{name} ({utc})"
    return (
        f'Times are in {label}. Work out relative dates ("tomorrow", "next week") in this '
        "time zone."
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ObserverExchange:
    """One finished Observer call: the parsed answer, the raw result and the request sent."""

    parsed: ParsedOutput
    result: LLMResult
    request: LLMRequest

    @property
    def seen(self) -> str:
        """The text of the user message the Observer saw (attachments left out)."""
        return "\n\n".join(item for item in self.request.user if isinstance(item, str))


class _ExchangeOptions(TypedDict, total=False):
    """How :func:`observe` calls the Observer: the keyword arguments of :func:`observe_exchange`."""

    caller: Required[ModelCaller]
    model: Required[ModelSpec]
    model_settings: Mapping[str, Any] | None
    estimator: Required[TokenEstimator]
    timeout: float | None
    attachment_filter: AttachmentFilter
    cycle_id: str
    operation: str


async def observe(
    inp: ObserverInput, **options: Unpack[_ExchangeOptions]
) -> tuple[ParsedOutput, LLMResult]:
    """Run the Observer over ``inp`` through ``caller`` and parse its answer.

    Empty or degenerate output is retried once, then raises ``ObserverOutputError``. Errors of
    the model call itself (``ModelError``) propagate unchanged.
    """
    exchange = await observe_exchange(inp, **options)
    return exchange.parsed, exchange.result


async def _rendered(
    inp: ObserverInput, estimator: TokenEstimator, attachment_filter: AttachmentFilter
) -> tuple[str, list[ImagePart | FilePart]]:
    """The transcript of ``inp`` and its attachments. Capping a page of megabytes counts all
    of it, seconds of CPU: large input is rendered off the event loop."""

    def render() -> tuple[str, list[ImagePart | FilePart]]:
        renderer = _Renderer(
            tz=inp.tz, estimator=estimator, cap=inp.part_cap, allow=attachment_filter
        )
        if inp.threads:
            return _thread_blocks(renderer, inp.threads), renderer.attachments
        return renderer.render(inp.messages), renderer.attachments

    return await asyncio.to_thread(render) if holds_much(inp.shown) else render()


async def observe_exchange(
    inp: ObserverInput,
    *,
    caller: ModelCaller,
    model: ModelSpec,
    model_settings: Mapping[str, Any] | None = None,
    estimator: TokenEstimator,
    timeout: float | None = None,  # noqa: ASYNC109 (passed on to LLMRequest)
    attachment_filter: AttachmentFilter = _allow_all,
    cycle_id: str = "",
    operation: str = "observation",
) -> ObserverExchange:
    """Like :func:`observe`, also returning the request (extractors' follow-ups show it)."""
    multi = bool(inp.threads)
    transcript, attachments = await _rendered(inp, estimator, attachment_filter)
    request = LLMRequest(
        role="observer",
        model=model,
        system=observer_system_prompt(
            multi_thread=multi,
            continuation_hints=inp.continuation_hints,
            thread_title=inp.ask_thread_title,
            extra_sections=inp.extra_sections,
            instruction=inp.instruction,
        ),
        user=[observer_user_message(inp, transcript, estimator), *attachments],
        model_settings=dict(model_settings or {}),
        input_tokens=(input_tokens := estimator.count_text(transcript)),
        timeout=timeout,
        operation=operation,
        cycle_id=cycle_id,
        max_output_tokens=observer_output_cap(input_tokens),
    )
    problem = advice = ""
    for _ in range(2):
        result = await caller.call(request)
        if result.cut_off not in (None, REPEATING):
            problem = f"cut off by obsmem {result.cut_off} (the model rambles)"
            advice = _RAMBLES
            continue
        if result.cut_off == REPEATING:
            problem = "degenerate (the same text repeated over and over)"
            advice = _RAMBLES
            continue
        parsed = parse_output(
            result.text, multi_thread=multi, extra_slugs=[slug for slug, _ in inp.extra_sections]
        )
        if parsed.is_empty and nothing_to_note(parsed, inp, result.text, transcript, input_tokens):
            return ObserverExchange(parsed=parsed, result=result, request=request)
        if parsed.is_empty:
            problem = "empty (not one observation in it)"
            advice = (
                "Use a stronger observation model: this one does not write observations in the "
                "format asked."
            )
            continue
        if (shortfall := lossy(parsed, inp, estimator)) is not None:
            problem, advice = shortfall, _LOSSY
            continue
        return ObserverExchange(parsed=parsed, result=result, request=request)
    raise ObserverOutputError(
        f"The Observer's answer was {problem} twice in a row; no observations were recorded and "
        f"the messages stay unobserved. {advice}"
    )


LOSSY_RATIO = 100
"""Notes this many times shorter than the user and assistant text they cover are a lost
answer, never a healthy cycle (:func:`lossy`)."""
LOSSY_FLOOR = 1_500
"""Below this many tokens of user and assistant text, any answer may be short enough."""
LOSSY_MESSAGE_TOKENS = 200
"""The most one message counts for: a pasted document may rightly become one line."""


def lossy(parsed: ParsedOutput, inp: ObserverInput, estimator: TokenEstimator) -> str | None:
    """What is wrong with an answer that covers far less than it was shown, or None.

    Observations compress conversation 3-40x; an answer :data:`LOSSY_RATIO` times shorter than
    the user and assistant text it was shown (tool output left out and each message counted up
    to :data:`LOSSY_MESSAGE_TOKENS`: a page, pasted or fetched, may rightly become one line)
    lost its notes somewhere, for example inside reasoning that was stripped, or
    behind a tag the parser took for the end of the block. Committing it would move the cursor
    past messages nobody noted."""
    messages = inp.shown
    shown = sum(
        min(estimator.count_text(_head(m)), LOSSY_MESSAGE_TOKENS)
        for m in messages
        if m.role in ("user", "assistant")
    )
    if shown < LOSSY_FLOOR:
        return None
    written = estimator.count_text(parsed.observations)
    if written * LOSSY_RATIO >= shown:
        return None
    return (
        f"far shorter than the conversation it covers ({written:,} tokens of notes for "
        f"{shown:,} tokens of user and assistant text)"
    )


_HEAD_CHARS = LOSSY_MESSAGE_TOKENS * 20
"""Enough of a message's text to count :data:`LOSSY_MESSAGE_TOKENS` in any script, so a
message of megabytes costs :func:`lossy` no more than a short one."""


def _head(message: Message) -> str:
    """The start of ``message``'s text parts, at most :data:`_HEAD_CHARS` characters."""
    head: list[str] = []
    left = _HEAD_CHARS
    for part in message.parts:
        if isinstance(part, TextPart) and left > 0:
            head.append(part.text[:left])
            left -= len(head[-1])
    return "\n".join(head)


NOTHING_TO_NOTE_TOKENS = 400
"""Messages this short (their transcript's tokens) may hold nothing worth noting: small talk,
thanks, an acknowledgement. A well-formed empty answer for them finishes the cycle."""


def nothing_to_note(
    parsed: ParsedOutput, inp: ObserverInput, answer: str, transcript: str, input_tokens: int
) -> bool:
    """Whether an answer without observations is the Observer's judgement, not its failure:
    one thread's short messages answered in the format asked, an ``<observations>`` block with
    nothing in it (not even a date header, which is where a tiny model stops) and, when they
    were asked for, the hints. An empty answer to messages with substance, or one without the
    format (rambling), stays a failure, and so does an answer that repeats the transcript (a
    model copying its input, whose well-formed block and hints came from the messages
    themselves); several threads' messages are asked again one thread at a time."""
    return (
        parsed.well_formed
        and not parsed.observations.strip()
        and (not inp.continuation_hints or bool(parsed.current_task or parsed.suggested_response))
        and not inp.threads
        and input_tokens <= NOTHING_TO_NOTE_TOKENS
        and not _echoes(answer, transcript)
    )


def _echoes(answer: str, transcript: str) -> bool:
    """Whether ``answer`` repeats a line of ``transcript`` (one long enough to tell)."""
    said = {line.strip() for line in transcript.splitlines() if len(line.strip()) >= 12}
    return any(line.strip() in said for line in answer.splitlines())


_LOSSY = (
    "The notes may have been written inside the model's reasoning, or cut short; use a "
    "stronger observation model if this keeps happening."
)
_RAMBLES = (
    "Use a stronger observation model, or check the server's chat template for it (a wrong "
    "template makes a model ramble); no max_tokens setting of the model's is at fault, obsmem "
    "cut the answer off itself."
)
