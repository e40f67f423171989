"""The inspector in a real headless Chromium (Selenium): a replayed thread, recall ranges to
raw messages and back, a reflection's diff, a failed cycle, a cycle's input and answer, a
``<script>`` message shown as text, the live page following another process that writes, and a
token URL."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from obsmem.ui.app import UIConfig

from .conftest import Built, Served, serve
from .data import MAIN, SCRIPT

ROOT = Path(__file__).resolve().parents[2]

By: Any
WebDriverWait: Any
try:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - the dev extra has selenium
    pytest.skip("selenium is not installed (pip install -e '.[dev]')", allow_module_level=True)


def thread_url(served: Served, page: int | None = None, tab: str = "thread") -> str:
    query: dict[str, Any] = {"id": MAIN}
    if page is not None:
        query["page"] = page
    return f"{served.url}/{tab}?{urlencode(query)}"


def test_the_index_lists_the_replayed_threads_and_opens_one(browser: Any, served: Served) -> None:
    browser.get(served.url + "/")
    rows = browser.find_elements(By.CSS_SELECTOR, "#threads tbody tr")
    assert len(rows) == 2
    main = next(r for r in rows if MAIN in r.text)
    assert "failing since" in main.text
    assert "scripted model failure" in main.text
    assert "78" in main.text
    main.find_element(By.CSS_SELECTOR, "a.thread-link").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "message-count"))
    assert browser.find_element(By.ID, "message-count").text == "78"
    marks = {e.text for e in browser.find_elements(By.CSS_SELECTOR, ".msg header .mark")}
    assert {"observed", "unobserved"} <= marks
    assert browser.find_elements(By.CSS_SELECTOR, "#live-log .block pre")


def test_tool_calls_and_huge_parts(browser: Any, served: Served) -> None:
    browser.get(thread_url(served, page=1))
    call = browser.find_element(By.CSS_SELECTOR, "#m-6 .part-tool-call")
    assert "tool call lookup_weather" in call.text
    assert '"city": "Oslo"' in call.text
    result = browser.find_element(By.CSS_SELECTOR, "#m-7 .part-tool-result")
    details = result.find_element(By.TAG_NAME, "details")
    assert details.get_attribute("open") is None
    assert "HUGE-END" not in result.text  # cut: the end is behind <details>
    details.find_element(By.TAG_NAME, "summary").click()
    WebDriverWait(browser, 5).until(lambda d: "HUGE-END" in result.text)


def test_a_recall_range_leads_to_its_messages_and_back(browser: Any, served: Served) -> None:
    browser.get(thread_url(served))
    link = browser.find_element(By.CSS_SELECTOR, "#live-log .block a.range")
    block_id = link.find_element(By.XPATH, "..").get_attribute("id")
    first = int(link.text.removeprefix("messages ").split("-")[0])
    link.click()
    WebDriverWait(browser, 10).until(lambda d: d.current_url.endswith(f"#m-{first}"))
    message = browser.find_element(By.ID, f"m-{first}")
    assert "observed" in message.get_attribute("class")
    back = message.find_element(By.CSS_SELECTOR, "a.to-group")
    target = back.get_attribute("href").rsplit("#", 1)[1]
    back.click()
    WebDriverWait(browser, 5).until(lambda d: d.current_url.endswith(f"#{target}"))
    group = browser.find_element(By.ID, target)
    if target.startswith("g-"):  # the group is in the current log: the block we came from
        assert target == block_id
    span = group.find_element(By.CSS_SELECTOR, "a").text.removeprefix("messages ")
    low, high = (int(x) for x in span.split("-"))
    assert low <= first <= high


def test_a_reflection_shows_as_a_diff(browser: Any, served: Served, built_db: Built) -> None:
    assert built_db.report["generations"] >= 2
    browser.get(thread_url(served))
    browser.find_element(By.ID, "tab-generations").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".diff"))
    diff = browser.find_elements(By.CSS_SELECTOR, ".diff")[-1]  # the first reflection
    assert "generation 0 → 1" in diff.text
    kinds = {
        c.split("line-", 1)[1]
        for e in diff.find_elements(By.CSS_SELECTOR, ".difflines .line")
        for c in e.get_attribute("class").split()
        if c.startswith("line-")
    }
    assert kinds & {"kept", "merged"}, kinds
    assert kinds & {"dropped", "merged"}, kinds  # the Reflector shortened the log


def test_a_failed_cycle_shows_its_error(browser: Any, served: Served) -> None:
    browser.get(thread_url(served, tab="cycles"))
    all_rows = len(browser.find_elements(By.CSS_SELECTOR, "#cycles tbody tr"))
    browser.find_element(By.CSS_SELECTOR, "input[name=outcome][value=failed]").click()
    browser.find_element(By.CSS_SELECTOR, "#cycle-filters button").click()
    WebDriverWait(browser, 10).until(lambda d: "outcome=failed" in d.current_url)
    rows = browser.find_elements(By.CSS_SELECTOR, "#cycles tbody tr.outcome-failed")
    assert rows
    assert len(rows) < all_rows
    errors = browser.find_elements(By.CSS_SELECTOR, ".cycle-error")
    assert errors
    assert all("scripted model failure" in e.text for e in errors)
    assert not browser.find_elements(By.CSS_SELECTOR, "#cycles tbody tr.outcome-committed")


def test_a_cycle_opens_to_its_input_and_answer(browser: Any, served: Served) -> None:
    browser.get(thread_url(served, tab="cycles"))
    browser.find_element(By.CSS_SELECTOR, "input[name=kind][value=observation]").click()
    browser.find_element(By.CSS_SELECTOR, "input[name=outcome][value=committed]").click()
    browser.find_element(By.CSS_SELECTOR, "#cycle-filters button").click()
    WebDriverWait(browser, 10).until(lambda d: "kind=observation" in d.current_url)
    browser.find_element(By.CSS_SELECTOR, "#cycles a.cycle-link").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "cycle"))
    shown = browser.find_element(By.CSS_SELECTOR, "#call-1 .call-shown").text
    answer = browser.find_element(By.CSS_SELECTOR, "#call-1 .call-answer").text
    assert "New Message History to Observe" in shown  # the Observer's prompt as sent
    assert answer.strip()
    assert "observer" in browser.find_element(By.CSS_SELECTOR, "#call-1 h3").text
    assert not browser.find_elements(By.ID, "no-detail")


def test_a_script_in_a_message_is_shown_as_text(browser: Any, served: Served) -> None:
    browser.get(thread_url(served, page=1))
    message = browser.find_element(By.ID, "m-3")
    assert SCRIPT in message.text
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - reading it is the check
    assert browser.execute_script("return document.querySelectorAll('main script').length") == 0


def test_the_chart_is_inline_svg(browser: Any, served: Served) -> None:
    browser.get(thread_url(served, tab="chart"))
    svg = browser.find_element(By.CSS_SELECTOR, "#chart svg")
    assert svg.find_elements(By.CSS_SELECTOR, "polyline[data-series=context]")
    kinds = {
        e.get_attribute("class").split()[1] for e in svg.find_elements(By.CSS_SELECTOR, "g.marker")
    }
    assert {"marker-observation", "marker-reflection", "marker-failure"} <= kinds


class Writer:
    """Another process writing turns to the same database (``tests/ui/writer.py``)."""

    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.ui.writer", str(db)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.n = 0

    def turn(self) -> None:
        """One turn, stored when this returns."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.n += 1
        self.proc.stdin.write("turn\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == f"done {self.n}"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def live(built_db: Built, tmp_path: Path) -> Iterator[tuple[Served, Writer]]:
    db = tmp_path / "live.db"
    shutil.copy(built_db.path, db)
    served = serve(db, poll_ms=UIConfig().poll_ms)  # the command's own polling interval
    writer = Writer(db)
    try:
        yield served, writer
    finally:
        writer.close()
        served.stop()


COUNT = "return document.getElementById('message-count').textContent"
NEWEST = (
    "var m = document.querySelectorAll('#live-messages .msg'); return m[m.length - 1].textContent"
)


def test_the_thread_page_follows_a_writer(browser: Any, live: tuple[Served, Writer]) -> None:
    """Each turn another process stores shows on the open page within two seconds (the page
    polls every second, as the command's does), without a reload: the page's own marker
    survives."""
    served, writer = live
    browser.get(thread_url(served))
    browser.execute_script("window.obsmemTestMarker = 1")
    count = int(browser.execute_script(COUNT))
    for n in (1, 2, 3):
        writer.turn()
        WebDriverWait(browser, 2.0, poll_frequency=0.05).until(
            lambda d, want=count + 2 * n: d.execute_script(COUNT) == str(want)
        )
        assert f"live answer {n}" in browser.execute_script(NEWEST)
    assert browser.execute_script("return window.obsmemTestMarker") == 1
    assert "updated" in browser.execute_script(
        "return document.getElementById('live-status').textContent"
    )


def test_a_token_url_opens_the_inspector_and_the_cookie_carries_it(
    browser: Any, built_db: Built
) -> None:
    token = "browser-token-0123456789"
    served = serve(built_db.path, token=token)
    try:
        browser.get(f"{served.url}/")
        assert "needs its token" in browser.find_element(By.TAG_NAME, "body").text
        browser.get(f"{served.url}/thread?{urlencode({'id': MAIN, 'token': token})}")
        assert "token=" not in browser.current_url  # redirected without it
        assert browser.execute_script(COUNT) == "78"
        status = browser.execute_async_script(
            "var done = arguments[0];"
            f"fetch('/api/state?id={MAIN}').then(function (r) {{ done(r.status); }});"
        )
        assert status == 200  # the live page's polling carries the cookie too
    finally:
        served.stop()


def test_a_thread_is_deleted_through_its_confirmation_page(
    browser: Any, built_db: Built, tmp_path: Path
) -> None:
    """With --allow-edits: the thread page's Delete link leads to a confirmation; a form whose
    CSRF token was tampered with is refused and erases nothing; the real one erases the
    thread, which then leaves the list."""
    db = tmp_path / "editable.db"
    shutil.copy(built_db.path, db)
    served = serve(db, allow_edits=True)
    try:
        browser.get(thread_url(served))
        browser.find_element(By.ID, "edit-delete-thread").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "confirm-what"))
        assert MAIN in browser.find_element(By.ID, "confirm-what").text
        browser.execute_script("document.querySelector('input[name=csrf]').value = 'forged';")
        browser.find_element(By.ID, "confirm-button").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "problem"))
        assert "Refused, nothing changed" in browser.find_element(By.ID, "problem").text
        browser.get(thread_url(served))
        assert browser.execute_script(COUNT) == "78"  # still there
        browser.find_element(By.ID, "edit-delete-thread").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "confirm-button"))
        browser.find_element(By.ID, "confirm-button").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "done-message"))
        assert f"Erased thread '{MAIN}'" in browser.find_element(By.ID, "done-message").text
        browser.find_element(By.ID, "back").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "threads"))
        rows = browser.find_elements(By.CSS_SELECTOR, "#threads tbody tr")
        assert [r for r in rows if MAIN in r.text] == []
        assert len(rows) == 1
    finally:
        served.stop()


