"""CEL device selectors (DeviceClass and request `selectors[].cel.expression`).

Expressions are compiled once (`compile_selector`, cached by text) with the
`common-expression-language` package (a Rust CEL interpreter; one evaluation
costs a few microseconds) and evaluated against one device at a time, as
`device` with kube's fields:

- `device.driver`: the driver's name;
- `device.attributes["<domain>"].<name>`: bool, int, string or version values;
- `device.capacity["<domain>"].<name>`: quantities;
- `device.allowMultipleAllocations`: whether claims may share the device.

Looking up a domain the device does not have gives an empty map, as in kube
(the lookups are rewritten to `(K in M ? M[K] : {})`, see `celcost`); a
missing attribute in it is an evaluation error (use `has()` or `in`).

Kubernetes' CEL libraries that selectors use are added as functions:
quantities (`quantity("1Gi")`, `isQuantity`, `compareTo`, `isLessThan`,
`isGreaterThan`, `asInteger`, `asApproximateFloat`, `isInteger`, `sign`, `add`,
`sub`), semantic versions (`semver("1.2.3")`, `isSemver`, `major`, `minor`,
`patch`, and the comparisons) and the string extensions (`lowerAscii`,
`upperAscii`, `trim`, `replace`, `split`, `join`, `indexOf`, `lastIndexOf`,
`substring`, `charAt`). Quantities and versions are maps tagged with a key
users never write, so `==` compares them by value and `compareTo` knows which
they are.

A selector that does not compile, that is too costly, or that fails or does
not give a boolean on a device, makes the claim unallocatable with the CEL
error in the reason; never a crash. The cost is bounded before any
evaluation (the interpreter cannot stop one): `celcost` parses the
expression and estimates its worst cost on any device kube admits, against
kube's limit of 1 000 000 per expression (`CELSelectorExpressionMaxCost`);
over it, the selector is refused with kube's words ("too complex, exceeds
cost limit"), as is one whose cost cannot be estimated. A device holding more
than kube admits (more attributes, longer strings) has the cost estimated
again for its sizes; over the limit, evaluating on it fails with cel-go's
runtime error ("operation cancelled: actual cost limit exceeded").

Compiled selectors (and the errors of those that do not compile) are kept
for the 4096 expressions used last (COMPILED_MAX): a bounded cache, and a
miss costs only a compile.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Final

from troupe.dra import celcost
from troupe.dra.semver import parse_semver, semver_key
from troupe.dra.types import Device, Version

COST_LIMIT: Final = 1_000_000
_QUANTITY: Final = "__quantity__"
_SEMVER: Final = "__semver__"
COMPILED_MAX: Final = 4096


@lru_cache(maxsize=1)
def _engine() -> Any:
    """The CEL interpreter: the package's compiled module, loaded on first use
    (clusters without DRA never pay for it) and without the package's
    `__init__`, which imports its command-line front end (typer, rich,
    prompt_toolkit: 24 MiB and a quarter of a second measured, for nothing
    the scheduler uses; the compiled module alone is 3 MiB)."""
    try:
        spec = importlib.util.find_spec("cel")
        where = spec.submodule_search_locations if spec is not None else None
        if where:
            folder = next(iter(where))
            for name in sorted(os.listdir(folder)):
                if name.startswith("cel.") and name.endswith(
                    tuple(importlib.machinery.EXTENSION_SUFFIXES)
                ):
                    path = os.path.join(folder, name)
                    loader = importlib.machinery.ExtensionFileLoader("cel.cel", path)
                    module_spec = importlib.util.spec_from_loader("cel.cel", loader, origin=path)
                    if module_spec is None:
                        break
                    module = importlib.util.module_from_spec(module_spec)
                    loader.exec_module(module)
                    return module
    except (ImportError, OSError):
        pass
    import cel  # the package as published, if its layout ever changes

    return cel


class CelError(Exception):
    """A selector that cannot be used; the text is what the pod's reason shows."""


# ---- values ----------------------------------------------------------------------


def _quantity_value(v: Mapping[str, Any]) -> Fraction:
    return Fraction(str(v[_QUANTITY]))


def _q(value: Fraction) -> dict[str, str]:
    return {_QUANTITY: str(value)}


def _tagged(v: object) -> str:
    if isinstance(v, Mapping):
        if _QUANTITY in v:
            return _QUANTITY
        if _SEMVER in v:
            return _SEMVER
    raise ValueError(f"no such overload for {type(v).__name__}")


def _quantity(text: str) -> dict[str, str]:
    from troupe.api.quantity import parse_quantity

    return _q(parse_quantity(text, "quantity"))


def _is_quantity(text: str) -> bool:
    try:
        _quantity(text)
    except Exception:
        return False
    return True


