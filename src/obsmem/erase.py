"""An owner's delete through :class:`~obsmem.memory.Memory`: the checks that name the fix, the
store's one-transaction erase, and what this process forgets with it.

Erasing is not memory work (see :mod:`obsmem.stores.erasure`): it is the owner taking back what
was stored. Work in flight for an erased thread, here or in another process, commits nothing:
the thread it read is gone, and a thread created again under the same id has another
incarnation.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from .errors import StoreError
from .meta_keys import META_ERASED
from .stores import CoreStore, ErasableStore, Erasure
from .stores.base import require
from .stores.erasure import tombstone_key

if TYPE_CHECKING:
    from .engine import ObservationalMemory

__all__ = ["erase_resource", "erase_thread", "erased_at"]


async def erase_thread(
    store: CoreStore, om: ObservationalMemory | None, *, thread_id: str, resource_id: str
) -> Erasure:
    """Erase ``thread_id`` of ``resource_id``; a StoreError naming the fix when there is no
    such thread, or it belongs to another resource."""
    erasable = require(store, ErasableStore, "memory.delete_thread")
    thread = await store.get_thread(thread_id)
    if thread is not None and thread.resource_id != resource_id:
        raise StoreError(
            f"thread {thread_id!r} belongs to another resource, not {resource_id!r}: give the "
            "thread's own resource (memory.thread(id).resource_id)"
        )
    erased = None if thread is None else await erasable.delete_thread(thread_id)
    if erased is None:
        raise StoreError(
            f"no thread {thread_id!r} to delete: check the id against memory.threads("
            f"{resource_id!r}) or `obsmem inspect --resource {resource_id}`"
        )
    if om is not None:
        om.forget_erased(erased.thread_ids, resource_id=None)
    return erased


async def erase_resource(
    store: CoreStore, om: ObservationalMemory | None, *, resource_id: str
) -> Erasure:
    """Erase ``resource_id`` and everything of it; a StoreError naming the fix when nothing of
    it is stored."""
    erasable = require(store, ErasableStore, "memory.delete_resource")
    erased = await erasable.delete_resource(resource_id)
    if erased is None:
        raise StoreError(
            f"no resource {resource_id!r} to delete: check the id against "
            "`obsmem inspect` (it lists every resource)"
        )
    if om is not None:
        om.forget_erased(erased.thread_ids, resource_id=resource_id)
    return erased


async def erased_at(store: CoreStore, *, thread_id: str, resource_id: str) -> datetime | None:
    """When ``thread_id`` of ``resource_id`` was last erased, from its tombstone (None when it
    has none: it was never erased, its resource was, or the tombstone was among the oldest
    ones dropped, see :mod:`obsmem.stores.erasure`)."""
    tombs = (await store.get_resource(resource_id)).get(META_ERASED)
    key = tombstone_key(thread_id)
    at = cast(dict[str, Any], tombs).get(key) if isinstance(tombs, dict) else None
    return datetime.fromisoformat(at) if isinstance(at, str) else None
