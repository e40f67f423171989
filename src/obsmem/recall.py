"""The ``recall`` tool: the agent pages back to exact wording, lists threads, or searches
observation groups by meaning.

Every call is bound to the caller's resource (and, in thread scope, thread) when the tool is made;
whatever ids, ranges, thread ids or queries the model sends, nothing outside that boundary is
read or shown. Output is text for the model, budgeted to about ``budget`` tokens, with hints that
say exactly how to get the rest.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .embeddings import Embedder
from .errors import ConfigError
from .messages import Message, Part
from .options import ResolvedRetrieval
from .records import ObservationGroup
from .stores import CoreStore, SearchableStore
from .stores.base import missing_methods
from .tokens import HeuristicEstimator

__all__ = [
    "RECALL_DESCRIPTION",
    "RECALL_GUIDANCE",
    "RECALL_NAMES",
    "RecallBoundary",
    "RecallRequest",
    "SearchHit",
    "check_request",
    "invalid_request",
    "parse_request",
    "recall",
    "recall_guidance",
    "recall_parameters",
    "search_groups",
    "with_recall_parameters",
]

Mode = Literal["messages", "threads", "search"]
ToolFn = TypeVar("ToolFn", bound=Callable[..., Awaitable[Any]])
SearchFn = Callable[
    [str, str | None, datetime | None, datetime | None, int], Awaitable["list[SearchHit]"]
]

LOW_DETAIL_TOKENS = {"text": 100, "tool-call": 20, "tool-result": 20}
OTHER_PART_TOKENS = 30
MAX_LIMIT = 20
DEFAULT_BUDGET = 2_000
"""The most tokens one recall answer takes from the context."""
HINT_TOKENS = 120
"""Kept free for the paging hints that end an answer."""
MIN_BUDGET = 200
WINDOW_CHARS_PER_TOKEN = 8
"""Characters looked at per token of budget when paging a long part (more than any text
spends per token)."""
_ESTIMATOR = HeuristicEstimator()

MAX_PAGE = 1_000_000
MAX_TEXT = 2_000
"""Bounds of the recall arguments a model may send (pages, part indexes, text lengths)."""

RECALL_DESCRIPTION = (
    'Read the raw messages behind your notes (mode "messages": page from a `cursor` message '
    'id, forward with page=1 or backward with page=-1; `detail` "high" or '
    '`part_index`/`char_offset` for a whole part), list conversations (mode "threads"), or '
    'search your notes by meaning (mode "search" with a `query`).'
)
"""The ``recall`` tool's description, the same in every framework."""


class RecallRequest(BaseModel):
    """The ``recall`` tool's parameters (mode, cursor, query, ...), as a schema for the
    frameworks whose tools take one (LangChain, the Agents SDK). Values the schema accepts but
    recall cannot use (an unknown mode, a limit above 20) are answered with a message that
    says what to send."""

    model_config = ConfigDict(extra="forbid")

    mode: str = Field("messages", description='"messages", "threads" or "search"')
    cursor: str | None = Field(
        None, description="a message id to page from (mode messages)", max_length=MAX_TEXT
    )
    page: int = Field(
        1, description="1 pages forward from the cursor, -1 backward", ge=-MAX_PAGE, le=MAX_PAGE
    )
    limit: int = Field(MAX_LIMIT, description=f"messages per page, at most {MAX_LIMIT}", ge=1)
    detail: str = Field("low", description='"low" (shortened parts) or "high"')
    part_index: int | None = Field(
        None, description="read one part of the cursor message", ge=0, le=MAX_PAGE
    )
    char_offset: int = Field(0, description="where to start reading that part", ge=0)
    query: str | None = Field(
        None, description="what to search for (mode search)", max_length=MAX_TEXT
    )
    thread_id: str | None = Field(
        None, description="another conversation of this user", max_length=MAX_TEXT
    )
    before: str | None = Field(
        None, description="search notes dated before (ISO date)", max_length=64
    )
    after: str | None = Field(
        None, description="search notes dated after (ISO date)", max_length=64
    )


RECALL_NAMES: tuple[str, ...] = tuple(RecallRequest.model_fields)
"""The ``recall`` tool's parameters in order (a plain function's positional arguments)."""


