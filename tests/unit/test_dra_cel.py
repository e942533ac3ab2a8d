"""CEL device selectors: Kubernetes' functions on the device's attributes and
capacity, and every failure a reason instead of a crash."""

from __future__ import annotations

import sys
from fractions import Fraction

import pytest

from tests.unit.dra_helpers import device, device_class, node, pod, request, run, slice_, template
from troupe.dra.cel import (
    COMPILED_MAX,
    COST_LIMIT,
    CelError,
    DeviceEnv,
    _compiled,
    compile_selector,
    estimated_cost,
)
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


# Nested comprehensions over lists of 100: a million steps for one device.
_LIST = "[" + ", ".join(str(i) for i in range(100)) + "]"
_NESTED = f"{_LIST}.all(a, {_LIST}.all(b, {_LIST}.all(c, a + b + c >= 0)))"


@pytest.mark.parametrize(
    "expr",
    [
        pytest.param(_NESTED, id="plain"),
        # What a scan of the text missed (a live claim with these blocked the
        # scheduling loop): a quote in a comment opened a "string" that hid
        # the rest, so did an escaped quote, so did a triple-quoted string.
        pytest.param('device.driver == "x" // "\n || ' + _NESTED + ' // "', id="behind-a-comment"),
        pytest.param(
            r'device.driver == "a\"" || ' + _NESTED + r' || "\"" == ""', id="escaped-quote"
        ),
        pytest.param("'''it's''' == \"\" || " + _NESTED + " || '''x''' == ''", id="triple-quoted"),
        pytest.param(r'r"\" == "\\" && ' + _NESTED + r' && r"\" == "\\"', id="raw-string"),
        # A regular expression is compiled at every call: counted repetitions
        # make that slow (3.5 ms here), a hundred times over.
        pytest.param(
            _LIST + '.all(x, "aaaa".matches("(a{100}){100}") || true)', id="costly-pattern"
        ),
        # Lists of maps of lists, 300 levels: the size of each level names the
        # one before twice (walking sizes as trees took 31 s at 22 levels).
        pytest.param(
            "[1]" + "".join(f".map(v{i}, {{v{i}: [v{i}]}})" for i in range(300)) + ".size() > 0",
            id="sizes-sharing-parts",
        ),
        # Strings grow without a comprehension: ten characters made ten times
        # longer, nine times over, are ten gigabytes.
        pytest.param(
            '"aaaaaaaaaa"' + '.replace("a", "aaaaaaaaaa")' * 9 + ".size() > 0",
            id="growing-string",
        ),
    ],
)
def test_a_selector_over_the_cost_limit_is_refused_whatever_its_text(expr: str) -> None:
    assert estimated_cost(expr) > COST_LIMIT
    with pytest.raises(CelError, match=r"^CEL compile error: too complex, exceeds cost limit"):
        compile_selector(expr)


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        # comprehension words inside a string or a comment cost nothing
        (
            r'device.attributes["gpu.example.com"].model == '
            r'"\".all(a, [1].all(b, [1].all(c, [1].all(d, d))))"',
            False,
        ),
        ('device.driver == "gpu.example.com" // .all(a, .all(b, .all(c, .all(d,', True),
        # comprehensions over what a device holds (at most 32 domains of 32)
        ("device.attributes.all(d, device.attributes[d].all(k, k.size() > 0))", True),
        ('device.attributes.exists(d, d.endsWith(".example.com"))', True),
        ('device.attributes["gpu.example.com"].filter(k, k.startsWith("n")).size() == 1', True),
        ("[1, 2, 3].map(x, x * 2).exists_one(y, y == 4)", True),
        (r'device.attributes["gpu.example.com"].model.matches("^A[0-9]{3}-\\w+$")', True),
    ],
)
def test_a_cheap_selector_is_not_refused_for_how_it_looks(expr: str, want: bool) -> None:
    assert estimated_cost(expr) <= COST_LIMIT
    assert compile_selector(expr).matches(ENV) is want


def test_compile_errors_are_remembered_too() -> None:
    expr = _NESTED + " && true"
    for _ in range(2):
        with pytest.raises(CelError, match="too complex"):
            compile_selector(expr)
    assert _compiled.cache_info().hits >= 1
    assert _compiled.cache_info().maxsize == COMPILED_MAX


