"""Fixtures of the inspector tests: a database made by a scripted replay, the inspector served
by uvicorn on a free loopback port (in a thread, on a socket bound before it starts, so nothing
waits for it), and one headless Chromium per module driven by Selenium."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from obsmem.cli.common import open_store
from obsmem.stores import SQLiteStore

from .data import MESSAGE_TOKENS, OBSERVATION_TOKENS, build

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@dataclass
class Built:
    """A database made by the scripted replay, and what the replay reported."""

    path: Path
    report: dict[str, Any]


def digest(path: Path) -> tuple[str, int]:
    """The file's sha256 and mtime (ns)."""
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def config(
    label: str, token: str | None = None, poll_ms: int = 500, *, allow_edits: bool = False
) -> Any:
    """The inspector's settings for the replayed data (its thresholds: ``data.engine``)."""
    from obsmem.ui.app import UIConfig
    from obsmem.ui.queries import Thresholds

    return UIConfig(
        label=label,
        token=token,
        poll_ms=poll_ms,
        thresholds=Thresholds(MESSAGE_TOKENS, OBSERVATION_TOKENS),
        allow_edits=allow_edits,
    )


@pytest.fixture(scope="session")
def built_db(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The replayed database (never written after this)."""
    path = tmp_path_factory.mktemp("ui") / "replayed.db"
    report = asyncio.run(build(lambda: SQLiteStore(path)))
    return Built(path, report)


@dataclass
class Served:
    """An inspector listening on ``url`` over ``db``."""

    url: str
    db: Path
    server: Any
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def serve(
    db: Path | str, *, token: str | None = None, poll_ms: int = 500, allow_edits: bool = False
) -> Served:
    """Serve the inspector over ``db`` (opened read-only, or writable with ``allow_edits``) on
    a free loopback port, with the thresholds the replay used."""
    import uvicorn

    from obsmem.ui.app import create_app

    store = open_store(str(db), read_only=not allow_edits)
    app = create_app(store, config(str(db), token, poll_ms, allow_edits=allow_edits))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections queue here until the server accepts them
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", ws="none"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    return Served(f"http://127.0.0.1:{port}", Path(db), server, thread)


@pytest.fixture(scope="module")
def served(built_db: Built) -> Iterator[Served]:
    """The inspector over the replayed database."""
    s = serve(built_db.path)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module (skipped when chromium or chromedriver is
    missing)."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(
            "chromium and chromedriver are not installed (apt-get install chromium "
            "chromium-driver); the browser tests need them"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="obsmem-ui-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
