"""Shared pieces of the benchmarks.

Synthetic conversations, the LoCoMo location, the o200k counter, a loopback OpenAI-compatible
server that answers memory prompts and counts the tokens it was sent, and the output helpers.
Every benchmark prints its results as ``RATIO <name>: <value>`` lines (what the claims rest on,
measured side by side in one run) plus absolute numbers as context.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import platform
import random
import re
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from obsmem.messages import Message

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# The test suite's throwaway PostgreSQL server, for the benchmarks that measure PostgreSQL too.
from tests.postgres_server import create_database as create_database  # noqa: E402
from tests.postgres_server import postgres_admin_dsn as postgres_admin_dsn  # noqa: E402

LOCOMO_DIR = ROOT.parent / "shared" / "data" / "locomo10"
"""The LoCoMo conversations, read in place (never copied into the repository)."""

T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)

# Plain English vocabulary, so the heuristic and o200k agree roughly on the synthetic text.
_VOCABULARY = """
the a to and of in we it is for that you this on with be have can will my our plan meeting budget
travel project design review release deploy database migration customer invoice schedule garden
recipe coffee morning evening weekend friday monday doctor appointment flight hotel booking price
quote team manager report draft email call friend family birthday present gift book movie music
concert ticket train station kitchen window paint color blue green red yellow dog cat walk park run
swim gym decided prefer likes wants needs moved started finished changed asked told said because
although however later yesterday tomorrow today next last week month year
"""
_WORDS = _VOCABULARY.split()


def text_of(tokens: int, rng: random.Random) -> str:
    """About ``tokens`` heuristic tokens of sentence-shaped filler."""
    words: list[str] = []
    target = max(1, int(tokens / 1.3))
    while len(words) < target:
        sentence = [rng.choice(_WORDS) for _ in range(rng.randint(6, 14))]
        sentence[0] = sentence[0].capitalize()
        words.extend(sentence)
        words[-1] += "."
    return " ".join(words[:target])


@dataclass
class Talk:
    """A synthetic two-party conversation with increasing timestamps."""

    seed: int = 0
    user_tokens: int = 60
    assistant_tokens: int = 140
    minutes_per_turn: int = 3
    now: datetime = T0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def turn(self) -> tuple[Message, Message]:
        self.now += timedelta(minutes=self.minutes_per_turn)
        user = Message.user(text_of(self.user_tokens, self.rng), created_at=self.now)
        reply_at = self.now + timedelta(seconds=20)
        reply = Message.assistant(text_of(self.assistant_tokens, self.rng), created_at=reply_at)
        return user, reply

    def messages(self, turns: int) -> list[Message]:
        out: list[Message] = []
        for _ in range(turns):
            out.extend(self.turn())
        return out


def locomo_files() -> list[Path]:
    """The LoCoMo conversation files, when the shared data is next to the repository."""
    if not LOCOMO_DIR.is_dir():
        return []
    return sorted(LOCOMO_DIR.glob("*.json"))


# -- output --------------------------------------------------------------------------------------


def header(title: str, **settings: Any) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# {title}")
    print(
        f"# {now}; Python {platform.python_version()}; {os.cpu_count()} CPUs; "
        f"{platform.system()} {platform.machine()}"
    )
    if settings:
        print("# settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    sys.stdout.flush()


def ratio(name: str, value: float | None, note: str = "") -> None:
    """One measured ratio, in the line format the smoke test looks for."""
    shown = "n/a" if value is None or math.isnan(value) else f"{value:.2f}x"
    print(f"RATIO {name}: {shown}" + (f"  ({note})" if note else ""))
    sys.stdout.flush()


def table(rows: Sequence[Sequence[Any]], headings: Sequence[str]) -> None:
    cells = [[str(h) for h in headings], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headings))]
    for n, row in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if n == 0:
            print("  ".join("-" * w for w in widths))
    sys.stdout.flush()


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100])."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


# -- token counting ------------------------------------------------------------------------------


class Counter:
    """o200k counts when the ``tiktoken`` extra is installed, else obsmem's heuristic."""

    def __init__(self) -> None:
        from obsmem.errors import MissingExtraError
        from obsmem.tokens import HeuristicEstimator, TiktokenEstimator

        try:
            estimator: Any = TiktokenEstimator()
            estimator.count_text("warm up")
            self.name = "o200k"
        except MissingExtraError:
            estimator = HeuristicEstimator()
            self.name = "heuristic"
        self._estimator = estimator

    def text(self, text: str) -> int:
        return int(self._estimator.count_text(text))

    def chat(self, messages: Sequence[dict[str, Any]]) -> int:
        """OpenAI's chat accounting: 3 tokens a message plus its content, 3 to prime the reply."""
        total = 3
        for m in messages:
            total += 3 + self.text(_content_text(m.get("content")))
        return total


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return ""


# -- loopback OpenAI-compatible server -----------------------------------------------------------

_LINE = re.compile(r"^(User|Assistant)(?: \(([^)]*)\))?: (.*)$")
_DATE = re.compile(r"^([A-Z][a-z]{2}) (\d{1,2}) (\d{4}):$")
_MEM0_LINE = re.compile(r"^(user|assistant): (.*)$")


def _observe(transcript: str, words: int = 6) -> str:
    """One dated line per message, its first ``words`` words: what a small Observer would
    write (about 0.4 of the transcript; twelve words made it 0.8, past the output cap of half
    the input, which a real Observer compressing 3-6x never meets)."""
    out: list[str] = []
    clock = "00:00"
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
            with contextlib.suppress(ValueError):
                clock = datetime.strptime(when, "%I:%M %p").strftime("%H:%M")
        mark = "🔴" if who == "User" else "🟡"
        out.append(f"* {mark} ({clock}) {who} said: {' '.join(text.split()[:words])}")
    body = "\n".join(out) or "* 🟡 (00:00) Nothing new."
    return f"<observations>\n{body}\n</observations>"


