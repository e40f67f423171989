"""Conversions between obsmem messages and the message formats of model libraries.

* :mod:`obsmem.convert.pydantic_ai`: pydantic-ai ``ModelMessage`` lists.
* :mod:`obsmem.convert.openai_chat`: OpenAI chat-completions message dicts.
* :mod:`obsmem.convert.openai_agents`: OpenAI Agents SDK input items.
* :mod:`obsmem.convert.langchain`: LangChain ``BaseMessage`` s (LangGraph, ``create_agent``).

Both directions are lossless: what obsmem has no field for travels in ``metadata``. ``DataPart``
markers (``data-om-*`` and the like) are stored but never sent to a model, so the ``to_*``
functions drop them; the one exception is a ``DataPart`` a ``from_*`` function made to carry an
item of its own format that obsmem has no type for (named ``"pydantic-ai:..."``,
``"openai-chat:..."``, ``"openai-agents:..."`` or ``"langchain:..."``), which the matching
``to_*`` function restores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from obsmem._lazy import lazy_names

if TYPE_CHECKING:
    from obsmem.convert.langchain import from_langchain, to_langchain
    from obsmem.convert.openai_agents import from_agents_items, to_agents_items
    from obsmem.convert.openai_chat import from_openai_chat, to_openai_chat
    from obsmem.convert.pydantic_ai import from_pydantic_ai, to_pydantic_ai

__all__ = [
    "from_agents_items",
    "from_langchain",
    "from_openai_chat",
    "from_pydantic_ai",
    "to_agents_items",
    "to_langchain",
    "to_openai_chat",
    "to_pydantic_ai",
]

_LAZY = {  # each conversion loads its library (pydantic-ai, langchain-core): only when used
    "from_agents_items": "openai_agents",
    "to_agents_items": "openai_agents",
    "from_langchain": "langchain",
    "to_langchain": "langchain",
    "from_openai_chat": "openai_chat",
    "to_openai_chat": "openai_chat",
    "from_pydantic_ai": "pydantic_ai",
    "to_pydantic_ai": "pydantic_ai",
}


__getattr__ = lazy_names(__name__, _LAZY)
