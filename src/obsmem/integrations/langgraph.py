"""Observational memory for LangGraph: hand-built graphs and ``create_react_agent``.

For ``langchain.agents.create_agent`` use the middleware in :mod:`obsmem.integrations.langchain`
(recommended); it is built on :class:`LangGraphMemory`, which this module also offers for:

* a hand-built ``StateGraph`` (see ``docs/langgraph.md``): in the model node,
  ``sent = lg.model_input(state["messages"], config)`` stores what is new and returns what memory
  assembled; call the model with ``sent.messages``; ``lg.save([reply], config)`` stores the answer
  at once. Each has an async twin (``amodel_input``, ``asave``).
* ``langgraph.prebuilt.create_react_agent`` (deprecated upstream in favour of ``create_agent``):
  ``pre_model_hook=pre_model_hook(memory)`` and ``post_model_hook=post_model_hook(memory)``. Both
  are runnables, so ``invoke``/``stream`` and ``ainvoke``/``astream`` work.

Before every model call, what is new in the graph state (the turn's input, then each step's tool
calls and results) is stored and memory assembles the context: observations as one system
message (after the state's own system messages), then the raw messages, this turn's included.
Activation, synchronous observation and buffering happen between the steps of a tool loop.

* One compiled graph serves every user: the thread is the run's
  ``config["configurable"]["thread_id"]`` and the resource (the user) is ``resource_id`` (or
  ``user_id``) of the runtime context (``graph.invoke(..., context={"user_id": ...})``) or of
  ``config["configurable"]``, read on every call. ``resource=``/``thread=`` fix them instead.
* New messages are those the thread has not stored: each LangChain message is stored under an id
  derived from its own (LangGraph gives every state message one), so the store's idempotent append
  tells them apart, across processes and restarts. The ids already stored are remembered per
  thread, so a plain turn costs two store calls (the model node and the answer); a thread seen
  first in this process costs one look-up more.
* AI messages with ``tool_calls`` and ``ToolMessage`` results are stored as tool calls and tool
  results, pairs kept. ``SystemMessage`` s in the state are sent first on every call and never
  stored.
* The memory events of the thread (``data-om-*``, as ``event.to_dict()``) that happen while a hook
  runs go to LangGraph's custom stream: ``graph.stream(..., stream_mode="custom")`` shows them.
* ``trim_checkpoint=True``: messages memory has observed leave the graph state
  (``RemoveMessage``), so the checkpointer keeps only what memory still sends raw; the full
  history stays in obsmem's store.
* A run stopped on an ``interrupt`` (an approval) leaves its tool calls waiting as the latest
  step: memory never observes them as interrupted, and on ``Command(resume=...)`` each result is
  stored with its call. A new input instead of the resume abandons the interrupt (LangGraph drops
  it), and the calls are shown to the model as interrupted.
* The context mentions the ``recall`` tool only to an agent that has it: ``recall=True`` says the
  agent was given :meth:`LangGraphMemory.recall_tool` (making the tool from the same object says
  so too).

A Memory used from sync code (``invoke``, ``stream``) does its work on its own loop thread
(``memory.run_sync``): keep to one style per Memory, and end with ``memory.close()`` there (or
``await memory.aclose()`` in async code).
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar, cast

from obsmem.errors import ConfigError, MissingExtraError
from obsmem.events import Event
from obsmem.integrations.door import concerns
from obsmem.memory import Memory, ThreadRef
from obsmem.messages import (
    DataPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from obsmem.recall import RECALL_DESCRIPTION, RecallRequest, invalid_request, parse_request

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        RemoveMessage,
        SystemMessage,
        ToolMessage,
        message_to_dict,
        messages_from_dict,
    )
    from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
    from langchain_core.tools import BaseTool
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtraError(
        "obsmem.integrations.langgraph", "langgraph", package="langchain-core"
    ) from exc

__all__ = [
    "METADATA_KEY",
    "RESOURCE_KEYS",
    "IdFrom",
    "LangGraphMemory",
    "ModelHook",
    "ModelInput",
    "from_langchain",
    "hold_waiting_calls",
    "post_model_hook",
    "pre_model_hook",
    "recall_tool",
    "to_langchain",
]

METADATA_KEY = "langchain"
"""Key of an obsmem message's ``metadata`` holding the LangChain message it was read from."""

