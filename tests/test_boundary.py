"""Bad input is refused at the public entry points, before anything is written, with a
ConfigError that names the field and the fix; recall answers any argument a model sends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from obsmem import Memory, Message, ObservationalMemory
from obsmem.errors import ConfigError
from obsmem.memory import ThreadRef
from obsmem.messages import TextPart, ToolCallPart, ToolResultPart
from obsmem.stores import InMemoryStore, SQLiteStore
from obsmem.stores.rows import MESSAGES
from obsmem.testing import scripted_observer, scripted_reflector


def _engine(store: InMemoryStore, **options: Any) -> ObservationalMemory:
    return ObservationalMemory(
        store,
        {
            "observation": {"model": scripted_observer()},
            "reflection": {"model": scripted_reflector()},
            **options,
        },
    )


@pytest.mark.parametrize("role", ["developer", "function", "", "USER"])
def test_a_message_with_an_unknown_role_is_refused(role: str) -> None:
    with pytest.raises(ConfigError, match=r"Message\.role") as refused:
        Message(role=role, parts=(TextPart(text="x"),))  # type: ignore[arg-type]
    assert "'system'" in str(refused.value)


def test_a_message_with_a_part_that_is_not_a_part_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"Message.parts.*Message.user\(text\)"):
        Message(role="user", parts=("just text",))  # type: ignore[arg-type]


def test_a_developer_message_stored_by_an_older_version_reads_as_system() -> None:
    row = (
        "m1",
        "t",
        "r",
        1,
        "developer",
        '[{"kind":"text","text":"hi"}]',
        "{}",
        "2026-01-01T00:00:00.000000+00:00",
    )
    assert MESSAGES.parse(row).role == "system"


@pytest.mark.parametrize(
    ("thread", "fix"),
    [
        (5, r"str\(5\)"),
        ("", "non-empty"),
        ("   ", "non-empty"),
        ("a\x00b", "NUL"),
        ("x" * 600, "at most 512"),
    ],
)
async def test_a_bad_thread_id_is_refused_before_anything_is_written(thread: Any, fix: str) -> None:
    store = InMemoryStore()
    om = _engine(store)
    with pytest.raises(ConfigError, match=fix):
        await om.prepare(thread, "r", [Message.user("hi")])
    with pytest.raises(ConfigError, match=fix):
        await om.record(thread, "r", [Message.assistant("hi")])
    assert await store.list_threads("r") == []
    await om.aclose()


async def test_resource_scope_needs_the_resource_id() -> None:
    """The thread id is never taken as the resource id in resource scope: it could be another
    user's resource id."""
    store = InMemoryStore()
    om = _engine(store, scope="resource")
    with pytest.raises(ConfigError, match=r"resource_id=None.*resource scope"):
        await om.prepare("other-user", None, [Message.user("hi")])
    assert await store.list_threads("other-user") == []
    await om.aclose()


