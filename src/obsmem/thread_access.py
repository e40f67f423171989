"""The threads and messages of a :class:`~obsmem.Memory`'s store, as the doors and servers read
and open them (they never touch the store itself: ``tests/test_store_boundary.py``)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Any

from .window import shown_tail

if TYPE_CHECKING:
    from .messages import Message
    from .records import Thread
    from .stores import CoreStore

__all__ = ["ThreadAccess"]


class ThreadAccess:
    """Thread and message reads (and opening a thread), for a class with a ``store``."""

    store: CoreStore

    async def thread(self, thread_id: str) -> Thread | None:
        return await self.store.get_thread(thread_id)

    async def threads(self, resource_id: str) -> list[Thread]:
        return await self.store.list_threads(resource_id)

    async def messages(self, thread_id: str, *, after_seq: int = 0) -> list[Message]:
        return await self.store.list_messages(thread_id, after_seq=after_seq)

    async def messages_by_id(self, ids: Sequence[str], resource_id: str) -> list[Message]:
        """The resource's stored messages with these ids (the ones it has)."""
        return await self.store.get_messages(ids, resource_id=resource_id)

    async def open_thread(self, thread_id: str, resource_id: str, **metadata: Any) -> Thread:
        """The thread, created when missing, with ``metadata`` merged into its own."""
        thread = await self.store.create_thread(thread_id, resource_id)
        return await self.store.update_thread(thread_id, metadata=metadata) if metadata else thread

    def shown_tail(self, thread_id: str, *, page: int = 100) -> AsyncGenerator[Message]:
        """The thread's messages still shown (not taken back), newest first, read a page at a
        time as the caller goes on (close it with ``contextlib.aclosing`` to stop early)."""
        return shown_tail(self.store, thread_id, page=page)

    async def set_thread_title(self, thread_id: str, title: str, *, pin: bool = True) -> Thread:
        """Set a thread's title; a pinned title is never replaced by a suggested one."""
        return await self.store.update_thread(
            thread_id, title=title, metadata={"title_pinned": pin}
        )
