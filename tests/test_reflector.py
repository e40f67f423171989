"""The Reflector's compression ladder, driven by pydantic-ai's FunctionModel."""

from __future__ import annotations

import asyncio

import pytest
from pydantic_ai import messages as pa
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.errors import ConfigError, ModelError, ObserverOutputError
from obsmem.llm import ModelCaller
from obsmem.reflector import COMPRESSION_GUIDANCE, ReflectorInput, reflect, strip_group_tags
from obsmem.tokens import HeuristicEstimator

EST = HeuristicEstimator()
DEGENERATE = "* 🟡 the same thing again and again\n" * 200


def log(lines: int, tag: str = "obs") -> str:
    body = "\n".join(f"* 🟡 (10:{i % 60:02d}) {tag} {i} about the project" for i in range(lines))
    return f"Date: Dec 4, 2025\n{body}"


def answer(lines: int, tag: str = "obs") -> str:
    return f"<observations>\n{log(lines, tag)}\n</observations>\n<current-task>t</current-task>"


SOURCE = log(100, "source")


class Script:
    """A FunctionModel that answers from a list and records each request's text."""

    def __init__(self, *answers: str | BaseException) -> None:
        self.answers = list(answers)
        self.systems: list[str] = []
        self.users: list[str] = []
        self.model = FunctionModel(self._answer, model_name="scripted")

    async def _answer(self, messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        [request] = messages
        assert isinstance(request, pa.ModelRequest)
        system, user = request.parts
        assert isinstance(system, pa.SystemPromptPart)
        assert isinstance(user, pa.UserPromptPart)
        assert isinstance(user.content, str), "text only: one string, as strict servers require"
        text = user.content
        self.systems.append(system.content)
        self.users.append(text)
        reply = self.answers.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return pa.ModelResponse(parts=[pa.TextPart(content=reply)])

    def levels_seen(self) -> list[int]:
        """The compression level of each request, read back from its guidance text."""
        return [
            max(
                (lvl for lvl, text in COMPRESSION_GUIDANCE.items() if text and text in u), default=0
            )
            for u in self.users
        ]


def tokens_of(lines: int) -> int:
    return EST.count_text(log(lines))


async def test_stops_at_the_first_candidate_under_target() -> None:
    script = Script(answer(10), answer(5))
    failed: list[tuple[int, str]] = []
    result = await reflect(
        ReflectorInput(observations=SOURCE, target_tokens=tokens_of(10) + 1, start_level=1),
        caller=ModelCaller(),
        model=script.model,
        estimator=EST,
        on_attempt_failed=lambda level, reason: failed.append((level, reason)),
    )
    assert (result.level, result.attempts, len(result.calls)) == (1, 1, 1)
    assert result.tokens == tokens_of(10)
    assert result.parsed.observations == log(10)
    assert result.parsed.current_task == "t"
    assert failed == []
    assert script.levels_seen() == [1]


async def test_climbs_levels_while_too_big() -> None:
    script = Script(answer(90), answer(60), answer(20), answer(5))
    failed: list[tuple[int, str]] = []
    result = await reflect(
        ReflectorInput(observations=SOURCE, target_tokens=tokens_of(30), start_level=1),
        caller=ModelCaller(),
        model=script.model,
        estimator=EST,
        on_attempt_failed=lambda level, reason: failed.append((level, reason)),
    )
    assert (result.level, result.attempts, len(result.calls)) == (3, 3, 3)
    assert result.parsed.observations == log(20)
    assert script.levels_seen() == [1, 2, 3]
    assert [level for level, _ in failed] == [1, 2]
    assert "not under the target" in failed[0][1]


async def test_keeps_the_smallest_valid_candidate_when_none_reaches_target() -> None:
    script = Script(answer(50), answer(30), answer(40), answer(45))
    failed: list[int] = []
    result = await reflect(
        ReflectorInput(observations=SOURCE, target_tokens=tokens_of(10), start_level=1),
        caller=ModelCaller(),
        model=script.model,
        estimator=EST,
        on_attempt_failed=lambda level, reason: failed.append(level),
    )
    assert result.parsed.observations == log(30)
    assert result.level == 2
    assert result.tokens == tokens_of(30)
    assert result.attempts == 4
    assert len(result.calls) == 4
    assert failed == [1, 2, 3]  # the last level ends the ladder: no failure reported for it


async def test_invalid_answers_are_skipped_and_a_failed_call_ends_the_climb() -> None:
    """Degenerate and empty answers climb to the next level; a failed model call (retried
    already if it was transient) ends the climb: another level would send the same log again."""
    script = Script(DEGENERATE, "", ValueError("provider exploded"), answer(40))
    failed: list[tuple[int, str]] = []
    with pytest.raises(ModelError, match="provider exploded"):
        await reflect(
            ReflectorInput(observations=SOURCE, target_tokens=tokens_of(10), start_level=1),
            caller=ModelCaller(),
            model=script.model,
            estimator=EST,
            on_attempt_failed=lambda level, reason: failed.append((level, reason)),
        )
    assert len(script.users) == 3  # level 4 was never asked
    assert [level for level, _ in failed] == [1, 2, 3]
    assert "degenerate" in failed[0][1]
    assert "empty" in failed[1][1]
    assert "provider exploded" in failed[2][1]


async def test_a_refused_request_is_not_sent_again_at_every_level() -> None:
    """A 400 (context too long) at the first level: one call, not one per level."""
    from pydantic_ai.exceptions import ModelHTTPError

    script = Script(ModelHTTPError(400, "scripted", {"error": "context too long"}), answer(40))
    with pytest.raises(ModelError):
        await reflect(
            ReflectorInput(observations=SOURCE, target_tokens=tokens_of(10), start_level=0),
            caller=ModelCaller(),
            model=script.model,
            estimator=EST,
        )
    assert len(script.users) == 1


async def test_an_answer_longer_than_its_input_is_never_taken() -> None:
    """A Reflector that makes the log longer has not reflected: each such answer is skipped,
    and with no other candidate the reflection fails (the log stays as it was)."""
    longer = answer(140, "longer")
    script = Script(longer, longer, answer(150, "longest"), longer)
    with pytest.raises(ObserverOutputError, match="not shorter than its input"):
        await reflect(
            ReflectorInput(observations=SOURCE, target_tokens=tokens_of(10), start_level=1),
            caller=ModelCaller(),
            model=script.model,
            estimator=EST,
        )
    shorter = Script(longer, answer(60, "shorter"))
    result = await reflect(
        ReflectorInput(observations=SOURCE, target_tokens=tokens_of(10), start_level=3),
        caller=ModelCaller(),
        model=shorter.model,
        estimator=EST,
    )
    assert "shorter" in result.parsed.observations


async def test_an_invalid_candidate_never_wins_even_if_smaller() -> None:
    script = Script(answer(40), "no observations here", answer(60))
    result = await reflect(
        ReflectorInput(observations=SOURCE, target_tokens=1, start_level=2),
        caller=ModelCaller(),
        model=script.model,
        estimator=EST,
    )
    assert result.parsed.observations == log(40)
    assert result.level == 2


async def test_raises_when_every_attempt_fails() -> None:
    script = Script(DEGENERATE, "", DEGENERATE)
    with pytest.raises(ObserverOutputError, match="kept unchanged") as caught:
        await reflect(
            ReflectorInput(observations=SOURCE, target_tokens=10, start_level=2),
            caller=ModelCaller(),
            model=script.model,
            estimator=EST,
        )
    assert "level 2: degenerate" in str(caught.value)
    assert "level 3: empty" in str(caught.value)
    assert "level 4: degenerate" in str(caught.value)
    assert script.answers == []


async def test_cancellation_propagates() -> None:
    script = Script(asyncio.CancelledError(), answer(5))
    with pytest.raises(asyncio.CancelledError):
        await reflect(
            ReflectorInput(observations=SOURCE, target_tokens=10, start_level=0),
            caller=ModelCaller(),
            model=script.model,
            estimator=EST,
        )
    assert len(script.users) == 1


@pytest.mark.parametrize(
    ("start", "max_level", "levels"),
    [
        (0, None, [0, 1, 2, 3]),
        (1, None, [1, 2, 3, 4]),
        (2, None, [2, 3, 4]),
        (4, None, [4]),
        (0, 1, [0, 1]),
        (3, 3, [3]),
        (1, 4, [1, 2, 3, 4]),
    ],
)
async def test_start_and_max_levels(start: int, max_level: int | None, levels: list[int]) -> None:
    script = Script(*[answer(50)] * len(levels))
    result = await reflect(
        ReflectorInput(
            observations=SOURCE, target_tokens=1, start_level=start, max_level=max_level
        ),
        caller=ModelCaller(),
        model=script.model,
        estimator=EST,
    )
    assert script.levels_seen() == levels
    assert result.attempts == len(levels)
    assert result.level == levels[0]  # equal sizes: the first stays the smallest


@pytest.mark.parametrize(("start", "max_level"), [(-1, None), (5, None), (2, 1), (0, 5)])
async def test_invalid_levels_are_config_errors(start: int, max_level: int | None) -> None:
    script = Script()
    with pytest.raises(ConfigError):
        await reflect(
            ReflectorInput(
                observations=SOURCE, target_tokens=1, start_level=start, max_level=max_level
            ),
            caller=ModelCaller(),
            model=script.model,
            estimator=EST,
        )


async def test_prompt_contents() -> None:
    source = (
        '<observation-group id="g1" range="m1:m5">\n'
        "Date: Dec 4, 2025\n* 🟡 (09:00) User is Ana.\n"
        "</observation-group>\n"
        '<observation-group id="g2">* 🟡 (09:30) inline group</observation-group>'
    )
    script = Script(answer(1))
    await reflect(
        ReflectorInput(
            observations=source,
            target_tokens=1_000,
            start_level=0,
            instruction="Never drop pet names.",
            guidance="Focus on the travel plans.",
            continuation_hints=False,
        ),
        caller=ModelCaller(),
        model=script.model,
        estimator=EST,
    )
    [system], [user] = script.systems, script.users
    assert "=== CUSTOM INSTRUCTIONS ===\n\nNever drop pet names." in system
    assert "<observational-memory-instruction>" in system
    assert "<current-task>" not in system
    assert "observation-group" not in user
    assert "Date: Dec 4, 2025\n* 🟡 (09:00) User is Ana.\n* 🟡 (09:30) inline group" in user
    assert "## Specific guidance\n\nFocus on the travel plans." in user
    assert "Output <observations> every time." in user
    assert "ENTIRE" in user
    assert "Never drop pet names." not in user
    assert not any(text and text in user for text in COMPRESSION_GUIDANCE.values())


async def test_continuation_hints_are_requested_by_default() -> None:
    script = Script(answer(1))
    await reflect(
        ReflectorInput(observations=SOURCE, target_tokens=10_000, start_level=0),
        caller=ModelCaller(),
        model=script.model,
        estimator=EST,
    )
    assert "<current-task>" in script.systems[0]
    assert "<current-task>" in script.users[0]
    assert "Output <observations> every time." not in script.users[0]


def test_compression_guidance_covers_every_level() -> None:
    assert set(COMPRESSION_GUIDANCE) == {0, 1, 2, 3, 4}
    assert COMPRESSION_GUIDANCE[0] == ""
    for level, detail in [(1, "8/10"), (2, "6/10"), (3, "4/10"), (4, "2/10")]:
        assert detail in COMPRESSION_GUIDANCE[level]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<observation-group id="a">\n* x\n</observation-group>', "* x\n"),
        ('  <observation-group id="a" kind="reflection">\n* x', "* x"),
        ("* <observation-group>y</observation-group>", "* y"),
        ("* no tags", "* no tags"),
    ],
)
def test_strip_group_tags(text: str, expected: str) -> None:
    assert strip_group_tags(text) == expected


