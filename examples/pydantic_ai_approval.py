"""One module-level pydantic-ai agent for every user, with memory and a tool that needs approval.

The user and the chat come in ``deps``; the memory capability reads them per run, so one agent
serves everyone. ``book_table`` needs the user's approval: the run pauses on
``DeferredToolRequests``, memory keeps the waiting call (never observed as interrupted), and the
run resumes with the answer. Memory events arrive in the run's own event stream.

Runs against a real provider: set OBSMEM_MODEL (e.g. openai/gpt-6.1-terra) and that provider's key,
or just a provider key, or point OPENAI_BASE_URL at an OpenAI-compatible server. The memory
lives in ./obsmem.db. The tests run ``converse`` with pydantic-ai's own offline models.
Needs the extra of the provider's SDK: ``pip install "obsmem[openai]"`` (OpenAI and
OpenAI-compatible servers), ``"obsmem[anthropic]"`` or ``"obsmem[google]"``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, RunContext, ToolDenied
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import Model

from obsmem import Memory, MissingExtraError, ObsmemError
from obsmem.integrations.pydantic_ai import MemoryEvent, ObservationalMemoryCapability
from obsmem.models import HOW_TO_PROVIDE_A_MODEL, model_from_environment, resolve_model


@dataclass
class Deps:
    user_id: str
    chat_id: str


def build_agent(model: Model, memory: Memory) -> Agent[Deps, str | DeferredToolRequests]:
    agent = Agent(
        model,
        deps_type=Deps,
        output_type=[str, DeferredToolRequests],
        instructions="You are a helpful concierge. Book tables when asked.",
        capabilities=[
            ObservationalMemoryCapability(
                memory,
                resource=lambda ctx: ctx.deps.user_id,
                thread=lambda ctx: ctx.deps.chat_id,
            )
        ],
    )

    @agent.tool(requires_approval=True)
    def book_table(ctx: RunContext[Deps], restaurant: str, people: int) -> str:
        """Book a table (the user approves every booking)."""
        return f"Booked {restaurant} for {people} (confirmation for {ctx.deps.user_id})."

    return agent


Approve = Callable[[ToolCallPart], bool | str]
"""The user's answer to a waiting call: True, False, or a refusal message."""


async def converse(
    agent: Agent[Deps, str | DeferredToolRequests],
    deps: Deps,
    text: str,
    approve: Approve,
    events: list[str] | None = None,
) -> str:
    """One turn: run, answer every approval the run pauses on, resume; the final answer."""

    async def watch(ctx: object, stream: AsyncIterable[Any]) -> None:
        async for event in stream:
            if isinstance(event, MemoryEvent) and events is not None:
                events.append(event.om_type)

    result = await agent.run(text, deps=deps, event_stream_handler=watch)
    while isinstance(result.output, DeferredToolRequests):
        answers: dict[str, Any] = {}
        for call in result.output.approvals:
            answer = approve(call)
            answers[call.tool_call_id] = answer if isinstance(answer, bool) else ToolDenied(answer)
        result = await agent.run(
            deps=deps,
            message_history=result.all_messages(),
            deferred_tool_results=DeferredToolResults(approvals=answers),
            event_stream_handler=watch,
        )
    return result.output


def ask_on_the_terminal(call: ToolCallPart) -> bool:
    reply = input(f"Allow {call.tool_name}({call.args})? [y/N] ")
    return reply.strip().lower().startswith("y")


async def main() -> int:
    spec = model_from_environment(ask_server=True)
    if spec is None:
        print(HOW_TO_PROVIDE_A_MODEL, file=sys.stderr)
        return 2
    async with Memory(observational_memory={"model": spec}) as memory:  # ./obsmem.db
        agent = build_agent(resolve_model(spec), memory)
        ana = Deps(user_id="ana", chat_id="ana-dinner")
        print(
            await converse(agent, ana, "I am vegetarian. Book Tasca for two.", ask_on_the_terminal)
        )
        print(await converse(agent, ana, "What do you know about my diet?", ask_on_the_terminal))
    return 0


def run() -> int:
    """``main()``, with a missing extra, a model or a store that failed said in one line."""
    try:
        return asyncio.run(main())
    except ObsmemError as exc:
        print(f"{__file__.rsplit('/', 1)[-1]}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, MissingExtraError) else 1


if __name__ == "__main__":
    raise SystemExit(run())