def _normalize_semver(text: str) -> str:
    t = text[1:] if text.startswith("v") else text
    core, sep, rest = t.partition("-")
    parts = core.split(".")
    while len(parts) < 3:
        parts.append("0")
    parts = [str(int(p)) if p.isdigit() else p for p in parts]
    return ".".join(parts) + (sep + rest if sep else "")


def _semver(text: str, normalize: bool = False) -> dict[str, str]:
    t = _normalize_semver(text) if normalize else text
    if parse_semver(t) is None:
        raise ValueError(f"invalid semver {text!r}")
    return {_SEMVER: t}


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _semver(text, normalize)
    except Exception:
        return False
    return True


def _compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    kind = _tagged(a)
    if _tagged(b) != kind:
        raise ValueError("compareTo: a quantity compares with a quantity, a semver with a semver")
    if kind == _QUANTITY:
        x, y = _quantity_value(a), _quantity_value(b)
    else:
        x, y = semver_key(str(a[_SEMVER])), semver_key(str(b[_SEMVER]))  # type: ignore[assignment]
    return (x > y) - (x < y)


def _semver_part(i: int) -> Callable[[Mapping[str, Any]], int]:
    def part(v: Mapping[str, Any]) -> int:
        if _tagged(v) != _SEMVER:
            raise ValueError("no such overload")
        key = semver_key(str(v[_SEMVER]))
        out: int = key[i]
        return out

    return part


def _as_integer(v: Mapping[str, Any]) -> int:
    q = _quantity_value(v)
    if q.denominator != 1:
        raise ValueError("cannot convert value to integer")
    return int(q)


def _amount(v: object) -> Fraction:
    """A quantity or an integer (kube's add/sub take both)."""
    if isinstance(v, Mapping):
        return _quantity_value(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return Fraction(v)
    raise ValueError("no such overload")


def _substring(s: str, start: int, end: int | None = None) -> str:
    if end is None:
        end = len(s)
    if not 0 <= start <= end <= len(s):
        raise ValueError(f"substring: index out of range: {start}, {end}")
    return s[start:end]


def _index_of(s: str, sub: str, start: int = 0) -> int:
    return s.find(sub, start)


def _last_index_of(s: str, sub: str, end: int | None = None) -> int:
    return s.rfind(sub, 0, None if end is None else end + len(sub))


def _replace(s: str, old: str, new: str, n: int = -1) -> str:
    return s.replace(old, new, n)


def _split(s: str, sep: str, n: int = -1) -> list[str]:
    if n == 0:
        return []
    return s.split(sep, n - 1 if n > 0 else -1)


def _join(items: list[str], sep: str = "") -> str:
    return sep.join(items)


FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": _compare,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "asInteger": _as_integer,
    "asApproximateFloat": lambda v: float(_quantity_value(v)),
    "isInteger": lambda v: _quantity_value(v).denominator == 1,
    "sign": lambda v: (_quantity_value(v) > 0) - (_quantity_value(v) < 0),
    "add": lambda a, b: _q(_quantity_value(a) + _amount(b)),
    "sub": lambda a, b: _q(_quantity_value(a) - _amount(b)),
    "major": _semver_part(0),
    "minor": _semver_part(1),
    "patch": _semver_part(2),
    "lowerAscii": lambda s: s.lower(),
    "upperAscii": lambda s: s.upper(),
    "trim": lambda s: s.strip(),
    "replace": _replace,
    "split": _split,
    "join": _join,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "substring": _substring,
    "charAt": lambda s, i: s[i] if 0 <= i < len(s) else "",
}


def device_variable(device: Device, driver: str) -> dict[str, Any]:
    """The `device` a selector sees."""
    attrs: dict[str, dict[str, Any]] = {}
    for name, v in device.attributes.items():
        domain, _, short = name.rpartition("/")
        attrs.setdefault(domain, {})[short] = {_SEMVER: v.text} if isinstance(v, Version) else v
    caps: dict[str, dict[str, Any]] = {}
    for name, q in device.capacity.items():
        domain, _, short = name.rpartition("/")
        caps.setdefault(domain, {})[short] = _q(q)
    return {
        "driver": driver,
        "attributes": attrs,
        "capacity": caps,
        "allowMultipleAllocations": device.multi,
    }


# ---- compiling and evaluating ----------------------------------------------------


def estimated_cost(expr: str) -> int:
    """The most evaluating `expr` on one device can cost (kube's cost units,
    roughly; see `celcost`); CelError if it cannot be estimated."""
    try:
        return celcost.estimate(celcost.parse(expr))
    except celcost.CostError as e:
        raise CelError(
            f"CEL compile error: cannot estimate the cost of the expression: {e}"
        ) from None