async def test_a_candidate_that_drops_every_critical_line_of_a_date_is_rejected() -> None:
    """Keeping a day but none of the 🔴 lines the user asserted on it is no reflection: the
    candidate is skipped and the next level asked."""
    source = (
        "Date: Dec 1, 2025\n* 🔴 (09:00) User is allergic to peanuts.\n* 🟡 (09:05) Chat.\n"
        "Date: Dec 2, 2025\n* 🟡 (10:00) More chat.\n* 🟡 (10:05) Even more chat."
    )
    careless = "<observations>\nDate: Dec 1, 2025\n* 🟡 (09:05) Chat.\n</observations>"
    careful = (
        "<observations>\nDate: Dec 1, 2025\n* 🔴 (09:00) User is allergic to peanuts.\n"
        "</observations>"
    )
    script = Script(careless, careful)
    failed: list[tuple[int, str]] = []
    result = await reflect(
        ReflectorInput(observations=source, target_tokens=1_000, start_level=0),
        caller=ModelCaller(),
        model=script.model,
        estimator=EST,
        on_attempt_failed=lambda level, reason: failed.append((level, reason)),
    )
    assert failed == [(0, "dropped every 🔴 line of Date: Dec 1, 2025")]
    assert "peanuts" in result.parsed.observations


def test_the_reflector_is_told_to_invent_nothing_and_keep_the_users_red_lines() -> None:
    from obsmem.prompts import CONTROL_LINES, reflector_system_prompt

    prompt = reflector_system_prompt()
    assert "Invent nothing" in prompt
    assert "Keep every 🔴 line the user stated" in prompt
    assert "never drop it" in prompt
    assert "message boundaries, recall ranges" in prompt  # bookkeeping is not copied
    assert CONTROL_LINES not in prompt  # the Observer's explanation, not the Reflector's
