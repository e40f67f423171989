"""The door table's columns: every front door opened on one conversation, offering the small
capabilities the contract's rows (``test_door_contract.py``) are written against.

A case opens its door (``case.open(store, options, actor)``, an async context manager) on
thread ``t1`` and yields a :class:`DoorRun`:

- ``turn(text)``: one user turn through the door, to its answer. The model behind every door
  is one :class:`Actor`: its policy answers, calls tools (``lookup``, ``recall``) or, past its
  ``limit``, refuses the request as longer than its context, as OpenAI words it;
- ``events``: the memory events the door's own stream handed over (None: the door has none);
- ``report()``: what the door tells its caller about memory's health;
- ``over_limit()``: a request past a server's limit, and the refusal it got (servers only);
- ``memory``, ``ref``, ``settle()``: where the door's messages land, for the rows' checks.

The framework doors reuse the drivers of ``drivers.py``; the servers are the real ones: ``obsmem
proxy`` served by uvicorn in front of the loopback strict server, and ``obsmem mcp``'s tools
with the client's tool loop. A new door is one adapter here and one entry in ``DOOR_CASES``.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic_ai.exceptions import ModelHTTPError

from obsmem import Memory
from obsmem.memory import ThreadRef
from obsmem.messages import Message
from obsmem.stores import Store
from obsmem.tokens import HeuristicEstimator

from .drivers import (
    AgentDriver,
    Brain,
    CapabilityDriver,
    CompactingDriver,
    CreateAgentDriver,
    Driver,
    LangGraphDriver,
    Policy,
    Reply,
    SdkDriver,
    Tools,
    _pydantic_ai_model,  # pyright: ignore[reportPrivateUsage]
    langchain_model,
)
from .helpers import RESOURCE

THREAD = "t1"


def answer(messages: list[Message]) -> Reply:
    """The plain policy: answer, call nothing."""
    return Reply(text="Noted, thank you.")


class Actor(Brain):
    """The model behind every door: ``policy`` decides each step; a request longer than
    ``limit`` estimated tokens is refused as OpenAI refuses one (HTTP 400,
    ``context_length_exceeded``). ``sizes`` holds every request's size, refused or not."""

    def __init__(self, policy: Policy = answer, *, limit: int | None = None) -> None:
        super().__init__(policy)
        self.limit = limit
        self.sizes: list[int] = []
        self.refused = 0
        self.raises = True
        """Whether a request too long raises from the model (False: the upstream refuses it)."""
        self._estimator = HeuristicEstimator()

    def refusal(self, messages: list[Message]) -> str | None:
        """The refusal a request too long gets (None: it fits)."""
        size = sum(self._estimator.count_message(m) for m in messages)
        self.sizes.append(size)
        if self.limit is None or size <= self.limit:
            return None
        self.refused += 1
        return (
            f"This model's maximum context length is {self.limit} tokens. However, your "
            f"messages resulted in {size} tokens. Please reduce the length of the messages."
        )

    def step(self, messages: list[Message]) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
        refused = self.refusal(messages) if self.raises else None
        if refused is not None:
            body = {"message": refused, "type": "invalid_request_error"}
            raise ModelHTTPError(
                400, "small-model", body={**body, "code": "context_length_exceeded"}
            )
        return super().step(messages)


def as_fields(event: Any) -> dict[str, Any]:
    """An event as a dict, whatever the door hands over (an Event, a MemoryEvent, a dict)."""
    if isinstance(event, dict):
        return dict(event)  # pyright: ignore[reportUnknownArgumentType]
    fields = getattr(event, "fields", None)
    if isinstance(fields, dict):
        return dict(fields)  # pyright: ignore[reportUnknownArgumentType]
    return event.to_dict()


class DoorRun(Protocol):
    """One door open on thread ``t1``: the capabilities the rows use."""

    brain: Brain
    events: list[dict[str, Any]] | None
    """The memory events the door's own stream handed over (None: the door has no stream)."""

    @property
    def ref(self) -> ThreadRef: ...

    @property
    def memory(self) -> Memory: ...

    async def turn(self, text: str) -> str: ...

    async def settle(self) -> None: ...

    async def report(self) -> str: ...

    async def over_limit(self) -> str: ...


Opener = Callable[[Store, Mapping[str, Any], Actor], contextlib.AbstractAsyncContextManager[Any]]


