"""The kinds docs/operations.md lists are the table's (troupe.api.kinds.KINDS):
the block between its `kinds` markers is what `kinds_table()` renders."""

from __future__ import annotations

from pathlib import Path

from troupe.api.kinds import KINDS, READ_VERBS, Kind

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
BEGIN = "<!-- kinds: made from troupe/api/kinds.py (tests/unit/test_docs_kinds.py) -->"
END = "<!-- end of kinds -->"


def _api(k: Kind) -> str:
    first = k.api_versions[0]
    if len(k.versions) == 1:
        return f"`{first}`"
    return f"`{first}`, else " + ", ".join(f"`{v}`" for v in k.versions[1:]) + " (the first served)"


def _writes(k: Kind) -> str:
    out = []
    for w in k.writes:
        what = f"{k.plural}/{w.subresource}" if w.subresource else k.plural
        verbs = ", ".join(w.verbs)
        out.append(f"{verbs} `{what}`" + (f" (with `{w.option}`)" if w.option else ""))
    return "; ".join(out)


def kinds_table() -> str:
    read = ", ".join(READ_VERBS)
    lines = ["| Kind | API | Troupe reads | Troupe writes |", "|---|---|---|---|"]
    for k in KINDS:
        reads = read if k.watched else "`troupe simulate` only"
        lines.append(f"| {k.kind} | {_api(k)} | {reads} | {_writes(k)} |")
    return "\n".join(lines)


def test_the_docs_list_the_tables_kinds() -> None:
    text = DOC.read_text()
    assert BEGIN in text and END in text
    got = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    want = kinds_table()
    assert got == want, f"docs/operations.md should list, between its markers:\n{want}"
