"""Who the proxy serves, and when memory starts for them (the README's "Who gets in").

* **At the door**: a chat request (the ones memory serves) that the operator's rules give no
  owner (:class:`.identity.Owners`) gets a 401 that names the fix, and one WARNING line; nothing
  of it is read further. Every other ``/v1/...`` request passes through, and the upstream
  judges its key.
* **Memory waits for the upstream**: memory works on the operator's account (the Observer's
  calls use the memory key; storing uses the operator's database), so it starts for a client
  key only once the upstream has accepted that key in this process. Until then a request goes
  upstream exactly as the client sent it: a key the upstream refuses never gets memory work,
  storing or an Observer call, and nothing is lost for a good key, since a client sends its
  whole history with every request. A key the upstream refuses later (revoked) waits again.
* **No thread id**: the request passes through; the response header says why and how to name
  the conversation, and the log says it once per process.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

from .identity import Caller, Owners, Refused, api_key_of, end_user_of

__all__ = ["MEMORY_HEADER", "NOT_ACCEPTED_YET", "REFUSED_KEY", "UPSTREAM_REFUSED", "Admission"]

log = logging.getLogger("obsmem")

MEMORY_HEADER = "X-Obsmem-Memory"

REFUSED_KEY = frozenset({401, 402, 403})
"""The upstream's statuses that refuse the key (not the request's content)."""
MAX_ACCEPTED = 4096
"""Keys one process remembers the upstream accepted (the least recently used are forgotten)."""
NOT_ACCEPTED_YET = (
    "off; the upstream has not yet accepted this API key in this process (memory starts "
    "with the key's next request)"
)
UPSTREAM_REFUSED = "off; the upstream refused this API key"
_NAME_A_THREAD = "send the X-Obsmem-Thread header, or metadata.thread in the request"


class Admission:
    """The door (:class:`Owners`) and the keys the upstream has accepted (module doc)."""

    def __init__(self, owners: Owners) -> None:
        self.owners = owners
        self._accepted: OrderedDict[str, None] = OrderedDict()
        self._told_no_thread = False

    def caller(self, headers: Mapping[str, str]) -> Caller | JSONResponse:
        """The request's caller, or the 401 that refuses it (``headers``: lower-case names)."""
        try:
            return self.owners.caller(api_key_of(headers))
        except Refused as refused:
            log.warning("%s (refused: 401 %s)", refused, refused.code)
            return refused.response(
                {
                    "WWW-Authenticate": 'Bearer realm="obsmem proxy"',
                    MEMORY_HEADER: f"off; refused: {refused.code}",
                }
            )

    def accepted(self, caller: Caller) -> bool:
        if caller.credential in self._accepted:
            self._accepted.move_to_end(caller.credential)
            return True
        return False

    def judged(self, caller: Caller, status: int) -> None:
        """What the upstream's answer with ``status`` says of the caller's key."""
        if 200 <= status < 300:
            self.accept(caller)
        elif status in REFUSED_KEY:
            self._accepted.pop(caller.credential, None)

    def accept(self, caller: Caller) -> None:
        self._accepted[caller.credential] = None
        self._accepted.move_to_end(caller.credential)
        while len(self._accepted) > MAX_ACCEPTED:
            self._accepted.popitem(last=False)

    def no_thread(self, body: Mapping[str, Any]) -> str:
        """The ``X-Obsmem-Memory`` value for a request that names no thread (logged once)."""
        why = (
            "no thread id (the user and safety_identifier fields name the end user, not the "
            "conversation); "
            if end_user_of(body) is not None
            else "no thread id; "
        )
        if not self._told_no_thread:
            self._told_no_thread = True
            log.warning(
                "obsmem proxy: a request named no thread, so it passed through with memory off "
                "(and so will every such request; this is said once). To give a conversation "
                "memory, %s. The user and safety_identifier fields name the end user, never "
                "a conversation.",
                _NAME_A_THREAD,
            )
        return f"off; {why}{_NAME_A_THREAD}"
