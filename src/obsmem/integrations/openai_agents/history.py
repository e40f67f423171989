"""What an :class:`~obsmem.integrations.openai_agents.ObservationalSession` stores and shows
beyond memory's own rules: tool calls that wait for an approval, results stored in a later batch
than their call, the SDK's ``SessionSettings(limit=n)`` on top of memory, what a clear does, and
the tool loop run without the input filter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import aclosing
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

from obsmem.convert.openai_agents import METADATA_KEY, item_count, item_dict, item_role
from obsmem.errors import ConfigError
from obsmem.memory import Memory
from obsmem.messages import Message, ToolCallPart, ToolResultPart

if TYPE_CHECKING:
    from agents.memory.session_settings import SessionSettings

    from obsmem.integrations.openai_agents.session import ObservationalSession

ClearChoice: TypeAlias = Literal["new_thread", "forget"]
"""What ``ObservationalSession.clear_session()`` does (the ``on_clear`` option): go on in a new
memory thread, forgetting nothing (``"new_thread"``, the default), or forget this thread's
memory (``"forget"``)."""


def waiting_calls(stored: Sequence[Message], approving: frozenset[str]) -> list[str]:
    """The calls in ``stored`` of tools that need approval, stored without their output."""
    parts = [p for m in stored for p in m.parts]
    answered = {p.tool_call_id for p in parts if isinstance(p, ToolResultPart)}
    calls = [p for p in parts if isinstance(p, ToolCallPart) and p.tool_name in approving]
    return [p.tool_call_id for p in calls if p.tool_call_id not in answered]


def answered_elsewhere(items: Sequence[Any]) -> set[str]:
    """The call ids of the outputs in ``items`` that name no tool and whose call is not in
    ``items``: their call was stored in an earlier batch."""
    read = [d for d in map(item_dict, items) if isinstance(d.get("call_id"), str)]
    called = {d["call_id"] for d in read if str(d.get("type", "")).endswith("_call")}
    outputs = [d for d in read if str(d.get("type", "")).endswith("_output")]
    return {d["call_id"] for d in outputs if not isinstance(d.get("name"), str)} - called


async def call_names(memory: Memory, thread: str, wanted: set[str]) -> dict[str, str]:
    """The tool names of the calls ``wanted``, read from the thread's shown tail (the call a
    late result answers is usually among the last messages)."""
    names: dict[str, str] = {}
    async with aclosing(memory.shown_tail(thread)) as tail:
        async for message in tail:
            for part in message.parts:
                if isinstance(part, ToolCallPart) and part.tool_call_id in wanted:
                    names.setdefault(part.tool_call_id, part.tool_name)
            if not wanted - names.keys():
                break
    return names


def _tied_to(message: Message, dropped: set[str]) -> bool:
    """A synthetic message memory put next to one of the ``dropped`` messages (its temporal-gap
    note, or the answer to its unanswered calls)."""
    return any(
        message.id.startswith(prefix) and message.id.removeprefix(prefix) in dropped
        for prefix in ("obsmem-gap-", "obsmem-interrupted-")
    )


def _without_orphan_results(messages: Sequence[Message]) -> list[Message]:
    """``messages`` without the tool messages whose calls are not before them."""
    seen: set[str] = set()
    out: list[Message] = []
    for message in messages:
        calls = {p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)}
        results = [p for p in message.parts if isinstance(p, ToolResultPart)]
        if results and not calls and all(p.tool_call_id not in seen for p in results):
            continue
        seen |= calls
        out.append(message)
    return out


def bounded(messages: Sequence[Message], limit: int | None, run_from: int | None) -> list[Message]:
    """Memory's context with at most ``limit`` items of the history from before this run (the
    messages stored from seq ``run_from`` on are this run's and all stay), as the SDK applies
    ``SessionSettings.limit`` to a plain session. Memory's notes stay in front, and no tool
    result is left without its call."""
    if limit is None:
        return list(messages)
    history = [
        i
        for i, m in enumerate(messages)
        if m.seq is not None and (run_from is None or m.seq < run_from)
    ]
    budget = max(limit, 0)
    kept: set[int] = set()
    for i in reversed(history):
        size = item_count(messages[i])
        if size > budget:
            break
        budget -= size
        kept.add(i)
    dropped = {messages[i].id for i in history if i not in kept}
    if not dropped:
        return list(messages)
    shown = [m for m in messages if m.id not in dropped and not _tied_to(m, dropped)]
    return _without_orphan_results(shown)


def limit_of(settings: SessionSettings | Mapping[str, Any] | None) -> int | None:
    raw = (
        settings.get("limit") if isinstance(settings, Mapping) else getattr(settings, "limit", None)
    )
    if raw is None:
        return None
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise ConfigError(
            "ObservationalSession.session_settings.limit",
            raw,
            "give the most items of earlier history to send as a whole number >= 0, or None",
        )
    return raw


def clear_choice(memory: Memory, on_clear: str | None) -> ClearChoice:
    if on_clear is None:
        return "new_thread"
    if on_clear not in ("new_thread", "forget"):
        raise ConfigError(
            "ObservationalSession.on_clear",
            on_clear,
            'must be "new_thread" (start the conversation over, keep what memory learned) or '
            '"forget" (forget this thread\'s memory as well)',
        )
    if on_clear == "forget" and memory.options is not None and memory.options.scope == "resource":
        raise ConfigError(
            "ObservationalSession.on_clear",
            on_clear,
            "in resource scope the memory is shared by the resource's threads, so one session "
            'cannot forget it; use on_clear="new_thread"',
        )
    return on_clear


def next_thread(metadata: Mapping[str, Any]) -> tuple[str | None, int]:
    """The thread a session goes on in after its clears (None: its first thread), and how many
    clears there were, from its first thread's metadata."""
    state: Any = metadata.get(METADATA_KEY)
    if not isinstance(state, dict):
        return None, 0
    state = cast(dict[str, Any], state)
    thread, clears = state.get("thread"), state.get("clears")
    return (thread if isinstance(thread, str) else None, clears if isinstance(clears, int) else 0)


