"""obsmem: observational memory for LLM agents."""

from .errors import (
    ConfigError,
    ConflictError,
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

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConflictError",
    "DataPart",
    "FilePart",
    "ImagePart",
    "Message",
    "MissingExtraError",
    "ModelError",
    "ObserverOutputError",
    "ObsmemError",
    "ReasoningPart",
    "StoreError",
    "TextPart",
    "ToolCallPart",
    "ToolResultPart",
    "__version__",
]
