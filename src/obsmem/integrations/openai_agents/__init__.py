"""Observational memory as an OpenAI Agents SDK ``Session`` (the README's Agents SDK section is
the guide): :class:`ObservationalSession` implements the SDK's ``Session`` protocol on a Memory
thread, or wraps an existing session as the full history.

Pass ``RunConfig(call_model_input_filter=session.call_model_input_filter)``: the SDK gives a
session no say in a step's input, so the filter cannot be put in for you, and without it memory
is assembled once per run (the session says so once with a WARNING on the ``obsmem`` logger).
``SessionSettings(limit=n)`` is honoured on top of memory: the Runner never sees the limit, which
would make it read the raw tail.

The package needs nothing from the SDK to be imported (``pip install "obsmem[openai-agents]"``);
each module's docstring says what it holds. The item conversion is
:mod:`obsmem.convert.openai_agents`.
"""

from obsmem.convert.openai_agents import METADATA_KEY, from_agents_items, to_agents_items
from obsmem.integrations.openai_agents.history import ClearChoice
from obsmem.integrations.openai_agents.session import InnerSession, ObservationalSession
from obsmem.integrations.openai_agents.tracing import MemoryStreamEvent, trace_memory

__all__ = [
    "METADATA_KEY",
    "ClearChoice",
    "InnerSession",
    "MemoryStreamEvent",
    "ObservationalSession",
    "from_agents_items",
    "to_agents_items",
    "trace_memory",
]
