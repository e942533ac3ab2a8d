"""The syntax tree whose cost bounds a CEL selector: every form of CEL's
syntax read as the interpreter reads it (the tree names what the
interpreter's program names, or the selector would be refused as one whose
cost cannot be known), and nesting as deep as a selector can be without a
crash."""

from __future__ import annotations

import pytest

from tests.unit.test_dra_cel import ENV
from troupe.dra import celcost
from troupe.dra.cel import CelError, compile_selector

_ESCAPES = (
    r'"\x41\101" == "AA" && "\u00e9\U0001F600" == "é😀" && "\a\b\f\n\r\t\v".size() == 7'
    r""" && "\\\?\`\"\'" == '\\?`"\''"""
)


@pytest.mark.parametrize(
    "expr",
    [
        pytest.param(r'b"abc" != b"\x00\377" && B"""x""" != b' + "'y'", id="bytes"),
        pytest.param(_ESCAPES, id="escapes"),
        pytest.param(r'r"\d+" == R' + "'\\d+'", id="raw-strings"),
        pytest.param("'''a\nb''' != \"\"\"c\n'd\"\"\"", id="triple-quoted-over-lines"),
        pytest.param('device.driver // a "quote\n == "gpu.example.com"', id="comment"),
        pytest.param(
            '"device.attributes[\'x\']" != "" // device.attributes["y"]', id="code-in-text"
        ),
        pytest.param("device.driver.size() > 0 && size(device.driver) > 0", id="calls"),
        pytest.param("[1, 2, 3,].size() == 3 && {1: 2, 3: 4,}.size() == 2", id="trailing-commas"),
        pytest.param("has(device.attributes.x) ? false : 2 == 3 ? false : !!true", id="ternaries"),
        pytest.param(
            "1u + 0x1Fu == 32u && 1.5e3 + .5 + 1e-3 > 1.0 && -1 in [-1, 0x1F]", id="numbers"
        ),
        pytest.param("5 % 3 == 2 && 6 / 3 * 2 - 1 == 3 && 1 < 2 == true", id="precedence"),
        pytest.param("[1].map(x, x > 0, x * 2) == [2]", id="map-with-filter"),
        pytest.param(
            "device.attributes.all(d, d != '') ? [1].exists(y, y == 1) : [1].exists_one(z, z)",
            id="macros",
        ),
        pytest.param(
            "device.attributes['gpu.example.com'].filter(k, k.startsWith('n')).size() == 1",
            id="filter",
        ),
        pytest.param("dyn(1) == 1 && string(1) == '1' && int('1') == 1", id="conversions"),
        # a domain lookup whose map or key is parenthesised is rewritten whole
        pytest.param("(device.attributes)['gpu.example.com'].index == 3", id="lookup-of-group"),
        pytest.param("device.attributes[('gpu' + '.example.com')].index == 3", id="grouped-key"),
    ],
)
def test_every_form_of_cel_syntax_is_read_as_the_interpreter_reads_it(expr: str) -> None:
    assert compile_selector(expr).matches(ENV) is True


@pytest.mark.parametrize(
    "expr",
    [
        # the interpreter compiles them (they fail on a device): their cost is known
        pytest.param("google.protobuf.Int64Value{value: 1} == 1", id="message"),
        pytest.param(".device.driver != ''", id="leading-dot"),
    ],
)
def test_forms_selectors_have_no_use_for_are_read_too(expr: str) -> None:
    assert compile_selector(expr).cost <= 10


@pytest.mark.parametrize("depth", [100, 1000, 5000])
def test_deep_nesting_is_the_interpreters_syntax_error_not_a_crash(depth: int) -> None:
    # The interpreter nests groups at most 96 deep; the tree is built
    # without recursion, however deep the text nests.
    for opening, closing in (("(", ")"), ("[", "]")):
        expr = opening * depth + "true" + closing * depth
        assert celcost.estimate(celcost.parse(expr)) >= 1
        with pytest.raises(
            CelError, match=r"^CEL compile error: ERROR: <input>:1:\d+: Syntax error"
        ):
            compile_selector(f"{expr} == true")


def test_long_chains_the_interpreter_takes_are_estimated() -> None:
    assert compile_selector("!" * 10_000 + "true").matches(ENV) is True
    assert compile_selector(" + ".join(["1"] * 3000) + " == 3000").matches(ENV) is True
