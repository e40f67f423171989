"""A streamed chat completion, read on the side while its bytes pass through unchanged.

:class:`StreamAssembler` is fed the upstream's bytes as they arrive (any split) and rebuilds the
answer the way the client does: the first choice's content, refusal and reasoning pieces
concatenated, and each tool call from its deltas by ``index`` (its id and name from the first
delta, its arguments concatenated). :meth:`StreamAssembler.message` is the answer as an OpenAI
chat message, what the client sends back with its next request.
"""

from __future__ import annotations

import json
from typing import Any, cast

__all__ = ["EventReader", "StreamAssembler"]

_JSON = dict[str, Any]


class EventReader:
    """Reads a stream of server-sent events on the side: fed the bytes as they pass (any
    split), it hands :meth:`event` each ``data:`` line that is a JSON object; then
    :meth:`message` is the answer as an OpenAI chat assistant message (None: nothing came)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while (at := self._buffer.find(b"\n")) >= 0:
            line, self._buffer = self._buffer[:at].rstrip(b"\r"), self._buffer[at + 1 :]
            if not line.startswith(b"data:"):
                continue
            try:
                event = json.loads(line[5:].strip())
            except ValueError:
                continue  # ``[DONE]``, or what is not JSON
            if isinstance(event, dict):
                self.event(cast(_JSON, event))

    def event(self, event: _JSON) -> None:
        raise NotImplementedError

    def message(self) -> _JSON | None:
        raise NotImplementedError


class StreamAssembler(EventReader):
    def __init__(self) -> None:
        super().__init__()
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, _JSON] = {}

    def event(self, event: _JSON) -> None:
        choices = event.get("choices")
        if isinstance(choices, list):
            for choice in cast(list[Any], choices):
                if isinstance(choice, dict) and cast(_JSON, choice).get("index", 0) == 0:
                    self._choice(cast(_JSON, choice))

    def _choice(self, choice: _JSON) -> None:
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        d = cast(_JSON, delta)
        for name, into in (
            ("content", self._content),
            ("refusal", self._refusal),
            ("reasoning_content", self._reasoning),
        ):
            piece = d.get(name)
            if isinstance(piece, str):
                into.append(piece)
        calls = d.get("tool_calls")
        if isinstance(calls, list):
            for position, raw in enumerate(cast(list[Any], calls)):
                if isinstance(raw, dict):
                    self._call(cast(_JSON, raw), position)

    def _call(self, delta: _JSON, position: int) -> None:
        index = delta.get("index")
        key = index if isinstance(index, int) else position
        call = self._calls.setdefault(
            key, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if isinstance(delta.get("id"), str) and delta["id"]:
            call["id"] = delta["id"]
        if isinstance(delta.get("type"), str):
            call["type"] = delta["type"]
        fn = delta.get("function")
        if isinstance(fn, dict):
            f = cast(_JSON, fn)
            target = cast(_JSON, call["function"])
            if isinstance(f.get("name"), str):
                target["name"] = target["name"] + f["name"] if target["name"] else f["name"]
            if isinstance(f.get("arguments"), str):
                target["arguments"] += f["arguments"]

    def message(self) -> _JSON | None:
        if not (self._content or self._refusal or self._reasoning or self._calls):
            return None
        out: _JSON = {"role": "assistant", "content": "".join(self._content) or None}
        if self._reasoning:
            out["reasoning_content"] = "".join(self._reasoning)
        if self._refusal:
            out["refusal"] = "".join(self._refusal)
        if self._calls:
            out["tool_calls"] = [
                {**call, "id": call["id"] or f"call_{index}"}
                for index, call in sorted(self._calls.items())
            ]
        return out
