"""Who the proxy serves and whose memory a request reaches: end users, key-less requests,
unknown keys, keys the upstream refuses, and threads stored before end users had resources."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from obsmem.proxy.admission import NOT_ACCEPTED_YET, UPSTREAM_REFUSED
from obsmem.proxy.identity import KeyMap, Owners, user_resource
from obsmem.stores import SQLiteStore
from tests.loopback_openai import is_memory_call
from tests.strict_server import strict_server

from .helpers import (
    KEY,
    FixedUpstream,
    client_requests,
    error_body,
    memory_aware,
    running_proxy,
    system_of,
)
from .test_proxy import echo, texts, turn

OWNER = "key-" + hashlib.sha256(KEY.encode()).hexdigest()[:24]
PASSPORT = "my passport number is X1234567"


async def _chat(
    http: httpx.AsyncClient,
    base: str,
    messages: list[dict[str, Any]],
    *,
    key: str | None = KEY,
    thread: str | None = None,
    **fields: Any,
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    if thread is not None:
        headers["X-Obsmem-Thread"] = thread
    return await http.post(
        f"{base}/chat/completions",
        json={"model": "local", "messages": messages, **fields},
        headers=headers,
    )


async def test_two_conversations_of_one_user_never_share_a_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The issue's case: one end user (the user field), conversation A holds a passport
    number, conversation B starts. Without a thread id both pass through, unmerged, and say
    so; with thread ids each is its own thread of that end user, B's first message stored
    once."""
    caplog.set_level(logging.INFO, logger="obsmem")
    a = [{"role": "user", "content": f"Turn 1: {PASSPORT}."}]
    b = [{"role": "user", "content": "Turn 1: plan a picnic."}]
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url) as proxy,
        httpx.AsyncClient() as http,
    ):
        for _ in range(2):
            for messages in (a, b):
                reply = await _chat(http, proxy.base_url, messages, user="alice")
                assert reply.status_code == 200
                said = reply.headers["x-obsmem-memory"]
                assert said.startswith("off; no thread id (the user and safety_identifier")
                assert "send the X-Obsmem-Thread header" in said
        assert [r["messages"] for r in upstream.requests] == [a, b, a, b]
        assert proxy.proxy.memory_if_made is None  # nothing stored
        told = [r for r in caplog.records if "named no thread" in r.getMessage()]
        assert len(told) == 1
        assert told[0].levelno == logging.WARNING

        a_next = [*a, {"role": "assistant", "content": "Answer to: Turn 1"}]
        a_next.append({"role": "user", "content": "Turn 2: remember it."})
        for messages, thread in ((a, "conv-a"), (a_next, "conv-a"), (b, "conv-b")):
            reply = await _chat(http, proxy.base_url, messages, thread=thread, user="alice")
            assert reply.headers["x-obsmem-memory"] == "on"
        assert PASSPORT not in json.dumps(client_requests(upstream.requests)[-1])
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        resource = user_resource(OWNER, "alice")
        assert sorted(t.id for t in await memory.threads(resource)) == [
            f"{resource}:conv-a",
            f"{resource}:conv-b",
        ]
        stored_b = texts(await memory.messages(f"{resource}:conv-b"))
        assert stored_b == ["Turn 1: plan a picnic.", "Answer to: Turn 1"]


async def test_end_users_of_one_key_never_reach_each_others_memory() -> None:
    """One application key, two end users who both name thread "main" (one by user, one by
    safety_identifier): two threads, and neither one's upstream request holds the other's
    words."""
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url) as proxy,
        httpx.AsyncClient() as http,
    ):
        mine = [{"role": "user", "content": f"Turn 1: {PASSPORT}."}]
        await _chat(http, proxy.base_url, mine, thread="main", user="alice")
        theirs = [{"role": "user", "content": "Turn 1: what do you know about me?"}]
        await _chat(http, proxy.base_url, theirs, thread="main", safety_identifier="bob")
        assert client_requests(upstream.requests)[-1]["messages"] == theirs
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        for user, words in (("alice", PASSPORT), ("bob", "what do you know")):
            (thread,) = await memory.threads(user_resource(OWNER, user))
            assert words in " ".join(texts(await memory.messages(thread.id)))
        assert await memory.threads(OWNER) == []  # the key's own resource holds neither


