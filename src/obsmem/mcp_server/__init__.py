"""``obsmem mcp``: observational memory as an MCP server, over stdio or streamable HTTP (the
README's "An MCP server" says what it serves and how a client is configured).

The server serves one resource: every tool reads and writes that resource's memory only,
whatever the model passes (a client's conversation ids are namespaced, :mod:`.ids`). Memory
work follows ``failure_policy="warn"``: a failing Observer is reported in the tool results and
as a WARNING on the ``obsmem`` logger, never as a crash. Bad arguments are tool errors that say
what to send instead.

``tools`` holds the tools' logic (:class:`MemoryTools`, without the SDK), ``arguments`` the
checks of what they are sent, ``server`` puts them behind the official ``mcp`` SDK's
``MCPServer`` (:func:`build_server`), ``command`` is ``obsmem mcp`` itself (:func:`add`).
"""

from __future__ import annotations

from .arguments import (
    MAX_CONTENT_CHARS,
    MAX_MESSAGES,
    MAX_WORKING_MEMORY_CHARS,
    BadArguments,
    parse_messages,
)
from .command import add
from .ids import default_thread
from .server import build_server
from .tools import MemoryTools, ToolAnswer

__all__ = [
    "MAX_CONTENT_CHARS",
    "MAX_MESSAGES",
    "MAX_WORKING_MEMORY_CHARS",
    "BadArguments",
    "MemoryTools",
    "ToolAnswer",
    "add",
    "build_server",
    "default_thread",
    "parse_messages",
]
