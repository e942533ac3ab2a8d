"""Block-style YAML as kubectl and PyYAML print it, read a line at a time.

`kubectl get -o yaml` prints one style only: block mappings and sequences, one
key or item a line, scalars plain or single-quoted (folded over more lines past
80 columns), `{}` and `[]` for empty collections, `|` for text with line
breaks. libyaml's parser hands PyYAML an event object and two marks for every
node of that (about 1.2 µs each: 4.3 s for a 36 MiB dump, 4.7 s with the
objects built); this reads the same text by lines and builds the objects in
1.4-2.3 s.

It is a fast path, not a parser: `load` gives exactly what SafeLoader builds
(the same scalar resolution: plain `true`, `1`, `~`, timestamps...) or None as
soon as a line is anything else (a flow collection with content, a
double-quoted scalar over several lines, a scalar's continuation that starts
with an indicator, an anchor, alias or tag, a comment after a value, a folded
or indented block scalar, a tab, a carriage return, a byte order mark, a
character YAML does not accept, a directive, a `...` marker, an implicit key
past 1024 characters, nesting deeper than the bound); the caller then parses
the text with libyaml, which gives the same value or the error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, Final

import yaml

# Characters the YAML reader refuses (PyYAML's Reader.NON_PRINTABLE), and the
# ones the fast path leaves to libyaml: tab, the line breaks other than "\n"
# (carriage return, NEL, U+2028, U+2029) and the byte order mark.
_REFUSED: Final = re.compile(
    "[^\x0a\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)
_ASCII_ACCEPTED: Final = bytes([0x0A, *range(0x20, 0x7F)])
_IMPLICIT: Final = yaml.resolver.Resolver.yaml_implicit_resolvers
_SCALARS: Final[dict[Any, Any]] = yaml.constructor.SafeConstructor.yaml_constructors
_STR_TAG: Final = "tag:yaml.org,2002:str"
_NULL_TAG: Final = "tag:yaml.org,2002:null"
_BOOL_TAG: Final = "tag:yaml.org,2002:bool"
# What a plain scalar may not start with (YAML's indicators); "-" is allowed
# when a non-blank follows (`-1`, `--port=80`) and is checked apart.
_NOT_PLAIN_START: Final = frozenset("?:,[]{}#&*!|>'\"%@`")
# First characters of the plain keys and values the hot loop takes without
# further checks: not an indicator, a dash, a dot (`...`, `.: {}`) or a blank.
_KEY_START: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_/$()^+;~"
)
_VALUE_START: Final = _KEY_START | frozenset(".")
# What a remembered line is: "key: scalar", "key: {}", "key: []", "key:".
_SCALAR, _EMPTY_MAP, _EMPTY_LIST, _PENDING = 0, 1, 2, 3
# Lines remembered whole (a kubectl dump of 11000 pods has 54000 distinct lines
# in 1.35 million); past this many, new ones are read but not remembered.
_MAX_ENTRIES: Final = 1 << 18
# YAML's bound on an implicit key: its text, quotes included, up to the `:`.
_MAX_KEY: Final = 1024
# A one-line double-quoted scalar.
_DOUBLE: Final = re.compile(r'"(?:[^"\\]|\\.)*"')
_FAST_LOADER: Final[type] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Other(Exception):
    """A line outside the block style this module reads."""


def load(text: str, max_depth: int) -> list[Any] | None:
    """Every document of `text` as SafeLoader builds them, or None if the text is
    not plain block style (the caller parses it the general way)."""
    if text.isascii():  # a byte string's translate is ten times a regular expression's speed
        if text.encode("ascii").translate(None, _ASCII_ACCEPTED):
            return None
    elif _REFUSED.search(text) is not None:
        return None
    try:
        return _load(text, max_depth)
    except (_Other, RecursionError, ValueError, yaml.YAMLError):
        return None


def resolve_plain(text: str) -> tuple[Any, str | None]:
    """A plain scalar as SafeLoader resolves it: (its value, None) for a string,
    null or a boolean; (None, its tag) for the caller to construct otherwise."""
    tag = _STR_TAG
    for t, regexp in _IMPLICIT.get(text[:1] if text else "", ()):
        if regexp.match(text):
            tag = t
            break
    if tag == _STR_TAG:
        return text, None
    if tag == _NULL_TAG:
        return None, None
    if tag == _BOOL_TAG:
        return text.lower() in ("yes", "true", "on"), None
    return None, tag


def _resolve(text: str) -> Any:
    """A plain scalar as SafeLoader constructs it."""
    value, tag = resolve_plain(text)
    if tag is None:
        return value
    construct = _SCALARS.get(tag)
    if construct is None:  # `=`, `<<`: SafeLoader's errors, or merge keys
        raise _Other
    return construct(yaml.constructor.SafeConstructor(), yaml.ScalarNode(tag, text))


def _load(text: str, max_depth: int) -> list[Any]:
    # By chunks of lines, not all at once: the lines are dropped as they are
    # read, and their memory serves the next chunk's (touching fresh memory for
    # a million line strings costs more than splitting them).
    more = _chunks(text).__next__
    lines: list[str] = more()
    n = len(lines)
    docs: list[Any] = []
    # Plain scalars resolve to immutable values: each text once, then a lookup.
    # Text whose first character no implicit resolver claims is a string as it is.
    plain: dict[str, Any] = {}
    # Mapping entries read before, by their whole line: (column, key, value, kind).
    entries: dict[str, tuple[int, Any, Any, int]] = {}
    implicit = _IMPLICIT
    other = _Other
    # Open collections, innermost last: (column, collection, is a sequence).
    stack: list[tuple[int, Any, bool]] = []
    # A key (or a sequence item) whose value is on the lines below: its
    # collection, the key (None for an item) and its column.
    pend: Any = None
    pend_key: Any = None
    pend_col = -1
    in_doc = False
    marker = False  # a `---` line and no content since
    key_start, value_start = _KEY_START, _VALUE_START
    # The innermost open collection (stack[-1]) unpacked; column -1 before any.
    top_col, is_seq = -1, False
    cur: Any = None
    before: list[str] = []  # the chunk before `lines`
    i = 0
    while True:
        if i >= n:
            try:
                lines, before = more(), lines
            except StopIteration:
                break
            i, n = 0, len(lines)
            continue
        line = lines[i]
        i += 1
        hit = entries.get(line)
        if hit is not None and hit[0] == top_col and not is_seq and pend is None:
            # A mapping entry seen before (a dump repeats most of its lines).
            kind = hit[3]
            if kind == _SCALAR:
                cur[hit[1]] = hit[2]
            elif kind == _PENDING:
                pend, pend_key, pend_col = cur, hit[1], top_col
            else:
                cur[hit[1]] = {} if kind == _EMPTY_MAP else []
            continue
        body = line.lstrip(" ")
        col = len(line) - len(body)
        if col == top_col and not is_seq and pend is None and body and body[0] in key_start:
            # Most lines: the next "key: value" of the open mapping, both plain.
            k, sep, v = body.partition(": ")
            if (
                sep
                and v
                and v[0] in value_start
                and v[-1] != " "
                and k[-1] != " "
                and v[-1] != ":"
                and ": " not in v
                and " #" not in body
                and len(k) <= _MAX_KEY
            ):
                key = plain.get(k, plain)
                if key is plain:
                    key = plain[k] = _resolve(k) if k[0] in implicit else k
                value = plain.get(v, plain)
                if value is plain:
                    value = plain[v] = _resolve(v) if v[0] in implicit else v
                if len(entries) < _MAX_ENTRIES:
                    entries[line] = (col, key, value, _SCALAR)
                cur[key] = value
                continue
        if not body or body[0] == "#":
            continue
        if col == 0 and (body[:3] == "---" or body[:3] == "..."):
            if body != "---" or marker:
                raise other  # content after a marker, `...`, an empty document
            if pend is not None:
                _put(pend, pend_key, None)
                pend = None
            stack.clear()
            top_col, cur, is_seq = -1, None, False
            in_doc, marker = False, True
            continue
        dash = body[0] == "-" and (len(body) == 1 or body[1] == " ")
        if not in_doc:
            if col != 0:
                raise other
            root: Any = [] if dash else {}
            docs.append(root)
            stack.append((0, root, dash))
            top_col, cur, is_seq = 0, root, dash
            in_doc, marker = True, False
        elif pend is not None:
            if col > pend_col or (dash and col == pend_col and pend_key is not None):
                child: Any = [] if dash else {}
                _put(pend, pend_key, child)
                if len(stack) >= max_depth - 1:
                    raise other
                stack.append((col, child, dash))
                top_col, cur, is_seq = col, child, dash
            else:
                _put(pend, pend_key, None)
            pend = None
        while top_col > col or (top_col == col and is_seq and not dash):
            stack.pop()
            if not stack:
                raise other
            top_col, cur, is_seq = stack[-1]
        if top_col != col:
            # More indented than the innermost collection: the rest of the plain
            # scalar the line before began (kubectl folds long text at 80 columns).
            i = _plain_lines(lines, before, i, top_col, is_seq, cur, more)
            n = len(lines)
            continue
        # Sequence items: "- x", "- - x", "- key: value".
        line_entry = not is_seq  # the line is a mapping entry, whole
        while is_seq:
            if not dash:
                raise other
            rest = body[2:].lstrip(" ")
            if not rest:
                if len(body) > 1 and body[1:].strip(" "):
                    raise other
                pend, pend_key, pend_col = cur, None, col
                break
            if rest[0] == "#":
                raise other
            dash_col = col
            col += len(body) - len(rest)
            body = rest
            dash = body[0] == "-" and (len(body) == 1 or body[1] == " ")
            if dash:
                child = []
                cur.append(child)
            elif _is_key_line(body):
                child = {}
                cur.append(child)
            else:
                value, i = _value(body, lines, i, dash_col, plain, implicit, more)
                n = len(lines)  # a block scalar may have read the next chunk
                cur.append(value)
                break
            if len(stack) >= max_depth - 1:
                raise other
            stack.append((col, child, dash))
            top_col, cur, is_seq = col, child, dash
        else:
            # A mapping entry: "key: value" or "key:".
            if dash:
                raise other
            c = body[0]
            if c == "'" or c == '"':
                key, rest = _quoted_key(body)
            else:
                at = body.find(": ")
                if at == -1:
                    if body[-1] != ":":
                        raise other
                    ktext, rest = body[:-1], ""
                else:
                    ktext, rest = body[:at], body[at + 2 :]
                if c in _NOT_PLAIN_START or (c == "-" and len(ktext) > 1 and ktext[1] == " "):
                    raise other
                if " #" in ktext or ktext[-1] == " " or ktext == "-" or len(ktext) > _MAX_KEY:
                    raise other
                key = plain.get(ktext, plain)
                if key is plain:
                    key = plain[ktext] = _resolve(ktext) if ktext[0] in implicit else ktext
            rest = rest.lstrip(" ")
            remember = line_entry and len(entries) < _MAX_ENTRIES
            if not rest:
                if remember:
                    entries[line] = (col, key, None, _PENDING)
                pend, pend_key, pend_col = cur, key, col
                continue
            was = i
            value, i = _value(rest, lines, i, col, plain, implicit, more)
            n = len(lines)
            if remember and i == was:  # one line: not a block or folded scalar
                cls = value.__class__
                kind = _EMPTY_MAP if cls is dict else _EMPTY_LIST if cls is list else _SCALAR
                entries[line] = (col, key, value if kind == _SCALAR else None, kind)
            cur[key] = value
            continue
    if marker:
        raise other
    if pend is not None:
        _put(pend, pend_key, None)
    return docs


def _put(coll: Any, key: Any, value: Any) -> None:
    if key is None and isinstance(coll, list):
        coll.append(value)
    else:
        coll[key] = value


def _is_key_line(body: str) -> bool:
    """Whether a sequence item's content is a mapping's first entry."""
    c = body[0]
    if c == "'" or c == '"':
        try:
            _quoted_key(body)
        except _Other:
            return False
        return True
    at = body.find(": ")
    return at != -1 or body[-1] == ":"


def _quoted_key(body: str) -> tuple[str, str]:
    """A quoted key and the text after its `:`."""
    if body[0] == "'":
        end = 1
        while True:
            end = body.find("'", end)
            if end == -1:
                raise _Other
            if body[end + 1 : end + 2] == "'":
                end += 2
                continue
            break
        key = body[1:end].replace("''", "'")
    else:
        m = _DOUBLE.match(body)
        if m is None:
            raise _Other
        end = m.end() - 1
        key = _double(body[: end + 1])
    if end + 1 > _MAX_KEY:
        raise _Other
    after = body[end + 1 :]
    if after == ":":
        return key, ""
    if after[:2] != ": ":
        raise _Other
    return key, after[2:]


def _double(text: str) -> str:
    """A one-line double-quoted scalar's value."""
    if "\\" not in text:
        return text[1:-1]
    value = yaml.load(text, Loader=_FAST_LOADER)
    if not isinstance(value, str):
        raise _Other
    return value


