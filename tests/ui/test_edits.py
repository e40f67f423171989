"""``obsmem ui --allow-edits`` over plain HTTP (Starlette's TestClient): the forms exist only with
the flag; deleting a thread and revising a log go through a confirmation page, then a POST that
carries the CSRF token; a POST without it, with a wrong one, or from another site's page is
refused and changes nothing."""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from starlette.testclient import TestClient

from obsmem.cli.common import open_store
from obsmem.records import CycleRecord
from obsmem.stores import SQLiteStore
from obsmem.stores.reads import CycleQuery, thread_cycles
from obsmem.ui.app import create_app

from .conftest import Built, config
from .data import MAIN, OTHER

LOCAL = "http://127.0.0.1"


def q(**params: Any) -> str:
    return urlencode(params)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:2000]
    return found.group(1)


@pytest.fixture
def db(built_db: Built, tmp_path: Path) -> Path:
    path = tmp_path / "editable.db"
    shutil.copy(built_db.path, path)
    return path


@pytest.fixture
def editable(db: Path) -> Iterator[TestClient]:
    """The inspector with ``--allow-edits`` over a copy of the replayed database."""
    app = create_app(open_store(str(db)), config(str(db), allow_edits=True))
    with TestClient(app, base_url=LOCAL) as client:
        yield client


def _log_of(db: Path, thread_id: str) -> tuple[str, list[CycleRecord]]:
    async def read() -> tuple[str, list[CycleRecord]]:
        store = SQLiteStore(db, read_only=True)
        try:
            thread = await store.get_thread(thread_id)
            assert thread is not None
            record = await store.get_record(f"thread:{thread_id}")
            assert record is not None
            revisions = await thread_cycles(store, thread, CycleQuery(kinds=("revision",)))
            return record.observations, revisions
        finally:
            await store.aclose()

    return asyncio.run(read())


def test_the_edit_forms_exist_only_with_the_flag(built_db: Built, editable: TestClient) -> None:
    path = str(built_db.path)
    app = create_app(open_store(path, read_only=True), config(path))
    with TestClient(app, base_url=LOCAL) as read_only:
        page = read_only.get(f"/thread?{q(id=MAIN)}").text
        assert "/edit/" not in page
        assert "read-only" in page
        for url in ("/edit/delete-thread", "/edit/delete-resource", "/edit/revise"):
            assert read_only.get(f"{url}?{q(id=MAIN)}").status_code == 404
            assert read_only.post(url, data={"id": MAIN}).status_code in (404, 405)
    page = editable.get(f"/thread?{q(id=MAIN)}").text
    assert "/edit/delete-thread?" in page
    assert "/edit/revise?" in page
    assert "/edit/delete-resource?" in editable.get("/").text


def test_a_thread_is_deleted_after_its_confirmation(editable: TestClient) -> None:
    confirm = editable.get(f"/edit/delete-thread?{q(id=MAIN)}")
    assert confirm.status_code == 200
    assert f"erase thread &#39;{MAIN}&#39;" in confirm.text
    assert "cannot be undone" in confirm.text
    assert editable.get(f"/thread?{q(id=MAIN)}").status_code == 200  # the GET changed nothing
    done = editable.post("/edit/delete-thread", data={"id": MAIN, "csrf": csrf_of(confirm.text)})
    assert done.status_code == 200
    assert "Erased thread" in done.text
    assert editable.get(f"/thread?{q(id=MAIN)}").status_code == 404
    index = editable.get("/").text
    assert f"id={MAIN}" not in index
    assert f"id={OTHER}" in index
    again = editable.post("/edit/delete-thread", data={"id": MAIN, "csrf": csrf_of(confirm.text)})
    assert again.status_code == 400
    assert "no thread" in again.text


def test_a_post_without_the_csrf_token_or_from_another_site_changes_nothing(
    editable: TestClient, db: Path
) -> None:
    token = csrf_of(editable.get(f"/edit/delete-thread?{q(id=MAIN)}").text)
    before = db.read_bytes()
    refused = [
        editable.post("/edit/delete-thread", data={"id": MAIN}),
        editable.post("/edit/delete-thread", data={"id": MAIN, "csrf": "x" * len(token)}),
        editable.post(
            "/edit/delete-thread",
            data={"id": MAIN, "csrf": token},
            headers={"Origin": "http://evil.example"},
        ),
        editable.post(
            "/edit/delete-resource",
            data={"resource": "user-1", "csrf": token},
            headers={"Origin": "http://127.0.0.1:9"},  # another port is another site
        ),
        editable.post(
            "/edit/revise",
            data={"id": MAIN, "old": "x", "csrf": token},
            headers={"Host": "evil.example"},  # DNS rebinding: the Host check stays
        ),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused)
    assert "Refused, nothing changed" in refused[0].text
    assert "CSRF" in refused[0].text
    assert "another site" in refused[2].text
    assert editable.get(f"/thread?{q(id=MAIN)}").status_code == 200
    assert db.read_bytes() == before


