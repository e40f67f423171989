"""The MCP server: :class:`~obsmem.mcp_server.tools.MemoryTools` behind the official ``mcp``
SDK's ``MCPServer`` (imported when a server is built, so the command line starts without it)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, MissingExtraError, StoreError
from .arguments import MAX_MESSAGES, MAX_WORKING_MEMORY_CHARS, ROLES, BadArguments
from .tools import MemoryTools, ToolAnswer

if TYPE_CHECKING:
    from mcp.server import MCPServer

__all__ = ["INSTRUCTIONS", "build_server", "require_sdk"]

logger = logging.getLogger("obsmem.mcp")


def require_sdk() -> None:
    try:
        import mcp.server  # noqa: F401  # pyright: ignore[reportUnusedImport]
    except ImportError as exc:
        raise MissingExtraError("the MCP server (obsmem mcp)", "mcp", package="mcp") from exc


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
    from ..recall import RECALL_DESCRIPTION, with_recall_parameters

    server = MCPServer(
        "obsmem",
        version=__version__,
        instructions=INSTRUCTIONS.format(resource=tools.resource),
        log_level="WARNING",
    )
    schemas = _Schemas(tools)
    answer = _answer

    async def recall(**arguments: Any) -> Any:
        return await answer(tools.recall(arguments))

    async def remember(messages: Any = None, thread_id: Any = None) -> Any:
        return await answer(tools.remember(messages, thread_id))

    async def memory_context(thread_id: Any = None, include_messages: Any = False) -> Any:
        return await answer(tools.memory_context(thread_id, include_messages))

    async def memory_status(thread_id: Any = None) -> Any:
        return await answer(tools.memory_status(thread_id))

    async def update_working_memory(content: Any = None, thread_id: Any = None) -> Any:
        return await answer(tools.update_working_memory(content, thread_id))

    # The schemas the client sees; the tools check what they are sent themselves, so a bad
    # argument is answered in words that say what to send.
    with_recall_parameters(recall, schemas.recall(), returns=schemas.result)
    remember.__annotations__ = schemas.remember()
    memory_context.__annotations__ = schemas.memory_context()
    memory_status.__annotations__ = schemas.memory_status()
    update_working_memory.__annotations__ = schemas.update_working_memory()
    server.add_tool(recall, description=RECALL_DESCRIPTION, structured_output=False)
    named: dict[str, Callable[..., Awaitable[Any]]] = {
        "remember": remember,
        "memory_context": memory_context,
        "memory_status": memory_status,
    }
    if tools.memory.agent_updates_working_memory:
        named["update_working_memory"] = update_working_memory
    for name, tool in named.items():
        server.add_tool(tool, description=DESCRIPTIONS[name], structured_output=False)
    return server


async def _answer(work: Awaitable[ToolAnswer]) -> Any:
    """A tool's answer as the SDK's result (text for the model, the data as structured
    content); a bad argument or a refused operation as a tool error saying what to do."""
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import CallToolResult, TextContent

    from ..cli.common import describe_error

    try:
        result = await work
    except BadArguments as exc:
        raise ToolError(str(exc)) from None
    except (ConfigError, StoreError) as exc:
        logger.warning("%s", exc)
        raise ToolError(str(exc)) from None
    except Exception as exc:
        known = describe_error(exc)
        if known is None:
            raise
        logger.warning("%s", known[1])
        raise ToolError(known[1]) from None
    return CallToolResult(
        content=[TextContent(type="text", text=result.text)], structured_content=result.data
    )


class _Schemas:
    """The tools' parameters as the SDK reads them (``Annotated`` types with JSON schemas and
    descriptions), given at run time: the SDK reads a tool's annotations to build its schema."""

    def __init__(self, tools: MemoryTools) -> None:
        from mcp_types import CallToolResult
        from pydantic import Field, WithJsonSchema

        self.result = CallToolResult
        self._field = Field
        self._schema = WithJsonSchema
        self.thread_help = (
            f"Leave out: this server serves only the conversation {tools.thread!r}."
            if tools.locked
            else f"The conversation (default {tools.thread!r}); a new id starts a new one."
        )

    def _param(self, schema: dict[str, Any], description: str | None = None) -> Any:
        from typing import Annotated

        if description is None:
            return Annotated[Any, self._schema(schema)]
        return Annotated[Any, self._schema(schema), self._field(description=description)]

    def _thread(self) -> Any:
        return self._param({"type": ["string", "null"]}, self.thread_help)

    def recall(self) -> list[inspect.Parameter]:
        """The recall tool's parameters, each with its JSON schema and None by default."""
        from ..recall import RecallRequest, recall_parameters

        properties: dict[str, Any] = RecallRequest.model_json_schema()["properties"]
        untitled = {
            name: {k: v for k, v in schema.items() if k != "title"}
            for name, schema in properties.items()
        }
        return [
            p.replace(annotation=self._param(untitled[p.name]), default=None)
            for p in recall_parameters()
        ]

    def remember(self) -> dict[str, Any]:
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
            "messages": self._param(
                messages, 'the messages, e.g. [{"role": "user", "content": "..."}]'
            ),
            "thread_id": self._thread(),
            "return": self.result,
        }

    def memory_context(self) -> dict[str, Any]:
        return {
            "thread_id": self._thread(),
            "include_messages": self._param(
                {"type": "boolean", "default": False}, "also show the messages not observed yet"
            ),
            "return": self.result,
        }

    def memory_status(self) -> dict[str, Any]:
        return {"thread_id": self._thread(), "return": self.result}

    def update_working_memory(self) -> dict[str, Any]:
        return {
            "content": self._param(
                {"type": "string", "maxLength": MAX_WORKING_MEMORY_CHARS},
                "the whole working memory, as memory_context shows it, with your changes",
            ),
            "thread_id": self._thread(),
            "return": self.result,
        }
