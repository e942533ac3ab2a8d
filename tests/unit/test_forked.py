"""forked.parse_all: parts parsed in forked children come back whole, marshalled or
pickled, and a part that fails makes the whole call give None, children reaped."""

from __future__ import annotations

import datetime
import os

import pytest

from scheduler import forked

pytestmark = pytest.mark.skipif(not forked.can_fork(), reason="needs fork")


def _children() -> list[str]:
    """This process's children (zombies included), from /proc."""
    me = str(os.getpid())
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                out.append(pid)
    return out


def test_results_in_order_marshalled_or_pickled() -> None:
    def parse(t: str) -> object:
        if t == "when":
            return [datetime.date(2024, 1, 2)]  # not marshallable: pickled
        return {"text": t, "n": [1, 2.5, None, True]}

    got = forked.parse_all(["a", "b", "when", "c"], parse)
    assert got == [
        {"text": "a", "n": [1, 2.5, None, True]},
        {"text": "b", "n": [1, 2.5, None, True]},
        [datetime.date(2024, 1, 2)],
        {"text": "c", "n": [1, 2.5, None, True]},
    ]
    assert _children() == []


@pytest.mark.parametrize("bad", ["first", "child-none", "child-raises"])
def test_a_part_that_fails_gives_none(bad: str) -> None:
    def parse(t: str) -> object:
        if t == bad == "child-raises":
            raise ValueError(t)
        if t == bad:
            return None
        return [t]

    assert forked.parse_all(["first", "x", "child-none", "child-raises"], parse) is None
    assert _children() == []


def test_an_error_here_kills_the_children() -> None:
    def parse(t: str) -> object:
        if t == "here":
            raise KeyError(t)
        return [t]

    with pytest.raises(KeyError):
        forked.parse_all(["here", "x", "y"], parse)
    assert _children() == []
