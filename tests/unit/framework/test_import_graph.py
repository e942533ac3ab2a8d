"""No two modules of troupe import each other, directly or through others.

The graph is made of the imports a module runs when it is loaded (those inside
functions run later and are left out) and of those under `if TYPE_CHECKING:`,
which mypy follows: a circle there is a circle in the design even when Python
never runs it (framework/filtering, handle and interface were one).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for f in sorted((ROOT / "troupe").rglob("*.py")):
        parts = f.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _module_of(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(tree: ast.Module, modules: dict[str, Path]) -> set[str]:
    """The troupe modules imported at module level (TYPE_CHECKING blocks included)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(filter(None, (_module_of(a.name, modules) for a in node.names)))
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    target = full if full in modules else _module_of(node.module, modules)
                    if target:
                        found.add(target)
            elif isinstance(node, ast.If | ast.Try | ast.With | ast.ClassDef):
                for block in ("body", "orelse", "finalbody"):
                    visit(getattr(node, block, None) or [])
                for handler in getattr(node, "handlers", ()):
                    visit(handler.body)

    visit(tree.body)
    return found


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_the_circle_finder_finds_one() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_through_others() -> None:
    modules = _modules()
    graph = {
        name: _imports(ast.parse(f.read_text()), modules) - {name} for name, f in modules.items()
    }
    # A package's __init__ importing its own modules is how packages re-export.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(f"{m}.")}
    assert _circles(graph) == []