def recall_parameters() -> list[inspect.Parameter]:
    """The ``recall`` tool's parameters as keyword-only function parameters: the fields of
    :class:`RecallRequest`, with their types and defaults."""
    return [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=field.default, annotation=field.annotation
        )
        for name, field in RecallRequest.model_fields.items()
    ]


def with_recall_parameters(
    tool: ToolFn, parameters: Sequence[inspect.Parameter] | None = None, returns: Any = str
) -> ToolFn:
    """``tool``, a function taking ``**arguments``, presented with the ``recall`` tool's
    parameters (:func:`recall_parameters` unless given), as frameworks read a function
    (``inspect.signature``, type hints) to build a tool's schema. So the parameters are written
    once, in :class:`RecallRequest`, whichever framework shows the tool."""
    shown = list(recall_parameters() if parameters is None else parameters)
    tool.__signature__ = inspect.Signature(shown, return_annotation=returns)
    tool.__annotations__ = {p.name: p.annotation for p in shown} | {"return": returns}
    return tool


def _tokens(text: str) -> int:
    return _ESTIMATOR.count_text(text)


def _fit(text: str, tokens: int) -> str:
    """The longest start of ``text`` within ``tokens`` (by the estimate; found in a few
    proportional steps, never by scanning the whole text character by character)."""
    if tokens <= 0:
        return ""
    total = _tokens(text)
    if total <= tokens:
        return text
    size = int(len(text) * tokens / total)
    for _ in range(8):
        size = min(size, len(text))
        count = _tokens(text[:size])
        if count <= tokens:
            return text[:size]
        size = int(size * tokens / count * 0.95)
    return text[: max(0, size)]


def _within(answer: str, budget: int) -> str:
    """The answer, cut (with a note) if it came out over ``budget`` tokens after all."""
    if _tokens(answer) <= budget:
        return answer
    note = "\n[answer cut to stay within the recall budget; ask for less, or page on]"
    return _fit(answer, budget - _tokens(note)) + note


RECALL_GUIDANCE = """\
Your notes are a summary. The raw messages behind them are still stored, and the `recall` tool \
reads them. Notes start with `[recall range FIRST:LAST]`: the ids of the first and last message \
they came from.
- mode "messages": page through raw messages. Give `cursor` (a message id) and `page` (1 = from \
that message on, 2 = the next page, -1 = the messages before it); without a cursor, page 1 starts \
at the beginning of the conversation and page -1 at its end. `detail` "low" (default) \
shortens long parts; follow the hint it prints (part_index, detail "high", char_offset) to read \
a part in full.
- mode "threads": list the conversations you can recall.
- mode "search": find the notes about a topic (`query`), with the range of raw messages each \
came from; then page those messages with mode "messages".
Use recall when the user asks for exact wording, numbers, code or lists you no longer have, or to \
verify a detail before relying on it. Do not use it for what your notes already answer."""


def recall_guidance(retrieval: ResolvedRetrieval | None) -> str | None:
    """The built-in recall guidance, with ``retrieval.instructions`` appended (never replacing
    it); None when retrieval is off."""
    if retrieval is None:
        return None
    text = RECALL_GUIDANCE
    if not retrieval.vector:
        text = text.replace(
            '- mode "search": find the notes about a topic (`query`), with the range of raw '
            'messages each came from; then page those messages with mode "messages".\n',
            "",
        )
    if retrieval.instructions:
        text += f"\n\n### Additional recall guidance\n{retrieval.instructions.strip()}"
    return text


@dataclass(frozen=True, slots=True, kw_only=True)
class RecallBoundary:
    """What one recall tool may read: the caller's resource, and in thread scope its thread."""

    resource_id: str
    thread_id: str
    scope: Literal["thread", "resource"] = "resource"


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchHit:
    group: ObservationGroup
    score: float


def searchable(store: CoreStore) -> SearchableStore:
    """``store`` as one that keeps observation groups, which recall needs; a ConfigError
    naming the methods to implement otherwise."""
    if isinstance(store, SearchableStore):
        return store
    raise ConfigError(
        "observational_memory.retrieval",
        True,
        f"recall keeps observation groups, and {type(store).__name__} has no "
        f"{', '.join(missing_methods(store, SearchableStore))} (SearchableStore): implement "
        "them (docs/writing-a-store.md) or turn retrieval off",
    )