RESOURCE_KEYS = ("resource_id", "user_id")
"""Where the resource (the user) is read from, in order: keys of the runtime context (a mapping or
an object with these attributes), then of ``config["configurable"]``."""

IdFrom: TypeAlias = Callable[[Any], str]
"""A thread or resource id read from the run's runtime context (``lambda ctx: ctx.user.id``)."""

ModelHook: TypeAlias = Runnable[Any, dict[str, Any]]
"""A LangGraph node as a runnable: ``state -> state update``, sync and async."""

KNOWN_THREADS = 1_000
"""How many threads' stored LangChain ids a :class:`LangGraphMemory` remembers (the rest are
looked up in the store at their next call)."""

StreamWriter: TypeAlias = Callable[[Any], None]

T = TypeVar("T")

_Item = dict[str, Any]


# ---------------------------------------------------------------------------------------------
# LangChain messages -> obsmem messages
# ---------------------------------------------------------------------------------------------


def _image(url: str) -> ImagePart:
    if url.startswith("data:") and ";base64," in url:
        import base64

        head, data = url.split(";base64,", 1)
        try:
            return ImagePart(media_type=head.removeprefix("data:"), data=base64.b64decode(data))
        except ValueError:
            pass
    return ImagePart(url=url)


def _block(block: Any) -> Part:
    if isinstance(block, str):
        return TextPart(text=block)
    entry = cast(_Item, block) if isinstance(block, dict) else {}
    kind = entry.get("type")
    if kind == "text" and isinstance(entry.get("text"), str):
        return TextPart(text=entry["text"])
    if kind in ("reasoning", "thinking"):
        text = entry.get("reasoning", entry.get("thinking", ""))
        return ReasoningPart(text=text if isinstance(text, str) else "")
    if kind == "image_url":
        image = entry.get("image_url")
        url = cast(_Item, image).get("url") if isinstance(image, dict) else image
        if isinstance(url, str):
            return _image(url)
    if kind == "image" and isinstance(entry.get("url"), str):
        return ImagePart(url=entry["url"])
    return DataPart(name="langchain:content", data=block)


def _blocks(content: Any) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(text=content)] if content else []
    if isinstance(content, list):
        return [_block(b) for b in cast(list[Any], content)]
    return []


def _read(message: BaseMessage, names: dict[str, str]) -> Message:
    kept = {METADATA_KEY: {"message": message_to_dict(message)}}
    if isinstance(message, AIMessage):
        parts = [p for p in _blocks(message.content) if not isinstance(p, DataPart)]
        for call in message.tool_calls:
            call_id = call.get("id") or f"call-{uuid.uuid4().hex}"
            names[call_id] = call["name"]
            parts.append(
                ToolCallPart(tool_call_id=call_id, tool_name=call["name"], args=call["args"])
            )
        for bad in message.invalid_tool_calls:  # answered by create_agent with an error
            if bad.get("id"):
                call_id, name = str(bad["id"]), bad.get("name") or "unknown"
                names[call_id] = name
                parts.append(
                    ToolCallPart(tool_call_id=call_id, tool_name=name, args=bad.get("args") or "")
                )
        return Message(role="assistant", parts=tuple(parts), metadata=kept)
    if isinstance(message, ToolMessage):
        name = message.name or names.get(message.tool_call_id, "")
        result = ToolResultPart(
            tool_call_id=message.tool_call_id,
            tool_name=name,
            content=message.content,
            is_error=message.status == "error",
        )
        return Message(role="tool", parts=(result,), metadata=kept)
    role = "system" if isinstance(message, SystemMessage) else "user"
    return Message(role=role, parts=tuple(_blocks(message.content)), metadata=kept)


def from_langchain(messages: Sequence[BaseMessage], *, thread: str | None = None) -> list[Message]:
    """One obsmem message per LangChain message (the original kept in ``metadata``).

    With ``thread``, a message with an id is stored under ``lc-<thread>-<id>``, so storing it again
    is a no-op.
    """
    return _from_langchain(messages, thread, {})


