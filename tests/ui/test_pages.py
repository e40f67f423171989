"""The inspector's pages over plain HTTP (Starlette's TestClient, and httpx against uvicorn):
what each shows, paging, filters, errors that name the fix, the token, the bind rule, the
missing extra, and that browsing every page leaves the SQLite file as it was."""

from __future__ import annotations

import asyncio
import importlib
import re
import shutil
import sqlite3
from collections.abc import Iterator
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from starlette.testclient import TestClient

from obsmem import Memory
from obsmem.cli import main
from obsmem.cli.common import open_store
from obsmem.errors import MissingExtraError
from obsmem.messages import Message
from obsmem.stores import SQLiteStore
from obsmem.testing import scripted_observer, scripted_reflector
from obsmem.ui import cli as ui_cli
from obsmem.ui.app import create_app
from obsmem.ui.security import bind_problem, host_name, is_loopback

from .conftest import Built, config, digest, serve
from .data import MAIN, OTHER, RESOURCE

TOKEN = "a-long-enough-secret-token"

LOCAL = "http://127.0.0.1"
"""Where the tests address the app: it answers only loopback hosts without a token."""


@pytest.fixture
def client(built_db: Built) -> Iterator[TestClient]:
    app = create_app(open_store(str(built_db.path), read_only=True), config(str(built_db.path)))
    with TestClient(app, base_url=LOCAL) as c:
        yield c


def q(**params: Any) -> str:
    return urlencode(params)


def every_page(thread: str = MAIN) -> list[str]:
    t = q(id=thread)
    return [
        "/",
        f"/?{q(q='main')}",
        f"/?{q(resource=RESOURCE)}",
        f"/thread?{t}",
        f"/thread?{q(id=thread, page=1)}",
        f"/generations?{t}",
        f"/cycles?{t}",
        f"/cycles?{q(id=thread, outcome='failed')}",
        f"/chart?{t}",
        f"/api/state?{t}",
        "/static/style.css",
        "/static/live.js",
    ]


def test_every_page_answers(client: TestClient) -> None:
    for url in every_page() + every_page(OTHER):
        response = client.get(url)
        assert response.status_code == 200, (url, response.text[:500])


def test_the_index_searches_and_filters(client: TestClient) -> None:
    page = client.get("/").text
    assert MAIN in page
    assert OTHER in page
    assert "failing since" in page
    assert "healthy" in page
    found = client.get(f"/?{q(q='OTHER')}").text
    assert OTHER in found
    assert f">{MAIN}<" not in found
    assert "No thread matches" in client.get(f"/?{q(q='nothing-like-this')}").text
    assert "No thread matches" in client.get(f"/?{q(resource='someone-else')}").text


def test_a_script_message_is_escaped(client: TestClient) -> None:
    page = client.get(f"/thread?{q(id=MAIN, page=1)}").text
    assert "&lt;script&gt;alert(" in page
    assert "<script>alert(" not in page
    scripts = re.findall(r"<script[^>]*>", page)
    assert scripts == [s for s in scripts if 'src="/static/live.js"' in s]


def test_nothing_comes_from_elsewhere(client: TestClient) -> None:
    """No page or static file loads anything from another origin (a CDN)."""
    for url in every_page():
        text = client.get(url).text
        assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", text), url
        assert "@import" not in text, url
        assert "url(http" not in text, url


def test_the_thread_page_marks_and_links(client: TestClient) -> None:
    page = client.get(f"/thread?{q(id=MAIN)}").text
    assert 'class="msg role-user msg-observed"' in page
    assert "mark-unobserved" in page
    assert "tool call lookup_weather" in page
    assert "show all" in page  # the huge tool result is cut
    ranges = re.findall(r'class="range" href="([^"]+)"', page)
    assert ranges
    assert all("#m-" in r for r in ranges)
    back = re.findall(r'class="to-group small" href="#((?:g|group)-[0-9a-f]+)"', page)
    assert back
    assert all(f'id="{target}"' in page for target in set(back))
    assert "Context the actor would be sent now" in page
    assert "&lt;observations&gt;" in page  # the log as the actor gets it, escaped


