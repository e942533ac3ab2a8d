"""What a CEL selector can cost, from its syntax tree: the bound that keeps one
claim from holding the scheduling loop.

kube's allocator compiles a selector with cel-go, which estimates its worst
cost from the checked expression and the declared sizes of `device` (the API
server refuses an expression over `CELSelectorExpressionMaxCost`, 1 000 000),
and evaluates it with that limit as a runtime cost limit. The interpreter we
use (common-expression-language) exposes neither a syntax tree nor a cost, and
cannot stop an evaluation; so the bound is computed here, before any
evaluation, over a syntax tree of the expression:

- lark's LALR parser reads it with CEL's grammar (CEL.g4, written below for
  lark): quoted, raw, triple-quoted and byte strings with their escapes, `//`
  comments, numbers, identifiers; text inside a string or a comment is never
  read as code. The tree is made as lark reduces, without recursion, so no
  nesting exhausts the stack (the interpreter refuses groups nested past 96
  itself). Why lark, measured on the tests' selectors: 0.2 ms a parse (once
  per distinct expression), 0.2 s to import and build its tables on first
  use, 1 MB and no dependencies; cel-python's parser took 0.4 ms, 0.8 s and
  10 MB of dependencies and misread raw strings; this module's own lexer and
  Pratt parser (330 lines) took 0.04 ms;
- the estimate walks the tree with the size of every value: literals give
  theirs, `device` gives kube's declared maxima (32 domains of 32 attributes,
  values of at most 64 characters, domains of 63), comprehensions (`all`,
  `exists`, `exists_one`, `map`, `filter`) multiply their body's cost by the
  size of their range, functions that build strings or lists (`+`,
  `replace`, `split`, `join`, `map`) give results as large as they can be,
  and `matches` costs what compiling its pattern does (the interpreter
  compiles it at every call): its counted repetitions expanded.

The tree must name the same variables and functions the interpreter's own
parser reports for the expression; if they differ (the grammar here read
something another way), the expression is refused as one whose cost cannot be
known, never evaluated unbounded.

The same tree gives the interpreter a version of the expression in which
looking up a domain of `device.attributes` or `device.capacity` that the
device lacks gives an empty map, as in kube (`(K in M ? M[K] : {})`), without
changing what `in`, `size()` or iterating over those maps see.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Final, cast

if TYPE_CHECKING:
    from lark import Lark

# kube's declared sizes of what `device` holds (resource.k8s.io/v1).
DOMAIN_MAX: Final = 63  # DeviceMaxDomainLength
ID_MAX: Final = 32  # DeviceMaxIDLength
DRIVER_MAX: Final = 63  # DriverNameMaxLength
PER_DEVICE_MAX: Final = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
VALUE_MAX: Final = 64  # DeviceAttributeMaxValueLength
# How deeply a domain lookup may be nested in another's key (`with_empty_domains`).
LOOKUPS_NESTED_MAX: Final = 4
# Our functions are Python: each call converts its arguments, a few microseconds.
PYTHON_CALL: Final = 20
# What compiling a regular expression costs (`matches` compiles its pattern at
# every call) per state of the expanded pattern (measured: `(a{1000}){100}`
# takes 55 ms, about as long as 400 000 units of comprehension steps), and
# for a pattern not written in the expression (it may expand up to the
# regex engine's size limit).
REGEX_UNIT: Final = 4
REGEX_UNKNOWN: Final = 100_000
MACROS: Final = frozenset({"all", "exists", "exists_one", "map", "filter"})


class CostError(Exception):
    """The expression could not be analysed (the text says why)."""


# ---- syntax tree -------------------------------------------------------------------


@dataclass(slots=True)
class Node:
    start: int
    end: int


@dataclass(slots=True)
class Lit(Node):
    kind: str  # "str", "bytes", "num", "bool", "null"
    size: int = 1
    value: str | None = None  # a plain string literal's text (no escapes, not raw)
    # A string literal as written, unless an escape in it may stand for any
    # character (\x, \u, \U, octal): what its regular expression holds.
    text: str | None = None


@dataclass(slots=True)
class Ident(Node):
    name: str


@dataclass(slots=True)
class Select(Node):
    operand: Node
    name: str
    test_only: bool = False  # has(operand.name)


@dataclass(slots=True)
class Index(Node):
    operand: Node
    key: Node


@dataclass(slots=True)
class Call(Node):
    name: str
    target: Node | None
    args: list[Node]


@dataclass(slots=True)
class Comprehension(Node):
    macro: str
    range: Node
    var: str
    args: list[Node]  # the predicate or the transform (map of three: both)


@dataclass(slots=True)
class ListLit(Node):
    items: list[Node]


@dataclass(slots=True)
class MapLit(Node):
    keys: list[Node]
    values: list[Node]
    message: bool = False  # Type{field: value}: the keys are field names


@dataclass(slots=True)
class Unary(Node):
    op: str
    operand: Node


@dataclass(slots=True)
class Binary(Node):
    op: str
    left: Node
    right: Node


@dataclass(slots=True)
class Cond(Node):
    cond: Node
    then: Node
    other: Node


def children(n: Node) -> list[Node]:
    if isinstance(n, (Select, Unary)):
        return [n.operand]
    if isinstance(n, Index):
        return [n.operand, n.key]
    if isinstance(n, Call):
        return ([n.target] if n.target is not None else []) + n.args
    if isinstance(n, Comprehension):
        return [n.range, *n.args]
    if isinstance(n, ListLit):
        return n.items
    if isinstance(n, MapLit):
        return n.values if n.message else n.keys + n.values
    if isinstance(n, Binary):
        return [n.left, n.right]
    if isinstance(n, Cond):
        return [n.cond, n.then, n.other]
    return []


def walk(root: Node) -> Iterator[Node]:
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(children(n))


# ---- parsing -----------------------------------------------------------------------


_ESCAPE: Final = (
    r"""\\(?:[abfnrtv"'\\?`]|[xX][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-3][0-7]{2})"""
)
# CEL.g4 (cel-spec) for lark's LALR parser: one rule per precedence level,
# member accesses and calls left-recursive. Where the interpreter is stricter
# (`-!x`, `f(){a: 1}`) it refuses the text itself, so reading more here
# changes nothing. Only strings that are not raw have escapes, and one CEL
# does not have matches nothing (the interpreter refuses it too); a backslash
# comes last in a character class (lark reads `\\"` in a pattern as an
# escaped quote).
_GRAMMAR: Final = r"""
?start: expr
?expr: disj | disj "?" disj ":" expr -> cond
?disj: conj | disj "||" conj -> binary
?conj: rel | conj "&&" rel -> binary
?rel: calc | rel ("<" | "<=" | ">=" | ">" | "==" | "!=" | "in") calc -> binary
?calc: mul | calc ("+" | "-") mul -> binary
?mul: unary | mul ("*" | "/" | "%") unary -> binary
?unary: member | ("!" | "-")+ member -> unary
?member: primary
    | member "." IDENT -> select
    | member "." IDENT "(" (expr ("," expr)*)? ")" -> call
    | member "[" expr "]" -> index
    | member "{" (_field ("," _field)* ","?)? "}" -> message
?primary: "."? IDENT -> ident
    | "."? IDENT "(" (expr ("," expr)*)? ")" -> call
    | "(" expr ")" -> paren
    | "[" (expr ("," expr)* ","?)? "]" -> list_
    | "{" (_entry ("," _entry)* ","?)? "}" -> map_
    | STRING -> string
    | NUM -> num
    | ("true" | "false" | "null") -> keyword
_field: IDENT ":" expr
_entry: expr ":" expr

IDENT: /[A-Za-z_][A-Za-z0-9_]*/
NUM: /0[xX][0-9a-fA-F]+[uU]?|\d+\.\d+([eE][+-]?\d+)?|\d+[eE][+-]?\d+|\.\d+([eE][+-]?\d+)?|\d+[uU]?/
STRING.2: /[bB]?("{3}(<ESC>|[^\\])*?"{3}|'{3}(<ESC>|[^\\])*?'{3})/
    | /[bB]?("(<ESC>|[^"\n\r\\])*"|'(<ESC>|[^'\n\r\\])*')/
    | /[bB]?[rR]("{3}[\s\S]*?"{3}|'{3}[\s\S]*?'{3}|"[^"\n\r]*"|'[^'\n\r]*')/
%ignore /[\t\n\r\f ]+/
%ignore /\/\/[^\n]*/
""".replace("<ESC>", _ESCAPE)


def _span(c: list[Any]) -> tuple[int, int]:
    """Where a rule's children (nodes and lark's tokens) start and end."""
    first, last = c[0], c[-1]
    start = first.start if isinstance(first, Node) else first.start_pos
    end = last.end if isinstance(last, Node) else last.end_pos
    return start, end


def _nodes(c: list[Any]) -> list[Node]:
    return [x for x in c if isinstance(x, Node)]


class _Build:
    """Makes the tree as lark reduces each rule (named by its alias; the
    children are all tokens and the nodes already made): no parse tree is
    built, and nothing recurses however deep the expression nests."""

    def cond(self, c: list[Any]) -> Node:
        return Cond(*_span(c), *_nodes(c))

    def binary(self, c: list[Any]) -> Node:
        return Binary(*_span(c), str(c[1]), c[0], c[2])

    def unary(self, c: list[Any]) -> Node:
        node: Node = c[-1]
        for op in reversed(c[:-1]):
            node = Unary(op.start_pos, node.end, str(op), node)
        return node

    def select(self, c: list[Any]) -> Node:
        return Select(*_span(c), c[0], str(c[2]))

    def index(self, c: list[Any]) -> Node:
        return Index(*_span(c), c[0], c[2])

    def call(self, c: list[Any]) -> Node:
        start, end = _span(c)
        target = c[0] if isinstance(c[0], Node) else None
        if target is not None:
            name, args = str(c[2]), _nodes(c[1:])
        else:
            name, args = "".join(c[:2]) if c[0] == "." else str(c[0]), _nodes(c)
        if target is None and name == "has" and len(args) == 1 and isinstance(args[0], Select):
            s = args[0]
            return Select(start, end, s.operand, s.name, test_only=True)
        if (
            target is not None
            and name in MACROS
            and args
            and isinstance(args[0], Ident)
            and (len(args) == 2 or (name == "map" and len(args) == 3))
        ):
            return Comprehension(start, end, name, target, args[0].name, args[1:])
        return Call(start, end, name, target, args)

    def message(self, c: list[Any]) -> Node:
        """Type{field: value}: the keys are field names (CEL.g4 has a dotted
        name before the brace; the interpreter refuses any other)."""
        names = [t for t in c[1:] if not isinstance(t, Node) and t.type == "IDENT"]
        keys: list[Node] = [Lit(t.start_pos, t.end_pos, "str", len(t), str(t)) for t in names]
        return MapLit(*_span(c), keys, _nodes(c[1:]), message=True)

    def ident(self, c: list[Any]) -> Node:
        return Ident(*_span(c), "".join(c))

    def paren(self, c: list[Any]) -> Node:
        inner: Node = c[1]
        inner.start, inner.end = _span(c)
        return inner

    def list_(self, c: list[Any]) -> Node:
        return ListLit(*_span(c), _nodes(c))

    def map_(self, c: list[Any]) -> Node:
        nodes = _nodes(c)
        return MapLit(*_span(c), nodes[0::2], nodes[1::2])

    def string(self, c: list[Any]) -> Node:
        text = str(c[0])
        body = text.lstrip("bBrR")
        triple = body[:3] in ('"""', "'''") and len(body) >= 6
        kind = "bytes" if text[0] in "bB" else "str"
        # Escapes only shorten what the quotes hold.
        size = len(body) - (6 if triple else 2)
        plain = kind == "str" and text[0] in "\"'" and "\\" not in text and not triple
        raw = text[0] in "rR"
        written = text if kind == "str" and (raw or not _ANY_CHAR_ESCAPE.search(text)) else None
        return Lit(*_span(c), kind, size, text[1:-1] if plain else None, written)

    def num(self, c: list[Any]) -> Node:
        return Lit(*_span(c), "num")

    def keyword(self, c: list[Any]) -> Node:
        return Lit(*_span(c), "null" if c[0] == "null" else "bool")


@cache
def _parser() -> Lark:
    """Made on first use (lark's import and the LALR tables take about 0.2 s),
    so that clusters without DRA selectors never pay for it."""
    from lark import Lark

    return Lark(
        _GRAMMAR,
        parser="lalr",
        keep_all_tokens=True,
        maybe_placeholders=False,
        transformer=_Build(),
    )


def parse(text: str) -> Node:
    """The syntax tree of a CEL expression; CostError if it is no CEL."""
    from lark.exceptions import UnexpectedInput, UnexpectedToken

    try:
        return cast(Node, _parser().parse(text))
    except UnexpectedInput as e:
        end = isinstance(e, UnexpectedToken) and e.token.type == "$END"
        at = len(text) if end or e.pos_in_stream is None else e.pos_in_stream
        raise CostError(f"unexpected {text[at : at + 1] or 'end'!r} at {at}") from None


def references(root: Node) -> tuple[frozenset[str], frozenset[str]]:
    """The variables and the named functions (not operators or macros) the
    expression uses, as the interpreter's `Program.references()` reports them."""
    variables: set[str] = set()
    functions: set[str] = set()
    for n in walk(root):
        if isinstance(n, Ident):
            variables.add(n.name)
        elif isinstance(n, Call):
            functions.add(n.name)
        elif isinstance(n, Comprehension) and n.macro == "filter":
            variables.add(n.var)  # the interpreter's expansion names it
    return frozenset(variables), frozenset(functions)


# ---- sizes and costs ---------------------------------------------------------------


# Sizes and costs past this are all "too much": capping them keeps the numbers
# small (the limit is 10**6).
CAP: Final = 10**15


@dataclass(frozen=True, slots=True, eq=False)
class Size:
    """The largest a value can be: `n` characters (strings, bytes), elements
    (lists) or entries (maps), 1 for scalars; `item` what iterating over it
    gives (list elements, map keys), `value` what indexing gives; `fields`
    the fields of an object (`device`); `total` how many characters and
    scalars it holds in all (what copying or comparing it walks).

    Sizes share parts (a comprehension's result holds its range's), so they
    are compared by identity and their totals computed once, when made:
    walking them as trees could take exponential time."""

    n: int = 1
    item: Size | None = None
    value: Size | None = None
    fields: tuple[tuple[str, Size], ...] = ()
    total: int = 0

    def __post_init__(self) -> None:
        n = min(self.n, CAP)
        if self.fields:
            total = sum(v.total for _, v in self.fields)
        elif self.item is None and self.value is None:
            total = n
        else:
            inner = _total(self.value) + (_total(self.item) if self.item is not self.value else 0)
            total = n * inner
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "total", min(total, CAP))


