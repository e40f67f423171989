"""What each turn sent the actor, kept with the thread for the inspector.

The engine measures the context it returns from ``prepare`` (memory messages, then the raw
messages left after the cut, a left-out notice counting what was cut) and the thresholds in force
for that turn, and stamps the measure on the turn's reply when ``record`` stores it, in the
message's ``metadata["obsmem"]["turn"]``. That write happens anyway, so a turn makes no extra
store call; a turn without a stored reply (or whose reply another process stores) has no stamp,
and the inspector estimates it from the stored messages as before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from .events import StatusEvent
from .messages import Message, TextPart
from .tokens import TokenEstimator
from .tokens.estimator import TOKENS_PER_CONVERSATION

if TYPE_CHECKING:
    from .window import CachedMessages

__all__ = ["PendingSent", "TurnSent", "measure", "sent_of", "stamped"]

_KEY = "turn"
MAX_PENDING = 4_096
"""Threads whose measure waits for their reply at once; past it the oldest is dropped (a turn
prepared and never recorded loses its stamp, nothing else)."""


@dataclass(frozen=True, slots=True)
class TurnSent:
    """One turn as sent: at the message ``at`` (the newest raw message sent), ``sent`` tokens in
    all, ``memory`` of them in memory messages, ``left_out`` raw messages cut; and the
    thresholds that were in force (observation, after sharing the budget; reflection)."""

    at: int
    sent: int
    memory: int
    left_out: int
    message_tokens: int
    observation_tokens: int

    @property
    def raw(self) -> int:
        """Tokens of the raw messages sent."""
        return self.sent - self.memory


def _obsmem_meta(message: Message) -> Mapping[str, Any]:
    meta = message.metadata.get("obsmem")
    return cast(Mapping[str, Any], meta) if isinstance(meta, Mapping) else {}


MEMORY_COUNTS = 256
"""Memory messages whose token count is kept (a turn's preamble, segments and hints repeat
from turn to turn until the log changes, and counting their text again cost a turn 0.9 ms)."""


class _MemoryCounts:
    """Token counts of memory messages by their text (bounded, least recently used out)."""

    def __init__(self, estimator: TokenEstimator) -> None:
        self.estimator = estimator
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()

    def count(self, message: Message) -> int:
        key = (message.role, "\n".join(p.text for p in message.parts if isinstance(p, TextPart)))
        if (known := self._counts.get(key)) is not None:
            self._counts.move_to_end(key)
            return known
        counted = self._counts[key] = self.estimator.count_message(message)
        while len(self._counts) > MEMORY_COUNTS:
            self._counts.popitem(last=False)
        return counted


def measure(
    context: Sequence[Message],
    status: StatusEvent,
    counts: _MemoryCounts,
    raw_tokens: Callable[[Message], int],
) -> TurnSent | None:
    """The turn ``context`` is, or None when it sends no stored message. Raw messages are
    counted by ``raw_tokens`` (the engine's per-thread cache: counted once per message);
    memory messages once per text (``counts``)."""
    memory = raw = left_out = 0
    seqs: list[int] = []
    for message in context:
        meta = _obsmem_meta(message)
        synthetic = meta.get("synthetic")
        if synthetic:
            memory += counts.count(message)
            if synthetic == "left_out":
                left_out += int(meta.get("count") or 0)
        else:
            raw += raw_tokens(message)
            if message.seq is not None:
                seqs.append(message.seq)
    if not seqs:
        return None
    return TurnSent(
        at=max(seqs),
        sent=TOKENS_PER_CONVERSATION + memory + raw,
        memory=memory,
        left_out=left_out,
        message_tokens=status.message_threshold,
        observation_tokens=status.observation_threshold,
    )


def stamped(messages: Sequence[Message], turn: TurnSent | None) -> Sequence[Message]:
    """``messages`` with ``turn`` stamped on the first (unchanged without a turn)."""
    if turn is None or not messages:
        return messages
    first = messages[0]
    meta = {**first.metadata, "obsmem": {**_obsmem_meta(first), _KEY: asdict(turn)}}
    return [replace(first, metadata=meta), *messages[1:]]


def sent_of(message: Message) -> TurnSent | None:
    """The turn stamped on a stored ``message`` (None when it carries none or a bad one)."""
    raw = _obsmem_meta(message).get(_KEY)
    if not isinstance(raw, Mapping):
        return None
    try:
        return TurnSent(**{k: int(v) for k, v in cast(Mapping[str, Any], raw).items()})
    except (TypeError, ValueError):
        return None


class PendingSent:
    """Each thread's latest measured turn, waiting for its reply (bounded)."""

    def __init__(self, limit: int = MAX_PENDING) -> None:
        self._limit = limit
        self._turns: OrderedDict[str, TurnSent] = OrderedDict()
        self._counts: _MemoryCounts | None = None

    def measure(
        self,
        context: Sequence[Message],
        status: StatusEvent,
        estimator: TokenEstimator,
        cached: CachedMessages,
    ) -> TurnSent | None:
        """:func:`measure`, with the memory-message counts of this engine's ``estimator`` and
        the raw messages' counts from its message cache (``window.CachedMessages``)."""
        if self._counts is None or self._counts.estimator is not estimator:
            self._counts = _MemoryCounts(estimator)
        return measure(context, status, self._counts, lambda m: cached.tokens(m, estimator))

    def put(self, thread_id: str, turn: TurnSent | None) -> None:
        """Remember ``turn`` for ``thread_id`` (None forgets the one before)."""
        self._turns.pop(thread_id, None)
        if turn is None:
            return
        self._turns[thread_id] = turn
        while len(self._turns) > self._limit:
            self._turns.popitem(last=False)

    def take(self, thread_id: str) -> TurnSent | None:
        """The turn waiting for ``thread_id``'s reply, forgotten here."""
        return self._turns.pop(thread_id, None)
