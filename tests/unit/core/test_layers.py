"""The core names no plugin, read from the import statements: troupe.core and
troupe.framework never import troupe.plugins (gangs, quotas and devices reach
them through extension points), and the tools take only the registry, which
they pass to the Scheduler."""

from __future__ import annotations

import ast
from pathlib import Path

TROUPE = Path(__file__).resolve().parents[3] / "troupe"


def plugin_imports(path: Path) -> set[str]:
    """The troupe.plugins modules `path` imports, at any depth."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        out.update(n for n in names if n == "troupe.plugins" or n.startswith("troupe.plugins."))
    return out


def test_the_core_and_the_framework_import_no_plugin() -> None:
    found = {
        str(p.relative_to(TROUPE.parent)): plugin_imports(p)
        for package in ("core", "framework")
        for p in sorted((TROUPE / package).rglob("*.py"))
    }
    assert {k: v for k, v in found.items() if v} == {}


def test_the_tools_take_only_the_registry() -> None:
    for p in sorted((TROUPE / "tools").rglob("*.py")):
        assert plugin_imports(p) <= {"troupe.plugins.registry"}, p
