"""A loopback OpenAI-compatible chat-completions server for tests: real HTTP, no network.

It answers like a tiny model: Observer calls (a system prompt that asks for <observations>) get
one observation line per user sentence it was shown; other calls get an answer that repeats a
remembered favorite color when anything it was sent mentions one. It counts requests and tokens.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class LoopbackStats:
    requests: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
    return ""


def answer(body: dict[str, Any]) -> str:
    messages = body.get("messages", [])
    system = "\n".join(
        _text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    )
    everything = "\n".join(_text(m.get("content")) for m in messages)
    if "<observations>" in system and "observ" in system.lower():
        color = re.search(r"favorite colou?r is (\w+)", everything)
        line = (
            f"User stated their favorite color is {color.group(1)}." if color else "User chatted."
        )
        return f"<observations>\nDate: Dec 4, 2025\n* 🔴 (10:00) {line}\n</observations>"
    color = re.search(r"favorite colou?r is (\w+)", everything)
    if color:
        return f"Your favorite color is {color.group(1)}."
    return "Noted."


class _Handler(BaseHTTPRequestHandler):
    stats: LoopbackStats

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        self.stats.requests.append(body)
        text = answer(body)
        payload = {
            "id": f"chatcmpl-{len(self.stats.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "local"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class LoopbackServer:
    """``with LoopbackServer() as server: server.base_url``"""

    def __init__(self) -> None:
        self.stats = LoopbackStats()
        handler = type("Handler", (_Handler,), {"stats": self.stats})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