def test_generations_show_each_reflection(client: TestClient, built_db: Built) -> None:
    page = client.get(f"/generations?{q(id=MAIN)}").text
    reflections = built_db.report["generations"] - 1
    assert page.count('class="card diff"') == reflections
    assert "line-dropped" in page or "line-merged" in page
    other = client.get(f"/generations?{q(id=OTHER)}").text
    assert 'id="no-reflections"' in other


def test_cycles_filter_by_kind_and_outcome(client: TestClient) -> None:
    everything = client.get(f"/cycles?{q(id=MAIN)}").text
    assert "outcome-failed" in everything
    assert "outcome-committed" in everything
    failed = client.get(f"/cycles?{q(id=MAIN, outcome='failed')}").text
    assert "scripted model failure" in failed
    assert "outcome-committed" not in failed
    reflections = client.get(f"/cycles?{q(id=MAIN, kind='reflection')}").text
    kinds = re.findall(r"</td><td>(buffering|observation|activation|reflection)</td>", reflections)
    assert kinds
    assert set(kinds) == {"reflection"}
    bad = client.get(f"/cycles?{q(id=MAIN, kind='nonsense')}")
    assert bad.status_code == 400
    assert "kind is one of" in bad.text


def test_an_unknown_thread_names_the_fix(client: TestClient) -> None:
    for path in ("/thread", "/cycles", "/generations", "/chart"):
        response = client.get(f"{path}?{q(id='nope')}")
        assert response.status_code == 404
        assert "no thread &#39;nope&#39;" in response.text
        assert "see the list" in response.text
    assert client.get(f"/api/state?{q(id='nope')}").status_code == 404


def test_the_chart_marks_cycles_against_the_thresholds(client: TestClient) -> None:
    page = client.get(f"/chart?{q(id=MAIN)}").text
    assert "<svg" in page
    assert 'data-series="context"' in page
    for kind in ("observation", "reflection", "failure"):
        assert f"marker-{kind}" in page
    assert "observe at (raw)" in page
    assert "reflect at (log)" in page


def test_the_live_state_changes_when_a_writer_adds_a_turn(built_db: Built, tmp_path: Path) -> None:
    db = tmp_path / "live.db"
    shutil.copy(built_db.path, db)
    app = create_app(open_store(str(db), read_only=True), config(str(db)))
    with TestClient(app, base_url=LOCAL) as c:
        before = c.get(f"/api/state?{q(id=MAIN)}").json()

        async def write() -> None:
            store = SQLiteStore(db)
            await store.append_messages(MAIN, [Message.user("one more")])
            await store.aclose()

        asyncio.run(write())
        after = c.get(f"/api/state?{q(id=MAIN)}").json()
    assert after["messages"] == before["messages"] + 1
    assert after != before


async def _long_thread(db: Path, count: int) -> None:
    store = SQLiteStore(db)
    await store.create_thread("long", "r")
    await store.append_messages("long", [Message.user(f"message {n}") for n in range(count)])
    await store.aclose()


def test_a_long_thread_is_paged_newest_first(tmp_path: Path) -> None:
    db = tmp_path / "long.db"
    asyncio.run(_long_thread(db, 250))
    app = create_app(open_store(str(db), read_only=True), config(str(db)))
    with TestClient(app, base_url=LOCAL) as c:
        newest = c.get(f"/thread?{q(id='long')}").text
        assert "page 3 of 3" in newest
        assert 'id="m-250"' in newest
        assert 'id="m-200"' not in newest
        first = c.get(f"/thread?{q(id='long', page=1)}").text
        assert 'id="m-1"' in first
        assert 'id="m-100"' in first
        assert 'id="m-101"' not in first
        # memory never saw it, its 250 messages are past the 600-token threshold, and the
        # list reads only 200 of them (so the tokens are estimated)
        assert re.search(r"behind with about [0-9,]+ unobserved tokens", c.get("/").text)


