"""Observational memory for other agent frameworks, one module per framework.

* :mod:`obsmem.integrations.pydantic_ai`: ``ObservationalMemoryCapability`` for
  ``pydantic_ai.Agent(capabilities=[...])`` and ``history_processor`` for ``ProcessHistory``.
* :mod:`obsmem.integrations.openai_agents`: ``ObservationalSession``, an OpenAI Agents SDK session
  (extra ``openai-agents``).
* :mod:`obsmem.integrations.langchain`: ``ObservationalMemoryMiddleware`` for LangChain's
  ``create_agent`` (extra ``langgraph``).
* :mod:`obsmem.integrations.langgraph`: ``LangGraphMemory`` for a hand-built ``StateGraph`` and the
  ``pre_model_hook``/``post_model_hook`` of LangGraph's ``create_react_agent`` (extra
  ``langgraph``).

All of them store the conversation in the same :class:`~obsmem.Memory` thread as obsmem messages,
so one conversation can move from one framework to another and keep its observations. Nothing is
imported here: import the module of the framework you use.
"""

from __future__ import annotations

__all__: list[str] = []
