"""Reading a streamed answer with a cap: checked every so many characters as it streams in, and
left (which closes the request, so the server stops generating) at the first verdict. Memory's
own calls (:mod:`obsmem.llm`) stop a runaway answer this way, and the actor's model with an
output cap (:mod:`obsmem.models.output_cap`) its replies.

Importing this module loads neither pydantic-ai nor a provider SDK.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic_ai import messages as pa
    from pydantic_ai.models import Model

__all__ = [
    "CHECK_EVERY_CHARS",
    "REPEATING",
    "RunawayGuard",
    "can_stream",
    "check_every",
    "read_checked",
]


REPEATING = "repeating itself"
"""``LLMResult.cut_off`` for an answer stuck in a loop (the other reason names the cap)."""

CHECK_EVERY_CHARS = 1_000
"""How often (in characters of answer) a streaming answer is checked for running away; an output
cap smaller than this many tokens is checked every ``cap`` characters (:func:`check_every`)."""


def check_every(cap: int | None) -> int:
    """Characters of streamed answer between two checks against an output cap of ``cap`` tokens
    (a token is a character or more, so a small cap is not overrun by much)."""
    return CHECK_EVERY_CHARS if cap is None else max(1, min(CHECK_EVERY_CHARS, cap))


class RunawayGuard:
    """Decides whether an answer has run away: past ``cap`` tokens (as the local estimate counts
    them), or repeating itself (:func:`obsmem.observations.is_degenerate`). Every answer gets
    this verdict (a streamed one also while it streams), so callers need not check again."""

    def __init__(self, cap: int | None) -> None:
        from obsmem.tokens import HeuristicEstimator

        self.cap = cap
        self._count = HeuristicEstimator().count_text

    def check(self, text: str) -> str | None:
        from obsmem.observations import is_degenerate

        if is_degenerate(text):
            return REPEATING
        if self.cap is not None and self._count(text) > self.cap:
            return f"past the output cap of {self.cap} tokens"
        return None


async def read_checked(
    stream: AsyncIterable[pa.ModelResponseStreamEvent],
    check: Callable[[str], str | None],
    *,
    every: int,
    thinking: bool = False,
) -> str | None:
    """Read ``stream`` until it ends or ``check`` (called on the text so far every ``every``
    characters; with ``thinking``, reasoning counts as text) returns a verdict, which is
    returned. The caller leaving the stream then closes the request: the server stops."""
    from pydantic_ai import messages as pa

    kinds: tuple[type, ...] = (pa.TextPart, pa.ThinkingPart) if thinking else (pa.TextPart,)
    deltas: tuple[type, ...] = (
        (pa.TextPartDelta, pa.ThinkingPartDelta) if thinking else (pa.TextPartDelta,)
    )
    pieces: list[str] = []
    size = 0
    next_check = every
    async for event in stream:
        if isinstance(event, pa.PartStartEvent) and isinstance(event.part, kinds):
            piece = event.part.content
        elif isinstance(event, pa.PartDeltaEvent) and isinstance(event.delta, deltas):
            piece = event.delta.content_delta or ""
        else:
            continue
        pieces.append(piece)
        size += len(piece)
        if size >= next_check:
            next_check = size + every
            if (verdict := check("".join(pieces))) is not None:
                return verdict
    return None


def can_stream(model: Model) -> bool:
    """False for a model that can only answer whole (a ``FunctionModel`` without a stream
    function), looking through wrapper models."""
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.wrapper import WrapperModel

    while isinstance(model, WrapperModel):
        model = model.wrapped
    return not (isinstance(model, FunctionModel) and model.stream_function is None)
