"""Failure state: what stops memory work on a log, stored with it, and what to do about it.

A failed Observer or Reflector cycle leaves a :class:`FailureState` in the metadata of what the
log belongs to (the thread in thread scope, the resource in resource scope; a thread of a
resource log that failed on its own keeps its own). The next success clears it. Every reader
(``Memory.status``, ``obsmem inspect``, the demo and replay summaries, the plot) shows it, so a
memory that stopped working is never silent; :func:`advice` names the fix. The error is
redacted on the way in (and on reading one stored before redaction): it is shown to everyone
who reads the log's state, so no key a provider echoed may stay in it (``obsmem.redaction``).

Pure: no I/O, no store.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, TypeAlias

from .meta_keys import META_FAILURE
from .queue.status import QueueState
from .redaction import redact

__all__ = [
    "FailureState",
    "MemoryStatus",
    "Role",
    "advice",
    "brief",
    "cause_of",
    "failures_in",
    "next_failure",
]


Role: TypeAlias = Literal["observer", "reflector"]
ROLES: tuple[Role, ...] = ("observer", "reflector")


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureState:
    """One role failing for one log (or one thread of a resource log), since ``first_at``."""

    role: Role
    error: str
    """The last error, in words (a server's status and message when it answered)."""
    model: str | None
    first_at: datetime
    last_at: datetime
    count: int
    """Failed cycles since the last success."""
    next_retry_at: datetime | None
    """When the role may be called again (the back-off); None when unknown."""
    left_out: int = 0
    """Messages left out of the actor's context at the last failure (0: none)."""
    thread_id: str | None = None
    """Set when only this thread of a resource log failed (its block missing from answers)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "error": self.error,
            "model": self.model,
            "first_at": self.first_at.isoformat(),
            "last_at": self.last_at.isoformat(),
            "count": self.count,
            "next_retry_at": self.next_retry_at.isoformat() if self.next_retry_at else None,
            "left_out": self.left_out,
            "thread_id": self.thread_id,
        }

    @classmethod
    def from_json(cls, value: object) -> FailureState | None:
        """The state stored as ``value``; None for anything that is not one (never raises)."""
        if not isinstance(value, Mapping):
            return None
        data: Mapping[str, Any] = value  # pyright: ignore[reportUnknownVariableType]
        try:
            role = data["role"]
            if role not in ROLES:
                return None
            retry = data.get("next_retry_at")
            thread = data.get("thread_id")
            return cls(
                role=role,
                error=redact(str(data["error"])),
                model=str(data["model"]) if data.get("model") else None,
                first_at=datetime.fromisoformat(data["first_at"]),
                last_at=datetime.fromisoformat(data["last_at"]),
                count=int(data["count"]),
                next_retry_at=datetime.fromisoformat(retry) if retry else None,
                left_out=int(data.get("left_out") or 0),
                thread_id=thread if isinstance(thread, str) else None,
            )
        except (KeyError, TypeError, ValueError):
            return None

    def summary(self) -> str:
        """One line: who fails, how often since when, the error, and the fix."""
        who = self.role.capitalize() + (f" ({self.model})" if self.model else "")
        where = f" for thread {self.thread_id}" if self.thread_id else ""
        times = "once" if self.count == 1 else f"{self.count} times"
        since = self.first_at.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
        line = f"{who} failed{where} {times} since {since}: {self.error.rstrip('. ')}"
        if self.left_out:
            many = "message" if self.left_out == 1 else "messages"
            line += f"; {self.left_out} {many} left out of the context at the last failure"
        return f"{line}. {advice(self.error, self.model)}"


def failures_in(metadata: Mapping[str, Any] | None) -> dict[Role, FailureState]:
    """The failure states stored in a thread's or resource's metadata, by role."""
    stored = (metadata or {}).get(META_FAILURE)
    if not isinstance(stored, Mapping):
        return {}
    found: dict[Role, FailureState] = {}
    for role in ROLES:
        state = FailureState.from_json(stored.get(role))  # pyright: ignore[reportUnknownMemberType]
        if state is not None:
            found[role] = state
    return found


def next_failure(
    previous: FailureState | None,
    *,
    role: Role,
    error: str,
    model: str | None,
    now: datetime,
    next_retry_at: datetime | None,
    left_out: int,
    thread_id: str | None = None,
) -> FailureState:
    """The state after one more failure (a first one when ``previous`` is None), its error
    redacted."""
    return FailureState(
        role=role,
        error=redact(error),
        model=model,
        first_at=previous.first_at if previous is not None else now,
        last_at=now,
        count=(previous.count if previous is not None else 0) + 1,
        next_retry_at=next_retry_at,
        left_out=left_out,
        thread_id=thread_id,
    )


_VARIABLE = re.compile(r"\b\d[\d.,:]*\s*(?:ms|s|seconds?|minutes?|tokens?)?\b")


def cause_of(error: str) -> str:
    """The error with its changing numbers (times, durations, counts) taken out, so one
    cause is one cause however often it repeats. HTTP statuses are kept."""
    kept = re.sub(r"HTTP (\d{3})", r"HTTP_\1", error)
    return _VARIABLE.sub("#", kept).replace("HTTP_", "HTTP ")[:300]


_HTTP = re.compile(r"HTTP (\d{3}): ([^;]*)")
_STATUS = re.compile(r"status_code: (\d{3})")
_MESSAGE = re.compile(r"""['"]message['"]: (['"])(.*?)\1""")
_CALL = re.compile(r"^the \w+ call to model '[^']*' (?:failed: )?")


def brief(error: str, limit: int = 80) -> str:
    """The cause of ``error`` in a few words (at most ``limit`` characters): the server's status
    and message when it answered (``HTTP 500: the GPU fell over``, ``timed out retrying`` before
    it when the retries ran out of time), else ``timed out``, else the error's first clause."""
    timed_out = "timed out" in error
    if match := _HTTP.search(error):
        words = f"HTTP {match.group(1)}: {match.group(2)}"
    elif (status := _STATUS.search(error)) is not None:
        message = _MESSAGE.search(error)
        words = f"HTTP {status.group(1)}" + (f": {message.group(2)}" if message else "")
    elif timed_out:
        words, timed_out = "timed out", False
    else:
        words = re.split(r"; |\. ", _CALL.sub("", error.strip()), maxsplit=1)[0]
    if timed_out:
        words = f"timed out retrying {words}"
    line = " ".join(words.split()).rstrip(". ")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def advice(error: str, model: str | None = None) -> str:
    """What to do about ``error``, in one sentence."""
    lowered = error.lower()
    name = model or "the memory model"
    if "api key" in lowered or "needs an api key" in lowered:
        return (
            "Fix: set that key, or choose another model with OBSMEM_MODEL or "
            "observational_memory={'model': ...}"
        )
    if "pip install" in lowered:
        return "Fix: install the extra named above"
    if "unknown provider" in lowered or "not understood" in lowered:
        return "Fix: give the model as 'provider/model', e.g. openai/gpt-6.1-terra"
    if re.search(r"http (401|403)", lowered):
        return f"Fix: check the key for {name} (the server refused it)"
    if re.search(r"http 429", lowered):
        return f"Fix: none needed if it passes; {name} is rate-limited, memory retries after it"
    if re.search(r"http 5\d\d", lowered) or "cannot reach" in lowered or "connect" in lowered:
        return f"Fix: check that the server for {name} is up; memory retries by itself"
    if "timed out" in lowered:
        return f"Fix: {name} is slow or away; memory retries by itself (check the server)"
    if "thread block" in lowered or "no block" in lowered or "degenerate" in lowered:
        return f"Fix: {name} does not follow the observation format; try a stronger model"
    return f"Fix: `obsmem doctor --model {name}` checks what the model accepts"


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryStatus:
    """Whether memory works for one conversation, and if not, why and what to do
    (``Memory.status``, ``obsmem inspect``)."""

    thread_id: str
    resource_id: str
    enabled: bool
    """Observational memory is on for this Memory."""
    observer_model: str | None = None
    reflector_model: str | None = None
    model_choice: str | None = None
    """How ``"auto"`` chose the models (None when they were given)."""
    credentials: str | None = None
    """What is missing to call the models (a key, an extra), found without a network call."""
    failures: tuple[FailureState, ...] = ()
    left_out: int = 0
    """Messages the actor's context leaves out now (past ``block_after``, not yet observed)."""
    unobserved_tokens: int = 0
    message_threshold: int = 0
    observation_tokens: int = 0
    observation_threshold: int = 0
    generation: int = 0
    buffered_chunks: int = 0
    queue: QueueState | None = None
    """``background="queue"``: this log's jobs waiting and running, and the workers alive."""

    @property
    def healthy(self) -> bool:
        return self.state in ("off", "healthy")

    @property
    def state(self) -> str:
        """``off``, ``healthy``, ``behind`` (messages left out) or ``failing`` (a role fails,
        the models cannot be called, or the log's queued work has waited too long with no
        worker alive)."""
        if not self.enabled:
            return "off"
        stalled = self.queue is not None and self.queue.stuck
        if self.credentials is not None or self.failures or stalled:
            return "failing"
        return "behind" if self.left_out else "healthy"

    def lines(self) -> list[str]:
        """The status in words, one line per fact."""
        if not self.enabled:
            return ["observational memory is off: the whole thread is sent every turn"]
        models = f"Observer {self.observer_model}, Reflector {self.reflector_model}"
        if self.model_choice:
            models += f" (model 'auto': {self.model_choice})"
        out = [
            f"memory: {self.state}; {models}",
            f"messages {self.unobserved_tokens:,}/{self.message_threshold:,} tokens unobserved, "
            f"log {self.observation_tokens:,}/{self.observation_threshold:,}, "
            f"generation {self.generation}, {self.buffered_chunks} buffered chunks",
        ]
        if self.queue is not None:
            out.append(self.queue.line())
        if self.credentials:
            out.append(f"cannot call the models: {self.credentials}")
        # The live count follows: a stored one is as of the last failure.
        out += [replace(f, left_out=0).summary() for f in self.failures]
        if self.left_out:
            out.append(
                f"{self.left_out} of the oldest messages are left out of the actor's context "
                "until observation catches up"
            )
        return out