SCALAR: Final = Size()


def _merge(
    a: Size | None, b: Size | None, seen: dict[tuple[int, int], Size] | None = None
) -> Size | None:
    """The larger of two sizes, part by part."""
    if a is None or b is None:
        return a if b is None else b
    if a is b:
        return a
    seen = {} if seen is None else seen
    key = (id(a), id(b))
    got = seen.get(key)
    if got is None:
        fields = dict(a.fields)
        for k, v in b.fields:
            fields[k] = _merge(fields.get(k), v, seen) or v
        got = Size(
            max(a.n, b.n),
            _merge(a.item, b.item, seen),
            _merge(a.value, b.value, seen),
            tuple(sorted(fields.items())),
        )
        seen[key] = got
    return got


def _total(s: Size | None) -> int:
    return 1 if s is None else s.total


@dataclass(frozen=True, slots=True)
class DeviceBounds:
    """The most a device holds: kube's declared maxima, or more for a device
    published past them (the API server refuses such a slice; a test or a
    lenient server may not)."""

    domains: int = PER_DEVICE_MAX
    per_domain: int = PER_DEVICE_MAX
    name: int = max(DOMAIN_MAX, ID_MAX)  # a domain's or an attribute's name
    value: int = VALUE_MAX
    driver: int = DRIVER_MAX

    def within(self, kube: DeviceBounds) -> bool:
        return (
            self.domains <= kube.domains
            and self.per_domain <= kube.per_domain
            and self.name <= kube.name
            and self.value <= kube.value
            and self.driver <= kube.driver
        )


