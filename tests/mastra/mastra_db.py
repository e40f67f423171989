"""Real Mastra databases for the import tests, written by Mastra's own code.

The packages pinned in ``package.json`` (``@mastra/core``, ``@mastra/memory``, ``@mastra/libsql``
and a Node 22 binary from the ``node`` package) are installed once into a cache folder outside
the repository, keyed by the pins: ``$OBSMEM_TEST_CACHE/mastra-<hash>`` or
``~/.cache/obsmem-tests/mastra-<hash>``. ``make_db.mjs`` then writes the database with
``@mastra/memory`` over ``@mastra/libsql``. When npm is missing or cannot install (offline), or
no Node 22 can be had, the tests skip and say why.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import pytest

HERE = Path(__file__).parent
PACKAGE = HERE / "package.json"
SCRIPT = HERE / "make_db.mjs"
QUIET = {
    "MASTRA_TELEMETRY_DISABLED": "1",  # @mastra/core's feature telemetry
    "MASTRA_OFFLINE": "1",  # no provider-registry fetches
    "MASTRA_AUTO_REFRESH_PROVIDERS": "false",
    "DO_NOT_TRACK": "1",
    "NO_UPDATE_NOTIFIER": "1",
    "npm_config_update_notifier": "false",
    "npm_config_fund": "false",
    "npm_config_audit": "false",
    "npm_config_fetch_retries": "1",
    "npm_config_fetch_retry_mintimeout": "2000",  # offline: give up in seconds, not minutes
    "npm_config_fetch_retry_maxtimeout": "10000",
}
_unavailable: list[str] = []  # why Mastra could not be installed, once per session


def _cache() -> Path:
    pins = hashlib.sha256(PACKAGE.read_bytes()).hexdigest()[:12]
    root = os.environ.get("OBSMEM_TEST_CACHE") or Path.home() / ".cache" / "obsmem-tests"
    return Path(root) / f"mastra-{pins}"


def _why(text: str) -> str:
    """npm's first error lines (the code and its summary)."""
    lines = [line for line in text.splitlines() if line.startswith("npm error") and line[10:]]
    return " | ".join(lines[:2]) or text.strip()[-300:]


def _skip(reason: str) -> NoReturn:
    _unavailable.append(reason)
    pytest.skip(f"Mastra import NOT TESTED: {reason}")


def _install(cache: Path) -> None:
    """npm-install the pins into ``cache`` (built aside, then moved in, so a half-done install
    is never used)."""
    npm = shutil.which("npm")
    if npm is None:
        _skip("npm is not installed (it installs the pinned Mastra packages)")
    cache.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{cache.name}-", dir=cache.parent))
    shutil.copy(PACKAGE, work / "package.json")
    try:
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--no-package-lock"],
            cwd=work,
            env={**os.environ, **QUIET},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(work, ignore_errors=True)
        _skip("npm install of the pinned Mastra packages took over 10 min")
    if done.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        _skip(f"npm install failed (offline?): {_why(done.stderr)}")
    try:
        work.rename(cache)
    except OSError:  # another process installed it first
        shutil.rmtree(work, ignore_errors=True)


def _node(cache: Path) -> str:
    """A Node 22 or later: the pinned ``node`` package's, else the machine's."""
    for candidate in (cache / "node_modules" / ".bin" / "node", shutil.which("node")):
        if candidate is None or not Path(candidate).exists():
            continue
        version = subprocess.run(
            [str(candidate), "--version"], capture_output=True, text=True, check=False
        ).stdout
        if version.startswith("v") and int(version[1:].split(".")[0]) >= 22:
            return str(candidate)
    _skip("no Node 22 or later (the node npm package's install script did not run)")


def mastra_database(path: Path, *, observational_memory: bool = True) -> dict[str, Any]:
    """Write a real Mastra database at ``path``; returns make_db.mjs's summary (ids, times)."""
    if _unavailable:
        pytest.skip(f"Mastra import NOT TESTED: {_unavailable[0]}")
    cache = _cache()
    if not (cache / "node_modules" / "@mastra" / "libsql").is_dir():
        _install(cache)
    node = _node(cache)
    script = cache / SCRIPT.name  # next to node_modules, so its imports resolve
    shutil.copy(SCRIPT, script)
    args = [node, str(script), str(path)] + ([] if observational_memory else ["--no-om"])
    done = subprocess.run(
        args, env={**os.environ, **QUIET}, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"make_db.mjs failed: {done.stderr}"
    return json.loads(done.stdout)
