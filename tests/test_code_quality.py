"""The linters are part of the test suite, so one command checks everything."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = BIN / name
    path = str(found) if found.exists() else shutil.which(name)
    assert path, f"{name} is missing: pip install -e '.[dev]'"
    return path


def test_ruff_is_clean() -> None:
    result = subprocess.run(
        [_tool("ruff"), "check", "src", "tests"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    result = subprocess.run(
        [_tool("ruff"), "format", "--check", "src", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_pyright_strict_is_clean() -> None:
    result = subprocess.run([_tool("pyright")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


SRC = ROOT / "src" / "obsmem"


def _module_constants(path: Path) -> list[tuple[str, str]]:
    """(name, value) of every module-level ``NAME = "text"`` in ``path``."""
    found: list[tuple[str, str]] = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            text = value.value
            if isinstance(text, str):
                found.append((target.id, text))
    return found


def test_metadata_keys_live_in_meta_keys() -> None:
    """Every ``om:`` metadata key and every ``META_*`` constant is defined in meta_keys.py."""
    elsewhere = [
        f"{path.relative_to(ROOT)}: {name} = {value!r}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "meta_keys.py"
        for name, value in _module_constants(path)
        if value.startswith("om:") or name.startswith("META_")
    ]
    assert not elsewhere, "define these in src/obsmem/meta_keys.py:\n" + "\n".join(elsewhere)
    keys = dict(_module_constants(SRC / "meta_keys.py"))
    assert all(name.startswith("META_") for name in keys)
    assert len(set(keys.values())) == len(keys), "two names for one metadata key"


MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
_EXCEPTION = re.compile(r"^\| `(src/obsmem/[^`:]+)(?::([\w.]+))?` \|")


def _size_exceptions() -> set[str]:
    """The entries of ARCHITECTURE.md's "Size exceptions" table: ``path`` or ``path:function``."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("\n## Size exceptions\n", 1)[1].split("\n## ", 1)[0]
    found: set[str] = set()
    for line in section.splitlines():
        if match := _EXCEPTION.match(line):
            path, function = match.groups()
            found.add(f"{path}:{function}" if function else path)
    return found


def _functions(
    body: list[ast.stmt], prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method under ``body`` by qualified name (``Class.method``,
    ``outer.inner``)."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{node.name}", node
            yield from _functions(node.body, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node.body, f"{prefix}{node.name}.")
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    yield from _functions(cast(list[ast.stmt], inner), prefix)


def _oversized() -> dict[str, int]:
    """Modules over MAX_MODULE_LINES and functions over MAX_FUNCTION_LINES, with their size."""
    found: dict[str, int] = {}
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            found[name] = lines
        for qualified, node in _functions(ast.parse(text).body):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if size > MAX_FUNCTION_LINES:
                found[f"{name}:{qualified}"] = size
    return found


def test_no_module_or_function_is_too_long() -> None:
    """No module over 600 lines and no function over 80, except those ARCHITECTURE.md's "Size
    exceptions" names with a reason; an exception that is no longer needed goes too."""
    oversized, allowed = _oversized(), _size_exceptions()
    unlisted = {k: v for k, v in oversized.items() if k not in allowed}
    assert not unlisted, (
        f"split these (modules at most {MAX_MODULE_LINES} lines, functions at most "
        f"{MAX_FUNCTION_LINES}) or list them under ARCHITECTURE.md's 'Size exceptions' with a "
        f"reason: {unlisted}"
    )
    stale = allowed - set(oversized)
    assert not stale, f"remove from ARCHITECTURE.md's 'Size exceptions' (within limits): {stale}"


def test_the_size_rule_sees_nested_functions() -> None:
    source = "class A:\n    def f(self):\n        def g():\n" + "            x = 1\n" * 81
    [(_, a)] = [(n, f) for n, f in _functions(ast.parse(source).body) if n == "A.f.g"]
    assert (a.end_lineno or 0) - a.lineno + 1 == 82
    assert [n for n, _ in _functions(ast.parse(source).body)] == ["A.f", "A.f.g"]
