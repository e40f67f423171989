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

from obsmem.proxy.identity import (
    Caller,
    KeyMap,
    Owners,
    api_key_of,
    end_user_of,
    thread_of,
    user_resource,
)
from tests.strict_server import strict_server

from .helpers import memory_aware, running_proxy

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_thread_comes_from_the_header_or_metadata_and_never_from_the_end_user() -> None:
    body: dict[str, Any] = {"metadata": {"thread": "from-meta"}, "user": "from-user"}
    assert thread_of({"x-obsmem-thread": "from-header"}, body) == "from-header"
    assert thread_of({}, body) == "from-meta"
    assert thread_of({}, {"metadata": {"thread_id": "t2"}}) == "t2"
    for fields in ({"user": "u"}, {"safety_identifier": "u"}, {"prompt_cache_key": "chat-9"}):
        assert thread_of({}, fields) is None
    assert end_user_of({"user": " u1 ", "safety_identifier": "s1"}) == "u1"
    assert end_user_of({"safety_identifier": "s1", "prompt_cache_key": "c"}) == "s1"
    assert end_user_of({"prompt_cache_key": "c", "user": ""}) is None
    assert api_key_of({"authorization": "Bearer sk-1"}) == "sk-1"
    assert api_key_of({"api-key": "azure-key"}) == "azure-key"
    assert api_key_of({}) is None


def test_the_end_user_joins_the_owner_in_naming_the_resource_injectively() -> None:
    owners = ["key-abc", "alice", "alice.user-x", "a"]
    users = ["bob", "x", "bob@example.com", "alice", ".user-bob", ""]
    resources = {user_resource(o, u) for o in owners for u in users}
    assert len(resources) == len(owners) * len(users)
    digest = hashlib.sha256(b"bob@example.com").hexdigest()[:32]
    assert user_resource("alice", "bob@example.com") == f"alice.user-{digest}"
    caller = Caller(credential="h", owner="alice")
    assert caller.ref("trip", "bob@example.com").thread == f"alice.user-{digest}:trip"
    assert caller.ref("trip", None).thread == "alice:trip"
    with pytest.raises(ValueError, match="ends like the resource the proxy gives an end user"):
        Owners(resource=f"team.user-{digest}")  # an operator cannot take an end user's id
    with pytest.raises(ValueError, match="has a ':'"):
        Owners(resource="team:a")


def test_a_keys_file_names_resources(tmp_path: Path) -> None:
    digest = hashlib.sha256(b"sk-bob").hexdigest()
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"sk-alice": "alice", f"sha256:{digest}": "bob"}))
    mapped = KeyMap.load(keys)
    assert mapped.resource("sk-alice") == "alice"
    assert mapped.resource("sk-bob") == "bob"
    assert mapped.resource("sk-carol") == "key-" + hashlib.sha256(b"sk-carol").hexdigest()[:24]
    keys.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold one JSON object"):
        KeyMap.load(keys)
    keys.write_text(json.dumps({"sk-x": "team:a"}))
    with pytest.raises(ValueError, match="has a ':'"):
        KeyMap.load(keys)
    keys.write_text(json.dumps({"sk-x": "team.user-" + "0" * 32}))
    with pytest.raises(ValueError, match="ends like the resource the proxy gives an end user"):
        KeyMap.load(keys)
    keys.write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        KeyMap.load(keys)


async def test_two_keys_mapped_to_one_resource_share_a_thread() -> None:
    laptop, phone = "sk-laptop", "sk-phone"
    keys = KeyMap({hashlib.sha256(k.encode()).hexdigest(): "team" for k in (laptop, phone)})
    async with (
        strict_server(answer=memory_aware(lambda body: "Noted.")) as upstream,
        running_proxy(upstream.base_url, owners=Owners(keys), accepted=(laptop, phone)) as proxy,
        httpx.AsyncClient() as http,
    ):
        first = [{"role": "user", "content": "Turn 1: the code word is heron."}]
        await _post(http, proxy.base_url, laptop, first, thread="shared")
        second = [*first, {"role": "assistant", "content": "Noted."}]
        second.append({"role": "user", "content": "Turn 2: what is the code word?"})
        await _post(http, proxy.base_url, phone, second, thread="shared")
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        (thread,) = await memory.threads("team")
        assert thread.id == "team:shared"
        assert len(await memory.messages(thread.id)) == 4  # nothing twice across the two keys


async def _post(
    http: httpx.AsyncClient,
    base: str,
    key: str,
    messages: list[Any],
    *,
    thread: str,
    **fields: str,
) -> httpx.Response:
    reply = await http.post(
        f"{base}/chat/completions",
        json={"model": "local", "messages": messages, **fields},
        headers={"Authorization": f"Bearer {key}", "X-Obsmem-Thread": thread},
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
        running_proxy(upstream.base_url, accepted=("sk-readme",)) as proxy,
        httpx.AsyncClient() as http,
    ):
        path = words[1].removeprefix("http://127.0.0.1:8766/v1")
        reply = await http.post(f"{proxy.base_url}{path}", json=body, headers=headers)
        assert reply.status_code == 200
        assert reply.headers["x-obsmem-memory"] == "on"
        assert reply.json()["choices"][0]["message"]["content"] == "Noted."
