"""The seed's example in Python: an agent that remembers a favorite color.

Runs against a real provider: set OBSMEM_MODEL (e.g. openai/gpt-6.1-terra) and that provider's key,
or just a provider key (OPENAI_API_KEY, ANTHROPIC_API_KEY, GOOGLE_API_KEY, ...), or point
OPENAI_BASE_URL at an OpenAI-compatible server. The memory lives in ./obsmem.db.
Needs the extra of the provider's SDK: ``pip install "obsmem[openai]"`` (OpenAI and
OpenAI-compatible servers), ``"obsmem[anthropic]"`` or ``"obsmem[google]"``.
"""

from __future__ import annotations

import asyncio
import sys

from obsmem import Agent, Memory, MissingExtraError, ObsmemError
from obsmem.models import HOW_TO_PROVIDE_A_MODEL, model_from_environment


async def main() -> int:
    model = model_from_environment(ask_server=True)
    if model is None:
        print(HOW_TO_PROVIDE_A_MODEL, file=sys.stderr)
        return 2
    memory = Memory(observational_memory=True)  # ./obsmem.db; Observer: model "auto" (the same)
    agent = Agent(
        id="my-agent",
        instructions="You are a helpful assistant.",
        model=model,
        memory=memory,
    )
    opts = {"resource": "user-123", "thread": "conversation-123"}
    await agent.generate("Remember that my favorite color is blue.", memory=opts)
    result = await agent.generate("What is my favorite color?", memory=opts)
    print(result.text)
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
