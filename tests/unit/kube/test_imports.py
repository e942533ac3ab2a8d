"""The layers around the API server, read from the import statements: the
kubernetes client is imported only to load credentials, kopf only by the
operator, and neither kube nor the core imports the operator."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

TROUPE = Path(__file__).resolve().parents[3] / "troupe"


def imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth (function-level imports too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


@functools.cache
def imports_by_module() -> dict[str, frozenset[str]]:
    """`imports` of every module of troupe/, by path from the repository: parsed
    once for all the tests of this file, which only read it."""
    return {
        str(p.relative_to(TROUPE.parent)): frozenset(imports(p))
        for p in sorted(TROUPE.rglob("*.py"))
    }


def importers(prefix: str) -> set[str]:
    return {
        path
        for path, names in imports_by_module().items()
        if any(m == prefix or m.startswith(prefix + ".") for m in names)
    }


def test_only_credential_loading_imports_the_kubernetes_client() -> None:
    assert importers("kubernetes") == {"troupe/kube/credentials.py"}


def test_only_the_operator_imports_kopf() -> None:
    assert importers("kopf") == {"troupe/operator/main.py"}


@pytest.mark.parametrize(
    ("layer", "above"),
    [
        ("troupe/kube/", "troupe.operator"),
        ("troupe/core/", "troupe.operator"),
        ("troupe/core/", "troupe.kube"),
    ],
)
def test_a_layer_does_not_import_the_one_above(layer: str, above: str) -> None:
    assert {p for p in importers(above) if p.startswith(layer)} == set()
