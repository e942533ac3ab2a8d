"""The messages docs/troubleshooting.md quotes are the ones Troupe prints.

A message is a backticked span of the file with a space in it that is not a
command line (`troupe ...`, `kubectl ...`, `make ...`). It must be made of
what troupe/'s source prints: string constants, f-strings and %-format strings
(docstrings aside), their placeholders standing for one word of the example
(`ns/x`, `5`, `gpu`). A message is read as a sequence of
- whole messages of the source (at least two words of fixed text), as
  kube-scheduler composes "0/5 nodes are available: 2 <reason>, 3 <reason>.";
- runs of at least two whole words of a source string's fixed text (the
  docs may quote part of a line: `lost the Lease`);
- counts, punctuation and elisions (`...`, `…`).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "troubleshooting.md"
COMMANDS = ("troupe ", "kubectl ", "make ")
PLACEHOLDER = "\x00"  # where a source string has a formatted value
WORD = re.compile(r"[A-Za-z]+")
PERCENT = re.compile(r"%(?:\(\w+\))?[-#0 +]*\d*(?:\.\d+)?[sdrfix]")
BRACES = re.compile(r"\{\w*\}")  # str.format fields


def quoted_messages(text: str) -> list[str]:
    spans = re.findall(r"`([^`\n]+)`", text.replace("\n  ", " ").replace("\n", " "))
    return [s for s in spans if " " in s and not s.startswith(COMMANDS)]


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
        ):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _template(node: ast.Constant | ast.JoinedStr) -> str:
    """The string with each formatted value replaced by PLACEHOLDER."""
    if isinstance(node, ast.Constant):
        assert isinstance(node.value, str)
        return BRACES.sub(PLACEHOLDER, PERCENT.sub(PLACEHOLDER, node.value))
    out = ""
    for part in node.values:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            out += part.value
        else:
            out += PLACEHOLDER
    return out


@cache
def source_templates() -> tuple[str, ...]:
    """Every string troupe/ prints or builds messages from, as templates."""
    found: set[str] = set()
    for f in sorted((ROOT / "troupe").rglob("*.py")):
        tree = ast.parse(f.read_text())
        skip = _docstrings(tree)
        inner = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            if id(node) in skip or id(node) in inner:
                continue
            if isinstance(node, ast.JoinedStr) or (
                isinstance(node, ast.Constant) and isinstance(node.value, str)
            ):
                found.add(_template(node))
    return tuple(sorted(found))


def _fixed_words(template: str) -> int:
    return len(WORD.findall(template.replace(PLACEHOLDER, " ")))


@cache
def _whole_patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    """Templates with two words of fixed text or more, as regexes (a placeholder
    is one word of the example), with their longest fixed piece."""
    out = []
    for t in source_templates():
        if _fixed_words(t) < 2:
            continue
        pieces = t.split(PLACEHOLDER)
        regex = r"\S+?".join(re.escape(p) for p in pieces)
        out.append((re.compile(regex), max(pieces, key=len)))
    return tuple(out)


@cache
def _fixed_text() -> str:
    """All the fixed text of the templates, one piece per line."""
    return "\n".join(p for t in source_templates() for p in t.split(PLACEHOLDER))


def _is_run_of_source_words(piece: str) -> bool:
    if len(WORD.findall(piece)) < 2:
        return False
    aligned = r"(?<![A-Za-z0-9])" + re.escape(piece) + r"(?![A-Za-z0-9])"
    return re.search(aligned, _fixed_text()) is not None


def explained(message: str) -> bool:
    """Whether the message is a sequence of source messages, runs of source
    words, counts, punctuation and elisions (see the module docstring)."""
    n = len(message)
    word_edges = {0, n} | {m.start() for m in WORD.finditer(message)}
    word_edges |= {m.end() for m in WORD.finditer(message)}
    candidates = [(rx, fixed) for rx, fixed in _whole_patterns() if fixed in message]
    reached = [False] * (n + 1)
    reached[0] = True
    for p in range(n):
        if not reached[p]:
            continue
        if not message[p].isalpha():  # a count, punctuation, a space, an elision
            reached[p + 1] = True
        for rx, _ in candidates:
            for end in range(p + 1, n + 1):
                if not reached[end] and rx.fullmatch(message, p, end):
                    reached[end] = True
        if p in word_edges:
            for end in sorted(word_edges):
                if end > p and not reached[end] and _is_run_of_source_words(message[p:end]):
                    reached[end] = True
    return reached[n]


def test_the_quoted_messages_are_found() -> None:
    messages = quoted_messages(DOC.read_text())
    # the file's quotes of what Troupe prints (a guard that the reading holds)
    assert 'PodGroup "ns/x" not found' in messages
    assert len(messages) >= 6
    assert [m for m in messages if not explained(m)] == []


@pytest.mark.parametrize(
    "message",
    [
        # issue 33: the docs quoted a count the message does not carry
        'PodGroup "ns/x" has 2 pods, fewer than minMember 4',
        'PodGroup "ns/x" is gone',
        "cannot load the cluster credentials",
        "0/5 nodes are available: 2 node(s) had a taint",
    ],
)
def test_a_message_troupe_does_not_print_is_refused(message: str) -> None:
    assert not explained(message)


@pytest.mark.parametrize(
    "message",
    [
        'PodGroup "ns/x" has fewer pods than minMember 4',
        "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: gpu}, "
        "3 Insufficient cpu.",
        "lost the Lease",
        "... does not implement ...",
    ],
)
def test_a_message_troupe_prints_is_explained(message: str) -> None:
    assert explained(message)