async def test_a_request_without_a_key_is_refused_unless_the_operator_names_its_owner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="obsmem")
    said = [{"role": "user", "content": turn(0)}]
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url) as proxy,
        httpx.AsyncClient() as http,
    ):
        for thread in ("t", None):
            reply = await _chat(http, proxy.base_url, said, key=None, thread=thread)
            assert reply.status_code == 401
            error = reply.json()["error"]
            assert error["code"] == "missing_api_key"
            assert error["type"] == "invalid_request_error"
            assert "Authorization: Bearer" in error["message"]
            assert "--resource ID" in error["message"]
        assert upstream.requests == []
        assert proxy.proxy.memory_if_made is None
        models = await http.get(f"{proxy.base_url}/models")  # not memory's: the upstream judges
        assert models.status_code == 200
    lines = [r for r in caplog.records if "(refused: 401" in r.getMessage()]
    assert len(lines) == 2
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url, owners=Owners(resource="me"), accepted=(None,)) as proxy,
        httpx.AsyncClient() as http,
    ):
        reply = await _chat(http, proxy.base_url, said, key=None, thread="t")
        assert reply.status_code == 200
        assert reply.headers["x-obsmem-memory"] == "on"
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        assert [t.id for t in await memory.threads("me")] == ["me:t"]


async def test_known_keys_only_refuses_a_key_the_file_does_not_name() -> None:
    keys = KeyMap({hashlib.sha256(b"sk-alice").hexdigest(): "alice"})
    owners = Owners(keys, known_keys_only=True)
    said = [{"role": "user", "content": turn(0)}]
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url, owners=owners, accepted=("sk-alice",)) as proxy,
        httpx.AsyncClient() as http,
    ):
        refused = await _chat(http, proxy.base_url, said, key="sk-mallory", thread="t")
        assert refused.status_code == 401
        error = refused.json()["error"]
        assert error["code"] == "invalid_api_key"
        assert "--known-keys-only" in error["message"]
        assert hashlib.sha256(b"sk-mallory").hexdigest() in error["message"]
        assert upstream.requests == []
        served = await _chat(http, proxy.base_url, said, key="sk-alice", thread="t")
        assert served.headers["x-obsmem-memory"] == "on"
    with pytest.raises(ValueError, match="give the keys with --keys FILE"):
        Owners(known_keys_only=True)


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_a_key_the_upstream_refuses_gets_no_memory_work(tmp_path: Path, stream: bool) -> None:
    """A client whose key the upstream refuses, with a history long enough to observe: it
    gets the upstream's 401, and nothing is stored and no Observer call is made."""
    body = error_body(401, "Incorrect API key provided")
    history: list[dict[str, Any]] = []
    for i in range(20):
        history += [{"role": "user", "content": turn(i)}, {"role": "assistant", "content": "Ok."}]
    store = SQLiteStore(tmp_path / "proxy.db")
    async with (
        FixedUpstream(401, body, {"Content-Type": "application/json"}) as upstream,
        running_proxy(upstream.base_url, store=store, accepted=()) as proxy,
        httpx.AsyncClient() as http,
    ):
        for _ in range(2):
            reply = await _chat(
                http, proxy.base_url, history[:-1], key="sk-bad", thread="t", stream=stream
            )
            assert reply.status_code == 401
            assert reply.content == body
            assert reply.headers["x-obsmem-memory"] == UPSTREAM_REFUSED
        await proxy.proxy.settle()
        assert proxy.proxy.memory_if_made is None
        sent = [json.loads(r) for r in upstream.requests]
        assert len(sent) == 2
        assert not any(is_memory_call(system_of(r)) for r in sent)
    store = SQLiteStore(tmp_path / "proxy.db")
    try:
        assert await store.list_resources() == []
    finally:
        await store.aclose()