def test_the_log_is_rewritten_through_a_preview_and_a_resource_deleted(
    browser: Any, built_db: Built, tmp_path: Path
) -> None:
    """With --allow-edits: Revise log holds the whole log in a textarea; its preview shows the
    diff and writes nothing; confirming writes it, and the thread page shows the new log. Then
    the index's delete link for the resource erases all its threads."""
    db = tmp_path / "editable.db"
    shutil.copy(built_db.path, db)
    served = serve(db, allow_edits=True)
    try:
        browser.get(thread_url(served))
        browser.find_element(By.ID, "edit-revise").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "rewrite-text"))
        area = browser.find_element(By.ID, "rewrite-text")
        area.send_keys("\n* 🟢 (11:00) The user prefers tea, typed by hand")
        browser.find_element(By.ID, "rewrite-preview").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "confirm-diff"))
        added = browser.find_elements(By.CSS_SELECTOR, "#confirm-diff .line-added")
        assert [a.text.replace(" ", "") for a in added] == [
            "+*🟢(11:00)Theuserpreferstea,typedbyhand"
        ]
        browser.find_element(By.ID, "confirm-button").click()
        WebDriverWait(browser, 10).until(lambda d: "/thread?" in d.current_url)
        assert "prefers tea" in browser.page_source

        browser.get(served.url + "/")
        browser.find_element(By.CSS_SELECTOR, "a.delete-resource").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "confirm-button"))
        assert "threads" in browser.find_element(By.ID, "confirm-what").text
        browser.find_element(By.ID, "confirm-button").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "done-message"))
        assert "Erased resource" in browser.find_element(By.ID, "done-message").text
        browser.find_element(By.ID, "back").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.TAG_NAME, "main"))
        assert browser.find_elements(By.CSS_SELECTOR, "#threads tbody tr a[href*='/thread?']") == []
    finally:
        served.stop()
