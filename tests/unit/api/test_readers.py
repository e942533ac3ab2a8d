"""troupe.api.readers: the one family of typed readers, for objects and for the
configuration. A mistake reads the same wherever it is made."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_pod
from troupe.api.parse import parse_pod
from troupe.api.readers import (
    as_map,
    get_bool,
    get_int,
    get_map,
    get_name,
    get_objs,
    get_seconds,
    get_str,
    int_value,
    show,
)
from troupe.api.types import InvalidObject, ParseError
from troupe.config import ConfigError, parse_config
from troupe.plugins.registry import IN_TREE


def problem(read: Any, *args: Any, **kw: Any) -> str:
    with pytest.raises(ParseError) as e:
        read(*args, **kw)
    return str(e.value)


def test_a_field_is_named_by_its_mapping_prefix_and_key() -> None:
    spec = {"containers": [{"name": 7}]}
    [(prefix, container)] = get_objs(spec, "containers", "spec.")
    assert prefix == "spec.containers[0]."
    assert problem(get_str, container, "name", prefix) == (
        "spec.containers[0].name: Invalid value: 7: must be a string"
    )
    assert problem(as_map, [], "spec.affinity") == (
        "spec.affinity: Invalid value: array: must be an object"
    )


def test_absent_and_null_are_not_set() -> None:
    obj = {"a": None}
    assert get_str(obj, "a", "", "d") == "d"
    assert get_bool(obj, "b", "", True) is True
    assert get_int(obj, "a", "") is None
    assert get_map(obj, "a", "") == {}
    assert get_seconds(obj, "a", "") is None
    # a null item of a list of objects is an empty object, as Go decodes it
    assert get_objs({"l": [None]}, "l", "") == [("l[0].", {})]


def test_a_required_name_is_given_and_not_empty() -> None:
    assert get_name({"name": "x"}, "name", "m.") == "x"
    assert problem(get_name, {}, "name", "m.") == "m.name: Required value"
    assert problem(get_name, {"name": ""}, "name", "m.") == "m.name: Required value"


def test_allowed_fields_are_checked_with_a_suggestion() -> None:
    assert get_map({"m": {"enabled": 1}}, "m", "p.", ("enabled",)) == {"enabled": 1}
    assert problem(get_map, {"m": {"enable": 1}}, "m", "p.", ("enabled",)) == (
        'p.m.enable: unknown field (did you mean "enabled"?)'
    )
    assert problem(as_map, {1: 2}, "top", ("a",)) == (
        "top: Invalid value: 1: field names must be strings"
    )


@pytest.mark.parametrize(
    ("value", "lenient", "strict"),
    [
        pytest.param(5, 5, 5, id="int"),
        pytest.param(5.0, 5, None, id="integral-float"),
        pytest.param("5", 5, None, id="digits"),
        pytest.param(2.5, None, None, id="float"),
        pytest.param(True, None, None, id="bool"),
        pytest.param("5%", None, None, id="text"),
    ],
)
def test_objects_read_integers_leniently_the_configuration_strictly(
    value: object, lenient: int | None, strict: int | None
) -> None:
    for want, is_strict in ((lenient, False), (strict, True)):
        if want is None:
            assert problem(int_value, value, "x", strict=is_strict) == (
                f"x: Invalid value: {show(value)}: must be an integer"
            )
        else:
            assert int_value(value, "x", strict=is_strict) == want


def test_integer_bounds_and_int64() -> None:
    assert problem(int_value, 120, "p", 0, 100) == (
        "p: Invalid value: 120: must be between 0 and 100, inclusive"
    )
    assert problem(int_value, 0, "p", lo=1) == (
        "p: Invalid value: 0: must be greater than or equal to 1"
    )
    assert problem(int_value, 2**63, "p") == (
        "p: Invalid value: 9223372036854775808: must be a 64-bit integer"
    )
    assert problem(int_value, 10**400, "p") == (
        "p: Invalid value: an integer of 401 digits: must be a 64-bit integer"
    )


def test_seconds() -> None:
    assert get_seconds({"s": 1.5}, "s", "t.") == 1.5
    assert problem(get_seconds, {"s": "5m"}, "s", "t.") == (
        't.s: Invalid value: "5m": must be a number of seconds'
    )
    assert problem(get_seconds, {"s": 0}, "s", "t.", positive=True) == (
        "t.s: Invalid value: 0: must be greater than zero"
    )
    assert problem(get_seconds, {"s": -1}, "s", "t.") == (
        "t.s: Invalid value: -1: must be greater than or equal to 0"
    )


def test_one_mistake_one_message_in_an_object_and_in_the_configuration() -> None:
    """A boolean written as text: the pod's message and the configuration's say
    the same after their paths."""
    obj = make_pod("p").obj()
    obj["spec"]["hostNetwork"] = "yes"
    pod = parse_pod(obj)
    assert isinstance(pod, InvalidObject)
    with pytest.raises(ConfigError) as e:
        parse_config({"troupe": {"gangGroupCycle": "yes"}}, IN_TREE)
    assert pod.message.endswith('spec.hostNetwork: Invalid value: "yes": must be a boolean')
    assert str(e.value) == 'troupe.gangGroupCycle: Invalid value: "yes": must be a boolean'
