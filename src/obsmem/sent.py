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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, cast

from .events import StatusEvent
from .messages import Message
from .tokens import TokenEstimator

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


def measure(
    context: Sequence[Message], status: StatusEvent, estimator: TokenEstimator
) -> TurnSent | None:
    """The turn ``context`` is, or None when it sends no stored message."""
    raw = [m for m in context if not _obsmem_meta(m).get("synthetic")]
    seqs = [m.seq for m in raw if m.seq is not None]
    if not seqs:
        return None
    left_out = sum(
        int(_obsmem_meta(m).get("count") or 0)
        for m in context
        if _obsmem_meta(m).get("synthetic") == "left_out"
    )
    sent = estimator.count_messages(context)
    return TurnSent(
        at=max(seqs),
        sent=sent,
        memory=sent - estimator.count_messages(raw),
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
