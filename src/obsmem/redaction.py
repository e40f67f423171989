"""Secrets out of error text, where it is first captured.

A provider's error can echo the key it was sent (``Incorrect API key provided: sk-...``), and an
error's text travels far: the failure state stored with the log, the ledger, events and hooks,
spans, WARNING logs, the proxy's ``X-Obsmem-Memory`` header, ``obsmem inspect`` and the ui. So
the places that first turn an exception into text pass it through :func:`redact`: the model
caller (``obsmem.llm``, ``describe_exception``), a cycle's error (``describe_error``) and the
failure state (``next_failure``, ``FailureState.from_json``). Everything downstream inherits.

Two kinds of secret are taken out, each replaced by ``[redacted]``:

- the keys this process hands to a model provider, whatever their shape: the model caller
  remembers the key of every model it calls (:func:`remember_model_keys`), so the proxy's
  ``--memory-key-env`` key or an ``OPENAI_API_KEY`` is known before its first error can echo
  it. Keys shorter than ``MIN_KEY_CHARS`` are not remembered (too likely to be a word);
- what has the shape of a credential, whoever's it is: ``Bearer <token>``, keys with a
  provider's prefix (OpenAI's and DeepSeek's ``sk-...``, ``sk-proj-...``, Anthropic's
  ``sk-ant-...``, OpenRouter's ``sk-or-...``, Google's ``AIza...``, xAI's ``xai-...``, Groq's
  ``gsk_...``, Hugging Face's ``hf_...``, Perplexity's ``pplx-...``, GitHub's tokens, AWS access
  key ids), JSON Web Tokens, and the value of ``api_key=`` / ``"api-key": ...`` / ``?key=``.

A shape must look random (a digit in it, or mixed case and length), so ordinary words after
``Bearer`` or ``sk-`` stay as they are. Pure: no I/O.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

__all__ = ["MIN_KEY_CHARS", "REDACTED", "redact", "remember_key", "remember_model_keys"]

REDACTED = "[redacted]"
MIN_KEY_CHARS = 8
"""Shorter keys are not remembered: redacting every occurrence of a short word would mangle
error text, and a key that short is no secret anyway."""

_known: tuple[str, ...] = ()
"""The keys this process handed to a provider, longest first (so a key that contains another
is taken out whole). Replaced, never changed in place, so readers need no lock."""
_lock = threading.Lock()

_PREFIXED = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"sk-(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{16,}"  # OpenAI, Anthropic, OpenRouter, DeepSeek
    r"|AIza[A-Za-z0-9_-]{30,}"  # Google
    r"|xai-[A-Za-z0-9]{20,}"  # xAI
    r"|gsk_[A-Za-z0-9]{20,}"  # Groq
    r"|hf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|pplx-[A-Za-z0-9]{20,}"  # Perplexity
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"  # JSON Web Token
    r")"
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/-]+=*)")
_ASSIGNED = re.compile(
    r"(?i)((?:\b(?:x-)?api[_-]?key|\baccess[_-]?token)[\"']?\s*[:=]\s*[\"']?|[?&]key=)"
    r"([^\s\"',;&})\]]+)"
)


def remember_key(key: object) -> None:
    """Take ``key`` out of every error text this process redacts from now on (a key handed to
    a provider); anything but a string of at least ``MIN_KEY_CHARS`` is ignored."""
    global _known
    if not isinstance(key, str) or len(key.strip()) < MIN_KEY_CHARS or key in _known:
        return
    with _lock:
        if key not in _known:
            _known = tuple(sorted({*_known, key}, key=len, reverse=True))


def remember_model_keys(model: object) -> None:
    """Remember the API key a pydantic-ai model sends (its SDK client's), and those of the
    models it wraps or falls back to."""
    for key in _keys_of(model, depth=0):
        remember_key(key)


def _keys_of(model: object, *, depth: int) -> Iterator[object]:
    if depth > 4:
        return
    try:
        client = getattr(model, "client", None)  # a property: some SDKs build it on demand
    except Exception:  # a model without a usable client sends no key
        client = None
    if client is not None:
        yield getattr(client, "api_key", None)
        yield getattr(getattr(client, "_api_client", None), "api_key", None)  # google-genai
    inner = getattr(model, "wrapped", None)
    if inner is not None:
        yield from _keys_of(inner, depth=depth + 1)
    for fallback in getattr(model, "models", None) or ():
        yield from _keys_of(fallback, depth=depth + 1)


def _random_looking(token: str) -> bool:
    """Whether ``token`` looks like a credential rather than a word: a digit in it, or both
    cases and at least 16 characters."""
    if len(token) < MIN_KEY_CHARS:
        return False
    if any(c.isdigit() for c in token):
        return True
    return len(token) >= 16 and token != token.lower() and token != token.upper()


def _keep_label(match: re.Match[str]) -> str:
    label, token = match.group(1), match.group(2)
    return f"{label}{REDACTED}" if _random_looking(token) else match.group(0)


def redact(text: str) -> str:
    """``text`` with the keys this process knows and anything shaped like a credential
    replaced by ``[redacted]``."""
    # Shapes first: a known key that is the start of a longer one must not leave its tail.
    text = _PREFIXED.sub(REDACTED, text)
    text = _BEARER.sub(_keep_label, text)
    text = _ASSIGNED.sub(_keep_label, text)
    for key in _known:
        if key in text:
            text = text.replace(key, REDACTED)
    return text
