"""Transcript rendering and the Observer call, driven by pydantic-ai's FunctionModel."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic_ai import messages as pa
from pydantic_ai.models.function import AgentInfo, FunctionModel

from obsmem.errors import ModelError, ObserverOutputError
from obsmem.llm import ModelCaller
from obsmem.messages import (
    DataPart,
    FilePart,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    Role,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from obsmem.observer import (
    ObserverInput,
    observe,
    observer_user_message,
    render_multi_thread_transcript,
    render_transcript,
)
from obsmem.tokens import HeuristicEstimator

EST = HeuristicEstimator()
PNG = b"\x89PNG\r\n\x1a\nfake"


def at(day: int, hour: int, minute: int) -> datetime:
    return datetime(2025, 12, day, hour, minute, tzinfo=UTC)


def msg(role: Role, when: datetime, *parts: Part | str, **kwargs: Any) -> Message:
    built = tuple(TextPart(text=p) if isinstance(p, str) else p for p in parts)
    return Message(role=role, parts=built, created_at=when, **kwargs)


class WordEstimator:
    """Counts words, so capped tool results are easy to predict."""

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_message(self, message: Message) -> int:
        return self.count_text(message.text)

    def count_messages(self, messages: Sequence[Message]) -> int:
        return sum(self.count_message(m) for m in messages)


def render(messages: Sequence[Message]) -> str:
    text, _ = render_transcript(messages, tz=UTC, estimator=EST)
    return text


# ---------------------------------------------------------------------------------------------
# render_transcript
# ---------------------------------------------------------------------------------------------


def test_dates_across_midnight_and_time_only_when_it_changes() -> None:
    messages = [
        msg("user", at(4, 23, 58), "hi"),
        msg("assistant", at(4, 23, 58), "hello"),
        msg("user", at(5, 0, 1), "still there?"),
        msg("assistant", at(5, 0, 1), "yes", "two parts"),
        msg("user", at(5, 12, 0), "noon"),
        msg("assistant", at(5, 13, 5), "multi\nline"),
    ]
    assert render(messages) == (
        "Dec 4 2025:\n"
        "User (11:58 PM): hi\n"
        "Assistant: hello\n"
        "\n"
        "Dec 5 2025:\n"
        "User (12:01 AM): still there?\n"
        "Assistant: yes\n"
        "> two parts\n"
        "User (12:00 PM): noon\n"
        "Assistant (1:05 PM): multi\n"
        "> line"
    )


def test_same_minute_on_another_day_shows_the_time() -> None:
    messages = [msg("user", at(4, 9, 0), "a"), msg("user", at(6, 9, 0), "b")]
    assert render(messages) == "Dec 4 2025:\nUser (9:00 AM): a\n\nDec 6 2025:\nUser (9:00 AM): b"


def test_times_and_dates_are_in_the_given_timezone() -> None:
    messages = [msg("user", at(5, 3, 30), "late night")]
    new_york = timezone(timedelta(hours=-5))
    text, _ = render_transcript(messages, tz=new_york, estimator=EST)
    assert text == "Dec 4 2025:\nUser (10:30 PM): late night"


def test_tool_calls_and_results() -> None:
    call = ToolCallPart(tool_call_id="c1", tool_name="get_weather", args={"city": "Paris"})
    messages = [
        msg("user", at(4, 14, 30), "Weather in Paris?"),
        msg("assistant", at(4, 14, 31), "Let me check.", call),
        msg(
            "tool",
            at(4, 14, 31),
            ToolResultPart(
                tool_call_id="c1", tool_name="get_weather", content={"temp": 12, "sky": "clear"}
            ),
        ),
        msg(
            "assistant",
            at(4, 14, 31),
            call,
            "Trying again.",
            ToolCallPart(tool_call_id="c2", tool_name="search", args='{"q": "raw json"}'),
        ),
        msg(
            "tool",
            at(4, 14, 32),
            ToolResultPart(tool_call_id="c2", tool_name="search", content="plain text"),
        ),
        msg(
            "tool",
            at(4, 14, 32),
            ToolResultPart(
                tool_call_id="c3", tool_name="deploy", content="permission denied", is_error=True
            ),
        ),
        msg("assistant", at(4, 14, 33), "It is 12°C."),
    ]
    assert render(messages) == (
        "Dec 4 2025:\n"
        "User (2:30 PM): Weather in Paris?\n"
        "Assistant (2:31 PM): Let me check.\n"
        'Tool Call get_weather (2:31 PM): {"city":"Paris"}\n'
        'Tool Result get_weather: {"temp":12,"sky":"clear"}\n'
        "Assistant: Trying again.\n"
        'Tool Call search (2:31 PM): {"q": "raw json"}\n'
        "Tool Result search: plain text\n"
        "Tool Error deploy: permission denied\n"
        "Assistant (2:33 PM): It is 12°C."
    )


def test_a_call_observed_without_its_result_is_marked_interrupted() -> None:
    messages = [
        msg("assistant", at(4, 14, 30), ToolCallPart(tool_call_id="c1", tool_name="browse")),
        msg("user", at(4, 14, 35), "Forget the page, what about dinner?"),
    ]
    assert render(messages) == (
        "Dec 4 2025:\n"
        "Tool Call browse (2:30 PM): {}\n"
        "Tool Result browse: [interrupted: no result was recorded]\n"
        "User (2:35 PM): Forget the page, what about dinner?"
    )


def _marker(message: Message, index: int, left_out: int, offset: int) -> str:
    return (
        f'… [{left_out:,} characters left out here: recall cursor="{message.id}" '
        f'part_index={index} char_offset={offset} detail="high" reads them] …'
    )


@pytest.mark.parametrize(
    ("content", "cap", "head", "tail", "left_out", "offset"),
    [
        # 23 characters, 5 words: a cap of 3 keeps 13 characters, 8 from the start, 5 from the end.
        ("one two three four five", 3, "one two", "five", 10, 8),
        # As JSON: 15 characters, 4 words; a cap of 2 keeps 7, 4 from the start, 3 from the end.
        ({"a": "b c d e"}, 2, '{"a"', 'e"}', 8, 4),
        ("one two three four", 0, "", "", 18, 0),
    ],
)
def test_long_tool_results_show_head_tail_and_where_to_read_the_rest(
    content: object, cap: int, head: str, tail: str, left_out: int, offset: int
) -> None:
    result = ToolResultPart(tool_call_id="c1", tool_name="read", content=content)
    message = msg("tool", at(4, 9, 0), result)
    text, _ = render_transcript([message], tz=UTC, estimator=WordEstimator(), part_cap=cap)
    shown = " ".join(x for x in (head, _marker(message, 0, left_out, offset), tail) if x)
    assert text == f"Dec 4 2025:\nTool Result read: {shown}"


def test_parts_within_the_cap_are_shown_whole() -> None:
    result = ToolResultPart(tool_call_id="c1", tool_name="read", content="one two three")
    text, _ = render_transcript(
        [msg("tool", at(4, 9, 0), result)], tz=UTC, estimator=WordEstimator(), part_cap=3
    )
    assert text == "Dec 4 2025:\nTool Result read: one two three"


def test_every_kind_of_part_is_capped_at_5000_tokens_by_default() -> None:
    long = " ".join(f"w{i}" for i in range(6000))
    message = msg(
        "assistant",
        at(4, 9, 0),
        long,
        ReasoningPart(text=long),
        ToolCallPart(tool_call_id="c1", tool_name="write", args=long),
        ToolResultPart(tool_call_id="c1", tool_name="write", content=long),
    )
    text, _ = render_transcript([message], tz=UTC, estimator=WordEstimator())
    lines = text.splitlines()[1:]
    starts = ("Assistant (9:00 AM): w0", "Reasoning: w0", "Tool Call write (9:00 AM): w0")
    assert [ln.startswith(start) for ln, start in zip(lines, starts, strict=False)] == [True] * 3
    assert lines[3].startswith("Tool Result write: w0")
    for index, line in enumerate(lines):
        assert f'recall cursor="{message.id}" part_index={index}' in line
        assert len(line.split()) < 5_100  # ~5,000 words of 6,000 and the marker
        assert line.rstrip().endswith("w5999")  # the tail is kept


def test_images_and_files_get_numbered_placeholders_and_the_filter_picks_attachments() -> None:
    board = ImagePart(data=PNG, filename="board.png")
    report = FilePart(media_type="application/pdf", data=b"%PDF", filename="report.pdf")
    shot = ImagePart(data=PNG, media_type="image/jpeg")
    note = FilePart(media_type="text/plain", url="https://example.com/n.txt")
    messages = [
        msg("user", at(4, 14, 30), "Look at these", board, report),
        msg("user", at(4, 14, 31), board),
        msg("assistant", at(4, 14, 32), ToolCallPart(tool_call_id="s", tool_name="screenshot")),
        msg(
            "tool",
            at(4, 14, 32),
            ToolResultPart(
                tool_call_id="s", tool_name="screenshot", content="ok", attachments=(shot, note)
            ),
        ),
    ]
    text, attachments = render_transcript(
        messages, tz=UTC, estimator=EST, attachment_filter=lambda mime: mime.startswith("image/")
    )
    assert text == (
        "Dec 4 2025:\n"
        "User (2:30 PM): Look at these\n"
        "Image: [Image #1: board.png]\n"
        "File: [File #2: report.pdf]\n"
        "User (2:31 PM): Image: [Image #3: board.png]\n"
        "Tool Call screenshot (2:32 PM): {}\n"
        "Tool Result screenshot: ok\n"
        "Image: [Image #4: image]\n"
        "File: [File #5: file]"
    )
    assert attachments == [board, board, shot]
    _, everything = render_transcript(messages, tz=UTC, estimator=EST)
    assert everything == [board, report, board, shot, note]


def test_reasoning_gap_lines_data_and_system_messages() -> None:
    gap = {"obsmem": {"temporal_gap": "[2 days later]"}}
    messages = [
        msg("system", at(4, 9, 0), "You are helpful."),
        msg("user", at(4, 9, 0), "plan my week", DataPart(name="data-om-status", data={"x": 1})),
        msg("assistant", at(4, 9, 1), ReasoningPart(text="The user wants a plan."), "Sure."),
        msg("user", at(6, 10, 0), "reminder", metadata=gap),
        msg("assistant", at(6, 10, 0), DataPart(name="data-om-activation")),
        msg("user", at(6, 10, 0), "back again"),
    ]
    assert render(messages) == (
        "Dec 4 2025:\n"
        "User (9:00 AM): plan my week\n"
        "Reasoning: The user wants a plan.\n"
        "Assistant (9:01 AM): Sure.\n"
        "[2 days later]\n"
        "\n"
        "Dec 6 2025:\n"
        "User (10:00 AM): back again"
    )


def test_empty_transcript() -> None:
    assert render_transcript([], tz=UTC, estimator=EST) == ("", [])


def test_multi_thread_transcript() -> None:
    board = ImagePart(data=PNG, filename="board.png")
    call = ToolCallPart(tool_call_id="same-id", tool_name="lookup", args={"k": 1})
    threads = [
        ("t1", [msg("user", at(4, 9, 0), "first", board), msg("assistant", at(4, 9, 0), call)]),
        ("t2", [msg("user", at(4, 9, 0), "second", board), msg("assistant", at(4, 9, 5), call)]),
    ]
    text, attachments = render_multi_thread_transcript(threads, tz=UTC, estimator=EST)
    assert text == (
        '<thread id="t1">\n'
        "Dec 4 2025:\n"
        "User (9:00 AM): first\n"
        "Image: [Image #1: board.png]\n"
        'Tool Call lookup (9:00 AM): {"k":1}\n'
        "Tool Result lookup: [interrupted: no result was recorded]\n"
        "</thread>\n"
        "\n"
        '<thread id="t2">\n'
        "Dec 4 2025:\n"
        "User (9:00 AM): second\n"
        "Image: [Image #2: board.png]\n"
        "</thread>"
    )
    assert attachments == [board, board]


# ---------------------------------------------------------------------------------------------
# observe()
# ---------------------------------------------------------------------------------------------

GOOD = (
    "<observations>\nDate: Dec 4, 2025\n* 🔴 (14:30) User stated their name is Ana.\n"
    "</observations>\n<current-task>Greet Ana.</current-task>"
)
DEGENERATE = "* 🟡 the same thing again and again\n" * 200


class Script:
    """A FunctionModel that answers from a list and records what it was sent."""

    def __init__(self, *answers: str | Exception) -> None:
        self.answers = list(answers)
        self.seen: list[list[pa.ModelMessage]] = []
        self.infos: list[AgentInfo] = []
        self.model = FunctionModel(self._answer, model_name="scripted")

    def _answer(self, messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        self.seen.append(messages)
        self.infos.append(info)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return pa.ModelResponse(parts=[pa.TextPart(content=answer)])


def simple_input(**kwargs: Any) -> ObserverInput:
    messages = [msg("user", at(4, 14, 30), "My name is Ana.")]
    return ObserverInput(messages=messages, **kwargs)


async def test_observe_sends_one_system_and_one_user_message() -> None:
    script = Script(GOOD)
    board = ImagePart(data=PNG, filename="board.png")
    inp = ObserverInput(
        messages=[msg("user", at(4, 14, 30), "My name is Ana.", board)],
        previous_observations="Date: Dec 3, 2025\n* 🟡 (10:00) Earlier fact.",
        prior_current_task="Say hello",
        prior_values={"user-profile": {"name": "?"}},
        instruction="Always note the user's pets.",
        ask_thread_title=True,
    )
    parsed, result = await observe(
        inp,
        caller=ModelCaller(),
        model=script.model,
        model_settings={"temperature": 0.3},
        estimator=EST,
    )
    assert parsed.observations == "Date: Dec 4, 2025\n* 🔴 (14:30) User stated their name is Ana."
    assert parsed.current_task == "Greet Ana."
    assert result.text == GOOD
    assert result.model_name == "scripted"

    [messages] = script.seen
    [request] = messages
    assert isinstance(request, pa.ModelRequest)
    system, user = request.parts
    assert isinstance(system, pa.SystemPromptPart)
    assert "=== CUSTOM INSTRUCTIONS ===\n\nAlways note the user's pets." in system.content
    assert "🔴" in system.content
    assert "<observations>" in system.content
    assert "<thread-title>" in system.content
    assert "<current-task>" in system.content
    assert isinstance(user, pa.UserPromptPart)
    assert not isinstance(user.content, str)
    text, image = user.content
    assert isinstance(text, str)
    assert "## Previous Observations\n\nDate: Dec 3, 2025\n* 🟡 (10:00) Earlier fact." in text
    assert "- prior current-task: Say hello" in text
    assert '<user-profile>{"name":"?"}</user-profile>' in text
    assert text.endswith(
        "## New Message History to Observe\n\n"
        'Times are in UTC. Work out relative dates ("tomorrow", "next week") in this time '
        "zone.\n\n"
        "Dec 4 2025:\nUser (2:30 PM): My name is Ana.\nImage: [Image #1: board.png]"
    )
    assert "Always note" not in text  # instructions stay in the system message
    assert isinstance(image, pa.BinaryContent)
    assert image.data == PNG
    assert script.infos[0].model_settings is not None
    assert script.infos[0].model_settings.get("temperature") == 0.3


async def test_observe_without_previous_log_or_hints() -> None:
    script = Script(GOOD)
    inp = simple_input(
        previous_observations="* 🟡 hidden", previous_observer_tokens=0, continuation_hints=False
    )
    await observe(
        inp,
        caller=ModelCaller(),
        model=script.model,
        estimator=EST,
        attachment_filter=lambda m: False,
    )
    request = script.seen[0][0]
    assert isinstance(request, pa.ModelRequest)
    system, user = request.parts
    assert isinstance(system, pa.SystemPromptPart)
    assert isinstance(user, pa.UserPromptPart)
    assert isinstance(user.content, str), "text only: one string, as strict servers require"
    text = user.content
    assert isinstance(text, str)
    assert "Previous Observations" not in text
    assert "hidden" not in text
    assert "Prior Thread Metadata" not in text
    assert "Output <observations> every time." in text
    assert "<current-task>" not in system.content
    assert "CUSTOM INSTRUCTIONS" not in system.content


async def test_previous_observations_are_truncated_to_the_budget() -> None:
    script = Script(GOOD)
    old = "\n".join(f"* 🟡 (10:{i:02d}) old observation number {i}" for i in range(60))
    await observe(
        simple_input(previous_observations=old, previous_observer_tokens=100),
        caller=ModelCaller(),
        model=script.model,
        estimator=EST,
    )
    request = script.seen[0][0]
    assert isinstance(request, pa.ModelRequest)
    user = request.parts[1]
    assert isinstance(user, pa.UserPromptPart)
    assert isinstance(user.content, str)
    text = user.content
    assert isinstance(text, str)
    assert "observations truncated here]" in text
    assert "old observation number 59" in text
    assert "old observation number 0\n" not in text


@pytest.mark.parametrize("bad", [DEGENERATE, "", "I have nothing to add."])
async def test_observe_retries_once_on_bad_output(bad: str) -> None:
    script = Script(bad, GOOD)
    parsed, result = await observe(
        simple_input(), caller=ModelCaller(), model=script.model, estimator=EST
    )
    assert len(script.seen) == 2
    assert parsed.current_task == "Greet Ana."
    assert result.text == GOOD


@pytest.mark.parametrize(("first", "second"), [(DEGENERATE, DEGENERATE), ("", "no list lines")])
async def test_observe_gives_up_after_two_bad_answers(first: str, second: str) -> None:
    script = Script(first, second, GOOD)
    with pytest.raises(ObserverOutputError, match="twice"):
        await observe(simple_input(), caller=ModelCaller(), model=script.model, estimator=EST)
    assert len(script.seen) == 2


async def test_model_errors_propagate_without_retry() -> None:
    script = Script(ValueError("bad request"), GOOD)
    with pytest.raises(ModelError, match="bad request"):
        await observe(simple_input(), caller=ModelCaller(), model=script.model, estimator=EST)
    assert len(script.seen) == 1


async def test_observe_multi_thread() -> None:
    answer = (
        '<observations>\n<thread id="t1">\n* 🔴 (09:00) a\n<current-task>x</current-task>\n'
        '</thread>\n<thread id="t2">\n* 🟡 (09:05) b\n</thread>\n</observations>'
    )
    script = Script(answer)
    inp = ObserverInput(
        threads=[
            ("t1", [msg("user", at(4, 9, 0), "one")]),
            ("t2", [msg("user", at(4, 9, 5), "two")]),
        ]
    )
    parsed, _ = await observe(inp, caller=ModelCaller(), model=script.model, estimator=EST)
    assert parsed.threads["t1"].observations == "* 🔴 (09:00) a"
    assert parsed.threads["t1"].current_task == "x"
    assert parsed.threads["t2"].observations == "* 🟡 (09:05) b"
    request = script.seen[0][0]
    assert isinstance(request, pa.ModelRequest)
    system, user = request.parts
    assert isinstance(system, pa.SystemPromptPart)
    assert isinstance(user, pa.UserPromptPart)
    assert '<thread id="..."> ... </thread>' in system.content
    assert isinstance(user.content, str)
    assert '<thread id="t1">\nDec 4 2025:\nUser (9:00 AM): one\n</thread>' in user.content


async def test_single_thread_observe_strips_thread_tags() -> None:
    script = Script('<observations>\n<thread id="x">\n* 🔴 a\n</thread>\n</observations>')
    parsed, _ = await observe(
        simple_input(), caller=ModelCaller(), model=script.model, estimator=EST
    )
    assert parsed.observations == "* 🔴 a"
    assert parsed.threads == {}


# --- what the prompts explain -----------------------------------------------------------------


def test_the_observer_prompt_explains_every_kind_of_line_it_is_shown() -> None:
    """Every line form the transcript can hold, and every bookkeeping line the previous
    observations can hold, is explained to the Observer (models copy what they do not
    understand)."""
    from obsmem.cycles.observer_run import previous_for_observer
    from obsmem.observations import boundary_line, truncate_observations
    from obsmem.prompts import CONTROL_LINES, INPUT_FORMAT, observer_system_prompt

    at = datetime(2025, 12, 4, 14, 30, tzinfo=UTC)
    call = ToolCallPart(tool_call_id="c1", tool_name="search", args={"q": "x"})
    lost = ToolCallPart(tool_call_id="c2", tool_name="fetch", args={})
    messages = [
        Message(role="user", parts=(TextPart(text="hi " * 3000),), created_at=at),
        Message(
            role="assistant",
            parts=(ReasoningPart(text="thinking"), call, lost),
            created_at=at + timedelta(minutes=1),
        ),
        Message(
            role="tool",
            parts=(
                ToolResultPart(
                    tool_call_id="c1", tool_name="search", content="boom", is_error=True
                ),
            ),
            created_at=at + timedelta(minutes=1),
        ),
        Message.user(
            "<system-reminder>3 hours later</system-reminder>",
            created_at=at + timedelta(hours=3),
            metadata={"obsmem": {"temporal_gap": "3 hours later — Dec 4, 2025, 5:30 PM"}},
        ),
        Message(
            role="user",
            parts=(ImagePart(url="https://example.com/a.png", media_type="image/png"),),
            created_at=at + timedelta(hours=3),
        ),
    ]
    transcript, _ = render_transcript(
        messages, tz=UTC, estimator=HeuristicEstimator(), part_cap=500
    )
    kinds = {
        "Dec 4 2025:": "opens a day",
        "User (2:30 PM):": '"User (2:30 PM): ..."',
        "Reasoning: thinking": '"Reasoning: ..."',
        "Tool Call search": '"Tool Call NAME (TIME)',
        "Tool Error search": '"Tool Error NAME: ..."',
        "[interrupted: no result was recorded]": "[interrupted: no result was recorded]",
        "characters left out here: recall": "characters left out here: recall",
        "Image: [Image #1": '"Image: [Image #1: NAME]"',
    }
    for shown, explained in kinds.items():
        assert shown in transcript, shown
        assert explained in INPUT_FORMAT, explained
    assert "later — " in INPUT_FORMAT

    # The bookkeeping lines, as the code writes them.
    log = "Date: Dec 4, 2025\n" + "\n".join(f"* 🟡 (10:{i:02d}) fact {i}" for i in range(60))
    truncated = truncate_observations(log, 50, len)
    control = {
        boundary_line(at).split("(")[0].strip(): "--- message boundary (",
        "[recall range": "[recall range",
        "--- BUFFERED (pending activation) ---": "--- BUFFERED (pending activation) ---",
        truncated[truncated.index("[") : truncated.index("]") + 1].split(" ", 1)[1]: (
            "observations truncated here]"
        ),
        "… [truncated]": "… [truncated]",
    }
    assert "--- BUFFERED (pending activation) ---" in inspect.getsource(previous_for_observer)
    for written, explained in control.items():
        assert explained.rstrip("(").strip() in CONTROL_LINES, written
    assert CONTROL_LINES in observer_system_prompt()
    assert INPUT_FORMAT in observer_system_prompt(multi_thread=True)


def test_the_observer_is_told_the_time_zone_of_the_times_it_sees() -> None:
    """Near local midnight the local day is not the UTC day: the request names the zone the
    transcript's times are in, with its offset then."""
    from zoneinfo import ZoneInfo

    late = datetime(2025, 12, 5, 2, 30, tzinfo=UTC)  # 23:30 on Dec 4 in São Paulo
    inp = ObserverInput(
        messages=[Message.user("Book it for tomorrow.", created_at=late)],
        tz=ZoneInfo("America/Sao_Paulo"),
    )
    transcript, _ = render_transcript(inp.messages, tz=inp.tz, estimator=HeuristicEstimator())
    text = observer_user_message(inp, transcript, HeuristicEstimator())
    assert "Times are in America/Sao_Paulo (UTC-03:00)." in text
    assert "Dec 4 2025:\nUser (11:30 PM): Book it for tomorrow." in text
    fixed = ObserverInput(messages=inp.messages, tz=timezone(timedelta(hours=5, minutes=30)))
    assert "Times are in UTC+05:30." in observer_user_message(fixed, "", HeuristicEstimator())


