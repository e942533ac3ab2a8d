"""Taints and tolerations: ToleratesTaint over every effect and operator, the
TaintToleration helpers, and reading them."""

from __future__ import annotations

from typing import Any

import pytest

from troupe.api.taints import (
    DO_NOT_SCHEDULE_EFFECTS,
    count_intolerable_prefer_no_schedule,
    find_untolerated,
    parse_taint,
    parse_toleration,
    prefer_no_schedule_tolerations,
    tolerations_tolerate,
)
from troupe.api.types import ParseError, Taint, TaintEffect, Toleration, TolerationOp

NS = TaintEffect.NO_SCHEDULE
PNS = TaintEffect.PREFER_NO_SCHEDULE
NE = TaintEffect.NO_EXECUTE
EQ = TolerationOp.EQUAL
EX = TolerationOp.EXISTS


def tol(key: str = "", op: TolerationOp = EQ, value: str = "", effect: Any = None) -> Toleration:
    return Toleration(key, op, value, effect)


TOLERATES_CASES = [
    # (toleration, taint, want, id)
    (tol("k", EQ, "v", NS), Taint("k", "v", NS), True, "equal-same-effect"),
    (tol("k", EQ, "v", None), Taint("k", "v", NS), True, "equal-any-effect-noschedule"),
    (tol("k", EQ, "v", None), Taint("k", "v", PNS), True, "equal-any-effect-prefer"),
    (tol("k", EQ, "v", None), Taint("k", "v", NE), True, "equal-any-effect-noexecute"),
    (tol("k", EQ, "v", NS), Taint("k", "v", NE), False, "equal-other-effect"),
    (tol("k", EQ, "v", PNS), Taint("k", "v", NS), False, "prefer-does-not-tolerate-noschedule"),
    (tol("k", EQ, "v", NE), Taint("k", "v", NE), True, "noexecute-same"),
    (tol("k", EQ, "w", None), Taint("k", "v", NS), False, "equal-other-value"),
    (tol("k", EQ, "", None), Taint("k", "", NS), True, "equal-empty-values"),
    (tol("k", EQ, "", None), Taint("k", "v", NS), False, "equal-empty-vs-value"),
    (tol("j", EQ, "v", None), Taint("k", "v", NS), False, "equal-other-key"),
    (tol("k", EX, "", None), Taint("k", "anything", NS), True, "exists-ignores-value"),
    (tol("k", EX, "ignored", None), Taint("k", "v", NS), True, "exists-ignores-own-value"),
    (tol("k", EX, "", NE), Taint("k", "v", NS), False, "exists-other-effect"),
    (tol("j", EX, "", None), Taint("k", "v", NS), False, "exists-other-key"),
    (tol("", EX, "", None), Taint("k", "v", NS), True, "empty-key-exists-all"),
    (tol("", EX, "", None), Taint("z", "", PNS), True, "empty-key-exists-all-prefer"),
    (tol("", EX, "", NE), Taint("k", "v", NS), False, "empty-key-exists-one-effect"),
    (tol("", EX, "", NE), Taint("k", "v", NE), True, "empty-key-exists-that-effect"),
    (tol("", EQ, "v", None), Taint("k", "v", NS), True, "empty-key-equal-any-key-same-value"),
    (tol("", EQ, "v", None), Taint("k", "w", NS), False, "empty-key-equal-other-value"),
]


@pytest.mark.parametrize(
    ("toleration", "taint", "want"),
    [c[:3] for c in TOLERATES_CASES],
    ids=[c[3] for c in TOLERATES_CASES],
)
def test_tolerates(toleration: Toleration, taint: Taint, want: bool) -> None:
    assert toleration.tolerates(taint) is want
    assert tolerations_tolerate([toleration], taint) is want


def test_no_tolerations_tolerate_nothing() -> None:
    assert not tolerations_tolerate([], Taint("k", "v", NS))


TAINTS = (
    Taint("soft", "", PNS),
    Taint("a", "1", NS),
    Taint("b", "2", NE),
)


@pytest.mark.parametrize(
    ("tolerations", "effects", "want"),
    [
        ([], DO_NOT_SCHEDULE_EFFECTS, TAINTS[1]),
        ([tol("a", EQ, "1")], DO_NOT_SCHEDULE_EFFECTS, TAINTS[2]),
        ([tol("a", EQ, "1"), tol("b", EX)], DO_NOT_SCHEDULE_EFFECTS, None),
        ([tol("", EX)], DO_NOT_SCHEDULE_EFFECTS, None),
        ([tol("a", EQ, "1", PNS)], DO_NOT_SCHEDULE_EFFECTS, TAINTS[1]),
        ([], {PNS}, TAINTS[0]),
        ([tol("soft", EX)], {PNS}, None),
        ([], {NE}, TAINTS[2]),
        ([], set(), None),
    ],
    ids=[
        "first-untolerated",
        "skips-tolerated",
        "all-tolerated",
        "tolerate-everything",
        "wrong-effect-does-not-tolerate",
        "prefer-only",
        "prefer-tolerated",
        "noexecute-only",
        "no-effects",
    ],
)
def test_find_untolerated(
    tolerations: list[Toleration], effects: set[TaintEffect], want: Taint | None
) -> None:
    assert find_untolerated(TAINTS, tolerations, effects) == want


def test_find_untolerated_defaults_to_noschedule_and_noexecute() -> None:
    assert find_untolerated([Taint("soft", "", PNS)], []) is None
    assert find_untolerated([Taint("hard", "", NE)], []) == Taint("hard", "", NE)


