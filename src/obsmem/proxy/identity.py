"""Whose conversation a request is: the thread, and the resource that owns it (the README's
"Which conversation", "Whose memory" and "Who gets in" say what the application sends).

The application names the thread (:func:`thread_of`); the proxy never guesses one: ``user``,
``safety_identifier`` and ``prompt_cache_key`` name an end user or a cache, so a thread named by
them would merge every conversation of one user. The owner (:class:`Owners`) comes from the API
key, which is never stored or logged. An end user's resource is ``<owner>.user-<h>``, ``<h>`` the
first 32 hex digits of the SHA-256 of the end user's id: injective, since ``<h>`` has a fixed
length (operator-named resources may not end in that shape, nor hold a ``:``), and hashed
because the id is often an e-mail address, and thread ids reach logs and headers. The stored
thread's id is ``<resource>:<thread>``, so one owner's or end user's thread ids never meet
another's.

**Threads stored before end users had resources of their own.** The proxy once took the
``user`` field as the thread, storing ``<owner>:<user>`` (resource ``<owner>``). A request
whose thread id equals its ``user`` field, while its own thread (``<owner>.user-<h>:<user>``)
does not exist, continues that thread (:meth:`Caller.legacy_ref`): its memory stays reachable,
only by that end user (another would have to name the thread by a ``user`` that is not theirs),
and it stays under the owner's resource where it was stored. A request without an end user
names the same ids as before, so its threads need nothing. Key-less requests were the resource
``anonymous``: ``--resource anonymous`` keeps their threads.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..memory import ThreadRef

if TYPE_CHECKING:
    from starlette.responses import JSONResponse

__all__ = [
    "THREAD_HEADER",
    "Caller",
    "KeyMap",
    "Owners",
    "Refused",
    "api_key_of",
    "end_user_of",
    "hash_key",
    "thread_of",
    "user_resource",
]

THREAD_HEADER = "x-obsmem-thread"
_METADATA_NAMES = ("thread", "thread_id", "obsmem_thread")
END_USER_FIELDS = ("user", "safety_identifier")
"""The request fields that name the end user, in the order they are read."""
_USER_MARK = ".user-"
_USER_HASH_LENGTH = 32
_USER_SHAPED = re.compile(rf"{re.escape(_USER_MARK)}[0-9a-f]{{{_USER_HASH_LENGTH}}}$")


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def api_key_of(headers: Mapping[str, str]) -> str | None:
    """The client's API key from its headers (lower-case names), or None."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        token = auth[7:].strip()
        return token or None
    key = headers.get("api-key", "").strip()
    return key or None


def _text_field(value: Any) -> str | None:
    return (value.strip() or None) if isinstance(value, str) else None


def _first_text(values: Mapping[str, Any], names: Sequence[str]) -> str | None:
    return next((value for name in names if (value := _text_field(values.get(name)))), None)