async def _try_to_write(store: Any) -> None:
    await store.create_thread("written", "r")


def test_browsing_every_page_leaves_the_file_as_it_was(built_db: Built, tmp_path: Path) -> None:
    """Bytes and mtime are the same after every page was read, and the served store refuses
    a write (a read-only connection: nothing could have been written)."""
    db = tmp_path / "copy.db"
    shutil.copy(built_db.path, db)
    before = digest(db)
    served = serve(db)
    try:
        with httpx.Client(base_url=served.url, timeout=30) as http:
            for url in every_page() + every_page(OTHER):
                assert http.get(url).status_code == 200, url
        with pytest.raises(Exception, match=r"(?i)read.?only|readonly"):
            asyncio.run(_try_to_write(served.server.config.app.state.store))
    finally:
        served.stop()
    assert digest(db) == before


def test_the_store_refuses_writes(built_db: Built) -> None:
    store = open_store(str(built_db.path), read_only=True)

    async def attempt() -> None:
        try:
            await store.create_thread("new", "r")
        finally:
            await store.aclose()

    with pytest.raises(Exception, match=r"(?i)read.?only|readonly"):
        asyncio.run(attempt())


def test_every_request_needs_the_token(built_db: Built) -> None:
    def app() -> Any:  # each client's lifespan closes its store at the end
        db = str(built_db.path)
        return create_app(open_store(db, read_only=True), config(db, TOKEN))

    with TestClient(app(), base_url="http://ui.example") as anonymous:
        for url in every_page():
            response = anonymous.get(url)
            assert response.status_code == 401, url
            assert "Authorization: Bearer" in response.text
        assert anonymous.get("/?token=wrong-token-of-some-length").status_code == 401
        assert anonymous.get("/", headers={"Authorization": "Bearer nope"}).status_code == 401
    with TestClient(app()) as bearer:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        for url in every_page():
            assert bearer.get(url, headers=headers).status_code == 200, url
    with TestClient(app()) as browser:
        first = browser.get(f"/thread?{q(id=MAIN, token=TOKEN)}", follow_redirects=False)
        assert first.status_code == 303
        assert first.headers["location"] == f"/thread?{q(id=MAIN)}"
        assert "HttpOnly" in first.headers["set-cookie"]
        for url in every_page():  # the cookie carries it from now on
            assert browser.get(url).status_code == 200, url


def test_without_a_token_only_loopback_hosts_are_answered(built_db: Built) -> None:
    """A page of another site that rebinds its name to 127.0.0.1 (DNS rebinding) reaches the
    server with its own name as the Host: it gets a 403, not the conversations."""
    db = str(built_db.path)

    def app() -> Any:  # each client's lifespan closes its store at the end
        return create_app(open_store(db, read_only=True), config(db, None))

    with TestClient(app(), base_url="http://evil.example:8765") as rebound:
        for url in every_page():
            response = rebound.get(url)
            assert response.status_code == 403, url
            assert "answers only requests addressed to 127.0.0.1 or localhost" in response.text
            assert MAIN not in response.text
    for host in ("127.0.0.1:8765", "localhost:8765", "[::1]:8765", "127.0.0.1"):
        assert host_name(host) in ("127.0.0.1", "localhost", "::1")
    with TestClient(app(), base_url="http://localhost:8765") as local:
        assert local.get("/").status_code == 200


