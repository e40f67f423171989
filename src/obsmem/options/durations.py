"""Idle durations: ``activate_after_idle`` as milliseconds, a duration string or ``"auto"``."""

from __future__ import annotations

import math
import re
from typing import Literal, TypeAlias

from obsmem.errors import ConfigError

__all__ = ["IdleSetting", "parse_idle"]

IdleSetting: TypeAlias = int | Literal["auto"] | None
"""Resolved: milliseconds, ``"auto"`` (the actor's prompt-cache TTL) or ``None`` (off)."""

_UNIT_MS: dict[str, int] = {}
for _names, _ms in (
    (("", "ms", "msec", "msecs", "millisecond", "milliseconds"), 1),
    (("s", "sec", "secs", "second", "seconds"), 1_000),
    (("m", "min", "mins", "minute", "minutes"), 60_000),
    (("h", "hr", "hrs", "hour", "hours"), 3_600_000),
    (("d", "day", "days"), 86_400_000),
    (("w", "wk", "wks", "week", "weeks"), 604_800_000),
):
    for _name in _names:
        _UNIT_MS[_name] = _ms

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)

_RULE = (
    'must be milliseconds (e.g. 300000), a duration string such as "500ms", "30s", "5m", "1h", '
    '"2 hours" or "1d", "auto" (the actor\'s prompt-cache lifetime), or False to turn it off'
)


def parse_idle(option: str, value: object) -> IdleSetting:
    """Resolve an ``activate_after_idle`` value to milliseconds, ``"auto"`` or ``None``.

    Numbers are milliseconds (rounded to whole ms). Strings are a number and a unit (ms, s/sec,
    m/min, h/hr/hours, d/days, w/weeks; case-insensitive; no unit means ms). ``False`` and
    ``None`` turn the feature off. Anything else raises :class:`ConfigError` naming ``option``.
    """
    if value is None or value is False:
        return None
    if value is True:
        raise ConfigError(option, value, _RULE)
    if isinstance(value, int | float):
        return _milliseconds(option, value, float(value))
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            return "auto"
        match = _DURATION.match(value)
        if match is None:
            raise ConfigError(option, value, _RULE)
        unit = match.group(2).lower()
        if unit not in _UNIT_MS:
            raise ConfigError(option, value, f"unknown time unit {unit!r}; {_RULE}")
        return _milliseconds(option, value, float(match.group(1)) * _UNIT_MS[unit])
    raise ConfigError(option, value, _RULE)


def _milliseconds(option: str, value: object, ms: float) -> int:
    if not math.isfinite(ms) or ms < 0:
        raise ConfigError(option, value, f"the duration must be finite and not negative; {_RULE}")
    return math.floor(ms + 0.5)
