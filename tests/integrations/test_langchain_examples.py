"""examples/langchain_agent_memory.py (``create_agent`` middleware, approval included) and
examples/langgraph_memory.py (``create_react_agent`` hooks), run offline: their agents are
built as the examples build them, around LangChain's fake chat model."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from obsmem import Memory
from obsmem.messages import ToolResultPart
from obsmem.stores import SQLiteStore

from .test_langchain import call, chat, om_memory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assistant(messages: list[BaseMessage]) -> AIMessage:
    """Answers the examples' turns from what it is sent (memory's context)."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(content="The note is sent.")
    if "note" in last.text:
        return call("send_note", {"to": "Ben", "text": "hello"}, "note-1")
    if "favorite color?" in last.text:
        sent = "\n".join(m.text for m in messages)
        known = "favorite color is blue" in sent
        return AIMessage(content="Your favorite color is blue." if known else "I do not know yet.")
    return AIMessage(content="Noted.")


def _memory(tmp_path: Path) -> Memory:
    return om_memory(SQLiteStore(tmp_path / "m.db"))


def test_the_create_agent_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = load("langchain_agent_memory")
    memory = _memory(tmp_path)
    model = chat(assistant)
    answers: Any = example.converse(example.build_agent(model, memory))
    assert answers == {"ana": "Your favorite color is blue.", "ben": "I do not know yet."}
    out = capsys.readouterr().out
    assert "[memory] data-om-status" in out
    assert out.count("[approval] the user approves the note") == 1
    ana = memory.run_sync(memory.messages("ana-chat"))
    assert [m.role for m in ana] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    [result] = [p for m in ana for p in m.parts if isinstance(p, ToolResultPart)]
    assert result.content == "Note sent to Ben: hello"
    ben = memory.run_sync(memory.messages("ben-chat"))
    assert all("blue" not in m.text for m in ben)
    assert all("blue" not in m.text for request in model.inputs[-1:] for m in request)
    memory.close()


def test_the_create_react_agent_example(tmp_path: Path) -> None:
    example = load("langgraph_memory")
    memory = _memory(tmp_path)
    model = chat(assistant)
    assert example.converse(example.build_graph(model, memory)) == "Your favorite color is blue."
    stored = memory.run_sync(memory.messages("langgraph-example"))
    assert [m.text for m in stored] == [
        "Remember that my favorite color is blue.",
        "Noted.",
        "What is my favorite color?",
        "Your favorite color is blue.",
    ]
    assert [t.id for t in memory.run_sync(memory.threads("user-123"))] == ["langgraph-example"]
    memory.close()
