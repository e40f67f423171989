"""Names a package loads on first use (PEP 562), so importing it stays light."""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # not ``typing``'s: ``import obsmem`` imports neither ``typing`` nor ``re``
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: each name in ``names`` (name -> submodule) is
    imported from its submodule the first time it is asked for, then kept in the package."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
