"""No import cycles inside ``obsmem``: imports run one way, so any module can be read, tested
and moved with only what is below it.

The graph has one node per module of ``src/obsmem`` (a package is its ``__init__.py``) and an
edge for every ``import`` or ``from ... import`` statement that names another obsmem module,
wherever it stands: at module level or inside a function (a deferred import still means the
two modules need each other). Only imports under ``if TYPE_CHECKING:`` are left out, with
``typing``'s flag or a module's own ``TYPE_CHECKING = False``; they never run.

What an import statement counts as:

- ``import a.b.c`` and ``from a.b.c import x`` give an edge to ``a.b.c``; ``from a.b import c``
  gives an edge to ``a.b.c`` when ``c`` is a submodule, else to ``a.b``. Relative imports are
  resolved against the importing module's package first.
- Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``. Those packages count as
  edges too, but only the ones the importer is outside of: a module inside ``a.b`` is itself
  imported through ``a.b``'s ``__init__``, so an edge back to it would say nothing new. So a
  package ``__init__`` that re-exports its submodules (``pkg -> pkg.sub``) is fine, as long as
  no module outside the package that ``pkg.sub`` needs imports ``pkg`` back.
- Names that a module loads by string through ``importlib`` (the lazy ``__getattr__`` tables
  of ``obsmem``, ``obsmem.cli``, ``obsmem.convert`` ...) are data, not import statements, and are
  not counted: they load on first use, after every module above them has finished importing.

A failure lists each strongly connected component of more than one module with the edges
(file:line) that close it, so it says exactly which import to cut.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from pathlib import Path

import obsmem

SRC = Path(obsmem.__file__).parent
Edges = dict[str, dict[str, list[str]]]


def module_names(root: Path = SRC, top: str = "obsmem") -> dict[str, Path]:
    """Every module under ``root`` by dotted name, a package under its own name."""
    names: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join((top, *parts))] = path
    return names


def _type_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under ``if TYPE_CHECKING:`` (either flag spelling)."""
    only: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name == "TYPE_CHECKING":
            only |= {id(n) for s in node.body for n in ast.walk(s)}
    return only


def _named(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[str]:
    """The dotted names ``node`` imports, relative ones resolved against ``package``; for
    ``from x import y`` both ``x`` and ``x.y`` (the caller keeps the ones that are modules)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        anchor = parts[: len(parts) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    for alias in node.names:
        yield f"{base}.{alias.name}"
    yield base


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, package: str, known: Collection[str]
) -> set[str]:
    """The obsmem modules that running ``node`` in ``module`` imports (see the docstring)."""
    found: set[str] = set()
    named = list(_named(node, package))
    if isinstance(node, ast.ImportFrom):
        *members, base = named
        submodules = [m for m in members if m in known]
        named = submodules if len(submodules) == len(members) else [*submodules, base]
    for name in named:
        while name and name not in known:  # not a module here: the nearest one holding it
            name = name.rpartition(".")[0]
        if name != "obsmem" and not name.startswith("obsmem."):
            continue
        found.add(name)
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            if not (module == parent or module.startswith(parent + ".")):
                found.add(parent)
    found.discard(module)
    return found


def import_graph(modules: dict[str, Path], root: Path = SRC) -> Edges:
    """``graph[a][b]`` is where (file:line, from ``root``) module ``a`` imports module ``b``."""
    graph: Edges = {name: {} for name in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = _type_only(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom) or id(node) in type_only:
                continue
            where = f"{path.relative_to(root).as_posix()}:{node.lineno}"
            for target in _targets(node, module, package, modules):
                graph[module].setdefault(target, []).append(where)
    return graph


def cycles(graph: Edges) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def describe(component: list[str], graph: Edges) -> str:
    """One cycle with every edge inside it and where each is written."""
    members = set(component)
    lines = [f"cycle of {len(component)} modules: {', '.join(component)}"]
    for a in component:
        for b, places in sorted(graph[a].items()):
            if b in members:
                lines.append(f"    {a} -> {b}  ({', '.join(places)})")
    return "\n".join(lines)


def test_obsmem_has_no_import_cycle() -> None:
    graph = import_graph(module_names())
    found = cycles(graph)
    assert not found, "cut one import in each cycle:\n" + "\n".join(
        describe(c, graph) for c in found
    )


def test_the_walk_sees_each_kind_of_cycle(tmp_path: Path) -> None:
    """A sample package with one cycle of each kind the walk must see, and the imports it must
    leave out (type-only, a package's own ``__init__`` re-export)."""
    pkg = tmp_path / "obsmem"
    (pkg / "door").mkdir(parents=True)
    files = {
        "__init__.py": "",
        # a function-level import closes a cycle with a module-level one
        "a.py": "from . import b\n",
        "b.py": "def f():\n    from .a import x\n",
        # a type-only import does not, with either flag spelling
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import y\n",
        "d.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    import obsmem.c\nfrom . import c\n",
        # a package re-exporting its submodule is no cycle; a submodule importing a module
        # outside that imports the package back is one, through the package's ``__init__``
        "door/__init__.py": "from .hooks import Hooks\n",
        "door/hooks.py": "from ..e import E\n",
        "e.py": "from obsmem.door.hooks import H\n",
        "f.py": "from obsmem.door import hooks\n",
        "door/kit.py": "import obsmem.g\n",
        "g.py": "from .door.kit import K\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text, encoding="utf-8")
    graph = import_graph(module_names(pkg), pkg)
    assert graph["obsmem.f"] == {"obsmem.door": ["f.py:1"], "obsmem.door.hooks": ["f.py:1"]}
    assert cycles(graph) == [
        ["obsmem.a", "obsmem.b"],
        ["obsmem.door", "obsmem.door.hooks", "obsmem.e"],
        ["obsmem.door.kit", "obsmem.g"],
    ]
    report = describe(cycles(graph)[0], graph)
    assert "obsmem.b -> obsmem.a  (b.py:2)" in report
