"""``obsmem mcp`` driven by the official MCP SDK's own client, as an MCP client would: over
stdio (the client starts ``python -m obsmem mcp``) and over streamable HTTP (a real server on a
free loopback port), on a SQLite file and on PostgreSQL. The Observer is the loopback
OpenAI-compatible server, found through ``OBSMEM_MODEL`` and ``OPENAI_BASE_URL`` as a user
would set them."""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult, TextContent

from .loopback_openai import LoopbackServer, answer, is_memory_call
from .strict_server import strict_server_thread

SRC = Path(__file__).resolve().parents[1] / "src"
FACT = "My favorite color is blue, and my locker code is 4417-B."


def _env(model_url: str | None) -> dict[str, str]:
    env = {"PYTHONPATH": str(SRC), "OBSMEM_MODEL": "openai/local-test"}
    if model_url is not None:
        env["OPENAI_BASE_URL"] = model_url
    return env


def _command(db: str, *flags: str) -> list[str]:
    return ["-m", "obsmem", "mcp", "--db", db, *flags]


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The ``--db`` the server is given: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "memory.db")
    return str(request.getfixturevalue("postgres_dsn"))


@contextlib.asynccontextmanager
async def stdio(
    db: str, *flags: str, model_url: str | None, log: IO[str] | None = None
) -> AsyncIterator[Client]:
    """A client of ``obsmem mcp`` started over stdio, as an MCP client starts it."""
    params = StdioServerParameters(
        command=sys.executable,
        args=_command(db, *flags),
        env=_env(model_url),
        cwd=tempfile.gettempdir(),
    )
    transport = stdio_client(params, errlog=log) if log is not None else params
    async with Client(transport, read_timeout_seconds=120) as client:
        yield client