KUBE_BOUNDS: Final = DeviceBounds()


def device_size(b: DeviceBounds = KUBE_BOUNDS) -> Size:
    """The size of `device` for a device within the bounds."""
    # A version is a map of one tagged string, a quantity too: as long as a
    # string of their text and the tag.
    attribute = Size(b.value + len("__semver__"))
    quantity = Size(b.value + len("__quantity__"))
    attrs = Size(b.domains, Size(b.name), Size(b.per_domain, Size(b.name), attribute))
    caps = Size(b.domains, Size(b.name), Size(b.per_domain, Size(b.name), quantity))
    return Size(
        4,
        Size(len("allowMultipleAllocations")),
        fields=(
            ("allowMultipleAllocations", SCALAR),
            ("attributes", attrs),
            ("capacity", caps),
            ("driver", Size(b.driver)),
        ),
    )


DEVICE: Final = device_size()
# Our functions are Python: a call converts its arguments (microseconds).
_PYTHON: Final = frozenset(
    {
        "quantity",
        "isQuantity",
        "semver",
        "isSemver",
        "compareTo",
        "isLessThan",
        "isGreaterThan",
        "asInteger",
        "asApproximateFloat",
        "isInteger",
        "sign",
        "add",
        "sub",
        "major",
        "minor",
        "patch",
        "lowerAscii",
        "upperAscii",
        "trim",
        "replace",
        "split",
        "join",
        "indexOf",
        "lastIndexOf",
        "substring",
        "charAt",
    }
)