@dataclass(frozen=True, slots=True)
class DoorCase:
    """One column of the table: how to open the door, and where it cannot take part."""

    name: str
    open: Opener
    not_applicable: Mapping[str, str] = field(default_factory=dict[str, str])
    """Row name -> why the door cannot take part."""
    known_gaps: Mapping[str, str] = field(default_factory=dict[str, str])
    """Row -> a guarantee the door does not keep yet: the row runs and must fail (strict
    xfail), so it is noticed the day the door keeps it."""


# -- the framework doors -------------------------------------------------------------------------


class Library:
    """What every framework door shares: memory is the caller's, health is ``Memory.status``
    (the doors log failures as WARNINGs on the ``obsmem`` logger), no request limit."""

    memory: Memory
    thread: str
    streams = True
    """Whether the door has an event stream of its own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.events: list[dict[str, Any]] | None = [] if self.streams else None
        super().__init__(*args, **kwargs)

    @property
    def ref(self) -> ThreadRef:
        return ThreadRef(thread=self.thread, resource=RESOURCE)

    async def settle(self) -> None:
        await self.memory.settle()

    async def report(self) -> str:
        return "\n".join((await self.memory.status(self.ref)).lines())

    async def over_limit(self) -> str:
        raise NotImplementedError("a framework door has no request limit")

    def close(self) -> None:
        """Stop listening (the doors whose stream is a subscription)."""


class AgentRun(Library, AgentDriver):
    """``obsmem.Agent``; its stream is the result's ``events``."""

    async def turn(self, text: str) -> str:
        from obsmem import Agent

        agent = Agent(
            "door",
            "Be brief.",
            _pydantic_ai_model(self.brain),
            memory=self.memory,
            tools=[self.tools.lookup],
        )
        result = await agent.generate(text, memory={"resource": RESOURCE, "thread": self.thread})
        assert self.events is not None
        self.events += [as_fields(e) for e in result.events]
        return result.text


def streaming_model(brain: Brain) -> Any:
    """The brain as a pydantic-ai FunctionModel that also streams (text, then tool calls)."""
    from pydantic_ai.models.function import DeltaToolCall, FunctionModel

    from obsmem.convert import from_pydantic_ai

    async def stream(messages: Any, info: Any) -> AsyncIterator[Any]:
        text, calls = brain.step(from_pydantic_ai(messages))
        if text:
            yield text
        if calls:
            yield {
                i: DeltaToolCall(name=name, json_args=json.dumps(args), tool_call_id=cid)
                for i, (cid, name, args) in enumerate(calls)
            }

    return FunctionModel(_pydantic_ai_model(brain).function, stream_function=stream)


class CapabilityRun(Library, CapabilityDriver):
    """A ``pydantic_ai.Agent`` with the capability, run with an event stream handler."""

    async def turn(self, text: str) -> str:
        from pydantic_ai import Agent as PydanticAgent

        from obsmem.integrations.pydantic_ai import MemoryEvent, ObservationalMemoryCapability

        capability = ObservationalMemoryCapability(
            self.memory, resource=RESOURCE, thread=self.thread, recall=self.recall
        )
        agent = PydanticAgent(
            streaming_model(self.brain), instructions="Be brief.", capabilities=[capability]
        )
        agent.tool_plain(self.tools.lookup)
        events = self.events
        assert events is not None

        async def handler(ctx: object, stream: Any) -> None:
            async for event in stream:
                if isinstance(event, MemoryEvent):
                    events.append(as_fields(event))

        result = await agent.run(text, event_stream_handler=handler)
        return str(result.output)


class HistoryProcessorRun(Library, Driver):
    """``history_processor`` in ``ProcessHistory``, the history passed from run to run: a
    function returning messages, with no stream of its own."""

    streams = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from pydantic_ai import Agent as PydanticAgent
        from pydantic_ai.capabilities import ProcessHistory

        from obsmem.integrations.pydantic_ai import history_processor

        recall = self.recall and self.memory.retrieval
        processor = history_processor(
            self.memory, resource=RESOURCE, thread=self.thread, recall=recall
        )
        tools: list[Any] = [self.tools.lookup]
        if recall:
            tools.append(self.memory.recall_tool(resource=RESOURCE, thread=self.thread))
        self.agent = PydanticAgent(
            _pydantic_ai_model(self.brain),
            instructions="Be brief.",
            capabilities=[ProcessHistory(processor)],
            tools=tools,
        )
        self.history: list[Any] = []

    async def turn(self, text: str) -> str:
        result = await self.agent.run(text, message_history=self.history)
        self.history = result.all_messages()
        return str(result.output)


