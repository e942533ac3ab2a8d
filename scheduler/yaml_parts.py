"""Large YAML streams parsed in parts, in parallel: the simulator's intake.

libyaml hands PyYAML one Python event (and two marks) per node, about 1 µs
each, so a 60 MiB dump as kubectl prints it takes ten seconds and more on one
core. The text is cut where a part can be parsed on its own, and the parts are
parsed in forked worker processes while this one parses the first:

* a stream of several documents, before a `---` line (a document marker at
  column 0 ends whatever scalar was open, so every document parses alone);
* one `kind: List` document (`kubectl get -o yaml`), before a `- ` line at
  column 0 inside its top-level `items:` block: each part is parsed as
  `items:` followed by its items (the same nesting depth as in the whole
  document), and the rest of the document (head and tail) as one document
  whose `items` the parts' items then fill.

The result is the one `load_yaml_documents` builds from the whole text, or
the parts are not used: a cut inside a quoted or flow scalar leaves a part
that does not parse; a part with an anchor (an alias in another part could name
it, and the bound on aliases is for the whole stream), a part that needs
`load_yaml_documents`' fallback, a directive (`%`), a `...` marker or a byte
order mark past the start, a List document whose rest does not have exactly
`items: null`: any of these and the whole text goes through
`load_yaml_documents`, which gives the same value, or the same error.
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Final

from scheduler import forked
from scheduler.config import load_yaml_documents, yaml_part_documents

# Below this a stream is parsed in one piece: forking costs more than it saves.
MIN_PART_CHARS: Final = 4 << 20
_BLANK: Final = " \t\r\n"
# The first line at column 0 that can end a top-level block sequence.
_COLUMN0_OTHER: Final = re.compile(r"^[^\s#-]", re.M)


def _line(text: str, marker: str, start: int, end: int | None = None) -> int:
    """The offset of the first line in [start, end) that is `marker` followed by a
    blank or the end of the text, or -1. (str.find: a regular expression anchored
    at line starts reads a 30 MiB text ten times slower.)"""
    stop = len(text) if end is None else end
    if start == 0 and text.startswith(marker) and text[len(marker) : len(marker) + 1] in _BLANK:
        return 0
    needle = "\n" + marker
    i = text.find(needle, max(start - 1, 0), stop)
    while i != -1:
        j = i + len(needle)
        if j == len(text) or text[j] in _BLANK:
            return i + 1
        i = text.find(needle, i + 1, stop)
    return -1


def load(text: str, parts: int | None = None) -> list[Any]:
    """Every document of the stream, as load_yaml_documents(text) gives them."""
    n = forked.workers() if parts is None else parts
    n = min(n, len(text) // MIN_PART_CHARS) if parts is None else n
    if n >= 2 and forked.can_fork():
        got = _load_in_parts(text, n)
        if got is not None:
            return got
    return load_yaml_documents(text)


def _cuts(text: str, start: int, end: int, marker: str, n: int) -> list[int]:
    """Up to n-1 offsets in (start, end), each the start of a `marker` line, near
    the even split of that span."""
    out: list[int] = []
    last = start
    for k in range(1, n):
        at = _line(text, marker, max(last + 1, start + (end - start) * k // n), end)
        if at == -1:
            break
        if at > last:
            out.append(at)
            last = at
    return out


def _load_in_parts(text: str, n: int) -> list[Any] | None:
    if (
        text.find("\ufeff", 1) != -1
        or _line(text, "...", 0) != -1
        or "\n%" in text
        or text[:1] == "%"
    ):
        return None
    if _line(text, "---", 1) != -1:  # several documents
        cuts = _cuts(text, 0, len(text), "---", n)
        if not cuts:
            return None
        bounds = [0, *cuts, len(text)]
        parsed = _parse_all([text[a:b] for a, b in itertools.pairwise(bounds)])
        if parsed is None:
            return None
        return [d for part in parsed for d in part]
    at = _items_line(text)
    if at == -1:
        return None
    begin = text.find("\n", at) + 1
    if begin == 0 or text[begin : begin + 1] != "-" or text[begin + 1 : begin + 2] not in _BLANK:
        return None
    last = max(text.rfind("\n-" + c) for c in _BLANK) + 1
    if last <= begin:
        return None
    other = _COLUMN0_OTHER.search(text, last)
    end = other.start() if other is not None else len(text)
    cuts = _cuts(text, begin, end, "-", n)
    if not cuts:
        return None
    bounds = [begin, *cuts, end]
    header = text[at:begin]  # "items:" and its line break
    shell = text[:begin] + text[end:]
    pieces = [header + text[a:b] for a, b in itertools.pairwise(bounds)]
    parsed = _parse_all([*pieces, shell])  # this process takes the first piece
    if parsed is None:
        return None
    *parts, rest = parsed
    if len(rest) != 1 or not isinstance(rest[0], dict) or rest[0].get("items", 0) is not None:
        return None
    merged: list[Any] = []
    for part in parts:
        if len(part) != 1 or not isinstance(part[0], dict) or list(part[0]) != ["items"]:
            return None
        got = part[0]["items"]
        if not isinstance(got, list):
            return None
        merged.extend(got)
    rest[0]["items"] = merged
    return rest


def _items_line(text: str) -> int:
    """The offset of the line `items:` (nothing after it) at column 0, or -1 if
    there is none, or more than one line at column 0 starts with `items:`."""
    found = -1
    i = 0 if text.startswith("items:") else text.find("\nitems:") + 1 or -1
    while i != -1:
        if found != -1:
            return -1
        j = text.find("\n", i)
        if text[i + len("items:") : len(text) if j == -1 else j].strip(" \t\r"):
            return -1
        found = i
        i = text.find("\nitems:", i) + 1 or -1
    return found


def _parse_all(texts: list[str]) -> list[list[Any]] | None:
    return forked.parse_all(texts, yaml_part_documents)