def _walk_cost(*sizes: Size | None) -> int:
    """What walking values costs: a tenth of a unit per character or element,
    as kube charges string functions."""
    return 1 + sum(_total(s) for s in sizes) // 10


def _result(name: str, args: Sequence[Size]) -> Size:
    """The size of what a function gives."""
    first = args[0] if args else SCALAR
    if name in ("lowerAscii", "upperAscii", "trim", "substring"):
        return Size(first.n)
    if name == "string":
        return Size(max(first.n, 32))
    if name == "bytes":
        return Size(4 * first.n)
    if name == "replace" and len(args) >= 3:
        return Size(first.n + (first.n + 1) * args[2].n)
    if name == "split":
        return Size(first.n + 1, Size(first.n), Size(first.n))
    if name == "join":
        sep = args[1].n if len(args) > 1 else 0
        return Size(first.n * ((first.value or SCALAR).n + sep))
    if name in ("quantity", "semver", "add", "sub"):
        return Size(1, Size(12), Size(sum(a.n for a in args) + 2))
    if name == "dyn":
        return first
    return SCALAR


def _field(s: Size, key: Node | None) -> Size:
    """What selecting a field or indexing with `key` gives."""
    if s.fields:
        name = key.value if isinstance(key, Lit) else None
        got: Size | None = None
        for k, v in s.fields:
            if name is None or k == name:
                got = _merge(got, v)
        return got or SCALAR
    return s.value or SCALAR


