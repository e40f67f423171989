"""Which tool calls still wait for their result, and where a window may be cut."""

from __future__ import annotations

from typing import Any

import pytest

from obsmem.messages import Message, Role, TextPart, ToolCallPart, ToolResultPart
from obsmem.window import binding_calls, pending_calls, safe_prefix


def _m(role: Role, *parts: Any) -> Message:
    return Message(role=role, parts=tuple(parts))


def call(call_id: str, *, deferred: bool = False) -> ToolCallPart:
    meta = {"obsmem": {"deferred": True}} if deferred else {}
    return ToolCallPart(tool_call_id=call_id, tool_name="f", metadata=meta)


def result(call_id: str) -> ToolResultPart:
    return ToolResultPart(tool_call_id=call_id, tool_name="f", content="ok")


def text(value: str) -> TextPart:
    return TextPart(text=value)


USER = _m("user", text("hi"))


@pytest.mark.parametrize(
    ("messages", "pending"),
    [
        ([], set()),
        ([USER], set()),
        # The latest step's calls wait, answered or not.
        ([USER, _m("assistant", call("a"), call("b"))], {"a", "b"}),
        ([USER, _m("assistant", call("a"), call("b")), _m("tool", result("a"))], {"b"}),
        ([USER, _m("assistant", call("a")), _m("tool", result("a"))], set()),
        # A user message (or another step) after a call ends its step: it was interrupted.
        ([_m("assistant", call("a")), USER], set()),
        ([_m("assistant", call("a")), _m("assistant", text("done"))], set()),
        # A deferred call waits wherever it is, until its result comes.
        ([_m("assistant", call("a", deferred=True)), USER], {"a"}),
        ([_m("assistant", call("a", deferred=True)), USER, _m("tool", result("a"))], set()),
    ],
)
def test_pending_calls(messages: list[Message], pending: set[str]) -> None:
    assert pending_calls(messages) == pending


def test_an_interrupted_call_does_not_block_a_cut_but_a_pending_one_does() -> None:
    interrupted = [_m("assistant", call("a")), USER, _m("assistant", text("ok"))]
    assert binding_calls(interrupted) == frozenset()
    assert safe_prefix(interrupted) == 3
    answered_later = [_m("assistant", call("a")), USER, _m("tool", result("a"))]
    assert binding_calls(answered_later) == {"a"}
    assert safe_prefix(answered_later) == 3
    assert safe_prefix(answered_later[:2], binding_calls(answered_later)) == 0
    pending = [USER, _m("assistant", text("let me look"), call("b"))]
    assert safe_prefix(pending) == 1
