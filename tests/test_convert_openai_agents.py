"""Conversions: OpenAI Agents SDK input items <-> obsmem messages.

"Exact" means dict equality with the items as the SDK hands them over (``to_input_list()``, a
session's ``add_items``), before and after the JSON form the stores persist. Going the other
way, obsmem messages come back with their roles and parts."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseFunctionToolCall

from obsmem.convert import from_agents_items, to_agents_items
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
    message_to_dict,
)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
PDF = b"%PDF-1.7\n" + bytes(range(200, 256)) * 3
PNG_URL = f"data:image/png;base64,{base64.b64encode(PNG).decode('ascii')}"
PDF_URL = f"data:application/pdf;base64,{base64.b64encode(PDF).decode('ascii')}"


def through_store(messages: Sequence[Message]) -> list[Message]:
    """The messages after the JSON form the stores persist."""
    return [message_from_dict(json.loads(json.dumps(message_to_dict(m)))) for m in messages]


def assert_round_trip(items: list[Any]) -> list[Message]:
    snapshot = json.loads(json.dumps(items))
    converted = from_agents_items(items)
    assert to_agents_items(converted) == items
    assert to_agents_items(through_store(converted)) == items
    assert items == snapshot, "the input was not changed"
    return converted


def realistic_items() -> list[Any]:
    """What a session is handed over a turn with an image, a file, reasoning, two tool calls
    (one custom), their outputs, and an answer with annotations, as the SDK writes them."""
    return [
        {"role": "developer", "content": "Answer in English."},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Where is this? And read my booking."},
                {"type": "input_image", "image_url": PNG_URL, "detail": "high"},
                {"type": "input_image", "image_url": "https://example.com/view.jpg"},
                {"type": "input_file", "file_data": PDF_URL, "filename": "booking.pdf"},
                {"type": "input_file", "file_id": "file-abc"},
            ],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Two lookups needed."}],
            "encrypted_content": "gAAAA...",
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_a",
            "name": "lookup",
            "arguments": '{"q":"Eiffel tower"}',
            "status": "completed",
        },
        {
            "type": "custom_tool_call",
            "id": "ct_1",
            "call_id": "call_b",
            "name": "grep",
            "input": "booking 7",
        },
        {"type": "function_call_output", "call_id": "call_a", "output": '{"city": "Paris"}'},
        {"type": "custom_tool_call_output", "call_id": "call_b", "output": "Room 4"},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "It is Paris; room 4.", "annotations": []},
                {"type": "refusal", "refusal": "I cannot book taxis."},
            ],
        },
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"q": "x"}},
    ]


def test_a_realistic_turn_round_trips_exactly() -> None:
    assert_round_trip(realistic_items())


def test_items_map_onto_obsmem_parts() -> None:
    converted = from_agents_items(realistic_items(), thread_id="t", resource_id="r")
    assert [m.role for m in converted] == [
        "system", "user", "assistant", "assistant", "assistant", "tool", "tool", "assistant",
        "assistant",
    ]  # fmt: skip
    assert {(m.thread_id, m.resource_id) for m in converted} == {("t", "r")}
    _, user, reasoning, call_a, call_b, out_a, out_b, answer, search = converted
    text, image, url_image, pdf, uploaded = user.parts
    assert text == TextPart(text="Where is this? And read my booking.")
    assert image == ImagePart(media_type="image/png", data=PNG)
    assert url_image == ImagePart(url="https://example.com/view.jpg")
    assert pdf == FilePart(media_type="application/pdf", data=PDF, filename="booking.pdf")
    assert uploaded == FilePart(media_type="application/octet-stream", url="file-abc")
    assert reasoning.parts == (ReasoningPart(text="Two lookups needed."),)
    assert call_a.parts == (
        ToolCallPart(tool_call_id="call_a", tool_name="lookup", args={"q": "Eiffel tower"}),
    )
    assert call_b.parts == (
        ToolCallPart(tool_call_id="call_b", tool_name="grep", args="booking 7"),
    )
    assert out_a.parts == (
        ToolResultPart(tool_call_id="call_a", tool_name="lookup", content='{"city": "Paris"}'),
    )
    assert out_b.parts == (
        ToolResultPart(tool_call_id="call_b", tool_name="grep", content="Room 4"),
    )
    assert answer.parts == (
        TextPart(text="It is Paris; room 4."),
        TextPart(text="I cannot book taxis."),
    )
    assert search.parts == (DataPart(name="openai-agents:item", data=realistic_items()[-1]),)


@pytest.mark.parametrize(
    "item",
    [
        {"role": "user", "content": ""},
        {"role": "user", "content": []},
        {"role": "system", "content": [{"type": "input_text", "text": "s"}]},
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAA"}}]},
        {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png,@@"}]},
        {"type": "message", "role": "user", "content": "typed"},
        {"role": "assistant", "content": "plain"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{bad"},
        {"type": "function_call_output", "call_id": "u", "output": [{"type": "input_text"}]},
        {"type": "computer_call", "call_id": "cc", "action": {"type": "click", "x": 1, "y": 2}},
        {"type": "reasoning", "id": "rs", "summary": []},
        {"type": "compaction", "id": "cp", "encrypted_content": "..."},
    ],
)  # fmt: skip
def test_single_items_round_trip_exactly(item: dict[str, Any]) -> None:
    assert_round_trip([item])


def test_pydantic_items_come_back_as_their_json_form() -> None:
    call = ResponseFunctionToolCall(
        type="function_call",
        call_id="c1",
        name="f",
        arguments='{"a": 1}',
        id="fc",
        status="completed",
    )
    (message,) = from_agents_items([call])
    assert to_agents_items([message]) == [call.model_dump(exclude_unset=True, mode="json")]
    assert message.parts == (ToolCallPart(tool_call_id="c1", tool_name="f", args={"a": 1}),)


def test_an_item_that_is_not_a_dict_nor_a_model_is_refused() -> None:
    with pytest.raises(TypeError, match="a dict or a pydantic model, not int"):
        from_agents_items([3])


def test_a_result_in_a_later_batch_is_named_by_the_names_given() -> None:
    output = {"type": "function_call_output", "call_id": "c9", "output": "ok"}
    [alone] = from_agents_items([output])
    [named] = from_agents_items([output], tool_names={"c9": "delete_file"})
    assert isinstance(alone.parts[0], ToolResultPart)
    assert alone.parts[0].tool_name == "function_call", "nothing says which tool it was"
    assert isinstance(named.parts[0], ToolResultPart)
    assert named.parts[0].tool_name == "delete_file"


def test_messages_of_other_frameworks_become_items() -> None:
    messages = [
        Message.system("<observations>x</observations>"),
        Message.user("hi"),
        Message(
            role="assistant",
            parts=(ToolCallPart(tool_call_id="c1", tool_name="weather", args={"city": "L"}),),
        ),
        Message(
            role="tool",
            parts=(ToolResultPart(tool_call_id="c1", tool_name="weather", content={"t": 20}),),
        ),
        Message.assistant("Warm."),
    ]
    assert to_agents_items(messages) == [
        {"role": "system", "content": "<observations>x</observations>"},
        {"role": "user", "content": "hi"},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "weather",
            "arguments": '{"city": "L"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": '{"t": 20}'},
        {"role": "assistant", "content": "Warm."},
    ]
    read = from_agents_items(to_agents_items(messages))
    assert [m.role for m in read] == ["system", "user", "assistant", "tool", "assistant"]
    result = read[3].parts[0]
    assert isinstance(result, ToolResultPart)
    assert result.tool_name == "weather", "the result is named after its call"


def test_obsmem_messages_round_trip_through_items() -> None:
    messages = [
        Message.system("sys"),
        Message(
            role="user",
            parts=(
                TextPart(text="look"),
                ImagePart(data=PNG, media_type="image/png"),
                ImagePart(url="https://e.com/a.png"),
                FilePart(media_type="application/pdf", data=PDF, filename="a.pdf"),
            ),
        ),
        Message(
            role="assistant",
            parts=(ToolCallPart(tool_call_id="c1", tool_name="f", args={"a": [1, 2]}),),
        ),
        Message(
            role="assistant", parts=(ToolCallPart(tool_call_id="c2", tool_name="g", args="raw"),)
        ),
        Message(
            role="tool", parts=(ToolResultPart(tool_call_id="c1", tool_name="f", content="1"),)
        ),
        Message(
            role="tool", parts=(ToolResultPart(tool_call_id="c2", tool_name="g", content="2"),)
        ),
        Message.assistant("done"),
    ]
    back = from_agents_items(to_agents_items(messages))
    assert [(m.role, m.parts) for m in back] == [(m.role, m.parts) for m in messages]


def test_what_the_responses_api_cannot_hold_is_written_its_way() -> None:
    shot = ImagePart(data=PNG, media_type="image/png", detail="low")
    messages = [
        Message(role="user", parts=(TextPart(text="a"), DataPart(name="data-om-x", data=1))),
        Message(role="user", parts=(DataPart(name="data-om-only"),)),
        Message(
            role="assistant",
            parts=(
                ReasoningPart(text="another framework's thinking", signature="sig"),
                TextPart(text="calling"),
                ToolCallPart(tool_call_id="c1", tool_name="shoot"),
            ),
        ),
        Message(
            role="tool",
            parts=(
                ToolResultPart(
                    tool_call_id="c1", tool_name="shoot", content="boom", is_error=True,
                    attachments=(shot,),
                ),
            ),
        ),
        Message(role="user", parts=(FilePart(media_type="text/plain", url="https://e/f.txt"),)),
    ]  # fmt: skip
    assert to_agents_items(messages) == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "calling"},
        {"type": "function_call", "call_id": "c1", "name": "shoot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "Error: boom"},
        {
            "role": "user",
            "content": [{"type": "input_image", "image_url": PNG_URL, "detail": "low"}],
        },
        {"role": "user", "content": "[file  at https://e/f.txt]"},
    ]


def test_data_parts_made_here_are_restored_without_the_kept_item() -> None:
    """A message whose metadata lost the item (edited by hand, say) still sends what obsmem
    has no type for."""
    items = [
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AAA"}}]},
        {"type": "compaction", "id": "cp", "encrypted_content": "..."},
    ]
    bare = [Message(role=m.role, parts=m.parts) for m in from_agents_items(items)]
    assert to_agents_items(bare) == items


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def test_a_real_run_round_trips_and_feeds_the_next_run() -> None:
    model = ScriptedModel(
        [
            [function_call("weather", {"city": "Lisbon"}, call_id="w1")],
            [assistant_message("Sunny in Lisbon.", item_id="msg-1")],
            [assistant_message("You asked about Lisbon.", item_id="msg-2")],
        ]
    )
    agent = Agent(name="helper", instructions="Be brief.", model=model, tools=[weather])
    untraced = RunConfig(tracing_disabled=True)
    first = await Runner.run(agent, "Weather in Lisbon?", run_config=untraced)
    history = first.to_input_list()
    converted = assert_round_trip(history)
    assert [m.role for m in converted] == ["user", "assistant", "tool", "assistant"]
    result = converted[2].parts[0]
    assert isinstance(result, ToolResultPart)
    assert (result.tool_name, result.content) == ("weather", "sunny in Lisbon")
    items = to_agents_items(through_store(converted))
    asked: list[Any] = [*items, {"role": "user", "content": "Which city?"}]
    second = await Runner.run(agent, asked, run_config=untraced)
    assert second.final_output == "You asked about Lisbon."
    sent = model.calls[-1].input
    assert isinstance(sent, list)
    assert sent[: len(history)] == history