class _Estimator:
    """Post-order over the tree with an explicit stack (long chains of
    operators nest the tree deeply)."""

    def __init__(self, device: Size) -> None:
        self.device = device
        self.done: dict[int, tuple[int, Size]] = {}
        self.scopes: list[dict[str, Size]] = []

    def run(self, root: Node) -> tuple[int, Size]:
        stack: list[tuple[int, Node]] = [(0, root)]
        while stack:
            step, n = stack.pop()
            if step == 0:  # enter: children first
                stack.append((1, n))
                if isinstance(n, Comprehension):
                    stack.append((3, n))  # pop the scope
                    stack.extend((0, a) for a in reversed(n.args))
                    stack.append((2, n))  # push the scope, the range known
                    stack.append((0, n.range))
                else:
                    stack.extend((0, c) for c in reversed(children(n)))
            elif step == 2:
                assert isinstance(n, Comprehension)
                _, sr = self.done[id(n.range)]
                self.scopes.append({n.var: sr.item or SCALAR})
            elif step == 3:
                self.scopes.pop()
            else:
                cost, size = self.node(n)
                self.done[id(n)] = (min(cost, CAP), size)
        return self.done[id(root)]

    def of(self, n: Node) -> tuple[int, Size]:
        return self.done[id(n)]

    def lookup(self, name: str) -> Size:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return self.device if name == "device" else SCALAR

    def node(self, n: Node) -> tuple[int, Size]:
        if isinstance(n, Lit):
            return 1, Size(n.size) if n.kind in ("str", "bytes") else SCALAR
        if isinstance(n, Ident):
            return 1, self.lookup(n.name)
        if isinstance(n, Select):
            c, s = self.of(n.operand)
            if n.test_only:
                return c + 1, SCALAR
            return c + 1, _field(s, Lit(n.start, n.end, "str", len(n.name), n.name))
        if isinstance(n, Index):
            c, s = self.of(n.operand)
            ck, sk = self.of(n.key)
            # a lookup of a domain is evaluated as `K in M ? M[K] : {}`
            return 2 * (c + ck) + 2 + _walk_cost(sk), _field(s, n.key)
        if isinstance(n, Unary):
            return self.of(n.operand)[0] + 1, SCALAR
        if isinstance(n, Binary):
            return self.binary(n)
        if isinstance(n, Cond):
            cc, _ = self.of(n.cond)
            ct, st = self.of(n.then)
            co, so = self.of(n.other)
            return cc + max(ct, co) + 1, _merge(st, so) or SCALAR
        if isinstance(n, ListLit):
            cost, item = 1, None
            for x in n.items:
                c, s = self.of(x)
                cost += c
                item = _merge(item, s)
            return cost, Size(len(n.items), item or SCALAR, item or SCALAR)
        if isinstance(n, MapLit):
            cost, key, value = 1, None, None
            for k, v in zip(n.keys, n.values, strict=True):
                ck, sk = self.of(k) if not n.message else (0, SCALAR)
                cv, sv = self.of(v)
                cost += ck + cv + 1
                key, value = _merge(key, sk), _merge(value, sv)
            return cost, Size(len(n.keys), key or SCALAR, value or SCALAR)
        if isinstance(n, Comprehension):
            return self.comprehension(n)
        if isinstance(n, Call):
            return self.call(n)
        raise CostError(f"no estimate for {type(n).__name__}")

    def binary(self, n: Binary) -> tuple[int, Size]:
        cl, sl = self.of(n.left)
        cr, sr = self.of(n.right)
        cost = cl + cr + 1
        if n.op == "+":
            if sl is SCALAR and sr is SCALAR:
                return cost, SCALAR
            item = _merge(sl.item, sr.item)
            value = _merge(sl.value, sr.value)
            out = Size(sl.n + sr.n, item, value)
            return cost + _walk_cost(out), out
        if n.op in ("==", "!=", "<", "<=", ">", ">="):
            return cost + _walk_cost(sl, sr), SCALAR
        if n.op == "in":
            return cost + sr.n * _walk_cost(sl, sr.item), SCALAR
        return cost, SCALAR

    def comprehension(self, n: Comprehension) -> tuple[int, Size]:
        cr, sr = self.of(n.range)
        var = sr.item or SCALAR
        parts = [self.of(a) for a in n.args]
        step = sum(c for c, _ in parts) + 2
        cost = cr + sr.n * step + 1
        if n.macro == "map":
            body = parts[-1][1]
            out = Size(sr.n, body, body)
            return cost + _total(out), out
        if n.macro == "filter":
            out = Size(sr.n, var, var)
            return cost + _total(out), out
        return cost, SCALAR

    def call(self, n: Call) -> tuple[int, Size]:
        nodes = ([n.target] if n.target is not None else []) + n.args
        cost = sum(self.of(a)[0] for a in nodes)
        sizes = [self.of(a)[1] for a in nodes]
        out = _result(n.name, sizes)
        cost += _walk_cost(*sizes, out) + (PYTHON_CALL if n.name in _PYTHON else 0)
        if n.name == "matches" and len(sizes) == 2:
            # The interpreter compiles the pattern at every call: what that
            # costs is the pattern with its counted repetitions expanded.
            pattern = n.args[-1]
            weight = (
                regex_weight(pattern.text)
                if isinstance(pattern, Lit) and pattern.text is not None
                else REGEX_UNKNOWN
            )
            cost += REGEX_UNIT * weight + sizes[0].n
        return cost, out


