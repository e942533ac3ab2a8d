"""What a CEL selector can cost, from its syntax tree: the bound that keeps one
claim from holding the scheduling loop.

kube's allocator compiles a selector with cel-go, which estimates its worst
cost from the checked expression and the declared sizes of `device` (the API
server refuses an expression over `CELSelectorExpressionMaxCost`, 1 000 000),
and evaluates it with that limit as a runtime cost limit. The interpreter we
use (common-expression-language) exposes neither a syntax tree nor a cost, and
cannot stop an evaluation; so the bound is computed here, before any
evaluation, over a syntax tree this module parses itself:

- the lexer follows CEL's grammar (CEL.g4): quoted, raw, triple-quoted and
  byte strings with their escapes, `//` comments, numbers, identifiers; text
  inside a string or a comment is never read as code;
- a Pratt parser builds the tree (deep nesting is refused rather than
  recursed into: the interpreter refuses it too);
- the estimate walks the tree with the size of every value: literals give
  theirs, `device` gives kube's declared maxima (32 domains of 32 attributes,
  values of at most 64 characters, domains of 63), comprehensions (`all`,
  `exists`, `exists_one`, `map`, `filter`) multiply their body's cost by the
  size of their range, functions that build strings or lists (`+`,
  `replace`, `split`, `join`, `map`) give results as large as they can be,
  and `matches` costs what compiling its pattern does (the interpreter
  compiles it at every call): its counted repetitions expanded.

The tree must name the same variables and functions the interpreter's own
parser reports for the expression; if they differ (this parser read
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
from typing import Final

# kube's declared sizes of what `device` holds (resource.k8s.io/v1).
DOMAIN_MAX: Final = 63  # DeviceMaxDomainLength
ID_MAX: Final = 32  # DeviceMaxIDLength
DRIVER_MAX: Final = 63  # DriverNameMaxLength
PER_DEVICE_MAX: Final = 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
VALUE_MAX: Final = 64  # DeviceAttributeMaxValueLength
# How deeply groups (parentheses, lists, maps, calls) may nest; the
# interpreter refuses less than 100 parentheses.
NESTING_MAX: Final = 100
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


# ---- lexer -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "id", "str", "bytes", "num", "op", "end"
    text: str  # the operator or identifier; for literals, their text as written
    start: int
    end: int
    size: int = 1  # for strings and bytes: at most this many characters


_ESCAPE: Final = (
    r"""\\(?:[abfnrtv"'\\?`]|[xX][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-3][0-7]{2})"""
)
_TRIPLE_D: Final = '"' * 3
_TRIPLE_S: Final = "'" * 3
# CEL.g4's tokens, in the order that gives its longest match. Only strings
# that are not raw have escapes, and one CEL does not have matches nothing
# (the interpreter refuses it too).
_TOKEN: Final = re.compile(
    "|".join(
        [
            r"(?P<skip>[\t\n\r\f ]+|//[^\n]*)",
            "(?P<str>[bB]?(?:"
            + "|".join(
                [
                    f"{_TRIPLE_D}(?:{_ESCAPE}|[^\\\\])*?{_TRIPLE_D}",
                    f"{_TRIPLE_S}(?:{_ESCAPE}|[^\\\\])*?{_TRIPLE_S}",
                    f'"(?:{_ESCAPE}|[^\\\\"\\n\\r])*"',
                    f"'(?:{_ESCAPE}|[^\\\\'\\n\\r])*'",
                    f"[rR](?:{_TRIPLE_D}[\\s\\S]*?{_TRIPLE_D}|{_TRIPLE_S}[\\s\\S]*?{_TRIPLE_S}"
                    "|\"[^\"\\n\\r]*\"|'[^'\\n\\r]*')",
                ]
            )
            + "))",
            r"(?P<num>0[xX][0-9a-fA-F]+[uU]?|\d+\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+"
            r"|\.\d+(?:[eE][+-]?\d+)?|\d+[uU]?)",
            r"(?P<id>[A-Za-z_][A-Za-z0-9_]*)",
            r"(?P<op>&&|\|\||<=|>=|==|!=|[<>!+\-*/%?:.,()\[\]{}])",
        ]
    )
)


def tokens(text: str) -> list[Token]:
    """CEL's tokens (comments and whitespace dropped); CostError where the
    text is no CEL."""
    out: list[Token] = []
    i, n = 0, len(text)
    match = _TOKEN.match
    while i < n:
        m = match(text, i)
        if m is None:
            raise CostError(f"unexpected character {text[i]!r} at {i}")
        kind = m.lastgroup
        j = m.end()
        if kind == "str":
            t = m.group()
            body = t.lstrip("bBrR")
            quotes = 6 if body[:3] in (_TRIPLE_D, _TRIPLE_S) and len(body) >= 6 else 2
            # Escapes only shorten what the quotes hold.
            kind = "bytes" if t[0] in "bB" else "str"
            out.append(Token(kind, t, i, j, len(body) - quotes))
        elif kind != "skip":
            out.append(Token(str(kind), m.group(), i, j))
        i = j
    out.append(Token("end", "", n, n))
    return out


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


# Binding powers, loosest first (CEL's precedence); the ternary is looser
# than all, unary operators and member access tighter.
_BINARY: Final = {
    "||": 2,
    "&&": 3,
    "<": 4,
    "<=": 4,
    ">": 4,
    ">=": 4,
    "==": 4,
    "!=": 4,
    "in": 4,
    "+": 5,
    "-": 5,
    "*": 6,
    "/": 6,
    "%": 6,
}
_TERNARY: Final = 1
_UNARY: Final = 7


class _Parser:
    """A Pratt parser of CEL.g4's expressions: chains of operators and member
    accesses are read in a loop; only groups (parentheses, lists, maps, call
    arguments) recurse, at most NESTING_MAX deep."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = tokens(text)
        self.i = 0
        self.groups = 0

    def peek(self) -> Token:
        return self.toks[self.i]

    def take(self) -> Token:
        t = self.toks[self.i]
        if t.kind != "end":
            self.i += 1
        return t

    def at(self, op: str) -> bool:
        t = self.toks[self.i]
        return t.kind == "op" and t.text == op

    def expect(self, op: str) -> Token:
        t = self.take()
        if t.kind != "op" or t.text != op:
            raise CostError(f"expected {op!r} at {t.start}")
        return t

    def parse(self) -> Node:
        node = self.expr(0)
        t = self.peek()
        if t.kind != "end":
            raise CostError(f"unexpected {t.text!r} at {t.start}")
        return node

    def enter(self) -> None:
        self.groups += 1
        if self.groups > NESTING_MAX:
            raise CostError("expression nested too deeply")

    def expr(self, min_bp: int) -> Node:
        lhs = self.prefix()
        while True:
            t = self.peek()
            op = t.text if t.kind == "op" or (t.kind == "id" and t.text == "in") else ""
            if op in (".", "["):
                lhs = self.member(lhs)
                continue
            bp = _BINARY.get(op)
            if bp is not None and bp >= min_bp:
                self.take()
                rhs = self.expr(bp + 1)
                lhs = Binary(lhs.start, rhs.end, op, lhs, rhs)
                continue
            if op == "?" and min_bp <= _TERNARY:
                self.take()
                self.enter()
                then = self.expr(_BINARY["||"])
                self.expect(":")
                other = self.expr(_TERNARY)
                self.groups -= 1
                lhs = Cond(lhs.start, other.end, lhs, then, other)
                continue
            return lhs

    def member(self, lhs: Node) -> Node:
        t = self.take()
        if t.text == "[":
            self.enter()
            key = self.expr(0)
            close = self.expect("]")
            self.groups -= 1
            return Index(lhs.start, close.end, lhs, key)
        name = self.take()
        if name.kind != "id":
            raise CostError(f"expected a field name at {name.start}")
        if self.at("("):
            args, end = self.arguments()
            return self.call(name.text, lhs, args, lhs.start, end)
        if self.at("{") and _qualified(lhs):
            return self.message(lhs.start)
        return Select(lhs.start, name.end, lhs, name.text)

    def arguments(self) -> tuple[list[Node], int]:
        self.expect("(")
        self.enter()
        args: list[Node] = []
        while not self.at(")"):
            args.append(self.expr(0))
            if not self.at(")"):
                self.expect(",")
        self.groups -= 1
        return args, self.take().end

    def call(self, name: str, target: Node | None, args: list[Node], start: int, end: int) -> Node:
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

    def message(self, start: int) -> Node:
        self.expect("{")
        self.enter()
        keys: list[Node] = []
        values: list[Node] = []
        while not self.at("}"):
            f = self.take()
            if f.kind != "id":
                raise CostError(f"expected a field name at {f.start}")
            self.expect(":")
            keys.append(Lit(f.start, f.end, "str", len(f.text), f.text))
            values.append(self.expr(0))
            if not self.at("}"):
                self.expect(",")
        self.groups -= 1
        return MapLit(start, self.take().end, keys, values, message=True)

    def prefix(self) -> Node:
        t = self.take()
        if t.kind == "op" and t.text in ("!", "-"):
            ops = [t]
            while self.at("!") or self.at("-"):
                ops.append(self.take())
            node = self.expr(_UNARY)
            for u in reversed(ops):
                node = Unary(u.start, node.end, u.text, node)
            return node
        if t.kind in ("str", "bytes"):
            plain = t.kind == "str" and t.text[:1] in "\"'" and "\\" not in t.text
            triple = t.text[:3] in ('"""', "'''")
            value = t.text[1:-1] if plain and not triple else None
            raw = t.text[:1] in "rR"
            written = t.text if raw or not _ANY_CHAR_ESCAPE.search(t.text) else None
            return Lit(t.start, t.end, t.kind, t.size, value, written if t.kind == "str" else None)
        if t.kind == "num":
            return Lit(t.start, t.end, "num")
        if t.kind == "id":
            if t.text in ("true", "false"):
                return Lit(t.start, t.end, "bool")
            if t.text == "null":
                return Lit(t.start, t.end, "null")
            if self.at("("):
                args, end = self.arguments()
                return self.call(t.text, None, args, t.start, end)
            if self.at("{"):
                return self.message(t.start)
            return Ident(t.start, t.end, t.text)
        if t.kind == "op" and t.text == "(":
            self.enter()
            inner = self.expr(0)
            close = self.expect(")")
            self.groups -= 1
            inner.start, inner.end = t.start, close.end
            return inner
        if t.kind == "op" and t.text == "[":
            self.enter()
            items: list[Node] = []
            while not self.at("]"):
                items.append(self.expr(0))
                if not self.at("]"):
                    self.expect(",")
            self.groups -= 1
            return ListLit(t.start, self.take().end, items)
        if t.kind == "op" and t.text == "{":
            self.enter()
            keys: list[Node] = []
            values: list[Node] = []
            while not self.at("}"):
                keys.append(self.expr(0))
                self.expect(":")
                values.append(self.expr(0))
                if not self.at("}"):
                    self.expect(",")
            self.groups -= 1
            return MapLit(t.start, self.take().end, keys, values)
        if t.kind == "op" and t.text == "." and self.peek().kind == "id":
            name = self.take()
            if self.at("("):
                args, end = self.arguments()
                return self.call("." + name.text, None, args, t.start, end)
            if self.at("{"):
                return self.message(t.start)
            return Ident(t.start, name.end, "." + name.text)
        raise CostError(f"unexpected {t.text or 'end'!r} at {t.start}")


def _qualified(n: Node) -> bool:
    """Whether the node is a dotted name (a message type's name)."""
    while isinstance(n, Select) and not n.test_only:
        n = n.operand
    return isinstance(n, Ident)


def parse(text: str) -> Node:
    """The syntax tree of a CEL expression; CostError if this parser cannot read it."""
    try:
        return _Parser(text).parse()
    except RecursionError:
        raise CostError("expression nested too deeply") from None


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