def search_groups(store: SearchableStore, embedder: Embedder, boundary: RecallBoundary) -> SearchFn:
    """Semantic search over the observation groups inside ``boundary``'s resource."""

    async def search(
        query: str,
        thread_id: str | None,
        after: datetime | None,
        before: datetime | None,
        limit: int,
    ) -> list[SearchHit]:
        [vector] = await embedder.embed([query])
        hits = await store.search_embeddings(
            boundary.resource_id,
            vector,
            model=embedder.name,
            thread_id=thread_id,
            after=after,
            before=before,
            limit=limit,
        )
        return [SearchHit(group=g, score=score) for g, score in hits]

    return search


async def recall(
    store: CoreStore,
    boundary: RecallBoundary,
    search: SearchFn | None = None,
    budget: int = DEFAULT_BUDGET,
    /,
    **request: Any,
) -> str:
    """Run one recall request (``request``: the tool's parameters, :class:`RecallRequest`'s
    fields) and render the answer for the model, never more than ``budget`` tokens whatever is
    asked (long parts are paged by ``part_index`` and ``char_offset``). Arguments of the wrong
    type or out of range come back as a message saying what to send: whatever a model passes,
    recall answers and never raises. ``search`` and ``budget`` are positional only, so a model's
    argument of either name is one more unknown parameter, never the caller's."""
    checked = check_request(request)
    if isinstance(checked, str):
        return _within(checked, budget)
    answer = await _answer(store, boundary, checked, search, max(MIN_BUDGET, budget - HINT_TOKENS))
    return _within(answer, budget)


async def _answer(
    store: CoreStore,
    boundary: RecallBoundary,
    request: RecallRequest,
    search: SearchFn | None,
    budget: int,
) -> str:
    if request.mode == "threads":
        return await _threads(store, boundary, budget)
    if request.mode == "search":
        if search is None:
            return 'Search is not available here: use mode "messages" to page raw messages.'
        if not request.query or not request.query.strip():
            return 'mode "search" needs a `query`.'
        target, refused = await _thread_in_boundary(store, boundary, request.thread_id)
        if refused is not None:
            return refused
        hits = await search(
            request.query,
            target if request.thread_id else _scoped(boundary),
            _date(request.after),
            _date(request.before),
            min(request.limit, MAX_LIMIT),
        )
        return _render_hits(hits, boundary, budget)
    if request.mode != "messages":
        return f'Unknown mode {request.mode!r}: use "messages", "threads" or "search".'
    limit = max(1, min(MAX_LIMIT, int(request.limit)))
    page = int(request.page) or 1
    cursor = request.cursor
    if cursor is not None and ":" in cursor:
        return (
            f"cursor must be one message id, not a range; to read the range {cursor}, use "
            f'cursor="{cursor.split(":", 1)[0]}" and page=1.'
        )
    if cursor is not None:
        found = await store.get_messages([cursor], resource_id=boundary.resource_id)
        if not found or (boundary.scope == "thread" and found[0].thread_id != boundary.thread_id):
            return f"No message {cursor!r} in this conversation's memory."
        anchor = found[0]
        if request.part_index is not None:
            return _one_part(anchor, request.part_index, request.char_offset, budget)
        thread_id = anchor.thread_id or boundary.thread_id
        return await _page(store, thread_id, anchor, page, limit, request.detail, budget)
    target, refused = await _thread_in_boundary(store, boundary, request.thread_id)
    if refused is not None:
        return refused
    if await store.get_thread(target) is None:
        return "This conversation has no stored messages yet."
    return await _page(store, target, None, page, limit, request.detail, budget)


def _scoped(boundary: RecallBoundary) -> str | None:
    return boundary.thread_id if boundary.scope == "thread" else None


async def _thread_in_boundary(
    store: CoreStore, boundary: RecallBoundary, thread_id: str | None
) -> tuple[str, str | None]:
    """(the thread to read, None), or (the current thread, why the request was refused)."""
    if thread_id is None or thread_id in ("", "current", boundary.thread_id):
        return boundary.thread_id, None
    if boundary.scope == "thread":
        refusal = f"Only this conversation can be recalled here; thread {thread_id!r} is not it."
        return boundary.thread_id, refusal
    thread = await store.get_thread(thread_id)
    if thread is None or thread.resource_id != boundary.resource_id:
        return boundary.thread_id, f"No thread {thread_id!r} among this user's conversations."
    return thread.id, None


