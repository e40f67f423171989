"""LongMemEval data: the official JSON format, loaded and checked.

A data file (S, M, oracle, or the cleaned release) is a JSON list of questions, each with the
sessions of its haystack. ``load_questions(path)`` returns them as :class:`Question` objects and
raises :class:`DataError` naming the file, the entry and the field when something does not fit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias, cast, get_args

from ..errors import ObsmemError
from ..textfiles import read_text

__all__ = [
    "ABSTENTION",
    "QUESTION_TYPES",
    "DataError",
    "Question",
    "QuestionType",
    "Turn",
    "load_questions",
    "parse_date",
    "select_questions",
]

QuestionType: TypeAlias = Literal[
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "knowledge-update",
    "temporal-reasoning",
]
QUESTION_TYPES: tuple[QuestionType, ...] = get_args(QuestionType)
ABSTENTION = "abstention"
"""The pseudo-type of the unanswerable questions (``question_id`` ending in ``_abs``)."""


class DataError(ObsmemError):
    """A LongMemEval file that cannot be used; the message names the file, entry and field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """One message of a haystack session."""

    role: Literal["user", "assistant"]
    content: str
    has_answer: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Question:
    """One LongMemEval question with its haystack."""

    question_id: str
    question_type: QuestionType
    question: str
    answer: str
    """The gold answer (for preference questions a rubric; for abstention an explanation)."""
    question_date: str
    """As written in the data, e.g. ``2023/05/30 (Tue) 23:40``."""
    haystack_session_ids: tuple[str, ...]
    haystack_dates: tuple[str, ...]
    haystack_sessions: tuple[tuple[Turn, ...], ...]
    answer_session_ids: tuple[str, ...] = ()

    @property
    def abstention(self) -> bool:
        """An unanswerable question: the right response says the information is not there."""
        return self.question_id.endswith("_abs")

    @property
    def asked_at(self) -> datetime:
        return parse_date(self.question_date)

    @property
    def session_times(self) -> tuple[datetime, ...]:
        return tuple(parse_date(d) for d in self.haystack_dates)

    @property
    def turn_count(self) -> int:
        return sum(len(s) for s in self.haystack_sessions)


_DATE = re.compile(r"^\s*(\d{4})[/-](\d{1,2})[/-](\d{1,2})(?:\s*\(\w+\))?(?:\s+(\d{1,2}):(\d{2}))?")


def parse_date(text: str) -> datetime:
    """``2023/05/30 (Tue) 23:40`` (LongMemEval's format; the time is optional) as UTC."""
    m = _DATE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a date like '2023/05/30 (Tue) 23:40'")
    year, month, day, hour, minute = m.groups()
    return datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), tzinfo=UTC)


def load_questions(path: str | Path) -> list[Question]:
    """Every question of a LongMemEval data file, checked."""
    file = Path(path)
    text = read_text(file, DataError, expected="give a LongMemEval JSON file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{file}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}); a LongMemEval file "
            "is one JSON list of questions"
        ) from exc
    if not isinstance(data, list):
        raise DataError(
            f"{file}: expected a JSON list of LongMemEval questions, found a {type(data).__name__}"
        )
    entries = cast(list[Any], data)
    if not entries:
        raise DataError(f"{file}: the list of questions is empty")
    questions = [_question(file, i, entry) for i, entry in enumerate(entries)]
    seen: set[str] = set()
    for i, q in enumerate(questions):
        if q.question_id in seen:
            raise DataError(f"{file}: entry {i}: question_id {q.question_id!r} appears twice")
        seen.add(q.question_id)
    return questions


def select_questions(
    questions: Sequence[Question], *, types: Sequence[str] = (), limit: int | None = None
) -> list[Question]:
    """The questions of the given types (``"abstention"`` picks the ``_abs`` ones), in file
    order, at most ``limit`` of them."""
    unknown = [t for t in types if t not in (*QUESTION_TYPES, ABSTENTION)]
    if unknown:
        raise DataError(
            f"unknown question type {unknown[0]!r}; use one of {', '.join(QUESTION_TYPES)} or "
            f"{ABSTENTION}"
        )
    wanted = set(types)
    chosen = [
        q
        for q in questions
        if not wanted or q.question_type in wanted or (ABSTENTION in wanted and q.abstention)
    ]
    return chosen if limit is None else chosen[: max(0, limit)]


# -- checking one entry --------------------------------------------------------------------------