_ANY_CHAR_ESCAPE: Final = re.compile(r"\\(?:[xXuU]|[0-3])")
_COUNTED: Final = re.compile(r"\{(\d+)(?:,(\d*))?\}")


def regex_weight(pattern: str) -> int:
    """How many states a pattern (as written in a string literal, escapes
    included: an upper bound) has once its counted repetitions (`x{n}`,
    `x{n,m}`) are expanded, groups nested."""
    groups: list[list[int]] = [[]]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        m = _COUNTED.match(pattern, i) if c == "{" else None
        if m is not None:
            digits = m.group(2) or m.group(1)
            count = int(digits) if len(digits) <= 9 else CAP  # int() refuses 4300 digits
            items = groups[-1]
            last = items.pop() if items else 1
            items.append(last * max(count, 1))
            i = m.end()
        elif c == "(":
            groups.append([])
            i += 1
        elif c == ")" and len(groups) > 1:
            inner = groups.pop()
            groups[-1].append(max(sum(inner), 1))
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 2)
            groups[-1].append(1)
            i = n if j < 0 else j + 1
        else:
            groups[-1].append(1)
            i += 2 if c == "\\" else 1
    while len(groups) > 1:
        inner = groups.pop()
        groups[-1].append(max(sum(inner), 1))
    return max(sum(groups[0]), 1)


