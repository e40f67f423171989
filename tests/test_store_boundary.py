"""The store boundary: the front doors and servers (``integrations/``, ``proxy/``,
``mcp_server/``) reach storage only through ``Memory``. None imports a store module (an import
under ``TYPE_CHECKING`` is only a type) or touches ``memory.store``; stores are opened in
``cli/`` (``cli.common.open_store``). The inspector (``ui/``) reads through one read-only query
module, ``ui/queries.py``: no other ui module imports a store module or calls a store."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import obsmem

SRC = Path(obsmem.__file__).parent
DOORS = ("integrations", "proxy", "mcp_server")


def _type_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes under ``if TYPE_CHECKING:``."""
    only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            only |= {id(n) for s in node.body for n in ast.walk(s)}
    return only


def _imported(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    """The absolute names ``node`` (in ``module``) imports."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".")[: -node.level]
        base = ".".join([*package, base] if base else package)
    return [base, *(f"{base}.{a.name}" for a in node.names)]


def crossings(path: Path, module: str | None = None) -> list[str]:
    """Where ``path`` (the module ``module``) crosses the store boundary: a store module
    imported at run time, or an attribute ``store`` read from a memory (``memory.store``,
    ``self._memory.store``)."""
    module = module or ".".join(("obsmem", *path.relative_to(SRC).with_suffix("").parts))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    type_only = _type_only(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in type_only:
            names = _imported(node, module)
            if any(n == "obsmem.stores" or n.startswith("obsmem.stores.") for n in names):
                found.append(f"{path.name}:{node.lineno} imports {names[0]}")
        if isinstance(node, ast.Attribute) and node.attr == "store":
            owner = ast.unparse(node.value)
            if owner.rsplit(".", 1)[-1].lstrip("_").endswith("memory"):
                found.append(f"{path.name}:{node.lineno} reads {owner}.store")
    return found


def store_calls(path: Path) -> list[str]:
    """The calls in ``path`` of a method of a store (``store.get_thread(...)``,
    ``self.store.list_threads(...)``), closing it aside."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = ast.unparse(node.func.value)
            if owner.rsplit(".", 1)[-1] == "store" and node.func.attr != "aclose":
                found.append(f"{path.name}:{node.lineno} calls {owner}.{node.func.attr}")
    return found


@pytest.mark.parametrize("package", DOORS)
def test_doors_and_servers_reach_storage_only_through_memory(package: str) -> None:
    found = [c for p in sorted((SRC / package).rglob("*.py")) for c in crossings(p)]
    assert not found, "go through Memory (or cli.common.open_store) instead: " + "; ".join(found)


def test_the_inspector_reads_through_its_query_module() -> None:
    others = [p for p in sorted((SRC / "ui").rglob("*.py")) if p.name != "queries.py"]
    found = [c for p in others for c in (*crossings(p), *store_calls(p))]
    assert not found, "read through obsmem.ui.queries instead: " + "; ".join(found)


def test_the_rule_sees_a_crossing(tmp_path: Path) -> None:
    """The walk finds each kind of crossing, and lets a type-only import be."""
    sample = tmp_path / "_sample_crossing.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "from ..stores.base import Store\n"
        "import obsmem.stores.sqlite\n"
        "if TYPE_CHECKING:\n"
        "    from obsmem.stores import InMemoryStore\n"
        "async def f(self):\n"
        "    return await self.memory.store.get_thread('t')\n"
        "async def g(self):\n"
        "    await self.store.aclose()\n",
        encoding="utf-8",
    )
    assert crossings(sample, "obsmem.integrations._sample_crossing") == [
        "_sample_crossing.py:2 imports obsmem.stores.base",
        "_sample_crossing.py:3 imports obsmem.stores.sqlite",
        "_sample_crossing.py:7 reads self.memory.store",
    ]
    assert store_calls(sample) == ["_sample_crossing.py:7 calls self.memory.store.get_thread"]
