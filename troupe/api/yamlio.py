"""YAML reading with bounds: nesting depth and nodes reached through aliases
are limited (an "alias bomb" expands to billions of nodes), and a fast path
for the large dumps `troupe simulate` reads (libyaml's parser events turned
into Python objects without PyYAML's per-node constructor calls). The
configuration file is read with `BoundedLoader` too."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import yaml

MAX_YAML_DEPTH: Final = 200
# libyaml's own message when nesting passes its limit (0.2.6 and later).
LIBYAML_NESTING: Final = "exceeded maximum nesting depth"
MAX_YAML_ALIAS_NODES: Final = 100_000


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader with bounded nesting and bounded alias expansion: past either
    bound it raises a `yaml.composer.ComposerError` naming the line."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0  # nodes composed, counting each alias as its anchor's size
        self._alias_nodes = 0
        self._anchor_size: dict[str, int] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        mark: Any = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            size = self._anchor_size.get(str(event.anchor), 1)
            self._alias_nodes += size
            self._nodes += size
            if self._alias_nodes > MAX_YAML_ALIAS_NODES:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"aliases expand to more than {MAX_YAML_ALIAS_NODES} nodes",
                    mark,
                )
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested more than {MAX_YAML_DEPTH} levels deep", mark
            )
        start = self._nodes
        self._nodes += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._anchor_size[str(anchor)] = self._nodes - start
        return node


# The fast path: libyaml's parser (when PyYAML was built with it) emits events,
# and one loop builds the Python objects from them. Composing with libyaml is not
# safe on hostile input (its composer recurses in C: a few thousand "[" crash the
# process) and costs more than the parse; building from events bounds nesting and
# alias expansion in the same loop, at the same bounds as BoundedLoader, with the
# pure-Python parser too when libyaml is missing.
FAST_PARSER: Final[type] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SCALARS: Final[dict[Any, Any]] = yaml.constructor.SafeConstructor.yaml_constructors
_MERGE_TAG: Final = "tag:yaml.org,2002:merge"
_VALUE_TAG: Final = "tag:yaml.org,2002:value"
_PLAIN_COLLECTION_TAGS: Final = (
    None,
    "!",
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG,
)
_NO_KEY: Final = object()


class _Unusual(Exception):
    """Input outside what the event loop builds itself (merge keys, a collection as
    a key, a tagged collection): the bounded loader takes the whole file."""


def _bounds_error(problem: str, mark: Any) -> yaml.composer.ComposerError:
    return yaml.composer.ComposerError(None, None, problem, mark)


_IMPLICIT: Final = yaml.resolver.Resolver.yaml_implicit_resolvers
_STR_TAG: Final = "tag:yaml.org,2002:str"
_NULL_TAG: Final = "tag:yaml.org,2002:null"
_BOOL_TAG: Final = "tag:yaml.org,2002:bool"


def resolve_plain(text: str) -> tuple[Any, str | None]:
    """A plain scalar as SafeLoader resolves it (PyYAML's own implicit resolvers):
    (its value, None) for a string, null or a boolean; (None, its tag) for the
    caller to construct otherwise."""
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


def _scalar(ctor: yaml.constructor.SafeConstructor, ev: Any) -> Any:
    """The value SafeLoader would construct for one scalar event."""
    value: str = ev.value
    tag = ev.tag
    if tag is None or tag == "!":
        if not ev.implicit[0]:
            return value  # quoted: a string
        plain, tag = resolve_plain(value)
        if tag is None:
            return plain
        if tag in (_MERGE_TAG, _VALUE_TAG):
            raise _Unusual  # `<<` merges, `=` is a string as a key only: SafeLoader's
    node = yaml.ScalarNode(tag, value, ev.start_mark, ev.end_mark, ev.style)
    construct = _SCALARS.get(tag, _SCALARS[None])  # None: "could not determine a constructor"
    try:
        return construct(ctor, node)
    except yaml.YAMLError:
        raise
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as e:
        # PyYAML's constructors assume text their tag resolves to: an explicit tag on
        # other text (`!!int` on nothing, `!!float abc`) fails in Python, not in YAML.
        shown = value if len(value) <= 40 else value[:37] + "..."
        why = str(e) if isinstance(e, ValueError | OverflowError) and str(e) else type(e).__name__
        raise yaml.constructor.ConstructorError(
            None, None, f"cannot read {shown!r} as {tag} ({why})", ev.start_mark
        ) from None


def load_yaml_documents(text: str) -> list[Any]:
    """Every document of a YAML stream, as SafeLoader builds them, in bounded time
    and memory: nesting past MAX_YAML_DEPTH and aliases expanding past
    MAX_YAML_ALIAS_NODES raise a `yaml.composer.ComposerError` naming the line,
    as BoundedLoader does. Uses libyaml's parser when PyYAML has it."""
    try:
        try:
            return _build(text)
        except _Unusual:
            pass
        # Rare input (merge keys...): check the bounds on events, then let the
        # bounded pure-Python loader build it.
        for _ in yaml.parse(text, Loader=FAST_PARSER):
            pass
        return list(yaml.load_all(text, Loader=BoundedLoader))
    except yaml.scanner.ScannerError as e:
        # libyaml 0.2.6 and later refuse nesting past their own limit (1000 levels)
        # while scanning ahead of the events our bound counts; past theirs is past
        # ours, so the user reads our message whatever libyaml the machine has.
        if e.problem != LIBYAML_NESTING:
            raise
        raise _bounds_error(
            f"nested more than {MAX_YAML_DEPTH} levels deep", e.problem_mark
        ) from None


def _build(text: str) -> list[Any]:
    """load_yaml_documents without the fallback. One loop with its state in
    locals, on purpose: it runs once per libyaml event, millions of times for a
    large cluster (about three times faster than libyaml's own composer and
    SafeConstructor, and bounded where libyaml's composer recurses in C)."""
    ctor = yaml.constructor.SafeConstructor()
    docs: list[Any] = []
    # The open collection is (cur, is_list, key: the pending key of a mapping);
    # `stack` keeps the enclosing ones with the node count at their start and anchor.
    cur: Any = docs
    is_list = True
    key: Any = _NO_KEY
    stack: list[tuple[Any, bool, Any, int, str | None]] = []
    depth = 0
    anchors: dict[str, Any] = {}
    # Plain scalars resolve and construct to immutable values (str, int, bool,
    # None, float, datetime...): each text once, then a lookup.
    plain: dict[str, Any] = {}
    anchor_size: dict[str, int] = {}
    nodes = 0  # nodes composed, each alias counting as its anchor's size
    alias_nodes = 0
    scalar_event, alias_event = yaml.ScalarEvent, yaml.AliasEvent
    mapping_start, sequence_start = yaml.MappingStartEvent, yaml.SequenceStartEvent
    mapping_end, sequence_end = yaml.MappingEndEvent, yaml.SequenceEndEvent
    events: Iterable[Any] = yaml.parse(text, Loader=FAST_PARSER)
    for ev in events:
        cls = ev.__class__
        if cls is scalar_event:
            if depth >= MAX_YAML_DEPTH:
                raise _bounds_error(f"nested more than {MAX_YAML_DEPTH} levels deep", ev.start_mark)
            nodes += 1
            if ev.tag is None and ev.implicit[0]:  # plain: keys, most values
                value = plain.get(ev.value, _NO_KEY)
                if value is _NO_KEY:
                    value = plain[ev.value] = _scalar(ctor, ev)
            else:
                value = _scalar(ctor, ev)
            if ev.anchor is not None:
                if ev.anchor in anchors:
                    raise _Unusual  # SafeLoader names both occurrences
                anchors[ev.anchor] = value
                anchor_size[ev.anchor] = 1
        elif cls is mapping_start or cls is sequence_start:
            if depth >= MAX_YAML_DEPTH:
                raise _bounds_error(f"nested more than {MAX_YAML_DEPTH} levels deep", ev.start_mark)
            if ev.tag not in _PLAIN_COLLECTION_TAGS:
                raise _Unusual
            if not is_list and key is _NO_KEY:
                raise _Unusual  # a collection as a key: SafeLoader refuses it in its words
            value = {} if cls is mapping_start else []
            if ev.anchor is not None:
                if ev.anchor in anchors:
                    raise _Unusual
                anchors[ev.anchor] = value
            stack.append((cur, is_list, key, nodes, ev.anchor))
            nodes += 1
            depth += 1
            cur, is_list, key = value, cls is sequence_start, _NO_KEY
            continue
        elif cls is mapping_end or cls is sequence_end:
            value = cur
            cur, is_list, key, start, anchor = stack.pop()
            depth -= 1
            if anchor is not None:
                anchor_size[anchor] = nodes - start
        elif cls is alias_event:
            if ev.anchor not in anchors:
                raise yaml.composer.ComposerError(
                    None, None, f"found undefined alias {ev.anchor!r}", ev.start_mark
                )
            size = anchor_size.get(ev.anchor, 1)
            alias_nodes += size
            nodes += size
            if alias_nodes > MAX_YAML_ALIAS_NODES:
                raise _bounds_error(
                    f"aliases expand to more than {MAX_YAML_ALIAS_NODES} nodes", ev.start_mark
                )
            value = anchors[ev.anchor]
            if not is_list and key is _NO_KEY and value.__class__ in (dict, list):
                raise _Unusual
        elif cls is yaml.DocumentStartEvent:
            anchors = {}
            continue
        else:
            continue
        if is_list:
            cur.append(value)
        elif key is _NO_KEY:
            key = value
        else:
            cur[key] = value
            key = _NO_KEY
    return docs
