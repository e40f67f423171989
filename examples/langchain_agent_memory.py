"""A LangChain agent (``create_agent``) with observational memory, through middleware.

Needs ``pip install "obsmem[langchain]"`` (LangGraph, LangChain and ``langchain-openai``, the
chat model for OpenAI and OpenAI-compatible servers); for Anthropic or Google models add
``langchain-anthropic`` or ``langchain-google-genai``. Set OBSMEM_MODEL and the provider's
key, a provider key alone, or OPENAI_BASE_URL for an OpenAI-compatible server. The memory lives
in ./obsmem.db.

One compiled agent serves two users: each run names its thread and user in the config. Memory's
events show on the custom stream, a note needs the user's approval (the run pauses and resumes),
and the checkpoint keeps only what memory has not observed yet. Runs are sync (``invoke``,
``stream``); ``ainvoke``/``astream`` work the same way.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

try:
    from langchain.agents import create_agent
    from langchain.agents.middleware import HumanInTheLoopMiddleware
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from obsmem.integrations.langchain import ObservationalMemoryMiddleware
except ImportError as exc:
    print(
        f'This example needs LangChain and LangGraph ({exc.name}): pip install "obsmem[langchain]"',
        file=sys.stderr,
    )
    raise SystemExit(2) from None

from obsmem import Memory
from obsmem.models import HOW_TO_PROVIDE_A_MODEL, model_from_environment, model_id_of, provider_of

CHAT_MODELS = {
    "openai": ("langchain_openai", "ChatOpenAI", "langchain-openai"),
    "anthropic": ("langchain_anthropic", "ChatAnthropic", "langchain-anthropic"),
    "google": ("langchain_google_genai", "ChatGoogleGenerativeAI", "langchain-google-genai"),
}


def chat_model(spec: str) -> Any:
    """The LangChain chat model for an obsmem model spec (``openai/gpt-6.1-terra``), or None."""
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


@tool
def send_note(to: str, text: str) -> str:
    """Send a short note to someone (the user approves each note)."""
    return f"Note sent to {to}: {text}"


def build_agent(model: Any, memory: Memory) -> Any:
    """One agent for every user: the memory middleware first, then the approval."""
    return create_agent(
        model,
        [send_note],
        system_prompt="You are a helpful assistant. Use send_note when asked to send a note.",
        middleware=[
            ObservationalMemoryMiddleware(memory, trim_checkpoint=True),
            HumanInTheLoopMiddleware({"send_note": True}),
        ],
        checkpointer=InMemorySaver(),
    )


def ask(agent: Any, text: str, config: Any) -> str:
    """One turn; memory's events are printed as they stream, approvals are given."""
    for mode, chunk in agent.stream(
        {"messages": [("user", text)]}, config, stream_mode=["custom", "values"]
    ):
        if mode == "custom":
            print(f"  [memory] {chunk['type']}")
        else:
            state = chunk
    while agent.get_state(config).interrupts:
        print("  [approval] the user approves the note")
        state = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    return str(state["messages"][-1].text)


def converse(agent: Any) -> dict[str, str]:
    """Ana tells a fact and sends a note; then Ana and Ben each ask about it."""
    ana: Any = {"configurable": {"thread_id": "ana-chat", "user_id": "ana"}}
    ben: Any = {"configurable": {"thread_id": "ben-chat", "user_id": "ben"}}
    answers: dict[str, str] = {}
    for who, config, text in [
        ("ana", ana, "Remember that my favorite color is blue."),
        ("ana", ana, "Send Ben a note saying hello."),
        ("ana", ana, "What is my favorite color?"),
        ("ben", ben, "What is my favorite color?"),
    ]:
        print(f"{who}: {text}")
        answers[who] = ask(agent, text, config)
        print(f"agent: {answers[who]}")
    return answers


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
        converse(build_agent(model, memory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
