"""Observational memory for other agent frameworks, one module per framework:
:mod:`.pydantic_ai` (a capability and a history processor), :mod:`.openai_agents` (an Agents SDK
session, extra ``openai-agents``), :mod:`.langchain` (``create_agent`` middleware, extra
``langgraph``) and :mod:`.langgraph` (hand-built graphs and ``create_react_agent``). All store
the conversation in the same :class:`~obsmem.Memory` thread, so a conversation can move from one
framework to another and keep its observations; all take their steps through
:class:`~obsmem.integrations.door.Door`. Nothing is imported here: import the module you use.
"""

from __future__ import annotations

__all__: list[str] = []