async def test_a_key_the_upstream_stops_taking_waits_again() -> None:
    """A key accepted before (as after its first answer) and then refused (revoked): the
    refusal ends memory for it; the next request passes through and stores nothing."""
    body = error_body(401, "key revoked")
    said = [{"role": "user", "content": turn(0)}]
    async with (
        FixedUpstream(401, body, {"Content-Type": "application/json"}) as upstream,
        running_proxy(upstream.base_url) as proxy,
        httpx.AsyncClient() as http,
    ):
        first = await _chat(http, proxy.base_url, said, thread="t")
        assert first.headers["x-obsmem-memory"] == "on"  # accepted before: memory worked
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        stored = len(await memory.messages(f"{OWNER}:t"))
        again = [*said, {"role": "assistant", "content": "Ok."}, {"role": "user", "content": "?"}]
        second = await _chat(http, proxy.base_url, again, thread="t")
        assert second.status_code == 401
        assert second.headers["x-obsmem-memory"] == UPSTREAM_REFUSED
        assert len(await memory.messages(f"{OWNER}:t")) == stored
        assert len(upstream.requests) == 2


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_an_upstream_error_before_the_key_is_accepted_reaches_the_client_unchanged(
    stream: bool,
) -> None:
    """A 500 proves nothing of the key: it reaches the client as it came, and the next
    request of the key still waits for an answer."""
    body = error_body(500, "upstream says 500")
    said = [{"role": "user", "content": turn(0)}]
    async with (
        FixedUpstream(500, body, {"Content-Type": "application/json"}) as upstream,
        running_proxy(upstream.base_url, accepted=()) as proxy,
        httpx.AsyncClient() as http,
    ):
        for _ in range(2):
            reply = await _chat(http, proxy.base_url, said, thread="t", stream=stream)
            assert (reply.status_code, reply.content) == (500, body)
            assert reply.headers["x-obsmem-memory"] == NOT_ACCEPTED_YET
        assert proxy.proxy.memory_if_made is None


async def test_memory_starts_once_the_upstream_accepted_the_key() -> None:
    """A key's first request in this process passes through and is not stored; its answer
    lets memory start, and the next request stores the whole history once. A first request
    too long for the upstream's context also proves the key (the upstream read it), and is
    served again with memory, compacted."""
    from obsmem.testing import scripted_observer, scripted_reflector

    big = {
        "observation": {"messageTokens": 30_000, "bufferTokens": False},
        "reflection": {"observationTokens": 40_000, "model": scripted_reflector()},
    }
    async with (
        strict_server(answer=echo, context_size=1_600) as upstream,
        running_proxy(
            upstream.base_url, options=big, memory_model=scripted_observer(words=3), accepted=()
        ) as proxy,
        httpx.AsyncClient() as http,
    ):
        said = [{"role": "user", "content": turn(0)}]
        first = await _chat(http, proxy.base_url, said, thread="t")
        assert first.status_code == 200
        assert first.headers["x-obsmem-memory"] == NOT_ACCEPTED_YET
        assert proxy.proxy.memory_if_made is None
        said += [first.json()["choices"][0]["message"], {"role": "user", "content": turn(1)}]
        second = await _chat(http, proxy.base_url, said, thread="t")
        assert second.headers["x-obsmem-memory"] == "on"
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        assert len(await memory.messages(f"{OWNER}:t")) == 4

        long: list[dict[str, Any]] = []
        for i in range(40):
            long += [{"role": "user", "content": turn(i)}, {"role": "assistant", "content": "Ok."}]
        reply = await _chat(http, proxy.base_url, long[:-1], key="sk-restarted", thread="t")
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == "Answer to: Turn 39"
        assert reply.headers["x-obsmem-memory"] == "on"
        assert upstream.refusals


async def test_a_thread_the_user_field_named_before_stays_its_end_users() -> None:
    """The proxy once took ``user: alice`` as the thread, storing ``<key resource>:alice``
    (the id a request naming thread "alice" with no end user gets today, which is how this
    test makes it). Alice reaches its memory by naming thread "alice"; another end user who
    names that thread does not."""
    async with (
        strict_server(answer=memory_aware(echo)) as upstream,
        running_proxy(upstream.base_url) as proxy,
        httpx.AsyncClient() as http,
    ):
        history: list[dict[str, Any]] = []
        for i in range(12):
            history.append({"role": "user", "content": turn(i)})
            reply = await _chat(http, proxy.base_url, history, thread="alice")
            history.append(reply.json()["choices"][0]["message"])
            await proxy.proxy.settle()
        memory = proxy.proxy.memory_if_made
        assert memory is not None
        before = len(await memory.messages(f"{OWNER}:alice"))
        assert "User spoke in turn 1." in system_of(client_requests(upstream.requests)[-1])

        question = [{"role": "user", "content": "Turn 99: what did I say in turn 1?"}]
        for user in ("alice", "bob"):
            await _chat(http, proxy.base_url, question, thread="alice", user=user)
        alice, bob = client_requests(upstream.requests)[-2:]
        assert "User spoke in turn 1." in system_of(alice)
        assert "User spoke in turn 1." not in system_of(bob)
        assert len(await memory.messages(f"{OWNER}:alice")) == before + 2
        assert await memory.threads(user_resource(OWNER, "alice")) == []
        (fresh,) = await memory.threads(user_resource(OWNER, "bob"))
        assert fresh.id == f"{user_resource(OWNER, 'bob')}:alice"
