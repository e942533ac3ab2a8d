"""`troupe simulate` counts the nesting of JSON input on its text (the bound of
200 levels YAML has too): the count must be the depth of the decoded document,
whatever its strings hold (brackets, quotes, backslashes, escapes, newlines)
and wherever the text is cut into pieces."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from troupe.tools import simulate

TRICKY = st.text(alphabet='[]{}"\\/\nbfnrtuxé\u2028 ', max_size=8)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TRICKY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY, inner, max_size=4),
    max_leaves=40,
)


def depth(o: Any, d: int = 1) -> int:
    if isinstance(o, dict):
        return max([d, *(depth(v, d + 1) for v in o.values())])
    if isinstance(o, list):
        return max([d, *(depth(v, d + 1) for v in o)])
    return d - 1


@settings(max_examples=300, deadline=None)
@given(
    doc=JSON,
    indent=st.sampled_from([None, 0, 2]),
    ascii_only=st.booleans(),
    chunk=st.sampled_from([1, 5, 1 << 20]),
)
def test_nesting_counted_on_the_text_is_the_documents(
    doc: Any, indent: int | None, ascii_only: bool, chunk: int
) -> None:
    data = json.dumps(doc, indent=indent, ensure_ascii=ascii_only).encode()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(simulate, "_DEPTH_CHUNK", chunk)
        assert simulate._json_depth(data) == depth(doc)


def test_brackets_in_strings_do_not_count() -> None:
    deep = "[" * 300 + '\\"' + "{" * 300
    data = json.dumps({"kind": "Node", "x": [deep, "]" * 300]}).encode()
    assert simulate._json_depth(data) == 2
