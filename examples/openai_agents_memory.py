"""An OpenAI Agents SDK agent whose session is a Memory thread (ObservationalSession).

Needs ``pip install "obsmem[openai-agents]"`` and an OpenAI or OpenAI-compatible model: set
OPENAI_API_KEY (optionally OBSMEM_MODEL=openai/<model>), or point OPENAI_BASE_URL at an
OpenAI-compatible server (OBSMEM_MODEL=openai/<model> names the model). The Observer uses the
same model. The memory lives in ./obsmem.db.
"""

from __future__ import annotations

import asyncio
import os
import sys

from obsmem import Memory
from obsmem.models import HOW_TO_PROVIDE_A_MODEL, model_from_environment, model_id_of, provider_of


async def main() -> int:
    spec = model_from_environment(ask_server=True)
    if spec is None:
        print(HOW_TO_PROVIDE_A_MODEL, file=sys.stderr)
        return 2
    if provider_of(spec) != "openai":
        print(
            f"This example drives the Agents SDK with an OpenAI(-compatible) model, not {spec!r}: "
            "set OBSMEM_MODEL=openai/<model> with OPENAI_API_KEY, or point OPENAI_BASE_URL at an "
            "OpenAI-compatible server.",
            file=sys.stderr,
        )
        return 2
    try:
        from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner
        from openai import AsyncOpenAI

        from obsmem.integrations.openai_agents import ObservationalSession
    except ImportError as exc:
        print(
            f"This example needs the OpenAI Agents SDK ({exc.name}): "
            'pip install "obsmem[openai-agents]"',
            file=sys.stderr,
        )
        return 2

    client = AsyncOpenAI(api_key=os.environ.get("OPENAI_API_KEY") or "local")
    model = OpenAIChatCompletionsModel(model=model_id_of(spec), openai_client=client)
    memory = Memory(observational_memory={"model": spec})  # store=None: ./obsmem.db
    # Leaving the block finishes memory's background work and closes the memory.
    # session.clear_session() would go on in a new thread, forgetting nothing (on_clear="forget"
    # would forget this thread's memory).
    async with ObservationalSession(
        memory, session_id="agents-sdk-example", resource="user-123"
    ) as session:
        agent = Agent(name="assistant", instructions="You are a helpful assistant.", model=model)
        # Memory at every model call of a run (without the filter, memory is assembled once per
        # run and the session logs a warning after a tool loop); tracing off so nothing goes to
        # OpenAI's traces.
        config = RunConfig(
            tracing_disabled=True, call_model_input_filter=session.call_model_input_filter
        )
        await Runner.run(
            agent, "Remember that my favorite color is blue.", session=session, run_config=config
        )
        result = await Runner.run(
            agent, "What is my favorite color?", session=session, run_config=config
        )
        print(result.final_output)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
