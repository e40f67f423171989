"""LangGraphMemory: memory's step for a LangGraph model call, through :class:`Door`."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool

from obsmem.convert.langchain import stored_id, to_langchain
from obsmem.errors import ConfigError
from obsmem.integrations.door import Door
from obsmem.memory import Memory, ThreadRef
from obsmem.messages import Message
from obsmem.models import ModelSpec
from obsmem.recall import RECALL_DESCRIPTION, RecallRequest, invalid_request

from . import call_context
from . import model_input as inputs
from .call_context import BoundCall, IdFrom, StreamWriter
from .model_input import ModelInput
from .models import ActorModel, actor_model_of, with_cache_breakpoint

__all__ = ["KEPT_INPUTS", "KNOWN_THREADS", "KeptInput", "LangGraphMemory", "ModelHook"]

ModelHook: TypeAlias = Runnable[Any, dict[str, Any]]
"""A LangGraph node as a runnable: ``state -> state update``, sync and async."""

KNOWN_THREADS = 1_000
"""How many threads' stored LangChain ids a :class:`LangGraphMemory` remembers (the rest are
looked up in the store at their next call)."""

KEPT_INPUTS = 64
"""With :meth:`LangGraphMemory.compacting`: how many threads' last model input are kept, for a
retry after an overflow (a thread whose input was let go raises the model's error instead)."""


@dataclass(frozen=True, slots=True)
class KeptInput:
    """A model input :meth:`LangGraphMemory.prepare` made, kept for a retry after an overflow."""

    state: list[BaseMessage]
    """The graph state's messages it was made from."""
    sent: list[BaseMessage]
    """The input itself."""
    step_from: int | None
    """The current step's first seq (what a compaction keeps raw)."""


def _keep_recent(cache: OrderedDict[str, Any], key: str, most: int) -> None:
    """Mark ``key`` the most recent in ``cache`` and let the oldest beyond ``most`` go."""
    cache.move_to_end(key)
    while len(cache) > most:
        cache.popitem(last=False)


class LangGraphMemory:
    """Observational memory for LangGraph graphs (see the package docstring and
    ``docs/langgraph.md``).

    ``resource``/``thread`` fix the conversation (ids, or functions of the runtime context);
    left None they are read on every call (:meth:`ref`). ``model``: the chat model the graph
    calls, or its spec, so memory knows the actor. ``recall=True``: the model has the
    ``recall`` tool (:meth:`recall_tool`). ``trim_checkpoint=True``: messages memory has
    observed leave the graph state (a hand-built node returns ``sent.removals``)."""

    def __init__(
        self,
        memory: Memory,
        *,
        resource: str | IdFrom | None = None,
        thread: str | IdFrom | None = None,
        model: ActorModel | None = None,
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
        self.actor_model: ModelSpec | None = actor_model_of(model)
        """The actor's model as memory names it (``"anthropic/claude-sonnet-4-5"``), when told."""
        self.recall = recall
        """The model has the ``recall`` tool, so the context tells it how to use it; otherwise
        the context never mentions recall."""
        self.trim_checkpoint = trim_checkpoint
        self._known: OrderedDict[str, dict[str, int | None]] = OrderedDict()
        self._inputs: OrderedDict[str, KeptInput] = OrderedDict()
        """Per thread, what :meth:`prepare` made last (kept only for :meth:`compacting`)."""
        self._keep_inputs = False
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
        """The conversation of a call (:func:`~.call_context.find_ref`)."""
        return call_context.find_ref(config, context, thread=self.thread, resource=self.resource)

    def door(
        self, ref: ThreadRef, *, model: ActorModel | None = None, recall: bool | None = None
    ) -> Door:
        """The :class:`Door` of one call in ``ref``'s conversation: the actor's model (this
        call's ``model``, else :attr:`actor_model`) and the recall flag passed on."""
        return Door(
            self.memory,
            ref,
            actor_model=actor_model_of(model) or self.actor_model,
            recall=self.recall if recall is None else recall,
        )

    def _door_of(self, config: RunnableConfig) -> Door:
        """The :meth:`door` of the call with ``config`` in the running graph's context."""
        return self.door(self.ref(config, call_context.runtime_context()))

    def bind(
        self,
        config: RunnableConfig | None = None,
        context: Any = None,
        writer: StreamWriter | None = None,
        *,
        model: ActorModel | None = None,
        recall: bool | None = None,
    ) -> BoundCall:
        """The :class:`BoundCall` of the running node (its config, runtime context and custom
        stream, unless given), with its :meth:`door`."""
        if config is None:
            config = call_context.current_config()
        if context is None:
            context = call_context.runtime_context()
        door = self.door(self.ref(config, context), model=model, recall=recall)
        return BoundCall(door, writer or call_context.stream_writer())

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
        wanted = {stored_id(ref.thread, i): i for i in unknown}
        found = await self.memory.messages_by_id(list(wanted), ref.resource)
        known.update({wanted[m.id]: m.seq for m in found if m.id in wanted})
        self._remember(ref, known)
        return known

    def _remember(self, ref: ThreadRef, seqs: Mapping[str, int | None]) -> None:
        with self._lock:
            self._known.setdefault(ref.thread, {}).update(seqs)
            _keep_recent(self._known, ref.thread, KNOWN_THREADS)

    async def prepare(self, door: Door, messages: Sequence[Any]) -> ModelInput:
        """Store what of ``messages`` (the graph's, in order) is new and assemble the model's
        input, in one memory step (one store round trip, plus any memory work that is due)."""
        messages = inputs.checked(messages)
        ref = door.ref
        known = await self.stored(ref, messages)
        new = [m for m in messages if m.id not in known and not isinstance(m, SystemMessage)]
        context = await door.step(
            inputs.storable(new, ref.thread, messages),
            step_from=inputs.step_from(messages, new, known),
        )
        self._remember(ref, inputs.stored_seqs(ref.thread, context.stored_input))
        sent = to_langchain(context.messages)
        lead = inputs.leading_system(sent)
        system = inputs.joined_system(
            [*(m for m in messages if isinstance(m, SystemMessage)), *sent[:lead]]
        )
        observed: tuple[str, ...] = ()
        if self.trim_checkpoint:
            observed = inputs.observed_ids(
                ref.thread, messages, known, context.stored_input, context.observed_through
            )
        made = ModelInput(
            system=with_cache_breakpoint(system, door.actor_model),
            conversation=sent[lead:],
            observed=observed,
        )
        if self._keep_inputs:
            kept = KeptInput(state=messages, sent=made.messages, step_from=door.step_from)
            with self._lock:
                self._inputs[ref.thread] = kept
                _keep_recent(self._inputs, ref.thread, KEPT_INPUTS)
        return made

    def last_input(self, thread: str, sent: Sequence[Any]) -> KeptInput | None:
        """What :meth:`prepare` made last for ``thread``, when ``sent`` ends with it."""
        with self._lock:
            kept = self._inputs.get(thread)
        if kept is None or len(sent) < len(kept.sent):
            return None
        tail = sent[len(sent) - len(kept.sent) :]
        if any(a is not b and a != b for a, b in zip(tail, kept.sent, strict=True)):
            return None
        return kept

    async def store_new(
        self, door: Door, messages: Sequence[Any], *, waiting: Sequence[str] = ()
    ) -> list[Message]:
        """Store what of the turn's traffic in ``messages`` (after its last human message) the
        thread does not have: the model's answer, at once. ``waiting``: tool calls memory holds
        until their results come."""
        messages = inputs.checked(messages)
        turn = inputs.since_input(messages)
        known = await self.stored(door.ref, turn)
        new = [m for m in turn if m.id not in known]
        stored = await door.reply(inputs.storable(new, door.thread, messages), waiting=waiting)
        self._remember(door.ref, inputs.stored_seqs(door.thread, stored))
        return stored

    # -- a hand-built model node -----------------------------------------------------------------

    def model_input(
        self,
        messages: Sequence[BaseMessage],
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        recall: bool | None = None,
        model: ActorModel | None = None,
    ) -> ModelInput:
        """In a sync model node, before the model: store what of ``messages`` (the graph
        state's) is new and return what to send (``sent.messages``). ``recall`` overrides
        :attr:`recall` and ``model`` the actor's model for this call."""
        with self.bind(config, context, model=model, recall=recall) as call:
            return call.run(self.prepare(call.door, messages))

    async def amodel_input(
        self,
        messages: Sequence[BaseMessage],
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        recall: bool | None = None,
        model: ActorModel | None = None,
    ) -> ModelInput:
        """:meth:`model_input` for an async node."""
        with self.bind(config, context, model=model, recall=recall) as call:
            return await self.prepare(call.door, messages)

    def save(
        self,
        messages: Sequence[BaseMessage],
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        model: ActorModel | None = None,
    ) -> list[Message]:
        """In a sync model node, after the model: store the answer (``[reply]``, or the whole
        state: only what is new is stored) at once; returns what was stored."""
        with self.bind(config, context, model=model) as call:
            return call.run(self.store_new(call.door, messages))

    async def asave(
        self,
        messages: Sequence[BaseMessage],
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        model: ActorModel | None = None,
    ) -> list[Message]:
        """:meth:`save` for an async node."""
        with self.bind(config, context, model=model) as call:
            return await self.store_new(call.door, messages)

    def model_node(
        self, model: Any, *, recall: bool | None = None
    ) -> Runnable[Any, dict[str, Any]]:
        """A whole model node calling ``model``, a chat model with tools bound or not
        (``graph.add_node("model", lg.model_node(llm))``), sync and async: ``model_input``, the
        model call and ``save`` in one, plus what a node written by hand does not do: a request
        the model refuses as too long is compacted once and sent again. Its state update is the
        answer (and, with ``trim_checkpoint``, the removals of what memory observed)."""

        def node(state: Any, config: RunnableConfig) -> dict[str, Any]:
            messages = inputs.state_messages(state)
            with self.bind(config, model=model, recall=recall) as call:
                sent, reply = call.exchange(
                    lambda: self.prepare(call.door, messages),
                    lambda sent: model.invoke(sent.messages, config),
                )
                reply = inputs.with_id(reply)
                call.run(self.store_new(call.door, [*messages, reply]))
            return {"messages": [*sent.removals, reply]}

        async def anode(state: Any, config: RunnableConfig) -> dict[str, Any]:
            messages = inputs.state_messages(state)
            with self.bind(config, model=model, recall=recall) as call:
                sent, reply = await call.aexchange(
                    lambda: self.prepare(call.door, messages),
                    lambda sent: model.ainvoke(sent.messages, config),
                )
                reply = inputs.with_id(reply)
                await self.store_new(call.door, [*messages, reply])
            return {"messages": [*sent.removals, reply]}

        return RunnableLambda(node, anode, name="obsmem_model_node")

    def compacting(self, model: Any) -> Runnable[Any, BaseMessage]:
        """``model`` (a chat model) for ``create_react_agent(lg.compacting(llm), tools,
        pre_model_hook=lg.pre_model_hook, ...)`` (see :mod:`.compacting`)."""
        from .compacting import CompactingChatModel

        if self.actor_model is None:
            self.actor_model = actor_model_of(model)
        self._keep_inputs = True
        return CompactingChatModel(self, model)

    # -- waiting calls and recall ----------------------------------------------------------------

    async def ahold(self, state: Any, config: RunnableConfig) -> list[str]:
        """After a run stopped on an ``interrupt``: hold its waiting tool calls back until their
        results come, even if the thread goes on elsewhere meanwhile (a plain pause and resume
        needs no hold). Returns the held call ids."""
        messages = inputs.state_messages(state)
        waiting = inputs.waiting_calls(messages)
        await self.store_new(self._door_of(config), messages, waiting=waiting)
        return waiting

    def hold(self, state: Any, config: RunnableConfig) -> list[str]:
        """:meth:`ahold` for sync code."""
        door = self._door_of(config)
        return call_context.run_sync(door, self.ahold(state, config))

    def recall_tool(self) -> BaseTool:
        """The ``recall`` tool as a LangChain tool (sync and async) for the call's conversation;
        making it tells this object's context to mention it. Needs retrieval on."""
        from langchain_core.tools import StructuredTool

        self.memory.require_retrieval()
        self.recall = True

        async def arecall(config: RunnableConfig, **arguments: Any) -> str:
            return await self._door_of(config).answer_recall(arguments)

        def recall(config: RunnableConfig, **arguments: Any) -> str:
            door = self._door_of(config)
            return call_context.run_sync(door, door.answer_recall(arguments))

        return StructuredTool.from_function(
            func=recall,
            coroutine=arecall,
            name="recall",
            description=RECALL_DESCRIPTION,
            args_schema=RecallRequest,
            handle_validation_error=invalid_request,
        )

    # -- the create_react_agent hooks ------------------------------------------------------------

    def _pre(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        return _pre_update(self.model_input(inputs.state_messages(state), config))

    async def _apre(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        return _pre_update(await self.amodel_input(inputs.state_messages(state), config))

    def _post(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        self.save(inputs.state_messages(state), config)
        return {}

    async def _apost(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        await self.asave(inputs.state_messages(state), config)
        return {}


def _pre_update(sent: ModelInput) -> dict[str, Any]:
    update: dict[str, Any] = {"llm_input_messages": sent.messages}
    if sent.observed:
        update["messages"] = sent.removals
    return update
