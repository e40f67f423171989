"""The metadata keys memory reads and writes, in one place.

Thread and resource metadata is shared with the application (and with the framework front
doors), so every key memory owns starts with ``om:``. A key's value is written through a
metadata patch inside the store's transaction, so two writers never lose each other's keys.
This module is data only: it imports nothing.
"""

from __future__ import annotations

__all__ = [
    "META_CURRENT_TASK",
    "META_DEFERRED",
    "META_ERASED",
    "META_EXTRACTED",
    "META_FAILURE",
    "META_HELD_CALLS",
    "META_LAST_MODEL",
    "META_RETRACTED",
    "META_RETRACTED_THROUGH",
    "META_SUGGESTED_RESPONSE",
    "META_TITLE_GENERATION",
    "META_WORKING_MEMORY",
]

# -- thread metadata ---------------------------------------------------------------------------

META_CURRENT_TASK = "om:current_task"
"""The continuation hint naming what the conversation is doing now (thread metadata)."""
META_SUGGESTED_RESPONSE = "om:suggested_response"
"""The continuation hint suggesting the actor's next answer (thread metadata)."""
META_EXTRACTED = "om:extracted"
"""The extractors' values by slug: ``{slug: value}`` (thread metadata)."""
META_LAST_MODEL = "om:last_actor_model"
"""The actor's model of the thread's latest turn: a change of provider can activate early, and
images are counted by that provider's rules until a turn names another."""
META_TITLE_GENERATION = "om:title_generation"
"""The log generation the Observer's title was written in: a title is asked for again only
after a reflection (the conversation has moved on)."""
META_HELD_CALLS = "om:held_calls"
"""The calls held back while they wait, for front doors that store a call before they know it
will wait (``Memory.hold_calls``)."""
META_RETRACTED = "om:retracted"
"""The messages taken back (``Memory.retract_last``; the Agents SDK's ``pop_item``):
``{message_id: True}``. Storage keeps them; no window shows them, so neither the actor nor the
Observer sees them."""
META_RETRACTED_THROUGH = "om:retracted_through"
"""Every message up to this seq was taken back at once (a forgotten thread)."""

# -- resource metadata ---------------------------------------------------------------------------

META_ERASED = "om:erased"
"""The resource's erased threads, each with when it was erased: ``{tombstone_key(thread_id): ISO
time}`` (``Memory.delete_thread``; a resource keeps its newest
``stores.erasure.MAX_ERASED_THREADS``, oldest first). Hashes of ids and times only, nothing of
what was erased: a door whose client resends an erased conversation (``obsmem proxy``) tells it
from a new one by it."""

# -- thread or resource metadata (by scope) ----------------------------------------------------

META_WORKING_MEMORY = "om:working_memory"
"""The working-memory document: the thread's (thread scope) or the resource's (resource scope)."""
META_FAILURE = "om:failure"
"""What stops a role for a log: ``{role: FailureState.to_json()}``, on the thread (thread scope)
or the resource (resource scope)."""

# -- tool call metadata ------------------------------------------------------------------------

META_DEFERRED = "deferred"
"""``ToolCallPart.metadata["obsmem"]["deferred"] = True`` marks a call that waits on purpose (an
approval pending across turns): held back while it has no result, wherever it is."""
