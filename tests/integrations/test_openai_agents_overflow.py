"""The Agents SDK session's ``compacting(model)``: a step the model refuses as longer than its
context is compacted once and sent again, inside the Runner's own run, streamed or not."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from agents import Agent, RunConfig, Runner
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from obsmem import Memory
from obsmem.integrations.openai_agents import ObservationalSession
from obsmem.stores import InMemoryStore
from obsmem.testing import scripted_observer, scripted_reflector

LIMIT = 2_000
"""The small model's context, in tokens of about four characters."""


class SmallModel(Model):
    """Refuses (as OpenAI does, HTTP 400 ``context_length_exceeded``) a request past ``LIMIT``."""

    def __init__(self) -> None:
        self.model = "gpt-5-mini"
        self.sizes: list[int] = []
        self.streamed = 0

    def _check(self, input: Any) -> None:
        size = len(json.dumps(input, default=str)) // 4
        self.sizes.append(size)
        if size > LIMIT:
            body = {
                "message": f"This model's maximum context length is {LIMIT} tokens. However, "
                f"your messages resulted in {size} tokens.",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
            request = httpx.Request("POST", "http://127.0.0.1:9/v1/responses")
            raise openai.BadRequestError(
                body["message"],
                response=httpx.Response(400, json={"error": body}, request=request),
                body=body,
            )

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self._check(input)
        text = ResponseOutputText(type="output_text", text="Noted.", annotations=[])
        message = ResponseOutputMessage(
            type="message", id="msg", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    async def stream_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The answer as the Responses API streams it (the refusal comes before any event)."""
        from openai.types.responses import Response, ResponseCompletedEvent

        self._check(input)
        self.streamed += 1
        text = ResponseOutputText(type="output_text", text="Noted.", annotations=[])
        message = ResponseOutputMessage(
            type="message", id="msg", role="assistant", status="completed", content=[text]
        )
        response = Response(
            id="resp",
            created_at=0,
            model=self.model,
            object="response",
            output=[message],
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
        )
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=0
        )


def words(turn: int) -> str:
    return " ".join(f"fact{turn}-{i} about the garden" for i in range(40))


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_a_refused_step_is_compacted_and_sent_again(
    streamed: bool, caplog: pytest.LogCaptureFixture
) -> None:
    memory = Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {"model": scripted_observer(words=4)},
            "reflection": {"model": scripted_reflector()},
        },
    )
    session = ObservationalSession(memory, session_id="t1", resource="u1")
    small = SmallModel()
    agent = Agent(name="helper", instructions="Be brief.", model=session.compacting(small))
    config = RunConfig(
        tracing_disabled=True, call_model_input_filter=session.call_model_input_filter
    )
    caplog.set_level(logging.WARNING, logger="obsmem")
    for turn in range(14):
        if streamed:
            run = Runner.run_streamed(agent, words(turn), session=session, run_config=config)
            async for _ in run.stream_events():
                pass
            assert run.final_output == "Noted."
        else:
            result = await Runner.run(agent, words(turn), session=session, run_config=config)
            assert result.final_output == "Noted."
        await memory.settle()
    refused_at = [i for i, size in enumerate(small.sizes) if size > LIMIT]
    assert refused_at, "the conversation outgrew the model's context"
    assert all(small.sizes[i + 1] <= LIMIT for i in refused_at)  # one retry that fitted
    compacted = [r for r in caplog.records if "compacted thread" in r.getMessage()]
    assert len(compacted) == len(refused_at)
    assert small.streamed == (14 if streamed else 0)
    await memory.aclose()


async def test_another_error_is_raised_as_it_is() -> None:
    class Broken(SmallModel):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            raise RuntimeError("the model is down")

    memory = Memory(InMemoryStore(), observational_memory=False)
    session = ObservationalSession(memory, session_id="t1", resource="u1")
    agent = Agent(name="helper", model=session.compacting(Broken()))
    config = RunConfig(
        tracing_disabled=True, call_model_input_filter=session.call_model_input_filter
    )
    with pytest.raises(RuntimeError, match="the model is down"):
        await Runner.run(agent, "hi", session=session, run_config=config)
    await memory.aclose()
