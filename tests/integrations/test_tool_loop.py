"""The seed's case: one user turn of a long tool loop (30 steps, each result ~500 tokens) at
``message_tokens`` 3,000. Memory works between the steps: the window stays at or below
``block_after`` at every model request, and every message is stored exactly once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import messages as pa
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem import Agent, Memory
from obsmem.integrations.pydantic_ai import ObservationalMemoryCapability
from obsmem.stores import InMemoryStore
from obsmem.testing import scripted_observer, scripted_reflector

from .helpers import RESOURCE

STEPS = 30
BLOCK_AFTER = 3_600  # 1.2 x message_tokens


def _memory() -> Memory:
    return Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {"model": scripted_observer(), "messageTokens": 3_000},
            "reflection": {"model": scripted_reflector()},
        },
    )


def _page(step: int) -> str:
    """A tool result shaped like a browser snapshot, ~500 tokens."""
    return " ".join(f"<li id=item-{step}-{i}>row {i} of page {step}</li>" for i in range(60))


class LoopingModel:
    """Calls ``fetch`` STEPS times, then answers; at each request it asks memory for the
    window as it stands (after memory's work for that step)."""

    def __init__(self, memory: Memory, thread: str) -> None:
        self.memory = memory
        self.thread = thread
        self.windows: list[int] = []
        self.steps = 0

    async def step(self) -> int | None:
        """Note the window as memory left it for this request; the page to fetch next (None:
        every page is read)."""
        assert self.memory.om is not None
        status = await self.memory.om.status(self.thread, RESOURCE)
        self.windows.append(status.message_tokens)
        if self.steps < STEPS:
            self.steps += 1
            return self.steps
        return None

    def model(self) -> FunctionModel:
        async def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
            step = await self.step()
            if step is None:
                return pa.ModelResponse(parts=[pa.TextPart("All pages read.")])
            call = pa.ToolCallPart("fetch", {"step": step}, tool_call_id=f"c{step}")
            return pa.ModelResponse(parts=[pa.TextPart(f"Step {step}."), call])

        return FunctionModel(answer)

    def chat_model(self) -> Any:
        """The same model as a LangChain chat model."""
        from langchain_core.language_models import BaseChatModel
        from langchain_core.messages import AIMessage, BaseMessage
        from langchain_core.outputs import ChatGeneration, ChatResult

        looping = self

        class LoopingChat(BaseChatModel):
            @property
            def _llm_type(self) -> str:
                return "looping"

            def bind_tools(self, tools: Any, **kwargs: Any) -> LoopingChat:  # type: ignore[override]
                return self

            def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
                raise NotImplementedError("the test runs async")

            async def _agenerate(
                self, messages: list[BaseMessage], *args: Any, **kwargs: Any
            ) -> ChatResult:
                step = await looping.step()
                if step is None:
                    message = AIMessage(content="All pages read.")
                else:
                    call = {"name": "fetch", "args": {"step": step}, "id": f"c{step}"}
                    message = AIMessage(
                        content=f"Step {step}.", tool_calls=[{**call, "type": "tool_call"}]
                    )
                return ChatResult(generations=[ChatGeneration(message=message)])

        return LoopingChat()


def fetch(step: int) -> str:
    """Fetch one page."""
    return _page(step)


async def _with_obsmem_agent(memory: Memory, looping: LoopingModel) -> None:
    agent = Agent("looper", "Read every page.", looping.model(), memory=memory, tools=[fetch])
    result = await agent.generate(
        "Read the pages.", memory={"resource": RESOURCE, "thread": looping.thread}
    )
    assert result.text == "All pages read."
    assert len(result.messages) == 2 * STEPS + 1  # each call, each result, the answer


async def _with_capability(memory: Memory, looping: LoopingModel) -> None:
    agent = PydanticAgent(
        looping.model(),
        capabilities=[
            ObservationalMemoryCapability(memory, resource=RESOURCE, thread=looping.thread)
        ],
    )
    agent.tool_plain(fetch)
    result = await agent.run("Read the pages.")
    assert result.output == "All pages read."


async def _with_create_agent(memory: Memory, looping: LoopingModel) -> None:
    from langchain.agents import create_agent
    from langchain_core.tools import StructuredTool

    from obsmem.integrations.langchain import ObservationalMemoryMiddleware

    agent = create_agent(
        looping.chat_model(),
        [StructuredTool.from_function(fetch)],
        system_prompt="Read every page.",
        middleware=[ObservationalMemoryMiddleware(memory)],
    )
    said: Any = {"messages": [("user", "Read the pages.")]}
    ids = {"thread_id": looping.thread, "resource_id": RESOURCE}
    state = await agent.ainvoke(said, config={"configurable": ids, "recursion_limit": 200})
    assert state["messages"][-1].text == "All pages read."


FrontDoor = Callable[[Memory, LoopingModel], Awaitable[None]]


@pytest.mark.parametrize("front_door", [_with_obsmem_agent, _with_capability, _with_create_agent])
async def test_memory_works_between_the_steps_of_a_long_tool_loop(front_door: FrontDoor) -> None:
    memory = _memory()
    looping = LoopingModel(memory, "loop")
    events: list[Any] = []
    memory.subscribe(events.append)
    await front_door(memory, looping)
    await memory.settle()
    assert len(looping.windows) == STEPS + 1
    assert max(looping.windows) <= BLOCK_AFTER, looping.windows
    # Memory worked inside the turn: observations activated (or observed) between the steps.
    kinds = {e.type for e in events}
    assert kinds & {"data-om-activation", "data-om-observation-end"}
    stored = await memory.messages("loop")
    assert len({m.id for m in stored}) == len(stored)
    assert [m.role for m in stored] == ["user"] + ["assistant", "tool"] * STEPS + ["assistant"]
    assert [m.seq for m in stored] == list(range(1, len(stored) + 1))
    await memory.aclose()


async def test_langgraph_memory_works_between_the_steps_of_a_long_tool_loop() -> None:
    """The same loop through LangGraph's create_react_agent with the pre-model hook."""
    import warnings

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatResult
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent
    from pydantic import Field

    from obsmem.integrations.langgraph import pre_model_hook

    memory = _memory()
    windows: list[int] = []

    class Looping(GenericFakeChatModel):
        seen: list[int] = Field(default_factory=list[int])

        def bind_tools(self, tools: Any, **kwargs: Any) -> Looping:  # type: ignore[override]
            return self

        def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
            return super()._generate(messages, *args, **kwargs)

        async def _agenerate(
            self, messages: list[BaseMessage], *args: Any, **kwargs: Any
        ) -> ChatResult:
            assert memory.om is not None
            windows.append((await memory.om.status("lg-loop", RESOURCE)).message_tokens)
            return self._generate(messages, *args, **kwargs)

    def steps() -> Any:
        for step in range(1, STEPS + 1):
            call = {"name": "fetch_page", "args": {"step": step}, "id": f"c{step}"}
            yield AIMessage(content=f"Step {step}.", tool_calls=[{**call, "type": "tool_call"}])
        yield AIMessage(content="All pages read.")

    @tool
    def fetch_page(step: int) -> str:
        """Fetch one page."""
        return _page(step)

    model = Looping(messages=steps())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
        graph = create_react_agent(
            model, [fetch_page], pre_model_hook=pre_model_hook(memory, resource=RESOURCE)
        )
    state = await graph.ainvoke(
        {"messages": [("user", "Read the pages.")]},
        config={"configurable": {"thread_id": "lg-loop"}, "recursion_limit": 200},
    )
    assert state["messages"][-1].content == "All pages read."
    assert len(windows) == STEPS + 1
    assert max(windows) <= BLOCK_AFTER, windows
    stored = await memory.messages("lg-loop")
    assert len({m.id for m in stored}) == len(stored)
    # The last answer is stored at the next call (or at once with post_model_hook).
    assert [m.role for m in stored] == ["user"] + ["assistant", "tool"] * STEPS
    await memory.aclose()


async def test_agents_sdk_memory_works_between_the_steps_of_a_long_tool_loop() -> None:
    """The same loop through the Agents SDK's Runner with the per-model-call input filter."""
    from agents import Agent as SdkAgent
    from agents import RunConfig, Runner, function_tool
    from agents.items import ModelResponse, TResponseInputItem
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from obsmem.integrations.openai_agents import ObservationalSession

    memory = _memory()
    windows: list[int] = []
    inputs: list[list[TResponseInputItem]] = []

    class Looping(Model):
        steps = 0

        async def get_response(
            self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
        ) -> ModelResponse:
            assert memory.om is not None
            windows.append((await memory.om.status("sdk-loop", RESOURCE)).message_tokens)
            inputs.append(list(input))
            if self.steps < STEPS:
                self.steps += 1
                out: list[Any] = [
                    ResponseFunctionToolCall(
                        type="function_call",
                        call_id=f"c{self.steps}",
                        name="fetch_page",
                        arguments=f'{{"step": {self.steps}}}',
                        id=f"fc{self.steps}",
                        status="completed",
                    )
                ]
            else:
                text = ResponseOutputText(
                    type="output_text", text="All pages read.", annotations=[]
                )
                out = [
                    ResponseOutputMessage(
                        type="message",
                        id="done",
                        role="assistant",
                        status="completed",
                        content=[text],
                    )
                ]
            return ModelResponse(output=out, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the test runs without streaming")

    @function_tool
    def fetch_page(step: int) -> str:
        """Fetch one page."""
        return _page(step)

    session = ObservationalSession(memory, session_id="sdk-loop", resource=RESOURCE)
    agent = SdkAgent(
        name="looper", instructions="Read every page.", model=Looping(), tools=[fetch_page]
    )
    config = RunConfig(
        tracing_disabled=True, call_model_input_filter=session.call_model_input_filter
    )
    result = await Runner.run(
        agent, "Read the pages.", session=session, run_config=config, max_turns=STEPS + 5
    )
    await memory.settle()
    assert result.final_output == "All pages read."
    assert len(windows) == STEPS + 1
    assert max(windows) <= BLOCK_AFTER, windows
    # Memory replaced the Runner's growing input: the last request is far smaller than the loop.
    assert len(str(inputs[-1])) < len("".join(_page(s) for s in range(1, STEPS + 1))) / 3
    stored = await memory.messages("sdk-loop")
    assert len({m.id for m in stored}) == len(stored)
    assert [m.role for m in stored] == ["user"] + ["assistant", "tool"] * STEPS + ["assistant"]
    await memory.aclose()
