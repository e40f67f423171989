"""An actor model whose answers stop at an output cap, also when its server ignores ``max_tokens``.

:class:`OutputCapped` wraps a pydantic-ai model: each request sends ``max_tokens`` (unless the
settings name one) and reads the answer as a stream, counting its text as obsmem estimates tokens;
past the cap it stops reading, which closes the HTTP request (the server stops generating), and
the answer ends as one the server cut off at ``max_tokens`` would (finish reason ``length``). A
model that cannot stream (a ``FunctionModel`` without a stream function) answers whole. A
streamed run (``request_stream``) gets the capped answer replayed as a stream once it is read.

This module loads pydantic-ai; ``obsmem.models`` does not import it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, cast

from pydantic_ai import messages as pa
from pydantic_ai.models import (
    CompletedStreamedResponse,
    Model,
    ModelRequestParameters,
    StreamedResponse,
)
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from obsmem.models.streaming import can_stream, check_every, read_checked

__all__ = ["OutputCapped"]


class OutputCapped(WrapperModel):
    """``wrapped``, its answers cut off past ``cap`` tokens (see the module's docstring)."""

    def __init__(self, wrapped: Model, cap: int) -> None:
        from obsmem.tokens import HeuristicEstimator

        super().__init__(wrapped)
        self.max_output_tokens = cap
        self._count = HeuristicEstimator().count_text

    def _past_cap(self, text: str) -> str | None:
        """A verdict when ``text`` is over the cap as obsmem's estimator counts tokens."""
        return "past the cap" if self._count(text) > self.max_output_tokens else None

    def _with_cap(self, settings: ModelSettings | None) -> ModelSettings:
        return cast(ModelSettings, {"max_tokens": self.max_output_tokens, **(settings or {})})

    async def request(
        self,
        messages: list[pa.ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> pa.ModelResponse:
        settings = self._with_cap(model_settings)
        if not can_stream(self.wrapped):
            return await self.wrapped.request(messages, settings, model_request_parameters)
        async with self.wrapped.request_stream(
            messages, settings, model_request_parameters
        ) as stream:
            every = check_every(self.max_output_tokens)
            cut = await read_checked(stream, self._past_cap, every=every, thinking=True)
            response = stream.get()  # leaving the block closes the request when it was cut
        if cut is not None:
            return replace(response, finish_reason="length", state="complete")
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[pa.ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        response = await self.request(messages, model_settings, model_request_parameters)
        yield CompletedStreamedResponse(
            response, model_request_parameters=model_request_parameters, replay_events=True
        )
