"""The agent's model, wrapped (:meth:`ObservationalSession.compacting`): the Runner calls the
model itself and no session hook sees it refuse a request as too long, so the wrapper does.
Memory compacts the thread once and the same step is sent again with the smaller context; a
second refusal, or a compaction that cannot shrink the context, raises the model's error.
``Runner.run``, ``run_sync`` and ``run_streamed`` all get this.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from agents.models.interface import Model

if TYPE_CHECKING:
    from agents.items import ModelResponse

    from .session import ObservationalSession

__all__ = ["CompactingModel"]


class CompactingModel(Model):
    """``inner`` with one compaction and retry on a context-length refusal (see the module).
    ``model`` is the inner model's name, so memory names the actor as it would the inner one."""

    def __init__(self, inner: Model, session: ObservationalSession) -> None:
        self.inner = inner
        self.session = session
        self.model: Any = getattr(inner, "model", None)

    def __repr__(self) -> str:
        return f"CompactingModel({self.inner!r})"

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        try:
            return await self.inner.get_response(system_instructions, input, *args, **kwargs)
        except Exception as error:
            smaller = await self.session.after_overflow(error, _tools(args, kwargs))
            if smaller is None:
                raise
            return await self.inner.get_response(system_instructions, smaller, *args, **kwargs)

    async def stream_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """Streamed runs (``Runner.run_streamed``) too: a refusal comes before the first event
        (the request is refused as a whole), so the step is compacted and streamed again; an
        error after an event was passed on is raised as it is."""
        passed = False
        try:
            async for event in self.inner.stream_response(
                system_instructions, input, *args, **kwargs
            ):
                passed = True
                yield event
            return
        except Exception as error:
            if passed:
                raise
            smaller = await self.session.after_overflow(error, _tools(args, kwargs))
            if smaller is None:
                raise
        async for event in self.inner.stream_response(
            system_instructions, smaller, *args, **kwargs
        ):
            yield event

    async def close(self) -> None:
        close: Any = getattr(self.inner, "close", None)
        if close is not None:
            await close()


def _tools(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The ``tools`` argument of a model call (after the input and the model settings)."""
    tools = kwargs.get("tools", args[1] if len(args) > 1 else [])
    return list(tools or [])
