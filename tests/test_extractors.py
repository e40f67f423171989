"""Extractors: configuration, the value pipeline, and values flowing through real cycles (the
synchronous path, background buffering and reflection), driven by FunctionModel."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import messages as pa
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem import ConfigError, Extractor, resolve_options
from obsmem.answers import ParsedOutput, parse_output
from obsmem.extractors import (
    DROP,
    Exchange,
    ExtractionContext,
    Slot,
    run_extractors,
    slugify,
    validate_value,
)
from obsmem.llm import ModelCaller
from obsmem.stores import InMemoryStore

from .engine.helpers import Conversation, Recorder, engine

# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------


class Profile(BaseModel):
    preferred_name: str | None = None
    timezone: str | None = None
    tools: list[str] = []


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("User profile", "user-profile"),
        ("  Favourite  Colours!! ", "favourite-colours"),
        ("API_key_hint v2", "api-key-hint-v2"),
        ("Mood", "mood"),
    ],
)
def test_names_become_slugs(name: str, slug: str) -> None:
    assert slugify(name) == slug
    assert Extractor(name, "something").slug == slug


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "Observations", "instructions": "x"}, "'observations' is reserved"),
        ({"name": "Current task", "instructions": "x"}, "'current-task' is reserved"),
        ({"name": "working_memory", "instructions": "x"}, "'working-memory' is reserved"),
        ({"name": "Thread", "instructions": "x"}, "'thread' is reserved"),
        ({"name": "Extracted values", "instructions": "x"}, "reserved"),
        ({"name": "!!!", "instructions": "x"}, "must start with a letter"),
        ({"name": "2fa", "instructions": "x"}, "must start with a letter"),
        ({"name": "Mood", "instructions": "  "}, r"extractor\[mood\]\.instructions"),
        ({"name": "Mood", "instructions": "x", "schema": dict}, "pydantic model class"),
        ({"name": "Mood", "instructions": "x", "schema": "str"}, "JSON-schema dict"),
        ({"name": "Mood", "instructions": "x", "on_extracted": 3}, "callable"),
        ({"name": "Mood", "instructions": "x", "metadata_key_path": "a..b"}, "dotted names"),
        ({"name": "Mood", "instructions": "x", "metadata_key_path": "__proto__"}, "dotted"),
        ({"name": "Mood", "instructions": "x", "metadata_key_path": "om:extracted"}, "obsmem"),
    ],
)
def test_bad_extractors_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Extractor(**kwargs)


def test_extractor_lists_are_checked_in_options() -> None:
    with pytest.raises(ConfigError, match=r"observation\.extract.*distinct name"):
        resolve_options(
            {"observation": {"extract": [Extractor("Mood", "a"), Extractor("mood", "b")]}}
        )
    with pytest.raises(ConfigError, match=r"reflection\.extract.*must be an Extractor"):
        resolve_options({"reflection": {"extract": [object()]}})
    # The same slug may serve both roles.
    mood = Extractor("Mood", "a")
    r = resolve_options({"observation": {"extract": [mood]}, "reflection": {"extract": [mood]}})
    assert r is not None
    assert r.observation.extract == (mood,)


@pytest.mark.parametrize(
    ("schema", "value", "ok"),
    [
        ({"type": "object", "required": ["a"]}, {"a": 1}, True),
        ({"type": "object", "required": ["a"]}, {"b": 1}, False),
        ({"type": "object", "properties": {"a": {"type": "string"}}}, {"a": 1}, False),
        ({"type": "array", "items": {"type": "integer"}}, [1, 2], True),
        ({"type": "array", "items": {"type": "integer"}}, [1, "x"], False),
        ({"type": "integer"}, True, False),
        ({"type": ["string", "null"]}, None, True),
        ({"enum": ["a", "b"]}, "c", False),
        (Profile, {"preferred_name": "Ana"}, True),
        (Profile, {"tools": "vim"}, False),
        (Profile, '{"timezone": "UTC"}', True),
        (None, {"any": ["json"]}, True),
        (None, {1, 2}, False),
    ],
)
def test_values_are_validated_against_the_schema(schema: Any, value: Any, ok: bool) -> None:
    if ok:
        validate_value(schema, value)
    else:
        with pytest.raises(ValueError):  # noqa: PT011 (the message varies by case)
            validate_value(schema, value)


def test_inline_sections_never_reach_the_log() -> None:
    text = (
        "<observations>\n* 🔴 (10:00) User likes tea.\n<mood>calm</mood>\n</observations>\n"
        "<topic>drinks</topic>\n<other>kept as text? no: outside the log</other>"
    )
    parsed = parse_output(text, extra_slugs=["mood", "topic"])
    assert parsed.observations == "* 🔴 (10:00) User likes tea."
    assert parsed.sections["mood"] == "calm"
    assert parsed.sections["topic"] == "drinks"
    # Without the slug being asked for, a tag inside the log stays as text (old behaviour).
    assert "<mood>calm</mood>" in parse_output(text).observations


# ---------------------------------------------------------------------------------------------
# the pipeline on its own
# ---------------------------------------------------------------------------------------------


def _answers(*texts: str) -> tuple[FunctionModel, list[tuple[str, str]]]:
    """A model answering ``texts`` in turn; records (system, user) of each call."""
    seen: list[tuple[str, str]] = []

    def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        system, user = _split(messages)
        seen.append((system, user))
        return pa.ModelResponse(parts=[pa.TextPart(content=texts[min(len(seen), len(texts)) - 1])])

    return FunctionModel(answer), seen


def _split(messages: list[pa.ModelMessage]) -> tuple[str, str]:
    system: list[str] = []
    user: list[str] = []
    for m in messages:
        if isinstance(m, pa.ModelRequest):
            for p in m.parts:
                if isinstance(p, pa.SystemPromptPart):
                    system.append(p.content)
                elif isinstance(p, pa.UserPromptPart):
                    content = p.content
                    user.extend(
                        [content]
                        if isinstance(content, str)
                        else [c for c in content if isinstance(c, str)]
                    )
    return "\n".join(system), "\n".join(user)


async def _run(
    slots: list[Slot],
    model: FunctionModel,
    *,
    parsed: ParsedOutput | None = None,
    previous: dict[str, Any] | None = None,
):  # type: ignore[no-untyped-def]
    return await run_extractors(
        slots,
        caller=ModelCaller(),
        parsed=parsed or ParsedOutput(observations="* x"),
        previous=previous or {},
        exchange=Exchange(
            seen="User: I am Ana", answer="<observations>* x</observations>", model=model
        ),
        thread_id="t1",
        resource_id="u1",
        operation_type="observation",
        cycle_id="obs-1",
    )


async def test_a_bad_structured_answer_is_asked_again_with_the_error() -> None:
    model, seen = _answers(
        "Sure! The profile is lovely.", '```json\n{"preferred_name": "Ana"}\n```'
    )
    result = await _run([Slot.of(Extractor("Profile", "who", schema=Profile))], model)
    assert result.values == {"profile": {"preferred_name": "Ana", "timezone": None, "tools": []}}
    assert result.failures == ()
    assert len(seen) == 2
    assert "could not be used" not in seen[0][0]
    assert "could not be used: the answer is not valid JSON" in seen[1][0]
    assert '"preferred_name"' in seen[0][0]  # the schema is in the instructions
    assert "User: I am Ana" in seen[0][1]
    assert "<observations>* x</observations>" in seen[0][1]


async def test_hooks_replace_validate_drop_and_fail_per_slot() -> None:
    calls: list[ExtractionContext] = []

    async def upper(ctx: ExtractionContext) -> Any:
        calls.append(ctx)
        return ctx.value.upper()

    def bad_replacement(ctx: ExtractionContext) -> Any:
        return {"tools": "not a list"}

    def boom(ctx: ExtractionContext) -> Any:
        raise RuntimeError("front end is down")

    parsed = ParsedOutput(
        observations="* x",
        sections={"mood": "calm", "topic": "tea", "secret": "1234", "broken": "x"},
    )
    model, _ = _answers('{"preferred_name": "Ana"}')
    result = await _run(
        [
            Slot.of(Extractor("Mood", "m", on_extracted=upper)),
            Slot.of(Extractor("Topic", "t", on_extracted=lambda ctx: DROP)),
            Slot.of(Extractor("Broken", "b", on_extracted=boom)),
            Slot.of(Extractor("Profile", "p", schema=Profile, on_extracted=bad_replacement)),
            Slot.of(Extractor("Secret", "s")),
        ],
        model,
        parsed=parsed,
        previous={"mood": "sad"},
    )
    assert result.values == {"mood": "CALM", "secret": "1234"}
    assert [f["slug"] for f in result.failures] == ["broken", "profile"]
    assert "front end is down" in result.failures[0]["error"]
    assert "on_extracted returned" in result.failures[1]["error"]
    [ctx] = calls
    assert (ctx.slug, ctx.value, ctx.previous) == ("mood", "calm", "sad")
    assert (ctx.thread_id, ctx.resource_id, ctx.operation_type) == ("t1", "u1", "observation")


# ---------------------------------------------------------------------------------------------
# through the engine
# ---------------------------------------------------------------------------------------------

_FOLLOW_UP = re.compile(r'extract one value, named "([^"]+)"')


@dataclass
class Script:
    """One FunctionModel for the Observer, the Reflector and the extractors' follow-ups."""

    observer_systems: list[str] = field(default_factory=list[str])
    observer_prompts: list[str] = field(default_factory=list[str])
    reflector_prompts: list[str] = field(default_factory=list[str])
    follow_ups: dict[str, list[str]] = field(default_factory=dict[str, list[str]])

    def model(self) -> FunctionModel:
        return FunctionModel(self.answer)

    def answer(self, messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        system, user = _split(messages)
        if m := _FOLLOW_UP.search(system):
            slug = m.group(1)
            self.follow_ups.setdefault(slug, []).append(user)
            return _text(self.follow_up(slug, user))
        if "## Observations to Reflect On" in user:
            self.reflector_prompts.append(user)
            return _text(
                "<observations>\nDate: Dec 1, 2025\n* 🔴 (09:00) User is Ana.\n</observations>\n"
                "<current-task>Reflected task.</current-task>\n<topic>reflected topic</topic>"
            )
        self.observer_systems.append(system)
        self.observer_prompts.append(user)
        n = len(self.observer_prompts)
        return _text(
            f"<observations>\nDate: Dec 1, 2025\n* 🔴 (09:0{n}) User said thing {n}.\n"
            "</observations>\n"
            f"<current-task>Task {n}.</current-task>\n"
            "<suggested-response>Keep going.</suggested-response>\n"
            f"<topic>topic {n}</topic>\n<mood>mood {n}</mood>\n<secret>pin {n}</secret>"
        )

    def follow_up(self, slug: str, user: str) -> str:
        if slug == "budget":
            return "I cannot tell from this conversation."
        n = len(self.follow_ups[slug])
        if slug == "user-profile":
            # First cycle: a raw timezone; later cycles refine what they are shown.
            if "Previous value of user-profile" not in user:
                return json.dumps({"preferred_name": "Ana", "timezone": "lisbon", "tools": ["vim"]})
            previous = json.loads(
                user.split("Previous value of user-profile\n\n", 1)[1].split("\n\nKeep", 1)[0]
            )
            return json.dumps({**previous, "tools": [*previous["tools"], f"tool-{n}"]})
        if slug == "reading":
            return json.dumps({"book": f"book {n}", "seen_before": "Previous value" in user})
        return "null"


def _text(content: str) -> pa.ModelResponse:
    return pa.ModelResponse(parts=[pa.TextPart(content=content)])


@dataclass
class ProfileHooks:
    seen: list[ExtractionContext] = field(default_factory=list[ExtractionContext])

    def normalise(self, ctx: ExtractionContext) -> Any:
        self.seen.append(ctx)
        if ctx.value.get("timezone") == "lisbon":
            return {**ctx.value, "timezone": "Europe/Lisbon"}
        return None

    async def react(self, ctx: ExtractionContext) -> None:
        self.seen.append(ctx)


class Reading(BaseModel):
    book: str
    seen_before: bool


def _extractors(hooks: ProfileHooks) -> list[Extractor]:
    return [
        Extractor(
            "User profile",
            "The user's preferred name, timezone (IANA) and the tools they use.",
            schema=Profile,
            on_extracted=hooks.normalise,
            metadata_key_path="profile.user",
        ),
        Extractor(
            "Topic", "The topic of the conversation, in two words.", on_extracted=hooks.react
        ),
        Extractor("Mood", "The user's mood.", include_previous_extraction=False),
        Extractor("Secret", "A PIN the user mentions.", on_extracted=lambda ctx: DROP),
        Extractor(
            "Budget", "The user's budget.", schema={"type": "object", "required": ["amount"]}
        ),
        Extractor(
            "Reading",
            "The book the user is reading.",
            schema=Reading,
            include_previous_extraction=False,
        ),
    ]


async def _turn(om: Any, conv: Conversation, tokens: int = 300) -> None:
    await om.prepare("t1", "u1", [conv.user(tokens)])
    await om.record("t1", "u1", [conv.assistant(tokens)])


def _check_cycle_values(values: dict[str, Any], n: int) -> None:
    assert values["topic"] == f"topic {n}"
    assert values["mood"] == f"mood {n}"
    assert values["current-task"] == f"Task {n}."
    assert "secret" not in values  # dropped by its hook
    assert "budget" not in values  # failed
    assert values["reading"] == {"book": f"book {n}", "seen_before": False}


def _check_profile_prompts(script: Script) -> None:
    first, *later = script.follow_ups["user-profile"]
    assert "Previous value" not in first
    for prompt in later:
        assert '"timezone": "Europe/Lisbon"' in prompt  # the normalised value is shown
    assert all("Previous value" not in p for p in script.follow_ups["reading"])


async def test_extractors_on_the_synchronous_path() -> None:
    script, hooks = Script(), ProfileHooks()
    conv = Conversation()
    om = engine(
        InMemoryStore(),
        {
            "observation": {
                "model": script.model(),
                "messageTokens": 30_000,
                "bufferTokens": False,
                "extract": _extractors(hooks),
            },
            "reflection": {"model": script.model()},
        },
        clock=conv.clock,
    )
    events = Recorder()
    om.subscribe(events)
    for _ in range(3):
        await _turn(om, conv)
        assert await om.observe("t1", "u1")

    ends = events.of("data-om-observation-end")
    assert len(ends) == 3
    for n, end in enumerate(ends, start=1):
        _check_cycle_values(dict(end.extracted_values), n)
        assert [f["slug"] for f in end.extraction_failures] == ["budget"]
        assert "no usable value after two requests" in end.extraction_failures[0]["error"]
        assert end.current_task == f"Task {n}."
    # The profile accumulates across cycles, normalised by its hook, previous values shown.
    assert ends[0].extracted_values["user-profile"] == {
        "preferred_name": "Ana",
        "timezone": "Europe/Lisbon",
        "tools": ["vim"],
    }
    assert ends[2].extracted_values["user-profile"]["tools"] == ["vim", "tool-2", "tool-3"]
    _check_profile_prompts(script)
    assert len(script.follow_ups["budget"]) == 6  # asked twice per cycle
    # Inline sections are asked for in the Observer's instructions; previous values shown
    # unless include_previous_extraction=False; never any "secret" (it was always dropped).
    assert "<topic>…</topic>: The topic of the conversation" in script.observer_systems[0]
    assert "<topic>topic 1</topic>" in script.observer_prompts[1]
    assert "<mood>" not in script.observer_prompts[1]
    assert "<secret>" not in script.observer_prompts[2]
    # Inline sections never reach the log.
    log = await om.observations("t1", "u1")
    assert "topic" not in log
    assert "mood" not in log
    assert "pin" not in log

    thread = await om.store.get_thread("t1")
    assert thread is not None
    stored = thread.metadata["om:extracted"]
    assert stored["user-profile"]["tools"] == ["vim", "tool-2", "tool-3"]
    assert thread.metadata["profile"] == {"user": stored["user-profile"]}
    assert stored["topic"] == "topic 3"
    assert stored["mood"] == "mood 3"
    assert "secret" not in stored
    assert "budget" not in stored
    assert thread.metadata["om:current_task"] == "Task 3."
    # The hooks saw each value with its previous one.
    profile_ctx = [c for c in hooks.seen if c.slug == "user-profile"]
    assert profile_ctx[0].previous is None
    assert profile_ctx[1].previous["timezone"] == "Europe/Lisbon"
    assert {c.operation_type for c in hooks.seen} == {"observation"}

    # The actor sees stored values of extractors that share them.
    prepared = await om.prepare("t1", "u1", [conv.user(20)])
    memory = {m.id: m.text for m in prepared.messages if m.role == "system"}
    profile = next(t for t in memory.values() if t.startswith("<user-profile>"))
    assert "Europe/Lisbon" in profile
    assert any(t == "<topic>\ntopic 3\n</topic>" for t in memory.values())
    assert not any(t.startswith(("<mood>", "<reading>")) for t in memory.values())


async def test_extractors_on_the_background_path() -> None:
    script, hooks = Script(), ProfileHooks()
    conv = Conversation()
    om = engine(
        InMemoryStore(),
        {
            "observation": {
                "model": script.model(),
                "messageTokens": 3_000,
                "extract": _extractors(hooks),
            },
            "reflection": {"model": script.model(), "observationTokens": 20_000},
        },
        clock=conv.clock,
    )
    events = Recorder()
    om.subscribe(events)
    for _ in range(4):
        await _turn(om, conv)
        await om.settle()

    ends = events.of("data-om-buffering-end")
    assert len(ends) >= 2
    assert not events.of("data-om-activation")  # nothing activated yet
    for n, end in enumerate(ends, start=1):
        _check_cycle_values(dict(end.extracted_values), n)
        assert [f["slug"] for f in end.extraction_failures] == ["budget"]
    assert ends[-1].extracted_values["user-profile"]["tools"][:2] == ["vim", "tool-2"]
    _check_profile_prompts(script)
    # Chunks keep their values, and the thread has them already (stored at buffering time).
    record = await om.store.get_record("thread:t1")
    assert record is not None
    assert [dict(c.extracted_values) for c in record.chunks] == [
        dict(e.extracted_values) for e in ends
    ]
    assert record.chunks[0].extraction_failures[0]["slug"] == "budget"
    thread = await om.store.get_thread("t1")
    assert thread is not None
    assert thread.metadata["om:extracted"]["topic"] == f"topic {len(ends)}"
    assert thread.metadata["profile"]["user"]["timezone"] == "Europe/Lisbon"
    # Continuation hints wait for activation, as before.
    assert "om:current_task" not in thread.metadata


async def test_reflection_extractors_and_merged_values() -> None:
    script = Script()
    conv = Conversation()
    topic = Extractor("Topic", "The topic of the conversation.")
    reading = Extractor("Reading", "The book the user is reading.", schema=Reading)
    om = engine(
        InMemoryStore(),
        {
            "observation": {
                "model": script.model(),
                "messageTokens": 30_000,
                "bufferTokens": False,
                "extract": [topic],
            },
            "reflection": {"model": script.model(), "extract": [topic, reading]},
        },
        clock=conv.clock,
    )
    events = Recorder()
    om.subscribe(events)
    await _turn(om, conv)
    await om.observe("t1", "u1")
    await om.store.update_thread("t1", metadata={"om:extracted": {"topic": "topic 1", "kept": 1}})
    assert await om.reflect("t1", "u1") is not None
    [end] = [e for e in events.of("data-om-observation-end") if e.operation_type == "reflection"]
    assert end.extracted_values["topic"] == "reflected topic"
    assert end.extracted_values["reading"] == {"book": "book 1", "seen_before": False}
    assert end.extraction_failures == ()
    assert "<topic>topic 1</topic>" in script.reflector_prompts[0]  # previous value shown
    thread = await om.store.get_thread("t1")
    assert thread is not None
    assert thread.metadata["om:extracted"] == {
        "topic": "reflected topic",
        "kept": 1,  # merged, not replaced
        "reading": {"book": "book 1", "seen_before": False},
    }
    assert thread.metadata["om:current_task"] == "Reflected task."
    assert "reflected topic" not in await om.observations("t1", "u1")


async def test_missing_values_never_blank_stored_ones() -> None:
    script = Script()
    conv = Conversation()
    om = engine(
        InMemoryStore(),
        {
            "observation": {
                "model": script.model(),
                "messageTokens": 30_000,
                "bufferTokens": False,
                "extract": [Extractor("Weather", "The weather the user mentions.")],
            },
            "reflection": {"model": script.model()},
        },
        clock=conv.clock,
    )
    await om.store.create_thread("t1", "u1")
    await om.store.update_thread("t1", metadata={"om:extracted": {"weather": "sunny"}})
    await _turn(om, conv)
    await om.observe("t1", "u1")
    thread = await om.store.get_thread("t1")
    assert thread is not None
    assert thread.metadata["om:extracted"] == {"weather": "sunny"}
    assert "<weather>sunny</weather>" in script.observer_prompts[0]
