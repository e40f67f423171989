"""A lean start: ``import obsmem`` and ``obsmem --help`` load only what they need.

What each start loads is read from ``sys.modules`` in a fresh interpreter (the time it takes is
a performance figure, measured by ``bench/startup.py``, never asserted here).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from obsmem.cli import COMMANDS

SRC = Path(__file__).resolve().parents[1] / "src"

# The store, server and model modules of obsmem, and the libraries behind them.
HEAVY = (
    "obsmem.stores",
    "obsmem.proxy",
    "obsmem.mcp_server",
    "obsmem.ui",
    "obsmem.models",
    "obsmem.llm",
    "obsmem.engine",
    "obsmem.memory",
    "obsmem.integrations",
    "sqlite3",
    "pydantic",
    "pydantic_ai",
    "openai",
    "httpx",
    "starlette",
    "uvicorn",
    "mcp",
    "numpy",
    "matplotlib",
)
SERVERS = ("obsmem.proxy", "obsmem.mcp_server")


def _run(code: str) -> tuple[str, list[str]]:
    """What ``code`` printed, and the modules loaded when it was done."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "COLUMNS": "200"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    *printed, modules = result.stdout.splitlines()
    return "\n".join(printed), json.loads(modules)


def _cli(*argv: str) -> tuple[str, list[str]]:
    return _run(
        "import contextlib\nfrom obsmem.cli import main\n"
        f"with contextlib.suppress(SystemExit):\n    main({list(argv)!r})"
    )


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


def test_import_obsmem_loads_the_exception_tree_and_nothing_else() -> None:
    _, modules = _run("import obsmem")
    assert [m for m in modules if m.startswith("obsmem")] == [
        "obsmem",
        "obsmem._lazy",
        "obsmem.errors",
    ]
    assert "typing" not in modules  # imported by most things obsmem holds, a third of the start
    assert "dataclasses" not in modules


def test_the_public_names_still_load_on_first_use() -> None:
    out, _ = _run("import obsmem\nprint(obsmem.Message.__module__, obsmem.Memory.__module__)")
    assert out == "obsmem.messages obsmem.memory"


def test_help_lists_every_command_and_imports_no_store_server_or_model_module() -> None:
    out, modules = _cli("--help")
    listed = dict(re.findall(r"^    (\w+) +(.+)$", out, re.MULTILINE))
    for name, (_, line) in COMMANDS.items():
        assert listed.get(name) == line, out
    assert [m for m in modules if _under(m, HEAVY)] == []
    commands = {target.partition(":")[0] for target, _ in COMMANDS.values()}
    assert commands.isdisjoint(modules)


def test_version_reads_the_package_version() -> None:
    out, _ = _cli("--version")
    assert re.fullmatch(r"obsmem \d+\.\d+\S*", out), out


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_shows_its_full_help_and_loads_no_other_server(name: str) -> None:
    out, modules = _cli(name, "--help")
    assert out.startswith(f"usage: obsmem {name} "), out
    assert "-h, --help" in out, out
    own = COMMANDS[name][0].partition(":")[0]
    others = tuple(server for server in SERVERS if not own.startswith(f"{server}."))
    assert [m for m in modules if _under(m, others)] == []
    assert own in modules
    assert "pydantic_ai" not in modules