def test_a_title_is_asked_for_when_missing_or_from_an_earlier_generation() -> None:
    from obsmem.cycles.common import wants_title
    from obsmem.meta_keys import META_TITLE_GENERATION
    from obsmem.records import Thread
    from obsmem.snapshot import ThreadState

    def state(title: str | None, **metadata: Any) -> ThreadState:
        now = datetime(2025, 12, 4, tzinfo=UTC)
        thread = Thread(
            id="t", resource_id="r", title=title, metadata=metadata, created_at=now, updated_at=now
        )
        return ThreadState(thread=thread)

    assert wants_title(None, 0)
    assert wants_title(state(None), 0)
    assert not wants_title(state("Trip", **{META_TITLE_GENERATION: 2}), 2)
    assert wants_title(state("Trip", **{META_TITLE_GENERATION: 1}), 2)  # reflected since
    assert wants_title(state("Trip"), 0)  # a title from before titles were tracked
    assert not wants_title(state("Mine", title_pinned=True), 5)
    assert not wants_title(state(None, title_pinned=True), 5)


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (" ".join(f"note{i}" for i in range(40_000)), "no max_tokens setting of the model's"),
        ("", "does not write observations in the format asked"),
    ],
)
async def test_giving_up_says_what_to_do_for_the_problem_met(answer: str, says: str) -> None:
    """An answer obsmem cut off at its own output cap is not the model's max_tokens at fault;
    an answer with no observations needs a stronger model."""
    script = Script(answer, answer)
    with pytest.raises(ObserverOutputError) as raised:
        await observe(simple_input(), caller=ModelCaller(), model=script.model, estimator=EST)
    assert says in str(raised.value)
    assert "check its max_tokens" not in str(raised.value)