def test_store_arguments_that_are_not_stores_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"SQLiteStore.path=None"):
        SQLiteStore(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Memory\(SQLiteStore\('x.db'\)\)"):
        Memory("x.db")  # type: ignore[arg-type]
    assert not Path("None").exists()


@pytest.mark.parametrize(
    ("options", "option"),
    [
        (
            {"observation": {"messageTokens": 100, "message_tokens": 200}},
            "observation.message_tokens",
        ),
        (
            {"reflection": {"observationTokens": 5, "observation_tokens": 6}},
            "reflection.observation_tokens",
        ),
    ],
)
def test_an_option_given_under_both_names_is_refused(options: dict[str, Any], option: str) -> None:
    with pytest.raises(ConfigError, match=rf"{option}=.*given twice.*keep one"):
        Memory(InMemoryStore(), observational_memory=options)


def _recalling_memory() -> Memory:
    return Memory(
        InMemoryStore(),
        observational_memory={
            "observation": {"model": scripted_observer()},
            "reflection": {"model": scripted_reflector()},
            "retrieval": True,
        },
    )


HOSTILE: list[dict[str, Any]] = [
    {"page": 5e17},
    {"page": "x"},
    {"page": float("nan")},
    {"limit": float("inf")},
    {"limit": -3},
    {"part_index": "a"},
    {"part_index": -1},
    {"char_offset": -5},
    {"mode": 3},
    {"cursor": 5},
    {"cursor": ["a"]},
    {"detail": {"x": 1}},
    {"query": "q" * 10_000, "mode": "search"},
    {"thread_id": 7},
    {"before": "x" * 500, "mode": "search", "query": "x"},
]


@pytest.mark.parametrize("arguments", HOSTILE)
async def test_recall_answers_any_argument_a_model_sends(arguments: dict[str, Any]) -> None:
    """Whatever the model passes, recall answers with text (saying what to send instead) and
    never raises into the turn."""
    memory = _recalling_memory()
    ref = ThreadRef(thread="t", resource="r")
    await memory.save(ref, [Message.user("hello")], actor_model=None)
    answer = await memory.recall_function(ref)(**arguments)
    assert answer.startswith("recall was not run:"), answer
    assert "Send a JSON object" in answer
    await memory.aclose()


async def test_recall_takes_null_as_the_default() -> None:
    memory = _recalling_memory()
    ref = ThreadRef(thread="t", resource="r")
    await memory.save(ref, [Message.user("hello there")], actor_model=None)
    answer = await memory.recall_function(ref)(limit=None, mode=None, page=None)  # type: ignore[arg-type]
    assert "hello there" in answer
    await memory.aclose()


def _deep(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(levels):
        node["x"] = {}
        node = node["x"]
    return root


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Message(role="user", parts=(TextPart(text=b"hi"),)), r"parts\[0\]\.text"),  # type: ignore[arg-type]
        (lambda: Message(role="user", parts=(TextPart(text=None),)), r"parts\[0\]\.text"),  # type: ignore[arg-type]
        (
            lambda: Message(
                role="assistant",
                parts=(ToolCallPart(tool_name=3, tool_call_id="c"),),  # type: ignore[arg-type]
            ),
            r"parts\[0\]\.tool_name",
        ),
    ],
)
def test_a_part_field_that_must_be_text_is_checked(make: Any, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        make()


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (
            Message(role="user", parts=(TextPart(text="hi"),), metadata={"s": {1}}),
            "Message.metadata",
        ),
        (
            Message(
                role="assistant",
                parts=(ToolCallPart(tool_name="f", tool_call_id="c", args={"o": object()}),),
            ),
            r"parts\[0\]\.args",
        ),
        (
            Message(
                role="tool",
                parts=(ToolResultPart(tool_name="f", tool_call_id="c", content={1, 2}),),
            ),
            r"parts\[0\]\.content",
        ),
        (Message(role="user", parts=(TextPart(text="hi"),), metadata=_deep(5_000)), "too deeply"),
    ],
)
async def test_what_json_cannot_store_is_refused_before_anything_is_written(
    message: Message, field: str, tmp_path: Path
) -> None:
    """The same on every store: the in-memory store would keep a set, SQLite would fail inside
    its transaction with a TypeError or RecursionError."""
    for store in (InMemoryStore(), SQLiteStore(tmp_path / "x.db")):
        om = ObservationalMemory(
            store,
            {
                "observation": {"model": scripted_observer()},
                "reflection": {"model": scripted_reflector()},
            },
        )
        with pytest.raises(ConfigError, match=field):
            await om.prepare("t", "r", [message])
        assert await store.list_threads("r") == []
        await om.aclose()


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ("hello", r"messages=.*list of Message"),
        (Message.user("hi"), r"messages=.*list of Message"),
        (["hello"], r"messages\[0\]=.*obsmem Message"),
        ([Message.user("hi"), {"role": "user", "content": "x"}], r"messages\[1\]=.*obsmem Message"),
    ],
)
async def test_what_is_not_a_list_of_messages_is_refused_before_anything_is_written(
    messages: Any, field: str
) -> None:
    store = InMemoryStore()
    om = ObservationalMemory(
        store,
        {
            "observation": {"model": scripted_observer()},
            "reflection": {"model": scripted_reflector()},
        },
    )
    with pytest.raises(ConfigError, match=field):
        await om.prepare("t", "r", messages)
    with pytest.raises(ConfigError, match=field):
        await om.record("t", "r", messages)
    assert await store.list_threads("r") == []
    await om.aclose()
