"""``obsmem mcp --print-config CLIENT``: a snippet a desktop client can start the server from,
whatever its ``PATH`` (absolute paths, the options given carried, no secret printed)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from obsmem.cli import _parser  # pyright: ignore[reportPrivateUsage]

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-test-secret-never-printed"


def _run(
    client: str, *flags: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``obsmem mcp --print-config CLIENT FLAGS``, run with a ``PATH`` that holds no obsmem (as
    a desktop client's may not)."""
    return subprocess.run(
        [sys.executable, "-m", "obsmem", "mcp", "--print-config", client, *flags],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/nonexistent", **(env or {})},
        cwd=cwd,
        timeout=60,
    )


def _print_config(
    client: str, *flags: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[str, str]:
    result = _run(client, *flags, env=env, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout, result.stderr


def _starts(command: str, arguments: list[str], db: Path) -> None:
    """The command exists by absolute path and its arguments are ``obsmem mcp``'s, on ``db``."""
    assert Path(command).is_absolute()
    assert Path(command).exists(), command
    if arguments[:2] == ["-m", "obsmem"]:
        arguments = arguments[2:]
    else:
        assert Path(command).name.startswith("obsmem")
    args = _parser(arguments).parse_args(arguments)
    assert (args.command, args.db, args.resource) == ("mcp", str(db), "me")
    assert Path(args.db).is_absolute()
    assert Path(args.db).exists()


@pytest.mark.parametrize("client", ["claude-desktop", "cursor"])
def test_json_clients_get_absolute_paths_and_where_the_file_is(client: str, tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    db.touch()
    env = {"OBSMEM_MODEL": "google/gemini-3.5-flash-lite", "GOOGLE_API_KEY": SECRET}
    flags = ("--db", "memory.db", "--resource", "me", "--scope", "resource")
    out, err = _print_config(client, *flags, env=env, cwd=tmp_path)  # a relative --db
    server = json.loads(out)["mcpServers"]["memory"]
    _starts(server["command"], server["args"][:-2], db)
    assert server["args"][-2:] == ["--scope", "resource"]
    assert server["env"] == {
        "OBSMEM_MODEL": "google/gemini-3.5-flash-lite",
        "GOOGLE_API_KEY": "<your GOOGLE_API_KEY>",
    }
    assert SECRET not in out + err
    where = {
        "claude-desktop": [
            "~/Library/Application Support/Claude/claude_desktop_config.json",
            "%APPDATA%\\Claude\\claude_desktop_config.json",
            "~/.config/Claude/claude_desktop_config.json",
        ],
        "cursor": ["~/.cursor/mcp.json", ".cursor/mcp.json"],
    }[client]
    for path in where:
        assert path in err, err


def test_claude_code_gets_the_command_to_run(tmp_path: Path) -> None:
    db = tmp_path / "my memory.db"  # a space: the command must quote it
    db.touch()
    out, err = _print_config("claude-code", "--db", str(db), "--resource", "me", "--thread", "t")
    words = shlex.split(out)
    assert words[:6] == ["claude", "mcp", "add", "--scope", "user", "memory"]
    command, *arguments = words[words.index("--") + 1 :]
    assert arguments[-2:] == ["--thread", "t"]
    _starts(command, arguments[:-2], db)
    assert "~/.claude.json" in err


def test_without_the_resource_it_says_how_to_give_it() -> None:
    result = _run("cursor")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "pass --resource USER_ID (or set OBSMEM_RESOURCE)" in result.stderr


def test_the_readme_shows_what_the_command_prints() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## An MCP server", 1)[1].split("\n## ", 1)[0]
    [command] = re.findall(r"```sh\n(obsmem mcp --print-config .*?)\n```", section, re.S)
    [block] = re.findall(r"```json\n(.*?)```", section, re.S)
    shown = json.loads(block)["mcpServers"]["memory"]
    flags = shlex.split(command)[2:]  # after "obsmem mcp"
    env = {"OBSMEM_MODEL": shown["env"]["OBSMEM_MODEL"], "GOOGLE_API_KEY": SECRET}
    out, _ = _print_config(flags[1], *flags[2:], env={**env, "HOME": "/home/me"})
    printed = json.loads(out)["mcpServers"]["memory"]
    assert printed["args"] == shown["args"]
    assert printed["env"] == shown["env"]
    assert Path(shown["command"]).is_absolute()
    assert Path(shown["command"]).name == Path(printed["command"]).name == "obsmem"