@pytest.mark.parametrize(
    ("taints", "tolerations", "want"),
    [
        ([], [], 0),
        ([Taint("a", "", PNS), Taint("b", "", PNS)], [], 2),
        ([Taint("a", "", PNS), Taint("b", "", PNS)], [tol("a", EX)], 1),
        ([Taint("a", "", PNS), Taint("b", "", PNS)], [tol("", EX)], 0),
        ([Taint("a", "", PNS)], [tol("a", EX, effect=PNS)], 0),
        ([Taint("a", "", PNS)], [tol("a", EX, effect=NS)], 1),
        ([Taint("a", "", NS), Taint("b", "", NE)], [], 0),
        ([Taint("a", "x", PNS)], [tol("a", EQ, "y")], 1),
    ],
    ids=[
        "none",
        "two-intolerable",
        "one-tolerated",
        "tolerate-all",
        "prefer-effect-toleration",
        "noschedule-toleration-ignored",
        "hard-taints-not-counted",
        "value-mismatch",
    ],
)
def test_count_intolerable_prefer_no_schedule(
    taints: list[Taint], tolerations: list[Toleration], want: int
) -> None:
    assert count_intolerable_prefer_no_schedule(taints, tolerations) == want


def test_prefer_no_schedule_tolerations() -> None:
    tols = [tol("a"), tol("b", effect=NS), tol("c", effect=PNS), tol("d", effect=NE)]
    assert [t.key for t in prefer_no_schedule_tolerations(tols)] == ["a", "c"]


# ---- reading ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("item", "want"),
    [
        ({"key": "k", "value": "v", "effect": "NoSchedule"}, Taint("k", "v", NS)),
        ({"key": "k", "effect": "PreferNoSchedule"}, Taint("k", "", PNS)),
        (
            {"key": "k", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"},
            Taint("k", "", NE),
        ),
    ],
    ids=["noschedule", "prefer-no-value", "noexecute"],
)
def test_parse_taint(item: dict[str, Any], want: Taint) -> None:
    assert parse_taint(item, "spec.taints[0].") == want


@pytest.mark.parametrize(
    ("item", "path"),
    [
        ({"key": "k", "effect": "Maybe"}, "spec.taints[0].effect"),
        ({"key": "k"}, "spec.taints[0].effect"),
        ({"effect": "NoSchedule"}, "spec.taints[0].key"),
        ({"key": 3, "effect": "NoSchedule"}, "spec.taints[0].key"),
        ({"key": "k", "value": ["v"], "effect": "NoSchedule"}, "spec.taints[0].value"),
    ],
    ids=["bad-effect", "no-effect", "no-key", "key-not-string", "value-not-string"],
)
def test_parse_taint_errors(item: dict[str, Any], path: str) -> None:
    with pytest.raises(ParseError) as e:
        parse_taint(item, "spec.taints[0].")
    assert e.value.field_path == path


def test_bad_taint_effect_lists_the_choices() -> None:
    with pytest.raises(ParseError) as e:
        parse_taint({"key": "k", "effect": "Maybe"}, "t.")
    assert e.value.problem == (
        'Unsupported value: "Maybe": supported values: '
        '"NoExecute", "NoSchedule", "PreferNoSchedule"'
    )


@pytest.mark.parametrize(
    ("item", "want"),
    [
        ({}, Toleration()),
        ({"key": "k", "value": "v"}, Toleration("k", EQ, "v")),
        ({"key": "k", "operator": "", "value": "v"}, Toleration("k", EQ, "v")),
        ({"operator": "Exists"}, Toleration("", EX)),
        (
            {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            Toleration("k", EX, "", NE, 30),
        ),
        ({"key": "k", "effect": ""}, Toleration("k", EQ, "", None)),
    ],
    ids=["empty", "equal-default", "empty-operator", "exists", "seconds", "empty-effect"],
)
def test_parse_toleration(item: dict[str, Any], want: Toleration) -> None:
    assert parse_toleration(item, "t.") == want


@pytest.mark.parametrize(
    ("item", "path"),
    [
        ({"key": "k", "operator": "Near"}, "t.operator"),
        ({"key": "k", "effect": "Sometimes"}, "t.effect"),
        ({"key": "k", "tolerationSeconds": "soon"}, "t.tolerationSeconds"),
    ],
    ids=["operator", "effect", "seconds"],
)
def test_parse_toleration_errors(item: dict[str, Any], path: str) -> None:
    with pytest.raises(ParseError) as e:
        parse_toleration(item, "t.")
    assert e.value.field_path == path


@pytest.mark.parametrize(
    ("item", "path"),
    [
        ({"key": "k", "tolerationSeconds": True}, "t.tolerationSeconds"),
        ({"key": "k", "tolerationSeconds": 2**63}, "t.tolerationSeconds"),
        ({"key": ["k"]}, "t.key"),
        ({"key": "k", "value": {"v": 1}}, "t.value"),
        ({"key": "k", "operator": 1}, "t.operator"),
    ],
    ids=["bool-seconds", "seconds-past-int64", "list-key", "map-value", "number-operator"],
)
def test_toleration_read_before_does_not_hide_errors(item: dict[str, Any], path: str) -> None:
    """Tolerations are remembered by their fields' values and types: one that
    reads (seconds 1, key "k") does not make a look-alike that does not read
    (seconds True, which equals 1) read, and the error still names the field."""
    assert parse_toleration({"key": "k", "tolerationSeconds": 1}, "t.").toleration_seconds == 1
    assert parse_toleration({"key": "k", "operator": "Equal"}, "t.") == Toleration("k", EQ)
    with pytest.raises(ParseError) as e:
        parse_toleration(item, "t.")
    assert e.value.field_path == path


def test_toleration_seconds_as_an_integral_float_read_alike() -> None:
    assert parse_toleration({"key": "k", "tolerationSeconds": 1.0}, "t.") == Toleration(
        "k", EQ, "", None, 1
    )