NO_DRIVER_DOMAIN = DeviceEnv(
    Device(
        DeviceID("drv.example.com", "pool", "dev-0"),
        {"pci.example.com/root": "0000:3b"},
        {"mem.example.com/size": Fraction(2**30)},
    )
)


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        # kube: looking up a domain the device lacks gives an empty map,
        # however the domain is written
        ("has(device.attributes[device.driver].model)", False),
        ("device.attributes[device.driver].size() == 0", True),
        ('device.attributes[r"other.example.com"].size() == 0', True),
        ('device.attributes["""other.example.com"""].size() == 0', True),
        ('device.attributes["other" + ".example.com"].size() == 0', True),
        ('["a.example.com", "b.example.com"].all(d, !has(device.attributes[d].x))', True),
        (
            "device.capacity[device.driver].size() == 0"
            ' && device.capacity["pci.example.com"] == {}',
            True,
        ),
        # ... and only the lookup: membership, size and iteration see the
        # device's own domains
        (
            'has(device.attributes["other.example.com"].x) '
            '|| "other.example.com" in device.attributes',
            False,
        ),
        ('device.attributes["mem.example.com"].size() == 0 && device.attributes.size() == 1', True),
        ('device.capacity.size() == 1 && device.capacity.all(d, d == "mem.example.com")', True),
        ('device.attributes["pci.example.com"].root == "0000:3b"', True),
    ],
)
def test_a_domain_the_device_lacks_is_an_empty_map(expr: str, want: bool) -> None:
    assert compile_selector(expr).matches(NO_DRIVER_DOMAIN) is want


def test_an_attribute_of_a_missing_domain_is_no_such_key() -> None:
    with pytest.raises(CelError, match="CEL runtime error: no such key: x"):
        compile_selector('device.attributes["other.example.com"].x == 1').matches(NO_DRIVER_DOMAIN)


def test_the_engine_is_loaded_without_the_packages_command_line_front_end() -> None:
    compile_selector("true")
    assert "rich" not in sys.modules and "typer" not in sys.modules


def test_domain_lookups_nested_in_their_keys_are_refused_past_a_few() -> None:
    # Each lookup is evaluated as `K in M ? M[K] : {}`, its key written twice.
    expr = 'device.attributes["gpu.example.com"].model'
    for _ in range(3):
        expr = f"device.attributes[{expr}].model"
    compile_selector(f'{expr} == ""')  # three levels: fine
    for _ in range(3):
        expr = f"device.attributes[{expr}].model"
    with pytest.raises(CelError, match=r"cannot estimate the cost.*nested too deeply"):
        compile_selector(f'{expr} == ""')


def test_a_device_past_kubes_sizes_is_judged_by_its_own() -> None:
    # Costs are estimated for the devices kube admits (32 attributes a
    # domain); a device published past that (the API server refuses it, a
    # lenient one may not) gets kube's runtime error rather than a long
    # evaluation.
    gpu = 'device.attributes["gpu.example.com"]'
    sel = compile_selector(f'{gpu}.all(a, {gpu}.all(b, a != "" || b != ""))')

    def env(n: int) -> DeviceEnv:
        attrs: dict[str, object] = {f"gpu.example.com/a{i}": i for i in range(n)}
        return DeviceEnv(Device(DeviceID("gpu.example.com", "pool", "gpu-0"), attrs, {}))

    assert sel.matches(env(32)) is True
    with pytest.raises(CelError, match=r"^CEL runtime error: operation cancelled: actual cost"):
        sel.matches(env(400))


def test_a_pod_whose_selector_hides_a_costly_one_waits_and_says_why() -> None:
    # Live, such a claim held the scheduling loop until the leader lost its
    # Lease; it is refused before any evaluation, and the other pod is placed.
    hidden = 'device.driver == "a\\"" || ' + _NESTED + ' || "\\"" == ""'
    _, result = run(
        [
            node("n0"),
            device_class(),
            slice_("n0-gpus", device("gpu-0"), device("gpu-1"), node="n0"),
            template("costly", request("gpu", None, hidden)),
            template("plain", request("gpu")),
            pod("costly", template="costly"),
            pod("plain", template="plain"),
        ]
    )
    pods = result.to_json_obj()["pods"]
    assert pods["default/plain"]["node"] == "n0"
    assert pods["default/costly"]["node"] is None
    assert (
        "selector #0: CEL compile error: too complex, exceeds cost limit"
        in (pods["default/costly"]["reason"])
    )


def test_a_pattern_repeated_past_what_int_reads_is_refused_not_a_crash() -> None:
    with pytest.raises(CelError, match="too complex, exceeds cost limit"):
        compile_selector('"a".matches("a{' + "9" * 5000 + '}")')
