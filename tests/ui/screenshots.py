"""Take the inspector's screenshots for docs/ui (1280x900), from the tests' replayed database.

    .venv/bin/python -m tests.ui.screenshots

Not a test: it writes into the repository, so it runs only by hand."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from urllib.parse import urlencode

from obsmem.stores import SQLiteStore

from .conftest import CHROMEDRIVER, CHROMIUM, serve
from .data import MAIN, build

OUT = Path(__file__).resolve().parents[2] / "docs" / "ui"


def main() -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if CHROMIUM is None or CHROMEDRIVER is None:
        raise SystemExit("apt-get install chromium chromium-driver")
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "obsmem.db"
        asyncio.run(build(lambda: SQLiteStore(db)))
        served = serve(db)
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp}/profile",
            "--window-size=1280,900",
        ):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        try:
            # The window's outer size is set; grow it until the page itself is 1280x900.
            driver.get(served.url + "/")
            width, height = driver.execute_script("return [innerWidth, innerHeight]")
            driver.set_window_size(1280 + 1280 - width, 900 + 900 - height)
            q = urlencode({"id": MAIN})
            pages = {
                "index": "/",
                "thread": f"/thread?{q}",
                "generations": f"/generations?{q}",
                "cycles": f"/cycles?{q}",
                "chart": f"/chart?{q}",
            }
            for name, path in pages.items():
                driver.get(served.url + path)
                driver.save_screenshot(str(OUT / f"{name}.png"))
                print(OUT / f"{name}.png", (OUT / f"{name}.png").stat().st_size)
        finally:
            driver.quit()
            served.stop()


if __name__ == "__main__":
    main()