def estimate(root: Node, bounds: DeviceBounds = KUBE_BOUNDS) -> int:
    """The most evaluating the expression on one device within `bounds` can
    cost, in steps of the interpreter (kube's cost units, roughly)."""
    device = DEVICE if bounds is KUBE_BOUNDS else device_size(bounds)
    try:
        return _Estimator(device).run(root)[0]
    except RecursionError:
        raise CostError("expression nested too deeply") from None


# ---- missing domains read as empty maps ----------------------------------------------


def _is_domain_map(n: Node) -> bool:
    """`device.attributes` or `device.capacity` (the maps of domains)."""
    return (
        isinstance(n, Select)
        and not n.test_only
        and n.name in ("attributes", "capacity")
        and isinstance(n.operand, Ident)
        and n.operand.name == "device"
    )


def with_empty_domains(text: str, root: Node) -> str:
    """The expression with each `device.attributes[K]` and `device.capacity[K]`
    written as `((K) in M ? M[K] : {})`, so that a domain the device lacks
    reads as an empty map while `in`, `size()` and iterating over the maps
    see only the device's domains (kube's allocator: a map whose lookup of an
    unknown key gives an empty map); the text itself when it looks up no
    domain."""
    sites = sorted(
        (n for n in walk(root) if isinstance(n, Index) and _is_domain_map(n.operand)),
        key=lambda n: n.start,
    )
    if not sites:
        return text

    def render(start: int, end: int, inner: list[Index], depth: int) -> str:
        if depth > LOOKUPS_NESTED_MAX:
            # each level writes its key twice: the text would double per level
            raise CostError("domain lookups nested too deeply in their keys")
        out: list[str] = []
        pos, i = start, 0
        while i < len(inner):
            site = inner[i]
            nested = [s for s in inner[i + 1 :] if s.start < site.end]
            base = text[site.operand.start : site.operand.end]
            key = render(site.key.start, site.key.end, nested, depth + 1)
            out.append(text[pos : site.start])
            out.append(f"(({key}) in {base} ? {base}[{key}] : {{}})")
            pos = site.end
            i += 1 + len(nested)
        out.append(text[pos:end])
        return "".join(out)

    return render(0, len(text), sites, 0)