def _chunks(text: str, size: int = 1 << 20) -> Iterator[list[str]]:
    """text.split("\n") in parts of about `size` characters: together, the same list."""
    pos, n = 0, len(text)
    while True:
        end = text.find("\n", pos + size) if pos + size < n else -1
        if end == -1:
            yield text[pos:].split("\n")
            return
        yield text[pos:end].split("\n")
        pos = end + 1


def _value(
    text: str,
    lines: list[str],
    i: int,
    parent_col: int,
    plain: dict[str, Any],
    implicit: Any,
    more: Callable[[], list[str]],
) -> tuple[Any, int]:
    """The scalar (or empty collection) `text` is, and the index of the next line
    (past a block scalar's lines)."""
    text = text.rstrip(" ")
    c = text[0]
    if c == "'":
        end = _closing(text, 1)
        if end == -1:  # the scalar goes on over the next lines
            return _quoted_lines(text[1:], lines, i, parent_col, more)
        if end != len(text) - 1:
            raise _Other  # a comment or more after the closing quote
        return text[1:-1].replace("''", "'"), i
    if c == '"':
        if _DOUBLE.fullmatch(text) is None:
            raise _Other
        return _double(text), i
    if c == "{" or c == "[":
        if text == "{}":
            return {}, i
        if text == "[]":
            return [], i
        raise _Other
    if c == "|":
        return _literal(text, lines, i, parent_col, more)
    if c in _NOT_PLAIN_START or (c == "-" and (len(text) == 1 or text[1] == " ")):
        raise _Other
    if ": " in text or " #" in text or text[-1] == ":":
        raise _Other
    value = plain.get(text, plain)
    if value is plain:
        value = plain[text] = _resolve(text) if c in implicit else text
    return value, i


