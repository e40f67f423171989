"""Which thread and whose memory a proxied request is."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path
from typing import Any

import httpx
import pytest

from obsmem.proxy.identity import KeyMap, api_key_of, thread_of
from tests.strict_server import strict_server

from .helpers import memory_aware, running_proxy

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_thread_comes_from_the_header_then_metadata_then_user() -> None:
    body: dict[str, Any] = {"metadata": {"thread": "from-meta"}, "user": "from-user"}
    assert thread_of({"x-obsmem-thread": "from-header"}, body) == "from-header"
    assert thread_of({}, body) == "from-meta"
    assert thread_of({}, {"metadata": {"thread_id": "t2"}}) == "t2"
    assert thread_of({}, {"user": "from-user"}) == "from-user"
    assert thread_of({}, {"metadata": {"other": 1}}) is None
    assert api_key_of({"authorization": "Bearer sk-1"}) == "sk-1"
    assert api_key_of({"api-key": "azure-key"}) == "azure-key"
    assert api_key_of({}) is None


def test_a_keys_file_names_resources(tmp_path: Path) -> None:
    digest = hashlib.sha256(b"sk-bob").hexdigest()
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"sk-alice": "alice", f"sha256:{digest}": "bob"}))
    mapped = KeyMap.load(keys)
    assert mapped.resource("sk-alice") == "alice"
    assert mapped.resource("sk-bob") == "bob"
    assert mapped.resource("sk-carol") == "key-" + hashlib.sha256(b"sk-carol").hexdigest()[:24]
    assert mapped.resource(None) == "anonymous"
    keys.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold one JSON object"):
        KeyMap.load(keys)
    keys.write_text(json.dumps({"sk-x": "team:a"}))
    with pytest.raises(ValueError, match="has a ':'"):
        KeyMap.load(keys)
    keys.write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        KeyMap.load(keys)


async def test_two_keys_mapped_to_one_resource_share_a_thread() -> None:
    async with (
        strict_server(answer=memory_aware(lambda body: "Noted.")) as upstream,
        running_proxy(
            upstream.base_url,
            keys=KeyMap(
                {
                    hashlib.sha256(k).hexdigest(): "team"
                    for k in (
                        b"sk-laptop",
                        b"sk-phone",
                    )
                }
            ),
        ) as proxy,
        httpx.AsyncClient() as http,
    ):
        first = [{"role": "user", "content": "Turn 1: the code word is heron."}]
        await _post(http, proxy.base_url, "sk-laptop", first, user="shared")
        second = [*first, {"role": "assistant", "content": "Noted."}]
        second.append({"role": "user", "content": "Turn 2: what is the code word?"})
        await _post(http, proxy.base_url, "sk-phone", second, user="shared")
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        (thread,) = await memory.threads("team")
        assert thread.id == "team:shared"
        assert len(await memory.messages(thread.id)) == 4  # nothing twice across the two keys


async def _post(
    http: httpx.AsyncClient, base: str, key: str, messages: list[Any], *, user: str
) -> httpx.Response:
    reply = await http.post(
        f"{base}/chat/completions",
        json={"model": "local", "messages": messages, "user": user},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert reply.status_code == 200
    assert reply.headers["x-obsmem-memory"] == "on"
    return reply


async def test_the_readme_curl_request_works() -> None:
    """The README's curl example, sent as written (its headers and body) through a proxy."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"```\n(curl http://127\.0\.0\.1:8766/v1/chat/completions.*?)```", text, re.S)
    assert block is not None
    words = shlex.split(block.group(1).replace("\\\n", " "))
    headers = dict(words[i + 1].split(": ", 1) for i, w in enumerate(words) if w == "-H")
    body = json.loads(words[words.index("-d") + 1])
    headers["Authorization"] = "Bearer sk-readme"
    async with (
        strict_server(answer=memory_aware(lambda body: "Noted.")) as upstream,
        running_proxy(upstream.base_url) as proxy,
        httpx.AsyncClient() as http,
    ):
        path = words[1].removeprefix("http://127.0.0.1:8766/v1")
        reply = await http.post(f"{proxy.base_url}{path}", json=body, headers=headers)
        assert reply.status_code == 200
        assert reply.headers["x-obsmem-memory"] == "on"
        assert reply.json()["choices"][0]["message"]["content"] == "Noted."