def after_tools(items: Sequence[Any], after_tool: bool) -> tuple[bool, bool]:
    """Read a batch the Runner stored (it stores each step's items before the next model
    call): whether the model answered the tool output an earlier batch ended with
    (``after_tool``), so the run made more than one model call; and whether this batch ends
    with a tool's output."""
    steps = [r for r in map(item_role, items) if r in ("assistant", "tool")]
    answered = after_tool and "assistant" in steps
    ends_with_tool = steps[-1] == "tool" if steps else after_tool
    return answered, ends_with_tool


UNFILTERED = (
    "ObservationalSession %r: a run called the model again after a tool without the session's "
    "input filter, so memory was assembled only once, at the start of the run, and every later "
    "step was sent the Runner's whole growing item list (no observation, buffering or "
    "activation between the steps). Pass "
    "RunConfig(call_model_input_filter=session.call_model_input_filter) to Runner.run for "
    "memory at every model call. (Said once per session.)"
)


def offers_recall(tools: Sequence[Any]) -> bool:
    """The agent has an enabled ``recall`` tool (a tool enabled per run counts as enabled)."""
    return any(
        getattr(t, "name", None) == "recall" and getattr(t, "is_enabled", True) is not False
        for t in tools
    )


@cache
def settings_class() -> type[SessionSettings]:
    from agents.memory.session_settings import SessionSettings

    class MemorySessionSettings(SessionSettings):
        """What an :class:`ObservationalSession` shows the Runner: no limit, so the Runner
        reads memory's context rather than the raw tail. The limit of a
        ``RunConfig(session_settings=...)``, which the Runner lays over these, goes to the
        session, which applies it on top of memory."""

        _obsmem_session: ObservationalSession

        def resolve(self, override: SessionSettings | dict[str, Any] | None) -> SessionSettings:
            session = self._obsmem_session
            merged = SessionSettings(limit=session.limit).resolve(override)
            session._limit_for_next_run = merged.limit  # pyright: ignore[reportPrivateUsage]
            return SessionSettings()

    return MemorySessionSettings


class SettingsAttribute:
    """``ObservationalSession.session_settings``: reads as settings without a limit that hand a
    RunConfig's limit to the session (``settings_class``); setting it sets the session's
    limit. A descriptor, so that ``session.session_settings = SessionSettings(limit=20)`` (as on
    the SDK's own sessions) cannot make the Runner read the raw tail instead of memory."""

    def __get__(self, session: ObservationalSession | None, owner: type | None = None) -> Any:
        if session is None:
            return self
        settings = settings_class()()
        object.__setattr__(settings, "_obsmem_session", session)
        return settings

    def __set__(self, session: ObservationalSession, value: Any) -> None:
        session.limit = limit_of(value)


UNSET: Any = object()