def _closing(text: str, start: int) -> int:
    """The offset of the single quote that closes a single-quoted scalar whose
    text goes on at `start` (`''` is a quote inside it), or -1 if none does."""
    j = text.find("'", start)
    while j != -1 and text[j + 1 : j + 2] == "'":
        j = text.find("'", j + 2)
    return j


def _next_line(lines: list[str], j: int, more: Callable[[], list[str]]) -> str | None:
    """lines[j], reading the next chunk into `lines` if need be; None at the end."""
    while j >= len(lines):
        try:
            lines.extend(more())
        except StopIteration:
            return None
    return lines[j]


def _fold(first: str, rest: list[tuple[int, str]], strip_last: bool) -> str:
    """YAML's line folding of a scalar written over several lines: `first`, then
    each further line's text after the blank lines before it. One line break
    becomes a space, n blank lines become n line breaks; the spaces around a
    break go, except (`strip_last` False) before a quoted scalar's closing quote."""
    out = [first.rstrip(" ")]
    last = len(rest) - 1
    for k, (blanks, text) in enumerate(rest):
        out.append("\n" * blanks if blanks else " ")
        out.append(text.rstrip(" ") if strip_last or k != last else text)
    return "".join(out)


def _quoted_lines(
    first: str, lines: list[str], i: int, parent_col: int, more: Callable[[], list[str]]
) -> tuple[str, int]:
    """A single-quoted scalar opened on the line before lines[i] (`first`: its text
    after the quote there) and closed on a further line, each more indented
    than the collection it is in; and the index of the line after it."""
    rest: list[tuple[int, str]] = []
    blanks = 0
    j = i
    while True:
        ln = _next_line(lines, j, more)
        if ln is None:
            raise _Other  # the stream ends inside the quotes: libyaml says so
        j += 1
        body = ln.lstrip(" ")
        if not body:
            blanks += 1
            continue
        if len(ln) - len(body) <= parent_col:
            raise _Other
        end = _closing(body, 0)
        if end == -1:
            rest.append((blanks, body))
            blanks = 0
            continue
        if body[end + 1 :].strip(" "):
            raise _Other
        rest.append((blanks, body[:end]))
        break
    text = _fold(first, rest, strip_last=False)
    return text.replace("''", "'"), j


