"""``obsmem mcp``: observational memory as an MCP server, over stdio or streamable HTTP (the
README's "An MCP server" says what it serves, how a client is configured and how memory
failures and bad arguments are answered).

``tools`` holds the tools' logic (:class:`MemoryTools`, without the SDK), ``arguments`` the
checks of what they are sent, ``ids`` the per-resource namespace of a client's conversation
ids, ``server`` puts the tools behind the official ``mcp`` SDK's ``MCPServer``
(:func:`build_server`), ``command`` is ``obsmem mcp`` itself (:func:`add`).
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
