"""yaml_block: plain block YAML read by lines gives exactly what SafeLoader builds,
and anything else is left to libyaml (None), never read differently."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import yaml_block
from scheduler.config import MAX_YAML_DEPTH, load_yaml_documents
from tests.perf import sim_input

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _safe(text: str) -> object:
    try:
        return list(yaml.load_all(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError:
        return "error"


def _agrees(text: str) -> list[Any] | None:
    """yaml_block's result, checked: None, or SafeLoader's value with its types."""
    got = yaml_block.load(text, MAX_YAML_DEPTH)
    if got is not None:
        assert repr(got) == repr(_safe(text)), text
    return got


def _kubectl_list(n: int) -> str:
    items = [sim_input.node(i) for i in range(n)] + [
        sim_input.pod(i, running_on=sim_input.node_name(i) if i % 2 else None) for i in range(n)
    ]
    return yaml.safe_dump(
        {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}},
        default_flow_style=False,
    )


def test_kubectl_output_is_read_by_lines() -> None:
    text = _kubectl_list(5)
    got = _agrees(text)
    assert got is not None
    assert [o["kind"] for o in got[0]["items"]] == ["Node"] * 5 + ["Pod"] * 5


def test_every_fixture_reads_as_safe_loader_reads_it() -> None:
    files = sorted(FIXTURES.rglob("*.yaml"))
    assert files
    read = [f for f in files if _agrees(f.read_text(encoding="utf-8")) is not None]
    assert read  # the fixtures are block style: most take the fast path


READ = [
    pytest.param("a: 1\nb: x\nc:\n  d: true\n  e: ~\n", id="mapping"),
    pytest.param("a:\n- 1\n- b: 2\n  c: 3\n- - x\n  - y\n-\nz: 0\n", id="indentless-sequence"),
    pytest.param("a:\n  - 1\n  -\n  - 'q'\n", id="indented-sequence"),
    pytest.param("- - - a\n    - b\n  - c\n- d\n", id="nested-items"),
    pytest.param("'a: b': 1\n\"c d\": 2\n'': 3\n'it''s': 'x''y'\n", id="quoted-keys"),
    pytest.param('a: "x \\" y \\u00e9 \\n z"\n', id="escapes"),
    pytest.param("a: 'x: #y'\nb: \"p # q\"\n", id="quoted-indicators"),
    pytest.param('k:{"uid":"1-2"}: {}\nf:spec: []\n', id="field-set-keys"),
    pytest.param("a: |\n  one\n\n  two\n    three\nb: |-\n  x\n  y\n\n\nc: 1\n", id="literal"),
    pytest.param("- |\n  a\n- |-\n  b\n", id="literal-items"),
    pytest.param("a: |\n  x\n\n", id="literal-trailing-blank"),
    pytest.param("# c\na: 1   \n\n  # indented comment\nb: 2\n", id="comments"),
    pytest.param("a: 2024-01-01\nb: 2024-01-01T00:00:00Z\nc: 0o17\nd: 1_000\n", id="timestamps"),
    pytest.param("1: a\n2.5: b\nnull: c\ntrue: d\nyes: e\n~: f\n", id="scalar-keys"),
    pytest.param("a: -1\nb: --port=80\nc: -.inf\nd: .nan\ne: x-y\n", id="dashes"),
    pytest.param("---\na: 1\n---\n- b\n", id="documents"),
    pytest.param("a: 1\n---\nb: 2\n", id="documents-no-first-marker"),
    pytest.param("a: x:y\nb: x[1]{2},3\nc: x' \"y\n", id="plain-with-indicators-inside"),
    pytest.param("k: 1\nk: 2\n", id="repeated-key-last-wins"),
    pytest.param("", id="empty"),
    pytest.param("# only a comment\n", id="only-comment"),
    pytest.param("a: é ü 中 🙂\n", id="unicode"),
    pytest.param("a:\nb:\n", id="nulls"),
    # Text kubectl folds at 80 columns: plain and single-quoted over lines.
    pytest.param("a: one\n  two\n\n  three\nb: 1\n", id="plain-over-lines"),
    pytest.param("- one\n  two\n-  three\n    four\n", id="plain-items-over-lines"),
    pytest.param("a:\n  b: one\n    two\n  c: x\n", id="plain-over-lines-nested"),
    pytest.param("a: 1\n  2\nb: true\n  x\n", id="plain-over-lines-resolved-whole"),
    pytest.param("a: 'one: x\n  two  \n\n   three '\nb: 1\n", id="quoted-over-lines"),
    pytest.param("- 'it''s\n  #not a comment'\n", id="quoted-items-over-lines"),
    pytest.param(
        "status:\n  conditions:\n  - message: '0/3 nodes are available: 3 Insufficient cpu."
        " preemption: 0/3 nodes\n      are available: 3 No preemption victims found for"
        " incoming pod.'\n    reason: Unschedulable\n",
        id="kubectl-condition-message",
    ),
]


@pytest.mark.parametrize("text", READ)
def test_read_by_lines(text: str) -> None:
    assert _agrees(text) is not None


LEFT_TO_LIBYAML = [
    pytest.param("a: {b: 1}\n", id="flow-mapping"),
    pytest.param("a: one\n  two: x\n", id="plain-over-lines-with-mapping"),
    pytest.param("a: one\n  - two\n", id="plain-over-lines-with-dash"),
    pytest.param("a: one\n  # c\n  two\n", id="plain-over-lines-after-comment"),
    pytest.param("a: 'one\ntwo'\n", id="quoted-over-lines-not-indented"),
    pytest.param("a: 'one\n  two' # c\n", id="quoted-over-lines-comment-after"),
    pytest.param("a: 'one\n  two\n", id="quoted-not-closed"),
    pytest.param("a: 'one'\n  two\n", id="closed-quote-then-more"),
    pytest.param("- d: 2\n s'\n", id="more-after-an-item-mapping"),
    pytest.param("'# a': x\n# a: b\n  c\n", id="more-after-a-comment-like-the-last-key"),
    pytest.param("- x\n# - y\n  z\n", id="more-after-a-comment-like-the-last-item"),
    pytest.param("a: [1, 2]\n", id="flow-sequence"),
    pytest.param('a: "one\n  two"\n', id="double-quoted-over-lines"),
    pytest.param("a: &x 1\nb: *x\n", id="anchor"),
    pytest.param("a: !!str 1\n", id="tag"),
    pytest.param("a: 1 # c\n", id="comment-after-value"),
    pytest.param("a: >\n  x\n", id="folded"),
    pytest.param("a: |+\n  x\n\n", id="literal-keep"),
    pytest.param("a: |2\n   x\n", id="literal-indent-indicator"),
    pytest.param("a: |\n\n  x\n", id="literal-leading-blank"),
    pytest.param("a: |\n  x\n   \n  y\n", id="literal-spaces-line"),
    pytest.param("a: |\n  x", id="literal-no-final-break"),
    pytest.param("a: 'x\ty'\n", id="tab"),
    pytest.param("a: 1\r\nb: 2\r\n", id="crlf"),
    pytest.param("\ufeffa: 1\n", id="bom"),
    pytest.param("a: x\x85y\n", id="nel"),
    pytest.param("a: x\u2028y\n", id="line-separator"),
    pytest.param("a: \x07\n", id="control-character"),
    pytest.param("%YAML 1.1\n---\na: 1\n", id="directive"),
    pytest.param("a: 1\n...\n", id="document-end"),
    pytest.param("---\n---\na: 1\n", id="empty-document"),
    pytest.param("a: 1\n---\n", id="empty-last-document"),
    pytest.param("--- a\n", id="content-after-marker"),
    pytest.param("? a\n: 1\n", id="complex-key"),
    pytest.param("a\n", id="scalar-document"),
    pytest.param("  a: 1\n", id="indented-root"),
    pytest.param("a: b: c\n", id="mapping-in-plain"),
    pytest.param("a: b:\n", id="colon-at-end"),
    pytest.param("a:\n  b\n", id="scalar-on-next-line"),
    pytest.param("a: 1\n b: 2\n", id="bad-indentation"),
    pytest.param("a:\n  - 1\n - 2\n", id="bad-item-indentation"),
    pytest.param("- a\nb: 1\n", id="key-after-root-items"),
    pytest.param("a: 1\n- b\n", id="item-in-mapping"),
    pytest.param("<<: {a: 1}\n", id="merge-key"),
    pytest.param("a: =\n", id="value-key"),
    pytest.param("a: -\n", id="lone-dash-value"),
    pytest.param("a: - b\n", id="item-as-value"),
]


@pytest.mark.parametrize("text", LEFT_TO_LIBYAML)
def test_left_to_libyaml(text: str) -> None:
    assert yaml_block.load(text, MAX_YAML_DEPTH) is None
    # and load_yaml_documents still gives SafeLoader's value or an error
    want = _safe(text)
    try:
        got: object = load_yaml_documents(text)
    except yaml.YAMLError:
        got = "error"
    assert repr(got) == repr(want)


@pytest.mark.parametrize("length", [1023, 1024, 1025, 1100])
def test_key_length_bound_as_libyaml_path(length: int) -> None:
    # YAML's implicit keys end within 1024 characters of their start
    k = "k" * length
    for text in (
        f"{k}: v\n",
        f"'{k[2:]}': v\n",
        f'"{k[2:]}": v\n',
        f"- {k}: v\n",
        f"a:\n  {k}: v\n",
        f"a:\n  {k}:\n",
    ):
        got = _agrees(text)
        assert (got is not None) == (length <= 1024), text[:40]


def test_depth_bound_as_libyaml_path() -> None:
    inside = "- " * (MAX_YAML_DEPTH - 1) + "x\n"
    assert _agrees(inside) is not None
    assert yaml_block.load("- " * MAX_YAML_DEPTH + "x\n", MAX_YAML_DEPTH) is None
    deep_map = "".join("  " * i + f"k{i}:\n" for i in range(MAX_YAML_DEPTH)) + "  " * 200 + "x: 1\n"
    assert yaml_block.load(deep_map, MAX_YAML_DEPTH) is None


_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("ab -:#&*'\"[]{}!%|>?,@`~.0129yesnoTF\\/=<")),
        st.sampled_from(["\n", "\t", "\r", "\x85", "\u2028", "\ufeff", "\x07", "é", "🙂"]),
    ),
    max_size=14,
)
_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False),
    _text,
)
_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(_text, _scalar), inner, max_size=4)
    ),
    max_leaves=16,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=st.lists(_value, min_size=1, max_size=3),
    width=st.sampled_from([20, 80, 10_000]),
    indent=st.sampled_from([2, 4]),
    unicode=st.booleans(),
)
def test_dumped_values_read_the_same(
    docs: list[Any], width: int, indent: int, unicode: bool
) -> None:
    text = yaml.safe_dump_all(
        docs, default_flow_style=False, width=width, indent=indent, allow_unicode=unicode
    )
    _agrees(text)


_PLAIN_TEXT = st.text(alphabet="abcxyz-._/0123456789", min_size=1, max_size=10).filter(
    lambda s: s[0] not in "-." or len(s) > 1
)
_PLAIN_VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), _PLAIN_TEXT),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_PLAIN_TEXT, inner, max_size=4)
    ),
    max_leaves=16,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.dictionaries(_PLAIN_TEXT, _PLAIN_VALUE, min_size=1, max_size=5))
def test_block_style_dumps_take_the_fast_path(value: dict[str, Any]) -> None:
    text = yaml.safe_dump(value, default_flow_style=False, width=10_000)
    assert _agrees(text) is not None, text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(
        st.tuples(
            st.sampled_from([0, 1, 2, 4]),
            st.sampled_from(
                [
                    "a: 1",
                    "b:",
                    "- c",
                    "-",
                    "- d: 2",
                    "- - e",
                    "'f': 'g''h'",
                    '"i": "j\\tk"',
                    "l: |",
                    "m: |-",
                    "text",
                    "more text",
                    "n: o: p",
                    "q: 'r",
                    "s'",
                    "---",
                    "...",
                    "# c",
                    "",
                    "t: {}",
                    "u: []",
                    "v: [w]",
                    "x: &y z",
                    "yes: no",
                    "2024-01-01: 1",
                    'k:{"a":"b"}: {}',
                    "z: a #b",
                    "  ",
                ]
            ),
        ),
        max_size=16,
    )
)
def test_line_soup_never_reads_differently(lines: list[tuple[int, str]]) -> None:
    _agrees("".join(" " * n + s + "\n" for n, s in lines))


def test_lines_are_read_in_chunks_as_one_text() -> None:
    text = "".join(f"k{i}: v{i}\n" for i in range(200_000))  # several chunks
    assert list(itertools.chain.from_iterable(yaml_block._chunks(text))) == text.split("\n")
    assert yaml_block.load(text, MAX_YAML_DEPTH) == [{f"k{i}": f"v{i}" for i in range(200_000)}]


@pytest.mark.parametrize("size", [10, 1 << 20, (1 << 20) + 5])
def test_literal_block_across_chunks(size: int) -> None:
    body = "".join(f"  line {i}\n" for i in range(size // 10 + 1))
    for text in (f"a: 1\nb: |\n{body}c: 2\n", f"a: |-\n{body}\n\n", f"- |\n{body}"):
        assert _agrees(text) is not None


def test_repeated_lines_read_as_the_first_time() -> None:
    # Mapping entries are remembered by their whole line; each repeat still gets
    # its own empty collections, and a remembered line in another state (after a
    # pending key, in a sequence) is read the long way.
    block = "  b: 1\n  c: {}\n  l: []\n  d:\n    e: 'x'\n"
    text = f"a:\n{block}f:\n{block}g:\n  b: 1\nh:\n- b: 1\n  c: {{}}\n"
    got = _agrees(text)
    assert got is not None
    doc = got[0]
    assert doc["a"] == doc["f"] == {"b": 1, "c": {}, "l": [], "d": {"e": "x"}}
    assert doc["a"]["c"] is not doc["f"]["c"] and doc["a"]["l"] is not doc["f"]["l"]
    assert doc["a"]["d"] is not doc["f"]["d"]
    assert doc["h"] == [{"b": 1, "c": {}}]
