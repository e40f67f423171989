"""Which stored conversation an MCP client's ``thread_id`` names (the README's "An MCP server"
gives the scheme). Thread ids are one namespace in the store, and the model picks ``thread_id``:
so that no client can take an id another resource's server will need, the server of resource
``R`` stores its conversations under its own prefix ``mcp:<R>`` (:func:`namespaced`), ``<R>``
escaped so that it holds no ``:`` and two resources never share a stored id. An id that already
has the prefix names that conversation as it is, so the ids the tools report can be sent back.
An operator's ``--thread ID`` is not a client's id: it stays literal.

Conversations that earlier versions stored under a client's id as it was (``diary``, not
``mcp:<R>:diary``) stay reachable by that id (:func:`legacy_ids`) while the namespaced one does
not exist, when they belong to the server's own resource.
"""

from __future__ import annotations

from ..errors import MAX_ID_LENGTH

__all__ = ["default_thread", "legacy_ids", "longest_client_id", "namespaced"]


def default_thread(resource: str) -> str:
    """The conversation a server without ``--thread`` uses when a call names none:
    ``mcp:<resource>`` (``%`` and ``:`` in the resource escaped as ``%25`` and ``%3A``)."""
    escaped = resource.replace("%", "%25").replace(":", "%3A")
    return f"mcp:{escaped}"


def namespaced(resource: str, thread_id: str | None) -> str:
    """The stored id of the conversation a client of ``resource``'s server names ``thread_id``
    (None or empty: the default conversation)."""
    home = default_thread(resource)
    if not thread_id or thread_id == home or thread_id.startswith(f"{home}:"):
        return thread_id or home
    return f"{home}:{thread_id}"


def legacy_ids(resource: str, thread_id: str | None) -> list[str]:
    """The ids an earlier version stored the same conversation under: the client's id as it
    was, or, for the default, ``mcp:<resource>`` unescaped. Used only when the namespaced
    conversation does not exist and the old one belongs to ``resource``."""
    old = thread_id or f"mcp:{resource}"
    return [] if old == namespaced(resource, thread_id) else [old]


def longest_client_id(resource: str) -> int:
    """The longest ``thread_id`` a client of ``resource``'s server may send (its stored id, with
    the prefix, is at most ``MAX_ID_LENGTH`` characters)."""
    return MAX_ID_LENGTH - len(default_thread(resource)) - 1