def _plain_lines(
    lines: list[str],
    before: list[str],
    i: int,
    top_col: int,
    is_seq: bool,
    cur: Any,
    more: Callable[[], list[str]],
) -> int:
    """A plain scalar folded over lines: lines[i - 1] is more indented than the
    innermost collection (at `top_col`), so it goes on with the scalar the line
    before it began, the last value of `cur`. That value becomes the whole
    scalar; gives the index of the first line after it."""
    # The line the scalar began on: the one before, blank lines aside.
    src, k = lines, i - 2
    skipped = 0  # blank lines between it and lines[i - 1]: line breaks in the value
    while k < 0 or not src[k].strip(" "):
        if k >= 0:
            k -= 1
            skipped += 1
        elif src is lines and before:
            src, k = before, len(before) - 1
        else:
            raise _Other
    start = src[k]
    body = start.lstrip(" ")
    col = len(start) - len(body)
    while col < top_col and body[:2] == "- ":  # "- key: ..." opened the mapping
        content = body[2:].lstrip(" ")
        col += len(body) - len(content)
        body = content
    if col != top_col:
        raise _Other
    if is_seq:
        if body[:2] != "- ":
            raise _Other
        first = body[2:].lstrip(" ")
    else:
        if body[0] in _NOT_PLAIN_START:
            raise _Other  # a quoted key; a comment line, which a scalar cannot go on after
        at = body.find(": ")
        if at == -1 or not cur or next(reversed(cur)) != _resolve(body[:at]):
            raise _Other
        first = body[at + 2 :].lstrip(" ")
    if not first or first[0] in _NOT_PLAIN_START or first[0] == "-":
        raise _Other  # not a plain scalar: a quoted one, a collection, a block
    if ": " in first or " #" in first or first.rstrip(" ")[-1] == ":":
        raise _Other  # a mapping's first entry, a comment
    rest: list[tuple[int, str]] = []
    blanks = skipped
    j = i - 1
    while True:
        ln = _next_line(lines, j, more)
        if ln is None:
            break
        body = ln.lstrip(" ")
        if not body:
            blanks += 1
            j += 1
            continue
        if len(ln) - len(body) <= top_col:
            break
        if body[0] in _NOT_PLAIN_START or body[0] == "-":
            raise _Other  # a comment, an indicator: libyaml decides
        if ": " in body or " #" in body or body.rstrip(" ")[-1] == ":":
            raise _Other
        rest.append((blanks, body))
        blanks = 0
        j += 1
    text = _fold(first, rest, strip_last=True)
    value = _resolve(text)
    if is_seq:
        cur[-1] = value
    else:
        cur[next(reversed(cur))] = value
    return j


