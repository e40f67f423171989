"""obsmem: observational memory for LLM agents.

A background Observer turns old messages into a dense, dated observation log; a Reflector
rewrites the log shorter when it grows. The agent's context stays inside a fixed budget for
conversations of any length, and every raw message stays in storage.
"""

from .agent import Agent, GenerateResult
from .engine import ObservationalMemory, PreparedContext
from .errors import (
    ConfigError,
    ConflictError,
    MissingExtraError,
    ModelError,
    ObserverOutputError,
    ObsmemError,
    StoreError,
)
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