@contextlib.contextmanager
def http_server(db: str, *flags: str, model_url: str | None) -> Iterator[str]:
    """``obsmem mcp --transport http --port 0`` in a process of its own; yields its URL, read
    from the line it prints once it listens."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(_env(model_url))
    process = subprocess.Popen(
        [sys.executable, *_command(db, "--transport", "http", "--port", "0", *flags)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            ready = selector.select(timeout=60)
        line = process.stdout.readline() if ready else ""
        assert " at http://127.0.0.1:" in line, (line, process.poll())
        yield line.rsplit(" at ", 1)[1].strip()
    finally:
        process.terminate()
        _, err = process.communicate(timeout=60)
        assert "Traceback" not in err, err


def text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def data(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, text(result)
    return result.structured_content


async def ok(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
    result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, text(result)
    return result


async def refused(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, text(result)
    return text(result)


def chat(*turns: str) -> list[dict[str, str]]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]


FILLER = (
    "Let us keep planning the trip: the train leaves at nine, the hotel is near the old "
    "harbour, and we still have to choose a restaurant for the second evening."
)


def memory_calls(server: LoopbackServer) -> list[dict[str, Any]]:
    return [
        r
        for r in server.stats.requests
        if is_memory_call(str((r.get("messages") or [{}])[0].get("content")))
    ]


# -- over stdio ----------------------------------------------------------------------------------


async def test_stdio_remember_then_recall_finds_the_exact_wording(db: str) -> None:
    async with stdio(db, "--resource", "alice", model_url=None) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {"recall", "memory_context", "remember", "memory_status"}
        stored = data(await ok(client, "remember", {"messages": chat(FACT, "Noted.")}))
        assert [m["seq"] for m in stored["stored"]] == [1, 2]
        assert stored["thread_id"] == "mcp:alice"
        answer = text(await ok(client, "recall", {"mode": "messages"}))
        assert FACT in answer
        # Paging on from a message id the answer gave, as the model would.
        first = stored["stored"][0]["id"]
        again = text(await ok(client, "recall", {"cursor": first, "part_index": 0}))
        assert FACT in again
        listed = text(await ok(client, "recall", {"mode": "threads"}))
        assert "mcp:alice" in listed


async def test_a_remember_sent_again_with_ids_stores_its_messages_once(db: str) -> None:
    """A client that retries after a lost answer sends the same ids: nothing is stored twice,
    and the answer says what was there already."""
    messages = [{**m, "id": f"m{i}"} for i, m in enumerate(chat(FACT, "Noted."))]
    async with stdio(db, "--resource", "alice", model_url=None) as client:
        first = data(await ok(client, "remember", {"messages": messages}))
        again = await ok(client, "remember", {"messages": messages})
        more = data(await ok(client, "remember", {"messages": [*messages, *chat("And red.")]}))
        same = await refused(client, "remember", {"messages": [messages[0], messages[0]]})
        bad = await refused(client, "remember", {"messages": [{**messages[0], "id": 7}]})
        listed = text(await ok(client, "recall", {"mode": "messages"}))
    assert [m["seq"] for m in first["stored"]] == [1, 2]
    assert first["already_stored"] == []
    assert data(again)["already_stored"] == [m["id"] for m in first["stored"]]
    assert text(again).startswith("Nothing new stored in conversation 'mcp:alice'.")
    assert [m["seq"] for m in more["stored"]] == [1, 2, 3]
    assert listed.count(FACT) == 1
    assert "messages[1].id is also the id of messages[0]" in same
    assert "messages[0].id must be a string, not the number 7" in bad


async def test_stdio_memory_context_shows_the_log_after_an_observation(db: str) -> None:
    flags = ("--resource", "alice", "--message-tokens", "300", "--buffer-tokens", "off")
    with LoopbackServer() as model:
        async with stdio(db, *flags, model_url=model.base_url) as client:
            await ok(client, "remember", {"messages": chat(FACT, "Noted.")})
            before = data(await ok(client, "memory_context"))
            assert before["observations"] == ""
            assert before["observed_through"] == 0
            for turn in range(6):
                await ok(client, "remember", {"messages": chat(f"{FILLER} ({turn})", "Sure.")})
            result = await ok(client, "memory_context", {"include_messages": True})
            shown, facts = text(result), data(result)
            status = data(await ok(client, "memory_status"))
    assert memory_calls(model), "the Observer was called on the environment's server"
    assert all(r["model"] == "local-test" for r in memory_calls(model))
    assert "User stated their favorite color is blue." in facts["observations"]
    assert "favorite color is blue" in shown  # the log, as the model reads it
    assert "<observations>" in facts["context"]
    assert facts["observed_through"] > 0
    assert facts["memory"] == "healthy", facts["problems"]
    assert len(facts["messages"]) == facts["unobserved_messages"]
    assert all(m["seq"] > facts["observed_through"] for m in facts["messages"])
    assert status["state"] == "healthy"
    assert status["observer_model"] == "openai/local-test"
    assert status["generation"] == 0


async def test_with_search_recall_finds_notes_by_meaning(tmp_path: Path) -> None:
    """``--search local``: once observed, recall's mode "search" finds the note about a topic
    with the range of messages it came from."""
    db = str(tmp_path / "memory.db")
    flags = ("--resource", "alice", "--message-tokens", "300", "--buffer-tokens", "off")
    with LoopbackServer() as model:
        async with stdio(db, *flags, "--search", "local", model_url=model.base_url) as client:
            await ok(client, "remember", {"messages": chat(FACT, "Noted.")})
            for turn in range(6):
                await ok(client, "remember", {"messages": chat(f"{FILLER} ({turn})", "Sure.")})
            found = text(await ok(client, "recall", {"mode": "search", "query": "colour liked"}))
    async with stdio(db, "--resource", "alice", model_url=None) as client:
        without = await refused(client, "recall", {"mode": "search", "query": "colour liked"})
    assert "favorite color is blue" in found
    assert 'mode "search" is off on this server (it starts with --search local' in without


async def test_a_client_that_only_remembers_still_gets_observed(tmp_path: Path) -> None:
    """No memory_context call at all: remember does the memory work a turn does."""
    db = str(tmp_path / "memory.db")
    flags = ("--resource", "alice", "--message-tokens", "300")
    with LoopbackServer() as model:
        async with stdio(db, *flags, model_url=model.base_url) as client:
            await ok(client, "remember", {"messages": chat(FACT, "Noted.")})
            observed = 0
            for turn in range(12):
                result = data(
                    await ok(client, "remember", {"messages": chat(f"{FILLER} ({turn})", "Ok.")})
                )
                observed = max(observed, result["observed_through"])
            status = data(await ok(client, "memory_status"))
    assert observed > 0
    assert status["observation_tokens"] > 0
    assert status["state"] == "healthy"


async def test_a_recall_for_another_resources_thread_gets_nothing(db: str) -> None:
    async with stdio(db, "--resource", "alice", model_url=None) as alice:
        stored = data(await ok(alice, "remember", {"messages": chat(FACT), "thread_id": "diary"}))
    secret = stored["stored"][0]["id"]
    assert stored["thread_id"] == "mcp:alice:diary"
    async with stdio(db, "--resource", "mallory", model_url=None) as mallory:
        await ok(mallory, "remember", {"messages": chat("Hello there.")})
        answers = [
            text(await ok(mallory, "recall", arguments))
            for arguments in (
                {"thread_id": "diary"},
                {"thread_id": stored["thread_id"]},
                {"cursor": secret},
                {"cursor": secret, "part_index": 0},
                {"mode": "threads"},
                {"thread_id": "diary", "page": -1},
            )
        ]
        for answer in answers:
            assert "4417" not in answer, answer
            assert "favorite" not in answer, answer
        assert "No thread 'mcp:mallory:diary'" in answers[0]
        assert "No message" in answers[2]
        # Nor can the model write to it, or read its memory, by naming it: the name is
        # mallory's own conversation.
        for tool, arguments in (
            ("remember", {"messages": chat("I am alice now."), "thread_id": "diary"}),
            ("memory_context", {"thread_id": "diary"}),
            ("memory_status", {"thread_id": "diary"}),
        ):
            result = await ok(mallory, tool, arguments)
            assert data(result)["thread_id"] == "mcp:mallory:diary"
            assert "4417" not in text(result)
    async with stdio(db, "--resource", "alice", model_url=None) as alice:
        mine = text(await ok(alice, "recall", {"thread_id": "diary"}))
        assert FACT in mine
        assert "I am alice now" not in mine


async def test_a_client_cannot_squat_another_resources_thread_ids(tmp_path: Path) -> None:
    """Bob's client names alice's default conversation and the ids alice's client uses before
    alice does: each is a conversation of bob's own. Alice's server still gets its default
    conversation and her ids, and bob never sees her memory."""
    db = str(tmp_path / "memory.db")
    taken = ("mcp:alice", "diary", "mcp:alice:diary")
    async with stdio(db, "--resource", "bob", model_url=None) as bob:
        bobs = [
            data(
                await ok(
                    bob, "remember", {"messages": chat(f"Bob was first ({t})."), "thread_id": t}
                )
            )
            for t in taken
        ]
    async with stdio(db, "--resource", "alice", model_url=None) as alice:
        own = data(await ok(alice, "remember", {"messages": chat(FACT)}))
        diary = data(await ok(alice, "remember", {"messages": chat(FACT), "thread_id": "diary"}))
        shown = [
            text(await ok(alice, "memory_context", {"thread_id": t, "include_messages": True}))
            for t in ("mcp:alice", "diary")
        ]
    assert (own["thread_id"], diary["thread_id"]) == ("mcp:alice", "mcp:alice:diary")
    for context in shown:
        assert FACT in context
        assert "Bob was first" not in context
    assert [b["thread_id"] for b in bobs] == [f"mcp:bob:{t}" for t in taken]
    async with stdio(db, "--resource", "bob", model_url=None) as bob:
        seen = [text(await ok(bob, "recall", {"mode": "threads"}))]
        for thread_id in taken:
            seen.append(text(await ok(bob, "recall", {"thread_id": thread_id})))
            arguments = {"thread_id": thread_id, "include_messages": True}
            seen.append(text(await ok(bob, "memory_context", arguments)))
    for said in seen:
        assert "4417" not in said, said


async def test_bad_arguments_are_tool_errors_that_say_what_to_send(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    cases: Sequence[tuple[str, dict[str, Any], str]] = [
        ("remember", {}, "messages must be a non-empty list of messages such as"),
        ("remember", {"messages": []}, "send at least one message"),
        ("remember", {"messages": "hello"}, "not the string 'hello'"),
        ("remember", {"messages": [{"role": "bot", "content": "x"}]}, "use one of 'user'"),
        ("remember", {"messages": [{"role": "user"}]}, "must be the message text"),
        ("remember", {"messages": [{"role": "user", "content": " "}]}, "send the message's text"),
        (
            "remember",
            {"messages": [{"role": "user", "content": "x", "created_at": "2025-12-04 10:00"}]},
            "has no time zone: add one",
        ),
        (
            "remember",
            {"messages": [{"role": "user", "content": "x", "created_at": "yesterday"}]},
            "is not an ISO 8601 time",
        ),
        (
            "remember",
            {"messages": [{"role": "user", "content": "x", "name": "bob"}]},
            "a message has only role, content",
        ),
        ("remember", {"messages": chat("x") * 101}, "send at most 100 per call"),
        ("remember", {"messages": chat("x"), "thread_id": 7}, "thread_id must be a string"),
        ("remember", {"messages": chat("x"), "thread_id": "x" * 600}, "at most 512"),
        ("memory_context", {"include_messages": "yes"}, "must be true or false"),
        ("recall", {"limit": "many"}, "limit"),
        ("recall", {"mode": "everything"}, 'use "messages", "threads" or "search"'),
        ("recall", {"detail": "all"}, 'use "low" or "high"'),
        ("recall", {"limit": 500}, "at most 20"),
    ]
    async with stdio(db, "--resource", "alice", model_url=None) as client:
        for tool, arguments, fix in cases:
            message = await refused(client, tool, arguments)
            assert fix in message, (tool, arguments, message)
        # Nothing was stored by the refused calls; the server still answers.
        assert "no stored messages" in text(await ok(client, "recall"))


async def test_a_failing_observer_is_reported_in_results_and_the_log(tmp_path: Path) -> None:
    """The Observer's server refuses every memory call (a 400): the tools go on, and say
    so in their results; the server's log has the WARNING."""
    db = str(tmp_path / "memory.db")
    flags = ("--resource", "alice", "--message-tokens", "300", "--buffer-tokens", "off")
    with (
        LoopbackServer(reject_params=frozenset({"max_tokens", "max_completion_tokens"})) as model,
        tempfile.TemporaryFile("w+", encoding="utf-8") as log,
    ):
        async with stdio(db, *flags, model_url=model.base_url, log=log) as client:
            for turn in range(7):
                await ok(client, "remember", {"messages": chat(f"{FILLER} ({turn})", "Sure.")})
            context = data(await ok(client, "memory_context"))
            status = data(await ok(client, "memory_status"))
            answer = text(await ok(client, "recall", {"page": -1}))
        log.seek(0)
        logged = log.read()
    assert model.stats.refusals, "the Observer was called and refused"
    assert context["memory"] == "failing"
    assert any("Unsupported parameter" in p for p in context["problems"]), context["problems"]
    assert status["state"] == "failing"
    assert any("Observer" in f and "status_code: 400" in f for f in status["failures"])
    assert "(6)" in answer  # recall still reads the raw messages
    assert "WARNING" in logged, logged
    assert "Unsupported parameter" in logged, logged


