"""Parsing model answers, the degenerate-output detector, truncation and message boundaries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from obsmem.answers import MAX_LINE_CHARS, ParsedOutput, parse_output
from obsmem.observations import (
    boundary_line,
    is_degenerate,
    split_segments,
    truncate_observations,
)

# ---------------------------------------------------------------------------------------------
# parse_output
# ---------------------------------------------------------------------------------------------

TAGGED = """\
<observations>
Date: Dec 4, 2025
* 🔴 (14:30) User stated their favorite color is blue.
  * -> user picked B (meaning Dec 11, 2025)
</observations>
<current-task>Plan the party.</current-task>
<suggested-response>Ask which date works.</suggested-response>
<thread-title>Party planning</thread-title>"""

PARSE_CASES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "tags-and-hints",
        TAGGED,
        {
            "observations": "Date: Dec 4, 2025\n"
            "* 🔴 (14:30) User stated their favorite color is blue.\n"
            "  * -> user picked B (meaning Dec 11, 2025)",
            "current_task": "Plan the party.",
            "suggested_response": "Ask which date works.",
            "thread_title": "Party planning",
        },
    ),
    (
        "no-tags-keeps-list-lines-and-dates",
        "Sure! Here are my notes.\nDate: Dec 4, 2025\n* 🔴 a\nsome prose\n- b\n  * -> c\n"
        "12. d\n3) e\nthanks",
        {"observations": "Date: Dec 4, 2025\n* 🔴 a\n- b\n  * -> c\n12. d\n3) e"},
    ),
    (
        "no-tags-hint-sections-are-not-list-lines",
        "* 🟡 a\n<current-task>\n* not an observation\n</current-task>",
        {"observations": "* 🟡 a", "current_task": "* not an observation"},
    ),
    (
        "multiple-blocks-joined",
        "<observations>\n* 🔴 one\n</observations>\nchatter\n<observations>\n* 🟡 two\n"
        "</observations>",
        {"observations": "* 🔴 one\n\n* 🟡 two"},
    ),
    (
        "opening-tag-must-start-a-line",
        "Here: <observations>* x</observations>\n* 🟢 y",
        {"observations": "* 🟢 y"},
    ),
    (
        "unclosed-block-ends-at-first-hint",
        "<observations>\n* 🔴 a\n<current-task>t</current-task>",
        {"observations": "* 🔴 a", "current_task": "t"},
    ),
    (
        "closing-tag-at-line-end",
        "<observations>\n* 🔴 a</observations>",
        {"observations": "* 🔴 a"},
    ),
    (
        "hint-inside-block-is-taken-out",
        "<observations>\n* 🔴 a\n<current-task>t</current-task>\n</observations>",
        {"observations": "* 🔴 a", "current_task": "t"},
    ),
    (
        "empty-hints-are-none",
        "<observations>\n* 🔴 a\n</observations>\n<current-task>  </current-task>",
        {"observations": "* 🔴 a", "current_task": None},
    ),
    (
        "extracted-values-json",
        '<observations>\n* a\n</observations>\n<extracted-values>{"profile": {"name": "Ana"}}'
        "</extracted-values>",
        {"observations": "* a", "extracted_values": {"profile": {"name": "Ana"}}},
    ),
    (
        "extracted-values-in-code-fence",
        '* a\n<extracted-values>\n```json\n{"n": 1}\n```\n</extracted-values>',
        {"observations": "* a", "extracted_values": {"n": 1}},
    ),
    (
        "extracted-values-invalid-json-ignored",
        "* a\n<extracted-values>{not json</extracted-values>",
        {"observations": "* a", "extracted_values": {}, "sections": {}},
    ),
    (
        "extracted-values-not-an-object-ignored",
        "* a\n<extracted-values>[1, 2]</extracted-values>",
        {"observations": "* a", "extracted_values": {}},
    ),
    (
        "other-slug-sections",
        "<observations>\n* a\n</observations>\n<user-profile>\nlikes tea\n</user-profile>\n"
        "<open_todos>none</open_todos>",
        {"observations": "* a", "sections": {"user-profile": "likes tea", "open_todos": "none"}},
    ),
    (
        "no-tags-other-bullets",
        "Here are the observations:\n– 🔴 a\n— 🟡 b\n+ c\n· d\n▪ e\n● f\n■ g\n▸ h\n➤ i\n"
        "‣ j\n− k\n・ l\nI hope this helps.",
        {"observations": "– 🔴 a\n— 🟡 b\n+ c\n· d\n▪ e\n● f\n■ g\n▸ h\n➤ i\n‣ j\n− k\n・ l"},
    ),
    (
        "no-tags-other-numbering",
        "(1) 🔴 a\n  a) -> c\n  ii. -> d\n(b) e\n10) f",
        {"observations": "(1) 🔴 a\n  a) -> c\n  ii. -> d\n(b) e\n10) f"},
    ),
    (
        "no-tags-bullet-glued-to-marker",
        "•🔴 (09:00) a\n-🟡(09:05) b\n*✅ c\n-1.5% is prose",
        {"observations": "•🔴 (09:00) a\n-🟡(09:05) b\n*✅ c"},
    ),
    (
        "no-tags-rules-are-not-list-lines",
        "— — —\n* * *\n- 🔴 a\n– – –",
        {"observations": "- 🔴 a"},
    ),
    (
        "no-tags-marker-lines-without-bullets",
        "Here are the observations:\nDate: Dec 4, 2025\n🔴 (14:30) a\n🟡️ b\n🟢\ufe0e c\n✅ d\n"
        "✔️ e\n☑ f\n[HIGH] g\n:red_circle: h\n(14:50) i\n(2:55 PM) j\nThat is all.",
        {
            "observations": "Date: Dec 4, 2025\n🔴 (14:30) a\n🟡️ b\n🟢\ufe0e c\n✅ d\n✔️ e\n☑ f\n"
            "[HIGH] g\n:red_circle: h\n(14:50) i\n(2:55 PM) j"
        },
    ),
    (
        "no-tags-sub-items-follow-their-line",
        "🔴 (14:30) a\n  -> b\n  → c\n  continued\n\n-> not under a line\n  stray indented prose",
        {"observations": "🔴 (14:30) a\n  -> b\n  → c\n  continued"},
    ),
    (
        "no-tags-unmarked-prose-stays-out",
        "⚠️ Note: the transcript had no times.\n💡 Tip: ask me again later.\nSummary:\n🔴 a",
        {"observations": "🔴 a"},
    ),
    (
        "lines-after-empty-block",
        "<observations></observations>\nDate: Dec 4, 2025\n* 🔴 a\n• 🟡 b\n- c\n"
        "<current-task>t</current-task>",
        {"observations": "Date: Dec 4, 2025\n* 🔴 a\n• 🟡 b\n- c", "current_task": "t"},
    ),
    (
        "prose-after-empty-block-stays-empty",
        "No new information.\n<observations>\n</observations>\nNothing else to add.",
        {"observations": ""},
    ),
    (
        "remarks-before-empty-block-are-not-observations",
        "Nothing new here:\n- the user only said thanks\n<observations></observations>",
        {"observations": ""},
    ),
    (
        "no-tags-cjk-numbering",
        "1．🔴 a\n2、 🟡 b\n（3） c\n① d",
        {"observations": "1．🔴 a\n2、 🟡 b\n（3） c\n① d"},
    ),
    (
        "lines-after-unclosed-block-and-hints",
        "<observations>\n* 🔴 a\n<current-task>t</current-task>\n* 🟡 (09:00) b\nThanks!",
        {"observations": "* 🔴 a\n* 🟡 (09:00) b", "current_task": "t"},
    ),
    (
        "lines-after-closed-block",
        "<observations>\n* 🔴 a\n</observations>\n* 🟡 (14:31) b\n  * -> c\n🟢 d\n"
        "<current-task>t</current-task>",
        {"observations": "* 🔴 a\n* 🟡 (14:31) b\n  * -> c\n🟢 d", "current_task": "t"},
    ),
    (
        "remarks-after-closed-block-are-not-observations",
        "<observations>\n* 🔴 a\n</observations>\nNotes:\n- I merged two lines.\n"
        "1. Times are local.\n  * -> nor this\nLet me know!",
        {"observations": "* 🔴 a"},
    ),
    (
        "date-header-before-block",
        "**Dec 4, 2025**\n<observations>\n* 🔴 a\n</observations>",
        {"observations": "Date: Dec 4, 2025\n* 🔴 a"},
    ),
    (
        "lines-between-blocks",
        "<observations>\n* 🔴 one\n</observations>\nDate: Dec 5, 2025\n* 🟡 two\n"
        "<observations>\n* 🟢 three\n</observations>",
        {"observations": "* 🔴 one\nDate: Dec 5, 2025\n* 🟡 two\n* 🟢 three"},
    ),
    (
        "unclosed-hint-after-block-is-not-observations",
        "<observations></observations>\n* 🔴 a\n<current-task>\n* 🟡 cut off",
        {"observations": "* 🔴 a", "current_task": None},
    ),
    (
        "garbage",
        "I'm sorry, I can't help with that.",
        {"observations": "", "current_task": None, "sections": {}, "threads": {}},
    ),
    ("empty", "", {"observations": ""}),
    (
        "trailing-spaces-and-blank-runs-tidied",
        "<observations>\n\n* a   \n\n\n\n* b\n\n</observations>",
        {"observations": "* a\n\n* b"},
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES]
)
def test_parse_output(text: str, expected: dict[str, Any]) -> None:
    parsed = parse_output(text)
    for name, value in expected.items():
        assert getattr(parsed, name) == value, name


def test_long_lines_are_cut() -> None:
    long_line = "* 🟡 " + "x" * (MAX_LINE_CHARS + 500)
    parsed = parse_output(f"<observations>\n{long_line}\n* 🔴 short\n</observations>")
    first, second = parsed.observations.split("\n")
    assert len(first) == MAX_LINE_CHARS
    assert first.endswith(" … [truncated]")
    assert first.startswith("* 🟡 xxx")
    assert second == "* 🔴 short"


def test_line_of_exactly_the_limit_is_kept() -> None:
    line = "* " + "y" * (MAX_LINE_CHARS - 2)
    assert parse_output(line).observations == line


MULTI = """\
<observations>
* 🔴 (08:00) User's name is Ana.
<thread id="t1">
Date: Dec 4, 2025
* 🔴 (09:10) User stated they are allergic to peanuts.
<current-task>Planning a dinner menu.</current-task>
<suggested-response>Offer three menus.</suggested-response>
</thread>
<thread id='t2'>
Date: Dec 4, 2025
* 🟡 (10:02) User asked for a train.
<thread-title>Trains</thread-title>
</thread>
</observations>
<current-task>Overall task.</current-task>"""


def test_thread_blocks_parse_into_threads() -> None:
    parsed = parse_output(MULTI)
    assert set(parsed.threads) == {"t1", "t2"}
    t1, t2 = parsed.threads["t1"], parsed.threads["t2"]
    assert t1 == ParsedOutput(
        observations="Date: Dec 4, 2025\n* 🔴 (09:10) User stated they are allergic to peanuts.",
        current_task="Planning a dinner menu.",
        suggested_response="Offer three menus.",
    )
    assert t2.observations == "Date: Dec 4, 2025\n* 🟡 (10:02) User asked for a train."
    assert t2.thread_title == "Trains"
    assert t2.current_task is None
    assert parsed.current_task == "Overall task."
    # the log keeps the thread sections, without their hints
    assert parsed.observations == (
        "* 🔴 (08:00) User's name is Ana.\n"
        '<thread id="t1">\n'
        "Date: Dec 4, 2025\n"
        "* 🔴 (09:10) User stated they are allergic to peanuts.\n"
        "</thread>\n"
        '<thread id="t2">\n'
        "Date: Dec 4, 2025\n"
        "* 🟡 (10:02) User asked for a train.\n"
        "</thread>"
    )


def test_single_thread_output_strips_stray_thread_tags() -> None:
    parsed = parse_output(MULTI, multi_thread=False)
    assert parsed.threads == {}
    assert "<thread" not in parsed.observations
    assert "</thread>" not in parsed.observations
    assert "* 🔴 (09:10) User stated they are allergic to peanuts." in parsed.observations
    assert "* 🟡 (10:02) User asked for a train." in parsed.observations
    assert parsed.current_task == "Overall task."


@pytest.mark.parametrize(
    ("parsed", "empty"),
    [
        (ParsedOutput(observations=""), True),
        (ParsedOutput(observations="  \n"), True),
        (ParsedOutput(observations="* a"), False),
        (ParsedOutput(observations="", threads={"t": ParsedOutput(observations="* a")}), False),
        (ParsedOutput(observations="", threads={"t": ParsedOutput(observations="")}), True),
    ],
)
def test_is_empty(parsed: ParsedOutput, empty: bool) -> None:
    assert parsed.is_empty is empty


# ---------------------------------------------------------------------------------------------
# is_degenerate
# ---------------------------------------------------------------------------------------------

_VARIED = "\n".join(
    f"* 🟡 (10:{i % 60:02d}) User asked about item number {i} in the catalogue" for i in range(60)
)
_UNIQUE = [f"* 🟡 (10:{i:02d}) distinct observation about topic {i} here" for i in range(9)]
_MOSTLY_DUPLICATE_LINES = "\n".join(
    _UNIQUE + [f"* 🟡 same line {i % 11} repeated over the whole answer text" for i in range(33)]
)
_PAIRS = [f"* 🟢 observation number {i} about a particular subject" for i in range(20)]
_HALF_DUPLICATE_LINES = "\n".join(_PAIRS + _PAIRS[::-1])

DEGENERATE_CASES = [
    ("empty", "", False),
    ("short-repetition-never", "abc" * 600, False),
    ("repeated-windows", "abc" * 1000, True),
    ("repeated-sentence", "The user likes tea. " * 200, True),
    ("varied-log", _VARIED, False),
    ("one-huge-line", "".join(str(i) for i in range(15000)), True),
    ("many-short-lines-of-normal-length", "\n".join(str(i) * 3 for i in range(1000)), False),
    ("over-half-duplicate-lines", _MOSTLY_DUPLICATE_LINES, True),
    ("exactly-half-duplicate-lines", _HALF_DUPLICATE_LINES, False),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in DEGENERATE_CASES], ids=[c[0] for c in DEGENERATE_CASES]
)
def test_is_degenerate(text: str, expected: bool) -> None:
    assert is_degenerate(text) is expected


def test_degenerate_cases_are_long_enough_to_matter() -> None:
    for name, text, _ in DEGENERATE_CASES[2:]:
        assert len(text) >= 2000, name


# ---------------------------------------------------------------------------------------------
# truncate_observations
# ---------------------------------------------------------------------------------------------

LOG = """\
Date: Dec 1, 2025
* 🔴 a
* 🟡 b
* ✅ c
Date: Dec 2, 2025
* 🟡 d
* 🟡 e
Date: Dec 3, 2025
* 🟡 f
* 🟡 g
* 🟡 h
* 🟡 i"""


def per_line(text: str) -> int:
    """Ten tokens per line: easy arithmetic for the table below (the log costs 120)."""
    return 10 * (text.count("\n") + 1) if text else 0


TRUNCATE_CASES = [
    ("none-keeps-all", None, LOG),
    ("zero-keeps-none", 0, ""),
    ("negative-keeps-none", -5, ""),
    ("exactly-at-budget", 120, LOG),
    (
        # tail f..i (40 <= 45) + its header (10) + a marker (10) = 60; ✅ c with its header = 90;
        # 🔴 a would make 110
        "keeps-newest-completion-first",
        90,
        "Date: Dec 1, 2025\n[2 observations truncated here]\n* ✅ c\n"
        "[2 observations truncated here]\nDate: Dec 3, 2025\n* 🟡 f\n* 🟡 g\n* 🟡 h\n* 🟡 i",
    ),
    (
        # tail = header Dec 3 + f..i (50 <= 59) + a marker = 60; ✅ c + header -> 90; 🔴 a -> 110
        "keeps-red-and-completed",
        119,
        "Date: Dec 1, 2025\n* 🔴 a\n[1 observations truncated here]\n* ✅ c\n"
        "[2 observations truncated here]\nDate: Dec 3, 2025\n* 🟡 f\n* 🟡 g\n* 🟡 h\n* 🟡 i",
    ),
    (
        # tail g..i (30) + header Dec 3 + a marker = 50; nothing older fits in 60
        "only-tail-fits",
        60,
        "[5 observations truncated here]\nDate: Dec 3, 2025\n[1 observations truncated here]\n"
        "* 🟡 g\n* 🟡 h\n* 🟡 i",
    ),
]


@pytest.mark.parametrize(
    ("budget", "expected"), [c[1:] for c in TRUNCATE_CASES], ids=[c[0] for c in TRUNCATE_CASES]
)
def test_truncate_observations(budget: int | None, expected: str) -> None:
    assert truncate_observations(LOG, budget, per_line) == expected


def test_truncation_is_deterministic_and_within_budget() -> None:
    from obsmem.tokens import HeuristicEstimator

    count = HeuristicEstimator().count_text
    lines = ["Date: Dec 1, 2025"]
    for i in range(200):
        mark = "🔴" if i % 7 == 0 else "✅" if i % 11 == 0 else "🟡"
        lines.append(f"* {mark} (10:{i % 60:02d}) observation {i} about something specific")
    log = "\n".join(lines)
    first = truncate_observations(log, 500, count)
    assert first == truncate_observations(log, 500, count)
    assert count(first) <= 550
    assert first.splitlines()[-1] == lines[-1]
    assert "observations truncated here]" in first
    kept_old = [ln for ln in first.splitlines()[:20] if ln.startswith("* ")]
    assert kept_old
    assert all(("🔴" in ln or "✅" in ln) for ln in kept_old)


# ---------------------------------------------------------------------------------------------
# message boundaries
# ---------------------------------------------------------------------------------------------


def test_boundary_line_is_utc_with_milliseconds() -> None:
    at = datetime(2025, 12, 4, 15, 30, 0, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert boundary_line(at) == "\n\n--- message boundary (2025-12-04T14:30:00.123Z) ---\n\n"


def test_split_segments_inverts_joining() -> None:
    segments = ["Date: Dec 1, 2025\n* 🔴 a", "Date: Dec 2, 2025\n* 🟡 b", "* 🟢 c"]
    times = [datetime(2025, 12, 2, tzinfo=UTC), datetime(2025, 12, 3, tzinfo=UTC)]
    log = segments[0] + boundary_line(times[0]) + segments[1] + boundary_line(times[1])
    log += segments[2]
    assert split_segments(log) == segments
    assert split_segments(segments[0]) == [segments[0]]
    assert split_segments("") == []
    assert split_segments(boundary_line(times[0]) + "* x") == ["* x"]


def test_lines_appended_during_a_reflection_keep_their_date() -> None:
    """Lines appended under the reflected part's last date header, before a header of their
    own, take that header with them: they are not filed under the reflection's last date."""
    from obsmem.observations import with_reflection

    reflected = "Date: Dec 1, 2025\n* 🔴 (09:00) A.\nDate: Dec 3, 2025\n* 🟡 (10:00) B."
    reflection = "Date: Dec 1, 2025\n* 🔴 (09:00) A and B."
    tail = (
        "\n--- message boundary (2025-12-03T11:00:00Z) ---\n* 🟡 (11:00) C.\n"
        "Date: Dec 4, 2025\n* 🟡 (09:00) D."
    )
    log = with_reflection(reflection, reflected, tail)
    assert log == (
        "Date: Dec 1, 2025\n* 🔴 (09:00) A and B.\n\n"
        "--- message boundary (2025-12-03T11:00:00Z) ---\nDate: Dec 3, 2025\n* 🟡 (11:00) C.\n"
        "Date: Dec 4, 2025\n* 🟡 (09:00) D."
    )
    dated = "Date: Dec 4, 2025\n* 🟡 (09:00) D."
    assert with_reflection(reflection, reflected, dated) == f"{reflection}\n\n{dated}"
    assert with_reflection(reflection, reflected, "  ") == reflection


def test_unbulleted_lines_appended_during_a_reflection_keep_their_date() -> None:
    """A tail of observations written without bullets (a priority marker first) is dated too."""
    from obsmem.observations import with_reflection

    reflected = "Date: Dec 3, 2025\n🟡 (10:00) B."
    reflection = "Date: Dec 3, 2025\n🟡 (10:00) B, shorter."
    log = with_reflection(reflection, reflected, "🟢 (11:00) C.\n• ✅ (11:05) D.")
    assert log == f"{reflection}\n\nDate: Dec 3, 2025\n🟢 (11:00) C.\n• ✅ (11:05) D."
