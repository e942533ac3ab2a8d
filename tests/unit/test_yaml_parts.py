"""yaml_parts: a stream parsed in parts gives what load_yaml_documents gives for
the whole text, value or error, and the parts are used where they can be."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import yaml_parts
from scheduler.config import load_yaml_documents
from tests.perf import sim_input

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _outcome(load: Any, text: str) -> object:
    try:
        return load(text)
    except yaml.YAMLError as e:
        return (type(e), str(e))


def _same(text: str, parts: int) -> None:
    assert repr(_outcome(lambda t: yaml_parts.load(t, parts), text)) == repr(
        _outcome(load_yaml_documents, text)
    )


def _kubectl_list(n: int) -> str:
    items = [sim_input.node(i) for i in range(n)] + [
        sim_input.pod(i, running_on=sim_input.node_name(i) if i % 2 else None) for i in range(n)
    ]
    return yaml.safe_dump(
        {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}},
        sort_keys=False,
    )


@pytest.mark.parametrize("parts", [2, 3, 7])
def test_kubectl_list_is_cut_between_items(parts: int) -> None:
    text = _kubectl_list(6)
    got = yaml_parts._load_in_parts(text, parts)
    assert got is not None
    assert got == load_yaml_documents(text)
    assert [o["kind"] for o in got[0]["items"]] == ["Node"] * 6 + ["Pod"] * 6


def test_documents_are_cut_at_markers() -> None:
    text = (
        "".join(f"---\n{yaml.safe_dump(sim_input.node(i), sort_keys=False)}" for i in range(5))
        + "---\n# only a comment\n---\n"
    )
    got = yaml_parts._load_in_parts(text, 3)
    assert got is not None
    assert got == load_yaml_documents(text)
    assert len(got) == 7 and got[-2:] == [None, None]


def test_every_fixture_reads_the_same() -> None:
    files = sorted(FIXTURES.rglob("*.yaml"))
    assert files
    for f in files:
        _same(f.read_text(encoding="utf-8"), 3)


FALLBACK_CASES = [
    # An anchor in one part named by an alias in another.
    pytest.param("items:\n- &a {x: 1}\n- b\n- c\n- *a\n", id="alias-across-parts"),
    # The same anchor twice: an error in one document, none in two parts.
    pytest.param("items:\n- &a 1\n- 2\n- 3\n- &a 4\n", id="anchor-twice"),
    # A quoted scalar running over a line that looks like an item.
    pytest.param('items:\n- "a\n- b\n- c\n- d"\n- e\n', id="quoted-over-item-line"),
    pytest.param("items:\n- [a,\n- b,\n- c]\n- d\n", id="flow-over-item-line"),
    pytest.param("%YAML 1.1\n---\na: 1\n---\nb: 2\n---\nc: 3\n", id="directive"),
    pytest.param("a: 1\n...\n---\nb: 2\n---\nc: 3\n", id="document-end"),
    pytest.param("items:\n- 1\n- 2\n- 3\nitems:\n- 4\n", id="items-twice"),
    pytest.param("items: []\nitems:\n- 1\n- 2\n- 3\n", id="items-twice-other-value"),
    pytest.param("items:\n- 1\n- 2\n-x: 3\n- 4\n", id="other-key-among-items"),
    pytest.param("items:\n- a: 1\n- b: [\n- c\n", id="syntax-error"),
    pytest.param("items:\n- a\n- b\n- c\n- d: {e: &x 1}\n", id="anchor-in-last-part"),
    pytest.param("---\na: 1\n---\nb: *x\n---\nc: 3\n", id="undefined-alias"),
    pytest.param("---\na: &x 1\n---\nb: 2\n---\nc: *x\n", id="alias-to-earlier-document"),
]


@pytest.mark.parametrize("text", FALLBACK_CASES)
def test_parts_not_used_where_they_could_differ(text: str) -> None:
    for parts in (2, 3, 4):
        _same(text, parts)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("items:\n- &a {x: 1}\n- b\n- c\n- *a\n", id="alias"),
        pytest.param('items:\n- "a\n- b\n- c\n- d"\n- e\n', id="quoted"),
        pytest.param("%YAML 1.1\n---\na: 1\n---\nb: 2\n---\nc: 3\n", id="directive"),
    ],
)
def test_whole_text_read_when_a_part_cannot_be_used(text: str) -> None:
    assert yaml_parts._load_in_parts(text, 3) is None


_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.text(alphabet="ab -:#&*'\"\n[]{}!%|>yes0.", max_size=12),
)
_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text("abc-", max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(_value, min_size=1, max_size=8),
    style=st.sampled_from(["list", "documents"]),
    flow=st.sampled_from([None, False, True]),
    parts=st.integers(2, 4),
)
def test_generated_streams_read_the_same(
    items: list[Any], style: str, flow: bool | None, parts: int
) -> None:
    if style == "list":
        text = yaml.safe_dump({"items": items, "kind": "List"}, default_flow_style=flow)
    else:
        text = yaml.safe_dump_all(items, default_flow_style=flow, explicit_start=True)
    _same(text, parts)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(
        st.sampled_from(
            [
                "items:",
                "- a",
                "- 'b",
                "  c'",
                '- "d',
                '  e"',
                "- [f,",
                "  g]",
                "- &x h",
                "- *x",
                "---",
                "...",
                "- k: v",
                "  - l",
                "-",
                "kind: List",
                "# c",
                "",
                "x: |",
                "  - m",
            ]
        ),
        max_size=14,
    ),
    parts=st.integers(2, 4),
)
def test_generated_line_soup_reads_the_same(lines: list[str], parts: int) -> None:
    _same("\n".join(lines) + "\n", parts)
