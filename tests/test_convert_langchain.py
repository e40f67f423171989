"""Conversions: LangChain messages <-> obsmem messages.

"Exact" means equality of ``message_to_dict`` with the messages as LangChain holds them (a
graph's state, ``create_agent``'s messages), before and after the JSON form the stores persist.
Going the other way, obsmem messages come back with their roles and parts."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
)
from langchain_core.tools import tool

from obsmem.convert import from_langchain, to_langchain
from obsmem.convert.langchain import METADATA_KEY, stored_id
from obsmem.messages import (
    DataPart,
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    message_from_dict,
)
from obsmem.messages import message_to_dict as obsmem_to_dict

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
PNG_URL = f"data:image/png;base64,{base64.b64encode(PNG).decode('ascii')}"
AUDIO = {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}}


def through_store(messages: Sequence[Message]) -> list[Message]:
    """The messages after the JSON form the stores persist."""
    return [message_from_dict(json.loads(json.dumps(obsmem_to_dict(m)))) for m in messages]


def dicts(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    return [message_to_dict(m) for m in messages]


def bare(messages: Sequence[Message]) -> list[Message]:
    """The messages without the LangChain message they kept (edited by hand, say)."""
    return [Message(role=m.role, parts=m.parts, id=m.id) for m in messages]


def assert_round_trip(messages: list[BaseMessage]) -> list[Message]:
    before = dicts(messages)
    converted = from_langchain(messages)
    assert dicts(to_langchain(converted)) == before
    assert dicts(to_langchain(through_store(converted))) == before
    assert dicts(messages) == before, "the input was not changed"
    return converted


def realistic_messages() -> list[BaseMessage]:
    """A turn with an image, audio, reasoning, a valid and an invalid tool call, their results
    (one failed, one with content blocks) and an answer with provider metadata."""
    return [
        SystemMessage("Answer in English.", id="s1"),
        HumanMessage(
            [
                {"type": "text", "text": "Where is this? Also listen."},
                {"type": "image_url", "image_url": {"url": PNG_URL, "detail": "high"}},
                {"type": "image", "url": "https://example.com/view.jpg"},
                AUDIO,
            ],
            id="h1",
        ),
        AIMessage(
            [
                {"type": "thinking", "thinking": "Two lookups needed.", "signature": "sig-1"},
                {"type": "text", "text": "Looking."},
            ],
            tool_calls=[
                {"name": "lookup", "args": {"q": "Eiffel"}, "id": "call_a", "type": "tool_call"}
            ],
            invalid_tool_calls=[
                {"name": "grep", "args": "{bad", "id": "call_b", "error": "not JSON"}
            ],
            id="a1",
            response_metadata={"model_name": "claude-haiku-4-5", "stop_reason": "tool_use"},
            usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        ),
        ToolMessage(
            [
                {"type": "text", "text": "Paris"},
                {"type": "image_url", "image_url": {"url": PNG_URL}},
            ],
            tool_call_id="call_a",
            name="lookup",
            id="t1",
            artifact={"source": "atlas"},
        ),
        ToolMessage("bad arguments", tool_call_id="call_b", status="error", id="t2"),
        AIMessage("It is Paris.", id="a2", additional_kwargs={"refusal": None}),
    ]


def test_a_realistic_turn_round_trips_exactly() -> None:
    assert_round_trip(realistic_messages())


def test_messages_map_onto_obsmem_parts() -> None:
    converted = from_langchain(realistic_messages())
    assert [m.role for m in converted] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    _, user, calls, result, failed, answer = converted
    text, image, url_image, audio = user.parts
    assert text == TextPart(text="Where is this? Also listen.")
    assert isinstance(image, ImagePart)
    assert (image.data, image.media_type, image.detail) == (PNG, "image/png", "high")
    assert url_image == ImagePart(url="https://example.com/view.jpg", metadata=url_image.metadata)
    assert audio == DataPart(name="langchain:content", data=AUDIO)
    thinking, said, call, invalid = calls.parts
    assert isinstance(thinking, ReasoningPart)
    assert (thinking.text, thinking.signature) == ("Two lookups needed.", "sig-1")
    assert said == TextPart(text="Looking.")
    assert call == ToolCallPart(tool_call_id="call_a", tool_name="lookup", args={"q": "Eiffel"})
    assert invalid == ToolCallPart(tool_call_id="call_b", tool_name="grep", args="{bad")
    [lookup] = result.parts
    assert isinstance(lookup, ToolResultPart)
    assert (lookup.tool_call_id, lookup.tool_name, lookup.is_error) == ("call_a", "lookup", False)
    [error] = failed.parts
    assert isinstance(error, ToolResultPart)
    assert (error.tool_name, error.is_error, error.content) == ("grep", True, "bad arguments")
    assert answer.parts == (TextPart(text="It is Paris."),)
    assert all(METADATA_KEY in m.metadata for m in converted)


@pytest.mark.parametrize(
    "message",
    [
        HumanMessage("plain"),
        HumanMessage(""),
        HumanMessage([]),
        HumanMessage(["a string block", {"type": "text", "text": "and a dict"}]),
        HumanMessage([{"type": "text", "text": "cited", "annotations": [{"url": "u"}]}]),
        HumanMessage([{"type": "image_url", "image_url": "data:image/png;base64,@@"}]),
        HumanMessage([{"type": "file", "base64": "JVBERi0=", "mime_type": "application/pdf"}]),
        SystemMessage([{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}]),
        AIMessage(""),
        AIMessage([{"type": "reasoning", "reasoning": "hm", "id": "rs_1"}]),
        AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": None, "type": "tool_call"}]),
        AIMessage([{"type": "tool_use", "id": "tu", "name": "f", "input": {}}]),
        ToolMessage({"k": [1, 2]}, tool_call_id="c"),  # type: ignore[arg-type]
        ToolMessage("", tool_call_id="c", status="error"),
    ],
)
def test_single_messages_round_trip_exactly(message: BaseMessage) -> None:
    assert_round_trip([message])


def test_blocks_made_here_are_restored_without_the_kept_message() -> None:
    """A message whose metadata lost the LangChain message still sends what obsmem has no type
    for, its reasoning and its image details."""
    messages: list[BaseMessage] = [
        HumanMessage(
            [
                {"type": "text", "text": "hear this"},
                AUDIO,
                {"type": "image_url", "image_url": {"url": "https://e.com/a.png", "detail": "low"}},
            ]
        ),
        AIMessage(
            [
                {"type": "thinking", "thinking": "ok", "signature": "s"},
                {"type": "text", "text": "Heard."},
            ]
        ),
    ]
    back = to_langchain(bare(from_langchain(messages)))
    assert [m.content for m in back] == [m.content for m in messages]
    assert [type(m) for m in back] == [HumanMessage, AIMessage]


def test_obsmem_messages_round_trip_through_langchain() -> None:
    messages = [
        Message.system("sys"),
        Message(
            role="user",
            parts=(
                TextPart(text="look"),
                ImagePart(data=PNG, media_type="image/png"),
                ImagePart(url="https://e.com/a.png", detail="low"),
            ),
        ),
        Message(
            role="assistant",
            parts=(
                TextPart(text="calling"),
                ToolCallPart(tool_call_id="c1", tool_name="f", args={"a": [1, 2]}),
            ),
        ),
        Message(
            role="tool", parts=(ToolResultPart(tool_call_id="c1", tool_name="f", content="1"),)
        ),
        Message.assistant("done"),
    ]
    back = from_langchain(to_langchain(messages))
    assert [m.role for m in back] == [m.role for m in messages]
    assert [tuple(_plain(p) for p in m.parts) for m in back] == [m.parts for m in messages]


def _plain(part: Any) -> Any:
    """The part without the block it kept (a block this side wrote can be written again)."""
    return replace(part, metadata={})


def test_what_langchain_cannot_hold_is_written_its_way() -> None:
    shot = ImagePart(data=PNG, media_type="image/png")
    messages = [
        Message(role="user", parts=(TextPart(text="a"), DataPart(name="data-om-x", data=1))),
        Message(role="user", parts=(DataPart(name="data-om-only"),)),
        Message(
            role="assistant",
            parts=(
                ReasoningPart(text="another framework's thinking", signature="sig"),
                TextPart(text="calling"),
                ToolCallPart(tool_call_id="c1", tool_name="shoot", args='{"x": 1}'),
                ToolCallPart(tool_call_id="c2", tool_name="say", args="raw"),
            ),
        ),
        Message(
            role="tool",
            parts=(
                ToolResultPart(
                    tool_call_id="c1", tool_name="shoot", content="boom", is_error=True,
                    attachments=(shot,),
                ),
                ToolResultPart(tool_call_id="c2", tool_name="say", content={"ok": True}),
            ),
        ),
        Message(role="user", parts=(FilePart(media_type="text/plain", url="https://e/f.txt"),)),
    ]  # fmt: skip
    sent = to_langchain(messages)
    assert [type(m) for m in sent] == [
        HumanMessage, AIMessage, ToolMessage, ToolMessage, HumanMessage,
    ]  # fmt: skip
    human, ai, shoot, say, file = sent
    assert human.content == "a"
    assert isinstance(ai, AIMessage)
    assert ai.content == "calling", "another framework's reasoning is not sent"
    assert [c["args"] for c in ai.tool_calls] == [{"x": 1}, {"input": "raw"}]
    assert isinstance(shoot, ToolMessage)
    assert shoot.status == "error"
    assert shoot.content == [
        {"type": "text", "text": "boom"},
        {"type": "image_url", "image_url": {"url": PNG_URL}},
    ]
    assert say.content == '{"ok": true}'
    assert file.content == "[file https://e/f.txt (text/plain)]"


def test_a_result_in_a_later_batch_is_named_by_the_names_given() -> None:
    result = ToolMessage("ok", tool_call_id="c9")
    [alone] = from_langchain([result])
    [named] = from_langchain([result], tool_names={"c9": "delete_file"})
    assert isinstance(alone.parts[0], ToolResultPart)
    assert alone.parts[0].tool_name == ""
    assert isinstance(named.parts[0], ToolResultPart)
    assert named.parts[0].tool_name == "delete_file"
    call = AIMessage("", tool_calls=[{"name": "look", "args": {}, "id": "c1", "type": "tool_call"}])
    [_, answer] = from_langchain([call, ToolMessage("seen", tool_call_id="c1")])
    assert isinstance(answer.parts[0], ToolResultPart)
    assert answer.parts[0].tool_name == "look", "a result is named after its call"


def test_ids_are_stable_for_a_thread() -> None:
    messages = [
        HumanMessage("hi", id="m1"),
        AIMessage("", id="m2", tool_calls=[{"name": "f", "args": {}, "id": None}]),
        HumanMessage("no id"),
    ]
    first, second = from_langchain(messages, thread="t"), from_langchain(messages, thread="t")
    assert [m.id for m in first[:2]] == [stored_id("t", "m1"), stored_id("t", "m2")]
    assert [m.id for m in first[:2]] == [m.id for m in second[:2]]
    assert first[2].id != second[2].id, "a message without an id is a new message each time"
    assert from_langchain(messages, thread="u")[0].id != first[0].id
    assert first[1].parts == second[1].parts, "a call without an id gets the same id each time"


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


class Chat(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Chat:  # type: ignore[override]
        return self


def _replies() -> Iterator[AIMessage]:
    yield AIMessage(
        "", tool_calls=[{"name": "weather", "args": {"city": "Lisbon"}, "id": "w1"}], id="r1"
    )
    yield AIMessage("Sunny in Lisbon.", id="r2")
    yield AIMessage("You asked about Lisbon.", id="r3")


def test_a_real_run_round_trips_and_feeds_the_next_run() -> None:
    agent = create_agent(Chat(messages=_replies()), [weather], system_prompt="Be brief.")
    first = agent.invoke({"messages": [HumanMessage("Weather in Lisbon?", id="u1")]})
    history: list[BaseMessage] = first["messages"]
    converted = assert_round_trip(history)
    assert [m.role for m in converted] == ["user", "assistant", "tool", "assistant"]
    result = converted[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert (result.tool_name, result.content) == ("weather", "sunny in Lisbon")
    restored = to_langchain(through_store(converted))
    asked: list[Any] = [*restored, HumanMessage("Which city?")]
    second = agent.invoke({"messages": asked})
    assert second["messages"][-1].text == "You asked about Lisbon."
    assert dicts(second["messages"][: len(history)]) == dicts(history)
