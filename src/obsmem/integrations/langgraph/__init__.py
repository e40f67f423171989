"""Observational memory for LangGraph: hand-built graphs and ``create_react_agent``.

For ``langchain.agents.create_agent`` use the middleware in :mod:`obsmem.integrations.langchain`
(recommended); it is built on :class:`LangGraphMemory`, which this module also offers for:

* a hand-built ``StateGraph`` (see ``docs/langgraph.md``): in the model node,
  ``sent = lg.model_input(state["messages"], config)`` stores what is new and returns what memory
  assembled; call the model with ``sent.messages``; ``lg.save([reply], config)`` stores the answer
  at once. Each has an async twin (``amodel_input``, ``asave``).
* ``langgraph.prebuilt.create_react_agent`` (deprecated upstream in favour of ``create_agent``):
  ``lg = LangGraphMemory(memory)``, then ``create_react_agent(lg.compacting(llm), tools,
  pre_model_hook=lg.pre_model_hook, post_model_hook=lg.post_model_hook)``. The hooks are
  runnables, so ``invoke``/``stream`` and ``ainvoke``/``astream`` work; the wrapped model sends
  the agent's ``prompt`` and memory's system message as one, retries once after an overflow
  and stores each answer at once (:mod:`.compacting`). ``pre_model_hook(memory)`` and
  ``post_model_hook(memory)`` make the hooks alone.

Before every model call, what is new in the graph state (the turn's input, then each step's tool
calls and results) is stored and memory assembles the context: observations as one system
message (after the state's own system messages), then the raw messages, this turn's included.
Activation, synchronous observation and buffering happen between the steps of a tool loop.

* One compiled graph serves every user: the thread is the run's
  ``config["configurable"]["thread_id"]`` and the resource (the user) is ``resource_id`` (or
  ``user_id``) of the runtime context (``graph.invoke(..., context={"user_id": ...})``) or of
  ``config["configurable"]``, read on every call. ``resource=``/``thread=`` fix them instead.
* New messages are those the thread has not stored: each LangChain message is stored under an id
  derived from its own (LangGraph gives every state message one), so the store's idempotent append
  tells them apart, across processes and restarts. The ids already stored are remembered per
  thread, so a plain turn costs two store calls (the model node and the answer); a thread seen
  first in this process costs one look-up more.
* AI messages with ``tool_calls`` and ``ToolMessage`` results are stored as tool calls and tool
  results, pairs kept. ``SystemMessage`` s in the state are sent first on every call and never
  stored.
* The memory events of the thread (``data-om-*``, as ``event.to_dict()``) that happen while a hook
  runs go to LangGraph's custom stream: ``graph.stream(..., stream_mode="custom")`` shows them.
* ``trim_checkpoint=True``: messages memory has observed leave the graph state
  (``RemoveMessage``), so the checkpointer keeps only what memory still sends raw; the full
  history stays in obsmem's store.
* A run stopped on an ``interrupt`` (an approval) leaves its tool calls waiting as the latest
  step: memory never observes them as interrupted, and on ``Command(resume=...)`` each result is
  stored with its call. A new input instead of the resume abandons the interrupt (LangGraph drops
  it), and the calls are shown to the model as interrupted.
* The context mentions the ``recall`` tool only to an agent that has it: ``recall=True`` says the
  agent was given :meth:`LangGraphMemory.recall_tool` (making the tool from the same object says
  so too).
* ``model=``: the chat model the graph calls (``LangGraphMemory(memory, model=llm)``,
  ``pre_model_hook(memory, model=llm)``, or per call ``model_input(..., model=llm)``). Memory
  then knows the actor (``ChatOpenAI(model="gpt-5-mini")`` is ``openai/gpt-5-mini``,
  :func:`actor_model_of`): images are counted by its provider's rules, a provider change
  activates buffered observations early (with ``activateOnProviderChange``), and for Anthropic
  models and OpenAI's from GPT-5.6 on the system message (the graph's instructions and memory's
  observations, which change only with a memory cycle) ends with a prompt-cache breakpoint
  (``cache_control``, ``prompt_cache_breakpoint``). Gemini and earlier OpenAI models cache
  prefixes on their own and need none.

A Memory used from sync code (``invoke``, ``stream``) does its work on its own loop thread
(``memory.run_sync``): keep to one style per Memory, and end with ``memory.close()`` there (or
``await memory.aclose()`` in async code).

Every call takes its step through :class:`~obsmem.integrations.door.Door`. The package's parts:
:mod:`.memory` (:class:`LangGraphMemory`), :mod:`.model_input` (what a model call is sent, the
graph state read), :mod:`.call_context` (the conversation from the config and runtime context,
the custom stream, the sync bridge), :mod:`.runnables` (the hooks, the hold of waiting calls
and the ``recall`` tool a :class:`LangGraphMemory` hands out), :mod:`.hooks` (the same as
functions of a ``Memory``), :mod:`.node` (a whole model node), :mod:`.compacting`
(``create_react_agent``'s model, wrapped) and :mod:`.models` (the actor's model and its cache
breakpoint). Imports run one way: ``hooks`` -> ``memory`` -> ``runnables``, ``node``,
``compacting`` -> ``model_input``, ``call_context``, ``models``. The message conversion is
:mod:`obsmem.convert.langchain`.
"""

from __future__ import annotations

from importlib.util import find_spec

from obsmem.errors import MissingExtraError

if find_spec("langchain_core") is None:  # pragma: no cover - depends on the environment
    raise MissingExtraError("obsmem.integrations.langgraph", "langgraph", package="langchain-core")

from obsmem.convert.langchain import METADATA_KEY, from_langchain, to_langchain

from .call_context import (
    RESOURCE_KEYS,
    BoundCall,
    IdFrom,
    StreamWriter,
    run_sync,
    runtime_context,
)
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
