"""A loopback OpenAI-compatible chat-completions server for tests: real HTTP, no network, as
strict as llama.cpp's and vLLM's chat templates.

It answers like a tiny model: Observer calls (a system prompt that asks for <observations>) get
one observation line per user sentence it was shown; other calls get an answer that repeats a
remembered favorite color when anything it was sent mentions one. It counts requests and tokens.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

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
        return f"<observations>\nDate: Dec 4, 2025\n* 🔴 (10:00) {line}\n</observations>"
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