@dataclass(frozen=True, slots=True)
class Selector:
    expression: str
    program: Any  # of the expression with its domain lookups rewritten
    cost: int  # the estimate, at most COST_LIMIT

    def matches(self, device: DeviceEnv) -> bool:
        """Whether the device is selected; CelError if the expression fails on
        it or does not give a boolean."""
        if device.bounds is not None and _cost_on(self.expression, device.bounds) > COST_LIMIT:
            # A device past what kube admits: the estimate made for kube's
            # devices does not hold for it (cel-go would stop the evaluation
            # with this error).
            raise CelError("CEL runtime error: operation cancelled: actual cost limit exceeded")
        try:
            out = self.program.execute(device.context)
        except KeyError as e:
            raise CelError(
                f"CEL runtime error: no such key: {e.args[0] if e.args else e}"
            ) from None
        except Exception as e:
            raise CelError(f"CEL runtime error: {_first_line(e)}") from None
        if not isinstance(out, bool):
            raise CelError(f"CEL runtime error: the expression gave {type(out).__name__}, not bool")
        return out


class DeviceEnv:
    """A device as selectors see it, built once per published device."""

    __slots__ = ("_context", "bounds", "variable")

    def __init__(self, device: Device) -> None:
        self.variable = device_variable(device, device.id.driver)
        self._context: Any = None
        # What the device holds, when it is more than kube admits (None: the
        # usual case, within what selectors' costs were estimated for).
        self.bounds = _bounds(self.variable)

    @property
    def context(self) -> Any:
        if self._context is None:
            self._context = _engine().Context(
                variables={"device": self.variable}, functions=FUNCTIONS
            )
        return self._context


def _bounds(variable: Mapping[str, Any]) -> celcost.DeviceBounds | None:
    maps: list[Mapping[str, Any]] = [variable["attributes"], variable["capacity"]]
    inner = [m for outer in maps for m in outer.values()]
    names = [len(k) for outer in maps for k in outer] + [len(k) for m in inner for k in m]
    values = [
        len(v) if isinstance(v, str) else len(str(next(iter(v.values()))))
        for m in inner
        for v in m.values()
        if isinstance(v, (str, Mapping))
    ]
    kube = celcost.KUBE_BOUNDS
    got = celcost.DeviceBounds(
        domains=max(len(m) for m in maps),
        per_domain=max((len(m) for m in inner), default=0),
        name=max(names, default=0),
        value=max(values, default=0),
        driver=len(variable["driver"]),
    )
    if got.within(kube):
        return None
    return celcost.DeviceBounds(
        max(got.domains, kube.domains),
        max(got.per_domain, kube.per_domain),
        max(got.name, kube.name),
        max(got.value, kube.value),
        max(got.driver, kube.driver),
    )


@lru_cache(maxsize=256)
def _cost_on(expr: str, bounds: celcost.DeviceBounds) -> int:
    """The expression's cost on devices within `bounds` (past kube's)."""
    return celcost.estimate(celcost.parse(expr), bounds)


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def compile_selector(expr: str) -> Selector:
    """The compiled selector; CelError (with the compiler's message) if `expr`
    does not compile, its cost cannot be estimated or is over the limit."""
    got = _compiled(expr)
    if isinstance(got, CelError):
        raise got
    return got


@lru_cache(maxsize=COMPILED_MAX)
def _compiled(expr: str) -> Selector | CelError:
    """Parsed here first (for the cost, and the rewriting of domain lookups),
    then compiled by the interpreter once, as rewritten; the text as written is
    compiled only to give a syntax error in the interpreter's words."""
    engine = _engine()
    try:
        root = celcost.parse(expr)
        rewritten = celcost.with_empty_domains(expr, root)
        program = engine.compile(rewritten)
    except Exception as e:
        try:
            engine.compile(expr)
        except Exception as syntax:
            text = str(syntax).strip()
            text = text.removeprefix(f"Failed to parse expression '{expr}': ")
            return CelError(f"CEL compile error: {' '.join(text.split())}")
        if isinstance(e, celcost.CostError):
            return CelError(f"CEL compile error: cannot estimate the cost of the expression: {e}")
        # the rewritten text does not compile: a bug of the rewriting, never a crash
        return CelError(f"CEL compile error: internal error: {_first_line(e)}")
    try:
        if celcost.references(root) != _references(program):
            # This parser read the text otherwise than the interpreter: the
            # estimate would be of another expression.
            raise celcost.CostError("the expression could not be analysed")
        cost = celcost.estimate(root)
    except celcost.CostError as e:
        return CelError(f"CEL compile error: cannot estimate the cost of the expression: {e}")
    if cost > COST_LIMIT:
        return CelError(
            f"CEL compile error: too complex, exceeds cost limit "
            f"(estimated cost {cost}, limit {COST_LIMIT})"
        )
    return Selector(expr, program, cost)


def _references(program: Any) -> tuple[frozenset[str], frozenset[str]]:
    """The variables and named functions the interpreter sees in a program
    (operators and macro expansions, named `_+_`, `@in`, `!_`..., left out)."""
    refs = program.references()
    named = frozenset(f for f in refs["functions"] if f[:1] not in ("_", "@", "!", "-"))
    return frozenset(refs["variables"]), named