def _from_langchain(
    messages: Sequence[BaseMessage], thread: str | None, names: dict[str, str]
) -> list[Message]:
    """:func:`from_langchain`; ``names`` maps tool-call ids to tool names (for results whose
    message has no name and whose call is not among ``messages``)."""
    out: list[Message] = []
    for message in messages:
        read = _read(message, names)
        if thread is not None and message.id:
            read = Message(
                id=_stored_id(thread, message.id),
                role=read.role,
                parts=read.parts,
                metadata=read.metadata,
            )
        out.append(read)
    return out


def _stored_id(thread: str, message_id: str) -> str:
    return f"lc-{thread}-{message_id}"


# ---------------------------------------------------------------------------------------------
# obsmem messages -> LangChain messages
# ---------------------------------------------------------------------------------------------


def _content(parts: Sequence[Part]) -> str | list[str | dict[Any, Any]]:
    blocks: list[str | dict[Any, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            if part.data is not None:
                import base64

                url = f"data:{part.media_type};base64,{base64.b64encode(part.data).decode()}"
            else:
                url = part.url or ""
            blocks.append({"type": "image_url", "image_url": {"url": url}})
        elif isinstance(part, FilePart):
            name = part.filename or part.url or "attachment"
            blocks.append({"type": "text", "text": f"[file {name} ({part.media_type})]"})
    if all(isinstance(b, dict) and b.get("type") == "text" for b in blocks):
        return "\n".join(cast(str, cast(_Item, b)["text"]) for b in blocks)
    return blocks


def _tool_args(args: dict[str, Any] | str) -> dict[str, Any]:
    if isinstance(args, dict):
        return args
    try:
        parsed = json.loads(args)
    except ValueError:
        return {"input": args}
    return cast(dict[str, Any], parsed) if isinstance(parsed, dict) else {"input": args}


def _tool_message(part: ToolResultPart) -> ToolMessage:
    content = part.content
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return ToolMessage(
        content=text,
        tool_call_id=part.tool_call_id,
        name=part.tool_name or None,
        status="error" if part.is_error else "success",
    )


def _write(message: Message) -> list[BaseMessage]:
    kept = message.metadata.get(METADATA_KEY)
    if isinstance(kept, dict) and isinstance(cast(_Item, kept).get("message"), dict):
        return list(messages_from_dict([cast(_Item, kept)["message"]]))
    parts = [p for p in message.parts if not isinstance(p, DataPart | ReasoningPart)]
    if message.role == "system":
        return [SystemMessage(content=_content(parts))]
    if message.role == "user":
        return [HumanMessage(content=_content(parts))] if parts else []
    if message.role == "tool":
        return [_tool_message(p) for p in parts if isinstance(p, ToolResultPart)]
    calls = [
        {"name": p.tool_name, "args": _tool_args(p.args), "id": p.tool_call_id, "type": "tool_call"}
        for p in parts
        if isinstance(p, ToolCallPart)
    ]
    text = [p for p in parts if isinstance(p, TextPart | ImagePart | FilePart)]
    out: list[BaseMessage] = [AIMessage(content=_content(text), tool_calls=calls)]
    out.extend(_tool_message(p) for p in parts if isinstance(p, ToolResultPart))
    return out


def to_langchain(messages: Sequence[Message]) -> list[BaseMessage]:
    """LangChain messages for ``messages``: a message read from LangChain comes back as it was;
    others become System/Human/AI/Tool messages (reasoning and data parts are left out)."""
    return [m for message in messages for m in _write(message)]


# ---------------------------------------------------------------------------------------------
# which conversation a call belongs to, and where its events go
# ---------------------------------------------------------------------------------------------


def _value(source: Any, key: str) -> Any:
    if source is None:
        return None
    if isinstance(source, Mapping):
        return cast(Mapping[str, Any], source).get(key)
    return getattr(source, key, None)


def _first_id(sources: Sequence[Any], keys: Sequence[str]) -> str | None:
    """The first non-empty id under ``keys`` in ``sources`` (mappings or objects), as text."""
    for source in sources:
        for key in keys:
            value = _value(source, key)
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
                return str(value)
    return None


def _given(option: str, given: str | IdFrom | None, context: Any) -> str | None:
    """The id fixed at construction, or read by its function from the runtime ``context``."""
    if not callable(given):
        return given
    value: Any = given(context)
    if not isinstance(value, str) or not value:
        raise ConfigError(option, value, f"the {option}= function must return a non-empty string")
    return value


def runtime_context() -> Any:
    """The runtime context of the graph run this is called in (None outside one)."""
    try:
        from langgraph.runtime import get_runtime

        return getattr(get_runtime(), "context", None)
    except (ImportError, RuntimeError, KeyError):
        return None


def _current_config() -> RunnableConfig:
    try:
        from langgraph.config import get_config

        return get_config()
    except (ImportError, RuntimeError):
        return {}


def _ignore(_: Any) -> None:
    return None


def _stream_writer() -> StreamWriter:
    """LangGraph's custom stream of the running node (a no-op outside a graph run)."""
    try:
        from langgraph.config import get_stream_writer

        return get_stream_writer()
    except (ImportError, RuntimeError, AttributeError, KeyError):
        return _ignore


def run_sync(memory: Memory, work: Coroutine[Any, Any, T]) -> T:
    """``memory.run_sync(work)`` for a sync graph run, also on a thread whose event loop is
    running (a notebook cell, an async server calling ``invoke``): there a helper thread hands
    the work to memory's loop and this thread blocks until it is done, as LangGraph's sync
    ``invoke`` blocks anyway."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return memory.run_sync(work)
    with ThreadPoolExecutor(1, thread_name_prefix="obsmem-sync") as pool:
        return pool.submit(memory.run_sync, work).result()


class BoundCall:
    """One hook call: its conversation, and, while open (``with``), the memory events of that
    conversation passed to LangGraph's custom stream.

    Events are queued as memory emits them (on memory's loop thread in a sync run) and written
    from the hook's own thread at :meth:`flush` and at the end, as LangGraph expects."""

    def __init__(self, memory: Memory, ref: ThreadRef, write: StreamWriter) -> None:
        self.memory = memory
        self.ref = ref
        self._write = write
        self._pending: deque[dict[str, Any]] = deque()
        self._unsubscribe: Callable[[], None] | None = None

    def _listen(self, event: Event) -> None:
        if concerns(event, self.ref.thread):
            self._pending.append(event.to_dict())

    def flush(self) -> None:
        """Write the events queued so far to the custom stream."""
        while self._pending:
            self._write(self._pending.popleft())

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run memory work from sync code, on the memory's own loop (:func:`run_sync`)."""
        return run_sync(self.memory, work)

    def __enter__(self) -> BoundCall:
        self._unsubscribe = self.memory.subscribe(self._listen)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.flush()


# ---------------------------------------------------------------------------------------------
# what the model is sent
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelInput:
    """What one model call is sent, as memory assembled it."""

    system: SystemMessage | None
    """The graph's system messages, then memory's (observations, guidance), as one message:
    every provider, strict chat templates included, takes one leading system message."""
    conversation: list[BaseMessage]
    """The raw messages memory sends (those it observed left out), this step's included."""
    observed: tuple[str, ...] = ()
    """Ids of graph-state messages memory has observed (with ``trim_checkpoint`` only)."""

    @property
    def messages(self) -> list[BaseMessage]:
        """The whole input: the system message, then the conversation."""
        head: list[BaseMessage] = [self.system] if self.system is not None else []
        return [*head, *self.conversation]

    @property
    def removals(self) -> list[RemoveMessage]:
        """``RemoveMessage`` s for the observed messages: return them in the node's state update
        (``{"messages": sent.removals}``) to keep the checkpoint to what memory sends raw."""
        return [RemoveMessage(id=message_id) for message_id in self.observed]


def joined_system(messages: Sequence[BaseMessage | None]) -> SystemMessage | None:
    """One system message for ``messages`` (texts joined by blank lines; content blocks kept
    as blocks), or None when there is nothing to say."""
    present = [m for m in messages if m is not None and m.content]
    if not present:
        return None
    if len(present) == 1 and isinstance(present[0], SystemMessage):
        return present[0]
    if all(isinstance(m.content, str) for m in present):
        return SystemMessage(content="\n\n".join(cast(str, m.content) for m in present))
    blocks: list[str | dict[Any, Any]] = []
    for message in present:
        content = message.content
        blocks.extend([{"type": "text", "text": content}] if isinstance(content, str) else content)
    return SystemMessage(content=blocks)


def _checked(messages: Sequence[Any]) -> list[BaseMessage]:
    """``messages`` as LangChain messages, each with an id (given in place, so the graph state
    keeps it: it is what tells a stored message from a new one)."""
    for message in messages:
        if not isinstance(message, BaseMessage):
            raise ConfigError("state.messages", message, "give LangChain BaseMessage objects")
        if not message.id:
            message.id = str(uuid.uuid4())
    return cast(list[BaseMessage], list(messages))


def _state_messages(state: Any) -> list[BaseMessage]:
    raw = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    if not isinstance(raw, list):
        raise ConfigError(
            "state.messages", raw, "the graph state needs a 'messages' list of LangChain messages"
        )
    return _checked(cast(list[Any], raw))


def _since_input(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages after the last human message (the turn's traffic so far)."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    return list(messages[last + 1 :])


def _step_from(
    messages: Sequence[BaseMessage], new: Sequence[BaseMessage], known: Mapping[str, int | None]
) -> int | None:
    """When this step's new messages are tool results, the seq of the stored model message whose
    calls they answer: it belongs to the step being answered and stays raw with them."""
    if not new or not isinstance(new[0], ToolMessage):
        return None
    at = next(i for i, m in enumerate(messages) if m is new[0])
    caller = next((m for m in reversed(messages[:at]) if isinstance(m, AIMessage)), None)
    return known.get(caller.id) if caller is not None and caller.id else None


def _storable(
    messages: Sequence[BaseMessage], thread: str, context: Sequence[BaseMessage]
) -> list[Message]:
    """obsmem messages for ``messages`` (system messages left out), tool names taken from the
    calls in ``context``."""
    names = {
        str(c["id"]): c["name"]
        for m in context
        if isinstance(m, AIMessage)
        for c in m.tool_calls
        if c.get("id")
    }
    return [m for m in _from_langchain(messages, thread, names) if m.role != "system"]


# ---------------------------------------------------------------------------------------------
# LangGraphMemory
# ---------------------------------------------------------------------------------------------


class LangGraphMemory:
    """Observational memory for LangGraph graphs: ``model_input``/``save`` for a hand-built
    model node, ``.pre_model_hook``/``.post_model_hook`` for ``create_react_agent``.

    ``resource``/``thread`` fix the conversation, or read it from the run's runtime context when
    they are functions (``resource=lambda ctx: ctx.user.id``); left ``None`` (the default) they
    are read on every call (see :meth:`ref`), so one compiled graph serves every user.
    ``recall=True``: the model has the ``recall`` tool (:meth:`recall_tool`).
    ``trim_checkpoint=True``: messages memory has observed leave the graph state (the pre-model
    hook removes them; a hand-built node returns ``sent.removals``)."""

    def __init__(
        self,
        memory: Memory,
        *,
        resource: str | IdFrom | None = None,
        thread: str | IdFrom | None = None,
        recall: bool = False,
        trim_checkpoint: bool = False,
    ) -> None:
        for option, value in (("resource", resource), ("thread", thread)):
            if value == "":
                raise ConfigError(
                    option, value, "give the id as a non-empty string (None: read it per call)"
                )
        self.memory = memory
        self.resource = resource
        self.thread = thread
        self.recall = recall
        """The model has the ``recall`` tool, so the context tells it how to use it; otherwise
        the context never mentions recall."""
        self.trim_checkpoint = trim_checkpoint
        self._known: OrderedDict[str, dict[str, int | None]] = OrderedDict()
        self._lock = threading.Lock()
        self.pre_model_hook: ModelHook = RunnableLambda(
            self._pre, self._apre, name="obsmem_pre_model_hook"
        )
        """``create_react_agent(pre_model_hook=...)``: stores what is new and returns
        ``{"llm_input_messages": [...]}`` (plus the removals, with ``trim_checkpoint``)."""
        self.post_model_hook: ModelHook = RunnableLambda(
            self._post, self._apost, name="obsmem_post_model_hook"
        )
        """``create_react_agent(post_model_hook=...)``: stores the model's answer at once."""

    def __repr__(self) -> str:
        return f"LangGraphMemory(resource={self.resource!r}, thread={self.thread!r})"

    # -- which conversation ------------------------------------------------------------------

    def ref(self, config: RunnableConfig | None = None, context: Any = None) -> ThreadRef:
        """The conversation of a call: ``thread=``/``resource=`` when given (a function of them
        is called with the runtime ``context``); otherwise ``thread_id`` and ``resource_id`` (or
        ``user_id``, :data:`RESOURCE_KEYS`) of the runtime ``context`` (a mapping or an object),
        then of ``config["configurable"]``."""
        configurable = (config or {}).get("configurable") or {}
        sources = (context, configurable)
        thread = _given("thread", self.thread, context) or _first_id(sources, ("thread_id",))
        if thread is None:
            raise ConfigError(
                "thread",
                None,
                "run the graph with config={'configurable': {'thread_id': ...}} "
                "(or give thread=...)",
            )
        resource = _given("resource", self.resource, context) or _first_id(sources, RESOURCE_KEYS)
        if resource is None:
            raise ConfigError(
                "resource",
                None,
                "say whose conversation it is: config={'configurable': {'thread_id': ..., "
                "'resource_id': ...}} or context={'resource_id': ...} ('user_id' works too), "
                "or resource=... (an id, or a function of the runtime context)",
            )
        return ThreadRef(thread=thread, resource=resource)

    def bind(
        self,
        config: RunnableConfig | None = None,
        context: Any = None,
        writer: StreamWriter | None = None,
    ) -> BoundCall:
        """The :class:`BoundCall` of the running node (its config, runtime context and custom
        stream, unless given)."""
        if config is None:
            config = _current_config()
        if context is None:
            context = runtime_context()
        return BoundCall(self.memory, self.ref(config, context), writer or _stream_writer())

    # -- the memory work -------------------------------------------------------------------------

    async def stored(
        self, ref: ThreadRef, messages: Sequence[BaseMessage]
    ) -> dict[str, int | None]:
        """The seq of each of ``messages`` the thread has stored, by LangChain message id.

        The ids this object stored or saw stored are remembered per thread (the most recent
        :data:`KNOWN_THREADS` threads): when the others all come after them in the state (a
        turn's new input, a step's tool traffic) they are new, with no look-up; otherwise (a
        restart, another process, an edited state) the store is asked."""
        ids = [m.id for m in messages if m.id and not isinstance(m, SystemMessage)]
        with self._lock:
            seen = self._known.get(ref.thread)
            if seen is not None:
                self._known.move_to_end(ref.thread)
                seen = dict(seen)
        known = {i: seen[i] for i in ids if seen is not None and i in seen}
        unknown = [i for i in ids if i not in known]
        last_known = max((n for n, i in enumerate(ids) if i in known), default=-1)
        if not unknown or (seen is not None and ids.index(unknown[0]) > last_known):
            return known
        wanted = {_stored_id(ref.thread, i): i for i in unknown}
        found = await self.memory.store.get_messages(list(wanted), resource_id=ref.resource)
        known.update({wanted[m.id]: m.seq for m in found if m.id in wanted})
        self._remember(ref, known)
        return known

    def _remember(self, ref: ThreadRef, seqs: Mapping[str, int | None]) -> None:
        with self._lock:
            seen = self._known.setdefault(ref.thread, {})
            seen.update(seqs)
            self._known.move_to_end(ref.thread)
            while len(self._known) > KNOWN_THREADS:
                self._known.popitem(last=False)

    def _remember_stored(self, ref: ThreadRef, stored: Sequence[Message]) -> None:
        prefix = _stored_id(ref.thread, "")
        self._remember(ref, {m.id.removeprefix(prefix): m.seq for m in stored})

    async def prepare(self, ref: ThreadRef, messages: Sequence[Any], *, recall: bool) -> ModelInput:
        """Store what of ``messages`` (the graph's, in order) is new and assemble the model's
        input, in one memory step (one store round trip, plus any memory work that is due)."""
        messages = _checked(messages)
        known = await self.stored(ref, messages)
        new = [m for m in messages if m.id not in known and not isinstance(m, SystemMessage)]
        context = await self.memory.context(
            ref,
            _storable(new, ref.thread, messages),
            actor_model=None,
            recall=recall,
            keep_raw_from=_step_from(messages, new, known),
        )
        self._remember_stored(ref, context.stored_input)
        sent = to_langchain(context.messages)
        lead = next((i for i, m in enumerate(sent) if not isinstance(m, SystemMessage)), len(sent))
        system = joined_system(
            [*(m for m in messages if isinstance(m, SystemMessage)), *sent[:lead]]
        )
        observed: tuple[str, ...] = ()
        if self.trim_checkpoint:
            observed = _observed(
                ref, messages, known, context.stored_input, context.observed_through
            )
        return ModelInput(system=system, conversation=sent[lead:], observed=observed)

    async def store_new(self, ref: ThreadRef, messages: Sequence[Any]) -> list[Message]:
        """Store what of the turn's traffic in ``messages`` (after its last human message) the
        thread does not have: the model's answer, at once."""
        messages = _checked(messages)
        turn = _since_input(messages)
        known = await self.stored(ref, turn)
        new = [m for m in turn if m.id not in known]
        storable = _storable(new, ref.thread, messages)
        if not storable:
            return []
        stored = await self.memory.save(ref, storable, actor_model=None)
        self._remember_stored(ref, stored)
        return stored

    # -- a hand-built model node -----------------------------------------------------------------

    def model_input(
        self,
        messages: Sequence[BaseMessage],
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        recall: bool | None = None,
    ) -> ModelInput:
        """In a sync model node, before the model: store what of ``messages`` (the graph
        state's) is new and return what to send (``sent.messages``). ``recall`` overrides
        :attr:`recall` for this call."""
        with self.bind(config, context) as call:
            return call.run(self.prepare(call.ref, messages, recall=self._recall(recall)))

    async def amodel_input(
        self,
        messages: Sequence[BaseMessage],
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        recall: bool | None = None,
    ) -> ModelInput:
        """:meth:`model_input` for an async node."""
        with self.bind(config, context) as call:
            return await self.prepare(call.ref, messages, recall=self._recall(recall))

    def save(
        self,
        messages: Sequence[BaseMessage],
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
    ) -> list[Message]:
        """In a sync model node, after the model: store the answer (``[reply]``, or the whole
        state: only what is new is stored) at once; returns what was stored."""
        with self.bind(config, context) as call:
            return call.run(self.store_new(call.ref, messages))

    async def asave(
        self,
        messages: Sequence[BaseMessage],
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
    ) -> list[Message]:
        """:meth:`save` for an async node."""
        with self.bind(config, context) as call:
            return await self.store_new(call.ref, messages)

    def _recall(self, recall: bool | None) -> bool:
        return self.recall if recall is None else recall

    # -- create_react_agent's hooks --------------------------------------------------------------

    def _pre_update(self, sent: ModelInput) -> dict[str, Any]:
        update: dict[str, Any] = {"llm_input_messages": sent.messages}
        if sent.observed:
            update["messages"] = sent.removals
        return update

    def _pre(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        return self._pre_update(self.model_input(_state_messages(state), config))

    async def _apre(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        return self._pre_update(await self.amodel_input(_state_messages(state), config))

    def _post(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        self.save(_state_messages(state), config)
        return {}

    async def _apost(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        await self.asave(_state_messages(state), config)
        return {}

    # -- waiting calls ---------------------------------------------------------------------------

    async def ahold(self, state: Any, config: RunnableConfig) -> list[str]:
        """After a run stopped on an ``interrupt``: hold its waiting tool calls back until their
        results come, even if the thread goes on elsewhere meanwhile (memory never observes
        them as interrupted). Not needed for a plain pause and resume: the waiting calls are
        the latest step, which memory keeps waiting anyway. Returns the held call ids."""
        ref = self.ref(config, runtime_context())
        messages = _state_messages(state)
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        waiting = [
            str(c["id"]) for c in (last.tool_calls if last is not None else []) if c.get("id")
        ]
        waiting = [c for c in waiting if c not in answered]
        await self.store_new(ref, messages)
        await self.memory.hold_calls(ref, waiting)
        return waiting

    def hold(self, state: Any, config: RunnableConfig) -> list[str]:
        """:meth:`ahold` for sync code."""
        return run_sync(self.memory, self.ahold(state, config))

    # -- recall ----------------------------------------------------------------------------------

    def recall_tool(self) -> BaseTool:
        """The ``recall`` tool as a LangChain tool (sync and async), for ``create_react_agent``
        or a hand-built graph's model; making it tells this object's context to mention it. It
        reads only the call's resource (and, in thread scope, its thread), found as
        :meth:`ref` finds them; arguments that do not fit come back to the model as a message
        saying what to send. Needs retrieval on."""
        from langchain_core.tools import StructuredTool

        self.memory.require_retrieval()
        self.recall = True

        async def answer(ref: ThreadRef, arguments: dict[str, Any]) -> str:
            request = parse_request(arguments)
            if isinstance(request, str):
                return request
            return await self.memory.recall_function(ref)(**request)

        async def arecall(config: RunnableConfig, **arguments: Any) -> str:
            return await answer(self.ref(config, runtime_context()), arguments)

        def recall(config: RunnableConfig, **arguments: Any) -> str:
            ref = self.ref(config, runtime_context())  # here: the run's context is this thread's
            return run_sync(self.memory, answer(ref, arguments))

        return StructuredTool.from_function(
            func=recall,
            coroutine=arecall,
            name="recall",
            description=RECALL_DESCRIPTION,
            args_schema=RecallRequest,
            handle_validation_error=invalid_request,
        )


# ---------------------------------------------------------------------------------------------
# create_react_agent's hooks as functions
# ---------------------------------------------------------------------------------------------


def pre_model_hook(
    memory: Memory,
    *,
    resource: str | None = None,
    thread: str | None = None,
    recall: bool = False,
    trim_checkpoint: bool = False,
) -> ModelHook:
    """A ``pre_model_hook`` for ``create_react_agent`` giving it observational memory
    (``recall=True`` when the agent has :func:`recall_tool`). See :class:`LangGraphMemory`."""
    return LangGraphMemory(
        memory, resource=resource, thread=thread, recall=recall, trim_checkpoint=trim_checkpoint
    ).pre_model_hook


def post_model_hook(
    memory: Memory, *, resource: str | None = None, thread: str | None = None
) -> ModelHook:
    """A ``post_model_hook`` that stores each model answer at once (pair it with
    :func:`pre_model_hook`; both find what is new in the store, so they share no state)."""
    return LangGraphMemory(memory, resource=resource, thread=thread).post_model_hook


async def hold_waiting_calls(
    memory: Memory,
    state: Any,
    config: RunnableConfig,
    *,
    resource: str | None = None,
    thread: str | None = None,
) -> list[str]:
    """After ``ainvoke`` returned on an interrupt: hold the waiting calls back until their
    results come (see :meth:`LangGraphMemory.ahold`)."""
    return await LangGraphMemory(memory, resource=resource, thread=thread).ahold(state, config)


def recall_tool(
    memory: Memory, *, resource: str | None = None, thread: str | None = None
) -> BaseTool:
    """The ``recall`` tool as a LangChain tool for the call's conversation (or the one given);
    see :meth:`LangGraphMemory.recall_tool`. Pass ``recall=True`` to the pre-model hook too."""
    return LangGraphMemory(memory, resource=resource, thread=thread).recall_tool()


def _observed(
    ref: ThreadRef,
    messages: Sequence[BaseMessage],
    known: Mapping[str, int | None],
    stored_input: Sequence[Message],
    through: int,
) -> tuple[str, ...]:
    """Ids of ``messages`` memory has observed: stored at or before seq ``through``."""
    if not through:
        return ()
    prefix = _stored_id(ref.thread, "")
    seqs = dict(known)
    seqs.update({m.id.removeprefix(prefix): m.seq for m in stored_input})
    return tuple(
        m.id for m in messages if m.id and (seq := seqs.get(m.id)) is not None and seq <= through
    )
