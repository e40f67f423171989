"""A LangGraph ReAct agent with observational memory, through pre_model_hook/post_model_hook.

Needs ``pip install "obsmem[langgraph]"`` plus the LangChain chat model package of your provider
(``pip install langchain-openai`` or ``langchain-anthropic``). Set OBSMEM_MODEL and the provider's
key, a provider key alone, or OPENAI_BASE_URL for an OpenAI-compatible server. The graph state
keeps the full history; the model sees what memory assembled. The memory lives in ./obsmem.db.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import warnings
from typing import Any

from obsmem import Memory
from obsmem.models import HOW_TO_PROVIDE_A_MODEL, model_from_environment, model_id_of, provider_of

CHAT_MODELS = {
    "openai": ("langchain_openai", "ChatOpenAI", "langchain-openai"),
    "anthropic": ("langchain_anthropic", "ChatAnthropic", "langchain-anthropic"),
    "google": ("langchain_google_genai", "ChatGoogleGenerativeAI", "langchain-google-genai"),
}


def chat_model(spec: str) -> Any:
    provider = provider_of(spec) or ""
    if provider not in CHAT_MODELS:
        return None
    module, name, package = CHAT_MODELS[provider]
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError:
        print(f"This example needs {package}: pip install {package}", file=sys.stderr)
        return None
    return cls(model=model_id_of(spec))


async def main() -> int:
    spec = model_from_environment()
    if spec is None:
        print(HOW_TO_PROVIDE_A_MODEL, file=sys.stderr)
        return 2
    model = chat_model(spec)
    if model is None:
        print(f"No LangChain chat model for {spec!r}. " + HOW_TO_PROVIDE_A_MODEL, file=sys.stderr)
        return 2
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    from obsmem.integrations.langgraph import post_model_hook, pre_model_hook

    memory = Memory(observational_memory={"model": spec})  # store=None: ./obsmem.db
    hooks = {"resource": "user-123", "thread": "langgraph-example"}
    with warnings.catch_warnings():  # create_react_agent is deprecated in LangGraph 1.x
        warnings.simplefilter("ignore")
        graph = create_react_agent(
            model,
            [],
            prompt="You are a helpful assistant.",
            pre_model_hook=pre_model_hook(memory, **hooks),
            post_model_hook=post_model_hook(memory, **hooks),
            checkpointer=InMemorySaver(),
        )
    config: Any = {"configurable": {"thread_id": "langgraph-example"}}
    await graph.ainvoke(
        {"messages": [HumanMessage("Remember that my favorite color is blue.")]}, config
    )
    state = await graph.ainvoke({"messages": [HumanMessage("What is my favorite color?")]}, config)
    print(state["messages"][-1].text)
    await memory.aclose()
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
