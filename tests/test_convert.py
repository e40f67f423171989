"""Conversions: pydantic-ai message lists and OpenAI chat dicts <-> obsmem messages.

"Exact" for pydantic-ai means: the same ``ModelMessagesTypeAdapter`` JSON form, and dataclass
equality with what pydantic-ai itself loads back from that form (its own persistence standard).
For OpenAI chat it means dict equality.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    BinaryImage,
    CachePoint,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.messages import FilePart as PaFilePart
from pydantic_ai.messages import TextPart as PaTextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from obsmem.convert import from_openai_chat, from_pydantic_ai, to_openai_chat, to_pydantic_ai
from obsmem.messages import (
    DataPart,
    FilePart,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolResultPart,
    message_from_dict,
    message_to_dict,
)
from obsmem.messages import ToolCallPart as OmToolCallPart

T0 = datetime(2025, 3, 14, 9, 26, 53, 589793, tzinfo=UTC)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
PDF = b"%PDF-1.7\n" + bytes(range(200, 256)) * 3
MP3 = b"ID3\x04" + bytes(range(64))


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def dump(messages: Sequence[ModelMessage]) -> list[Any]:
    return ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")


def reload(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """What pydantic-ai itself gets back from its JSON form."""
    return ModelMessagesTypeAdapter.validate_json(
        ModelMessagesTypeAdapter.dump_json(list(messages))
    )


def through_store(messages: Sequence[Message]) -> list[Message]:
    """The messages after the JSON form the stores persist."""
    return [message_from_dict(json.loads(json.dumps(message_to_dict(m)))) for m in messages]


def assert_pydantic_ai_round_trip(original: Sequence[ModelMessage]) -> list[Message]:
    converted = from_pydantic_ai(original)
    for candidate in (converted, through_store(converted)):
        back = to_pydantic_ai(candidate)
        assert dump(back) == dump(original)
        assert back == reload(original)
        assert [type(p) for m in back for p in m.parts] == [
            type(p) for m in reload(original) for p in m.parts
        ]
    return converted


def without_data_parts(messages: Sequence[Message]) -> list[Message]:
    out = [m.with_parts(p for p in m.parts if not isinstance(p, DataPart)) for m in messages]
    return [m for m in out if m.parts]


def realistic_pydantic_ai() -> list[ModelMessage]:
    """system + user with images/files, thinking, tool calls, tool returns (one failed, one with a
    screenshot), retry of a bad call, a model-made image, and a follow-up turn."""
    return [
        ModelRequest(
            parts=[
                SystemPromptPart("You are a careful travel agent.", timestamp=at(0)),
                UserPromptPart(
                    [
                        "Where was this photo taken? Also check my itinerary.",
                        BinaryContent(PNG, media_type="image/png"),
                        ImageUrl(
                            "https://example.com/view.jpg", vendor_metadata={"detail": "high"}
                        ),
                        DocumentUrl("https://example.com/itinerary.pdf"),
                        BinaryContent(PDF, media_type="application/pdf"),
                    ],
                    timestamp=at(1),
                ),
            ],
            timestamp=at(1),
            instructions="Answer in English.",
            run_id="run-1",
            conversation_id="conv-1",
        ),
        ModelResponse(
            parts=[
                ThinkingPart(
                    "The photo shows the Eiffel tower.",
                    signature="sig-abc",
                    provider_name="anthropic",
                ),
                PaTextPart("Let me look that up."),
                ToolCallPart("lookup_landmark", {"name": "Eiffel tower"}, tool_call_id="call_1"),
                ToolCallPart("read_itinerary", '{"day": 2}', tool_call_id="call_2"),
                ToolCallPart("take_screenshot", None, tool_call_id="call_3"),
            ],
            usage=RequestUsage(input_tokens=1200, output_tokens=80),
            model_name="claude-sonnet-4-5",
            timestamp=at(2),
            provider_name="anthropic",
            provider_response_id="resp_01",
            finish_reason="tool_call",
            run_id="run-1",
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    "lookup_landmark",
                    {"city": "Paris", "height_m": 330, "tags": ["tower", None, 1.5]},
                    tool_call_id="call_1",
                    timestamp=at(3),
                ),
                ToolReturnPart(
                    "read_itinerary",
                    "PermissionError: itinerary is private",
                    tool_call_id="call_2",
                    timestamp=at(3),
                    outcome="failed",
                ),
                ToolReturnPart(
                    "take_screenshot",
                    ["captured", BinaryContent(PNG, media_type="image/png")],
                    tool_call_id="call_3",
                    timestamp=at(4),
                ),
            ],
            run_id="run-1",
        ),
        ModelResponse(
            parts=[ToolCallPart("read_itinerary", {"day": "two"}, tool_call_id="call_4")],
            timestamp=at(5),
            model_name="claude-sonnet-4-5",
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    "read_itinerary",
                    [{"type": "int_parsing", "loc": ["day"], "msg": "bad int", "input": "two"}],
                    tool_call_id="call_4",
                    timestamp=at(6),
                    outcome="retried",
                    retry=RetryInfo("validation_error", attempt=1, max_retries=3),
                )
            ]
        ),
        ModelResponse(
            parts=[
                PaTextPart("It is the Eiffel tower in Paris; here is a sketch."),
                PaFilePart(BinaryContent(PNG, media_type="image/png"), provider_name="openai"),
            ],
            timestamp=at(7),
            model_name="claude-sonnet-4-5",
        ),
        ModelRequest(
            parts=[
                UserPromptPart("Thanks! Book it.", timestamp=at(8)),
                RetryFeedbackPart(
                    "Say which day.", retry=RetryInfo("model_retry"), timestamp=at(8)
                ),
            ]
        ),
    ]


# ---------------------------------------------------------------------------------------------
# pydantic-ai: exact round trips of pydantic-ai conversations
# ---------------------------------------------------------------------------------------------


def test_realistic_pydantic_ai_conversation_round_trips_exactly() -> None:
    assert_pydantic_ai_round_trip(realistic_pydantic_ai())


def test_pydantic_ai_request_splits_by_role_and_keeps_every_field() -> None:
    converted = from_pydantic_ai(realistic_pydantic_ai(), thread_id="t-1", resource_id="u-1")
    assert [m.role for m in converted] == [
        "system", "user", "assistant", "tool", "tool", "tool", "assistant", "tool",
        "assistant", "user", "user",
    ]  # fmt: skip
    assert {(m.thread_id, m.resource_id) for m in converted} == {("t-1", "u-1")}
    system, user, assistant, ok, failed, shot, _, retried, final, follow_up, feedback = converted

    assert system.parts == (TextPart(text="You are a careful travel agent."),)
    assert system.created_at == at(0)
    assert user.created_at == at(1)
    text, image, url_image, doc, pdf = user.parts
    assert text == TextPart(text="Where was this photo taken? Also check my itinerary.")
    assert image == ImagePart(media_type="image/png", data=PNG)
    assert url_image == ImagePart(
        media_type="image/jpeg", url="https://example.com/view.jpg", detail="high"
    )
    assert doc == FilePart(media_type="application/pdf", url="https://example.com/itinerary.pdf")
    assert pdf == FilePart(media_type="application/pdf", data=PDF)

    assert assistant.created_at == at(2)
    assert assistant.parts[0] == ReasoningPart(
        text="The photo shows the Eiffel tower.",
        signature="sig-abc",
        metadata={"pydantic_ai": {"provider_name": "anthropic"}},
    )
    calls = [p for p in assistant.parts if isinstance(p, OmToolCallPart)]
    assert [(c.tool_call_id, c.tool_name, c.args) for c in calls] == [
        ("call_1", "lookup_landmark", {"name": "Eiffel tower"}),
        ("call_2", "read_itinerary", '{"day": 2}'),
        ("call_3", "take_screenshot", {}),
    ]
    response_meta = assistant.metadata["pydantic_ai"]["response"]
    assert response_meta["model_name"] == "claude-sonnet-4-5"
    assert response_meta["provider_response_id"] == "resp_01"

    (ok_result,) = ok.parts
    assert isinstance(ok_result, ToolResultPart)
    assert ok_result.content == {"city": "Paris", "height_m": 330, "tags": ["tower", None, 1.5]}
    assert (ok_result.tool_name, ok_result.is_error) == ("lookup_landmark", False)
    (failed_result,) = failed.parts
    assert isinstance(failed_result, ToolResultPart)
    assert failed_result.is_error
    assert failed_result.content == "PermissionError: itinerary is private"
    (shot_result,) = shot.parts
    assert isinstance(shot_result, ToolResultPart)
    assert shot_result.content == "captured"
    assert shot_result.attachments == (ImagePart(media_type="image/png", data=PNG),)
    assert shot.created_at == at(4)
    (retried_result,) = retried.parts
    assert isinstance(retried_result, ToolResultPart)
    assert retried_result.is_error
    assert retried.metadata["pydantic_ai"]["part"]["outcome"] == "retried"

    assert final.parts[1] == ImagePart(
        media_type="image/png", data=PNG, metadata={"pydantic_ai": {"provider_name": "openai"}}
    )
    assert follow_up.parts == (TextPart(text="Thanks! Book it."),)
    assert feedback.parts == (TextPart(text="Say which day."),)
    assert feedback.metadata["pydantic_ai"]["part"]["part_kind"] == "retry-feedback"


def test_defaults_leave_no_metadata_behind() -> None:
    response = ModelResponse(parts=[PaTextPart("hi")], timestamp=at(0))
    request = ModelRequest(parts=[UserPromptPart("hello", timestamp=at(0))])
    user, assistant = assert_pydantic_ai_round_trip([request, response])
    assert user.metadata == {"pydantic_ai": {"request": {}, "part": {}}}
    assert assistant.metadata == {"pydantic_ai": {"response": {}}}
    assert [p.metadata for p in (*user.parts, *assistant.parts)] == [{}, {}]


def test_legacy_retry_prompt_parts_round_trip() -> None:
    legacy = ModelMessagesTypeAdapter.validate_python(
        [
            {
                "kind": "request",
                "parts": [
                    {
                        "part_kind": "retry-prompt",
                        "content": "city must be a string",
                        "tool_name": "weather",
                        "tool_call_id": "call_9",
                        "timestamp": "2025-03-14T09:26:53Z",
                    },
                    {
                        "part_kind": "retry-prompt",
                        "content": [
                            {"type": "missing", "loc": ["a"], "msg": "Field required", "input": {}}
                        ],
                        "timestamp": "2025-03-14T09:26:54Z",
                    },
                ],
            }
        ]
    )
    tool, feedback = assert_pydantic_ai_round_trip(legacy)
    assert tool.role == "tool"
    assert tool.parts == (
        ToolResultPart(
            tool_call_id="call_9",
            tool_name="weather",
            content="city must be a string",
            is_error=True,
        ),
    )
    assert feedback.role == "user"
    assert isinstance(feedback.parts[0], TextPart)
    assert json.loads(feedback.parts[0].text)[0]["msg"] == "Field required"


@pytest.mark.parametrize(
    "content",
    [
        BinaryContent(PNG, media_type="image/png"),
        [BinaryContent(PNG, media_type="image/png")],
        ["before", BinaryContent(PNG, media_type="image/png"), "after"],
        [BinaryContent(PDF, media_type="application/pdf"), {"pages": 3}],
        [None, BinaryContent(PNG, media_type="image/png")],
        [["a", "b"], ImageUrl("https://example.com/a.png")],
        ["x", "y", DocumentUrl("https://example.com/d.pdf"), "z"],
        [1, 2, 3],
        None,
    ],
    ids=[
        "single-file", "list-of-one-file", "file-between-text", "file-first", "none-and-file",
        "nested-list-and-url", "many-data-items", "plain-list", "none",
    ],
)  # fmt: skip
def test_tool_return_content_layouts_round_trip(content: Any) -> None:
    original: list[ModelMessage] = [
        ModelResponse(parts=[ToolCallPart("t", {}, tool_call_id="c")], timestamp=at(0)),
        ModelRequest(parts=[ToolReturnPart("t", content, tool_call_id="c", timestamp=at(1))]),
    ]
    assert_pydantic_ai_round_trip(original)


def test_request_boundaries_and_empty_messages_survive() -> None:
    original: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("one", timestamp=at(0))]),
        ModelRequest(parts=[UserPromptPart(["two"], timestamp=at(1))]),
        ModelRequest(parts=[], state="interrupted"),
        ModelResponse(parts=[], timestamp=at(2), state="incomplete"),
        ModelRequest(
            parts=[
                SystemPromptPart("late system", timestamp=at(3), dynamic_ref="f", scope="request"),
                UserPromptPart("three", timestamp=at(3)),
            ],
            metadata={"source": "app"},
        ),
    ]
    converted = assert_pydantic_ai_round_trip(original)
    assert [m.role for m in converted] == ["user", "user", "user", "assistant", "system", "user"]
    assert converted[2].parts == ()


def test_parts_obsmem_has_no_type_for_travel_in_data_parts() -> None:
    original: list[ModelMessage] = [
        ModelRequest(
            parts=[
                UserPromptPart(
                    ["cached context", CachePoint(ttl="1h"), "question"], timestamp=at(0)
                )
            ]
        ),
        ModelResponse(
            parts=[
                NativeToolCallPart(
                    "web_search", {"query": "paris"}, tool_call_id="ws_1", provider_name="openai"
                ),
                NativeToolReturnPart(
                    "web_search",
                    {"results": ["paris.fr"]},
                    tool_call_id="ws_1",
                    provider_name="openai",
                    timestamp=at(1),
                ),
                PaTextPart("Found it."),
            ],
            timestamp=at(1),
        ),
    ]
    user, assistant = assert_pydantic_ai_round_trip(original)
    assert [type(p) for p in user.parts] == [TextPart, DataPart, TextPart]
    assert isinstance(user.parts[1], DataPart)
    assert user.parts[1].name == "pydantic-ai:cache-point"
    call, result, _ = assistant.parts
    assert isinstance(call, OmToolCallPart)
    assert isinstance(result, ToolResultPart)
    assert (call.tool_name, result.content) == ("web_search", {"results": ["paris.fr"]})


def test_timestamps_keep_their_offsets_and_microseconds() -> None:
    tz = timezone(timedelta(hours=-5, minutes=-30))
    when = datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=tz)
    original: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("leap", timestamp=when)], timestamp=when),
        ModelResponse(parts=[PaTextPart("day")], timestamp=when),
    ]
    user, assistant = assert_pydantic_ai_round_trip(original)
    assert user.created_at == when
    assert user.created_at.utcoffset() == timedelta(hours=-5, minutes=-30)
    assert assistant.created_at == when


async def test_a_real_agent_run_round_trips_and_feeds_the_next_run() -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(
            isinstance(p, ToolReturnPart) for p in last.parts
        ):
            return ModelResponse(parts=[PaTextPart("It is 21C in Paris.")])
        if len(messages) > 3:
            return ModelResponse(parts=[PaTextPart(f"{len(messages)} messages so far")])
        return ModelResponse(
            parts=[
                ThinkingPart("need weather"),
                ToolCallPart("weather", {"city": "Paris"}, tool_call_id="w1"),
            ]
        )

    agent = Agent(FunctionModel(model), instructions="Be brief.")

    @agent.tool_plain
    def weather(city: str) -> dict[str, Any]:  # pyright: ignore[reportUnusedFunction]
        return {"city": city, "celsius": 21}

    first = await agent.run("Weather in Paris?")
    history = first.all_messages()
    converted = assert_pydantic_ai_round_trip(history)
    assert [m.role for m in converted] == ["user", "assistant", "tool", "assistant"]

    second = await agent.run("And now?", message_history=to_pydantic_ai(converted))
    assert second.output == "5 messages so far"
    assert dump(second.all_messages()[:4]) == dump(history)


# ---------------------------------------------------------------------------------------------
# pydantic-ai: obsmem messages -> pydantic-ai -> obsmem
# ---------------------------------------------------------------------------------------------


def obsmem_conversation() -> list[Message]:
    cest = timezone(timedelta(hours=2))
    return [
        Message.system(
            "You remember things.", created_at=at(0).astimezone(cest), thread_id="t", seq=1
        ),
        Message(
            role="user",
            parts=(
                TextPart(text="Here is my cat", metadata={"lang": "en"}),
                ImagePart(
                    data=PNG,
                    width=640,
                    height=480,
                    detail="low",
                    filename="cat.png",
                    token_estimate=85,
                ),
                FilePart(
                    media_type="application/pdf", url="https://e.com/vet.pdf", filename="vet.pdf"
                ),
                FilePart(media_type="audio/mpeg", data=MP3),
                DataPart(name="data-om-activation", data={"cycle": 1}),
            ),
            created_at=at(1),
            thread_id="t",
            resource_id="u",
            metadata={"client": "web"},
            seq=2,
        ),
        Message(
            role="assistant",
            parts=(
                ReasoningPart(text="Look up the vet.", signature="s1"),
                TextPart(text="Checking."),
                OmToolCallPart(tool_call_id="c1", tool_name="vet_lookup", args={"name": "Dr. Who"}),
                OmToolCallPart(tool_call_id="c2", tool_name="calendar", args='{"week": 3}'),
                OmToolCallPart(tool_call_id="s1", tool_name="web_search", args={"q": "vet"}),
                ToolResultPart(tool_call_id="s1", tool_name="web_search", content=["vet.example"]),
            ),
            created_at=at(2),
            metadata={"model": "x"},
        ),
        Message(
            role="tool",
            parts=(
                ToolResultPart(
                    tool_call_id="c1",
                    tool_name="vet_lookup",
                    content={"phone": "123"},
                    attachments=(
                        ImagePart(url="https://e.com/map.png", media_type="image/png", width=10),
                        FilePart(media_type="text/csv", data=b"a,b\n1,2\n", filename="hours.csv"),
                    ),
                ),
                ToolResultPart(
                    tool_call_id="c2",
                    tool_name="calendar",
                    content="calendar offline",
                    is_error=True,
                    metadata={"retries": 2},
                ),
            ),
            created_at=at(3),
        ),
        Message(role="user", parts=(DataPart(name="data-om-marker"),), created_at=at(4)),
        Message.user("Thanks", created_at=at(5)),
        Message(
            role="assistant",
            parts=(TextPart(text="Here is a drawing"), FilePart(media_type="image/png", data=PNG)),
            created_at=at(6),
        ),
    ]


def test_obsmem_messages_round_trip_through_pydantic_ai() -> None:
    messages = obsmem_conversation()
    back = from_pydantic_ai(to_pydantic_ai(messages))
    assert back == without_data_parts(messages)
    assert from_pydantic_ai(to_pydantic_ai(through_store(messages))) == without_data_parts(messages)


def test_to_pydantic_ai_merges_non_assistant_messages_in_order() -> None:
    converted = to_pydantic_ai(obsmem_conversation())
    assert [type(m) for m in converted] == [
        ModelRequest,
        ModelResponse,
        ModelRequest,
        ModelResponse,
    ]
    first, response, second, _ = converted
    assert isinstance(first, ModelRequest)
    assert [type(p) for p in first.parts] == [SystemPromptPart, UserPromptPart]
    user_prompt = first.parts[1]
    assert isinstance(user_prompt, UserPromptPart)
    assert user_prompt.timestamp == at(1)
    assert isinstance(user_prompt.content, list)
    assert [type(c) for c in user_prompt.content] == [str, BinaryImage, DocumentUrl, BinaryContent]
    assert isinstance(response, ModelResponse)
    assert [p.part_kind for p in response.parts] == [
        "thinking", "text", "tool-call", "tool-call", "builtin-tool-call", "builtin-tool-return",
    ]  # fmt: skip
    assert isinstance(second, ModelRequest)
    assert [p.part_kind for p in second.parts] == ["tool-return", "tool-return", "user-prompt"]
    failed = second.parts[1]
    assert isinstance(failed, ToolReturnPart)
    assert failed.outcome == "failed"
    assert "data-om" not in json.dumps(dump(converted))


def test_appending_obsmem_messages_to_a_pydantic_ai_history() -> None:
    history = from_pydantic_ai(realistic_pydantic_ai())
    mixed = [*history, Message.user("One more thing", created_at=at(20))]
    mixed[2:2] = [Message.system("injected", created_at=at(2))]
    once = to_pydantic_ai(mixed)
    twice = to_pydantic_ai(from_pydantic_ai(once))
    assert dump(twice) == dump(once)
    back = from_pydantic_ai(once)
    assert back[-1] == mixed[-1]
    assert back[2] == mixed[2]


@pytest.mark.parametrize(
    ("message", "complaint"),
    [
        (
            Message(role="system", parts=(ImagePart(data=PNG),)),
            "system prompt holds text only",
        ),
        (
            Message(role="assistant", parts=(ImagePart(url="https://e.com/a.png"),)),
            "only url=",
        ),
        (
            Message(role="user", parts=(ReasoningPart(text="hmm"),)),
            "cannot go in a pydantic-ai user prompt",
        ),
    ],
)
def test_to_pydantic_ai_refuses_what_pydantic_ai_cannot_hold(
    message: Message, complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        to_pydantic_ai([message])


# ---------------------------------------------------------------------------------------------
# OpenAI chat completions
# ---------------------------------------------------------------------------------------------

PNG_B64 = base64.b64encode(PNG).decode()
PDF_B64 = base64.b64encode(PDF).decode()
MP3_B64 = base64.b64encode(MP3).decode()


def realistic_openai() -> list[dict[str, Any]]:
    return [
        {"role": "developer", "content": "You are a travel agent."},
        {"role": "system", "content": "Today is Friday."},
        {
            "role": "user",
            "name": "alice",
            "content": [
                {"type": "text", "text": "Where is this? And read my booking."},
                {
                    "type": "image_url",
                    "image_url": {"url": f"data:image/png;base64,{PNG_B64}", "detail": "high"},
                },
                {"type": "image_url", "image_url": {"url": "https://example.com/view.jpg"}},
                {
                    "type": "file",
                    "file": {
                        "file_data": f"data:application/pdf;base64,{PDF_B64}",
                        "filename": "booking.pdf",
                    },
                },
                {"type": "input_audio", "input_audio": {"data": MP3_B64, "format": "mp3"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Two lookups needed.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q":"Eiffel tower"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "booking", "arguments": '{ "id": 7 }'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": '{"city": "Paris"}'},
        {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "Room 4"}]},
        {
            "role": "assistant",
            "content": "It is Paris; you are in room 4.",
            "refusal": None,
            "annotations": [],
        },
        {"role": "user", "content": [{"type": "text", "text": "Book a taxi"}]},
        {"role": "assistant", "content": None, "refusal": "I cannot book taxis."},
    ]


def test_realistic_openai_conversation_round_trips_exactly() -> None:
    original = realistic_openai()
    snapshot = json.loads(json.dumps(original))
    converted = from_openai_chat(original)
    assert to_openai_chat(converted) == original
    assert to_openai_chat(through_store(converted)) == original
    assert original == snapshot  # the input was not changed


def test_openai_messages_map_onto_obsmem_parts() -> None:
    when = at(0)
    converted = from_openai_chat(realistic_openai(), thread_id="t", created_at=when)
    assert [m.role for m in converted] == [
        "system", "system", "user", "assistant", "tool", "tool", "assistant", "user", "assistant",
    ]  # fmt: skip
    assert {m.created_at for m in converted} == {when}
    assert {m.thread_id for m in converted} == {"t"}
    developer, _, user, calls, tool_a, tool_b, answer, _, refusal = converted
    assert developer.metadata == {"openai_chat": {"role": "developer"}}
    assert user.metadata == {"openai_chat": {"name": "alice"}}
    text, image, url_image, pdf, audio = user.parts
    assert text == TextPart(text="Where is this? And read my booking.")
    assert image == ImagePart(media_type="image/png", data=PNG, detail="high")
    assert url_image == ImagePart(media_type="image/jpeg", url="https://example.com/view.jpg")
    assert pdf == FilePart(media_type="application/pdf", data=PDF, filename="booking.pdf")
    assert audio == FilePart(media_type="audio/mpeg", data=MP3)
    reasoning, call_a, call_b = calls.parts
    assert reasoning == ReasoningPart(text="Two lookups needed.")
    assert call_a == OmToolCallPart(
        tool_call_id="call_a", tool_name="lookup", args={"q": "Eiffel tower"}
    )
    assert isinstance(call_b, OmToolCallPart)
    assert call_b.args == {"id": 7}
    assert call_b.metadata == {"openai_chat": {"diff": {"function": {"arguments": '{ "id": 7 }'}}}}
    assert tool_a.parts == (
        ToolResultPart(tool_call_id="call_a", tool_name="lookup", content='{"city": "Paris"}'),
    )
    assert tool_b.parts == (
        ToolResultPart(
            tool_call_id="call_b", tool_name="booking", content=[{"type": "text", "text": "Room 4"}]
        ),
    )
    assert answer.parts == (TextPart(text="It is Paris; you are in room 4."),)
    assert refusal.parts == (
        TextPart(text="I cannot book taxis.", metadata={"openai_chat": {"as": "refusal"}}),
    )


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": ""},
        {"role": "user", "content": []},
        {"role": "user", "content": None},
        {"role": "user"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "cached", "cache_control": {"t": 1}}],
        },
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://e/x"}}]},
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://e/x", "detail": "xl"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}\n"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;a=b;base64,{PNG_B64}"}}
            ],
        },
        {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-abc"}}]},
        {"role": "user", "content": [{"type": "file", "file": {"file_data": PDF_B64}}]},
        {
            "role": "user",
            "content": [
                {"type": "file", "file": {"file_data": f"data:audio/wav;base64,{MP3_B64}"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": {"data": MP3_B64, "format": "flac"}}
            ],
        },
        {"role": "user", "content": [{"type": "video", "video": {"id": 1}}, "bare string"]},
        {"role": "system", "content": [{"type": "text", "text": "s"}], "name": "ops"},
        {"role": "assistant", "content": "hi", "tool_calls": []},
        {
            "role": "assistant",
            "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": "{}"}}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}},
                {"id": "d", "type": "custom", "custom": {"name": "g", "input": "raw"}},
                {"id": "e", "type": "function", "function": {"name": "h", "arguments": "{bad"}},
            ],
        },
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
        {
            "role": "assistant",
            "content": "a",
            "refusal": "b",
            "reasoning_content": "c",
            "audio": {"id": "au"},
        },
        {"role": "tool", "tool_call_id": "unknown", "content": None},
        {"role": "tool", "tool_call_id": "unknown"},
        {"role": "tool", "tool_call_id": "unknown", "content": "x", "name": "legacy"},
    ],
)
def test_single_openai_messages_round_trip_exactly(message: dict[str, Any]) -> None:
    assert to_openai_chat(from_openai_chat([message])) == [message]


def test_data_urls_decode_to_bytes_and_encode_back_identically() -> None:
    url = f"data:image/webp;base64,{PNG_B64}"
    (message,) = from_openai_chat(
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
    )
    assert message.parts == (ImagePart(media_type="image/webp", data=PNG),)
    assert to_openai_chat([message])[0]["content"][0]["image_url"]["url"] == url


def test_obsmem_messages_to_openai_chat() -> None:
    messages = [
        Message.system("sys", created_at=at(0)),
        Message(
            role="user",
            parts=(
                TextPart(text="look"),
                ImagePart(data=PNG, detail="low"),
                ImagePart(url="https://e.com/a.png"),
                FilePart(media_type="application/pdf", data=PDF, filename="a.pdf"),
                FilePart(media_type="audio/mpeg", data=MP3),
                DataPart(name="data-om-x", data=1),
            ),
        ),
        Message(
            role="assistant",
            parts=(
                ReasoningPart(text="r", signature="sig"),
                TextPart(text="calling"),
                OmToolCallPart(tool_call_id="c1", tool_name="f", args={"a": "é"}),
                OmToolCallPart(tool_call_id="c2", tool_name="g", args='{"b":1}'),
                OmToolCallPart(tool_call_id="s", tool_name="web_search", args={}),
                ToolResultPart(tool_call_id="s", tool_name="web_search", content="done"),
            ),
        ),
        Message(
            role="tool",
            parts=(
                ToolResultPart(
                    tool_call_id="c1",
                    tool_name="f",
                    content={"ok": True},
                    attachments=(ImagePart(data=PNG),),
                ),
                ToolResultPart(tool_call_id="c2", tool_name="g", content="boom", is_error=True),
            ),
        ),
        Message(role="user", parts=(DataPart(name="data-om-only"),)),
        Message.user("next"),
    ]
    assert to_openai_chat(messages) == [
        {"role": "system", "content": "sys"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image_url",
                    "image_url": {"url": f"data:image/png;base64,{PNG_B64}", "detail": "low"},
                },
                {"type": "image_url", "image_url": {"url": "https://e.com/a.png"}},
                {
                    "type": "file",
                    "file": {
                        "file_data": f"data:application/pdf;base64,{PDF_B64}",
                        "filename": "a.pdf",
                    },
                },
                {"type": "input_audio", "input_audio": {"data": MP3_B64, "format": "mp3"}},
            ],
        },
        {
            "role": "assistant",
            "content": "calling",
            "reasoning_content": "r",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"a":"é"}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": '{"b":1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: boom"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}}
            ],
        },
        {"role": "user", "content": "next"},
    ]
    without_reasoning = to_openai_chat(messages, include_reasoning=False)
    assert all("reasoning_content" not in m for m in without_reasoning)


def test_obsmem_messages_round_trip_through_openai_chat() -> None:
    messages = [
        Message.system("sys"),
        Message(
            role="user",
            parts=(
                TextPart(text="look"),
                ImagePart(data=PNG, media_type="image/png", detail="high"),
                ImagePart(url="https://e.com/a.png", media_type="image/png"),
                FilePart(media_type="application/pdf", data=PDF, filename="a.pdf"),
                FilePart(media_type="audio/wav", data=MP3),
            ),
        ),
        Message(
            role="assistant",
            parts=(
                ReasoningPart(text="plan"),
                TextPart(text="calling"),
                OmToolCallPart(tool_call_id="c1", tool_name="f", args={"a": [1, 2]}),
                OmToolCallPart(tool_call_id="c2", tool_name="g", args={}),
            ),
        ),
        Message(
            role="tool", parts=(ToolResultPart(tool_call_id="c1", tool_name="f", content="1"),)
        ),
        Message(
            role="tool", parts=(ToolResultPart(tool_call_id="c2", tool_name="g", content="2"),)
        ),
        Message.assistant("done"),
    ]
    back = from_openai_chat(to_openai_chat(messages))
    assert [(m.role, m.parts) for m in back] == [(m.role, m.parts) for m in messages]


def test_pydantic_ai_history_becomes_valid_openai_chat() -> None:
    chat = to_openai_chat(from_pydantic_ai(realistic_pydantic_ai()))
    roles = [m["role"] for m in chat]
    assert roles[:2] == ["system", "user"]
    calls_at = roles.index("assistant")
    call_ids = [c["id"] for c in chat[calls_at]["tool_calls"]]
    assert call_ids == ["call_1", "call_2", "call_3"]
    answered = chat[calls_at + 1 : calls_at + 4]
    assert [(m["role"], m["tool_call_id"]) for m in answered] == [("tool", i) for i in call_ids]
    assert answered[0]["content"] == (
        '{"city": "Paris", "height_m": 330, "tags": ["tower", null, 1.5]}'
    )
    assert answered[1]["content"] == "Error: PermissionError: itinerary is private"
    screenshot = chat[calls_at + 4]
    assert screenshot["role"] == "user"
    assert screenshot["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")


@pytest.mark.parametrize(
    ("messages", "complaint"),
    [
        ([{"role": "function", "name": "f", "content": "x"}], "has role 'function'"),
        ([{"content": "x"}], "has role None"),
        ([{"role": "tool", "content": "x"}], "without a tool_call_id"),
    ],
)
def test_from_openai_chat_rejects_what_it_cannot_read(
    messages: list[dict[str, Any]], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        from_openai_chat(messages)


def test_to_openai_chat_refuses_tool_calls_outside_assistant_messages() -> None:
    message = Message(role="user", parts=(OmToolCallPart(tool_call_id="c", tool_name="f"),))
    with pytest.raises(ValueError, match="put it in an assistant message"):
        to_openai_chat([message])


async def test_responses_pydantic_ai_merged_come_back_apart() -> None:
    """pydantic-ai joins consecutive responses that no model sent (a thread holding a text
    answer and then a tool call as two assistant messages, as the Agents SDK stores a step)
    into the first, keeping its metadata. Reading the run's messages back gives both messages
    again, each with its own parts, instead of failing on the first one's envelope."""
    from pydantic_ai import messages as pa

    from obsmem.messages import ToolCallPart, ToolResultPart

    call = ToolCallPart(tool_call_id="c1", tool_name="lookup", args={"q": "x"})
    thread = [
        Message.user("Look it up."),
        Message.assistant("Let me check."),
        Message(role="assistant", parts=(call,)),
        Message(
            role="tool",
            parts=(ToolResultPart(tool_call_id="c1", tool_name="lookup", content="found"),),
        ),
        Message.assistant("It is found."),
    ]

    def model(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        return pa.ModelResponse(parts=[pa.TextPart(content="ok")])

    history = to_pydantic_ai(thread)
    run = await Agent(FunctionModel(model)).run("And now?", message_history=history)
    back = from_pydantic_ai(run.all_messages())
    texts = [
        (m.role, [getattr(p, "text", None) or getattr(p, "tool_name", None) for p in m.parts])
        for m in back[: len(thread)]
    ]
    assert texts[1:3] == [("assistant", ["Let me check."]), ("assistant", ["lookup"])]
    assert back[1].id == thread[1].id
