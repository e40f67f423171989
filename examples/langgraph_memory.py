"""A LangGraph ReAct agent (``create_react_agent``) with observational memory, through its
pre- and post-model hooks. For ``langchain.agents.create_agent`` (LangChain's replacement for
``create_react_agent``) see examples/langchain_agent_memory.py; for a hand-built graph,
docs/langgraph.md.

Needs ``pip install "obsmem[langchain]"`` (LangGraph, LangChain and ``langchain-openai``, the
chat model for OpenAI and OpenAI-compatible servers); for Anthropic or Google models add
``langchain-anthropic`` or ``langchain-google-genai``. Set OBSMEM_MODEL and the provider's
key, a provider key alone, or OPENAI_BASE_URL for an OpenAI-compatible server. The graph state
keeps the full history; the model sees what memory assembled. The memory lives in ./obsmem.db.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import warnings
from typing import Any

from obsmem import Memory
from obsmem.models import HOW_TO_PROVIDE_A_MODEL, model_from_environment, model_id_of, provider_of

for _package in ("langgraph", "langchain_core"):  # imported where the graph is built
    if importlib.util.find_spec(_package) is None:
        print(
            f"This example needs LangChain and LangGraph ({_package}): "
            'pip install "obsmem[langchain]"',
            file=sys.stderr,
        )
        raise SystemExit(2)

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
        extra = '"obsmem[langchain]"' + ("" if provider == "openai" else f" {package}")
        print(f"This example needs {package} for {spec!r}: pip install {extra}", file=sys.stderr)
        raise SystemExit(2) from None
    local = os.environ.get("OPENAI_BASE_URL") if provider == "openai" else None
    if local and not os.environ.get("OPENAI_API_KEY"):  # a local server takes any key
        return cls(model=model_id_of(spec), base_url=local, api_key="not-needed")
    return cls(model=model_id_of(spec))


def build_graph(model: Any, memory: Memory) -> Any:
    """The ReAct agent with both hooks of one ``LangGraphMemory`` (thread and user: per run)."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.prebuilt import create_react_agent

    from obsmem.integrations.langgraph import LangGraphMemory

    hooks = LangGraphMemory(memory)
    with warnings.catch_warnings():  # create_react_agent is deprecated in LangGraph 1.x
        warnings.filterwarnings("ignore", message="create_react_agent has been moved")
        return create_react_agent(
            hooks.compacting(model),  # one system message with the prompt; retries an overflow
            [],
            prompt="You are a helpful assistant.",
            pre_model_hook=hooks.pre_model_hook,
            post_model_hook=hooks.post_model_hook,
            checkpointer=InMemorySaver(),
        )


def converse(graph: Any) -> str:
    """Two turns of one user; the second answer is returned."""
    config: Any = {"configurable": {"thread_id": "langgraph-example", "user_id": "user-123"}}
    graph.invoke({"messages": [("user", "Remember that my favorite color is blue.")]}, config)
    state = graph.invoke({"messages": [("user", "What is my favorite color?")]}, config)
    return str(state["messages"][-1].text)


def main() -> int:
    spec = model_from_environment(ask_server=True)
    if spec is None:
        print(HOW_TO_PROVIDE_A_MODEL, file=sys.stderr)
        return 2
    model = chat_model(spec)
    if model is None:
        print(
            f"This example has no LangChain chat model for {spec!r}: set OBSMEM_MODEL to an "
            f"{', '.join(CHAT_MODELS)} model (openai/<model> also serves OPENAI_BASE_URL).",
            file=sys.stderr,
        )
        return 2
    with Memory(observational_memory={"model": spec}) as memory:  # ./obsmem.db; closed at the end
        print(converse(build_graph(model, memory)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