class _Entry:
    def __init__(self, file: Path, index: int, value: Any) -> None:
        self.file = file
        self.index = index
        self.where = f"{file}: entry {index}"
        if not isinstance(value, dict):
            raise DataError(f"{self.where}: expected a JSON object, found {type(value).__name__}")
        self.value = cast(dict[str, Any], value)
        qid = self.value.get("question_id")
        if isinstance(qid, str):
            self.where += f" (question_id {qid!r})"

    def fail(self, field: str, problem: str) -> DataError:
        return DataError(f"{self.where}: field {field!r} {problem}")

    def get(self, field: str) -> Any:
        if field not in self.value:
            raise self.fail(field, "is missing")
        return self.value[field]

    def text(self, field: str, *, numbers: bool = False) -> str:
        value = self.get(field)
        if isinstance(value, str):
            return value
        if numbers and isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)  # some gold answers are numbers
        raise self.fail(field, f"must be a string, not {type(value).__name__}")

    def strings(self, field: str, *, required: bool = True) -> tuple[str, ...]:
        if not required and field not in self.value:
            return ()
        value = self.get(field)
        if not isinstance(value, list):
            raise self.fail(field, f"must be a list of strings, not {type(value).__name__}")
        items = cast(list[Any], value)
        for j, item in enumerate(items):
            if not isinstance(item, str):
                raise self.fail(f"{field}[{j}]", f"must be a string, not {type(item).__name__}")
        return tuple(cast(list[str], items))


def _question(file: Path, index: int, value: Any) -> Question:
    entry = _Entry(file, index, value)
    qid = entry.text("question_id")
    if not qid:
        raise entry.fail("question_id", "is empty")
    qtype = entry.text("question_type")
    if qtype not in QUESTION_TYPES:
        raise entry.fail(
            "question_type", f"is {qtype!r}; expected one of {', '.join(QUESTION_TYPES)}"
        )
    question_date = entry.text("question_date")
    try:
        parse_date(question_date)
    except ValueError as exc:
        raise entry.fail("question_date", str(exc)) from exc
    dates = entry.strings("haystack_dates")
    for j, d in enumerate(dates):
        try:
            parse_date(d)
        except ValueError as exc:
            raise entry.fail(f"haystack_dates[{j}]", str(exc)) from exc
    session_ids = entry.strings("haystack_session_ids", required=False)
    sessions = _sessions(entry)
    if len(dates) != len(sessions):
        raise entry.fail(
            "haystack_dates", f"has {len(dates)} dates for {len(sessions)} haystack_sessions"
        )
    if session_ids and len(session_ids) != len(sessions):
        raise entry.fail(
            "haystack_session_ids", f"has {len(session_ids)} ids for {len(sessions)} sessions"
        )
    return Question(
        question_id=qid,
        question_type=qtype,
        question=entry.text("question"),
        answer=entry.text("answer", numbers=True),
        question_date=question_date,
        haystack_session_ids=session_ids or tuple(f"session_{j}" for j in range(len(sessions))),
        haystack_dates=dates,
        haystack_sessions=sessions,
        answer_session_ids=entry.strings("answer_session_ids", required=False),
    )


def _sessions(entry: _Entry) -> tuple[tuple[Turn, ...], ...]:
    value = entry.get("haystack_sessions")
    if not isinstance(value, list):
        raise entry.fail("haystack_sessions", "must be a list of sessions (lists of turns)")
    out: list[tuple[Turn, ...]] = []
    for s, session in enumerate(cast(list[Any], value)):
        if not isinstance(session, list):
            raise entry.fail(f"haystack_sessions[{s}]", "must be a list of turns")
        turns: list[Turn] = []
        for t, turn in enumerate(cast(list[Any], session)):
            field = f"haystack_sessions[{s}][{t}]"
            if not isinstance(turn, dict):
                raise entry.fail(field, "must be an object with role and content")
            row = cast(dict[str, Any], turn)
            role, content = row.get("role"), row.get("content")
            if role not in ("user", "assistant"):
                raise entry.fail(f"{field}.role", f"is {role!r}; expected 'user' or 'assistant'")
            if not isinstance(content, str):
                raise entry.fail(f"{field}.content", "must be a string")
            turns.append(
                Turn(
                    role=role,
                    content=content,
                    has_answer=bool(row.get("has_answer", False)),
                )
            )
        out.append(tuple(turns))
    return tuple(out)
