"""The MCP tools' logic over one :class:`~obsmem.Memory`, without the SDK: which conversation a
call may use (a client's ids are namespaced per resource, :mod:`.ids`), and what each tool does
and answers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, cast

from ..errors import MAX_ID_LENGTH, ConfigError, check_id
from ..messages import Message
from .arguments import MAX_WORKING_MEMORY_CHARS, BadArguments, kind, parse_messages
from .ids import default_thread, legacy_ids, longest_client_id, namespaced

if TYPE_CHECKING:
    from ..failures import MemoryStatus
    from ..integrations.door import Door
    from ..memory import Memory
    from ..records import Thread

__all__ = ["MemoryTools", "ToolAnswer", "default_thread"]

_NOT_WORKING = "Memory is not working as it should:\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolAnswer:
    """What a tool returns: text for the model, and the same facts as data for programs."""

    text: str
    data: dict[str, Any]


class MemoryTools:
    """The MCP tools (its public methods) over one :class:`~obsmem.Memory`, bound to
    ``resource`` (and, when ``thread`` is given, to that conversation only, its id as given)."""

    def __init__(self, memory: Memory, *, resource: str, thread: str | None = None) -> None:
        check_id("--resource", resource)
        if thread is not None:
            check_id("--thread", thread)
        elif longest_client_id(resource) < 1:
            raise ConfigError(
                "--resource",
                resource[:40] + "...",
                f"without --thread the resource's conversations are stored as mcp:<resource>:<id>"
                f", at most {MAX_ID_LENGTH} characters: give a shorter resource or a --thread",
            )
        self.memory = memory
        self.resource = resource
        self.locked = thread is not None
        self.thread = thread if thread is not None else default_thread(resource)

    def _given(self, thread_id: object) -> str | None:
        """``thread_id`` checked: None for the default conversation."""
        if thread_id is None or thread_id == "":
            return None
        if not isinstance(thread_id, str):
            raise BadArguments(
                f"thread_id must be a string (a conversation id), not {kind(thread_id)}; "
                "leave it out for the default conversation"
            )
        if self.locked and thread_id != self.thread:
            raise BadArguments(
                f"this server serves only the conversation {self.thread!r}: leave thread_id out"
            )
        try:
            check_id("thread_id", thread_id)
        except ConfigError as exc:
            raise BadArguments(f"thread_id: {exc.rule}") from None
        if not self.locked and len(namespaced(self.resource, thread_id)) > MAX_ID_LENGTH:
            raise BadArguments(
                f"thread_id has {len(thread_id)} characters: give at most "
                f"{longest_client_id(self.resource)} (this server stores it after its prefix "
                f"{self.thread}:)"
            )
        return thread_id

    async def _stored(self, given: str | None) -> tuple[str, Thread | None]:
        """The stored id ``given`` names and that thread, if it exists: the namespaced id, or
        one an earlier version stored it under, when that one is the resource's (:mod:`.ids`)."""
        if self.locked:
            return self.thread, await self.memory.thread(self.thread)
        chosen = namespaced(self.resource, given)
        found = await self.memory.thread(chosen)
        if found is None:
            for old in legacy_ids(self.resource, given):
                earlier = await self.memory.thread(old)
                if earlier is not None and earlier.resource_id == self.resource:
                    return old, earlier
        return chosen, found

    async def conversation(self, thread_id: object) -> tuple[str, int]:
        """The thread a call works on, and how many messages it has stored: the server's, or
        (without ``--thread``) the one named, in the resource's namespace (:mod:`.ids`), when
        it is new or belongs to the resource."""
        chosen, found = await self._stored(self._given(thread_id))
        if found is not None and found.resource_id != self.resource:
            fix = (
                "start the server with another --thread"
                if chosen == self.thread
                else "give another thread_id (a new conversation is created)"
            )
            raise BadArguments(f"the conversation {chosen!r} cannot be used here: {fix}")
        return chosen, found.message_count if found is not None else 0

    def _ref(self, thread: str) -> dict[str, str]:
        return {"resource": self.resource, "thread": thread}

    def _door(self, thread: str) -> Door:
        """The conversation's door: MCP takes the begin phase of the step protocol (store what
        the client gives, read the context) and recall; the client makes the model call."""
        from ..integrations.door import Door
        from ..memory import ThreadRef

        return Door(self.memory, ThreadRef.of(self._ref(thread)), recall=True)

    async def recall(self, arguments: Mapping[str, Any]) -> ToolAnswer:
        """The ``recall`` tool of the server's conversation (its own ``thread_id`` reaches
        another conversation of the resource, as the library's recall tool does)."""
        from ..recall import MAX_LIMIT, check_request

        checked = check_request(dict(arguments))
        if isinstance(checked, str):
            raise BadArguments(checked)
        if checked.mode not in ("messages", "threads", "search"):
            raise BadArguments(f'mode {checked.mode!r}: use "messages", "threads" or "search"')
        om = self.memory.om
        search = om is not None and om.options.retrieval is not None and om.options.retrieval.vector
        if checked.mode == "search" and not search:
            raise BadArguments(
                'mode "search" is off on this server (it starts with --search local, or an '
                'embedding model, to offer it): use mode "messages" or "threads"'
            )
        if checked.detail not in ("low", "high"):
            raise BadArguments(f'detail {checked.detail!r}: use "low" or "high"')
        if checked.limit > MAX_LIMIT:
            raise BadArguments(
                f"limit {checked.limit}: at most {MAX_LIMIT} messages a page (page on with page=2)"
            )
        thread, _ = await self.conversation(None)
        if not self.locked and checked.thread_id not in (None, "", "current"):
            stored, _ = await self._stored(checked.thread_id)
            checked = checked.model_copy(update={"thread_id": stored})
        text = await self._door(thread).recall_function()(**checked.model_dump())
        return ToolAnswer(text=text, data={"thread_id": thread, "answer": text})

    async def remember(self, messages: object, thread_id: object = None) -> ToolAnswer:
        """Append ``messages`` (``[{"role", "content", "created_at"?, "id"?}]``) to a
        conversation; a message whose ``id`` the conversation has stored is not stored again."""
        parse_messages(messages)  # the messages' problems are told before the thread's
        thread, count = await self.conversation(thread_id)
        parsed = parse_messages(messages, thread=thread)
        door = self._door(thread)
        # Stored as a turn's input (memory work that is due happens: activation, or past
        # block_after a synchronous observation), then as after a reply (background buffering
        # starts when an interval is due), so memory keeps up with a client that only stores.
        context = await door.step(parsed)
        await self.memory.save(door.ref, [], actor_model=None)
        stored = context.stored_input
        status = await self.memory.status(door.ref)
        new = [m for m in stored if (m.seq or 0) > count]
        text = (
            f"Stored {len(new)} message(s) in conversation {thread!r} "
            f"(#{new[0].seq}-#{new[-1].seq}): {', '.join(m.id for m in new)}."
            if new
            else f"Nothing new stored in conversation {thread!r}."
        )
        if len(new) < len(stored):
            text += f" {len(stored) - len(new)} message(s) had ids it had stored already."
        problems = _problems(status)
        if problems:
            text += "\n" + _NOT_WORKING + "\n".join(problems)
        return ToolAnswer(
            text=text,
            data={
                "thread_id": thread,
                "stored": [{"id": m.id, "seq": m.seq, "role": m.role} for m in stored],
                "already_stored": [m.id for m in stored if (m.seq or 0) <= count],
                "observed_through": context.observed_through,
                "memory": status.state,
                "problems": problems,
            },
        )

    async def memory_context(
        self, thread_id: object = None, include_messages: object = False
    ) -> ToolAnswer:
        """What the model should know from memory: the observation log (with relative dates),
        the hints and working memory; with ``include_messages`` also the messages not observed
        yet. Memory work that is due (activation, a synchronous observation) happens first."""
        if not isinstance(include_messages, bool):
            raise BadArguments(
                f"include_messages must be true or false, not {kind(include_messages)}"
            )
        thread, _ = await self.conversation(thread_id)
        context = await self._door(thread).step([])
        status = await self.memory.status(self._ref(thread))
        memory = [m for m in context.messages if _synthetic(m) not in (None, "left_out")]
        raw = [m for m in context.messages if _synthetic(m) is None]
        left_out = [m for m in context.messages if _synthetic(m) == "left_out"][:1]
        om = self.memory.om
        log = "" if om is None else await om.observations(thread, self.resource)
        notes = [m.text for m in memory if m.text.strip()]  # working memory counts without a log
        header = (
            f"Memory of conversation {thread!r}: its messages through #{context.observed_through} "
            f"are in the notes below; {len(raw)} later message(s) are not observed yet."
            if log.strip() and notes
            else f"Conversation {thread!r} has no observations yet; {len(raw)} message(s) are "
            "stored and not observed."
        )
        parts = [header, *notes]
        if include_messages:
            parts.append("Messages not observed yet:\n" + "\n".join(map(_line, [*left_out, *raw])))
        problems = _problems(status)
        if problems:
            parts.append(_NOT_WORKING + "\n".join(problems))
        data: dict[str, Any] = {
            "thread_id": thread,
            "context": "\n\n".join(notes),
            "observations": log,
            "observed_through": context.observed_through,
            "unobserved_messages": len(raw),
            "memory": status.state,
            "problems": problems,
        }
        if include_messages:
            data["messages"] = [_message_data(m) for m in raw]
        return ToolAnswer(text="\n\n".join(parts), data=data)

    async def memory_status(self, thread_id: object = None) -> ToolAnswer:
        """``Memory.status`` for a conversation: the models (and how ``"auto"`` chose them),
        failures with their fix, and the windows against their thresholds."""
        thread, _ = await self.conversation(thread_id)
        status = await self.memory.status(self._ref(thread))
        return ToolAnswer(
            text="\n".join(
                [f"conversation {thread!r} of resource {self.resource!r}", *status.lines()]
            ),
            data={
                **{f.name: getattr(status, f.name) for f in fields(status) if f.name != "queue"},
                "thread_id": thread,
                "resource_id": self.resource,
                "state": status.state,
                "failures": [f.summary() for f in status.failures],
            },
        )

    async def update_working_memory(self, content: object, thread_id: object = None) -> ToolAnswer:
        """Replace the working memory (the resource's, or the conversation's in thread scope)
        with ``content``, the whole updated document."""
        if not isinstance(content, str) or not content.strip():
            raise BadArguments(
                "content must be the whole updated working memory (a non-empty string), not "
                f"{kind(content)}"
            )
        if len(content) > MAX_WORKING_MEMORY_CHARS:
            raise BadArguments(
                f"content has {len(content):,} characters: keep working memory under "
                f"{MAX_WORKING_MEMORY_CHARS:,} (move detail out; the observations keep it)"
            )
        thread, _ = await self.conversation(thread_id)
        try:
            stored = await self.memory.update_working_memory(self._ref(thread), content)
        except ConfigError as exc:
            raise BadArguments(f"working memory is off on this server ({exc.rule})") from None
        except ValueError as exc:  # does not fit the working memory's schema
            raise BadArguments(str(exc)) from None
        return ToolAnswer(
            text="Working memory updated.", data={"thread_id": thread, "working_memory": stored}
        )


def _synthetic(message: Message) -> str | None:
    """The memory section a context message is (None for a stored message)."""
    meta = message.metadata.get("obsmem")
    return cast(dict[str, Any], meta).get("synthetic") if isinstance(meta, dict) else None


def _line(message: Message) -> str:
    when = f"{message.created_at:%Y-%m-%d %H:%M}"
    where = f"#{message.seq} " if message.seq is not None else ""
    return f"{where}{message.role} ({when}): {message.text or '[no text]'}"


def _message_data(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "seq": message.seq,
        "role": message.role,
        "created_at": message.created_at.isoformat(),
        "text": message.text,
    }


def _problems(status: MemoryStatus) -> list[str]:
    """The status lines that say what is wrong (the first two give models and windows)."""
    if status.healthy:
        return []
    lines = status.lines()
    return lines[2:] or lines[:1]