async def _threads(store: CoreStore, boundary: RecallBoundary, budget: int) -> str:
    if boundary.scope == "thread":
        threads = [t for t in [await store.get_thread(boundary.thread_id)] if t is not None]
    else:
        threads = await store.list_threads(boundary.resource_id)
    if not threads:
        return "No conversations stored yet."
    lines = [f"{len(threads)} conversation(s):"]
    used = _tokens(lines[0])
    ordered = sorted(threads, key=lambda t: t.updated_at, reverse=True)
    for shown, t in enumerate(ordered):
        current = " (current)" if t.id == boundary.thread_id else ""
        line = (
            f"- {_fit(t.title or 'untitled', 50)}{current}: id {t.id}, {t.message_count} "
            f"messages, updated {t.updated_at:%Y-%m-%d %H:%M}, created {t.created_at:%Y-%m-%d}"
        )
        if used + _tokens(line) > budget:
            lines.append(f"[{len(ordered) - shown} more conversation(s) left out]")
            break
        lines.append(line)
        used += _tokens(line)
    return "\n".join(lines)


async def _page(
    store: CoreStore,
    thread_id: str,
    anchor: Message | None,
    page: int,
    limit: int,
    detail: str,
    budget: int,
) -> str:
    """Page ``page`` of ``limit`` messages: page 1 starts at the anchor (the cursor message, or
    the thread's first message), page 2 follows it; page -1 ends just before the anchor (or at
    the thread's last message when there is no cursor)."""
    thread = await store.get_thread(thread_id)
    total = thread.message_count if thread is not None else 0
    if page > 0:
        first = (anchor.seq or 1) if anchor is not None else 1
        messages = await store.list_messages(
            thread_id, after_seq=first - 1 + (page - 1) * limit, limit=limit
        )
    else:
        end = (anchor.seq or 1) - 1 if anchor is not None else total
        through = end - (abs(page) - 1) * limit
        if through < 1:
            return "No earlier messages."
        newest = await store.list_messages(
            thread_id, through_seq=through, limit=limit, newest_first=True
        )
        messages = list(reversed(newest))
    messages = [m for m in messages if any(p.kind != "data" for p in m.parts)]
    if not messages:
        return "No more messages in that direction."
    out: list[str] = []
    used = 0
    for message in messages:
        block = _render_message(message, detail, budget - used)
        cost = _tokens(block)
        if out and used + cost > budget:
            out.append(
                f'[output budget reached: continue with recall cursor="{message.id}" page=1]'
            )
            break
        out.append(block)
        used += cost
    first_m, last_m = messages[0], messages[-1]
    hint = f"[messages #{first_m.seq}-#{last_m.seq} of {total} in thread {thread_id}"
    if anchor is not None:
        hint += (
            f'; next: cursor="{anchor.id}" page={page + 1 if page != -1 else 1}, '
            f'previous: cursor="{anchor.id}" page={page - 1 if page != 1 else -1}]'
        )
    else:
        hint += f'; next: cursor="{last_m.id}" page=2, previous: cursor="{first_m.id}" page=-1]'
    out.append(hint)
    return "\n\n".join(out)


def _render_message(message: Message, detail: str, budget: int) -> str:
    """One message, its parts shortened in low detail; in high detail whole as long as the
    ``budget`` lasts, then cut with the hint that reads on."""
    when = f"{message.created_at:%Y-%m-%d %H:%M:%S}Z"
    header = f"**{message.role} ({when})** [{message.id}] #{message.seq}:"
    lines = [header]
    left = budget - _tokens(header)
    for index, part in enumerate(message.parts):
        if part.kind == "data":
            continue
        text = _part_text(part)
        low = LOW_DETAIL_TOKENS.get(part.kind, OTHER_PART_TOKENS)
        cap = low if detail == "low" else max(left, 0)
        shown = _fit(text, cap)
        if len(shown) < len(text):
            shown = (
                shown.rstrip()
                + f' … [{len(text) - len(shown)} more characters: recall cursor="{message.id}" '
                f'part_index={index} char_offset={len(shown)} detail="high"]'
            )
        line = f"  [p{index}] {shown}"
        lines.append(line)
        left -= _tokens(line)
    return "\n".join(lines)


