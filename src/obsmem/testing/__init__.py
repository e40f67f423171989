"""Scripted Observer and Reflector models for tests, demos and benchmarks that run offline.

``scripted_observer()`` and ``scripted_reflector()`` return pydantic-ai ``FunctionModel``s that
answer in obsmem's pinned formats without any network: the Observer writes one dated, prioritised
line per message it is shown; the Reflector keeps the dates and shortens the lines. Both accept a
``fault`` function that can make any call fail in a chosen way, which is how the failure and
fuzz tests inject faults.

The store contract, a pytest suite a store of your own can run, is the subpackage
:mod:`obsmem.testing.store_conformance` (imported on its own: it needs pytest).
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, TypeAlias

from pydantic_ai import messages as pa
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.models.function import AgentInfo, FunctionModel

__all__ = ["Fault", "ModelCalls", "scripted_observer", "scripted_reflector"]

Fault: TypeAlias = Literal[
    "error", "transient", "hang", "empty", "degenerate", "untagged", "nothing-to-note"
]
"""How a scripted call fails: a non-retryable error, an HTTP 503, never answering, an empty
answer, a degenerate (repeating) answer, list lines without the ``<observations>`` tags, or a
well-formed empty block with hints (``nothing-to-note``: the answer to small talk)."""
FaultFn: TypeAlias = Callable[[int], Fault | None]

_LINE = re.compile(r"^(User|Assistant|Tool Result [^:]*|Tool Call [^:(]*)(?: \(([^)]*)\))?: (.*)$")
_DATE = re.compile(r"^([A-Z][a-z]{2}) (\d{1,2}) (\d{4}):$")
_THREAD = re.compile(r'<thread id="([^"]+)">\n(.*?)\n</thread>', re.DOTALL)


@dataclass(slots=True)
class ModelCalls:
    """What a scripted model was asked: the user text of each call, in order."""

    prompts: list[str] = field(default_factory=list[str])

    @property
    def count(self) -> int:
        return len(self.prompts)


def _user_text(messages: list[pa.ModelMessage]) -> str:
    texts: list[str] = []
    for message in messages:
        if isinstance(message, pa.ModelRequest):
            for part in message.parts:
                if isinstance(part, pa.UserPromptPart):
                    content = part.content
                    if isinstance(content, str):
                        texts.append(content)
                    else:
                        texts.extend(c for c in content if isinstance(c, str))
    return "\n".join(texts)


async def _apply_fault(fault: Fault | None) -> str | None:
    if fault is None:
        return None
    if fault == "error":
        raise ValueError("scripted model failure")
    if fault == "transient":
        raise ModelHTTPError(status_code=503, model_name="scripted", body="overloaded")
    if fault == "hang":
        await asyncio.Event().wait()
    if fault == "empty":
        return ""
    if fault == "degenerate":
        return "<observations>\n" + "* 🟡 the same thing again and again\n" * 400
    if fault == "nothing-to-note":  # the format followed, and nothing worth keeping
        return (
            "<observations>\n</observations>\n"
            "<current-task>Answer the user's small talk.</current-task>\n"
            "<suggested-response>Say you are glad to help.</suggested-response>"
        )
    return None


def _observe_lines(transcript: str, words: int) -> list[str]:
    out: list[str] = []
    time = "00:00"
    for raw in transcript.splitlines():
        line = raw.strip()
        if m := _DATE.match(line):
            out.append(f"Date: {m.group(1)} {m.group(2)}, {m.group(3)}")
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        who, when, text = m.groups()
        if when:
            time = datetime.strptime(when, "%I:%M %p").strftime("%H:%M")
        short = " ".join(text.split()[:words])
        mark = "🔴" if who == "User" else "🟡"
        out.append(f"* {mark} ({time}) {who} said: {short}")
    return out


def _scripted_model(
    name: str,
    respond: Callable[[str, int], str],
    *,
    fault: FaultFn | None,
    calls: ModelCalls | None,
    wait: Callable[[], Awaitable[None]] | None = None,
) -> FunctionModel:
    """A FunctionModel that records each prompt in ``calls``, awaits ``wait()``, then answers
    call ``n`` (0-based) with its ``fault(n)`` when there is one, else ``respond(prompt, n)``."""
    counter = itertools.count()

    async def answer(messages: list[pa.ModelMessage], info: AgentInfo) -> pa.ModelResponse:
        n = next(counter)
        text = _user_text(messages)
        if calls is not None:
            calls.prompts.append(text)
        if wait is not None:
            await wait()
        faulty = await _apply_fault(fault(n) if fault else None)
        content = respond(text, n) if faulty is None else faulty
        return pa.ModelResponse(parts=[pa.TextPart(content=content)])

    return FunctionModel(answer, model_name=name)


def scripted_observer(
    *,
    words: int = 12,
    fault: FaultFn | None = None,
    delay: float = 0.0,
    gate: asyncio.Event | None = None,
    calls: ModelCalls | None = None,
) -> FunctionModel:
    """An Observer that writes one line per message (its first ``words`` words).

    ``gate``: each call waits for this event (a slow Observer under the test's control);
    ``delay``: each call sleeps that long first; ``fault(n)`` may fail call ``n`` (0-based).
    """

    async def wait() -> None:
        if gate is not None:
            await gate.wait()
        if delay:
            await asyncio.sleep(delay)

    def respond(text: str, n: int) -> str:
        transcript = text.split("## New Message History to Observe", 1)[-1]
        threads = _THREAD.findall(transcript)
        if threads:
            body = "\n".join(
                f'<thread id="{tid}">\n' + "\n".join(_observe_lines(t, words)) + "\n</thread>"
                for tid, t in threads
            )
        else:
            body = "\n".join(_observe_lines(transcript, words))
        if fault is not None and fault(n) == "untagged":
            return body
        tail = "<current-task>Keep helping with the latest request.</current-task>\n"
        tail += "<suggested-response>Answer the newest message.</suggested-response>"
        return f"<observations>\n{body}\n</observations>\n{tail}"

    return _scripted_model("scripted-observer", respond, fault=fault, calls=calls, wait=wait)


def scripted_reflector(
    *,
    keep: float = 0.5,
    words: int = 8,
    fault: FaultFn | None = None,
    calls: ModelCalls | None = None,
) -> FunctionModel:
    """A Reflector that keeps every date line, the first 🔴 line under each date, and the newest
    ``keep`` share of the other lines, each cut to ``words`` words."""

    def respond(text: str, n: int) -> str:
        # The whole log: up to the prompt's own "---" line (message-boundary lines stay in).
        shown = text.split("## Observations to Reflect On", 1)[-1]
        log = re.split(r"\n---\n", shown, maxsplit=1)[0]
        lines = [ln for ln in log.splitlines() if ln.strip()]
        date = ""
        bullets = [ln for ln in lines if ln.lstrip().startswith("* ") and "<" not in ln]
        kept = set(bullets[int(len(bullets) * (1 - keep)) :])
        date_seen: set[str] = set()  # and the first 🔴 line under each date (user assertions)
        for line in lines:
            if line.startswith("Date:"):
                date = line
            elif "🔴" in line and date not in date_seen:
                date_seen.add(date)
                kept.add(line)
        out: list[str] = []
        for line in lines:
            if line.startswith("Date:"):
                out.append(line)
            elif line in kept:
                out.append(" ".join(line.split()[: words + 3]))
        body = "\n".join(out) or "* ✅ (00:00) Nothing left worth keeping."
        return f"<observations>\n{body}\n</observations>"

    return _scripted_model("scripted-reflector", respond, fault=fault, calls=calls)
