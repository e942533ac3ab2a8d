"""The simulator's YAML intake (`load_yaml_documents`) gives what PyYAML's safe
loader with libyaml (CSafeLoader) gives, on any input, in one process: the same
file, the same objects, whatever the machine. Its bounds are tested with the
configuration file's in test_config.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from troupe.api.yamlio import load_yaml_documents
from troupe.tools.simulate import load_objects


def libyaml(text: str) -> tuple[str, Any]:
    try:
        return "ok", list(yaml.load_all(text, Loader=yaml.CSafeLoader))
    except yaml.YAMLError as e:
        return "error", type(e).__name__


def ours(text: str) -> tuple[str, Any]:
    try:
        return "ok", load_yaml_documents(text)
    except yaml.YAMLError as e:
        return "error", type(e).__name__


# Found by a hostile probe: text inside a multi-line single-quoted scalar that
# reads like `items:` / `- ` lines, and a second `items :` key after the list,
# were cut as structure when a large file was read in parts (the result then
# depended on the CPUs). Read in one piece, they are text and a key.
TRICKY_LIST = """apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata:
    name: p0
    annotations:
      note: 'first line

        items:

        - apiVersion: v1

          kind: Pod

        - name: x'
- apiVersion: v1
  kind: Pod
  metadata:
    name: p1
items : []
"""


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(TRICKY_LIST, id="quoted-structure-and-second-items-key"),
        pytest.param("a: !\n", id="empty-non-specific-tag"),
        pytest.param("=: 1\n", id="equals-as-key"),
        pytest.param("a: =\n", id="equals-as-value"),
        pytest.param("a: b\t\n", id="tab-after-value"),
        pytest.param("a: |#\n  x\n", id="block-header-comment"),
        pytest.param("<<: {a: 1}\nb: 2\n", id="merge-key"),
        pytest.param("a: &x [1, 2]\nb: *x\n", id="alias"),
        pytest.param("- 0o17\n- 1_000\n- yes\n- 2001-12-14t21:59:43.10-05:00\n- .inf\n", id="1.1"),
        pytest.param("--- a\n--- b\n...\n", id="documents"),
    ],
)
def test_reads_as_libyaml_reads(text: str) -> None:
    assert ours(text) == libyaml(text)


def test_the_tricky_list_is_two_pods_in_one_piece(tmp_path: Path) -> None:
    f = tmp_path / "pods.yaml"
    f.write_text(TRICKY_LIST * 1)
    (doc,) = load_yaml_documents(TRICKY_LIST)
    assert doc["items"] == []  # the second `items` key wins, as in any YAML reader
    objs = load_objects([str(f)])
    assert objs == []
    # and without the second key, the two pods, the first with its text whole
    text = TRICKY_LIST.replace("items : []\n", "")
    f.write_text(text)
    objs = load_objects([str(f)])
    assert [o["metadata"]["name"] for o in objs] == ["p0", "p1"]
    assert "- name: x" in objs[0]["metadata"]["annotations"]["note"]


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.sampled_from(["items:", "- a", "items :", "'", "''", "#", "a: b", "---", "...", "~"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(
    docs=st.lists(values, min_size=1, max_size=3), flow=st.booleans(), width=st.integers(20, 120)
)
def test_any_dumped_stream_reads_as_libyaml_reads(docs: list[Any], flow: bool, width: int) -> None:
    text = yaml.safe_dump_all(docs, default_flow_style=flow, width=width, allow_unicode=True)
    assert ours(text) == libyaml(text)


def test_a_large_file_is_read_as_one_piece(tmp_path: Path) -> None:
    """Past the size at which the intake once cut files into parts (4 MiB), the
    same file still gives the one-piece result: here, a second `items` key after
    thousands of pods replaces them all, as in any YAML reader."""
    pod = (
        "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: p{i}\n    namespace: default\n"
        "  spec:\n    containers:\n    - name: c\n      image: registry.example/app:1.0\n"
    )
    body = "".join(pod.format(i=i) for i in range(40_000))
    text = "apiVersion: v1\nkind: List\nitems:\n" + body + "items : []\n"
    assert len(text) > 4 << 20
    f = tmp_path / "big.yaml"
    f.write_text(text)
    assert load_objects([str(f)]) == []
    f.write_text(text.replace("items : []\n", ""))
    assert len(load_objects([str(f)])) == 40_000


@pytest.mark.parametrize(
    "value",
    ["!!int", "!!int abc", "!!float x", "!!timestamp 2020-99-99", "!!bool maybe"],
)
def test_an_explicit_tag_on_text_it_cannot_read_is_a_yaml_error(value: str) -> None:
    # PyYAML's own constructors raise IndexError, ValueError or KeyError here: a
    # traceback for the user instead of a line naming where the file is wrong.
    with pytest.raises(yaml.YAMLError) as e:
        load_yaml_documents(f"kind: List\nitems: {value}\n")
    assert "line 2" in str(e.value)
    text = value.partition(" ")[2]
    assert f"cannot read {text!r}" in str(e.value)
