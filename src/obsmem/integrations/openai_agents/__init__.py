"""Observational memory as an OpenAI Agents SDK ``Session``.

``ObservationalSession(memory, session_id=thread, resource=...)`` implements the SDK's ``Session``
protocol on a Memory thread: ``get_items()`` is the turn's context (memory's notes as ``system``
items, then the raw items), ``add_items`` stores the turn (each message keeps the SDK item it
came from), ``pop_item`` takes back the newest item and ``clear_session`` starts over as
``on_clear`` says. ``ObservationalSession.wrap(inner, memory, resource=...)`` keeps an existing
session (SQLite, Redis, ...) as the full history.

``RunConfig(call_model_input_filter=session.call_model_input_filter)`` gives memory at every
model call of a run, so memory works between the steps of a tool loop; without it memory is
assembled once per run, and the session says so once with a WARNING on the ``obsmem`` logger
(the SDK gives a session no say in a step's input, so the filter cannot be put in for you).
``session.compacting(model)`` wraps the agent's ``Model``: a step refused as too long is
compacted once and sent again. ``SessionSettings(limit=n)``, on the session or in a
``RunConfig``, is honoured on top of memory (the Runner never sees the limit, which would make
it read the raw tail). Memory's cycles are spans of the SDK trace they run in;
``session.stream_events(result)`` merges the thread's memory events into a streamed run's.
Sync code: ``with ObservationalSession(...) as session:`` runs memory's work on its own loop
thread. With retrieval on, ``session.tools()`` is the ``recall`` tool to give the agent.

The package needs nothing from the SDK to be imported (``pip install "obsmem[openai-agents]"``).
Its parts: :mod:`.session` (the ``Session`` the Runner is given), :mod:`.history` (approvals,
late results, ``SessionSettings``, clears), :mod:`.models` (the actor's model and its cache
breakpoint), :mod:`.compacting` (the wrapped model) and :mod:`.tracing` (spans and stream
events). The item conversion is :mod:`obsmem.convert.openai_agents`.
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
