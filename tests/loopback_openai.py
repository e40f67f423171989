"""A loopback OpenAI-compatible chat-completions server for tests: real HTTP, no network, as
strict as llama.cpp's and vLLM's chat templates.

It answers like a tiny model: Observer calls (a system prompt that asks for <observations>) get
one observation line per user sentence it was shown; other calls get an answer that repeats a
remembered favorite color when anything it was sent mentions one. It counts requests and tokens.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

from .strict_server import StrictServer, strict_server_thread


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
    return ""


def is_memory_call(system: str) -> bool:
    """Whether a system prompt is the Observer's or the Reflector's (an actor with memory has
    ``<observations>`` in its system prompt too, but not the output format)."""
    return "<observations>" in system and "## Output format" in system


def answer(body: dict[str, Any]) -> str:
    messages = body.get("messages", [])
    system = "\n".join(
        _text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    )
    everything = "\n".join(_text(m.get("content")) for m in messages)
    if is_memory_call(system):
        color = re.search(r"favorite colou?r is (\w+)", everything)
        line = (
            f"User stated their favorite color is {color.group(1)}." if color else "User chatted."
        )
        # A line per ten messages shown, as a model that notes what it reads writes.
        said = re.findall(r"^(?:User|Assistant)(?: \([^)]*\))?: (.{0,40})", everything, re.M)
        lines = "".join(f"* 🟡 (10:00) Message: {text}\n" for text in said[::10])
        return f"<observations>\nDate: Dec 4, 2025\n* 🔴 (10:00) {line}\n{lines}</observations>"
    color = re.search(r"favorite colou?r is (\w+)", everything)
    if color:
        return f"Your favorite color is {color.group(1)}."
    return "Noted."


class LoopbackServer:
    """``with LoopbackServer() as server: server.base_url``: the strict server
    (:mod:`tests.strict_server`: string content, one leading system message, alternating roles,
    streaming) answering like the tiny model above, on its own thread."""

    def __init__(
        self,
        *,
        reject_params: frozenset[str] = frozenset(),
        model_id: str = "local",
        named_model_only: bool = False,
    ) -> None:
        self._kwargs: dict[str, Any] = {
            "answer": answer,
            "reject_params": reject_params,
            "model_id": model_id,
            "named_model_only": named_model_only,
        }
        self._context: contextlib.AbstractContextManager[StrictServer] | None = None
        self.server: StrictServer | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return self.server.base_url

    @property
    def stats(self) -> StrictServer:
        """``stats.requests``: every request body; ``stats.refusals``: the rules broken."""
        assert self.server is not None
        return self.server

    def __enter__(self) -> LoopbackServer:
        self._context = strict_server_thread(**self._kwargs)
        self.server = self._context.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._context is not None
        self._context.__exit__(None, None, None)


class LocalRun(NamedTuple):
    """A program run by :func:`run_on_a_local_server`: how it ended, the model names its
    requests asked for, and the rules of the server they broke."""

    result: subprocess.CompletedProcess[str]
    models: set[Any]
    refusals: list[str]


def run_on_a_local_server(
    args: list[str], cwd: Path, *, model_id: str = "qwen2.5:0.5b", timeout: float = 180
) -> LocalRun:
    """``python args...`` as a new user with a local server runs it: only ``OPENAI_BASE_URL``
    set (no API key, no ``OBSMEM_MODEL``), pointing at a server that serves one named model and
    refuses any other, as vLLM and Ollama do."""
    with LoopbackServer(model_id=model_id, named_model_only=True) as server:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env.pop("OBSMEM_MODEL", None)
        env["OPENAI_BASE_URL"] = server.base_url
        result = subprocess.run(
            [sys.executable, *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        return LocalRun(
            result, {r.get("model") for r in server.stats.requests}, list(server.stats.refusals)
        )
