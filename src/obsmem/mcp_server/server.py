"""The MCP server: :class:`~obsmem.mcp_server.tools.MemoryTools` behind the official ``mcp``
SDK's ``MCPServer`` (imported when a server is built, so the command line starts without it)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any

from ..errors import require_modules
from .arguments import MAX_MESSAGES, MAX_WORKING_MEMORY_CHARS, ROLES, BadArguments
from .tools import MemoryTools, ToolAnswer

if TYPE_CHECKING:
    from mcp.server import MCPServer

__all__ = ["INSTRUCTIONS", "build_server", "require_sdk"]

logger = logging.getLogger("obsmem.mcp")


def require_sdk() -> None:
    require_modules("the MCP server (obsmem mcp)", "mcp", ("mcp.server",))


INSTRUCTIONS = (
    "Long-term memory of one user ({resource}). `memory_context` gives what memory holds about "
    "the conversation (dated notes, then messages not observed yet); `remember` stores new "
    "messages; `recall` reads the exact wording of stored messages, pages back through them or "
    "lists the conversations; `memory_status` says whether memory works and what to fix."
)


# What each tool (but recall, whose words are the library's) tells the model it is for.
DESCRIPTIONS = {
    "remember": "Store messages of the conversation in memory, in order (the user's and "
    "yours). Memory observes them in the background; recall finds their exact wording.",
    "memory_context": "What memory holds about the conversation: dated notes of what was said "
    "and done (the most recent fact wins), the current task, working memory, and how many "
    "messages are not observed yet. Call it at the start of a conversation.",
    "memory_status": "Whether memory works for the conversation: the Observer and Reflector "
    "models, failures and what fixes them, and the windows against their thresholds.",
    "update_working_memory": "Replace the working memory about the user (shown by "
    "memory_context) with the whole updated document: keep everything still true, add what you "
    "learned, fix what changed.",
}


def build_server(tools: MemoryTools) -> MCPServer:
    """The MCP server of ``tools``, on the official SDK (``mcp.server.MCPServer``)."""
    require_sdk()
    from mcp.server import MCPServer

    from .. import __version__
    from ..recall import RECALL_DESCRIPTION

    server = MCPServer(
        "obsmem",
        version=__version__,
        instructions=INSTRUCTIONS.format(resource=tools.resource),
        log_level="WARNING",
    )

    async def recall(**arguments: Any) -> ToolAnswer:
        return await tools.recall(arguments)

    work: dict[str, Callable[..., Awaitable[ToolAnswer]]] = {
        "recall": recall,
        "remember": tools.remember,
        "memory_context": tools.memory_context,
        "memory_status": tools.memory_status,
    }
    if tools.memory.agent_updates_working_memory:
        work["update_working_memory"] = tools.update_working_memory
    descriptions = {**DESCRIPTIONS, "recall": RECALL_DESCRIPTION}
    for name, parameters in _parameters(tools).items():
        if name in work:
            tool = _tool(name, work[name], parameters)
            server.add_tool(tool, description=descriptions[name], structured_output=False)
    return server


def _tool(
    name: str, work: Callable[..., Awaitable[ToolAnswer]], parameters: dict[str, Any]
) -> Callable[..., Awaitable[Any]]:
    """The tool function the SDK reads: its signature gives the schemas the client sees
    (``parameters``: name to ``Annotated`` type, every one optional). The tools check what they
    are sent themselves, so a bad argument is answered in words that say what to send. It
    answers text for the model and the data as structured content; a bad argument or a refused
    operation is a tool error saying what to do."""
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import CallToolResult, TextContent

    from ..cli.common import describe_error

    async def tool(**arguments: Any) -> Any:
        try:
            result = await work(**arguments)
        except BadArguments as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:  # a refused operation, a model or store failure: logged too
            known = describe_error(exc)
            if known is None:
                raise
            logger.warning("%s", known[1])
            raise ToolError(known[1]) from None
        return CallToolResult(
            content=[TextContent(type="text", text=result.text)], structured_content=result.data
        )

    keyword = inspect.Parameter.KEYWORD_ONLY
    tool.__name__ = name
    tool.__signature__ = inspect.Signature(  # pyright: ignore[reportFunctionMemberAccess]
        [
            inspect.Parameter(
                p, keyword, annotation=a, default=False if p == "include_messages" else None
            )
            for p, a in parameters.items()
        ],
        return_annotation=CallToolResult,
    )
    return tool


def _parameters(tools: MemoryTools) -> dict[str, dict[str, Any]]:
    """Each tool's parameters as the SDK reads them: ``Annotated`` types with JSON schemas and
    descriptions."""
    from pydantic import Field, WithJsonSchema

    from ..recall import RecallRequest

    def param(schema: dict[str, Any], description: str | None = None) -> Any:
        return Annotated[Any, WithJsonSchema(schema), Field(description=description)]

    thread = param(
        {"type": ["string", "null"]},
        f"Leave out: this server serves only the conversation {tools.thread!r}."
        if tools.locked
        else f"The conversation (default {tools.thread!r}); a new id starts a new one.",
    )
    recalled: dict[str, Any] = RecallRequest.model_json_schema()["properties"]
    message = {
        "type": "object",
        "properties": {
            "role": {"enum": list(ROLES)},
            "content": {"type": "string", "description": "the message's text"},
            "created_at": {
                "type": "string",
                "description": "when it was said, ISO 8601 with a time zone (default: now)",
            },
            "id": {
                "type": "string",
                "description": "the message's own id: a message sent again with the same id "
                "is stored once (send ids to retry safely)",
            },
        },
        "required": ["role", "content"],
        "additionalProperties": False,
    }
    messages = {"type": "array", "minItems": 1, "maxItems": MAX_MESSAGES, "items": message}
    return {
        "recall": {
            name: param({k: v for k, v in schema.items() if k != "title"})
            for name, schema in recalled.items()
        },
        "remember": {
            "messages": param(messages, 'the messages, e.g. [{"role": "user", "content": "..."}]'),
            "thread_id": thread,
        },
        "memory_context": {
            "thread_id": thread,
            "include_messages": param(
                {"type": "boolean", "default": False}, "also show the messages not observed yet"
            ),
        },
        "memory_status": {"thread_id": thread},
        "update_working_memory": {
            "content": param(
                {"type": "string", "maxLength": MAX_WORKING_MEMORY_CHARS},
                "the whole working memory, as memory_context shows it, with your changes",
            ),
            "thread_id": thread,
        },
    }