def _reflect(log: str, keep: float = 0.5, words: int = 8) -> str:
    lines = [ln for ln in log.splitlines() if ln.strip()]
    bullets = [ln for ln in lines if not ln.startswith("Date:") and "<" not in ln]
    kept = set(bullets[int(len(bullets) * (1 - keep)) :])
    out = [
        ln if ln.startswith("Date:") else " ".join(ln.split()[: words + 3])
        for ln in lines
        if ln.startswith("Date:") or ln in kept
    ]
    return "<observations>\n" + ("\n".join(out) or "* ✅ (00:00) Nothing.") + "\n</observations>"


def _mem0_facts(prompt: str, words: int = 12) -> str:
    """mem0's additive extraction: one short memory per message in the "New Messages" part."""
    # The system prompt describes the sections too: the user prompt's own section is the last.
    section = prompt.rsplit("## New Messages", 1)[-1].split("\n## ", 1)[0]
    memories = []
    for raw in section.splitlines():
        m = _MEM0_LINE.match(raw.strip())
        if m is not None and m.group(2).strip():
            who = "User" if m.group(1) == "user" else "Assistant"
            memories.append({"text": f"{who} said: " + " ".join(m.group(2).split()[:words])})
    return json.dumps({"memory": memories})


def answer(messages: Sequence[dict[str, Any]]) -> str:
    everything = "\n".join(_content_text(m.get("content")) for m in messages)
    if "## New Message History to Observe" in everything:
        return _observe(everything.split("## New Message History to Observe", 1)[1])
    if "## Observations to Reflect On" in everything:
        log = everything.split("## Observations to Reflect On", 1)[1].split("\n---", 1)[0]
        return _reflect(log)
    if "## New Messages" in everything:
        return _mem0_facts(everything)
    return "Noted."


def fake_embedding(text: str, dims: int) -> list[float]:
    """A deterministic bag-of-words vector (hashed words), L2-normalised."""
    vec = [0.0] * dims
    for word in re.findall(r"\w+", text.lower()):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "big")
        vec[h % dims] += 1.0 if (h >> 32) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


@dataclass
class Usage:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embedding_requests: int = 0
    embedding_tokens: int = 0


class CountingServer:
    """A loopback OpenAI-compatible server (chat completions and embeddings).

    It answers Observer, Reflector and mem0 extraction prompts like a tiny deterministic model
    and counts what it was sent, per ``model`` name: ``with CountingServer() as s: s.base_url``.
    """

    def __init__(self, counter: Counter | None = None, *, dims: int = 64) -> None:
        self.counter = counter or Counter()
        self.dims = dims
        self.usage: dict[str, Usage] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path.rstrip("/").endswith("/embeddings"):
                    payload = server._embed(body)
                else:
                    payload = server._chat(body)
                    if body.get("stream"):  # memory-model calls stream (output caps)
                        self._stream(payload)
                        return
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, payload: dict[str, Any]) -> None:
                """The answer as server-sent events: the text, then the end with usage."""
                choice = payload["choices"][0]
                base = {k: payload[k] for k in ("id", "created", "model")}
                chunks = [
                    {
                        **base,
                        "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": choice["message"]}],
                    },
                    {
                        **base,
                        "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                        "usage": payload["usage"],
                    },
                ]
                data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                encoded = data.encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(encoded)))
                self.end_headers()
                self.wfile.write(encoded)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _usage(self, model: str) -> Usage:
        return self.usage.setdefault(model, Usage())

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages", [])
        text = answer(messages)
        prompt = self.counter.chat(messages)
        completion = self.counter.text(text)
        model = str(body.get("model", "local"))
        with self._lock:
            usage = self._usage(model)
            usage.requests += 1
            usage.prompt_tokens += prompt
            usage.completion_tokens += completion
            number = usage.requests
        return {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }

    def _embed(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = body.get("input", [])
        texts = [inputs] if isinstance(inputs, str) else [str(t) for t in inputs]
        dims = int(body.get("dimensions") or self.dims)
        tokens = sum(self.counter.text(t) for t in texts)
        with self._lock:
            usage = self._usage(str(body.get("model", "embedder")))
            usage.embedding_requests += 1
            usage.embedding_tokens += tokens
        return {
            "object": "list",
            "model": body.get("model", "embedder"),
            "data": [
                {"object": "embedding", "index": i, "embedding": fake_embedding(t, dims)}
                for i, t in enumerate(texts)
            ],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> CountingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@contextlib.asynccontextmanager
async def proxy_process(
    upstream: str, *options: str
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """``obsmem proxy`` as the command runs (its own process, on any free port, with
    ``options``), once it serves: its base URL and the process, killed at the end if still
    running."""
    import httpx

    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(ROOT / "src")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "obsmem", "proxy", "--upstream", upstream, "--port", "0", *options),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        found = re.search(r"(http://\S+/v1) ->", line)
        if found is None:
            raise SystemExit(
                f"the proxy did not start: {line}{(await process.stderr.read()).decode()}"
            )
        async with httpx.AsyncClient() as http:  # serving (a signal before that ends it at once)
            (await http.get(f"{found.group(1)}/models")).raise_for_status()
        yield found.group(1), process
    finally:
        if process.returncode is None:
            process.kill()
        await process.communicate()
