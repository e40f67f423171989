"""The LongMemEval harness: loading, judge prompts, the runner (Python API with FunctionModels) and
``obsmem bench longmemeval`` through its real entry point against a scripted loopback server."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import messages as pa
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from obsmem.cli import main
from obsmem.llm import LLMResult, ModelCaller
from obsmem.longmemeval import (
    QUESTION_TYPES,
    DataError,
    QuestionResult,
    RunConfig,
    RunProgress,
    format_report,
    judge,
    judge_prompt,
    load_questions,
    parse_date,
    parse_verdict,
    percentile,
    run_benchmark,
    select_questions,
    summarize,
)
from obsmem.testing import scripted_observer, scripted_reflector

from .strict_server import StrictServer, strict_server_thread

FIXTURE = Path(__file__).parent / "fixtures" / "longmemeval_small.json"

# The scripted reader: for each question, the facts it needs to find in what it is sent, and its
# reply when it finds them all (otherwise it says it does not know). The instruments reply is
# wrong on purpose, so the run scores 6 of 7.
READER: dict[str, tuple[tuple[str, ...], str]] = {
    "What degree did I graduate with?": (
        ("Business Administration",),
        "You graduated with a degree in Business Administration.",
    ),
    "Which Kyoto temple did you recommend for its rock garden?": (
        ("Ryoan-ji",),
        "I recommended Ryoan-ji.",
    ),
    "Can you suggest a dinner recipe for tonight?": (
        ("vegetarian",),
        "How about a vegetarian lentil curry?",
    ),
    "How many musical instruments do I own?": (
        ("guitar", "piano", "ukulele"),
        "You own 2 instruments: a guitar and a piano.",
    ),
    "Which city do I live in now?": (("Denver",), "You live in Denver now."),
    "How many days passed between my dentist appointment and my job interview?": (
        ("dentist", "interview"),
        "14 days passed between them.",
    ),
    "What degree did my sister graduate with?": (("my sister's degree",), "Physics."),
}
UNKNOWN = "I don't know; that was never mentioned."
# The scripted judge says yes when the response contains this (the gold answer, a rubric's key,
# or for the unanswerable question an admission of not knowing).
ACCEPT = {
    "What degree did I graduate with?": "Business Administration",
    "Which Kyoto temple did you recommend for its rock garden?": "Ryoan-ji",
    "Can you suggest a dinner recipe for tonight?": "vegetarian",
    "How many musical instruments do I own?": "3",
    "Which city do I live in now?": "Denver",
    "How many days passed between my dentist appointment and my job interview?": "14 days",
    "What degree did my sister graduate with?": "don't know",
}
EXPECTED_BY_TYPE = {
    "single-session-user": (2, 2),
    "single-session-assistant": (1, 1),
    "single-session-preference": (1, 1),
    "multi-session": (0, 1),
    "knowledge-update": (1, 1),
    "temporal-reasoning": (1, 1),
    "abstention": (1, 1),
}

_QUESTION = re.compile(r"Question: (.+)")
_GRADING = re.compile(r"Question: (.*?)\n\n.*?\n\nResponse: (.*?)\n\nIs the response", re.DOTALL)


def reader_reply(question_text: str, seen: str) -> str:
    needles, reply = READER[question_text]
    return reply if all(n in seen for n in needles) else UNKNOWN


def judge_reply(prompt: str) -> str:
    m = _GRADING.search(prompt)
    assert m is not None, prompt
    question, response = m.groups()
    return "yes" if ACCEPT[question] in response else "no"


def _texts(messages: list[pa.ModelMessage]) -> str:
    out: list[str] = []
    for message in messages:
        for part in message.parts:
            content = getattr(part, "content", None)
            if isinstance(content, str):
                out.append(content)
    return "\n".join(out)


# -- loading -------------------------------------------------------------------------------------


def test_the_fixture_covers_every_type_and_an_abstention() -> None:
    questions = load_questions(FIXTURE)
    assert {q.question_type for q in questions} == set(QUESTION_TYPES)
    assert [q.question_id for q in questions if q.abstention] == ["lme_ssu_02_abs"]
    assert all(2 <= len(q.haystack_sessions) <= 4 for q in questions)
    instruments = next(q for q in questions if q.question_type == "multi-session")
    assert instruments.answer == "3"  # a number in the file, text here
    assert instruments.session_times[1] == datetime(2023, 8, 5, 16, 20, tzinfo=UTC)
    assert instruments.asked_at == datetime(2023, 8, 15, 20, 0, tzinfo=UTC)
    assert instruments.haystack_sessions[0][0].has_answer


def _entry(**changes: Any) -> dict[str, Any]:
    entry = json.loads(FIXTURE.read_text())[0]
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not None}


def _bad(**changes: Any) -> str:
    return json.dumps([_entry(**changes)])


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('[{"question_id": "a",\n oops}]', "bad.json:2:2: not valid JSON"),
        ('{"question_id": "a"}', "expected a JSON list of LongMemEval questions"),
        ("[]", "the list of questions is empty"),
        (
            _bad(question=None),
            "entry 0 (question_id 'lme_ssu_01'): field 'question' is missing",
        ),
        (_bad(question_type="trivia"), "field 'question_type' is 'trivia'; expected one of"),
        (_bad(question_date="yesterday"), "field 'question_date' 'yesterday' is not a date"),
        (
            _bad(haystack_dates=["2023/05/20 (Sat) 02:21"]),
            "field 'haystack_dates' has 1 dates for 3 haystack_sessions",
        ),
        (
            _bad(haystack_sessions=[[{"role": "bot", "content": "x"}]] * 3),
            "field 'haystack_sessions[0][0].role' is 'bot'",
        ),
        (_bad(answer=["x"]), "field 'answer' must be a string, not list"),
        (json.dumps([_entry(), _entry()]), "entry 1: question_id 'lme_ssu_01' appears twice"),
        (json.dumps([_entry(), 7]), "entry 1: expected a JSON object, found int"),
    ],
)
def test_bad_data_files_are_named_with_entry_and_field(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(DataError) as caught:
        load_questions(path)
    assert expected in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_missing_data_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"cannot read .*nope\.json"):
        load_questions(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("types", "limit", "expected"),
    [
        ((), None, 7),
        ((), 2, 2),
        (("single-session-user",), None, 2),
        (("abstention",), None, 1),
        (("multi-session", "knowledge-update"), None, 2),
        (("single-session-user", "temporal-reasoning"), 2, 2),
    ],
)
def test_select_questions_by_type_and_limit(
    types: tuple[str, ...], limit: int | None, expected: int
) -> None:
    questions = load_questions(FIXTURE)
    chosen = select_questions(questions, types=types, limit=limit)
    assert len(chosen) == expected
    order = [q.question_id for q in questions]
    assert [order.index(q.question_id) for q in chosen] == sorted(
        order.index(q.question_id) for q in chosen
    )
    with pytest.raises(DataError, match="unknown question type 'trivia'"):
        select_questions(questions, types=["trivia"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2023/05/30 (Tue) 23:40", datetime(2023, 5, 30, 23, 40, tzinfo=UTC)),
        ("2023/01/02", datetime(2023, 1, 2, tzinfo=UTC)),
        ("2023-1-2 7:05", datetime(2023, 1, 2, 7, 5, tzinfo=UTC)),
    ],
)
def test_parse_date(text: str, expected: datetime) -> None:
    assert parse_date(text) == expected


# -- judging -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question_id", "label", "rule"),
    [
        ("lme_ssu_01", "Correct answer: Business Administration", "every step that leads"),
        ("lme_ssa_01", "Correct answer: Ryoan-ji", "only part of the information"),
        ("lme_ms_01", "Correct answer: 3", "does not answer"),
        ("lme_tr_01", "Correct answer: 14 days", "off-by-one"),
        ("lme_ku_01", "Correct answer: Denver", "the updated one"),
        ("lme_ssp_01", "Rubric: The user would prefer vegetarian", "does not have to cover every"),
        ("lme_ssu_02_abs", "Explanation: The information provided", "cannot be answered"),
    ],
)
def test_judge_prompt_uses_the_rule_of_the_type(question_id: str, label: str, rule: str) -> None:
    question = next(q for q in load_questions(FIXTURE) if q.question_id == question_id)
    prompt = judge_prompt(question, "THE RESPONSE")
    assert label in prompt
    assert rule in prompt
    assert f"Question: {question.question}" in prompt
    assert "Response: THE RESPONSE" in prompt
    assert prompt.endswith("Reply with yes or no only.")
    others = {"off-by-one", "the updated one", "does not have to cover every"} - {rule}
    assert not any(o in prompt for o in others)


async def test_judge_resolves_a_string_model_through_the_caller_without_reporting_to_it() -> None:
    caller = ModelCaller()
    heard: list[LLMResult] = []
    caller.add_listener(lambda request, result: heard.append(result))
    model = caller.resolve("test")
    assert isinstance(model, TestModel)
    model.custom_output_text = "yes"
    question = load_questions(FIXTURE)[0]
    verdict = await judge(question, "THE RESPONSE", "test", caller=caller)
    assert (verdict.correct, verdict.reply) == (True, "yes")
    assert heard == []  # the listeners count the memory models' calls only
    alone = await judge(question, "THE RESPONSE", "test")
    assert alone.reply != "yes"  # without a caller, a fresh model


@pytest.mark.parametrize(
    ("reply", "correct"),
    [
        ("yes", True),
        ("Yes.", True),
        ("**YES**", True),
        ("no", False),
        ("No, the response says yes to the wrong thing", False),
        ("yesterday", False),
        ("", False),
        ("I think yes", True),
    ],
)
def test_parse_verdict(reply: str, correct: bool) -> None:
    assert parse_verdict(reply) is correct


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, 0.0),
        ([5.0], 95, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([*range(1, 101)], 95, 95.05),
    ],
)
def test_percentile(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


# -- the runner, through the Python API ----------------------------------------------------------


def scripted_reader(seen: dict[str, str], barrier: int = 0) -> FunctionModel:
    """Answers from the table; ``barrier``: the first that many calls wait until all arrived."""
    arrived = {"n": 0}
    everyone = asyncio.Event()

    async def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        text = _texts(messages)
        m = _QUESTION.findall(text)
        assert m, text
        seen[m[-1]] = text
        if arrived["n"] < barrier:
            arrived["n"] += 1
            if arrived["n"] == barrier:
                everyone.set()
            await asyncio.wait_for(everyone.wait(), timeout=20)
        return pa.ModelResponse(parts=[pa.TextPart(content=reader_reply(m[-1], text))])

    return FunctionModel(answer, model_name="scripted-reader")


def scripted_judge() -> FunctionModel:
    async def grade(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        return pa.ModelResponse(parts=[pa.TextPart(content=judge_reply(_texts(messages)))])

    return FunctionModel(grade, model_name="scripted-judge")


def _config(seen: dict[str, str], *, concurrency: int = 1, barrier: int = 0) -> RunConfig:
    return RunConfig(
        reader=scripted_reader(seen, barrier),
        judge=scripted_judge(),
        observer=scripted_observer(),
        reflector=scripted_reflector(),
        message_tokens=40,
        observation_tokens=5_000,
        concurrency=concurrency,
    )


def _scores(results: list[QuestionResult]) -> dict[str, tuple[int, int]]:
    return {s.question_type: (s.correct, s.total) for s in summarize(results).by_type}


async def test_a_run_replays_asks_with_the_question_date_and_grades() -> None:
    questions = load_questions(FIXTURE)
    seen: dict[str, str] = {}
    streamed: list[str] = []
    ticks: list[RunProgress] = []
    outcome = await run_benchmark(
        questions,
        _config(seen),
        on_result=lambda r: streamed.append(r.question_id),
        progress=ticks.append,
    )
    assert outcome.failed == []
    assert sorted(streamed) == sorted(q.question_id for q in questions)
    report = summarize(outcome.results)
    assert (report.correct, report.questions) == (6, 7)
    assert _scores(outcome.results) == EXPECTED_BY_TYPE
    wrong = next(r for r in outcome.results if not r.correct)
    assert (wrong.question_id, wrong.judge_reply) == ("lme_ms_01", "no")

    # The reader saw observations dated by the haystack, relative to the question date.
    update = seen["Which city do I live in now?"]
    assert "Current date: 2023/04/20 (Thu) 08:00" in update
    assert "Date: Jan 10, 2023 (3 months ago)" in update
    assert "Date: Apr 2, 2023 (" in update
    for r in outcome.results:
        assert r.memory_calls >= 2, r  # the haystack passed 40 tokens: observed
        assert r.memory_input_tokens > r.memory_output_tokens > 0
        assert r.memory_cost_usd is None  # scripted models have no price
        assert r.reader_input_tokens > 0
        assert r.judge_input_tokens > 0
        assert r.observation_tokens > 0
        assert r.answer_latency_ms > 0
        assert r.memory_failures == []
    assert report.memory_input_tokens == pytest.approx(
        sum(r.memory_input_tokens for r in outcome.results) / 7
    )
    assert ticks[-1] == RunProgress(
        questions_done=7,
        questions_total=7,
        turns_done=ticks[-1].turns_total,
        turns_total=sum(r.haystack_turns + 1 for r in outcome.results),
    )
    assert [t.turns_done for t in ticks] == sorted(t.turns_done for t in ticks)

    text = format_report(report)
    assert "accuracy  85.7%  (6/7 questions)" in text
    assert "multi-session                 0.0%  (0/1)" in text
    assert "memory cost: unknown" in text


async def test_concurrent_questions_keep_separate_accounts() -> None:
    questions = load_questions(FIXTURE)
    alone = await run_benchmark(questions, _config({}))
    together = await run_benchmark(questions, _config({}, concurrency=3, barrier=3))
    assert together.failed == []  # three readers were waiting at once, or this timed out

    def accounts(results: list[QuestionResult]) -> dict[str, tuple[int, int, int, bool]]:
        return {
            r.question_id: (
                r.memory_calls,
                r.memory_input_tokens,
                r.memory_output_tokens,
                r.correct,
            )
            for r in results
        }

    assert accounts(together.results) == accounts(alone.results)


async def test_a_failing_question_is_reported_and_left_for_the_next_run() -> None:
    questions = load_questions(FIXTURE)[:3]

    async def flaky(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        text = _texts(messages)
        if "Kyoto" in text:
            raise ValueError("reader fell over")
        return pa.ModelResponse(
            parts=[pa.TextPart(content=reader_reply(_QUESTION.findall(text)[-1], text))]
        )

    config = RunConfig(
        reader=FunctionModel(flaky), judge=scripted_judge(), observer=scripted_observer()
    )
    outcome = await run_benchmark(questions, config, skip={"lme_ssu_01"})
    assert [r.question_id for r in outcome.results] == ["lme_ssp_01"]
    assert len(outcome.failed) == 1
    assert outcome.failed[0].startswith("lme_ssa_01: ")
    assert "reader fell over" in outcome.failed[0]


# -- the command line ----------------------------------------------------------------------------


class ScriptedServer:
    """The strict loopback server (:mod:`tests.strict_server`) answering by model name:
    ``observer`` writes an observation line per message, ``reader`` and ``judge`` follow the
    tables above. The first ``barrier`` reader requests wait (up to 20 s) until that many are
    in flight at once."""

    def __init__(self, barrier: int = 0) -> None:
        self.barrier = barrier
        self.max_readers = 0
        self._readers = 0
        self._waited = 0
        self._everyone: asyncio.Event | None = None
        self._context = strict_server_thread(answer=self.answer)
        self.server: StrictServer | None = None

    @property
    def requests(self) -> list[dict[str, Any]]:
        assert self.server is not None
        return self.server.requests

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return self.server.base_url

    def __enter__(self) -> ScriptedServer:
        self.server = self._context.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(None, None, None)

    async def answer(self, body: dict[str, Any]) -> str:
        everything = "\n".join(_content(m.get("content")) for m in body.get("messages", []))
        if "Reply with the single word OK." in everything:
            return "OK"
        model = body.get("model")
        if model == "observer":
            return _observe(everything)
        if model == "judge":
            return judge_reply(everything)
        assert model == "reader", model
        await self._reader_waits()
        return reader_reply(_QUESTION.findall(everything)[-1], everything)

    async def _reader_waits(self) -> None:
        everyone = self._everyone = self._everyone or asyncio.Event()
        self._readers += 1
        self.max_readers = max(self.max_readers, self._readers)
        wait = self._waited < self.barrier
        self._waited += 1
        if self._readers >= self.barrier:
            everyone.set()
        if wait:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(everyone.wait(), timeout=20)
        self._readers -= 1


def _content(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(content or "")


def _observe(prompt: str) -> str:
    transcript = prompt.split("## New Message History to Observe", 1)[-1]
    lines: list[str] = []
    for line in transcript.splitlines():
        if m := re.match(r"^([A-Z][a-z]{2}) (\d{1,2}) (\d{4}):$", line):
            lines.append(f"Date: {m.group(1)} {m.group(2)}, {m.group(3)}")
        elif m := re.match(r"^(User|Assistant) \((\d{1,2}):(\d{2}) ([AP]M)\): (.*)$", line):
            who, hour, minute, ampm, text = m.groups()
            hh = int(hour) % 12 + (12 if ampm == "PM" else 0)
            lines.append(f"* 🔴 ({hh:02d}:{minute}) {who} said: {text}")
    return "<observations>\n" + "\n".join(lines) + "\n</observations>"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


def _env(server: ScriptedServer | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    for name in ("OPENAI_BASE_URL", "OBSMEM_MODEL"):
        env.pop(name, None)
    if server is not None:
        env["OPENAI_BASE_URL"] = server.base_url
    return env


MODELS = ("--reader", "openai/reader", "--judge", "openai/judge", "--observer", "openai/observer")


def bench(
    *args: str, cwd: Path, server: ScriptedServer | None, models: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "obsmem", "bench", "longmemeval", "--data", str(FIXTURE), *args]
        + (list(MODELS) if models else []),
        cwd=cwd,
        capture_output=True,
        text=True,
        env=_env(server),
        timeout=300,
    )


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_cli_runs_grades_reports_and_resumes(tmp_path: Path, server: ScriptedServer) -> None:
    first = bench("--out", "r.jsonl", "--message-tokens", "40", cwd=tmp_path, server=server)
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert "7 question(s) selected, 0 already in r.jsonl, 7 to run" in out
    assert "reader openai/reader, judge openai/judge, observer openai/observer" in out
    assert "accuracy  85.7%  (6/7 questions)" in out
    for qtype, (correct, total) in EXPECTED_BY_TYPE.items():
        assert re.search(rf"  {qtype} +[\d.]+%  \({correct}/{total}\)", out), qtype
    assert "reader input 10;" in out  # the server reports 10 prompt tokens per call
    assert "judge input 10" in out
    assert "answer latency: p50 " in out
    assert "memory cost: unknown" in out
    assert "longmemeval 7/7 questions [" in first.stderr  # the progress bar finished

    rows = _rows(tmp_path / "r.jsonl")
    assert sorted(r["question_id"] for r in rows) == sorted(
        q.question_id for q in load_questions(FIXTURE)
    )
    for row in rows:
        assert row["memory_calls"] >= 1  # 40-token threshold: the Observer ran
        assert row["memory_input_tokens"] == 10 * row["memory_calls"]
        assert row["memory_output_tokens"] == 5 * row["memory_calls"]
        assert row["reader_input_tokens"] == 10
    observer_calls = [
        r for r in server.requests if r["model"] == "observer" and "single word OK" not in str(r)
    ]
    assert len(observer_calls) == sum(row["memory_calls"] for row in rows)

    asked = len(server.requests)
    again = bench("--out", "r.jsonl", cwd=tmp_path, server=server)
    assert again.returncode == 0, again.stderr
    assert "7 already in r.jsonl, 0 to run" in again.stdout
    assert "accuracy  85.7%  (6/7 questions)" in again.stdout
    assert len(server.requests) == asked  # nothing was sent: every question was skipped
    assert len(_rows(tmp_path / "r.jsonl")) == 7


def test_cli_limit_types_and_a_later_wider_run(tmp_path: Path, server: ScriptedServer) -> None:
    types = ("--out", "r.jsonl", "--types", "single-session-user,multi-session")
    some = bench(*types, "--limit", "2", cwd=tmp_path, server=server)
    assert some.returncode == 0, some.stderr
    assert "2 question(s) selected, 0 already in r.jsonl, 2 to run" in some.stdout
    assert "accuracy  50.0%  (1/2 questions)" in some.stdout
    assert [r["question_id"] for r in _rows(tmp_path / "r.jsonl")] == ["lme_ssu_01", "lme_ms_01"]

    wider = bench(*types, cwd=tmp_path, server=server)
    assert wider.returncode == 0, wider.stderr
    assert "3 question(s) selected, 2 already in r.jsonl, 1 to run" in wider.stdout
    assert "accuracy  66.7%  (2/3 questions)" in wider.stdout
    assert "single-session-user         100.0%  (2/2)" in wider.stdout
    assert "abstention                  100.0%  (1/1)" in wider.stdout
    assert "knowledge-update" not in wider.stdout
    assert len(_rows(tmp_path / "r.jsonl")) == 3


def test_cli_runs_questions_concurrently(tmp_path: Path) -> None:
    with ScriptedServer(barrier=3) as server:
        result = bench("--out", "r.jsonl", "--concurrency", "3", cwd=tmp_path, server=server)
    assert result.returncode == 0, result.stderr
    assert server.max_readers == 3
    assert "accuracy  85.7%  (6/7 questions)" in result.stdout
    assert len(_rows(tmp_path / "r.jsonl")) == 7


def test_cli_without_a_model_says_how_to_provide_one(tmp_path: Path) -> None:
    result = bench("--out", "r.jsonl", cwd=tmp_path, server=None, models=False)
    assert result.returncode == 2
    assert "OBSMEM_MODEL" in result.stderr
    assert "OPENAI_BASE_URL" in result.stderr
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--data", "missing.json"), "cannot read missing.json"),
        (("--data", "bad.json"), "bad.json: entry 0 (question_id 'x'): field 'question_type' is"),
        (("--types", "trivia"), "unknown question type 'trivia'"),
        (("--out", "corrupt.jsonl"), "corrupt.jsonl:2: not a result line"),
        (("--concurrency", "0"), "give a number of at least 1"),
    ],
)
def test_cli_errors_exit_2_and_name_the_problem(
    tmp_path: Path,
    server: ScriptedServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    expected: str,
) -> None:
    """In process (the same parser and command as ``python -m obsmem``), to keep the suite fast."""
    (tmp_path / "bad.json").write_text(json.dumps([{"question_id": "x"}]))
    (tmp_path / "corrupt.jsonl").write_text("\n{half a line\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    argv = ["bench", "longmemeval", "--data", str(FIXTURE), *MODELS, *args]
    try:
        code = main(argv, out=io.StringIO())
    except SystemExit as exc:  # argparse rejects bad option values itself
        code = exc.code
    assert code == 2
    assert expected in capsys.readouterr().err
    assert server.requests == []
