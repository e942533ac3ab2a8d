"""The reflector's client-go semantics, without HTTP: a re-list deletes what
vanished, a stale list resurrects nothing and takes nothing back in time, a
410 re-lists, a broken stream resumes from the last version seen."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from troupe.core.cluster import NotFound
from troupe.kube.errors import Gone
from troupe.kube.reflector import MAX_TOMBSTONES, Known, Reflector


def obj(name: str, rv: int, ns: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv)}}


def names(events: list[tuple[dict[str, Any], bool]]) -> list[tuple[str, bool]]:
    return [(o["metadata"]["name"], d) for o, d in events]


# ---- Known: what was delivered -------------------------------------------------------


def test_a_relist_deletes_what_vanished_while_the_watch_was_down() -> None:
    k = Known()
    k.replace([obj("a", 1), obj("b", 2)], "2")
    out = k.replace([obj("a", 1)], "5")  # b was deleted during the gap
    assert names(out) == [("b", True)]
    assert set(k.objects) == {"default/a"}


def test_a_stale_list_never_resurrects_a_deleted_object() -> None:
    k = Known()
    k.replace([obj("a", 1)], "1")
    assert k.delete(obj("a", 7)) is not None  # the watch saw the delete at 7
    # A list from a cache that is behind (version 5) still has it.
    assert names(k.replace([obj("a", 1)], "5")) == []
    assert "default/a" not in k.objects
    # Re-created later (a newer version): delivered.
    assert names(k.replace([obj("a", 9)], "9")) == [("a", False)]


def test_a_stale_list_takes_no_object_back_in_time() -> None:
    k = Known()
    k.replace([obj("a", 1)], "1")
    assert k.upsert(obj("a", 8))
    assert names(k.replace([obj("a", 4)], "4")) == []
    assert k.objects["default/a"][0] == "8"


def test_an_object_seen_after_the_list_was_taken_is_not_deleted_by_it() -> None:
    k = Known()
    k.replace([], "1")
    assert k.upsert(obj("new", 6))  # watched at 6
    assert names(k.replace([], "5")) == []  # the list (at 5) cannot know it
    assert names(k.replace([], "7")) == [("new", True)]


def test_watch_events_older_than_what_was_delivered_are_dropped() -> None:
    k = Known()
    assert k.upsert(obj("a", 3))
    assert not k.upsert(obj("a", 2))
    assert k.delete(obj("a", 2)) is None
    assert k.delete(obj("a", 4)) is not None
    assert not k.upsert(obj("a", 4))  # the delete's own version again


def test_unreadable_versions_are_taken_as_newer() -> None:
    k = Known()
    assert k.upsert({"metadata": {"name": "a", "resourceVersion": "x1"}})
    assert k.upsert({"metadata": {"name": "a", "resourceVersion": "x0"}})


# ---- Reflector over a scripted server -------------------------------------------------


class Script:
    """Answers lists from `lists` in turn and watches from `watches` in turn
    (each a list of events, or an exception to raise)."""

    def __init__(self, lists: list[Any], watches: list[Any]) -> None:
        self.lists = lists
        self.watches = watches
        self.paths: list[str] = []

    async def get_json(self, path: str) -> Mapping[str, Any]:
        self.paths.append(path)
        if not self.lists:
            await asyncio.Event().wait()  # nothing more scripted: hang
        got = self.lists.pop(0)
        if isinstance(got, Exception):
            raise got
        return dict(got)

    async def watch_lines(self, path: str, timeout: float) -> AsyncIterator[bytes]:
        self.paths.append(path)
        if not self.watches:
            await asyncio.Event().wait()
        got = self.watches.pop(0)
        if isinstance(got, Exception):
            raise got
        for ev in got:
            yield json.dumps(ev).encode() + b"\n"


def page(*items: dict[str, Any], rv: int, cont: str = "") -> dict[str, Any]:
    md: dict[str, Any] = {"resourceVersion": str(rv)}
    if cont:
        md["continue"] = cont
    return {"items": list(items), "metadata": md}


def run_until_quiet(r: Reflector) -> None:
    async def main() -> None:
        t = asyncio.create_task(r.run())
        for _ in range(50):
            await asyncio.sleep(0)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(main())


def test_a_410_relists_and_the_relist_deletes_what_went_during_the_gap() -> None:
    got: list[tuple[str, str, bool]] = []
    http = Script(
        lists=[page(obj("a", 1), obj("b", 2), rv=2), page(obj("a", 1), obj("c", 9), rv=9)],
        watches=[
            [{"type": "ADDED", "object": obj("d", 3)}, {"type": "BOOKMARK", "object": obj("", 4)}],
            [{"type": "ERROR", "object": {"code": 410, "message": "too old"}}],
        ],
    )
    synced: list[bool] = []
    r = Reflector(
        "Pod",
        http,
        lambda kind, o, deleted: got.append((kind, o["metadata"]["name"], deleted)),
        on_synced=lambda: synced.append(True),
        backoff=(0.0,),
    )
    run_until_quiet(r)
    assert got == [
        ("Pod", "a", False),
        ("Pod", "b", False),
        ("Pod", "d", False),
        ("Pod", "c", False),
        ("Pod", "b", True),
        ("Pod", "d", True),
    ]
    assert synced == [True]  # once, on the first list
    assert r.relists == 1
    # The second watch resumed from the bookmark's version, the first list's page size asked.
    assert http.paths[0] == "/api/v1/pods?limit=500"
    assert "resourceVersion=4" in http.paths[2]


def test_pages_are_followed_and_an_expired_continue_lists_again_whole() -> None:
    got: list[str] = []
    http = Script(
        lists=[
            page(obj("a", 1), rv=3, cont="t1"),
            Gone("continue expired"),
            page(obj("a", 1), obj("b", 2), rv=4),
        ],
        watches=[],
    )
    r = Reflector("Node", http, lambda k, o, d: got.append(o["metadata"]["name"]))
    run_until_quiet(r)
    assert got == ["a", "b"]
    assert http.paths[:3] == [
        "/api/v1/nodes?limit=500",
        "/api/v1/nodes?limit=500&continue=t1",
        "/api/v1/nodes",
    ]


def test_a_kind_not_served_is_synced_and_empty() -> None:
    synced: list[bool] = []
    http = Script(lists=[NotFound("404")], watches=[])
    r = Reflector("PodGroup", http, lambda k, o, d: None, on_synced=lambda: synced.append(True))
    run_until_quiet(r)
    assert synced == [True] and r.synced


def test_a_broken_stream_resumes_from_the_last_version_seen() -> None:
    got: list[str] = []
    http = Script(
        lists=[page(rv=1)],
        watches=[
            [{"type": "ADDED", "object": obj("a", 2)}],
            ConnectionResetError("reset"),
            [{"type": "ADDED", "object": obj("b", 3)}],
        ],
    )
    r = Reflector("Pod", http, lambda k, o, d: got.append(o["metadata"]["name"]), backoff=(0.0,))
    run_until_quiet(r)
    assert got == ["a", "b"]
    watches = [p for p in http.paths if "watch=1" in p]
    assert "resourceVersion=1" in watches[0]
    assert all("resourceVersion=2" in p for p in watches[1:3])
    assert r.relists == 0


def test_tombstones_are_bounded_and_the_recent_ones_still_refuse_a_stale_list() -> None:
    """Found by a hostile probe: 3000 create/delete cycles left 3000 tombstones
    (only a re-list dropped them). The most recent MAX_TOMBSTONES are kept: a
    list from a stale cache still cannot bring back an object deleted lately."""
    events: list[dict[str, Any]] = []
    for i in range(3000):
        events.append({"type": "ADDED", "object": obj(f"p{i}", 2 + 2 * i)})
        events.append({"type": "DELETED", "object": obj(f"p{i}", 3 + 2 * i)})
    r = Reflector("Pod", Script([page(rv=1)], [events]), lambda *_: None)
    run_until_quiet(r)
    k = r.known
    assert not k.objects
    assert len(k.tombstones) == MAX_TOMBSTONES < 3000
    oldest = 3000 - MAX_TOMBSTONES
    # A list from a cache behind all the remembered deletions refuses the object,
    # and so does a stale event of the latest one.
    assert names(k.replace([obj(f"p{oldest}", 2 + 2 * oldest)], str(2 + 2 * oldest))) == []
    assert not k.upsert(obj("p2999", 2 + 2 * 2999))
    assert not k.objects
    # A deletion older than those remembered is forgotten: a stale view brings it
    # back until the watch from that view's version delivers the deletion again
    # (as client-go, which keeps no tombstones, for every deletion).
    assert k.upsert(obj(f"p{oldest - 1}", 2 + 2 * (oldest - 1)))
