"""Which of a client's messages are new for the thread (``docs/inspector-and-proxy.md`` walks
through the line-up, the take-back after an edit, erased thread ids and the messages' ids).

An OpenAI-style client sends its whole conversation with every request; the thread stores each
message once. Messages carry no ids on the wire, so they are compared by a **fingerprint** of
what the model would see (role, text, tool calls with their arguments, the result's call id),
lenient about what clients rewrite when they echo a reply (``content: null`` or ``""``, a list of
text items or one string, spacing of the arguments' JSON, a dropped ``reasoning_content``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from ..convert.openai_chat import from_openai_chat, to_openai_chat
from ..messages import Message

if TYPE_CHECKING:
    from ..memory import ThreadRef

__all__ = [
    "Alignment",
    "StoredEntry",
    "align",
    "erased_prefix",
    "fingerprint",
    "free_id",
    "message_id",
    "new_messages",
    "split_instructions",
    "step_from",
    "step_start",
    "stored_entries",
]

_JSON = dict[str, Any]


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        items = cast(list[Any], content)
        if all(isinstance(i, dict) and cast(_JSON, i).get("type") == "text" for i in items):
            return "\n".join(str(cast(_JSON, i).get("text", "")) for i in items).strip()
        return json.dumps(items, sort_keys=True, ensure_ascii=False)
    return json.dumps(content, sort_keys=True, ensure_ascii=False)


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments.strip()
    return arguments


def _calls(message: Mapping[str, Any]) -> list[Any]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    out: list[Any] = []
    for call in cast(list[Any], calls):
        if isinstance(call, dict):
            c = cast(_JSON, call)
            fn = c.get("function")
            f = cast(_JSON, fn) if isinstance(fn, dict) else {}
            out.append([c.get("id"), f.get("name"), _arguments(f.get("arguments"))])
        else:
            out.append(call)
    return out


def fingerprint(message: Mapping[str, Any]) -> str:
    """A short hash of what the model sees of one OpenAI chat message (see the module doc)."""
    role = message.get("role")
    role = "system" if role == "developer" else role
    canonical: list[Any] = [role, _text(message.get("content"))]
    if role == "assistant":
        canonical.append(_calls(message))
        refusal = message.get("refusal")
        if isinstance(refusal, str) and refusal.strip():
            canonical.append(refusal.strip())
    if role == "tool":
        canonical.append(message.get("tool_call_id"))
    raw = json.dumps(canonical, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def stored_fingerprint(message: Message) -> str:
    """The fingerprint of a stored message, as the client would send it back."""
    written = to_openai_chat([message])
    if len(written) == 1:
        return fingerprint(written[0])
    joined = "|".join(fingerprint(w) for w in written)
    return hashlib.sha256(joined.encode()).hexdigest()[:32]


def message_id(thread_id: str, after: str | None, print_: str, attempt: int = 0) -> str:
    """The id a new message gets: the same for the same message after the same one in the same
    thread, so two requests storing it store it once. ``attempt`` gives another id when that one
    was taken back (the client said it again after rewriting history)."""
    raw = json.dumps([thread_id, after, print_, attempt], separators=(",", ":"))
    return "px-" + hashlib.sha256(raw.encode()).hexdigest()[:32]


def free_id(thread_id: str, after: str | None, print_: str, taken: Collection[str]) -> str:
    """The :func:`message_id` of the first ``attempt`` the thread has not taken back."""
    attempt = 0
    while (mid := message_id(thread_id, after, print_, attempt)) in taken:
        attempt += 1
    return mid


def new_messages(
    conversation: Sequence[Mapping[str, Any]],
    known: int,
    ref: ThreadRef,
    prints: Sequence[str],
    after: str | None,
    taken: set[str],
) -> tuple[list[Message], str | None]:
    """The client's new messages (``conversation[known:]``, fingerprinted ``prints[known:]``)
    with their ids, following the stored message ``after`` and avoiding the ids the thread
    took back, and the id of the last one."""
    new: list[Message] = []
    for message, print_ in zip(_converted(conversation, known, ref), prints[known:], strict=True):
        mid = free_id(ref.thread, after, print_, taken)
        new.append(replace(message, id=mid))
        after = mid
    return new, after


def _converted(
    conversation: Sequence[Mapping[str, Any]], known: int, ref: ThreadRef
) -> list[Message]:
    """obsmem messages for ``conversation[known:]``, converted with the assistant message whose
    calls their first tool results answer (so each result gets its tool's name)."""
    start = known
    if known < len(conversation) and conversation[known].get("role") == "tool":
        start = max(0, _run_start(conversation, known) - 1)  # the message that made the calls
    out = from_openai_chat(conversation[start:], thread_id=ref.thread, resource_id=ref.resource)
    return out[known - start :]


def _run_start(conversation: Sequence[Mapping[str, Any]], at: int) -> int:
    """Where the run of messages of ``conversation[at]``'s role that holds ``at`` starts."""
    role = conversation[at].get("role")
    while at > 0 and conversation[at - 1].get("role") == role:
        at -= 1
    return at


def split_instructions(messages: Sequence[Mapping[str, Any]]) -> tuple[list[_JSON], list[_JSON]]:
    """The client's leading system (or developer) messages, its instructions, and the rest."""
    at = 0
    while at < len(messages) and messages[at].get("role") in ("system", "developer"):
        at += 1
    return [dict(m) for m in messages[:at]], [dict(m) for m in messages[at:]]


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """One stored, shown message of the thread, as :func:`align` compares it."""

    seq: int
    id: str
    print_: str


@dataclass(frozen=True, slots=True)
class Alignment:
    """How the client's messages line up with the thread."""

    known: int
    """The client's first ``known`` messages are stored (they are ``matched``)."""
    matched: tuple[StoredEntry, ...]
    """The stored messages the client's first ``known`` messages are, in order."""
    retract: int
    """How many of the thread's newest shown messages the client's history leaves out (it
    rewrote history after them): they are taken back before the new messages are stored."""

    @property
    def after(self) -> StoredEntry | None:
        """The stored message the new ones follow."""
        return self.matched[-1] if self.matched else None


def align(client: Sequence[str], stored: Sequence[StoredEntry]) -> Alignment:
    """Line up the client's fingerprints with the thread's shown messages (module doc)."""
    prints = [s.print_ for s in stored]
    if not client or not prints:
        return Alignment(0, (), 0)
    best: tuple[int, int] | None = None  # (run length, start in stored)
    for start in range(len(prints) - 1, -1, -1):
        if prints[start] != client[0]:
            continue
        run = 0
        while (
            run < len(client) and start + run < len(prints) and prints[start + run] == client[run]
        ):
            run += 1
        if start + run == len(prints):  # goes on from the end: the best there is
            return Alignment(run, tuple(stored[start : start + run]), 0)
        if best is None or run > best[0]:
            best = (run, start)
    if best is None:
        return Alignment(0, (), 0)
    run, start = best
    return Alignment(run, tuple(stored[start : start + run]), len(prints) - (start + run))


def step_start(conversation: Sequence[Mapping[str, Any]]) -> int:
    """Where the current step starts in ``conversation``: the trailing tool results with the
    call they answer, or the trailing user messages (else the last message)."""
    at = len(conversation) - 1
    if at < 0:
        return 0
    role = conversation[at].get("role")
    if role == "tool":
        return max(0, _run_start(conversation, at) - 1)  # the assistant message that called them
    return _run_start(conversation, at) if role == "user" else at


def step_from(conversation: Sequence[Mapping[str, Any]], alignment: Alignment) -> int | None:
    """The seq of the current step's first message when it is stored already."""
    at = step_start(conversation)
    if conversation and at < alignment.known:
        return alignment.matched[at].seq or None
    return None


def erased_prefix(
    conversation: Sequence[Mapping[str, Any]], client: Sequence[str], stored: Sequence[StoredEntry]
) -> int:
    """For a thread id that was erased: how many of the client's first messages (fingerprinted
    ``client``) are the erased conversation it still holds and resends. The thread as stored
    again since (from the first new turn on) lines up after them; when none of it does, they
    are every message before the current step (:func:`step_start`)."""
    if stored:
        first = stored[0].print_
        runs = [(align(client[k:], stored).known, k) for k, p in enumerate(client) if p == first]
        if runs:
            return max(runs)[1]
    return step_start(conversation)


def for_strict_template(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as the strictest chat templates take them: the leading system messages
    joined into one, and each run of user messages with text content joined into one (memory's
    notes and the user's message become one turn)."""
    out: list[dict[str, Any]] = []
    for raw in messages:
        message = dict(raw)
        last = out[-1] if out else None
        role = "system" if message.get("role") == "developer" else message.get("role")
        plain = {"role", "content"}
        if (
            last is not None
            and isinstance(last.get("content"), str)
            and isinstance(message.get("content"), str)
            and (
                (role == "system" and all(m.get("role") in ("system", "developer") for m in out))
                or (role == last.get("role") == "user" and set(last) | set(message) <= plain)
            )
        ):
            last["content"] = f"{last['content']}\n\n{message['content']}"
        else:
            out.append(message)
    return out


def with_cache_breakpoint(
    messages: list[dict[str, Any]], mark: tuple[str, dict[str, str]] | None
) -> list[dict[str, Any]]:
    """``messages`` with ``mark`` (OpenAI's ``prompt_cache_breakpoint``) on the last part of
    the leading system message, the end of the client's instructions and memory's
    observations, which change only with a memory cycle. Left as they are without a mark, with
    anything but one system message in front (joined by :func:`for_strict_template`), or when
    the client's instructions carry a breakpoint already."""
    if mark is None or not messages or messages[0].get("role") != "system":
        return messages
    field, value = mark
    content = messages[0].get("content")
    if isinstance(content, str):
        parts: list[Any] = [{"type": "text", "text": content}]
    elif isinstance(content, list) and content:
        parts = list(cast(list[Any], content))
    else:
        return messages
    if any(isinstance(p, dict) and field in p for p in parts) or not isinstance(parts[-1], dict):
        return messages
    parts[-1] = {**cast(dict[str, Any], parts[-1]), field: dict(value)}
    return [{**messages[0], "content": parts}, *messages[1:]]


def stored_entries(stored: Sequence[Message]) -> list[StoredEntry]:
    """What a proxy process keeps of stored messages, in seq order."""
    ordered = sorted(stored, key=lambda m: m.seq or 0)
    return [StoredEntry(m.seq or 0, m.id, stored_fingerprint(m)) for m in ordered]
