"""CEL device selectors: Kubernetes' functions on the device's attributes and
capacity, and every failure a reason instead of a crash."""

from __future__ import annotations

import sys
from fractions import Fraction

import pytest

from troupe.dra.cel import COST_LIMIT, CelError, DeviceEnv, compile_selector, estimated_cost
from troupe.dra.types import Device, DeviceID, Version

DEVICE = Device(
    DeviceID("gpu.example.com", "pool", "gpu-0"),
    {
        "gpu.example.com/model": "A100-SXM",
        "gpu.example.com/index": 3,
        "gpu.example.com/nvlink": True,
        "gpu.example.com/driverVersion": Version("535.104.5"),
        "pci.example.com/root": "0000:3b",
    },
    {"gpu.example.com/memory": Fraction(80 * 2**30)},
)
ENV = DeviceEnv(DEVICE)


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ('device.driver == "gpu.example.com"', True),
        ('device.attributes["gpu.example.com"].index == 3', True),
        ('device.attributes["gpu.example.com"].nvlink', True),
        ('device.attributes["pci.example.com"].root.startsWith("0000:")', True),
        # quantities: by value, whatever the unit
        ('device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) > 0', True),
        ('device.capacity["gpu.example.com"].memory == quantity("80Gi")', True),
        ('device.capacity["gpu.example.com"].memory.isLessThan(quantity("81920Mi"))', False),
        ('device.capacity["gpu.example.com"].memory.asInteger() == 85899345920', True),
        ('quantity("1.5").isInteger()', False),
        ('quantity("2").add(quantity("500m")) == quantity("2.5")', True),
        ('isQuantity("1Gi") && !isQuantity("one")', True),
        # semantic versions
        (
            'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("535.0.0"))',
            True,
        ),
        ('device.attributes["gpu.example.com"].driverVersion.major() == 535', True),
        ('semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', True),
        ('semver("v1.2", true) == semver("1.2.0")', True),
        ('isSemver("1.2.3") && !isSemver("1.2")', True),
        # strings
        ('device.attributes["gpu.example.com"].model.lowerAscii() == "a100-sxm"', True),
        ('device.attributes["gpu.example.com"].model.split("-")[0] == "A100"', True),
        ('device.attributes["gpu.example.com"].model.indexOf("SXM") == 5', True),
        ('["a", "b"].join("/") == "a/b"', True),
        # a domain the device does not have is an empty map, as in kube
        ('"x" in device.attributes["other.example.com"]', False),
        ('has(device.capacity["other.example.com"].memory)', False),
    ],
)
def test_what_selectors_say(expr: str, want: bool) -> None:
    assert compile_selector(expr).matches(ENV) is want


def test_a_missing_attribute_is_an_evaluation_error_named() -> None:
    with pytest.raises(CelError, match="CEL runtime error: no such key: nope"):
        compile_selector('device.attributes["gpu.example.com"].nope == 1').matches(ENV)


def test_a_selector_must_give_a_boolean() -> None:
    with pytest.raises(CelError, match="gave str, not bool"):
        compile_selector("device.driver").matches(ENV)


def test_a_syntax_error_is_the_compilers_message() -> None:
    with pytest.raises(CelError, match=r"CEL compile error: ERROR: <input>:1:17: Syntax error"):
        compile_selector("device.driver ==")


def test_nested_comprehensions_over_the_cost_limit_are_refused() -> None:
    deep = "[1].all(a, [1].all(b, [1].all(c, [1].all(d, d > 0))))"
    assert estimated_cost(deep) > COST_LIMIT
    with pytest.raises(CelError, match="exceeds the limit of 1000000"):
        compile_selector(deep)
    assert estimated_cost('device.driver == "a(b)"') == len('device.driver == "a(b)"')


def test_the_engine_is_loaded_without_the_packages_command_line_front_end() -> None:
    compile_selector("true")
    assert "rich" not in sys.modules and "typer" not in sys.modules
