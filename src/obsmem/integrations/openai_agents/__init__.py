"""Observational memory as an OpenAI Agents SDK ``Session``.

``ObservationalSession(memory, session_id=thread, resource=...)`` implements the SDK's ``Session``
protocol (``get_items``, ``add_items``, ``pop_item``, ``clear_session``) on a Memory thread:

* ``get_items()`` (no limit) is the turn's context: memory work that is due runs, then the
  observations come back as ``system`` items followed by the raw (unobserved) items. The Runner
  appends the new input to it and sends it to the model.
* ``add_items(items)`` stores the turn: the input, then the model's messages, function calls,
  function call outputs and reasoning, in order. Each stored message keeps the SDK item it came
  from, so the SDK gets back exactly what it gave. A function call output stored in a later
  batch than its call (a run resumed after an approval) is named after its call, found in the
  thread.
* ``call_model_input_filter`` gives memory at every model call of a run: pass it as
  ``RunConfig(call_model_input_filter=session.call_model_input_filter)``. The Runner stores each
  step's items as they happen (``add_items`` before the next model call); the filter sends the
  model what memory assembled for that step, so activation, synchronous observation and
  buffering happen between the steps of a long tool loop. Without it, memory is assembled once
  per run and each later step is sent the Runner's whole growing item list: the first time a
  run calls the model again after a tool without the filter, the session says so with a
  WARNING on the ``obsmem`` logger (once per session). The SDK gives a session no say in a
  step's input (the Runner reads ``get_items()`` once, at the start of a run), so the filter
  cannot be put in for you.
* ``session.compacting(model)`` wraps the agent's SDK ``Model``: a step the model refuses as
  longer than its context is compacted once and sent again with the smaller context
  (:mod:`.compacting`); the Runner never sees the refusal when the retry fits.
* ``get_items(limit=n)`` is the raw tail: the newest ``n`` stored items, without those taken
  back. The SDK reads it to check its own writes (a run resumed after an approval does).
* ``pop_item()`` takes back the newest item and returns it (``Memory.retract_last``): storage
  keeps it, marked; it leaves the context and memory never observes it. The SDK pops items
  itself to undo a write it retries.
* ``clear_session()`` starts the conversation over, as ``on_clear`` says. By default
  (``"new_thread"``) nothing is forgotten: the session goes on in a new memory thread, and the
  old thread keeps its messages and what memory learned from them. ``on_clear="forget"``
  forgets this thread's memory as well (``Memory.forget_thread``, thread scope only).

``SessionSettings(limit=n)``, on the session or in ``RunConfig(session_settings=...)``, is
honoured on top of memory: the model gets memory's notes, at most ``n`` items of the history
from before the run, and the run's own items (as the SDK sends them with a plain session). The
Runner is never handed the limit itself, since it would read the raw tail instead of memory.

``ObservationalSession.wrap(inner, memory, resource=...)`` keeps an existing session (SQLite,
Redis, ...) as the full history: ``add_items``, ``pop_item`` and ``clear_session`` apply to both,
``get_items(limit=n)`` reads the inner session, and ``get_items()`` is the managed context.

Memory's cycles (observation, reflection, buffering, activation: the ``data-om-*`` events) are
spans of the SDK trace they run in (``obsmem.observation``, ``obsmem.buffering.observation``,
``obsmem.activation.observation``, ... with their token counts and the memory model's usage),
so any tracing processor sees them. ``session.subscribe(listener)`` hands the events of this
session's thread to your code, and ``session.stream_events(result)`` merges them into a
streamed run's events (the SDK's own stream has no room for events from outside the run).

Sync code (``Runner.run_sync``): ``with ObservationalSession(...) as session:`` (or
``own_loop=True`` and ``session.close()``) runs memory's work on the memory's own loop thread,
so the background buffering a call starts carries on between calls, and closes the memory at
the end.

With retrieval on, ``session.tools()`` is the ``recall`` tool to give the agent
(``Agent(tools=[*your_tools, *session.tools()])``); the filter tells the model about recall only
when the agent it calls has the tool.

Tool calls and their outputs are stored as obsmem tool-call and tool-result parts, so observation
never separates them and a thread started here continues in any other front door. Reasoning items
from another framework are not sent (the Responses API only accepts its own).

The package needs nothing from the SDK to be imported (install it with ``pip install
"obsmem[openai-agents]"``). Its parts: :mod:`.session` (the ``Session`` the Runner is given),
:mod:`.history` (approvals, late results, ``SessionSettings``, clears) and :mod:`.tracing`
(spans and stream events). The item conversion is :mod:`obsmem.convert.openai_agents`.
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
