"""troupe.api.jsonio: what the one JSON seam accepts, refuses and writes."""

from __future__ import annotations

import json

import pytest

from troupe.api import jsonio


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b'{"a": NaN}', id="nan"),
        pytest.param(b"[Infinity]", id="infinity"),
        pytest.param(b"[-Infinity]", id="minus-infinity"),
        pytest.param(b'{"a": "\xff"}', id="invalid-utf8"),
        pytest.param(b'["\\ud800"]', id="lone-surrogate"),
        pytest.param(b"\xef\xbb\xbf{}", id="byte-order-mark"),
        pytest.param(b"[" * 2000 + b"]" * 2000, id="deeper-than-1024"),
        pytest.param(b'{"a": 1,}', id="trailing-comma"),
        pytest.param(b"{} {}", id="two-documents"),
        pytest.param(b"", id="empty"),
    ],
)
def test_what_is_not_json_is_refused(data: bytes) -> None:
    with pytest.raises(jsonio.JSONError) as e:
        jsonio.loads(data)
    # json's error, with a message and a line, and so a ValueError
    assert isinstance(e.value, json.JSONDecodeError) and isinstance(e.value, ValueError)
    assert e.value.msg and e.value.lineno == 1


@pytest.mark.parametrize("n", [0, -1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1], ids=str)
def test_integers_of_the_api_are_exact(n: int) -> None:
    # the API server's integers are int32 and int64
    assert jsonio.loads(f'{{"generation": {n}}}'.encode()) == {"generation": n}


def test_every_form_of_text_is_read() -> None:
    text = '{"kind": "Pod", "metadata": {"name": "é"}}'
    want = {"kind": "Pod", "metadata": {"name": "é"}}
    for data in (text, text.encode(), bytearray(text.encode()), memoryview(text.encode())):
        assert jsonio.loads(data) == want


def test_dumps_is_compact_utf8_with_keys_as_json_writes_them() -> None:
    obj = {"a": [1, 2.5, None, True], "é": "ü", 3: "x"}
    out = jsonio.dumps(obj)
    assert out == b'{"a":[1,2.5,null,true],"\xc3\xa9":"\xc3\xbc","3":"x"}'
    assert out == json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param({"pods": {"ns/cache-5c2d": {"node": "n-e-1", "reason": None}}}, id="plain"),
        pytest.param({"cpu": [0.1, 3.92, 2.5e-4, 1e16, 1.5e300, -0.0], "n": []}, id="floats"),
        pytest.param({"a": 1e-5, "b": [-1.5e-7, 2]}, id="below-1e-4"),
        pytest.param(1e-7, id="a-small-float-alone"),
        pytest.param({"reason": "ratio 10.00001 e-1"}, id="a-string-like-a-small-float"),
        pytest.param({"reason": "Insufficient cpu ü"}, id="not-ascii"),
        pytest.param({"big": 2**70}, id="past-64-bits"),
        pytest.param({3: (1, True, None)}, id="int-key-and-tuple"),
    ],
)
def test_dumps_indented_writes_what_json_writes(obj: object) -> None:
    assert jsonio.dumps_indented(obj) == json.dumps(obj, indent=2)
