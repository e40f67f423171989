"""The packaged store contract, run the way a third party runs it: a test module of their own
subclasses ``StoreConformance`` and gives it a ``store`` fixture, under pytest's and
pytest-asyncio's default settings (no ``asyncio_mode = auto``), in a pytest of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import obsmem

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(obsmem.__file__).resolve().parents[1]  # the obsmem this run tests

_MODULE = """
import pytest_asyncio

from obsmem.testing.store_conformance import StoreConformance
from tests.conformance.minimal_store import {store}


class TestTheirStore(StoreConformance):
    @pytest_asyncio.fixture
    async def store(self):
        store = {store}()
        yield store
        await store.aclose()
"""


def _run_suite(tmp_path: Path, store: str) -> subprocess.CompletedProcess[str]:
    """The suite on ``store`` (a class of tests/conformance/minimal_store.py), in a directory
    with a pytest configuration of its own: warnings are errors, and pytest-asyncio keeps its
    default (strict) mode."""
    ini = "[pytest]\nfilterwarnings = error\nasyncio_default_fixture_loop_scope = function\n"
    (tmp_path / "pytest.ini").write_text(ini)
    (tmp_path / "test_their_store.py").write_text(_MODULE.format(store=store))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_a_core_only_store_passes_and_its_missing_capabilities_are_skipped_by_name(
    tmp_path: Path,
) -> None:
    result = _run_suite(tmp_path, "CoreOnlyStore")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert " failed" not in out
    for capability, method in [
        ("SearchableStore", "search_embeddings"),
        ("LedgerStore", "list_cycles"),
        ("ErasableStore", "delete_thread"),
        ("TransferStore", "write_import"),
    ]:
        skipped = [line for line in out.splitlines() if f"does not offer {capability}" in line]
        assert skipped, f"no test skipped naming {capability}:\n{out}"
        assert method in skipped[0]
    summary = out.strip().splitlines()[-1]
    assert "skipped" in summary, summary
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed >= 30, summary  # the core ran: threads, text, load and commit, records


@pytest.mark.slow
def test_a_store_whose_commit_ignores_the_version_fails_the_suite(tmp_path: Path) -> None:
    result = _run_suite(tmp_path, "VersionBlindStore")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    for rule in (
        "test_a_stale_version_is_a_conflict",
        "test_a_commit_brings_its_groups_metadata_and_the_new_snapshot",
    ):
        assert f"FAILED test_their_store.py::TestTheirStore::{rule}" in out, out