class SdkRun(Library, SdkDriver):
    """The Agents SDK session with its input filter; its stream is ``session.subscribe``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        events = self.events
        assert events is not None
        self.close = self.session.subscribe(lambda event: events.append(as_fields(event)))


class SdkCompactingRun(SdkRun):
    """The session with the agent's model wrapped in ``session.compacting(model)``."""

    def agent(self, **kwargs: Any) -> Any:
        agent = super().agent(**kwargs)
        return agent.clone(model=self.session.compacting(agent.model))


class GraphRun(Library):
    """A LangGraph graph (or ``create_agent``): its stream is the graph's custom stream."""

    graph: Any
    config: Callable[[], Any]

    async def turn(self, text: str) -> str:
        assert self.events is not None
        state: Any = None
        async for mode, chunk in self.graph.astream(
            {"messages": [("user", text)]},
            config=self.config(),
            stream_mode=["values", "custom"],
        ):
            if mode == "custom":
                self.events.append(as_fields(chunk))
            else:
                state = chunk
        return str(state["messages"][-1].content)


def _saver() -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


class HooksRun(GraphRun, LangGraphDriver):
    """``create_react_agent`` with the pre- and post-model hooks, checkpointed."""

    def build(self, **kwargs: Any) -> Any:
        return super().build(checkpointer=_saver(), **kwargs)


class CompactingRun(GraphRun, CompactingDriver):
    """``create_react_agent`` on ``lg.compacting(llm)`` with the pre-model hook."""

    def build(self, **kwargs: Any) -> Any:
        return super().build(checkpointer=_saver(), **kwargs)


class CompactingPostHookRun(GraphRun, LangGraphDriver):
    """``lg.compacting(llm)`` with the post-model hook too (which finds the answer stored)."""

    def build(self, **kwargs: Any) -> Any:
        from langgraph.prebuilt import create_react_agent  # pyright: ignore[reportDeprecated]

        from obsmem.integrations.langgraph import LangGraphMemory

        lg = LangGraphMemory(self.memory, resource=RESOURCE, recall=self.recall)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
            return create_react_agent(  # pyright: ignore[reportDeprecated]
                lg.compacting(langchain_model(self.brain)),
                self.graph_tools(),
                pre_model_hook=lg.pre_model_hook,
                post_model_hook=lg.post_model_hook,
                checkpointer=_saver(),
            )


def _tool_graph(node: Any, tools: list[Any]) -> Any:
    """A hand-built graph: the model node, and a tool node it loops through."""
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    return (
        StateGraph(MessagesState)
        .add_node("model", node)
        .add_node("tools", ToolNode(tools))
        .add_edge(START, "model")
        .add_conditional_edges("model", tools_condition)
        .add_edge("tools", "model")
        .compile(checkpointer=_saver())
    )


class ModelNodeRun(GraphRun, LangGraphDriver):
    """``LangGraphMemory.model_node(llm)``: the whole model node in one call."""

    def build(self, **kwargs: Any) -> Any:
        from obsmem.integrations.langgraph import LangGraphMemory

        lg = LangGraphMemory(self.memory, resource=RESOURCE, recall=self.recall)
        return _tool_graph(lg.model_node(langchain_model(self.brain)), self.graph_tools())


class HandBuiltNodeRun(GraphRun, LangGraphDriver):
    """A node of the graph's own that calls ``lg.amodel_input`` and ``lg.asave`` itself."""

    def build(self, **kwargs: Any) -> Any:
        from langchain_core.runnables import RunnableConfig
        from langgraph.graph import MessagesState

        from obsmem.integrations.langgraph import LangGraphMemory

        lg = LangGraphMemory(self.memory, resource=RESOURCE, recall=self.recall)
        model = langchain_model(self.brain)

        async def chatbot(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
            sent = await lg.amodel_input(state["messages"], config)
            reply = await model.ainvoke(sent.messages)
            await lg.asave([reply], config)
            return {"messages": [reply]}

        return _tool_graph(chatbot, self.graph_tools())


class MiddlewareRun(GraphRun, CreateAgentDriver):
    """``langchain.agents.create_agent`` with ``ObservationalMemoryMiddleware``."""


def library(run: type[Library]) -> Opener:
    """The opener of a framework door: a Memory of ``store`` and the door's driver on it."""

    @contextlib.asynccontextmanager
    async def open_door(
        store: Store, options: Mapping[str, Any], actor: Actor
    ) -> AsyncGenerator[Library]:
        memory = Memory(store, observational_memory=dict(options))
        door = run(memory, actor, Tools(), thread=THREAD, recall=True)  # pyright: ignore[reportCallIssue]
        try:
            yield door
        finally:
            door.close()
            await memory.aclose()

    return open_door
