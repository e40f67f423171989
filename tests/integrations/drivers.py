"""The five front doors driven the same way: one scripted "brain" decides each model step, and
each framework runs it through its own agent loop, tools and memory hooks.

A test builds a :class:`Brain` (what the model answers at each request, seen as obsmem
messages), picks a driver (``obsmem.Agent``, the pydantic-ai capability, the Agents SDK session
with its per-call input filter, LangGraph's pre/post-model hooks, LangChain's ``create_agent``
with the memory middleware) and calls ``turn(text)``. Every request the model got is kept in
``brain.requests``, converted to obsmem messages, so one check covers every framework.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from obsmem import Memory
from obsmem.messages import Message, TextPart, ToolCallPart, ToolResultPart

from .helpers import RESOURCE

DOORS = ("agent", "pydantic-ai", "openai-agents", "langgraph", "langgraph-compacting", "langchain")
"""Every front door, as ``make_driver`` names them."""


@dataclass
class Reply:
    """One model step: some text, and tool calls ``(name, arguments)``."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(
        default_factory=list[tuple[str, dict[str, Any]]]
    )


Policy = Callable[[list[Message]], Reply]


def lookup_then_answer(messages: list[Message]) -> Reply:
    """Call ``lookup`` once per user message, then answer."""
    if _last_is_tool_result(messages):
        return Reply(text="Here is what I found. " + "All noted and done. " * 4)
    return Reply(text="Let me look.", calls=[("lookup", {"query": "the page"})])


def _last_is_tool_result(messages: list[Message]) -> bool:
    last = next((m for m in reversed(messages) if m.role != "system"), None)
    return last is not None and any(isinstance(p, ToolResultPart) for p in last.parts)


class Brain:
    """The scripted model: ``policy`` decides each step; every request is kept."""

    def __init__(self, policy: Policy = lookup_then_answer) -> None:
        self.policy = policy
        self.requests: list[list[Message]] = []
        self.calls = 0
        self.on_request: list[Callable[[list[Message]], None]] = []

    def step(self, messages: list[Message]) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
        """``(text, [(call_id, name, args)])`` for one request."""
        self.requests.append(messages)
        for check in self.on_request:
            check(messages)
        reply = self.policy(messages)
        calls: list[tuple[str, str, dict[str, Any]]] = []
        for name, args in reply.calls:
            self.calls += 1
            calls.append((f"call-{self.calls}", name, args))
        return reply.text, calls

    def tool_results(self, name: str) -> list[str]:
        """The results of tool ``name`` the model was shown, in order, without repeats."""
        calls = {
            p.tool_call_id
            for request in self.requests
            for m in request
            for p in m.parts
            if isinstance(p, ToolCallPart) and p.tool_name == name
        }
        seen: dict[str, str] = {}
        for request in self.requests:
            for m in request:
                for p in m.parts:
                    if isinstance(p, ToolResultPart) and p.tool_call_id in calls:
                        seen.setdefault(p.tool_call_id, str(p.content))
        return list(seen.values())


class Tools:
    """The plain tools every driver offers: ``lookup`` returns ``page`` (set it per turn)."""

    def __init__(self) -> None:
        self.page = "nothing special"

    def lookup(self, query: str) -> str:
        """Look something up."""
        return self.page


class Driver:
    """One front door, one thread. ``turn(text)`` runs a user turn to its answer."""

    def __init__(
        self, memory: Memory, brain: Brain, tools: Tools, *, thread: str, recall: bool
    ) -> None:
        self.memory = memory
        self.brain = brain
        self.tools = tools
        self.thread = thread
        self.recall = recall

    async def turn(self, text: str) -> str:
        raise NotImplementedError


# -- obsmem.Agent and the pydantic-ai capability ---------------------------------------------------


def _pydantic_ai_model(brain: Brain) -> Any:
    from pydantic_ai import messages as pa
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from obsmem.convert import from_pydantic_ai

    async def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        text, calls = brain.step(from_pydantic_ai(messages))
        parts: list[Any] = [pa.TextPart(text)] if text else []
        parts += [pa.ToolCallPart(name, args, tool_call_id=cid) for cid, name, args in calls]
        return pa.ModelResponse(parts=parts)

    return FunctionModel(answer)


class AgentDriver(Driver):
    """``obsmem.Agent`` (it offers ``recall`` itself whenever retrieval is on)."""

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
        return result.text