def _literal(
    header: str, lines: list[str], i: int, parent_col: int, more: Callable[[], list[str]]
) -> tuple[str, int]:
    """A `|` or `|-` block scalar whose lines start at lines[i]; `lines` grows by
    the next chunk (more()) when the block reaches its end."""
    if header == "|":
        keep_last = True
    elif header == "|-":
        keep_last = False
    else:
        raise _Other  # folded, kept, indentation indicator, comment
    out: list[str] = []
    indent = -1
    j = i
    last = -1  # the block's last line with content
    while True:
        if j == len(lines):
            try:
                lines.extend(more())
            except StopIteration:
                break
            continue
        ln = lines[j]
        if ln:
            body = ln.lstrip(" ")
            if not body:
                raise _Other  # a line of spaces only
            col = len(ln) - len(body)
            if indent == -1:
                if j != i or col <= parent_col:
                    raise _Other  # leading blank lines, an empty block: libyaml decides
                indent = col
            elif col < indent:
                break
            last = j
        elif indent == -1:
            raise _Other
        out.append(ln[indent:])
        j += 1
    if indent == -1 or (j == len(lines) and last == j - 1):
        raise _Other  # an empty block; no line break after the last line
    del out[last + 1 - i :]
    text = "\n".join(out)
    return (text + "\n" if keep_last else text), j
