"""The exception tree. Every message says what was wrong and what to do about it."""

from __future__ import annotations

TYPE_CHECKING = False  # not ``typing``'s: ``import obsmem`` loads this module
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = [
    "MAX_ID_LENGTH",
    "ConfigError",
    "ConflictError",
    "MemoryUnavailableError",
    "MissingExtraError",
    "ModelError",
    "ObserverOutputError",
    "ObsmemError",
    "StoreError",
    "check_id",
]


class ObsmemError(Exception):
    """Base class of every error obsmem raises on purpose."""


class ConfigError(ObsmemError, ValueError):
    """An option has a value obsmem cannot use.

    ``option`` is the dotted Python name (``observation.message_tokens``), ``value`` the value
    given and ``rule`` the rule it broke, in words.
    """

    def __init__(self, option: str, value: Any, rule: str) -> None:
        self.option = option
        self.value = value
        self.rule = rule
        super().__init__(f"{option}={value!r} is invalid: {rule}")


class MissingExtraError(ObsmemError, ImportError):
    """An optional dependency is not installed; the message holds the command that installs it."""

    def __init__(self, feature: str, extra: str, *, package: str | None = None) -> None:
        self.feature = feature
        self.extra = extra
        self.install = f'pip install "obsmem[{extra}]"'
        what = f" (the {package} package)" if package else ""
        super().__init__(f"{feature} needs an optional dependency{what}: run {self.install}")


def require_modules(feature: str, extra: str, modules: Sequence[str]) -> None:
    """MissingExtraError naming ``pip install "obsmem[extra]"`` when one of ``modules`` does
    not import (the first missing one is named)."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise MissingExtraError(feature, extra, package=module) from exc


class StoreError(ObsmemError):
    """The store refused an operation (bad input, a broken invariant, or a storage failure)."""


class ConflictError(StoreError):
    """A state transition lost a race: the record changed since the caller read it.

    Decide again from ``current`` (the head as the store found it inside its transaction, or
    None when the memory was cleared): the losing work is either retried or dropped.
    """

    def __init__(
        self,
        message: str,
        *,
        expected_version: int | None = None,
        actual_version: int | None = None,
        current: Any = None,
    ) -> None:
        self.expected_version = expected_version
        self.actual_version = actual_version
        self.current = current
        """The head record found in the transaction (an ``OMRecord``), or None."""
        super().__init__(message)


class ModelError(ObsmemError):
    """A model could not be resolved or called (unknown provider, missing key, failed request)."""


class ObserverOutputError(ModelError):
    """The Observer or Reflector answered with output that cannot be used (empty or degenerate)."""


class MemoryUnavailableError(ObsmemError):
    """Observational memory cannot work for this conversation (``failure_policy="raise"``): the
    message names the cause and the fix. The turn's input was stored before it was raised."""


def check_id(field: str, value: object) -> str:
    """``value`` if it can name a thread or resource; else ConfigError saying why."""
    if not isinstance(value, str):
        raise ConfigError(field, value, f"give a string id (str({value!r}))")
    if not value.strip():
        raise ConfigError(field, value, "give a non-empty id")
    if len(value) > MAX_ID_LENGTH:
        raise ConfigError(field, value[:40] + "...", f"ids are at most {MAX_ID_LENGTH} characters")
    if any(c == "\x00" or "\ud800" <= c <= "\udfff" for c in value):
        raise ConfigError(field, value, "ids cannot hold NUL characters or lone surrogates")
    return value


MAX_ID_LENGTH = 512