class CapabilityDriver(Driver):
    """A plain ``pydantic_ai.Agent`` with ``ObservationalMemoryCapability``."""

    async def turn(self, text: str) -> str:
        from pydantic_ai import Agent as PydanticAgent

        from obsmem.integrations.pydantic_ai import ObservationalMemoryCapability

        capability = ObservationalMemoryCapability(
            self.memory, resource=RESOURCE, thread=self.thread, recall=self.recall
        )
        agent = PydanticAgent(
            _pydantic_ai_model(self.brain), instructions="Be brief.", capabilities=[capability]
        )
        agent.tool_plain(self.tools.lookup)
        result = await agent.run(text)
        return str(result.output)


# -- the Agents SDK ------------------------------------------------------------------------------


class SdkDriver(Driver):
    """``Runner.run`` with ``ObservationalSession`` and its per-model-call input filter."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from obsmem.integrations.openai_agents import ObservationalSession

        self.session = ObservationalSession(self.memory, session_id=self.thread, resource=RESOURCE)

    def agent(self, **kwargs: Any) -> Any:
        from agents import Agent, function_tool

        tools: list[Any] = [function_tool(self.tools.lookup, **kwargs)]
        if self.recall and self.memory.retrieval:
            tools.append(self.session.recall_tool())
        return Agent(
            name="door", instructions="Be brief.", model=_SdkModel(self.brain), tools=tools
        )

    def run_config(self) -> Any:
        from agents import RunConfig

        return RunConfig(
            tracing_disabled=True, call_model_input_filter=self.session.call_model_input_filter
        )

    async def turn(self, text: str) -> str:
        from agents import Runner

        result = await Runner.run(
            self.agent(), text, session=self.session, run_config=self.run_config()
        )
        return str(result.final_output)


def _sdk_model_class() -> type[Any]:
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from obsmem.integrations.openai_agents import from_agents_items

    class SdkModel(Model):
        def __init__(self, brain: Brain) -> None:
            self.brain = brain

        async def get_response(
            self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
        ) -> ModelResponse:
            items = [{"role": "user", "content": input}] if isinstance(input, str) else input
            text, calls = self.brain.step(from_agents_items(items))
            out: list[Any] = []
            if text:
                content = ResponseOutputText(type="output_text", text=text, annotations=[])
                out.append(
                    ResponseOutputMessage(
                        type="message",
                        id=f"msg-{len(self.brain.requests)}",
                        role="assistant",
                        status="completed",
                        content=[content],
                    )
                )
            out += [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=cid,
                    name=name,
                    arguments=json.dumps(args),
                    id=f"fc-{cid}",
                    status="completed",
                )
                for cid, name, args in calls
            ]
            return ModelResponse(output=out, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the tests run without streaming")

    return SdkModel


def _SdkModel(brain: Brain) -> Any:
    return _sdk_model_class()(brain)


# -- LangGraph and LangChain's create_agent ------------------------------------------------------


def langchain_model(brain: Brain) -> Any:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from obsmem.integrations.langgraph import from_langchain

    class BrainChat(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> BrainChat:  # type: ignore[override]
            return self

        def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
            text, calls = brain.step(from_langchain(messages))
            message = AIMessage(
                content=text,
                tool_calls=[
                    {"name": name, "args": args, "id": cid, "type": "tool_call"}
                    for cid, name, args in calls
                ],
            )
            return ChatResult(generations=[ChatGeneration(message=message)])

    return BrainChat()


class LangGraphDriver(Driver):
    """``create_react_agent`` with the pre- and post-model hooks (and ``recall_tool``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.graph = self.build()

    def graph_tools(self) -> list[Any]:
        """``lookup``, and ``recall`` when retrieval is on and the driver offers it."""
        from langchain_core.tools import StructuredTool

        from obsmem.integrations.langgraph import recall_tool

        tools: list[Any] = [StructuredTool.from_function(self.tools.lookup)]
        if self.recall and self.memory.retrieval:
            tools.append(recall_tool(self.memory, resource=RESOURCE))
        return tools

    def build(self, **kwargs: Any) -> Any:
        from langgraph.prebuilt import create_react_agent

        from obsmem.integrations.langgraph import post_model_hook, pre_model_hook

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
            return create_react_agent(
                langchain_model(self.brain),
                self.graph_tools(),
                pre_model_hook=pre_model_hook(self.memory, resource=RESOURCE, recall=self.recall),
                post_model_hook=post_model_hook(self.memory, resource=RESOURCE),
                **kwargs,
            )

    def config(self) -> Any:
        return {"configurable": {"thread_id": self.thread}, "recursion_limit": 200}

    async def turn(self, text: str) -> str:
        state = await self.graph.ainvoke({"messages": [("user", text)]}, config=self.config())
        return str(state["messages"][-1].content)


class CompactingDriver(LangGraphDriver):
    """``create_react_agent`` on ``lg.compacting(llm)`` with the pre-model hook only: the
    wrapper stores each answer at once."""

    def build(self, **kwargs: Any) -> Any:
        from langgraph.prebuilt import create_react_agent

        from obsmem.integrations.langgraph import LangGraphMemory

        lg = LangGraphMemory(self.memory, resource=RESOURCE, recall=self.recall)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
            return create_react_agent(
                lg.compacting(langchain_model(self.brain)),
                self.graph_tools(),
                pre_model_hook=lg.pre_model_hook,
                **kwargs,
            )


class CreateAgentDriver(LangGraphDriver):
    """``langchain.agents.create_agent`` with ``ObservationalMemoryMiddleware`` (which offers
    ``recall`` itself) and a checkpointer; the conversation is named in the run's config."""

    def build(self, **kwargs: Any) -> Any:
        from langchain.agents import create_agent
        from langchain_core.tools import StructuredTool
        from langgraph.checkpoint.memory import InMemorySaver

        from obsmem.integrations.langchain import ObservationalMemoryMiddleware

        kwargs.setdefault("checkpointer", InMemorySaver())
        return create_agent(
            langchain_model(self.brain),
            [StructuredTool.from_function(self.tools.lookup)],
            system_prompt="Be brief.",
            middleware=[ObservationalMemoryMiddleware(self.memory, recall=self.recall)],
            **kwargs,
        )

    def config(self) -> Any:
        configurable = {"thread_id": self.thread, "resource_id": RESOURCE}
        return {"configurable": configurable, "recursion_limit": 200}


_DRIVERS: dict[str, type[Driver]] = {
    "agent": AgentDriver,
    "pydantic-ai": CapabilityDriver,
    "openai-agents": SdkDriver,
    "langgraph": LangGraphDriver,
    "langgraph-compacting": CompactingDriver,
    "langchain": CreateAgentDriver,
}


def make_driver(
    door: str,
    memory: Memory,
    brain: Brain,
    tools: Tools | None = None,
    *,
    thread: str = "door-thread",
    recall: bool = True,
) -> Driver:
    """The driver for ``door`` (one of :data:`DOORS`)."""
    return _DRIVERS[door](memory, brain, tools or Tools(), thread=thread, recall=recall)


# -- checks --------------------------------------------------------------------------------------


async def assert_requests_valid(brain: Brain) -> None:
    """Every request the model got pairs each call with its result, in every provider's shape
    (OpenAI chat, Responses, Anthropic), and shows no result without its call."""
    from ..engine.property_helpers import orphan_results
    from ..provider_shapes import PROVIDERS, unpaired_calls

    for n, request in enumerate(brain.requests):
        assert orphan_results(request) == [], f"request {n}: results without their call"
        for provider in PROVIDERS:
            assert await unpaired_calls(request, provider) == [], f"request {n} ({provider})"


def assert_stored_once(
    stored: list[Message], *, turns: int, unanswered: frozenset[str] = frozenset()
) -> None:
    """Each turn's input ("Turn i: ..."), each call, each result and each answer ("Here is what
    I found.") stored exactly once; every call answered but ``unanswered``."""
    assert len({m.id for m in stored}) == len(stored)
    texts = [p.text for m in stored for p in m.parts if isinstance(p, TextPart)]
    for i in range(turns):
        assert sum(t.startswith(f"Turn {i}:") for t in texts) == 1, i
    assert sum(t.startswith("Here is what I found.") for t in texts) == turns
    calls = [p.tool_call_id for m in stored for p in m.parts if isinstance(p, ToolCallPart)]
    results = [p.tool_call_id for m in stored for p in m.parts if isinstance(p, ToolResultPart)]
    assert len(calls) == len(set(calls))
    assert len(results) == len(set(results))
    assert set(calls) - set(results) == unanswered
    assert set(results) <= set(calls)
