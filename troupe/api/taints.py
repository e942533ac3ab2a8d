"""Taints and tolerations: reading them, and the helpers kube-scheduler builds on them.

Whether one toleration tolerates one taint is `types.Toleration.tolerates`
(k8s.io/api core/v1 Toleration.ToleratesTaint): an empty effect matches every
effect, an empty key with Exists matches every key, Exists ignores the value,
Equal (the default operator) compares it. The functions here are the
component-helpers / TaintToleration plugin helpers on top of it:

* `find_untolerated` — v1helper.FindMatchingUntoleratedTaint: the first taint
  among those with the given effects that no toleration tolerates (the Filter
  uses NoSchedule and NoExecute).
* `count_intolerable_prefer_no_schedule` — the Score's
  countIntolerableTaintsPreferNoSchedule, with only the tolerations whose
  effect is empty or PreferNoSchedule considered (getAllTolerationPreferNoSchedule).

Parsing is lenient where the scheduler's matching is well defined (a toleration
with an empty key and Equal, which the API server would refuse, still matches
as ToleratesTaint says) and strict where it is not (an unknown effect or
operator).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final

from troupe.api.readers import get_int, get_str, required, unsupported
from troupe.api.types import ParseError, Taint, TaintEffect, Toleration, TolerationOp

__all__ = [
    "DO_NOT_SCHEDULE_EFFECTS",
    "count_intolerable_prefer_no_schedule",
    "find_untolerated",
    "parse_taint",
    "parse_toleration",
    "prefer_no_schedule_tolerations",
    "tolerations_tolerate",
]

# The effects the TaintToleration Filter (and NodeUnschedulable's taint) act on.
DO_NOT_SCHEDULE_EFFECTS: Final = frozenset({TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE})
_EFFECT_NAMES: Final = sorted(e.value for e in TaintEffect)
_OP_NAMES: Final = sorted(o.value for o in TolerationOp)
# By name: a dict read, where calling the Enum class costs a microsecond.
_EFFECTS: Final = {e.value: e for e in TaintEffect}
_OPS: Final = {o.value: o for o in TolerationOp}


# ---- reading -------------------------------------------------------------------------


def _effect(item: Mapping[str, Any], prefix: str) -> TaintEffect | None:
    text = get_str(item, "effect", prefix)
    if not text:
        return None
    effect = _EFFECTS.get(text)
    if effect is None:
        raise unsupported(f"{prefix}effect", text, _EFFECT_NAMES)
    return effect


def parse_taint(item: Mapping[str, Any], prefix: str) -> Taint:
    """A node's spec.taints[i]: key and effect required, value optional."""
    key = get_str(item, "key", prefix)
    if not key:
        raise required(f"{prefix}key")
    effect = _effect(item, prefix)
    if effect is None:
        raise required(f"{prefix}effect")
    return Taint(key, get_str(item, "value", prefix), effect)


def parse_toleration(item: Mapping[str, Any], prefix: str) -> Toleration:
    """A pod's spec.tolerations[i]; an empty operator is Equal, an empty effect all."""
    try:
        known = _known_toleration(
            item.get("key"),
            item.get("operator"),
            item.get("value"),
            item.get("effect"),
            item.get("tolerationSeconds"),
        )
    except TypeError:  # a value that is not hashable: not a toleration's, said below
        known = None
    return known if known is not None else _parse_toleration(item, prefix)


# The fields read, in `_known_toleration`'s order.
_TOLERATION_FIELDS: Final = ("key", "operator", "value", "effect", "tolerationSeconds")


@lru_cache(maxsize=1024, typed=True)
def _known_toleration(*values: object) -> Toleration | None:
    """`parse_toleration` of the fields with these values (of these types),
    remembered: most pods carry the same few tolerations, and a Toleration is
    immutable. None when they do not read (`parse_toleration` then says why)."""
    item = {f: v for f, v in zip(_TOLERATION_FIELDS, values, strict=True) if v is not None}
    try:
        return _parse_toleration(item, "")
    except ParseError:
        return None


def _parse_toleration(item: Mapping[str, Any], prefix: str) -> Toleration:
    op_text = get_str(item, "operator", prefix) or TolerationOp.EQUAL.value
    op = _OPS.get(op_text)
    if op is None:
        raise unsupported(f"{prefix}operator", op_text, _OP_NAMES)
    return Toleration(
        key=get_str(item, "key", prefix),
        op=op,
        value=get_str(item, "value", prefix),
        effect=_effect(item, prefix),
        toleration_seconds=get_int(item, "tolerationSeconds", prefix),
    )


# ---- matching ------------------------------------------------------------------------


def tolerations_tolerate(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """v1helper.TolerationsTolerateTaint: some toleration tolerates the taint."""
    return any(t.tolerates(taint) for t in tolerations)


def find_untolerated(
    taints: Iterable[Taint],
    tolerations: Sequence[Toleration],
    effects: Collection[TaintEffect] = DO_NOT_SCHEDULE_EFFECTS,
) -> Taint | None:
    """The first taint with one of `effects` that no toleration tolerates, or None."""
    for taint in taints:
        if taint.effect in effects and not tolerations_tolerate(tolerations, taint):
            return taint
    return None


def prefer_no_schedule_tolerations(tolerations: Iterable[Toleration]) -> tuple[Toleration, ...]:
    """getAllTolerationPreferNoSchedule: tolerations with no effect or PreferNoSchedule."""
    return tuple(
        t for t in tolerations if t.effect is None or t.effect is TaintEffect.PREFER_NO_SCHEDULE
    )


def count_intolerable_prefer_no_schedule(
    taints: Iterable[Taint], tolerations: Iterable[Toleration]
) -> int:
    """How many PreferNoSchedule taints the pod does not tolerate (the raw score of
    TaintToleration, lower is better; NormalizeScore reverses it)."""
    tols = prefer_no_schedule_tolerations(tolerations)
    return sum(
        1
        for taint in taints
        if taint.effect is TaintEffect.PREFER_NO_SCHEDULE and not tolerations_tolerate(tols, taint)
    )