def test_binding_beyond_loopback_needs_a_token(
    built_db: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("192.168.1.4")
    assert bind_problem("127.0.0.1", None) is None
    assert bind_problem("0.0.0.0", TOKEN) is None
    assert bind_problem("0.0.0.0", "short") is not None
    for edits in ([], ["--allow-edits"]):
        code = main(["ui", "--db", str(built_db.path), "--host", "0.0.0.0", *edits])
        err = capsys.readouterr().err
        assert code == 2
        assert "--token" in err
        assert len(err.strip().splitlines()) == 1


def test_a_missing_or_foreign_database_names_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ui", "--db", str(tmp_path / "none.db")]) == 2
    assert "No obsmem database at" in capsys.readouterr().err
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    assert main(["ui", "--db", str(foreign)]) == 2
    err = capsys.readouterr().err
    assert "not an obsmem one" in err
    assert len(err.strip().splitlines()) == 1


def test_a_missing_extra_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def without_jinja(name: str, package: str | None = None) -> Any:
        if name == "jinja2":
            raise ImportError("No module named 'jinja2'", name="jinja2")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", without_jinja)
    with pytest.raises(MissingExtraError, match=re.escape('pip install "obsmem[ui]"')):
        ui_cli.check_extra()


def test_buffered_chunks_wait_and_their_messages_are_marked(client: TestClient) -> None:
    page = client.get(f"/thread?{q(id=OTHER)}").text
    waiting = re.search(r"([0-9]+) waiting to activate", page)
    assert waiting is not None
    assert int(waiting.group(1)) >= 1
    assert 'class="block chunk"' in page
    assert 'class="msg role-user msg-buffered"' in page or "role-assistant msg-buffered" in page
    assert "marker-activation" in client.get(f"/chart?{q(id=OTHER)}").text
    cycles = client.get(f"/cycles?{q(id=OTHER, kind='buffering')}").text
    assert "buffered-observation" in cycles


def _cycle_links(client: TestClient, thread: str, **filters: str) -> list[str]:
    page = client.get(f"/cycles?{q(id=thread, **filters)}").text
    return [h.replace("&amp;", "&") for h in re.findall(r'class="cycle-link" href="([^"]+)"', page)]


def test_a_cycle_opens_to_what_its_model_was_shown_and_answered(
    client: TestClient, built_db: Built
) -> None:
    links = _cycle_links(client, MAIN, kind="observation", outcome="committed")
    assert links
    page = client.get(links[0]).text  # the newest: its detail is kept
    assert 'class="call-shown"' in page
    assert 'class="call-answer"' in page
    assert "observer" in page
    cycle_id = links[0].split("cycle=")[1]
    store = SQLiteStore(built_db.path)
    (call,) = asyncio.run(store.cycle_detail(cycle_id))
    asyncio.run(store.aclose())
    assert call.shown
    assert escape(call.answer.splitlines()[0]) in page  # escaped, as every page
    assert escape(call.shown.splitlines()[-1]) in page


def test_a_cycle_shown_a_script_message_escapes_it(tmp_path: Path) -> None:
    """The Observer was shown a message holding <script> (its transcript already defuses the
    tag's ``<``): the cycle page shows it as text, escaped; an unknown cycle names the fix."""
    path = tmp_path / "m.db"

    async def observe() -> None:
        memory = Memory(
            SQLiteStore(path),
            observational_memory={
                "observation": {"model": scripted_observer(), "messageTokens": 2_000},
                "reflection": {"model": scripted_reflector()},
            },
        )
        ref = {"resource": "u1", "thread": "t1"}
        await memory.save(
            ref, [Message.user("<script>alert('shown')</script> hi")], actor_model=None
        )
        assert await memory.compact(ref, keep_tokens=0)
        await memory.aclose()

    asyncio.run(observe())
    app = create_app(open_store(str(path), read_only=True), config(str(path)))
    with TestClient(app, base_url=LOCAL) as c:
        (link,) = _cycle_links(c, "t1")
        page = c.get(link).text
        assert "\u2039script&gt;alert(&#39;shown&#39;)\u2039/script&gt; hi" in page
        assert "<script>alert(" not in page
        missing = c.get(f"/cycle?{q(id='t1', cycle='nope')}")
        assert missing.status_code == 404
        assert "no cycle &#39;nope&#39;" in missing.text
        assert "see its cycles" in missing.text
        assert c.get(f"/cycle?{q(id='t1')}").status_code == 404