def thread_of(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The thread id the request names: the ``X-Obsmem-Thread`` header, else its
    ``metadata``'s ``thread``, ``thread_id`` or ``obsmem_thread``; or None (memory is off)."""
    given = headers.get(THREAD_HEADER, "").strip()
    metadata = body.get("metadata")
    if given or not isinstance(metadata, dict):
        return given or None
    return _first_text(cast(dict[str, Any], metadata), _METADATA_NAMES)


def end_user_of(body: Mapping[str, Any]) -> str | None:
    """The end user the request names (its ``user``, else its ``safety_identifier``), or None."""
    return _first_text(body, END_USER_FIELDS)


def user_resource(owner: str, end_user: str) -> str:
    """The resource of one end user of ``owner`` (module doc: injective)."""
    digest = hashlib.sha256(end_user.encode()).hexdigest()[:_USER_HASH_LENGTH]
    return f"{owner}{_USER_MARK}{digest}"


def owner_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a resource id the operator names, or None."""
    if not name.strip():
        return "a resource id must be a non-empty string"
    if ":" in name:
        return (
            f"resource {name!r} has a ':'; the proxy names threads <resource>:<thread>, so "
            "give one without it"
        )
    if _USER_SHAPED.search(name):
        return (
            f"resource {name!r} ends like the resource the proxy gives an end user "
            f"({_USER_MARK}<32 hex digits>); give another name"
        )
    return None


class KeyMap:
    """API keys (by hash) to the resources the operator named for them."""

    def __init__(self, by_hash: Mapping[str, str] | None = None) -> None:
        self.by_hash = dict(by_hash or {})

    @classmethod
    def load(cls, path: str | Path) -> KeyMap:
        """Read a keys file (module doc); ValueError naming the problem when it is not one."""
        file = Path(path)
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ValueError(f"cannot read the keys file {file}: {exc.strerror or exc}") from exc
        except ValueError as exc:
            raise ValueError(
                f"the keys file {file} is not JSON ({exc}); write it as "
                '{"<api key or sha256:hex>": "<resource id>", ...}'
            ) from exc
        if not isinstance(data, dict):
            raise ValueError(
                f"the keys file {file} must hold one JSON object: "
                '{"<api key or sha256:hex>": "<resource id>", ...}'
            )
        by_hash: dict[str, str] = {}
        for name, resource in cast(dict[Any, Any], data).items():
            if not isinstance(resource, str):
                raise ValueError(
                    f"the keys file {file}: the resource for a key must be a non-empty string"
                )
            problem = owner_name_problem(resource)
            if problem is not None:
                raise ValueError(f"the keys file {file}: {problem}")
            text = str(name)
            digest = text[7:].lower() if text.startswith("sha256:") else hash_key(text)
            by_hash[digest] = resource.strip()
        return cls(by_hash)

    def named(self, key: str) -> str | None:
        """The resource the file names for ``key``, or None."""
        return self.by_hash.get(hash_key(key))

    def resource(self, key: str) -> str:
        """The resource of ``key``: the one the file names, else ``key-`` and its hash."""
        return self.named(key) or f"key-{hash_key(key)[:24]}"


class Refused(Exception):
    """A request the proxy does not serve: its HTTP status, OpenAI's error code and a message
    that names the problem and the fix (here for the 401s; :mod:`.guard` raises the others)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def response(self, headers: Mapping[str, str] | None = None) -> JSONResponse:
        from starlette.responses import JSONResponse  # the proxy's config imports this module

        error = {
            "message": self.message,
            "type": "invalid_request_error",
            "param": None,
            "code": self.code,
        }
        return JSONResponse({"error": error}, status_code=self.status, headers=headers)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: what the upstream judges, and the owner of its memory."""

    credential: str
    """The hash of the request's API key ('' for none): whose acceptance by the upstream
    memory waits for (:mod:`.admission`)."""
    owner: str

    def ref(self, thread: str, end_user: str | None) -> ThreadRef:
        """The stored thread a request names (module doc)."""
        resource = self.owner if end_user is None else user_resource(self.owner, end_user)
        return ThreadRef(thread=f"{resource}:{thread}", resource=resource)

    def legacy_ref(self, thread: str, body: Mapping[str, Any]) -> ThreadRef | None:
        """The thread the proxy stored for the request's ``user`` when it took that field as
        the thread (``<owner>:<user>``), when the request names that thread; else None."""
        if thread != _text_field(body.get("user")):
            return None
        return ThreadRef(thread=f"{self.owner}:{thread}", resource=self.owner)


@dataclass(frozen=True, slots=True)
class Owners:
    """Who owns the memory of a request, from its API key (module doc)."""

    keys: KeyMap = field(default_factory=KeyMap)
    resource: str | None = None
    """The owner of every request without an API key (``--resource``); None: refuse them."""
    known_keys_only: bool = False
    """Refuse a key the keys file does not name (``--known-keys-only``)."""

    def __post_init__(self) -> None:
        if self.known_keys_only and not self.keys.by_hash:
            raise ValueError(
                "--known-keys-only refuses every key a keys file does not name, and there is "
                "none: give the keys with --keys FILE"
            )
        if self.resource is not None:
            problem = owner_name_problem(self.resource)
            if problem is not None:
                raise ValueError(f"--resource: {problem}")

    def caller(self, key: str | None) -> Caller:
        """The caller of a request with API key ``key``; :class:`Refused` when it has none."""
        if key is None:
            if self.resource is None:
                raise Refused(
                    401,
                    "missing_api_key",
                    "obsmem proxy: this request has no API key. Send one (Authorization: "
                    "Bearer <key>); or the proxy's operator names the owner of key-less "
                    "requests with --resource ID.",
                )
            return Caller("", self.resource)
        if self.known_keys_only and self.keys.named(key) is None:
            raise Refused(
                401,
                "invalid_api_key",
                "obsmem proxy: this API key is not one the proxy's keys file names "
                "(--known-keys-only). The proxy's operator can add it to that file as "
                f'"sha256:{hash_key(key)}".',
            )
        return Caller(hash_key(key), self.keys.resource(key))

    def describe(self) -> str:
        """Who owns what, in a few words (the start-up line)."""
        named = len(self.keys.by_hash)
        if self.known_keys_only:
            keyed = f"only the {named} key(s) the keys file names (others refused)"
        elif named:
            keyed = f"{named} key(s) as the keys file names them, each other API key its own"
        else:
            keyed = "each API key its own"
        keyless = (
            f"requests without a key: resource {self.resource!r}"
            if self.resource is not None
            else "requests without a key refused (--resource ID names their owner)"
        )
        return f"memory: {keyed}; {keyless}"