def _part_text(part: Part) -> str:
    match part.kind:
        case "text":
            return part.text
        case "tool-call":
            args = part.args if isinstance(part.args, str) else json.dumps(part.args)
            return f"tool call {part.tool_name}({args})"
        case "tool-result":
            content = (
                part.content
                if isinstance(part.content, str)
                else json.dumps(part.content, ensure_ascii=False, default=str)
            )
            label = "tool error" if part.is_error else "tool result"
            return f"{label} {part.tool_name}: {content}"
        case "reasoning":
            return f"reasoning: {part.text}"
        case "image":
            return f"[image {part.filename or part.url or ''}]".replace(" ]", "]")
        case "file":
            return f"[file {part.filename or part.url or part.media_type}]"
        case "data":
            return ""


def _one_part(message: Message, index: int, char_offset: int, budget: int) -> str:
    parts = [p for p in message.parts if p.kind != "data"]
    if not 0 <= index < len(message.parts) or message.parts[index].kind == "data":
        return (
            (
                f"Message {message.id} has parts 0-{len(message.parts) - 1}; part_index {index} "
                "does not exist."
            )
            if parts
            else f"Message {message.id} has no readable parts."
        )
    text = _part_text(message.parts[index])
    start = min(max(0, int(char_offset)), len(text))
    # A token is at least one character, so what fits the budget lies in this window.
    chunk = _fit(text[start : start + budget * WINDOW_CHARS_PER_TOKEN], budget)
    end = start + len(chunk)
    tail = (
        f"\n[characters {start}-{end} of {len(text)}; the rest: recall "
        f'cursor="{message.id}" part_index={index} char_offset={end}]'
        if end < len(text)
        else f"\n[characters {start}-{end} of {len(text)}: the end of this part]"
    )
    return f"**{message.role}** [{message.id}] part {index}:\n{chunk}{tail}"


def _render_hits(hits: Sequence[SearchHit], boundary: RecallBoundary, budget: int) -> str:
    if not hits:
        return "No notes match that query."
    out: list[str] = []
    used = 0
    for hit in hits:
        g = hit.group
        where = (
            "this conversation" if g.thread_id == boundary.thread_id else f"thread {g.thread_id}"
        )
        block = (
            f"### {where}, group {g.id} (score {hit.score:.2f})\n"
            f"raw messages {g.start_id} through {g.end_id} (page them with recall "
            f'cursor="{g.start_id}" page=1)\n{_fit(g.observations.strip(), budget - used)}'
        )
        cost = _tokens(block)
        if out and used + cost > budget:
            out.append(f"[{len(hits) - len(out)} more results left out to stay within budget]")
            break
        out.append(block)
        used += cost
    return "\n\n".join(out)


def _date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        from datetime import UTC

        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def parse_request(arguments: str | Mapping[str, Any] | None) -> dict[str, Any] | str:
    """The keyword arguments of a ``recall`` call from a model's raw arguments (JSON text or a
    mapping), or, when they do not fit :class:`RecallRequest`, the message telling the model
    what to send instead. A null value means the parameter's default."""
    request = check_request(arguments)
    return request if isinstance(request, str) else request.model_dump(exclude_unset=True)


def check_request(arguments: str | Mapping[str, Any] | None) -> RecallRequest | str:
    """:func:`parse_request`, as the validated request."""
    try:
        raw: Any = arguments if isinstance(arguments, Mapping) else json.loads(arguments or "{}")
    except (ValueError, RecursionError) as exc:
        return f"recall was not run: the arguments are not JSON ({exc}). Send a JSON object."
    if not isinstance(raw, Mapping):
        return "recall was not run: send a JSON object of the tool's parameters."
    given = {k: v for k, v in cast(Mapping[str, Any], raw).items() if v is not None}
    try:
        return RecallRequest.model_validate(given)
    except ValidationError as exc:
        return invalid_request(exc)


def invalid_request(exc: ValidationError) -> str:
    """What the model is told when its ``recall`` arguments do not fit the schema."""
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
    )
    return f"recall was not run: {problems}. Send a JSON object of the tool's parameters."
