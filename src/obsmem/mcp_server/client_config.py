"""``obsmem mcp --print-config CLIENT``: the snippet that adds this server to an MCP client.

A desktop client starts the server itself, with its own ``PATH`` and environment, not the
shell's: ``"command": "obsmem"`` is not found when obsmem lives in a virtual environment. So the
snippet names the executable and the ``--db`` file by absolute path, carries the options given
here, and lists the environment the server reads from this shell: the model settings as they
are, a provider key only by name (its value is never printed).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, TextIO

__all__ = ["CLIENTS", "print_config", "server_command"]

SERVER_NAME = "memory"

CLIENTS: dict[str, str] = {
    "claude-desktop": (
        "Merge it into Claude Desktop's claude_desktop_config.json (Settings > Developer > Edit "
        "Config), then restart Claude Desktop:\n"
        "  macOS:   ~/Library/Application Support/Claude/claude_desktop_config.json\n"
        "  Windows: %APPDATA%\\Claude\\claude_desktop_config.json\n"
        "  Linux:   ~/.config/Claude/claude_desktop_config.json"
    ),
    "cursor": (
        "Merge it into Cursor's mcp.json: ~/.cursor/mcp.json for every project, or "
        ".cursor/mcp.json in a project for that project only."
    ),
    "claude-code": (
        "Run it in a shell: Claude Code keeps the server in ~/.claude.json (--scope user); "
        "--scope project writes .mcp.json in the project instead."
    ),
}
"""The clients ``--print-config`` knows, with where each keeps its MCP servers."""

# Options of ``obsmem mcp`` a client's copy is started with when they differ from their
# defaults (--resource and --thread always, as they may come from this shell's environment; the
# stdio transport is the client's, so --transport, --host, --port and --token are not carried).
_CARRIED = (
    "--model",
    "--message-tokens",
    "--observation-tokens",
    "--buffer-tokens",
    "--scope",
    "--working-memory",
    "--search",
)
_PASSED_ON = ("OBSMEM_MODEL", "OPENAI_BASE_URL")  # read by the server, and not secrets


def server_command() -> list[str]:
    """The command that starts obsmem, by absolute path: the ``obsmem`` executable installed
    beside the running interpreter, else that interpreter with ``-m obsmem``. The interpreter's
    path is not resolved: a virtual environment's ``python`` is a link out of it."""
    python = Path(sys.executable).absolute()
    script = shutil.which("obsmem", path=str(python.parent))
    if script is not None:
        return [str(Path(script).absolute())]
    return [str(python), "-m", "obsmem"]


def _arguments(args: argparse.Namespace, default_of: Any) -> list[str]:
    from ..cli.stores import is_postgres_dsn

    db = args.db if is_postgres_dsn(args.db) else str(Path(args.db).expanduser().absolute())
    carried = ["mcp", "--db", db, "--resource", args.resource]
    if args.thread is not None:
        carried += ["--thread", args.thread]
    for flag in _CARRIED:
        dest = flag[2:].replace("-", "_")
        value = getattr(args, dest)
        if value is not None and value != default_of(dest):
            carried += [flag, str(value)]
    return carried


def _environment() -> dict[str, str]:
    from ..models.environment import KEY_VARIABLES

    env = {name: os.environ[name] for name in _PASSED_ON if os.environ.get(name)}
    env.update({name: f"<your {name}>" for name in KEY_VARIABLES if os.environ.get(name)})
    return env


def print_config(args: argparse.Namespace, default_of: Any, out: TextIO) -> int:
    """Print the snippet for ``args.print_config`` to ``out`` and where it goes to stderr."""
    client = args.print_config
    command, *arguments = [*server_command(), *_arguments(args, default_of)]
    env = _environment()
    if client == "claude-code":
        options = [f"--env={name}={value}" for name, value in env.items()]
        line = ["claude", "mcp", "add", "--scope", "user", *options, SERVER_NAME, "--", command]
        print(shlex.join([*line, *arguments]), file=out)
    else:
        server: dict[str, Any] = {"command": command, "args": arguments}
        if env:
            server["env"] = env
        print(json.dumps({"mcpServers": {SERVER_NAME: server}}, indent=2), file=out)
    if any(value.startswith("<your ") for value in env.values()):
        print("obsmem mcp: put your API key in place of <your ...>.", file=sys.stderr)
    print(f"obsmem mcp: {CLIENTS[client]}", file=sys.stderr)
    return 0
