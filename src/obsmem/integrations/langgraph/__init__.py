"""Observational memory for LangGraph: hand-built graphs, ``create_react_agent`` and (through
:mod:`obsmem.integrations.langchain`) ``create_agent``. The guide is ``docs/langgraph.md``.

A message is new when the thread has not stored its LangChain id (the ids stored are remembered
per thread, so a plain turn costs two store calls). A Memory used from sync code works on its
own loop thread: end with ``memory.close()`` there (``await memory.aclose()`` in async code).

Every call takes its step through :class:`~obsmem.integrations.door.Door`; each module's
docstring says what it holds, and the message conversion is :mod:`obsmem.convert.langchain`.
"""

from __future__ import annotations

from importlib.util import find_spec

from obsmem.errors import MissingExtraError

if find_spec("langchain_core") is None:  # pragma: no cover - depends on the environment
    raise MissingExtraError("obsmem.integrations.langgraph", "langgraph", package="langchain-core")

from obsmem.convert.langchain import METADATA_KEY, from_langchain, to_langchain

from .call_context import RESOURCE_KEYS, BoundCall, IdFrom, StreamWriter, run_sync, runtime_context
from .hooks import ModelHook, hold_waiting_calls, post_model_hook, pre_model_hook, recall_tool
from .memory import KNOWN_THREADS, LangGraphMemory
from .model_input import ModelInput, joined_system
from .models import actor_model_of, with_cache_breakpoint

__all__ = [
    "KNOWN_THREADS",
    "METADATA_KEY",
    "RESOURCE_KEYS",
    "BoundCall",
    "IdFrom",
    "LangGraphMemory",
    "ModelHook",
    "ModelInput",
    "StreamWriter",
    "actor_model_of",
    "from_langchain",
    "hold_waiting_calls",
    "joined_system",
    "post_model_hook",
    "pre_model_hook",
    "recall_tool",
    "run_sync",
    "runtime_context",
    "to_langchain",
    "with_cache_breakpoint",
]
