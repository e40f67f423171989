"""A plain pydantic-ai Agent with observational memory, through ObservationalMemoryCapability.

Runs against a real provider: set OBSMEM_MODEL (e.g. openai/gpt-6.1-terra) and that provider's key,
or just a provider key (OPENAI_API_KEY, ANTHROPIC_API_KEY, GOOGLE_API_KEY, ...), or point
OPENAI_BASE_URL at an OpenAI-compatible server. The memory lives in ./obsmem.db.
Needs the extra of the provider's SDK: ``pip install "obsmem[openai]"`` (OpenAI and
OpenAI-compatible servers), ``"obsmem[anthropic]"`` or ``"obsmem[google]"``.
"""

from __future__ import annotations

import asyncio
import sys

from pydantic_ai import Agent

from obsmem import Memory, MissingExtraError, ObsmemError
from obsmem.integrations.pydantic_ai import ObservationalMemoryCapability
from obsmem.models import HOW_TO_PROVIDE_A_MODEL, model_from_environment, resolve_model


async def main() -> int:
    spec = model_from_environment(ask_server=True)
    if spec is None:
        print(HOW_TO_PROVIDE_A_MODEL, file=sys.stderr)
        return 2
    memory = Memory(observational_memory={"model": spec})  # store=None: ./obsmem.db
    memory_capability = ObservationalMemoryCapability(
        memory, resource="user-123", thread="pydantic-ai-example"
    )
    agent = Agent(
        resolve_model(spec),
        instructions="You are a helpful assistant.",
        capabilities=[memory_capability],
    )
    await agent.run("Remember that my favorite color is blue.")
    result = await agent.run("What is my favorite color?")  # no message_history: memory has it
    print(result.output)
    await memory.aclose()
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
