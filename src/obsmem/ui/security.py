"""Who may see the inspector: loopback by default, a token for anything else.

Binding to a host that is not loopback without a token is refused before the server starts
(:func:`bind_problem`). With a token, every request must carry it: ``?token=`` once (the answer
sets an HttpOnly cookie and redirects to the same URL without it), the cookie, or an
``Authorization: Bearer`` header (:class:`TokenGate`). Without a token, a request must be
addressed to a loopback host (:class:`LoopbackHost`): a page of another site that rebinds its
own name to 127.0.0.1 (DNS rebinding) gets a 403, not the conversations.
"""

from __future__ import annotations

import hmac
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode

from ..asgi import TEXT, ASGIApp, HTTPMiddleware, Receive, Scope, Send, answer
from ..hosts import host_allowed, host_name, is_loopback

__all__ = ["COOKIE", "LoopbackHost", "TokenGate", "bind_problem", "host_name", "is_loopback"]

COOKIE = "obsmem_ui_token"


def bind_problem(host: str, token: str | None) -> str | None:
    """Why the server must not start on ``host`` (None when it may)."""
    if token is not None and not token.strip():
        return "--token is empty: give a secret of at least 16 characters"
    if token is not None and len(token) < 16:
        return "--token is too short: give a secret of at least 16 characters"
    if token is None and not is_loopback(host):
        return (
            f"--host {host} is not a loopback address, so anyone who can reach it could read "
            "every conversation: add --token SECRET (then open the printed URL), or bind to "
            "127.0.0.1"
        )
    return None


class LoopbackHost(HTTPMiddleware):
    """ASGI middleware: an HTTP request whose ``Host`` is not a loopback name or address gets a
    403 saying why (the inspector without a token answers only requests addressed to it on
    loopback)."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if host_allowed(headers.get("host")):
            await self.app(scope, receive, send)
            return
        host = host_name(headers.get("host", ""))
        body = (
            f"obsmem ui answers only requests addressed to 127.0.0.1 or localhost, not "
            f"{host[:80]!r}: open the URL it printed (a page of another site may be reaching it "
            "through DNS rebinding); to serve other names, start it with --token SECRET"
        )
        await answer(send, 403, body.encode())


def _same(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


class TokenGate(HTTPMiddleware):
    """ASGI middleware: every HTTP request must carry ``token`` (query, cookie or bearer)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        super().__init__(app)
        self.token = token

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = dict(query).get("token")
        if _same(given, self.token):
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            await _redirect(send, scope["path"] + (f"?{rest}" if rest else ""), self.token)
            return
        bearer = headers.get("authorization", "")
        cookies = SimpleCookie(headers.get("cookie", ""))
        cookie = cookies[COOKIE].value if COOKIE in cookies else None
        if _same(bearer.removeprefix("Bearer ").strip(), self.token) or _same(cookie, self.token):
            await self.app(scope, receive, send)
            return
        await answer(send, 401, _NEEDS_TOKEN, (TEXT, (b"www-authenticate", b"Bearer")))


_NEEDS_TOKEN = (
    b"obsmem ui: this inspector needs its token. Open the URL printed at start "
    b"(it ends in ?token=...), or send the header Authorization: Bearer TOKEN.\n"
)


async def _redirect(send: Send, location: str, token: str) -> None:
    cookie = f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
    headers = ((b"location", location.encode("latin-1")), (b"set-cookie", cookie.encode("latin-1")))
    await answer(send, 303, b"", headers)
