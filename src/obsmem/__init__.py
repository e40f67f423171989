"""obsmem: observational memory for LLM agents.

A background Observer turns old messages into a dense, dated observation log; a Reflector
rewrites the log shorter when it grows. The agent's context stays inside a fixed budget for
conversations of any length, and every raw message stays in storage.

Names load on first use: ``import obsmem`` stays light (no model library, no numpy) until an
agent, a model or an optional feature is actually used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from .agent import Agent, GenerateResult
    from .engine import ObservationalMemory, PreparedContext
    from .events import Hooks
    from .extractors import Extractor
    from .memory import Memory
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
