"""obsmem: observational memory for LLM agents.

A background Observer turns old messages into a dense, dated observation log; a Reflector
rewrites the log shorter when it grows. The agent's context stays inside a fixed budget for
conversations of any length, and every raw message stays in storage.

Names load on first use: ``import obsmem`` loads the exception tree and nothing else (no
message types, model library or numpy) until a name is actually used.
"""

from __future__ import annotations

from ._lazy import lazy_names
from .errors import (
    ConfigError,
    ConflictError,
    MemoryUnavailableError,
    MissingExtraError,
    ModelError,
    ObserverOutputError,
    ObsmemError,
    StoreError,
)

TYPE_CHECKING = False  # not ``typing``'s: importing ``typing`` is a third of the start
if TYPE_CHECKING:
    from .agent import Agent, GenerateResult
    from .engine import ObservationalMemory, PreparedContext
    from .events import Hooks
    from .extractors import Extractor
    from .memory import Memory
    from .messages import (
        DataPart,
        FilePart,
        ImagePart,
        Message,
        ReasoningPart,
        TextPart,
        ToolCallPart,
        ToolResultPart,
    )
    from .models import ModelByInputTokens
    from .options import (
        ObservationalMemoryOptions,
        ObservationOptions,
        ReflectionOptions,
        RetrievalOptions,
        resolve_options,
    )

__version__ = "0.1.0"

_LAZY = {
    "Agent": "agent",
    "GenerateResult": "agent",
    "ObservationalMemory": "engine",
    "PreparedContext": "engine",
    "Hooks": "events",
    "Extractor": "extractors",
    "Memory": "memory",
    "DataPart": "messages",
    "FilePart": "messages",
    "ImagePart": "messages",
    "Message": "messages",
    "ReasoningPart": "messages",
    "TextPart": "messages",
    "ToolCallPart": "messages",
    "ToolResultPart": "messages",
    "ModelByInputTokens": "models",
    "ObservationalMemoryOptions": "options",
    "ObservationOptions": "options",
    "ReflectionOptions": "options",
    "RetrievalOptions": "options",
    "resolve_options": "options",
}

__all__ = [
    "Agent",
    "ConfigError",
    "ConflictError",
    "DataPart",
    "Extractor",
    "FilePart",
    "GenerateResult",
    "Hooks",
    "ImagePart",
    "Memory",
    "MemoryUnavailableError",
    "Message",
    "MissingExtraError",
    "ModelByInputTokens",
    "ModelError",
    "ObservationOptions",
    "ObservationalMemory",
    "ObservationalMemoryOptions",
    "ObserverOutputError",
    "ObsmemError",
    "PreparedContext",
    "ReasoningPart",
    "ReflectionOptions",
    "RetrievalOptions",
    "StoreError",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "__version__",
    "resolve_options",
]


__getattr__ = lazy_names(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