async def test_a_server_bound_to_one_thread_serves_only_it(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    async with stdio(db, "--resource", "alice", "--thread", "work", model_url=None) as client:
        stored = data(await ok(client, "remember", {"messages": chat(FACT)}))
        assert stored["thread_id"] == "work"
        same = data(await ok(client, "memory_status", {"thread_id": "work"}))
        assert same["thread_id"] == "work"
        message = await refused(client, "remember", {"messages": chat("x"), "thread_id": "home"})
        assert "serves only the conversation 'work': leave thread_id out" in message
        # Recall stays in the conversation too.
        answer = text(await ok(client, "recall", {"thread_id": "home"}))
        assert "Only this conversation can be recalled here" in answer


async def test_working_memory_kept_by_the_clients_model(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    flags = ("--resource", "alice", "--working-memory", "agent")
    async with stdio(db, *flags, model_url=None) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "update_working_memory" in names
        blank = text(await ok(client, "memory_context"))
        assert "<working_memory>" in blank
        assert "- Name:\n" in blank  # the template, until the model writes it
        document = "# About the user\n- Name: Alice\n- Preferences: blue, window seats"
        await ok(client, "update_working_memory", {"content": document})
        shown = text(await ok(client, "memory_context", {"thread_id": "another"}))
        message = await refused(client, "update_working_memory", {"content": ""})
    assert "- Name: Alice" in shown  # resource scope: every conversation of the user sees it
    assert "non-empty string" in message


def _observer_keeping_working_memory(body: dict[str, Any]) -> str:
    said = answer(body)
    if not said.startswith("<observations>"):
        return said
    return f"{said}\n<working-memory>\n# About the user\n- Name: Alice\n</working-memory>"


async def test_working_memory_kept_by_the_observer(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    flags = ("--resource", "alice", "--working-memory", "observer", "--message-tokens", "300")
    with strict_server_thread(answer=_observer_keeping_working_memory) as model:
        async with stdio(db, *flags, "--buffer-tokens", "off", model_url=model.base_url) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            for turn in range(7):
                await ok(client, "remember", {"messages": chat(f"{FILLER} ({turn})", "Sure.")})
            shown = text(await ok(client, "memory_context"))
    assert "update_working_memory" not in names
    assert "<working_memory>\n# About the user\n- Name: Alice" in shown
    assert "It is kept up to date for you" in shown


# -- over streamable HTTP ------------------------------------------------------------------------


async def test_http_remember_recall_and_context(db: str) -> None:
    flags = ("--resource", "alice", "--message-tokens", "300", "--buffer-tokens", "off")
    with LoopbackServer() as model, http_server(db, *flags, model_url=model.base_url) as url:
        async with Client(url, read_timeout_seconds=120) as client:
            await ok(client, "remember", {"messages": chat(FACT, "Noted."), "thread_id": "trip"})
            assert FACT in text(await ok(client, "recall", {"thread_id": "trip"}))
            for turn in range(6):
                messages = chat(f"{FILLER} ({turn})", "Sure.")
                await ok(client, "remember", {"messages": messages, "thread_id": "trip"})
            context = data(await ok(client, "memory_context", {"thread_id": "trip"}))
            bad = await refused(client, "remember", {"messages": [{"role": "robot"}]})
        # A second client (another session) sees the same memory.
        async with Client(url, read_timeout_seconds=120) as other:
            status = data(await ok(other, "memory_status", {"thread_id": "trip"}))
    assert "User stated their favorite color is blue." in context["observations"]
    assert context["observed_through"] > 0
    assert "use one of 'user'" in bad
    assert status["state"] == "healthy"
    assert status["observation_tokens"] > 0


async def test_http_with_a_token_answers_only_requests_that_send_it(db: str) -> None:
    """``--token``: raw HTTP without it (or with another) gets a 401 that says what to send; the
    SDK's client sending it as a bearer token works."""
    import httpx
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    flags = ("--resource", "alice", "--token", "s3cret-token")
    with LoopbackServer() as model, http_server(db, *flags, model_url=model.base_url) as url:
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        async with httpx.AsyncClient() as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                reply = await http.post(url, json=ping, headers=headers)
                assert reply.status_code == 401, headers
                assert reply.headers["www-authenticate"] == "Bearer"
                assert "Authorization: Bearer TOKEN" in reply.json()["error"]
        auth = {"Authorization": "Bearer s3cret-token"}
        async with (
            httpx2.AsyncClient(headers=auth) as http2,
            Client(streamable_http_client(url, http_client=http2), read_timeout_seconds=120) as c,
        ):
            status = data(await ok(c, "memory_status", {"thread_id": "trip"}))
    assert status["state"] == "healthy"


def test_listening_beyond_loopback_without_a_token_is_refused(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("OBSMEM_MCP_TOKEN", None)
    command = ["mcp", "--db", str(tmp_path / "m.db"), "--resource", "alice"]
    result = subprocess.run(
        [sys.executable, "-m", "obsmem", *command, "--transport", "http", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert "pass --token TOKEN (or set OBSMEM_MCP_TOKEN)" in result.stderr
    assert not (tmp_path / "m.db").exists()


def test_without_a_resource_the_command_says_how_to_give_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OBSMEM_RESOURCE"}
    env["PYTHONPATH"] = str(SRC)
    result = subprocess.run(
        [sys.executable, "-m", "obsmem", "mcp", "--db", str(tmp_path / "m.db")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "obsmem: obsmem mcp needs the resource it serves: pass --resource USER_ID (or set "
        "OBSMEM_RESOURCE)"
    )


async def test_with_only_openai_base_url_the_served_model_observes(tmp_path: Path) -> None:
    """No OBSMEM_MODEL and no --model, only OPENAI_BASE_URL at a server serving a named model
    (as vLLM and Ollama do): the server's memory calls go to that model."""
    with LoopbackServer(model_id="qwen2.5:0.5b") as model:
        params = StdioServerParameters(
            command=sys.executable,
            args=_command(str(tmp_path / "m.db"), "--resource", "alice", "--message-tokens", "300"),
            env={"PYTHONPATH": str(SRC), "OPENAI_BASE_URL": model.base_url},
            cwd=tempfile.gettempdir(),
        )
        async with Client(params, read_timeout_seconds=120) as client:
            for turn in range(6):
                messages = chat(f"{FILLER} ({turn})", "Sure.")
                await ok(client, "remember", {"messages": messages})
            status = data(await ok(client, "memory_status"))
        calls = memory_calls(model)
    assert status["observer_model"] == "openai/qwen2.5:0.5b"
    assert calls
    assert {r["model"] for r in calls} == {"qwen2.5:0.5b"}