def test_a_line_of_the_log_is_replaced_after_its_confirmation(
    editable: TestClient, db: Path
) -> None:
    lines = re.findall(
        r'name="old" value="([^"]*)"', editable.get(f"/edit/revise?{q(id=MAIN)}").text
    )
    old = unescape(lines[0])
    new = "* 🔴 (09:00) The user's name is Ada (corrected by hand)"
    confirm = editable.get(f"/edit/revise?{q(id=MAIN, old=old, new=new, how='replace')}")
    assert confirm.status_code == 200
    assert "replace the line" in confirm.text
    assert _log_of(db, MAIN)[0].count(old) == 1  # the GET changed nothing
    done = editable.post(
        "/edit/revise",
        data={"id": MAIN, "old": old, "new": new, "csrf": csrf_of(confirm.text)},
        follow_redirects=False,
    )
    assert done.status_code == 303
    page = editable.get(done.headers["location"]).text
    assert "corrected by hand" in page
    log, revisions = _log_of(db, MAIN)
    assert new in log
    assert old not in log
    assert [c.by for c in revisions] == ["ui"]


def test_a_removed_line_and_a_missing_one(editable: TestClient, db: Path) -> None:
    page = editable.get(f"/edit/revise?{q(id=MAIN)}").text
    old = unescape(re.findall(r'name="old" value="([^"]*)"', page)[-1])
    confirm = editable.get(f"/edit/revise?{q(id=MAIN, old=old, how='remove')}")
    assert "remove the line" in confirm.text
    token = csrf_of(confirm.text)
    assert editable.post("/edit/revise", data={"id": MAIN, "old": old, "csrf": token}).is_success
    assert old not in _log_of(db, MAIN)[0]
    missing = editable.post("/edit/revise", data={"id": MAIN, "old": old, "csrf": token})
    assert missing.status_code == 400
    assert "Traceback" not in missing.text
    assert "Not done" in missing.text
    assert "no line of the log" in missing.text


def _rewrite_form(editable: TestClient) -> dict[str, str]:
    page = editable.get(f"/edit/revise?{q(id=MAIN)}").text
    text = re.search(r'<textarea name="text"[^>]*>(.*?)</textarea>', page, re.S)
    base = re.search(r'name="base" value="([^"]+)"', page)
    assert text, page[:2000]
    assert base, page[:2000]
    return {"id": MAIN, "base": base.group(1), "text": unescape(text.group(1))}


def test_the_whole_log_is_rewritten_after_a_preview_of_its_changes(
    editable: TestClient, db: Path
) -> None:
    form = _rewrite_form(editable)
    before, _ = _log_of(db, MAIN)
    assert form["text"] == before
    lines = form["text"].split("\n")
    dropped = next(line for line in lines if line.startswith("* "))
    rewritten = [line for line in lines if line != dropped] + ["* 🟢 (10:00) Added by hand"]
    token = csrf_of(editable.get(f"/edit/revise?{q(id=MAIN)}").text)
    as_sent = {**form, "text": "\r\n".join(rewritten), "csrf": token}  # a browser's CRLF
    preview = editable.post("/edit/revise-text", data=as_sent)
    assert preview.status_code == 200, preview.text
    assert 'id="confirm-diff"' in preview.text
    assert "Added by hand" in preview.text
    assert "line-dropped" in preview.text
    assert _log_of(db, MAIN)[0] == before  # the preview wrote nothing
    fields = re.findall(r'name="(\w+)" value="([^"]*)"', preview.text)
    confirm = {name: unescape(value) for name, value in fields}
    done = editable.post("/edit/revise", data=confirm, follow_redirects=False)
    assert done.status_code == 303, done.text
    log, revisions = _log_of(db, MAIN)
    assert "* 🟢 (10:00) Added by hand" in log
    assert dropped not in log
    assert "\r" not in log
    assert [c.by for c in revisions] == ["ui"]

    # The same confirmation again: the log is no longer the one it was made from.
    stale = editable.post("/edit/revise", data=confirm)
    assert stale.status_code == 409
    assert "changed since the rewrite was made" in stale.text
    assert _log_of(db, MAIN)[1] == revisions


def test_a_rewrite_that_changes_nothing_or_lacks_the_token_is_refused(
    editable: TestClient, db: Path
) -> None:
    form = _rewrite_form(editable)
    token = csrf_of(editable.get(f"/edit/revise?{q(id=MAIN)}").text)
    before = db.read_bytes()
    same = editable.post("/edit/revise-text", data={**form, "csrf": token})
    assert same.status_code == 400
    assert "nothing to write" in same.text
    forged = editable.post("/edit/revise-text", data={**form, "text": "x", "csrf": "forged"})
    assert forged.status_code == 403
    unbased = editable.post(
        "/edit/revise", data={**form, "text": "* x", "base": "0:stale", "csrf": token}
    )
    assert unbased.status_code == 409
    assert db.read_bytes() == before


def test_a_resource_is_deleted_after_its_confirmation(editable: TestClient, db: Path) -> None:
    index = editable.get("/").text
    [resource] = set(re.findall(r"/edit/delete-resource\?resource=([\w.-]+)", index))
    confirm = editable.get(f"/edit/delete-resource?{q(resource=resource)}")
    assert confirm.status_code == 200
    assert f"erase resource &#39;{resource}&#39;" in confirm.text
    done = editable.post(
        "/edit/delete-resource", data={"resource": resource, "csrf": csrf_of(confirm.text)}
    )
    assert done.status_code == 200
    assert f"Erased resource &#39;{resource}&#39;" in done.text
    for thread_id in (MAIN, OTHER):
        assert editable.get(f"/thread?{q(id=thread_id)}").status_code == 404
    assert resource not in editable.get("/").text
    assert editable.get(f"/edit/delete-resource?{q(resource=resource)}").status_code == 404
